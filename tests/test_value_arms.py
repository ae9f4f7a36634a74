"""GRAPH, TEMPORAL and RECENCY fusion arms as vectors on a table store (the fusion fast path's VALUE arms).

The fast path must give exactly the rows and scores of the row-by-row path: every query here runs on an
engine with the fast path and on one whose store declares no fast path, and the pages (ids, every
score, order) must be equal, over WHERE, LIMIT/OFFSET, windows, weights, ties (many rows share a date
or an activation), arms with no rows (no period, no entity found) and dates given as ISO strings,
datetimes and dates.
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.plan import choose_fastpath
from nlql.stores.memory import MatrixStore, table_recall

CLOCK = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)  # a Monday: "last week" is 23..30 November
PEOPLE = ["Russell", "Moore", "Frege", "Keynes", "Ramsey", "Wittgenstein", "Ada Lovelace", "NASA", "Carnap"]
TOPICS = ["the parser", "the grammar", "the paradox", "logic notes", "the budget", "type theory"]


def _corpus() -> list[tuple[str, str, dict[str, Any]]]:
    rng = random.Random(11)
    docs = []
    for i in range(240):
        names = rng.sample(PEOPLE, rng.choice([0, 1, 1, 2, 3]))
        topic = rng.choice(TOPICS)
        first = f"{' and '.join(names)} discussed {topic}." if names else f"We discussed {topic}."
        second = rng.choice(["Nothing was decided.", f"{rng.choice(PEOPLE)} replied later.", "The notes are short."])
        meta: dict[str, Any] = {"section": ["notes", "decisions", "reading"][i % 3], "n": i}
        day = CLOCK - timedelta(days=rng.choice([0, 1, 2, 3, 4, 5, 6, 8, 9, 15, 30, 90, -3]))
        kind = i % 7
        if kind == 0:
            pass  # undated: absent from TEMPORAL and RECENCY
        elif kind == 1:
            meta["date"] = day.date().isoformat()  # many rows share a day: ties
        elif kind == 2:
            meta["date"] = day  # a datetime value
        elif kind == 3:
            meta["date"] = date(day.year, day.month, day.day)  # a date value
        elif kind == 4:
            meta["date"] = "not a date"
        else:
            meta["date"] = (day - timedelta(hours=i % 5)).isoformat()
        docs.append((f"d{i:03d}", f"{first} {second}", meta))
    return docs


def _engine(fast: bool) -> Engine:
    e = Engine(embedder=HashEmbedder(dim=32), clock=lambda: CLOCK, warm_up=False)
    for doc_id, text, meta in _corpus():
        e.add_text(text, id=doc_id, metadata=meta)
    if not fast:
        e.store.capabilities = replace(e.store.capabilities, FAST_PATH=False)
    return e


@pytest.fixture(scope="module")
def engines() -> tuple[Engine, Engine]:
    return _engine(True), _engine(False)


LETS = ("LET s = SIMILARITY(content, $q), k = BM25(content, $q), g = GRAPH($q), t = TEMPORAL(meta.date, $q), "
        "r = RECENCY(meta.date, half_life => \"3d\"), ")
QUERIES = [
    "f = RRF(s, k, g, t) ORDER BY f DESC LIMIT 10",
    "f = RRF(s, k, g, t) ORDER BY f DESC LIMIT 7 OFFSET 5",
    "f = RRF(s, k, g, t, window => 4) ORDER BY f DESC LIMIT 10",
    "f = RRF(s, k, g, t, window => 1) ORDER BY f DESC LIMIT 3 OFFSET 1",
    "f = RRF(g, t, window => 9) ORDER BY f DESC LIMIT 20",
    "f = RRF(g, t, k => 5, weights => [2.0, 0.5]) ORDER BY f DESC LIMIT 8",
    "f = RRF(s, g, r) ORDER BY f DESC LIMIT 10",
    "f = RRF(r, t, window => 6) ORDER BY f DESC LIMIT 12 OFFSET 2",
    "f = INTERLEAVE(g, k, t) ORDER BY f DESC LIMIT 10",
    "f = INTERLEAVE(t, g, window => 3) ORDER BY f DESC LIMIT 9",
    "f = RRF(s, k, g, t) WHERE meta.section == \"decisions\" ORDER BY f DESC LIMIT 10",
    "f = RRF(g, t) WHERE meta.n >= 100 ORDER BY f DESC LIMIT 15 OFFSET 3",
    "f = RRF(s, k, g, t) ORDER BY f DESC, t DESC LIMIT 10",
    "f = RRF(s, k, g, t) WHERE f > 0 ORDER BY f DESC LIMIT 10",
    "f = RRF(SIMILARITY(content, $q, min => 0.1), GRAPH($q, hops => 2, decay => 0.3), RECENCY(meta.date)) "
    "ORDER BY f DESC LIMIT 10",
]
QUESTIONS = [
    "what did Russell decide last week?",
    "who mentioned Frege and Moore?",
    "notes about Ada Lovelace yesterday",
    "what did we decide about the budget?",  # no entity, no period: GRAPH and TEMPORAL arms are empty
    "NASA in the last 3 days",
    "Carnap",
]


def _page(hits: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(h.id, h.scores) for h in hits]


@pytest.mark.parametrize("tail", QUERIES)
def test_value_arms_give_the_row_by_row_pages(engines: tuple[Engine, Engine], tail: str) -> None:
    fast, slow = engines
    q = f"SELECT SENTENCE {LETS}{tail}"
    for question in QUESTIONS:
        got = fast.search(q, {"q": question})
        assert got.stats.get("fast_path") == "fusion", (q, got.stats)
        assert _page(got) == _page(slow.search(q, {"q": question})), (q, question)


def test_explain_names_the_value_arms(engines: tuple[Engine, Engine]) -> None:
    text = str(engines[0].explain(f"SELECT SENTENCE {LETS}f = RRF(s, k, g, t) ORDER BY f DESC LIMIT 5",
                                  {"q": "Russell last week"}))
    assert "fast path (memory table): fusion: each arm's top 100 rows (s, k, g, t)" in text


def test_a_graph_read_outside_the_fusion_keeps_the_row_by_row_path(engines: tuple[Engine, Engine]) -> None:
    fast, slow = engines
    q = ('SELECT SENTENCE LET s = SIMILARITY(content, $q), g = GRAPH($q), f = RRF(s, GRAPH($q, hops => 2)) '
         "WHERE g IS NOT NULL ORDER BY f DESC LIMIT 5")
    got = fast.search(q, {"q": "Russell"})
    assert got.stats.get("fast_path") is None
    assert _page(got) == _page(slow.search(q, {"q": "Russell"}))


def test_without_value_arms_the_query_falls_back(monkeypatch: pytest.MonkeyPatch,
                                                 engines: tuple[Engine, Engine]) -> None:
    slow = engines[1]
    q = f"SELECT SENTENCE {LETS}f = RRF(s, k, g, t) ORDER BY f DESC LIMIT 10"
    want = _page(slow.search(q, {"q": QUESTIONS[0]}))
    monkeypatch.setattr(choose_fastpath, "VALUE_ARMS", False)  # the planner gives no fast path
    off = _engine(True)
    assert "GRAPH / TEMPORAL values come from the engine" in str(off.explain(q, {"q": QUESTIONS[0]}))
    assert _page(off.search(q, {"q": QUESTIONS[0]})) == want
    monkeypatch.setattr(choose_fastpath, "VALUE_ARMS", True)
    monkeypatch.setattr(table_recall, "value_arms", lambda *a: None)  # the engine declines at run time
    declined = _engine(True)
    got = declined.search(q, {"q": QUESTIONS[0]})
    assert got.stats.get("fast_path") is None and _page(got) == want


# ------------------------------------------------------------------ SIMILARITY windows through int8

def test_similarity_windows_through_the_int8_copy_give_the_exact_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fusion's SIMILARITY arm takes its top window from the int8 copy (certified, rescored in fp32):
    the pages equal the fp32 row-by-row path's, scores bit for bit, with windows, offsets, min =>, a
    pushed filter and DISTINCT BY (the full scan)."""
    pytest.importorskip("faiss")
    from nlql.stores.memory import MemoryStore

    monkeypatch.setattr(MemoryStore, "QUANT_MIN_ROWS", 64)  # the test corpus is small

    monkeypatch.setattr(MemoryStore, "INT8_BACKGROUND", False)  # the first search builds the copy
    fast, slow = _engine(True), _engine(False)
    lets = ("LET s = SIMILARITY(content, $q), k = BM25(content, $q), g = GRAPH($q), "
            "s2 = SIMILARITY(content, \"the budget\"), ")
    queries = [
        "f = RRF(s, k, window => 5) ORDER BY f DESC LIMIT 4",
        "f = RRF(s, k, g, window => 6) ORDER BY f DESC LIMIT 5 OFFSET 2",
        "f = RRF(s, s2, window => 4) WHERE meta.section == \"notes\" ORDER BY f DESC LIMIT 3",
        "f = INTERLEAVE(SIMILARITY(content, $q, min => 0.2), k, window => 5) ORDER BY f DESC LIMIT 6",
        "f = RRF(s, k, window => 5) DISTINCT BY meta.section ORDER BY f DESC LIMIT 4",
    ]
    for tail in queries:
        q = f"SELECT SENTENCE {lets}{tail}"
        for question in QUESTIONS[:4]:
            got = fast.search(q, {"q": question})
            assert _page(got) == _page(slow.search(q, {"q": question})), (q, question)
        if "DISTINCT" not in tail:
            assert got.stats.get("similarity_windows") is not None, got.stats
            assert got.stats["store"]["scan"] == "int8 + fp32 rescore"


