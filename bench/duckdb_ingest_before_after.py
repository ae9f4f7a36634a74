#!/usr/bin/env python3
"""NLQL's ingest on DuckDB, an earlier revision against this tree, in one interleaved run (issue 35).

Each round runs, for each tree (``--before``: a revision, checked out into a temporary directory with
``bench.common.earlier_tree``, or ``--old``: a directory holding an older checkout's ``nlql`` and
``bench``; and this checkout), one child process that builds ``bench/pg_speed.py``'s corpus (``--n``
one-sentence documents, precomputed vectors), runs everything once on its first 200 rows (imports and
first calls, not timed), then times, with this checkout's ``bench/duckdb_ingest.py`` over the tree's
``nlql``: the one-table floor (the same ids, texts, metadata and vectors as one Arrow table,
``INSERT INTO raw SELECT * FROM arrow``); ``Engine(store=DuckDBStore()).add_texts(…, batch_size=8192)`` (``--batch-size``)
(in memory), with the time of its phases: the store's Python preparation (``DuckDBStore._prepare``), its
DuckDB statements (``_write``, and ``_finish`` where the tree has it) and the engine's text work
(``Engine._batch``: splitting and embedding; ``GraphSidecar.extract``, or ``prepare`` in a tree without
it: the entity names); a tree that writes a call a batch behind (``DuckDBStore.prepare_write``) runs them
side by side, and the phases' sum less the call's time says by how much (about 0 when they run one after
the other: the engine's own bookkeeping makes it slightly negative);
and the floor of NLQL's own tables: every row that ingest stored (documents, sentences with their keys,
vectors and packed fields, BM25 term rows, typed metadata rows, list members, entity links and edges),
read back after its clock, loaded by DuckDB's own bulk path (an Arrow table registered per table,
``INSERT INTO … SELECT … FROM`` it) into a fresh set of NLQL's tables (``DuckDBStore.open``: the same
schema, keys and database settings), one transaction per batch of NLQL's (8,192 documents) with the BM25
statistics updated, and checked to hold the same rows as NLQL's (per table, the count and a sum of row
hashes). The trees take turns (old, new, new, old, …) so that neither always runs first; medians over
the rounds, and each tree's NLQL time over each floor timed in the same child, in wall time and in the
child's CPU time (every thread's: DuckDB's workers included), which a busy machine inflates less.

    python bench/duckdb_ingest_before_after.py --before d868f83 --n 100000 --rounds 4
    python bench/duckdb_ingest_before_after.py --before 3c19872 --n 100000 --rounds 4 --batch-size 256

Writes bench/results/duckdb_ingest_before_after.json (``_<batch size>.json`` for another batch size).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, earlier_tree, log, machine_info, stamp_end, tree_env, write_json  # noqa: E402

# run in a child whose sys.path starts with the tree: times one raw insert and one NLQL ingest
CHILD = r"""
import gc, importlib.util, json, os, sys, time
tree, n, floors, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
sys.path.insert(0, tree)
import numpy as np
from bench.pg_speed import QUERY_TEXTS, Lookup, corpus
from nlql.stores.duckdb import DuckDBStore

# the timed calls and both floors from this checkout's bench/duckdb_ingest.py (one measure for both trees),
# over the tree's nlql (imported above, as is the tree's bench package)
path = list(sys.path)
spec = importlib.util.spec_from_file_location("ingest_floors", floors)
ingest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ingest)
sys.path[:] = path
ingest.BATCH = batch  # (NLQL's batches, and the floor's transactions cut the same way)

texts, ids, metas, vecs, qvecs = corpus(n)
data = {"texts": texts, "ids": ids, "metas": metas, "vecs": vecs,
        "emb": Lookup(texts + QUERY_TEXTS, np.concatenate([vecs, qvecs]))}
from nlql.engine import Engine
from nlql.execute.graph import GraphSidecar

