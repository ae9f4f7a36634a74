"""The entity graph beside any store: one engine-owned :class:`~nlql.text.graph.EntityGraph`, so GRAPH
activates the same rows on every backend (the graph and its formulas are :mod:`nlql.text.graph`).

Like the BM25 sidecar (:mod:`nlql.execute.keywords`) it is built from the store's rows on first use
(this is also how a re-attached store gets it): the engine's entity extractor runs on every stored
sentence, and a document's ``metadata["entities"]`` applies to each of its sentences. After that the
engine's writes keep it in step (a replaced document is replaced whole, a deleted one removed), and a
write by another process (the store's row count or largest ``seq`` moved) rebuilds it at the next GRAPH
query. A search that uses no GRAPH never builds it, and writes cost nothing until it is built.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from nlql.stores.base import DocRecord, Store

__all__ = ["GraphSidecar", "metadata_entities"]


def metadata_entities(metadata: Any) -> list[str]:
    """The names in ``metadata["entities"]`` (a list of strings; anything else gives none)."""
    if not isinstance(metadata, dict):
        return []
    names = metadata.get("entities")
    if not isinstance(names, (list, tuple)):
        return []
    return [n for n in names if isinstance(n, str)]


class GraphSidecar:
    """The engine's entity graph over a store's sentences (``extractor``: ``text -> list[str]`` or None)."""

    def __init__(self, store: Store, extractor: Callable[[str], Iterable[str]] | None) -> None:
        self.store = store
        self.extractor = extractor
        self._graph: Any = None
        self._fp: tuple[int, int] | None = None  # the store's (count, max seq) the graph reflects
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        return self._graph is not None

    def _names(self, content: str, doc_names: list[str]) -> list[str]:
        names = list(doc_names)
        if self.extractor is not None:
            names.extend(self.extractor(content))
        return names

    def _build(self) -> Any:
        from nlql.text.graph import EntityGraph

        graph = EntityGraph()
        rows = self.store.fetch(self.store.scan(None))
        docs: dict[str, tuple[list[tuple[int, list[str]]], int]] = {}
        for r in rows:
            sentences, _ = docs.setdefault(r.doc_id, ([], r.seq))
            names = self._names(r.content, metadata_entities(r.metadata))
            if names:
                sentences.append((r.position, names))
        graph.add_many([(d, s, seq) for d, (s, seq) in sorted(docs.items(), key=lambda kv: kv[1][1])])
        self._graph = graph
        return graph

    def _fingerprint(self) -> tuple[int, int]:
        return int(self.store.count()), int(self.store.max_seq())

    def graph(self) -> Any:
        """The graph (built from the store on first use, and built again when the store changed under
        this engine: another process wrote or deleted, which moves the store's row count or its
        largest ``seq``; this engine's own writes are applied incrementally instead)."""
        with self._lock:
            if self._graph is not None:
                fp = self._fingerprint()
                if self._fp is None:  # after this engine's own writes: take the store's state as seen
                    self._fp = fp
                elif fp != self._fp:
                    self._graph = None
            if self._graph is None:
                self._fp = self._fingerprint()
                self._build()
            return self._graph

    def on_upsert(self, docs: Sequence[DocRecord]) -> None:
        with self._lock:
            if self._graph is None:
                return
            items = []
            for d in docs:
                doc_names = metadata_entities(d.metadata)
                sentences = [(u.position, names) for u in d.units if (names := self._names(u.content, doc_names))]
                items.append((d.doc_id, sentences, d.seq))
            self._graph.add_many(items)
            self._fp = None

    def on_delete(self, doc_ids: Sequence[str]) -> None:
        with self._lock:
            if self._graph is not None:
                for d in doc_ids:
                    self._graph.remove(d)
                self._fp = None

    def activate(self, text: str, hops: int, decay: float) -> Any:
        """The :class:`~nlql.text.graph.Activation` of ``text`` (see :meth:`EntityGraph.activate`)."""
        return self.graph().activate(text, hops, decay)
