"""Numeric kernels shared by the engine and the stores: BLAS products with the built-in store's bits.

A score is the float32 product of two unit vectors, computed with single-threaded BLAS in whole blocks of
:data:`BLOCK` rows, so that every store that rescores a few rows (pgvector's exact rescoring, MMR's
vectors, the int8 copy's fp32 rescore) gives each row the very bits of the built-in store's full scan.
Neutral ground: it imports numpy, threadpoolctl (optional) and :mod:`nlql.values` only.
"""

from __future__ import annotations

import contextlib
import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from nlql.values import round_scores

__all__ = ["BLOCK", "PARALLEL_ROWS", "blas_one_thread", "block_products", "block_rows", "full_scan", "fuse_normalise",
           "matmul_t", "row_products", "rows_alone", "score_rows"]

_blas_libs: Any = None


class _OneBlasThread:
    """Limits BLAS to one thread inside the block and restores the previous counts after: the BLAS
    libraries' own setters, found once with threadpoolctl (its ``limit()`` context costs ~25 µs a call,
    more than a selective filter's whole product; this ~8 µs)."""

    __slots__ = ("_old",)

    def __enter__(self) -> None:
        self._old = [(lib, lib.get_num_threads()) for lib in _blas_libs]
        for lib, n in self._old:
            if n != 1:
                lib.set_num_threads(1)

    def __exit__(self, *exc: Any) -> None:
        for lib, n in self._old:
            if n != 1:
                lib.set_num_threads(n)


def blas_one_thread() -> Any:
    """A context limiting BLAS to one thread: a matrix-vector product is memory-bound, and on a busy
    2-core machine a second BLAS thread waits for a time slice (8 ms instead of 0.2 ms at 10k rows)."""
    global _blas_libs
    if _blas_libs is None:
        try:
            from threadpoolctl import ThreadpoolController

            _blas_libs = list(ThreadpoolController().select(user_api="blas").lib_controllers)
        except Exception:  # noqa: BLE001 - optional optimisation
            _blas_libs = []
    if not _blas_libs:
        return contextlib.nullcontext()
    return _OneBlasThread()


def matmul_t(vectors: np.ndarray, sub: np.ndarray) -> np.ndarray:
    """``vectors @ sub.T`` laid out (batch, N), computed with single-threaded BLAS."""
    with blas_one_thread():
        out = np.atleast_2d(vectors.astype(np.float32, copy=False) @ sub.T)
    return round_scores(out)


#: Rows per block of OpenBLAS's float32 matrix-vector kernel. A row in a product's last, partial block is
#: scored by another kernel (other bits), so no score is taken from one: a full scan scores the matrix's
#: last rows padded to a whole block (:func:`full_scan`), and scoring a few rows pads them the same way
#: (:func:`block_rows`, :func:`row_products`). Two equal vectors then get the same bits wherever they
#: are, and their rounded scores tie (a copy of a text among the newest rows once came out 1e-6 apart).
BLOCK = 4
#: From this many rows a full scan runs as two halves on two threads (the same bits: the halves split
#: on a block boundary).
PARALLEL_ROWS = 1 << 18

_scan_pool: ThreadPoolExecutor | None = None


@functools.cache
def rows_alone(dim: int) -> bool:
    """Whether a row in a whole block gets the same bits at any place in any block (checked once per
    dimension on this BLAS): then scoring some rows gathers those rows only, padded to whole blocks,
    instead of every row of their blocks (400 scattered rows: 0.6 MB read instead of 2.4 MB). The
    kernels' summation order does not depend on the data, so random rows show it."""
    rng = np.random.default_rng(dim)
    n = 40 * BLOCK + 3
    m = rng.standard_normal((n, dim)).astype(np.float32)
    q = rng.standard_normal(dim).astype(np.float32)
    with blas_one_thread():
        full = (q[None, :] @ m.T)[0]
        for size in (BLOCK, 2 * BLOCK, 7 * BLOCK, 40 * BLOCK):
            for _ in range(6):
                keys = rng.permutation(40 * BLOCK)[:size]  # rows at every place mod BLOCK, unsorted
                if not np.array_equal((q[None, :] @ m[keys].T)[0].view(np.uint32), full[keys].view(np.uint32)):
                    return False
    return True


