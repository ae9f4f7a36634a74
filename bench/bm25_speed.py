#!/usr/bin/env python3
"""BM25 alone and RRF(SIMILARITY, BM25) on the built-in store against their floors (issue 21).

On the synthetic corpus (``bench/corpus.py``, one sentence per document, HashEmbedder dim 384, query
embedding memoised so nobody pays for it) it times, round-robin in one run (medians of ``--repeat``
interleaved repetitions, after a warm-up round; wall time, and the process's CPU time beside it):

* ``nlql_bm25``: ``engine.search`` of ``BM25(content, q)`` top-10 (parse, plan, fast path, rows);
* ``index_top_k``: the engine's BM25 index alone (``BM25Index.top_k(q, 10)``, analyzer included);
* ``floor_bm25``: the sparse reference — a scipy CSC matrix of precomputed BM25 weights (documents ×
  terms, built once outside the timing), the query's columns times their idf, and ``argpartition``;
* ``nlql_rrf``: ``engine.search`` of ``RRF(sem, kw)`` top-10 (windows of 100 per arm, the default);
* ``nlql_rrf_floor``: the same query with ``WHERE kw > 0`` (as ``bench/pg_speed.py`` writes it): each
  arm ranks the rows passing the floor only (the rows matching a term, from the sparse matches; the
  similarity window among them through the int8 copy, certified and rescored in fp32), checked first
  against the row-by-row page (its time once is ``rrf_floor_row_by_row_ms``);
* ``floor_rrf``: numpy ``M @ q`` + ``argpartition`` for the similarity window, the sparse BM25 window,
  and RRF of the two windows in numpy (the same formula), top-10;
* ``floor_matvec``: ``M @ q`` + ``argpartition`` alone (what any exact similarity arm pays);
* ``sim_window`` / ``bm25_window``: each arm's window of the RRF query alone (the store's ``top_window``,
  the engine's sparse BM25 matches and their top 100), so ``nlql_rrf`` minus both is what the engine
  spends around them (plan, fusion, the page's rows and scores).

Before timing it checks that the engine's BM25 top-10 is the reference's (same rows, scores equal to
1e-9), so the figures compare the same answer.

    python bench/bm25_speed.py [--size 100000] [--repeat 25]

Writes bench/results/bm25_speed.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    RESULTS,
    QueryMemo,
    SparseBM25,
    interleaved_cpu_runs,
    log,
    machine_info,
    row_by_row,
    stamp_end,
    steady,
    write_json,
)
from bench.corpus import synthetic_corpus  # noqa: E402

TEXT = "renewable energy policy"
BM25_Q = f'SELECT SENTENCE LET kw = BM25(content, "{TEXT}") ORDER BY kw DESC LIMIT 10'
RRF_Q = (f'SELECT SENTENCE LET sem = SIMILARITY(content, "{TEXT}"), kw = BM25(content, "{TEXT}"), '
         "f = RRF(sem, kw) ORDER BY f DESC LIMIT 10")
RRF_FLOOR_Q = RRF_Q.replace(" ORDER BY", " WHERE kw > 0 ORDER BY")
K, WINDOW, RRF_K = 10, 100, 60


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best scores, best first (ties by index)."""
    k = min(k, int(scores.size))
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    kth = np.partition(scores, scores.size - k)[scores.size - k]
    idx = np.flatnonzero(scores >= kth)  # every row tied with the k-th, so ties break on the index
    return idx[np.lexsort((idx, -scores[idx]))][:k]


