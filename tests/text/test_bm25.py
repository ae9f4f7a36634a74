"""BM25Index against an independent plain-Python reference of SPEC §5."""

from __future__ import annotations

import io
import math
import random
import threading

import numpy as np
import pytest

from nlql.text.analyzer import Analyzer
from nlql.text.bm25 import BM25Index

K1, B = 1.2, 0.75


class ReferenceBM25:
    """SPEC §5 written out with loops and dicts, sharing nothing with the implementation."""

    def __init__(self, analyzer: Analyzer, k1: float = K1, b: float = B) -> None:
        self.analyzer = analyzer
        self.k1 = k1
        self.b = b
        self.rows: dict[int, list[str]] = {}

    def add(self, key: int, text: str) -> None:
        self.rows[key] = self.analyzer.terms(text)

    def remove(self, key: int) -> None:
        self.rows.pop(key, None)

    def score(self, query: str, only: set[int] | None = None) -> dict[int, float]:
        n_rows = len(self.rows)
        if n_rows == 0:
            return {}
        avglen = sum(len(t) for t in self.rows.values()) / n_rows
        distinct: list[str] = []
        for term in self.analyzer.terms(query):
            if term not in distinct:
                distinct.append(term)
        out: dict[int, float] = {}
        for key, terms in self.rows.items():
            if only is not None and key not in only:
                continue
            total = 0.0
            matched = False
            for term in distinct:
                tf = terms.count(term)
                if tf == 0:
                    continue
                matched = True
                n = sum(1 for other in self.rows.values() if term in other)
                idf = math.log(1 + (n_rows - n + 0.5) / (n + 0.5))
                total += idf * tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * len(terms) / avglen))
            if matched:
                out[key] = total
        return out


def _assert_same(index: BM25Index, ref: ReferenceBM25, query: str, only: set[int] | None = None) -> None:
    keys, scores = index.score(query, None if only is None else np.array(sorted(only), dtype=np.int64))
    expected = ref.score(query, only)
    assert keys.tolist() == sorted(expected), query
    for k, s in zip(keys.tolist(), scores.tolist(), strict=True):
        assert abs(s - expected[k]) < 1e-6, (query, k, s, expected[k])


def _random_text(rng: random.Random, words: list[str]) -> str:
    n = rng.choice([0, 1, 2, 3, 5, 8, 13, 20])
    return " ".join(rng.choice(words) for _ in range(n)).capitalize() + rng.choice([".", "!", ""])


WORDS = [f"w{i}" for i in range(60)] + ["Cat", "cats", "DOG", "the", "a", "Über", "naïve"]


