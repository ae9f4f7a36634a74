#!/usr/bin/env python3
"""Ingest into NLQL on PostgreSQL against binary COPY of the same rows (issue 35).

Corpus: ``bench/pg_speed.py``'s (one-sentence documents, ``status``/``tag``/``year``/``topic``
metadata, clustered unit vectors of dim 384 precomputed and looked up, so no embedding is timed).
Timed in one process, round-robin (``--rounds`` rounds, each system once per round, fresh tables):

- ``NLQL``: ``Engine(store=PgVectorStore(uri, exact=True)).add_texts(…, batch_size=8192)`` (everything
  NLQL stores: documents, sentences with vectors, BM25 term rows and statistics; no HNSW build);
- ``COPY, NLQL's tables``: every row NLQL stored in the first round (documents, sentences with their
  keys and vectors, BM25 term rows and statistics, entity links and edges), read back (untimed) and
  written by binary ``COPY … FROM STDIN`` (psycopg's ``cursor.copy`` with ``set_types`` and
  ``write_row``) into a fresh set of NLQL's own tables (the same columns, keys and indexes), one
  transaction per batch of 8192 documents: the database's own cost of storing what NLQL stores;
- ``COPY, one table``: id, text, metadata (jsonb) and vector by binary COPY into one table without
  an index, one transaction (``bench/duckdb_ingest.py``'s floor).

PostgreSQL 16 + pgvector 0.6.2 from ``pgserver`` with ``bench/pg_speed.py``'s settings (no fsync).
Ratios are NLQL / floor per round (median), of wall time and of CPU time (this process's plus the
server backend's, read with psutil: less sensitive to other work on the machine). ``--profile`` adds one NLQL run under cProfile (the
client side's functions by cumulative time).

    python bench/pg_ingest.py --n 100000
    python bench/pg_ingest.py --n 10000 --rounds 3
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


class Clock:
    """Wall time, this process's CPU time and the server backend's CPU time (``pid``) between start and stop."""

    def __init__(self, pid: int) -> None:
        import psutil

        self._proc = psutil.Process(pid)
        c = self._proc.cpu_times()
        self._start = (time.perf_counter(), time.process_time(), c.user + c.system)

    def stop(self) -> tuple[float, float, float]:
        c = self._proc.cpu_times()
        now = (time.perf_counter(), time.process_time(), c.user + c.system)
        return (now[0] - self._start[0], now[1] - self._start[1], now[2] - self._start[2])


def nlql(data: dict[str, Any], uri: str, prefix: str) -> tuple[float, float, float]:
    from nlql.stores.pgvector import PgVectorStore

    eng = Engine(embedder=data["emb"], store=PgVectorStore(uri, table_prefix=prefix, exact=True), warm_up=False)
    eng.store.open(DIM)  # (the schema exists before the clock starts, as the floor's does)
    clock = Clock(eng.store._connection().info.backend_pid)  # noqa: SLF001
    eng.add_texts(data["texts"], ids=data["ids"], metadatas=data["metas"], batch_size=BATCH)
    dt = clock.stop()
    assert eng.store.count() == len(data["texts"])
    eng.close()
    return dt


TABLES = {  # table: (columns, order, the column that gives a row's batch: a document's seq or a sentence's key)
    "docs": (["doc_id", "seq", "text", "metadata", "mflat", "fold", "num", "ts", "created", "mlists"], "seq", "seq"),
    "units": (["key", "doc_id", "position", "content", "start", "end", "tail", "seq", "fold", "num", "ts",
               "embedding", "nterms"], "key", "seq"),
    "terms": (["term", "key", "tf"], "key, term", None),
    "entity_links": (["doc_id", "position", "entity", "name"], "doc_id, position, entity", None),
    "entity_edges": (["a", "b", "weight"], "a, b", None),
}


def stored_rows(uri: str, prefix: str) -> dict[str, Any]:
    """Every row of NLQL's tables under ``prefix`` (binary), cut into the batches NLQL wrote: documents
    and sentences by seq, terms by their sentence, links by their document (edges with the last batch)."""
    import psycopg

    from nlql.stores.pgvector.driver import register_vector

    out: dict[str, Any] = {"types": {}}
    with psycopg.connect(uri) as conn:
        register_vector(conn, conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0])
        for table, (cols, order, _) in TABLES.items():
            quoted = ", ".join(f'"{c}"' for c in cols)
            cur = conn.cursor(binary=True)
            cur.execute(f"SELECT {quoted} FROM {prefix}_{table} ORDER BY {order}")
            out[table] = cur.fetchall()
            out["types"][table] = [d.type_code for d in cur.description]
        out["bm25"] = conn.execute(f"SELECT n, total_len FROM {prefix}_bm25").fetchone()
    seq_batch = {r[1]: (i // BATCH) for i, r in enumerate(out["docs"])}
    doc_batch = {r[0]: seq_batch[r[1]] for r in out["docs"]}
    key_batch = {r[0]: seq_batch[r[7]] for r in out["units"]}
    nb = max(seq_batch.values()) + 1
    batches: list[dict[str, list[Any]]] = [{t: [] for t in TABLES} for _ in range(nb)]
    for r in out["docs"]:
        batches[seq_batch[r[1]]]["docs"].append(r)
    for r in out["units"]:
        batches[key_batch[r[0]]]["units"].append(r)
    for r in out["terms"]:
        batches[key_batch[r[1]]]["terms"].append(r)
    for r in out["entity_links"]:
        batches[doc_batch[r[0]]]["entity_links"].append(r)
    batches[-1]["entity_edges"] = out["entity_edges"]
    return {"batches": batches, "types": out["types"], "bm25": out["bm25"],
            "counts": {t: len(out[t]) for t in TABLES}}


def copy_nlql_tables(rows: dict[str, Any], uri: str, prefix: str) -> tuple[float, float, float]:
    """The rows NLQL stored, by binary COPY into a fresh set of NLQL's tables, one transaction per batch."""
    import psycopg

    from nlql.stores.pgvector import PgVectorStore
    from nlql.stores.pgvector.driver import register_vector

    store = PgVectorStore(uri, table_prefix=prefix, exact=True)
    store.open(DIM)  # the same tables and indexes, empty
    store.close()
    d = store.dialect
    with psycopg.connect(uri) as conn:
        register_vector(conn, conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0])
        conn.commit()
        clock = Clock(conn.info.backend_pid)
        for batch in rows["batches"]:
            with conn.cursor() as cur:
                for table, (cols, _, _) in TABLES.items():
                    if not batch[table]:
                        continue
                    with cur.copy(d.bulk_load(table, cols)) as cp:
                        cp.set_types(rows["types"][table])
                        for r in batch[table]:
                            cp.write_row(r)
                cur.execute(f"UPDATE {d.table('bm25')} SET n = n + %s, total_len = total_len + %s",
                            [len(batch["units"]), sum(r[-1] for r in batch["units"])])
            conn.commit()
        dt = clock.stop()
        for table, n in rows["counts"].items():
            assert conn.execute(f"SELECT count(*) FROM {d.table(table)}").fetchone()[0] == n, table
        assert conn.execute(f"SELECT n, total_len FROM {d.table('bm25')}").fetchone() == rows["bm25"]
    return dt


