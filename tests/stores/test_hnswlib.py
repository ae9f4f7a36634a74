"""HnswlibStore: the Store contract against the built-in store, filtered recall guarantees, re-attach."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nlql.errors import MissingDependencyError
from nlql.pushdown import Cond, FAnd, Filter, FOr
from nlql.stores.base import DocRecord, UnitRecord
from nlql.stores.memory import MEMORY_CAPABILITIES, MemoryStore

pytest.importorskip("hnswlib")
from ann_kit import (  # noqa: E402
    DIM,
    clustered,
    clustered_reference,
    docs_from,
    force_index,
    forced,
    ident,
    pair,
    unit,
)

from nlql.stores.hnswlib import HnswlibStore  # noqa: E402


@pytest.fixture(scope="module")
def clustered_pair() -> tuple[HnswlibStore, MemoryStore, np.ndarray]:
    """5,000 clustered vectors (dim 64), 5 tagged "rare"; built once per module."""
    return clustered_reference(HnswlibStore())  # type: ignore[return-value]


def keys(hits: list[list[tuple[Any, float]]]) -> list[list[int]]:
    return [[k for k, _ in h] for h in hits]


# ------------------------------------------------------------------------------------------ basics


def test_missing_dependency_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hnswlib", None)
    with pytest.raises(MissingDependencyError) as err:
        HnswlibStore()
    assert "pip install 'nlql-engine[hnswlib]'" in str(err.value)


def test_module_import_finds_the_real_hnswlib() -> None:
    import hnswlib

    import nlql.stores.hnswlib as mod

    assert hasattr(hnswlib, "Index") and mod.__name__ == "nlql.stores.hnswlib"


def test_capabilities_and_arguments() -> None:
    caps = HnswlibStore().capabilities
    assert caps.NAME == "hnswlib" and not caps.EXACT
    assert caps.OPS == MEMORY_CAPABILITIES.OPS and caps.OR and caps.SCORE_THRESHOLD and caps.FULL_SCORES
    with pytest.raises(ValueError):
        HnswlibStore(space="l2")
    assert HnswlibStore().compile_filter(Cond("eq", ("meta", "a"), 1)).text.startswith("knn_query(filter=")


@pytest.mark.parametrize("space", ["cosine", "ip"])
def test_upsert_replace_delete_and_cosine_scores(space: str) -> None:
    rng = np.random.default_rng(1)
    store = HnswlibStore(space=space, max_elements=8)  # grows by resize_index
    docs = docs_from(unit(rng.standard_normal((60, DIM))), [{"i": i} for i in range(20)], per_doc=3)
    ref = pair(store, docs)
    assert store.count() == 60 and store._index.get_max_elements() >= 60
    new = docs_from(unit(rng.standard_normal((1, DIM))), [{"i": 99}], seq0=21)
    new[0].doc_id = "d3"
    for s in (store, ref):
        s.upsert(new)
        assert s.delete(["d4", "nope"]) == 1
    assert store.count() == ref.count() == 55
    rows = store.document_rows(["d3", "d4"])
    assert list(rows) == ["d3"] and [r.metadata for r in rows["d3"]] == [{"i": 99}]
    force_index(store)
    q = unit(rng.standard_normal((4, DIM)))
    got, want = store.knn(q, 60), ref.knn(q, 60)
    for g, w in zip(got, want, strict=True):
        assert ident(store, g) == ident(ref, w) and len(g) == 55
        # cosine, not hnswlib's 1 − cos distance
        np.testing.assert_allclose([s for _, s in g], [s for _, s in w], atol=1e-5)
    hit = store.knn(new[0].vectors, 1)[0]
    assert ident(store, hit) == [("d3", 0)] and hit[0][1] == pytest.approx(1.0, abs=1e-5)


def test_deleted_slots_are_reused() -> None:
    rng = np.random.default_rng(2)
    data = unit(rng.standard_normal((40, DIM)))
    store = HnswlibStore(max_elements=40)
    store.open(DIM)
    store.upsert(docs_from(data, [{} for _ in range(40)]))
    store.delete([f"d{i}" for i in range(10)])
    assert store._dead == 10
    store.upsert(docs_from(data[:10], [{} for _ in range(10)], seq0=100, prefix="n"))
    assert store._dead == 0 and store._index.get_current_count() == 40 and store._index.get_max_elements() == 40
    force_index(store)
    assert ident(store, store.knn(data[3:4], 1)[0]) == [("n3", 0)]


# ---------------------------------------------------------------------------------- ANN behaviour


def test_recall_on_clustered_vectors(clustered_pair: tuple[HnswlibStore, MemoryStore, np.ndarray]) -> None:
    store, ref, queries = clustered_pair
    with forced(store):
        got, want = store.knn(queries, 10), ref.knn(queries, 10)
        assert store.last_stats["path"] == "ann"
    recall = np.mean([len(set(g) & set(w)) / 10 for g, w in zip(keys(got), keys(want), strict=True)])
    assert recall >= 0.9, recall


SELECTIVE = [(Cond("eq", ("meta", "tag"), "rare"), 10),  # 0.1%: 5 matches; hnswlib alone raises here
             (Cond("eq", ("meta", "b"), 3), 10),         # 2%: 100 matches
             (Cond("eq", ("meta", "b"), 3), 100)]        # exactly k matches


@pytest.mark.parametrize("force", [False, True])
def test_selective_filter_returns_min_k_matches(clustered_pair: tuple[HnswlibStore, MemoryStore, np.ndarray],
                                                force: bool) -> None:
    store, ref, queries = clustered_pair
    q = queries[:3]
    for flt, k in SELECTIVE:
        nf = store.compile_filter(flt)
        if force:
            with forced(store, ef_search=16):
                got = store.knn(q, k, nf)
        else:
            got = store.knn(q, k, nf)
        want = ref.knn(q, k, nf)
        for g, w in zip(got, want, strict=True):
            assert len(g) == len(w) == min(k, int(ref.mask(nf).sum()))
            assert {key for key, _ in g} == {key for key, _ in w}
        assert store.last_stats["path"] == ("ann" if force else "exact")


def test_raw_hnswlib_refuses_what_the_store_answers() -> None:
    """The failure the store exists to hide: hnswlib raises rather than return fewer than k."""
    rng = np.random.default_rng(5)
    data = unit(rng.standard_normal((300, DIM)))
    store = HnswlibStore()
    pair(store, docs_from(data, [{"g": int(i < 3)} for i in range(300)]))
    force_index(store)
    allowed = [i < 3 for i in range(300)]
    with pytest.raises(RuntimeError):
        store._index.knn_query(data[:1], k=10, filter=allowed.__getitem__)
    got = store.knn(data[:1], 10, store.compile_filter(Cond("eq", ("meta", "g"), 1)))[0]
    assert sorted(ident(store, got)) == [("d0", 0), ("d1", 0), ("d2", 0)]  # min(k, matches), no error
    assert store.last_stats["path"] == "ann"


def test_min_score_applies_after_ann() -> None:
    rng = np.random.default_rng(6)
    data = clustered(3000, 32, 30, rng)
    store = HnswlibStore()
    ref = pair(store, docs_from(data, [{} for _ in range(3000)]), dim=32)
    force_index(store)
    for g, w in zip(store.knn(data[:5], 50, None, 0.8), ref.knn(data[:5], 50, None, 0.8), strict=True):
        assert all(s >= 0.8 for _, s in g)
        assert {k for k, _ in g} <= {k for k, _ in w}


def test_compaction_keeps_labels_right() -> None:
    rng = np.random.default_rng(7)
    data = unit(rng.standard_normal((5000, DIM)))
    store = HnswlibStore(ef_search=256)
    pair(store, docs_from(data, [{"i": i} for i in range(5000)]))
    store.delete([f"d{i}" for i in range(3000)])
    assert store.table.size == 2000  # compacted: keys renumbered, labels remapped
    force_index(store)
    got = store.knn(data[[3500, 4200, 4999]], 5)
    assert [ident(store, g)[0] for g in got] == [("d3500", 0), ("d4200", 0), ("d4999", 0)]
    nf = store.compile_filter(Cond("ge", ("meta", "i"), 4000))
    assert all(r.metadata["i"] >= 4000 for g in store.knn(data[:3], 5, nf) for r in store.fetch([k for k, _ in g]))


# ------------------------------------------------------------------------------ random filters


def random_meta(rng: np.random.Generator) -> dict[str, Any]:
    """Mixed types, nulls and missing keys: the cases where stores' filter semantics differ."""
    pools: dict[str, list[Any]] = {"n": [None, -3, -1, 0, 1, 2, 3, "1", "2", "x", 2.5],
                                   "s": [None, "alpha", "Beta", "gamma", "2"], "b": [True, False, None]}
    return {key: pool[rng.integers(len(pool))] for key, pool in pools.items() if rng.random() < 0.8}


