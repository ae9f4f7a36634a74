"""hnswlib behind the Store protocol: an HNSW graph in the ``cosine`` (or ``ip``) space.

Labels are the store's labels (see :mod:`nlql.stores.ann`). A pushed filter is the row table's exact
mask; hnswlib takes it as ``knn_query(filter=callable)`` called with each candidate's label, so the
callable is a bound ``list.__getitem__`` over a per-label list of booleans (no Python frame per call),
and filtered queries run on one thread, as hnswlib advises. hnswlib raises instead of returning fewer
than ``k`` rows ("Cannot return the results in a contiguous 2D array"); the shared recall loop catches
that, widens, and falls back to the exact path, so a selective filter still returns ``min(k, matches)``.

hnswlib reports *distances*: ``1 − cos`` in the ``cosine`` space and ``1 − ⟨q, x⟩`` in ``ip``; the store
reports cosines (recomputed from the matrix). Removed rows are ``mark_deleted`` (hnswlib hides them from
results) and their slots are reused by later inserts (``allow_replace_deleted``); the capacity doubles
with ``resize_index`` when full.

Module name note: ``import hnswlib`` below is an absolute import and finds the real package, never this
module (``nlql.stores.hnswlib``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from nlql.errors import MissingDependencyError
from nlql.pushdown import Filter, NativeFilter
from nlql.stores.ann import AnnStore
from nlql.stores.memory import MEMORY_CAPABILITIES, describe_filter
from nlql.values import normalize_rows

SPACES = ("cosine", "ip")


def _import_hnswlib() -> Any:
    try:
        import hnswlib
    except ImportError as exc:
        raise MissingDependencyError("hnswlib", "hnswlib") from exc
    return hnswlib


class HnswlibStore(AnnStore):
    """Rows in RAM (and optionally a directory) with an hnswlib graph over their vectors.

    Args:
        path: A directory (created if missing) holding ``nlql.sqlite`` and ``index.bin``; None keeps
            everything in RAM. Reopening a directory searches every stored document without re-embedding.
        space: ``"cosine"`` (hnswlib normalises) or ``"ip"`` (the vectors are already unit length).
        m: Graph degree ``M``.
        ef_construction: Build-time breadth.
        ef_search: Query-time ``ef`` of a first search round (later rounds double it).
        max_elements: Initial capacity; doubled (``resize_index``) whenever it runs out.
        autosave: Write the index after every upsert/delete instead of on ``flush()``/``close()``.

    Raises:
        MissingDependencyError: hnswlib is not installed.

    Example:
        >>> import numpy as np
        >>> from nlql.stores.base import DocRecord, UnitRecord
        >>> store = HnswlibStore()
        >>> store.open(2)
        >>> units = [UnitRecord(0, "a.", 0, 2, " "), UnitRecord(1, "b.", 3, 5)]
        >>> store.upsert([DocRecord("d1", "a. b.", {}, units, np.eye(2, dtype=np.float32), seq=1)])
        >>> [key for key, _ in store.knn(np.array([[0.9, 0.1]], dtype=np.float32), 1)[0]]
        [0]
    """

    INDEX_FILE = "index.bin"
    KIND = "hnswlib"

    def __init__(self, path: str | Path | None = None, *, space: str = "cosine", m: int = 16,
                 ef_construction: int = 200, ef_search: int = 128, max_elements: int = 1024,
                 autosave: bool = False) -> None:
        if space not in SPACES:
            raise ValueError(f"space must be one of {SPACES} (SIMILARITY is cosine), not {space!r}")
        if m < 2 or ef_construction < 1 or max_elements < 1:
            raise ValueError("m must be ≥ 2, ef_construction and max_elements ≥ 1")
        self._hnswlib = _import_hnswlib()
        self.space = space
        self.m = m
        self.ef_construction = ef_construction
        self.max_elements = max_elements
        self.hides_dead = True  # mark_deleted labels never come back from knn_query
        self.capabilities = replace(MEMORY_CAPABILITIES, NAME="hnswlib", EXACT=False, KNN_SCORES=False,
                                    KNN_ORDERED=False)
        super().__init__(path, ef_search=ef_search, autosave=autosave)

    def compile_filter(self, flt: Filter) -> NativeFilter:
        return NativeFilter(native=flt, text=f"knn_query(filter={describe_filter(flt)})")

    # ------------------------------------------------------------------------------ library hooks

    def _new_index(self, dim: int, capacity: int) -> Any:
        index = self._hnswlib.Index(space=self.space, dim=dim)
        index.init_index(max_elements=max(self.max_elements, capacity), M=self.m,
                         ef_construction=self.ef_construction, random_seed=100, allow_replace_deleted=True)
        index.set_ef(self.ef_search)
        return index

    def _index_add(self, labels: np.ndarray, vectors: np.ndarray) -> int:
        index = self._index
        reused = min(self._dead, len(labels))  # replace_deleted fills deleted slots first
        need = index.get_current_count() + len(labels) - reused
        capacity = index.get_max_elements()
        if need > capacity:
            index.resize_index(max(need, 2 * capacity))
        index.add_items(np.ascontiguousarray(vectors, dtype=np.float32),
                        np.ascontiguousarray(labels, dtype=np.int64), replace_deleted=True)
        return reused

    def _index_remove(self, labels: np.ndarray) -> int:
        for label in labels.tolist():
            self._index.mark_deleted(label)
        return len(labels)

    def _index_count(self, index: Any) -> int:
        return int(index.get_current_count())  # deleted elements included

    def _selector(self, allowed: np.ndarray) -> Any:
        return allowed.tolist().__getitem__

    def _search(self, queries: np.ndarray, k: int, selector: Any, ef: int) -> tuple[np.ndarray, np.ndarray] | None:
        index = self._index
        index.set_ef(max(ef, k))
        try:
            if selector is None:
                labels, dist = index.knn_query(queries, k=k)
            else:
                labels, dist = index.knn_query(queries, k=k, num_threads=1, filter=selector)
        except RuntimeError:  # found fewer than k: "Cannot return the results in a contiguous 2D array"
            return None
        finally:
            index.set_ef(self.ef_search)
        return labels.astype(np.int64), 1.0 - dist

    def _index_params(self) -> dict[str, Any]:
        return {"kind": "hnswlib", "space": self.space, "dim": self.dim, "m": self.m,
                "ef_construction": self.ef_construction}

    def _write_index(self, path: Path) -> None:
        self._index.save_index(str(path))

    def _read_index(self, path: Path) -> Any:
        index = self._hnswlib.Index(space=self.space, dim=self.dim)
        index.load_index(str(path), max_elements=0, allow_replace_deleted=True)
        if index.M != self.m or index.ef_construction != self.ef_construction:
            raise ValueError("built with other parameters")
        index.set_ef(self.ef_search)
        return index

    def _same_vectors(self, index: Any, labels: np.ndarray, expected: np.ndarray) -> bool:
        got = np.asarray(index.get_items(labels.tolist()), dtype=np.float32)
        if self.space == "cosine":  # hnswlib stores cosine vectors normalised
            expected = normalize_rows(expected)
        return got.shape == expected.shape and bool(np.allclose(got, expected, atol=1e-5))


__all__ = ["HnswlibStore"]
