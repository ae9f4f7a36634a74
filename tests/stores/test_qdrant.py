"""QdrantStore on Qdrant Edge (the Rust engine in process): ingest, replace, delete, re-attach, exact knn,
filter pushdown semantics, the registry's ``qdrant``/``qdrant:///path``, deadlines and ``LIMIT 0``.

The filter tests compare ``scan(compile_filter(f))`` with ``pyfilter.row_passes`` (the reference) over
metadata of every awkward kind: ints, floats, numeric strings, plain strings, bools, nulls, missing keys,
nested dicts, lists and ISO dates.
"""

from __future__ import annotations

import math
from datetime import date, datetime, timezone
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("qdrant_client")
pytest.importorskip("qdrant_edge")

from adapter_kit import (  # noqa: E402
    DIM,
    HOSTILE,
    make_doc,
    unit_vectors,
)

from nlql.errors import BackendError, MissingDependencyError  # noqa: E402
from nlql.pushdown import Cond, FAnd  # noqa: E402
from nlql.stores import qdrant as qmod  # noqa: E402
from nlql.stores.qdrant import QdrantStore  # noqa: E402


@pytest.fixture
def store():
    s = QdrantStore(collection="t")
    s.open(DIM)
    yield s
    s.close()


# ------------------------------------------------------------------------------ ingest / replace / delete


def test_reattach_on_the_same_path(tmp_path) -> None:
    rng = np.random.default_rng(4)
    vecs = unit_vectors(rng, 6)
    first = QdrantStore(path=str(tmp_path / "q"))
    first.open(DIM)
    first.upsert([make_doc(f"d{i}", ["a.", "b."], {"i": i, "when": f"2024-06-0{i + 1}"}, i + 1,
                           vecs[2 * i: 2 * i + 2]) for i in range(3)])
    keys = first.scan()
    before = first.knn(vecs[:1], 3)
    first.close()  # local mode locks the folder

    second = QdrantStore(path=str(tmp_path / "q"))
    second.open(DIM)
    try:
        assert second.count() == 6
        assert second.max_seq() == 3
        assert second.scan() == keys
        assert [r.metadata["i"] for r in second.fetch(keys)] == [0, 0, 1, 1, 2, 2]
        after = second.knn(vecs[:1], 3)
        assert [k for k, _ in after[0]] == [k for k, _ in before[0]]
        assert np.allclose([s for _, s in after[0]], [s for _, s in before[0]], atol=1e-6)
        flt = second.compile_filter(Cond("ge", ("meta", "when"), date(2024, 6, 2)))
        assert [r.doc_id for r in second.fetch(second.scan(flt))] == ["d1", "d1", "d2", "d2"]
    finally:
        second.close()


def test_open_with_another_dimension_is_a_backend_error(store: QdrantStore) -> None:
    other = QdrantStore(store.client, collection="t")
    with pytest.raises(BackendError, match="size 16"):
        other.open(DIM + 1)


