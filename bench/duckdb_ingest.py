#!/usr/bin/env python3
"""Ingest into NLQL's SQL stores against the engine's own bulk load of the same rows (issue 35).

Corpus: ``bench/pg_speed.py``'s (one-sentence documents, ``status``/``tag``/``year``/``topic``
metadata, clustered unit vectors of dim 384 precomputed and looked up, so no embedding is timed).
Timed in one process, alternating (``--rounds`` rounds, each system once per round, fresh tables):

- ``NLQL on DuckDB``: ``Engine(store=DuckDBStore()).add_texts(…, batch_size=8192)`` (in memory);
- ``raw DuckDB``: the same rows from the same Python lists (id, text, metadata as JSON text, vector)
  made into one Arrow table and ``INSERT INTO raw SELECT * FROM arrow`` into
  ``raw(doc_id VARCHAR, text VARCHAR, metadata VARCHAR, embedding FLOAT[384])``;
- ``Arrow insert, NLQL's tables``: every row NLQL stored in the first round (:func:`stored_rows`, read
  back untimed) loaded by DuckDB's own bulk path into a fresh set of NLQL's tables, one transaction
  per batch (:func:`arrow_nlql_tables`), and checked to hold the same rows;
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


def nlql_duckdb(data: dict[str, Any], rows: dict[str, Any] | None = None) -> float:
    """NLQL's ingest, timed; with ``rows`` (a dict), every row it stored is read into it after the clock
    (:func:`stored_rows`)."""
    from nlql.stores.duckdb import DuckDBStore

    eng = Engine(embedder=data["emb"], store=DuckDBStore(), warm_up=False)
    t = time.perf_counter()
    eng.add_texts(data["texts"], ids=data["ids"], metadatas=data["metas"], batch_size=BATCH)
    dt = time.perf_counter() - t
    assert eng.store.count() == len(data["texts"])
    if rows is not None:
        cpu = time.process_time()
        rows.update(stored_rows(eng.store))
        rows["read_cpu_s"] = time.process_time() - cpu
    eng.close()
    return dt


# NLQL's tables that a write adds rows to, in the order the floor loads them; <prefix>_entity_edges (a
# GROUP BY's rows, added to by every batch) is loaded with the last batch, as bench/pg_ingest.py does
BATCHED = ("docs", "units", "terms", "flat", "members", "entity_links")


def table_digests(conn: Any, prefix: str) -> dict[str, tuple[int, str]]:
    """Per table of ``prefix`` (but the key-value ``_meta`` and ``_info``), its row count and the sum of
    its rows' hashes (every column): equal for two tables holding the same rows in any order."""
    out = {}
    names = [r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables() WHERE starts_with(table_name, $1) "
                                        "ORDER BY 1", [f"{prefix}_"]).fetchall()]
    for name in names:
        if name in (f"{prefix}_meta", f"{prefix}_info"):
            continue
        cols = [r[0] for r in conn.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = $1 "
                                           "ORDER BY column_index", [name]).fetchall()]
        quoted = ", ".join(f'"{c}"' for c in cols)
        n, h = conn.execute(f'SELECT count(*), coalesce(sum(hash({quoted})), 0)::VARCHAR FROM "{name}"').fetchone()
        out[name.removeprefix(f"{prefix}_")] = (int(n), h)
    return out


def stored_rows(store: Any) -> dict[str, Any]:
    """Every row of an in-memory ``DuckDBStore``'s tables as Arrow tables, cut into the batches NLQL wrote
    them in (documents by their ``seq``, ``BATCH`` at a time; sentences with their document, by ``seq``;
    term rows with their sentence; metadata rows and entity links with their document), each batch's
    rows in the order the table holds them; the edges with the last batch. Also the tables' digests
    (:func:`table_digests`) and the BM25 statistics, which the floor must end with."""
    import pyarrow as pa
    import pyarrow.compute as pc

    conn, prefix = store._conn.cursor(), store.table_prefix  # noqa: SLF001 - (a connection of its own)
    got = {t: conn.sql(f'SELECT * FROM "{prefix}_{t}"').to_arrow_table() for t in (*BATCHED, "entity_edges")}
    seqs = np.sort(got["docs"].column("seq").to_numpy())
    doc_batch = np.searchsorted(seqs, got["docs"].column("seq").to_numpy()) // BATCH
    unit_batch = np.searchsorted(seqs, got["units"].column("seq").to_numpy()) // BATCH
    keys = got["units"].column("key").to_numpy()
    by_key = np.argsort(keys)
    of: dict[str, np.ndarray] = {"docs": doc_batch, "units": unit_batch,
                                 "terms": unit_batch[by_key][np.searchsorted(keys[by_key],
                                                                             got["terms"].column("key").to_numpy())]}
    for t in ("flat", "members", "entity_links"):
        at = pc.index_in(got[t].column("doc_id"), value_set=got["docs"].column("doc_id")).to_numpy(zero_copy_only=False)
        of[t] = doc_batch[at.astype(np.int64)] if len(at) else np.zeros(0, dtype=np.int64)
    nb = int(doc_batch.max()) + 1
    batches = [{t: got[t].filter(pa.array(of[t] == b)) for t in BATCHED} for b in range(nb)]
    batches[-1]["entity_edges"] = got["entity_edges"]
    bm25 = conn.execute(f'SELECT n, total_len FROM "{prefix}_bm25"').fetchone()
    return {"batches": batches, "dim": store.dim, "digests": table_digests(conn, prefix), "bm25": tuple(bm25),
            "counts": {t: got[t].num_rows for t in got}}  # (the cursor closes with the store)


