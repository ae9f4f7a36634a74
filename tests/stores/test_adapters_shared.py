"""Tests shared by the Qdrant, Chroma and Milvus adapters: ingest, fetch, replace by id, delete, similarities,
and filter pushdown semantics against ``pyfilter`` (the reference) over awkward metadata."""

from __future__ import annotations

import math
from datetime import date
from typing import Any

import numpy as np
import pytest
from adapter_kit import DIM, filter_fixture, filters, make_doc, unit_vectors
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from nlql.pushdown import Cond, FOr, filter_pushable
from nlql.stores import pyfilter

# a well-formed key that names no stored row, in each store's key format
UNKNOWN_KEY = {"qdrant": "00000000-0000-0000-0000-000000000000", "chroma": "no-such-key", "milvus": "0" * 40}
ADAPTERS = ["qdrant", "chroma", "milvus"]


def _new_store(name: str, collection: str, tmp: Any = None) -> Any:
    if name == "milvus":
        pytest.importorskip("pymilvus")
        pytest.importorskip("milvus_lite")
        import tempfile

        from nlql.stores.milvus import MilvusStore

        return MilvusStore(f"{tempfile.mkdtemp(prefix='nlql-milvus-')}/t.db", collection=collection)
    if name == "qdrant":
        pytest.importorskip("qdrant_client")
        from nlql.stores.qdrant import QdrantStore

        return QdrantStore(collection=collection)
    pytest.importorskip("chromadb")
    from nlql.stores.chroma import ChromaStore

    return ChromaStore(collection=collection)


@pytest.fixture(params=ADAPTERS)
def store(request: pytest.FixtureRequest) -> Any:
    s = _new_store(request.param, "t")
    s.open(DIM)
    yield s
    s.close()


def test_ingest_scan_fetch_roundtrip(store: Any) -> None:
    rng = np.random.default_rng(0)
    docs = [make_doc(f"d{i}", [f"First of {i}.", f"Second of {i}."], {"i": i, "tags": ["x", i]}, i + 1,
                     unit_vectors(rng, 2)) for i in range(5)]
    store.upsert(docs)
    assert store.count() == 10
    assert store.max_seq() == 5
    rows = store.fetch(store.scan())
    assert [(r.doc_id, r.position) for r in rows] == [(f"d{i}", p) for i in range(5) for p in range(2)]
    first = rows[2]
    assert (first.content, first.metadata, first.seq, first.start, first.end, first.tail) == (
        "First of 1.", {"i": 1, "tags": ["x", 1]}, 2, 0, 11, " ")
    assert first.id == "d1#0"
    assert store.fetch([rows[3].key, UNKNOWN_KEY[store.capabilities.NAME], rows[0].key]) == [rows[3], rows[0]]


def test_replace_by_id_leaves_no_stale_sentences(store: Any) -> None:
    rng = np.random.default_rng(1)
    store.upsert([make_doc("a", ["one.", "two.", "three."], {"v": 1}, 1, unit_vectors(rng, 3)),
                  make_doc("b", ["bee."], {}, 2, unit_vectors(rng, 1))])
    store.upsert([make_doc("a", ["only."], {"v": 2}, 3, unit_vectors(rng, 1))])
    assert store.count() == 2
    rows = store.document_rows(["a", "b", "nope"])
    assert list(rows) == ["a", "b"]
    assert [(r.content, r.metadata, r.seq) for r in rows["a"]] == [("only.", {"v": 2}, 3)]
    assert [r.doc_id for r in store.fetch(store.scan())] == ["b", "a"]  # insertion order: seq


def test_same_doc_twice_in_one_upsert_keeps_the_last(store: Any) -> None:
    rng = np.random.default_rng(2)
    store.upsert([make_doc("a", ["x.", "y."], {"n": 1}, 1, unit_vectors(rng, 2)),
                  make_doc("a", ["z."], {"n": 2}, 2, unit_vectors(rng, 1))])
    assert [(r.content, r.metadata) for r in store.document_rows(["a"])["a"]] == [("z.", {"n": 2})]


