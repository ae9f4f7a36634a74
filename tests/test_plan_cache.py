"""The engine's plan cache (nlql/plan/cache.py): a reused plan answers and explains exactly as a fresh
one, and anything that changes planning (data, parameters, clock, settings) plans again."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.errors import NLQLError, PlanError
from nlql.plan.cache import PlanCache, freeze, params_key
from nlql.rerankers import FakeReranker

T0 = datetime(2025, 6, 11, 12, 0, tzinfo=timezone.utc)

DOCS = [
    ("a", "Agents call tools to search the web.", {"n": 1, "tag": "x", "date": "2025-06-03"}),
    ("b", "Cats sleep most of the day.", {"n": 2, "tag": "y", "date": "2025-06-10"}),
    ("c", "Tools for agents need clear schemas.", {"n": 1, "tag": "y", "date": "2025-05-28"}),
    ("d", "The weather was sunny all week.", {"n": 3, "tag": "x", "date": "2025-06-16"}),
]
SIM = 'SELECT SENTENCE LET rel = SIMILARITY(content, "agents and tools") WHERE meta.n == $v LIMIT 10'


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def make(clock: Any = None, **kw: Any) -> Engine:
    e = Engine(embedder=HashEmbedder(dim=64), clock=clock or (lambda: T0), warm_up=False, **kw)
    for doc_id, text, meta in DOCS:
        e.add_text(text, id=doc_id, metadata=meta)
    return e


def page(hits: Any) -> list[tuple[str, Any, dict[str, Any]]]:
    return [(h.id, h.scores, h.metadata) for h in hits]


def test_a_hit_answers_and_explains_like_a_fresh_plan() -> None:
    cached, fresh = make(), make(plan_cache_size=0)
    first = cached.search(SIM, params={"v": 1})
    again = cached.search(SIM, params={"v": 1})
    assert (first.stats["plan_cache"], again.stats["plan_cache"]) == ("miss", "hit")
    assert page(again) == page(first) == page(fresh.search(SIM, params={"v": 1}))
    assert sorted(h.doc_id for h in again) == ["a", "c"]
    assert "plan" in again.stats["timings_ms"]
    ex = cached.explain(SIM, params={"v": 1})
    assert str(ex) == str(cached.explain(SIM, params={"v": 1})) == str(fresh.explain(SIM, params={"v": 1}))
    assert ex.to_dict() == fresh.explain(SIM, params={"v": 1}).to_dict()
    assert fresh.search(SIM, params={"v": 1}).stats["plan_cache"] == "off"
    # a hit hands out its own plan object: a search cannot change what the next one reads
    assert cached._plan(SIM, {"v": 1}) is not cached._plan(SIM, {"v": 1})


def test_each_parameter_value_is_its_own_plan_by_type_and_value() -> None:
    e = make()
    assert sorted(h.doc_id for h in e.search(SIM, params={"v": 1})) == ["a", "c"]
    two = e.search(SIM, params={"v": 2})
    assert two.stats["plan_cache"] == "miss" and [h.doc_id for h in two] == ["b"]
    # True == 1 in Python, but a boolean never equals a number in NLQL: not the plan of 1
    assert [h.doc_id for h in e.search(SIM, params={"v": True})] == []
    assert e.search(SIM, params={"v": 1.0}).stats["plan_cache"] == "miss"
    assert e.search(SIM, params={"v": 1}).stats["plan_cache"] == "hit"
    tags = ["x"]
    q = "SELECT SENTENCE WHERE meta.tag IN $t LIMIT 10"
    assert [h.doc_id for h in e.search(q, params={"t": tags})] == ["a", "d"]
    tags[0] = "y"  # the caller changes its list: the next search plans for the new value
    assert [h.doc_id for h in e.search(q, params={"t": tags})] == ["b", "c"]
    # a value the cache cannot key on is planned without it (a float subclass: numpy's float64)
    assert e.search(SIM, params={"v": np.float64(2.0)}).stats["plan_cache"] == "off"


def test_a_write_plans_again_and_a_new_key_stops_warning() -> None:
    e = make()
    q = 'SELECT SENTENCE WHERE meta.colour == "red" LIMIT 10'
    before = e.search(q)
    assert [h.doc_id for h in before] == [] and any("meta.colour" in w for w in before.warnings)
    assert e.search(q).stats["plan_cache"] == "hit"
    e.add_text("A red kite in the sky.", id="e", metadata={"colour": "red"})
    after = e.search(q)
    assert after.stats["plan_cache"] == "miss"
    assert [h.doc_id for h in after] == ["e"] and not any("meta.colour" in w for w in after.warnings)
    e.delete("e")
    gone = e.search(q)
    assert gone.stats["plan_cache"] == "miss" and [h.doc_id for h in gone] == []


def test_a_period_is_resolved_against_the_clock_of_each_search() -> None:
    clock = Clock(T0)
    e = make(clock=clock)
    q = 'SELECT SENTENCE WHERE meta.date WITHIN "last week" LIMIT 10'
    assert [h.doc_id for h in e.search(q)] == ["a"]  # 2025-06-02 .. 2025-06-09
    assert e.search(q).stats["plan_cache"] == "hit"  # the same instant (a fixed clock)
    text = str(e.explain(q))
    clock.now = T0 + timedelta(days=7)
    later = e.search(q)
    assert later.stats["plan_cache"] == "miss" and [h.doc_id for h in later] == ["b"]
    assert str(e.explain(q)) != text
    clock.now = T0
    assert [h.doc_id for h in e.search(q)] == ["a"] and str(e.explain(q)) == text
    # a query that reads no clock keeps its plan when the clock moves
    plain = "SELECT SENTENCE WHERE meta.n == 3 LIMIT 10"
    e.search(plain)
    clock.now = T0 + timedelta(days=30)
    assert e.search(plain).stats["plan_cache"] == "hit"
    assert e._plan(plain, None).now == clock.now


def test_now_and_recency_are_never_served_across_instants() -> None:
    clock = Clock(T0)
    e = make(clock=clock)
    q = 'SELECT SENTENCE LET r = RECENCY(meta.date, half_life => "7d") ORDER BY r DESC LIMIT 1'
    first = e.search(q)[0].scores["r"]
    clock.now = T0 + timedelta(days=7)
    second = e.search(q)
    assert second.stats["plan_cache"] == "miss"
    assert second[0].scores["r"] != first


def test_engine_settings_and_functions_plan_again() -> None:
    e = make()
    q = "SELECT SENTENCE WHERE meta.n >= 1 LIMIT 50"
    assert len(e.search(q)) == 4
    e.limit_ceiling = 10
    with pytest.raises(PlanError, match="ceiling"):
        e.search(q)
    e.limit_ceiling = 100_000
    assert e.search(q).stats["plan_cache"] == "hit"
    fq = "SELECT SENTENCE WHERE BIG(meta.n) LIMIT 10"
    with pytest.raises(NLQLError):
        e.search(fq)
    e.register_function("BIG", lambda x: x >= 2, arity=1)
    assert [h.doc_id for h in e.search(fq)] == ["b", "d"]
    e.register_function("BIG", lambda x: x >= 3, arity=1)  # replaced: the new function is used
    assert [h.doc_id for h in e.search(fq)] == ["d"]
    rq = 'SELECT SENTENCE LET rel = SIMILARITY(content, "agents") LIMIT 2'
    plain = str(e.explain(rq))
    e.search(rq)
    ranked = e.search(rq, reranker=FakeReranker())
    assert ranked.stats["plan_cache"] == "miss" and "rerank" in ranked[0].scores
    assert "rerank" not in e.search(rq)[0].scores and str(e.explain(rq)) == plain


class SwitchEmbedder(HashEmbedder):
    """HashEmbedder, except for the texts in ``swap``: those get the vector of another text."""

    def __init__(self) -> None:
        super().__init__(dim=64)
        self.swap: dict[str, str] = {}

    def embed(self, texts: Any) -> np.ndarray:
        return super().embed([self.swap.get(t, t) for t in texts])


def test_a_hit_embeds_the_query_again_and_follows_a_new_vector() -> None:
    emb = SwitchEmbedder()
    e = Engine(embedder=emb, clock=lambda: T0, warm_up=False)
    for doc_id, text, meta in DOCS:
        e.add_text(text, id=doc_id, metadata=meta)
    q = 'SELECT SENTENCE LET rel = SIMILARITY(content, "agents and tools") ORDER BY rel DESC LIMIT 2'
    first = e.search(q)
    assert first[0].doc_id in ("a", "c") and e.search(q).stats["plan_cache"] == "hit"
    emb.swap["agents and tools"] = "The weather was sunny all week."
    moved = e.search(q)
    assert moved.stats["plan_cache"] == "hit"
    assert moved[0].doc_id == "d" and moved[0].scores["rel"] == pytest.approx(1.0)
    fresh = Engine(embedder=emb, clock=lambda: T0, warm_up=False, plan_cache_size=0)
    for doc_id, text, meta in DOCS:
        fresh.add_text(text, id=doc_id, metadata=meta)
    assert page(moved) == page(fresh.search(q))
    del emb.swap["agents and tools"]
    assert page(e.search(q)) == page(first)


def test_a_hit_filters_orders_and_binds_like_a_fresh_plan_every_time() -> None:
    """What the executor compiles once per plan (WHERE left to the engine, ORDER BY keys, bindings, a
    user function) gives every search of the cached plan the answer of a fresh plan."""
    cached, fresh = make(), make(plan_cache_size=0)
    calls: list[Any] = []

    def short(text: Any) -> bool:
        calls.append(text)
        return isinstance(text, str) and len(text) < 38
    for e in (cached, fresh):
        e.register_function("SHORT", short, arity=1)
    q = ('SELECT SENTENCE LET rel = SIMILARITY(content, "agents"), size = LENGTH(content) * 2 '
         'WHERE SHORT(content) AND rel > -1 ORDER BY size DESC, rel DESC LIMIT 3')
    want = page(fresh.search(q))
    assert want and all(h[1]["size"] < 76 for h in want)
    for _ in range(3):
        calls.clear()
        got = cached.search(q)
        assert page(got) == want and calls  # the user function ran again, on this search's rows
    assert got.stats["plan_cache"] == "hit"


def test_errors_are_not_cached() -> None:
    e = make()
    for _ in range(2):
        with pytest.raises(NLQLError):
            e.search("SELECT SENTENCE WHERE meta.n == $v LIMIT 10")  # $v not bound
    assert len(e._plans) == 0


def test_the_cache_is_bounded_least_recently_used_first_out() -> None:
    e = make(plan_cache_size=2)
    qs = [f"SELECT SENTENCE WHERE meta.n == {i} LIMIT 10" for i in (1, 2, 3)]
    e.search(qs[0])
    e.search(qs[1])
    assert e.search(qs[0]).stats["plan_cache"] == "hit"  # qs[0] is now the most recent
    e.search(qs[2])  # drops qs[1]
    assert len(e._plans) == 2
    assert e.search(qs[0]).stats["plan_cache"] == "hit"
    assert e.search(qs[1]).stats["plan_cache"] == "miss"
    with pytest.raises(ValueError):
        PlanCache(-1)


def test_keys_tell_apart_what_python_equality_merges() -> None:
    assert freeze(1) != freeze(True) != freeze(1.0)
    assert freeze(0.0) != freeze(-0.0)
    same_instant = datetime(2025, 1, 1, 13, tzinfo=timezone(timedelta(hours=1)))
    assert freeze(datetime(2025, 1, 1, 12, tzinfo=timezone.utc)) != freeze(same_instant)
    assert params_key({"b": [1, 2], "a": "x"}) == params_key({"a": "x", "b": [1, 2]})
    assert params_key({"a": [1]}) != params_key({"a": (1,)})


def test_searches_from_several_threads_agree_with_one_thread() -> None:
    e = make(plan_cache_size=3)  # smaller than the queries: entries are dropped and re-made under load
    queries = [(SIM, {"v": v}) for v in (1, 2, 3)] + [
        ("SELECT SENTENCE WHERE meta.tag == $t LIMIT 10", {"t": t}) for t in ("x", "y")]
    want = [page(e.search(q, params=p)) for q, p in queries]
    errors: list[BaseException] = []
    got: list[list[Any]] = []

    def reader(offset: int) -> None:
        try:
            for i in range(60):
                j = (i + offset) % len(queries)
                q, p = queries[j]
                if page(e.search(q, params=p)) != want[j]:
                    got.append([j])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def writer() -> None:
        try:
            for i in range(10):  # documents no query selects: answers stay, plans are re-made
                e.add_text(f"Filler text number {i}.", id=f"f{i}", metadata={"n": 99, "tag": "z"})
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(6)] + [threading.Thread(target=writer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and got == []


@pytest.mark.parametrize("store", ["memory", "faiss"])
def test_the_stores_filter_cache_tells_true_from_one(store: str) -> None:
    """``meta.n == true`` after ``meta.n == 1``: the store's cache of filtered rows keyed ``True == 1``
    as one filter and answered the second with the first's rows (found by the test above)."""
    pytest.importorskip("faiss") if store == "faiss" else None
    e = Engine(embedder=HashEmbedder(dim=64), store=store, warm_up=False, plan_cache_size=0)
    for doc_id, text, meta in DOCS:
        e.add_text(text, id=doc_id, metadata=meta)
    assert sorted(h.doc_id for h in e.search(SIM, params={"v": 1})) == ["a", "c"]
    assert [h.doc_id for h in e.search(SIM, params={"v": True})] == []


