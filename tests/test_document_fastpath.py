"""SELECT DOCUMENT ranked by BM25, score arithmetic or a fusion: the numpy path over documents.

Each query runs on an engine whose store takes the path over documents and on one whose store declares
no fast path (row by row, the reference), built by the same writes; the pages must be equal: the same
documents in the same order, every score, the same ``hit.best`` (the sentence that scored the row and
its scores), the same content and metadata. The corpus has documents of one sentence and of many, the
same text in several documents (ties in every score), documents no BM25 term matches, and documents
replaced and deleted before the queries run.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder

WORDS = ["solar", "wind", "grid", "storage", "policy", "tariff", "budget", "battery", "carbon", "market",
         "coal", "hydro", "nuclear", "subsidy", "demand", "price", "permit", "turbine", "panel", "network"]
OTHER = ["river", "forest", "mountain", "valley", "meadow", "harbour"]  # words no BM25 text below holds
STATUS = ["published", "draft", "archived"]


def _sentence(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.sample(words, rng.choice([2, 3, 4]))).capitalize() + "."


def _corpus(n: int = 260) -> list[tuple[str, str, dict[str, Any]]]:
    rng = random.Random(7)
    docs: list[tuple[str, str, dict[str, Any]]] = []
    for i in range(n):
        if i in (40, 41, 200):  # the query's words again and again: a few documents hold the top sentences
            text = " ".join(["Solar grid policy.", "Grid policy solar."][j % 2] for j in range(8 + i % 2))
        elif 60 <= i < 66:  # the same best BM25 sentence, other sentences beside it: BM25 ties, SIMILARITY not
            text = "Zeppelin budget. " + _sentence(rng, WORDS)
        elif i % 13 == 5 and docs:  # an earlier document's text again: ties in every score
            text = docs[rng.randrange(len(docs))][1]
        elif i % 9 == 0:  # no sentence holds a BM25 term
            text = " ".join(_sentence(rng, OTHER) for _ in range(rng.choice([1, 2, 3])))
        else:
            k = rng.choice([1, 1, 2, 3, 4, 6, 9])  # one sentence, or many
            text = " ".join(_sentence(rng, WORDS + OTHER) for _ in range(k))
        docs.append((f"d{i:03d}", text, {"status": STATUS[i % 3], "n": i}))
    return docs


def _engine(fast: bool, embedder: Any = None, n: int = 260) -> Engine:
    e = Engine(embedder=embedder or HashEmbedder(dim=32), warm_up=False)
    docs = _corpus(n)
    e.add_texts([t for _, t, _ in docs], ids=[d for d, _, _ in docs], metadatas=[m for _, _, m in docs])
    rng = random.Random(3)
    for doc_id, _, meta in docs[::17]:  # replaced: new rows (and a new place in insertion order)
        e.add_text(_sentence(rng, WORDS) + " " + _sentence(rng, WORDS), id=doc_id, metadata=meta)
    for doc_id, _, _ in docs[3::29]:
        e.delete(doc_id)
    if not fast:
        e.store.capabilities = replace(e.store.capabilities, FAST_PATH=False)
    return e


@pytest.fixture(scope="module")
def engines() -> tuple[Engine, Engine]:
    return _engine(True), _engine(False)


def _page(hits: Any) -> list[dict[str, Any]]:
    return [h.to_dict() for h in hits]  # id, doc_id, unit, position, content, metadata, scores, best


LETS = ('LET sem = SIMILARITY(content, $q), kw = BM25(content, $q), kb = BM25(content, "budget tariff"), '
        'sm = SIMILARITY(content, ["grid storage", "solar panel"]), kz = BM25(content, "zeppelin"), ')
PUBLISHED = 'WHERE meta.status == "published" '
# (query tail after SELECT DOCUMENT LET …, fast path kind)
QUERIES = [
    ("x = 1 ORDER BY kw DESC LIMIT 10", "bm25"),
    ("x = 1 ORDER BY kb DESC LIMIT 5 OFFSET 3", "bm25"),
    ("x = 1 ORDER BY kb DESC LIMIT 400", "bm25"),  # more than the documents matching a term, and than all
    ("x = 1 ORDER BY kb DESC LIMIT 60 OFFSET 100", "bm25"),  # documents matching no term fill the page
    ("x = 1 ORDER BY kw DESC LIMIT 0", "bm25"),
    ("x = 1 ORDER BY kw DESC, sem DESC LIMIT 12", "bm25"),
    ("x = 1 ORDER BY kz DESC, sem ASC LIMIT 2", "bm25"),  # six documents tie on kz: sem decides
    ("f = RRF(kz, sem, window => 3) ORDER BY f DESC, sem ASC LIMIT 2", "fusion"),
    ("x = 1 " + PUBLISHED + "ORDER BY kw DESC LIMIT 10", "bm25"),
    ("x = 1 WHERE meta.n > 100 AND doc_id != \"d120\" ORDER BY kb DESC LIMIT 8", "bm25"),
    ("f = RRF(sem, kw) ORDER BY f DESC LIMIT 10", "fusion"),
    ("f = RRF(sem, kb, window => 5) ORDER BY f DESC LIMIT 4 OFFSET 2", "fusion"),
    ("f = RRF(sem, kw, k => 5, weights => [2.0, 0.5]) ORDER BY f DESC LIMIT 10", "fusion"),
    ("f = RRF(kb, sm) ORDER BY f DESC LIMIT 10", "fusion"),
    ("f = RRF(sem, kw, kb, window => 8) ORDER BY f DESC LIMIT 6", "fusion"),
    ("f = RRF(sem, kw) " + PUBLISHED + "ORDER BY f DESC LIMIT 10", "fusion"),
    ("f = RRF(sem, kb) WHERE meta.status IN (\"draft\", \"archived\") ORDER BY f DESC LIMIT 7 OFFSET 5", "fusion"),
    ("f = RRF(sem, kw) ORDER BY f DESC LIMIT 1000", "fusion"),  # more than every document
    ("f = RRF(sem, kb) ORDER BY f DESC LIMIT 0", "fusion"),
    ("f = RRF(sem, kb, window => 3) ORDER BY f DESC, kb DESC LIMIT 20", "fusion"),
    ("f = INTERLEAVE(kw, sem) ORDER BY f DESC LIMIT 9", "fusion"),
    ("f = INTERLEAVE(sem, kb, window => 6) " + PUBLISHED + "ORDER BY f DESC LIMIT 5 OFFSET 1", "fusion"),
    # FUSE normalises each arm over its window: the same values over the arms' top documents
    ("f = FUSE(sem, kw) ORDER BY f DESC LIMIT 10", "fusion"),
    ("f = FUSE(sem, kb, method => \"dbsf\", window => 7) ORDER BY f DESC LIMIT 5 OFFSET 2", "fusion"),
    ("f = FUSE(kz, sem, weights => [2.0, 0.5], window => 3) ORDER BY f DESC, sem ASC LIMIT 4", "fusion"),
    ("f = FUSE(sem, kb, weights => [1.0, -1.0]) " + PUBLISHED + "ORDER BY f DESC LIMIT 30", "fusion"),
    ("f = FUSE(sem, kw, kb, window => 4) ORDER BY f DESC LIMIT 1000", "fusion"),  # rows valued 0.0 on the page
    ("f = sem + 0.1 * kw ORDER BY f DESC LIMIT 10", "formula"),
    ("f = kb * 2 - sem ORDER BY f DESC LIMIT 6 OFFSET 4", "formula"),
    ("f = -sem + kb / 4 " + PUBLISHED + "ORDER BY f DESC LIMIT 10", "formula"),
    ("f = sm - sem ORDER BY f DESC LIMIT 300", "formula"),
    ("f = RRF(sem, kw) WHERE meta.status == \"none such\" ORDER BY f DESC LIMIT 10", "fusion"),  # no document
    ("x = 1 WHERE doc_id == \"d001\" ORDER BY kb DESC LIMIT 10", "bm25"),  # one document
    # lower bounds on the key's own BM25: the documents passing are a prefix of its order
    ("x = 1 WHERE kb > 0 ORDER BY kb DESC LIMIT 400", "bm25"),  # fewer documents match than the page
    ("x = 1 WHERE kw > 0 ORDER BY kw DESC LIMIT 10", "bm25"),
    ("x = 1 WHERE kw >= 2.5 AND kw > 1 ORDER BY kw DESC LIMIT 30 OFFSET 4", "bm25"),
    ("x = 1 WHERE kz > 0 ORDER BY kz DESC, sem ASC LIMIT 3", "bm25"),  # ties on kz: sem decides
    ("x = 1 WHERE kb >= 0 ORDER BY kb DESC LIMIT 60 OFFSET 100", "bm25"),  # holds at 0: no-term documents fill
    ("x = 1 WHERE kb > 0 AND meta.status == \"draft\" ORDER BY kb DESC LIMIT 50", "bm25"),
]


@pytest.fixture(scope="module")
def windowed() -> tuple[Engine, Engine]:
    """A larger corpus (~5,000 sentences) on a store that tries its int8 copy from 0 rows (a SIMILARITY
    arm's top documents from the store's exact top sentences, without a score for every row), and its
    row-by-row twin."""
    e = _engine(True, n=1500)
    e.store.QUANT_MIN_ROWS = 0  # type: ignore[attr-defined]
    e.store.INT8_BACKGROUND = False  # type: ignore[attr-defined]  # the first search builds the copy
    return e, _engine(False, n=1500)


# (query tail, whether the similarity window needs a second round, None: not asserted) with windows small enough for the
# int8 copy of a table this size (32 × k rows at least)
WINDOWED = [
    ("f = RRF(sem, kw, window => 5) ORDER BY f DESC LIMIT 3", True),  # the top sentences: 3 documents
    ("f = RRF(kb, sem, window => 8) ORDER BY f DESC LIMIT 5 OFFSET 2", None),
    ("f = RRF(sem, kw, kb, window => 6, weights => [1.0, 2.0, 0.5]) ORDER BY f DESC LIMIT 20", True),
    ("f = INTERLEAVE(sem, kb, window => 10) ORDER BY f DESC LIMIT 12", None),
    ("f = RRF(sem, kw, window => 4) ORDER BY f DESC, kw DESC LIMIT 0", True),
    ("f = RRF(sem, kb, window => 5) WHERE meta.n >= 0 ORDER BY f DESC LIMIT 6", None),  # filtered rows
    ("f = FUSE(sem, kw, window => 5) ORDER BY f DESC LIMIT 3", True),
    ("f = FUSE(kb, sem, method => \"dbsf\", window => 8) ORDER BY f DESC LIMIT 5 OFFSET 2", None),
]


@pytest.mark.parametrize("tail,second_round", WINDOWED)
def test_similarity_windows_over_documents(windowed: tuple[Engine, Engine], tail: str,
                                           second_round: bool | None) -> None:
    fast, slow = windowed
    q = f"SELECT DOCUMENT {LETS}{tail}"
    params = {"q": "solar grid policy"}
    got, want = fast.search(q, params=params), slow.search(q, params=params)
    assert got.stats.get("fast_path") == "fusion" and got.stats.get("fast_path_unit") == "DOCUMENT"
    assert "documents" not in got.stats  # no score for every row: each arm's top documents only
    rounds = got.stats.get("similarity_rounds")
    if second_round is not None:
        assert (rounds > 1) == second_round, got.stats
    assert _page(got) == _page(want)


@pytest.mark.parametrize("tail,kind", QUERIES)
def test_document_page_equals_row_by_row(engines: tuple[Engine, Engine], tail: str, kind: str) -> None:
    fast, slow = engines
    q = f"SELECT DOCUMENT {LETS}{tail}"
    params = {"q": "solar grid policy"}
    got, want = fast.search(q, params=params), slow.search(q, params=params)
    assert got.stats.get("fast_path") == kind and got.stats.get("fast_path_unit") == "DOCUMENT", got.stats
    assert want.stats.get("fast_path") is None
    assert _page(got) == _page(want)
    assert all(h.unit == "DOCUMENT" for h in got)


def test_inline_fusion_and_ties(engines: tuple[Engine, Engine]) -> None:
    """A fusion written in ORDER BY; the same text in several documents ties on every arm, and the
    tie breaks on insertion order on both paths."""
    fast, slow = engines
    q = ('SELECT DOCUMENT ORDER BY RRF(SIMILARITY(content, "solar grid policy"), BM25(content, "solar grid policy")) '
         "DESC LIMIT 10")
    got, want = fast.search(q), slow.search(q)
    assert got.stats.get("fast_path") == "fusion"
    assert _page(got) == _page(want)
    texts = [h.content for h in got]
    assert len(set(texts)) < len(texts)  # the page holds duplicated documents (the tie is exercised)


def test_best_is_the_scoring_sentence(engines: tuple[Engine, Engine]) -> None:
    """hit.best of a fused DOCUMENT row is its best sentence by the first arm, with the arms' scores."""
    fast, _ = engines
    hits = fast.search(f"SELECT DOCUMENT {LETS}f = RRF(kb, sem) ORDER BY f DESC LIMIT 5",
                       params={"q": "solar grid policy"})
    assert hits.stats.get("fast_path") == "fusion"
    for h in hits:
        assert h.best is not None and h.best.content in h.content
        assert h.best.scores["kb"] == h.scores["kb"]  # the document's kb is its best sentence's
        assert set(h.best.scores) == {"sem", "kw", "kb", "sm", "kz"}


