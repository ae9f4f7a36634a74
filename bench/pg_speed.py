#!/usr/bin/env python3
"""NLQL on PostgreSQL + pgvector against the built-in store, in one run at 100k sentences (issue 21).

Corpus: bench/corpus.py's one-sentence texts (seed 42, so BM25 has real words), with metadata
``status`` (``"published"`` for half the documents), ``tag`` (``"t0"`` … ``"t999"``: one tag is 0.1%)
and ``year``; vectors are clustered (random unit centres plus noise, dim 384, fixed seed) and
precomputed, query vectors drawn from the same clusters: both engines look them up, so neither ingest
nor a query pays for embedding. PostgreSQL 16 + pgvector 0.6.2 from the ``pgserver`` wheel in a
temporary directory (``maintenance_work_mem = 1GB``, no fsync).

Measured per query shape, as the median of ``--repeat`` interleaved repetitions (built-in store and
Postgres round-robin, several query texts cycled): ``canonical`` (``rel >= 0.2 AND status ==
"published"``, 50%), ``tag`` (top-10 with ``meta.tag == "t7"``, 0.1%), ``top10`` (unfiltered), ``bm25``
and ``rrf`` (``RRF(SIMILARITY, BM25)``). The store's path (``last_stats``) is recorded per shape.

Hybrid pages: every query text × (``rrf``, ``rrf`` with the 50% filter, ``bm25``) × pages 1–2
(``LIMIT 10 OFFSET 0/10``) on ``PgVectorStore(exact=True)`` (the exact mode the one-statement plan
promises to match) is compared with the built-in store: ids in order and every score to 1e-9
(``identical``), and ids alone (``same_ids``). ``same_top10`` per shape compares ids only (the HNSW
path is approximate and keeps pgvector's own scores).

    python bench/pg_speed.py                 # 100k, 20 repetitions: about 3 minutes
    python bench/pg_speed.py --n 20000 --repeat 5

Writes bench/results/pg_speed.json.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, interleaved_runs, log, machine_info, stamp_end, steady, write_json  # noqa: E402
from bench.corpus import synthetic_corpus  # noqa: E402
from nlql import Engine  # noqa: E402

DIM = 384
SEED = 42
CENTRES = 200
NOISE = 0.8
TAGS = 1000
PG_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
               "maintenance_work_mem": "1GB"}

QUERY_TEXTS = ["renewable energy policy", "hospital patients therapy", "software agents database",
               "football league coach", "coffee market harvest", "solar battery grid costs",
               "cloud compiler chip growth", "sleep diet clinic study", "bread recipe kitchen",
               "vaccine doctor report"]

SHAPES: dict[str, str] = {
    "canonical": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{text}") '
                  'WHERE rel >= 0.2 AND meta.status == "published" ORDER BY rel DESC LIMIT 10'),
    "tag": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{text}") '
            'WHERE meta.tag == "t7" ORDER BY rel DESC LIMIT 10'),
    "top10": 'SELECT SENTENCE LET rel = SIMILARITY(content, "{text}") ORDER BY rel DESC LIMIT 10',
    "bm25": 'SELECT SENTENCE LET kw = BM25(content, "{text}") WHERE kw > 0 ORDER BY kw DESC LIMIT 10',
    "rrf": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{text}"), kw = BM25(content, "{text}"), '
            "f = RRF(rel, kw) ORDER BY f DESC LIMIT 10"),
}

PAGES: dict[str, str] = {
    "rrf": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{text}"), kw = BM25(content, "{text}"), '
            "f = RRF(rel, kw) ORDER BY f DESC LIMIT 10 OFFSET {offset}"),
    "rrf_filtered": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{text}"), kw = BM25(content, "{text}"), '
                     'f = RRF(rel, kw) WHERE meta.status == "published" ORDER BY f DESC LIMIT 10 OFFSET {offset}'),
    "bm25": ('SELECT SENTENCE LET kw = BM25(content, "{text}") WHERE kw > 0 ORDER BY kw DESC '
             "LIMIT 10 OFFSET {offset}"),
}


DESCRIPTION = (
    "100k one-sentence documents (bench/corpus.py texts; `status` published on 50%, `tag` t0–t999, one "
    "tag = 0.1%), clustered unit vectors (dim 384) precomputed for the corpus and the query texts, so no "
    "embedding is timed. `memory` / `pg`: median ms of `engine.search` over interleaved repetitions "
    "(built-in store and PgVectorStore() with HNSW built, round-robin, query texts cycled); `ratio` = "
    "pg / memory; `pg_path` and `pg_reason`: the store's own plan (`last_stats`); `same_top10`: ids "
    "equal to the built-in store's. `hybrid_pages`: PgVectorStore(exact=True) against the built-in store "
    "on every page of `pages_nlql` (ids and scores to 1e-9). PostgreSQL 16 + pgvector 0.6.2 (pgserver), "
    "shared_buffers 128 MB (the wheel's default), 2 shared cores."
)


def clustered(n: int, rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    """Unit vectors around the given centres (noise norm ``NOISE`` relative to a centre's)."""
    x = centres[rng.integers(0, len(centres), n)] + rng.standard_normal((n, DIM)).astype(np.float32) * (
        NOISE / DIM**0.5)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def corpus(n: int) -> tuple[list[str], list[str], list[dict[str, Any]], np.ndarray, np.ndarray]:
    """Texts, ids, metadata, the texts' vectors and one vector per query text."""
    texts, metas = synthetic_corpus(n, seed=SEED)
    rng = random.Random(SEED + 1)
    out_meta = [{"status": "published" if rng.random() < 0.5 else rng.choice(["draft", "archived"]),
                 "tag": f"t{rng.randrange(TAGS)}", "year": m["year"], "topic": m["topic"]} for m in metas]
    vrng = np.random.default_rng(SEED)
    c = vrng.standard_normal((CENTRES, DIM)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    vecs = clustered(n, vrng, c)
    qvecs = clustered(len(QUERY_TEXTS), vrng, c)
    return texts, [str(i) for i in range(n)], out_meta, vecs, qvecs


class Lookup:
    """Precomputed vectors for the corpus and the query texts; anything else is an error."""

    name = "clustered-384-lookup"

    def __init__(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        self._row = {t: i for i, t in enumerate(texts)}
        self._vectors = vectors

    @property
    def dim(self) -> int:
        return DIM

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._vectors[[self._row[t] for t in texts]]


class Postgres:
    """A throw-away PostgreSQL 16 + pgvector (pgserver) in a temporary directory."""

    def __init__(self) -> None:
        import pgserver
        import psycopg
        from psycopg import sql

        self._tmp = tempfile.TemporaryDirectory(prefix="nlql-bench-pgspeed-")
        self._handle = pgserver.get_server(os.path.join(self._tmp.name, "pgdata"), cleanup_mode="delete")
        self.uri = self._handle.get_uri()
        with psycopg.connect(self.uri, autocommit=True) as conn:
            for name, value in PG_SETTINGS.items():
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
            conn.execute("SELECT pg_reload_conf()")
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            self.versions = {
                "postgres": str(conn.execute("SHOW server_version").fetchone()[0]),
                "pgvector": str(conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
                                .fetchone()[0]),
            }

    def stop(self) -> None:
        self._handle.cleanup()
        self._tmp.cleanup()


def build(uri: str, n: int) -> dict[str, Any]:
    """Load the corpus into the built-in store and into Postgres; return the engines and timings."""
    from nlql.stores.pgvector import PgVectorStore

    texts, ids, metas, vecs, qvecs = corpus(n)
    emb = Lookup(texts + QUERY_TEXTS, np.concatenate([vecs, qvecs]))
    out: dict[str, Any] = {}
    mem = Engine(embedder=emb, warm_up=False)
    t = time.perf_counter()
    mem.add_texts(texts, ids=ids, metadatas=metas, batch_size=8192)
    out["memory_ingest_s"] = round(time.perf_counter() - t, 2)
    steady(mem)
    store = PgVectorStore(uri, table_prefix="speed")
    pg = Engine(embedder=emb, store=store, warm_up=False)
    t = time.perf_counter()
    pg.add_texts(texts, ids=ids, metadatas=metas, batch_size=8192)
    out["pg_ingest_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    store.build_index()
    out["pg_index_s"] = round(time.perf_counter() - t, 2)
    exact = Engine(embedder=emb, store=PgVectorStore(uri, table_prefix="speed", exact=True), warm_up=False)
    return {"memory": mem, "pg": pg, "pg_exact": exact, "timings": out}


def cycler(engine: Engine, queries: list[str]) -> Any:
    """A function that runs the next query text of ``queries`` on ``engine`` each call."""
    state = {"i": 0}

    def one() -> None:
        engine.search(queries[state["i"] % len(queries)])
        state["i"] += 1

    return one


def same_page(a: Any, b: Any) -> bool:
    if [h.id for h in a] != [h.id for h in b]:
        return False
    for x, y in zip(a, b, strict=True):
        for name, v in x.scores.items():
            w = y.scores.get(name)
            if w is None or abs(float(v) - float(w)) > 1e-9:
                return False
    return True


def run(n: int, repeat: int) -> dict[str, Any]:
    pg_server = Postgres()
    try:
        log(f"building {n} sentences in both stores")
        built = build(pg_server.uri, n)
        mem, pg, pg_exact = built["memory"], built["pg"], built["pg_exact"]
        shapes: dict[str, Any] = {}
        for shape, template in SHAPES.items():
            queries = [template.format(text=t) for t in QUERY_TEXTS]
            runs = interleaved_runs({"memory": cycler(mem, queries), "pg": cycler(pg, queries)}, repeat, warmup=2)
            hits = pg.search(queries[0])
            st = hits.stats.get("store") or {}
            same = sum([h.id for h in pg.search(q)] == [h.id for h in mem.search(q)] for q in queries)
            row = {name: round(statistics.median(r), 3) for name, r in runs.items()}
            row["ratio"] = round(row["pg"] / row["memory"], 2) if row["memory"] else None
            row["pg_path"] = st.get("mode") or st.get("path")
            row["pg_reason"] = st.get("reason")
            row["same_top10"] = f"{same}/{len(queries)}"
            shapes[shape] = row
            log(f"  {shape:10s} memory {row['memory']:8.2f} ms  pg {row['pg']:8.2f} ms  "
                f"path {row['pg_path']} ({row['pg_reason']})  same {row['same_top10']}")
        pages_same, same_ids, pages_total, differ = 0, 0, 0, []
        for shape, template in PAGES.items():
            for text in QUERY_TEXTS:
                for offset in (0, 10):
                    q = template.format(text=text, offset=offset)
                    got, want = pg_exact.search(q), mem.search(q)
                    ok = same_page(got, want)
                    pages_total += 1
                    pages_same += ok
                    same_ids += [h.id for h in got] == [h.id for h in want]
                    if not ok:
                        differ.append({"shape": shape, "text": text, "offset": offset,
                                       "same_ids": [h.id for h in got] == [h.id for h in want]})
        log(f"  hybrid pages identical to the built-in store (pgvector exact=True): {pages_same}/{pages_total} "
            f"(same ids in order: {same_ids}/{pages_total})")
        return {"timings": built["timings"], "shapes": shapes, "versions": pg_server.versions,
                "hybrid_pages": {"identical": pages_same, "same_ids": same_ids, "total": pages_total,
                                 "differ": differ}}
    finally:
        pg_server.stop()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=20, help="interleaved repetitions per shape (median)")
    ap.add_argument("--out", type=Path, default=RESULTS / "pg_speed.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    data: dict[str, Any] = {"title": "NLQL on PostgreSQL + pgvector vs the built-in store (issue 21)",
                            "description": DESCRIPTION, "benchmark": "pg_speed", "sentences": args.n, "dim": DIM, "repeat": args.repeat,
                            "shapes_nlql": SHAPES, "pages_nlql": PAGES, "machine": machine_info()}
    data.update(run(args.n, args.repeat))
    stamp_end(data, started)
    write_json(args.out, data)
    return data


if __name__ == "__main__":
    main()