def test_parsed_literals_of_different_types_never_share_a_plan() -> None:
    """Issue 33 item 1: ``== true``, ``== 1`` and ``== 1.0`` are three queries (the IR compares a literal
    with its type, unlike Python's ``True == 1 == 1.0``), so a cached plan of one never answers another."""
    from nlql import ir, parse

    e = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    e.add_text("The flag is true.", id="t", metadata={"x": True})
    e.add_text("The count is one.", id="i", metadata={"x": 1})
    e.add_text("The ratio is one point zero.", id="f", metadata={"x": 1.5})
    fresh = Engine(embedder=HashEmbedder(dim=64), warm_up=False, plan_cache_size=0)
    for h in e.search("SELECT DOCUMENT LIMIT 10"):
        fresh.add_text(h.content, id=h.doc_id, metadata=h.metadata)
    queries = [f"SELECT DOCUMENT WHERE meta.x == {v} LIMIT 10" for v in ("true", "1", "1.0", "1", "true")]
    for q in queries:
        got = sorted(h.doc_id for h in e.search(parse(q)))
        assert got == sorted(h.doc_id for h in fresh.search(parse(q))), q
    assert parse(queries[0]) != parse(queries[1]) != parse(queries[2])
    assert len({parse(q) for q in queries}) == 3
    assert ir.Literal(True) != ir.Literal(1) and ir.Literal(1) != ir.Literal(1.0)
    assert ir.Literal(0.0) != ir.Literal(-0.0) and ir.Literal(1) == ir.Literal(1)
    assert hash(ir.Literal("a")) == hash(ir.Literal("a"))
