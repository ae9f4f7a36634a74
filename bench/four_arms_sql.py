#!/usr/bin/env python3
"""Four-arm RRF on PostgreSQL and DuckDB, this tree against an earlier revision, interleaved in one run
(issue 32: "TEMPORAL and ``min =>`` inside the one PostgreSQL and DuckDB statement, so a 4-arm query is
one statement").

The corpus is ``bench/graph.py``'s (``n`` one-sentence documents naming people, places and
organisations, Zipf), each document dated in one of the forms metadata holds dates (date-only, ISO with
an offset or Z, naive) or with no date (a word, a number, no key); hash embedder (embedding is
microseconds). Each side is a long-lived process with its own tree first on ``sys.path`` (the earlier
revision checked out with ``git worktree``) and its own DuckDB file and PostgreSQL tables (pgserver, exact
semantic arms, as the contract suite compares); the parent asks the sides for a batch of rounds in turn,
so load from other processes lands on both. Queries:

- ``four_arms``: ``RRF(SIMILARITY, BM25, GRAPH, TEMPORAL)`` (the issue's); on DuckDB the earlier
  revision runs it arm by arm (its store kept no entity tables for SQL), this tree as one statement;
- ``four_arms_min``: ``RRF(SIMILARITY min =>, BM25 min =>, TEMPORAL, SIMILARITY)``.

Per side, store and query: ``search`` wall ms (median), the SQL statements one search sends (the
driver's ``execute`` calls, counted), explain's lowering, and against the built-in store: the same rows
in the same order, and each score's largest difference.

    python bench/four_arms_sql.py [--before 4b80043] [--n 10000] [--rounds 30]

Writes bench/results/four_arms_sql.json.
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

QUERIES = {
    "four_arms": "SELECT SENTENCE LET s = SIMILARITY(content, $q), k = BM25(content, $q), g = GRAPH($q), "
                 "t = TEMPORAL(meta.date, $q), f = RRF(s, k, g, t) ORDER BY f DESC LIMIT 10",
    "four_arms_min": "SELECT SENTENCE LET s = SIMILARITY(content, $q, min => 0.05), k = BM25(content, $q, min => 1), "
                     "t = TEMPORAL(meta.date, $q), s2 = SIMILARITY(content, \"the team discussed\"), "
                     "f = RRF(s, k, t, s2) ORDER BY f DESC LIMIT 10",
}

CHILD = r"""
import json, random, sys, time
from collections import Counter
from datetime import datetime, timedelta, timezone
import duckdb, psycopg
from bench.graph import corpus
from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.stores.duckdb import DuckDBStore
from nlql.stores.pgvector import PgVectorStore
import nlql

n, uri, db_path, prefix, reference = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "1"
queries = json.loads(sys.argv[6])
NOW = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)
count = [0]
_execute = psycopg.Cursor.execute

def counted(self, *a, **k):
    count[0] += 1
    return _execute(self, *a, **k)

psycopg.Cursor.execute = counted

class Counting:
    # a DuckDB connection whose statements are counted
    def __init__(self, conn):
        self._c = conn
    def execute(self, *a, **k):
        count[0] += 1
        return self._c.execute(*a, **k)
    def executemany(self, *a, **k):
        count[0] += 1
        return self._c.executemany(*a, **k)
    def sql(self, *a, **k):
        count[0] += 1
        return self._c.sql(*a, **k)
    def __getattr__(self, name):
        return getattr(self._c, name)

texts, truth = corpus(n)
rng = random.Random(3)
metas = []
for i in range(n):
    moment = NOW - timedelta(days=rng.randint(0, 330), hours=rng.randint(0, 23), minutes=rng.randint(0, 59))
    form = i % 8
    if form == 5:
        metas.append({})
        continue
    value = [moment.date().isoformat(), moment.isoformat(), moment.replace(tzinfo=None).isoformat(),
             moment.strftime("%Y-%m-%dT%H:%M:%SZ"), "soon", None, 20261120,
             moment.astimezone(timezone(timedelta(hours=-5))).isoformat()][form]
    metas.append({"date": value})
ids = [f"d{i}" for i in range(n)]
ranked = [name for name, _ in Counter(x for names in truth for x in names).most_common()]
question = f"what did {ranked[len(ranked) // 2]} say last month?"
engines = {
    "duckdb": Engine(embedder=HashEmbedder(dim=384), store=DuckDBStore(connection=Counting(duckdb.connect(db_path))),
                     warm_up=False, clock=lambda: NOW),
    "postgres": Engine(embedder=HashEmbedder(dim=384), store=PgVectorStore(uri, exact=True, table_prefix=prefix),
                       warm_up=False, clock=lambda: NOW),
}
for e in engines.values():
    e.add_texts(texts, ids=ids, metadatas=metas, batch_size=2000)
p = {"q": question}

def answer(e, q):
    hits = e.search(q, params=p)
    return [[h.id, {k: v for k, v in sorted(h.scores.items())}] for h in hits]

info = {"nlql": nlql.__file__, "question": question, "stores": {}}
if reference:
    mem = Engine(embedder=HashEmbedder(dim=384), warm_up=False, clock=lambda: NOW)
    mem.add_texts(texts, ids=ids, metadatas=metas, batch_size=2000)
    info["builtin"] = {label: answer(mem, q) for label, q in queries.items()}
