#!/usr/bin/env python3
"""NLQL's filtered knn on DuckDB: the passing rows ranked in numpy against ranked in SQL, with DuckDB's own
statement as the floor, in one interleaved run (issue 35).

Corpus: ``bench/pg_speed.py``'s (``tag`` t0-t999, one tag is 0.1% of the rows). One in-memory
``DuckDBStore`` serves every query; the query is ``SELECT SENTENCE LET rel = SIMILARITY(content, "…")
WHERE <filter> ORDER BY rel DESC LIMIT 10`` for filters passing 0.1% (``meta.tag == "t7"``), 0.3% and
1% (three and ten tags, ``IN``; at 100k the ten tags' ~1,000 rows are more than
``DuckDBStore.SMALL_ROWS``, so knn finds that out once and ranks in SQL) and ~50%
(``meta.status == "published"``) of the rows:

- ``numpy``: the store as it is (``SMALL_ROWS`` = 512: a filter passing at most that many rows has
  them read in one statement and ranked in numpy, :meth:`DuckDBStore._small_knn`);
- ``sql``: the same store with ``SMALL_ROWS`` = 0 (the ranking in SQL, as before);
- ``raw``: DuckDB's own statement over a plain table of the same rows in the store's connection
  (``raw(id, tag, status, embedding FLOAT[384])``: ``WHERE`` on the columns, ``ORDER BY
  array_inner_product(…) DESC, id LIMIT 10``).

All (filter, side) pairs are timed round-robin (query texts cycled), medians of wall and process CPU
time; ``same``: the numpy and SQL sides give the same hits (ids and scores) on every query text.

    python bench/duckdb_small_filter.py --n 100000 --repeat 6

Writes bench/results/duckdb_small_filter.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, interleaved_cpu_runs, log, machine_info, stamp_end, write_json  # noqa: E402
from bench.pg_speed import DIM, QUERY_TEXTS, Lookup, corpus  # noqa: E402
from nlql import Engine  # noqa: E402

QUERY = 'SELECT SENTENCE LET rel = SIMILARITY(content, "{text}") WHERE {where} ORDER BY rel DESC LIMIT 10'


def _tags(n: int) -> list[str]:
    return [f"t{i}" for i in range(7, 7 + n)]


# name -> (NLQL filter, raw SQL condition, its bound values, which metadata pass)
FILTERS: dict[str, tuple[str, str, list[Any], Callable[[dict[str, Any]], bool]]] = {
    "0.1%": ('meta.tag == "t7"', "tag = $2", ["t7"], lambda m: m["tag"] == "t7"),
    "0.3%": ("meta.tag IN (" + ", ".join(f'"{t}"' for t in _tags(3)) + ")", "tag = ANY($2)", [_tags(3)],
             lambda m: m["tag"] in _tags(3)),
    "1%": ("meta.tag IN (" + ", ".join(f'"{t}"' for t in _tags(10)) + ")", "tag = ANY($2)", [_tags(10)],
           lambda m: m["tag"] in _tags(10)),
    "50%": ('meta.status == "published"', "status = $2", ["published"], lambda m: m["status"] == "published"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=6)
    ap.add_argument("--out", type=Path, default=RESULTS / "duckdb_small_filter.json")
    args = ap.parse_args()
    started = time.perf_counter()
    load_before = os.getloadavg()
    import pyarrow as pa

    from nlql.stores.duckdb import DuckDBStore

    texts, ids, metas, vecs, qvecs = corpus(args.n)
    emb = Lookup(texts + QUERY_TEXTS, np.concatenate([vecs, qvecs]))
    store = DuckDBStore()
    eng = Engine(embedder=emb, store=store, warm_up=False)
    eng.add_texts(texts, ids=ids, metadatas=metas, batch_size=8192)
    small = store.SMALL_ROWS
    conn = store._conn  # (the raw table lives in the store's own database: the same connection type)
    conn.register("src", pa.table({
        "id": pa.array(np.arange(args.n, dtype=np.int64)), "tag": pa.array([m["tag"] for m in metas]),
        "status": pa.array([m["status"] for m in metas]),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), DIM)}))
    conn.execute(f"CREATE TABLE bench_raw (id BIGINT, tag VARCHAR, status VARCHAR, embedding FLOAT[{DIM}])")
    conn.execute("INSERT INTO bench_raw SELECT * FROM src")
    conn.unregister("src")
    qv = [v.tolist() for v in qvecs]
    passing = {name: sum(map(test, metas)) for name, (_, _, _, test) in FILTERS.items()}

    def nlql(where: str, rows: int) -> Callable[[int], list[tuple[str, float]]]:
        queries = [QUERY.format(text=t, where=where) for t in QUERY_TEXTS]

        def run(i: int) -> list[tuple[str, float]]:
            store.SMALL_ROWS = rows
            return [(h.doc_id, h.scores["rel"]) for h in eng.search(queries[i])]

        return run

    def raw(cond: str, values: list[Any]) -> Callable[[int], list[int]]:
        text = (f"SELECT id FROM bench_raw WHERE {cond} ORDER BY array_inner_product(embedding, $1::FLOAT[{DIM}]) "
                "DESC, id LIMIT 10")
        return lambda i: [int(r[0]) for r in conn.execute(text, [qv[i], *values]).fetchall()]

    sides: dict[str, Callable[[int], Any]] = {}
    same: dict[str, str] = {}
    for name, (where, cond, values, _) in FILTERS.items():
        sides[f"{name}|numpy"], sides[f"{name}|sql"] = nlql(where, small), nlql(where, 0)
        sides[f"{name}|raw"] = raw(cond, values)
        agree = sum(sides[f"{name}|numpy"](i) == sides[f"{name}|sql"](i) for i in range(len(QUERY_TEXTS)))
        same[name] = f"{agree}/{len(QUERY_TEXTS)}"
    fns: dict[str, Callable[[], Any]] = {}
    for key, fn in sides.items():
        state = {"i": 0}

        def one(fn: Callable[[int], Any] = fn, state: dict[str, int] = state) -> None:
            fn(state["i"] % len(QUERY_TEXTS))
            state["i"] += 1

        fns[key] = one
    wall, cpu = interleaved_cpu_runs(fns, args.repeat * len(QUERY_TEXTS), warmup=2)
    store.SMALL_ROWS = small
    out: dict[str, Any] = {"title": "DuckDB filtered knn: ranked in numpy against in SQL (issue 35)",
                           "description": __doc__.split("\n\n")[1], "benchmark": "duckdb_small_filter",
                           "n": args.n, "repeat": args.repeat, "small_rows": small, "query": QUERY, "filters": {}}
    for name, (where, _, _, _) in FILTERS.items():
        m = {side: round(statistics.median(wall[f"{name}|{side}"]), 2) for side in ("numpy", "sql", "raw")}
        c = {side: round(statistics.median(cpu[f"{name}|{side}"]), 2) for side in ("numpy", "sql", "raw")}
        out["filters"][name] = {
            "where": where, "passing_rows": passing[name], "wall_ms": m, "cpu_ms": c,
            "numpy_over_raw": round(m["numpy"] / m["raw"], 2), "sql_over_raw": round(m["sql"] / m["raw"], 2),
            "numpy_over_raw_cpu": round(c["numpy"] / c["raw"], 2), "sql_over_raw_cpu": round(c["sql"] / c["raw"], 2),
            "same_hits": same[name]}
        print(f"{name:5s} ({passing[name]:6d} rows)  numpy {m['numpy']:8.2f} ms  sql {m['sql']:8.2f} ms  raw "
              f"{m['raw']:8.2f} ms   over raw: numpy {m['numpy'] / m['raw']:.2f}x sql {m['sql'] / m['raw']:.2f}x   "
              f"CPU numpy {c['numpy'] / c['raw']:.2f}x sql {c['sql'] / c['raw']:.2f}x   same {same[name]}")
    out["load_before"] = [round(x, 2) for x in load_before]
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    out["machine"] = machine_info()
    log(f"[duckdb_small_filter] load {load_before[0]:.1f} -> {out['load_after'][0]:.1f}")
    stamp_end(out, started)
    write_json(args.out, out)


if __name__ == "__main__":
    main()
