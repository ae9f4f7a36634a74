"""MMR: greedy maximal marginal relevance over the rows' own vectors (SPEC §9).

``MMR(score, lambda => λ, window => w)`` takes the top ``w`` candidates by its arm (ranked as every arm
is: value descending, ties on insertion order; a row whose value is NULL is not in the window), then
repeatedly takes the row maximising ``λ·rel − (1 − λ)·max cos(row, taken)``; the value of a row is
1/position in that order, and NULL for a row outside the window (the row itself stays a candidate).

- ``rel``: a SIMILARITY arm (the arm is one SIMILARITY call, or a binding that is exactly one) is used
  as it is, a cosine in [-1, 1] on the same scale as the diversity term. Any other arm (BM25, RRF,
  RECENCY, arithmetic, …) has no fixed scale, so it is min-max normalised over the window to [0, 1]
  (the best row of the window is 1, the worst 0; a window whose values are all equal is all 1).
- ``cos``: between the rows' own unit vectors, read from the store in one call per search
  (:meth:`nlql.stores.base.Store.vectors`). A SENTENCE or SPAN row is its (centre) sentence; a CHUNK or
  DOCUMENT row is the normalised mean of its sentences' vectors.
- Determinism: cosines are rounded like every score (``nlql.values.round_scores``), so equal vectors
  tie exactly on every store, and ``argmax`` takes the first best in window order: ties go to the
  better-ranked row, then insertion order (seq, position).

The work is a ``w × w`` Gram matrix and ``w`` vector steps (numpy), a fraction of a millisecond at the
default window of 100 (above ``GRAM_MAX`` rows each taken row's cosines are computed when it is taken).
At the search's deadline the greedy loop stops and the rest of the window follows in score order, with
a warning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nlql import values as V
from nlql.kernels import matmul_t

__all__ = ["GRAM_MAX", "mmr_order", "unit_vectors"]


#: Windows up to this size use a precomputed Gram matrix; larger ones compute a taken row's cosines
#: when it is taken (memory O(window × dim), not O(window²)).
GRAM_MAX = 2048


def mmr_order(rel: np.ndarray, vectors: np.ndarray, lam: float,
              stop: Callable[[], bool] | None = None) -> tuple[list[int], bool]:
    """The greedy MMR order of the rows (indices into ``rel``), and whether it is complete.

    Args:
        rel: Relevance per row, in window order (best first, ties already broken by insertion order).
        vectors: One unit vector per row (``len(rel) × dim``); a zero row is dissimilar to everything.
        lam: λ in [0, 1]: 1 is ``rel`` order, 0 picks the row least like those already taken.
        stop: Asked every 64 steps (the search's deadline); when it says so, the rows not taken yet
            follow in window order and the second value is False.

    >>> v = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> mmr_order(np.array([0.9, 0.8, 0.5]), v, 0.3)
    ([0, 2, 1], True)
    >>> mmr_order(np.array([0.9, 0.8, 0.5]), v, 1.0)
    ([0, 1, 2], True)
    """
    n = len(rel)
    if n == 0:
        return [], True
    vecs = np.ascontiguousarray(vectors, dtype=np.float32)
    if not vecs.shape[1]:
        vecs = np.zeros((n, 1), dtype=np.float32)
    # cosines rounded as every score is; single-threaded BLAS (a 100 × 100 product is faster on one core)
    gram = matmul_t(vecs, vecs).astype(np.float64) if n <= GRAM_MAX else None

    def penalty(j: int) -> np.ndarray:  # −(1 − λ)·cos(row, j): the objective's diversity term
        cos = gram[j] if gram is not None else matmul_t(vecs[j:j + 1], vecs)[0].astype(np.float64)
        return (lam - 1.0) * cos

    gain = lam * np.asarray(rel, dtype=np.float64)
    first = int(np.argmax(gain))   # nothing taken yet: the most relevant row (the first of equals)
    order = [first]
    worst = penalty(first)         # each row's −(1 − λ)·(highest cosine to a row already taken)
    gain[first] = -np.inf          # a taken row never wins again
    obj = np.empty(n)
    for step in range(1, n):
        if stop is not None and step % 64 == 0 and stop():
            taken = set(order)
            return order + [i for i in range(n) if i not in taken], False
        np.add(gain, worst, out=obj)
        j = int(obj.argmax())
        order.append(j)
        gain[j] = -np.inf
        np.minimum(worst, penalty(j), out=worst)
    return order, True


def unit_vectors(groups: list[list[Any]], fetch: Any) -> np.ndarray:
    """One unit vector per group of store keys: the stored vector of a single key, else the normalised
    mean of the group's vectors.

    ``fetch(keys) -> np.ndarray`` is the store's ``vectors`` (unit vectors already); it is called once.
    A key the store no longer holds (a NaN row) counts as nothing (a zero vector).
    """
    if all(len(g) == 1 for g in groups):
        mat = np.asarray(fetch([g[0] for g in groups]), dtype=np.float32)
        if mat.size and not np.isfinite(mat).all():
            mat = np.where(np.isfinite(mat), mat, np.float32(0))
        return mat
    distinct = list(dict.fromkeys(k for g in groups for k in g))
    if not distinct:
        return np.zeros((len(groups), 0), dtype=np.float32)
    mat = np.asarray(fetch(distinct), dtype=np.float32)
    mat = np.where(np.isfinite(mat), mat, np.float32(0))
    where = {k: i for i, k in enumerate(distinct)}
    out = np.stack([mat[[where[k] for k in g]].mean(axis=0) if g else np.zeros(mat.shape[1], np.float32)
                    for g in groups])
    return V.normalize_rows(out, zero_invalid=True)
