"""The entity graph beside any store: one engine-owned :class:`~nlql.text.graph.EntityGraph`, so GRAPH
activates the same rows on every backend (the graph and its formulas are :mod:`nlql.text.graph`).

Like the BM25 sidecar (:mod:`nlql.execute.keywords`) it is built from the store's rows on first use
(this is also how a re-attached store gets it): the engine's entity extractor runs on every stored
sentence, and a document's ``metadata["entities"]`` applies to each of its sentences. After that the
engine's writes keep it in step (a replaced document is replaced whole, a deleted one removed), and a
write by another process (the store's row count or largest ``seq`` moved) rebuilds it at the next GRAPH
query. A search that uses no GRAPH never builds it, and writes cost nothing until it is built.

A store that keeps entity links itself (``Capabilities.ENTITY_LINKS``: the directory store, and the
Faiss/hnswlib stores with a directory) gets each sentence's names at ingest (:meth:`GraphSidecar.extract`
fills ``DocRecord.entities`` before the write, so the links commit with the document), and the graph is
built from the links it reads back: a reopened store has the same graph whatever extractor the engine
that reopens it has. A store written before links were kept is adopted: its graph is built once from
the extractor and its links stored.

A store that computes GRAPH itself (``Capabilities.GRAPH_ARM``: PostgreSQL and DuckDB, from their two tables) is
asked for each activation (:class:`StoreActivation` wraps what it returns): the engine keeps no graph
for it, so it is stateless and sees another process's writes at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import numpy as np

from nlql.gc_pause import gc_paused
from nlql.stores.base import DocRecord, Store, TablePaths
from nlql.stores.batch import DocBatch, is_columnar

__all__ = ["GraphSidecar", "StoreActivation", "metadata_entities"]


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
        self._links_ok = False  # a GRAPH_ARM store's tables known to hold every document's links

    @property
    def built(self) -> bool:
        return self._graph is not None

    def _names(self, content: str, doc_names: list[str]) -> list[str]:
        names = list(doc_names)
        if self.extractor is not None:
            names.extend(self.extractor(content))
        return names

    @property
    def keeps_links(self) -> bool:
        """Whether the store keeps the entity links with its data (``Capabilities.ENTITY_LINKS``)."""
        return bool(self.store.capabilities.ENTITY_LINKS)

    def forget_stale(self) -> None:
        """Before a write or a delete: drop a graph that another process's writes made stale (it would
        otherwise take them for this engine's own)."""
        with self._lock:
            if self._graph is not None and self._fp is not None and self._fingerprint() != self._fp:
                self._graph = None

    def extract(self, docs: Sequence[DocRecord]) -> None:
        """Before a write: each sentence's entity names into ``docs`` for a store that keeps them (the
        extractor runs here, once per sentence; other stores pay nothing until GRAPH). No store call: an
        engine writing ahead runs it while its previous batch is written."""
        if not self.keeps_links:
            return
        if is_columnar(docs):  # the engine's batch, not read as records: a column of names per sentence
            batch = cast(DocBatch, docs)
            extract = self.extractor
            # names given only where a metadata holds "entities" (the engine's are dicts: one look each)
            given = [metadata_entities(m) for m in batch.metadatas] if any(
                type(m) is not dict or "entities" in m for m in batch.metadatas) else None
            if given is None or not any(given):  # (the common case: the extractor's names only)
                batch.entities = ([list(extract(content)) for content in batch.contents] if extract is not None
                                  else [[] for _ in batch.contents])
                return
            owner = np.repeat(np.arange(len(batch), dtype=np.int64), batch.counts).tolist()
            batch.entities = [self._names(content, given[i]) for i, content in zip(owner, batch.contents)]
            return
        for d in docs:
            doc_names = metadata_entities(d.metadata)
            d.entities = [self._names(u.content, doc_names) for u in d.units]

    def _sentences(self, d: DocRecord) -> list[tuple[int, list[str]]]:
        if d.entities is not None:  # names the writer found (and the store kept)
            return [(u.position, names) for u, names in zip(d.units, d.entities) if names]
        doc_names = metadata_entities(d.metadata)
        return [(u.position, names) for u in d.units if (names := self._names(u.content, doc_names))]

    def _build(self) -> Any:
        from nlql.text.graph import EntityGraph

        if self.keeps_links:
            rows = self.store.entity_rows()  # type: ignore[attr-defined]
            if rows is not None:
                self._graph = EntityGraph.from_rows(rows)
                return self._graph
        graph = EntityGraph()
        with gc_paused():  # every row read survives the loop: a collection would only walk them again
            # a table store gives its live rows without a Row per sentence
            rows = cast(TablePaths, self.store).live_sentences() if self.store.capabilities.FAST_PATH else [
                (r.doc_id, r.position, r.seq, r.content, r.metadata) for r in self.store.fetch(self.store.scan(None))]
            docs: dict[str, tuple[list[tuple[int, list[str]]], int]] = {}
            for doc_id, position, seq, content, metadata in rows:
                sentences, _ = docs.setdefault(doc_id, ([], seq))
                names = self._names(content, metadata_entities(metadata))
                if names:
                    sentences.append((position, names))
            del rows
        graph.add_many([(d, s, seq) for d, (s, seq) in sorted(docs.items(), key=lambda kv: kv[1][1])])
        if self.keeps_links:  # a store written before links were kept: built once, then kept with it
            self.store.adopt_entities(graph.to_rows())  # type: ignore[attr-defined]
        self._graph = graph
        return graph

    def _fingerprint(self) -> tuple[int, int]:
        return int(self.store.count()), int(self.store.max_seq())

    def graph(self) -> Any:
        """The graph (built from the store on first use, and built again when the store changed under
        this engine: another process wrote or deleted, which moves the store's row count or its
        largest ``seq``; this engine's own writes are applied incrementally instead, and the store's
        state after them recorded)."""
        with self._lock:
            if self._graph is not None and self._fingerprint() != self._fp:
                self._graph = None
            if self._graph is None:
                self._fp = self._fingerprint()
                self._build()
            return self._graph

    def on_upsert(self, docs: Sequence[DocRecord]) -> None:
        with self._lock:
            if self._graph is None:
                return
            self._graph.add_many([(d.doc_id, self._sentences(d), d.seq) for d in docs])
            self._fp = self._fingerprint()

    def on_delete(self, doc_ids: Sequence[str]) -> None:
        with self._lock:
            if self._graph is not None:
                for d in doc_ids:
                    self._graph.remove(d)
                self._fp = self._fingerprint()

    def ensure_links(self) -> None:
        """Before a statement that reads the store's entity tables: a store written before links were
        kept is adopted first (once per engine; the store remembers it is done)."""
        if not self.in_store or self._links_ok:
            return
        if not self.store.entities_kept():  # type: ignore[attr-defined]
            with self._lock:
                self._build()
                self._graph = None
        self._links_ok = True

    @property
    def in_store(self) -> bool:
        """Whether the store computes GRAPH itself (``Capabilities.GRAPH_ARM``): then no graph is kept here."""
        return bool(self.store.capabilities.GRAPH_ARM)

    def activate(self, text: str, hops: int, decay: float) -> Any:
        """The :class:`~nlql.text.graph.Activation` of ``text`` (see :meth:`EntityGraph.activate`), or for
        a store that computes GRAPH a :class:`StoreActivation` with the same reading methods."""
        if not self.in_store:
            return self.graph().activate(text, hops, decay)
        from nlql.text.graph import check_spread

        hops, decay = check_spread(hops, decay)
        if not isinstance(text, str):
            raise TypeError(f"GRAPH looks for entities in text, not {type(text).__name__}")
        got = self.store.graph_activation(text, hops, decay)  # type: ignore[attr-defined]
        if got is None:  # links not kept for every document yet: built once here, stored, then dropped
            with self._lock:
                graph = self._build()
                self._graph = None
            got = self.store.graph_activation(text, hops, decay)  # type: ignore[attr-defined]
            if got is None:  # the store could not keep them (read-only): this once, from the graph built
                return graph.activate(text, hops, decay)
        return StoreActivation(text, hops, decay, got)


