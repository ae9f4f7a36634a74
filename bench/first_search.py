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

``--phases``: a directory store instead: a process ingests, a new process opens it (the open's CPU-s),
each then runs the first and tenth BM25 and SIMILARITY searches and the SIMILARITY query until the int8
copy answers it, and a third runs one ``nlql query`` (the CLI, in process: its CPU-s and peak memory); both with the store's snapshot (issue 35: ``vectors.snap``, written at the ingest's
end with the int8 copy, mapped at open) and without (``MemoryStore.SNAPSHOT = False``: the SQLite log
read at open, the copy built in the background), interleaved. Writes bench/results/first_search_phases.json.
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
BM25 = 'SELECT SENTENCE LET kw = BM25(content, "renewable energy policy") ORDER BY kw DESC LIMIT 10'
PHASES = ("after_ingest", "fresh_open", "cli_query")
#: ``log``: the store keeps no snapshot (as before issue 35); ``snapshot``: it keeps vectors.snap
SNAP_MODES = ("log", "snapshot")


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


def _cpu_wall(fn: Any) -> tuple[Any, float, float]:
    """``fn()``'s result, CPU seconds (this process, every thread) and wall milliseconds."""
    c, t = time.process_time(), time.perf_counter()
    out = fn()
    return out, round(time.process_time() - c, 3), round((time.perf_counter() - t) * 1000, 1)


def _queries(engine: Any, out: dict[str, Any], repeat: int = 10) -> None:
    """The first and the tenth BM25 and SIMILARITY search (CPU-s, ms), answers checked equal; the
    process's first parse (the grammar's tables, built once per process) is timed apart, before."""
    from nlql.parser import parse

    _, out["parser_first_cpu_s"], out["parser_first_ms"] = _cpu_wall(lambda: parse("SELECT SENTENCE LIMIT 1"))
    for name, query in (("bm25", BM25), ("similarity", QUERY)):
        first, cpu, ms = _cpu_wall(lambda q=query: engine.search(q))
        out[f"{name}_first_cpu_s"], out[f"{name}_first_ms"] = cpu, ms
        out[f"{name}_first_scan"] = first.stats.get("store", {}).get("scan")
        times = []
        for _ in range(repeat - 1):
            again, _, ms = _cpu_wall(lambda q=query: engine.search(q))
            if [(h.id, h.scores) for h in again] != [(h.id, h.scores) for h in first]:
                raise AssertionError(f"a later search of {query!r} answered differently")
            times.append(ms)
        out[f"{name}_tenth_ms"] = times[-1]
        out[f"{name}_median_later_ms"] = round(statistics.median(times), 1)
        out[f"{name}_scan"] = again.stats.get("store", {}).get("scan")
    out["_similarity_searches"] = repeat


def _until_int8(engine: Any, since: float, out: dict[str, Any]) -> None:
    """The SIMILARITY query again and again (at most 30 s) until the store answers it through its int8
    copy: how many searches that took in all (``_queries``'s included) and the wall seconds since
    ``since`` (the end of the ingest or of the open)."""
    at = out.pop("_similarity_searches")
    start = time.perf_counter()
    while "int8" not in str(out.get("similarity_scan")):
        if time.perf_counter() - start > 30:
            out["similarity_int8_at"] = None
            return
        hits = engine.search(QUERY)
        at += 1
        out["similarity_scan"] = hits.stats.get("store", {}).get("scan")
    out["similarity_int8_at"] = at
    out["until_int8_s"] = round(time.perf_counter() - since, 2)


def phase_child(n: int, phase: str, path: Path, snap: bool = True) -> dict[str, Any]:
    """``after_ingest``: ingest ``n`` rows into a new directory store at ``path``, then the first and
    tenth BM25 and SIMILARITY searches; ``fresh_open``: open that store in this new process (CPU-s of
    the Engine and the store), then the same searches. Then the SIMILARITY query until the int8 copy
    answers it. ``snap`` False: the store keeps no snapshot (``MemoryStore.SNAPSHOT``): it writes none
    at ingest and reads the SQLite log at open, as before issue 35's snapshot."""
    from bench.common import QueryMemo
    from nlql import Engine
    from nlql.embedders import HashEmbedder
    from nlql.stores.memory import MemoryStore

    MemoryStore.SNAPSHOT = snap
    out: dict[str, Any] = {}
    if phase == "cli_query":  # a one-shot `nlql query` over the store: this whole process's CPU and memory
        import contextlib
        import io
        import resource

        from nlql.cli import main

        sys.argv = ["nlql", "query", QUERY, "--store", str(path), "--format", "jsonl"]
        text = io.StringIO()
        with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
            main()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out["process_cpu_s"] = round(usage.ru_utime + usage.ru_stime, 2)
        out["max_rss_mb"] = usage.ru_maxrss // 1024
        out["rows"] = len(text.getvalue().splitlines())
        return out
    if phase == "after_ingest":
        from bench.corpus import synthetic_corpus

        texts, metas = synthetic_corpus(n, seed=42)
        engine = Engine(embedder=QueryMemo(HashEmbedder(dim=384)), store=str(path), warm_up=False)
        _, out["ingest_cpu_s"], ms = _cpu_wall(lambda: engine.add_texts(
            texts, ids=[str(i) for i in range(n)], metadatas=metas, batch_size=8192))
        out["ingest_s"] = round(ms / 1000, 2)
    else:
        (engine, out["open_cpu_s"], out["open_ms"]) = _cpu_wall(
            lambda: Engine(embedder=QueryMemo(HashEmbedder(dim=384)), store=str(path), warm_up=False))
        out["opened_from"] = engine.store.opened_from
    since = time.perf_counter()
    _queries(engine, out)
    out["process_cpu_s_after_queries"] = round(time.process_time(), 2)
    _until_int8(engine, since, out)
    out["process_cpu_s"] = round(time.process_time(), 2)
    return out


