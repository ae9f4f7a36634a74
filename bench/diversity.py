#!/usr/bin/env python3
"""Benchmark DISTINCT BY (issue 13): top-10 with ``DISTINCT BY doc_id`` against the same query without it.

Corpus: ``n`` sentences (default 100k) in documents of ``--per-doc`` sentences (default 10), built-in
store, vectors given by a lookup embedder (no model, nothing downloaded). Two vector layouts:

- ``clustered``: every document has a random unit centroid and its sentences lie near it
  (cos ≈ 0.9 to the centroid), and each query lies near one document's centroid, so the plain top-10 is
  that one document and DISTINCT BY has to look past it (the case the clause is for);
- ``random``: independent random unit vectors (the top-10 rarely shares a document).

For each layout, ``--repeat`` (≥ 20) interleaved rounds of both queries (a, b, a, b, …), each round on the
next of 20 query vectors; medians, their ratio (target ≤ 1.5×), and the recall rounds DISTINCT BY took.

    python bench/diversity.py [--n 100000] [--per-doc 10] [--repeat 30] [--out bench/results/diversity.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, interleaved_runs, log, machine_info, stamp_end, steady, write_json  # noqa: E402
from nlql import Engine  # noqa: E402

DIM = 384
PLAIN = 'SELECT SENTENCE LET rel = SIMILARITY(content, $q) ORDER BY rel DESC LIMIT 10'
DISTINCT = 'SELECT SENTENCE LET rel = SIMILARITY(content, $q) DISTINCT BY doc_id ORDER BY rel DESC LIMIT 10'
N_QUERIES = 20


class KeyedEmbedder:
    """Vectors by text: sentence ``"Row <i> of the corpus."`` is row i, query ``"query <j>"`` is query j."""

    name = "bench-lookup"

    def __init__(self, rows: np.ndarray, queries: np.ndarray) -> None:
        self.rows, self.queries = rows, queries
        self.dim = rows.shape[1]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            words = t.split()
            out[i] = self.queries[int(words[1])] if words[0] == "query" else self.rows[int(words[1])]
        return out


def _unit(m: np.ndarray) -> np.ndarray:
    return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)


def vectors(layout: str, n: int, per_doc: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """(row vectors, query vectors) for a layout."""
    rng = np.random.default_rng(seed)
    if layout == "random":
        return _unit(rng.standard_normal((n, DIM))), _unit(rng.standard_normal((N_QUERIES, DIM)))
    docs = -(-n // per_doc)
    centroids = _unit(rng.standard_normal((docs, DIM)))
    noise = 0.5 / np.sqrt(DIM)  # |noise| ≈ 0.5: cos to the centroid ≈ 0.9
    rows = _unit(np.repeat(centroids, per_doc, axis=0)[:n] + noise * rng.standard_normal((n, DIM)))
    targets = rng.choice(docs, N_QUERIES, replace=False)
    queries = _unit(centroids[targets] + noise * rng.standard_normal((N_QUERIES, DIM)))
    return rows, queries


def build(layout: str, n: int, per_doc: int) -> Engine:
    rows, queries = vectors(layout, n, per_doc)
    engine = Engine(embedder=KeyedEmbedder(rows, queries), store="memory", warm_up=False)
    texts, ids = [], []
    for d, start in enumerate(range(0, n, per_doc)):
        texts.append(" ".join(f"Row {i} of the corpus." for i in range(start, min(n, start + per_doc))))
        ids.append(f"doc{d}")
    engine.add_texts(texts, ids=ids, batch_size=2048)
    steady(engine)
    assert len(engine) == n, (len(engine), n)
    return engine


def measure(engine: Engine, repeat: int) -> dict[str, Any]:
    state = {"plain": 0, "distinct": 0}
    rounds: list[int] = []
    distinct_docs: list[int] = []

    def run(name: str, query: str) -> Any:
        def fn() -> None:
            j = state[name] % N_QUERIES
            state[name] += 1
            hits = engine.search(query, params={"q": f"query {j}"})
            assert len(hits) == 10
            if name == "distinct":
                rounds.append(int(hits.stats["distinct"]["rounds"]))
                distinct_docs.append(len({h.doc_id for h in hits}))
        return fn

    plain_docs = [len({h.doc_id for h in engine.search(PLAIN, params={"q": f"query {j}"})}) for j in range(N_QUERIES)]
    runs = interleaved_runs({"plain": run("plain", PLAIN), "distinct": run("distinct", DISTINCT)}, repeat, warmup=2)
    assert all(d == 10 for d in distinct_docs)
    plain_ms, distinct_ms = statistics.median(runs["plain"]), statistics.median(runs["distinct"])
    return {
        "plain_ms": round(plain_ms, 3), "distinct_ms": round(distinct_ms, 3),
        "ratio": round(distinct_ms / plain_ms, 3),
        "plain_runs_ms": [round(x, 3) for x in runs["plain"]],
        "distinct_runs_ms": [round(x, 3) for x in runs["distinct"]],
        "distinct_rounds_median": statistics.median(rounds), "distinct_rounds_max": max(rounds),
        "plain_top10_distinct_docs_median": statistics.median(plain_docs),
        "explain": str(engine.explain(DISTINCT, params={"q": "query 0"})),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--per-doc", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--layouts", default="clustered,random")
    ap.add_argument("--out", type=Path, default=RESULTS / "diversity.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    results: dict[str, Any] = {"benchmark": "diversity", "n": args.n, "per_doc": args.per_doc,
                               "repeat": args.repeat, "queries": {"plain": PLAIN, "distinct": DISTINCT},
                               "target_ratio": 1.5, "machine": machine_info(), "layouts": {}}
    for layout in args.layouts.split(","):
        t = time.perf_counter()
        engine = build(layout, args.n, args.per_doc)
        log(f"{layout}: ingested {args.n:,} sentences in {time.perf_counter() - t:.1f} s")
        r = measure(engine, args.repeat)
        engine.close()
        results["layouts"][layout] = r
        print(f"{layout:>9}: plain {r['plain_ms']:.2f} ms · DISTINCT BY doc_id {r['distinct_ms']:.2f} ms · "
              f"ratio {r['ratio']:.2f}× (target ≤ 1.5×) · rounds median {r['distinct_rounds_median']:g} "
              f"max {r['distinct_rounds_max']} · plain top-10 spans {r['plain_top10_distinct_docs_median']:g} docs")
    stamp_end(results, started)
    if args.out:
        write_json(args.out, results)
        log(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
