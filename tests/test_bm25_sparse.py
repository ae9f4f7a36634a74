"""The vectorised BM25 (issue 21): the SPEC formula to 1e-6 on a real corpus, incremental writes equal a
fresh build, and the built-in store's fast paths (dense BM25 over the table, the fused page of RRF and
INTERLEAVE) answer exactly what the general path answers."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.stores.memory import MemoryStore
from nlql.text.analyzer import Analyzer
from nlql.text.bm25 import BM25Index

K1, B = 1.2, 0.75


def reference(docs: dict[int, str], query: str, analyzer: Analyzer) -> dict[int, float]:
    """SPEC §5 BM25, written out plainly: every live row counts in N and avglen, a query term counts once."""
    terms = {k: analyzer.terms(t) for k, t in docs.items()}
    n = len(terms)
    avglen = sum(len(t) for t in terms.values()) / n if n else 0.0
    q = list(dict.fromkeys(analyzer.terms(query)))
    df = {t: sum(1 for ts in terms.values() if t in ts) for t in q}
    out: dict[int, float] = {}
    for k, ts in terms.items():
        s, hit = 0.0, False
        for t in q:
            tf = ts.count(t)
            if tf:
                hit = True
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                norm = K1 * (1 - B + B * len(ts) / avglen) if avglen > 0 else K1 * (1 - B)
                s += idf * tf * (K1 + 1) / (tf + norm)
        if hit:
            out[k] = s
    return out


def stdlib_docstrings(limit: int = 3000) -> list[str]:
    """Docstring paragraphs of a few standard-library modules (a real, repetitive English corpus)."""
    out: list[str] = []
    for name in ("json", "collections", "itertools", "functools", "textwrap", "string", "re", "pathlib",
                 "argparse", "datetime", "statistics", "fractions", "heapq", "bisect", "csv", "logging"):
        mod = importlib.import_module(name)
        objs = [obj for _, obj in inspect.getmembers(mod)]
        objs += [m for o in objs if inspect.isclass(o) for _, m in inspect.getmembers(o)]
        for obj in objs:
            doc = inspect.getdoc(obj)
            if doc:
                out.extend(p.strip() for p in doc.split("\n\n") if p.strip())
    out = list(dict.fromkeys(out))
    return out[:limit]


QUERIES = ["return the number of items", "parse a string into a datetime", "iterator of iterators",
           "the the the", "", "zzzz nothing", "file path directory", "log a message with level ERROR",
           "sorted sequence insertion point", "Decimal fraction numerator", "json json encode"]


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    docs = stdlib_docstrings()
    assert len(docs) > 1000
    return docs


def _as_dict(keys: np.ndarray, scores: np.ndarray) -> dict[int, float]:
    return dict(zip(keys.tolist(), scores.tolist(), strict=True))


def _assert_same(got: dict[int, float], want: dict[int, float], tol: float = 1e-6) -> None:
    assert set(got) == set(want)
    for k, v in want.items():
        assert abs(got[k] - v) <= tol * max(1.0, abs(v)), (k, got[k], v)


@pytest.mark.parametrize("analyzer", [Analyzer(), Analyzer.named("plain")], ids=["english", "plain"])
def test_scores_equal_the_formula_on_stdlib_docstrings(corpus: list[str], analyzer: Analyzer) -> None:
    index = BM25Index(analyzer)
    index.add(list(range(len(corpus))), corpus)
    docs = dict(enumerate(corpus))
    for q in QUERIES:
        keys, scores = index.score(q)
        assert (np.diff(keys) > 0).all()
        _assert_same(_as_dict(keys, scores), reference(docs, q, analyzer))
    # the analyzer's terms decide: a stemmed query matches its inflections
    assert len(index.score("iterators")[0]) == len(index.score("iterator")[0]) if analyzer.stemmer else True


def test_incremental_writes_equal_a_fresh_build(corpus: list[str]) -> None:
    rng = random.Random(7)
    live: dict[int, str] = {}
    index = BM25Index()
    next_key = 0
    for step in range(40):
        batch = rng.randrange(1, 200)
        keys = list(range(next_key, next_key + batch))
        texts = [rng.choice(corpus) for _ in keys]
        index.add(keys, texts)
        live.update(zip(keys, texts, strict=True))
        next_key += batch
        if step % 3 == 0 and live:  # deletes, some of unknown keys
            gone = rng.sample(sorted(live), k=min(len(live), rng.randrange(1, 120)))
            index.remove([*gone, 10**9])
            for k in gone:
                del live[k]
        if step % 4 == 1 and live:  # replacements: a live key gets new text
            again = rng.sample(sorted(live), k=min(len(live), 30))
            new = [rng.choice(corpus) for _ in again]
            index.add(again, new)
            live.update(zip(again, new, strict=True))
        if step % 5 == 2:
            index.top_k("value", 3)  # queries in between seal and merge segments
    fresh = BM25Index()
    order = sorted(live)
    fresh.add(order, [live[k] for k in order])
    assert len(index) == len(live) and index.keys().tolist() == order
    for q in QUERIES:
        a_keys, a_scores = index.score(q)
        b_keys, b_scores = fresh.score(q)
        assert a_keys.tolist() == b_keys.tolist()
        np.testing.assert_allclose(a_scores, b_scores, rtol=1e-12, atol=0)
        _assert_same(_as_dict(a_keys, a_scores), reference(live, q, index.analyzer))
    assert index.stats("value")["N"] == len(live)
    assert index.stats("value") == fresh.stats("value")


def test_deleted_and_empty_rows() -> None:
    index = BM25Index()
    index.add([1, 2, 3, 4], ["cat cat dog", "", "the and of", "dog"])  # 2 and 3 have no terms but count
    want = reference({1: "cat cat dog", 2: "", 3: "the and of", 4: "dog"}, "dog", index.analyzer)
    _assert_same(_as_dict(*index.score("dog")), want)
    assert index.stats("dog")["N"] == 4 and index.stats("dog")["df"] == {"dog": 2}
    index.remove([4])
    assert index.score("dog")[0].tolist() == [1]
    assert index.stats("dog")["df"] == {"dog": 1} and index.stats("dog")["N"] == 3
    index.remove([1, 2, 3])
    assert index.score("dog")[0].size == 0 and len(index) == 0
    assert index.top_k("dog", 5)[0].size == 0


def test_repeated_query_terms_count_once_and_tf_counts() -> None:
    index = BM25Index(Analyzer.named("plain"))
    index.add([1, 2], ["cat cat cat", "cat dog"])
    assert _as_dict(*index.score("cat cat")) == _as_dict(*index.score("cat"))
    s = _as_dict(*index.score("cat"))
    assert s[1] > s[2]  # tf 3 against tf 1 (saturating, but higher)


def test_filtered_scores_keep_the_collection_statistics(corpus: list[str]) -> None:
    index = BM25Index()
    index.add(list(range(len(corpus))), corpus)
    subset = list(range(0, len(corpus), 3)) + [10**9]  # an unknown key is ignored
    full = _as_dict(*index.score("return value"))
    part = _as_dict(*index.score("return value", subset))
    assert part == {k: v for k, v in full.items() if k % 3 == 0}
    top_keys, top_scores = index.top_k("return value", 5, mask_keys=subset)
    best = sorted(part.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    assert list(zip(top_keys.tolist(), top_scores.tolist(), strict=True)) == best


def test_top_k_larger_than_the_matches_and_ties_by_key() -> None:
    index = BM25Index()
    index.add([30, 10, 20, 40], ["solar panels", "solar panels", "wind", "solar panels"])
    keys, scores = index.top_k("solar", 100)
    assert keys.tolist() == [10, 30, 40]  # every match, no more; equal scores by key ascending
    assert len(set(scores.tolist())) == 1
    assert index.top_k("solar", 2)[0].tolist() == [10, 30]


# ------------------------------------------------------------------------------------------- engine


class GeneralPathStore(MemoryStore):
    """The built-in store without its table fast paths: the engine's general path (fetch, fuse, order)."""

    capabilities = dataclasses.replace(MemoryStore.capabilities, FAST_PATH=False)