def test_missing_dependency(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(qmod, "QdrantClient", None)
    with pytest.raises(MissingDependencyError) as err:
        QdrantStore()
    assert "nlql-engine[qdrant]" in str(err.value)


# ------------------------------------------------------------------------------ knn


def _numpy_topk(q: np.ndarray, mat: np.ndarray, k: int) -> list[int]:
    scores = mat @ q
    return list(np.argsort(-scores, kind="stable")[:k])


def test_exact_knn_matches_numpy_brute_force(store: QdrantStore) -> None:
    rng = np.random.default_rng(5)
    n = 300
    vecs = unit_vectors(rng, n)
    store.upsert([make_doc(f"d{i:03d}", [f"s{i}."], {"i": i}, i + 1, vecs[i:i + 1]) for i in range(n)])
    key_of = {r.doc_id: r.key for r in store.fetch(store.scan())}
    queries = unit_vectors(rng, 4)
    results = store.knn(queries, 10)
    for q, got in zip(queries, results, strict=True):
        scores = vecs @ q
        order = _numpy_topk(q, vecs, 11)
        assert scores[order[9]] - scores[order[10]] > 1e-5  # well separated at the cut
        assert [key for key, _ in got] == [key_of[f"d{i:03d}"] for i in order[:10]]
        assert np.allclose([s for _, s in got], scores[order[:10]], atol=1e-5)


def test_knn_ties_break_on_insertion_order(store: QdrantStore) -> None:
    rng = np.random.default_rng(6)
    v = unit_vectors(rng, 1)
    other = unit_vectors(rng, 3)
    docs = [make_doc(f"t{i}", ["dup."], {}, 10 - i, v) for i in range(4)]  # seq 10, 9, 8, 7
    docs.append(make_doc("o", ["a.", "b.", "c."], {}, 1, other))
    store.upsert(docs)
    keys = {r.doc_id: r.key for r in store.fetch(store.scan())}
    got = store.knn(v, 2)[0]
    assert [key for key, _ in got] == [keys["t3"], keys["t2"]]
    assert store.last_stats["rounds"] >= 2  # widened past the tie


def test_knn_min_score_keeps_rows_at_or_above(store: QdrantStore) -> None:
    rng = np.random.default_rng(7)
    vecs = unit_vectors(rng, 50)
    store.upsert([make_doc(f"d{i}", ["s."], {}, i + 1, vecs[i:i + 1]) for i in range(50)])
    q = vecs[0]
    scores = np.sort(vecs @ q)[::-1]
    threshold = float((scores[5] + scores[6]) / 2)
    got = store.knn(q[None, :], 20, min_score=threshold)[0]
    assert len(got) == 6
    assert all(s >= threshold for _, s in got)


def test_filtered_knn_under_a_selective_filter_fills_k(store: QdrantStore) -> None:
    rng = np.random.default_rng(8)
    n = 1000
    vecs = unit_vectors(rng, n)
    store.upsert([
        make_doc(f"d{i}", [f"s{i}."], {"g": "hit" if i in (7, 500, 999) else "miss", "i": i}, i + 1, vecs[i:i + 1])
        for i in range(n)
    ])
    one = store.compile_filter(Cond("eq", ("meta", "i"), 500))  # 0.1 % selective
    got = store.knn(vecs[:2], 10, one)
    assert [len(g) for g in got] == [1, 1]
    three = store.compile_filter(Cond("eq", ("meta", "g"), "hit"))
    got = store.knn(vecs[:1], 5, three)[0]
    assert sorted(r.doc_id for r in store.fetch([k for k, _ in got])) == ["d500", "d7", "d999"]
    # a filter that needs the adapter's re-check (string ordering) still fills k
    checked = store.compile_filter(FAnd((Cond("eq", ("meta", "g"), "hit"), Cond("lt", ("meta", "g"), "i"))))
    assert "adapter check" in checked.text
    assert len(store.knn(vecs[:1], 5, checked)[0]) == 3


def test_hnsw_mode_declares_inexact_and_still_fills_k() -> None:
    import warnings

    s = QdrantStore(exact=False, hnsw_ef=64)
    s.open(DIM)
    s._local = False  # take the server code path (search params, under-fill check) on the local client
    try:
        assert s.capabilities.EXACT is False
        rng = np.random.default_rng(14)
        vecs = unit_vectors(rng, 40)
        s.upsert([make_doc(f"d{i}", ["s."], {"i": i}, i + 1, vecs[i:i + 1]) for i in range(40)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = s.knn(vecs[:2], 5, s.compile_filter(Cond("lt", ("meta", "i"), 3)))
        assert [len(g) for g in got] == [3, 3]
    finally:
        s.close()


def test_native_filter_text_is_deterministic_json(store: QdrantStore) -> None:
    import json

    flt = FAnd((Cond("ge", ("meta", "year"), 2020), Cond("in", ("meta", "lang"), ("en", "de")),
                Cond("lt", ("meta", "when"), datetime(2024, 1, 1, tzinfo=timezone.utc))))
    a, b = store.compile_filter(flt), store.compile_filter(flt)
    assert a.text == b.text
    parsed = json.loads(a.text)
    assert {"key": "_n.year._", "range": {"gte": 2020.0}} in parsed["must"]
    assert {"key": "_s.lang._", "match": {"any": ["en", "de"]}} in parsed["must"]
    empty = store.compile_filter(Cond("eq", ("meta", "year"), None))
    assert empty.extra["empty"] and store.scan(empty) == [] and store.knn(np.ones((1, DIM)), 3, empty) == [[]]


# ------------------------------------------------------------------------------ writes on Qdrant Edge

_CODED_CHARS = st.sampled_from(["a", "\\", "b", "u", "0", "\x00", "\x07", "\x08", "\t", "\x1f", "\"",
                                chr(0xD800), chr(0xDFFF), "\U0001F680", "\u00e9"])
_PAYLOAD_TEXT = st.text(_CODED_CHARS, max_size=8)


@given(st.lists(st.dictionaries(_PAYLOAD_TEXT, st.one_of(_PAYLOAD_TEXT, st.lists(_PAYLOAD_TEXT, max_size=3),
                                                          st.integers(), st.none()), max_size=3), max_size=4))
@settings(max_examples=300, deadline=None)
def test_a_batch_is_coded_exactly_when_one_of_its_strings_needs_it(payloads: list) -> None:
    # the batch's one JSON scan decides as walking every payload does: a lone surrogate or U+0000-U+0008
    # in a key or a value, however many backslashes stand before it
    from nlql.stores.qdrant import edge as emod

    assert emod.any_needs_code(payloads) == any(emod._needs_code(p) for p in payloads)


def test_a_batch_with_one_string_needing_the_code_keeps_every_point_and_codes_it(store: QdrantStore) -> None:
    # the code is decided per write (one scan of the batch): a string needing it among hundreds of plain
    # ones is read back as written and matched by a filter, and every point lands, in order
    rng = np.random.default_rng(4)
    n = 600
    docs = [make_doc(f"b{i:04d}", [f"sentence {i} here"], {"i": i, "s": "x\x00y" if i == n - 3 else "plain"},
                     i + 1, unit_vectors(rng, 1)) for i in range(n)]
    store.upsert(docs)
    assert store.count() == n
    rows = store.fetch(store.scan())
    assert [r.doc_id for r in rows] == [d.doc_id for d in docs]
    assert [r.metadata["s"] for r in rows][n - 4 : n - 1] == ["plain", "x\x00y", "plain"]
    assert len(store.scan(store.compile_filter(Cond("eq", ("meta", "s"), "x\x00y")))) == 1


# ------------------------------------------------------------------------------ hostile values


def test_hostile_values_round_trip(store: QdrantStore) -> None:
    rng = np.random.default_rng(10)
    meta = {
        "key.with.dots": "v", "key with spaces": 1, 'quo"te': "'; DROP TABLE x; --", "nul\x00key": "nul\x00val",
        "": "empty key", "$x": 1, "#x": 2, "a[0]": "bracket", "ünï": "🚀", "long": "z" * 10_000, "back\\": "\\",
        "nested": {"a.b": {"c d": "deep", "list": [1, None, {"e": None}]}}, "none": None, "big": 2**70,
        "neg0": -0.0, "f": 0.1,
    }
    docs = [make_doc(doc_id, [f"{doc_id} — content", "x\x00y 'quoted' \"dq\" \\"], meta, i + 1, unit_vectors(rng, 2))
            for i, doc_id in enumerate(HOSTILE)]
    store.upsert(docs)
    rows = store.fetch(store.scan())
    assert [(r.doc_id, r.position) for r in rows] == [(d, p) for d in HOSTILE for p in range(2)]
    for r in rows:
        assert r.metadata == meta and math.copysign(1, r.metadata["neg0"]) == -1
        assert r.content == (f"{r.doc_id} — content" if r.position == 0 else "x\x00y 'quoted' \"dq\" \\")
    assert list(store.document_rows(HOSTILE[::-1])) == HOSTILE[::-1]
    for key, value in [('quo"te', "'; DROP TABLE x; --"), ("nul\x00key", "nul\x00val"), ("", "empty key"),
                       ("key.with.dots", "v"), ("a[0]", "bracket"), ("long", "z" * 10_000)]:
        assert len(store.scan(store.compile_filter(Cond("eq", ("meta", key), value)))) == 2 * len(HOSTILE)
    assert len(store.scan(store.compile_filter(Cond("eq", ("meta", "nested", "a.b", "c d"), "DEEP")))) == 0
    assert len(store.scan(store.compile_filter(Cond("eq", ("meta", "nested", "a.b", "c d"), "deep")))) == 22
    for doc_id in HOSTILE:
        assert [r.doc_id for r in store.fetch(store.scan(store.compile_filter(Cond("eq", ("doc_id",), doc_id))))] == [
            doc_id, doc_id]
    hits = store.scan(store.compile_filter(Cond("contains", ("content",), "X\x00Y 'QUOTED'")))
    assert len(hits) == len(HOSTILE)
    assert store.delete(["nul\x00byte", "'; DROP TABLE x; --"]) == 2
    assert store.count() == 2 * (len(HOSTILE) - 2)


# ------------------------------------------------------------------------------ Qdrant Edge through the registry


def test_the_registry_opens_qdrant_edge_and_reopens_a_path(tmp_path) -> None:
    from nlql import Engine
    from nlql.embedders import HashEmbedder
    from nlql.stores.qdrant.edge import EdgeClient

    url = "qdrant://" + str(tmp_path / "edge")
    e = Engine(embedder=HashEmbedder(dim=16), store=url, warm_up=False)
    assert isinstance(e.store.client, EdgeClient) and e.store.edge
    e.add_texts(["Zebra stripes are black. Lions roar.", "Cats sleep."], ids=["a", "b"],
                metadatas=[{"flag": True, "y": 2020}, {"flag": False, "y": "2021"}])
    q = 'SELECT SENTENCE LET k = BM25(content, "zebra stripes") WHERE meta.flag == true ORDER BY k DESC'
    before = [(h.id, h.scores) for h in e.search(q)]
    assert [i for i, _ in before] == ["a#0", "a#1"]
    e.close()
    assert (tmp_path / "edge" / "nlql" / "edge_config.json").exists()  # Qdrant Edge's own shard files
    again = Engine(embedder=HashEmbedder(dim=16), store=url, warm_up=False)
    try:
        assert len(again) == 3 and [(h.id, h.scores) for h in again.search(q)] == before
        assert [h.id for h in again.search("SELECT SENTENCE WHERE meta.y >= 2021")] == ["b#0"]
    finally:
        again.close()
    bare = Engine(embedder=HashEmbedder(dim=16), store="qdrant", warm_up=False)
    temp = bare.store.client.path
    assert temp.exists()
    bare.close()
    assert not temp.exists()  # "qdrant" is a temporary directory, removed at close


def test_from_url() -> None:
    assert qmod.from_url("qdrant:///tmp/x") == {"path": "/tmp/x"}
    assert qmod.from_url("qdrant+https://h:6333?api_key=k") == {"url": "https://h:6333", "api_key": "k"}
    with pytest.raises(Exception, match="unknown option"):
        qmod.from_url("qdrant:///tmp/x?bogus=1")


def test_bm25_limit_0_is_empty() -> None:
    from nlql import Engine
    from nlql.embedders import HashEmbedder

    e = Engine(embedder=HashEmbedder(dim=16), store="qdrant", warm_up=False)
    try:
        e.add_texts(["Zebra stripes.", "Zebras run."], ids=["a", "b"])
        for q in ('SELECT SENTENCE LET k = BM25(content, "zebra stripes") ORDER BY k DESC LIMIT 0',
                  'SELECT SENTENCE LET k = BM25(content, "zebra") WHERE k > 0 ORDER BY k DESC LIMIT 0'):
            assert list(e.search(q)) == []
    finally:
        e.close()


def test_no_edge_call_starts_after_the_deadline(store: QdrantStore) -> None:
    import time

    from nlql import deadline
    from nlql.errors import NLQLTimeoutError

    rng = np.random.default_rng(1)
    store.upsert([make_doc("d0", ["a."], {}, 1, unit_vectors(rng, 1))])
    calls = []
    shard = store.client._shard(store.collection)

    class Counting:
        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            calls.append(name)
            return getattr(shard, name)

    store.client._shards[store.collection] = Counting()
    with deadline.active(deadline.Deadline(0.0)):
        time.sleep(0.001)
        with pytest.raises(NLQLTimeoutError):
            store.knn(unit_vectors(rng, 1), 3)
        with pytest.raises(NLQLTimeoutError):
            store.fetch(store.scan())
    assert calls == []
    store.client._shards[store.collection] = shard


def test_bm25_candidates_cut_tied_scores_in_insertion_order() -> None:
    from adapter_kit import check_tied_bm25_window

    check_tied_bm25_window("qdrant")


def test_a_fusions_arms_are_asked_at_once_and_timed() -> None:
    # the SIMILARITY arm's knn and the BM25 arm's candidates are two store calls: they run at the same
    # time (the second on the engine's arm pool, with the search's deadline), and stats give each one's ms
    import threading
    import time as _time

    from nlql import Engine, deadline
    from nlql.embedders import HashEmbedder

    spans: dict[str, tuple[float, float, bool]] = {}

    class Recording(QdrantStore):
        def knn(self, *a, **k):  # type: ignore[no-untyped-def]
            t = _time.perf_counter()
            _time.sleep(0.3)
            out = super().knn(*a, **k)
            spans["knn"] = (t, _time.perf_counter(), deadline.current() is not None)
            return out

        def bm25_candidates(self, *a, **k):  # type: ignore[no-untyped-def]
            t = _time.perf_counter()
            _time.sleep(0.3)
            out = super().bm25_candidates(*a, **k)
            spans["bm25"] = (t, _time.perf_counter(), deadline.current() is not None)
            spans["bm25_thread"] = (0.0, 0.0, threading.current_thread() is threading.main_thread())
            return out

    e = Engine(embedder=HashEmbedder(dim=64), store=Recording(collection="arms"), warm_up=False)
    e.add_texts([f"zebra stripes number {i}. Cats sleep." for i in range(40)])
    hits = e.search('SELECT SENTENCE LET s = SIMILARITY(content, "zebra"), k = BM25(content, "zebra stripes"), '
                    "f = RRF(s, k) ORDER BY f DESC LIMIT 5", timeout=30)
    assert len(hits) == 5 and set(hits.stats["arm_ms"]) == {"s", "k"}
    assert all(ms >= 290 for ms in hits.stats["arm_ms"].values())
    (a0, a1, knn_deadline), (b0, b1, bm25_deadline) = spans["knn"], spans["bm25"]
    assert max(a0, b0) < min(a1, b1)  # the two calls overlapped
    assert knn_deadline and bm25_deadline  # the search's deadline reached both
    assert not spans["bm25_thread"][2]  # the second arm ran on the pool
    e.close()


def _docstrings(n: int) -> tuple[list[str], list[str], list[dict]]:
    """Real text: the standard library's docstrings (long ones, short ones, repeated words)."""
    import inspect
    import json as _json
    import re as _re

    texts, ids, metas = [], [], []
    for mod in (_json, _re, math, inspect):
        for name, obj in inspect.getmembers(mod):
            doc = inspect.getdoc(obj)
            if doc and len(doc) > 30 and len(texts) < n:
                texts.append(doc[:3000])
                ids.append(f"{mod.__name__}.{name}")
                metas.append({"mod": mod.__name__, "n": len(doc) % 5})
    return texts, ids, metas


_BM25_QUERIES = [
    ("SELECT SENTENCE LET k = BM25(content, $q) ORDER BY k DESC LIMIT 10", "return the object string"),
    ("SELECT SENTENCE LET k = BM25(content, $q) WHERE meta.n == 2 ORDER BY k DESC LIMIT 5", "match pattern"),
    ("SELECT SENTENCE LET k = BM25(content, $q) WHERE meta.mod == \"re\" ORDER BY k DESC LIMIT 3", "compile the pattern"),
    ("SELECT SENTENCE LET k = BM25(content, $q) WHERE content CONTAINS \"a\" ORDER BY k DESC LIMIT 7",
     "function argument"),
    ("SELECT SENTENCE LET s = SIMILARITY(content, $q), k = BM25(content, $q), r = RRF(s, k) ORDER BY r DESC "
     "LIMIT 10", "decode a JSON document"),
]


def _same_answers(ref: Any, e: Any) -> None:
    for query, q in _BM25_QUERIES:
        want = [(h.id, h.scores) for h in ref.search(query, params={"q": q})]
        got = e.search(query, params={"q": q})
        assert [h.id for h in got] == [i for i, _ in want], query
        for (_, a), h in zip(want, got):
            assert h.scores == pytest.approx(a, rel=1e-9), query


def test_a_bm25_arm_reads_qdrants_sparse_search_with_the_builtin_stores_answers(tmp_path) -> None:
    # each point carries its BM25 weights as a sparse vector: an arm's window is Qdrant's sparse search,
    # widened until no unread point can reach it; the rows, scores and order are the built-in store's
    from nlql import Engine
    from nlql.embedders import HashEmbedder

    texts, ids, metas = _docstrings(400)
    ref = Engine(embedder=HashEmbedder(dim=32), store="memory", warm_up=False)
    e = Engine(embedder=HashEmbedder(dim=32), store=QdrantStore(path=str(tmp_path / "q")), warm_up=False)
    try:
        for eng in (ref, e):
            eng.add_texts(texts, ids=ids, metadatas=metas)
        assert e.store._sparse
        _same_answers(ref, e)
        client, used = e.store.client, []
        query_points = client.query_points

        def recording(*a, **k):  # type: ignore[no-untyped-def]
            used.append(k.get("using"))
            return query_points(*a, **k)

        client.query_points = recording
        for query, q in _BM25_QUERIES:
            used.clear()
            e.search(query, params={"q": q})
            assert qmod._SPARSE in used, query
    finally:
        ref.close()
        e.close()


def test_a_collection_made_before_the_sparse_vector_keeps_its_answers(tmp_path, monkeypatch) -> None:
    # an older collection has no BM25 sparse vector: its arms read every point holding a term, as before
    from nlql import Engine
    from nlql.embedders import HashEmbedder
    from nlql.stores.qdrant.edge import EdgeClient

    texts, ids, metas = _docstrings(150)
    create = EdgeClient.create_collection
    with monkeypatch.context() as m:  # the collection as the store made it before (no sparse vector)
        m.setattr(EdgeClient, "create_collection", lambda self, name, vectors_config, **_: create(
            self, name, vectors_config))
        Engine(embedder=HashEmbedder(dim=32), store="qdrant://" + str(tmp_path / "q"), warm_up=False).close()
    ref = Engine(embedder=HashEmbedder(dim=32), store="memory", warm_up=False)
    e = Engine(embedder=HashEmbedder(dim=32), store="qdrant://" + str(tmp_path / "q"), warm_up=False)
    try:
        for eng in (ref, e):
            eng.add_texts(texts, ids=ids, metadatas=metas)
        assert not e.store._sparse
        _same_answers(ref, e)
    finally:
        ref.close()
        e.close()


def test_bm25_above_zero_with_fewer_matches_than_limit_reads_only_the_matches() -> None:
    # WHERE k > 0 leaves out every row holding no term (BM25 0): the three matching rows are the page,
    # read without fetching the store; with k >= 0 the rows scoring 0 belong on the page (full path)
    from nlql import Engine
    from nlql.embedders import HashEmbedder

    texts = [f"plain words number {i}." for i in range(200)] + ["zebra stripes.", "a zebra.", "stripes only."]
    engines = [Engine(embedder=HashEmbedder(dim=32), store=s, warm_up=False) for s in ("qdrant", "memory")]
    try:
        for e in engines:
            e.add_texts(texts, ids=[f"d{i}" for i in range(len(texts))])
        for where, narrowed in (("k > 0", True), ("k >= 0.1", True), ("k >= 0", False)):
            q = f'SELECT SENTENCE LET k = BM25(content, "zebra stripes") WHERE {where} ORDER BY k DESC LIMIT 10'
            got, want = (e.search(q) for e in engines)
            assert [(h.id, h.scores) for h in got] == [(h.id, h.scores) for h in want], q
            assert len(got) == (3 if narrowed else 10)
            assert (got.stats.get("keyword_recall") == 3) is narrowed and (got.stats["candidates"] == 3) is narrowed
    finally:
        for e in engines:
            e.close()


def test_document_pages_by_bm25_and_fusions_read_only_their_arms_documents() -> None:
    from adapter_kit import check_document_arms

    check_document_arms("qdrant")
