"""A lower bound on a BM25 score in WHERE (``kw > 0``, ``kw >= 2``: a *floor*) keeps the prune fast paths.

Each query runs on an engine with the fast path and on one whose store declares none (row by row), and
the pages (ids, every score, order) must be equal: fusion ranks each arm over the rows passing WHERE
(SPEC §9), so the SIMILARITY arm must be ranked among the rows passing the floor, not over the table.
The corpus has many rows close to the similarity question that match no term of the BM25 text, so an
arm ranked over the whole table gives another page. Conditions that hold at 0 and upper bounds are no
floors (row by row, as before).
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.stores.memory import MatrixStore

WORDS = ["solar", "wind", "grid", "storage", "policy", "tariff", "budget", "battery", "carbon", "market",
         "coal", "hydro", "nuclear", "subsidy", "demand", "price", "permit", "turbine", "panel", "network"]
STATUS = ["published", "draft", "archived"]


def _corpus(n: int = 700) -> list[tuple[str, str, dict[str, Any]]]:
    rng = random.Random(21)
    docs: list[tuple[str, str, dict[str, Any]]] = []
    for i in range(n):
        if i % 11 == 0 and docs:  # an earlier sentence again: ties in every score
            text = docs[rng.randrange(len(docs))][1]
        else:
            k = rng.choice([3, 4, 5, 6])
            words = rng.sample(WORDS, k) + (["common"] if rng.random() < 0.7 else [])
            text = " ".join(words) + "."
        docs.append((f"d{i:03d}", text, {"status": STATUS[i % 3], "n": i}))
    return docs


def _engine(fast: bool, n: int = 700) -> Engine:
    e = Engine(embedder=HashEmbedder(dim=32), warm_up=False)
    for doc_id, text, meta in _corpus(n):
        e.add_text(text, id=doc_id, metadata=meta)
    if not fast:
        e.store.capabilities = replace(e.store.capabilities, FAST_PATH=False)
    return e


@pytest.fixture(scope="module")
def engines() -> tuple[Engine, Engine]:
    return _engine(True), _engine(False)


def _page(hits: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(h.id, h.scores) for h in hits]


LETS = ('LET sem = SIMILARITY(content, $q), kw = BM25(content, $q), kb = BM25(content, "budget tariff"), '
        'kc = BM25(content, "common"), ')
# (query tail, fast path kind)
FLOORED = [
    ("f = RRF(sem, kw) WHERE kw > 0 ORDER BY f DESC LIMIT 10", "fusion"),
    ("f = RRF(sem, kb) WHERE kb > 0 ORDER BY f DESC LIMIT 10", "fusion"),
    ("f = RRF(sem, kb, window => 5) WHERE kb >= 2.0 ORDER BY f DESC LIMIT 4 OFFSET 2", "fusion"),
    ("f = INTERLEAVE(sem, kb, window => 6) WHERE kb > 0 ORDER BY f DESC LIMIT 5", "fusion"),
    ("f = INTERLEAVE(kw, sem) WHERE kw >= 2.0 ORDER BY f DESC LIMIT 7 OFFSET 3", "fusion"),
    ('f = RRF(sem, kb) WHERE kb > 0 AND meta.status == "published" ORDER BY f DESC LIMIT 10', "fusion"),
    ("f = RRF(sem, kb) WHERE kb > 0 AND sem >= 0.1 ORDER BY f DESC LIMIT 10", "fusion"),
    ("f = RRF(sem, kw, kb, window => 8) WHERE kb > 0 ORDER BY f DESC LIMIT 6", "fusion"),  # two BM25 arms
    ("f = RRF(sem, kw, window => 8) WHERE kb > 0 ORDER BY f DESC LIMIT 6", "fusion"),  # a floor on no arm
    ("f = RRF(sem, kw, k => 5, weights => [2.0, 0.5]) WHERE kw > 0 AND kb > 1.0 ORDER BY f DESC LIMIT 10",
     "fusion"),
    ("f = RRF(sem, kc) WHERE kc > 0 ORDER BY f DESC LIMIT 10", "fusion"),  # most of the table passes
    ("f = RRF(sem, kb) WHERE 0 < kb ORDER BY f DESC LIMIT 10", "fusion"),
    ("f = RRF(SIMILARITY(content, $q, min => 0.3), kb, BM25(content, $q, min => 1.5), window => 6) WHERE kb > 0 "
     "ORDER BY f DESC LIMIT 5", "fusion"),  # arm-local minimums
    ('f = RRF(sem, BM25(content, "budget tariff")) WHERE BM25(content, "budget tariff") > 0.5 '
     "ORDER BY f DESC LIMIT 10", "fusion"),  # no binding
    ("f = RRF(sem, kb), ok = kb > 0 WHERE ok ORDER BY f DESC LIMIT 10", "fusion"),  # a boolean binding
    ("f = RRF(sem, kb), kb2 = kb, t = 1.5 WHERE kb2 >= t ORDER BY f DESC LIMIT 10", "fusion"),  # bindings
    ("f = RRF(sem, kb) WHERE kb > 0 DISTINCT BY meta.status ORDER BY f DESC LIMIT 3", "fusion"),
    ("m = MMR(sem, window => 6) WHERE kb > 0 ORDER BY m DESC LIMIT 4", "fusion"),
    ("x = sem + 0.1 * kw WHERE kw > 0 ORDER BY x DESC LIMIT 10", "formula"),
    ("x = sem + 0.1 * kb WHERE kb >= 2.0 ORDER BY x DESC LIMIT 5 OFFSET 4", "formula"),
    ('x = sem - kw / 10 WHERE kb > 0 AND meta.status == "draft" ORDER BY x DESC LIMIT 8', "formula"),
    ("x = sem + 0.1 * kw WHERE kw > 0 AND sem >= 0.1 ORDER BY x DESC LIMIT 10", "formula"),
    ("n = meta.n WHERE kb > 0 ORDER BY kw DESC LIMIT 10", "bm25"),  # the floor on another BM25 than the sort key
    ("n = meta.n WHERE kw >= 3.0 ORDER BY kw DESC LIMIT 200", "bm25"),  # fewer rows pass than the page asks for
]
QUESTIONS = ["solar grid policy", "budget tariff market", "wind turbine permit", "coal price"]


@pytest.mark.parametrize(("tail", "kind"), FLOORED)
def test_floors_keep_the_fast_path_with_the_row_by_row_pages(engines: tuple[Engine, Engine], tail: str,
                                                             kind: str) -> None:
    fast, slow = engines
    q = f"SELECT SENTENCE {LETS}{tail}"
    for question in QUESTIONS:
        got = fast.search(q, {"q": question})
        assert got.stats.get("fast_path") == kind, (q, got.stats)
        want = slow.search(q, {"q": question})
        assert want.stats.get("fast_path") is None
        assert _page(got) == _page(want), (q, question)
    assert "floors:" in str(fast.explain(q, {"q": QUESTIONS[0]}))


def test_the_arms_rank_the_rows_passing_the_floor(engines: tuple[Engine, Engine]) -> None:
    """The test corpus tells the two apart: ranked over the whole table, the similarity arm's window
    holds rows that fail the floor, and the page differs from the one WHERE asks for."""
    fast, slow = engines
    q = (f"SELECT SENTENCE {LETS}f = RRF(sem, kb, window => 5) ORDER BY f DESC LIMIT 5")
    floored = q.replace("ORDER BY", "WHERE kb > 0 ORDER BY")
    differ = 0
    for question in QUESTIONS:
        unfloored = [h.id for h in fast.search(q, {"q": question}) if h.scores["kb"] > 0]
        got = fast.search(floored, {"q": question})
        assert _page(got) == _page(slow.search(floored, {"q": question}))
        differ += [h.id for h in got] != unfloored
    assert differ, "the corpus does not tell a floor from a filter after fusion"


def test_the_store_alone_applies_the_floors(monkeypatch: pytest.MonkeyPatch, engines: tuple[Engine, Engine]) -> None:
    """Without the engine's route (the rows passing the floors and their scores), the store's
    fast_select restricts the keys itself: same pages."""
    fast, slow = engines
    monkeypatch.setattr(MatrixStore, "floored", lambda *a: None)
    for tail, kind in FLOORED[::2]:
        q = f"SELECT SENTENCE {LETS}{tail}"
        for question in QUESTIONS[:2]:
            got = fast.search(q, {"q": question})
            assert got.stats.get("fast_path") == kind and "floor_rows" not in got.stats, (q, got.stats)
            assert _page(got) == _page(slow.search(q, {"q": question})), (q, question)


@pytest.mark.parametrize("route", [True, False])
def test_int8_windows_decline_with_floors(monkeypatch: pytest.MonkeyPatch, engines: tuple[Engine, Engine],
                                          route: bool) -> None:
    """Where the store's int8 copy gives the SIMILARITY windows over the whole table, a query with
    floors declines them and takes the rows passing the floors instead (``route``: the engine's, each
    SIMILARITY window among those rows through the int8 copy, else the full scan and the store's
    fast_select), and the pages stay the row-by-row ones."""
    pytest.importorskip("faiss")
    from nlql.stores.memory import MemoryStore

    monkeypatch.setattr(MemoryStore, "QUANT_MIN_ROWS", 64)  # the test corpus is small

    monkeypatch.setattr(MemoryStore, "INT8_BACKGROUND", False)  # the first search builds the copy
    if not route:
        monkeypatch.setattr(MatrixStore, "floored", lambda *a: None)
    ran: list[str] = []
    real = MatrixStore.window_page

    def spy(store: Any, run: Any, qv: Any) -> Any:
        got = real(store, run, qv)
        ran.append("windows" if got is not None else "declined")
        return got

    monkeypatch.setattr(MatrixStore, "window_page", spy)
    fast, slow = engines
    plain = f"SELECT SENTENCE {LETS}f = RRF(sem, kb, window => 5) ORDER BY f DESC LIMIT 4"
    got = fast.search(plain, {"q": QUESTIONS[0]})
    assert ran[-1] == "windows" and got.stats["store"]["scan"] == "int8 + fp32 rescore", got.stats
    int8 = 0
    for tail in ("f = RRF(sem, kb, window => 5) WHERE kb > 0 ORDER BY f DESC LIMIT 4",
                 "f = RRF(sem, kw, window => 5) WHERE kw > 0 ORDER BY f DESC LIMIT 4 OFFSET 1",
                 "f = INTERLEAVE(kc, sem, window => 4) WHERE kc > 0 AND kw > 0 ORDER BY f DESC LIMIT 6",
                 "f = RRF(sem, kw, window => 5) WHERE kw > 0 ORDER BY f DESC, kb DESC LIMIT 8",
                 "f = RRF(SIMILARITY(content, $q, min => 0.3), kb, window => 5) WHERE kb > 0 ORDER BY f DESC LIMIT 4",
                 "m = MMR(sem, window => 5) WHERE kb > 0 ORDER BY m DESC LIMIT 3"):
        q = f"SELECT SENTENCE {LETS}{tail}"
        for question in QUESTIONS:
            ran.clear()
            got = fast.search(q, {"q": question})
            assert ran == ["declined"], got.stats
            assert got.stats.get("fast_path") == "fusion" and ("floor_rows" in got.stats) == route
            if "similarity_windows" in got.stats:  # among the rows passing the floors only
                assert route and got.stats["store"] == {**got.stats["store"], "filter": "the rows given",
                                                        "rows": got.stats["floor_rows"]}, got.stats
                int8 += got.stats["store"]["scan"] == "int8 + fp32 rescore"
            assert _page(got) == _page(slow.search(q, {"q": question})), (q, question)
    assert (int8 > 0) == route, int8


@pytest.mark.parametrize("where", ["kb > -1", "kb >= 0", "kb < 3", "kb > 0 OR sem >= 0.3", "kb != 0"])
def test_no_floor_where_the_condition_holds_at_zero(engines: tuple[Engine, Engine], where: str) -> None:
    fast, slow = engines
    q = f"SELECT SENTENCE {LETS}f = RRF(sem, kb) WHERE {where} ORDER BY f DESC LIMIT 10"
    text = str(fast.explain(q, {"q": QUESTIONS[0]}))
    assert "none: WHERE has conditions the engine evaluates row by row" in text and "floors:" not in text
    for question in QUESTIONS:
        got = fast.search(q, {"q": question})
        assert got.stats.get("fast_path") is None and "floor_rows" not in got.stats
        assert _page(got) == _page(slow.search(q, {"q": question})), (q, question)


def test_no_floor_on_a_bm25_with_min(engines: tuple[Engine, Engine]) -> None:
    """``min =>`` makes the score NULL below it: not a floor (row by row)."""
    fast, slow = engines
    q = ('SELECT SENTENCE LET sem = SIMILARITY(content, $q), kb = BM25(content, "budget tariff", min => 1.0), '
         "f = RRF(sem, kb) WHERE kb > 0 ORDER BY f DESC LIMIT 10")
    got = fast.search(q, {"q": QUESTIONS[1]})
    assert got.stats.get("fast_path") is None
    assert _page(got) == _page(slow.search(q, {"q": QUESTIONS[1]}))


def test_explain_shows_the_floors(engines: tuple[Engine, Engine]) -> None:
    fast = engines[0]
    q = (f"SELECT SENTENCE {LETS}f = RRF(sem, kw) WHERE kw > 0 AND kb >= 2.5 AND "
         'BM25(content, "grid") > 0.5 ORDER BY f DESC LIMIT 10')
    ex = fast.explain(q, {"q": "solar"})
    lines = str(ex).splitlines()
    at = lines.index("fast path (memory table): fusion: each arm's top 100 rows (sem, kw), kept before any row is "
                     "fetched")
    assert lines[at + 1] == ('  floors: kw > 0, kb >= 2.5, BM25(content, "grid") > 0.5 (only the rows passing '
                             "them are ranked and kept; from the BM25 matches)")
    floors = ex.to_dict()["fast_path"]["floors"]
    assert [(f["score"], f["op"], f["value"]) for f in floors] == [
        ("kw", ">", 0.0), ("kb", ">=", 2.5), ('BM25(content, "grid")', ">", 0.5)]
    plain = fast.explain(f"SELECT SENTENCE {LETS}f = RRF(sem, kw) ORDER BY f DESC LIMIT 10", {"q": "solar"})
    assert "floors" not in plain.to_dict()["fast_path"] and "floors:" not in str(plain)


def test_a_reranker_reads_the_floored_rows_with_the_same_answer(engines: tuple[Engine, Engine]) -> None:
    from nlql.rerankers import FakeReranker

    fast, slow = engines
    q = f"SELECT SENTENCE {LETS}f = RRF(sem, kb, window => 5) WHERE kb > 0 ORDER BY f DESC LIMIT 4"
    for question in QUESTIONS:
        got = fast.search(q, {"q": question}, reranker=FakeReranker(), rerank_query=question)
        assert got.stats.get("fast_path") == "fusion" and "fused_page" not in got.stats
        want = slow.search(q, {"q": question}, reranker=FakeReranker(), rerank_query=question)
        assert _page(got) == _page(want), question


def test_floors_follow_writes() -> None:
    """The floors read this search's BM25 matches: after a write the new rows pass or fail them."""
    fast, slow = _engine(True, 250), _engine(False, 250)
    q = f"SELECT SENTENCE {LETS}f = RRF(sem, kb, window => 5) WHERE kb > 0 ORDER BY f DESC LIMIT 5"
    before = _page(fast.search(q, {"q": QUESTIONS[1]}))
    for e in (fast, slow):
        e.add_text("budget tariff budget market.", id="new", metadata={"status": "draft"})
        e.delete("d006")
    got = fast.search(q, {"q": QUESTIONS[1]})
    assert got.stats.get("fast_path") == "fusion" and _page(got) != before
    assert _page(got) == _page(slow.search(q, {"q": QUESTIONS[1]}))


