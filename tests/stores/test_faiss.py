"""FaissStore: the Store contract against the built-in store, filtered recall guarantees, re-attach."""

from __future__ import annotations

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

pytest.importorskip("faiss")
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

from nlql.stores.faiss import FaissStore  # noqa: E402


@pytest.fixture(scope="module")
def clustered_pair() -> tuple[FaissStore, MemoryStore, np.ndarray]:
    """5,000 clustered vectors (dim 64), 5 tagged "rare"; built once per module."""
    return clustered_reference(FaissStore(index="hnsw"))  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------ basics


def test_missing_dependency_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(MissingDependencyError) as err:
        FaissStore()
    assert "pip install 'nlql-engine[faiss]'" in str(err.value)
    assert "faiss-cpu" in str(err.value)


def test_module_import_finds_the_real_faiss() -> None:
    import faiss

    import nlql.stores.faiss as mod

    assert hasattr(faiss, "IndexFlatIP") and mod.__name__ == "nlql.stores.faiss"


def test_capabilities() -> None:
    flat, hnsw = FaissStore(index="flat").capabilities, FaissStore(index="hnsw").capabilities
    assert flat.NAME == hnsw.NAME == "faiss"
    assert flat.EXACT and not hnsw.EXACT
    assert flat.OPS == MEMORY_CAPABILITIES.OPS and flat.OR and flat.NESTED_KEYS and flat.SCORE_THRESHOLD
    with pytest.raises(ValueError):
        FaissStore(index="ivf")


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_upsert_replace_delete(kind: str) -> None:
    rng = np.random.default_rng(1)
    store = FaissStore(index=kind)
    docs = docs_from(unit(rng.standard_normal((60, DIM))), [{"i": i} for i in range(20)], per_doc=3)
    ref = pair(store, docs)
    assert store.count() == 60 and store.max_seq() == 20
    # replace d3 with a one-sentence version; delete d4 and an unknown id
    new = docs_from(unit(rng.standard_normal((1, DIM))), [{"i": 99}], seq0=21)
    new[0].doc_id = "d3"
    for s in (store, ref):
        s.upsert(new)
        assert s.delete(["d4", "nope"]) == 1
    assert store.count() == ref.count() == 60 - 3 - 3 + 1
    rows = store.document_rows(["d3", "d4"])
    assert list(rows) == ["d3"] and [r.metadata for r in rows["d3"]] == [{"i": 99}]
    assert [r.doc_id for r in store.fetch(store.scan())] == [r.doc_id for r in ref.fetch(ref.scan())]
    q = unit(rng.standard_normal((4, DIM)))
    if kind == "hnsw":
        force_index(store)
    got, want = store.knn(q, 60), ref.knn(q, 60)
    for g, w in zip(got, want, strict=True):
        assert len(g) == len(w) == store.count()
        assert ident(store, g) == ident(ref, w)
    # the replaced sentence is found by its own vector with cosine 1, the deleted document never
    hit = store.knn(new[0].vectors, 1)[0]
    assert ident(store, hit) == [("d3", 0)] and hit[0][1] == pytest.approx(1.0, abs=1e-5)
    assert all(r.doc_id != "d4" for hits in got for r in store.fetch([k for k, _ in hits]))


def test_flat_knn_equals_memory_exactly() -> None:
    """Bit-identical, ties included: duplicate vectors order as the built-in store orders them."""
    rng = np.random.default_rng(2)
    vecs = unit(rng.standard_normal((400, DIM)))
    vecs[100:110] = vecs[5]  # exact duplicates (a repeated sentence): order must match the built-in store
    vecs[300:305] = vecs[7]
    metas = [{"g": i % 7, "name": f"n{i % 13}"} for i in range(400)]
    store = FaissStore(index="flat")
    ref = pair(store, docs_from(vecs, metas))
    queries = np.vstack([vecs[[5, 7]], unit(rng.standard_normal((6, DIM)))])
    filters: list[Filter | None] = [None, Cond("eq", ("meta", "g"), 3),
                                    FOr((Cond("lt", ("meta", "g"), 2), Cond("eq", ("meta", "name"), "n4")))]
    for flt in filters:
        nf = None if flt is None else store.compile_filter(flt)
        for k in (1, 3, 10, 50, 1000):
            for min_score in (None, 0.2):
                got = store.knn(queries, k, nf, min_score)
                assert got == ref.knn(queries, k, nf, min_score)  # same keys, order and float scores
                assert store.last_stats["path"] == "exact"
    assert store.index_origin == "none" and store._index is None  # flat keeps no second copy


