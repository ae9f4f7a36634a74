#!/usr/bin/env python3
"""Run every measurement of issue 7 and regenerate docs/performance.md — one command.

    python bench/run_all.py            # --quick (default): must finish in < 10 minutes here
    python bench/run_all.py --full     # + python-nlql at 100k (its quadratic ingest takes minutes),
                                       #   more repeats, bench/engine.py, bench/hybrid.py, bench/stores.py

Steps, each in its own process (so memory is returned between them; a failed step is recorded and the
rest still run): vs_peer, floor, quality, trace, [engine, hybrid, stores], then report (JSON → markdown + PNG plots).
Results go to bench/results/*.json; the step log to bench/results/run_all.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, log, machine_info, write_json  # noqa: E402

BENCH = ROOT / "bench"

#: profile -> ordered (step name, script, arguments)
PROFILES: dict[str, list[tuple[str, str, list[str]]]] = {
    "quick": [
        ("vs_peer", "vs_peer.py", ["--quick"]),
        ("floor", "floor.py", ["--sizes", "10000", "100000", "1000000", "--repeat", "20"]),
        ("quality", "quality.py", ["--embedder", "minilm"]),
        ("trace", "trace.py", ["--n", "100000", "--repeat", "3"]),
    ],
    "full": [
        ("vs_peer", "vs_peer.py", ["--full"]),
        ("floor", "floor.py", ["--sizes", "10000", "100000", "1000000", "--repeat", "30"]),
        ("quality", "quality.py", ["--embedder", "minilm"]),
        ("trace", "trace.py", ["--n", "100000", "--repeat", "7"]),
        ("engine", "engine.py", ["--sizes", "10000", "100000", "--repeat", "30"]),
        ("hybrid", "hybrid.py", ["--n", "100000"]),
        ("stores", "stores.py", ["--n", "100000"]),  # every store at 100k: about 10 minutes
    ],
}


def run_step(name: str, script: str, args: list[str], timeout: float) -> dict[str, Any]:
    """Run one benchmark script with this interpreter; its outcome and wall time."""
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    cmd = [sys.executable, str(BENCH / script), *args]
    log(f"[run_all] {name}: {' '.join(cmd[1:])}")
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=str(ROOT), env=env, timeout=timeout, stdout=subprocess.PIPE, text=True)
    except subprocess.TimeoutExpired:
        return {"name": name, "ok": False, "seconds": round(time.perf_counter() - t, 1),
                "error": f"timed out after {timeout:.0f} s"}
    seconds = round(time.perf_counter() - t, 1)
    sys.stdout.write(proc.stdout)
    sys.stdout.flush()
    step: dict[str, Any] = {"name": name, "command": " ".join(["python", f"bench/{script}", *args]),
                            "ok": proc.returncode == 0, "seconds": seconds}
    if proc.returncode != 0:
        step["error"] = f"exit code {proc.returncode} (see stderr above)"
    return step


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    prof = ap.add_mutually_exclusive_group()
    prof.add_argument("--quick", dest="profile", action="store_const", const="quick")
    prof.add_argument("--full", dest="profile", action="store_const", const="full")
    ap.add_argument("--skip", nargs="*", default=[], help="step names to leave out (their old JSON is kept)")
    ap.add_argument("--step-timeout", type=float, default=3600.0)
    args = ap.parse_args(argv)
    profile = args.profile or "quick"
    started = time.perf_counter()
    machine = machine_info()
    steps = []
    for name, script, sargs in PROFILES[profile]:
        if name in args.skip:
            continue
        steps.append(run_step(name, script, sargs, args.step_timeout))
    total = round(time.perf_counter() - started, 1)
    summary = {"title": "bench/run_all.py", "profile": profile, "machine": machine, "steps": steps,
               "total_s": total}
    write_json(RESULTS / "run_all.json", summary)

    from bench.report import generate

    doc = generate()
    log(f"[run_all] {profile} profile: {total} s; wrote {doc}")
    for s in steps:
        log(f"  {s['name']:<10} {s['seconds']:>7.1f} s  {'ok' if s['ok'] else 'FAILED: ' + s.get('error', '')}")
    if not all(s["ok"] for s in steps):
        raise SystemExit(1)
    return summary


if __name__ == "__main__":
    main()