def block_rows(keys: np.ndarray, size: int, dim: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(rows to gather, where each of ``keys`` lands among them) so that ``q @ M[gather].T`` gives each
    key the very bits :func:`full_scan` gives it over ``M[:size]``: whole aligned blocks of :data:`BLOCK`
    rows (the last one padded with copies of row ``size - 1``, as the scan pads it), or, when the BLAS
    scores a row alike at any place (:func:`rows_alone` of ``dim``), the keys themselves padded to a
    multiple of :data:`BLOCK` with copies of the last. ``keys`` ascending, below ``size``."""
    keys = np.asarray(keys, dtype=np.int64)
    if dim is not None and rows_alone(dim):
        gather = np.concatenate([keys, np.repeat(keys[-1:], -len(keys) % BLOCK)])
    else:
        blocks = np.unique(keys // BLOCK)
        gather = np.minimum((blocks[:, None] * BLOCK + np.arange(BLOCK)).ravel(), size - 1)
    return gather, np.searchsorted(gather, keys)


def score_rows(v: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``rows @ v`` rounded, each row with the bits a full scan of the built-in store gives it in a whole
    block (:func:`rows_alone`): the rows are padded to a multiple of :data:`BLOCK` with copies of the
    last, so none is scored by the partial-block kernel. For a store that holds the vectors elsewhere
    (pgvector) and rescores a few of them as this store scores them."""
    return round_scores(row_products(v, rows))


def row_products(v: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """:func:`score_rows` before the rounding (a store's ``similarities()`` whose knn scores with it)."""
    n = len(rows)
    if n % BLOCK and rows_alone(rows.shape[1]):
        rows = np.concatenate([rows, np.repeat(rows[-1:], -n % BLOCK, axis=0)])
    with blas_one_thread():
        out = np.atleast_2d(v.astype(np.float32, copy=False) @ rows.T)
    return out[0][:n]


def block_products(queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``queries @ rows.T`` (float32, not rounded), each row scored in a whole block as
    :func:`row_products` scores it: for a store that scores a set of rows it holds elsewhere."""
    queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
    if not len(rows):
        return np.zeros((len(queries), 0), dtype=np.float32)
    return np.stack([row_products(q[None, :], rows) for q in queries])


def full_scan(matrix: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``matrix @ v`` rounded, on two threads when large (each half single-threaded BLAS). The rows of
    the last, partial block are scored as a whole block of their own (padded with copies of the last
    row), so that every row has the bits of a whole block (:data:`BLOCK`)."""
    global _scan_pool
    n = len(matrix)
    tail = n - n % BLOCK
    if tail < n:
        last = np.concatenate([matrix[tail:], np.repeat(matrix[-1:], tail + BLOCK - n, axis=0)])
        if tail >= PARALLEL_ROWS and (os.cpu_count() or 1) >= 2:
            out = np.empty(n, dtype=np.float32)
            out[:tail] = full_scan(matrix[:tail], v)
        else:  # (the whole blocks written in place: no copy of n scores)
            row = np.empty((1, n), dtype=np.float32)
            with blas_one_thread():
                np.matmul(v[None, :].astype(np.float32, copy=False), matrix[:tail].T, out=row[:, :tail])
            round_scores(row[0, :tail])
            out = row[0]
        out[tail:] = matmul_t(v[None, :], last)[0][: n - tail]
        return out
    if n < PARALLEL_ROWS or (os.cpu_count() or 1) < 2:
        return matmul_t(v[None, :], matrix)[0]
    half = (n // 2) - (n // 2) % BLOCK
    out = np.empty(n, dtype=np.float32)
    if _scan_pool is None:
        _scan_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="nlql-scan")

    def part(lo: int, hi: int) -> None:
        np.matmul(matrix[lo:hi], v, out=out[lo:hi])

    with blas_one_thread():
        list(_scan_pool.map(lambda b: part(*b), [(0, half), (half, n)]))
    return round_scores(out)


def fuse_normalise(values: np.ndarray, method: str) -> np.ndarray:
    """FUSE's normalisation of one arm's values over its window (SPEC §11), in float64: the one copy the
    engine's fusion and the built-in store's numpy page both use, so both give every row the same bits.

    ``minmax``: (v − min) / (max − min), all equal → 1. ``dbsf``: (v − (μ − 3σ)) / 6σ clipped to
    [0, 1], μ and σ the mean and population standard deviation of the window's values, σ = 0 → 1.

    >>> fuse_normalise(np.array([3.0, 2.0, 1.0]), "minmax").tolist()
    [1.0, 0.5, 0.0]
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return arr
    if method == "dbsf":
        mu, sigma = float(arr.mean()), float(arr.std())
        if not sigma > 0:
            return np.ones_like(arr)
        return np.clip((arr - (mu - 3 * sigma)) / (6 * sigma), 0.0, 1.0)
    lo, hi = float(arr.min()), float(arr.max())
    if not hi > lo:
        return np.ones_like(arr)
    return (arr - lo) / (hi - lo)