for name, e in engines.items():
    out = info["stores"][name] = {}
    for label, q in queries.items():
        for _ in range(3):
            e.search(q, params=p)  # warm: the graph, the BM25 statistics, caches
        before = count[0]
        got = answer(e, q)
        out[label] = {"answer": got, "statements": count[0] - before,
                      "lowering": e.explain(q, params=p).to_dict().get("lowering")}
print(json.dumps(info), flush=True)
for line in sys.stdin:
    rounds = int(line)
    out = {f"{name}/{label}": [] for name in engines for label in queries}
    for _ in range(rounds):
        for name, e in engines.items():
            for label, q in queries.items():
                t = time.perf_counter()
                e.search(q, params=p)
                out[f"{name}/{label}"].append((time.perf_counter() - t) * 1000)
    print(json.dumps(out), flush=True)
"""


def _compare(a: list[Any], b: list[Any]) -> dict[str, Any]:
    """Whether two answers have the same rows in the same order, and per score the largest difference
    (None and a number differ by inf)."""
    diffs: dict[str, float] = {}
    same_rows = [r[0] for r in a] == [r[0] for r in b]
    if same_rows:
        for (_, x), (_, y) in zip(a, b, strict=True):
            for k in x.keys() | y.keys():
                u, v = x.get(k), y.get(k)
                d = 0.0 if u is None and v is None else float("inf") if u is None or v is None else abs(u - v)
                diffs[k] = max(diffs.get(k, 0.0), d)
    return {"same_rows": same_rows, "max_score_diff": {k: diffs[k] for k in sorted(diffs)}}


def table(detail: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One flat row per store and query (what ``bench/report.py`` renders)."""
    out = {}
    for key, r in detail.items():
        b, a = r["before"], r["after"]
        out[key] = {"before_ms": b["median_ms"], "after_ms": a["median_ms"], "after/before": r["after_over_before"],
                    "statements_before": b["statements"], "statements_after": a["statements"],
                    "lowering_after": (a["lowering"] or {}).get("strategy"),
                    "same_rows_as_builtin": b["vs_builtin"]["same_rows"] and a["vs_builtin"]["same_rows"],
                    "max_score_diff_after": max(a["vs_builtin"]["max_score_diff"].values(), default=0.0)}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default="4b80043")
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--batch", type=int, default=3, help="rounds asked of one side before the other's turn")
    ap.add_argument("--out", type=Path, default=RESULTS / "four_arms_sql.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    from bench.scale import start_postgres

    results: dict[str, Any] = {"title": "Four-arm RRF as one statement (issue 32)",
                               "description": __doc__.split("\n\n")[1].replace("\n", " "),
                               "n": args.n, "rounds": args.rounds, "texts": QUERIES, "machine": machine_info()}
    pg, uri, _ = start_postgres()
    try:
        with earlier_tree(args.before) as (rev, old, tmp):
            results["before"] = rev
            procs: dict[str, subprocess.Popen[str]] = {}
            ready: dict[str, Any] = {}
            try:
                for side, tree in (("before", old), ("after", ROOT)):  # one at a time: ingest is not measured
                    procs[side] = subprocess.Popen(
                        [sys.executable, "-c", CHILD, str(args.n), uri, str(tmp / f"{side}.duckdb"), f"nlql_{side}",
                         "1" if side == "after" else "0", json.dumps(QUERIES)],
                        env=tree_env(tree), cwd=tree, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                    assert procs[side].stdout is not None
                    ready[side] = json.loads(procs[side].stdout.readline())
                    log(f"[four_arms] {side}: ready ({ready[side]['nlql']})")
                load_start = os.getloadavg()
                samples: dict[str, dict[str, list[float]]] = {side: {} for side in procs}
                done = 0
                while done < args.rounds:
                    for side, proc in procs.items():
                        assert proc.stdin is not None and proc.stdout is not None
                        proc.stdin.write(f"{args.batch}\n")
                        proc.stdin.flush()
                        for key, values in json.loads(proc.stdout.readline()).items():
                            samples[side].setdefault(key, []).extend(values)
                    done += args.batch
                load_end = os.getloadavg()
            finally:
                close_children(procs.values())
    finally:
        pg.stop()
    builtin = ready["after"]["builtin"]
    rows: dict[str, Any] = {}
    for key in samples["after"]:
        store, label = key.split("/")
        row: dict[str, Any] = {}
        for side in ("before", "after"):
            got = ready[side]["stores"][store][label]
            row[side] = {"median_ms": round(statistics.median(samples[side][key]), 2),
                         "statements": got["statements"], "lowering": got["lowering"],
                         "vs_builtin": _compare(got["answer"], builtin[label]), "rows": len(got["answer"])}
        row["after_over_before"] = round(row["after"]["median_ms"] / row["before"]["median_ms"], 3)
        rows[key] = row
        log(f"  {key}: {row}")
    results.update({"question": ready["after"]["question"], "detail": rows, "queries": table(rows),
                    "load_avg_start": list(load_start), "load_avg_end": list(load_end)})
    stamp_end(results, started)
    write_json(args.out, results)
    return results


if __name__ == "__main__":
    main()
