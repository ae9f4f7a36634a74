"""The int8 scan kernel's two promises, on which the built-in store's exact answers rest (issue 21):

* the integer query's rounding stays within the bound :func:`query_weights` states, for every code row;
* the scan returns every row at or above its final threshold, so a row it left out scores below it.
"""

from __future__ import annotations

import numpy as np
import pytest

from nlql.stores.memory import int8_scan

pytestmark = pytest.mark.skipif(not int8_scan.available(), reason="numba is not installed")


def _scan(codes: np.ndarray, u: np.ndarray, cap: int, mask: np.ndarray | None = None,
          parts: int = 1) -> tuple[np.ndarray, np.ndarray, int]:
    """The kernel over ``codes`` in ``parts`` consecutive calls (as a run of rows is scanned)."""
    ids = np.empty(2 * cap, dtype=np.int64)
    vals = np.empty(2 * cap, dtype=np.int32)
    count, threshold = 0, int8_scan.INT_FLOOR
    cuts = np.linspace(0, len(codes), parts + 1).astype(int)
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        count, threshold = int8_scan.scan(np.ascontiguousarray(codes[lo:hi]), hi - lo, u,
                                          None if mask is None else np.ascontiguousarray(mask[lo:hi]),
                                          int(lo), threshold, ids, vals, count, cap)
    return ids[:count], vals[:count], threshold


@pytest.mark.parametrize("dim", [16, 192, 384, 1024])
def test_query_rounding_stays_within_its_bound(dim: int) -> None:
    rng = np.random.default_rng(dim)
    codes = rng.integers(0, 256, (2000, dim), dtype=np.uint8)
    codes[0] = 255  # the worst row for the bound
    w = (rng.standard_normal(dim) * 1e-3).astype(np.float32)
    u, s, err = int8_scan.query_weights(w)
    exact = codes.astype(np.float64) @ w.astype(np.float64)
    got = s * (codes.astype(np.int64) @ u.astype(np.int64))
    assert np.abs(exact - got).max() <= err
    # the integer sum cannot overflow int32 even for the largest codes
    assert 255 * np.abs(u.astype(np.int64)).sum() < 2**31
    # and the bound is a small share of the largest score a row can have (255 · d · max|w|)
    assert err < 1e-4 * 255 * dim * np.abs(w).max()


def test_zero_query_has_no_error() -> None:
    u, s, err = int8_scan.query_weights(np.zeros(8, dtype=np.float32))
    assert not u.any() and s == 0.0 and err == 0.0


@pytest.mark.parametrize("parts", [1, 3])
@pytest.mark.parametrize("cap", [1, 7, 64])
def test_every_row_left_out_scores_below_the_threshold(cap: int, parts: int) -> None:
    rng = np.random.default_rng(cap * 10 + parts)
    codes = rng.integers(0, 256, (3000, 48), dtype=np.uint8)
    u = rng.integers(-3000, 3000, 48).astype(np.int16)
    scores = codes.astype(np.int64) @ u.astype(np.int64)
    ids, vals, threshold = _scan(codes, u, cap, parts=parts)
    assert len(ids) >= cap and len(np.unique(ids)) == len(ids)
    assert (vals == scores[ids]).all()  # the kernel's integer sums are exact
    left = np.setdiff1d(np.arange(len(codes)), ids)
    assert (scores[left] < threshold).all()
    assert (scores[ids] >= threshold).all()
    # so the returned rows hold the true top cap
    assert set(np.argsort(-scores, kind="stable")[:cap].tolist()) <= set(ids.tolist())


def test_ties_that_fill_the_buffer_keep_the_certificate() -> None:
    codes = np.full((500, 16), 3, dtype=np.uint8)  # every row scores the same
    codes[123] = 4  # one better row
    u = np.ones(16, dtype=np.int16)
    ids, vals, threshold = _scan(codes, u, cap=8)
    assert 123 in ids.tolist()
    left = np.setdiff1d(np.arange(500), ids)
    assert (codes[left].astype(np.int64).sum(axis=1) < threshold).all()


def test_masked_rows_are_never_returned_and_small_scans_return_every_row() -> None:
    rng = np.random.default_rng(5)
    codes = rng.integers(0, 256, (400, 32), dtype=np.uint8)
    u = rng.integers(-100, 100, 32).astype(np.int16)
    mask = rng.random(400) < 0.3
    ids, _, threshold = _scan(codes, u, cap=1000, mask=mask)
    assert sorted(ids.tolist()) == np.flatnonzero(mask).tolist()  # fewer than the cap: all of them
    assert threshold == int8_scan.INT_FLOOR  # and nothing was left out
    ids, _, _ = _scan(codes, u, cap=10, mask=mask)
    assert mask[ids].all()


@pytest.mark.parametrize("count", [0, 1, 3, 4, 5, 7, 8, 9, 1027])
def test_gather_dot_reads_rows_in_place(count: int) -> None:
    """Four rows at a time and the rest one by one: every count, repeated rows, results placed by ``at``."""
    rng = np.random.default_rng(9)
    codes = rng.integers(0, 256, (300, 24), dtype=np.uint8)
    w = rng.standard_normal(24).astype(np.float32)
    rows = rng.integers(0, 300, count).astype(np.int64)
    rows[:2] = [5, 5][: min(2, count)]
    at = rng.permutation(count).astype(np.int64)
    out = np.full(count, 0.5)
    int8_scan.gather_dot(codes, rows, w, out, at)
    want = np.full(count, 0.5)
    want[at] += codes[rows].astype(np.float64) @ w.astype(np.float64)
    assert np.allclose(out, want, rtol=0, atol=1e-9)


def test_best_first_hands_out_every_position_once_largest_first() -> None:
    """The candidates' and the rescoring stream's batches (quant.BestFirst): each batch holds the largest
    values left, every position is handed out once, and the largest value left bounds the rest."""
    from nlql.stores.memory.quant import BestFirst

    rng = np.random.default_rng(5)
    values = np.round(rng.standard_normal(1000), 1).astype(np.float32)  # many ties
    stream = BestFirst(values)
    seen: list[int] = []
    assert len(stream.take(0)) == 0
    for n in (7, 1, 64, 300, 5000):
        batch = stream.take(n)
        assert len(batch) == min(n, 1000 - len(seen))
        if len(stream.rest):
            assert values[batch].min() >= stream.rest_max == values[stream.rest].max()
        seen += batch.tolist()
    assert sorted(seen) == list(range(1000)) and stream.rest_max == -np.inf
