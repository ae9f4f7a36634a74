"""Build time, query latency and recall@10 of the Faiss and hnswlib stores against the built-in store.

Run: ``.venv/bin/python bench/ann_stores.py [--n 100000] [--dim 384] [--queries 200]``

Vectors are clustered (random centres plus noise, unit length), because random vectors make HNSW look
far worse than it is on embeddings (FIELD-NOTES). Filters are on a metadata bucket independent of the
clusters: none, 10% (``bucket < 10``) and 1% (``bucket == 7``). Each store row reports the path its
recall took (``last_stats``); the ``ann!`` rows force the index to show what the cost rule chooses
between. ``warm ms`` is the median with the filter's caches (mask, sub-matrix, selector) built, ``cold
ms`` the median of a first query after clearing them. The raw ``IndexFlatIP`` row (one OpenMP thread,
``IDSelectorBitmap`` for filters) is what ``FaissStore(index="flat")`` would cost if it searched faiss.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from nlql.pushdown import Cond
from nlql.stores.ann import AnnStore
from nlql.stores.base import DocRecord, UnitRecord
from nlql.stores.faiss import FaissStore
from nlql.stores.hnswlib import HnswlibStore
from nlql.stores.memory import MemoryStore


def clustered(n: int, dim: int, centres: int, noise: float, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors around random centres; ``noise`` is the noise norm relative to the centre's."""
    c = rng.standard_normal((centres, dim)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    x = c[rng.integers(0, centres, n)] + rng.standard_normal((n, dim)).astype(np.float32) * (noise / dim**0.5)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def documents(vectors: np.ndarray) -> list[DocRecord]:
    return [
        DocRecord(f"d{i}", f"s{i}", {"bucket": i % 100}, [UnitRecord(0, f"s{i}", 0, len(f"s{i}"))],
                  vectors[i : i + 1], seq=i + 1)
        for i in range(len(vectors))
    ]


def median_ms(fn: Callable[[np.ndarray], Any], queries: np.ndarray) -> float:
    fn(queries[:1])  # warm caches (masks, selectors, sub-matrices)
    times = []
    for q in queries:
        t = time.perf_counter()
        fn(q[None, :])
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def cold_ms(store: MemoryStore, fn: Callable[[np.ndarray], Any], queries: np.ndarray, runs: int = 5) -> float:
    times = []
    for q in queries[:runs]:
        store._sub_cache.clear()
        if isinstance(store, AnnStore):
            store._sel_cache.clear()
        t = time.perf_counter()
        fn(q[None, :])
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def raw_flat(data: np.ndarray, queries: np.ndarray, masks: dict[str, np.ndarray | None]) -> None:
    faiss: Any = importlib.import_module("faiss")
    index = faiss.IndexFlatIP(data.shape[1])
    index.add(data)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    for name, mask in masks.items():
        params = None
        if mask is not None:
            params = faiss.SearchParameters(sel=faiss.IDSelectorBitmap(np.packbits(mask, bitorder="little")))
        ms = median_ms(partial(index.search, k=10, params=params), queries)
        print(f"{'':<22}{'':>9}  {name:<6}{'raw':>7}{ms:>11.2f}{'':>11}{1.0:>11.3f}")
    faiss.omp_set_num_threads(threads)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--centres", type=int, default=1000)
    ap.add_argument("--noise", type=float, default=1.5)
    ap.add_argument("--stores", default="raw,flat,faiss-hnsw,hnswlib",
                    help="comma list of: raw (IndexFlatIP alone), flat, faiss-hnsw, hnswlib")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    allv = clustered(args.n + args.queries, args.dim, args.centres, args.noise, rng)
    data, queries = allv[: args.n], allv[args.n :]
    docs = documents(data)
    k = 10
    filters = {
        "none": None,
        "10%": Cond("lt", ("meta", "bucket"), 10),
        "1%": Cond("eq", ("meta", "bucket"), 7),
    }

    ref = MemoryStore()
    ref.open(args.dim)
    t = time.perf_counter()
    ref.upsert(docs)
    print(f"n={args.n} dim={args.dim} centres={args.centres} noise={args.noise} k={k} queries={args.queries}")
    print(f"{'store':<22}{'build s':>9}  {'filter':<6}{'path':>7}{'warm ms':>11}{'cold ms':>11}{'recall@10':>11}")
    print(f"{'memory (numpy exact)':<22}{time.perf_counter() - t:>9.1f}")
    truth: dict[str, list[set[int]]] = {}
    for name, cond in filters.items():
        nf = None if cond is None else ref.compile_filter(cond)
        truth[name] = [{key for key, _ in hits} for hits in ref.knn(queries, k, nf)]
        search = partial(ref.knn, k=k, flt=nf)
        ms = median_ms(search, queries)
        cold = cold_ms(ref, search, queries)
        print(f"{'':<22}{'':>9}  {name:<6}{'exact':>7}{ms:>11.2f}{cold:>11.2f}{1.0:>11.3f}")
    chosen = set(args.stores.split(","))
    if "raw" in chosen:
        print("faiss IndexFlatIP raw")
        raw_flat(data, queries, {name: None if c is None else ref.mask(ref.compile_filter(c))
                                 for name, c in filters.items()})

    stores: list[tuple[str, str, Callable[[], AnnStore]]] = [
        ("flat", "faiss flat", lambda: FaissStore(index="flat")),
        ("faiss-hnsw", "faiss hnsw m32 ef128", lambda: FaissStore(index="hnsw")),
        ("hnswlib", "hnswlib m16 ef128", lambda: HnswlibStore()),
    ]
    for key, label, make in stores:
        if key not in chosen:
            continue
        store = make()
        store.open(args.dim)
        t = time.perf_counter()
        store.upsert(docs)
        build = time.perf_counter() - t
        print(f"{label:<22}{build:>9.1f}")
        modes: list[tuple[str, int, int]] = [("auto", store.EXACT_ROWS, store.EXACT_PER_K)]
        if store.index_origin != "none":
            modes.append(("ann", 0, 0))  # forced: always the index
        for mode, rows, per_k in modes:
            store.EXACT_ROWS, store.EXACT_PER_K = rows, per_k  # type: ignore[misc]
            for name, cond in filters.items():
                nf = None if cond is None else store.compile_filter(cond)
                got = store.knn(queries, k, nf)
                path = store.last_stats["path"] if mode == "auto" else "ann!"
                recall = np.mean([len({key for key, _ in g} & t_) / max(1, len(t_))
                                  for g, t_ in zip(got, truth[name], strict=True)])
                search = partial(store.knn, k=k, flt=nf)
                ms = median_ms(search, queries)
                cold = cold_ms(store, search, queries)
                rounds = store.last_stats["rounds"]
                print(f"{'':<22}{'':>9}  {name:<6}{path:>7}{ms:>11.2f}{cold:>11.2f}{recall:>11.3f}"
                      f"   rounds={rounds}")
        store.close()


if __name__ == "__main__":
    main()
