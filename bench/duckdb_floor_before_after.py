#!/usr/bin/env python3
"""``bench/duckdb_floor.py``'s query kinds, an earlier revision against this tree, in one interleaved run
(issue 35: NLQL on DuckDB within 1.5x DuckDB's own best statement for every kind at 100k).

Each side is a long-lived process with its own tree first on ``sys.path`` (the earlier revision checked
out with ``git worktree``): it builds ``bench/pg_speed.py``'s corpus (``--n`` one-sentence documents,
precomputed vectors), ingests it into ``Engine(store=DuckDBStore())`` (in memory) and loads the same rows
into DuckDB's own tables (``bench/duckdb_floor.py``'s ``raw_rows``, a connection of their own), then, when
the parent asks, times rounds of every (system, kind) pair round-robin (the query texts cycled), wall and
process CPU ms. The parent asks the two sides for ``--batch`` rounds in turn, so load from other processes
lands on both. Each side's ratio NLQL / raw is taken within that side (its own interleaved run); the
figures are medians. ``raw_parsed|tag`` is the raw 0.1% statement parsed once
(``extract_statements``) and executed as the parsed statement, as this tree's store executes its own: a
stricter floor than the hand-written ``conn.execute(text, params)``. Both sides' top-10 ids for every
query text and kind must be equal (and equal to the raw statement's).

    python bench/duckdb_floor_before_after.py --before 18b12ed --n 100000 --rounds 30

Writes bench/results/duckdb_floor_before_after.json.
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

from bench.common import (  # noqa: E402
    RESULTS,
    close_children,
    earlier_tree,
    log,
    machine_info,
    stamp_end,
    tree_env,
    write_json,
)

CHILD = r"""
import json, sys, time
import numpy as np
from bench.duckdb_floor import KINDS, TAG, nlql_rows, raw_rows
from bench.pg_speed import QUERY_TEXTS, Lookup, corpus
from nlql import Engine
from nlql.stores.duckdb import DuckDBStore
from nlql.text.analyzer import Analyzer
import nlql
n = int(sys.argv[1])
texts, ids, metas, vecs, qvecs = corpus(n)
emb = Lookup(texts + QUERY_TEXTS, np.concatenate([vecs, qvecs]))
eng = Engine(embedder=emb, store=DuckDBStore(), warm_up=False)
eng.add_texts(texts, ids=ids, metadatas=metas, batch_size=8192)
raw, conn = raw_rows(texts, metas, vecs, qvecs, Analyzer())
nl = nlql_rows(eng)
parsed = conn.extract_statements(
    f"SELECT id FROM raw WHERE tag = '{TAG}' ORDER BY array_inner_product(embedding, $1::FLOAT[{vecs.shape[1]}]) DESC, "
    "id LIMIT 10")[0]
qv = [v.tolist() for v in qvecs]
sides = {**{f"nlql|{k}": nl[k] for k in KINDS}, **{f"raw|{k}": raw[k] for k in KINDS},
         "raw_parsed|tag": lambda i: [int(r[0]) for r in conn.execute(parsed, [qv[i]]).fetchall()]}
answers = {name: [fn(i) for i in range(len(QUERY_TEXTS))] for name, fn in sides.items()}
for _ in range(2):
    for i in range(len(QUERY_TEXTS)):
        for fn in sides.values():
            fn(i)
print(json.dumps({"ready": True, "nlql": nlql.__file__, "answers": answers}), flush=True)
at = 0
for line in sys.stdin:
    rounds = int(line)
    out = {name: {"wall": [], "cpu": []} for name in sides}
    for _ in range(rounds):
        i = at % len(QUERY_TEXTS)
        at += 1
        for name, fn in sides.items():
            c, t = time.process_time(), time.perf_counter()
            fn(i)
            w, c = time.perf_counter() - t, time.process_time() - c
            out[name]["wall"].append(w * 1000)
            out[name]["cpu"].append(c * 1000)
    print(json.dumps(out), flush=True)
