"""engine.schema() cost: the built-in store at 100k documents (kept at write time) and pgvector (sampled).

    PYTHONPATH=$PWD python bench/schema.py [--docs 100000] [--pg-docs 20000] [--repeat 20]

Documents are written straight to the store (random unit vectors, 2 sentences each, 6 metadata keys of
mixed types), so the figure is the schema read itself, not embedding. Writes bench/results/schema.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS, log, machine_info, stamp_end, timed_runs, write_json  # noqa: E402
from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.stores.base import DocRecord, UnitRecord  # noqa: E402

DIM = 16


def _docs(n: int, start: int = 0, seed: int = 0) -> list[DocRecord]:
    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(2 * n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    out = []
    langs = ["en", "de", "fr", "es"]
    for i in range(n):
        j = start + i
        meta: dict[str, Any] = {"year": 2000 + j % 25, "lang": langs[j % 4], "section": j % 40,
                                "author": {"name": f"author {j % 300}"}, "published": j % 3 == 0}
        if j % 10 == 0:
            meta["tags"] = ["a", "b"]
        units = [UnitRecord(0, f"Sentence one of {j}.", 0, 18, " "), UnitRecord(1, f"Two of {j}.", 19, 29)]
        out.append(DocRecord(f"d{j}", f"Sentence one of {j}. Two of {j}.", meta, units,
                             vecs[2 * i:2 * i + 2], j + 1))
    return out


def _fill(engine: Engine, n: int, batch: int = 5000) -> float:
    t = time.perf_counter()
    for lo in range(0, n, batch):
        engine.store.upsert(_docs(min(batch, n - lo), lo, seed=lo))
    return time.perf_counter() - t


def bench_builtin(n: int, repeat: int) -> dict[str, Any]:
    e = Engine(embedder=HashEmbedder(dim=DIM), warm_up=False)
    fill_s = _fill(e, n)
    s = e.schema()
    assert s.documents == n, s.documents
    med, runs = timed_runs(e.schema, repeat)
    # the write-time cost: upserting 1,000 more documents with and without the summary is the same code
    # path, so report the fill rate instead
    log(f"built-in: {n} docs, schema() median {med:.3f} ms ({len(s.keys)} keys); fill {fill_s:.1f} s")
    e.close()
    return {"store": "memory", "documents": n, "sentences": s.sentences, "keys": len(s.keys),
            "median_ms": round(med, 3), "runs_ms": [round(r, 3) for r in runs], "method": s.method,
            "fill_seconds": round(fill_s, 2), "target_ms": 50, "meets_target": med < 50}


def bench_pgvector(n: int, repeat: int) -> dict[str, Any] | None:
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from pg_server import get_test_server, stop_test_server

        from nlql.stores.pgvector import PgVectorStore
    except ImportError as exc:
        log(f"pgvector skipped: {exc}")
        return None
    dsn = os.environ.get("NLQL_BENCH_PG_DSN") or str(get_test_server().new_database())
    try:
        e = Engine(embedder=HashEmbedder(dim=DIM), store=PgVectorStore(dsn, table_prefix="bschema", bm25=False),
                   warm_up=False)
        fill_s = _fill(e, n, batch=2000)
        out: dict[str, Any] = {"store": "pgvector", "documents": n, "fill_seconds": round(fill_s, 2), "by_sample": {}}
        for sample in (100, 1000, 5000):
            med, runs = timed_runs(lambda sample=sample: e.schema(sample=sample), repeat)
            s = e.schema(sample=sample)
            out["by_sample"][str(sample)] = {"median_ms": round(med, 3), "sampled": s.sampled, "keys": len(s.keys)}
            log(f"pgvector: {n} docs, schema(sample={sample}) median {med:.2f} ms (sampled {s.sampled})")
        e.close()
        return out
    finally:
        if not os.environ.get("NLQL_BENCH_PG_DSN"):
            stop_test_server()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--pg-docs", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    started = time.time()
    results: dict[str, Any] = {"machine": machine_info(), "load_average": os.getloadavg(),
                               "builtin": bench_builtin(args.docs, args.repeat)}
    if args.pg_docs:
        results["pgvector"] = bench_pgvector(args.pg_docs, max(5, args.repeat // 2))
    stamp_end(results, started)
    write_json(RESULTS / "schema.json", results)


if __name__ == "__main__":
    main()
