#!/usr/bin/env python3
"""``engine.ask`` per intent on the built-in store: the routed query's page picked with numpy against the
same query row by row (issues 30 and 32).

The `entity` and `temporal` templates are ``SELECT DOCUMENT`` fusions with a GRAPH or TEMPORAL arm beside
SIMILARITY and BM25. The fusion page over documents (``nlql.stores.memory.document_page``) takes GRAPH
and TEMPORAL as vectors over the rows (each document its best row's value); before, those two
templates ran row by row, building every document. This script times each intent's question both ways
in one process, interleaved round by round, and checks that the two pages are equal (ids and every
score).

Corpus: the bundled demo corpus (Python standard-library docstrings) repeated ``--copies`` times, each
copy's documents dated at random within the year before the clock, so TEMPORAL has rows to rank; the
default entity extractor finds the capitalised names of the docstrings (Python, Unicode, …). The hash
embedder (384 dims): the figures are the engine's, not a neural model's.

    python bench/ask_speed.py [--copies 10] [--repeat 9] [--out bench/results/ask_speed.json]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, log, machine_info, row_by_row, stamp_end, write_json  # noqa: E402

CLOCK = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)
QUESTIONS = [
    ("who mentioned Unicode?", "entity"),
    ("what did Python say about strings?", "entity"),
    ("what changed last month?", "temporal"),
    ("when did we parse the json files?", "temporal"),
    ("how do I read a zip archive", "general"),
    ("what is a context manager?", "conceptual"),
]


def build(copies: int) -> Any:
    from nlql import Engine
    from nlql.data import load_demo
    from nlql.embedders import HashEmbedder

    rng = random.Random(5)
    docs = load_demo()
    engine = Engine(embedder=HashEmbedder(dim=384), warm_up=False, clock=lambda: CLOCK)
    texts, ids, metas = [], [], []
    for c in range(copies):
        for d in docs:
            meta = dict(d["metadata"])
            meta["date"] = (CLOCK - timedelta(days=rng.randrange(365), hours=rng.randrange(24))).isoformat()
            texts.append(d["text"])
            ids.append(f"{d['id']}#{c}")
            metas.append(meta)
    engine.add_texts(texts, ids=ids, metadatas=metas)
    return engine


def _page(hits: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(h.id, h.scores) for h in hits]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--out", type=Path, default=RESULTS / "ask_speed.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    machine = machine_info()
    engine = build(args.copies)
    sentences = engine.store.count()
    log(f"[ask_speed] {sentences} sentences ({args.copies} copies of the demo corpus)")
    rows = []
    for question, intent in QUESTIONS:
        route = engine.route(question)
        engine.ask(question)  # warm: the graph, the BM25 index, the plan
        fast_ms, slow_ms, ask_ms = [], [], []
        with row_by_row(engine):
            want = engine.search(route.query, params=route.params)
        for _ in range(args.repeat):  # interleaved: load from other processes lands on both
            t = time.perf_counter()
            got = engine.search(route.query, params=route.params)
            fast_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            engine.ask(question)
            ask_ms.append((time.perf_counter() - t) * 1000)
            with row_by_row(engine):
                engine.search(route.query, params=route.params)  # (plans again: not timed)
                t = time.perf_counter()
                engine.search(route.query, params=route.params)
                slow_ms.append((time.perf_counter() - t) * 1000)
        row = {"question": question, "intent": route.intent, "expected_intent": intent,
               "fast_path": got.stats.get("fast_path"), "same_page": _page(got) == _page(want),
               "routed_ms": round(statistics.median(fast_ms), 2), "ask_ms": round(statistics.median(ask_ms), 2),
               "row_by_row_ms": round(statistics.median(slow_ms), 2)}
        row["speedup"] = round(row["row_by_row_ms"] / max(row["routed_ms"], 1e-9), 1)
        row["ask_vs_routed"] = round(row["ask_ms"] / max(row["routed_ms"], 1e-9), 2)
        log(f"[ask_speed] {route.intent:10s} {question!r}: routed {row['routed_ms']} ms (fast path "
            f"{row['fast_path']}), ask {row['ask_ms']} ms, row by row {row['row_by_row_ms']} ms "
            f"({row['speedup']}x); same page {row['same_page']}")
        rows.append(row)
    engine.close()
    out = {"title": "ask per intent: the routed query's numpy page against the same query row by row",
           "machine": machine, "sentences": sentences, "copies": args.copies, "repeat": args.repeat,
           "embedder": "hash (HashEmbedder, dim 384)", "store": "memory", "rows": rows}
    stamp_end(out, started)
    write_json(args.out, out)
    log(f"[ask_speed] wrote {args.out}")
    return out


if __name__ == "__main__":
    main()
