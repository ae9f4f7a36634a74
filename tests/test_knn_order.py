"""A knn list kept in its own order (``Capabilities.KNN_ORDERED``) and the plan key's settings held as one
int: the hits are those of the general path (ORDER BY sorted by the engine) on ties, thresholds, engine
filters and two ORDER BY keys, and a plan is reused exactly when what planning reads is equal."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from nlql import Engine
from nlql.text.analyzer import Analyzer

DIM = 8


class FewVectors:
    """Every text gets one of four unit vectors (by its first word): most scores tie."""

    name = "few-vectors"
    dim = DIM

    def __init__(self) -> None:
        rng = np.random.default_rng(7)
        base = rng.standard_normal((4, DIM)).astype(np.float32)
        self.base = base / np.linalg.norm(base, axis=1, keepdims=True)
        self.words = {"alpha": 0, "beta": 1, "gamma": 2, "delta": 3}

    def embed(self, texts: Any) -> np.ndarray:
        return np.stack([self.base[self.words.get(t.split()[0].lower(), 3)] for t in texts])


def engine(ordered: bool) -> Engine:
    e = Engine(embedder=FewVectors(), store="memory", warm_up=False)
    rng = np.random.default_rng(11)
    words = ["Alpha", "Beta", "Gamma", "Delta"]
    docs = list(range(40))
    rng.shuffle(docs)  # documents written out of id order: insertion order is not the ids'
    for d in docs:
        sentences = " ".join(f"{words[(d + i) % 4]} sentence {i} of {d}." for i in range(3))
        e.add_texts([sentences], ids=[f"doc{d:02d}"], metadatas=[{"n": d % 5, "even": d % 2 == 0}])
    e.register_function("KEEPS", lambda text: "sentence 1" not in text, arity=1)
    if not ordered:  # the general path: ORDER BY sorted by the engine
        e.store.capabilities = replace(e.store.capabilities, KNN_ORDERED=False)
    return e


QUERIES = [
    'SELECT SENTENCE LET rel = SIMILARITY(content, "alpha") ORDER BY rel DESC LIMIT 25',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "beta") WHERE meta.n == 2 ORDER BY rel DESC LIMIT 10',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "gamma") WHERE rel >= 0.1 ORDER BY rel DESC LIMIT 30',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "alpha") WHERE KEEPS(content) ORDER BY rel DESC LIMIT 12',
    'SELECT SENTENCE WHERE meta.even ORDER BY SIMILARITY(content, "delta") DESC LIMIT 9 OFFSET 4',
    'SELECT SPAN(SENTENCE, window => 1) LET rel = SIMILARITY(content, "beta") ORDER BY rel DESC LIMIT 7',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "alpha") ORDER BY rel DESC, meta.n DESC LIMIT 20',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "beta") WHERE meta.n == 4 ORDER BY rel DESC LIMIT 50',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "beta") WHERE meta.n == 9 ORDER BY rel DESC LIMIT 5',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "alpha"), r2 = rel ORDER BY r2 DESC LIMIT 6',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "alpha"), x = rel * 2 ORDER BY rel DESC LIMIT 6',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "gamma") WHERE rel >= 0.99 ORDER BY rel DESC LIMIT 8',
]


def answer(e: Engine, q: str) -> list[tuple[Any, ...]]:
    return [(h.id, h.doc_id, h.unit, h.content, h.position, dict(h.scores), dict(h.metadata), h.best, h.highlights)
            for h in e.search(q)]


@pytest.mark.parametrize("q", QUERIES)
def test_a_knn_list_kept_in_its_order_answers_as_the_sorted_one(q: str) -> None:
    fast, general = engine(True), engine(False)
    got = answer(fast, q)
    assert got == answer(general, q)
    assert bool(got) == ("== 9" not in q)
    a, b = fast.search(q), general.search(q)
    assert [list(x.stats) for x in (a, b)] == [list(b.stats)] * 2 and a.warnings == b.warnings
    assert {k: v for k, v in a.stats.items() if k != "timings_ms"} == {k: v for k, v in b.stats.items() if k != "timings_ms"}
    assert list(a.stats["timings_ms"]) == list(b.stats["timings_ms"])
    if "OFFSET" in q:
        return
    pages = [[(h.id, h.scores) for h in e.search(q, cursor=e.search(q).cursor)] for e in (fast, general)]
    assert pages[0] == pages[1]  # the next page (through the cursor) starts at the same row


def test_ties_come_in_insertion_order_and_a_second_key_still_sorts() -> None:
    e = engine(True)
    one = e.search('SELECT SENTENCE LET rel = SIMILARITY(content, "alpha") ORDER BY rel DESC LIMIT 40')
    seq = {d.doc_id: i for i, d in enumerate(e.search("SELECT DOCUMENT LIMIT 100"))}  # insertion order
    keys = [(-h.scores["rel"], seq[h.doc_id], h.position) for h in one]
    assert keys == sorted(keys) and len({k[0] for k in keys}) < len(keys)  # ties, in insertion order
    two = e.search('SELECT SENTENCE LET rel = SIMILARITY(content, "alpha") ORDER BY rel DESC, meta.n DESC LIMIT 40')
    keys2 = [(-h.scores["rel"], -h.metadata["n"]) for h in two]
    assert keys2 == sorted(keys2) and [h.id for h in two] != [h.id for h in one]


class Unhashable(Analyzer):
    __hash__ = None  # type: ignore[assignment]


def test_plans_are_reused_while_the_settings_are_equal() -> None:
    e = engine(True)
    q = QUERIES[1]
    e.search(q)
    assert e.search(q).stats["plan_cache"] == "hit"
    e.store.capabilities = replace(e.store.capabilities)  # an equal copy: the same plans serve
    assert e.search(q).stats["plan_cache"] == "hit"
    e.store.capabilities = replace(e.store.capabilities, SCORE_THRESHOLD=False)
    assert e.search(q).stats["plan_cache"] == "miss"
    e.rerank_factor += 1
    assert e.search(q).stats["plan_cache"] == "miss"
    e.rerank_factor -= 1
    assert e.search(q).stats["plan_cache"] == "hit"  # back to settings planned with before


def test_an_unhashable_analyzer_keys_plans_by_identity() -> None:
    e = engine(True)
    e._bm25.analyzer = Unhashable()
    q = QUERIES[0]
    assert e.search(q).stats["plan_cache"] == "miss"
    assert e.search(q).stats["plan_cache"] == "hit"
    e._bm25.analyzer = Unhashable()  # an equal analyzer, another object: planned again
    assert e.search(q).stats["plan_cache"] == "miss"


def test_a_page_straight_from_knn_hands_out_copies_and_honours_a_timeout() -> None:
    e = engine(True)
    q = QUERIES[1]
    first = e.search(q)
    first[0].metadata["n"] = "changed"
    first[0].scores["rel"] = -1.0
    again = e.search(q)
    assert again[0].metadata["n"] == 2 and again[0].scores["rel"] != -1.0
    assert [h.id for h in e.search(q, timeout=30)] == [h.id for h in again]  # (with a deadline: the general stages)
