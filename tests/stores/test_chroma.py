"""ChromaStore (embedded): ingest, replace, delete, re-attach, knn, under-filling filters, and pushdown.

The filter tests compare ``scan(compile_filter(f))`` with ``pyfilter.row_passes`` (the reference) over
metadata of every awkward kind: ints, floats, numeric strings, plain strings, bools, nulls, missing keys,
nested dicts, lists and ISO dates.
"""

from __future__ import annotations

import math
from datetime import date, datetime, timezone

import numpy as np
import pytest

pytest.importorskip("chromadb")

from adapter_kit import (  # noqa: E402
    DIM,
    HOSTILE,
    make_doc,
    unit_vectors,
)

from nlql.errors import BackendError, MissingDependencyError  # noqa: E402
from nlql.pushdown import Cond, FAnd  # noqa: E402
from nlql.stores import chroma as cmod  # noqa: E402
from nlql.stores.chroma import ChromaStore  # noqa: E402


@pytest.fixture
def store():
    s = ChromaStore(collection="t")
    s.open(DIM)
    yield s
    s.close()


# ------------------------------------------------------------------------------ ingest / replace / delete


def test_reattach_on_the_same_path(tmp_path) -> None:
    rng = np.random.default_rng(4)
    vecs = unit_vectors(rng, 6)
    first = ChromaStore(path=str(tmp_path / "q"))
    first.open(DIM)
    first.upsert([make_doc(f"d{i}", ["a.", "b."], {"i": i, "when": f"2024-06-0{i + 1}"}, i + 1,
                           vecs[2 * i: 2 * i + 2]) for i in range(3)])
    keys = first.scan()
    before = first.knn(vecs[:1], 3)
    first.close()  # releases the client; the next PersistentClient reads the folder afresh

    second = ChromaStore(path=str(tmp_path / "q"))
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


def test_open_with_another_dimension_is_a_backend_error(store: ChromaStore) -> None:
    rng = np.random.default_rng(11)
    store.upsert([make_doc("a", ["x."], {}, 1, unit_vectors(rng, 1))])
    other = ChromaStore(store.client, collection=store.collection_name)
    with pytest.raises(BackendError, match="size 16"):
        other.open(DIM + 1)


def test_in_memory_stores_are_isolated() -> None:
    rng = np.random.default_rng(12)
    a, b = ChromaStore(), ChromaStore()
    a.open(DIM)
    b.open(DIM)
    try:
        a.upsert([make_doc("only-in-a", ["x."], {}, 1, unit_vectors(rng, 1))])
        assert (a.count(), b.count()) == (1, 0)
    finally:
        a.close()
        b.close()


def test_missing_dependency(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cmod, "chromadb", None)
    with pytest.raises(MissingDependencyError) as err:
        ChromaStore()
    assert "nlql-engine[chroma]" in str(err.value)


# ------------------------------------------------------------------------------ knn


def _numpy_topk(q: np.ndarray, mat: np.ndarray, k: int) -> list[int]:
    scores = mat @ q
    return list(np.argsort(-scores, kind="stable")[:k])


def test_knn_matches_numpy_brute_force(store: ChromaStore) -> None:
    """HNSW with ef 200 over 300 points finds the exact top 10; scores are the stored vectors' cosine."""
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


def test_knn_ties_break_on_insertion_order(store: ChromaStore) -> None:
    rng = np.random.default_rng(6)
    v = unit_vectors(rng, 1)
    other = unit_vectors(rng, 3)
    docs = [make_doc(f"t{i}", ["dup."], {}, 10 - i, v) for i in range(4)]  # seq 10, 9, 8, 7
    docs.append(make_doc("o", ["a.", "b.", "c."], {}, 1, other))
    store.upsert(docs)
    keys = {r.doc_id: r.key for r in store.fetch(store.scan())}
    got = store.knn(v, 2)[0]
    assert [key for key, _ in got] == [keys["t3"], keys["t2"]]
    flt = store.compile_filter(Cond("lt", ("content",), "e"))  # string order: re-checked, searched exactly
    assert [key for key, _ in store.knn(v, 3, flt)[0]] == [keys["t3"], keys["t2"], keys["t1"]]
    assert store.last_stats["path"] == "exact"


def test_knn_min_score_keeps_rows_at_or_above(store: ChromaStore) -> None:
    rng = np.random.default_rng(7)
    vecs = unit_vectors(rng, 50)
    store.upsert([make_doc(f"d{i}", ["s."], {}, i + 1, vecs[i:i + 1]) for i in range(50)])
    q = vecs[0]
    scores = np.sort(vecs @ q)[::-1]
    threshold = float((scores[5] + scores[6]) / 2)
    got = store.knn(q[None, :], 20, min_score=threshold)[0]
    assert len(got) == 6
    assert all(s >= threshold for _, s in got)


