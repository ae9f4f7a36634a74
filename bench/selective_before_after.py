#!/usr/bin/env python3
"""The selective query (0.1% tag filter at 100k) against its numpy floor, this tree against an earlier
revision, interleaved in one run (issue 35: "a selective filter (0.1% at 100k) within 3× the numpy floor
on a prebuilt row list, measured interleaved").

The corpus, vectors and query are ``bench/builtin_speed.py``'s (``meta.tag == 7``: 99 rows of 100k;
embedding excluded by the lookup embedder). Each side is a long-lived process with its own tree first
on ``sys.path`` (the earlier revision checked out with ``git worktree``); the parent asks the two sides
for a batch of rounds in turn, so load from other processes lands on both. A round, in each process:
a full-matrix product (what the other queries of builtin_speed's rounds do: the caches are cold after
it), then the floor (``M_tag @ q`` + ``argpartition`` on the prebuilt sub-matrix, one BLAS thread); the
full product again, then the row-list floor (``M[rows] @ q`` + ``argpartition``: the matching rows'
indices prebuilt, the rows gathered by the product's call, the goal's wording); again, then
``store.knn`` with the compiled filter; again, then ``engine.search``. Each
timed call records wall and CPU (``time.process_time``) ms; the figures are medians. The same calls are
also timed back to back (warm). Both sides' top-10 keys and scores for every query text, and the stats
keys, must be equal.

    python bench/selective_before_after.py [--before 3c43a77] [--rounds 400] [--size 100000]

Writes bench/results/selective_before_after.json.
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

CHILD = r"""
import json, sys, time
import numpy as np
from bench.builtin_speed import clustered, Lookup, TAG, QUERY_TEXTS, K
from bench.common import steady
from nlql import Engine
from nlql import values as V
from nlql.kernels import blas_one_thread
from nlql.pushdown import Cond
import nlql
n = int(sys.argv[1])
rng = np.random.default_rng(21)
vecs = clustered(n + len(QUERY_TEXTS), 1000, 0.6, rng)
texts = [f"Sentence number {i} of the benchmark." for i in range(n)]
status = rng.random(n) < 0.5; stage = rng.integers(0, 4, n) == 0; tag = rng.integers(0, 1000, n)
metas = [{"status": "published" if s else "draft", "stage": "published" if g else "review", "tag": int(t)}
         for s, g, t in zip(status.tolist(), stage.tolist(), tag.tolist())]
engine = Engine(embedder=Lookup(texts + QUERY_TEXTS, vecs), store="memory", warm_up=False)
engine.add_texts(texts, ids=[str(i) for i in range(n)], metadatas=metas, batch_size=8192)
steady(engine)
del texts, metas
store = engine.store
mat = store.matrix
rows = np.flatnonzero(tag == 7)
sub = np.ascontiguousarray(mat[rows])
q0 = vecs[n]
qn = V.normalize_rows(q0[None, :].copy(), zero_invalid=True)
native = store.compile_filter(Cond("eq", ("meta", "tag"), 7))
query = TAG.format(t=QUERY_TEXTS[0])

def evict():
    with blas_one_thread():
        np.argpartition(-(mat @ q0), K - 1)[:K]

def floor():
    with blas_one_thread():
        np.argpartition(-(sub @ q0), K - 1)[:K]

def floor_rows():
    with blas_one_thread():
        np.argpartition(-(mat[rows] @ q0), K - 1)[:K]

fns = {"floor": floor, "floor_rows": floor_rows, "store_knn": lambda: store.knn(qn, K, native, None),
       "engine": lambda: engine.search(query)}
for _ in range(20):
    for f in fns.values():
        f()
answers = {}
for t in QUERY_TEXTS:
    hits = engine.search(TAG.format(t=t))
    answers[t] = [(h.doc_id, h.scores["rel"], h.id, h.position, h.content, h.metadata) for h in hits]
stats_keys = sorted(engine.search(query).stats)
print(json.dumps({"ready": True, "nlql": nlql.__file__, "answers": answers, "stats_keys": stats_keys}), flush=True)
for line in sys.stdin:
    rounds, mode = line.split()
    rounds = int(rounds)
    out = {name: {"wall": [], "cpu": []} for name in fns}
    for _ in range(rounds):
        for name, f in fns.items():
            if mode == "cold":
                evict()
            c, t = time.process_time(), time.perf_counter()
            f()
            w, c = time.perf_counter() - t, time.process_time() - c
            out[name]["wall"].append(w * 1000)
            out[name]["cpu"].append(c * 1000)
    print(json.dumps(out), flush=True)
