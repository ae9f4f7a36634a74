"""The built-in store's fast paths answer exactly what its plain paths answer (issue 21).

* scores of a few rows carry the bits of one scan over the whole matrix (aligned BLAS blocks), and the
  two-thread scan the bits of the one-thread scan;
* the int8 scan + fp32 rescore returns the exact scan's top-k, keys *and* scores, on adversarial data
  (ties, near-ties, filters, k above the matches, thresholds), or falls back and says so;
* filter row sets (``==`` and ``IN`` looked up in a value index) select exactly the rows of the mask
  pass, for mixed types (1, "1", 1.0, True), missing keys, NOT, AND/OR, after writes, replacements,
  deletes and compaction, and in a reopened directory store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nlql import Engine, kernels
from nlql.embedders import HashEmbedder
from nlql.kernels import block_rows, matmul_t
from nlql.pushdown import Cond, FAnd, FOr, NativeFilter
from nlql.stores.base import DocRecord, UnitRecord
from nlql.stores.memory import MemoryStore, quant
from nlql.stores.memory.table import RowTable

needs_faiss = pytest.mark.skipif(not quant.available(), reason="the int8 scan needs faiss-cpu")

DIM = 48


def unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    return (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(np.float32)


def docs(vectors: np.ndarray, metas: list[dict[str, Any]] | None = None, start: int = 0,
         prefix: str = "d") -> list[DocRecord]:
    out = []
    for i, v in enumerate(vectors):
        meta = metas[i] if metas is not None else {}
        out.append(DocRecord(f"{prefix}{start + i}", f"s{start + i}", meta,
                             [UnitRecord(0, f"s{start + i}", 0, 2)], v[None, :].astype(np.float32), seq=start + i + 1))
    return out


def store_with(vectors: np.ndarray, metas: list[dict[str, Any]] | None = None, *, quantise: bool,
               path: Path | None = None) -> MemoryStore:
    s = MemoryStore(path)
    s.QUANTISE = quantise  # type: ignore[misc]
    s.QUANT_MIN_ROWS = 64  # type: ignore[misc]
    s.INT8_BACKGROUND = False  # type: ignore[misc]  # the first search builds the copy (see test_int8_background)
    s.table.ROWSET_MIN = 0  # type: ignore[misc]
    s.open(vectors.shape[1])
    for lo in range(0, len(vectors), 700):
        s.upsert(docs(vectors[lo:lo + 700], metas[lo:lo + 700] if metas else None, start=lo))
    return s


def nf(flt: Any) -> NativeFilter | None:
    return None if flt is None else NativeFilter(native=flt, text="")


# ------------------------------------------------------------------------------------ scan bits


@pytest.mark.parametrize("alone", [False, True], ids=["blocks", "rows alone"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 61, 1001, 4099])
def test_gathered_blocks_give_every_row_the_bits_of_the_full_scan(n: int, alone: bool) -> None:
    """Whole blocks, or (where this BLAS allows, as checked by rows_alone) the rows padded to a block; the
    full scan scores the last, partial block padded to a whole one too, so no row's bits come from BLAS's
    partial-block kernel."""
    rng = np.random.default_rng(n)
    m = unit(rng.standard_normal((n, 384)))
    q = unit(rng.standard_normal(384))
    full = kernels.full_scan(m, q)
    for _ in range(30):
        keys = np.unique(rng.integers(0, n, int(rng.integers(1, n + 1))))
        gather, pos = block_rows(keys, n, 384 if alone else None)
        assert len(gather) % kernels.BLOCK == 0 and gather.max() < n
        if alone and kernels.rows_alone(384):
            assert len(gather) < len(keys) + 2 * kernels.BLOCK  # the keys, not their blocks
        got = matmul_t(q[None, :], m[gather])[0][pos]
        assert np.array_equal(got.view(np.uint32), full[keys].view(np.uint32))


@pytest.mark.parametrize("count", [1, 2, 3, 5, 6, 7, 10, 13])
def test_rows_held_elsewhere_are_scored_with_the_bits_of_the_full_scan(
        count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """score_rows (pgvector's rescoring of the rows it fetched) gives each row, whatever the count,
    the unrounded bits a full scan gives it, the rows of its last, partial block included (the rounding
    to 6 decimals would hide a one-ulp difference but for the rare score on a rounding boundary)."""
    if not kernels.rows_alone(384):
        pytest.skip("this BLAS scores a row by its place in its block: rows held elsewhere cannot match")
    monkeypatch.setattr(kernels, "round_scores", lambda a: a)
    rng = np.random.default_rng(count)
    m = unit(rng.standard_normal((403, 384)))
    q = unit(rng.standard_normal(384))
    full = kernels.full_scan(m, q)
    for _ in range(20):
        keys = rng.permutation(403)[:count]
        assert np.array_equal(kernels.score_rows(q, m[keys]).view(np.uint32), full[keys].view(np.uint32))
        assert np.array_equal(kernels.block_products(q, m[keys])[0].view(np.uint32), full[keys].view(np.uint32))


def test_two_thread_scan_has_the_bits_of_the_one_thread_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    m = unit(rng.standard_normal((20_003, 384)))
    q = unit(rng.standard_normal(384))
    one = kernels.full_scan(m, q)
    monkeypatch.setattr(kernels, "PARALLEL_ROWS", 1000)
    two = kernels.full_scan(m, q)
    assert np.array_equal(one.view(np.uint32), two.view(np.uint32))


# ------------------------------------------------------------------------------ int8 + rescore


def adversarial(rng: np.random.Generator, n: int) -> np.ndarray:
    """Clusters, exact duplicates (ties) and near-duplicates a quantisation step apart (near-ties)."""
    centres = unit(rng.standard_normal((6, DIM)))
    x = centres[rng.integers(0, 6, n)] + rng.standard_normal((n, DIM)).astype(np.float32) * 0.15
    x[n // 4: n // 4 + 40] = x[n // 4]                         # 40 identical vectors
    base = x[n // 2]
    x[n // 2: n // 2 + 40] = base + rng.standard_normal((40, DIM)).astype(np.float32) * 1e-4
    return unit(x)


def queries(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    n = len(x)
    dim = x.shape[1]
    picks = [x[n // 4], x[n // 2], x[3], unit(rng.standard_normal(dim))]
    return unit(np.stack(picks + [unit(p + rng.standard_normal(dim).astype(np.float32) * 0.05) for p in picks]))


FILTERS = [None, Cond("eq", ("meta", "g"), 1), Cond("in", ("meta", "g"), (0, 2)),
           Cond("eq", ("meta", "rare"), True), Cond("ne", ("meta", "g"), 1), Cond("eq", ("meta", "g"), 99),
           Cond("ne", ("meta", "rare"), True)]  # 99% of the rows: the whole copy with the rest deselected


def same_as_exact(fast: MemoryStore, exact: MemoryStore, qs: np.ndarray, k: int, min_score: float | None,
                  windows: bool = False) -> set[str]:
    """Assert that every query under every filter gets the exact store's top k, keys and scores (with
    ``windows``, a fusion arm's window too when the copy gives one); the scans that answered."""
    scans = set()
    for flt in FILTERS:
        for q in qs:
            want = exact.knn(q[None, :], k, nf(flt), min_score)
            got = fast.knn(q[None, :], k, nf(flt), min_score)
            assert got == want, (flt, k, min_score)
            scans.add(fast.last_stats["scan"])
            window = fast.top_window(q, k, nf(flt), min_score) if windows else None
            if window is not None:  # the same rows and float32 scores
                assert [int(i) for i in window[0]] == [key for key, _ in want[0]]
                assert [float(s) for s in window[1]] == [s for _, s in want[0]]
    return scans


@needs_faiss
@pytest.mark.parametrize("k", [1, 10, 57, 5000])
@pytest.mark.parametrize("min_score", [None, 0.3, 0.97])
def test_int8_scan_returns_the_exact_top_k_and_scores(k: int, min_score: float | None) -> None:
    rng = np.random.default_rng(k)
    n = 3000
    x = adversarial(rng, n)
    metas = [{"g": i % 3, "rare": i % 97 == 0} for i in range(n)]
    exact = store_with(x, metas, quantise=False)
    fast = store_with(x, metas, quantise=True)
    scans = same_as_exact(fast, exact, queries(rng, x), k, min_score)
    if k < 60:
        assert "int8 + fp32 rescore" in scans
        assert fast.memory_stats()["int8_bytes_per_vector"] == DIM


@pytest.fixture
def split_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores of a few thousand rows with the split scan code, in shards of 512 rows (two threads)."""
    monkeypatch.setattr(quant, "SPLIT_MIN_ROWS", 64)
    monkeypatch.setattr(quant, "SHARD_ROWS", 512)
    monkeypatch.setattr(quant, "ESTIMATE_FIRST", 8)  # candidates estimated in rounds, the rest left out


def focused(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """Tight clusters (a focused query's top k stands clear of the other rows, so the split scan's
    bound can certify it), with ties and near-ties."""
    centres = unit(rng.standard_normal((40, dim)))
    x = centres[rng.integers(0, 40, n)] + rng.standard_normal((n, dim)).astype(np.float32) * (0.5 / dim**0.5)
    x[n // 4: n // 4 + 30] = x[n // 4]
    x[n // 2: n // 2 + 30] = x[n // 2] + rng.standard_normal((30, dim)).astype(np.float32) * 1e-4
    return unit(x)


@needs_faiss
@pytest.mark.parametrize("k", [1, 10, 57])
@pytest.mark.parametrize("min_score", [None, 0.5, 0.97])
def test_split_scan_returns_the_exact_top_k_and_scores(split_scan: None, k: int, min_score: float | None) -> None:
    rng = np.random.default_rng(100 + k)
    n, dim = 4000, 64
    x = focused(rng, n, dim)
    metas = [{"g": i % 3, "rare": i % 97 == 0} for i in range(n)]
    exact = store_with(x, metas, quantise=False)
    fast = store_with(x, metas, quantise=True)
    scans = same_as_exact(fast, exact, queries(rng, x), k, min_score, windows=True)
    assert "split int8 + fp32 rescore" in scans  # the copy keeps a split code
    # one byte per dimension, plus the split code: the stronger half of the basis (31 of 64 dims here)
    # and the other half's norm, a byte each, in whole 16s for Faiss's SIMD kernel
    assert fast.memory_stats()["int8_bytes_per_vector"] == dim + 32


@needs_faiss
def test_a_split_scan_that_does_not_certify_hands_over_to_the_full_int8_scan(split_scan: None) -> None:
    rng = np.random.default_rng(5)
    x = unit(rng.standard_normal((4000, 64)))  # no clusters: a top 50 sits among near-equal scores
    exact = store_with(x, quantise=False)
    fast = store_with(x, quantise=True)
    seen = []
    for q in queries(rng, x):
        assert fast.knn(q[None, :], 50) == exact.knn(q[None, :], 50)
        seen.append(fast.last_stats["scan"])
    assert "int8 + fp32 rescore" in seen  # the full scan answered where the split one missed
    # and the next searches of that width skip the split scan (SPLIT_SKIP of them)
    miss = seen.index("int8 + fp32 rescore")
    for q in queries(rng, x)[:3]:
        fast.knn(q[None, :], 50)
        seen.append(fast.last_stats["scan"])
    after = seen[miss + 1: miss + 1 + quant.SPLIT_SKIP]
    assert after and not any(scan.startswith("split") for scan in after), seen


@needs_faiss
def test_split_scan_follows_a_copy_that_grows_into_it_and_writes(split_scan: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quant, "SPLIT_MIN_ROWS", 2500)
    rng = np.random.default_rng(12)
    x = focused(rng, 4500, 64)
    exact = store_with(x[:2000], quantise=False)
    fast = store_with(x[:2000], quantise=True)
    qs = queries(rng, x)

    def same() -> set[str]:
        scans = set()
        for q in qs:
            for flt in (None, Cond("eq", ("meta", "v"), 2)):
                assert fast.knn(q[None, :], 10, nf(flt)) == exact.knn(q[None, :], 10, nf(flt))
                scans.add(fast.last_stats["scan"])
        return scans

    scans = same()
    assert any("int8" in scan for scan in scans) and not any(scan.startswith("split") for scan in scans)
    below = fast.memory_stats()["int8_bytes_per_vector"]  # one byte a dimension: no split code yet
    for s in (exact, fast):
        s.upsert(docs(x[2000:], [{"v": 2}] * 2500, start=2000))       # the copy grows past the split size
        s.upsert(docs(unit(-x[:200]), [{"v": 2}] * 200, start=0))      # replaced documents
    assert "split int8 + fp32 rescore" in same()  # grown into the split scan, over every row
    assert below == 64 and fast.memory_stats()["int8_bytes_per_vector"] == 64 + 32
    for s in (exact, fast):
        s.delete([f"d{i}" for i in range(300, 1500)])
    same()


@needs_faiss
@pytest.mark.parametrize("split", [False, True])
def test_rows_outside_the_range_the_quantiser_learnt_are_found(monkeypatch: pytest.MonkeyPatch, split: bool) -> None:
    """Rows written after the copy learnt its ranges, with values outside them (large errors: the
    outliers), are found when they are the best match."""
    if split:
        monkeypatch.setattr(quant, "SPLIT_MIN_ROWS", 64)
        monkeypatch.setattr(quant, "SHARD_ROWS", 512)
    rng = np.random.default_rng(21)
    x = focused(rng, 3000, 64)
    exact = store_with(x, quantise=False)
    fast = store_with(x, quantise=True)
    qs = queries(rng, x)
    assert fast.knn(qs[:1], 10) == exact.knn(qs[:1], 10)  # the copy learns its ranges here
    spikes = unit(np.eye(64, dtype=np.float32)[:8] + 0.05 * rng.standard_normal((8, 64)).astype(np.float32))
    for s in (exact, fast):
        s.upsert(docs(spikes, start=3000))
    # a spike's int8 code is clipped to the learnt range: its estimate is far below its score
    mixed = unit(0.55 * x[rng.integers(0, 3000, 8)] + 0.83 * spikes)
    for q in list(spikes) + list(mixed) + list(qs):
        want = exact.knn(q[None, :], 10)
        assert fast.knn(q[None, :], 10) == want
        assert fast.last_stats["scan"] != "fp32"


@needs_faiss
def test_an_uncertified_int8_scan_falls_back_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    x = adversarial(rng, 2000)
    exact = store_with(x, quantise=False)
    fast = store_with(x, quantise=True)
    monkeypatch.setattr(quant, "MARGIN", 5.0)  # no candidate depth can beat such a bound
    q = queries(rng, x)[2]
    assert fast.knn(q[None, :], 10) == exact.knn(q[None, :], 10)
    assert fast.last_stats["scan"] == "fp32"
    assert "not certified" in fast.last_stats["fallback"]


@needs_faiss
def test_int8_copy_follows_writes_replacements_deletes_and_compaction() -> None:
    rng = np.random.default_rng(11)
    x = adversarial(rng, 4500)
    exact = store_with(x, quantise=False)
    fast = store_with(x, quantise=True)
    qs = queries(rng, x)

    def same() -> None:
        for q in qs:
            assert fast.knn(q[None, :], 10) == exact.knn(q[None, :], 10)
            assert fast.knn(q[None, :], 10, nf(Cond("eq", ("meta", "v"), 2))) == exact.knn(
                q[None, :], 10, nf(Cond("eq", ("meta", "v"), 2)))

    same()
    more = adversarial(rng, 500)
    for s in (exact, fast):
        s.upsert(docs(more, [{"v": 2}] * 500, start=4500))          # appended rows
        s.upsert(docs(unit(-x[:200]), [{"v": 2}] * 200, start=0))    # replaced documents
    same()
    for s in (exact, fast):
        s.delete([f"d{i}" for i in range(200, 4000)])               # enough to compact
    assert fast.table.size < 5200
    same()


@needs_faiss
def test_engine_answers_through_the_int8_scan_identically() -> None:
    texts = [f"Report {i} on {'solar wind grid battery'.split()[i % 4]} costs in city {i % 17}." for i in range(3000)]
    metas = [{"status": "published" if i % 2 else "draft", "n": i % 5} for i in range(3000)]
    hits = {}
    for quantise in (False, True):
        e = Engine(embedder=HashEmbedder(dim=64), store="memory", warm_up=False)
        e.store.QUANTISE = quantise  # type: ignore[attr-defined]
        e.store.QUANT_MIN_ROWS = 100  # type: ignore[attr-defined]
        e.store.INT8_BACKGROUND = False  # type: ignore[attr-defined]
        e.add_texts(texts, ids=[str(i) for i in range(3000)], metadatas=metas)
        got = e.search('SELECT SENTENCE LET rel = SIMILARITY(content, "solar costs in the city") '
                       'WHERE rel >= 0.1 AND meta.status == "published" ORDER BY rel DESC LIMIT 10')
        hits[quantise] = ([(h.id, h.scores["rel"]) for h in got], got.stats["store"]["scan"])
        e.close()
    assert hits[True][0] == hits[False][0] and len(hits[True][0]) == 10
    assert hits[True][1] == "int8 + fp32 rescore" and hits[False][1] == "fp32"


# ---------------------------------------------------------------------------------- row sets


MIXED = [1, "1", 1.0, True, False, "x", "X", None, 2, "2.0", 0, -0.0, "", [1], {"a": 1}]


def mixed_meta(i: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"k": MIXED[i % len(MIXED)], "t": i % 7, "nest": {"z": MIXED[(i * 5) % len(MIXED)]}}
    if i % 11 == 0:
        del meta["k"]  # missing key
    return meta


LEAF_FILTERS = [
    Cond("eq", ("meta", "k"), 1), Cond("eq", ("meta", "k"), "1"), Cond("eq", ("meta", "k"), 1.0),
    Cond("eq", ("meta", "k"), True), Cond("eq", ("meta", "k"), False), Cond("eq", ("meta", "k"), "x"),
    Cond("eq", ("meta", "k"), 0), Cond("eq", ("meta", "k"), "2"), Cond("eq", ("meta", "k"), ""),
    Cond("eq", ("meta", "k"), None), Cond("eq", ("meta", "missing"), 1), Cond("eq", ("meta", "nest", "z"), 1),
    Cond("in", ("meta", "k"), (1, "x", True)), Cond("in", ("meta", "k"), ()), Cond("in", ("meta", "t"), (2, "3")),
    Cond("ne", ("meta", "k"), 1), Cond("not_in", ("meta", "k"), (1, "x")),
    FAnd((Cond("eq", ("meta", "t"), 3), Cond("gt", ("meta", "k"), 0))),
    FAnd((Cond("eq", ("meta", "t"), 3), Cond("in", ("meta", "k"), (1, 2)), Cond("contains", ("content",), "1"))),
    FOr((Cond("eq", ("meta", "t"), 3), Cond("eq", ("meta", "k"), "x"))),
    FOr((Cond("eq", ("meta", "t"), 3), Cond("lt", ("meta", "k"), 1))),
    FAnd((Cond("eq", ("meta", "t"), 1), FOr((Cond("eq", ("doc_id",), "d8"), Cond("eq", ("meta", "k"), 2))))),
]


def table_with(n: int) -> RowTable:
    t = RowTable()
    t.ROWSET_MIN = 0  # type: ignore[misc]
    t.add(docs(np.zeros((n, 2), np.float32), [mixed_meta(i) for i in range(n)]))
    return t


def assert_rowsets_match(t: RowTable) -> None:
    for flt in LEAF_FILTERS:
        got, how = t.matching(flt)
        want = np.flatnonzero(t.mask(flt))
        assert np.array_equal(got, want), flt
        is_index = isinstance(flt, Cond) and flt.op in ("eq", "in") or isinstance(flt, (FAnd, FOr)) and flt != LEAF_FILTERS[-2]
        if is_index:
            assert how == "rowset", flt


def test_row_sets_equal_the_mask_pass_for_mixed_types_missing_keys_and_negations() -> None:
    t = table_with(600)
    assert_rowsets_match(t)
    assert len(t.matching(Cond("eq", ("meta", "k"), 1))[0]) > 0
    assert t.matching(Cond("ne", ("meta", "k"), 1))[1] == "mask"


def test_row_sets_follow_appends_replacements_deletes_and_compaction() -> None:
    t = table_with(600)
    assert_rowsets_match(t)  # builds the indexes
    t.add(docs(np.zeros((300, 2), np.float32), [mixed_meta(i + 3) for i in range(300)], start=600))
    assert_rowsets_match(t)
    t.add(docs(np.zeros((100, 2), np.float32), [mixed_meta(i + 1) for i in range(100)], start=0))  # replace
    assert_rowsets_match(t)
    t.remove([f"d{i}" for i in range(100, 700)])
    assert_rowsets_match(t)
    t.compact()
    assert_rowsets_match(t)


def test_directory_store_row_sets_and_int8_after_reopen(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    x = adversarial(rng, 1500)
    metas = [mixed_meta(i) for i in range(1500)]
    exact = store_with(x, metas, quantise=False)
    s = store_with(x, metas, quantise=True, path=tmp_path)
    s.delete(["d3", "d4"])
    exact.delete(["d3", "d4"])
    s.close()
    again = MemoryStore(tmp_path)
    again.QUANTISE = quant.available()  # type: ignore[misc]
    again.QUANT_MIN_ROWS = 64  # type: ignore[misc]
    again.INT8_BACKGROUND = False  # type: ignore[misc]
    again.table.ROWSET_MIN = 0  # type: ignore[misc]
    def named(store: MemoryStore, lists: list[list[tuple[Any, float]]]) -> list[tuple[str, float]]:
        return [(r.doc_id, score) for r, (_, score) in zip(store.fetch([k for k, _ in lists[0]]), lists[0])]

    for flt in [None, *LEAF_FILTERS[:6], LEAF_FILTERS[12]]:
        for q in queries(rng, x)[:4]:
            got = named(again, again.knn(q[None, :], 10, nf(flt)))
            assert got == named(exact, exact.knn(q[None, :], 10, nf(flt))), flt
        if flt is not None:
            assert again.last_stats["filter"] == "rowset"
    again.close()


def test_count_is_kept_not_recounted() -> None:
    t = table_with(50)
    assert len(t) == 50
    t.remove(["d1", "d2", "nope"])
    assert len(t) == 48 == int(t.alive.sum())
    t.add(docs(np.zeros((3, 2), np.float32), start=5))  # d5..d7 replaced
    assert len(t) == 48 == int(t.alive.sum())
    t.compact()
    assert len(t) == 48 == int(t.alive.sum())


def test_builtin_speed_bench_runs_at_a_tiny_size(tmp_path: Path) -> None:
    import json
    import sys

    root = Path(__file__).resolve().parents[2]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from bench import builtin_speed

    out = tmp_path / "b.json"
    builtin_speed.main(["--size", "3000", "--repeat", "1", "--centres", "30", "--out", str(out)])
    run = json.loads(out.read_text(encoding="utf-8"))["run"]
    assert set(run["identical_top10_and_scores"].values()) == {"8/8"}
    assert run["rows"]["tag"] > 0 and run["ingest_s"] > 0