def _engines(texts: list[str], metas: list[dict[str, Any]]) -> list[Engine]:
    out = []
    for store in (MemoryStore(), GeneralPathStore()):
        e = Engine(embedder=HashEmbedder(dim=64), store=store, warm_up=False)
        e.add_texts(texts, ids=[str(i) for i in range(len(texts))], metadatas=metas)
        out.append(e)
    return out


T = "return the value of a string"
PAGES = [
    f'SELECT SENTENCE LET kw = BM25(content, "{T}") ORDER BY kw DESC LIMIT 10',
    f'SELECT SENTENCE LET kw = BM25(content, "{T}") ORDER BY kw DESC LIMIT 5 OFFSET 20',
    f'SELECT SENTENCE LET kw = BM25(content, "{T}") WHERE meta.g == 1 ORDER BY kw DESC LIMIT 10',
    f'SELECT SENTENCE LET s = 0.7 * SIMILARITY(content, "{T}") + 0.3 * BM25(content, "{T}") ORDER BY s DESC LIMIT 10',
    f'SELECT SENTENCE LET sem = SIMILARITY(content, "{T}"), kw = BM25(content, "{T}"), f = RRF(sem, kw) '
    "ORDER BY f DESC LIMIT 10",
    f'SELECT SENTENCE LET sem = SIMILARITY(content, "{T}"), kw = BM25(content, "iterator"), '
    "f = RRF(sem, kw, k => 5, weights => [0.25, 3]) ORDER BY f DESC LIMIT 6 OFFSET 4",
    f'SELECT SENTENCE LET sem = SIMILARITY(content, "{T}"), kw = BM25(content, "{T}"), f = INTERLEAVE(sem, kw) '
    "ORDER BY f DESC LIMIT 12",
    f'SELECT SENTENCE LET sem = SIMILARITY(content, "{T}", min => 0.05), kw = BM25(content, "{T}", min => 3), '
    "f = RRF(sem, kw) ORDER BY f DESC LIMIT 10",
    f'SELECT SENTENCE LET sem = SIMILARITY(content, "{T}"), kw = BM25(content, "{T}"), f = RRF(sem, kw) '
    "WHERE meta.g == 2 ORDER BY f DESC LIMIT 10",
    f'SELECT SENTENCE LET sem = SIMILARITY(content, "{T}"), kw = BM25(content, "qqqq"), f = RRF(sem, kw) '
    "ORDER BY f DESC LIMIT 10",
    f'SELECT SENTENCE LET sem = SIMILARITY(content, "{T}"), kw = BM25(content, "{T}"), f = RRF(sem, kw) '
    "WHERE f > 0.0163 ORDER BY f DESC LIMIT 10",  # a condition after fusion that fails at 0
]


