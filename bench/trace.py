#!/usr/bin/env python3
"""Where the time goes in one hybrid query: a per-stage trace at 100k sentences (issue 7).

Runs ``SIMILARITY + BM25 fused by RRF`` on the synthetic corpus (bench/corpus.py, seed 42, HashEmbedder
dim 384; the query vector is memoised after the warm-up so the "embed" stage is the engine's own
bookkeeping) and prints the engine's own per-stage timings (``Hits.stats["timings_ms"]``: embed, recall,
filter, fuse, order, rerank, materialize), medians over several runs with the warm-up excluded, plus
what is outside the stages (parse, check, plan, Python glue) as wall time minus their sum. Each arm is
also timed alone, and one MiniLM query embedding is timed separately (what "embed" costs with the real
model; its model load is excluded).

Stores: ``--store`` takes anything ``Engine(store=…)`` does. The built-in store ("memory") is the default.
Hook for PostgreSQL/pgvector: pass ``--store postgresql://…`` or set ``NLQL_BENCH_PG_DSN``; every store
listed by :func:`stores_to_trace` is traced in the same run and gets its own block in trace.json.

    python bench/trace.py [--n 100000] [--repeat 5] [--store memory] [--no-minilm]

Writes bench/results/trace.json.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, QueryMemo, log, machine_info, median_ms, stamp_end, steady, write_json  # noqa: E402
from bench.corpus import synthetic_corpus  # noqa: E402

QUERY_TEXT = "renewable energy policy"
HYBRID = ("SELECT SENTENCE LET s = SIMILARITY(content, $q), k = BM25(content, $q), f = RRF(s, k, k => 60) "
          "ORDER BY f DESC LIMIT 10")
ARMS = {
    "similarity arm alone": "SELECT SENTENCE LET s = SIMILARITY(content, $q) ORDER BY s DESC LIMIT 10",
    "bm25 arm alone": "SELECT SENTENCE LET k = BM25(content, $q) ORDER BY k DESC LIMIT 10",
}
STAGES = ("embed", "recall", "filter", "fuse", "order", "rerank", "materialize")
STAGE_NOTES = {
    "embed": "query text -> vector (memoised hash embedder here)",
    "recall": "store: similarity scores of the candidate rows",
    "filter": "candidate rows, BM25 scores of the arm, residual predicates",
    "fuse": "RRF ranks of both arms and the fused score",
    "order": "ORDER BY f DESC + LIMIT",
    "rerank": "(no reranker)",
    "materialize": "hits for the returned rows",
}


def stores_to_trace(cli_store: str) -> list[str]:
    """The stores to trace: the one asked for, plus PostgreSQL when ``NLQL_BENCH_PG_DSN`` is set.

    This is the hook for the pgvector store: ``Engine(store="postgresql://…")`` opens it, and the trace
    is store-agnostic (it reads the engine's stage timings), so no other change is needed here.
    """
    stores = [cli_store]
    dsn = os.environ.get("NLQL_BENCH_PG_DSN")
    if dsn and dsn not in stores:
        stores.append(dsn)
    return stores


def _label(store: str) -> str:
    return "postgresql (pgvector)" if store.startswith(("postgresql://", "postgres://")) else store


def trace_store(store: str, n: int, repeat: int) -> dict[str, Any]:
    """Ingest the corpus into ``store`` and trace the hybrid query."""
    from nlql import Engine
    from nlql.embedders import HashEmbedder

    texts, metas = synthetic_corpus(n, seed=42)
    engine = Engine(embedder=QueryMemo(HashEmbedder(dim=384)), store=store, warm_up=False)
    t = time.perf_counter()
    engine.add_texts(texts, ids=[str(i) for i in range(n)], metadatas=metas, batch_size=8192)
    ingest_s = time.perf_counter() - t
    steady(engine)
    params = {"q": QUERY_TEXT}
    plan = engine.explain(HYBRID, params=params).to_dict()

    engine.search(HYBRID, params=params)  # warm-up, excluded
    walls: list[float] = []
    per_stage: dict[str, list[float]] = {s: [] for s in STAGES}
    counts: dict[str, Any] = {}
    for _ in range(max(1, repeat)):
        t = time.perf_counter()
        hits = engine.search(HYBRID, params=params)
        walls.append((time.perf_counter() - t) * 1000)
        timings = hits.stats.get("timings_ms", {})
        for s in STAGES:
            per_stage[s].append(float(timings.get(s, 0.0)))
        counts = {k: v for k, v in hits.stats.items() if k != "timings_ms"}
    stages = {s: round(statistics.median(v), 3) for s, v in per_stage.items()}
    wall = statistics.median(walls)
    outside = max(0.0, wall - sum(stages.values()))
    arms = {name: round(median_ms(functools.partial(engine.search, q, params=params), repeat), 3)
            for name, q in ARMS.items()}
    engine.close()
    return {
        "store": _label(store), "n": n, "ingest_s": round(ingest_s, 2), "repeat": repeat,
        "query": HYBRID, "params": params,
        "recall_strategy": plan.get("recall"), "fusion": plan.get("fusion"),
        "stages_ms": stages, "outside_stages_ms": round(outside, 3), "wall_ms": round(wall, 3),
        "wall_runs_ms": [round(w, 3) for w in walls], "arms_alone_ms": arms, "counts": counts,
    }


def minilm_query_embed_ms(repeat: int) -> dict[str, float] | None:
    """Median time to embed one short query with all-MiniLM-L6-v2 on this CPU (model load excluded),
    with torch's default threads and with one thread (on a busy 2-core machine they differ a lot)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch

        from nlql.embedders import SentenceTransformerEmbedder

        emb = SentenceTransformerEmbedder()
        emb.embed(["warm up the model"])
    except Exception as exc:  # noqa: BLE001 - optional extra line in the trace
        log(f"[trace] MiniLM not available: {exc}")
        return None
    threads = torch.get_num_threads()
    out = {f"default_{threads}_threads": round(median_ms(lambda: emb.embed([QUERY_TEXT]), max(5, repeat)), 3)}
    torch.set_num_threads(1)
    try:
        out["one_thread"] = round(median_ms(lambda: emb.embed([QUERY_TEXT]), max(5, repeat), warmup=3), 3)
    finally:
        torch.set_num_threads(threads)
    return out


def print_trace(r: dict[str, Any], minilm_ms: dict[str, float] | None) -> None:
    wall = r["wall_ms"] or 1.0
    print(f"hybrid query @ {r['n']:,} sentences, store={r['store']} "
          f"(median of {r['repeat']} runs, warm-up excluded)")
    print(f"  {r['query']}")
    print(f"  {'stage':<22}{'ms':>10}{'share':>8}  what")
    for s in STAGES:
        ms = r["stages_ms"][s]
        if ms == 0 and s == "rerank":
            continue
        print(f"  {s:<22}{ms:>10.3f}{ms / wall:>8.1%}  {STAGE_NOTES[s]}")
    print(f"  {'outside stages':<22}{r['outside_stages_ms']:>10.3f}{r['outside_stages_ms'] / wall:>8.1%}  "
          "parse, check, plan, glue")
    print(f"  {'total (wall)':<22}{r['wall_ms']:>10.3f}{1:>8.0%}")
    for name, ms in r["arms_alone_ms"].items():
        print(f"  {name:<22}{ms:>10.3f}")
    for name, ms in (minilm_ms or {}).items():
        print(f"  {'MiniLM embed, ' + name:<22}{ms:>10.3f}  one query, measured separately")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--store", default="memory", help="memory | a directory | postgresql://… (see the hook)")
    ap.add_argument("--no-minilm", action="store_true", help="skip the separate MiniLM query-embedding timing")
    ap.add_argument("--out", type=Path, default=RESULTS / "trace.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    traces = []
    for store in stores_to_trace(args.store):
        log(f"[trace] {_label(store)} n={args.n}")
        traces.append(trace_store(store, args.n, args.repeat))
    minilm = None if args.no_minilm else minilm_query_embed_ms(args.repeat)
    for r in traces:
        print_trace(r, minilm)
    out = {"title": f"Per-stage trace of one hybrid query at {args.n:,} sentences", "machine": machine_info(),
           "traces": traces, "minilm_query_embed_ms": minilm}
    stamp_end(out, started)
    write_json(args.out, out)
    log(f"wrote {args.out}")
    return out


if __name__ == "__main__":
    main()
