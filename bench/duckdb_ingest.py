#!/usr/bin/env python3
"""Ingest into NLQL's SQL stores against the engine's own bulk load of the same rows (issue 35).

Corpus: ``bench/pg_speed.py``'s (one-sentence documents, ``status``/``tag``/``year``/``topic``
metadata, clustered unit vectors of dim 384 precomputed and looked up, so no embedding is timed).
Timed in one process, alternating (``--rounds`` rounds, each system once per round, fresh tables):

- ``NLQL on DuckDB``: ``Engine(store=DuckDBStore()).add_texts(…, batch_size=8192)`` (in memory);
- ``raw DuckDB``: the same rows from the same Python lists (id, text, metadata as JSON text, vector)
  made into one Arrow table and ``INSERT INTO raw SELECT * FROM arrow`` into
  ``raw(doc_id VARCHAR, text VARCHAR, metadata VARCHAR, embedding FLOAT[384])``;
- ``NLQL on PostgreSQL``: ``Engine(store=PgVectorStore(uri, exact=True)).add_texts(…)`` (no HNSW build);
- ``raw PostgreSQL COPY``: the same four columns by binary ``COPY … FROM STDIN`` (psycopg's
  ``cursor.copy`` with ``set_types`` and ``write_row``) into a fresh table, one transaction.

The PostgreSQL rows run on a throw-away PostgreSQL 16 + pgvector (pgserver, ``bench/pg_speed.py``'s
settings). Ratios are NLQL / raw per round (median).

    python bench/duckdb_ingest.py --n 100000
    python bench/duckdb_ingest.py --n 20000 --skip pg
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, log, machine_info, stamp_end, write_json  # noqa: E402
from bench.pg_speed import DIM, QUERY_TEXTS, Lookup, Postgres, corpus  # noqa: E402
from nlql import Engine  # noqa: E402

BATCH = 8192


def nlql_duckdb(data: dict[str, Any]) -> float:
    from nlql.stores.duckdb import DuckDBStore

    eng = Engine(embedder=data["emb"], store=DuckDBStore(), warm_up=False)
    t = time.perf_counter()
    eng.add_texts(data["texts"], ids=data["ids"], metadatas=data["metas"], batch_size=BATCH)
    dt = time.perf_counter() - t
    assert eng.store.count() == len(data["texts"])
    eng.close()
    return dt


def raw_duckdb(data: dict[str, Any]) -> float:
    import duckdb
    import pyarrow as pa

    conn = duckdb.connect()
    conn.execute(f"CREATE TABLE raw (doc_id VARCHAR, text VARCHAR, metadata VARCHAR, embedding FLOAT[{DIM}])")
    t = time.perf_counter()
    tbl = pa.table({"doc_id": pa.array(data["ids"]), "text": pa.array(data["texts"]),
                    "metadata": pa.array([json.dumps(m) for m in data["metas"]]),
                    "embedding": pa.FixedSizeListArray.from_arrays(pa.array(data["vecs"].ravel()), DIM)})
    conn.register("src", tbl)
    conn.execute("INSERT INTO raw SELECT * FROM src")
    dt = time.perf_counter() - t
    assert conn.execute("SELECT count(*) FROM raw").fetchone()[0] == len(data["texts"])
    conn.close()
    return dt


def nlql_pg(data: dict[str, Any], uri: str, r: int) -> float:
    from nlql.stores.pgvector import PgVectorStore

    eng = Engine(embedder=data["emb"], store=PgVectorStore(uri, table_prefix=f"ing{r}", exact=True), warm_up=False)
    t = time.perf_counter()
    eng.add_texts(data["texts"], ids=data["ids"], metadatas=data["metas"], batch_size=BATCH)
    dt = time.perf_counter() - t
    assert eng.store.count() == len(data["texts"])
    eng.close()
    return dt


def raw_pg(data: dict[str, Any], uri: str, r: int) -> float:
    import psycopg

    from nlql.stores.pgvector.driver import Vector, register_vector, vector_bytes

    with psycopg.connect(uri) as conn:
        oid = conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0]
        register_vector(conn, oid)
        conn.execute(f"CREATE TABLE raw{r} (doc_id text, text text, metadata jsonb, embedding vector({DIM}))")
        conn.commit()
        t = time.perf_counter()
        with conn.cursor() as cur, cur.copy(f"COPY raw{r} (doc_id, text, metadata, embedding) FROM STDIN "
                                           "WITH (FORMAT BINARY)") as cp:
            cp.set_types(["text", "text", "jsonb", oid])
            for i, text, meta, vec in zip(data["ids"], data["texts"], data["metas"], data["vecs"], strict=True):
                cp.write_row((i, text, json.dumps(meta), Vector(vector_bytes(vec))))
        conn.commit()
        dt = time.perf_counter() - t
        assert conn.execute(f"SELECT count(*) FROM raw{r}").fetchone()[0] == len(data["texts"])
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--skip", nargs="*", default=[], choices=["pg", "duckdb"])
    ap.add_argument("--out", type=Path, default=RESULTS / "duckdb_ingest.json")
    args = ap.parse_args()
    started = time.perf_counter()
    texts, ids, metas, vecs, qvecs = corpus(args.n)
    data = {"texts": texts, "ids": ids, "metas": metas, "vecs": vecs,
            "emb": Lookup(texts + QUERY_TEXTS, np.concatenate([vecs, qvecs]))}
    out: dict[str, Any] = {"title": "Ingest: NLQL's SQL stores against their engine's bulk load (issue 35)",
                           "description": __doc__.split("\n\n")[1], "benchmark": "duckdb_ingest",
                           "sentences": args.n, "batch_size": BATCH, "machine": machine_info()}
    server = None if "pg" in args.skip else Postgres()
    times: dict[str, list[float]] = {}
    loads = []
    try:
        for r in range(args.rounds):
            runs: dict[str, Any] = {}
            if "duckdb" not in args.skip:
                runs["raw DuckDB"] = lambda: raw_duckdb(data)
                runs["NLQL on DuckDB"] = lambda: nlql_duckdb(data)
            if server is not None:
                runs["raw PostgreSQL COPY"] = lambda r=r: raw_pg(data, server.uri, r)
                runs["NLQL on PostgreSQL"] = lambda r=r: nlql_pg(data, server.uri, r)
            for name, fn in runs.items():
                gc.collect()
                loads.append(os.getloadavg()[0])
                dt = fn()
                times.setdefault(name, []).append(dt)
                log(f"[duckdb_ingest] round {r} {name}: {dt:.2f} s (load {loads[-1]:.1f})")
        if server is not None:
            out["versions"] = server.versions
    finally:
        if server is not None:
            server.stop()
    rows = {name: {"s": round(statistics.median(v), 2), "runs_s": [round(x, 2) for x in v]}
            for name, v in times.items()}
    for nlql_name, raw_name in (("NLQL on DuckDB", "raw DuckDB"), ("NLQL on PostgreSQL", "raw PostgreSQL COPY")):
        if nlql_name in times and raw_name in times:
            ratios = [a / b for a, b in zip(times[nlql_name], times[raw_name], strict=True)]
            rows[nlql_name]["ratio_to_raw"] = round(statistics.median(ratios), 2)
            log(f"[duckdb_ingest] {nlql_name}: {rows[nlql_name]['s']} s, {rows[nlql_name]['ratio_to_raw']}× "
                f"{raw_name} ({rows[raw_name]['s']} s)")
    out["rows"] = rows
    out["load_1min_during"] = [round(x, 2) for x in loads]
    stamp_end(out, started)
    write_json(args.out, out)


if __name__ == "__main__":
    main()