class StoreActivation:
    """An activation computed by the store (:class:`nlql.stores.base.GraphInStore`), read like
    :class:`~nlql.text.graph.Activation`: the rows are arrays in insertion order; the entities found
    and the activation per hop come from a second statement, run only when explain (or
    :attr:`entities`) asks for them."""

    #: explain reads it: the store, not the engine, walked the graph
    in_store = True

    def __init__(self, text: str, hops: int, decay: float, rows: Any) -> None:
        self.text, self.hops, self.decay = text, hops, decay
        self.doc_ids, self.positions, self.seqs = rows.doc_ids, rows.positions, rows.seqs
        self.values = rows.values
        self._hop_rows = rows.hop_rows
        self._words = getattr(rows, "words", "unicode")
        self._detail: tuple[int, tuple[Any, ...], tuple[Any, ...], dict[str, float]] | None = None
        self._lookup: dict[tuple[str, int], float] | None = None

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def rows(self, indices: Any) -> list[tuple[str, int]]:
        idx = np.asarray(indices, dtype=np.int64)
        return list(zip(self.doc_ids[idx].tolist(), self.positions[idx].tolist()))

    def pairs(self) -> list[tuple[str, int]]:
        return list(zip(self.doc_ids.tolist(), self.positions.tolist()))

    def as_dict(self) -> dict[tuple[str, int], float]:
        if self._lookup is None:
            self._lookup = dict(zip(self.pairs(), self.values.tolist()))
        return self._lookup

    def get(self, pair: tuple[str, int], default: Any = None) -> Any:
        return self.as_dict().get(pair, default)

    def top(self, k: int) -> np.ndarray:
        from nlql.text.graph import Activation

        return Activation.top(self, k)  # type: ignore[arg-type]  # reads only len() and values

    def _details(self) -> tuple[int, tuple[Any, ...], tuple[Any, ...], dict[str, float]]:
        if self._detail is None:
            from nlql.text.graph import _DETAIL, FoundEntity, HopDetail

            max_weight, raised = self._hop_rows()
            names: dict[str, str] = {}
            final: dict[str, float] = {}
            per: list[list[tuple[str, float]]] = [[] for _ in range(self.hops + 1)]
            for hop, key, name, act in raised:  # ordered by hop, activation descending, key
                names[key] = name
                final[key] = max(final.get(key, 0.0), act)
                per[hop].append((name, act))
            per_hop = tuple(HopDetail(h, len(r), tuple(r[:_DETAIL])) for h, r in enumerate(per))
            firsts = _first_occurrences(self.text, _found_keys(raised), self._words)
            found = tuple(FoundEntity(k, names[k], a, b) for k, a, b in firsts)
            self._detail = (max_weight, found, per_hop, final)
        return self._detail

    @property
    def max_weight(self) -> int:
        return self._details()[0]

    @property
    def found(self) -> tuple[Any, ...]:
        return self._details()[1]

    @property
    def per_hop(self) -> tuple[Any, ...]:
        return self._details()[2]

    @property
    def entities(self) -> dict[str, float]:
        return dict(self._details()[3])

    @property
    def entity_count(self) -> int:
        return len(self._details()[3])

    def to_dict(self) -> dict[str, Any]:
        from nlql.text.graph import Activation

        return Activation.to_dict(self)  # type: ignore[arg-type]  # reads the attributes above

    def describe(self) -> list[str]:
        from nlql.text.graph import Activation

        return Activation.describe(self)  # type: ignore[arg-type]