@pytest.mark.parametrize("int8", [True, False])
def test_pages_from_the_arms_windows_only_equal_the_row_by_row_path(monkeypatch: pytest.MonkeyPatch,
                                                                    int8: bool) -> None:
    """A fusion of bare SIMILARITY and BM25 arms is fused over the arms' windows alone (each SIMILARITY
    window from the store's top_window through the int8 copy, or the fp32 scan where the copy does not
    apply; each BM25 window from the sparse matches): the pages equal the row-by-row path's, with
    weights, k, windows, OFFSET, arm-local min on both kinds, a pushed filter, a SIMILARITY read outside
    the fusion, and a BM25-only page."""
    pytest.importorskip("faiss")
    from nlql.stores.memory import MemoryStore

    monkeypatch.setattr(MemoryStore, "QUANT_MIN_ROWS", 64 if int8 else 10**9)

    monkeypatch.setattr(MemoryStore, "INT8_BACKGROUND", False)  # the first search builds the copy
    ran: list[str] = []
    real = MatrixStore.window_page

    def spy(store: Any, run: Any, qv: Any) -> Any:
        got = real(store, run, qv)
        ran.append("windows" if got is not None else "declined")
        return got

    monkeypatch.setattr(MatrixStore, "window_page", spy)
    fast, slow = _engine(True), _engine(False)
    lets = "LET s = SIMILARITY(content, $q), k = BM25(content, $q), s2 = SIMILARITY(content, \"the budget\"), "
    queries = [
        "f = RRF(s, k) ORDER BY f DESC LIMIT 10",
        "f = RRF(s, k, k => 5, weights => [0.5, 2.0], window => 7) ORDER BY f DESC LIMIT 6 OFFSET 3",
        "f = RRF(k, s, s2, window => 3) ORDER BY f DESC LIMIT 8",
        "f = INTERLEAVE(k, s, window => 6) ORDER BY f DESC LIMIT 9",
        "f = RRF(SIMILARITY(content, $q, min => 0.15), BM25(content, $q, min => 2.5)) ORDER BY f DESC LIMIT 10",
        "f = RRF(s, k) WHERE meta.section == \"notes\" ORDER BY f DESC LIMIT 5",
        "f = RRF(s, k) WHERE meta.n >= 100 ORDER BY f DESC, s2 DESC LIMIT 10 OFFSET 2",
    ]
    windows = 0
    for tail in queries:
        q = f"SELECT SENTENCE {lets}{tail}"
        for question in QUESTIONS:
            ran.clear()
            got = fast.search(q, {"q": question})
            assert ran and ran[-1] == "windows", (q, question, got.stats)
            assert _page(got) == _page(slow.search(q, {"q": question})), (q, question)
            assert got.stats.get("fused_page") is not None
            if got.stats.get("similarity_windows") is not None:  # (a window of 100 is too deep here)
                windows += 1
                assert got.stats["store"]["scan"] == "int8 + fp32 rescore"
    assert (windows > 0) == int8, windows
    q = "SELECT SENTENCE LET k = BM25(content, $q) ORDER BY k DESC LIMIT 6"
    for question in QUESTIONS[:4]:
        ran.clear()
        got = fast.search(q, {"q": question})
        assert got.stats.get("fast_path") == "bm25" and ran[-1] == "windows", got.stats
        assert _page(got) == _page(slow.search(q, {"q": question})), (q, question)


