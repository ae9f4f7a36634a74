#!/usr/bin/env python3
"""Recall of NLQL on pgvector's HNSW mode against its exact mode, per query, on the clustered corpus (issue 35).

``bench/pg_speed.py``'s corpus (one-sentence documents, clustered unit vectors, 200 centres, noise 0.8,
dim 384, precomputed) in one PostgreSQL 16 + pgvector table set, its HNSW index built once
(``--m``, ``--ef-construction``). ``--queries`` query vectors are drawn from the same clusters (the
first ten are ``bench/pg_speed.py``'s). For each ``ef_search`` and query shape (``top10``;
``canonical``: ``rel >= 0.2 AND status == "published"``, 50%; ``tag``: ``tag == "t7"``, 0.1%) every
query runs through ``Engine.search`` on ``PgVectorStore(ef_search=…)`` and on
``PgVectorStore(exact=True)`` over the same tables; recall@10 is the overlap of the two id lists
(a row tied with the exact 10th score counts as right). Reported: mean, min, the store's path, ms.

    python bench/pg_hnsw_recall.py --n 100000
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
from bench.pg_speed import Postgres, clustered, corpus  # noqa: E402
from nlql import Engine  # noqa: E402

SHAPES = {
    "top10": 'SELECT SENTENCE LET rel = SIMILARITY(content, "{text}") ORDER BY rel DESC LIMIT 10',
    "canonical": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{text}") '
                  'WHERE rel >= 0.2 AND meta.status == "published" ORDER BY rel DESC LIMIT 10'),
    "tag": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{text}") '
            'WHERE meta.tag == "t7" ORDER BY rel DESC LIMIT 10'),
}


class Lookup:
    name = "clustered-384-lookup"

    def __init__(self, rows: dict[str, np.ndarray]) -> None:
        self._rows = rows
        self.dim = 384

    def embed(self, texts: Any) -> np.ndarray:
        return np.stack([self._rows[t] for t in texts])


def recall(got: Any, want: Any) -> float:
    if not want:
        return 1.0
    w = [h.id for h in want]
    tenth = min(float(h.scores["rel"]) for h in want)
    ok = sum(1 for h in got if h.id in w or float(h.scores["rel"]) >= tenth - 1e-6)
    return min(ok, len(w)) / len(w)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--ef", type=int, nargs="*", default=[40, 100, 200, 400])
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=64)
    ap.add_argument("--out", type=Path, default=RESULTS / "pg_hnsw_recall.json")
    args = ap.parse_args()
    started = time.perf_counter()
    from nlql.stores.pgvector import PgVectorStore

    texts, ids, metas, vecs, qvecs = corpus(args.n)
    vrng = np.random.default_rng(7)
    c = np.random.default_rng(42).standard_normal((200, 384)).astype(np.float32)  # pg_speed's centres
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    extra = clustered(max(0, args.queries - len(qvecs)), vrng, c)
    qs = np.concatenate([qvecs, extra])[: args.queries]
    qtexts = [f"query {i}" for i in range(len(qs))]
    emb = Lookup({**dict(zip(texts, vecs, strict=True)), **dict(zip(qtexts, qs, strict=True))})
    out: dict[str, Any] = {"title": "pgvector HNSW mode: recall@10 per query against exact mode (issue 35)",
                           "benchmark": "pg_hnsw_recall", "sentences": args.n, "queries": len(qs),
                           "m": args.m, "ef_construction": args.ef_construction, "machine": machine_info()}
    server = Postgres()
    try:
        store = PgVectorStore(server.uri, table_prefix="rc", m=args.m, ef_construction=args.ef_construction)
        eng = Engine(embedder=emb, store=store, warm_up=False)
        t = time.perf_counter()
        eng.add_texts(texts, ids=ids, metadatas=metas, batch_size=8192)
        out["ingest_s"] = round(time.perf_counter() - t, 2)
        t = time.perf_counter()
        store.build_index()
        out["index_s"] = round(time.perf_counter() - t, 2)
        log(f"[pg_hnsw_recall] ingest {out['ingest_s']} s, index {out['index_s']} s (load {os.getloadavg()[0]:.1f})")
        exact = Engine(embedder=emb, store=PgVectorStore(server.uri, table_prefix="rc", exact=True), warm_up=False)
        want = {shape: [exact.search(tpl.format(text=q)) for q in qtexts] for shape, tpl in SHAPES.items()}
        rows: dict[str, Any] = {}
        for ef in args.ef:
            e = Engine(embedder=emb, store=PgVectorStore(server.uri, table_prefix="rc", ef_search=ef), warm_up=False)
            for shape, tpl in SHAPES.items():
                rs, ms, paths = [], [], set()
                for q, w in zip(qtexts, want[shape], strict=True):
                    t = time.perf_counter()
                    got = e.search(tpl.format(text=q))
                    ms.append((time.perf_counter() - t) * 1e3)
                    rs.append(recall(got, w))
                    st = got.stats.get("store") or {}
                    paths.add(str(st.get("path") or st.get("mode")))
                row = {"recall_mean": round(statistics.mean(rs), 3), "recall_min": round(min(rs), 3),
                       "below_0.8": sum(r < 0.8 for r in rs), "ms_median": round(statistics.median(ms), 2),
                       "paths": sorted(paths)}
                rows[f"ef_search={ef} {shape}"] = row
                log(f"[pg_hnsw_recall] ef_search={ef} {shape:9s} {row}")
        out["rows"] = rows
        out["versions"] = server.versions
    finally:
        server.stop()
    stamp_end(out, started)
    write_json(args.out, out)


if __name__ == "__main__":
    main()
