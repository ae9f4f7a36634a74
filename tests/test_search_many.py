"""``engine.search_many`` (SPEC §11): one query text, many parameter sets, one embedder batch."""

from __future__ import annotations

import random

import numpy as np
import pytest

from nlql import Engine, NLQLError
from nlql.embedders import HashEmbedder
from nlql.stores.memory import MemoryStore

WORDS = "agents tools memory graphs vectors search ranking fusion cursor pages data query".split()


class CountingEmbedder(HashEmbedder):
    """HashEmbedder that counts its calls (a real batch is one call)."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__(dim=dim)
        self.calls: list[int] = []

    def embed(self, texts):  # type: ignore[no-untyped-def]
        self.calls.append(len(texts))
        return super().embed(texts)


def _engine(store: object = "memory", n: int = 50) -> Engine:
    rng = random.Random(5)
    e = Engine(embedder=CountingEmbedder(), store=store)
    for i in range(n):
        text = " ".join(" ".join(rng.choice(WORDS) for _ in range(5)).capitalize() + "." for _ in range(3))
        e.add_text(text, id=f"d{i}", metadata={"tag": rng.choice("abc"), "n": i % 4})
    return e


def _same(a, b) -> None:  # type: ignore[no-untyped-def]
    assert [(h.id, h.unit, h.position, h.content, h.metadata, h.scores) for h in a] == \
           [(h.id, h.unit, h.position, h.content, h.metadata, h.scores) for h in b]


QUERIES = [
    'SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 5',
    'SELECT SENTENCE LET s = SIMILARITY(content, $q) WHERE meta.tag == $t LIMIT 3',
    'SELECT SENTENCE LET s = SIMILARITY(content, $q) WHERE s >= 0.1 AND meta.n != 2 LIMIT 4',
    'SELECT DOCUMENT LET s = SIMILARITY(content, $q) LIMIT 3',
    'SELECT SENTENCE LET s = SIMILARITY(content, $q), k = BM25(content, $q), r = RRF(s, k) ORDER BY r DESC LIMIT 4',
    'SELECT SENTENCE LET k = BM25(content, $q) LIMIT 4',
    'SELECT SENTENCE LET s = SIMILARITY(content, [$q, "tools"]) LIMIT 4',
]


@pytest.mark.parametrize("query", QUERIES)
def test_equal_to_a_loop_of_search(query: str) -> None:
    e = _engine()
    params = [{"q": w, **({"t": "ab"[i % 2]} if "$t" in query else {})} for i, w in enumerate(WORDS)]
    params.append(dict(params[0]))  # a repeated set
    many = e.search_many(query, params)
    assert len(many) == len(params)
    for got, p in zip(many, params, strict=True):
        _same(got, e.search(query, p))


def test_one_embedder_call_and_one_store_call() -> None:
    e = _engine()
    emb = e.embedder
    calls: list[int] = []
    knn = MemoryStore.knn

    def counted(self, vectors, *a, **kw):  # type: ignore[no-untyped-def]
        calls.append(len(vectors))
        return knn(self, vectors, *a, **kw)
    emb.calls.clear()
    MemoryStore.knn = counted  # type: ignore[method-assign]
    try:
        many = e.search_many('SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 5',
                             [{"q": w} for w in WORDS])
    finally:
        MemoryStore.knn = knn  # type: ignore[method-assign]
    assert emb.calls == [len(WORDS)]
    assert calls == [len(WORDS)]
    assert all(h.stats["batch"]["knn_batched"] for h in many)
    assert many[0].stats["store"]["scan"] == "fp32 batch"


def test_batched_scan_is_the_one_vector_scan_bit_for_bit() -> None:
    """The built-in store's batched knn against an independent brute-force top-k (numpy, per vector)."""
    rng = np.random.default_rng(3)
    store = MemoryStore()
    e = Engine(embedder=HashEmbedder(dim=32), store=store)
    for i in range(300):
        e.add_text(" ".join(rng.choice(WORDS, 4)) + ".", id=f"d{i}")
    vecs = rng.standard_normal((20, 32)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    batch = store.knn(vecs, 7)
    for v, got in zip(vecs, batch, strict=True):
        alone = store.knn(v[None, :], 7)[0]
        assert got == alone
        # brute force: the k best by score (rounded as the store rounds), ties by insertion order
        scores = np.round(store.matrix @ v, 6)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:7]
        assert [k for k, _ in got] == order


def test_cursors_and_errors() -> None:
    e = _engine()
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 2'
    many = e.search_many(q, [{"q": "agents"}, {"q": "tools"}])
    nxt = e.search(q, {"q": "tools"}, cursor=many[1].cursor)
    assert [h.id for h in [*many[1], *nxt]] == [h.id for h in e.search(q.replace("2", "4"), {"q": "tools"})]
    assert e.search_many(q, []) == []
    with pytest.raises(NLQLError) as info:
        e.search_many(q, [{"q": "a"}, {}])
    assert "params_list[1]" in (info.value.hint or "")
    with pytest.raises(TypeError):
        e.search_many(q, {"q": "a"})  # type: ignore[arg-type]


