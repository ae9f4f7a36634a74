#!/usr/bin/env python3
"""SELECT DOCUMENT ranked by BM25 or a fusion on the built-in store: the numpy path over documents (issue 21).

The synthetic corpus (``bench/corpus.py``) grouped four sentences to a document (``--size`` sentences,
HashEmbedder dim 384, query embedding memoised so nobody pays for it). Before timing, every DOCUMENT
query runs on the fast path and row by row (the store declaring no fast path, plans planned again), and
the pages must be equal (ids, order, every score, ``hit.best``); the row-by-row time of that run is
reported beside (``row_by_row_ms``, one run each: seconds at 100k). Then, round-robin in one run
(medians of ``--repeat`` interleaved repetitions after two warm-up rounds; wall time and the process's
CPU time beside it):

* ``doc_bm25``: ``ORDER BY kw DESC LIMIT 10`` with ``kw = BM25(content, q)``;
* ``doc_rrf``: ``RRF(sem, kw)`` top-10 (window of 100 documents per arm, the default);
* ``doc_rrf_published``: the same with ``WHERE meta.status == "published"`` (pushed into the store);
* ``doc_interleave``: ``INTERLEAVE(sem, kw)`` top-10;
* ``doc_formula``: ``ORDER BY sem + 0.1 * kw DESC LIMIT 10``;
* ``doc_similarity``: ``ORDER BY sem DESC LIMIT 10`` (knn recall, no fast path needed: the reference);
* ``sentence_rrf``: the SENTENCE RRF query (its own fusion fast path), for scale.

    python bench/doc_speed.py [--size 100000] [--repeat 25]

Writes bench/results/doc_speed.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    RESULTS,
    QueryMemo,
    interleaved_cpu_runs,
    log,
    machine_info,
    row_by_row,
    stamp_end,
    steady,
    write_json,
)
from bench.corpus import synthetic_corpus  # noqa: E402

TEXT = "renewable energy policy"
PER_DOC = 4
LETS = f'LET sem = SIMILARITY(content, "{TEXT}"), kw = BM25(content, "{TEXT}")'
QUERIES = {
    "doc_bm25": f"SELECT DOCUMENT {LETS} ORDER BY kw DESC LIMIT 10",
    "doc_rrf": f"SELECT DOCUMENT {LETS}, f = RRF(sem, kw) ORDER BY f DESC LIMIT 10",
    "doc_rrf_published": f'SELECT DOCUMENT {LETS}, f = RRF(sem, kw) WHERE meta.status == "published" '
                         "ORDER BY f DESC LIMIT 10",
    "doc_interleave": f"SELECT DOCUMENT {LETS}, f = INTERLEAVE(sem, kw) ORDER BY f DESC LIMIT 10",
    "doc_formula": f"SELECT DOCUMENT {LETS}, f = sem + 0.1 * kw ORDER BY f DESC LIMIT 10",
    "doc_similarity": f"SELECT DOCUMENT {LETS} ORDER BY sem DESC LIMIT 10",
    "sentence_rrf": f"SELECT SENTENCE {LETS}, f = RRF(sem, kw) ORDER BY f DESC LIMIT 10",
}
#: The queries that take the path over documents (checked against the row-by-row page first).
DOCUMENT_PATH = ("doc_bm25", "doc_rrf", "doc_rrf_published", "doc_interleave", "doc_formula")
WHAT = {
    "doc_bm25": "DOCUMENT, BM25 top-10 (path over documents: bm25)",
    "doc_rrf": "DOCUMENT, RRF(SIMILARITY, BM25) top-10, windows of 100 documents (path over documents: fusion)",
    "doc_rrf_published": "the same with WHERE meta.status == \"published\" pushed into the store",
    "doc_interleave": "DOCUMENT, INTERLEAVE(SIMILARITY, BM25) top-10 (path over documents: fusion)",
    "doc_formula": "DOCUMENT, ORDER BY sem + 0.1 * kw top-10 (path over documents: formula)",
    "doc_similarity": "DOCUMENT, SIMILARITY top-10 (knn recall; no fast path needed)",
    "sentence_rrf": "SENTENCE, RRF(SIMILARITY, BM25) top-10 (the sentence fusion fast path)",
}


def _page(hits: Any) -> list[dict[str, Any]]:
    return [h.to_dict() for h in hits]


def run(n: int, repeat: int) -> dict[str, Any]:
    from nlql import Engine
    from nlql.embedders import HashEmbedder

    t = time.perf_counter()
    texts, metas = synthetic_corpus(n, seed=42)
    docs = [" ".join(texts[i:i + PER_DOC]) for i in range(0, n, PER_DOC)]
    doc_metas = [metas[i] for i in range(0, n, PER_DOC)]
    engine = Engine(embedder=QueryMemo(HashEmbedder(dim=384)), store="memory", warm_up=False)
    engine.add_texts(docs, ids=[f"d{i}" for i in range(len(docs))], metadatas=doc_metas, batch_size=4096)
    ingest_s = time.perf_counter() - t
    steady(engine)
    sentences = engine.store.count()
    engine.search(QUERIES["doc_bm25"])  # the engine builds its BM25 index on first use

    # Same answer first: each DOCUMENT query on its fast path and row by row.
    fast_pages, stats = {}, {}
    for name in DOCUMENT_PATH:
        hits = engine.search(QUERIES[name])
        if hits.stats.get("fast_path_unit") != "DOCUMENT":
            raise AssertionError(f"{name} left the path over documents: {hits.stats}")
        fast_pages[name], stats[name] = _page(hits), hits.stats
    slow_ms: dict[str, float] = {}
    with row_by_row(engine):
        for name in DOCUMENT_PATH:
            t = time.perf_counter()
            slow = engine.search(QUERIES[name])
            slow_ms[name] = round((time.perf_counter() - t) * 1000, 1)
            if slow.stats.get("fast_path") is not None:
                raise AssertionError(f"the reference page of {name} took a fast path: {slow.stats}")
            if _page(slow) != fast_pages[name]:
                raise AssertionError(f"{name}: the page over documents differs from the row-by-row page")
    log(f"pages identical; row by row: {slow_ms}")

    fns = {name: (lambda q=q: engine.search(q)) for name, q in QUERIES.items()}
    wall, cpu = interleaved_cpu_runs(fns, repeat, warmup=2)
    med = {name: round(statistics.median(v), 3) for name, v in wall.items()}
    cpu_med = {name: round(statistics.median(v), 3) for name, v in cpu.items()}
    out: dict[str, Any] = {
        "size": n,
        "documents": len(docs),
        "sentences": sentences,
        "repeat": repeat,
        "ingest_s": round(ingest_s, 2),
        "pages_identical_to_row_by_row": True,
        "row_by_row_ms": slow_ms,
        "speedup_vs_row_by_row": {name: round(slow_ms[name] / med[name], 1) for name in DOCUMENT_PATH},
        "documents_pruned_to": {name: stats[name].get("pruned_to") for name in DOCUMENT_PATH},
        # how each page was found: the arms' top documents only (similarity rounds of the store's top
        # sentences, documents ranked) or a score for every row ("documents": all of them)
        "how": {name: {k: stats[name][k] for k in ("similarity_rounds", "documents_ranked", "documents_matched",
                                                   "documents") if k in stats[name]} for name in DOCUMENT_PATH},
        "queries": {name: {"median_ms": med[name], "cpu_median_ms": cpu_med[name], "what": WHAT[name]}
                    for name in fns},
    }
    log(f"n={n}: " + ", ".join(f"{k} {v} ms (cpu {cpu_med[k]})" for k, v in med.items()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100_000, help="sentences (four to a document)")
    ap.add_argument("--repeat", type=int, default=25)
    ap.add_argument("--out", type=Path, default=RESULTS / "doc_speed.json")
    args = ap.parse_args()
    started = time.perf_counter()
    results: dict[str, Any] = {
        "title": "SELECT DOCUMENT ranked by BM25 or a fusion: the path over documents",
        "description": ("Medians of interleaved repetitions in one run; the synthetic corpus four sentences "
                        "to a document; embedding excluded; each page checked against the row-by-row page."),
        "machine": machine_info(),
    }
    results.update(run(args.size, args.repeat))
    stamp_end(results, started)
    write_json(args.out, results)
    print(f"{'query':<20}{'ms':>10}{'cpu ms':>10}  what")
    for k, v in results["queries"].items():
        print(f"{k:<20}{v['median_ms']:>10.3f}{v['cpu_median_ms']:>10.3f}  {v['what']}")
    print("row by row (ms, one run each):", results["row_by_row_ms"])


if __name__ == "__main__":
    main()