def arrow_nlql_tables(rows: dict[str, Any]) -> tuple[float, float]:
    """(wall, CPU seconds): the rows NLQL stored (:func:`stored_rows`) loaded by DuckDB's own bulk path
    (an Arrow table registered, ``INSERT INTO … SELECT … FROM`` it, per table) into a fresh set of NLQL's
    tables, created empty by ``DuckDBStore.open`` (NLQL's schema, keys and database settings; one DuckDB
    thread, as NLQL's writes), one transaction per batch with the BM25 statistics updated as NLQL does; then checked: every table holds
    the same rows as NLQL's (count and digest)."""
    from nlql.stores.duckdb import DuckDBStore

    store = DuckDBStore(table_prefix="floor")
    store.open(rows["dim"])
    conn = store._conn  # noqa: SLF001
    # on one DuckDB thread, as NLQL writes (DuckDBStore._one_thread): at 100k, load 2, one run each,
    # 1.04 s against 1.32 s with DuckDB's default two threads
    conn.execute("SET threads = 1")
    t, c = time.perf_counter(), time.process_time()
    for batch in rows["batches"]:
        conn.execute("BEGIN TRANSACTION")
        n = total = 0
        for table, tbl in batch.items():
            if not tbl.num_rows:
                continue
            cols = ", ".join(f'"{x}"' for x in tbl.column_names)
            conn.register("floor_src", tbl)
            conn.execute(f'INSERT INTO "floor_{table}" ({cols}) SELECT {cols} FROM floor_src')
            conn.unregister("floor_src")
            if table == "units":
                n, total = tbl.num_rows, int(tbl.column("nterms").to_numpy().sum())
        conn.execute('UPDATE "floor_bm25" SET n = n + $1, total_len = total_len + $2', [n, total])
        conn.execute("COMMIT")
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    got = table_digests(conn.cursor(), "floor")
    assert got == rows["digests"], {k: (got.get(k), rows["digests"].get(k)) for k in set(got) | set(rows["digests"])
                                    if got.get(k) != rows["digests"].get(k)}
    store.close()
    return wall, cpu


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
    stored: dict[str, Any] = {}
    try:
        for r in range(args.rounds):
            runs: dict[str, Any] = {}
            if "duckdb" not in args.skip:
                runs["raw DuckDB"] = lambda: raw_duckdb(data)
                # (the first round's rows read back after its clock, for the next floor)
                runs["NLQL on DuckDB"] = lambda: nlql_duckdb(data, None if stored else stored)
                runs["Arrow insert, NLQL's tables"] = lambda: arrow_nlql_tables(stored)[0]
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
    for nlql_name, raw_name, key in (("NLQL on DuckDB", "raw DuckDB", "ratio_to_raw"),
                                     ("NLQL on DuckDB", "Arrow insert, NLQL's tables", "ratio_to_tables"),
                                     ("NLQL on PostgreSQL", "raw PostgreSQL COPY", "ratio_to_raw")):
        if nlql_name in times and raw_name in times:
            ratios = [a / b for a, b in zip(times[nlql_name], times[raw_name], strict=True)]
            rows[nlql_name][key] = round(statistics.median(ratios), 2)
            log(f"[duckdb_ingest] {nlql_name}: {rows[nlql_name]['s']} s, {rows[nlql_name][key]}× "
                f"{raw_name} ({rows[raw_name]['s']} s)")
    out["rows"] = rows
    if stored:
        out["stored_rows"] = stored["counts"]
    out["load_1min_during"] = [round(x, 2) for x in loads]
    stamp_end(out, started)
    write_json(args.out, out)


if __name__ == "__main__":
    main()