REBOUND = [
    'SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 5',
    'SELECT SENTENCE WHERE SIMILARITY(content, $q) >= 0.1 LIMIT 4',
    'SELECT SENTENCE ORDER BY SIMILARITY(content, $q) DESC LIMIT 4',
    'SELECT SENTENCE LET s = SIMILARITY(content, $q) WHERE meta.tag == $t ORDER BY s DESC, meta.n LIMIT 3',
    'SELECT DOCUMENT LET a = SIMILARITY(content, $q), b = SIMILARITY(content, $r) ORDER BY a + b DESC LIMIT 3',
    'SELECT SENTENCE LET s = SIMILARITY(content, $q, min => 0.05) LIMIT 4',
]


@pytest.mark.parametrize("query", REBOUND)
def test_rebound_plans_are_the_plans_search_makes(query: str) -> None:
    """Sets differing only in SIMILARITY's text share one template: each set's plan equals the one
    search plans (explain, cursor identity and hits), and the engine says ``rebound``."""
    import dataclasses

    e = _engine()
    params = [{"q": w, "r": WORDS[-1 - i], "t": "ab"[i % 2]} for i, w in enumerate(WORDS)]
    params.append({"q": 'quote " and \\ backslash', "r": "x", "t": "a"})
    params = [{k: v for k, v in p.items() if f"${k}" in query} for p in params]
    plans, _ = e._planned_many(query, params, None)
    assert [c for _, c in plans].count("rebound") >= len(params) - 2
    for (plan, _), p in zip(plans, params, strict=True):
        real = e._plan(query, p)
        assert dataclasses.replace(plan, now=real.now) == real
        assert str(e.explain(query, p)) == str(type(e.explain(query, p))(plan))
    for got, p in zip(e.search_many(query, params), params, strict=True):
        _same(got, e.search(query, p))


def test_what_is_not_rebound_is_planned_alone() -> None:
    from nlql.plan.rebind import PLACEHOLDER

    e = _engine()
    # $q also outside SIMILARITY's text; a text equal to a literal of the query (one slot there, not two);
    # a text holding the placeholder; a value that is no string
    cases = [
        ('SELECT SENTENCE LET s = SIMILARITY(content, $q) WHERE content CONTAINS $q LIMIT 3',
         [{"q": w} for w in WORDS[:4]], set()),
        ('SELECT SENTENCE LET a = SIMILARITY(content, $q), b = SIMILARITY(content, "tools") ORDER BY a + b DESC LIMIT 3',
         [{"q": "agents"}, {"q": "tools"}, {"q": "memory"}], {2}),
        ('SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 3',
         [{"q": "agents"}, {"q": PLACEHOLDER + "hbz"}, {"q": "memory"}, {"q": [0.1] * 64}], {2}),
    ]
    for query, params, rebound in cases:
        plans, _ = e._planned_many(query, params, None)
        assert {i for i, (_, c) in enumerate(plans) if c == "rebound"} == rebound, query
        for got, p in zip(e.search_many(query, params), params, strict=True):
            _same(got, e.search(query, p))


def test_a_placeholder_the_rebinder_cannot_replace_is_refused() -> None:
    import dataclasses

    from nlql.plan.rebind import NotRebindable, Rebinder, placeholder

    e = _engine()
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 3'
    template = e._plan(q, {"q": placeholder("q")})
    binder = Rebinder(template, frozenset({"q"}))
    assert "query" in binder.fields and "scores" in binder.fields
    assert binder.bind({"q": "tools"}).scores[0].texts == ("tools",)
    assert template.scores[0].texts == (placeholder("q"),)  # the template is untouched
    with pytest.raises(NotRebindable):
        Rebinder(dataclasses.replace(template, notes=[placeholder("q").upper()]), frozenset({"q"}))


def test_a_threshold_applied_inside_an_exact_knn_is_not_over_fetched() -> None:
    """``WHERE s >= t`` on the knn's own score: the built-in store (exact) applies it inside the knn, so
    the first round asks for LIMIT rows, not 4×, and the page is the brute-force one (for every t)."""
    e = _engine(n=80)
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, $q) WHERE s >= $t LIMIT 6'
    assert "k=6 overfetch=1" in str(e.explain(q, {"q": "agents", "t": 0.2}))
    # on another score, or with another residual conjunct, the residual can drop rows: over-fetched
    other = 'SELECT SENTENCE LET s = SIMILARITY(content, $q), r = SIMILARITY(content, "data") WHERE r >= 0.1 LIMIT 6'
    assert "k=24 overfetch=4" in str(e.explain(other, {"q": "agents"}))
    everything = e.search('SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 1000', {"q": "agents tools"})
    for t in (-1.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.9):
        hits = e.search(q, {"q": "agents tools", "t": t})
        want = [h for h in everything if h.scores["s"] >= t][:6]
        assert [(h.id, h.position, h.scores["s"]) for h in hits] == [(h.id, h.position, h.scores["s"]) for h in want]
        assert hits.stats["rounds"] == 1
