"""Qdrant Edge's BM25 arm: Qdrant's own sparse search over each point's BM25 weights (collections made
since the sparse vector was added) against reading every point holding a query term (collections made
before), on the same corpus at --size sentences, timed round-robin in one process.

Both collections are opened by the same code: the older layout is made by creating its collection
without the sparse vector, as the store did before. The answers (ids and scores) must be equal.

    python -m bench.qdrant_sparse --size 100000

Prints medians and ratios and writes ``bench/results/qdrant_sparse.json`` (load average included).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS, interleaved_runs, log, machine_info, stamp_end, write_json  # noqa: E402
from bench.engines import BM25, DIM, RRF, load  # noqa: E402
from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402

QUERIES = {
    "bm25": BM25,
    "bm25_filtered": ('SELECT SENTENCE LET k = BM25(content, "zebra w400 w3000") WHERE k > 0 AND meta.tag == "t3" '
                      'ORDER BY k DESC LIMIT 10'),
    "bm25_rare": 'SELECT SENTENCE LET k = BM25(content, "w1200 w4000") WHERE k > 0 ORDER BY k DESC LIMIT 10',
    "rrf": RRF,
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--out", type=Path, default=RESULTS / "qdrant_sparse.json")
    args = ap.parse_args(argv)
    from nlql.stores.qdrant.edge import EdgeClient

    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="nlql-qsparse-"))
    out: dict[str, Any] = {"title": "Qdrant Edge BM25: sparse search vs every point holding a term",
                           "size": args.size, "machine": machine_info(), "load_start": os.getloadavg()[0]}
    new, out["ingest_sparse_s"] = load("qdrant://" + str(tmp / "sparse"), args.size)
    create = EdgeClient.create_collection
    EdgeClient.create_collection = lambda self, name, vectors_config, **_: create(self, name, vectors_config)  # type: ignore[method-assign]
    try:  # the collection as the store made it before the sparse vector, then opened as any other
        Engine(embedder=HashEmbedder(dim=DIM), store="qdrant://" + str(tmp / "scroll"), warm_up=False).close()
    finally:
        EdgeClient.create_collection = create  # type: ignore[method-assign]
    old, out["ingest_scroll_s"] = load("qdrant://" + str(tmp / "scroll"), args.size)
    assert new.store._sparse and not old.store._sparse
    out["same_answers"] = {}
    for name, query in QUERIES.items():
        a = [(h.id, round(v, 9)) for h in new.search(query) for v in h.scores.values()]
        b = [(h.id, round(v, 9)) for h in old.search(query) for v in h.scores.values()]
        out["same_answers"][name] = a == b
    fns = {}
    for name, query in QUERIES.items():
        fns[f"{name}:sparse"] = lambda q=query: new.search(q)
        fns[f"{name}:scroll"] = lambda q=query: old.search(q)
    runs = interleaved_runs(fns, args.repeat)
    out["median_ms"] = {k: round(statistics.median(v), 2) for k, v in runs.items()}
    out["speedup"] = {name: round(out["median_ms"][f"{name}:scroll"] / out["median_ms"][f"{name}:sparse"], 1)
                      for name in QUERIES}
    out["load_end"] = os.getloadavg()[0]
    new.close()
    old.close()
    shutil.rmtree(tmp, ignore_errors=True)  # (two stores of --size rows: gigabytes at 1M)
    stamp_end(out, started)
    write_json(args.out, out)
    for name in QUERIES:
        log(f"{name:14s} sparse {out['median_ms'][name + ':sparse']:8.2f} ms   every point holding a term "
            f"{out['median_ms'][name + ':scroll']:8.2f} ms   {out['speedup'][name]}x   same answers "
            f"{out['same_answers'][name]}")
    log(f"ingest: sparse {out['ingest_sparse_s']} s, without {out['ingest_scroll_s']} s; load "
        f"{out['load_start']:.2f} -> {out['load_end']:.2f}; wrote {args.out}")
    return out


if __name__ == "__main__":
    main()