def test_explain_shows_the_path(engines: tuple[Engine, Engine]) -> None:
    fast, slow = engines
    q = f"SELECT DOCUMENT {LETS}f = RRF(sem, kw) ORDER BY f DESC LIMIT 10"
    text = str(fast.explain(q, params={"q": "x"}))
    assert "fusion over documents: each arm's top 100 documents (sem, kw)" in text
    d = fast.explain(q, params={"q": "x"}).to_dict()
    assert d["fast_path"]["kind"] == "fusion"
    bm = str(fast.explain(f"SELECT DOCUMENT {LETS}x = 1 ORDER BY kw DESC LIMIT 3", params={"q": "x"}))
    assert "bm25 over documents" in bm
    assert "fast path" not in str(slow.explain(q, params={"q": "x"}))


# (query tail, words of plan.fast_path_reason): these keep the row-by-row path
ROW_BY_ROW = [
    ("f = RRF(sem, kw) WHERE kw > 0 ORDER BY f DESC LIMIT 10", "WHERE has conditions"),
    ("f = RRF(sem, kw) WHERE sem >= 0.3 ORDER BY f DESC LIMIT 10", "WHERE has conditions"),
    ("x = 1 WHERE content CONTAINS \"solar\" ORDER BY kw DESC LIMIT 10", "WHERE has conditions"),
    ("x = 1 WHERE kb > 0 ORDER BY kw DESC LIMIT 10", "WHERE has conditions"),  # a bound on another score
    ("x = 1 WHERE kw < 3 ORDER BY kw DESC LIMIT 10", "WHERE has conditions"),  # an upper bound
    ("f = sem + kw WHERE kw > 0 ORDER BY f DESC LIMIT 10", "WHERE has conditions"),
    ("f = RRF(SIMILARITY(content, $q, min => 0.2), kw) ORDER BY f DESC LIMIT 10", "min =>"),
    ("f = RRF(sem, kw) DISTINCT BY meta.status ORDER BY f DESC LIMIT 10", "DISTINCT BY"),
    ("f = RRF(sem, kw, weights => [0.0, 1.0]) ORDER BY f DESC LIMIT 10", "not positive"),
    ("f = RRF(sem, LENGTH(content)) ORDER BY f DESC LIMIT 10", "arm"),
    ("f = MMR(sem) ORDER BY f DESC LIMIT 5", "not a BM25, RRF / INTERLEAVE"),
    ("x = 1 ORDER BY kw ASC LIMIT 5", "not a score DESC"),
    ("x = 1 ORDER BY kw DESC", "no LIMIT"),
]


