"""Qdrant Edge ingest at --size sentences: this tree against an earlier revision, in one run.

The corpus is ``bench/engines.py``'s (one 9-word sentence per document, three metadata keys). Each side
runs in a fresh process with its own tree first on ``sys.path`` (the earlier revision checked out with
``git worktree``), ingests into ``"qdrant"`` (Qdrant Edge in a temporary directory) with
``add_texts(batch_size=2048)``, and reports wall and CPU seconds (every thread) and the pages of a few
queries (top-10, filtered top-10, BM25, RRF), which must be the same on both sides. The sides
alternate round by round, so load from other processes lands on both; figures are medians, with the
load average around each run.

    python -m bench.qdrant_ingest_before_after --size 100000 --before c55411c --rounds 2

Writes bench/results/qdrant_ingest_before_after.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS, ROOT, earlier_tree, log, machine_info, stamp_end, tree_env, write_json  # noqa: E402

CHILD = r"""
import json, os, sys, time
from bench import engines as B
n = int(sys.argv[1])
texts, ids, metas = B.corpus(n)
from bench.common import QueryMemo
from nlql import Engine
from nlql.embedders import HashEmbedder
e = Engine(embedder=QueryMemo(HashEmbedder(dim=B.DIM)), store="qdrant", warm_up=False)
load = os.getloadavg()[0]
t, c = time.perf_counter(), time.process_time()
e.add_texts(texts, ids=ids, metadatas=metas, batch_size=2048)
wall, cpu = time.perf_counter() - t, time.process_time() - c
queries = {"top10": B.q(), "filtered": B.q('meta.tag == "t3"'), "bm25": B.BM25, "rrf": B.RRF}
pages = {k: [[h.id, {s: round(v, 6) for s, v in h.scores.items()}] for h in e.search(q)] for k, q in queries.items()}
count = e.store.count()
e.close()
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "count": count, "load_before": load,
                  "load_after": os.getloadavg()[0], "pages": pages}))
"""


def child(tree: Path, size: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(size)], env=tree_env(tree), cwd=str(tree),
                         capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--before", default="HEAD~1", help="the earlier revision")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    started = time.perf_counter()
    results: dict[str, Any] = {"size": args.size, "machine": machine_info(), "loadavg_start": os.getloadavg()}
    with earlier_tree(args.before) as (short, tree, _):
        trees = {f"before ({short})": tree, "after": ROOT}
        got: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for r in range(args.rounds):
            for name, where in trees.items():
                got[name].append(child(where, args.size))
                last = got[name][-1]
                log(f"round {r + 1} {name}: {last['wall_s']:.1f} s wall, {last['cpu_s']:.1f} s CPU "
                    f"(load {last['load_before']:.1f} -> {last['load_after']:.1f})")
    out: dict[str, Any] = {}
    for name, runs in got.items():
        out[name] = {
            "wall_s": [round(x["wall_s"], 1) for x in runs],
            "cpu_s": [round(x["cpu_s"], 1) for x in runs],
            "median_wall_s": round(statistics.median(x["wall_s"] for x in runs), 1),
            "median_cpu_s": round(statistics.median(x["cpu_s"] for x in runs), 1),
            "sentences_per_s": round(args.size / statistics.median(x["wall_s"] for x in runs)),
            "count": runs[-1]["count"],
            "load": [[round(x["load_before"], 1), round(x["load_after"], 1)] for x in runs],
            "pages": runs[-1]["pages"],
        }
    names = list(out)
    results["same_pages"] = out[names[0]]["pages"] == out[names[1]]["pages"]
    results["after_over_before_wall"] = round(out[names[1]]["median_wall_s"] / out[names[0]]["median_wall_s"], 2)
    results["trees"] = out
    results["loadavg_end"] = os.getloadavg()
    log(f"after/before wall {results['after_over_before_wall']}, same pages: {results['same_pages']}")
    stamp_end(results, started)
    write_json(RESULTS / ("qdrant_ingest_before_after" + ("" if args.size == 100_000 else f"_{args.size}")
                          + ".json"), results)


if __name__ == "__main__":
    main()