def test_hnsw_filter_text_names_the_selector() -> None:
    text = FaissStore(index="hnsw").compile_filter(Cond("eq", ("meta", "g"), 3)).text
    assert text == "IDSelectorBitmap(eq(meta.g, 3))"


# ---------------------------------------------------------------------------------- ANN behaviour


def test_hnsw_recall_on_clustered_vectors(clustered_pair: tuple[FaissStore, MemoryStore, np.ndarray]) -> None:
    store, ref, queries = clustered_pair
    with forced(store):
        got, want = store.knn(queries, 10), ref.knn(queries, 10)
        assert store.last_stats["path"] == "ann"
    recall = np.mean([len({k for k, _ in g} & {k for k, _ in w}) / 10 for g, w in zip(got, want, strict=True)])
    assert recall >= 0.9, recall
    # unforced, 5,000 × 64 floats is cheaper to scan than to walk: exact, bit-identical to the built-in store
    assert store.knn(queries, 10) == ref.knn(queries, 10) and store.last_stats["path"] == "exact"


SELECTIVE = [(Cond("eq", ("meta", "tag"), "rare"), 10),  # 0.1%: 5 matches, fewer than k
             (Cond("eq", ("meta", "b"), 3), 10),         # 2%: 100 matches
             (Cond("eq", ("meta", "b"), 3), 100)]        # exactly k matches


