"""An int8 copy of the built-in store's vectors, scanned before the exact float32 rescore (issue 21).

The copy is Faiss's ``ScalarQuantizer`` (``QT_8bit``: one byte per dimension, a per-dimension range
learnt from a sample of the rows), one quarter of the float32 matrix, scanned by Faiss's SIMD kernel
into the ``depth`` best rows by approximate score. Those rows are then rescored exactly (the store's
float32 arithmetic) and the answer is **certified**: every row is encoded with a known reconstruction
error ``‖x − x̃‖``, so a row outside the candidates scores at most

    (the depth-th approximate score) + ‖q‖ · max‖x − x̃‖ + MARGIN

(Cauchy–Schwarz; ``MARGIN`` covers float32 rounding of both dot products and the 6-place rounding of
scores). The largest error is set by a few rows outside the range the quantiser learnt (at 100k hash
vectors: 0.097, where 99.9 % of the rows stay under 0.017), so the copy also keeps the rows whose error
exceeds the ``OUTLIER_QUANTILE`` of the first rows encoded (``tau``) as *outliers*: the caller rescores
them exactly with the candidates, and every other row then scores at most
``(the depth-th approximate score) + ‖q‖ · tau + MARGIN`` — the same proof, a bound 6× tighter, so a
fusion arm's window of 100 certifies at depth ~300 instead of ~5,000. When the k-th exact score beats that bound, no row left out could be in the top k, so the
answer — rows *and* scores — is the exact scan's. Otherwise the caller widens the depth or falls back
to the exact scan (and says so in its stats).

Faiss is the optional ``faiss`` extra (``pip install nlql-engine[faiss]``); without it the store scans
float32 only. Measured on this machine (1M × 384, one query): float16 (``QT_fp16``) scans no faster than
numpy's float32 product (the conversion costs what the smaller read saves), int8 scans 2–2.7× faster;
hence int8.

Rows are stored in shards of ``SHARD_ROWS`` consecutive row keys, scanned on up to two threads (Faiss
releases the GIL; a single query is otherwise one thread in Faiss). The copy is append-only, like the
matrix; the owner drops it when the matrix compacts.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

#: Slack added to the bound: float32 accumulation error of both dot products over 384–1024 dimensions
#: (≤ d·2⁻²⁴·‖q‖‖x‖ each, 2.3e-5 at d = 384) plus half a unit of the 6th decimal.
MARGIN = 1e-4
SHARD_ROWS = 1 << 18
#: The error quantile of the first rows encoded above which a row is an outlier (rescored always).
OUTLIER_QUANTILE = 0.999
#: More outliers than this share of the rows (data drifted from the sample): the bound uses err_max.
OUTLIER_SHARE = 1 / 256
_TRAIN_ROWS = 1 << 16

_faiss: Any = None


def available() -> bool:
    """Whether Faiss can be imported (the quantised scan needs it)."""
    global _faiss
    if _faiss is None:
        try:
            import faiss

            _faiss = faiss
        except ImportError:
            _faiss = False
    return _faiss is not False


class Int8Copy:
    """int8 codes of matrix rows ``0..size`` with the largest reconstruction error among them."""

    def __init__(self, dim: int) -> None:
        assert available()
        self.dim = dim
        self.size = 0
        self.err_max = 0.0
        self._trained: Any = None  # a trained, empty index whose quantiser every shard copies
        self._shards: list[tuple[int, Any]] = []  # (first row key, faiss index)
        self._pool: ThreadPoolExecutor | None = None
        self.tau: float | None = None  # the outlier threshold (set from the first rows encoded)
        self._outliers: list[np.ndarray] = []  # ids of rows whose error exceeds tau

    @property
    def nbytes(self) -> int:
        return self.size * self.dim

    def subset(self, matrix: np.ndarray, keys: np.ndarray) -> Int8Copy:
        """A copy over the rows ``keys`` only (local ids 0..len(keys)), with this copy's quantiser: a
        filter's rows scanned without reading the others (the codes are the same, so the bound too)."""
        sub = Int8Copy(self.dim)
        sub._trained = self._trained
        sub.err_max = self.err_max
        sub.tau = self.tau
        sub.sync(matrix, keys)
        return sub

    def sync(self, matrix: np.ndarray, keys: np.ndarray | None = None) -> None:
        """Encode the rows of ``matrix`` (or of ``matrix[keys]``) not yet encoded (only ever appended)."""
        n = len(matrix) if keys is None else len(keys)
        if n <= self.size:
            return
        faiss = _faiss
        if self._trained is None:
            step = max(1, n // _TRAIN_ROWS)
            sample = np.ascontiguousarray(matrix[::step][:_TRAIN_ROWS])
            self._trained = faiss.IndexScalarQuantizer(self.dim, faiss.ScalarQuantizer.QT_8bit,
                                                       faiss.METRIC_INNER_PRODUCT)
            self._trained.train(sample)
        lo = self.size
        while lo < n:
            if not self._shards or self._shards[-1][1].ntotal >= SHARD_ROWS:
                self._shards.append((lo, faiss.clone_index(self._trained)))
            first, index = self._shards[-1]
            hi = min(n, lo + SHARD_ROWS - index.ntotal)
            chunk = np.ascontiguousarray(matrix[lo:hi] if keys is None else matrix[keys[lo:hi]], dtype=np.float32)
            codes = index.sa_encode(chunk)
            err = np.linalg.norm(chunk - index.sa_decode(codes), axis=1)
            self.err_max = max(self.err_max, float(err.max()) if len(err) else 0.0)
            if self.tau is None and len(err):
                self.tau = float(np.quantile(err, OUTLIER_QUANTILE))
            if self.tau is not None:
                self._outliers.append(np.flatnonzero(err > self.tau).astype(np.int64) + lo)
            index.add_sa_codes(codes)
            lo = hi
        self.size = n

    def selectors(self, mask: np.ndarray | None) -> list[Any] | None:
        """Per-shard Faiss selectors for a mask over rows ``0..size`` (None: every row)."""
        if mask is None:
            return None
        faiss = _faiss
        out = []
        for first, index in self._shards:
            bits = np.packbits(mask[first:first + index.ntotal], bitorder="little")
            sel = faiss.IDSelectorBitmap(index.ntotal, faiss.swig_ptr(bits))
            sel.keep_alive = bits  # the selector reads the array; keep it with it
            out.append(sel)
        return out

    def search(self, q: np.ndarray, depth: int, selectors: list[Any] | None) -> tuple[np.ndarray, np.ndarray]:
        """(row keys, approximate scores) of the ``depth`` best rows, best first (fewer when fewer pass)."""
        faiss = _faiss
        qq = np.ascontiguousarray(q.reshape(1, -1), dtype=np.float32)

        def one(i: int) -> tuple[np.ndarray, np.ndarray]:
            first, index = self._shards[i]
            kk = min(depth, index.ntotal)
            params = None if selectors is None else faiss.SearchParameters(sel=selectors[i])
            threads = faiss.omp_get_max_threads()
            faiss.omp_set_num_threads(1)  # per calling thread in libgomp; restored below
            try:
                dist, lab = index.search(qq, kk, params=params)
            finally:
                faiss.omp_set_num_threads(threads)
            keep = lab[0] >= 0
            return lab[0][keep].astype(np.int64) + first, dist[0][keep]

        shards = range(len(self._shards))
        if len(self._shards) > 1 and (os.cpu_count() or 1) > 1:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="nlql-int8")
            parts = list(self._pool.map(one, shards))
        else:
            parts = [one(i) for i in shards]
        labels = np.concatenate([p[0] for p in parts])
        scores = np.concatenate([p[1] for p in parts])
        if len(labels) > depth:
            top = np.argpartition(-scores, depth - 1)[:depth]
            labels, scores = labels[top], scores[top]
        order = np.argsort(-scores, kind="stable")
        return labels[order], scores[order]

    def outliers(self) -> np.ndarray:
        """The ids of the rows :meth:`bound` does not cover (the caller rescores them with the candidates);
        none when they are too many, and the bound then uses the largest error."""
        if self.tau is None or not self._outliers:
            return np.zeros(0, dtype=np.int64)
        if len(self._outliers) > 1:
            self._outliers = [np.concatenate(self._outliers)]
        out = self._outliers[0]
        return out if len(out) <= max(64, self.size * OUTLIER_SHARE) else np.zeros(0, dtype=np.int64)

    def bound(self, q: np.ndarray, worst_inside: float, outliers: bool = False) -> float:
        """The highest score a row not among the candidates can have (``worst_inside``: the lowest
        approximate score among them); with ``outliers``, a row not among them either (the caller
        rescored every id of :meth:`outliers`)."""
        err = self.err_max
        if outliers and self.tau is not None and len(self.outliers()):
            err = self.tau
        return worst_inside + float(np.linalg.norm(q)) * err + MARGIN

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


def depth_for(k: int, rows: int) -> int:
    """The first candidate depth for a top-k over ``rows`` rows: a second round costs a second scan, so
    the first one keeps enough (Faiss's heap of a few thousand costs little beside the scan); one in
    256 rows certified every query of bench/builtin_speed.py at 1M in one round. A wide top-k (MMR's
    window of 100) grows by 4k + 512, not 16k: each candidate is rescored exactly, and the 1,600 rows
    16k gave cost MMR 2.4 ms more at 100k (bench/mmr.py) with the same answers."""
    return int(min(rows, max(min(16 * k, 4 * k + 512), 512, rows // 256)))


__all__ = ["MARGIN", "SHARD_ROWS", "Int8Copy", "available", "depth_for"]