LEAF = st.one_of(
    st.builds(Cond, st.sampled_from(["eq", "ne", "lt", "le", "gt", "ge"]), st.just(("meta", "n")),
              st.one_of(st.integers(-3, 3), st.just("2"))),
    st.builds(Cond, st.sampled_from(["eq", "ne", "contains", "not_contains", "like"]), st.just(("meta", "s")),
              st.sampled_from(["alpha", "a%", "ET", "2"])),
    st.builds(Cond, st.sampled_from(["in", "not_in"]), st.just(("meta", "n")), st.just((1, "x", None))),
    st.builds(Cond, st.sampled_from(["is_null", "is_not_null"]), st.sampled_from([("meta", "n"), ("meta", "b")])),
    st.builds(Cond, st.just("eq"), st.just(("meta", "b")), st.booleans()),
)
FILTERS = st.recursive(LEAF, lambda kids: st.one_of(
    st.builds(FAnd, st.tuples(kids, kids)), st.builds(FOr, st.tuples(kids, kids))), max_leaves=5)


@pytest.fixture(scope="module")
def random_pair() -> tuple[HnswlibStore, MemoryStore]:
    rng = np.random.default_rng(8)
    data = unit(rng.standard_normal((240, DIM)))
    docs = docs_from(data, [random_meta(rng) for _ in range(120)], per_doc=2)
    store, ref = HnswlibStore(ef_search=512), MemoryStore()
    for s in (store, ref):
        s.open(DIM)
        s.upsert(docs)
        s.delete(["d5", "d17"])
        s.upsert([DocRecord("d9", "r", {"n": 2, "s": "alpha"}, [UnitRecord(0, "r", 0, 1)], data[:1], seq=500)])
    force_index(store)  # a 240-row graph searched at ef 512 is exhaustive: it must equal the exact answer
    return store, ref


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flt=FILTERS, qi=st.integers(0, 9))
def test_random_filters_same_rows_as_memory(random_pair: tuple[HnswlibStore, MemoryStore],
                                            flt: Filter, qi: int) -> None:
    store, ref = random_pair
    q = unit(np.random.default_rng(qi).standard_normal((1, DIM)))
    nf = ref.compile_filter(flt)
    assert store.scan(nf) == ref.scan(nf)
    assert keys(store.knn(q, 8, nf)) == keys(ref.knn(q, 8, nf))


