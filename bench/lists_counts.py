#!/usr/bin/env python3
"""Benchmark SPEC §11 lists and counts on the built-in store: HAS pushed into the store's filter against
the same predicate kept residual (``IF(meta.tags HAS "t3", TRUE, FALSE)``, which the planner cannot
push), both as a top-10 by similarity and as a full scan, and ``SELECT COUNT(DOCUMENT) BY meta.tags``
and ``BY meta.source`` (grouped by the store where it can: SQL ``GROUP BY`` on DuckDB and PostgreSQL,
Qdrant's count and facet calls for the string key) against the same groups counted by the engine
(``BY IF(TRUE, meta.tags, NULL)``, which no store groups).

Corpus: ``--docs`` documents (default 20k) of 2 sentences, each with 0–4 tags out of 50, a hash
embedder (no model). ``--repeat`` interleaved rounds; medians in ms.

    python bench/lists_counts.py [--docs 20000] [--repeat 15] [--out bench/results/lists_counts.json]
    python bench/lists_counts.py --store duckdb     # HAS in SQL (<p>_members) against it kept residual
    python bench/lists_counts.py --store qdrant     # Qdrant Edge (its facet for BY meta.source)
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# run as a script, bench/ is first on sys.path, where bench/duckdb.py would hide the duckdb package
sys.path[:] = [str(ROOT)] + [p for p in sys.path if p and Path(p).resolve() != ROOT / "bench"]

from bench.common import RESULTS, interleaved_runs, log, machine_info, stamp_end, write_json  # noqa: E402
from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402

QUERIES = {
    "has_pushed_top10": 'SELECT SENTENCE LET s = SIMILARITY(content, "tag report") WHERE meta.tags HAS "t3" '
                        "ORDER BY s DESC LIMIT 10",
    "has_residual_top10": 'SELECT SENTENCE LET s = SIMILARITY(content, "tag report") '
                          'WHERE IF(meta.tags HAS "t3", TRUE, FALSE) ORDER BY s DESC LIMIT 10',
    "has_any_pushed_scan": 'SELECT DOCUMENT WHERE meta.tags HAS ANY ("t3", "t7") LIMIT 10 OFFSET 500',
    "has_any_residual_scan": 'SELECT DOCUMENT WHERE IF(meta.tags HAS ANY ("t3", "t7"), TRUE, FALSE) '
                             "LIMIT 10 OFFSET 500",
    "count_by_tags": "SELECT COUNT(DOCUMENT) BY meta.tags LIMIT 10",
    # the same groups, counted by the engine on every store (an IF is no path a store can group by)
    "count_by_tags_engine": "SELECT COUNT(DOCUMENT) BY IF(TRUE, meta.tags, NULL) LIMIT 10",
    "count_by_tags_where": 'SELECT COUNT(SENTENCE) BY meta.tags WHERE meta.tags HAS "t3" LIMIT 10',
    # a key of strings (Qdrant's facet holds these; its lists go to the engine)
    "count_by_source": "SELECT COUNT(DOCUMENT) BY meta.source LIMIT 10",
    "count_by_source_engine": "SELECT COUNT(DOCUMENT) BY IF(TRUE, meta.source, NULL) LIMIT 10",
    "count_sentences_by_source_where": 'SELECT COUNT(SENTENCE) BY meta.source WHERE meta.source != "s3" LIMIT 10',
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--store", default="memory", help="memory, duckdb, or a store URL")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.out is None:
        args.out = RESULTS / ("lists_counts.json" if args.store == "memory" else
                              f"lists_counts_{args.store.split(':')[0]}.json")
    started = time.perf_counter()
    rng = random.Random(1)
    e = Engine(embedder=HashEmbedder(dim=64), store=args.store, warm_up=False)
    texts = [f"Report {i} about tag {i % 50}. It has a second line {i % 7}." for i in range(args.docs)]
    metas = [{"tags": rng.sample([f"t{j}" for j in range(50)], rng.randrange(0, 5)), "source": f"s{i % 20}"}
             for i in range(args.docs)]
    t = time.perf_counter()
    e.add_texts(texts, ids=[f"d{i}" for i in range(args.docs)], metadatas=metas)
    log(f"ingest {args.docs} docs: {time.perf_counter() - t:.1f} s")
    for q in QUERIES.values():  # warm every plan
        e.search(q)
    assert [h.id for h in e.search(QUERIES["has_pushed_top10"])] == [h.id for h in e.search(QUERIES["has_residual_top10"])]
    runs = interleaved_runs({name: (lambda q=q: e.search(q)) for name, q in QUERIES.items()}, args.repeat)
    medians = {name: round(statistics.median(v), 3) for name, v in runs.items()}
    for name, ms in medians.items():
        log(f"{name:24s} {ms:9.2f} ms")
    log(f"HAS pushed vs residual, top-10: {medians['has_residual_top10'] / medians['has_pushed_top10']:.1f}x; "
        f"scan: {medians['has_any_residual_scan'] / medians['has_any_pushed_scan']:.1f}x")
    for q in QUERIES.values():
        plan = e.explain(q).to_dict()
        how = f"; count: {plan['count']['how'].split(':')[0]}" if plan.get("count") else ""
        log(f"  {q[:60]}… pushed: {bool(plan.get('pushed_filter'))}{how}")
    for key in ("tags", "source"):
        who = "store" if "(store:" in str(e.explain(QUERIES[f"count_by_{key}"])) else "engine"
        log(f"COUNT BY meta.{key} grouped by the {who}: "
            f"{medians[f'count_by_{key}_engine'] / medians[f'count_by_{key}']:.1f}x the engine's count")
    results = {"machine": machine_info(), "store": args.store.split(":")[0], "docs": args.docs, "repeat": args.repeat, "queries": QUERIES,
               "median_ms": medians}
    stamp_end(results, started)
    write_json(args.out, results)


if __name__ == "__main__":
    main()