def _page(e: Engine, q: str) -> list[tuple[str, dict[str, Any]]]:
    return [(h.id, h.scores) for h in e.search(q)]


def test_fast_paths_answer_what_the_general_path_answers_across_writes(corpus: list[str]) -> None:
    texts = [f"{corpus[i % len(corpus)]} (part {i // len(corpus)})" for i in range(5000)]  # > 4096 rows
    metas = [{"g": i % 3} for i in range(len(texts))]
    fast, general = _engines(texts, metas)
    assert fast.search(PAGES[0]).stats["fast_path"] == "bm25"
    hits = fast.search(PAGES[4])
    assert hits.stats["fast_path"] == "fusion" and hits.stats["fused_page"] >= 10

    def same() -> None:
        for q in PAGES:
            assert _page(fast, q) == _page(general, q), q

    same()
    for e in (fast, general):  # replace, delete, append: the table mapping follows row by row
        e.add_texts(["return the value of a string, twice: value value"], ids=["3"], metadatas=[{"g": 1}])
        e.delete("7")
        e.add_texts(["a string value returned"], ids=["new"], metadatas=[{"g": 2}])
    same()
    for e in (fast, general):  # most rows deleted: the built-in store compacts and renumbers its rows
        for i in range(0, len(texts), 3):
            if i not in (3,):
                e.delete(str(i))
        for i in range(1, len(texts), 3):
            e.delete(str(i))
    assert fast.store.table.size < len(texts)  # type: ignore[attr-defined] - it compacted (renumbered rows)
    same()


def test_limit_zero_on_the_fast_paths_is_an_empty_page() -> None:
    """LIMIT 0 on the BM25 and fusion fast paths: an empty page (it once failed: ``kth out of bounds``)."""
    e = Engine(embedder=HashEmbedder(dim=16), warm_up=False)
    e.add_texts(["solar power now", "wind power", "solar panels", "coal"] * 30)
    for q in ['SELECT SENTENCE LET k = BM25(content, "solar") ORDER BY k DESC LIMIT 0',
              'SELECT SENTENCE LET s = SIMILARITY(content, "solar"), k = BM25(content, "solar"), f = RRF(s, k) '
              "ORDER BY f DESC LIMIT 0"]:
        hits = e.search(q)
        assert len(hits) == 0 and hits.stats.get("fast_path") in ("bm25", "fusion"), hits.stats


