#!/usr/bin/env python3
"""The built-in store against the physical limit: plain numpy ``M @ q`` + ``argpartition`` (issue 7).

At 10k, 100k and 1M one-sentence documents (HashEmbedder, dim 384, float32) it times, on the very matrix the
store holds (``engine.store.matrix``):

* the floor: ``M @ q`` + ``argpartition`` with numpy's default BLAS threads, and with one BLAS thread
  (``nlql.kernels.blas_one_thread``; on a busy 2-core machine a multi-threaded gemv waits for a
  time slice, so the single-thread figure is often the lower one). The floor is the smaller of the two;
* a filtered floor: the same on a prebuilt sub-matrix of the ``status == "published"`` rows (~25%),
  which is what a store that caches a filter's sub-matrix can reach;
* the store's own top-10 (``store.knn``), and end-to-end ``engine.search`` (query embedding memoised)
  for SIMILARITY alone and for the canonical thresholded + filtered query;
* recall@10 of the store against the exact numpy answer (it must be 1.0: the store is exact).

The store's int8 scan + exact rescore (issue 21) is measured against the same floors by bench/builtin_speed.py.

    python bench/floor.py [--sizes 10000 100000 1000000] [--repeat 30]

Writes bench/results/floor.json.
"""

from __future__ import annotations

import argparse
import functools
import gc
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
    interleaved_runs,
    log,
    machine_info,
    stamp_end,
    steady,
    write_json,
)
from bench.corpus import synthetic_corpus  # noqa: E402

QUERY_TEXT = "renewable energy policy"
SIMILARITY_ONLY = f'SELECT SENTENCE LET rel = SIMILARITY(content, "{QUERY_TEXT}") ORDER BY rel DESC LIMIT 10'
CANONICAL = (f'SELECT SENTENCE LET rel = SIMILARITY(content, "{QUERY_TEXT}") '
             'WHERE rel >= 0.2 AND meta.status == "published" ORDER BY rel DESC LIMIT 10')
K = 10


def top_k(mat: np.ndarray, q: np.ndarray, k: int = K) -> np.ndarray:
    """The floor: one matrix-vector product and a partial sort (unordered top-k row indices)."""
    s = mat @ q
    return np.argpartition(-s, k - 1)[:k]


def run(n: int, repeat: int) -> dict[str, Any]:
    from nlql import Engine
    from nlql.embedders import HashEmbedder
    from nlql.kernels import blas_one_thread as _blas_one_thread

    t = time.perf_counter()
    texts, metas = synthetic_corpus(n, seed=42)
    emb = QueryMemo(HashEmbedder(dim=384))
    engine = Engine(embedder=emb, store="memory", warm_up=False)
    engine.add_texts(texts, ids=[str(i) for i in range(n)], metadatas=metas, batch_size=8192)
    build_s = time.perf_counter() - t
    steady(engine)
    published = np.array([m["status"] == "published" for m in metas])
    del texts, metas
    gc.collect()

    mat = engine.store.matrix  # type: ignore[attr-defined]
    assert mat.shape == (n, 384) and mat.dtype == np.float32
    qv = emb.embed([QUERY_TEXT])[0]
    sub = np.ascontiguousarray(mat[published])

    def floor_default() -> None:
        top_k(mat, qv)

    def floor_one() -> None:
        with _blas_one_thread():
            top_k(mat, qv)

    def floor_filtered() -> None:
        with _blas_one_thread():
            top_k(sub, qv)

    def store_knn() -> None:
        engine.store.knn(qv[None, :], K)  # type: ignore[attr-defined]

    out: dict[str, Any] = {"n": n, "dim": 384, "dtype": "float32", "matrix_mb": round(mat.nbytes / 2**20, 1),
                           "build_s": round(build_s, 1), "filtered_rows": int(published.sum())}
    # timed round-robin, so a burst of load from another process is shared by all of them
    runs = interleaved_runs({
        "numpy_default": floor_default,
        "numpy_one_thread": floor_one,
        "numpy_filtered_one_thread": floor_filtered,
        "store_knn": store_knn,
        "engine_similarity_only": functools.partial(engine.search, SIMILARITY_ONLY),
        "engine_canonical": functools.partial(engine.search, CANONICAL),
    }, repeat)
    ms = {k: statistics.median(v) for k, v in runs.items()}
    out["ms"] = {k: round(v, 3) for k, v in ms.items()}
    floor = min(ms["numpy_default"], ms["numpy_one_thread"])
    out["floor_ms"] = round(floor, 3)
    out["read_gb_per_s"] = round(mat.nbytes / (floor / 1000) / 1e9, 1)
    out["store_knn_over_floor"] = round(ms["store_knn"] / floor, 2)
    out["engine_similarity_over_floor"] = round(ms["engine_similarity_only"] / floor, 2)
    out["engine_canonical_over_filtered_floor"] = round(ms["engine_canonical"] / ms["numpy_filtered_one_thread"], 2)

    # exactness: the store's top-10 against numpy's (ties at the 10th score count as either)
    scores = mat @ qv
    kth = np.partition(-scores, K - 1)[K - 1] * -1
    exact_ok = set(np.flatnonzero(scores >= kth).tolist())
    got = [key for key, _ in engine.store.knn(qv[None, :], K)[0]]  # type: ignore[attr-defined]
    got_rows = [int(r.doc_id) for r in engine.store.fetch(got)]  # type: ignore[attr-defined]
    out["recall_at_10_vs_numpy"] = round(sum(1 for i in got_rows if i in exact_ok) / K, 3)
    hits = engine.search(SIMILARITY_ONLY)
    out["engine_recall_at_10_vs_numpy"] = round(sum(1 for h in hits if int(h.doc_id) in exact_ok) / K, 3)
    engine.close()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--out", type=Path, default=RESULTS / "floor.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    results: dict[str, Any] = {
        "title": "Built-in store vs the numpy floor (exact fp32 top-10, dim 384)",
        "machine": machine_info(),
        "method": {
            "floor": "numpy M @ q + argpartition on engine.store.matrix; default BLAS threads and one thread "
                     "(threadpoolctl); floor = the smaller",
            "filtered_floor": "the same on a prebuilt sub-matrix of status == 'published' rows, one thread",
            "engine": "engine.search end to end, query embedding memoised",
            "timing": "all six measured round-robin (interleaved), median of the runs after one warm-up round",
            "queries": {"similarity_only": SIMILARITY_ONLY, "canonical": CANONICAL},
            "variants": "store.knn is the store's own path (int8 scan + exact fp32 rescore from 16,384 rows "
                        "when faiss is installed)",
        },
        "runs": [],
    }
    for n in args.sizes:
        log(f"[floor] n={n}")
        r = run(n, args.repeat if n <= 100_000 else max(5, args.repeat // 2))
        results["runs"].append(r)
        print(f"n={n:>8}  floor {r['floor_ms']:.2f} ms (default {r['ms']['numpy_default']:.2f}, one thread "
              f"{r['ms']['numpy_one_thread']:.2f}; {r['read_gb_per_s']} GB/s)  store.knn "
              f"{r['ms']['store_knn']:.2f} ms (x{r['store_knn_over_floor']})  search "
              f"{r['ms']['engine_similarity_only']:.2f} ms  canonical {r['ms']['engine_canonical']:.2f} ms "
              f"(filtered floor {r['ms']['numpy_filtered_one_thread']:.2f})  recall@10 {r['recall_at_10_vs_numpy']}")
        gc.collect()
    stamp_end(results, started)
    write_json(args.out, results)
    log(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
