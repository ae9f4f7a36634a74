#!/usr/bin/env python3
"""Ingest with the default model, this tree against an earlier revision, on the same texts in one run
(issue 34: "ingest with the default model ≥ 2× today's sentences per CPU-second on real text of mixed
lengths ... same vectors within cosine 0.9999").

The texts are this machine's manual pages as ``bench/quality.py`` builds them (NAME line + start of
DESCRIPTION: real text of mixed lengths). Each side runs in a fresh process with its own tree first on
``sys.path`` (the earlier revision is checked out with ``git worktree`` into a temporary directory): it
loads the default embedder and embeds one text (not timed: the model's start), then times
``Engine(store="memory").add_texts(texts)``: wall seconds and the process's CPU seconds (every thread),
and writes the vectors of a fixed sample of sentences. The two sides alternate round by round, so load
from other processes lands on both; the figures are medians, with the load average around each run.

    python bench/ingest_before_after.py [--before 638301e] [--rounds 3] [--pages 0]

``--before`` defaults to the last revision before the ingest work of issue 34 (the ONNX graph with fused
attention, length-sorted batches, the runtime's thread settings). Writes
bench/results/ingest_before_after.json.
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

from bench.common import RESULTS, earlier_tree, log, machine_info, stamp_end, tree_env, write_json  # noqa: E402

SAMPLE = 200  # sentences whose vectors both sides write, compared by cosine

CHILD = r"""
import json, os, sys, time
import numpy as np
texts = json.load(open(sys.argv[1], encoding="utf-8"))
from nlql import Engine
from nlql.embedders import default_embedder
emb = default_embedder()
emb.embed(["warm up"])  # the model's start is not ingest
engine = Engine(embedder=emb, store="memory")
t, c = time.perf_counter(), time.process_time()
engine.add_texts(texts)
wall, cpu = time.perf_counter() - t, time.process_time() - c
n = engine.store.count()
sample = [h.content for h in engine.search("SELECT SENTENCE LIMIT %d" % int(sys.argv[3]))]
np.save(sys.argv[2], np.asarray(emb.embed(sample), dtype=np.float32))
json.dump({"sentences": n, "wall_s": wall, "cpu_s": cpu, "embedder": type(emb).__name__,
           "sample": sample}, sys.stdout)
"""


def _texts(pages: int) -> list[str]:
    from bench.quality import build_man_set

    ds = build_man_set()
    ids = list(ds.corpus)[: pages or None]
    return [ds.passage(d) for d in ids]


def _run(tree: Path, texts_file: Path, vectors: Path) -> dict[str, Any]:
    load = os.getloadavg()[0]
    out = subprocess.run([sys.executable, "-c", CHILD, str(texts_file), str(vectors), str(SAMPLE)],
                         env=tree_env(tree), cwd=tree, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{tree}: {out.stderr[-2000:]}")
    got = json.loads(out.stdout)
    got["load_before"] = round(load, 2)
    got["load_after"] = round(os.getloadavg()[0], 2)
    return got


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default="638301e")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pages", type=int, default=0, help="the first N man pages (0: all)")
    ap.add_argument("--out", type=Path, default=RESULTS / "ingest_before_after.json")
    args = ap.parse_args(argv)
    import numpy as np

    started = time.perf_counter()
    machine = machine_info()
    texts = _texts(args.pages)
    with earlier_tree(args.before) as (rev, old, tmp):
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts), encoding="utf-8")
        runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for r in range(args.rounds):
            for side, tree in (("before", old), ("after", ROOT)):
                got = _run(tree, texts_file, Path(tmp) / f"{side}.npy")
                got["rate_cpu"] = got["sentences"] / got["cpu_s"]
                got["rate_wall"] = got["sentences"] / got["wall_s"]
                log(f"[ingest] round {r + 1} {side:6s}: {got['sentences']} sentences, {got['cpu_s']:.1f} CPU-s "
                    f"({got['rate_cpu']:.1f}/CPU-s), {got['wall_s']:.1f} s wall; load {got['load_before']}")
                runs[side].append(got)
        a, b = np.load(Path(tmp) / "before.npy"), np.load(Path(tmp) / "after.npy")
        same_sample = runs["before"][-1]["sample"] == runs["after"][-1]["sample"]
        cos = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    summary = {side: {"sentences": v[0]["sentences"], "embedder": v[0]["embedder"],
                      "cpu_s": round(statistics.median(x["cpu_s"] for x in v), 2),
                      "wall_s": round(statistics.median(x["wall_s"] for x in v), 2),
                      "sentences_per_cpu_s": round(statistics.median(x["rate_cpu"] for x in v), 1),
                      "sentences_per_s": round(statistics.median(x["rate_wall"] for x in v), 1)}
               for side, v in runs.items()}
    ratio = summary["after"]["sentences_per_cpu_s"] / summary["before"]["sentences_per_cpu_s"]
    out = {"title": "ingest with the default model: this tree against an earlier revision, same texts, one run",
           "machine": machine, "before_revision": rev, "texts": len(texts), "rounds": args.rounds,
           "summary": summary, "ratio_per_cpu_s": round(ratio, 2),
           "ratio_wall": round(summary["after"]["sentences_per_s"] / summary["before"]["sentences_per_s"], 2),
           "sample_sentences": SAMPLE if same_sample else None,
           "cosine_min": round(float(cos.min()), 6) if same_sample else None,
           "cosine_median": round(float(np.median(cos)), 6) if same_sample else None,
           "goal": {"ratio_per_cpu_s": 2.0, "cosine_min": 0.9999},
           "runs": {side: [{k: x[k] for k in ("cpu_s", "wall_s", "load_before", "load_after")} for x in v]
                    for side, v in runs.items()}}
    stamp_end(out, started)
    write_json(args.out, out)
    log(f"[ingest] before {summary['before']['sentences_per_cpu_s']}/CPU-s, after "
        f"{summary['after']['sentences_per_cpu_s']}/CPU-s: {out['ratio_per_cpu_s']}x; cosine min {out['cosine_min']}")
    return out


if __name__ == "__main__":
    main()
