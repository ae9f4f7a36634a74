"""Hybrid plans as one SQL statement on a real PostgreSQL, against the built-in store.

Every query runs on the built-in store (the engine's arm-by-arm path) and on pgvector with
``exact=True``, where hybrid plans are lowered to one statement: both must give the same rows in the
same order with the same scores (1e-6). BM25 is also checked against a reference computed here from
SPEC §5 directly, and the generated SQL must never contain a value the user wrote.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.sql import explain_sql  # noqa: E402
from nlql.stores.pgvector import PgVectorStore  # noqa: E402
from nlql.text.analyzer import Analyzer  # noqa: E402

CLOCK = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)  # a Monday: "last week" is Nov 23–29
VOCAB = ["solar", "energy", "grid", "battery", "wind", "policy", "agents", "tools", "memory", "cats",
         "dogs", "river", "music", "language", "games", "search", "vectors", "planning", "storage", "the",
         "a", "of", "and", "new", "report"]
STATUSES = ["published", "draft", "archived"]


def corpus() -> tuple[list[str], list[str], list[dict[str, Any]]]:
    rng = random.Random(5)
    texts, ids, metas = [], [], []
    for i in range(90):
        sentences = []
        for _ in range(1 + i % 3):
            n = rng.randint(3, 12)
            words = [rng.choice(VOCAB) for _ in range(n)]
            if rng.random() < 0.3:
                words += [words[0]] * rng.randint(1, 3)  # repeated terms: tf > 1
            sentences.append(" ".join(words).capitalize() + ".")
        if i % 17 == 0:
            sentences.append(sentences[0])  # an exact duplicate sentence: ties break on position
        texts.append(" ".join(sentences))
        ids.append(f"d{i:03d}")
        meta: dict[str, Any] = {"status": STATUSES[i % 3], "n": i, "lang": ["en", "de", "fr"][i % 3],
                                "year": [2019, 2021, "2022", 2024.0, None][i % 5],
                                "date": (CLOCK - timedelta(days=(i * 7) % 70, hours=i % 5)).isoformat()}
        if i % 4:
            meta["author"] = f"author{i % 6}"
        texts_meta = meta
        metas.append(texts_meta)
    return texts, ids, metas


def load(store: Any) -> Engine:
    e = Engine(embedder=HashEmbedder(dim=64), store=store, clock=lambda: CLOCK, warm_up=False)
    texts, ids, metas = corpus()
    e.add_texts(texts[:50], ids=ids[:50], metadatas=metas[:50])
    e.add_texts(texts[50:], ids=ids[50:], metadatas=metas[50:])
    e.add_text(texts[3] + " Solar solar revised.", id=ids[3], metadata=metas[3])  # replace one
    e.delete(ids[10])  # and delete one: the BM25 statistics follow both
    return e


@pytest.fixture(scope="module")
def reference() -> Engine:
    return load("memory")


@pytest.fixture(scope="module")
def pg(pg_module_dsn: str) -> Engine:
    e = load(PgVectorStore(pg_module_dsn, exact=True))
    yield e
    e.close()


def _q(sem: str, kw: str, fuse: str = "RRF(sem, kw)", where: str = "", tail: str = "LIMIT 10") -> str:
    w = f" WHERE {where}" if where else ""
    return (f'SELECT SENTENCE LET sem = SIMILARITY(content, "{sem}"), kw = BM25(content, "{kw}"), '
            f"f = {fuse}{w} ORDER BY f DESC {tail}")


# (query, how pgvector runs it)
QUERIES: list[tuple[str, str]] = [
    (_q("solar energy", "solar energy"), "sql"),
    (_q("solar energy", "solar energy", tail="LIMIT 5 OFFSET 5"), "sql"),
    (_q("battery storage", "battery storage", "RRF(sem, kw, k => 10)"), "sql"),
    (_q("battery storage", "battery storage", "RRF(sem, kw, k => 1, weights => [0.3, 0.7])"), "sql"),
    (_q("wind policy", "wind policy", "RRF(sem, kw, weights => [2, 1])", tail="LIMIT 3 OFFSET 7"), "sql"),
    (_q("cats dogs", "cats", "RRF(kw, sem, k => 60)"), "sql"),
    (_q("music river", "music river", "INTERLEAVE(sem, kw)"), "sql"),
    (_q("music river", "music river", "INTERLEAVE(kw, sem)", tail="LIMIT 6 OFFSET 4"), "sql"),
    (_q("agents tools", "agents tools memory", where='meta.status == "published"'), "sql"),
    (_q("agents tools", "agents tools", where='meta.status IN ("draft", "archived") AND meta.n < 60'), "sql"),
    (_q("language games", "language games", where='meta.date WITHIN "last week"'), "sql"),
    (_q("language games", "language games", where='meta.date WITHIN "the past 30 days" AND meta.author IS NOT NULL'),
     "sql"),
    (_q("search vectors", "search vectors",
        where="meta.date WITHIN (DATE '2026-10-01', DATE '2026-11-15') AND meta.year >= 2021"), "sql"),
    (_q("search vectors", "search", where='meta.year == "2022" OR meta.lang == "fr"'), "sql"),
    (_q("planning", "planning grid", where="sem >= 0.1"), "sql"),
    (_q("planning", "planning grid", where="sem > 0.05 AND sem < 0.6"), "sql"),
    (_q("solar", "solar grid", where="kw > 1.5"), "sql"),
    (_q("solar", "solar grid", where="f > 0.02"), "sql"),
    (_q("the report", "the report", where='content CONTAINS "new" AND meta.lang != "de"'), "sql"),
    (_q("energy", "energy", where='content LIKE "The %"'), "sql"),
    (_q("energy", "nothingmatches"), "sql"),
    (_q("!!!", "solar", where="sem >= 0"), "sql"),  # a zero query vector: cosine 0 everywhere
    (_q("energy", "energy", where='meta.status == "no such status"'), "sql"),
    ('SELECT SENTENCE LET a = SIMILARITY(content, "cats"), b = SIMILARITY(content, ["dogs", "river"]), '
     'kw = BM25(content, "cats river"), f = RRF(a, b, kw, weights => [1, 0.5, 2]) ORDER BY f DESC LIMIT 12', "sql"),
    ('SELECT SPAN(SENTENCE, window => 1) LET sem = SIMILARITY(content, "memory"), kw = BM25(content, "memory"), '
     "f = RRF(sem, kw) ORDER BY f DESC LIMIT 4", "sql"),
    ('SELECT SENTENCE LET kw = BM25(content, "solar energy grid") ORDER BY kw DESC LIMIT 10', "sql"),
    ('SELECT SENTENCE LET kw = BM25(content, "solar energy grid") WHERE kw > 0 ORDER BY kw DESC LIMIT 8 OFFSET 2',
     "sql"),
    ('SELECT SENTENCE LET kw = BM25(content, "storage") ORDER BY kw DESC LIMIT 40', "sql"),  # fills with 0
    ('SELECT SENTENCE LET kw = BM25(content, "storage"), sem = SIMILARITY(content, "storage") '
     'WHERE meta.status != "draft" AND sem >= 0 LIMIT 25', "sql"),
    ('SELECT SENTENCE LET kw = BM25(content, "Cats cats CATS dogs") WHERE kw >= 1 ORDER BY kw DESC LIMIT 10', "sql"),
    ('SELECT SENTENCE LET a = SIMILARITY(content, "wind"), b = SIMILARITY(content, "river music"), '
     "f = RRF(a, b, k => 5) ORDER BY f DESC LIMIT 10", "sql"),
    ('SELECT SENTENCE LET kw = BM25(content, "grid"), kw2 = BM25(content, "battery wind"), f = RRF(kw, kw2) '
     "WHERE meta.n >= 20 AND kw2 < 3 ORDER BY f DESC LIMIT 7", "sql"),
    (_q("dogs", "dogs", "INTERLEAVE(sem, kw)", where="sem >= 0.05 AND kw >= 0.5", tail="LIMIT 9 OFFSET 1"), "sql"),
    ('SELECT SPAN(SENTENCE, window => 2) LET sem = SIMILARITY(content, "grid"), kw = BM25(content, "grid"), '
     'f = INTERLEAVE(sem, kw) WHERE meta.lang IN ("en", "fr") ORDER BY f DESC LIMIT 5', "sql"),
    ('SELECT SENTENCE LET s = 0.7 * SIMILARITY(content, "solar energy") + 0.3 * BM25(content, "solar energy") '
     "ORDER BY s DESC LIMIT 10", "engine"),
    ('SELECT SENTENCE LET s = SIMILARITY(content, "solar") + BM25(content, "solar") WHERE s > 0.5 '
     "ORDER BY s DESC LIMIT 5 OFFSET 1", "engine"),
    ('SELECT DOCUMENT LET sem = SIMILARITY(content, "language games"), kw = BM25(content, "language games"), '
     "f = RRF(sem, kw) ORDER BY f DESC LIMIT 5", "engine"),
    (_q("solar energy", "solar energy", where='content MATCH "^So"'), "engine"),
    (_q("solar energy", "solar energy", tail="LIMIT 10").replace("ORDER BY f DESC", "ORDER BY f DESC, meta.n ASC"),
     "engine"),
]


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
    if how == "sql":
        assert got.stats["store"]["path"] == "sql"


def test_hybrid_queries_are_not_trivial(reference: Engine) -> None:
    lengths = [len(reference.search(q)) for q, how in QUERIES if how == "sql"]
    assert sum(1 for n in lengths if n >= 3) >= 25
    assert 0 in lengths  # and some have no row at all


# ------------------------------------------------------------------------------------------ BM25


def reference_bm25(docs: list[str], query: str, k1: float = 1.2, b: float = 0.75) -> list[float]:
    """SPEC §5, written out independently: casefolded \\w+ terms, distinct query terms, OR semantics."""
    import re

    def terms(t: str) -> list[str]:
        return re.findall(r"\w+", t.casefold())

    rows = [Counter(terms(d)) for d in docs]
    lengths = [sum(c.values()) for c in rows]
    n_rows = len(rows)
    avglen = sum(lengths) / n_rows
    out = []
    for tf_row, length in zip(rows, lengths, strict=True):
        score = 0.0
        for t in dict.fromkeys(terms(query)):
            n_t = sum(1 for r in rows if t in r)
            if t not in tf_row:
                continue
            idf = math.log(1 + (n_rows - n_t + 0.5) / (n_t + 0.5))
            tf = tf_row[t]
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avglen))
        out.append(score)
    return out


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


LITERAL_QUERIES = [
    ('SELECT SENTENCE LET sem = SIMILARITY(content, "zebrafish quokka"), kw = BM25(content, "zebrafish quokka"), '
     'f = RRF(sem, kw, k => 137, weights => [0.123, 0.877]) '
     'WHERE meta.status == "xylophone" AND meta.n BETWEEN 4711 AND 8128 AND meta.lang IN ("tlh", "qya") '
     'AND content CONTAINS "wombat" AND content NOT LIKE "%narwhal%" AND meta.date WITHIN "last week" '
     "AND sem >= 0.0333 AND kw > 0.0444 AND f > 0.00555 ORDER BY f DESC LIMIT 113 OFFSET 229",
     ["zebrafish", "quokka", "137", "0.123", "0.877", "xylophone", "4711", "8128", "tlh", "qya", "wombat",
      "narwhal", "last week", "0.0333", "0.0444", "0.00555", "113", "229", "2026"]),
    ('SELECT SENTENCE LET kw = BM25(content, $q) WHERE kw >= 0.987 AND meta.author == $who '
     "ORDER BY kw DESC LIMIT 177",
     ["sasquatch", "yeti", "0.987", "177", "o'brien"]),
    ('SELECT SENTENCE LET sem = SIMILARITY(content, ["ocelot", "tapir"]), kw = BM25(content, "ocelot"), '
     "f = INTERLEAVE(sem, kw) WHERE meta.`we\"ird` == 31337 ORDER BY f DESC LIMIT 119",
     ["ocelot", "tapir", "31337", "119", 'we"ird']),
]


@pytest.mark.parametrize(("query", "literals"), LITERAL_QUERIES, ids=["rrf", "bm25_params", "interleave"])
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
    assert got.stats["store"]["mode"] in ("index", "exact")
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
    e = Engine(embedder=HashEmbedder(dim=64), store=PgVectorStore(pg_dsn, exact=True), clock=lambda: CLOCK,
               warm_up=False, analyzer=Analyzer(stemmer="english"))
    e.add_texts(["Running fast.", "The runners ran.", "Nothing here."], ids=["a", "b", "c"])
    low = e.explain(q).to_dict()["lowering"]
    assert low["strategy"] == "engine" and "analyzer" in low["reason"].lower()
    e.close()
    stemmed = PgVectorStore(pg_dsn, exact=True, analyzer=Analyzer(stemmer="english"))  # rebuilds the terms
    e2 = Engine(embedder=HashEmbedder(dim=64), store=stemmed, clock=lambda: CLOCK, warm_up=False,
                analyzer=Analyzer(stemmer="english"))
    assert e2.explain(q).to_dict()["lowering"]["strategy"] == "sql"
    ref = Engine(embedder=HashEmbedder(dim=64), clock=lambda: CLOCK, warm_up=False,
                 analyzer=Analyzer(stemmer="english"))
    ref.add_texts(["Running fast.", "The runners ran.", "Nothing here."], ids=["a", "b", "c"])
    got, want = e2.search(q), ref.search(q)
    assert _ids(got) == _ids(want)
    assert [h.scores["kw"] for h in got] == pytest.approx([h.scores["kw"] for h in want], abs=1e-9)
    e2.close()


def test_store_without_bm25_runs_arm_by_arm(pg_dsn: str, reference: Engine) -> None:
    e = load(PgVectorStore(pg_dsn, exact=True, bm25=False))
    q = _q("solar energy", "solar energy")
    assert "has no SQL dialect" in e.explain(q).to_dict()["lowering"]["reason"]
    assert _ids(e.search(q)) == _ids(reference.search(q))
    e.close()


# -------------------------------------------------------------------------- random combinations

FILTERS = ["", 'meta.status == "published"', 'meta.lang IN ("de", "fr")', "meta.n < 45",
           'meta.date WITHIN "the past 3 weeks"', "meta.year >= 2021 OR meta.author IS NULL",
           'content CONTAINS "the"', "NOT meta.n BETWEEN 20 AND 70"]


def random_query(rng: random.Random) -> str:
    words = rng.sample(VOCAB, 4)
    sem_text, kw_text = " ".join(words[:2]), " ".join(words[rng.randint(0, 2):rng.randint(3, 4)])
    conds = [c for c in rng.sample(FILTERS, 2) if c]
    kind = rng.choice(["rrf", "rrf_w", "interleave", "single"])
    if rng.random() < 0.3:
        conds.append(f"sem >= {rng.choice([0.0, 0.1, 0.2])}")
    if rng.random() < 0.2:
        conds.append(f"kw > {rng.choice([0, 0.5, 2])}")
    where = " AND ".join(f"({c})" for c in conds)
    tail = f"LIMIT {rng.randint(1, 15)}" + (f" OFFSET {rng.randint(1, 10)}" if rng.random() < 0.4 else "")
    if kind == "single":
        w = f" WHERE {where}" if where else ""
        return (f'SELECT SENTENCE LET kw = BM25(content, "{kw_text}"), sem = SIMILARITY(content, "{sem_text}")'
                f"{w} ORDER BY kw DESC {tail}")
    fuse = {"rrf": f"RRF(sem, kw, k => {rng.choice([1, 10, 60])})",
            "rrf_w": f"RRF(kw, sem, weights => [{rng.choice([0.5, 1, 3])}, {rng.choice([0.2, 1])}])",
            "interleave": rng.choice(["INTERLEAVE(sem, kw)", "INTERLEAVE(kw, sem)"])}[kind]
    return _q(sem_text, kw_text, fuse, where, tail)


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
