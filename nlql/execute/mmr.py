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
- Determinism: cosines are rounded like every score (``nlql.values.round_scores``) and objectives to 9
  places, and ``argmax`` takes the first best in window order, so ties go to the better-ranked row,
  then insertion order (seq, position), on every store.

The work is a ``w × w`` Gram matrix and ``w`` vector steps (numpy), a fraction of a millisecond at the
default window of 100.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nlql import values as V

__all__ = ["mmr_order", "unit_vectors"]


def mmr_order(rel: np.ndarray, vectors: np.ndarray, lam: float) -> list[int]:
    """The greedy MMR order of the rows (indices into ``rel``).

    Args:
        rel: Relevance per row, in window order (best first, ties already broken by insertion order).
        vectors: One unit vector per row (``len(rel) × dim``); a zero row is dissimilar to everything.
        lam: λ in [0, 1]: 1 is ``rel`` order, 0 picks the row least like those already taken.

    >>> v = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> mmr_order(np.array([0.9, 0.8, 0.5]), v, 0.3)
    [0, 2, 1]
    >>> mmr_order(np.array([0.9, 0.8, 0.5]), v, 1.0)
    [0, 1, 2]
    """
    n = len(rel)
    if n == 0:
        return []
    rel = np.asarray(rel, dtype=np.float64)
    vecs = np.asarray(vectors, dtype=np.float64)
    gram = V.round_scores(vecs @ vecs.T)
    gain = lam * rel
    first = int(np.argmax(np.round(gain, 9)))
    order = [first]
    taken = np.zeros(n, dtype=bool)
    taken[first] = True
    most = gram[first].copy()  # each row's highest cosine to a row already taken
    for _ in range(n - 1):
        obj = np.round(gain - (1.0 - lam) * most, 9)
        obj[taken] = -np.inf
        j = int(np.argmax(obj))
        order.append(j)
        taken[j] = True
        np.maximum(most, gram[j], out=most)
    return order


def unit_vectors(groups: list[list[Any]], fetch: Any) -> np.ndarray:
    """One unit vector per group of store keys: the normalised mean of their stored vectors.

    ``fetch(keys) -> np.ndarray`` is the store's ``vectors``; it is called once, for the distinct keys.
    A key the store no longer holds (a NaN row) counts as nothing.
    """
    distinct = list(dict.fromkeys(k for g in groups for k in g))
    if not distinct:
        return np.zeros((len(groups), 0), dtype=np.float64)
    mat = np.asarray(fetch(distinct), dtype=np.float64)
    mat = np.where(np.isfinite(mat), mat, 0.0)
    if all(len(g) == 1 for g in groups):
        where = {k: i for i, k in enumerate(distinct)}
        out = mat[[where[g[0]] for g in groups]]
    else:
        where = {k: i for i, k in enumerate(distinct)}
        out = np.stack([mat[[where[k] for k in g]].mean(axis=0) if g else np.zeros(mat.shape[1])
                        for g in groups])
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)
