"""What NLQL's SQL stores share: the reads over the common schema, the BM25 term upkeep, and the rows
of a lowered hybrid statement.

PostgreSQL + pgvector (:class:`~nlql.stores.pgvector.PgVectorStore`) and DuckDB
(:class:`~nlql.stores.duckdb.DuckDBStore`) keep the same tables (``<p>_docs``, ``<p>_units``,
``<p>_terms``, ``<p>_bm25``, written through their dialect) and read them with the same statements,
so those reads live here once. A store supplies the few things that differ:

- ``dialect`` (a :class:`~nlql.sql.dialect.Dialect`), ``analyzer``, ``dim``, ``last_stats``, ``bm25``;
- ``_run(conn, fragment)``: execute one statement (rendered by the dialect for the driver);
- ``_read(fn)``: call ``fn(conn)`` for one read statement, on the store's connection, under its lock,
  with driver errors translated to NLQL errors;
- ``_need_open()``;
- ``FILTER_STYLE``: the placeholder style of compiled filters (None: the dialect's own).

Everything else (connections, transactions, writes, knn, the vector paths) is the store's own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

from nlql.errors import BackendError
from nlql.pushdown import Filter, NativeFilter
from nlql.schema import DataSummary
from nlql.sql.binder import Fragment, Param, sql
from nlql.sql.dialect import Compiled
from nlql.sql.keyword import KeywordIndex
from nlql.sql.nodes import SimilarityScore
from nlql.stores.base import Row

__all__ = ["SqlStore"]

T = TypeVar("T")


class SqlStore:
    """The shared half of a SQL store (see the module docstring for what a subclass supplies)."""

    dialect: Any
    analyzer: Any
    dim: int | None
    last_stats: dict[str, Any]
    bm25: bool = True                       # the term tables are kept (BM25 answered in SQL)
    FILTER_STYLE: ClassVar[str | None] = None

    def _run(self, conn: Any, frag: Fragment | str) -> Any:
        raise NotImplementedError

    def _read(self, fn: Callable[[Any], T]) -> T:
        raise NotImplementedError

    def _need_open(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------------------------ filters

    def compile_filter(self, flt: Filter) -> NativeFilter:
        """The pushed filter tree as a parameterised SQL fragment (see ``Dialect.compile_filter``)."""
        out: NativeFilter = self.dialect.compile_filter(flt, style=self.FILTER_STYLE)
        return out

    def _from(self, flt: NativeFilter | None) -> Fragment:
        """``FROM … WHERE …`` for a filter (joining the documents table only when it is read)."""
        d = self.dialect
        if flt is None:
            return sql("FROM ", d.units, " u WHERE TRUE")
        where = flt.extra["fragment"]
        if flt.extra.get("docs", True):
            return sql("FROM ", d.units, " u JOIN ", d.docs, " d ON d.doc_id = u.doc_id WHERE ", where)
        return sql("FROM ", d.units, " u WHERE ", where)

    # ------------------------------------------------------------------------------------ schema

    def describe_data(self, sample: int) -> DataSummary:
        """Sizes (``count(*)`` of both tables) and the metadata keys of at most ``sample`` documents
        (``LIMIT``: the first in storage order, no sort and no full read of the documents table)."""
        self._need_open()
        d = self.dialect
        n = max(1, int(sample))

        def run(conn: Any) -> tuple[int, int, list[Any]]:
            docs = int(self._run(conn, sql("SELECT count(*) FROM ", d.docs)).fetchone()[0])
            units = int(self._run(conn, sql("SELECT count(*) FROM ", d.units)).fetchone()[0])
            metas = [json.loads(r[0]) for r in self._run(
                conn, sql("SELECT CAST(metadata AS text) FROM ", d.docs, " LIMIT ", Param(n, "bigint"))).fetchall()]
            return docs, units, metas

        docs, units, metas = self._read(run)
        return DataSummary.from_sample(docs, units, metas, f"first {len(metas)} documents in storage order")

    # ------------------------------------------------------------------------------------- reads

    def scan(self, flt: NativeFilter | None = None) -> list[Any]:
        """Keys of every sentence passing ``flt``, in insertion order (seq, position)."""
        self._need_open()
        query = sql("SELECT u.key ", self._from(flt), " ORDER BY u.seq, u.position, u.key")
        return self._read(lambda conn: [r[0] for r in self._run(conn, query).fetchall()])

    def _rows(self, where: Fragment, order: str) -> list[tuple[str, Row | None]]:
        """(document id, row or None for a document without sentences) of the documents ``where``."""
        d = self.dialect
        # the columns a Row is read from (by name); metadata as its exact JSON text
        columns = ("u.key, u.doc_id, u.position, u.content, u.seq, u.start, u.\"end\", u.tail, "
                   f"{d.cast('d.metadata', 'text')} AS metadata, d.doc_id AS document")
        query = sql(f"SELECT {columns} FROM ", d.docs, " d LEFT JOIN ", d.units,
                    " u ON u.doc_id = d.doc_id WHERE ", where, f" ORDER BY {order}")

        def run(conn: Any) -> list[tuple[str, Row | None]]:
            cur = self._run(conn, query)
            col = Compiled.reader([c[0] for c in cur.description])
            metas: dict[str, dict[str, Any]] = {}
            return [(d.codec.unescape(r[col["document"]]), self._row_from(r, col, metas)) for r in cur.fetchall()]

        return self._read(run)

    def _row_from(self, r: Sequence[Any], col: dict[str, int], metas: dict[str, dict[str, Any]]) -> Row | None:
        """A :class:`Row` from a result row read by column name (None for a document without sentences);
        ``metas`` parses each document's metadata once."""
        key = r[col["key"]]
        if key is None:
            return None
        un = self.dialect.codec.unescape
        doc_id = un(r[col["doc_id"]])
        meta = metas.get(doc_id)
        if meta is None:
            meta = metas[doc_id] = json.loads(r[col["metadata"]])
        return Row(key=int(key), doc_id=doc_id, position=int(r[col["position"]]), content=un(r[col["content"]]),
                   metadata=meta, seq=int(r[col["seq"]]), start=int(r[col["start"]]), end=int(r[col["end"]]),
                   tail=un(r[col["tail"]]))

    def fetch(self, keys: Sequence[Any]) -> list[Row]:
        """Rows for keys, in the order of ``keys`` (a key deleted meanwhile is skipped)."""
        self._need_open()
        wanted = [int(k) for k in keys]
        if not wanted:
            return []
        raw = self._rows(self.dialect.in_array("u.key", Param(wanted, "bigint[]")), "u.key")
        by_key = {row.key: row for _, row in raw if row is not None}
        return [by_key[k] for k in wanted if k in by_key]

    def document_rows(self, doc_ids: Sequence[str]) -> dict[str, list[Row]]:
        """Every sentence of each stored document, by position (unknown ids are left out)."""
        self._need_open()
        esc = self.dialect.codec.escape
        ids = [esc(x) for x in dict.fromkeys(doc_ids)]
        if not ids:
            return {}
        raw = self._rows(self.dialect.in_array("d.doc_id", Param(ids, "text[]")), "d.doc_id, u.position")
        out: dict[str, list[Row]] = {}
        for doc_id, row in raw:
            rows = out.setdefault(doc_id, [])
            if row is not None:
                rows.append(row)
        return {x: out[x] for x in dict.fromkeys(doc_ids) if x in out}

    # ------------------------------------------------------------------------------------- counts

    def _ungroupable(self, exc: BackendError) -> bool:
        """Whether a failed count statement failed on the data itself (the engine then counts)."""
        return False

    def count_groups(self, flt: NativeFilter | None, unit: str,
                     paths: Sequence[tuple[str, ...]]) -> list[tuple[tuple[Any, ...], int]] | None:
        """``COUNT(unit) BY paths`` as one GROUP BY (:class:`~nlql.stores.base.CountsGroups`): the sentences
        passing ``flt``, or the documents with one, per stored form of the values (JSON text; a list's
        members through ``TRANSFORMS["json_members"]``, a missing key as null). None when the database
        cannot read some stored value as JSON (:meth:`_ungroupable`)."""
        self._need_open()
        d = self.dialect
        documents = unit == "DOCUMENT"
        doc_id = "d.doc_id" if documents else "u.doc_id"
        is_id = [tuple(p) == ("doc_id",) for p in paths]
        joins: list[Fragment] = []
        columns: list[str] = []
        for i, path in enumerate(paths):
            if is_id[i]:
                columns.append(doc_id)
            else:
                members = d.fn("json_members", doc=sql("d.metadata"), path=d.json_path(path[1:]))
                joins.append(sql(" CROSS JOIN ", members, f" AS m{i}(val)"))
                columns.append(f"coalesce({d.cast(f'm{i}.val', 'text')}, 'null')")
        group = f" GROUP BY {', '.join(columns)}" if columns else ""
        if documents:  # the documents with a sentence passing the filter, each read once
            query = sql("SELECT ", ", ".join([*columns, "count(DISTINCT d.doc_id)"]), " FROM ", d.docs, " d",
                        *joins, " WHERE d.doc_id IN (SELECT u.doc_id ", self._from(flt), ")", group)
        else:
            where = flt.extra["fragment"] if flt is not None else sql("TRUE")
            query = sql("SELECT ", ", ".join([*columns, "count(DISTINCT u.key)"]), " FROM ", d.units,
                        " u JOIN ", d.docs, " d ON d.doc_id = u.doc_id", *joins, " WHERE ", where, group)
        try:
            rows = self._read(lambda conn: self._run(conn, query).fetchall())
        except BackendError as exc:
            if self._ungroupable(exc):
                return None
            raise
        un = d.codec.unescape
        out: list[tuple[tuple[Any, ...], int]] = []
        for r in rows:
            if not r[-1]:
                continue  # (no row passed: a total of nothing is no group, as the engine counts)
            out.append((tuple(un(v) if i else json.loads(v) for v, i in zip(r, is_id)), int(r[-1])))
        return out

    # --------------------------------------------------------------------------------- BM25 terms

    def _analyzer_config(self) -> str:
        """The analyzer that wrote the term tables (kept in ``<p>_meta``: another one rebuilds them)."""
        return json.dumps(self.analyzer.config(), sort_keys=True)

    def _terms_of(self, content: str) -> tuple[int, list[tuple[str, int]]]:
        """(number of terms, [(escaped term, tf)]) of one sentence, by the store's analyzer."""
        terms = self.analyzer.terms(content)
        counts: dict[str, int] = {}
        for t in terms:
            counts[t] = counts.get(t, 0) + 1
        esc = self.dialect.codec.escape
        return len(terms), [(esc(t), c) for t, c in counts.items()]

    def keyword_index(self, analyzer: Any = None) -> KeywordIndex | None:
        """The engine's BM25 source: scores read from the term tables per query; None when the store
        keeps no BM25 statistics or the engine's analyzer (``None``: the default one) differs from the
        one that wrote them (the engine keeps its own index)."""
        from nlql.text.analyzer import Analyzer

        if not self.bm25 or (analyzer if analyzer is not None else Analyzer()) != self.analyzer:
            return None
        return KeywordIndex(self.keyword_postings, self.analyzer, analyzer, self.dialect.codec)

    def keyword_postings(self, terms: list[str], keys: list[int] | None,
                         flt: NativeFilter | None = None) -> tuple[list[tuple[Any, ...]], int, int]:
        """(postings rows ``(key, qi, tf, df, nterms, doc_id, position, n, total_len)``, N, total
        length) of escaped ``terms``, for the rows ``keys`` (every row when None) passing the compiled
        filter ``flt``, in one statement (``Dialect.keyword_postings``)."""
        self._need_open()
        where = flt.extra["fragment"] if flt is not None else None
        docs = bool(flt.extra.get("docs", True)) if flt is not None else False
        statement = self.dialect.keyword_postings(terms, keys, where, docs)

        def run(conn: Any) -> tuple[list[tuple[Any, ...]], int, int]:
            rows = self._run(conn, statement).fetchall()
            if rows:
                return rows, int(rows[0][7]), int(rows[0][8])
            return [], 0, 0

        return self._read(run)

    def bm25_candidates(self, text: str, flt: NativeFilter | None = None,
                        n: int | None = None) -> tuple[list[Any], np.ndarray]:
        """Keys and BM25 scores of the rows passing ``flt`` that hold a term of ``text`` (every one)."""
        index = KeywordIndex(self.keyword_postings, self.analyzer, None, self.dialect.codec)
        out: tuple[list[Any], np.ndarray] = index.candidates(text, flt, n)
        return out

    # --------------------------------------------------------------------------- lowered statements

    def _query_slots(self, lowered: Any, vectors: Mapping[str, np.ndarray],
                     encode: Callable[[np.ndarray], Any] = lambda v: v) -> dict[str, Any]:
        """The execution-time values of a lowered plan: each SIMILARITY slot's query vectors, one per
        text, as the driver takes them (``encode``).

        Raises:
            ValueError: too few vectors, or of another dimension than the store's.
        """
        slots: dict[str, Any] = {}
        for s in lowered.scores:
            if isinstance(s, SimilarityScore):
                mat = np.atleast_2d(np.asarray(vectors[s.slot], dtype=np.float32))
                if mat.shape[0] < s.n_vectors or mat.shape[1] != self.dim:
                    raise ValueError(f"{s.slot}: expected {s.n_vectors}×{self.dim} query vectors, got {mat.shape}")
                for i in range(s.n_vectors):
                    slots[s.vector_key(i)] = encode(mat[i])
        return slots

    @staticmethod
    def _arm_rows(lowered: Any, compiled: Compiled, raw: Sequence[Sequence[Any]],
                  col: dict[str, int]) -> dict[str, int]:
        """Rows per arm before its own threshold (the statement's ``arm_rows_<i>`` columns)."""
        if not raw:
            return {}
        return {a.binding: int(raw[0][col[compiled.names[f"arm_rows:{a.binding}"]]]) for a in lowered.fusion.arms}

    def _lowered_rows(self, lowered: Any, compiled: Compiled, raw: Sequence[Sequence[Any]], col: dict[str, int],
                      better: Mapping[str, Mapping[int, float]] | None = None) -> list[tuple[Row, dict[str, float]]]:
        """The statement's rows as (row, scores): every score slot and the fusion slot, read by column
        name; ``better`` replaces a slot's score per key (scores the store recomputed exactly)."""
        single = lowered.fusion.method == "SINGLE"
        out: list[tuple[Row, dict[str, float]]] = []
        metas: dict[str, dict[str, Any]] = {}
        for r in raw:
            row = self._row_from(r, col, metas)
            assert row is not None
            scores = {slot: _score(r[col[compiled.names[slot]]]) for slot in compiled.columns}
            for slot, by_key in (better or {}).items():
                scores[slot] = by_key.get(row.key, scores[slot])
            if not single:
                scores[lowered.fusion.slot] = float(r[col["fused"]])
            out.append((row, scores))  # type: ignore[arg-type]
        return out


def _score(value: Any) -> float | None:
    return None if value is None else float(value)