def test_scores_of_many_rows_from_the_full_scan_have_the_gathered_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """``exact_scores`` scans the whole matrix when the rows' blocks are a large share of the table: the
    same bits as gathering them (what every row's score is checked against: one scan of the matrix)."""
    import numpy as np

    from nlql.stores.base import DocRecord, UnitRecord
    from nlql.stores.memory import MemoryStore

    rng = np.random.default_rng(5)
    vecs = rng.standard_normal((3001, 48)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    store = MemoryStore()
    store.open(48)
    store.upsert([DocRecord(f"d{i}", f"s{i}", {}, [UnitRecord(0, f"s{i}", 0, 2)], vecs[i:i + 1], seq=i + 1)
                  for i in range(len(vecs))])
    q = vecs[7] + 0.1 * vecs[8]
    for share in (0.02, 0.3, 0.9):
        keys = np.sort(rng.choice(len(vecs), int(share * len(vecs)), replace=False))
        scanned = store.exact_scores(q, keys)
        monkeypatch.setattr(MemoryStore, "GATHER_MAX_SHARE", 2.0)  # always gather
        gathered = store.exact_scores(q, keys)
        monkeypatch.setattr(MemoryStore, "GATHER_MAX_SHARE", 0.0)  # always scan
        assert np.array_equal(store.exact_scores(q, keys), gathered) and np.array_equal(scanned, gathered)
        assert np.array_equal(store.score_all(q[None, :])[1][0][keys], gathered)
        monkeypatch.undo()
