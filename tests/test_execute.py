"""Planner facts read once and the executor's table fast paths (issue 11).

The fast paths are optimisations that must not change an answer: every query here runs twice on the
same data, once with the built-in store's fast paths and once with them switched off
(``Capabilities.FAST_PATH=False``), and the hits must be identical.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from nlql import Engine, check
from nlql.check import check_query
from nlql.embedders import HashEmbedder

CLOCK = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)
WORDS = ["solar", "energy", "policy", "cats", "dogs", "rivers", "agents", "tools", "memory", "music"]


def _engine(fast: bool = True) -> Engine:
    e = Engine(embedder=HashEmbedder(dim=64), clock=lambda: CLOCK, warm_up=False)
    if not fast:
        e.store.capabilities = replace(e.store.capabilities, FAST_PATH=False)
    texts, metas = [], []
    for i in range(240):
        w = [WORDS[(i * 3 + j) % len(WORDS)] for j in range(4)]
        texts.append(f"{w[0].capitalize()} and {w[1]} in part {i}. The {w[2]} of {w[3]} {i % 7}.")
        metas.append({"n": i, "status": ["published", "draft"][i % 2],
                      "d": (CLOCK - timedelta(days=i)).isoformat()})
    e.add_texts(texts, ids=[f"d{i:03d}" for i in range(240)], metadatas=metas)
    return e


@pytest.fixture(scope="module")
def engines() -> tuple[Engine, Engine]:
    return _engine(fast=True), _engine(fast=False)


SEM = 'SIMILARITY(content, "solar energy")'
KW = 'BM25(content, "solar energy")'
FAST_QUERIES = {
    "insertion": "SELECT SENTENCE LIMIT 7 OFFSET 3",
    "score": f"SELECT SENTENCE LET s = {SEM} ORDER BY s ASC LIMIT 9",
    "bm25": f"SELECT SENTENCE LET k = {KW} ORDER BY k DESC LIMIT 12",
    "formula": f"SELECT SENTENCE LET s = 0.7 * {SEM} + 0.3 * {KW} ORDER BY s DESC LIMIT 10",
    "fusion": f"SELECT SENTENCE LET s = {SEM}, k = {KW}, f = RRF(s, k) ORDER BY f DESC LIMIT 10",
    "fusion_thresholded": f"SELECT SENTENCE LET s = {SEM}, k = {KW}, f = INTERLEAVE(s, k) WHERE s >= 0.1 "
                          "ORDER BY f DESC LIMIT 8 OFFSET 2",
    "fusion_filtered": f"SELECT SENTENCE LET s = {SEM}, k = {KW}, f = RRF(s, k, k => 10) "
                       'WHERE meta.status == "draft" ORDER BY f DESC LIMIT 10',
    # a condition after fusion that fails at 0 (no arm ranks the row) keeps the fusion path
    "fusion_gated": "SELECT SENTENCE LET s = SIMILARITY(content, \"solar energy\", min => 0.3), "
                    "k = BM25(content, \"rivers\", min => 0.000001), f = RRF(s, k) WHERE f > 0 "
                    "ORDER BY f DESC LIMIT 300",
    "fusion_gated_flipped": f"SELECT SENTENCE LET s = {SEM}, k = {KW}, f = RRF(s, k, window => 20) "
                            "WHERE 0.001 < f ORDER BY f DESC LIMIT 50",
    # a lower bound on the BM25 sort key: the rows passing it are a prefix of the order
    "bm25_gated": f"SELECT SENTENCE LET k = {KW} WHERE k > 0 ORDER BY k DESC LIMIT 12",
    "bm25_gated_offset": f'SELECT SENTENCE LET k = {KW} WHERE k >= 0 AND meta.status == "draft" '
                         "ORDER BY k DESC LIMIT 9 OFFSET 5",
    "bm25_gated_high": f"SELECT SENTENCE LET k = {KW}, s = {SEM} WHERE 1.4 <= k AND s > 0.05 "
                       "ORDER BY k DESC LIMIT 40",
}


def _rows(hits) -> list[tuple[str, dict]]:
    return [(h.id, h.scores) for h in hits]


@pytest.mark.parametrize("kind", sorted(FAST_QUERIES))
def test_fast_path_is_chosen_shown_and_exact(engines: tuple[Engine, Engine], kind: str) -> None:
    fast, slow = engines
    q = FAST_QUERIES[kind]
    plan = fast.explain(q)
    expected = kind.split("_")[0]
    assert plan.to_dict()["fast_path"]["kind"] == expected
    assert f"fast path (memory table): {expected}:" in str(plan)
    got = fast.search(q)
    assert got.stats["fast_path"] == expected
    want = slow.search(q)
    assert "fast_path" not in want.stats and "fast path" not in str(slow.explain(q))
    assert _rows(got) == _rows(want) and len(got) > 0


def test_bm25_fast_path_declines_when_too_few_rows_match(engines: tuple[Engine, Engine]) -> None:
    fast, slow = engines
    q = 'SELECT SENTENCE LET k = BM25(content, "rivers") ORDER BY k DESC LIMIT 200'
    got = fast.search(q)
    assert got.stats["fast_path"] == "bm25 (declined)"  # fewer than 200 rows match: the general path ran
    assert _rows(got) == _rows(slow.search(q))


def test_no_fast_path_says_why(engines: tuple[Engine, Engine]) -> None:
    fast, _ = engines
    text = str(fast.explain(f'SELECT SENTENCE LET k = {KW} WHERE LENGTH(content) > 10 OR k > 1 ORDER BY k DESC LIMIT 3'))
    assert "fast path (memory table): none: WHERE has conditions the engine evaluates row by row" in text
    assert "none: rows group sentences" in str(fast.explain(f"SELECT CHUNK LET k = {KW} ORDER BY k DESC LIMIT 3"))


@pytest.mark.parametrize("where", ["k < 1.4", "k > 1.4 OR k < 0.5", "k + 0 > 0", "s > 0.1 AND k <= 2", "-k < 0"])
def test_a_bm25_condition_that_is_not_a_lower_bound_keeps_every_row(engines: tuple[Engine, Engine],
                                                                   where: str) -> None:
    fast, slow = engines
    q = f"SELECT SENTENCE LET k = {KW}, s = {SEM} WHERE {where} ORDER BY k DESC LIMIT 15"
    assert "none: WHERE has conditions the engine evaluates row by row" in str(fast.explain(q))
    assert _rows(fast.search(q)) == _rows(slow.search(q))


def test_a_bm25_lower_bound_that_few_rows_pass_gives_a_short_exact_page(engines: tuple[Engine, Engine]) -> None:
    fast, slow = engines
    top = max(h.scores["k"] for h in slow.search(f"SELECT SENTENCE LET k = {KW} ORDER BY k DESC LIMIT 1"))
    q = f"SELECT SENTENCE LET k = {KW} WHERE k >= {top} ORDER BY k DESC LIMIT 50"
    got, want = fast.search(q), slow.search(q)
    assert got.stats["fast_path"] == "bm25" and 0 < len(got) < 50
    assert _rows(got) == _rows(want)


@pytest.mark.parametrize("late", ["f < 0.5", "f >= 0", "f > -1", "f + 0 > 0", "f > 0 OR s > 0.9"])
def test_a_condition_after_fusion_that_holds_at_zero_keeps_every_row(engines: tuple[Engine, Engine],
                                                                      late: str) -> None:
    fast, slow = engines
    q = f"SELECT SENTENCE LET s = {SEM}, k = {KW}, f = RRF(s, k, window => 5) WHERE {late} ORDER BY f DESC LIMIT 30"
    assert "none: a condition applies after fusion" in str(fast.explain(q))
    assert _rows(fast.search(q)) == _rows(slow.search(q))


def test_recency_half_life_reads_durations_as_check_does() -> None:
    """Regression: "2 weeks" checked clean but the executor silently used 90 days (0.8978, not 0.5)."""
    e = Engine(embedder=HashEmbedder(dim=16), clock=lambda: CLOCK, warm_up=False)
    e.add_text("Two weeks old.", id="a", metadata={"d": (CLOCK - timedelta(days=14)).isoformat()})
    for text in ('"2 weeks"', '"2w"', '"14 days"', '"336h"'):
        q = f"SELECT SENTENCE LET r = RECENCY(meta.d, half_life => {text})"
        assert check(q) == []
        assert e.search(q)[0].scores["r"] == pytest.approx(0.5), text
    assert e.search("SELECT SENTENCE LET r = RECENCY(meta.d)")[0].scores["r"] == pytest.approx(0.5 ** (14 / 90))


def test_default_order_is_the_first_score_binding_not_a_boolean() -> None:
    """Regression: a comparison of a score (a boolean) was taken as the default ORDER BY."""
    e = Engine(embedder=HashEmbedder(dim=64), clock=lambda: CLOCK, warm_up=False)
    e.add_texts(["Solar panels on roofs.", "Cats asleep in the sun.", "Solar energy policy."])
    q = 'SELECT SENTENCE LET hi = SIMILARITY(content, "x") > 2, s = SIMILARITY(content, "solar")'
    assert "order by: s DESC NULLS LAST (default)" in str(e.explain(q))
    got = [h.scores["s"] for h in e.search(q)]
    assert got == sorted(got, reverse=True) and len(got) == 3


def test_checked_query_carries_binding_facts() -> None:
    checked = check_query('SELECT SENTENCE LET hi = SIMILARITY(content, "x") > 2, s = SIMILARITY(content, "y"), '
                          "f = RRF(s, s), g = f * 2, r = RECENCY(meta.d) ORDER BY g DESC LIMIT 3")
    facts = checked.bindings
    assert [facts[n].type for n in facts] == ["bool", "score", "score", "score", "number"]
    assert checked.score_bindings == ("s", "f", "g")
    assert checked.fusion_bindings == {"f", "g"}


def test_a_full_first_knn_round_does_not_ask_the_store_for_its_count(monkeypatch: pytest.MonkeyPatch) -> None:
    # on a server store count() is a round trip: only a short page that might widen pays for it
    e = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    e.add_texts([f"Cats and dogs in part {i}." for i in range(60)])
    calls: list[int] = []
    count = e.store.count
    monkeypatch.setattr(e.store, "count", lambda: calls.append(1) or count())
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, "cats") {where} ORDER BY s DESC LIMIT 5'
    assert len(e.search(q.format(where=""))) == 5 and calls == []
    # a residual that leaves the page short widens; the count tells it every row was read
    hits = e.search(q.format(where="WHERE LENGTH(content) > 1000"))
    assert len(hits) == 0 and calls and hits.stats["rounds"] >= 1
