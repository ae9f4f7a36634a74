"""GRAPH and TEMPORAL arms (SPEC §9): the seeds' scenario, the engine's entity graph, check() errors.

The corpus is a small set of dated notes by and about people, in sections; the clock is fixed on a
Monday, so "last week" is 2026-11-23 .. 2026-11-30.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.errors import CheckError, NLQLError

CLOCK = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)  # a Monday

NOTES = [
    ("n1", "We decided to ship the parser on Friday. Russell reviewed the grammar with Moore.",
     {"date": "2026-11-24T10:00:00Z", "section": "decisions", "author": "Ada"}),
    ("n2", "Moore asked about the type checker. Keynes joined late.",
     {"date": "2026-11-26T16:00:00Z", "section": "meetings", "author": "Ada"}),
    ("n3", "Russell wrote the letter to Frege about the paradox. Frege replied within a week.",
     {"date": "2026-11-16T09:00:00Z", "section": "reading", "author": "Grace"}),
    ("n4", "Wittgenstein proposed a new notation. Ramsey translated it for Keynes.",
     {"date": "2026-11-10T09:00:00Z", "section": "ideas", "author": "Grace"}),
    ("n5", "We agreed to drop the legacy API.",
     {"date": "2026-11-27T11:00:00Z", "section": "decisions", "author": "Ada"}),
    ("n6", "Ramsey will present on Monday.",
     {"date": "2026-11-30T09:00:00Z", "section": "plans", "author": "Grace"}),
    # a note about Russell that never writes his name: metadata["entities"] names him for every sentence
    ("n7", "The lecture notes on logic are ready.",
     {"date": "2026-11-05T09:00:00Z", "section": "reading", "author": "Ada", "entities": ["Russell"]}),
]

FOUR_ARMS = ('SELECT SENTENCE LET s = SIMILARITY(content, $q), k = BM25(content, $q), g = GRAPH($q), '
             't = TEMPORAL(meta.date, $q), f = RRF(s, k, g, t) ORDER BY f DESC LIMIT 5')


def _engine(embedder=None, **kwargs) -> Engine:  # type: ignore[no-untyped-def]
    e = Engine(embedder=embedder or HashEmbedder(dim=64), clock=lambda: CLOCK, warm_up=False, **kwargs)
    for doc_id, text, meta in NOTES:
        e.add_text(text, id=doc_id, metadata=meta)
    return e


@pytest.fixture(scope="module")
def engine() -> Engine:
    return _engine()


def test_who_mentioned_russell_puts_his_sentences_first_then_co_mentioned_people(engine: Engine) -> None:
    hits = engine.search("SELECT SENTENCE LET g = GRAPH($q) WHERE g IS NOT NULL ORDER BY g DESC",
                         {"q": "who mentioned Russell?"})
    ids = [h.id for h in hits]
    naming = {"n1#1", "n3#0", "n7#0"}  # "Russell" in the text, or in metadata["entities"]
    co_mentioned = {"n2#0", "n3#1"}    # Moore and Frege, each named with Russell once
    assert set(ids[:3]) == naming and [h.scores["g"] for h in hits[:3]] == [1.0, 1.0, 1.0]
    assert set(ids[3:]) == co_mentioned
    assert all(0 < h.scores["g"] < 1 for h in hits[3:])
    # Keynes is two steps away (Moore and Keynes never share a sentence): not reached in one hop
    assert "n2#1" not in ids


def test_more_hops_reach_further_with_smaller_activation(engine: Engine) -> None:
    one = {h.id: h.scores["g"] for h in engine.search(
        'SELECT SENTENCE LET g = GRAPH("Ramsey") WHERE g IS NOT NULL')}
    zero = {h.id for h in engine.search('SELECT SENTENCE LET g = GRAPH("Ramsey", hops => 0) WHERE g IS NOT NULL')}
    assert zero == {"n4#1", "n6#0"}
    assert set(one) == {"n4#1", "n6#0", "n2#1"}  # Keynes, named with Ramsey
    assert one["n2#1"] == pytest.approx(0.5)
    none = engine.search('SELECT SENTENCE LET g = GRAPH("Ramsey", decay => 0) WHERE g IS NOT NULL')
    assert {h.id for h in none} == zero


@pytest.mark.parametrize("question", [
    "what did we decide last week?",
    "¿qué decidimos la semana pasada?",
    "Was haben wir letzte Woche beschlossen?",
])
def test_what_did_we_decide_last_week_returns_exactly_last_weeks_notes(engine: Engine, question: str) -> None:
    hits = engine.search("SELECT DOCUMENT WHERE TEMPORAL(meta.date, $q) IS NOT NULL", {"q": question})
    assert sorted(h.id for h in hits) == ["n1", "n2", "n5"]
    ranked = engine.search("SELECT SENTENCE LET t = TEMPORAL(meta.date, $q) WHERE t IS NOT NULL ORDER BY t DESC",
                           {"q": question})
    assert {h.doc_id for h in ranked} == {"n1", "n2", "n5"}
    values = [h.scores["t"] for h in ranked]
    assert values == sorted(values, reverse=True) and all(0.5 < v <= 1 for v in values)
    # the midpoint of the week (Thursday 26th, 12:00) is closest to n2's 16:00
    assert ranked[0].doc_id == "n2"


def test_temporal_without_a_period_is_an_empty_arm(engine: Engine) -> None:
    assert engine.search("SELECT SENTENCE WHERE TEMPORAL(meta.date, $q) IS NOT NULL", {"q": "who is Moore?"}) == []
    plain = "SELECT SENTENCE LET s = SIMILARITY(content, $q), f = RRF(s, TEMPORAL(meta.date, $q)) ORDER BY f DESC"
    assert len(engine.search(plain, {"q": "who is Moore?"})) == 11  # the other arm still ranks every row
    assert "no period found" in str(engine.explain(plain, {"q": "who is Moore?"}))


def test_four_arm_query_runs_and_explains(engine: Engine) -> None:
    q = {"q": "what did Russell decide last week?"}
    hits = engine.search(FOUR_ARMS, q)
    assert len(hits) == 5
    # named Russell, written last week and a keyword match: first in three of the four arms
    assert hits[0].id == "n1#1"
    text = str(engine.explain(FOUR_ARMS, q))
    assert "entities found: Russell" in text
    assert "hop 1: 2 entities raised: Frege 0.5, Moore 0.5" in text
    assert "period 'last week' (rule): [2026-11-23T00:00:00+00:00 .. 2026-11-30T00:00:00+00:00)" in text
    d = engine.explain(FOUR_ARMS, q).to_dict()
    assert d["graph"][0]["found"] == ["Russell"] and d["graph"][0]["rows"] == 5
    assert d["temporal"][0]["period"]["start"] == "2026-11-23T00:00:00+00:00"


@pytest.mark.model
def test_four_arm_query_with_the_real_model() -> None:
    from nlql.embedders import SentenceTransformerEmbedder

    e = _engine(SentenceTransformerEmbedder())
    hits = e.search(FOUR_ARMS, {"q": "what did Russell decide last week?"})
    assert hits[0].id == "n1#1"
    assert {h.doc_id for h in hits[:3]} <= {"n1", "n2", "n3", "n5", "n7"}
    assert "entities found: Russell" in str(e.explain(FOUR_ARMS, {"q": "what did Russell decide last week?"}))


def test_graph_follows_replace_and_delete_like_a_fresh_build() -> None:
    live = _engine()
    query = "SELECT SENTENCE LET g = GRAPH($q, hops => 2) WHERE g IS NOT NULL ORDER BY g DESC"
    assert live.search(query, {"q": "Russell"})  # builds the graph before the writes below
    live.add_text("Moore and Keynes argued about probability.", id="n2", metadata=NOTES[1][2])
    live.delete("n3")
    live.add_text("Frege met Ramsey.", id="n8", metadata={"date": "2026-11-28T09:00:00Z"})
    fresh = Engine(embedder=HashEmbedder(dim=64), store=live.store, clock=lambda: CLOCK, warm_up=False)
    for q in ("Russell", "Keynes", "Frege"):
        got = [(h.id, h.scores["g"]) for h in live.search(query, {"q": q})]
        assert got == [(h.id, h.scores["g"]) for h in fresh.search(query, {"q": q})]
    names = {h.id for h in live.search(query, {"q": "Frege"})}
    assert "n3#0" not in names and "n8#0" in names


def test_extraction_is_lazy_and_can_be_turned_off() -> None:
    calls: list[str] = []

    def extractor(text: str) -> list[str]:
        calls.append(text)
        return [w for w in text.split() if w.istitle()]

    e = _engine(entity_extractor=extractor)
    e.search("SELECT SENTENCE WHERE content CONTAINS $q", {"q": "Moore"})
    assert calls == []  # no GRAPH yet: nothing extracted
    assert e.search('SELECT SENTENCE LET g = GRAPH("Moore") WHERE g IS NOT NULL')
    assert len(calls) == sum(1 for _ in e.search("SELECT SENTENCE"))
    off = _engine(entity_extractor=None)
    assert {h.id for h in off.search('SELECT SENTENCE LET g = GRAPH("Russell") WHERE g IS NOT NULL')} == {"n7#0"}
    assert off.search('SELECT SENTENCE LET g = GRAPH("Moore") WHERE g IS NOT NULL') == []


def test_metadata_entities_must_be_a_list_of_names(engine: Engine) -> None:
    with pytest.raises(ValueError, match="entities"):
        engine.add_text("x", id="bad", metadata={"entities": "Russell"})
    with pytest.raises(ValueError, match="entities"):
        engine.add_text("x", id="bad", metadata={"entities": ["Russell", 3]})


@pytest.mark.parametrize(("query", "at", "message", "hint"), [
    ('SELECT SENTENCE ORDER BY GRAPH($q, hops => -1)', "-1", "hops must be a whole number >= 0", "hops => 2"),
    ('SELECT SENTENCE ORDER BY GRAPH($q, hops => "two")', '"two"', "hops must be a whole number >= 0", "hops => 2"),
    ('SELECT SENTENCE ORDER BY GRAPH($q, decay => 1.5)', "1.5", "decay must be a number between 0 and 1",
     "decay => 0.5"),
    ('SELECT SENTENCE ORDER BY GRAPH(content)', "content", "GRAPH needs a text", "GRAPH($q)"),
    ('SELECT SENTENCE ORDER BY GRAPH(meta.n)', "meta.n", "GRAPH needs a text", "GRAPH($q)"),
    ('SELECT SENTENCE WHERE TEMPORAL(meta.date, 3) IS NOT NULL', "3)", "TEMPORAL needs a text",
     "TEMPORAL(meta.date, $q)"),
    ('SELECT SENTENCE WHERE TEMPORAL(content, $q) IS NOT NULL', "content", "must be a metadata path",
     "TEMPORAL(meta.date, $q)"),
    ('SELECT SENTENCE WHERE TEMPORAL(3, $q) IS NOT NULL', "3,", "must be a metadata path", "TEMPORAL(meta.date, $q)"),
])
def test_check_errors_have_position_and_hint(engine: Engine, query: str, at: str, message: str,
                                             hint: str) -> None:
    diags = [d for d in engine.check(query, {"q": "Russell"}) if message in d.message]
    assert diags, engine.check(query, {"q": "Russell"})
    assert (diags[0].line, diags[0].column) == (1, query.index(at) + 1)
    assert hint in (diags[0].hint or "")
    with pytest.raises(CheckError):
        engine.search(query, {"q": "Russell"})


def test_parameters_are_checked_for_type(engine: Engine) -> None:
    diags = engine.check("SELECT SENTENCE ORDER BY GRAPH($q)", {"q": 3})
    assert any("$q must be a string for GRAPH" in d.message for d in diags)
    with pytest.raises(NLQLError):
        engine.search("SELECT SENTENCE ORDER BY GRAPH($q, hops => $h)", {"q": "Russell", "h": 1.5})
    assert engine.search("SELECT SENTENCE LET g = GRAPH($q, hops => $h) WHERE g IS NOT NULL",
                         {"q": "Keynes", "h": 0})


def test_graph_and_temporal_in_order_by_and_grouped_units(engine: Engine) -> None:
    docs = engine.search('SELECT DOCUMENT LET g = GRAPH("Frege") WHERE g IS NOT NULL ORDER BY g DESC')
    assert [h.id for h in docs][:1] == ["n3"] and {h.id for h in docs} == {"n3", "n1", "n7"}
    ordered = engine.search('SELECT SENTENCE ORDER BY TEMPORAL(meta.date, "last week") DESC NULLS LAST LIMIT 3')
    assert {h.doc_id for h in ordered} <= {"n1", "n2", "n5"}