@pytest.mark.parametrize("force", [False, True])
def test_selective_filter_returns_min_k_matches(clustered_pair: tuple[FaissStore, MemoryStore, np.ndarray],
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
    if force:  # the widening loop really ran: a 2% filter at efSearch 16 under-fills a first round
        with forced(store, ef_search=16):
            store.knn(q, 100, store.compile_filter(Cond("eq", ("meta", "b"), 3)))
        assert store.last_stats["rounds"] > 1 or store.last_stats["fallback"] > 0


def test_min_score_applies_after_ann() -> None:
    rng = np.random.default_rng(5)
    data = clustered(3000, 32, 30, rng)
    store = FaissStore(index="hnsw", ef_construction=64)
    ref = pair(store, docs_from(data, [{} for _ in range(3000)]), dim=32)
    force_index(store)
    q = data[:5]
    for g, w in zip(store.knn(q, 50, None, 0.8), ref.knn(q, 50, None, 0.8), strict=True):
        assert all(s >= 0.8 for _, s in g)
        assert {k for k, _ in g} <= {k for k, _ in w}


def test_hnsw_dead_rows_stay_out_and_rebuild() -> None:
    rng = np.random.default_rng(6)
    data = unit(rng.standard_normal((600, DIM)))
    store = FaissStore(index="hnsw", ef_search=600)
    store.REBUILD_MIN = 10  # type: ignore[misc]
    ref = pair(store, docs_from(data, [{"i": i} for i in range(600)]))
    force_index(store)
    gone = [f"d{i}" for i in range(0, 600, 3)]
    store.delete(gone)
    ref.delete(gone)
    assert store._dead == 200  # HNSW cannot remove: the labels stay, the selector hides them
    q = unit(rng.standard_normal((5, DIM)))
    assert [[k for k, _ in h] for h in store.knn(q, 30)] == [[k for k, _ in h] for h in ref.knn(q, 30)]
    more = [f"d{i}" for i in range(1, 600, 3)]
    store.delete(more)
    ref.delete(more)
    assert store._dead == 0 and store._index.ntotal == 200  # dead outnumbered live: rebuilt
    assert [[k for k, _ in h] for h in store.knn(q, 30)] == [[k for k, _ in h] for h in ref.knn(q, 30)]


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_compaction_keeps_labels_right(kind: str) -> None:
    rng = np.random.default_rng(7)
    data = unit(rng.standard_normal((5000, DIM)))
    store = FaissStore(index=kind, ef_search=256, m=16, ef_construction=40)
    ref = pair(store, docs_from(data, [{"i": i} for i in range(5000)]))
    gone = [f"d{i}" for i in range(3000)]
    store.delete(gone)
    ref.delete(gone)
    assert store.table.size == 2000  # the table compacted: keys were renumbered
    force_index(store)
    q = data[[3500, 4200, 4999]]
    got = store.knn(q, 5)
    assert [ident(store, g)[0] for g in got] == [("d3500", 0), ("d4200", 0), ("d4999", 0)]
    nf = store.compile_filter(Cond("ge", ("meta", "i"), 4000))
    assert [ident(store, g) for g in store.knn(q, 5, nf)][2][0] == ("d4999", 0)
    assert all(r.metadata["i"] >= 4000 for g in store.knn(q, 5, nf) for r in store.fetch([k for k, _ in g]))


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
def random_pair() -> tuple[FaissStore, FaissStore, MemoryStore]:
    rng = np.random.default_rng(8)
    metas = [random_meta(rng) for _ in range(120)]
    data = unit(rng.standard_normal((240, DIM)))
    docs = docs_from(data, metas, per_doc=2)
    flat, hnsw, ref = FaissStore(index="flat"), FaissStore(index="hnsw", ef_search=512), MemoryStore()
    for s in (flat, hnsw, ref):
        s.open(DIM)
        s.upsert(docs)
        s.delete(["d5", "d17"])
        s.upsert([DocRecord("d9", "r", {"n": 2, "s": "alpha"}, [UnitRecord(0, "r", 0, 1)], data[:1], seq=500)])
    force_index(hnsw)  # a 240-row graph searched at ef 512 is exhaustive: it must equal the exact answer
    return flat, hnsw, ref


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flt=FILTERS, qi=st.integers(0, 9))
def test_random_filters_same_rows_as_memory(random_pair: tuple[FaissStore, FaissStore, MemoryStore],
                                            flt: Filter, qi: int) -> None:
    flat, hnsw, ref = random_pair
    q = unit(np.random.default_rng(qi).standard_normal((1, DIM)))
    nf = ref.compile_filter(flt)
    want = ref.knn(q, 8, nf)[0]
    assert flat.scan(nf) == hnsw.scan(nf) == ref.scan(nf)
    assert [k for k, _ in flat.knn(q, 8, nf)[0]] == [k for k, _ in want]
    # HNSW is approximate when a filter admits most rows (it then searches the graph): it must fill
    # k and miss at most one of the exact top 8 (identical vectors tie, so either may come back)
    got = hnsw.knn(q, 8, nf)[0]
    assert len(got) == len(want)
    assert sum(abs(a - b) < 1e-6 for (_, a), (_, b) in zip(got, want)) >= len(want) - 1 or len(
        {k for k, _ in got} & {k for k, _ in want}) >= len(want) - 1