# ------------------------------------------------------------------------------------ persistence


def test_reattach_reuses_the_saved_index(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    data = unit(rng.standard_normal((300, DIM)))
    first = HnswlibStore(tmp_path, max_elements=64)
    first.open(DIM)
    first.upsert(docs_from(data, [{"g": i % 5} for i in range(100)], per_doc=3))
    first.upsert(docs_from(data[:2], [{"g": 9}], per_doc=2, seq0=200))  # replaces d0
    first.delete(["d7"])
    force_index(first)
    q = unit(rng.standard_normal((4, DIM)))
    nf = first.compile_filter(Cond("eq", ("meta", "g"), 2))
    before = [ident(first, h) for h in first.knn(q, 20) + first.knn(q, 5, nf)]
    first.close()
    assert {p.name for p in tmp_path.iterdir()} >= {"nlql.sqlite", "index.bin", "index.bin.json"}

    second = HnswlibStore(tmp_path, max_elements=64)
    assert second.index_origin == "file" and second.count() == 296 and second._dead == 4
    force_index(second)
    assert [ident(second, h) for h in second.knn(q, 20) + second.knn(q, 5, nf)] == before
    second.upsert(docs_from(data[:1], [{"g": 2}], seq0=300, prefix="z"))  # reuses a deleted slot
    assert ident(second, second.knn(data[:1], 1, nf)[0]) == [("z0", 0)]
    second.close()
    third = HnswlibStore(tmp_path, max_elements=64)
    assert third.index_origin == "file" and third.count() == 297
    third.close()


def test_stale_damaged_or_different_index_is_rebuilt(tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    data = unit(rng.standard_normal((50, DIM)))
    first = HnswlibStore(tmp_path)
    first.open(DIM)
    first.upsert(docs_from(data, [{} for _ in range(50)]))
    first.flush()
    first.delete(["d1"])  # not flushed: like a process that died before close()
    second = HnswlibStore(tmp_path)
    assert second.index_origin == "built" and second.count() == 49
    assert ident(second, second.knn(data[2:3], 1)[0]) == [("d2", 0)]
    second.close()
    first.close()
    (tmp_path / "index.bin").write_bytes(b"\0" * 64)
    third = HnswlibStore(tmp_path)
    assert third.index_origin == "built" and ident(third, third.knn(data[3:4], 1)[0]) == [("d3", 0)]
    third.close()
    fourth = HnswlibStore(tmp_path, m=8)  # other build parameters: not reused
    assert fourth.index_origin == "built" and fourth.count() == 49
    fourth.close()
    side = tmp_path / "index.bin.json"
    meta = json.loads(side.read_text())
    assert HnswlibStore(tmp_path, m=8).index_origin == "file"
    side.write_text(json.dumps({**meta, "docs": ["not", "a", "mapping"]}))  # valid token, wrong shape
    fifth = HnswlibStore(tmp_path, m=8)
    assert fifth.index_origin == "built" and ident(fifth, fifth.knn(data[5:6], 1)[0]) == [("d5", 0)]
    fifth.close()


def test_index_saved_by_a_writer_that_caught_up_is_reused(tmp_path: Path) -> None:
    """Two objects on one directory: the one that writes last first catches up with the other's
    committed write (the directory store is multi-process), so the index it saves is current."""
    rng = np.random.default_rng(12)
    data = unit(rng.standard_normal((12, DIM)))
    first = HnswlibStore(tmp_path)
    first.open(DIM)
    first.upsert(docs_from(data[:10], [{} for _ in range(10)]))
    first.close()
    b, c = HnswlibStore(tmp_path), HnswlibStore(tmp_path)
    assert b.index_origin == c.index_origin == "file"
    c.upsert(docs_from(data[10:11], [{}], seq0=50, prefix="d"))  # d0 again: same size, new version
    c.close()
    b.upsert(docs_from(data[11:12], [{}], seq0=60, prefix="z"))  # b catches up with c's d0 first
    b.close()
    d = HnswlibStore(tmp_path)
    assert d.index_origin == "file" and d.count() == 11
    force_index(d)
    assert ident(d, d.knn(data[10:11], 1)[0]) == [("d0", 0)]
    d.close()
