#!/usr/bin/env python3
"""A selective metadata filter on DuckDB: NLQL's pushed filter against DuckDB's own best statement.

The same rows (one-sentence documents, random unit vectors of dim 384, ``cohort = i % 1000``, so
``cohort == 7`` keeps 0.1%) in ``DuckDBStore()`` (in memory, written by ``store.upsert``) and in a plain
DuckDB table ``raw(key, embedding FLOAT[384], cohort DOUBLE)`` made from them in the same connection.
Timed interleaved (round-robin), 5 query vectors × ``--repeat``:

- ``nlql_knn``: ``store.knn(q, 10, compile_filter(meta.cohort == 7))``, the statement NLQL sends
  (metadata equality as a semi-join on ``<p>_flat``, ``DuckDBDialect.indexed_leaf``);
- ``nlql_map_lookup``: the same knn with the filter compiled over the typed views (the MAP lookup
  in every document, what NLQL sent before ``<p>_flat``);
- ``raw``: ``SELECT key FROM raw WHERE cohort = 7 ORDER BY array_cosine_similarity(…) DESC LIMIT 10``.

Also: the same top 10 for every query, and the load average.

    python bench/duckdb_filter.py --n 100000
"""

from __future__ import annotations

import argparse
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

from bench.common import RESULTS, interleaved_runs, log, machine_info, write_json  # noqa: E402
from nlql.pushdown import Cond  # noqa: E402
from nlql.stores.base import DocRecord, UnitRecord  # noqa: E402
from nlql.stores.duckdb import DuckDBStore  # noqa: E402

DIM = 384


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    started = time.time()
    load0 = os.getloadavg()
    rng = np.random.default_rng(42)
    vecs = rng.standard_normal((args.n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    docs = [DocRecord(f"d{i}", f"item {i} about solar energy.", {"cohort": i % 1000},
                      [UnitRecord(0, f"item {i} about solar energy.", 0, 27)], vecs[i:i + 1], i + 1)
            for i in range(args.n)]
    store = DuckDBStore()
    store.open(DIM)
    t = time.perf_counter()
    for lo in range(0, args.n, 4096):
        store.upsert(docs[lo:lo + 4096])
    upsert_s = time.perf_counter() - t
    log(f"upsert {args.n}: {upsert_s:.1f} s")
    conn: Any = store._conn
    conn.execute("CREATE TABLE raw AS SELECT u.key, u.embedding, (d.mflat['[\"cohort\"]']).n AS cohort "
                 "FROM nlql_units u JOIN nlql_docs d ON d.doc_id = u.doc_id")
    cond = Cond("eq", ("meta", "cohort"), 7)
    pushed = store.compile_filter(cond)
    store.dialect.flat_index = False
    typed_views = store.compile_filter(cond)
    store.dialect.flat_index = True
    raw_sql = (f"SELECT key FROM raw WHERE cohort = 7 ORDER BY array_cosine_similarity(embedding, "
               f"$1::FLOAT[{DIM}]) DESC, key LIMIT 10")
    queries = [v / np.linalg.norm(v) for v in rng.standard_normal((5, DIM)).astype(np.float32)]
    same = all([k for k, _ in store.knn(q[None], 10, pushed)[0]] == [r[0] for r in conn.execute(raw_sql, [q]).fetchall()]
               for q in queries)

    def each(fn: Any) -> Any:
        return lambda: [fn(q) for q in queries]

    runs = interleaved_runs({
        "nlql_knn": each(lambda q: store.knn(q[None], 10, pushed)),
        "nlql_map_lookup": each(lambda q: store.knn(q[None], 10, typed_views)),
        "raw": each(lambda q: conn.execute(raw_sql, [q]).fetchall()),
    }, args.repeat)
    med = {k: round(statistics.median(v) / len(queries), 2) for k, v in runs.items()}
    load1 = os.getloadavg()
    out = {"n": args.n, "selectivity": 0.001, "median_ms": med,
           "ratio_vs_raw": {k: round(med[k] / med["raw"], 2) for k in ("nlql_knn", "nlql_map_lookup")},
           "same_top10": same, "upsert_s": round(upsert_s, 1), "load_before": load0, "load_after": load1,
           "machine": machine_info(), "seconds": round(time.time() - started, 1),
           "filter_sql": pushed.native}
    for k, v in med.items():
        print(f"{k:16s} {v:8.2f} ms" + (f"  ({out['ratio_vs_raw'][k]}x raw)" if k != "raw" else ""))
    print(f"same top 10: {same}; load {load0[0]:.1f} -> {load1[0]:.1f}")
    write_json(RESULTS / "duckdb_filter.json", out)


if __name__ == "__main__":
    main()
