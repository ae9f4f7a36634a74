"""Hybrid plans as one DuckDB statement, against the built-in store: the second dialect.

The same corpus and queries as the PostgreSQL tests (``hybrid_kit``): every query runs on the built-in
store (the engine's arm-by-arm path) and on DuckDB, where hybrid plans are lowered to one statement;
both must give the same rows in the same order with the same scores (1e-6).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hybrid_kit import CLOCK, LITERAL_QUERIES, QUERIES, _q, corpus, load, random_query, reference_bm25

pytest.importorskip("duckdb")

from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.stores.duckdb import DuckDBStore  # noqa: E402
from nlql.text.analyzer import Analyzer  # noqa: E402


@pytest.fixture(scope="module")
def reference() -> Engine:
    return load("memory")


@pytest.fixture(scope="module")
def duck(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    e = load(DuckDBStore(tmp_path_factory.mktemp("duck") / "hybrid.duckdb"))
    yield e
    e.close()


def _ids(hits: Any) -> list[str]:
    return [h.id for h in hits]


@pytest.mark.parametrize(("query", "how"), QUERIES, ids=[f"q{i:02d}" for i in range(len(QUERIES))])
def test_same_rows_order_and_scores(duck: Engine, reference: Engine, query: str, how: str) -> None:
    plan = duck.explain(query)
    assert plan.to_dict()["lowering"]["strategy"] == how, str(plan)
    want = reference.search(query)
    got = duck.search(query)
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
    for t in plan.to_dict().get("temporal", ()):  # where TEMPORAL's value came from
        assert t["computed"] == how


@pytest.mark.parametrize("text", ["solar energy grid", "Cats cats dogs", "the", "storage report of", "zzz"])
def test_bm25_matches_independent_reference(duck: Engine, reference: Engine, text: str) -> None:
    query = f'SELECT SENTENCE LET kw = BM25(content, "{text}") ORDER BY kw DESC LIMIT 1000'
    rows = reference.search("SELECT SENTENCE")
    want = dict(zip(_ids(rows), reference_bm25([h.content for h in rows], text), strict=True))
    got = duck.search(query)
    assert duck.explain(query).to_dict()["lowering"]["strategy"] == "sql"
    assert _ids(got) == _ids(sorted(rows, key=lambda h: -want[h.id]))
    for h in got:
        assert h.scores["kw"] == pytest.approx(want[h.id], abs=1e-6)
    # arm by arm (no LIMIT): BM25 read from the term tables, scored exactly as the built-in index
    plain = f'SELECT SENTENCE LET kw = BM25(content, "{text}") WHERE kw > 0 ORDER BY kw DESC'
    assert [(h.id, h.scores) for h in duck.search(plain)] == [(h.id, h.scores) for h in reference.search(plain)]


def test_bm25_statistics_are_maintained(duck: Engine) -> None:
    rows = duck.search("SELECT SENTENCE")
    an = Analyzer()
    conn = duck.store._conn  # type: ignore[attr-defined]
    n, total = conn.execute("SELECT n, total_len FROM nlql_bm25").fetchone()
    postings = conn.execute("SELECT count(*), sum(tf) FROM nlql_terms").fetchone()
    orphans = conn.execute("SELECT count(*) FROM nlql_terms t LEFT JOIN nlql_units u USING (key) "
                           "WHERE u.key IS NULL").fetchone()[0]
    assert n == len(rows)
    assert total == sum(len(an.terms(h.content)) for h in rows)
    assert postings[0] == sum(len(set(an.terms(h.content))) for h in rows)
    assert postings[1] == total
    assert orphans == 0


@pytest.mark.parametrize(("query", "literals"), LITERAL_QUERIES, ids=["rrf", "bm25_params", "interleave", "temporal_min"])
def test_no_user_literal_in_generated_sql(duck: Engine, query: str, literals: list[str]) -> None:
    params = {"q": "Sasquatch yeti", "who": "o'brien"}
    used = {k: v for k, v in params.items() if f"${k}" in query}
    info = duck.explain(query, params=used).to_dict()["sql"]
    assert info is not None and info["dialect"] == "duckdb"
    for text in [info["statement"], info["fusion"]["sql"], *(a["sql"] for a in info["arms"])]:
        for lit in literals:
            assert lit.casefold() not in text.casefold(), (lit, text)
    assert isinstance(duck.search(query, params=used).stats, dict)


def test_explain_shows_the_duckdb_statement(duck: Engine) -> None:
    q = _q("solar energy", "solar energy", "RRF(sem, kw, k => 20, weights => [1, 2])", tail="LIMIT 5")
    text = str(duck.explain(q))
    assert "lowering: sql (one statement on duckdb)" in text and "sql (duckdb):" in text
    assert "array_inner_product(u.embedding, $" in text and "::FLOAT[64]" in text
    assert "fusion: RRF f = 1/(20 + rank_sem) + 2/(20 + rank_kw)" in text
    assert "exact scan" in text and "HNSW" not in text
    assert duck.explain(q).to_dict() == duck.explain(q).to_dict()


@pytest.mark.parametrize("seed", range(3))
def test_random_hybrid_queries_agree(duck: Engine, reference: Engine, seed: int) -> None:
    rng = random.Random(2000 + seed)
    for _ in range(15):
        q = random_query(rng)
        want, got = reference.search(q), duck.search(q)
        assert _ids(got) == _ids(want), q
        for g, w in zip(got, want, strict=True):
            for k, v in w.scores.items():
                assert g.scores[k] == pytest.approx(v, abs=1e-6), (q, g.id, k)
        assert got.stats["store"]["path"] == "sql"


def test_rerank_after_the_statement(duck: Engine, reference: Engine) -> None:
    from nlql.rerankers import FakeReranker

    q = _q("solar grid", "solar grid battery", tail="LIMIT 4 OFFSET 1")
    want, got = reference.search(q, reranker=FakeReranker()), duck.search(q, reranker=FakeReranker())
    assert got.stats["store"]["path"] == "sql"
    assert _ids(got) == _ids(want)


def test_analyzer_must_match_and_reopen_rebuilds_terms(tmp_path: Path) -> None:
    from nlql.plan.lower_hybrid import lower_hybrid
    from nlql.sql.duckdb import DuckDBDialect

    path = tmp_path / "a.duckdb"
    plain = Analyzer.named("plain")
    q = 'SELECT SENTENCE LET kw = BM25(content, "running runners") ORDER BY kw DESC LIMIT 5'
    # the engine gives a store of its own BM25 its analyzer (the term table follows it)
    e = Engine(embedder=HashEmbedder(dim=64), store=DuckDBStore(path), clock=lambda: CLOCK, warm_up=False,
               analyzer=plain)
    e.add_texts(["Running fast.", "The runners ran.", "Nothing here."], ids=["a", "b", "c"])
    assert e.store.analyzer == plain and e.explain(q).to_dict()["lowering"]["strategy"] == "sql"
    # rule 7 at the dialect: terms written by another analyzer than the engine's keep the engine path
    low = lower_hybrid(e.explain(q).plan, DuckDBDialect(analyzer=Analyzer()), plain).lowering
    assert low["strategy"] == "engine" and "analyzer" in low["reason"].lower()
    e.close()
    e2 = Engine(embedder=HashEmbedder(dim=64), store=DuckDBStore(path, analyzer=plain),
                clock=lambda: CLOCK, warm_up=False, analyzer=plain)
    assert e2.explain(q).to_dict()["lowering"]["strategy"] == "sql"
    ref = Engine(embedder=HashEmbedder(dim=64), clock=lambda: CLOCK, warm_up=False, analyzer=plain)
    ref.add_texts(["Running fast.", "The runners ran.", "Nothing here."], ids=["a", "b", "c"])
    got, want = e2.search(q), ref.search(q)
    assert _ids(got) == _ids(want) and got
    assert [h.scores["kw"] for h in got] == pytest.approx([h.scores["kw"] for h in want], abs=1e-9)
    e2.close()


def test_file_store_reopens_with_everything(tmp_path: Path, reference: Engine) -> None:
    path = tmp_path / "re.duckdb"
    load(DuckDBStore(path)).close()
    again = Engine(embedder=HashEmbedder(dim=64), store=f"duckdb:///{path}", clock=lambda: CLOCK, warm_up=False)
    for q, _ in QUERIES[:6]:
        assert _ids(again.search(q)) == _ids(reference.search(q)), q
    texts, ids, _ = corpus()
    assert len(again.search("SELECT DOCUMENT")) == len(ids) - 1  # one was deleted by load()
    again.close()


@pytest.mark.model
def test_real_model_hybrid_on_duckdb(tmp_path: Path) -> None:
    """The real MiniLM model: the DuckDB statement ranks like the built-in store, and semantically."""
    from nlql.embedders import SentenceTransformerEmbedder

    emb = SentenceTransformerEmbedder()
    texts = ["The cat sat on the warm windowsill.", "Solar panels convert sunlight into electricity.",
             "Wind turbines generate renewable power.", "A kitten chased a ball of yarn.",
             "Batteries store energy from the grid."]
    engines = [Engine(embedder=emb, store=s, clock=lambda: CLOCK, warm_up=False)
               for s in ("memory", DuckDBStore(tmp_path / "m.duckdb"))]
    for e in engines:
        e.add_texts(texts, ids=[f"t{i}" for i in range(len(texts))])
    q = ('SELECT SENTENCE LET sem = SIMILARITY(content, "renewable energy sources"), '
         'kw = BM25(content, "energy power"), f = RRF(sem, kw) ORDER BY f DESC LIMIT 3')
    mem, duck = (e.search(q) for e in engines)
    assert duck.stats["store"]["path"] == "sql"
    assert _ids(duck) == _ids(mem)
    assert set(_ids(duck)) <= {"t1#0", "t2#0", "t4#0"}
    for e in engines:
        e.close()