# ------------------------------------------------------------------------------------ persistence


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_reattach_reuses_the_saved_index(tmp_path: Path, kind: str) -> None:
    rng = np.random.default_rng(9)
    data = unit(rng.standard_normal((300, DIM)))
    metas = [{"g": i % 5} for i in range(100)]
    first = FaissStore(tmp_path, index=kind)
    first.open(DIM)
    first.upsert(docs_from(data, metas, per_doc=3))
    first.upsert(docs_from(data[:2], [{"g": 9}], per_doc=2, seq0=200, prefix="d"))  # replaces d0
    first.delete(["d7"])
    q = unit(rng.standard_normal((4, DIM)))
    nf = first.compile_filter(Cond("eq", ("meta", "g"), 2))
    force_index(first)
    before = [ident(first, h) for h in first.knn(q, 20)] + [ident(first, h) for h in first.knn(q, 5, nf)]
    first.close()
    files = {p.name for p in tmp_path.iterdir()}
    assert "nlql.sqlite" in files and ("index.faiss" in files) == (kind == "hnsw")

    second = FaissStore(tmp_path, index=kind)
    origin = "file" if kind == "hnsw" else "none"
    assert second.index_origin == origin and second.dim == DIM
    assert second.count() == 300 - 3 - 3 + 2
    force_index(second)
    after = [ident(second, h) for h in second.knn(q, 20)] + [ident(second, h) for h in second.knn(q, 5, nf)]
    assert after == before
    # it keeps working: new writes after re-attach get fresh labels
    second.upsert(docs_from(data[:1], [{"g": 2}], seq0=300, prefix="z"))
    assert ident(second, second.knn(data[:1], 1, nf)[0]) == [("z0", 0)]  # d0 holds it too, but g=9
    second.close()
    third = FaissStore(tmp_path, index=kind)
    assert third.index_origin == origin and third.count() == 297
    third.close()


def test_stale_or_damaged_index_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    data = unit(rng.standard_normal((50, DIM)))
    first = FaissStore(tmp_path, index="hnsw")
    first.open(DIM)
    first.upsert(docs_from(data, [{} for _ in range(50)]))
    first.flush()
    first.delete(["d1"])  # not flushed: like a process that died before close()
    second = FaissStore(tmp_path, index="hnsw")  # a second object while the first is still open
    assert second.index_origin == "built" and second.count() == 49
    assert ident(second, second.knn(data[2:3], 1)[0]) == [("d2", 0)]
    second.close()
    first.close()
    (tmp_path / "index.faiss").write_bytes(b"garbage")
    third = FaissStore(tmp_path, index="hnsw")
    assert third.index_origin == "built" and ident(third, third.knn(data[3:4], 1)[0]) == [("d3", 0)]
    third.close()
    fourth = FaissStore(tmp_path, index="hnsw", m=16)  # other build parameters: the file is not reused
    assert fourth.index_origin == "built" and fourth.count() == 49
    fourth.close()
    flat = FaissStore(tmp_path, index="flat")  # the same directory opened for exact search
    assert flat.index_origin == "none" and ident(flat, flat.knn(data[4:5], 1)[0]) == [("d4", 0)]
    flat.close()


def test_autosave_writes_after_every_change(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    data = unit(rng.standard_normal((10, DIM)))
    store = FaissStore(tmp_path, index="hnsw", autosave=True)
    store.open(DIM)
    store.upsert(docs_from(data, [{} for _ in range(10)]))
    store.delete(["d0"])
    again = FaissStore(tmp_path, index="hnsw")  # without close(): the saved index is current
    assert again.index_origin == "file" and again.count() == 9
    again.close()
    store.close()


def test_index_saved_by_a_writer_that_caught_up_is_reused(tmp_path: Path) -> None:
    """Two objects on one directory: the one that writes last first catches up with the other's
    committed write (the directory store is multi-process), so the index it saves is current."""
    rng = np.random.default_rng(12)
    data = unit(rng.standard_normal((12, DIM)))
    first = FaissStore(tmp_path, index="hnsw")
    first.open(DIM)
    first.upsert(docs_from(data[:10], [{} for _ in range(10)]))
    first.close()
    b, c = FaissStore(tmp_path, index="hnsw"), FaissStore(tmp_path, index="hnsw")
    assert b.index_origin == c.index_origin == "file"
    c.upsert(docs_from(data[10:11], [{}], seq0=50, prefix="d"))  # d0 again: same size, new version
    c.close()
    b.upsert(docs_from(data[11:12], [{}], seq0=60, prefix="z"))  # b catches up with c's d0 first
    b.close()
    d = FaissStore(tmp_path, index="hnsw")
    assert d.index_origin == "file" and d.count() == 11
    force_index(d)
    assert ident(d, d.knn(data[10:11], 1)[0]) == [("d0", 0)]
    d.close()