def phases(args: Any) -> dict[str, Any]:
    """The ``--phases`` run: after an ingest, then a fresh open of the same directory, ``--trials`` times."""
    import shutil
    import tempfile

    keys = [f"{p}/{m}" for m in SNAP_MODES for p in PHASES]
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in keys}
    for _ in range(args.trials):
        for mode in SNAP_MODES:  # interleaved: a trial of each before the next
            tmp = Path(tempfile.mkdtemp(prefix="nlql-first-"))
            try:
                for phase in PHASES:
                    done = subprocess.run([sys.executable, __file__, "--size", str(args.size), "--phase", phase,
                                           "--dir", str(tmp / "store"), "--snap", mode], capture_output=True,
                                          text=True, check=True, cwd=ROOT)
                    runs[f"{phase}/{mode}"].append(json.loads(done.stdout.strip().splitlines()[-1]))
                    log(f"{phase}/{mode}: {runs[f'{phase}/{mode}'][-1]}")
            finally:
                shutil.rmtree(tmp, ignore_errors=True)

    def median(key: str, field: str) -> float | None:
        vals = [r[field] for r in runs[key] if isinstance(r.get(field), (int, float))]
        return round(statistics.median(vals), 3) if vals else None

    summary = {k: {f: median(k, f) for f in runs[k][0] if isinstance(runs[k][0][f], (int, float))} for k in keys}
    for k in keys:
        summary[k].update({f: runs[k][0][f] for f in ("opened_from", "similarity_first_scan", "similarity_scan")
                           if f in runs[k][0]})
    ratios = {f"{p}.{f}": round(summary[f"{p}/log"][f] / summary[f"{p}/snapshot"][f], 2)
              for p in PHASES for f in ("ingest_cpu_s", "open_cpu_s", "similarity_first_ms", "until_int8_s",
                                        "process_cpu_s", "max_rss_mb")
              if summary[f"{p}/log"].get(f) and summary[f"{p}/snapshot"].get(f)}
    return {"summary": summary, "log_over_snapshot": ratios, "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS / "first_search.json")
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--phases", action="store_true",
                    help="a directory store: the first BM25/SIMILARITY searches after an ingest and after a "
                         "fresh open (CPU-s and ms), instead of the int8 modes")
    ap.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--snap", choices=SNAP_MODES, default="snapshot", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.size, args.child)))
        return
    if args.phase:
        print(json.dumps(phase_child(args.size, args.phase, args.dir, args.snap == "snapshot")))
        return
    if args.phases:
        started = time.perf_counter()
        out = args.out if args.out != RESULTS / "first_search.json" else RESULTS / "first_search_phases.json"
        results = {"title": "The first searches after an ingest and after a fresh open (directory store)",
                   "description": ("A new process for each: add_texts into a new directory store, then a new "
                                   "process opening it; the first and the tenth BM25 and SIMILARITY top-10 search "
                                   "(CPU-s of the process, every thread; wall ms), then the SIMILARITY query "
                                   "until the int8 copy answers it (searches and wall s since the ingest or the "
                                   "open ended); medians over the trials. Two ways, interleaved: 'log' (the store "
                                   "keeps no snapshot: it reads the SQLite log at open, and builds its int8 copy "
                                   "in the background from the second search) and 'snapshot' (vectors.snap "
                                   "written at the end of the ingest with the int8 copy, mapped at open). "
                                   "log_over_snapshot: the ratios of the medians."),
                   "machine": machine_info(), "size": args.size, "trials": args.trials, **phases(args)}
        stamp_end(results, started)
        write_json(out, results)
        for p, v in results["summary"].items():
            print(f"{p:<13} {v}")
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
