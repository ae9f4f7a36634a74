"""The Store protocol on PostgreSQL + pgvector: connections, reads, writes and the info record."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np

from nlql import deadline
from nlql import values as V
from nlql.errors import BackendError, NLQLTimeoutError
from nlql.kernels import block_products
from nlql.sql.binder import Fragment, Param, sql
from nlql.sql.codec import (
    compact_json,
    escape_text,
    to_decimal,
    unescape_text,
)
from nlql.sql.ingest import prepare
from nlql.sql.postgres import PostgresDialect
from nlql.stores.base import DocRecord
from nlql.stores.pgvector.driver import first_line, import_psycopg, render
from nlql.stores.pgvector.entities import EntityMixin
from nlql.stores.pgvector.knn import EF_MAX, KnnMixin
from nlql.stores.pgvector.schema import SchemaMixin
from nlql.stores.pgvector.terms import Terms, TermsMixin
from nlql.stores.sqlstore import SqlStore

__all__ = ["PgVectorStore"]

T = TypeVar("T")



class PgVectorStore(SchemaMixin, TermsMixin, KnnMixin, EntityMixin, SqlStore):
    """The Store protocol on PostgreSQL + pgvector.

    Args:
        dsn: A libpq connection string or URI (``"postgresql://user@host/db"``, pgserver's URI). Kept
            so that a lost connection is re-opened on the next call.
        connection: An open psycopg 3 connection in autocommit mode to use instead of ``dsn`` (the
            store opens its own transactions; it is re-opened after a loss only if ``dsn`` is given).
        table_prefix: Prefix of the tables (``<prefix>_docs``, ``_units``, ``_meta``, ``_info``, and with
            ``bm25`` ``_terms`` and ``_bm25``). Any text of 1 to 40 bytes without NUL: identifiers are
            quoted (a ``%`` is doubled for the driver's query string).
        hnsw: Use an HNSW index (``vector_cosine_ops``); without it every knn is exact.
        ef_search: ``hnsw.ef_search`` for HNSW queries (raised to ``k`` when ``k`` is larger). 400: on the
            clustered bench corpus at 100k (200 clusters, m 16, ef_construction 64) some HNSW builds left
            queries with recall@10 0.0 at 100 and at 200 (a cluster the search did not reach); none of
            four builds (50–300 queries each) left one below 0.8 at 400 (``bench/pg_hnsw_recall.py``).
        exact: Always answer knn with an exact scan (declares ``Capabilities.EXACT``).
        m: HNSW ``m`` (index build parameter).
        ef_construction: HNSW ``ef_construction`` (index build parameter).
        statement_timeout_ms: Per-statement timeout (``SET LOCAL statement_timeout``); exceeding it
            raises :class:`~nlql.errors.NLQLTimeoutError`.
        exact_threshold: A filtered knn whose filter is estimated to match at most this many rows is
            answered by an exact scan over those rows; above it the choice between the exact scan and
            HNSW follows the filter's estimated selectivity (PostgreSQL's statistics, ``EXPLAIN``'s row
            estimate; a bounded count on a table never analysed): see ``docs/pgvector.md``.
        plan: ``"auto"`` (the cost-based choice above) or ``"index"``: HNSW whenever the index exists,
            whatever the filter (diagnostics; under-fill still widens ``ef_search``, then falls back).
        index_threshold: The HNSW index is built (once, by the first knn that needs it, or by
            :meth:`build_index`) when the table holds at least this many sentences; below it every knn
            is an exact scan. Building after loading is ~3.5× faster than maintaining the index row
            by row, and ingestion without the index runs at ~39k sentences/s instead of ~1.1k.
        bm25: Keep BM25 term statistics at ingest (``<prefix>_terms``: unit key, term, tf; each unit's
            term count; ``<prefix>_bm25``: N and the total length), so hybrid plans run as one SQL
            statement (``Capabilities.SQL_ARMS``, :attr:`dialect`) and every BM25 score is read from
            the database (:meth:`keyword_index`).
        analyzer: The :class:`~nlql.text.analyzer.Analyzer` whose terms are stored (default
            ``Analyzer()``, the engine's default). It must equal the engine's analyzer for hybrid plans
            to run in SQL; opening a table built with another analyzer rebuilds the term table.

    Raises:
        MissingDependencyError: psycopg 3 is not installed (``pip install 'nlql-engine[pgvector]'``).

    The reads over the shared schema, the BM25 term upkeep and the rows of a lowered statement are
    :class:`~nlql.stores.sqlstore.SqlStore`'s; the mixins keep what is PostgreSQL's own.
    """

    FILTER_STYLE = "pyformat"  # compiled filters carry psycopg's %s placeholders

    def __init__(self, dsn: str | None = None, *, connection: Any = None, table_prefix: str = "nlql",
                 hnsw: bool = True, ef_search: int = 400, exact: bool = False, m: int = 16,
                 ef_construction: int = 64, statement_timeout_ms: int | None = None,
                 exact_threshold: int = 1_000, index_threshold: int = 20_000, bm25: bool = True,
                 analyzer: Any = None, plan: str = "auto") -> None:
        self._pg = import_psycopg()
        if dsn is None and connection is None:
            raise ValueError("PgVectorStore needs a dsn or a connection")
        if not table_prefix or len(table_prefix.encode("utf-8", "surrogatepass")) > 40 or "\x00" in table_prefix:
            raise ValueError("table_prefix must be 1 to 40 bytes long, without NUL")
        self.dsn = dsn
        self.table_prefix = table_prefix
        self.hnsw = bool(hnsw)
        self.ef_search = max(1, min(int(ef_search), EF_MAX))
        self.exact = bool(exact)
        self.m = int(m)
        self.ef_construction = int(ef_construction)
        self.statement_timeout_ms = statement_timeout_ms
        self.exact_threshold = int(exact_threshold)
        if plan not in ("auto", "index"):
            raise ValueError(f"plan must be 'auto' or 'index', not {plan!r}")
        self.plan = plan
        self.index_threshold = int(index_threshold)
        self._index_ready = False
        self._small_until = 0.0  # until then the table is known to be below index_threshold
        self._estimates: dict[tuple[str, str], Any] = {}  # filter -> (until, estimated rows, total)
        self.dim: int | None = None
        self.last_stats: dict[str, Any] = {}
        from nlql.text.analyzer import Analyzer

        self.bm25 = bool(bm25)
        self.analyzer = analyzer if analyzer is not None else Analyzer()
        exact_only = self.exact or not self.hnsw
        self.dialect = PostgresDialect(table_prefix, analyzer=self.analyzer,
                                       semantic_mode="exact" if exact_only else "index")
        self.capabilities = self.dialect.capabilities(
            NAME="pgvector", EXACT=exact_only, SCORE_THRESHOLD=True, BM25=self.bm25, SQL_ARMS=self.bm25,
            KEYWORD_STATS=self.bm25, ANALYZER=True, ENTITY_LINKS=True, GRAPH_ARM=True,
            DEADLINE=True, DESCRIBES_DATA=True, COUNTS=True)
        if connection is not None and not connection.autocommit:
            raise ValueError("PgVectorStore needs a connection in autocommit mode "
                             "(it opens its own transactions)")
        self._conn: Any = connection
        self._own_conn = connection is None
        self._vector_oid: int | None = None
        self._lock = threading.RLock()

    # ------------------------------------------------------------------------------ connections

    def _connection(self) -> Any:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        if self.dsn is None:
            raise BackendError("pgvector", "the connection is closed and there is no dsn to reopen it",
                               hint="pass dsn=… to PgVectorStore so it can reconnect")
        try:
            conn = self._pg.connect(self.dsn, autocommit=True)
        except self._pg.Error as exc:
            raise BackendError("pgvector", f"cannot connect: {first_line(exc)}",
                               hint="check the dsn and that the server is running") from exc
        self._conn = conn
        self._own_conn = True
        self._vector_oid = None
        if self.dim is not None:
            self._attach_types(conn)
        return conn

    def _guard(self, fn: Callable[[], T]) -> T:
        """Run one operation under the lock, translating driver errors to NLQL errors."""
        with self._lock:
            try:
                return fn()
            except self._pg.errors.QueryCanceled as exc:
                current = deadline.current()
                if current is not None and current.end is not None:
                    raise NLQLTimeoutError(f"pgvector: the statement was cancelled at the search's deadline "
                                           f"({current.timeout} s)", hint="raise timeout= or narrow the query") from exc
                raise NLQLTimeoutError(
                    f"pgvector: statement timed out after {self.statement_timeout_ms} ms"
                    if self.statement_timeout_ms else f"pgvector: query cancelled: {first_line(exc)}"
                ) from exc
            except self._pg.Error as exc:
                conn = self._conn
                if conn is not None and (conn.broken or conn.closed):
                    self._drop_connection()
                    raise BackendError("pgvector", f"connection lost: {first_line(exc)}",
                                       hint="the next call reconnects") from exc
                raise BackendError("pgvector", first_line(exc)) from exc

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - already broken
                pass

    @contextmanager
    def _tx(self, single: bool = False) -> Iterator[Any]:
        """A transaction on the (re)opened connection, with the statement timeout set locally: the
        store's ``statement_timeout_ms``, or the time left to the search's deadline if that is shorter.

        ``single``: the block sends one read statement, so without a timeout to set the connection's
        autocommit runs it in its own transaction (no BEGIN/COMMIT round trips: a selective query's
        reads are a few hundred µs each, and a search makes several)."""
        ms = int(self.statement_timeout_ms) if self.statement_timeout_ms else None
        left = deadline.remaining()
        if left is not None:
            deadline.check("pgvector", "the statement")
            ms = max(1, int(left * 1000)) if ms is None else min(ms, max(1, int(left * 1000)))
        conn = self._connection()
        if single and not ms:
            yield conn
            return
        with conn.transaction():
            if ms:
                conn.execute("SELECT set_config('statement_timeout', %s, true)", [str(ms)])
            yield conn

    def _need_open(self) -> None:
        if self.dim is None:
            raise RuntimeError("PgVectorStore.open(dim) must be called first")

    def _read(self, fn: Callable[[Any], T]) -> T:
        """One read statement: in its own transaction only when a timeout must be set (``_tx(single)``)."""
        def run() -> T:
            with self._tx(single=True) as conn:
                return fn(conn)

        return self._guard(run)

    def _ungroupable(self, exc: BackendError) -> bool:
        """PostgreSQL's JSON functions cannot read a stored ``\\u0000`` (the metadata keeps it exactly):
        such a count is the engine's."""
        return isinstance(exc.__cause__, self._pg.errors.UntranslatableCharacter)

    # ---------------------------------------------------------------------------------- writing

    def upsert(self, docs: Sequence[DocRecord]) -> None:
        """Replace (or insert) whole documents in one transaction; the last of duplicate ids wins."""
        self._need_open()
        latest: dict[str, DocRecord] = {}
        for d in docs:
            latest.pop(d.doc_id, None)
            latest[d.doc_id] = d
        if not latest:
            return
        written = list(latest.values())
        doc_rows, unit_rows, terms = self._prepare(written)
        ids = [r[0] for r in doc_rows]
        self._guard(lambda: self._write(ids, doc_rows, unit_rows, terms, written))
        self._small_until = 0.0
        self._estimates.clear()

    def _prepare(self, docs: list[DocRecord]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], Terms]:
        """(document rows, unit rows, each sentence's (escaped doc id, position, terms)) ready to COPY,
        from one pass over the batch (:func:`nlql.sql.ingest.prepare`)."""
        from psycopg.types.json import Jsonb

        assert self.dim is not None
        p = prepare(docs, self.dim, escape_text, self.analyzer if self.bm25 else None)
        header = struct.pack(">HH", self.dim, 0)
        keys: dict[str, str] = {}
        recs: dict[int, str] = {}

        def flat_json(flat: list[tuple[str, dict[str, Any]]]) -> str:
            # the JSON object of the typed records, from each path's and record's text (both repeat)
            parts = []
            for path, rec in flat:
                k = keys.get(path)
                if k is None:
                    k = keys[path] = compact_json(path)
                r = recs.get(id(rec))
                if r is None:
                    r = recs[id(rec)] = compact_json(rec)
                parts.append(f"{k}:{r}")
            return "{" + ",".join(parts) + "}"

        def verbatim(text: Any) -> Any:
            return text

        doc_rows = [(doc_id, seq, text, meta, Jsonb(flat_json(flat), dumps=verbatim), fold, _dec(num), ts,
                     Jsonb(compact_json(members) if members else "{}", dumps=verbatim))
                    for doc_id, seq, text, meta, flat, fold, num, ts, members in zip(
                        p.doc_ids, p.seqs, p.texts, p.metadata, p.flat, p.folds, p.nums, p.stamps, p.members,
                        strict=True)]
        big = p.vectors.astype(">f4")
        unit_rows = [(doc_id, pos, content, start, end, tail, seq, fold, _dec(num), ts, header + vec.tobytes(), n)
                     for doc_id, pos, content, start, end, tail, seq, fold, num, ts, vec, n in zip(
                         p.unit_ids, p.positions, p.contents, p.starts, p.ends, p.tails, p.unit_seqs, p.unit_folds,
                         p.unit_nums, p.unit_stamps, big, p.nterms, strict=True)]
        terms: Terms = list(zip(p.unit_ids, p.positions, p.terms, strict=True)) if p.terms is not None else []
        return doc_rows, unit_rows, terms

    def _write(self, ids: list[str], doc_rows: list[tuple[Any, ...]], unit_rows: list[tuple[Any, ...]],
               terms: Terms, docs: Sequence[DocRecord] = ()) -> None:
        """One transaction: the stored documents among ``ids`` are removed (with their sentences, term
        rows and entity links), then every row is written by binary COPY (the term rows against the keys
        the sentences' identity column gave them: :meth:`_write_terms`)."""
        d = self.dialect
        with self._tx() as conn:
            self._run(conn, d.lock_writers())
            # (the writers' lock is held: no other writer adds or removes one of these ids meanwhile)
            stored = [r[0] for r in self._run(conn, sql("SELECT doc_id FROM ", d.docs, " WHERE ",
                                                        d.in_array("doc_id", Param(ids, "text[]")))).fetchall()]
            if not self.bm25:
                self._stale_terms(conn)
            if stored:
                if self.bm25:
                    self._forget_terms(conn, stored)
                for statement in d.delete_documents(stored):
                    self._run(conn, statement)
                self._forget_entities(conn, stored)
            self._run(conn, d.put_meta("meta", "max_seq", str(max(r[1] for r in doc_rows)), keep_max=True))
            cur = conn.cursor()
            with cur.copy(d.bulk_load("docs", ["doc_id", "seq", "text", "metadata", "mflat", "fold", "num",
                                               "ts", "mlists"])) as copy:
                copy.set_types(["text", "int8", "text", "text", "jsonb", "text", "numeric", "int8", "jsonb"])
                for r in doc_rows:
                    copy.write_row(r)
            before = 0  # the largest sentence key before this write's (keys only grow)
            if unit_rows and self.bm25:
                before = int(self._run(conn, sql("SELECT coalesce(max(key), 0) FROM ", d.units)).fetchone()[0])
            if unit_rows:
                with cur.copy(d.bulk_load("units", ["doc_id", "position", "content", "start", "end", "tail", "seq",
                                                    "fold", "num", "ts", "embedding", "nterms"])) as copy:
                    copy.set_types(["text", "int4", "text", "int4", "int4", "text", "int8", "text", "numeric",
                                    "int8", self._vector_oid, "int4"])
                    for r in unit_rows:
                        copy.write_row(r)
            if self.bm25:
                self._write_terms(conn, before, terms, len(unit_rows), sum(r[-1] for r in unit_rows))
            self._write_entities(conn, docs)  # the entity graph's links and edges, same transaction

    def delete(self, doc_ids: Sequence[str]) -> int:
        """Delete documents (and their sentences); returns how many documents existed."""
        self._need_open()
        ids = [escape_text(d) for d in dict.fromkeys(doc_ids)]
        if not ids:
            return 0

        def run() -> int:
            with self._tx() as conn:
                self._run(conn, self.dialect.lock_writers())
                if self.bm25:
                    self._forget_terms(conn, ids)
                else:
                    self._stale_terms(conn)
                self._forget_entities(conn, ids)
                cur = None
                for statement in self.dialect.delete_documents(ids):
                    cur = self._run(conn, statement)
                assert cur is not None
                return int(cur.rowcount)

        self._estimates.clear()
        return self._guard(run)

    def count(self) -> int:
        """Number of stored sentences.

        With BM25 statistics in step with the rows (the analyzer's entry in ``<prefix>_meta``, which a
        write without them removes), their ``n``, kept in the same transaction as every write: the
        engine asks before every knn, and ``count(*)`` reads the whole table (~30 ms at 100k).
        """
        self._need_open()
        d = self.dialect

        def run() -> int:
            with self._tx(single=True) as conn:
                if self.bm25:
                    row = self._run(conn, sql("SELECT b.n FROM ", d.table("bm25"), " b WHERE EXISTS (SELECT 1 FROM ",
                                              d.table("meta"), " m WHERE m.key = ", Param("analyzer", None),
                                              ")")).fetchone()
                    if row is not None:
                        return int(row[0])
                return int(self._run(conn, sql("SELECT count(*) FROM ", d.units)).fetchone()[0])

        return self._guard(run)

    def max_seq(self) -> int:
        """Largest ``seq`` ever written (0 when nothing was); deleting a document does not lower it."""
        self._need_open()
        d = self.dialect
        return self._guard(lambda: self._scalar(sql(
            "SELECT greatest((SELECT max(seq) FROM ", d.docs, "), "
            "(SELECT value::bigint FROM ", d.table("meta"), " WHERE key = 'max_seq'), 0)")))

    def _scalar(self, query: Fragment | str) -> int:
        with self._tx() as conn:
            row = self._run(conn, query).fetchone()
            return int(row[0])

    # ------------------------------------------------------------------------------ info record

    def get_info(self, key: str) -> str | None:
        """A value this store keeps for its users beside the data (e.g. the embedder that built it); before
        :meth:`open` too (the CLI reads which embedder built a store to open it with that one)."""
        key = _info_key(key)

        def run() -> str | None:
            with self._tx() as conn:
                if self.dim is None and conn.execute("SELECT to_regclass(%s)",
                                                     [self.dialect.table("info")]).fetchone()[0] is None:
                    return None  # not opened, and no store here yet
                row = self._run(conn, self.dialect.get_meta("info", key)).fetchone()
                return None if row is None else unescape_text(row[0])

        return self._guard(run)

    def set_info(self, key: str, value: str) -> None:
        """Record ``value`` under ``key`` (replacing it), committed at once and seen by every process."""
        self._need_open()
        key = _info_key(key)
        if not isinstance(value, str):
            raise TypeError(f"set_info takes a string value, not {type(value).__name__}")

        def run() -> None:
            with self._tx() as conn:
                self._run(conn, self.dialect.put_meta("info", key, escape_text(value)))

        self._guard(run)

    # ---------------------------------------------------------------------------------- reading

    def similarities(self, vectors: np.ndarray, keys: Sequence[Any]) -> np.ndarray:
        """(len(vectors), len(keys)) cosine matrix in float32 (NaN for a key deleted meanwhile)."""
        self._need_open()
        q = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        wanted = [int(k) for k in keys]
        if not wanted:
            return np.zeros((len(q), 0), dtype=np.float32)
        query = sql("SELECT key, embedding FROM ", self.dialect.units, " WHERE ",
                    self.dialect.in_array("key", Param(wanted, "bigint[]")))

        def run() -> dict[int, np.ndarray]:
            with self._tx(single=True) as conn:
                cur = conn.cursor(binary=True)
                return {int(k): v for k, v in cur.execute(*render(self.dialect, query), prepare=True).fetchall()}

        found = self._guard(run)
        assert self.dim is not None
        mat = np.full((len(wanted), self.dim), np.nan, dtype=np.float32)
        for i, k in enumerate(wanted):
            vec = found.get(k)
            if vec is not None:
                mat[i] = vec
        return block_products(q, mat)

    def vectors(self, keys: Sequence[Any]) -> np.ndarray:
        """The rows' own unit vectors, ``(len(keys), dim)`` float32; NaN for a key deleted meanwhile.

        One statement (``key = ANY(…)``): a round trip to the server."""
        self._need_open()
        assert self.dim is not None
        wanted = [int(k) for k in keys]
        out = np.full((len(wanted), self.dim), np.nan, dtype=np.float32)
        if not wanted:
            return out
        query = sql("SELECT key, embedding FROM ", self.dialect.units, " WHERE ",
                    self.dialect.in_array("key", Param(list(dict.fromkeys(wanted)), "bigint[]")))

        def run() -> dict[int, np.ndarray]:
            with self._tx() as conn:
                cur = conn.cursor(binary=True)
                return {int(k): v for k, v in cur.execute(*render(self.dialect, query), prepare=True).fetchall()}

        found = self._guard(run)
        for i, k in enumerate(wanted):
            vec = found.get(k)
            if vec is not None:
                out[i] = vec
        return V.normalize_rows(out)

    def close(self) -> None:
        """Close the connection this store opened (a connection passed in is left open)."""
        with self._lock:
            if self._own_conn:
                self._drop_connection()
            else:
                self._conn = None


def _dec(f: float | None) -> Any:
    return to_decimal(f) if f is not None else None


def _info_key(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError("an info key is a non-empty string")
    return escape_text(key)
