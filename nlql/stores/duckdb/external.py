"""NLQL over a DuckDB table or a Parquet file it did not write: read in place, never copied, never written.

The text and vector columns are read where they lie. What SQL cannot compute the way NLQL compares is
computed once, at ``open``, from one scan of the id, text and metadata columns, into the connection's
*temporary* (in-memory) schema: per row the casefold, number and date readings of the text and the id,
the typed metadata record (:mod:`nlql.sql.codec`) and the metadata as JSON, and the BM25 term
statistics. Temporary views then give the source the column names of NLQL's own schema
(``<p>_units``, ``<p>_docs``), so the same dialect, filters and hybrid statement run over it.

Each row is one document of one sentence (position 0). Text is stored as it is in the source (no
escape): ``TextCodec(escaped=False)``.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from nlql import values as V
from nlql.errors import BackendError
from nlql.sql.codec import TextCodec, exact_json, flatten_metadata, shadow
from nlql.sql.dialect import quote_ident
from nlql.stores.duckdb.driver import (
    arrow_table,
    import_arrow,
    is_file_table,
    qualified,
    record_type,
    registered,
)

__all__ = ["External"]

_VECTOR_TYPE = re.compile(r"^(FLOAT|DOUBLE|REAL|FLOAT4|FLOAT8)\[(\d*)\]$", re.IGNORECASE)
_TEXT_TYPES = ("VARCHAR",)


class External:
    """The source table of a read-only :class:`~nlql.stores.duckdb.DuckDBStore` and its derived data."""

    def __init__(self, store: Any, table: str, *, text: str, vector: str, id: str | None,  # noqa: A002
                 metadata: list[str]) -> None:
        self.store = store
        self.table = table
        self.text = text
        self.vector = vector
        self.id = id
        self.metadata = list(dict.fromkeys(metadata))
        self.codec = TextCodec(escaped=False)
        self.info: dict[str, str] = {}
        self.max_seq = 0
        p = store.table_prefix
        self._names = {k: f"{p}_{k}" for k in ("raw", "src", "rowx", "units", "docs", "terms", "bm25")}
        conn = store._conn
        try:
            self._attach(conn)
            self.columns = {r[0]: str(r[1]) for r in conn.execute(f"DESCRIBE SELECT * FROM {self._q('src')}").fetchall()}
        except store._duck.Error as exc:
            raise BackendError("duckdb", f"cannot read {table!r}: {str(exc).strip().splitlines()[0]}",
                               hint="name a table or view of the connection, or a Parquet file path") from exc
        self._check_columns()

    def _q(self, key: str) -> str:
        return quote_ident(self._names[key])

    def _attach(self, conn: Any) -> None:
        if is_file_table(self.table):
            rel = conn.read_parquet(self.table, file_row_number=True)
            conn.register(self._names["raw"], rel)  # a temporary view: nothing is written
            conn.execute(f"CREATE OR REPLACE TEMP VIEW {self._q('src')} AS SELECT file_row_number AS nlql_row, "
                         f"* EXCLUDE (file_row_number) FROM {self._q('raw')}")
            return
        source = qualified(self.table, quote_ident)
        try:
            conn.execute(f"CREATE OR REPLACE TEMP VIEW {self._q('src')} AS SELECT rowid AS nlql_row, * FROM {source}")
            conn.execute(f"SELECT nlql_row FROM {self._q('src')} LIMIT 0")
        except Exception:  # noqa: BLE001 - a view has no rowid: number its rows in scan order
            conn.execute(f"CREATE OR REPLACE TEMP VIEW {self._q('src')} AS "
                         f"SELECT (row_number() OVER () - 1) AS nlql_row, * FROM {source}")

    def _check_columns(self) -> None:
        have = [c for c in self.columns if c != "nlql_row"]
        wanted = [("text", self.text), ("vector", self.vector)] + ([("id", self.id)] if self.id else []) + [
            ("metadata", m) for m in self.metadata]
        for role, name in wanted:
            if name not in self.columns or name == "nlql_row":
                raise BackendError("duckdb", f"{self.table!r} has no column {name!r} (the {role} column)",
                                   hint=f"its columns: {', '.join(have)}")
        if self.columns[self.text].upper() not in _TEXT_TYPES:
            raise BackendError("duckdb", f"the text column {self.text!r} is {self.columns[self.text]}, not VARCHAR",
                               hint=f"cast it in a view: SELECT {self.text}::VARCHAR AS {self.text}, …")
        if _VECTOR_TYPE.match(self.columns[self.vector]) is None:
            raise BackendError("duckdb", f"the vector column {self.vector!r} is {self.columns[self.vector]}, "
                                         "not an array or list of FLOAT/DOUBLE",
                               hint="store embeddings as FLOAT[n] (or DOUBLE[n], or a list of floats)")

    # ------------------------------------------------------------------------------------ open

    def open(self, dim: int) -> None:
        conn = self.store._conn
        src = self._q("src")
        vec = quote_ident(self.vector)
        m = _VECTOR_TYPE.match(self.columns[self.vector])
        assert m is not None
        if m.group(2):
            dims = {int(m.group(2))}
        else:
            lo, hi = conn.execute(f"SELECT min(len({vec})), max(len({vec})) FROM {src}").fetchone()
            dims = {int(x) for x in (lo, hi) if x is not None}
        nulls = conn.execute(f"SELECT count(*) FROM {src} WHERE {vec} IS NULL").fetchone()[0]
        if nulls:
            raise BackendError("duckdb", f"{nulls} rows of {self.table!r} have no vector in {self.vector!r}",
                               hint="filter them out in a view")
        # a NaN or an infinity has no cosine: SQL would score the row 0.0, silently (issue 33, item 10)
        bad = conn.execute(f"SELECT count(*), min(nlql_row) FROM {src} WHERE list_bool_or(list_transform("
                           f"CAST({vec} AS DOUBLE[]), lambda x: isnan(x) OR isinf(x)))").fetchone()
        if bad[0]:
            raise BackendError("duckdb", f"{bad[0]} rows of {self.table!r} hold NaN or infinity in {self.vector!r} "
                                         f"(the first is row {bad[1]})",
                               hint="filter them out in a view, or embed those rows again")
        if dims and dims != {dim}:
            shown = " to ".join(str(x) for x in sorted(dims))
            raise BackendError("duckdb", f"the vector column {self.vector!r} holds {shown}-dimensional vectors, "
                                         f"the embedder gives {dim}",
                               hint="use the embedder that made the vectors (its dim must match)")
        self._derive(conn, dim)

    def _derive(self, conn: Any, dim: int) -> None:
        """One scan of id, text and metadata: the derived tables and the views in NLQL's column names."""
        pa = import_arrow()
        cols = ["nlql_row", self.text] + ([self.id] if self.id else []) + self.metadata
        select = ", ".join(quote_ident(c) for c in cols)
        rows = conn.execute(f"SELECT {select} FROM {self._q('src')} ORDER BY nlql_row").fetchall()
        analyzer = self.store.analyzer
        esc = self.codec.escape
        x: dict[str, list[Any]] = {k: [] for k in ("key", "doc_id", "end", "fold", "num", "ts", "nterms", "dfold",
                                                   "dnum", "dts", "metadata", "mflat")}
        terms: dict[str, list[Any]] = {"term": [], "key": [], "tf": []}
        seen: set[str] = set()
        total = 0
        first_meta = 3 if self.id else 2
        for r in rows:
            key = int(r[0])
            content = r[1] if r[1] is not None else ""
            raw_id = r[2] if self.id else key
            if raw_id is None:
                raise BackendError("duckdb", f"row {key} of {self.table!r} has no id in {self.id!r}")
            doc_id = _id_text(raw_id)
            if doc_id in seen:
                raise BackendError("duckdb", f"the id column {self.id!r} repeats {doc_id!r}",
                                   hint="ids must be unique (or leave id=None: the row number)")
            seen.add(doc_id)
            meta = V.normalize_metadata({c: _plain(v) for c, v in zip(self.metadata, r[first_meta:], strict=True)})
            fold, num, ts = shadow(content, esc)
            dfold, dnum, dts = shadow(doc_id, esc)
            words = analyzer.terms(content)
            counts: dict[str, int] = {}
            for w in words:
                counts[w] = counts.get(w, 0) + 1
            for w, c in counts.items():
                terms["term"].append(esc(w))
                terms["key"].append(key)
                terms["tf"].append(c)
            total += len(words)
            for k, v in zip(x, (key, doc_id, len(content), fold, num, ts, len(words), dfold, dnum, dts,
                                exact_json(meta), list(flatten_metadata(meta, esc).items())), strict=True):
                x[k].append(v)
        self.max_seq = max(x["key"], default=-1) + 1
        s, i64, i32, f64 = pa.string(), pa.int64(), pa.int32(), pa.float64()
        rowx = arrow_table(x, {"key": i64, "doc_id": s, "end": i32, "fold": s, "num": f64, "ts": i64, "nterms": i32,
                               "dfold": s, "dnum": f64, "dts": i64, "metadata": s,
                               "mflat": pa.map_(s, record_type())})
        term_t = arrow_table(terms, {"term": s, "key": i64, "tf": i32})
        with registered(conn, rowx) as name:
            conn.execute(f"CREATE OR REPLACE TEMP TABLE {self._q('rowx')} AS SELECT * FROM \"{name}\"")
        with registered(conn, term_t) as name:
            conn.execute(f"CREATE OR REPLACE TEMP TABLE {self._q('terms')} AS SELECT * FROM \"{name}\"")
        conn.execute(f"CREATE OR REPLACE TEMP TABLE {self._q('bm25')} (n BIGINT, total_len BIGINT)")
        conn.execute(f"INSERT INTO {self._q('bm25')} VALUES ($1, $2)", [len(x["key"]), total])
        text, vec = quote_ident(self.text), quote_ident(self.vector)
        conn.execute(
            f"CREATE OR REPLACE TEMP VIEW {self._q('units')} AS SELECT x.key, x.doc_id, 0 AS position, "
            f"coalesce(s.{text}, '') AS content, 0 AS start, x.\"end\", '' AS tail, x.key AS seq, x.fold, x.num, "
            f"x.ts, s.{vec}::FLOAT[{int(dim)}] AS embedding, x.nterms "
            f"FROM {self._q('src')} s JOIN {self._q('rowx')} x ON x.key = s.nlql_row")
        conn.execute(
            f"CREATE OR REPLACE TEMP VIEW {self._q('docs')} AS SELECT x.doc_id, x.key AS seq, "
            f"coalesce(s.{text}, '') AS text, x.metadata, x.mflat, x.dfold AS fold, x.dnum AS num, x.dts AS ts "
            f"FROM {self._q('src')} s JOIN {self._q('rowx')} x ON x.key = s.nlql_row")

    def close(self) -> None:
        """Drop the temporary views and tables (the source is untouched)."""
        conn = self.store._conn
        if conn is None:
            return
        for kind, key in (("VIEW", "docs"), ("VIEW", "units"), ("TABLE", "bm25"), ("TABLE", "terms"),
                          ("TABLE", "rowx"), ("VIEW", "src")):
            try:
                conn.execute(f"DROP {kind} IF EXISTS {self._q(key)}")
            except Exception:  # noqa: BLE001 - closing: best effort
                pass
        if is_file_table(self.table):
            try:
                conn.unregister(self._names["raw"])
            except Exception:  # noqa: BLE001
                pass


def _id_text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float, Decimal)):
        return str(V.normalize_metadata(v))
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _plain(v: Any) -> Any:
    """A value DuckDB returned, as metadata a user could have given (decimals as floats)."""
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, (time, timedelta)):
        return str(v)
    if isinstance(v, (datetime, date)):
        return v
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v
