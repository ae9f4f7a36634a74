#!/usr/bin/env python3
"""What the first searches of a fresh process wait for on the built-in store (issue 21).

Each trial is a new Python process: ``engine.add_texts`` of the synthetic corpus (one sentence per
document, HashEmbedder dim 384), then the same SIMILARITY top-10 query again and again until the store
answers it through its int8 copy (at most 30 s). Three ways, interleaved over ``--trials`` processes each:

* ``background`` (the default): the copy is built on a thread of its own from the first search; the
  searches scan float32 meanwhile;
* ``inline`` (``MemoryStore.INT8_BACKGROUND = False``, the behaviour before the background build): the
  first search imports Faiss and Numba, loads the kernel and builds the copy itself;
* ``no_int8`` (``QUANTISE = False``): float32 scans only, the process's own first-search cost.

Per trial: the first search's time, the median of the searches before the copy was used, the time from
the first search until the copy answered, and the median of the five searches after. Then the same query
filtered on ``status == "published"`` (a quarter of the rows: the filter gets its own int8 copy), again
and again until the filter's own copy answers it: the first filtered search's time and the time until its
own copy answered. Every answer is checked equal to the first one of its query (rows and scores).

    python bench/first_search.py [--size 100000] [--trials 3]

Writes bench/results/first_search.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, log, machine_info, stamp_end, write_json  # noqa: E402

QUERY = 'SELECT SENTENCE LET rel = SIMILARITY(content, "renewable energy policy") ORDER BY rel DESC LIMIT 10'
FILTERED = QUERY.replace(" ORDER BY", ' WHERE meta.status == "published" ORDER BY')
MODES = ("background", "inline", "no_int8")


def _until(engine: Any, query: str, ready: Any, after: int) -> tuple[list[float], int]:
    """Run ``query`` again and again (at most 30 s) until ``ready(stats)`` holds, then ``after`` more
    times: (every search's ms, the index of the first ready one). Every answer must equal the first."""
    times: list[float] = []
    answer, at = None, None
    start = time.perf_counter()
    while time.perf_counter() - start < 30:
        t = time.perf_counter()
        hits = engine.search(query)
        times.append((time.perf_counter() - t) * 1000)
        got = [(h.id, h.scores) for h in hits]
        if answer is None:
            answer = got
        elif got != answer:
            raise AssertionError(f"a later search of {query!r} answered differently")
        if at is None and ready(hits.stats["store"]):
            at = len(times) - 1
        if at is not None and len(times) - at > after:
            return times, at
    raise AssertionError(f"{query!r}: not ready within 30 s")


def child(n: int, mode: str) -> dict[str, Any]:
    """One trial, in this (fresh) process."""
    from bench.common import QueryMemo
    from bench.corpus import synthetic_corpus
    from nlql import Engine
    from nlql.embedders import HashEmbedder
    from nlql.stores.memory import MemoryStore

    if mode == "inline":
        MemoryStore.INT8_BACKGROUND = False
    elif mode == "no_int8":
        MemoryStore.QUANTISE = False
    texts, metas = synthetic_corpus(n, seed=42)
    engine = Engine(embedder=QueryMemo(HashEmbedder(dim=384)), store="memory", warm_up=False)
    engine.add_texts(texts, ids=[str(i) for i in range(n)], metadatas=metas, batch_size=8192)
    plain = mode == "no_int8"
    times, int8_at = _until(engine, QUERY, lambda st: plain or "int8" in st.get("scan", ""), 5)
    filtered, own_at = _until(engine, FILTERED, lambda st: plain or st.get("copy") == "the filter's own", 0)
    before = times[:int8_at] if not plain else times[:1]
    return {"first_ms": round(times[0], 1),
            "median_before_int8_ms": round(statistics.median(before[1:]), 1) if len(before) > 1 else None,
            "searches_before_int8": int8_at,
            "until_int8_s": round(sum(times[:int8_at]) / 1000, 2),
            "median_after_ms": round(statistics.median(times[int8_at + 1:int8_at + 6]), 1),
            "filtered_first_ms": round(filtered[0], 1),
            "filtered_until_own_copy_s": round(sum(filtered[:own_at]) / 1000, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS / "first_search.json")
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.size, args.child)))
        return
    from nlql.stores.memory import MemoryStore

    if args.size < 4 * MemoryStore.QUANT_MIN_ROWS:
        ap.error(f"--size must be at least {4 * MemoryStore.QUANT_MIN_ROWS} (the filter, a quarter of the rows, "
                 f"gets no int8 copy below {MemoryStore.QUANT_MIN_ROWS} rows)")
    started = time.perf_counter()
    trials: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for _ in range(args.trials):
        for mode in MODES:
            done = subprocess.run([sys.executable, __file__, "--size", str(args.size), "--child", mode],
                                  capture_output=True, text=True, check=True, cwd=ROOT)
            trials[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
            log(f"{mode}: {trials[mode][-1]}")

    def med(mode: str, key: str) -> float | None:
        vals = [t[key] for t in trials[mode] if t[key] is not None]
        return round(statistics.median(vals), 2) if vals else None

    results: dict[str, Any] = {
        "title": "The first searches of a fresh process",
        "description": ("A new process per trial: add_texts, then one SIMILARITY top-10 query until the int8 copy "
                        "answers it; medians over the trials."),
        "machine": machine_info(),
        "size": args.size,
        "trials": args.trials,
        "modes": {m: {k: med(m, k) for k in ("first_ms", "median_before_int8_ms", "until_int8_s", "median_after_ms",
                                             "filtered_first_ms", "filtered_until_own_copy_s")}
                  for m in MODES},
        "runs": trials,
    }
    stamp_end(results, started)
    write_json(args.out, results)
    for m, v in results["modes"].items():
        print(f"{m:<12} {v}")


if __name__ == "__main__":
    main()
