"""PgVectorStore plans that fit the data (issue 21), against a real PostgreSQL 16 + pgvector (pgserver):

- the GIN index on the typed metadata exists after open and reopen, is created on an older database
  that lacks it, and serves metadata equality / IN;
- the exact-vs-HNSW choice follows the filter's estimated selectivity (``last_stats``);
- exact scores, knn and hybrid pages are identical to the built-in store's on a corpus with ties and
  near-ties (scores a few 1e-7 apart, which pgvector's float4 cosine orders otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg")

from sql_kit import make_doc, unit_vectors  # noqa: E402

from nlql import Engine  # noqa: E402
from nlql.pushdown import Cond, FAnd  # noqa: E402
from nlql.stores.pgvector import PgVectorStore  # noqa: E402

DIM = 16


def open_store(dsn: str, **kw: Any) -> PgVectorStore:
    store = PgVectorStore(dsn, **kw)
    store.open(DIM)
    return store


def indexes(dsn: str, table: str) -> dict[str, str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {r[0]: r[1] for r in conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table]).fetchall()}


def test_metadata_index_after_open_reopen_and_on_an_older_database(pg_dsn: str) -> None:
    store = open_store(pg_dsn, table_prefix="ix")
    defs = indexes(pg_dsn, "ix_docs")
    assert "ix_docs_mflat" in defs
    assert "USING gin (mflat jsonb_path_ops)" in defs["ix_docs_mflat"]
    store.close()
    again = open_store(pg_dsn, table_prefix="ix")  # idempotent: no error, the same one index
    assert indexes(pg_dsn, "ix_docs") == defs
    again.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # a database written before the index existed
        conn.execute('DROP INDEX "ix_docs_mflat"')
    assert "ix_docs_mflat" not in indexes(pg_dsn, "ix_docs")
    old = open_store(pg_dsn, table_prefix="ix")
    assert indexes(pg_dsn, "ix_docs") == defs
    old.close()


def test_metadata_equality_and_in_are_served_by_the_index(pg_dsn: str) -> None:
    rng = np.random.default_rng(3)
    store = open_store(pg_dsn, table_prefix="gin")
    vecs = unit_vectors(rng, 4000)
    store.upsert([make_doc(f"d{i}", [f"s{i}"], {"tag": f"t{i % 1000}", "n": i % 1000, "ok": i % 1000 == 0}, i,
                           vecs[i:i + 1]) for i in range(4000)])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute('ANALYZE "gin_docs"')
    cases = [Cond("eq", ("meta", "tag"), "t7"), Cond("in", ("meta", "tag"), ["t7", "t8"]),
             Cond("eq", ("meta", "n"), 7), Cond("eq", ("meta", "ok"), True)]
    for c in cases:
        flt = store.compile_filter(c)
        assert "mflat @>" in flt.native
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("SET enable_seqscan = off")  # a small table: show the index can serve it
            plan = "\n".join(r[0] for r in conn.execute(
                f"EXPLAIN SELECT 1 FROM gin_docs d WHERE {flt.native}", flt.extra["params"]).fetchall())
        assert "gin_docs_mflat" in plan, plan
    # the same rows as the typed views answer (numeric strings keep the typed views: "7" == 7)
    assert len(store.scan(store.compile_filter(cases[0]))) == 4
    assert len(store.scan(store.compile_filter(cases[1]))) == 8
    assert len(store.scan(store.compile_filter(cases[2]))) == 4
    assert len(store.scan(store.compile_filter(cases[3]))) == 4
    numeric_string = store.compile_filter(Cond("eq", ("meta", "n"), "7"))
    assert "mflat @>" not in numeric_string.native and len(store.scan(numeric_string)) == 4
    store.close()


@pytest.fixture(scope="module")
def planned(pg_module_dsn: str) -> Any:
    """8,000 one-sentence documents: ``common`` on half of them, ``rare`` on 0.5%; HNSW built (and the
    tables analysed by build_index)."""
    rng = np.random.default_rng(21)
    n = 8000
    vecs = unit_vectors(rng, n)
    docs = [make_doc(f"p{i}", [f"s{i}"], {"common": i % 2 == 0, "tag": "rare" if i % 200 == 0 else "other"}, i,
                     vecs[i:i + 1]) for i in range(n)]
    store = open_store(pg_module_dsn, table_prefix="plan", index_threshold=0, ef_search=40)
    store.upsert(docs)
    assert store.build_index() is True
    yield store, vecs
    store.close()


def test_plan_follows_the_estimated_selectivity(planned: Any, pg_module_dsn: str) -> None:
    store, vecs = planned
    q = vecs[:1]
    common = store.compile_filter(Cond("eq", ("meta", "common"), True))
    rare = store.compile_filter(Cond("eq", ("meta", "tag"), "rare"))
    both = store.compile_filter(FAnd((Cond("eq", ("meta", "common"), True), Cond("eq", ("meta", "tag"), "rare"))))

    assert len(store.knn(q, 10, common)[0]) == 10
    st = store.last_stats
    assert st["path"] == "hnsw", st
    assert 2000 < st["estimated_rows"] < 6000 and 0.25 < st["selectivity"] < 0.75
    assert "HNSW" in st["reason"]

    assert len(store.knn(q, 10, rare)[0]) == 10
    st = store.last_stats
    assert st["path"] == "exact" and st["estimated_rows"] < 200, st
    assert "estimated" in st["reason"]

    # the same rare filter without the absolute floor: still exact, because an index scan would need
    # an ef_search beyond pgvector's 1000 to find 10 rows among 0.5%
    floorless = open_store(pg_module_dsn, table_prefix="plan", exact_threshold=0, index_threshold=0)
    assert len(floorless.knn(q, 10, rare)[0]) == 10
    assert floorless.last_stats["path"] == "exact" and "ef_search" in floorless.last_stats["reason"]
    assert len(floorless.knn(q, 5, both)[0]) == 5  # 20 rows
    assert floorless.last_stats["path"] == "exact"
    floorless.close()

    exact = open_store(pg_module_dsn, table_prefix="plan", exact=True)
    for flt in (common, rare, both):
        got = store.knn(q, 10, flt)[0]
        want = exact.knn(q, 10, flt)[0]
        if flt is not common:  # (HNSW is approximate: compared only where the exact path ran)
            assert got == want
    exact.close()


def test_hybrid_statement_follows_the_estimate_too(planned: Any) -> None:
    store, vecs = planned
    from nlql.sql.nodes import Arm, Fusion, KeywordScore, Lowered, SimilarityScore  # noqa: F401

    rare = store.compile_filter(Cond("eq", ("meta", "tag"), "rare"))
    assert store._guard(lambda: store._plan_filtered(store._connection(), rare, 100, {}))[0] is True
    common = store.compile_filter(Cond("eq", ("meta", "common"), True))
    exact, reason, ef = store._guard(lambda: store._plan_filtered(store._connection(), common, 10, {}))
    assert exact is False and ef >= 40 and "HNSW" in reason


# ------------------------------------------------------------------ identical to the built-in store


class Lookup:
    """Fixed vectors per text (the corpus and the query texts): both engines embed identically."""

    name = "lookup-16"

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    @property
    def dim(self) -> int:
        return DIM

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts]).astype(np.float32)


def near_tie_corpus() -> tuple[list[str], dict[str, np.ndarray]]:
    """Sentences whose cosines with the query ``"probe"`` are exact ties (duplicated vectors) and
    near-ties: groups of rows a few 1e-7 apart inside one rounding step of SCORE_DECIMALS, rising
    with insertion order, so that ranking on the raw cosine reverses what the rounded ties say."""
    rng = np.random.default_rng(5)
    e = np.eye(DIM, dtype=np.float64)
    table: dict[str, np.ndarray] = {"probe": e[0].astype(np.float32)}
    texts: list[str] = []
    words = ["alpha", "beta", "gamma", "delta"]
    for g, base in enumerate([0.9000001, 0.8000001, 0.7000001, 0.6000001, 0.5000001]):
        for j in range(6):
            c = base + j * 6e-8  # the same 6th decimal, distinct float32 values
            other = e[1 + (j % (DIM - 1))]
            v = c * e[0] + np.sqrt(1 - c * c) * other
            text = f"{words[j % 4]} {words[(g + j) % 4]} group {g} row {j}"
            texts.append(text)
            table[text] = v.astype(np.float32)
        dup = f"{words[g % 4]} duplicate {g}"
        texts += [dup + " a", dup + " b"]
        table[dup + " a"] = table[dup + " b"] = table[texts[-3]]
    for i in range(60):  # background rows
        text = f"{words[i % 4]} filler {i}"
        texts.append(text)
        v = rng.normal(size=DIM)
        table[text] = (v / np.linalg.norm(v)).astype(np.float32)
    return texts, table


QUERIES = [
    'SELECT SENTENCE LET rel = SIMILARITY(content, "probe") ORDER BY rel DESC LIMIT 12',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "probe"), kw = BM25(content, "alpha gamma"), '
    "f = RRF(rel, kw) ORDER BY f DESC LIMIT 10",
    'SELECT SENTENCE LET rel = SIMILARITY(content, "probe"), kw = BM25(content, "alpha gamma"), '
    "f = RRF(rel, kw) ORDER BY f DESC LIMIT 10 OFFSET 10",
    'SELECT SENTENCE LET rel = SIMILARITY(content, "probe"), kw = BM25(content, "beta"), '
    'f = RRF(rel, kw) WHERE meta.half == "yes" ORDER BY f DESC LIMIT 10',
]


def test_exact_pages_equal_the_builtin_store_on_ties_and_near_ties(pg_dsn: str) -> None:
    texts, table = near_tie_corpus()
    emb = Lookup(table)
    metas = [{"half": "yes" if i % 2 == 0 else "no"} for i in range(len(texts))]
    ids = [f"n{i}" for i in range(len(texts))]
    mem = Engine(embedder=emb, warm_up=False)
    mem.add_texts(texts, ids=ids, metadatas=metas)
    pg = Engine(embedder=emb, store=PgVectorStore(pg_dsn, exact=True, table_prefix="ties"), warm_up=False)
    pg.add_texts(texts, ids=ids, metadatas=metas)

    # the corpus is what it claims: pgvector's raw cosine orders the near-ties against insertion order
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        raw = [r[0] for r in conn.execute(
            "SELECT u.doc_id FROM ties_units u ORDER BY u.embedding <=> %s::real[]::vector, u.seq LIMIT 6",
            [table["probe"].tolist()]).fetchall()]
    builtin = [h.id.split("#")[0] for h in mem.search(QUERIES[0])][:6]
    assert raw != builtin

    for q in QUERIES:
        got, want = pg.search(q), mem.search(q)
        assert [h.id for h in got] == [h.id for h in want], q
        for g, w in zip(got, want, strict=True):
            assert g.scores == w.scores, (q, g.id)  # bit-identical: the same float32 products, rounded
    store = pg.store
    assert store.last_stats.get("mode") == "rescored"
    pg.close()


SELECTIVE = [
    'SELECT SENTENCE LET rel = SIMILARITY(content, "{q}") WHERE meta.tag == "rare" ORDER BY rel DESC LIMIT 10',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "{q}") WHERE meta.grp == "g7" ORDER BY rel DESC LIMIT 10',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "{q}") WHERE meta.grp == "g7" ORDER BY rel DESC LIMIT 10 OFFSET 10',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "{q}") WHERE rel >= 0.2 AND meta.grp IN ("g7", "g8") '
    "ORDER BY rel DESC LIMIT 10",
    'SELECT SENTENCE LET rel = SIMILARITY(content, "{q}"), kw = BM25(content, "alpha delta"), f = RRF(rel, kw) '
    'WHERE meta.grp == "g7" ORDER BY f DESC LIMIT 10',
]


def test_selective_filter_in_hnsw_mode_returns_the_exact_rows(pg_dsn: str) -> None:
    """Issue 35 / SPEC §6: on a store in HNSW mode, with its index built, a selective filter (0.1%, 1%)
    gives exactly the rows of exact mode and of the built-in store: the same ids in the same order with
    the same scores, for top-k, a second page, a threshold and a hybrid RRF. Forced through the index
    (``plan="index"``), a filter matching fewer rows than LIMIT still returns every one of them, exactly."""
    rng = np.random.default_rng(35)
    n = 6000
    centres = unit_vectors(rng, 30)
    vecs = centres[rng.integers(0, 30, n)] + 0.5 * rng.normal(size=(n, DIM)).astype(np.float32) / DIM**0.5
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    texts = [f"{words[i % 5]} {words[(i // 5) % 5]} row {i}" for i in range(n)]
    metas = [{"grp": f"g{i % 100}", "tag": "rare" if i % 1000 == 3 else "other"} for i in range(n)]
    queries = {f"query {j}": vecs[rng.integers(0, n)] for j in range(6)}
    emb = Lookup({**dict(zip(texts, vecs, strict=True)), **queries})
    ids = [f"s{i}" for i in range(n)]
    mem = Engine(embedder=emb, warm_up=False)
    mem.add_texts(texts, ids=ids, metadatas=metas)
    store = PgVectorStore(pg_dsn, table_prefix="sel", index_threshold=0)
    hnsw = Engine(embedder=emb, store=store, warm_up=False)
    hnsw.add_texts(texts, ids=ids, metadatas=metas, batch_size=2000)
    assert store.build_index() is True
    exact = Engine(embedder=emb, store=PgVectorStore(pg_dsn, table_prefix="sel", exact=True), warm_up=False)
    forced = Engine(embedder=emb, store=PgVectorStore(pg_dsn, table_prefix="sel", plan="index", ef_search=10,
                                                                 index_threshold=0),
                    warm_up=False)

    top = hnsw.search('SELECT SENTENCE LET rel = SIMILARITY(content, "query 0") ORDER BY rel DESC LIMIT 10')
    assert store.last_stats["path"] == "hnsw" and len(top) == 10  # the index serves an unfiltered top-k
    for template in SELECTIVE:
        for q in queries:
            query = template.format(q=q)
            want = mem.search(query)
            assert len(want) >= (6 if "rare" in query else 10)
            for engine in (hnsw, exact):
                got = engine.search(query)
                assert [h.id for h in got] == [h.id for h in want], (query, engine.store.last_stats)
                for g, w in zip(got, want, strict=True):
                    assert g.scores == w.scores, (query, g.id)
            st = store.last_stats
            assert st.get("path") == "exact" or st.get("mode") == "rescored", (query, st)
            if "rare" in query:  # 6 matching rows < LIMIT: the index path proves it has them all
                got = forced.search(query)
                assert forced.store.last_stats["path"] in ("hnsw", "hnsw+exact"), forced.store.last_stats
                assert [(h.id, h.scores) for h in got] == [(h.id, h.scores) for h in want], query
    for e in (hnsw, exact, forced, mem):
        e.close()
