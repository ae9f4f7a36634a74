"""The Store protocol on DuckDB: schema, reads, writes, exact knn, hybrid statements, the info record."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import Any, ClassVar, NamedTuple, TypeVar, cast

import numpy as np

from nlql import values as V
from nlql.errors import BackendError, NLQLError
from nlql.kernels import row_products, score_rows
from nlql.pushdown import NativeFilter
from nlql.sql.binder import Fragment, Param, Slot, join, sql
from nlql.sql.codec import list_members, string_key
from nlql.sql.dialect import Compiled
from nlql.sql.duckdb import DuckDBDialect
from nlql.sql.ingest import Prepared, prepare, shadows, verbatim
from nlql.sql.nodes import SimilarityScore
from nlql.stores.base import DocRecord, Row
from nlql.stores.batch import DocBatch, is_columnar, latest_per_id
from nlql.stores.duckdb.driver import (
    arrow_table,
    import_arrow,
    import_duckdb,
    parse_url,
    record_type,
    registered,
    render,
)
from nlql.stores.duckdb.entities import DuckDBEntities
from nlql.stores.duckdb.shadows import ascii_shadows
from nlql.stores.duckdb.terms import count_rows, term_rows
from nlql.stores.interrupt import at_deadline, timed_out
from nlql.stores.sqlstore import SqlStore

__all__ = ["DuckDBStore", "from_url"]

T = TypeVar("T")
SCHEMA_VERSION = "1"
# NLQL uses only what is built into DuckDB: never install or load an extension behind the user's back
NO_DOWNLOADS = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
# An in-memory database of the store's own keeps its strings and floats uncompressed (the documented
# default of an in-memory DuckDB database): DuckDB 2.0 compresses in-memory tables when it checkpoints
# them (after a write of more than its checkpoint threshold, or one that drops a table), and a hit's
# text, id and metadata read back from an FSST segment cost a scan that decompresses the column (the
# 0.1% filter at 100k: 4.3x DuckDB's own statement in CPU time with FSST, 3.2x without), while
# compressing the vectors (ALP-RD) at every checkpoint costs ingest time and scans decode them.
# Integers keep their codecs. (A setting of the database, which the store created: not a connection's.)
IN_MEMORY = "SET disabled_compression_methods = 'fsst,dict_fsst,alp,alprd'"
# The same database checkpoints once its commits have written more than this since the last time (the
# default is 16 MiB): a checkpoint of an in-memory database rewrites every table to compress what is
# left (integers) and costs time in proportion to the whole database, and a 100k ingest of 384-dim
# vectors crossed the default twice (0.9 s of a 6 s ingest) with the same query times without it.
# Bounded, so that rows deleted by replacing writes are still reclaimed now and then.
IN_MEMORY_CHECKPOINT = "SET checkpoint_threshold = '1GB'"


def from_url(url: str) -> dict[str, Any]:
    """The constructor arguments of a ``duckdb…`` store string (the registry's ``from_url``)."""
    return parse_url(url)


class _PreparedWrite(NamedTuple):
    """A write made ready by :meth:`DuckDBStore.prepare_write`: the tables of :meth:`DuckDBStore._prepare`,
    and whether it ends its engine call (the sorted tables are kept sorted after it)."""

    tables: tuple[Any, ...]
    last: bool


class DuckDBStore(DuckDBEntities, SqlStore):
    """The Store protocol on DuckDB (in process; ``pip install 'nlql-engine[duckdb]'``).

    The reads over the shared schema, the BM25 term upkeep and the rows of a lowered statement are
    :class:`~nlql.stores.sqlstore.SqlStore`'s; this class keeps the connection, the writes (Arrow
    bulk loads), exact knn and the vectors.

    Args:
        path: A database file (created if missing), or None for an in-memory database.
        connection: An open ``duckdb`` connection to use instead of ``path`` (left open by :meth:`close`).
        table_prefix: Prefix of the tables (``<prefix>_docs``, ``_units``, ``_terms``, ``_bm25``,
            ``_meta``, ``_info``, the key sequence ``_keys``).
        analyzer: The :class:`~nlql.text.analyzer.Analyzer` whose terms are stored (default
            ``Analyzer()``); it must equal the engine's for BM25 to run in SQL.
        read_only: Open the file read-only: searches work, every write is a :class:`BackendError`.
        table, text, vector, id, metadata: Read an existing table (or a Parquet file) in place
            instead of keeping NLQL's own tables: see :meth:`from_table`.

    Raises:
        MissingDependencyError: duckdb (or pyarrow) is not installed.
    """

    CLUSTER_MIN_ROWS = 8192   # a smaller table is scanned whole fast enough
    # see _cluster: the term table is kept sorted more tightly (a BM25 statement reads every run of
    # unsorted rows for each query term; rewriting it costs ~50 ms per million postings)
    CLUSTER_GROWTH: ClassVar[dict[str, float]] = {"terms": 1.1, "flat": 1.5, "members": 1.5}
    #: Up to this many rows passing a filter, knn reads them all (with their rows) and ranks them in
    #: numpy (:meth:`_small_knn`) instead of ranking them in SQL (0: always in SQL). At 100k sentences,
    #: in CPU time against the ranking in SQL: 87 passing rows 0.8x, 999 rows 1.04-1.10x.
    SMALL_ROWS = 512

    def __init__(self, path: str | os.PathLike[str] | None = None, *, connection: Any = None,
                 table_prefix: str = "nlql", analyzer: Any = None, read_only: bool = False,
                 table: str | None = None, text: str | None = None, vector: str | None = None,
                 id: str | None = None, metadata: Sequence[str] = ()) -> None:  # noqa: A002 - the column
        self._duck = import_duckdb()
        import_arrow()
        if not table_prefix or len(table_prefix.encode("utf-8", "surrogatepass")) > 40 or "\x00" in table_prefix:
            raise ValueError("table_prefix must be 1 to 40 bytes long, without NUL")
        from nlql.text.analyzer import Analyzer

        self.path = None if path is None else os.fspath(path)
        self.table_prefix = table_prefix if table is None or table_prefix != "nlql" else "nlql_ext"
        self.analyzer = analyzer if analyzer is not None else Analyzer()
        self.read_only = bool(read_only) or table is not None
        self.dim: int | None = None
        self.last_stats: dict[str, Any] = {}
        self._lock = threading.RLock()
        self._generation = 0
        # (generation, max_seq) as this store last read or wrote it: see max_seq
        self._seq_known: tuple[int, int] | None = None
        # in an in-memory database of the store's own, the (escaped) ids it holds: a write finds the
        # documents it replaces here instead of a statement that reads every stored id (see _write)
        self._ids: set[str] | None = None
        self._single = False  # a call's writes hold the database to one DuckDB thread (_one_thread)
        self._next_key: int | None = None  # in a database of its own, the next key to give (_key_block)
        self._seen = threading.local()  # per thread: the rows and vectors the last knn read (_remember)
        self._large: dict[str, int] = {}  # filters found to pass more than SMALL_ROWS rows (_small_knn), per write
        self._probes: dict[int, tuple[Any, ...]] = {}  # _small_knn's statement per compiled filter (by identity)
        self._parsed: dict[str, Any] = {}  # knn's and hybrid statements parsed once (_statement), by text
        self._compiled_plans: dict[Any, Compiled] = {}  # hybrid statements per plan (_compiled)
        self._own_conn = connection is None
        self._conn: Any = connection if connection is not None else self._connect()
        self._external: Any = None
        codec = None
        if table is not None:
            from nlql.stores.duckdb.external import External

            if text is None or vector is None:
                raise NLQLError("DuckDBStore over an existing table needs text=… and vector=… columns",
                                hint="DuckDBStore.from_table(conn, table, text='body', vector='embedding')")
            self._external = External(self, table, text=text, vector=vector, id=id, metadata=list(metadata))
            codec = self._external.codec
        self.dialect = DuckDBDialect(self.table_prefix, analyzer=self.analyzer, normalized=table is None,
                                     codec=codec)
        self.dialect.graph_tables = table is None  # (see _open_entities, _find_entities)
        self.capabilities = self._capabilities()

    def _capabilities(self) -> Any:
        """What the planner may push (HAS once ``open`` found or built ``<prefix>_members``)."""
        return self.dialect.capabilities(
            NAME="duckdb", EXACT=True, SCORE_THRESHOLD=True, BM25=True, SQL_ARMS=True, KEYWORD_STATS=True, ANALYZER=True,
            # its own tables keep the entity links (GRAPH in SQL: nlql.stores.duckdb.entities) and the metadata as JSON
            ENTITY_LINKS=self._external is None, GRAPH_ARM=self.dialect.graph_tables, COUNTS=self._external is None,
            DESCRIBES_DATA=self._external is None, DOC_BATCHES=True,
            # an in-memory database of its own: no one else writes it, so an engine may number its next
            # batch and prepare it (prepare_write) while this one is written (write_prepared)
            WRITES_AHEAD=self._private and self._external is None,
            # over its own tables, knn scores its hits as similarities() does (numpy, score_rows) and lists them
            # by (score desc, seq, position): a plain top-k's page is the knn list (nlql.execute.knn_page)
            KNN_SCORES=self._external is None, KNN_ORDERED=self._external is None)

    @classmethod
    def from_table(cls, conn: Any, table: str, *, text: str, vector: str, id: str | None = None,  # noqa: A002
                   metadata: Sequence[str] = (), analyzer: Any = None,
                   table_prefix: str = "nlql_ext") -> DuckDBStore:
        """NLQL over an existing DuckDB table, view or Parquet file, read-only, without copying it.

        Each row is one document of one sentence (``SENTENCE`` and ``DOCUMENT`` return the same rows).

        Args:
            conn: A ``duckdb`` connection holding ``table`` (it may be read-only), a path to a database
                file (opened read-only), or None (an in-memory connection, for a Parquet file).
            table: A table or view name (``schema.table`` allowed), or the path of a Parquet file
                (or a glob such as ``data/*.parquet``).
            text: The text column (``VARCHAR``; NULL reads as the empty string).
            vector: The embedding column: ``FLOAT[n]``/``DOUBLE[n]`` arrays or lists of one length; not
                necessarily normalised (cosine is computed).
            id: The document id column (any scalar type, read as text; unique, not NULL); by default
                the row number.
            metadata: Columns returned as ``hit.metadata`` and queried as ``meta.<column>``: booleans,
                integers, floats, decimals (as floats), strings, dates and timestamps (as ISO strings),
                lists, structs (nested keys) and maps.
            analyzer: The BM25 analyzer (must equal the engine's for BM25 in SQL).
            table_prefix: Names of the temporary tables and views the store creates in the connection.

        Raises:
            BackendError: a named column is missing or has a type NLQL cannot read; at ``open``, the
                vectors have another dimension than the embedder.
        """
        path: str | None = None
        if conn is None:
            connection = None
        elif isinstance(conn, (str, os.PathLike)):
            path, connection = os.fspath(conn), None
        else:
            connection = conn
        return cls(path, connection=connection, table=table, text=text, vector=vector, id=id,
                   metadata=metadata, analyzer=analyzer, table_prefix=table_prefix, read_only=True)

    # ------------------------------------------------------------------------------ connections

    def _connect(self) -> Any:
        target = self.path if self.path is not None else ":memory:"
        try:
            conn = self._duck.connect(target, read_only=self.read_only and self.path is not None, config=NO_DOWNLOADS)
            if self.path is None:
                conn.execute(IN_MEMORY)
                conn.execute(IN_MEMORY_CHECKPOINT)
            return conn
        except self._duck.Error as exc:
            if self.path is not None and not self.read_only and _permission_denied(exc):
                # a file we may read but not write: searches work, writes say why they cannot
                self.read_only = True
                try:
                    return self._duck.connect(target, read_only=True, config=NO_DOWNLOADS)
                except self._duck.Error as again:
                    exc = again
            raise BackendError("duckdb", f"cannot open {target}: {_first_line(exc)}",
                               hint="check the path and that no other process holds the file for writing"
                               ) from exc

    def _guard(self, fn: Callable[[], T], writing: bool = False) -> T:
        """Run one operation under the lock, translating driver errors to NLQL errors. Any operation but
        a write of an engine's call (``writing``) first gives the database back its threads, should a
        call's writes still hold it to one (:meth:`_one_thread`: a call that stopped between batches)."""
        with self._lock:
            try:
                with at_deadline("duckdb", self._conn.interrupt):  # the deadline interrupts the statement
                    if self._single and not writing:
                        self._all_threads()
                    return fn()
            except NLQLError:
                raise
            except self._duck.Error as exc:
                late = timed_out("duckdb")
                if late is not None:
                    raise late from exc
                text = _first_line(exc)
                if "read-only" in text:
                    raise self._read_only_error() from exc
                raise BackendError("duckdb", text) from exc

    def _read_only_error(self) -> BackendError:
        if self._external is not None:
            return BackendError("duckdb", f"this store reads {self._external.table!r} in place and is read-only",
                                hint="to write, load the rows into a DuckDBStore of NLQL's own (engine.add_texts)")
        where = self.path or "the database"
        return BackendError("duckdb", f"{where} is open read-only: cannot write",
                            hint="open it without read_only=True, with write permission on the file")

    def _check_writable(self) -> None:
        if self.read_only:
            raise self._read_only_error()

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        conn = self._conn
        self._generation += 1  # every write forgets the rows knn read along (_seen)
        conn.execute("BEGIN TRANSACTION")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _run(self, conn: Any, frag: Fragment | str) -> Any:
        return conn.execute(*render(self.dialect, frag))

    def _read(self, fn: Callable[[Any], T]) -> T:
        return self._guard(lambda: fn(self._conn))

    def _ungroupable(self, exc: BackendError) -> bool:
        """DuckDB's JSON reader refuses a lone surrogate (the metadata keeps it exactly, as ``\\ud800``):
        such a count is the engine's."""
        cause = exc.__cause__
        return isinstance(cause, self._duck.InvalidInputException) and "Malformed JSON" in str(cause)

    def _need_open(self) -> None:
        if self.dim is None:
            raise RuntimeError("DuckDBStore.open(dim) must be called first")

    # ----------------------------------------------------------------------------------- schema

    def open(self, dim: int) -> None:
        """Create the tables if missing or re-attach to them (an external table: check it).

        Raises:
            BackendError: the tables or the vector column hold vectors of another dimension.
        """
        dim = int(dim)
        if self.dim == dim:
            return
        if self.dim is not None:
            raise BackendError("duckdb", f"store is open with {self.dim}-dimensional vectors, not {dim}")
        self._guard(lambda: self._open(dim))
        self.dialect.dim = dim
        self.dim = dim
        self.capabilities = self._capabilities()

    def _open(self, dim: int) -> None:
        d = self.dialect
        if self._external is not None:
            self._external.open(dim)
            return
        if self.read_only:
            found = self._conn.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE table_name = $1", [f"{self.table_prefix}_meta"]
            ).fetchone()[0]
            if not found:
                raise BackendError("duckdb", f"{self.path} holds no NLQL store with table_prefix "
                                             f"{self.table_prefix!r}", hint="open it writable once to create it")
            self._check_dim(dim)
            d.flat_index = self._has_table(self._conn, "flat")
            d.unit_metadata = self._has_unit_metadata(self._conn)
            d.unit_packed = self._has_column(self._conn, "units", "packed")
            # a file written before <prefix>_members existed: HAS stays residual until opened writable
            d.members_index = d.flat_index and self._has_table(self._conn, "members")
            self._find_entities(self._conn)
            # (and one written before the documents' integer keys: the semi-joins match doc_id)
            d.doc_keys = not self._doc_keys_missing(self._conn)
            # (and one written before the strings' checksums: string equality compares the strings only)
            d.flat_keys = d.flat_index and self._has_column(self._conn, "flat", "hkey")
            return
        with self._tx() as conn:
            self._run(conn, d.key_value_table("meta"))
            self._run(conn, d.key_value_table("info"))
            self._run(conn, sql("INSERT INTO ", d.table("meta"), " (key, value) VALUES ('dim', ",
                                Param(str(dim), "text"), "), ('schema', ", Param(SCHEMA_VERSION, "text"),
                                # (max_seq's record from the start: only a delete changes it, see max_seq)
                                "), ('max_seq', '0') ON CONFLICT (key) DO NOTHING"))
            self._check_dim(dim)
            for statement in d.schema(dim):
                self._run(conn, statement)
            filled = self._add_columns(conn)
            if not self._run(conn, sql("SELECT count(*) FROM ", d.stats)).fetchone()[0]:
                self._run(conn, sql("INSERT INTO ", d.stats, " VALUES (0, 0)"))
            self._sync_terms(conn)
            self._open_entities(conn)
            self._open_flat(conn)
            if "metadata" in filled:  # a store written before the column
                self._run(conn, d.fill_unit_metadata())
            d.unit_metadata = True
            if "packed" in filled:  # (after the metadata, which it packs)
                self._run(conn, d.fill_unit_packed())
            d.unit_packed = True
            self._open_members(conn)
            self._open_doc_keys(conn)
            self._open_flat_keys(conn)  # (after dkey: a table rewritten by _cluster keeps its columns' order)
            if self._private:
                self._ids = {r[0] for r in self._run(conn, sql("SELECT doc_id FROM ", d.docs)).fetchall()}

    def _add_columns(self, conn: Any) -> set[str]:
        """Add every column a store written before it lacks, before any row is written in the opening
        transaction (DuckDB 1.5 refuses to commit one that alters a table after updating it: a store
        that lacked two of them could not be opened there). Returns the ``<prefix>_units`` columns added,
        which ``_open`` fills; the documents' keys and the strings' checksums are filled where they are
        NULL (:meth:`_open_doc_keys`, :meth:`_open_flat_keys`)."""
        d = self.dialect
        added = set()
        if not self._has_unit_metadata(conn):
            self._run(conn, d.unit_metadata_column())
            added.add("metadata")
        if not self._has_column(conn, "units", "packed"):  # (after the metadata, as the table was made)
            self._run(conn, d.unit_packed_column())
            added.add("packed")
        for statement in d.doc_key_columns(self._doc_keys_missing(conn)):
            self._run(conn, statement)
        if self._has_table(conn, "flat") and not self._has_column(conn, "flat", "hkey"):  # (after dkey)
            self._run(conn, d.flat_key_column())
        return added

    def _has_table(self, conn: Any, suffix: str) -> bool:
        return bool(conn.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = $1",
                                 [f"{self.table_prefix}_{suffix}"]).fetchone()[0])

    def _has_column(self, conn: Any, suffix: str, column: str) -> bool:
        return bool(conn.execute("SELECT count(*) FROM duckdb_columns() WHERE table_name = $1 AND column_name = $2",
                                 [f"{self.table_prefix}_{suffix}", column]).fetchone()[0])

    def _has_unit_metadata(self, conn: Any) -> bool:
        return self._has_column(conn, "units", "metadata")

    def _doc_keys_missing(self, conn: Any) -> list[str]:
        """The tables (of those that exist) without the documents' integer key ``dkey``."""
        return [t for t in self.dialect.DOC_KEY_TABLES
                if self._has_table(conn, t) and not self._has_column(conn, t, "dkey")]

    def _open_doc_keys(self, conn: Any) -> None:
        """Give every document an integer key (``dkey``, from the key sequence) in ``<prefix>_units``,
        ``_flat`` and ``_members``, which the metadata semi-joins match on
        (:attr:`DuckDBDialect.doc_column`): for a store written before the column, and for the rows of a
        table ``open`` has just rebuilt (a document keeps the key its sentences have)."""
        d = self.dialect  # (the columns: _add_columns)
        unkeyed = sum(int(self._run(conn, sql("SELECT count(*) FROM ", d.table(t), " WHERE dkey IS NULL")).fetchone()[0])
                      for t in d.DOC_KEY_TABLES)
        if unkeyed:
            pa = import_arrow()
            pairs = self._run(conn, sql("SELECT d.doc_id, u.dkey FROM ", d.docs, " d LEFT JOIN (SELECT doc_id, "
                                        "max(dkey) AS dkey FROM ", d.units, " GROUP BY doc_id) u ON u.doc_id = d.doc_id"
                                        )).fetchall()
            fresh = iter(self._next_keys(conn, sum(k is None for _, k in pairs)))
            table = pa.table({"doc_id": pa.array([i for i, _ in pairs], type=pa.string()),
                              "dkey": pa.array([next(fresh) if k is None else k for _, k in pairs], type=pa.int64())})
            with registered(conn, table) as name:
                for t in d.DOC_KEY_TABLES:
                    self._run(conn, sql("UPDATE ", d.table(t), f" SET dkey = x.dkey FROM \"{name}\" x WHERE ",
                                        d.table(t), ".doc_id = x.doc_id AND ", d.table(t), ".dkey IS NULL"))
        d.doc_keys = True

    def _next_keys(self, conn: Any, n: int) -> list[int]:
        """``n`` new keys from the key sequence, ascending."""
        return self._key_block(conn, n).tolist()

    def _key_block(self, conn: Any, n: int) -> np.ndarray:
        """``n`` new keys from the key sequence, ascending, as int64. In an in-memory database of the
        store's own (no other connection takes keys), the sequence is asked once and the store counts on
        from there itself (the statement cost a batch ~0.7 ms; keys a failed write took are skipped, as
        the sequence skips them)."""
        if n <= 0:
            return np.zeros(0, dtype=np.int64)
        if self._next_key is not None:  # (set in a private database only, below)
            first, self._next_key = self._next_key, self._next_key + n
            return np.arange(first, first + n, dtype=np.int64)
        seq = Param(f"{self.table_prefix}_keys", "text")
        got = self._run(conn, sql("SELECT nextval(", seq, ") AS k FROM range(", Param(int(n), "bigint"), ")")).fetchnumpy()
        keys = np.sort(np.asarray(got["k"], dtype=np.int64))
        if self._private:
            self._next_key = int(keys[-1]) + 1
        return keys

    def _open_flat(self, conn: Any) -> None:
        """``<prefix>_flat`` (each document's typed metadata, one row per path), which pushed metadata
        equality and IN read (``DuckDBDialect.indexed_leaf``); built once for a store written before it."""
        d = self.dialect
        existed = self._has_table(conn, "flat")
        for statement in d.flat_table():
            self._run(conn, statement)
        if not existed:
            self._run(conn, d.fill_flat())
        d.flat_index = True

    def _open_flat_keys(self, conn: Any) -> None:
        """Give every ``<prefix>_flat`` row with a string its checksum (``hkey``,
        :func:`~nlql.sql.codec.string_key`), which string equality compares first
        (:meth:`DuckDBDialect.indexed_leaf`): for a store written before the column, and for the rows of
        a table ``open`` has just rebuilt (computed once per distinct path and string)."""
        d = self.dialect  # (the column: _add_columns)
        pairs = self._run(conn, sql("SELECT DISTINCT path, s FROM ", d.table("flat"),
                                    " WHERE hkey IS NULL AND s IS NOT NULL")).fetchall()
        if pairs:
            pa = import_arrow()
            table = pa.table({"path": pa.array([p for p, _ in pairs], type=pa.string()),
                              "s": pa.array([v for _, v in pairs], type=pa.string()),
                              "hkey": pa.array([string_key(p, v) for p, v in pairs], type=pa.int64())})
            flat = d.table("flat")
            with registered(conn, table) as name:
                self._run(conn, sql("UPDATE ", flat, f" SET hkey = x.hkey FROM \"{name}\" x WHERE ", flat,
                                    ".path = x.path AND ", flat, ".s = x.s AND ", flat, ".hkey IS NULL"))
        d.flat_keys = True

    def _open_members(self, conn: Any) -> None:
        """``<prefix>_members`` (each list value's marker and member records), which pushed HAS reads
        (``DuckDBDialect.list_members``); built once, from the stored metadata, for a store written before."""
        d = self.dialect
        existed = self._has_table(conn, "members")
        for statement in d.members_table():
            self._run(conn, statement)
        if not existed:
            esc = d.codec.escape
            mc: dict[str, list[Any]] = {k: [] for k in ("doc_id", "path", "s", "f", "n", "t", "b")}
            for doc_id, text in self._run(conn, sql("SELECT doc_id, metadata FROM ", d.docs,
                                                    " WHERE metadata LIKE '%[%'")).fetchall():
                _member_rows(mc, doc_id, list_members(json.loads(text), esc))
            self._load_members(conn, mc)
        d.members_index = True

    def _load_members(self, conn: Any, mc: dict[str, list[Any]], dkeys: dict[str, int] | None = None) -> None:
        """Insert ``<prefix>_members`` rows, with their documents' ``dkeys`` (None: filled by ``open``)."""
        if not mc["doc_id"]:
            return
        pa = import_arrow()
        s = pa.string()
        cols = {**mc, "dkey": [None] * len(mc["doc_id"]) if dkeys is None else [dkeys[i] for i in mc["doc_id"]]}
        table = arrow_table(cols, {"doc_id": s, "path": s, "s": s, "f": s, "n": pa.float64(), "t": pa.int64(),
                                   "b": pa.bool_(), "dkey": pa.int64()})
        with registered(conn, table) as name:
            self._run(conn, self.dialect.bulk_load("members", ["doc_id", "path", "s", "f", "n", "t", "b", "dkey"],
                                                   name) + f" ORDER BY {self.dialect.CLUSTERED['members']}")

    def _check_dim(self, dim: int) -> None:
        d = self.dialect
        stored = int(self._run(self._conn, d.get_meta("meta", "dim")).fetchone()[0])
        if stored != dim:
            raise BackendError("duckdb", f"table {self.table_prefix}_units holds {stored}-dimensional vectors, "
                                         f"the embedder gives {dim}",
                               hint="use the embedder the data was built with, or another table_prefix")

    # ------------------------------------------------------------------------------ BM25 terms

    def _sync_terms(self, conn: Any) -> None:
        """Rebuild the term table when it was written by another analyzer (inside ``open``'s transaction)."""
        d = self.dialect
        config = self._analyzer_config()
        row = self._run(conn, d.get_meta("meta", "analyzer")).fetchone()
        if row is not None and row[0] == config:
            return
        units = self._run(conn, sql("SELECT key, content FROM ", d.units)).fetchall()
        keys, terms, tfs, lens = [], [], [], []
        total = 0
        for key, content in units:
            n, counted = self._terms_of(d.codec.unescape(content))
            lens.append((key, n))
            total += n
            for term, tf in counted:
                keys.append(key)
                terms.append(term)
                tfs.append(tf)
        pa = import_arrow()
        self._run(conn, sql("DELETE FROM ", d.terms))
        if keys:
            tbl = arrow_table({"term": terms, "key": keys, "tf": tfs},
                              {"term": pa.string(), "key": pa.int64(), "tf": pa.int32()})
            with registered(conn, tbl) as name:
                self._run(conn, d.bulk_load("terms", ["term", "key", "tf"], name))
        if lens:
            tbl = arrow_table({"key": [k for k, _ in lens], "n": [n for _, n in lens]},
                              {"key": pa.int64(), "n": pa.int32()})
            with registered(conn, tbl) as name:
                self._run(conn, sql("UPDATE ", d.units, f" SET nterms = x.n FROM \"{name}\" x WHERE ",
                                    d.units, ".key = x.key"))
        self._run(conn, sql("UPDATE ", d.stats, " SET n = ", Param(len(units), "bigint"), ", total_len = ",
                            Param(total, "bigint")))
        self._run(conn, d.put_meta("meta", "analyzer", config))

    # ---------------------------------------------------------------------------------- writing

    def upsert(self, docs: Sequence[DocRecord]) -> None:
        """Replace (or insert) whole documents in one transaction; the last of duplicate ids wins. The
        engine's :class:`~nlql.stores.batch.DocBatch` is read as columns (``DOC_BATCHES``)."""
        self.write_prepared(self.prepare_write(docs))

    def prepare_write(self, docs: Sequence[DocRecord]) -> _PreparedWrite | None:
        """:meth:`upsert`'s rows as the Arrow tables its statements load, made without the database
        (``WRITES_AHEAD``: the engine prepares its next batch here while this one is written); None for
        no document."""
        self._need_open()
        self._check_writable()
        docs = latest_per_id(docs)
        if not len(docs):
            return None
        # the end of a write: an engine's batch says whether more of its add_texts call follows (the
        # tables are sorted once after the last batch, not after every batch that grew them enough)
        last = not isinstance(docs, DocBatch) or docs.rows_ahead <= len(docs.contents)
        return _PreparedWrite(self._prepare(docs), last)

    def write_prepared(self, prepared: _PreparedWrite | None) -> None:
        """Write what :meth:`prepare_write` made, in one transaction (the second half of :meth:`upsert`)."""
        if prepared is None:
            return
        tables, last = prepared
        try:
            # (a call of one batch leaves the threads as they are: setting and resetting them costs more
            # than the one thread saves on so small a write)
            self._guard(lambda: self._write(*tables, one_thread=self._single or not last), writing=True)
            if last:
                self._guard(self._finish, writing=True)
        except BaseException:
            with self._lock, suppress(self._duck.Error):  # (the write's own error is the one to see)
                self._all_threads()
            raise
        if last:
            self._guard(self._all_threads, writing=True)

    def _prepare(self, docs: Sequence[DocRecord]) -> tuple[list[str], Any, Any, Any, int, int, Any, Any, Any]:
        """(escaped ids, Arrow docs and units tables, the counted term rows (:meth:`_term_rows`),
        sentences added, terms added, entity link rows, the typed metadata rows (:meth:`_flat_rows`),
        the list members' columns), from one pass over the batch (:func:`nlql.sql.ingest.prepare`; an
        engine's batch as the columns it is)."""
        pa = import_arrow()
        import pyarrow.compute as pc

        codec = self.dialect.codec
        assert self.dim is not None
        batch = cast(DocBatch, docs) if is_columnar(docs) else None
        s, i64, i32, f64 = pa.string(), pa.int64(), pa.int32(), pa.float64()
        # (an ASCII batch's sentences as one Arrow column, the units' content unless escaping rewrote one)
        sentences: list[str] = batch.contents if batch is not None else []
        contents = pa.array(sentences, type=s) if batch is not None and "".join(sentences).isascii() else None
        # the batch's term rows counted in Arrow (nlql.stores.duckdb.terms: its ASCII sentences' words found
        # there), written with the escape the sentences take
        counted = (term_rows(self.analyzer, sentences, codec.escape if codec.escaped else None)
                   if self.bm25 and batch is not None else None)

        def shadows_of(strings: list[str], esc: Callable[[str], str]) -> tuple[Any, Any, Any]:
            # (plain ASCII ids and sentences: in Arrow, nlql.stores.duckdb.shadows)
            arr = contents if contents is not None and strings == sentences else None
            got = ascii_shadows(strings, arr, None if esc is verbatim else esc)
            return got if got is not None else shadows(strings, esc)

        p = prepare(docs, self.dim, codec.escape if codec.escaped else None,
                    self.analyzer if self.bm25 and counted is None else None, columns=batch, shadows_of=shadows_of)
        if counted is not None:
            p.nterms = counted[1].tolist()
        ids_arr = pa.array(p.doc_ids, type=s)
        flat_t, mflat = self._flat_rows(p, ids_arr)
        docs_t = pa.table({"doc_id": ids_arr, "seq": pa.array(p.seqs, type=i64), "text": pa.array(p.texts, type=s),
                           "metadata": pa.array(p.metadata, type=s), "mflat": mflat,
                           "fold": _column(p.folds, s), "num": _column(p.nums, f64),
                           "ts": _column(p.stamps, i64)})
        unit_owner = pa.array(p.unit_doc)
        ucols: dict[str, Any] = {
            "doc_id": ids_arr.take(unit_owner), "position": pa.array(p.positions, type=i32),
            # (the batch's own column unless escaping rewrote a sentence: list equality tests identity first)
            "content": contents if contents is not None and p.contents == sentences else pa.array(p.contents, type=s),
            "start": pa.array(p.starts, type=i32),
            "end": pa.array(p.ends, type=i32), "tail": pa.array(p.tails, type=s),
            "seq": docs_t.column("seq").take(unit_owner), "fold": _column(p.unit_folds, s),
            "num": _column(p.unit_nums, f64), "ts": _column(p.unit_stamps, i64),
            "nterms": pa.array(p.nterms, type=i32), "metadata": docs_t.column("metadata").take(unit_owner),
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(p.vectors.ravel()), self.dim),
            "doc_row": unit_owner}  # (each unit's document in the batch: _write gives it the document's dkey)
        # each row's fields in one text (DuckDBDialect.PACKED), which a filtered knn reads (_small_knn)
        ucols["packed"] = pc.binary_join_element_wise(
            *(ucols[c] if c not in ("start", "end") else pc.cast(ucols[c], s) for c in self.dialect.PACKED),
            self.dialect.PACK_SEPARATOR)
        units_t = pa.table(ucols)
        terms_t = counted[0] if counted is not None else self._term_rows(p)
        mc: dict[str, list[Any]] = {k: [] for k in ("doc_id", "path", "s", "f", "n", "t", "b")}
        for doc_id, members in zip(p.doc_ids, p.members, strict=True):
            if members:
                _member_rows(mc, doc_id, members)
        # the entity links, as (doc_id, position, entity, name) rows
        ents_t = self._link_rows(docs) if batch is None else self._batch_link_rows(batch, p.doc_ids, p.unit_doc)
        return p.doc_ids, docs_t, units_t, terms_t, units_t.num_rows, p.total_terms, ents_t, flat_t, mc

    @staticmethod
    def _term_rows(p: Prepared) -> Any:
        """The batch's ``<prefix>_terms`` rows, counted: per sentence (``unit``, its row in the batch;
        ``_write`` gives it its key) and distinct term, the term's frequency ``tf``, in the table's order
        (term, then sentence), from one sort of integer codes (each term's rank among the batch's
        distinct terms, in the binary order DuckDB compares text in, times the sentences plus the
        sentence); None when the store keeps no BM25."""
        if p.term_list is None:
            return None
        pa = import_arrow()
        n_units = len(p.nterms)
        coded = pa.array(p.term_list, type=pa.string()).dictionary_encode()
        unit = np.repeat(np.arange(n_units, dtype=np.int64), np.asarray(p.nterms, dtype=np.int64))
        return count_rows(coded.dictionary, coded.indices.to_numpy(zero_copy_only=False).astype(np.int64), unit,
                          n_units)

    def _flat_rows(self, p: Prepared, ids: Any) -> tuple[Any, Any]:
        """The ``<prefix>_flat`` rows of a prepared batch as an Arrow table, in the table's order
        (``DuckDBDialect.CLUSTERED['flat']``: path, s, n, t, nulls last), and the documents' ``mflat``
        MAP column. A row is, per document (``doc_row``, its row in the batch; ``doc_id``) and metadata
        path, the typed record's fields ``s f n t b`` (the batch's distinct records built once and taken
        by index; the rows put in order by ranking those records, not by sorting the rows). ``_write``
        adds the documents' ``dkey``; the columns after ``doc_row`` are the table's own
        (``DuckDBDialect.COLUMNS['flat']``)."""
        pa = import_arrow()
        import pyarrow.compute as pc

        rtype = record_type()
        paths, cols = p.pair_columns()
        index_np = np.asarray(p.flat_index, dtype=np.int64)
        owner_np = np.repeat(np.arange(len(p.doc_ids), dtype=np.int64), np.asarray(p.flat_counts, dtype=np.int64))
        pairs = pa.table({"path": pa.array(paths, type=pa.string()),
                          **{k: pa.array(c, type=rtype.field(k).type) for k, c in zip("sfntb", cols, strict=True)}})
        # the documents' MAP: their records in document order
        offsets = pa.array(np.concatenate([[0], np.cumsum(p.flat_counts, dtype=np.int64)]).astype(np.int32),
                           type=pa.int32())
        index = pa.array(index_np)
        items = pa.StructArray.from_arrays([pairs.column(k).combine_chunks().take(index) for k in "sfntb"],
                                           fields=list(rtype))
        mflat = pa.MapArray.from_arrays(offsets, pairs.column("path").combine_chunks().take(index), items)
        # the rows in the table's order: each distinct record's rank (ties keep the documents' order)
        # (Arrow's default puts nulls last, as DuckDB's ORDER BY does; both compare strings byte by byte)
        ranked = pc.sort_indices(pairs, sort_keys=[(c.strip(), "ascending") for c in
                                                   self.dialect.CLUSTERED["flat"].split(",")])
        rank = np.empty(len(paths), dtype=np.int64)
        rank[np.asarray(ranked)] = np.arange(len(paths), dtype=np.int64)
        order = np.argsort(rank[index_np], kind="stable")
        index, owner = pa.array(index_np[order]), pa.array(owner_np[order])
        # each distinct record's string checksum (codec.string_key), NULL without a string
        hkeys = pa.array([None if v is None else string_key(path, v) for path, v in zip(paths, cols[0], strict=True)],
                         type=pa.int64())
        flat_t = pa.table({"doc_id": ids.take(owner), "path": pairs.column("path").take(index),
                           **{k: pairs.column(k).take(index) for k in "sfntb"}, "doc_row": owner,
                           "hkey": hkeys.take(index)})
        return flat_t, mflat

    def _write(self, ids: list[str], docs_t: Any, units_t: Any, terms_t: Any, added_n: int, added_len: int,
               ents_t: Any = None, flat_t: Any = None, members: dict[str, list[Any]] | None = None, *,
               one_thread: bool = True) -> None:
        d = self.dialect
        pa = import_arrow()
        import pyarrow.compute as pc

        known = self._seq_now()
        batch_max = int(pc.max(docs_t.column("seq")).as_py())
        # (the documents' table registered once: the ids looked up, then its rows loaded)
        with self._one_thread(one_thread), self._tx() as conn, registered(conn, docs_t) as doc_src:
            if self._ids is not None:  # (nothing but this store writes its database)
                stored = not self._ids.isdisjoint(ids)
                # (before the commit: should the write fail, an id kept here only makes a later write
                # look for rows to replace, of which it finds none)
                self._ids.update(ids)
            else:
                stored = self._run(conn, sql("SELECT count(*) FROM ", d.docs, f" WHERE doc_id IN (SELECT doc_id "
                                             f"FROM \"{doc_src}\")")).fetchall()[0][0]
            if stored:  # replacing documents: their old rows go first (a batch of new ids has none to find)
                self._run(conn, sql("DELETE FROM ", d.table("flat"), " WHERE ",
                                    d.in_array("doc_id", Param(ids, "text[]"))))
                self._run(conn, sql("DELETE FROM ", d.table("members"), " WHERE ",
                                    d.in_array("doc_id", Param(ids, "text[]"))))
                self._forget_entities(conn, ids)
                for statement in d.forget_terms(ids):
                    self._run(conn, statement)
                self._run(conn, d.keep_max_seq(ids))
                for statement in d.delete_documents(ids):
                    self._run(conn, statement)
            # the keys first (in order): the documents' (dkey), then the units' (so that the term rows
            # take theirs without a join on the table)
            n_docs = docs_t.num_rows
            keys = self._key_block(conn, n_docs + units_t.num_rows)
            dkeys = pa.array(keys[:n_docs])
            if members:
                self._load_members(conn, members, dict(zip(ids, keys[:n_docs].tolist(), strict=True)))
            if flat_t is not None and flat_t.num_rows:
                flat_t = flat_t.append_column("dkey", dkeys.take(flat_t.column("doc_row")))
                with registered(conn, flat_t) as name:
                    # (in the table's order already: _flat_rows)
                    self._run(conn, d.bulk_load("flat", ["doc_id", "path", "s", "f", "n", "t", "b", "dkey", "hkey"],
                                                name))
            if ents_t is not None and len(ents_t):
                self._add_links(conn, ents_t)
            self._run(conn, d.bulk_load("docs", ["doc_id", "seq", "text", "metadata", "mflat", "fold", "num", "ts"],
                                        doc_src))
            if units_t.num_rows:
                units_t = units_t.append_column("key", pa.array(keys[n_docs:]))
                units_t = units_t.append_column("dkey", dkeys.take(units_t.column("doc_row")))
                cols = ["key", "doc_id", "position", "content", "start", "end", "tail", "seq", "fold", "num", "ts",
                        "embedding", "nterms", "metadata", "dkey", "packed"]
                with registered(conn, units_t) as name:
                    self._run(conn, d.bulk_load("units", cols, name))
                if terms_t is not None and terms_t.num_rows:
                    unit_keys = pa.array(keys[n_docs:])
                    rows = pa.table({"term": terms_t.column("term"), "key": unit_keys.take(terms_t.column("unit")),
                                     "tf": terms_t.column("tf")})
                    with registered(conn, rows) as name:
                        self._run(conn, d.bulk_load("terms", ["term", "key", "tf"], name))
            self._run(conn, d.add_term_stats(added_n, added_len))
        if known is not None:  # (the documents' largest seq and the kept one: both at most the larger of these)
            self._seq_known = (self._generation, max(known, batch_max))

    def _finish(self) -> None:
        """After the last write of a call: the sorted tables kept sorted (:meth:`_cluster`), in a
        transaction of its own (in the write's, DuckDB splits the units' row groups), on the database's
        threads again: DuckDB sorts in parallel (at 100k, the 950k postings and 400k metadata rows of
        bench/duckdb_ingest.py's ingest: 0.13 s against 0.21 s on one thread, four alternations)."""
        self._all_threads()
        known = self._seq_now()
        with self._tx() as conn:
            self._cluster(conn)
        if known is not None:  # (sorting moves no seq: the value known after the write stays true)
            self._seq_known = (self._generation, known)

    @contextmanager
    def _one_thread(self, hold: bool = True) -> Iterator[None]:
        """A write's statements on one DuckDB thread, in the in-memory database this store created (no
        other store shares it: the setting is the database's). DuckDB's second thread saved no time on
        the bulk inserts and cost CPU: at 100k (bench/duckdb_ingest.py's ingest, three alternations each,
        median) 2.64 s wall / 2.70 s CPU against 2.79 / 2.88 s at load 1.5, 2.55 against 2.76 s wall at
        load 2.5, where the core it takes is another process's.

        The setting is held from the first batch of an engine's call to its last (:meth:`upsert` gives
        the threads back after the last batch or a failed one, :meth:`_guard` before any other
        operation), not set and reset around every batch: changing it costs DuckDB a few milliseconds
        each time (two per batch: ~0.07 s of a 100k ingest of 13 batches). A call of one batch (``hold``
        False: an ``add_text``) leaves it alone: the two changes would cost more than they save."""
        if hold and self._private and not self._single:
            self._conn.execute("SET threads = 1")
            self._single = True
        yield

    def _all_threads(self) -> None:
        """The database's threads given back after a call's writes (under the lock)."""
        if self._single:
            self._single = False
            self._conn.execute("RESET threads")

    def _cluster(self, conn: Any) -> None:
        """Keep the term and metadata tables sorted by what statements look up (``DuckDBDialect.CLUSTERED``):
        a table is rewritten in order once it holds ``CLUSTER_GROWTH[table]`` times the rows it held when
        last sorted, so that the rows written since are a minority and the sorting costs a small constant
        times the rows written (a BM25 term or a 0.1% metadata value then reads a few row groups).

        The term table's factor is 1.1: at 100k sentences (bench/duckdb_floor.py, ingested in batches of
        8,192) BM25 took 1.62x DuckDB's own statement over fully sorted postings with 26% of them
        unsorted (factor 1.5), 1.25x sorted; a sort of its 950k postings took ~50 ms on a quiet machine,
        and the ingest's sorting of all three tables 1.58 s against 0.73 s at load 4 (one run each)."""
        d = self.dialect
        suffixes = list(d.CLUSTERED)
        # each table's rows and the rows it held when last sorted, in one statement (it runs after every
        # call: six small statements cost an add_text ~3 ms)
        sizes = join(", ", [sql("(SELECT count(*) FROM ", d.table(suffix), ")") for suffix in suffixes] +
                     [sql("(", d.get_meta("meta", f"sorted_rows:{suffix}"), ")") for suffix in suffixes])
        got = self._run(conn, sql("SELECT ", sizes)).fetchone()
        for i, suffix in enumerate(suffixes):
            n, sorted_rows = int(got[i]), got[len(suffixes) + i]
            if n < self.CLUSTER_MIN_ROWS or n <= (int(sorted_rows) if sorted_rows else 0) * self.CLUSTER_GROWTH[suffix]:
                continue
            for statement in d.cluster(suffix):
                self._run(conn, statement)
            self._run(conn, d.put_meta("meta", f"sorted_rows:{suffix}", str(n)))

    def delete(self, doc_ids: Sequence[str]) -> int:
        """Delete documents (and their sentences); returns how many documents existed."""
        self._need_open()
        self._check_writable()
        ids = [self.dialect.codec.escape(x) for x in dict.fromkeys(doc_ids)]
        if not ids:
            return 0

        def run() -> int:
            with self._tx() as conn:
                self._forget_entities(conn, ids)
                for table in ("flat", "members"):
                    self._run(conn, sql("DELETE FROM ", self.dialect.table(table), " WHERE ",
                                        self.dialect.in_array("doc_id", Param(ids, "text[]"))))
                for statement in self.dialect.forget_terms(ids):
                    self._run(conn, statement)
                self._run(conn, self.dialect.keep_max_seq(ids))
                n = 0
                for statement in self.dialect.delete_documents(ids):
                    n = int(self._run(conn, statement).fetchone()[0])
            if self._ids is not None:  # (after the commit: an id left here by a failed delete is harmless)
                self._ids.difference_update(ids)
            return n

        return self._guard(run)

    # ------------------------------------------------------------------------------ info record

    def get_info(self, key: str) -> str | None:
        """A value this store keeps for its users beside the data (e.g. the embedder that built it); before
        :meth:`open` too (None when no store is there yet: the engine reads which embedder built a store
        before it chooses the default one)."""
        key = _info_key(key)
        if self._external is not None:
            return self._external.info.get(key)

        def run() -> str | None:
            if self.dim is None and not self._has_table(self._conn, "info"):
                return None  # not opened, and no store here yet
            row = self._run(self._conn, self.dialect.get_meta("info", key)).fetchone()
            return None if row is None else self.dialect.codec.unescape(row[0])

        return self._guard(run)

    def set_info(self, key: str, value: str) -> None:
        """Record ``value`` under ``key`` (replacing it), committed at once. On a table read in place the
        record lives as long as the store (the source is never written)."""
        self._need_open()
        key = _info_key(key)
        if not isinstance(value, str):
            raise TypeError(f"set_info takes a string value, not {type(value).__name__}")
        if self._external is not None:
            self._external.info[key] = value
            return
        self._check_writable()

        def run() -> None:
            with self._tx() as conn:
                self._run(conn, self.dialect.put_meta("info", key, self.dialect.codec.escape(value)))

        self._guard(run)

    # ---------------------------------------------------------------------------------- reading

    def count(self) -> int:
        """Number of stored sentences."""
        self._need_open()
        return self._guard(lambda: int(self._run(self._conn, sql("SELECT count(*) FROM ", self.dialect.units))
                                       .fetchone()[0]))

    def max_seq(self) -> int:
        """Largest ``seq`` ever written (0 when nothing was); deleting a document does not lower it: the
        larger of the documents' largest ``seq`` and the one ``<prefix>_meta`` records, which a write
        updates only when documents go (:meth:`delete`, a replacement in :meth:`_write`), not every batch
        (the statement cost a batch ~2 ms of its ~14).

        In an in-memory database of the store's own (nothing else writes to it), the value read or
        written since the last transaction is given again without a statement: the engine asks before
        every batch of a write, and a batch's write knows the value it leaves (:meth:`_write`)."""
        self._need_open()
        if self._external is not None:
            return self._external.max_seq
        known = self._seq_now()
        if known is not None:
            return known
        d = self.dialect

        def run() -> tuple[int, int]:
            got = int(self._run(self._conn, sql(
                "SELECT greatest((SELECT max(seq) FROM ", d.docs, "), "
                "(SELECT value::BIGINT FROM ", d.table("meta"), " WHERE key = 'max_seq'), 0)")).fetchone()[0])
            return self._generation, got

        generation, value = self._guard(run)
        if self._private:
            self._seq_known = (generation, value)
        return value

    def _seq_now(self) -> int | None:
        """The largest ``seq`` as this store last read or wrote it, if no transaction has run since."""
        known = self._seq_known
        return known[1] if known is not None and known[0] == self._generation else None

    @property
    def _private(self) -> bool:
        """Whether the database is an in-memory one this store created: no other connection writes to it."""
        return self._own_conn and self.path is None

    def knn(self, vectors: np.ndarray, k: int, flt: NativeFilter | None = None,
            min_score: float | None = None) -> list[list[tuple[Any, float]]]:
        """Per query vector, the exact top ``k`` (key, cosine similarity), best first; ties on
        (seq, position). DuckDB has no vector index without an extension: every knn is an exact scan.
        Under a filter passing at most :attr:`SMALL_ROWS` rows of NLQL's own tables, the rows are read
        and ranked in numpy (:meth:`_small_knn`); otherwise the ranking is one DuckDB statement."""
        self._need_open()
        q = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if k <= 0 or len(q) == 0:
            self.last_stats = {"path": "none", "rounds": 0, "queries": len(q)}
            return [[] for _ in range(len(q))]
        if q.shape[1] != self.dim:
            raise ValueError(f"query vectors have dimension {q.shape[1]}, the store {self.dim}")
        d = self.dialect
        if flt is not None and self._external is None and d.unit_metadata:
            small = self._small_knn(q, k, flt, min_score)
            if small is not None:
                return small
        score = SimilarityScore("q", 1, "query")
        dist = d.distance_expr(score)
        cond = sql("TRUE") if min_score is None else sql("1 - c.dist >= ", Param(float(min_score), "float8"))
        # NLQL's own tables: the statement also reads each hit's row and vector, which the engine asks
        # for next (fetch, similarities): one statement instead of three (a table read in place: keys
        # only). Unfiltered, the ranking carries them (DuckDB's top-n reads them for the k winners
        # only); under a filter the top k are ranked on the key columns and joined to the rest after, so
        # that a filter passing many rows does not carry their text through the join and the ranking.
        payload = self._external is None
        own = payload and d.unit_metadata  # the metadata text kept beside each unit: no documents join
        carried = payload and flt is None
        r = "c" if carried else "r"
        meta = f"{r}.metadata" if own else d.cast("m.metadata", "text")
        inner = (", u.doc_id, u.content, u.start, u.\"end\", u.tail, u.embedding" + (", u.metadata" if own else "")
                 if carried else ", u.rowid AS rid" if payload else "")
        out_cols = (f", {r}.doc_id, {r}.position, {r}.content, {r}.seq, {r}.start, {r}.\"end\", {r}.tail, "
                    f"{meta} AS metadata, {r}.embedding") if payload else ""
        # (the k winners' rows found again by their row ids: the 0.1% filter at 100k 0.3 ms faster than by key)
        joins = sql(" JOIN ", d.units, " r ON r.rowid = c.rid") if payload and not carried else sql("")
        if payload and not own:
            joins = sql(joins, " LEFT JOIN ", d.docs, f" m ON m.doc_id = {r}.doc_id")
        # with the rows and vectors, the k winners are scored again and put in order in numpy (_ranked), not by
        # a sort in the statement (the 0.1% filter at 100k: 0.6 ms of 6.2)
        order = "" if payload else " ORDER BY c.dist, c.seq, c.position, c.key"
        query = sql(f"SELECT c.key, 1 - c.dist AS score{out_cols} FROM (SELECT u.key, u.seq, u.position{inner}, ",
                    dist, " AS dist ", self._from(flt), " ORDER BY dist, u.seq, u.position, u.key LIMIT ",
                    Param(int(k), "bigint"), ") c", joins, " WHERE ", cond, order)
        text, values = render(d, query)
        slot = score.vector_key(0)

        def run() -> list[list[tuple[Any, float]]]:
            out = []
            seen: dict[int, tuple[Any, ...]] = {}
            statement = self._statement(text)
            for vec in q:
                params = [vec if isinstance(v, Slot) and v.key == slot else v for v in values]
                if not payload:
                    out.append([(int(r[0]), float(r[1])) for r in self._conn.execute(statement, params).fetchall()])
                    continue
                cols = self._conn.execute(statement, params).fetchnumpy()  # (the vectors as float32 arrays)
                best, scores = _ranked(vec, cols, k, min_score)
                keys = np.asarray(cols["key"], dtype=np.int64)[best].tolist()
                out.append(list(zip(keys, scores[best].tolist(), strict=True)))
                self._remember(seen, keys, cols, best.tolist())
            if payload:
                self._seen.rows = (self._generation, seen)
            return out

        results = self._guard(run)
        self.last_stats = {"path": "exact", "rounds": 1, "queries": len(q), "k": k}
        return results

    def _small_knn(self, q: np.ndarray, k: int, flt: NativeFilter,
                   min_score: float | None) -> list[list[tuple[Any, float]]] | None:
        """:meth:`knn` under a selective filter: one statement reads every passing row (its fields and
        vector, no ranking, up to :attr:`SMALL_ROWS` + 1 rows), and numpy scores them as the built-in
        store does (:func:`~nlql.kernels.score_rows`: float32 products, rounded) and ranks them by
        (score desc, seq, position, key). None when more rows pass (the caller ranks in SQL), and then
        for the same filter until the next write, without reading again.

        The statement holds no vector, no sort and one scan of the sentences, where the ranking in SQL
        scans them twice (the ranking on the key columns, then the winners' rows found again by row
        id): at 100k sentences a 0.1% metadata filter's statement took 5.3 ms of CPU against 7.4 ms, with
        DuckDB's caches cold from another query (``bench/duckdb_small_filter.py``). The rows' fields come
        from one column (``<p>_units.packed``, :attr:`DuckDBDialect.PACKED`) where the store keeps it: a
        column read for scattered rows costs DuckDB a scan of nearly every vector of 2,048 rows, so the
        six separate ones cost 1.2-1.4 ms of a 4.7 ms statement and the packed one 0.2 ms
        (``bench/duckdb_floor_before_after.py``). Above :attr:`SMALL_ROWS` the read stops at the first
        row too many."""
        d = self.dialect
        cap = self.SMALL_ROWS
        if cap <= 0:
            return None
        made = self._probes.get(id(flt))  # (rendered once per compiled filter: a cached plan brings it back)
        if made is None or made[0] is not flt or made[1] != cap:
            # (the fields packed in one column where the store keeps it: a column read for the rows a 0.1%
            # filter passes costs a scan of ~40 of the 49 vectors of 2,048 rows at 100k; six of them
            # 1.2-1.4 ms CPU of a 4.7 ms statement, the packed one 0.2 ms)
            fields = ("u.packed" if d.unit_packed else
                      'u.doc_id, u.content, u.start, u."end", u.tail, u.metadata')
            query = sql(f"SELECT u.key, u.seq, u.position, {fields}, u.embedding ", self._from(flt), " LIMIT ",
                        Param(cap + 1, "bigint"))
            text, values = render(d, query)
            if len(self._probes) >= 256:
                self._probes.clear()
            made = self._probes[id(flt)] = (flt, cap, text, values, f"{text}\x00{values!r}")
        _, _, text, values, known = made
        if self._large.get(known) == self._generation:
            return None

        def run() -> tuple[dict[str, Any], int]:
            # (the generation read under the lock with the rows: a write in another thread after them
            # must not make them look current)
            return self._conn.execute(self._statement(text), values).fetchnumpy(), self._generation

        cols, generation = self._guard(run)
        n = len(cols["key"])
        if n > cap:
            if len(self._large) >= 256:
                self._large.clear()
            self._large[known] = generation
            return None
        out = []
        seen: dict[int, tuple[Any, ...]] = {}
        for vec in q:
            best, scores = _ranked(vec, cols, k, min_score)
            hits = np.asarray(cols["key"], dtype=np.int64)[best].tolist()
            out.append(list(zip(hits, scores[best].tolist(), strict=True)))
            self._remember(seen, hits, cols, best.tolist())
        self._seen.rows = (generation, seen)
        self.last_stats = {"path": "exact", "rounds": 1, "queries": len(q), "k": k, "scan": "numpy", "rows": n}
        return out

    def _statement(self, text: str) -> Any:
        """``text`` parsed once (``extract_statements``; a statement knn runs again for every query vector
        and, under a filter, every search with it), for ``execute``: DuckDB then binds and plans it as
        ever, on the data as it is, without parsing the text again. At 100k sentences the 0.1% filter's
        statement took 0.4-0.8 ms less CPU this way (``bench/duckdb_small_filter.py``). The text itself
        when the driver cannot parse ahead."""
        got = self._parsed.get(text)
        if got is None:
            parse = getattr(self._conn, "extract_statements", None)
            parsed = parse(text) if parse is not None else None
            got = parsed[0] if parsed is not None and len(parsed) == 1 else text
            if len(self._parsed) >= 256:
                self._parsed.clear()
            self._parsed[text] = got
        return got

    def _remember(self, seen: dict[int, tuple[Any, ...]], keys: list[int], cols: dict[str, Any],
                  at: Sequence[int] | None = None) -> None:
        """Keep each knn hit's row fields and unit vector (``fetchnumpy`` columns; hit i in row ``at[i]``,
        by default row i) for :meth:`fetch` and :meth:`similarities`."""
        rows = range(len(keys)) if at is None else at
        if "packed" in cols:  # (DuckDBDialect.PACKED: NULL where the unit's document row is gone)
            packed, pos, seq, emb = (np.ma.getdata(cols[c]) for c in ("packed", "position", "seq", "embedding"))
            gone = np.ma.getmaskarray(cols["packed"])
            split = self.dialect.PACK_SEPARATOR
            for key, i in zip(keys, rows, strict=True):
                if not gone[i]:
                    doc_id, content, start, end, tail, meta = packed[i].split(split)
                    seen[key] = (doc_id, pos[i], content, seq[i], int(start), int(end), tail, meta, emb[i])
            return
        names = ("doc_id", "position", "content", "seq", "start", "end", "tail", "metadata", "embedding")
        fields = [np.ma.getdata(cols[c]) for c in names]  # (plain arrays: a masked one is slow to index)
        gone = np.ma.getmaskarray(cols["metadata"])  # (a unit whose document row is gone: read again later)
        for key, i in zip(keys, rows, strict=True):
            if not gone[i]:
                seen[key] = tuple(f[i] for f in fields)

    def _recalled(self, keys: Sequence[int]) -> list[tuple[Any, ...]] | None:
        """The fields knn read for every one of ``keys`` (in order) in this thread since the last write,
        else None (the caller reads the tables)."""
        got = getattr(self._seen, "rows", None)
        if got is None or got[0] != self._generation or not keys:
            return None
        seen = got[1]
        out = [seen.get(k) for k in keys]
        return None if any(r is None for r in out) else out  # type: ignore[return-value]

    def fetch(self, keys: Sequence[Any]) -> list[Row]:
        """Rows for keys, in the order of ``keys`` (a key deleted meanwhile is skipped); the rows of the
        last knn's hits come from that statement (no write came between)."""
        self._need_open()
        wanted = [int(k) for k in keys]
        known = self._recalled(wanted)
        if known is None:
            return super().fetch(keys)
        un = self.dialect.codec.unescape
        metas: dict[str, dict[str, Any]] = {}
        out = []
        for key, r in zip(wanted, known, strict=True):
            doc_id = un(r[0])
            meta = metas.get(doc_id)
            if meta is None:
                meta = metas[doc_id] = json.loads(r[7])
            out.append(Row(key=key, doc_id=doc_id, position=int(r[1]), content=un(r[2]), metadata=meta, seq=int(r[3]),
                           start=int(r[4]), end=int(r[5]), tail=un(r[6])))
        return out

    def run_lowered(self, lowered: Any, vectors: Mapping[str, np.ndarray]) -> list[tuple[Row, dict[str, float]]]:
        """Run a lowered hybrid plan (:class:`~nlql.sql.nodes.Lowered`) as one DuckDB statement.

        A lone BM25 ranking whose rows matching no term may fill up the result (``Fusion.fill``) first runs
        as the statement without that branch: when it returns all ``fetch`` rows, at least ``fetch`` rows
        matched a term, so the branch (which adds rows only when fewer did) would have added none, and
        these are the statement's rows; else the whole statement runs and its rows are the answer (one
        statement's rows either way). DuckDB plans and runs the branch (an anti-join of the sentences
        with every matching row, a count) even when its count condition is false, where PostgreSQL skips
        it (a one-time filter): at 100k sentences it was ~2 ms of a ~20 ms BM25 statement."""
        self._need_open()
        slots = self._query_slots(lowered, vectors)
        fusion = lowered.fusion
        fill = fusion.method == "SINGLE" and fusion.fill

        rounds = 0

        def execute(plan: Any) -> tuple[list[tuple[Any, ...]], dict[str, int], Compiled]:
            nonlocal rounds
            rounds += 1
            c = self._compiled(plan)
            cur = self._conn.execute(self._statement(c.text), c.params(slots))
            col = Compiled.reader([d[0] for d in cur.description])
            return cur.fetchall(), col, c

        def run() -> tuple[list[tuple[Any, ...]], dict[str, int], Compiled]:
            if fill:
                got = execute(replace(lowered, fusion=replace(fusion, fill=False)))
                if len(got[0]) >= lowered.fetch:
                    return got
            return execute(lowered)

        raw, col, compiled = self._guard(run)
        # rounds: the statements run (2 where the one without the fill came back short)
        self.last_stats = {"path": "sql", "mode": "exact", "depth": lowered.depth, "rounds": rounds,
                           "arm_rows": self._arm_rows(lowered, compiled, raw, col)}
        return self._lowered_rows(lowered, compiled, raw, col)

    def _compiled(self, plan: Any) -> Compiled:
        """``plan``'s statement (``dialect.compile(plan, "exact")``), kept per plan and dialect state (the
        flags the store sets as it opens or upgrades its tables): the text and its bound values depend on
        nothing else, and the data (N, the mean length, the postings) are read when it runs, so every
        write, this process's or another's, is seen as ever. Only plans without a pushed filter are kept:
        a filter's values may be equal in Python and mean different things (``1 == True``). Compiling a
        3-term BM25 statement took ~0.3 ms of a ~19 ms search at 100k."""
        if plan.filter is not None:
            return self.dialect.compile(plan, "exact")
        key = (plan, tuple((k, v) for k, v in vars(self.dialect).items()
                           if v is None or isinstance(v, (bool, int, float, str))))
        try:
            got = self._compiled_plans.get(key)
        except TypeError:  # (a plan holding a list: not kept)
            return self.dialect.compile(plan, "exact")
        if got is None:
            got = self.dialect.compile(plan, "exact")
            if len(self._compiled_plans) >= 256:
                self._compiled_plans.clear()
            self._compiled_plans[key] = got
        return got

    def _unit_vectors(self, wanted: list[int]) -> np.ndarray:
        """``(len(wanted), dim)`` float32 rows of the stored vectors (one statement, ``key = ANY(…)``),
        NaN for a key deleted meanwhile; vectors NLQL did not write are normalised as at ingest."""
        assert self.dim is not None
        mat = np.full((len(wanted), self.dim), np.nan, dtype=np.float32)
        if not wanted:
            return mat
        known = self._recalled(wanted)
        if known is not None:  # the last knn's hits (NLQL's own vectors: unit already)
            for i, r in enumerate(known):
                mat[i] = np.asarray(r[8], dtype=np.float32)
            return mat
        query = sql("SELECT key, embedding FROM ", self.dialect.units, " WHERE ",
                    self.dialect.in_array("key", Param(list(dict.fromkeys(wanted)), "bigint[]")))

        def run() -> Any:
            text, values = render(self.dialect, query)
            rel = self._conn.sql(text, params=values)
            fetch = getattr(rel, "to_arrow_table", None) or rel.arrow  # duckdb 2 renamed it
            return fetch()

        tbl = self._guard(run)
        emb = tbl.column("embedding").combine_chunks()
        found = np.asarray(emb.flatten().to_numpy(zero_copy_only=False), dtype=np.float32).reshape(-1, self.dim)
        if self._external is not None:  # (a finite row too long for float32 is widened, never made zero)
            found = V.normalize_rows(found)
        pos = {int(k): i for i, k in enumerate(tbl.column("key").to_numpy())}
        for i, k in enumerate(wanted):
            j = pos.get(k)
            if j is not None:
                mat[i] = found[j]
        return mat

    def similarities(self, vectors: np.ndarray, keys: Sequence[Any]) -> np.ndarray:
        """(len(vectors), len(keys)) cosine matrix in float32 (NaN for a key deleted meanwhile)."""
        self._need_open()
        q = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        wanted = [int(k) for k in keys]
        if not wanted:
            return np.zeros((len(q), 0), dtype=np.float32)
        mat = self._unit_vectors(wanted)
        # (each row with the bits knn scores it with, before the rounding: Capabilities.KNN_SCORES)
        return np.stack([row_products(v[None, :], mat) for v in q])

    def vectors(self, keys: Sequence[Any]) -> np.ndarray:
        """The rows' own unit vectors, ``(len(keys), dim)`` float32; NaN for a key deleted meanwhile.

        One statement (``key = ANY(…)``), in process."""
        self._need_open()
        return self._unit_vectors([int(k) for k in keys])

    def close(self) -> None:
        """Close the connection this store opened (a connection passed in is left open)."""
        with self._lock:
            if self._external is not None:
                self._external.close()
            if self._own_conn and self._conn is not None:
                self._conn.close()
            self._conn = None


