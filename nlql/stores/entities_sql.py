"""The entity graph in a SQL store's two tables (SPEC §9, §10), shared by PostgreSQL and DuckDB.

``<prefix>_entity_links(doc_id, position, entity, name)`` and ``<prefix>_entity_edges(a, b, weight)``
(:func:`nlql.sql.graph.schema`, through the dialect) are created on open and written in the write's
transaction: :meth:`EntityTables._forget_entities` for the stored documents being replaced or deleted,
then the written documents' links (:meth:`EntityTables._add_links`, a bulk load where the store has
one) and the edge weights they add. A GRAPH activation is one statement
(:func:`~nlql.sql.graph.activation`, bit-identical to :meth:`~nlql.text.graph.EntityGraph.activate`),
or CTEs of the hybrid statement where the dialect sets ``GRAPH_CTE``: the engine holds no graph for the
store, and a second engine process sees a write at once.

``<prefix>_meta`` key ``entity_links`` says the tables hold every document's links; tables created beside
documents written before they existed lack it until the engine has adopted links it built once
(:meth:`EntityTables.adopt_entities`).

What a store supplies (everything else is here, once):

- ``dialect``, ``_need_open()``, ``_guard(fn)`` (under the store's lock, driver errors translated),
  ``_run(conn, fragment)``, ``_read(fn)`` (one read statement);
- ``_tx()`` (a write transaction) and ``_snapshot()`` (a context giving the connection for a few reads);
- ``_has_table(conn, suffix)``: whether ``<prefix>_<suffix>`` exists;
- optionally ``_add_links(conn, rows)``: its bulk load (the default sends the rows as bound arrays).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import numpy as np

from nlql.sql import graph as graph_sql
from nlql.sql.binder import sql
from nlql.stores.base import DocRecord

__all__ = ["FLAG", "WORDS", "EntityTables", "GraphRows"]

FLAG = "entity_links"  # the <prefix>_meta key: the tables hold every document's links
WORDS = "entity_words"  # the <prefix>_meta key: how the keys cut names into words (absent: "python")

T = TypeVar("T")
LinkRows = list[tuple[str, int, str, str]]


class GraphRows:
    """What one GRAPH activation read from the store: the activated sentences (in insertion order) and,
    for explain, what each hop raised.

    ``doc_ids``/``positions``/``seqs``/``values`` are arrays; ``hop_rows(…)`` is a callable giving
    ``(max_weight, [(hop, entity key, display name, activation), …])`` (a second statement, run only
    when explain asks); ``words``: how the keys cut text into words (where explain finds them in the text).
    """

    __slots__ = ("doc_ids", "positions", "seqs", "values", "hop_rows", "words")

    def __init__(self, doc_ids: np.ndarray, positions: np.ndarray, seqs: np.ndarray, values: np.ndarray,
                 hop_rows: Any, words: str = "unicode") -> None:
        self.doc_ids, self.positions, self.seqs, self.values = doc_ids, positions, seqs, values
        self.hop_rows, self.words = hop_rows, words


class EntityTables:
    """Entity links and the GRAPH arm of a SQL store (``KeepsEntities`` and ``GraphInStore``)."""

    dialect: Any

    # what the store supplies (see the module docstring)
    def _need_open(self) -> None:
        raise NotImplementedError

    def _guard(self, fn: Callable[[], T]) -> T:
        raise NotImplementedError

    def _run(self, conn: Any, frag: Any) -> Any:
        raise NotImplementedError

    def _read(self, fn: Callable[[Any], T]) -> T:
        raise NotImplementedError

    def _tx(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _snapshot(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _has_table(self, conn: Any, suffix: str) -> bool:
        raise NotImplementedError

    # ------------------------------------------------------------------------------ schema

    def _open_entities(self, conn: Any) -> None:
        """Create the two tables if missing (inside ``open``'s transaction); a store with no documents
        yet, or tables already there, keeps every document's links from now on.

        Tables created now record that their keys cut names into Unicode words (``WORDS``); tables
        without the record hold keys written before, cut by Python's ``re``, and keep being written and
        read that way (the dialect's ``entity_words``), so their links still match."""
        d = self.dialect
        existed = self._has_table(conn, "entity_links")
        for statement in d.graph_schema():
            self._run(conn, statement)
        if not existed:
            self._run(conn, d.put_meta("meta", WORDS, "unicode"))
            empty = self._run(conn, sql("SELECT NOT EXISTS (SELECT 1 FROM ", d.docs, ")")).fetchone()[0]
            if empty:
                self._run(conn, d.put_meta("meta", FLAG, "1"))
        self._read_entity_words(conn)

    def _read_entity_words(self, conn: Any) -> None:
        """Set the dialect's ``entity_words`` from the tables' record (absent: ``"python"``)."""
        row = self._run(conn, self.dialect.get_meta("meta", WORDS)).fetchone()
        self.dialect.entity_words = "python" if row is None else str(row[0])

    def _entities_kept(self, conn: Any) -> bool:
        return self._run(conn, self.dialect.get_meta("meta", FLAG)).fetchone() is not None

    def entities_kept(self) -> bool:
        """Whether the tables hold every document's links (never becomes false again)."""
        self._need_open()
        return bool(self._read(self._entities_kept))

    # ------------------------------------------------------------------------------ writing

    def _link_rows(self, docs: Sequence[DocRecord]) -> LinkRows:
        """The ``(doc_id, position, entity, name)`` rows of the written documents' links, escaped as the
        store writes text (:func:`nlql.sql.graph.link_rows`)."""
        esc = self.dialect.codec.escape
        return graph_sql.link_rows([(esc(x.doc_id), [(u.position, [esc(n) for n in names])
                                                     for u, names in zip(x.units, x.entities, strict=True) if names])
                                    for x in docs if x.entities is not None], graph_sql.words(self.dialect))

    def _add_links(self, conn: Any, rows: LinkRows) -> None:
        """Insert link rows and add the edge weights they bring (inside a write's transaction, after
        :meth:`_forget_entities` for their documents that were stored)."""
        for statement in graph_sql.add_rows(self.dialect, rows):
            self._run(conn, statement)

    def _write_entities(self, conn: Any, docs: Sequence[DocRecord]) -> None:
        """Inside a write's transaction: the written documents' links and the edge weights they add."""
        rows = self._link_rows(docs)
        if rows:
            self._add_links(conn, rows)

    def _forget_entities(self, conn: Any, ids: list[str]) -> None:
        """Inside a write's transaction: stored documents' sentences come off the edge weights and their
        links go (``ids`` escaped)."""
        for statement in self.dialect.graph_remove(ids):
            self._run(conn, statement)

    # ------------------------------------------------------------------------------ KeepsEntities

    def entity_rows(self) -> list[tuple[str, int, int, str]] | None:
        """Every link as ``(doc_id, seq, position, name)``, or None when the tables cannot vouch for
        every document (see the module docstring)."""
        self._need_open()
        d = self.dialect
        un = d.codec.unescape

        def run() -> list[tuple[str, int, int, str]] | None:
            with self._snapshot() as conn:
                if not self._entities_kept(conn):
                    return None
                cur = self._run(conn, sql("SELECT l.doc_id, u.seq, l.position, l.name FROM ",
                                          d.table("entity_links"), " l JOIN ", d.units,
                                          " u ON u.doc_id = l.doc_id AND u.position = l.position"))
                return [(un(a), int(s), int(p), un(n)) for a, s, p, n in cur.fetchall()]

        return self._guard(run)

    def adopt_entities(self, rows: Sequence[tuple[str, int, int, str]]) -> None:
        """Store links the engine built once for documents written before links were kept (documents
        that have links keep theirs; rows of documents rewritten since are skipped)."""
        self._need_open()
        d = self.dialect
        esc = d.codec.escape
        by_doc: dict[str, tuple[int, dict[int, list[str]]]] = {}
        for doc, seq, pos, name in rows:
            by_doc.setdefault(esc(doc), (int(seq), {}))[1].setdefault(int(pos), []).append(esc(name))

        def run() -> None:
            with self._tx() as conn:
                lock = d.lock_writers()
                if lock is not None:
                    self._run(conn, lock)
                if self._entities_kept(conn):
                    return
                have = {r[0] for r in self._run(conn, sql("SELECT DISTINCT doc_id FROM ",
                                                          d.table("entity_links"))).fetchall()}
                live = dict(self._run(conn, sql("SELECT doc_id, seq FROM ", d.docs)).fetchall())
                items = [(doc, list(sentences.items())) for doc, (seq, sentences) in by_doc.items()
                         if doc not in have and live.get(doc) == seq]
                links = graph_sql.link_rows(items, graph_sql.words(d))
                if links:
                    self._add_links(conn, links)
                self._run(conn, d.put_meta("meta", FLAG, "1"))

        self._guard(run)

    # ------------------------------------------------------------------------------ the GRAPH arm

    def graph_activation(self, text: str, hops: int, decay: float) -> GraphRows | None:
        """GRAPH(text, hops, decay) computed in the database: the activated sentences with their
        documents' ``seq``, in insertion order; None when the tables cannot vouch for every document."""
        self._need_open()
        d = self.dialect
        stmt = d.graph_activation(text, hops, decay, seq=True)  # each row with its seq

        def run() -> Any:
            with self._snapshot() as conn:
                if not self._entities_kept(conn):
                    return None
                return self._run(conn, stmt).fetchall()

        got = self._guard(run)
        if got is None:
            return None
        un = d.codec.unescape
        docs = np.array([un(r[0]) for r in got], dtype=object)
        pos = np.array([r[1] for r in got], dtype=np.int64)
        vals = np.array([r[2] for r in got], dtype=np.float64)
        seqs = np.array([r[3] for r in got], dtype=np.int64)
        order = np.lexsort((pos, seqs))
        return GraphRows(docs[order], pos[order], seqs[order], vals[order],
                         lambda: self._hop_rows(text, hops, decay), graph_sql.words(d))

    def _hop_rows(self, text: str, hops: int, decay: float) -> tuple[int, list[tuple[int, str, str, float]]]:
        d = self.dialect
        stmt = d.graph_hop_detail(text, hops, decay)

        def run() -> Any:
            with self._snapshot() as conn:
                mx = self._run(conn, sql("SELECT coalesce(max(weight), 0) FROM ",
                                         d.table("entity_edges"))).fetchone()
                return int(mx[0]), self._run(conn, stmt).fetchall()

        mx, rows = self._guard(run)
        un = d.codec.unescape
        return mx, [(int(h), str(e), un(n), float(a)) for h, e, n, a in rows]
