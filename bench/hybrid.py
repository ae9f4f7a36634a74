#!/usr/bin/env python3
"""Hybrid retrieval latency: each arm alone and fused, on the built-in store and on PostgreSQL.

Synthetic one-sentence corpus (bench/corpus.py, fixed seed), hash embedder dim 384, query embedding
excluded (memoised). PostgreSQL 16 + pgvector 0.6.2 is started by this script from the ``pgserver``
wheel in a temporary directory (deleted at exit). For every query it records the median of several runs:

- ``memory_ms``: the built-in store (engine path: exact matrix + engine BM25 index + fusion in Python);
- ``pg_sql_ms``: pgvector with the hybrid plan lowered to one SQL statement (default store settings:
  HNSW built after ingest, so an unfiltered semantic arm is index-served);
- ``pg_engine_ms``: the same tables through a store opened with ``bm25=False`` (arm by arm: every row
  passing the filter is fetched and scored in Python);

plus whether each Postgres answer has the same ids as the built-in store's (the index-served semantic
arm is approximate, so at 100k an ANN arm may differ; the exact store is the contract's).

    python bench/hybrid.py                 # 100k sentences, 7 runs per query
    python bench/hybrid.py --quick         # 5k sentences, 3 runs (no CI, a minute)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import QueryMemo, log, machine_info, steady, timed_runs, write_json  # noqa: E402
from bench.corpus import synthetic_corpus  # noqa: E402
from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402

TEXT = "renewable energy policy"
SEM = f'SIMILARITY(content, "{TEXT}")'
KW = f'BM25(content, "{TEXT}")'
FILTER = 'meta.status == "published" AND meta.year >= 2020'
QUERIES: dict[str, str] = {
    "semantic_arm": f"SELECT SENTENCE LET sem = {SEM} ORDER BY sem DESC LIMIT 10",
    "bm25_arm": f"SELECT SENTENCE LET kw = {KW} ORDER BY kw DESC LIMIT 10",
    "bm25_arm_filtered": f"SELECT SENTENCE LET kw = {KW} WHERE {FILTER} ORDER BY kw DESC LIMIT 10",
    "rrf": f"SELECT SENTENCE LET sem = {SEM}, kw = {KW}, f = RRF(sem, kw, k => 60) ORDER BY f DESC LIMIT 10",
    "rrf_filtered": (f"SELECT SENTENCE LET sem = {SEM}, kw = {KW}, f = RRF(sem, kw, k => 60) WHERE {FILTER} "
                     "ORDER BY f DESC LIMIT 10"),
    "rrf_threshold": (f"SELECT SENTENCE LET sem = {SEM}, kw = {KW}, f = RRF(sem, kw) WHERE sem >= 0.2 "
                      "ORDER BY f DESC LIMIT 10"),
    "interleave": f"SELECT SENTENCE LET sem = {SEM}, kw = {KW}, f = INTERLEAVE(sem, kw) ORDER BY f DESC LIMIT 10",
    "arithmetic": f"SELECT SENTENCE LET s = 0.7 * {SEM} + 0.3 * {KW} ORDER BY s DESC LIMIT 10",
}


def start_postgres(tmp: str) -> tuple[Any, str]:
    import pgserver
    import psycopg

    handle = pgserver.get_server(os.path.join(tmp, "pgdata"), cleanup_mode="delete")
    uri = handle.get_uri()
    with psycopg.connect(uri, autocommit=True) as conn:
        for name in ("fsync", "synchronous_commit", "full_page_writes"):  # a throw-away server
            conn.execute(psycopg.sql.SQL("ALTER SYSTEM SET {} = off").format(psycopg.sql.Identifier(name)))
        conn.execute("SELECT pg_reload_conf()")
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return handle, uri


def run(n: int, repeat: int) -> dict[str, Any]:
    from nlql.stores.pgvector import PgVectorStore

    texts, metas = synthetic_corpus(n, seed=42)
    ids = [str(i) for i in range(n)]
    emb = QueryMemo(HashEmbedder(dim=384))
    out: dict[str, Any] = {"title": "Hybrid retrieval (issue 5)",
                           "description": ("Median latency per query (ms), query embedding excluded. "
                                           "memory: built-in store, arm by arm; pg_sql: PostgreSQL, the hybrid "
                                           "plan as one statement; pg_engine: the same tables arm by arm "
                                           "(store opened with bm25=False)."),
                           "benchmark": "hybrid", "sentences": n, "repeat": repeat, "dim": 384,
                           "machine": machine_info()}
    log(f"built-in store: ingest {n}")
    mem = Engine(embedder=emb, warm_up=False)
    t = time.perf_counter()
    mem.add_texts(texts, ids=ids, metadatas=metas, batch_size=4096)
    out["memory_ingest_s"] = round(time.perf_counter() - t, 2)
    steady(mem)
    with tempfile.TemporaryDirectory(prefix="nlql-bench-pg-") as tmp:
        handle, uri = start_postgres(tmp)
        try:
            store = PgVectorStore(uri)
            pg = Engine(embedder=emb, store=store, warm_up=False)
            log(f"postgres: ingest {n}")
            t = time.perf_counter()
            pg.add_texts(texts, ids=ids, metadatas=metas, batch_size=4096)
            out["pg_ingest_s"] = round(time.perf_counter() - t, 2)
            t = time.perf_counter()
            store.build_index()
            out["pg_hnsw_build_s"] = round(time.perf_counter() - t, 2)
            arm_by_arm = Engine(embedder=emb, store=PgVectorStore(uri, bm25=False), warm_up=False)
            queries: dict[str, Any] = {}
            for name, q in QUERIES.items():
                log(f"  {name}")
                want = [h.id for h in mem.search(q)]
                row: dict[str, Any] = {"lowering": pg.explain(q).plan.lowering["strategy"]
                                       if pg.explain(q).plan.lowering else "knn"}
                row["memory_ms"] = round(timed_runs(lambda q=q: mem.search(q), repeat)[0], 3)
                row["pg_sql_ms"] = round(timed_runs(lambda q=q: pg.search(q), repeat)[0], 3)
                hits = pg.search(q)
                row["pg_mode"] = hits.stats.get("store", {}).get("mode") or hits.stats.get("store", {}).get("path")
                row["pg_same_ids"] = [h.id for h in hits] == want
                row["pg_engine_ms"] = round(timed_runs(lambda q=q: arm_by_arm.search(q), max(1, repeat // 2))[0], 3)
                row["pg_engine_same_ids"] = [h.id for h in arm_by_arm.search(q)] == want
                queries[name] = row
            out["queries"] = queries
            out["query_text"] = {k: v for k, v in QUERIES.items()}
            arm_by_arm.close()
            pg.close()
        finally:
            handle.cleanup()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="sentences (one per document)")
    ap.add_argument("--repeat", type=int, default=7, help="runs per query (median)")
    ap.add_argument("--quick", action="store_true", help="5k sentences, 3 runs")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "hybrid.json")
    args = ap.parse_args(argv)
    n, repeat = (5_000, 3) if args.quick else (args.n, args.repeat)
    data = run(n, repeat)
    data["profile"] = "quick" if args.quick else "full"
    write_json(args.out, data)
    for name, row in data["queries"].items():
        print(f"{name:20s} memory {row['memory_ms']:9.2f} ms   pg sql {row['pg_sql_ms']:9.2f} ms "
              f"({row['lowering']}, {row['pg_mode']}, same ids: {row['pg_same_ids']})   "
              f"pg arm-by-arm {row['pg_engine_ms']:9.2f} ms")
    return data


if __name__ == "__main__":
    main()