spent = {"prepare": 0.0, "write": 0.0, "text": 0.0}
# (a tree that writes ahead calls GraphSidecar.extract, an older one GraphSidecar.prepare)
phases = [(DuckDBStore, "_prepare", "prepare"), (DuckDBStore, "_write", "write"), (DuckDBStore, "_finish", "write"),
          (Engine, "_batch", "text"), (GraphSidecar, "extract" if "extract" in GraphSidecar.__dict__ else "prepare", "text")]
for owner, name, phase in phases:
    fn = owner.__dict__.get(name)
    if fn is None:
        continue

    def timed(self, *a, _fn=fn, _phase=phase, **k):
        t = time.perf_counter()
        try:
            return _fn(self, *a, **k)
        finally:
            spent[_phase] += time.perf_counter() - t

    setattr(owner, name, timed)
# a first small run of each (not timed): imports and first-call costs are not ingest
warm = {"texts": texts[:200], "ids": ids[:200], "metas": metas[:200], "vecs": vecs[:200], "emb": data["emb"]}
ingest.raw_duckdb(warm)
warm_rows = {}
ingest.nlql_duckdb(warm, warm_rows)
ingest.arrow_nlql_tables(warm_rows)
del warm_rows
spent.update(prepare=0.0, write=0.0, text=0.0)
gc.collect()
cpu = time.process_time()
raw = ingest.raw_duckdb(data)
raw_cpu = time.process_time() - cpu
gc.collect()
load = os.getloadavg()[0]
rows = {}
cpu = time.process_time()
nlql = ingest.nlql_duckdb(data, rows)  # (the rows NLQL stored read back after its clock)
nlql_cpu = time.process_time() - cpu - rows["read_cpu_s"]
gc.collect()
tables, tables_cpu = ingest.arrow_nlql_tables(rows)
ahead = hasattr(DuckDBStore, "prepare_write")  # (an in-memory store of its own is written a batch behind)
print(json.dumps({"raw_s": raw, "nlql_s": nlql, "prepare_s": spent["prepare"], "write_s": spent["write"],
                  "text_s": spent["text"], "written_ahead": ahead,
                  "overlap_s": spent["prepare"] + spent["write"] + spent["text"] - nlql,
                  "raw_cpu_s": raw_cpu, "nlql_cpu_s": nlql_cpu,
                  "tables_s": tables, "tables_cpu_s": tables_cpu, "stored_rows": rows["counts"], "load": load}))