def test_delete(store: Any) -> None:
    rng = np.random.default_rng(3)
    store.upsert([make_doc(f"d{i}", ["s.", "t."], {}, i + 1, unit_vectors(rng, 2)) for i in range(3)])
    assert store.delete(["d1", "missing", "d1"]) == 1
    assert store.count() == 4
    assert store.delete([]) == 0
    assert "d1" not in store.document_rows(["d1"])
    assert store.knn(unit_vectors(rng, 1), 10)[0].__len__() == 4


def test_similarities(store: Any) -> None:
    rng = np.random.default_rng(9)
    vecs = unit_vectors(rng, 5)
    store.upsert([make_doc(f"d{i}", ["s."], {}, i + 1, vecs[i:i + 1]) for i in range(5)])
    keys = store.scan()
    q = unit_vectors(rng, 2)
    sims = store.similarities(q, [keys[3], keys[1], UNKNOWN_KEY[store.capabilities.NAME]])
    assert sims.shape == (2, 3)
    assert np.allclose(sims[:, :2], q @ vecs[[3, 1]].T, atol=1e-6)
    assert np.isnan(sims[:, 2]).all()


# ------------------------------------------------------------------------------ filter semantics

@pytest.fixture(scope="module", params=ADAPTERS)
def filter_store(request: pytest.FixtureRequest):
    yield from filter_fixture(_new_store(request.param, "filters"))



@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flt=filters)
def test_pushed_filters_mean_what_pyfilter_means(filter_store, flt) -> None:
    store, rows, _ = filter_store
    # every filter the planner may push must be exact; the store compiles the rest exactly too
    event("pushable" if filter_pushable(store.capabilities, flt) else "not pushable")
    native = store.compile_filter(flt)
    expected = [r.key for r in rows if pyfilter.row_passes(flt, r)]
    assert store.scan(native) == expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flt=filters, k=st.sampled_from([1, 3, 10]))
def test_filtered_knn_is_the_top_k_of_the_matching_rows(filter_store, flt, k) -> None:
    store, rows, vectors = filter_store
    q = unit_vectors(np.random.default_rng(k), 1)[0]
    expected = {r.key: float(vectors[r.key] @ q) for r in rows if pyfilter.row_passes(flt, r)}
    got = store.knn(q[None, :], k, store.compile_filter(flt))[0]
    assert len(got) == min(k, len(expected))
    assert all(key in expected and math.isclose(s, expected[key], abs_tol=1e-5) for key, s in got)
    rest = [s for key, s in expected.items() if key not in dict(got)]
    if got and rest:
        assert got[-1][1] >= max(rest) - 1e-5


def test_representative_filters_are_pushable_and_exact(filter_store) -> None:
    store, rows, _ = filter_store
    caps = store.capabilities
    cases = [
        Cond("eq", ("meta", "a"), 2020), Cond("eq", ("meta", "a"), "2020"), Cond("ne", ("meta", "b"), "abc"),
        Cond("ge", ("meta", "n", "x"), 0.5), Cond("eq", ("meta", "c.d"), 0.5), Cond("in", ("meta", "k y"), (1, "abc", True)),
        Cond("not_in", ("meta", "a"), (2020, "2020")), Cond("is_null", ("meta", "zz")), Cond("lt", ("meta", "a"), date(2025, 1, 1)),
        Cond("contains", ("content",), "TOOL"), Cond("eq", ("doc_id",), 2005), Cond("lt", ("position",), "1"),
        FOr((Cond("eq", ("meta", "a"), True), Cond("is_not_null", ("meta", "n")))),
    ]
    for flt in cases:
        assert filter_pushable(caps, flt), flt
        native = store.compile_filter(flt)
        # Milvus's C++ engine has no negation over JSON (no `not`, no `exists`): IS NULL is a superset there
        if not (caps.NAME == "milvus" and getattr(flt, "op", None) == "is_null"):
            assert "adapter check" not in native.text, flt
        assert store.scan(native) == [r.key for r in rows if pyfilter.row_passes(flt, r)], flt
    assert not filter_pushable(caps, Cond("like", ("content",), "a%"))  # LIKE and MATCH stay residual
