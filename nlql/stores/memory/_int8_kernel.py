"""The Numba-compiled loops of :mod:`nlql.stores.memory.int8_scan` (imported only when the int8 copy is used:
this module imports Numba). Module-level functions, so that Numba's cache keeps their machine code."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba import types as t

__all__ = ["gather_dot", "kernel"]

# one signature each, compiled at import (or loaded from Numba's cache): arguments of other types raise
# rather than compile another version
_I64, _PAIR = t.int64, t.UniTuple(t.int64, 2)
_COMPACT = _PAIR(t.int64[::1], t.int32[::1], _I64, _I64)
_KERNEL = _PAIR(t.uint8[:, ::1], _I64, t.int16[::1], t.boolean[::1], _I64, _I64, t.int64[::1], t.int32[::1], _I64, _I64)


@numba.njit(_COMPACT, nogil=True, cache=True, boundscheck=False)
def compact(ids: Any, vals: Any, count: int, cap: int) -> Any:
    """Keep the ``cap`` best of ``count`` held rows (more when tied); (rows held, the new threshold)."""
    kth = np.partition(vals[:count], count - cap)[count - cap]  # the cap-th best score
    above = 0
    for i in range(count):
        if vals[i] >= kth:
            above += 1
    # ties filling the buffer: keep only those above
    threshold = np.int64(kth) + 1 if above >= 2 * cap else np.int64(kth)
    held = 0
    for i in range(count):
        if vals[i] >= threshold:
            ids[held] = ids[i]
            vals[held] = vals[i]
            held += 1
    return held, threshold


@numba.njit(_KERNEL, nogil=True, cache=True, boundscheck=False)
def kernel(codes: Any, rows: int, u: Any, mask: Any, first: int, threshold: int, ids: Any, vals: Any,
           count: int, cap: int) -> Any:
    masked = mask.shape[0] > 0
    d = codes.shape[1]
    block = np.empty(256, dtype=np.int32)
    for lo in range(0, rows, 256):
        hi = min(rows, lo + 256)
        # the scores of a block first: a loop LLVM turns into vpmovzxbw + vpmaddwd (int32 lanes);
        # with the threshold test inside it, it summed in int64 lanes at half the speed
        for i in range(lo, hi):
            acc = np.int32(0)
            for j in range(d):
                acc += np.int16(codes[i, j]) * u[j]
            block[i - lo] = acc
        for i in range(lo, hi):
            score = block[i - lo]
            if score >= threshold and not (masked and not mask[i]):
                ids[count] = first + i
                vals[count] = score
                count += 1
                if count == 2 * cap:
                    count, threshold = compact(ids, vals, count, cap)
    return count, threshold


_GATHER = t.void(t.uint8[:, ::1], t.int64[::1], t.float32[::1], t.float64[::1], t.int64[::1])


# reassociation lets LLVM sum in four float64 lanes (5x faster for 1,024 rows): the rounding bound,
# d · 2⁻⁵³ · Σ|c·w|, does not depend on the order of the sum. Four rows at a time: their code rows are
# scattered, so four independent streams of loads keep more cache misses in flight (1,024 rows of a
# 100k × 384 copy out of cache: 0.27 ms, against 0.54 one row at a time)
@numba.njit(_GATHER, nogil=True, cache=True, boundscheck=False, fastmath={"reassoc", "contract"})
def gather_dot(codes: Any, rows: Any, w: Any, out: Any, at: Any) -> None:
    """``out[at[i]] += codes[rows[i]] · w`` summed in float64 (products of a byte and a float32 are
    exact there, so the sum's rounding is ~1e-13, far inside the estimates' margin)."""
    d, n = codes.shape[1], rows.shape[0]
    i = 0
    while i + 4 <= n:
        r0, r1, r2, r3 = rows[i], rows[i + 1], rows[i + 2], rows[i + 3]
        a0 = a1 = a2 = a3 = 0.0
        for j in range(d):
            wj = np.float64(w[j])
            a0 += np.float64(codes[r0, j]) * wj
            a1 += np.float64(codes[r1, j]) * wj
            a2 += np.float64(codes[r2, j]) * wj
            a3 += np.float64(codes[r3, j]) * wj
        out[at[i]] += a0
        out[at[i + 1]] += a1
        out[at[i + 2]] += a2
        out[at[i + 3]] += a3
        i += 4
    for last in range(i, n):
        r = rows[last]
        acc = 0.0
        for j in range(d):
            acc += np.float64(codes[r, j]) * np.float64(w[j])
        out[at[last]] += acc