"""


def run_child(tree: Path, n: int, batch: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(tree), str(n), str(ROOT / "bench" / "duckdb_ingest.py"),
                          str(batch)],
                         cwd=tree, env=tree_env(tree), check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="d868f83", help="the earlier revision (checked out for the run)")
    ap.add_argument("--old", type=Path, default=None, help="an older tree (holding nlql/ and bench/) instead")
    ap.add_argument("--new", type=Path, default=ROOT)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=8192,
                    help="add_texts's batch_size, and the floor's rows per transaction (8192; the default of "
                         "add_texts is 256)")
    ap.add_argument("--out", type=Path, default=None,
                    help="bench/results/duckdb_ingest_before_after.json (with --batch-size: "
                         "duckdb_ingest_before_after_<batch size>.json)")
    args = ap.parse_args()
    if args.old is not None:
        run(args, args.old.resolve(), str(args.old))
    else:
        with earlier_tree(args.before) as (short, tree, _):
            run(args, tree, short)


def run(args: argparse.Namespace, old: Path, old_name: str) -> None:
    started = time.perf_counter()
    load_before = os.getloadavg()
    trees = {"old": old, "new": args.new.resolve()}
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    stored: dict[str, dict[str, int]] = {}  # each tree's rows per table (the same every round)
    for r in range(args.rounds):
        for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
            got = run_child(trees[name], args.n, args.batch_size)
            stored[name] = got.pop("stored_rows")
            runs[name].append(got)
            log(f"[duckdb_ingest_before_after] round {r} {name}: NLQL {got['nlql_s']:.2f} s (prepare {got['prepare_s']:.2f}, "
                f"statements {got['write_s']:.2f}, text {got['text_s']:.2f}, overlapping {got['overlap_s']:.2f}; "
                f"CPU {got['nlql_cpu_s']:.2f}), Arrow "
                f"insert of NLQL's tables {got['tables_s']:.2f} s (CPU {got['tables_cpu_s']:.2f}), one table "
                f"{got['raw_s']:.2f} s (CPU {got['raw_cpu_s']:.2f}), load {got['load']:.1f}")
    summary: dict[str, Any] = {}
    for name, rows in runs.items():
        med: dict[str, Any] = {k: round(statistics.median(x[k] for x in rows), 2)
                               for k in ("nlql_s", "tables_s", "raw_s", "prepare_s", "write_s", "text_s", "overlap_s")}
        med["written_ahead"] = rows[0]["written_ahead"]
        # the process's CPU time (every thread's, DuckDB's included): what the load does not inflate
        for k in ("nlql_cpu_s", "tables_cpu_s", "raw_cpu_s"):
            med[k] = round(statistics.median(x[k] for x in rows), 2)
        for floor, key in (("tables", "tables"), ("raw", "raw")):
            med[f"ratio_to_{floor}"] = round(statistics.median(x["nlql_s"] / x[f"{key}_s"] for x in rows), 2)
            med[f"cpu_ratio_to_{floor}"] = round(statistics.median(x["nlql_cpu_s"] / x[f"{key}_cpu_s"] for x in rows), 2)
        med["stored_rows"] = stored[name]
        summary[name] = med
        print(f"{name}: NLQL {med['nlql_s']} s (store preparation {med['prepare_s']} s, store statements "
              f"{med['write_s']} s, engine's split, embedding and entities {med['text_s']} s, of which run "
              f"side by side {med['overlap_s']} s; written ahead: {med['written_ahead']}; CPU {med['nlql_cpu_s']} s)\n"
              f"  = {med['ratio_to_tables']}x the Arrow insert of NLQL's tables ({med['tables_s']} s), CPU "
              f"{med['cpu_ratio_to_tables']}x ({med['tables_cpu_s']} s)\n"
              f"  = {med['ratio_to_raw']}x the one-table Arrow insert ({med['raw_s']} s), CPU {med['cpu_ratio_to_raw']}x "
              f"({med['raw_cpu_s']} s)")
    summary["new_over_old"] = round(statistics.median(
        b["nlql_s"] / a["nlql_s"] for a, b in zip(runs["old"], runs["new"], strict=True)), 2)
    summary["new_over_old_cpu"] = round(statistics.median(
        b["nlql_cpu_s"] / a["nlql_cpu_s"] for a, b in zip(runs["old"], runs["new"], strict=True)), 2)
    print(f"new / old NLQL ingest: {summary['new_over_old']}x wall, {summary['new_over_old_cpu']}x CPU")
    load_after = os.getloadavg()
    print(f"load {load_before[0]:.1f} -> {load_after[0]:.1f}")
    other = "" if args.batch_size == 8192 else f", batches of {args.batch_size}"
    out: dict[str, Any] = {"title": f"NLQL ingest on DuckDB, before and after (issue 35){other}",
                           "description": __doc__.split("\n\n")[1], "benchmark": "duckdb_ingest_before_after",
                           "n": args.n, "batch_size": args.batch_size, "rounds": args.rounds, "before": old_name,
                           "summary": summary, "runs": runs, "load_before": [round(x, 2) for x in load_before],
                           "load_after": [round(x, 2) for x in load_after], "machine": machine_info()}
    stamp_end(out, started)
    name = "duckdb_ingest_before_after" + ("" if args.batch_size == 8192 else f"_{args.batch_size}")
    write_json(args.out or RESULTS / f"{name}.json", out)


if __name__ == "__main__":
    main()
