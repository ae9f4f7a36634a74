#!/usr/bin/env python3
"""``engine.search_many`` against a loop of ``engine.search`` (SPEC §11, issue 31).

The built-in store with the default model (all-MiniLM-L6-v2, offline), the demo corpus; 100 short
queries (three to five words) through one query text, ``SELECT SENTENCE LET s = SIMILARITY(content, $q)
[WHERE …] LIMIT 10``. Each round uses new query texts (a round number in each), so neither side reads
a plan or a vector of an earlier round; the two sides run interleaved, round by round, so load from
other processes lands on both. Reported: median wall and CPU seconds per 100 queries, queries per
second, and the ratio (goal: search_many ≥ 3× the loop's throughput). Both sides' hits are compared
(the same ids in the same order; scores within 1e-5, the embedder's own batch arithmetic).

    python bench/search_many.py [--docs 522] [--rounds 5] [--queries 100]

Writes bench/results/search_many.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, log, machine_info, stamp_end, write_json  # noqa: E402

TOPICS = ["json", "csv files", "regular expressions", "dates and times", "sockets", "threads", "a zip archive",
          "random numbers", "file paths", "environment variables", "logging", "unit tests", "email messages",
          "http requests", "sqlite", "decimal numbers", "command line arguments", "temporary files",
          "hashing", "text wrapping"]
VERBS = ["parse", "read", "write", "format", "compare"]
QUERIES = {
    "plain": "SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 10",
    "filtered": "SELECT SENTENCE LET s = SIMILARITY(content, $q) WHERE s >= 0.2 LIMIT 10",
}


def queries(n: int, round_no: int) -> list[str]:
    return [f"{VERBS[i % len(VERBS)]} {TOPICS[i % len(TOPICS)]} {round_no * n + i}" for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=522)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--queries", type=int, default=100)
    args = ap.parse_args()
    started = time.perf_counter()
    from nlql import Engine
    from nlql.data import __file__ as data_init

    rows = [json.loads(line) for line in open(Path(data_init).parent / "demo.jsonl", encoding="utf-8")]
    rows = rows[: args.docs]
    engine = Engine()
    t = time.perf_counter()
    engine.add_texts([r["text"] for r in rows], ids=[r["id"] for r in rows], metadatas=[r.get("metadata") for r in rows])
    log(f"ingest: {len(engine)} sentences in {time.perf_counter() - t:.1f} s")
    results: dict = {"title": "search_many against a loop of search",
                     "description": "100 short queries through one query text on the built-in store with the "
                                    "default model; medians of interleaved rounds (goal: 3x the loop's throughput)",
                     "machine": machine_info(), "store": "memory", "embedder": type(engine.embedder).__name__,
                     "sentences": len(engine), "queries_per_round": args.queries, "rounds": args.rounds,
                     "cases": {}}
    for name, query in QUERIES.items():
        engine.search(query, {"q": "warm up"})
        engine.search_many(query, [{"q": "warm up"}, {"q": "warm up twice"}])
        wall: dict[str, list[float]] = {"loop": [], "search_many": []}
        cpu: dict[str, list[float]] = {"loop": [], "search_many": []}
        mismatches = 0
        for r in range(args.rounds):
            for side in ("loop", "search_many") if r % 2 == 0 else ("search_many", "loop"):
                texts = queries(args.queries, 2 * r + (side == "loop"))
                params = [{"q": q} for q in texts]
                c, t = time.process_time(), time.perf_counter()
                if side == "loop":
                    got = [engine.search(query, p) for p in params]
                else:
                    got = engine.search_many(query, params)
                wall[side].append(time.perf_counter() - t)
                cpu[side].append(time.process_time() - c)
                if side == "search_many" and r == 0:  # the same hits as a loop over the same texts
                    for p, hits in zip(params, got, strict=True):
                        ref = engine.search(query, p)
                        same = [h.id for h in hits] == [h.id for h in ref] and all(
                            abs(a.scores["s"] - b.scores["s"]) <= 1e-5 for a, b in zip(hits, ref, strict=True))
                        mismatches += not same
        med = {k: statistics.median(v) for k, v in wall.items()}
        med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
        case = {
            "query": query,
            "wall_s": {k: round(v, 4) for k, v in med.items()},
            "cpu_s": {k: round(v, 4) for k, v in med_cpu.items()},
            "queries_per_s": {k: round(args.queries / v, 1) for k, v in med.items()},
            "speedup_wall": round(med["loop"] / med["search_many"], 2),
            "speedup_cpu": round(med_cpu["loop"] / med_cpu["search_many"], 2),
            "runs_wall_s": {k: [round(x, 4) for x in v] for k, v in wall.items()},
            "mismatched_queries": mismatches,
        }
        results["cases"][name] = case
        print(f"{name:9s} loop {med['loop']:.3f} s ({case['queries_per_s']['loop']} q/s)  "
              f"search_many {med['search_many']:.3f} s ({case['queries_per_s']['search_many']} q/s)  "
              f"x{case['speedup_wall']} wall, x{case['speedup_cpu']} cpu; mismatches {mismatches}")
    stamp_end(results, started)
    write_json(RESULTS / "search_many.json", results)


if __name__ == "__main__":
    main()
