"""The entity graph in DuckDB: the two tables of :mod:`nlql.stores.entities_sql` (everything PostgreSQL
and DuckDB share is there), and here what DuckDB does its own way:

- the links are bulk-loaded from an Arrow table, and the edge weights they add are counted over that
  table alone (:func:`nlql.sql.graph.edges_from`), not over the whole links table;
- the tables keep no index but the edges' key (``DuckDBDialect.graph_schema``);
- reads need no transaction (one process writes a DuckDB file, and the store's lock is held);
- a file written before the tables kept each sentence's names in ``<prefix>_entities(doc_id, position,
  name)``. Opened writable, the two tables are filled from those rows in ``open``'s transaction and the
  old table goes (nothing reads it after). Opened read-only, the file cannot change: GRAPH is not SQL
  there (``DuckDBDialect.graph_tables`` is False) and the engine builds its graph from those rows
  (:meth:`DuckDBEntities.entity_rows`), as it did before the tables existed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from nlql.sql import graph as graph_sql
from nlql.sql.binder import sql
from nlql.sql.ingest import escaper, verbatim
from nlql.stores.batch import DocBatch
from nlql.stores.duckdb.driver import arrow_table, import_arrow, registered
from nlql.stores.entities_sql import EntityTables, LinkRows

__all__ = ["DuckDBEntities"]

OLD = "entities"  # <prefix>_entities(doc_id, position, name): the names as files before the two tables kept them


class DuckDBEntities(EntityTables):
    """Entity links and the GRAPH arm (part of :class:`~nlql.stores.duckdb.DuckDBStore`)."""

    _conn: Any
    read_only: bool
    _external: Any
    _old_names = False  # opened read-only, the file keeps names in <prefix>_entities only

    @contextmanager
    def _snapshot(self) -> Iterator[Any]:
        yield self._conn

    def _add_links(self, conn: Any, rows: LinkRows | Any) -> None:
        """The links from an Arrow table (or rows, made one), and the edge weights of those rows alone
        (an edge joins two entities named in one sentence: none when no sentence has two links, and
        then no statement)."""
        table = self._links_table(rows) if isinstance(rows, list) else rows
        with registered(conn, table) as name:
            self._run(conn, self.dialect.bulk_load("entity_links", ["doc_id", "position", "entity", "name"], name))
            if _shared_sentences(table):
                self._run(conn, graph_sql.edges_from(self.dialect, f'"{name}"'))

    @staticmethod
    def _links_table(rows: LinkRows) -> Any:
        """``(doc_id, position, entity, name)`` rows as the Arrow table :meth:`_add_links` loads."""
        pa = import_arrow()
        s = pa.string()
        ds, ps, ks, ns = (list(c) for c in zip(*rows, strict=True)) if rows else ([], [], [], [])
        return arrow_table({"doc_id": ds, "position": ps, "entity": ks, "name": ns},
                           {"doc_id": s, "position": pa.int32(), "entity": s, "name": s})

    def _batch_link_rows(self, batch: DocBatch, ids: list[str], owner: np.ndarray) -> Any:
        """The links of an engine's batch read as columns (its ``entities`` column, as
        :meth:`EntityTables._link_rows` reads records) as the Arrow table :meth:`_add_links` loads, or
        None for none: ``ids`` its documents' escaped ids, ``owner`` each sentence's document. The names
        are escaped as the store writes text only when one of them needs it (most batches: none)."""
        if batch.entities is None:
            return None
        named = [(i, position, names) for i, position, names
                 in zip(owner.tolist(), batch.positions, batch.entities, strict=True) if names]
        esc = escaper(self.dialect.codec.escape, [n for _, _, names in named for n in names])
        rows = graph_sql.link_rows([(ids[i], [(position, names if esc is verbatim else [esc(n) for n in names])])
                                    for i, position, names in named], graph_sql.words(self.dialect)) if named else []
        return self._links_table(rows) if rows else None

    def _open_entities(self, conn: Any) -> None:
        """The two tables (see :meth:`EntityTables._open_entities`); a file that kept names in
        ``<prefix>_entities`` has them moved into the tables, its ``entity_links`` flag kept."""
        moving = not self._has_table(conn, "entity_links") and self._has_table(conn, OLD)
        super()._open_entities(conn)
        if moving:
            old = self.dialect.table(OLD)
            names: dict[tuple[str, int], list[str]] = {}
            for doc_id, position, name in self._run(conn, f"SELECT doc_id, position, name FROM {old}").fetchall():
                names.setdefault((doc_id, int(position)), []).append(name)
            rows = graph_sql.link_rows([(doc_id, [(position, ns)]) for (doc_id, position), ns in names.items()],
                                       graph_sql.words(self.dialect))
            if rows:
                self._add_links(conn, rows)
            self._run(conn, f"DROP TABLE {old}")
        self.dialect.graph_tables = True

    def _find_entities(self, conn: Any) -> None:
        """Opened read-only: GRAPH is SQL only where the two tables hold every document's links; a file
        that keeps names the old way gives them to the engine's graph (:meth:`entity_rows`)."""
        tables = self._has_table(conn, "entity_links")
        self.dialect.graph_tables = tables and self._entities_kept(conn)
        if tables:
            self._read_entity_words(conn)
        self._old_names = not tables and self._has_table(conn, OLD)

    def entity_rows(self) -> list[tuple[str, int, int, str]] | None:
        """Every link as ``(doc_id, seq, position, name)`` (:meth:`EntityTables.entity_rows`), or from
        ``<prefix>_entities`` in a file opened read-only that keeps names the old way."""
        if not self._old_names:
            return super().entity_rows()
        self._need_open()
        d = self.dialect
        un = d.codec.unescape

        def run() -> list[tuple[str, int, int, str]] | None:
            if not self._entities_kept(self._conn):
                return None
            got = self._run(self._conn, sql("SELECT e.doc_id, u.seq, e.position, e.name FROM ", d.table(OLD),
                                            " e JOIN ", d.units, " u ON u.doc_id = e.doc_id AND u.position = e.position"))
            return [(un(a), int(s), int(p), un(n)) for a, s, p, n in got.fetchall()]

        return self._guard(run)

    def adopt_entities(self, rows: Sequence[tuple[str, int, int, str]]) -> None:
        """See :meth:`EntityTables.adopt_entities`; a store that cannot be written keeps nothing."""
        if self.read_only or self._external is not None:
            return
        super().adopt_entities(rows)


def _shared_sentences(links: Any) -> bool:
    """Whether two of the links (an Arrow table of ``doc_id, position, …``) are in one sentence: fewer
    distinct ``doc_id NUL position`` strings than rows (one string per sentence: the position's digits
    hold no NUL). (Arrow's group_by would cost a process ~90 ms the first time, this ~1 ms.)"""
    if links.num_rows < 2:
        return False
    pa = import_arrow()
    import pyarrow.compute as pc

    sentence = pc.binary_join_element_wise(links.column("doc_id"), pc.cast(links.column("position"), pa.string()),
                                           "\x00")
    return len(pc.unique(sentence)) < links.num_rows
