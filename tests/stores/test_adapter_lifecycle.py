"""Lifecycle tests shared by the Qdrant and Chroma adapters: ingest, fetch, replace by id, delete."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from adapter_kit import DIM, make_doc, unit_vectors

# a well-formed key that names no stored row, in each store's key format
UNKNOWN_KEY = {"qdrant": "00000000-0000-0000-0000-000000000000", "chroma": "no-such-key"}


@pytest.fixture(params=["qdrant", "chroma"])
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "qdrant":
        pytest.importorskip("qdrant_client")
        from nlql.stores.qdrant import QdrantStore

        s: Any = QdrantStore(collection="t")
    else:
        pytest.importorskip("chromadb")
        from nlql.stores.chroma import ChromaStore

        s = ChromaStore(collection="t")
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