def _found_keys(raised: Sequence[tuple[int, str, str, float]]) -> list[str]:
    """The keys of the entities found in the text (hop 0 of :meth:`GraphInStore` hop rows)."""
    return [key for hop, key, _, _ in raised if hop == 0]


def _first_occurrences(text: str, keys: Sequence[str], words: str = "unicode") -> list[tuple[str, int, int]]:
    """``(key, start, end)`` of each key's first occurrence in ``text`` (cut into ``words`` as the keys
    were) that lies inside no longer occurrence of another key, in text order: the order
    :meth:`EntityGraph.find` gives."""
    from nlql.text.entities import token_spans

    toks = token_spans(text, words)
    seen = [t for t, _, _ in toks]
    occ: list[tuple[int, int, str]] = []
    for key in keys:
        parts = key.split(" ")
        n = len(parts)
        occ.extend((i, i + n, key) for i in range(len(seen) - n + 1) if seen[i:i + n] == parts)
    kept: dict[str, tuple[int, int]] = {}
    for i, j, key in sorted(occ):
        if not any(a <= i and b >= j and b - a > j - i for a, b, _ in occ):
            kept.setdefault(key, (i, j))
    return [(key, toks[i][1], toks[j - 1][2]) for key, (i, j) in sorted(kept.items(), key=lambda kv: kv[1])]