def test_a_reranker_reads_the_pruned_rows_with_the_same_answer(engines: tuple[Engine, Engine]) -> None:
    """With a reranker the fast path prunes to the arms' windows and the engine fuses them (no fused page)."""
    from nlql.rerankers import FakeReranker

    fast, slow = engines
    q = f"SELECT SENTENCE {LETS}f = RRF(s, k, g, t, window => 5) ORDER BY f DESC LIMIT 4"
    for question in QUESTIONS:
        got = fast.search(q, {"q": question}, reranker=FakeReranker(), rerank_query=question)
        assert got.stats.get("fast_path") == "fusion" and "fused_page" not in got.stats
        want = slow.search(q, {"q": question}, reranker=FakeReranker(), rerank_query=question)
        assert _page(got) == _page(want), question


# ------------------------------------------------------------------ DOCUMENT rows

# RRF / INTERLEAVE over documents with GRAPH and TEMPORAL arms: a document's GRAPH is its best sentence's
# activation and its TEMPORAL its own date's value; every document here has two sentences, so the
# activation often sits in the second one
DOCUMENT_QUERIES = [
    ("f = RRF(s, k, g, t) ORDER BY f DESC LIMIT 10", "fusion"),
    ("f = RRF(s, k, g, t) ORDER BY f DESC LIMIT 7 OFFSET 5", "fusion"),
    ("f = RRF(s, k, g, t, window => 4) ORDER BY f DESC LIMIT 10", "fusion"),
    ("f = RRF(g, t, window => 9) ORDER BY f DESC LIMIT 20", "fusion"),
    ("f = RRF(g, s, k, k => 10, weights => [1.0, 2.5, 1.0]) ORDER BY f DESC LIMIT 10", "fusion"),
    ("f = RRF(t, s, k, k => 10, weights => [1.0, 2.5, 1.0]) WHERE meta.section == \"notes\" "
     "ORDER BY f DESC LIMIT 10", "fusion"),
    ("f = INTERLEAVE(g, k, t) ORDER BY f DESC LIMIT 10", "fusion"),
    ("f = RRF(s, k, g, t) ORDER BY f DESC, t DESC LIMIT 10", "fusion"),
    # these stay row by row: RECENCY's vector is exact down to a depth in rows; GRAPH read outside the
    # fusion; FUSE normalises values (its arms stay SIMILARITY / BM25)
    ("f = RRF(s, g, r) ORDER BY f DESC LIMIT 10", None),
    ("f = RRF(s, k, g) WHERE g IS NOT NULL ORDER BY f DESC LIMIT 10", None),
    ("f = FUSE(s, g) ORDER BY f DESC LIMIT 10", None),
]


