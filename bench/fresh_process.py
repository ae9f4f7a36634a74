#!/usr/bin/env python3
"""What one fresh ``nlql`` process costs on a 20k-sentence built-in directory store (issue 34).

The store: ``--sentences`` synthetic sentences (bench/corpus.py), four per document, ingested once with
``nlql ingest --embedder hash`` into ``--store`` (kept between runs). Each measurement is a new process,
``--trials`` times interleaved; the figure is the median CPU time (user + system of the child, from
``resource.getrusage(RUSAGE_CHILDREN)``) and the median wall time, after one untimed run of each
(bytecode compiled and cached as an installed package's is, the parser's tables cached):

* ``metadata``: ``nlql query`` of a WHERE on metadata only;
* ``bm25``: ``nlql query`` ranked by BM25 (a fresh process rebuilds the BM25 index today);
* ``similarity``: ``nlql query`` ranked by SIMILARITY on the hash-embedded store (no model);
* ``model_query``: what the default model adds to a SIMILARITY query of a store it embedded: a fresh
  process that opens the ONNX embedder (already exported) and embeds one query;
* ``schema``: ``nlql schema``;
* ``ask``: ``nlql ask`` of a plain question (no goal in the issue; SIMILARITY + BM25, hash store);
* ``mcp_initialize``: ``nlql mcp`` started, one MCP ``initialize`` sent over its stdin, until the reply;
* ``import_cli``: ``python -c "import nlql.cli"``, the floor under every command.

Goals from the issue, in CPU seconds: metadata 0.8, BM25 1.2, SIMILARITY 1.5 (with the model: the
``similarity`` + ``model_query`` line), schema 0.8; ``nlql mcp`` answers initialize within 1 s (wall).

    python bench/fresh_process.py [--sentences 20000] [--trials 3] [--store /tmp/nlql-fresh-20k]

Writes bench/results/fresh_process.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import shutil
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
from bench.corpus import iter_synthetic  # noqa: E402

# Bytecode is written and read as an installed package's is (pip compiles at install): a machine that
# sets PYTHONDONTWRITEBYTECODE would otherwise compile every NLQL module in every child (0.2 CPU-s here).
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
       "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
       "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
PY = sys.executable
QUERIES = {
    "metadata": 'SELECT DOCUMENT WHERE meta.status == "published" AND meta.year >= 2020 LIMIT 10',
    "bm25": 'SELECT SENTENCE LET kw = BM25(content, "solar battery grid") ORDER BY kw DESC LIMIT 10',
    "similarity": 'SELECT SENTENCE LET rel = SIMILARITY(content, "renewable power policy") '
                  "ORDER BY rel DESC LIMIT 10",
}
#: ``nlql ask`` of a plain question (routed to the general template: SIMILARITY and BM25 fused).
ASK = "what about solar batteries and the grid"
GOALS = {"metadata": 0.8, "bm25": 1.2, "similarity": 1.5, "schema": 0.8}
MODEL_QUERY = ("from nlql.embedders import default_embedder; e = default_embedder(); "
               "e.embed(['renewable power policy'])")
MCP_INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}


def build_store(store: Path, sentences: int) -> None:
    if (store / "ready").exists():
        return
    shutil.rmtree(store, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "docs.jsonl"
        rows, doc = [], []
        for i, (text, meta) in enumerate(iter_synthetic(sentences)):
            doc.append(text)
            if len(doc) == 4 or i == sentences - 1:
                rows.append(json.dumps({"id": f"d{len(rows)}", "text": " ".join(doc), "metadata": meta}))
                doc = []
        src.write_text("\n".join(rows) + "\n", encoding="utf-8")
        log(f"ingesting {sentences} sentences ({len(rows)} documents) into {store}")
        subprocess.run([PY, "-m", "nlql", "ingest", str(src), "--store", str(store), "--embedder", "hash",
                        "-q"], check=True, env=ENV, timeout=3600)
    (store / "ready").write_text("ok")


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one child process run to its end."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    done = subprocess.run(cmd, env=ENV, capture_output=True, timeout=600)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr.decode()[-2000:]}")
    return cpu, wall


def mcp_initialize(store: Path) -> tuple[float, float]:
    """(CPU seconds of the server until it is stopped right after its reply, wall seconds to the reply)."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.Popen([PY, "-m", "nlql", "mcp", "--store", str(store)], env=ENV, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(MCP_INIT) + "\n").encode())
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    line = proc.stdout.readline() if ready else b""
    wall = time.perf_counter() - t0
    proc.kill()
    proc.wait()
    if b'"serverInfo"' not in line:
        raise SystemExit(f"nlql mcp gave no initialize reply: {line[:300]!r}")
    return _children_cpu() - cpu0, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentences", type=int, default=20000)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--store", default=os.path.join(tempfile.gettempdir(), "nlql-fresh-20k"))
    ap.add_argument("--no-model", action="store_true", help="skip the model_query line")
    args = ap.parse_args()
    started = time.perf_counter()
    store = Path(args.store)
    build_store(store, args.sentences)

    cmds: dict[str, Any] = {name: [PY, "-m", "nlql", "query", q, "--store", str(store), "--format", "jsonl"]
                            for name, q in QUERIES.items()}
    cmds["schema"] = [PY, "-m", "nlql", "schema", "--store", str(store)]
    cmds["ask"] = [PY, "-m", "nlql", "ask", ASK, "--store", str(store), "--json"]
    cmds["import_cli"] = [PY, "-c", "import nlql.cli"]
    if not args.no_model:
        cmds["model_query"] = [PY, "-c", MODEL_QUERY]
    cmds["mcp_initialize"] = "mcp"
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "nlql")], env=ENV, check=True, timeout=600)
    for cmd in cmds.values():  # one untimed run each: bytecode and the parser's tables written once
        _ = mcp_initialize(store) if cmd == "mcp" else run(cmd)
    for trial in range(args.trials):
        for name, cmd in cmds.items():
            runs[name].append(mcp_initialize(store) if cmd == "mcp" else run(cmd))
        log(f"trial {trial + 1}/{args.trials} done")

    rows: dict[str, dict[str, Any]] = {}
    for name, got in runs.items():
        cpu = statistics.median(c for c, _ in got)
        wall = statistics.median(w for _, w in got)
        rows[name] = {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "runs": [[round(c, 3), round(w, 3)]
                                                                                 for c, w in got]}
        if name in GOALS:
            rows[name].update(goal_cpu_s=GOALS[name], met=cpu <= GOALS[name])
    if "model_query" in rows:
        total = rows["similarity"]["cpu_s"] + rows["model_query"]["cpu_s"]
        rows["similarity_with_model"] = {"cpu_s": round(total, 3), "goal_cpu_s": GOALS["similarity"],
                                         "met": total <= GOALS["similarity"],
                                         "note": "similarity (hash store) + model_query (ONNX load + one query)"}
    rows["mcp_initialize"].update(goal_wall_s=1.0, met=rows["mcp_initialize"]["wall_s"] <= 1.0)

    results = {"bench": "fresh_process", "machine": machine_info(), "store": str(store),
               "sentences": args.sentences, "documents": -(-args.sentences // 4), "embedder": "hash (384)",
               "trials": args.trials, "queries": QUERIES, "rows": rows}
    stamp_end(results, started)
    write_json(RESULTS / "fresh_process.json", results)
    print(f"\n{'what':<24}{'CPU s':>8}{'wall s':>8}{'goal':>8}  met")
    for name, r in rows.items():
        goal = r.get("goal_cpu_s", r.get("goal_wall_s"))
        met = "" if "met" not in r else ("yes" if r["met"] else "NO")
        print(f"{name:<24}{r['cpu_s']:>8.2f}{r.get('wall_s', float('nan')):>8.2f}"
              f"{'' if goal is None else goal:>8}  {met}")


if __name__ == "__main__":
    main()
