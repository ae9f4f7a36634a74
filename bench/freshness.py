#!/usr/bin/env python3
"""What the directory store's cross-process freshness check costs per search (issue 20).

Every search on a directory store first asks SQLite whether another connection committed
(``PRAGMA data_version``) and, only then, reads what is newer than its clock. At 100k one-sentence
documents (HashEmbedder, dim 384) this measures, medians over ``--repeat`` runs:

* ``stale_us``: the check alone (``store.stale()``) when nothing changed;
* the same search on the directory store and on an in-RAM store holding the same rows (no check),
  for a filtered scan, a top-10 SIMILARITY and a BM25 query: the difference is the per-search cost;
* ``catch_up``: the filtered scan right after another connection wrote one document (the incremental
  catch-up: read the new row, apply it to RAM and BM25; the in-RAM column caches are rebuilt as after any
  write) and again with nothing new, and the in-RAM store's same search after a write in its own process, against the full reload a naive design would need (``reload_ms``:
  opening the store from scratch).

    python bench/freshness.py [--docs 100000] [--repeat 200]

Writes bench/results/freshness.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, interleaved_runs, log, machine_info, stamp_end, write_json  # noqa: E402
from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402

QUERIES = {
    "filtered scan": 'SELECT SENTENCE WHERE meta.group == 7 LIMIT 10',
    "similarity top-10": 'SELECT SENTENCE LET rel = SIMILARITY(content, "river energy policy") LIMIT 10',
    "bm25 top-10": 'SELECT SENTENCE LET k = BM25(content, "river energy") ORDER BY k DESC LIMIT 10',
}
WORDS = ["agents", "tools", "memory", "retrieval", "cats", "dogs", "energy", "solar", "policy", "graphs",
         "planning", "search", "vectors", "language", "games", "river"]


def _texts(n: int) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    texts = [f"Document {i} is about {WORDS[i % 16]} and {WORDS[(i * 7) % 16]} near {WORDS[(i * 3) % 16]}."
             for i in range(n)]
    return texts, [f"d{i}" for i in range(n)], [{"group": i % 100, "n": i} for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    started = time.perf_counter()
    results: dict[str, Any] = {"machine": machine_info(), "docs": args.docs, "repeat": args.repeat}
    texts, ids, metas = _texts(args.docs)
    with tempfile.TemporaryDirectory() as tmp:
        directory = str(Path(tmp) / "store")
        log(f"ingesting {args.docs:,} documents into a directory store and an in-RAM store")
        t = time.perf_counter()
        disk = Engine(embedder=HashEmbedder(dim=384), store=directory, warm_up=False)
        disk.add_texts(texts, ids=ids, metadatas=metas, batch_size=2048)
        results["ingest_directory_s"] = round(time.perf_counter() - t, 1)
        ram = Engine(embedder=HashEmbedder(dim=384), store="memory", warm_up=False)
        ram.add_texts(texts, ids=ids, metadatas=metas, batch_size=2048)
        store: Any = disk.store
        for q in QUERIES.values():  # warm both (BM25 index, filter columns, query embeddings)
            disk.search(q)
            ram.search(q)

        runs = [0.0] * args.repeat
        for i in range(args.repeat):
            t = time.perf_counter()
            store.stale()
            runs[i] = (time.perf_counter() - t) * 1e6
        results["stale_us"] = round(statistics.median(runs), 2)
        log(f"stale() alone: {results['stale_us']} µs")

        per_query: dict[str, Any] = {}
        for name, q in QUERIES.items():
            both = interleaved_runs({"directory": lambda q=q: disk.search(q), "memory": lambda q=q: ram.search(q)},
                                    repeat=args.repeat)
            d, m = statistics.median(both["directory"]), statistics.median(both["memory"])
            per_query[name] = {"directory_ms": round(d, 3), "memory_ms": round(m, 3),
                               "difference_us": round((d - m) * 1000, 1)}
            log(f"{name}: directory {d:.3f} ms, in RAM {m:.3f} ms, difference {(d - m) * 1000:.1f} µs")
        results["searches"] = per_query

        other = Engine(embedder=HashEmbedder(dim=384), store=directory, warm_up=False)
        after: list[float] = []
        unchanged: list[float] = []
        q = QUERIES["filtered scan"]
        for i in range(30):
            other.add_text(f"A new document {i} about river energy.", id=f"new{i}", metadata={"group": 7})
            t = time.perf_counter()
            disk.search(q)  # catches up: reads the new row, applies it to RAM and BM25, then searches
            after.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            disk.search(q)  # the same search, nothing new
            unchanged.append((time.perf_counter() - t) * 1000)
        local: list[float] = []
        for i in range(30):  # the same, for a write in this very process on the in-RAM store
            ram.add_text(f"A new document {i} about river energy.", id=f"new{i}", metadata={"group": 7})
            t = time.perf_counter()
            ram.search(q)
            local.append((time.perf_counter() - t) * 1000)
        results["catch_up"] = {"query": q, "after_one_write_elsewhere_ms": round(statistics.median(after), 2),
                               "unchanged_ms": round(statistics.median(unchanged), 2),
                               "in_ram_after_a_local_write_ms": round(statistics.median(local), 2)}
        log(f"filtered scan right after another process wrote one document: {statistics.median(after):.2f} ms "
            f"(unchanged: {statistics.median(unchanged):.2f} ms; in RAM after a write here: "
            f"{statistics.median(local):.2f} ms)")
        other.close()
        t = time.perf_counter()
        fresh = Engine(embedder=HashEmbedder(dim=384), store=directory, warm_up=False)
        results["reload_ms"] = round((time.perf_counter() - t) * 1000, 1)
        log(f"opening the store from scratch (a full reload): {results['reload_ms']} ms")
        fresh.close()
        disk.close()
    stamp_end(results, started)
    write_json(RESULTS / "freshness.json", results)


if __name__ == "__main__":
    main()