def test_equal_scores_rank_in_insertion_order() -> None:
    e = Engine(embedder=HashEmbedder(dim=16), warm_up=False)
    e.add_texts(["solar power"] * 3 + ["wind"], ids=["c", "a", "b", "d"])
    q = 'SELECT SENTENCE LET kw = BM25(content, "solar") ORDER BY kw DESC LIMIT 2'
    assert [h.doc_id for h in e.search(q)] == ["c", "a"]


@pytest.mark.parametrize("name,module", [("qdrant", "qdrant_client"), ("duckdb", "duckdb")])
def test_a_dropped_similarity_arm_narrows_keyword_recall_without_it(name: str, module: str) -> None:
    """Qdrant and DuckDB keep BM25 themselves (``KEYWORD_STATS``): with ``on_arm_error="degrade"`` a failing
    embedder drops the SIMILARITY arm, and recall narrowing by the arms once raised ``KeyError: 'sem'``
    (on DuckDB the lowered statement is given up for the arm-by-arm plan, which narrows)."""
    pytest.importorskip(module)
    from nlql.stores import entry

    tests = str(Path(__file__).resolve().parent)
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from test_arms import FUSED, BrokenEmbedder, _texts

    row = entry(name)
    emb = BrokenEmbedder()
    e = Engine(embedder=emb, store=row.create(**row.exact), on_arm_error="degrade", warm_up=False)
    texts, ids, metas = _texts()
    e.add_texts(texts, ids=ids, metadatas=metas)
    assert e.store.capabilities.KEYWORD_STATS
    keyword_only = e.search('SELECT SENTENCE LET kw = BM25(content, "solar energy") ORDER BY kw DESC LIMIT 5')
    emb.down = True
    hits = e.search(FUSED)
    assert [h.id for h in hits] == [h.id for h in keyword_only]
    assert hits.stats["dropped_arms"] == ["sem"] and hits.stats.get("keyword_recall", 0) >= 5


def test_the_speed_bench_runs_at_a_tiny_size() -> None:
    """bench/bm25_speed.py checks the engine's BM25 page against its sparse reference before timing."""
    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    from bench import bm25_speed

    out = bm25_speed.run(1500, 2)
    assert set(out["queries"]) == {"nlql_bm25", "index_top_k", "floor_bm25", "nlql_rrf", "nlql_rrf_fp32", "floor_rrf",
                                 "floor_matvec", "sim_window", "bm25_window", "nlql_rrf_floor"}
    assert out["rrf_floor_page_identical_to_row_by_row"] and out["rrf_floor_rows"] > 0
    assert all(q["median_ms"] > 0 for q in out["queries"].values()) and out["postings"] > 1500


@pytest.mark.parametrize("name,module", [("duckdb", "duckdb"), ("qdrant", "qdrant_client")])
def test_stores_keeping_bm25_score_like_the_engine_index(corpus: list[str], name: str, module: str) -> None:
    """DuckDB (term tables, SQL) and Qdrant (terms in payloads, ``nlql.stores._terms``) keep their own BM25:
    on the stdlib docstrings their pages equal the built-in store's, scores to 1e-9."""
    pytest.importorskip(module)
    from nlql.stores import entry

    texts = corpus[:400]
    row = entry(name)
    engines = []
    for store in ("memory", row.create(**row.exact)):
        e = Engine(embedder=HashEmbedder(dim=32), store=store, warm_up=False)
        e.add_texts(texts, ids=[str(i) for i in range(len(texts))])
        e.delete("3")
        e.add_texts(["Return the value of a string."], ids=["5"])
        engines.append(e)
    for q in ("return the value", "iterator of iterators", "json json encode", "nothing zzzz"):
        query = f'SELECT SENTENCE LET kw = BM25(content, "{q}") ORDER BY kw DESC LIMIT 20'
        want, got = (list(e.search(query)) for e in engines)
        assert [h.id for h in got] == [h.id for h in want], q
        for a, b in zip(got, want, strict=True):
            assert abs(a.scores["kw"] - b.scores["kw"]) <= 1e-9, (q, a.id)