@pytest.mark.parametrize("tail,why", ROW_BY_ROW)
def test_other_document_queries_keep_the_row_by_row_path(engines: tuple[Engine, Engine], tail: str, why: str) -> None:
    fast, slow = engines
    q = f"SELECT DOCUMENT {LETS}{tail}"
    params = {"q": "solar grid policy"}
    plan = fast.explain(q, params=params).plan
    assert plan.fast_path is None and why in plan.fast_path_reason, plan.fast_path_reason
    got, want = fast.search(q, params=params), slow.search(q, params=params)
    assert got.stats.get("fast_path") is None
    assert _page(got) == _page(want)


def test_chunk_keeps_the_row_by_row_path(engines: tuple[Engine, Engine]) -> None:
    fast, _ = engines
    plan = fast.explain(f"SELECT CHUNK {LETS}f = RRF(sem, kw) ORDER BY f DESC LIMIT 5", params={"q": "x"}).plan
    assert plan.fast_path is None and "CHUNK rows" in plan.fast_path_reason


def test_a_reranker_keeps_the_row_by_row_path(engines: tuple[Engine, Engine]) -> None:
    from nlql.rerankers import FakeReranker

    fast, slow = engines
    q = f"SELECT DOCUMENT {LETS}f = RRF(sem, kw) ORDER BY f DESC LIMIT 5"
    params = {"q": "solar grid policy"}
    got = fast.search(q, params=params, reranker=FakeReranker())
    want = slow.search(q, params=params, reranker=FakeReranker())
    assert got.stats.get("fast_path") is None
    assert _page(got) == _page(want)


