"""Faiss behind the Store protocol: exact search, or an ``IndexHNSWFlat`` graph (inner product).

Vectors are unit-normalised by the embedders, so inner product is cosine.

``index="hnsw"`` keeps an ``IndexIDMap2(IndexHNSWFlat(dim, m, METRIC_INNER_PRODUCT))`` whose ids are the
store's labels (see :mod:`nlql.stores.ann`). A pushed filter is the row table's exact mask, turned into an
``IDSelectorBitmap`` over labels and passed per search as ``SearchParametersHNSW(efSearch=…, sel=…)``.
HNSW cannot remove vectors, so removed rows keep their labels in the graph, are excluded by the same
selector, and the graph is rebuilt once they outnumber the live rows. Faiss's filtered HNSW walk keeps
non-matching nodes in its ``efSearch``-bounded candidate list, so it under-fills under selective
filters; the first round therefore starts at ``efSearch / selectivity`` and the shared recall loop
widens from there (or answers exactly).

``index="flat"`` is exact search, answered by the built-in store's product over the float32 matrix
rather than by an ``IndexFlatIP``. Only the same arithmetic makes the answer bit-identical to the
built-in store, as SPEC §6 requires of exact mode: BLAS scores of identical vectors (a repeated
sentence) can differ in the last bit depending on their row, and that decides their order, which no
other arithmetic reproduces. It is also faster once a filter's sub-matrix is cached — measured at
100k × 384, one query: 5.4 / 0.24 / 0.04 ms with no / a 10% / a 1% filter against 6.0 / 0.87 / 0.31 ms
for ``IndexFlatIP`` with an ``IDSelectorBitmap`` (one OpenMP thread) — though not the first time a broad
filter is seen (10%: 3–7 ms while the sub-matrix is gathered, against 0.9 ms). Flat therefore keeps no
second copy of the vectors and writes no index file.

Module name note: ``import faiss`` below is an absolute import and finds the real package, never this
module (``nlql.stores.faiss``).
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

INDEX_TYPES = ("flat", "hnsw")


def _import_faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:
        raise MissingDependencyError("faiss", "faiss-cpu") from exc
    return faiss


class FaissStore(AnnStore):
    """Rows in RAM (and optionally a directory), searched exactly or through a Faiss HNSW graph.

    Args:
        path: A directory (created if missing) holding ``nlql.sqlite`` (and ``index.faiss`` for HNSW);
            None keeps everything in RAM. Reopening a directory searches every stored document without
            re-embedding.
        index: ``"flat"`` (exact; ``EXACT`` capability) or ``"hnsw"`` (approximate, ``IndexHNSWFlat``).
        m: HNSW graph degree.
        ef_search: HNSW ``efSearch`` of a first search round (later rounds double it).
        ef_construction: HNSW ``efConstruction``.
        autosave: Write the index after every upsert/delete instead of on ``flush()``/``close()``.

    Raises:
        MissingDependencyError: faiss is not installed.

    Example:
        >>> import numpy as np
        >>> from nlql.stores.base import DocRecord, UnitRecord
        >>> store = FaissStore(index="hnsw")
        >>> store.open(2)
        >>> units = [UnitRecord(0, "a.", 0, 2, " "), UnitRecord(1, "b.", 3, 5)]
        >>> store.upsert([DocRecord("d1", "a. b.", {}, units, np.eye(2, dtype=np.float32), seq=1)])
        >>> [key for key, _ in store.knn(np.array([[0.9, 0.1]], dtype=np.float32), 1)[0]]
        [0]
        >>> store.last_stats["path"]  # two rows: scanning them beats walking a graph
        'exact'
    """

    INDEX_FILE = "index.faiss"
    KIND = "faiss"

    def __init__(self, path: str | Path | None = None, *, index: str = "flat", m: int = 32,
                 ef_search: int = 128, ef_construction: int = 200, autosave: bool = False) -> None:
        if index not in INDEX_TYPES:
            raise ValueError(f"index must be one of {INDEX_TYPES}, not {index!r}")
        if m < 2 or ef_construction < 1:
            raise ValueError("m must be ≥ 2 and ef_construction ≥ 1")
        self._faiss = _import_faiss()  # also for "flat": store="faiss" promises faiss is there
        self.index_type = index
        self.m = m
        self.ef_construction = ef_construction
        self.hides_dead = False  # HNSW keeps removed ids: the selector must exclude them
        self.capabilities = replace(MEMORY_CAPABILITIES, NAME="faiss", EXACT=index == "flat",
                                    KNN_SCORES=False, KNN_ORDERED=False)
        super().__init__(path, ef_search=ef_search, autosave=autosave)

    def compile_filter(self, flt: Filter) -> NativeFilter:
        if self.index_type == "flat":
            return super().compile_filter(flt)
        return NativeFilter(native=flt, text=f"IDSelectorBitmap({describe_filter(flt)})")

    # ------------------------------------------------------------------------------ library hooks

    def _wants_index(self) -> bool:
        return self.index_type == "hnsw"

    def _new_index(self, dim: int, capacity: int) -> Any:
        faiss = self._faiss
        inner = faiss.IndexHNSWFlat(dim, self.m, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = self.ef_construction
        inner.hnsw.efSearch = self.ef_search
        return faiss.IndexIDMap2(inner)

    def _index_add(self, labels: np.ndarray, vectors: np.ndarray) -> int:
        self._index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32),
                                 np.ascontiguousarray(labels, dtype=np.int64))
        return 0

    def _index_remove(self, labels: np.ndarray) -> int:
        return len(labels)  # HNSW has no remove_ids: the labels stay, dead

    def _index_count(self, index: Any) -> int:
        return int(index.ntotal)

    def _selector(self, allowed: np.ndarray) -> Any:
        # bit i%8 of byte i//8 is label i; the wrapper keeps the packed array alive with the selector
        return self._faiss.IDSelectorBitmap(np.packbits(allowed, bitorder="little"))

    def _first_ef(self, fraction: float, filtered: bool) -> int:
        # only about fraction·efSearch of the candidate list can become results: widen up front (≤ 16×)
        if filtered and fraction < 1:
            return int(min(self.ef_search / max(fraction, 1e-9), 16 * self.ef_search))
        return self.ef_search

    def _search(self, queries: np.ndarray, k: int, selector: Any, ef: int) -> tuple[np.ndarray, np.ndarray] | None:
        faiss = self._faiss
        params = faiss.SearchParametersHNSW(efSearch=max(ef, k))
        if selector is not None:
            params.sel = selector
        # Small batches (one query, or a multi-query expansion) run on one OpenMP thread: with more,
        # faiss's threads fight OpenBLAS's spinning ones (measured on 2 cores: 8–18 ms instead of
        # 0.1–1 ms per query). The setting is per calling thread in libgomp, and restored afterwards.
        threads = faiss.omp_get_max_threads()
        if len(queries) < 16:
            faiss.omp_set_num_threads(1)
        try:
            sims, labels = self._index.search(queries, k, params=params)
        finally:
            faiss.omp_set_num_threads(threads)
        return labels, sims

    def _index_params(self) -> dict[str, Any]:
        return {"kind": "faiss-hnsw", "dim": self.dim, "m": self.m, "ef_construction": self.ef_construction}

    def _write_index(self, path: Path) -> None:
        self._faiss.write_index(self._index, str(path))

    def _read_index(self, path: Path) -> Any:
        index = self._faiss.read_index(str(path))
        if index.d != self.dim:
            raise ValueError("dimension differs")
        return index

    def _same_vectors(self, index: Any, labels: np.ndarray, expected: np.ndarray) -> bool:
        got = np.vstack([index.reconstruct(int(label)) for label in labels])
        return bool(np.array_equal(got, expected))


__all__ = ["FaissStore"]