def test_filtered_knn_under_a_selective_filter_fills_k(store: ChromaStore) -> None:
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
    assert store.last_stats == {"path": "hnsw", "rounds": 1, "matches": 3}  # asked 13, got all 3
    # a filter that needs the adapter's re-check (string ordering) still fills k
    checked = store.compile_filter(FAnd((Cond("eq", ("meta", "g"), "hit"), Cond("lt", ("meta", "g"), "i"))))
    assert "adapter check" in checked.text
    assert len(store.knn(vecs[:1], 5, checked)[0]) == 3


@pytest.mark.parametrize("matching", [1, 3, 40])
def test_hnsw_path_under_a_selective_filter_still_fills_k(store: ChromaStore, matching: int) -> None:
    """Forced onto HNSW (no exact shortcut), a selective ``where`` must still give min(k, matches)."""
    store.exact_limit = 0
    rng = np.random.default_rng(13)
    n = 1000
    vecs = unit_vectors(rng, n)
    hits = set(range(0, n, n // matching)[:matching])
    store.upsert([make_doc(f"d{i}", [f"s{i}."], {"g": "hit" if i in hits else "miss"}, i + 1,
                           vecs[i:i + 1]) for i in range(n)])
    flt = store.compile_filter(Cond("eq", ("meta", "g"), "hit"))
    for k in (1, 5, 10):
        got = store.knn(vecs[3:5], k, flt)
        assert [len(g) for g in got] == [min(k, matching)] * 2
        assert store.last_stats["path"] in ("hnsw", "hnsw+exact")
        assert store.last_stats["matches"] in (None, matching)  # None: HNSW returned all it was asked
        expected = sorted((float(vecs[i] @ vecs[3]), i) for i in hits)[::-1][:k]
        assert [r.doc_id for r in store.fetch([key for key, _ in got[0]])] == [f"d{i}" for _, i in expected]


def test_native_filter_text_is_deterministic_json(store: ChromaStore) -> None:
    import json

    flt = FAnd((Cond("ge", ("meta", "year"), 2020), Cond("in", ("meta", "lang"), ("en", "de")),
                Cond("lt", ("meta", "when"), datetime(2024, 1, 1, tzinfo=timezone.utc))))
    a, b = store.compile_filter(flt), store.compile_filter(flt)
    assert a.text == b.text
    parsed = json.loads(a.text)
    assert parsed["where"]["$and"][:2] == [{"n.year": {"$gte": 2020.0}}, {"s.lang": {"$in": ["en", "de"]}}]
    assert parsed["where_document"] is None
    contains = store.compile_filter(FAnd((Cond("contains", ("content",), "Tool"), Cond("eq", ("meta", "a"), 1))))
    assert json.loads(contains.text) == {"where": {"n.a": {"$eq": 1.0}}, "where_document": {"$contains": "tool"}}
    empty = store.compile_filter(Cond("eq", ("meta", "year"), None))
    assert empty.extra["empty"] and store.scan(empty) == [] and store.knn(np.ones((1, DIM)), 3, empty) == [[]]


# ------------------------------------------------------------------------------ hostile values


def test_hostile_values_round_trip(store: ChromaStore) -> None:
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


def test_a_replaced_document_keeps_none_of_its_old_metadata_and_ties_keep_insertion_order() -> None:
    """Chroma's upsert merges a record's new metadata into its old one: a replaced document whose new
    metadata lacks a key (or holds a value of another type) must not match a filter on the old value; and
    equal scores are ordered by (seq, position), read by the ids Chroma gives back (its ``get`` lists
    records in its own order, which a replacement changes)."""
    from nlql import Engine
    from nlql.embedders import HashEmbedder

    engines = [Engine(embedder=HashEmbedder(dim=16), store=s, warm_up=False)
               for s in ("memory", ChromaStore(collection="replaced", hnsw_ef=1000))]
    for e in engines:
        e.add_texts(["Solar power grows.", "Solar power grows.", "Solar power grows.", "Wind."],
                    ids=["a", "b", "c", "d"], metadatas=[{"year": 2024, "tag": "x"}, {"year": 2023}, {}, {}])
        e.add_text("Solar power grows.", id="a", metadata={"year": "2024"})  # ("tag" gone, "year" a string)
    queries = ['SELECT DOCUMENT WHERE meta.tag == "x"', "SELECT DOCUMENT WHERE meta.year == 2024 ORDER BY doc_id",
               'SELECT DOCUMENT WHERE meta.year == "2024" ORDER BY doc_id', "SELECT COUNT(DOCUMENT) BY meta.tag",
               'SELECT SENTENCE LET s = SIMILARITY(content, "solar power") ORDER BY s DESC LIMIT 2']
    for q in queries:
        want, got = ([(h.id, h.group, h.count) for h in e.search(q)] for e in engines)
        assert got == want, q
    assert [h.doc_id for h in engines[1].search(queries[-1])] == ["b", "c"]  # (a was written again: last)