def test_writes_between_searches(engines: tuple[Engine, Engine]) -> None:
    """A document replaced or deleted after a search: the next page follows (no stale BM25 or scores)."""
    fast, slow = _engine(True), _engine(False)
    q = f"SELECT DOCUMENT {LETS}f = RRF(sem, kw) ORDER BY f DESC LIMIT 10"
    params = {"q": "solar grid policy"}
    first = fast.search(q, params=params)
    top = first[0].doc_id
    for e in (fast, slow):
        e.add_text("Solar grid policy. Solar grid policy.", id=first[3].doc_id, metadata={"status": "draft"})
        e.delete(top)
    got, want = fast.search(q, params=params), slow.search(q, params=params)
    assert got.stats.get("fast_path") == "fusion"
    assert top not in [h.doc_id for h in got]
    assert _page(got) == _page(want)


@pytest.mark.model
def test_document_page_with_the_real_model() -> None:
    from nlql.embedders import SentenceTransformerEmbedder

    e = _engine(True, SentenceTransformerEmbedder())
    caps = e.store.capabilities
    params = {"q": "renewable energy prices and the power grid"}
    queries = [f"SELECT DOCUMENT {LETS}f = RRF(sem, kw) ORDER BY f DESC LIMIT 10",
               f"SELECT DOCUMENT {LETS}f = RRF(sm, kb, sem, window => 20) {PUBLISHED}ORDER BY f DESC LIMIT 8",
               f"SELECT DOCUMENT {LETS}f = sem + 0.05 * kw ORDER BY f DESC LIMIT 10"]
    fast_pages = []
    for q in queries:
        hits = e.search(q, params=params)
        assert hits.stats.get("fast_path_unit") == "DOCUMENT", hits.stats
        fast_pages.append(_page(hits))
    e._plans.clear()  # noqa: SLF001 - the cached plans hold the fast path
    e.store.capabilities = replace(caps, FAST_PATH=False)  # type: ignore[misc]
    try:
        slow_pages = [_page(e.search(q, params=params)) for q in queries]
    finally:
        e.store.capabilities = caps  # type: ignore[misc]
        e._plans.clear()  # noqa: SLF001
    assert fast_pages == slow_pages