@pytest.mark.parametrize("tail,path", DOCUMENT_QUERIES)
def test_document_value_arms_give_the_row_by_row_pages(engines: tuple[Engine, Engine], tail: str,
                                                       path: str | None) -> None:
    fast, slow = engines
    q = f"SELECT DOCUMENT {LETS}{tail}"
    for question in QUESTIONS:
        got = fast.search(q, {"q": question})
        assert got.stats.get("fast_path") == path, (q, got.stats)
        want = slow.search(q, {"q": question})
        assert _page(got) == _page(want), (q, question)
        assert [h.best and h.best.position for h in got] == [h.best and h.best.position for h in want]


def test_the_routed_entity_and_temporal_questions_take_the_document_page(engines: tuple[Engine, Engine]) -> None:
    fast, slow = engines
    for question, intent in [("who mentioned Frege?", "entity"), ("what did Russell say about the paradox?", "entity"),
                             ("when did we discuss the budget?", "temporal"), ("notes from yesterday", "temporal")]:
        route = fast.route(question)
        assert route.intent == intent
        explained = str(fast.explain(route))
        assert "fusion over documents" in explained, explained
        got = fast.ask(question)
        assert got.stats.get("fast_path") == "fusion"
        assert _page(got) == _page(slow.search(route.query, params=route.params))