def _ranked(vec: np.ndarray, cols: dict[str, Any], k: int, min_score: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(the rows of the best ``k``, best first; every row's score) of knn's ``fetchnumpy`` columns (``key``,
    ``seq``, ``position``, ``embedding``) for one query vector: scored as the built-in store scores
    (:func:`~nlql.kernels.score_rows`, float32 products rounded: the bits :meth:`DuckDBStore.similarities`
    gives) and ranked by (score desc, seq, position, key), those below ``min_score`` left out."""
    n = len(cols["key"])
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    mat = np.stack(cols["embedding"]).astype(np.float32, copy=False)
    scores = score_rows(vec[None, :], mat)
    scores[np.isnan(scores)] = 0.0  # (as the SQL distance reads a NaN product: distance 1)
    best = np.lexsort((np.asarray(cols["key"], dtype=np.int64), np.asarray(cols["position"], dtype=np.int64),
                       np.asarray(cols["seq"], dtype=np.int64), -scores))
    if min_score is not None:
        best = best[scores[best] >= np.float64(min_score)]  # (compared as doubles, as WHERE compares)
    return best[:k], scores


def _member_rows(mc: dict[str, list[Any]], doc_id: str, lists: dict[str, list[dict[str, Any]]]) -> None:
    """Append one document's ``<prefix>_members`` rows: per list a marker (no value), then its members."""
    for path, records in lists.items():
        for rec in ({}, *records):
            mc["doc_id"].append(doc_id)
            mc["path"].append(path)
            for field in "sfntb":
                mc[field].append(rec.get(field))


def _column(values: Any, type_: Any) -> Any:
    """An Arrow array of ``values`` (a list, or an Arrow array already)."""
    pa = import_arrow()
    return values if isinstance(values, pa.Array) else pa.array(values, type=type_)


def _info_key(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError("an info key is a non-empty string")
    return key


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _permission_denied(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "permission denied" in text or "read-only file system" in text