"""


def _start(tree: Path, size: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(size)], env=tree_env(tree), cwd=tree, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _ask(proc: subprocess.Popen[str], rounds: int, mode: str) -> dict[str, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{rounds} {mode}\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default="3c43a77")  # (the tree the sixteenth session started from)
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--batch", type=int, default=20, help="rounds asked of one side before the other's turn")
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--out", type=Path, default=RESULTS / "selective_before_after.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    machine = machine_info()
    with earlier_tree(args.before) as (rev, old, _tmp):
        procs: dict[str, subprocess.Popen[str]] = {}
        try:
            ready = {}
            for side, tree in (("before", old), ("after", ROOT)):  # one at a time: ingest is not measured
                procs[side] = _start(tree, args.size)
                assert procs[side].stdout is not None
                ready[side] = json.loads(procs[side].stdout.readline())
                log(f"[selective] {side}: ready ({ready[side]['nlql']})")
            load_start = os.getloadavg()
            samples = {mode: {side: {} for side in procs} for mode in ("cold", "warm")}
            for mode in ("cold", "warm"):
                done = 0
                while done < args.rounds:
                    for side, proc in procs.items():
                        got = _ask(proc, args.batch, mode)
                        for name, v in got.items():
                            for kind, xs in v.items():
                                samples[mode][side].setdefault(name, {}).setdefault(kind, []).extend(xs)
                    done += args.batch
            load_end = os.getloadavg()
        finally:
            close_children(procs.values())
    ms = {mode: {side: {name: {kind: round(statistics.median(xs), 4) for kind, xs in v.items()}
                        for name, v in per.items()} for side, per in sides.items()}
          for mode, sides in samples.items()}
    ratio = {mode: {side: {kind: round(per["engine"][kind] / per["floor"][kind], 2) for kind in ("wall", "cpu")}
                    for side, per in sides.items()} for mode, sides in ms.items()}
    ratio_rows = {mode: {side: {kind: round(per["engine"][kind] / per["floor_rows"][kind], 2) for kind in ("wall", "cpu")}
                         for side, per in sides.items()} for mode, sides in ms.items()}
    out = {"title": f"selective query (0.1% tag filter) at {args.size:,}: engine vs numpy floor, "
                    f"{rev} against this tree, interleaved",
           "before": rev, "rounds": args.rounds, "ms": ms, "engine_over_floor": ratio,
           "engine_over_floor_rows": ratio_rows,
           "identical_answers": ready["before"]["answers"] == ready["after"]["answers"],
           "same_stats_keys": ready["before"]["stats_keys"] == ready["after"]["stats_keys"],
           "load_start": [round(x, 2) for x in load_start], "load_end": [round(x, 2) for x in load_end],
           "machine": machine}
    stamp_end(out, started)
    write_json(args.out, out)
    for mode in ("cold", "warm"):
        for side in ("before", "after"):
            per = ms[mode][side]
            print(f"{mode:4s} {side:6s}: engine {per['engine']['wall']:.3f} ms wall / {per['engine']['cpu']:.3f} CPU; "
                  f"store.knn {per['store_knn']['wall']:.3f} / {per['store_knn']['cpu']:.3f}; "
                  f"floor {per['floor']['wall']:.3f} / {per['floor']['cpu']:.3f}; "
                  f"engine/floor {ratio[mode][side]['wall']}x wall, {ratio[mode][side]['cpu']}x CPU; "
                  f"row-list floor {per['floor_rows']['wall']:.3f} / {per['floor_rows']['cpu']:.3f}, "
                  f"engine/it {ratio_rows[mode][side]['wall']}x wall, {ratio_rows[mode][side]['cpu']}x CPU")
    print(f"identical answers {out['identical_answers']}, same stats keys {out['same_stats_keys']}; "
          f"load {out['load_start']} -> {out['load_end']}")
    return out


if __name__ == "__main__":
    main()
