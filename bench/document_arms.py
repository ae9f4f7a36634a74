"""DOCUMENT pages ordered by BM25, by an RRF of SIMILARITY and BM25, and ``ask`` (whose templates select
DOCUMENT) on Qdrant Edge: this tree against an earlier revision, each in its own process on the same
corpus (--size sentences, three to a document), timed round-robin inside each child.

Before this tree, a store keeping BM25 in itself (Qdrant, Milvus) narrowed only SENTENCE pages: a
DOCUMENT page read and scored every row of the store.

    python -m bench.document_arms --size 30000 --before c55411c

Prints the medians and writes ``bench/results/document_arms.json`` (load average included).
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

QUERIES = {
    "document_bm25": 'SELECT DOCUMENT LET k = BM25(content, "zebra w400 w3000") ORDER BY k DESC LIMIT 10',
    "document_rrf": ('SELECT DOCUMENT LET s = SIMILARITY(content, "zebra w400 w3000"), k = BM25(content, '
                     '"zebra w400 w3000"), f = RRF(s, k) ORDER BY f DESC LIMIT 10'),
}
QUESTION = "which rows mention zebra stripes and river music"

CHILD = r'''
import json, statistics, sys, time
from bench import engines as B
from bench.common import QueryMemo, interleaved_runs
from bench.document_arms import QUERIES, QUESTION
from nlql import Engine
from nlql.embedders import HashEmbedder

size, repeat = int(sys.argv[1]), int(sys.argv[2])
texts, ids, metas = B.corpus(size)
docs = [" ".join(texts[i:i + 3]) for i in range(0, size, 3)]
e = Engine(embedder=QueryMemo(HashEmbedder(dim=B.DIM)), store="qdrant", warm_up=False)
t = time.perf_counter()
e.add_texts(docs, ids=[f"d{i}" for i in range(len(docs))], batch_size=2048)
ingest = time.perf_counter() - t
fns = {name: (lambda q=q: e.search(q)) for name, q in QUERIES.items()}
fns["ask"] = lambda: e.ask(QUESTION)
runs = interleaved_runs(fns, repeat)
pages = {name: [h.id for h in fn()] for name, fn in fns.items()}
e.close()
print(json.dumps({"ingest_s": ingest, "runs": runs, "pages": pages}))
'''


def child(tree: Path, size: int, repeat: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(size), str(repeat)], env=tree_env(tree), cwd=str(tree),
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=30_000)
    ap.add_argument("--before", default="HEAD~1", help="the earlier revision")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    started = time.perf_counter()
    results: dict[str, Any] = {"size": args.size, "documents": (args.size + 2) // 3, "machine": machine_info(),
                               "loadavg_start": os.getloadavg(), "queries": {**QUERIES, "ask": QUESTION}}
    with earlier_tree(args.before) as (short, tree, _):
        # (the earlier tree gets this tree's bench module: the same corpus and queries)
        (tree / "bench" / "document_arms.py").write_text(Path(__file__).read_text())
        trees = {f"before ({short})": tree, "after": ROOT}
        got = {name: child(where, args.size, args.repeat) for name, where in trees.items()}
    for name, part in got.items():
        part["median_ms"] = {k: round(statistics.median(v), 2) for k, v in part.pop("runs").items()}
        log(f"{name}: {part['median_ms']} (ingest {part['ingest_s']:.1f} s)")
    before, after = got.values()
    results["same_pages"] = before["pages"] == after["pages"]
    results["speedup"] = {k: round(before["median_ms"][k] / after["median_ms"][k], 1) for k in after["median_ms"]}
    results["trees"] = got
    results["loadavg_end"] = os.getloadavg()
    log(f"speed-up {results['speedup']}, same pages {results['same_pages']}")
    stamp_end(results, started)
    write_json(RESULTS / "document_arms.json", results)


if __name__ == "__main__":
    main()
