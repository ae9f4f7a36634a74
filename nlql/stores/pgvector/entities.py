"""The entity graph in PostgreSQL (SPEC §9, §10): the two tables of :mod:`nlql.stores.entities_sql`,
which holds everything PostgreSQL and DuckDB share; here is only what PostgreSQL does its own way
(finding a table with ``to_regclass``, loading the links by binary COPY, reading in a transaction).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nlql.sql import graph as graph_sql
from nlql.stores.entities_sql import EntityTables, GraphRows, LinkRows

__all__ = ["EntityMixin", "GraphRows"]


class EntityMixin(EntityTables):
    """Entity links and the GRAPH arm (part of :class:`~nlql.stores.pgvector.PgVectorStore`)."""

    def _has_table(self, conn: Any, suffix: str) -> bool:
        return conn.execute("SELECT to_regclass(%s)", [self.dialect.table(suffix)]).fetchone()[0] is not None

    @contextmanager
    def _snapshot(self) -> Iterator[Any]:
        with self._tx() as conn:  # (a transaction: the statements read one snapshot)
            yield conn

    def _add_links(self, conn: Any, rows: LinkRows) -> None:
        """The links by binary COPY, then the edge weights they add."""
        with conn.cursor().copy(self.dialect.bulk_load("entity_links", ["doc_id", "position", "entity", "name"])) as cp:
            cp.set_types(["text", "int4", "text", "text"])
            for r in rows:
                cp.write_row(r)
        self._run(conn, graph_sql.add_edges(self.dialect, [r[0] for r in rows]))
