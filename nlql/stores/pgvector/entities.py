"""The entity graph in PostgreSQL (SPEC §9, §10): links and edges in two tables, GRAPH computed by SQL.

``<prefix>_entity_links(doc_id, position, entity, name)`` and ``<prefix>_entity_edges(a, b, weight)``
(:func:`nlql.sql.graph.schema`) are created on open and written in the ingest transaction
(:func:`~nlql.sql.graph.remove` then :func:`~nlql.sql.graph.add` for the written
documents, after the writers' lock), removed with a deleted or replaced document. A GRAPH activation is
one statement (:func:`~nlql.sql.graph.activation`, bit-identical to
:meth:`~nlql.text.graph.EntityGraph.activate`): the engine holds no graph for this store, and a second
engine process sees a write at once. ``<prefix>_meta`` key ``entity_links`` says the tables hold every
document's links; tables created beside documents written before they existed lack it until the engine
has adopted links it built once (:meth:`EntityMixin.adopt_entities`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nlql.sql.binder import sql
from nlql.sql.codec import escape_text, unescape_text
from nlql.stores.base import DocRecord

__all__ = ["EntityMixin", "GraphRows"]

_FLAG = "entity_links"


class GraphRows:
    """What one GRAPH activation read from the store: the activated sentences (in insertion order) and,
    for explain, what each hop raised.

    ``doc_ids``/``positions``/``seqs``/``values`` are arrays; ``hop_rows(…)`` is a callable giving
    ``(max_weight, [(hop, entity key, display name, activation), …])`` (a second statement, run only
    when explain asks).
    """

    __slots__ = ("doc_ids", "positions", "seqs", "values", "hop_rows")

    def __init__(self, doc_ids: np.ndarray, positions: np.ndarray, seqs: np.ndarray, values: np.ndarray,
                 hop_rows: Any) -> None:
        self.doc_ids, self.positions, self.seqs, self.values = doc_ids, positions, seqs, values
        self.hop_rows = hop_rows


class EntityMixin:
    """Entity links and the GRAPH arm (part of :class:`~nlql.stores.pgvector.PgVectorStore`)."""

    table_prefix: str
    dialect: Any
    # _run (SchemaMixin), _guard, _tx and _need_open (PgVectorStore) come from the class that mixes it in

    # ------------------------------------------------------------------------------ schema

    def _open_entities(self, conn: Any) -> None:
        """Create the two tables if missing (inside ``_open``'s transaction, under its locks); a store
        with no documents yet, or tables already there, keeps every document's links from now on."""
        d = self.dialect
        existed = conn.execute("SELECT to_regclass(%s)", [d.table("entity_links")]).fetchone()[0] is not None
        for statement in d.graph_schema():
            conn.execute(statement)
        if not existed:
            empty = self._run(conn, sql("SELECT NOT EXISTS (SELECT 1 FROM ", d.docs, ")")).fetchone()[0]
            if empty:
                self._run(conn, d.put_meta("meta", _FLAG, "1"))

    def _entities_kept(self, conn: Any) -> bool:
        return self._run(conn, self.dialect.get_meta("meta", _FLAG)).fetchone() is not None

    def entities_kept(self) -> bool:
        """Whether the tables hold every document's links (never becomes false again)."""
        self._need_open()

        def run() -> bool:
            with self._tx(single=True) as conn:
                return self._entities_kept(conn)

        return bool(self._guard(run))

    # ------------------------------------------------------------------------------ writing

    def _write_entities(self, conn: Any, docs: Sequence[DocRecord]) -> None:
        """Inside a write's transaction (after the writers' lock and :meth:`_forget_entities` for the
        written documents that were stored): the written documents' links, by binary COPY, and the edge
        weights follow."""
        from nlql.sql import graph as graph_sql

        items = [(escape_text(x.doc_id), [(u.position, [escape_text(n) for n in names])
                                           for u, names in zip(x.units, x.entities, strict=True) if names])
                 for x in docs if x.entities is not None]
        rows = graph_sql.link_rows(items)
        if not rows:
            return
        with conn.cursor().copy(self.dialect.bulk_load("entity_links", ["doc_id", "position", "entity", "name"])) as cp:
            cp.set_types(["text", "int4", "text", "text"])
            for r in rows:
                cp.write_row(r)
        self._run(conn, graph_sql.add_edges(self.dialect, [r[0] for r in rows]))

    def _forget_entities(self, conn: Any, ids: list[str]) -> None:
        for statement in self.dialect.graph_remove(ids):
            self._run(conn, statement)

    # ------------------------------------------------------------------------------ KeepsEntities

    def entity_rows(self) -> list[tuple[str, int, int, str]] | None:
        """Every link as ``(doc_id, seq, position, name)``, or None when the tables cannot vouch for
        every document (see the module docstring)."""
        self._need_open()
        d = self.dialect

        def run() -> list[tuple[str, int, int, str]] | None:
            with self._tx() as conn:
                if not self._entities_kept(conn):
                    return None
                cur = self._run(conn, sql("SELECT l.doc_id, u.seq, l.position, l.name FROM ",
                                          d.table("entity_links"), " l JOIN ", d.units,
                                          " u ON u.doc_id = l.doc_id AND u.position = l.position"))
                return [(unescape_text(a), int(s), int(p), unescape_text(n)) for a, s, p, n in cur]

        return self._guard(run)

    def adopt_entities(self, rows: Sequence[tuple[str, int, int, str]]) -> None:
        """Store links the engine built once for documents written before links were kept (documents
        that have links keep theirs; rows of documents rewritten since are skipped)."""
        self._need_open()
        d = self.dialect
        by_doc: dict[str, tuple[int, dict[int, list[str]]]] = {}
        for doc, seq, pos, name in rows:
            by_doc.setdefault(escape_text(doc), (int(seq), {}))[1].setdefault(int(pos), []).append(escape_text(name))

        def run() -> None:
            with self._tx() as conn:
                self._run(conn, d.lock_writers())
                if self._entities_kept(conn):
                    return
                have = {r[0] for r in self._run(conn, sql("SELECT DISTINCT doc_id FROM ", d.table("entity_links")))}
                live = dict(self._run(conn, sql("SELECT doc_id, seq FROM ", d.docs)).fetchall())
                items = [(doc, list(sentences.items())) for doc, (seq, sentences) in by_doc.items()
                         if doc not in have and live.get(doc) == seq]
                for statement in d.graph_add(items):
                    self._run(conn, statement)
                self._run(conn, d.put_meta("meta", _FLAG, "1"))

        self._guard(run)

    # ------------------------------------------------------------------------------ the GRAPH arm

    def graph_activation(self, text: str, hops: int, decay: float) -> GraphRows | None:
        """GRAPH(text, hops, decay) computed in the database: the activated sentences with their
        documents' ``seq``, in insertion order; None when the tables cannot vouch for every document."""
        self._need_open()
        stmt = self.dialect.graph_activation(text, hops, decay, seq=True)  # each row with its seq

        def run() -> Any:
            with self._tx() as conn:
                if not self._entities_kept(conn):
                    return None
                return self._run(conn, stmt).fetchall()

        got = self._guard(run)
        if got is None:
            return None
        docs = np.array([unescape_text(r[0]) for r in got], dtype=object)
        pos = np.array([r[1] for r in got], dtype=np.int64)
        vals = np.array([r[2] for r in got], dtype=np.float64)
        seqs = np.array([r[3] for r in got], dtype=np.int64)
        order = np.lexsort((pos, seqs))
        return GraphRows(docs[order], pos[order], seqs[order], vals[order],
                         lambda: self._hop_rows(text, hops, decay))

    def _hop_rows(self, text: str, hops: int, decay: float) -> tuple[int, list[tuple[int, str, str, float]]]:
        d = self.dialect
        stmt = d.graph_hop_detail(text, hops, decay)

        def run() -> Any:
            with self._tx() as conn:
                mx = self._run(conn, sql("SELECT coalesce(max(weight), 0) FROM ", d.table("entity_edges"))).fetchone()
                return int(mx[0]), self._run(conn, stmt).fetchall()

        mx, rows = self._guard(run)
        return mx, [(int(h), str(e), unescape_text(n), float(a)) for h, e, n, a in rows]

