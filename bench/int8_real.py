#!/usr/bin/env python3
"""How the built-in store's int8 scans certify on real text embedded by the real model (issue 21).

``bench/builtin_speed.py`` times the int8 scans on clustered synthetic vectors, where a focused query's
top 10 stands far above the other rows. This benchmark asks what happens on real text: this machine's
manual pages (sections 1 and 8, the DESCRIPTION of each page, see ``bench/quality.py``) and the
standard-library docstrings of ``bench/data/stdlib-known-item``, split into sentences and embedded with
all-MiniLM-L6-v2 (the default ONNX embedder, cached in bench/.cache). Every query of the two sets (786
real questions and docstring summaries) runs a top-10 and a fusion arm's window of 100 through the store,
with the split scan forced on at this size (it is built from ``SPLIT_MIN_ROWS`` = 131,072 rows
otherwise) and the split scan's skip-after-a-miss turned off, so every query tries it. For each query:
which scan certified the answer (the split scan, the full int8 scan it hands over to, or neither: the
float32 scan), how many rows were rescored, and whether the rows and scores equal the float32 scan's.

    python bench/int8_real.py                 # writes bench/results/int8_real.json
    python bench/int8_real.py --limit 2000 --out /tmp/x.json   # smoke
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, log, machine_info, stamp_end, steady, write_json  # noqa: E402


def corpus(limit: int | None) -> tuple[list[str], list[str]]:
    """(passages, query texts): man pages and stdlib docstrings."""
    from bench.quality import build_man_set, load_beir

    man = build_man_set(max_chars=20_000)
    std = load_beir(ROOT / "bench" / "data" / "stdlib-known-item")
    texts = [f"{d['title']}. {d['text']}" for d in man.corpus.values()] + [d["text"] for d in std.corpus.values()]
    queries = list(man.queries.values()) + list(std.queries.values())
    return (texts[:limit] if limit else texts), queries


def run(limit: int | None, embedder_kind: str) -> dict[str, Any]:
    from bench.quality import make_embedder
    from nlql import Engine
    from nlql import values as V
    from nlql.stores.memory import quant

    texts, queries = corpus(limit)
    engine = Engine(embedder=make_embedder(embedder_kind), store="memory", warm_up=False)
    t = time.perf_counter()
    engine.add_texts(texts, ids=[str(i) for i in range(len(texts))])
    ingest_s = time.perf_counter() - t
    store: Any = engine.store
    n = store.count()
    log(f"[int8_real] {len(texts)} passages, {n} sentences, ingest {ingest_s:.0f} s")
    quant.SPLIT_MIN_ROWS = 0  # the split scan at this size too
    quant.SPLIT_SKIP = 0      # and tried on every query
    store.QUANT_MIN_ROWS = min(store.QUANT_MIN_ROWS, n)
    steady(engine)  # the copy (with its split code) before the first search
    qv = V.normalize_rows(np.asarray(engine.embedder.embed(queries), dtype=np.float32), zero_invalid=True)
    rows = store._rows(None)
    out: dict[str, Any] = {"passages": len(texts), "sentences": n, "queries": len(queries),
                           "embedder": getattr(engine.embedder, "name", embedder_kind), "ingest_s": round(ingest_s, 1)}
    for label, k in (("top10", 10), ("window100", 100)):
        scans: collections.Counter[str] = collections.Counter()
        rescored, same = [], 0
        for v in qv:
            got = store.knn(v[None, :], k)[0]
            stats = dict(store.last_stats)
            want = store._top(store._scores(v, rows), rows.keys, k, None)
            same += got == want
            scans[stats.get("scan", "?")] += 1
            if "rescored" in stats:
                rescored.append(stats["rescored"])
        out[label] = {"k": k, "scan": dict(scans), "identical": f"{same}/{len(qv)}",
                      "rescored_median": statistics.median(rescored) if rescored else None,
                      "split_certified_share": round(scans.get("split int8 + fp32 rescore", 0) / len(qv), 3)}
        log(f"[int8_real] {label}: {dict(scans)}; identical {same}/{len(qv)}; rescored median "
            f"{out[label]['rescored_median']}")
    copy = store._quant
    if copy is not None and copy.split is not None:
        out["split_width"] = int(copy.split.codec.scan.d)
        out["split_tau"] = round(float(copy.split.codec.tau or 0.0), 4)
        out["int8_tau"] = round(float(copy.tau or 0.0), 4)
    engine.close()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="first N passages only")
    ap.add_argument("--embedder", default="minilm", choices=["minilm", "hash"])
    ap.add_argument("--out", type=Path, default=RESULTS / "int8_real.json")
    args = ap.parse_args(argv)
    started = time.time()
    res = {"benchmark": "int8_real", "machine": machine_info(), "run": run(args.limit, args.embedder)}
    stamp_end(res, started)
    write_json(args.out, res)
    log(f"wrote {args.out}")
    return res


if __name__ == "__main__":
    main()
