"""Hybrid plans as one SQL statement on a real PostgreSQL, against the built-in store.

Every query runs on the built-in store (the engine's arm-by-arm path) and on pgvector with
``exact=True``, where hybrid plans are lowered to one statement: both must give the same rows in the
same order with the same scores (1e-6). BM25 is also checked against a reference computed here from
SPEC §5 directly, and the generated SQL must never contain a value the user wrote.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hybrid_kit import CLOCK, LITERAL_QUERIES, QUERIES, _q, corpus, load, random_query, reference_bm25

psycopg = pytest.importorskip("psycopg")

from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.sql import explain_sql  # noqa: E402
from nlql.stores.pgvector import PgVectorStore  # noqa: E402
from nlql.text.analyzer import Analyzer  # noqa: E402


@pytest.fixture(scope="module")
def reference() -> Engine:
    return load("memory")


@pytest.fixture(scope="module")
def pg(pg_module_dsn: str) -> Engine:
    e = load(PgVectorStore(pg_module_dsn, exact=True))
    yield e
    e.close()


def _ids(hits: Any) -> list[str]:
    return [h.id for h in hits]


def test_enough_queries() -> None:
    assert len([q for q, how in QUERIES if how == "sql"]) >= 30


@pytest.mark.parametrize(("query", "how"), QUERIES, ids=[f"q{i:02d}" for i in range(len(QUERIES))])
def test_same_rows_order_and_scores(pg: Engine, reference: Engine, query: str, how: str) -> None:
    plan = pg.explain(query)
    assert plan.to_dict()["lowering"]["strategy"] == how, str(plan)
    want = reference.search(query)
    got = pg.search(query)
    assert _ids(got) == _ids(want), str(plan)
    assert [h.content for h in got] == [h.content for h in want]
    assert [h.metadata for h in got] == [h.metadata for h in want]
    for g, w in zip(got, want, strict=True):
        assert g.scores.keys() == w.scores.keys()
        for k, v in w.scores.items():
            assert g.scores[k] == pytest.approx(v, abs=1e-6), (g.id, k)
            if k in ("t", "u"):  # TEMPORAL: the statement's float operations are the engine's
                assert g.scores[k] == v, (g.id, k)
    if how == "sql":
        assert got.stats["store"]["path"] == "sql"


def test_hybrid_queries_are_not_trivial(reference: Engine) -> None:
    lengths = [len(reference.search(q)) for q, how in QUERIES if how == "sql"]
    assert sum(1 for n in lengths if n >= 3) >= 25
    assert 0 in lengths  # and some have no row at all


# ------------------------------------------------------------------------------------------ BM25


@pytest.mark.parametrize("text", ["solar energy grid", "Cats cats dogs", "the", "storage report of", "zzz"])
def test_bm25_matches_independent_reference(pg: Engine, reference: Engine, text: str) -> None:
    query = f'SELECT SENTENCE LET kw = BM25(content, "{text}") ORDER BY kw DESC LIMIT 1000'
    mem = reference.search(query)
    rows = reference.search("SELECT SENTENCE")
    want = dict(zip(_ids(rows), reference_bm25([h.content for h in rows], text), strict=True))
    assert len(mem) == len(rows)
    for h in mem:
        assert h.scores["kw"] == pytest.approx(want[h.id], abs=1e-6)
    expected = sorted(rows, key=lambda h: -want[h.id])  # stable: insertion order breaks ties
    assert _ids(mem) == _ids(expected)
    got = pg.search(query)
    assert pg.explain(query).to_dict()["lowering"]["strategy"] == "sql"
    assert _ids(got) == _ids(mem)
    for g, m in zip(got, mem, strict=True):
        assert g.scores["kw"] == pytest.approx(m.scores["kw"], abs=1e-6)


def test_bm25_statistics_are_maintained(pg: Engine, pg_module_dsn: str) -> None:
    rows = pg.search("SELECT SENTENCE")
    an = Analyzer()
    with psycopg.connect(pg_module_dsn) as conn:
        n, total = conn.execute("SELECT n, total_len FROM nlql_bm25").fetchone()
        postings = conn.execute("SELECT count(*), sum(tf) FROM nlql_terms").fetchone()
        orphans = conn.execute("SELECT count(*) FROM nlql_terms t LEFT JOIN nlql_units u USING (key) "
                               "WHERE u.key IS NULL").fetchone()[0]
    assert n == len(rows)
    assert total == sum(len(an.terms(h.content)) for h in rows)
    assert postings[0] == sum(len(set(an.terms(h.content))) for h in rows)
    assert postings[1] == total
    assert orphans == 0


# ------------------------------------------------------------------------------------- literals


@pytest.mark.parametrize(("query", "literals"), LITERAL_QUERIES, ids=["rrf", "bm25_params", "interleave", "temporal_min"])
def test_no_user_literal_in_generated_sql(pg: Engine, query: str, literals: list[str]) -> None:
    params = {"q": "Sasquatch yeti", "who": "o'brien"}
    used = {k: v for k, v in params.items() if f"${k}" in query}
    plan = pg.explain(query, params=used)
    info = plan.to_dict()["sql"]
    assert info is not None, str(plan)
    texts = [info["statement"], info["fusion"]["sql"], *(a["sql"] for a in info["arms"])]
    for text in texts:
        for lit in literals:
            assert lit.casefold() not in text.casefold(), (lit, text)
    hits = pg.search(query, params=used)  # and it runs
    assert isinstance(hits.stats, dict)


def test_explain_shows_arms_formula_and_strategy(pg: Engine, reference: Engine) -> None:
    q = _q("solar energy", "solar energy", "RRF(sem, kw, k => 20, weights => [1, 2])", tail="LIMIT 5")
    text = str(pg.explain(q))
    assert "lowering: sql (one statement on postgres)" in text
    assert "arm sem (semantic, k=100):" in text and "arm kw (bm25, k=100):" in text
    assert "fusion: RRF f = 1/(20 + rank_sem) + 2/(20 + rank_kw)" in text
    assert "$1" in text and "parameters (values redacted):" in text
    assert pg.explain(q).to_dict() == pg.explain(q).to_dict()
    mem = str(reference.explain(q))
    assert "lowering: engine (arm by arm) because the memory store has no SQL dialect" in mem
    doc = str(pg.explain(q.replace("SELECT SENTENCE", "SELECT DOCUMENT")))
    assert "lowering: engine (arm by arm) because DOCUMENT rows group sentences" in doc
    assert explain_sql(pg.explain(q.replace("SELECT SENTENCE", "SELECT CHUNK")).plan, pg.store) is None


# ------------------------------------------------------------------------------ other store modes


def test_index_mode_matches_when_ef_covers_the_table(pg_dsn: str, reference: Engine) -> None:
    store = PgVectorStore(pg_dsn, index_threshold=10, ef_search=400)
    e = load(store)
    q = _q("solar energy", "solar energy", where='meta.status != "draft"')
    got = e.search(q)
    assert got.stats["store"]["mode"] in ("index", "exact", "rescored")
    assert _ids(got) == _ids(reference.search(q))
    q2 = _q("cats", "cats")
    got2 = e.search(q2)
    assert got2.stats["store"]["mode"] == "index"
    assert _ids(got2) == _ids(reference.search(q2))
    assert "HNSW index" in str(e.explain(q2))
    e.close()


def test_analyzer_must_match_and_reopen_rebuilds_terms(pg_dsn: str) -> None:
    texts, ids, metas = corpus()
    q = 'SELECT SENTENCE LET kw = BM25(content, "running runners") ORDER BY kw DESC LIMIT 5'
    from nlql.plan.lower_hybrid import lower_hybrid
    from nlql.sql.postgres import PostgresDialect

    # the engine gives a store of its own BM25 its analyzer (the term table follows it)
    e = Engine(embedder=HashEmbedder(dim=64), store=PgVectorStore(pg_dsn, exact=True), clock=lambda: CLOCK,
               warm_up=False, analyzer=Analyzer.named("plain"))
    e.add_texts(["Running fast.", "The runners ran.", "Nothing here."], ids=["a", "b", "c"])
    assert e.store.analyzer == Analyzer.named("plain")
    assert e.explain(q).to_dict()["lowering"]["strategy"] == "sql"
    # rule 7 at the dialect: terms written by another analyzer than the engine's keep the engine path
    low = lower_hybrid(e.explain(q).plan, PostgresDialect(analyzer=Analyzer()), Analyzer.named("plain")).lowering
    assert low["strategy"] == "engine" and "analyzer" in low["reason"].lower()
    e.close()
    plain = PgVectorStore(pg_dsn, exact=True, analyzer=Analyzer.named("plain"))  # rebuilds the terms
    e2 = Engine(embedder=HashEmbedder(dim=64), store=plain, clock=lambda: CLOCK, warm_up=False,
                analyzer=Analyzer.named("plain"))
    assert e2.explain(q).to_dict()["lowering"]["strategy"] == "sql"
    ref = Engine(embedder=HashEmbedder(dim=64), clock=lambda: CLOCK, warm_up=False,
                 analyzer=Analyzer.named("plain"))
    ref.add_texts(["Running fast.", "The runners ran.", "Nothing here."], ids=["a", "b", "c"])
    got, want = e2.search(q), ref.search(q)
    assert _ids(got) == _ids(want) and got
    assert [h.scores["kw"] for h in got] == pytest.approx([h.scores["kw"] for h in want], abs=1e-9)
    e2.close()


def test_store_without_bm25_runs_arm_by_arm(pg_dsn: str, reference: Engine) -> None:
    e = load(PgVectorStore(pg_dsn, exact=True, bm25=False))
    q = _q("solar energy", "solar energy")
    assert "has no SQL dialect" in e.explain(q).to_dict()["lowering"]["reason"]
    assert _ids(e.search(q)) == _ids(reference.search(q))
    e.close()


# -------------------------------------------------------------------------- random combinations

@pytest.mark.parametrize("seed", range(4))
def test_random_hybrid_queries_agree(pg: Engine, reference: Engine, seed: int) -> None:
    rng = random.Random(1000 + seed)
    lowered = 0
    for _ in range(15):
        q = random_query(rng)
        want, got = reference.search(q), pg.search(q)
        assert _ids(got) == _ids(want), q
        for g, w in zip(got, want, strict=True):
            for k, v in w.scores.items():
                assert g.scores[k] == pytest.approx(v, abs=1e-6), (q, g.id, k)
        lowered += got.stats.get("store", {}).get("path") == "sql"
    assert lowered == 15


def test_rerank_after_the_statement(pg: Engine, reference: Engine) -> None:
    from nlql.rerankers import FakeReranker

    q = _q("solar grid", "solar grid battery", tail="LIMIT 4 OFFSET 1")
    want = reference.search(q, reranker=FakeReranker())
    got = pg.search(q, reranker=FakeReranker())
    assert got.stats["store"]["path"] == "sql"
    assert _ids(got) == _ids(want)
    assert [h.scores["rerank"] for h in got] == [h.scores["rerank"] for h in want]


def test_writes_without_bm25_are_caught_up_on_reopen(pg_dsn: str) -> None:
    texts, ids, metas = corpus()
    q = 'SELECT SENTENCE LET kw = BM25(content, "solar grid") ORDER BY kw DESC LIMIT 20'
    first = load(PgVectorStore(pg_dsn, exact=True))
    first.close()
    plain = Engine(embedder=HashEmbedder(dim=64), store=PgVectorStore(pg_dsn, exact=True, bm25=False),
                   clock=lambda: CLOCK, warm_up=False)
    plain.add_text("Solar grid solar grid news.", id="late")  # written without term statistics
    plain.delete(ids[20])
    plain.close()
    again = Engine(embedder=HashEmbedder(dim=64), store=PgVectorStore(pg_dsn, exact=True), clock=lambda: CLOCK,
                   warm_up=False)  # re-open: the term table is rebuilt
    ref = load("memory")
    ref.add_text("Solar grid solar grid news.", id="late")
    ref.delete(ids[20])
    got, want = again.search(q), ref.search(q)
    assert got.stats["store"]["path"] == "sql"
    assert _ids(got) == _ids(want)
    assert [h.scores["kw"] for h in got] == pytest.approx([h.scores["kw"] for h in want], abs=1e-6)
    again.close()
