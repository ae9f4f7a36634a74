"""The engine on the built-in store: SPEC §6 semantics, §7 API, persistence."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from nlql import Engine, NLQLError
from nlql.embedders import HashEmbedder
from nlql.errors import CheckError, EvaluationError, PlanError
from nlql.rerankers import FakeReranker

CLOCK = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)


class CountingEmbedder:
    """HashEmbedder that records every text it embeds."""

    def __init__(self, dim: int = 64) -> None:
        self.inner = HashEmbedder(dim=dim)
        self.dim = dim
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        return self.inner.embed(texts)


def make(store="memory", **kw) -> Engine:
    return Engine(embedder=HashEmbedder(dim=64), store=store, clock=lambda: CLOCK, **kw)


@pytest.fixture
def people() -> Engine:
    e = make()
    rows = [
        ("a", "Alpha text about agents.", {"status": "published", "year": 2025, "x": "a"}),
        ("b", "Beta text about cats.", {"status": "draft", "year": "2024", "x": None}),
        ("c", "Gamma text about agents and tools.", {"status": "published", "year": "abc"}),
        ("d", "Delta text about dogs.", {"status": "published", "year": 2019.0, "x": "b",
                                         "date": "2024-06-01T10:00:00Z"}),
        ("e", "Epsilon text about tools.", {"year": 2030, "x": "a", "date": "2023-01-15",
                                            "nested": {"k": 1}}),
    ]
    for i, t, m in rows:
        e.add_text(t, id=i, metadata=m)
    return e


def ids(hits) -> list[str]:
    return [h.doc_id for h in hits]


def test_not_equal_excludes_null_and_missing(people: Engine) -> None:
    assert ids(people.search('SELECT SENTENCE WHERE meta.x != "a"')) == ["d"]
    assert ids(people.search('SELECT SENTENCE WHERE NOT meta.x == "a"')) == ["d"]


def test_is_null_and_eq_null(people: Engine) -> None:
    assert ids(people.search("SELECT SENTENCE WHERE meta.x IS NULL")) == ["b", "c"]
    assert ids(people.search("SELECT SENTENCE WHERE meta.x == null")) == ["b", "c"]
    assert ids(people.search("SELECT SENTENCE WHERE meta.x != null")) == ["a", "d", "e"]
    assert ids(people.search("SELECT SENTENCE WHERE meta.x IS NOT NULL")) == ["a", "d", "e"]


def test_numeric_strings_compare_numerically(people: Engine) -> None:
    assert ids(people.search("SELECT SENTENCE WHERE meta.year == 2024")) == ["b"]
    assert ids(people.search('SELECT SENTENCE WHERE meta.year == "2025"')) == ["a"]
    assert ids(people.search("SELECT SENTENCE WHERE meta.year >= 2020")) == ["a", "b", "e"]
    assert ids(people.search("SELECT SENTENCE WHERE meta.year BETWEEN 2019 AND 2024")) == ["b", "d"]


def test_mixed_types_are_unknown_not_errors(people: Engine) -> None:
    # "abc" vs a number is UNKNOWN in both directions: neither side keeps c
    assert "c" not in ids(people.search("SELECT SENTENCE WHERE meta.year < 3000"))
    assert "c" not in ids(people.search("SELECT SENTENCE WHERE NOT meta.year < 3000"))


def test_iso_dates_compare_as_datetimes(people: Engine) -> None:
    assert ids(people.search("SELECT SENTENCE WHERE meta.date >= DATE '2024-01-01'")) == ["d"]
    assert ids(people.search("SELECT SENTENCE WHERE meta.date < TIMESTAMP '2024-06-01T10:00:01Z'")) == ["d", "e"]
    assert ids(people.search('SELECT SENTENCE WHERE meta.date WITHIN ("2023-01-01", "2023-02-01")')) == ["e"]
    assert ids(people.search('SELECT SENTENCE WHERE meta.date WITHIN ("2024-06-01T10:00:00Z", "2025-01-01")')) == ["d"]
    assert ids(people.search("SELECT SENTENCE WHERE meta.date WITHIN (DATE '2023-01-01', DATE '2023-02-01')")) == ["e"]


def test_order_nulls_last_both_directions(people: Engine) -> None:
    # x: a->"a", b->null, c->missing, d->"b", e->"a"
    assert ids(people.search("SELECT SENTENCE ORDER BY meta.x DESC")) == ["d", "a", "e", "b", "c"]
    assert ids(people.search("SELECT SENTENCE ORDER BY meta.x ASC")) == ["a", "e", "d", "b", "c"]
    assert ids(people.search("SELECT SENTENCE ORDER BY meta.x DESC NULLS FIRST")) == ["b", "c", "d", "a", "e"]


def test_ties_break_on_insertion_order(people: Engine) -> None:
    assert ids(people.search('SELECT SENTENCE ORDER BY meta.status DESC')) == ["a", "c", "d", "b", "e"]


def test_contains_is_case_insensitive_like_is_not(people: Engine) -> None:
    assert ids(people.search('SELECT SENTENCE WHERE content CONTAINS "AGENTS"')) == ["a", "c"]
    assert ids(people.search('SELECT SENTENCE WHERE content LIKE "alpha%"')) == []
    assert ids(people.search('SELECT SENTENCE WHERE content LIKE "Alpha%"')) == ["a"]
    assert ids(people.search('SELECT SENTENCE WHERE content MATCH "^(Beta|Delta)"')) == ["b", "d"]
    assert ids(people.search('SELECT SENTENCE WHERE meta.nested.k == 1')) == ["e"]


def test_in_and_not_in(people: Engine) -> None:
    assert ids(people.search('SELECT SENTENCE WHERE meta.x IN ("a", "b")')) == ["a", "d", "e"]
    assert ids(people.search('SELECT SENTENCE WHERE meta.x NOT IN ("a")')) == ["d"]


def test_limit_offset_and_negative_limit(people: Engine) -> None:
    assert ids(people.search("SELECT SENTENCE LIMIT 2 OFFSET 1")) == ["b", "c"]
    with pytest.raises(NLQLError):
        people.search("SELECT SENTENCE LIMIT -1")


def test_default_order_is_first_score_desc(people: Engine) -> None:
    hits = people.search('SELECT SENTENCE LET rel = SIMILARITY(content, "agents and tools") LIMIT 5')
    scores = [h.scores["rel"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert hits[0].doc_id == "c"


def test_threshold_and_filter_topk_guarantee() -> None:
    e = make()
    texts = [f"document number {i} about topic {i % 50}" for i in range(3000)]
    metas = [{"status": "published" if i % 1000 == 7 else "draft", "n": i} for i in range(3000)]
    e.add_texts(texts, ids=[str(i) for i in range(3000)], metadatas=metas)
    hits = e.search('SELECT SENTENCE LET rel = SIMILARITY(content, "topic 3") '
                    'WHERE meta.status == "published" ORDER BY rel DESC LIMIT 5')
    assert sorted(ids(hits)) == ["1007", "2007", "7"]
    # a residual predicate the store cannot push (a user function) still fills LIMIT
    e.register_function("ISODD", lambda x: x % 2 == 1, arity=1)
    hits = e.search('SELECT SENTENCE LET rel = SIMILARITY(content, "topic 3") '
                    'WHERE ISODD(meta.n) AND meta.n < 200 ORDER BY rel DESC LIMIT 60')
    assert len(hits) == 60 and all(int(h.doc_id) % 2 == 1 for h in hits)
    assert hits.stats["rounds"] >= 1


def test_threshold_is_exact() -> None:
    e = make()
    e.add_texts([f"alpha beta {i}" for i in range(50)] + ["zzz qqq"] * 5)
    hits = e.search('SELECT SENTENCE LET rel = SIMILARITY(content, "alpha beta") WHERE rel >= 0.5 LIMIT 100')
    assert hits and all(h.scores["rel"] >= 0.5 for h in hits)
    assert len(hits) == 50


def test_document_limit_counts_documents() -> None:
    e = make()
    for i in range(6):
        e.add_text("Agents use tools. Agents plan. Agents act. Cats nap.", id=f"d{i}")
    hits = e.search('SELECT DOCUMENT LET rel = SIMILARITY(content, "agents") ORDER BY rel DESC LIMIT 3')
    assert len(hits) == 3 and len(set(ids(hits))) == 3
    assert hits[0].content == "Agents use tools. Agents plan. Agents act. Cats nap."
    assert hits[0].unit == "DOCUMENT"


def test_span_window_returns_neighbours() -> None:
    e = make()
    e.add_text("One apple. Two pears. Three cherries. Four plums. Five limes.", id="f")
    hits = e.search('SELECT SPAN(SENTENCE, window => 1) WHERE content CONTAINS "cherries"')
    assert [h.content for h in hits] == ["Two pears. Three cherries. Four plums."]
    assert hits[0].position == 2


def test_chunk_units() -> None:
    e = make(chunk_chars=40)
    e.add_text("One apple here. Two pears there. Three cherries now. Four plums later.", id="f")
    hits = e.search("SELECT CHUNK")
    assert [h.content for h in hits] == ["One apple here. Two pears there.",
                                         "Three cherries now. Four plums later."]
    assert all(h.doc_id == "f" for h in hits)


def test_readd_replaces_whole_document() -> None:
    e = make()
    e.add_text("Old first. Old second. Old third.", id="x")
    e.add_text("New only.", id="x")
    hits = e.search("SELECT SENTENCE")
    assert [h.content for h in hits] == ["New only."]
    assert e.delete("x") is True
    assert list(e.search("SELECT SENTENCE")) == []
    assert e.delete("x") is False


def test_results_are_new_objects(people: Engine) -> None:
    hits = people.search('SELECT SENTENCE WHERE meta.status == "published" LIMIT 1')
    hits[0].metadata["status"] = "hacked"
    hits[0].scores["x"] = 1
    again = people.search('SELECT SENTENCE WHERE meta.status == "published" LIMIT 1')
    assert again[0].metadata["status"] == "published"
    assert "x" not in again[0].scores


def test_each_text_embedded_once_per_query() -> None:
    emb = CountingEmbedder()
    e = Engine(embedder=emb, clock=lambda: CLOCK)
    e.add_texts(["agents use tools", "cats sleep"])
    emb.calls.clear()
    e.search('SELECT SENTENCE LET a = SIMILARITY(content, "agents"), b = SIMILARITY(content, "agents") '
             'WHERE SIMILARITY(content, "agents") > 0 ORDER BY a DESC LIMIT 2')
    assert emb.calls == [["agents"]]


def test_params_bind_everywhere() -> None:
    e = make()
    e.add_texts(["agents use tools", "cats sleep"], metadatas=[{"lang": "en"}, {"lang": "de"}])
    hits = e.search("SELECT SENTENCE LET rel = SIMILARITY(content, $q) WHERE meta.lang IN $langs LIMIT $n",
                    params={"q": "agents", "langs": ["en"], "n": 5})
    assert [h.content for h in hits] == ["agents use tools"]
    with pytest.raises(NLQLError):
        e.search("SELECT SENTENCE WHERE meta.lang == $missing")


def test_unknown_name_is_an_error_with_hint(people: Engine) -> None:
    with pytest.raises(CheckError) as err:
        people.search('SELECT SENTENCE WHERE topic == "x"')
    assert "meta.topic" in str(err.value)
    assert err.value.line == 1


def test_user_function_error_names_the_function(people: Engine) -> None:
    people.register_function("BOOM", lambda x: 1 / 0, arity=1)
    with pytest.raises(EvaluationError) as err:
        people.search("SELECT SENTENCE WHERE BOOM(meta.year) > 0")
    assert "BOOM" in str(err.value)


def test_explain_is_deterministic_and_complete(people: Engine) -> None:
    q = ('SELECT SENTENCE LET rel = SIMILARITY(content, "AI agents") WHERE rel >= 0.3 AND '
         'meta.status == "published" AND content CONTAINS "tool" ORDER BY rel DESC LIMIT 5')
    a, b = people.explain(q), people.explain(q)
    assert str(a) == str(b)
    d = a.to_dict()
    for key in ("query", "ir", "scores", "recall", "pushed_filter", "residual_filter", "order_by",
                "limit", "offset", "rerank", "fusion"):
        assert key in d
    assert d["recall"]["strategy"] == "knn"
    assert d["recall"]["min_score"] == {"rel": 0.3}
    assert "published" in d["pushed_filter"]


def test_within_period_resolves_against_clock() -> None:
    e = make()
    e.add_texts(["a", "b", "c"], ids=["a", "b", "c"],
                metadatas=[{"date": "2026-11-24T09:00:00Z"}, {"date": "2026-11-30T09:00:00Z"},
                           {"date": "2026-10-01"}])
    assert ids(e.search('SELECT SENTENCE WHERE meta.date WITHIN "last week"')) == ["a"]
    assert "period" in str(e.explain('SELECT SENTENCE WHERE meta.date WITHIN "last week"'))
    with pytest.raises(PlanError):
        e.search('SELECT SENTENCE WHERE meta.date WITHIN "march on"')


def test_rerank_orders_by_reranker() -> None:
    e = make()
    e.add_texts(["red apple pie", "apple", "green apple tart recipe"], ids=["1", "2", "3"])
    rr = FakeReranker(fn=lambda q, p: float(len(p)))
    hits = e.search('SELECT SENTENCE LET rel = SIMILARITY(content, "apple") LIMIT 2', reranker=rr)
    assert ids(hits) == ["3", "1"]
    assert "rerank" in hits[0].scores


def test_max_tokens_packs_and_never_empties() -> None:
    e = make()
    e.add_texts(["word " * 50, "short one", "another short one"], ids=["long", "s1", "s2"])
    hits = e.search("SELECT SENTENCE", max_tokens=10)
    assert ids(hits) == ["s1", "s2"]
    hits = e.search("SELECT SENTENCE LIMIT 1", max_tokens=3)
    assert len(hits) == 1 and hits[0].truncated


def test_persistent_store_reopens_without_reembedding(tmp_path) -> None:
    emb = CountingEmbedder()
    e = Engine(embedder=emb, store=str(tmp_path / "s"), clock=lambda: CLOCK)
    e.add_texts(["agents use tools. They plan.", "cats sleep"], ids=["a", "b"],
                metadatas=[{"k": 1}, {"k": 2}])
    e.add_text("replaced", id="b")
    before = [(h.id, h.content, h.metadata) for h in e.search("SELECT SENTENCE")]
    e.close()
    emb2 = CountingEmbedder()
    e2 = Engine(embedder=emb2, store=str(tmp_path / "s"), clock=lambda: CLOCK)
    after = [(h.id, h.content, h.metadata) for h in e2.search("SELECT SENTENCE")]
    assert after == before
    assert emb2.calls == []
    hits = e2.search('SELECT SENTENCE LET rel = SIMILARITY(content, "agents tools") LIMIT 1')
    assert hits[0].doc_id == "a"


def test_stats_and_warnings_present(people: Engine) -> None:
    hits = people.search('SELECT SENTENCE LET rel = SIMILARITY(content, "agents") LIMIT 2')
    assert set(hits.stats["timings_ms"]) >= {"embed", "recall", "filter", "order"}
    assert hits.warnings == []


def test_rrf_fuses_arms(people: Engine) -> None:
    hits = people.search('SELECT SENTENCE LET s = SIMILARITY(content, "agents tools"), '
                         'k = BM25(content, "tools"), f = RRF(s, k, k => 60) ORDER BY f DESC LIMIT 3')
    assert hits[0].doc_id in ("c", "e")
    f = [h.scores["f"] for h in hits]
    assert f == sorted(f, reverse=True)
    # c is first by similarity and second by BM25 ("tools" weighs more in the shorter e)
    assert hits[0].doc_id == "c" and abs(hits[0].scores["f"] - (1 / 61 + 1 / 62)) < 1e-12


def test_vector_matrix_is_float32(people: Engine) -> None:
    assert people.store.matrix.dtype == np.float32


@pytest.mark.parametrize("query", [
    'SELECT SENTENCE LET s = SIMILARITY(content, "topic 7 energy"), k = BM25(content, "topic 7 energy"), '
    'f = RRF(s, k, k => 60) ORDER BY f DESC LIMIT 7',
    'SELECT SENTENCE LET s = SIMILARITY(content, "topic 7"), k = BM25(content, "topic 7"), '
    'f = INTERLEAVE(s, k) WHERE meta.n < 900 ORDER BY f DESC LIMIT 9 OFFSET 2',
    'SELECT SENTENCE LET k = BM25(content, "document topic 7") ORDER BY k DESC LIMIT 12',
    'SELECT SENTENCE LET s = 0.7 * SIMILARITY(content, "topic 3") + 0.3 * BM25(content, "topic 3") '
    'ORDER BY s DESC LIMIT 8',
    'SELECT SENTENCE LET s = SIMILARITY(content, "topic 3"), t = -s / 2 + BM25(content, "number 5") '
    'WHERE s >= 0.1 ORDER BY t DESC LIMIT 6',
])
def test_arm_pruning_is_exact(query: str) -> None:
    """Pruning candidates before rows are built gives exactly the unpruned answer."""
    e = make()
    texts = [f"document number {i} about topic {i % 50} and energy {i % 7}" for i in range(1500)]
    e.add_texts(texts, ids=[str(i) for i in range(1500)], metadatas=[{"n": i} for i in range(1500)])
    pruned = e.search(query)
    assert "pruned_to" in pruned.stats
    # an always-true residual the store cannot push disables pruning: the plain path
    e.register_function("YES", lambda x: True, arity=1)
    if " WHERE " in query:
        plain_q = query.replace(" WHERE ", " WHERE YES(content) AND ")
    else:
        plain_q = query.replace(" ORDER BY ", " WHERE YES(content) ORDER BY ")
    plain = e.search(plain_q)
    assert "pruned_to" not in plain.stats
    assert [(h.id, h.scores) for h in pruned] == [(h.id, h.scores) for h in plain]
    assert len(pruned) > 0