@pytest.mark.parametrize("weights", ["[0.0, 1.0]", "[-1.0, 1.0]"])
def test_a_weight_that_is_not_positive_keeps_rows_ranked_by_that_arm_only(engines: tuple[Engine, Engine],
                                                                         weights: str) -> None:
    """RRF with a weight <= 0 (SENTENCE too): a row only that arm ranks is in the result, with a value
    <= 0; the fused pages keep positive values only, so such a query runs row by row."""
    fast, slow = engines
    for unit in ("SENTENCE", "DOCUMENT"):
        q = f"SELECT {unit} {LETS}f = RRF(sem, kw, weights => {weights}) ORDER BY f DESC LIMIT 300"
        params = {"q": "solar grid policy"}
        assert "not positive" in fast.explain(q, params=params).plan.fast_path_reason
        got, want = fast.search(q, params=params), slow.search(q, params=params)
        assert _page(got) == _page(want)
        assert any(h.scores["f"] <= 0 for h in got)  # what a fused page (positive values only) leaves out


def test_the_speed_bench_runs_at_a_tiny_size() -> None:
    """bench/doc_speed.py checks every fast page against the row-by-row page before timing it."""
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    from bench import doc_speed

    out = doc_speed.run(800, 2)
    assert out["queries"] and all(q["median_ms"] > 0 for q in out["queries"].values())