def copy_one_table(data: dict[str, Any], uri: str, name: str) -> tuple[float, float, float]:
    import psycopg

    from nlql.stores.pgvector.driver import Vector, register_vector, vector_bytes

    with psycopg.connect(uri) as conn:
        oid = conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0]
        register_vector(conn, oid)
        conn.execute(f"CREATE TABLE {name} (doc_id text, text text, metadata jsonb, embedding vector({DIM}))")
        conn.commit()
        clock = Clock(conn.info.backend_pid)
        with conn.cursor() as cur, cur.copy(f"COPY {name} (doc_id, text, metadata, embedding) FROM STDIN "
                                           "WITH (FORMAT BINARY)") as cp:
            cp.set_types(["text", "text", "jsonb", oid])
            for i, text, meta, vec in zip(data["ids"], data["texts"], data["metas"], data["vecs"], strict=True):
                cp.write_row((i, text, json.dumps(meta), Vector(vector_bytes(vec))))
        conn.commit()
        dt = clock.stop()
        assert conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0] == len(data["texts"])
    return dt


def profile_nlql(data: dict[str, Any], uri: str) -> list[str]:
    import cProfile
    import io
    import pstats

    pr = cProfile.Profile()
    pr.enable()
    nlql(data, uri, "prof")
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(30)
    return s.getvalue().splitlines()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out_path = args.out or RESULTS / ("pg_ingest.json" if args.n == 100_000 else f"pg_ingest_{args.n}.json")
    started = time.perf_counter()
    texts, ids, metas, vecs, qvecs = corpus(args.n)
    data = {"texts": texts, "ids": ids, "metas": metas, "vecs": vecs,
            "emb": Lookup(texts + QUERY_TEXTS, np.concatenate([vecs, qvecs]))}
    out: dict[str, Any] = {"title": "Ingest: NLQL on PostgreSQL against binary COPY of the same rows (issue 35)",
                           "description": __doc__.split("\n\n")[1], "benchmark": "pg_ingest",
                           "sentences": args.n, "batch_size": BATCH, "machine": machine_info()}
    server = Postgres()
    times: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}  # this process's CPU + the server backend's
    loads = []
    try:
        rows: dict[str, Any] = {}
        for r in range(args.rounds):
            runs = {"NLQL": lambda r=r: nlql(data, server.uri, f"ing{r}"),
                    "COPY, NLQL's tables": lambda r=r: copy_nlql_tables(rows, server.uri, f"cp{r}"),
                    "COPY, one table": lambda r=r: copy_one_table(data, server.uri, f"raw{r}")}
            for name, fn in runs.items():
                gc.collect()
                loads.append(os.getloadavg()[0])
                if name == "COPY, NLQL's tables" and not rows:
                    rows.update(stored_rows(server.uri, "ing0"))  # (untimed)
                    out["stored_rows"] = rows["counts"]
                wall, client, server_cpu = fn()
                times.setdefault(name, []).append(wall)
                cpu.setdefault(name, []).append(client + server_cpu)
                log(f"[pg_ingest] round {r} {name}: {wall:.2f} s wall, CPU {client:.2f} s here + {server_cpu:.2f} s "
                    f"in the server backend (load {loads[-1]:.1f})")
        if args.profile:
            out["profile"] = profile_nlql(data, server.uri)
            print("\n".join(out["profile"][:60]))
        out["versions"] = server.versions
    finally:
        server.stop()
    table = {name: {"s": round(statistics.median(v), 2), "runs_s": [round(x, 2) for x in v],
                    "cpu_s": round(statistics.median(cpu[name]), 2), "cpu_runs_s": [round(x, 2) for x in cpu[name]]}
             for name, v in times.items()}
    for floor in ("COPY, NLQL's tables", "COPY, one table"):
        ratios = [a / b for a, b in zip(times["NLQL"], times[floor], strict=True)]
        cratios = [a / b for a, b in zip(cpu["NLQL"], cpu[floor], strict=True)]
        table["NLQL"][f"ratio_to {floor}"] = round(statistics.median(ratios), 2)
        table["NLQL"][f"cpu_ratio_to {floor}"] = round(statistics.median(cratios), 2)
        log(f"[pg_ingest] NLQL {table['NLQL']['s']} s = {statistics.median(ratios):.2f}x {floor} "
            f"({table[floor]['s']} s); CPU (client + backend) {statistics.median(cratios):.2f}x")
    out["rows"] = table
    out["load_1min_during"] = [round(x, 2) for x in loads]
    stamp_end(out, started)
    write_json(out_path, out)


if __name__ == "__main__":
    main()
