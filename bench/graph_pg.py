#!/usr/bin/env python3
"""GRAPH on PostgreSQL through the engine (issue 12: "report the same on Postgres").

The corpus and questions of ``bench/graph.py`` (``n`` one-sentence documents naming people, places and
organisations from a Zipf distribution, a date per document), ingested with the default entity
extractor into PostgreSQL 16 + pgvector (pgserver, no HNSW index: exact scans) and into the built-in
store, hash embedder (embedding is microseconds); the PostgreSQL store answers knn exactly, as the
contract suite compares it (an HNSW window is approximate, and so is an RRF page built on it). PostgreSQL keeps the entity links in its two tables,
written in the ingest transaction, and computes GRAPH in SQL: the engine holds no graph.

Per query (``search`` wall time, the engine's CPU, the PostgreSQL processes' CPU; medians of
``--repeat``), and whether its rows and scores are the built-in store's:

- ``graph``: a GRAPH page (the activation statement, then the page's rows);
- ``graph_rrf``: ``RRF(SIMILARITY, BM25, GRAPH)``, one hybrid statement (the activation CTEs inside it);
- ``four_arms``: ``RRF(SIMILARITY, BM25, GRAPH, TEMPORAL)``, one hybrid statement too (the TEMPORAL arm
  reads the metadata's date view; ``bench/four_arms_sql.py`` times it against the arm-by-arm path).

    python bench/graph_pg.py [--n 100000] [--repeat 15]   # writes bench/results/graph_pg.json
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, log, machine_info, stamp_end, write_json  # noqa: E402
from bench.graph import ENGINE_QUERIES, corpus  # noqa: E402
from bench.scale import StoreProcesses, start_postgres  # noqa: E402
from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.stores.pgvector import PgVectorStore  # noqa: E402

NOW = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)
QUERIES = {
    "graph": ENGINE_QUERIES["graph"],
    "graph_rrf": "SELECT SENTENCE LET s = SIMILARITY(content, $q), k = BM25(content, $q), g = GRAPH($q), "
                 "f = RRF(s, k, g) ORDER BY f DESC LIMIT 10",
    "four_arms": ENGINE_QUERIES["four_arms"],
}


def same(a: Any, b: Any) -> bool:
    if [h.id for h in a] != [h.id for h in b]:
        return False
    return all(abs((x.scores.get(k) or 0.0) - (y.scores.get(k) or 0.0)) <= 1e-9
               for x, y in zip(a, b, strict=True) for k in x.scores)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--out", type=Path, default=RESULTS / "graph_pg.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    texts, truth = corpus(args.n)
    rng = random.Random(3)
    metas = [{"date": f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}"} for _ in texts]
    ids = [f"d{i}" for i in range(len(texts))]
    ranked = [name for name, _ in Counter(n for names in truth for n in names).most_common()]
    question = f"what did {ranked[len(ranked) // 2]} say? last week"  # bench/graph.py's engine question
    results: dict[str, Any] = {
        "title": "GRAPH on PostgreSQL (issue 12)",
        "description": __doc__.split("\n\n")[1].replace("\n", " "),
        "n": args.n, "repeat": args.repeat, "question": question, "queries": {}, "machine": machine_info(),
    }
    pg, uri, root = start_postgres()
    try:
        server = StoreProcesses(root)
        mem = Engine(embedder=HashEmbedder(dim=384), warm_up=False, clock=lambda: NOW)
        mem.add_texts(texts, ids=ids, metadatas=metas)
        # exact knn, as the contract suite compares (an HNSW window is approximate: another RRF page)
        eng = Engine(embedder=HashEmbedder(dim=384), store=PgVectorStore(uri, exact=True), warm_up=False,
                     clock=lambda: NOW)
        t = time.perf_counter()
        eng.add_texts(texts, ids=ids, metadatas=metas, batch_size=2000)
        results["pg_ingest_s"] = round(time.perf_counter() - t, 1)
        log(f"postgres ingest with entity links: {results['pg_ingest_s']} s")
        for label, q in QUERIES.items():
            p = {"q": question}
            got, want = eng.search(q, params=p), mem.search(q, params=p)
            wall, cpu, scpu = [], [], []
            for _ in range(args.repeat):
                c0, s0, w0 = time.process_time(), server.cpu_s(), time.perf_counter()
                eng.search(q, params=p)
                wall.append((time.perf_counter() - w0) * 1e3)
                cpu.append((time.process_time() - c0) * 1e3)
                scpu.append((server.cpu_s() - s0) * 1e3)
            lowering = (eng.explain(q, params=p).to_dict().get("lowering") or {}).get("strategy")
            row = {"wall_ms": round(statistics.median(wall), 1), "engine_cpu_ms": round(statistics.median(cpu), 2),
                   "store_cpu_ms": round(statistics.median(scpu), 1), "rows": len(got),
                   "same_as_builtin": same(got, want), "lowering": lowering,
                   "builtin_ms": round(statistics.median(_times(mem, q, p, args.repeat)), 2)}
            results["queries"][label] = row
            log(f"  {label}: {row}")
        results["engine_rss_mb"] = round(psutil.Process().memory_info().rss / 2**20, 1)
        eng.close()
        mem.close()
    finally:
        pg.stop()
    results["load_avg_end"] = list(os.getloadavg())
    stamp_end(results, started)
    write_json(args.out, results)
    return results


def _times(engine: Engine, q: str, params: dict[str, Any], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        engine.search(q, params=params)
        out.append((time.perf_counter() - t) * 1e3)
    return out


if __name__ == "__main__":
    main()
