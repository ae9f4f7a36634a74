#!/usr/bin/env python3
"""Benchmark the engine on the built-in store (issue 3).

At 10k and 100k one-sentence documents (dim 384, hash embedder, fixed seed): ingest rate; the canonical
thresholded query (excluding query embedding); the same without threshold; metadata-only; a CONTAINS
query; and the numpy floor (matrix @ q + argpartition on the same matrix), all in one run.

    python bench/engine.py [--sizes 10000 100000] [--repeat 30] [--out bench/results/engine.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import steady  # noqa: E402
from bench.corpus import synthetic_corpus  # noqa: E402
from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402


class CachedQueryEmbedder:
    """Wraps the hash embedder and memoises query texts, so query timings exclude embedding."""

    def __init__(self, dim: int) -> None:
        self.inner = HashEmbedder(dim=dim)
        self.dim = dim
        self.cache: dict[str, np.ndarray] = {}

    def embed(self, texts):
        texts = list(texts)
        if len(texts) <= 4 and all(t in self.cache for t in texts):
            return np.stack([self.cache[t] for t in texts])
        out = self.inner.embed(texts)
        if len(texts) <= 4:
            for t, v in zip(texts, out):
                self.cache[t] = v
        return out


QUERIES = {
    "canonical": 'SELECT SENTENCE LET rel = SIMILARITY(content, "renewable energy policy") '
                 'WHERE rel >= 0.2 AND meta.status == "published" ORDER BY rel DESC LIMIT 10',
    "no_threshold": 'SELECT SENTENCE LET rel = SIMILARITY(content, "renewable energy policy") '
                    'WHERE meta.status == "published" ORDER BY rel DESC LIMIT 10',
    "similarity_only": 'SELECT SENTENCE LET rel = SIMILARITY(content, "renewable energy policy") '
                       'ORDER BY rel DESC LIMIT 10',
    "metadata_only": 'SELECT SENTENCE WHERE meta.year == 2021 AND meta.topic == "energy" LIMIT 10',
    "contains": 'SELECT SENTENCE WHERE content CONTAINS "solar" LIMIT 10',
}


def median_ms(fn, repeat: int) -> float:
    fn()  # warm-up (also fills caches a repeated query would hit)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def run(n: int, repeat: int) -> dict:
    texts, metas = synthetic_corpus(n, seed=42)
    emb = CachedQueryEmbedder(384)
    engine = Engine(embedder=emb, warm_up=False)
    t = time.perf_counter()
    engine.add_texts(texts, ids=[str(i) for i in range(n)], metadatas=metas, batch_size=4096)
    ingest_s = time.perf_counter() - t
    steady(engine)
    t = time.perf_counter()
    emb.inner.embed(texts)
    embed_s = time.perf_counter() - t
    out: dict = {"n": n, "ingest_s": round(ingest_s, 3), "ingest_docs_per_s": round(n / ingest_s),
                 "embedder_only_s": round(embed_s, 3), "queries_ms": {}}
    for name, q in QUERIES.items():
        hits = engine.search(q)
        out["queries_ms"][name] = round(median_ms(lambda q=q: engine.search(q), repeat), 3)
        out.setdefault("rows", {})[name] = len(hits)
    mat = engine.store.matrix
    qv = emb.embed(["renewable energy policy"])[0]

    def floor() -> None:
        s = mat @ qv
        np.argpartition(-s, 10)[:10]

    from nlql.kernels import blas_one_thread as _blas_one_thread

    def floor_one_thread() -> None:
        with _blas_one_thread():
            floor()

    # numpy's default (all BLAS threads) and one BLAS thread; the floor is the faster of the two
    out["numpy_default_ms"] = round(median_ms(floor, repeat), 3)
    out["numpy_one_thread_ms"] = round(median_ms(floor_one_thread, repeat), 3)
    out["numpy_floor_ms"] = min(out["numpy_default_ms"], out["numpy_one_thread_ms"])
    out["canonical_over_floor"] = round(out["queries_ms"]["canonical"] / out["numpy_floor_ms"], 2)
    return out


def model_overhead(n: int) -> dict:
    """Ingest overhead with the real MiniLM model.

    The engine's own work (splitting, batching, storing) is timed by ingesting the same texts with an
    embedder that looks the model's vectors up, so the ratio does not depend on how busy the machine
    was while the model ran; ``add_texts_s`` (real model end to end) is reported alongside.
    """
    from nlql.embedders import SentenceTransformerEmbedder

    texts, metas = synthetic_corpus(n, seed=7)
    emb = SentenceTransformerEmbedder()
    emb.embed(["warm up the model"])
    t = time.perf_counter()
    vectors = emb.embed(texts)
    embed_s = time.perf_counter() - t
    lookup = {tx: v for tx, v in zip(texts, vectors)}

    class Lookup:
        dim = emb.dim

        def embed(self, batch):  # noqa: ANN001 - bench helper
            return np.stack([lookup[tx] for tx in batch])

    engine = Engine(embedder=Lookup(), warm_up=False)
    t = time.perf_counter()
    engine.add_texts(texts, metadatas=metas, batch_size=256)
    engine_s = time.perf_counter() - t
    real = Engine(embedder=emb, warm_up=False)
    t = time.perf_counter()
    real.add_texts(texts, metadatas=metas, batch_size=256)
    ingest_s = time.perf_counter() - t
    return {"n": n, "embedder_alone_s": round(embed_s, 3), "engine_without_embedding_s": round(engine_s, 3),
            "add_texts_s": round(ingest_s, 3), "engine_overhead_pct": round(100 * engine_s / embed_s, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=int, default=0,
                    help="also measure ingest overhead with the real MiniLM model on this many texts")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "engine.json"))
    args = ap.parse_args()
    results = {"machine": {"python": platform.python_version(), "cpu_count": __import__("os").cpu_count(),
                           "platform": platform.platform()},
               "runs": []}
    for n in args.sizes:
        r = run(n, args.repeat)
        results["runs"].append(r)
        print(f"n={n:>7}  ingest {r['ingest_s']:.2f}s ({r['ingest_docs_per_s']}/s, embedder alone "
              f"{r['embedder_only_s']:.2f}s)  floor {r['numpy_floor_ms']:.2f} ms")
        for name, ms in r["queries_ms"].items():
            print(f"    {name:<16} {ms:8.3f} ms  rows={r['rows'][name]}")
        print(f"    canonical / floor = {r['canonical_over_floor']}x")
    if args.model:
        m = model_overhead(args.model)
        results["model_overhead"] = m
        print(f"MiniLM, {m['n']} texts: embedder alone {m['embedder_alone_s']}s, engine without "
              f"embedding {m['engine_without_embedding_s']}s ({m['engine_overhead_pct']}% of the "
              f"embedder), add_texts end to end {m['add_texts_s']}s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