def run(n: int, repeat: int) -> dict[str, Any]:
    from nlql import Engine
    from nlql.embedders import HashEmbedder
    from nlql.kernels import blas_one_thread as _blas_one_thread

    t = time.perf_counter()
    texts, metas = synthetic_corpus(n, seed=42)
    emb = QueryMemo(HashEmbedder(dim=384))
    engine = Engine(embedder=emb, store="memory", warm_up=False)
    engine.add_texts(texts, ids=[str(i) for i in range(n)], metadatas=metas, batch_size=8192)
    ingest_s = time.perf_counter() - t
    steady(engine)
    t = time.perf_counter()
    engine.search(BM25_Q)  # the engine builds its BM25 index on first use
    first_bm25_s = time.perf_counter() - t
    index = engine._bm25._index  # noqa: SLF001 - the bench reads the engine's own index

    # The sparse reference: the same terms (the engine's analyzer), weights baked in once.
    sparse = SparseBM25(texts, index.analyzer)
    vectors = engine.store.matrix  # type: ignore[attr-defined]
    qv = emb.embed([TEXT])[0]

    def sparse_bm25(ordered: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(matching rows, their scores): a sparse query row (idf weights) times the weight matrix."""
        return sparse.scores(TEXT, ordered)

    # Same answer first: the engine's BM25 page is the reference's.
    ref_rows, ref_scores = sparse_bm25(ordered=True)
    ref = np.zeros(n)
    ref[ref_rows] = ref_scores
    ref_top = _top(np.round(ref, 9), K)  # equal scores summed in another order differ in the last bits
    got = engine.search(BM25_Q)
    if [int(x.doc_id) for x in got] != ref_top.tolist():
        raise AssertionError(f"BM25 page differs: {[(x.doc_id, x.scores) for x in got]} vs {list(zip(ref_top.tolist(), ref[ref_top]))}")
    assert np.allclose([x.scores["kw"] for x in got], ref[ref_top], rtol=0, atol=1e-9)

    def floor_bm25() -> None:
        rows_, scores_ = sparse_bm25()
        rows_[_top(scores_, K)]

    def floor_matvec() -> None:
        with _blas_one_thread():
            s = vectors @ qv
        np.argpartition(-s, K - 1)[:K]

    def floor_rrf() -> None:
        with _blas_one_thread():
            sim = vectors @ qv
        kw_rows, kw_scores = sparse_bm25()
        sem_w = _top(sim, WINDOW)
        kw_w = kw_rows[_top(kw_scores, WINDOW)]
        fused = np.zeros(n)
        fused[sem_w] += 1.0 / (RRF_K + np.arange(1, sem_w.size + 1))
        fused[kw_w] += 1.0 / (RRF_K + np.arange(1, kw_w.size + 1))
        cand = np.union1d(sem_w, kw_w)
        cand[_top(fused[cand], K)]


    def rrf_fp32() -> Any:
        """The same query with each SIMILARITY window from the fp32 full scan and the fusion over vectors
        as long as the table (the fast path before issue 21's int8 and windows-only pages): the
        before/after of one run. The store's two seams (TablePaths.windows, .window_page) decline."""
        store = engine.store
        store.windows = lambda *a, **k: None  # type: ignore[method-assign]
        store.window_page = lambda *a, **k: None  # type: ignore[method-assign]
        try:
            return engine.search(RRF_Q)
        finally:
            del store.windows, store.window_page  # (back to MatrixStore's methods)

    fast_page, fp32_page = engine.search(RRF_Q), rrf_fp32()
    if [(h.id, h.scores) for h in fast_page] != [(h.id, h.scores) for h in fp32_page]:
        raise AssertionError("RRF page through the int8 windows differs from the fp32 scan's")
    if fast_page.stats.get("fused_page") is None or fp32_page.stats.get("fused_page") is None:
        raise AssertionError(f"the RRF query left its fast path: {fast_page.stats}, {fp32_page.stats}")
    windows = fast_page.stats.get("store", {})
    floor_page = engine.search(RRF_FLOOR_Q)
    if floor_page.stats.get("fast_path") != "fusion" or floor_page.stats.get("floor_rows") is None:
        raise AssertionError(f"the RRF query with WHERE kw > 0 left its fast path: {floor_page.stats}")
    # the reference: the same query row by row
    with row_by_row(engine):
        t = time.perf_counter()
        slow_floor = engine.search(RRF_FLOOR_Q)
        floor_row_by_row_ms = (time.perf_counter() - t) * 1000
    if slow_floor.stats.get("fast_path") is not None:
        raise AssertionError(f"the reference page took a fast path: {slow_floor.stats}")
    if [(h.id, h.scores) for h in floor_page] != [(h.id, h.scores) for h in slow_floor]:
        raise AssertionError("RRF page with WHERE kw > 0 differs from the row-by-row page")
    store = engine.store
    qn = (qv / np.linalg.norm(qv)).astype(np.float32)
    assert engine.search(BM25_Q).stats.get("fast_path") == "bm25"

    from nlql.stores.memory.fused_page import _scanned

    int8_window = store.top_window(qn, WINDOW, None, None) is not None

    def sim_window() -> None:
        """The SIMILARITY arm's window alone, as the engine asks for it (depth 100, no filter): through
        the int8 copy, or the fp32 scan where the copy does not apply (a small corpus)."""
        if store.top_window(qn, WINDOW, None, None) is None:
            _scanned(store, store.table, qn[None, :], None, WINDOW, None)

    def bm25_window() -> None:
        """The BM25 arm's window alone: the engine's sparse matches over the table and their top 100."""
        from nlql.stores.memory.fastpath import top_rows

        engine._bm25.begin_search()  # noqa: SLF001 - what every search does first
        rows, vals = engine._bm25.table_matches(TEXT, store.table)  # noqa: SLF001
        rows[top_rows(vals, rows, store.table, WINDOW, ties=False)]

    fns = {
        "nlql_bm25": lambda: engine.search(BM25_Q),
        "index_top_k": lambda: index.top_k(TEXT, K),
        "floor_bm25": floor_bm25,
        "nlql_rrf": lambda: engine.search(RRF_Q),
        "nlql_rrf_fp32": rrf_fp32,
        "nlql_rrf_floor": lambda: engine.search(RRF_FLOOR_Q),
        "sim_window": sim_window,
        "bm25_window": bm25_window,
        "floor_rrf": floor_rrf,
        "floor_matvec": floor_matvec,
    }
    runs, cpu = interleaved_cpu_runs(fns, repeat, warmup=2)
    med = {name: round(statistics.median(v), 3) for name, v in runs.items()}
    cpu_med = {name: round(statistics.median(v), 3) for name, v in cpu.items()}
    what = {
        "nlql_bm25": "engine.search, BM25 top-10",
        "index_top_k": "the engine's BM25 index alone, top-10",
        "floor_bm25": "scipy: sparse query row × precomputed weights, top-10",
        "nlql_rrf": "engine.search, RRF(SIMILARITY, BM25) top-10 (windows of 100; the similarity window "
                    "from the int8 copy, certified and rescored in fp32)",
        "nlql_rrf_fp32": "the same with the similarity window from the fp32 full scan and the fusion fast "
                         "path over table-long vectors (before; same page)",
        "nlql_rrf_floor": "engine.search, the RRF query with WHERE kw > 0 (each arm ranks the rows "
                          "passing the floor; the similarity window among them from the int8 copy, "
                          "certified and rescored in fp32)",
        "sim_window": "the store's SIMILARITY window alone (top_window, depth 100, int8 + exact rescore)",
        "bm25_window": "the BM25 window alone (the engine's sparse matches, top 100)",
        "floor_rrf": "numpy M @ q window + sparse BM25 window + RRF in numpy, top-10",
        "floor_matvec": "numpy M @ q + argpartition alone (1 BLAS thread)",
    }
    out: dict[str, Any] = {
        "size": n,
        "repeat": repeat,
        "ingest_s": round(ingest_s, 2),
        "first_bm25_query_s": round(first_bm25_s, 2),
        "postings": int(sparse.mat.nnz),
        "bm25_vs_sparse_floor": round(med["nlql_bm25"] / med["floor_bm25"], 2),
        "index_vs_sparse_floor": round(med["index_top_k"] / med["floor_bm25"], 2),
        "rrf_vs_floor": round(med["nlql_rrf"] / med["floor_rrf"], 2),
        "rrf_int8_vs_fp32": round(med["nlql_rrf"] / med["nlql_rrf_fp32"], 2),
        "rrf_pages_identical": True,
        "rrf_floor_rows": int(floor_page.stats["floor_rows"]),
        "rrf_floor_row_by_row_ms": round(floor_row_by_row_ms, 1),
        "rrf_floor_page_identical_to_row_by_row": True,
        "rrf_similarity_window": windows,
        "sim_window_int8": int8_window,
        "rrf_minus_matvec_ms": round(med["nlql_rrf"] - med["floor_matvec"], 3),
        "rrf_minus_windows_ms": round(med["nlql_rrf"] - med["sim_window"] - med["bm25_window"], 3),
        "rrf_minus_windows_cpu_ms": round(cpu_med["nlql_rrf"] - cpu_med["sim_window"] - cpu_med["bm25_window"], 3),
        "queries": {name: {"median_ms": med[name], "cpu_median_ms": cpu_med[name], "what": what[name]}
                    for name in fns},
    }
    log(f"n={n}: " + ", ".join(f"{k} {v} ms (cpu {cpu_med[k]})" for k, v in med.items()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=25)
    ap.add_argument("--out", type=Path, default=RESULTS / "bm25_speed.json")
    args = ap.parse_args()
    started = time.perf_counter()
    results: dict[str, Any] = {
        "title": "BM25 and RRF(SIMILARITY, BM25) against their floors",
        "description": ("Medians of interleaved repetitions in one run; floors: a scipy sparse product of "
                        "precomputed BM25 weights, numpy M @ q; embedding excluded."),
        "machine": machine_info(),
    }
    results.update(run(args.size, args.repeat))
    stamp_end(results, started)
    write_json(args.out, results)
    print(f"{'query':<16}{'ms':>10}{'cpu ms':>10}  what")
    for k, v in results["queries"].items():
        print(f"{k:<16}{v['median_ms']:>10.3f}{v['cpu_median_ms']:>10.3f}  {v['what']}")
    for k in ("bm25_vs_sparse_floor", "index_vs_sparse_floor", "rrf_vs_floor", "rrf_minus_matvec_ms",
              "rrf_minus_windows_ms", "rrf_minus_windows_cpu_ms"):
        print(f"{k:<26}{results[k]:>10}")


if __name__ == "__main__":
    main()
