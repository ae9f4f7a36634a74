"""Milvus Lite BM25 and RRF at --size sentences: this tree against an earlier revision, on one stored file.

The corpus and queries are ``bench/engines.py``'s. The file is written once (by this tree; both trees
store the same schema), then child processes open it in turn, alternating the trees for ``--rounds``
rounds (one process per file at a time is all Milvus Lite allows). Each child times, round-robin in the
same loop, NLQL's BM25 and RRF queries and pymilvus's own calls on the same data as the floor: the dense
top-101 search an RRF's SIMILARITY arm makes (``limit`` = depth + 1, no output fields) and a sparse
top-64 search of the query's terms. It also times its first BM25 query, of a frequent and a rare term
(document frequencies not memoised: what a query of new terms pays).

    python -m bench.milvus_before_after --size 100000 --before 6c13fa7
    python -m bench.milvus_before_after --size 100000 --db /tmp/b100k.db   (written once, reused after)

Prints the medians and writes ``bench/results/milvus_before_after.json`` (load average included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS, ROOT, earlier_tree, log, machine_info, stamp_end, tree_env, write_json  # noqa: E402

CHILD = r'''
import hashlib, json, os, statistics, sys, time
from bench import engines as B
from bench.common import QueryMemo
from nlql import Engine
from nlql.embedders import HashEmbedder

path, repeat, fresh = sys.argv[1], int(sys.argv[2]), sys.argv[3]
e = Engine(embedder=QueryMemo(HashEmbedder(dim=B.DIM)), store=f"milvus://{path}", warm_up=False)
client = e.store.client._client
vec = HashEmbedder(dim=B.DIM).embed(["zebra w400 w3000"])[0].tolist()


def dim(t):
    return int(hashlib.sha1(t.encode("utf-8")).hexdigest()[:8], 16) % (2**32 - 2)


sparse = {dim(t): 1.0 for t in ("zebra", "w400", "w3000")}
t = time.perf_counter()
e.search(B.BM25.replace("zebra w400 w3000", fresh))
first_ms = (time.perf_counter() - t) * 1000
cases = {
    "floor_dense101": lambda: client.search(e.store.collection, data=[vec], limit=101, anns_field="vec",
                                            output_fields=[], search_params={"metric_type": "COSINE"}),
    "floor_sparse64": lambda: client.search(e.store.collection, data=[sparse], limit=64, anns_field="sp",
                                            output_fields=[], search_params={"metric_type": "IP"}),
    "bm25": lambda: e.search(B.BM25),
    "rrf": lambda: e.search(B.RRF),
}
for f in cases.values():
    f(); f()
runs = {k: [] for k in cases}
for _ in range(repeat):
    for k, f in cases.items():
        t = time.perf_counter()
        f()
        runs[k].append((time.perf_counter() - t) * 1000)
pages = {"bm25": [h.id for h in e.search(B.BM25)], "rrf": [h.id for h in e.search(B.RRF)]}
e.close()
print(json.dumps({"runs": runs, "first_bm25_new_terms_ms": first_ms, "pages": pages}))
'''


def child(tree: Path, path: Path, repeat: int, fresh: str) -> dict[str, Any]:
    env = tree_env(tree)  # (the tree's own nlql and bench/engines.py: the same corpus and queries)
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(repeat), fresh], env=env, cwd=str(tree),
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--before", default="HEAD~1", help="the earlier revision")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--db", default=None, help="a Milvus Lite file of --size rows to reuse (written if missing)")
    args = ap.parse_args()
    started = time.perf_counter()
    from bench import engines as B

    results: dict[str, Any] = {"size": args.size, "machine": machine_info(), "loadavg_start": os.getloadavg(),
                               "queries": {"bm25": B.BM25, "rrf": B.RRF}}
    with tempfile.TemporaryDirectory(prefix="nlql-milvus-ba-") as tmp, earlier_tree(args.before) as (short, tree, _):
        path = Path(args.db) if args.db else Path(tmp) / "bench.db"
        if path.exists():  # (written by an earlier run with the same --size)
            log(f"reusing {path}")
        else:
            e, ingest = B.load(f"milvus://{path}", args.size)
            e.close()
            log(f"ingest {ingest:.1f} s")
            results["ingest_s"] = round(ingest, 1)
        trees = {f"before ({short})": tree, "after": ROOT}
        got: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
        for r in range(args.rounds):
            for name, where in trees.items():
                # terms this child has not asked for (a fresh process memoises nothing): a frequent one
                # (in ~5% of rows) and a rare one, the same for both trees in a round (a term's cost
                # depends on the term: 47 to 470 ms for three of these words)
                fresh = f"{B.WORDS[10 + 2 * r]} w{5000 + 10 * r}"
                got[name].append(child(where, path, args.repeat, fresh))
                log(f"round {r + 1} {name}: load {os.getloadavg()[0]:.1f}")
    out: dict[str, Any] = {}
    for name, parts in got.items():
        runs: dict[str, list[float]] = {}
        for p in parts:
            for k, v in p["runs"].items():
                runs.setdefault(k, []).extend(v)
        med = {k: round(statistics.median(v), 2) for k, v in runs.items()}
        out[name] = {
            "median_ms": med,
            "bm25_over_sparse_floor": round(med["bm25"] / med["floor_sparse64"], 2),
            "rrf_over_dense_floor": round(med["rrf"] / med["floor_dense101"], 2),
            "first_bm25_new_terms_ms": [round(p["first_bm25_new_terms_ms"], 1) for p in parts],
            "pages": parts[-1]["pages"],
        }
        log(f"{name}: {out[name]['median_ms']} first BM25 of new terms {out[name]['first_bm25_new_terms_ms']} ms")
    names = list(out)
    results["same_pages"] = out[names[0]]["pages"] == out[names[1]]["pages"]
    results["trees"] = out
    results["loadavg_end"] = os.getloadavg()
    stamp_end(results, started)
    write_json(RESULTS / ("milvus_before_after" + ("" if args.size == 100_000 else f"_{args.size}") + ".json"),
               results)


if __name__ == "__main__":
    main()
