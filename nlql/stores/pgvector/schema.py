"""The pgvector store's tables: created under an advisory lock, re-attached, and the HNSW index.

The HNSW index is not created with the tables: it is built once the table holds ``index_threshold``
rows, by the first knn that would use it (or :meth:`PgVectorStore.build_index`). Measured here (dim 384,
2 cores): COPY into the table runs at ~39k sentences/s without the index and ~1.1k/s with it, and a
build after loading is ~3.5× faster than maintaining the index row by row; below the threshold an
exact scan is a few milliseconds anyway.
"""

from __future__ import annotations

from typing import Any

from nlql.errors import BackendError
from nlql.stores.pgvector.driver import register_vector, render

SCHEMA_VERSION = "1"


class SchemaMixin:
    """Creating, checking and re-attaching the tables (part of :class:`PgVectorStore`)."""

    dim: int | None
    bm25: bool
    table_prefix: str
    dialect: Any
    _index_ready: bool
    _vector_oid: int | None

    def _run(self, conn: Any, frag: Any) -> Any:
        return conn.execute(*render(self.dialect, frag))

    def open(self, dim: int) -> None:
        """Create the schema if missing (under an advisory lock) or re-attach to it.

        Raises:
            BackendError: the tables hold vectors of another dimension, or pgvector is missing.
        """
        dim = int(dim)
        if self.dim == dim:
            return
        if self.dim is not None:
            raise BackendError("pgvector", f"store is open with {self.dim}-dimensional vectors, not {dim}")
        self._guard(lambda: self._open(dim))  # type: ignore[attr-defined]

    def _open(self, dim: int) -> None:
        d = self.dialect
        with self._tx() as conn:  # type: ignore[attr-defined]
            self._run(conn, d.lock_schema())
            # then the writers' lock, before any table lock: writers take it first too, so no cycle
            self._run(conn, d.lock_writers())
            if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            self._run(conn, d.key_value_table("meta"))
            self._run(conn, d.key_value_table("info"))
            from nlql.sql.binder import Param, sql

            self._run(conn, sql("INSERT INTO ", d.table("meta"), " (key, value) VALUES ('dim', ",
                                Param(str(dim), None), "), ('schema', ", Param(SCHEMA_VERSION, None),
                                ") ON CONFLICT (key) DO NOTHING"))
            stored = int(self._run(conn, d.get_meta("meta", "dim")).fetchone()[0])
            if stored != dim:
                raise BackendError(
                    "pgvector",
                    f"table {self.table_prefix}_units holds {stored}-dimensional vectors, "
                    f"the embedder gives {dim}",
                    hint="use the embedder the data was built with, or another table_prefix",
                )
            for statement in d.schema(dim):
                self._run(conn, statement)
            self._open_lists(conn)
            self._open_entities(conn)  # type: ignore[attr-defined]
            if self.bm25:
                # tables of a schema written before BM25 statistics existed gain them here
                has = conn.execute("SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                                   "AND attname = 'nterms' AND NOT attisdropped",
                                   [d.table("units")]).fetchone()
                if has is None:
                    self._run(conn, f"ALTER TABLE {d.table('units')} ADD COLUMN nterms int NOT NULL DEFAULT 0")
                for statement in d.term_tables():
                    self._run(conn, statement)
                self._sync_terms(conn)  # type: ignore[attr-defined]
        self._attach_types(self._connection())  # type: ignore[attr-defined]
        self.dim = dim

    def _open_lists(self, conn: Any) -> None:
        """``mlists`` (each list value's member records, which pushed HAS reads): added to a table
        written before it and filled once from the stored metadata (``lists`` in ``<prefix>_meta``)."""
        import json

        from psycopg.types.json import Jsonb

        from nlql.sql.binder import Param, sql
        from nlql.sql.codec import compact_json, list_members

        d = self.dialect
        if self._run(conn, d.get_meta("meta", "lists")).fetchone() is not None:
            return
        for statement in d.lists_schema():
            self._run(conn, statement)
        rows = self._run(conn, sql("SELECT doc_id, metadata::text FROM ", d.docs,
                                   " WHERE metadata::text LIKE '%[%'")).fetchall()
        for doc_id, text in rows:
            lists = list_members(json.loads(text))
            if lists:
                self._run(conn, sql("UPDATE ", d.docs, " SET mlists = ", Param(Jsonb(lists, dumps=compact_json), None),
                                    " WHERE doc_id = ", Param(doc_id, None)))
        self._run(conn, d.put_meta("meta", "lists", "1"))

    def _attach_types(self, conn: Any) -> None:
        row = conn.execute("SELECT to_regtype('vector')::oid").fetchone()
        if row is None or row[0] is None:
            raise BackendError("pgvector", "the 'vector' extension is not installed in this database",
                               hint="CREATE EXTENSION vector (needs pgvector on the server)")
        self._vector_oid = int(row[0])
        register_vector(conn, self._vector_oid)

    def build_index(self) -> bool:
        """Build the HNSW index now if it does not exist (e.g. after a bulk load).

        Returns:
            Whether this call built it.
        """
        self._need_open()  # type: ignore[attr-defined]
        if not self.hnsw:  # type: ignore[attr-defined]
            return False
        return bool(self._guard(self._build_index))  # type: ignore[attr-defined]

    def _build_index(self) -> bool:
        d = self.dialect
        conn = self._connection()  # type: ignore[attr-defined]
        with conn.transaction():
            # no statement timeout here: a build over a large table takes a while, once
            self._run(conn, d.lock_writers())
            exists = conn.execute("SELECT to_regclass(%s)", [d.table("units_hnsw")]).fetchone()[0]
            if exists is None:
                self._run(conn, d.hnsw_index(self.m, self.ef_construction))  # type: ignore[attr-defined]
        if exists is None:
            # fresh planner statistics after the bulk load the index usually follows: the exact-vs-HNSW
            # choice reads the filter's estimated selectivity from them (autovacuum keeps them later)
            tables = ["docs", "units"] + (["terms", "bm25"] if self.bm25 else [])
            self._run(conn, "ANALYZE " + ", ".join(d.table(t) for t in tables))
        self._index_ready = True
        return exists is None