"""

KINDS = ("top10", "canonical", "tag", "bm25", "rrf")


def _start(tree: Path, n: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(n)], env=tree_env(tree), cwd=tree, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _ask(proc: subprocess.Popen[str], rounds: int) -> dict[str, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{rounds}\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default="18b12ed")  # (the tree the seventeenth session's DuckDB work started from)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--batch", type=int, default=5, help="rounds asked of one side before the other's turn")
    ap.add_argument("--out", type=Path, default=RESULTS / "duckdb_floor_before_after.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    machine = machine_info()
    with earlier_tree(args.before) as (rev, old, _tmp):
        procs: dict[str, subprocess.Popen[str]] = {}
        try:
            ready = {}
            for side, tree in (("before", old), ("after", ROOT)):  # one at a time: ingest is not measured
                procs[side] = _start(tree, args.n)
                assert procs[side].stdout is not None
                ready[side] = json.loads(procs[side].stdout.readline())
                log(f"[duckdb_floor_before_after] {side}: ready ({ready[side]['nlql']})")
            load_start = os.getloadavg()
            samples: dict[str, dict[str, dict[str, list[float]]]] = {side: {} for side in procs}
            done = 0
            while done < args.rounds:
                for side, proc in procs.items():
                    for name, v in _ask(proc, args.batch).items():
                        for kind, xs in v.items():
                            samples[side].setdefault(name, {}).setdefault(kind, []).extend(xs)
                done += args.batch
            load_end = os.getloadavg()
        finally:
            close_children(procs.values())
    ms = {side: {name: {kind: round(statistics.median(xs), 3) for kind, xs in v.items()} for name, v in per.items()}
          for side, per in samples.items()}
    ratios = {side: {k: {t: round(per[f"nlql|{k}"][t] / per[f"raw|{k}"][t], 2) for t in ("wall", "cpu")} for k in KINDS}
              for side, per in ms.items()}
    for side, per in ms.items():
        ratios[side]["tag_over_parsed"] = {t: round(per["nlql|tag"][t] / per["raw_parsed|tag"][t], 2)
                                           for t in ("wall", "cpu")}
    answers = {side: r["answers"] for side, r in ready.items()}
    same_sides = {k: answers["before"][f"nlql|{k}"] == answers["after"][f"nlql|{k}"] for k in KINDS}
    same_raw = {k: answers["after"][f"nlql|{k}"] == answers["after"][f"raw|{k}"] for k in KINDS}
    out = {"title": f"NLQL on DuckDB against DuckDB's own statements at {args.n:,}: {rev} against this tree, "
                    "interleaved (issue 35)",
           "description": __doc__.split("\n\n")[1], "benchmark": "duckdb_floor_before_after", "before": rev,
           "n": args.n, "rounds": args.rounds, "ms": ms, "nlql_over_raw": ratios,
           "same_top10_before_after": same_sides, "same_top10_as_raw": same_raw,
           "load_start": [round(x, 2) for x in load_start], "load_end": [round(x, 2) for x in load_end],
           "machine": machine}
    stamp_end(out, started)
    write_json(args.out, out)
    for k in KINDS:
        for side in ("before", "after"):
            a, b = ms[side][f"nlql|{k}"], ms[side][f"raw|{k}"]
            print(f"{k:9s} {side:6s}: NLQL {a['wall']:8.2f} ms wall / {a['cpu']:8.2f} CPU; raw {b['wall']:8.2f} / "
                  f"{b['cpu']:8.2f}; NLQL/raw {ratios[side][k]['wall']}x wall, {ratios[side][k]['cpu']}x CPU")
    for side in ("before", "after"):
        p = ms[side]["raw_parsed|tag"]
        print(f"tag {side:6s} against the raw statement parsed once ({p['wall']:.2f} ms wall / {p['cpu']:.2f} CPU): "
              f"{ratios[side]['tag_over_parsed']['wall']}x wall, {ratios[side]['tag_over_parsed']['cpu']}x CPU")
    print(f"same top-10 before/after {same_sides}; as raw {same_raw}; load {out['load_start']} -> {out['load_end']}")
    return out


if __name__ == "__main__":
    main()
