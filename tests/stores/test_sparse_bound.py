"""The sparse-vector BM25 bound that Qdrant and Milvus read an arm's window by: whatever the sentence
lengths (the stored weights are at a fixed average length, the true scores at the corpus's), the rows
:func:`nlql.stores._terms.sparse_top` returns hold the true top ``n`` of a brute-force BM25."""

from __future__ import annotations

import numpy as np
import pytest

from nlql.stores import _terms


def _corpus(rng: np.random.Generator, n: int, mean_len: float) -> list[tuple[list[str], list[int], int]]:
    rows = []
    for _ in range(n):
        words = [f"w{int(x)}" for x in rng.zipf(1.3, size=max(1, int(rng.exponential(mean_len))) ) % 300]
        terms, tfs, length = _terms.sentence_terms([_terms.term_key(w) for w in words])
        rows.append((terms, tfs, length))
    return rows


@pytest.mark.parametrize("mean_len", [4.0, 32.0, 150.0])  # the corpus average below, at and above A₀
def test_the_rows_read_hold_the_true_top_n(mean_len: float) -> None:
    rng = np.random.default_rng(int(mean_len))
    rows = _corpus(rng, 3000, mean_len)
    totals = _terms.Totals(n=len(rows), total_len=sum(r[2] for r in rows))
    stored = [_terms.sparse_weights(*r) for r in rows]
    widened = 0
    for trial in range(40):
        qkeys = _terms.query_keys(f"w{int(x)}" for x in rng.integers(0, 60, size=int(rng.integers(1, 5))))
        df = _terms.document_frequencies(qkeys, (r[0] for r in rows))
        query, ratio = _terms.sparse_query(qkeys, df, totals)
        inner = np.array([sum(v * s.get(d, 0.0) for d, v in query.items()) for s in stored])
        order = [i for i in np.argsort(-inner, kind="stable") if inner[i] > 0]
        def read(limit: int, order: list[int] = order, inner: np.ndarray = inner) -> tuple[list[int], float, bool]:
            got = order[:limit]
            return got, float(inner[got[-1]]) if got else 0.0, len(got) < limit

        def score(idx: list[int], qkeys: list[str] = qkeys, df: dict[str, int] = df) -> np.ndarray:
            return _terms.bm25_scores(qkeys, [rows[i] for i in idx], df, totals)

        n = int(rng.integers(1, 30))
        got = _terms.sparse_top(n, read, score, ratio, max_limit=4096)
        true = _terms.bm25_scores(qkeys, rows, df, totals)
        assert got is not None
        kept, scores, rounds, _ = got
        widened += rounds > 1
        best = np.sort(true[true > 0])[::-1][:n]
        assert np.sort(scores)[::-1][:n] == pytest.approx(best, rel=1e-12), (trial, n)
        assert all(true[i] == s for i, s in zip(kept, scores))
    if mean_len > 32:
        assert widened  # long sentences loosen the bound: some queries needed a wider read