def _queries(rng: random.Random, count: int = 40) -> list[str]:
    out = ["cat", "the the the", "w1 w1 w2", "über", "missing words only", "", "!!!", "CAT dog The"]
    for _ in range(count):
        out.append(" ".join(rng.choice(WORDS + ["nope"]) for _ in range(rng.randint(1, 5))))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_reference_after_adds_and_removes(seed: int) -> None:
    rng = random.Random(seed)
    analyzer = Analyzer()
    index, ref = BM25Index(analyzer), ReferenceBM25(analyzer)
    next_key = 0
    live: list[int] = []
    for step in range(30):
        action = rng.random()
        if action < 0.55 or not live:
            batch = [(next_key + i, _random_text(rng, WORDS)) for i in range(rng.randint(1, 40))]
            next_key += len(batch)
            index.add([k for k, _ in batch], [t for _, t in batch])
            for k, t in batch:
                ref.add(k, t)
                live.append(k)
        elif action < 0.8:
            gone = rng.sample(live, rng.randint(1, max(1, len(live) // 3)))
            index.remove(gone + [10**9])  # an unknown key is ignored
            for k in gone:
                ref.remove(k)
                live.remove(k)
        else:  # replace existing keys with new texts
            again = rng.sample(live, min(len(live), rng.randint(1, 5)))
            texts = [_random_text(rng, WORDS) for _ in again]
            index.add(again, texts)
            for k, t in zip(again, texts, strict=True):
                ref.add(k, t)
        assert len(index) == len(ref.rows)
        for q in _queries(rng, 8):
            _assert_same(index, ref, q)
        if live and step % 3 == 0:
            only = set(rng.sample(live, max(1, len(live) // 2))) | {10**9}
            _assert_same(index, ref, rng.choice(_queries(rng, 3)), only={k for k in only if k in ref.rows})


def test_matches_reference_through_compaction() -> None:
    rng = random.Random(5)
    analyzer = Analyzer(stemmer="english")
    index, ref = BM25Index(analyzer, k1=1.5, b=0.6), ReferenceBM25(analyzer, k1=1.5, b=0.6)
    texts = [_random_text(rng, WORDS) for _ in range(3000)]
    keys = list(range(3000))
    index.add(keys, texts)
    for k, t in zip(keys, texts, strict=True):
        ref.add(k, t)
    gone = keys[:2200]  # more dead than live and > 1024 dead: slots are renumbered
    index.remove(gone)
    assert index._n_slots == 800  # the dead slots were renumbered away
    for k in gone:
        ref.remove(k)
    index.add([5000, 5001], ["cat cat dog", "the"])
    ref.add(5000, "cat cat dog")
    ref.add(5001, "the")
    for q in _queries(rng, 10):
        _assert_same(index, ref, q)


def test_interleaved_single_adds_and_queries() -> None:
    """Many tiny segments and their merges give the same scores."""
    rng = random.Random(11)
    analyzer = Analyzer()
    index, ref = BM25Index(analyzer), ReferenceBM25(analyzer)
    for k in range(300):
        t = _random_text(rng, WORDS)
        index.add([k], [t])
        ref.add(k, t)
        if k % 7 == 0:
            index.remove([k // 2])
            ref.remove(k // 2)
        if k % 10 == 0:
            _assert_same(index, ref, "cat w3 the")
    for q in _queries(rng, 10):
        _assert_same(index, ref, q)


def test_formula_by_hand() -> None:
    index = BM25Index(Analyzer.named("plain"))  # every word is a term: lengths 3, 3, 5
    index.add([10, 11, 12], ["the cat sat", "the dog sat", "a cat and a cat"])
    n, big_n, avglen = 2, 3, 11 / 3
    idf = math.log(1 + (big_n - n + 0.5) / (n + 0.5))
    keys, scores = index.score("cat")
    assert keys.tolist() == [10, 12]
    assert scores[0] == pytest.approx(idf * 1 * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 3 / avglen)))
    assert scores[1] == pytest.approx(idf * 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 5 / avglen)))


def test_formula_by_hand_default_english_analyzer() -> None:
    """Stopwords do not count in a row's length; stems match across inflections."""
    index = BM25Index()
    index.add([10, 11, 12], ["the cats sat", "the dog sat", "a cat and a cat"])  # lengths 2, 2, 2
    n, big_n, avglen = 2, 3, 2.0
    idf = math.log(1 + (big_n - n + 0.5) / (n + 0.5))
    keys, scores = index.score("Cats")
    assert keys.tolist() == [10, 12]
    assert scores[0] == pytest.approx(idf * 1 * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 2 / avglen)))
    assert scores[1] == pytest.approx(idf * 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 2 / avglen)))
    assert index.score("the and a")[0].size == 0  # only stopwords: no term, no row


def test_repeated_query_terms_count_once() -> None:
    index = BM25Index()
    index.add([1, 2], ["cat dog", "dog"])
    assert np.array_equal(index.score("cat cat cat")[1], index.score("cat")[1])
    assert index.query_terms("Cat the CATS") == ["cat"]
    assert BM25Index(Analyzer.named("plain")).query_terms("Cat the CAT") == ["cat", "the"]


def test_no_match_means_no_row() -> None:
    index = BM25Index()
    index.add([1, 2, 3], ["alpha", "beta", ""])
    keys, scores = index.score("alpha gamma")
    assert keys.tolist() == [1] and scores[0] > 0
    for q in ["gamma", "", "   ", "!!!"]:
        keys, scores = index.score(q)
        assert keys.size == 0 and scores.size == 0
    assert BM25Index().score("alpha")[0].size == 0


def test_rows_without_terms_count_in_n_and_avglen() -> None:
    index = BM25Index()
    index.add([1, 2], ["alpha beta", "..."])
    stats = index.stats(["alpha", "zzz"])
    assert stats["N"] == 2 and stats["avglen"] == 1.0 and stats["df"] == {"alpha": 1, "zzz": 0}


def test_stats_match_reference() -> None:
    rng = random.Random(3)
    analyzer = Analyzer()
    index, ref = BM25Index(analyzer), ReferenceBM25(analyzer)
    for k in range(200):
        t = _random_text(rng, WORDS)
        index.add([k], [t])
        ref.add(k, t)
    index.remove(range(0, 200, 3))
    for k in range(0, 200, 3):
        ref.remove(k)
    stats = index.stats("cat the w7 nope")
    assert stats["N"] == len(ref.rows)
    assert stats["avglen"] == pytest.approx(sum(map(len, ref.rows.values())) / len(ref.rows))
    for term, df in stats["df"].items():
        assert df == sum(1 for terms in ref.rows.values() if term in terms)
    assert stats["k1"] == K1 and stats["b"] == B and stats["analyzer"] == analyzer.config()


def test_top_k_order_and_ties() -> None:
    index = BM25Index()
    index.add([5, 3, 9, 1], ["cat", "cat", "cat dog", "dog"])
    keys, scores = index.top_k("cat", 2)
    assert keys.tolist() == [3, 5]  # equal scores: key ascending
    assert scores[0] == scores[1]
    keys, _ = index.top_k("cat dog", 10)
    assert keys[0] == 9 and len(keys) == 4
    assert index.top_k("cat", 0)[0].size == 0
    assert index.top_k("cat", 5, mask_keys=[9, 1, 77])[0].tolist() == [9]


def test_top_k_matches_full_sort() -> None:
    rng = random.Random(9)
    index = BM25Index()
    texts = [_random_text(rng, WORDS[:8]) for _ in range(2000)]
    index.add(range(2000), texts)
    keys, scores = index.score("w1 w2 cat")
    order = np.lexsort((keys, -scores))
    for k in (1, 10, 100, 5000):
        tk, ts = index.top_k("w1 w2 cat", k)
        assert tk.tolist() == keys[order][:k].tolist()
        assert np.array_equal(ts, scores[order][:k])


def test_sparse_and_negative_keys() -> None:
    index = BM25Index()
    big = [2**60, -(2**40), 123, 2**33]
    index.add(big, ["cat", "cat dog", "dog", "cat cat"])
    keys, _ = index.score("cat", keys=np.array([2**60, 2**33, 7], dtype=np.int64))
    assert keys.tolist() == [2**33, 2**60]
    assert index.score("cat")[0].tolist() == sorted([2**60, -(2**40), 2**33])
    assert index.keys().tolist() == sorted(big)
    index.remove([2**60])
    assert 2**60 not in index and 123 in index


def test_add_validates_input() -> None:
    index = BM25Index()
    with pytest.raises(ValueError):
        index.add([1, 2], ["one"])
    with pytest.raises(ValueError):
        index.add([1, 1], ["one", "two"])
    with pytest.raises(ValueError):
        BM25Index(k1=-1)
    index.add([], [])
    assert len(index) == 0


def test_state_round_trip_through_npz() -> None:
    rng = random.Random(4)
    analyzer = Analyzer(stemmer="english", stopwords=["the"])
    index = BM25Index(analyzer, k1=1.1, b=0.8)
    index.add(range(500), [_random_text(rng, WORDS) for _ in range(500)])
    index.remove(range(0, 500, 4))
    index.add([1000], ["cats and dogs"])
    state = index.state()
    assert all(isinstance(v, np.ndarray) and v.dtype != object for v in state.values())
    buf = io.BytesIO()
    np.savez(buf, **state)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as loaded:
        restored = BM25Index.from_state(loaded)
    assert restored.analyzer == analyzer and restored.k1 == 1.1 and restored.b == 0.8
    assert len(restored) == len(index)
    for q in _queries(rng, 20):
        a, b = index.score(q), restored.score(q)
        assert np.array_equal(a[0], b[0]) and np.allclose(a[1], b[1], rtol=0, atol=1e-12)
    restored.add([2000], ["cat"])  # keeps working after a restore
    restored.remove([1000])
    assert 2000 in restored and 1000 not in restored
    with pytest.raises(ValueError):
        BM25Index.from_state(state, analyzer=Analyzer())
    empty = BM25Index.from_state(BM25Index().state())
    assert len(empty) == 0 and empty.score("x")[0].size == 0


def test_concurrent_queries_and_adds() -> None:
    index = BM25Index()
    index.add(range(1000), [f"cat w{i % 17}" for i in range(1000)])
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(200):
                index.add([10_000 + i], ["cat dog"])
                index.remove([i])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(200):
                keys, scores = index.score("cat dog")
                assert keys.size == scores.size
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(index) == 1000

