"""Keyword scoring beside any store: one engine-owned BM25 index, so BM25 ranks the same on every backend
(the index and formula themselves are :mod:`nlql.text.bm25`).

Rows are identified by their unit id (``doc_id#position``), which every store can give back, so the
index is independent of store-internal keys. It is built lazily from the store on first use (this is
also how a re-attached store gets it) and then kept in step by the engine's writes.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from nlql.stores.base import DocRecord, Row, Store, unit_id


class BM25Sidecar:
    """The engine's BM25 index over a store's sentences."""

    def __init__(self, store: Store, analyzer: Any = None) -> None:
        self.store = store
        self.analyzer = analyzer
        self._index: Any = None
        self._ids: dict[str, int] = {}
        self._doc_ids: dict[str, list[tuple[str, int]]] = {}
        self._rev: dict[int, tuple[str, int]] = {}
        self._next = 0
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        return self._index is not None

    def _build(self) -> None:
        from nlql.text.bm25 import BM25Index

        index = BM25Index(self.analyzer)
        keys = self.store.scan(None)
        rows = self.store.fetch(keys)
        self._index = index
        self._add_rows([(r.doc_id, r.position, r.content) for r in rows])

    def _add_rows(self, items: Sequence[tuple[str, int, str]]) -> None:
        ids, texts = [], []
        for doc_id, position, content in items:
            i = self._next
            self._next += 1
            uid = unit_id(doc_id, position)
            self._ids[uid] = i
            self._rev[i] = (doc_id, position)
            self._doc_ids.setdefault(doc_id, []).append((uid, i))
            ids.append(i)
            texts.append(content)
        if ids:
            self._index.add(ids, texts)

    def on_upsert(self, docs: Sequence[DocRecord]) -> None:
        with self._lock:
            if self._index is None:
                return
            self._remove([d.doc_id for d in docs])
            self._add_rows([(d.doc_id, u.position, u.content) for d in docs for u in d.units])

    def on_delete(self, doc_ids: Sequence[str]) -> None:
        with self._lock:
            if self._index is not None:
                self._remove(doc_ids)

    def _remove(self, doc_ids: Sequence[str]) -> None:
        gone: list[int] = []
        for d in doc_ids:
            for uid, i in self._doc_ids.pop(d, ()):
                del self._ids[uid]
                del self._rev[i]
                gone.append(i)
        if gone:
            self._index.remove(gone)

    def matches(self, text: str) -> tuple[list[tuple[str, int]], np.ndarray]:
        """Every row that contains a term of ``text``: its (doc_id, position) and BM25 score."""
        with self._lock:
            if self._index is None:
                self._build()
            ids, values = self._index.score(text)
            return [self._rev[int(i)] for i in ids], np.asarray(values, dtype=np.float64)

    def scores(self, text: str, keys: Sequence[Any], rows: Sequence[Row]) -> np.ndarray:
        """BM25 of ``text`` for each row (0.0 where no query term occurs)."""
        with self._lock:
            if self._index is None:
                self._build()
            ids = np.fromiter((self._ids.get(r.id, -1) for r in rows), dtype=np.int64, count=len(rows))
            out = np.zeros(len(rows), dtype=np.float64)
            valid = ids >= 0
            if not valid.any():
                return out
            got_keys, got_scores = self._index.score(text, ids[valid])
            if len(got_keys) == 0:
                return out
            pos = {int(k): float(s) for k, s in zip(got_keys, got_scores)}
            out[valid] = [pos.get(int(i), 0.0) for i in ids[valid]]
            return out
