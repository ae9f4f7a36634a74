#!/usr/bin/env python3
"""Benchmark the front end: parse + check of the SPEC §2 queries, cold (cache cleared) and cached.

Prints the median per query and overall, and writes bench/results/parse.json. The target is a median
cold parse + check below 0.5 ms.

    python bench/parse.py [--repeat 2000] [--out bench/results/parse.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nlql.check import check  # noqa: E402
from nlql.parser import clear_cache, parse  # noqa: E402
from nlql.render import render  # noqa: E402

SPEC_QUERIES = {
    "hybrid_filters": """SELECT SENTENCE
LET rel = SIMILARITY(content, "AI agents")
WHERE rel >= 0.3 AND meta.status == "published" AND content CONTAINS "tool"
ORDER BY rel DESC, meta.created_at DESC NULLS LAST
LIMIT 5 OFFSET 0""",
    "span_param_in": 'SELECT SPAN(SENTENCE, window => 2) LET rel = SIMILARITY(content, $q) '
                     'WHERE meta.lang IN ("en", "de") LIMIT 3',
    "rrf_within_between": """SELECT DOCUMENT
LET sem = SIMILARITY(content, "language games"),
    kw  = BM25(content, "language games"),
    score = RRF(sem, kw, k => 60)
WHERE meta.date WITHIN "last week" AND meta.year BETWEEN 2020 AND 2025 AND meta.author IS NOT NULL
ORDER BY score DESC
LIMIT 10""",
    "weighted_sum": 'SELECT SENTENCE LET s = 0.7 * SIMILARITY(content, "rag") + 0.3 * BM25(content, "rag") '
                    "ORDER BY s DESC LIMIT 5",
}
TARGET_MS = 0.5


def _time_ms(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "parse.json"))
    args = ap.parse_args()

    parse("SELECT SENTENCE")  # build the Lark parser once, outside the timings
    rows = {}
    cold_all: list[float] = []
    cached_all: list[float] = []
    for name, text in SPEC_QUERIES.items():
        assert check(text) == [], name

        def cold(text: str = text) -> None:
            clear_cache()
            check(parse(text))

        def cached(text: str = text) -> None:
            check(parse(text))

        def parse_only(text: str = text) -> None:
            clear_cache()
            parse(text)

        q = parse(text)
        cold_ms = _time_ms(cold, args.repeat)
        cached_ms = _time_ms(cached, args.repeat)
        parse_ms = _time_ms(parse_only, args.repeat)
        render_ms = _time_ms(lambda q=q: render(q), args.repeat)
        cold_all += cold_ms
        cached_all += cached_ms
        rows[name] = {
            "chars": len(text),
            "cold_parse_check_ms": round(statistics.median(cold_ms), 4),
            "cold_parse_only_ms": round(statistics.median(parse_ms), 4),
            "cached_parse_check_ms": round(statistics.median(cached_ms), 4),
            "render_ms": round(statistics.median(render_ms), 4),
        }
        print(f"{name:20s} cold parse+check {rows[name]['cold_parse_check_ms']:.3f} ms   "
              f"parse only {rows[name]['cold_parse_only_ms']:.3f} ms   "
              f"cached {rows[name]['cached_parse_check_ms']:.4f} ms   render {rows[name]['render_ms']:.4f} ms")
    cold_median = statistics.median(cold_all)
    cached_median = statistics.median(cached_all)
    verdict = "meets" if cold_median < TARGET_MS else "misses"
    print(f"{'all':20s} cold parse+check {cold_median:.3f} ms ({verdict} the {TARGET_MS} ms target)   "
          f"cached {cached_median:.4f} ms")
    result = {
        "benchmark": "parse",
        "repeat": args.repeat,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "target_cold_ms": TARGET_MS,
        "median_cold_parse_check_ms": round(cold_median, 4),
        "median_cached_parse_check_ms": round(cached_median, 4),
        "queries": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
