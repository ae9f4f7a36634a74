#!/usr/bin/env python3
"""Every store on one corpus: build time, query latency and recall@10 against the built-in store (issue 4).

The synthetic one-sentence corpus (bench/corpus.py, fixed seed) plus one extra metadata field,
``cohort`` (0–99, drawn from its own fixed-seed generator, independent of topic/status/year), so that
``meta.cohort == 7`` selects about 1% of the documents. Vectors come from ``HashEmbedder(dim=384)``,
computed once before any store is built and looked up by every engine: the build time is the store's own
work (``Engine.add_texts`` plus any separate index build), the same for everyone; query texts are embedded
once and memoised, so latency excludes query embedding.

For each store and each query shape, over several query texts:

- ``ms``: the median wall time of ``engine.search`` (warm: one unmeasured run per text first);
- ``recall``: recall@10 against the built-in store's exact answer for the same query at the same size;
- ``rows``: the fewest rows any text returned (the top-k guarantee says 10: every query has ≥ 10
  matching rows in the reference), and ``full``: whether every answer had as many rows as the reference;
- ``path``: the search path the store reported (``hits.stats["store"]``).

Query shapes: ``canonical`` (threshold + ``status == "published"``, ~25% of the rows), ``filtered_1pct``
(``cohort == 7``) and ``unfiltered`` (plain top-10: the only shape where the ANN stores walk their graph,
since their cost rule answers both filtered shapes exactly at 100k).

Chroma's embedded HNSW build grows super-linearly (measured here: 13.5 s at 20k, 47–60 s at 50k, 155 s
at 100k) and Qdrant's local mode filters in pure Python (about 2 s a filtered query at 100k; in RAM,
``location=":memory:"``, it inserted linearly here: 36 s at 100k, where FIELD-NOTES' 135 s is with
``path=``). The whole default run still takes about 10 minutes on this 2-core machine, so every store
runs at ``--n``; ``--store-n chroma=50000`` runs one at a smaller size. Each store's
``n`` is in the JSON, and its recall is against the built-in store at that same size. PostgreSQL 16 +
pgvector 0.6.2 comes from the ``pgserver`` wheel, in a temporary directory deleted at exit
(``maintenance_work_mem = 1GB`` so the HNSW graph is built in memory); the exact and the HNSW store share
one ingest (same tables), the HNSW row adds ``build_index()``.

    python bench/stores.py                       # 100k sentences, every store: about 10 minutes
    python bench/stores.py --quick               # 20k, without the slowest stores
    python bench/stores.py --stores memory faiss-hnsw --n 50000 --repeat 5
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, log, machine_info, stamp_end, steady, write_json  # noqa: E402
from bench.corpus import synthetic_corpus  # noqa: E402
from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402

DIM = 384
SEED = 42
COHORT_SEED = 4242
COHORT = 7  # meta.cohort == 7: about 1% of the documents
BATCH = 2048
K = 10

QUERY_TEXTS = [
    "renewable energy policy",
    "hospital patients therapy",
    "software agents database",
    "football league coach",
    "coffee market harvest",
    "solar battery grid costs",
    "cloud compiler chip growth",
    "sleep diet clinic study",
]

#: query shape -> NLQL with ``{text}`` for the query text
SHAPES: dict[str, str] = {
    "canonical": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{text}") '
                  'WHERE rel >= 0.2 AND meta.status == "published" ORDER BY rel DESC LIMIT 10'),
    "filtered_1pct": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{text}") '
                      f'WHERE meta.cohort == {COHORT} ORDER BY rel DESC LIMIT 10'),
    "unfiltered": 'SELECT SENTENCE LET rel = SIMILARITY(content, "{text}") ORDER BY rel DESC LIMIT 10',
    "bm25": 'SELECT SENTENCE LET kw = BM25(content, "{text}") WHERE kw > 0 ORDER BY kw DESC LIMIT 10',
    "rrf": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{text}"), kw = BM25(content, "{text}"), '
            "f = RRF(rel, kw) ORDER BY f DESC LIMIT 10"),
}

#: every store, in run order: key -> (label, settings as measured)
STORES: dict[str, tuple[str, str]] = {
    "memory": ("built-in (numpy, exact)",
               "MemoryStore: float32 matrix, exact top-k, sub-matrix cache per filter"),
    "faiss-flat": ("faiss flat", 'FaissStore(index="flat"): exact, the built-in matrix path'),
    "faiss-hnsw": ("faiss HNSW", 'FaissStore(index="hnsw"): IndexHNSWFlat M=32, efConstruction=200, '
                   "efSearch=128; exact path when the cost rule says so"),
    "hnswlib": ("hnswlib", "HnswlibStore(): cosine, M=16, ef_construction=200, ef=128; "
                "exact path when the cost rule says so"),
    "chroma": ("Chroma (embedded)", "ChromaStore(): EphemeralClient, cosine HNSW, ef_search=200, "
               "ef_construction=200"),
    "qdrant": ("Qdrant (local mode)", 'QdrantStore(location=":memory:"): local mode, brute force '
               "(exact=True, the adapter default), filters evaluated in Python by qdrant-client"),
    "pgvector-exact": ("pgvector exact", "PgVectorStore(exact=True): sequential scan, ORDER BY (<=>) + 0"),
    "pgvector-hnsw": ("pgvector HNSW", "PgVectorStore(): HNSW m=16, ef_construction=64, ef_search=100 "
                      "(widened on under-fill); exact when the filter matches ≤ 20,000 rows"),
    "milvus-lite": ("Milvus Lite (file)", 'the registry\'s "milvus" row, exact options (index="flat"), on a '
                    "fresh milvus:///<tmp>/bench.db: Milvus Lite 3.x in-process, BM25 from terms kept in the rows"),
}

#: stores that run at a smaller size by default (none: see the module docstring), e.g. {"chroma": 50_000}
SMALLER_N: dict[str, int] = {}
#: left out of --quick
SLOW = ("qdrant", "chroma", "milvus-lite")

DESCRIPTION = (
    "Every store on the same synthetic one-sentence corpus (bench/corpus.py, seed 42, plus "
    f"`cohort` 0–99 so `meta.cohort == {COHORT}` selects ~1%), HashEmbedder(dim=384) vectors "
    "computed once and looked up by every engine (build = `add_texts` + any separate index build, "
    "no embedding), query embedding memoised. `ms`: median `engine.search` over "
    f"{len(QUERY_TEXTS)} query texts × runs (warm); `recall`: recall@10 against the built-in "
    "store's exact answer at the same n; `rows`: fewest rows any text returned (10 expected); "
    "`full`: every answer as long as the reference's; `path`: the store's own search path; `rounds`: "
    "the most search rounds the store needed (widening on under-fill). Every store runs at the same n "
    "unless `--store-n` says otherwise (see `n`). `ingest_shared`: the pgvector HNSW row reuses the "
    "exact row's tables, its ingest time is the same measurement. Caveats: the hash vectors of this "
    "small-vocabulary corpus are easy for HNSW (real embeddings are harder: `bench/ann_stores.py`); "
    "the Faiss/hnswlib cost rule answers both filtered shapes on the exact path at 100k, so only "
    "`unfiltered` walks their graphs; Qdrant's local mode is brute force in Python (a Qdrant server is "
    "the scale-out path); the machine is shared (load averages in `machine`)."
)

PG_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
               "maintenance_work_mem": "1GB"}


# ----------------------------------------------------------------------------------------- corpus


def corpus(n: int) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """Texts, ids and metadata: bench/corpus.py's corpus plus ``cohort`` (0–99, its own seed)."""
    texts, metas = synthetic_corpus(n, seed=SEED)
    rng = random.Random(COHORT_SEED)
    for m in metas:
        m["cohort"] = rng.randrange(100)
    return texts, [str(i) for i in range(n)], metas


class CorpusEmbedder:
    """The hash embedder's vectors for the corpus, computed once and looked up by every engine; any other
    text (a query) goes to the hash embedder once and is memoised. ``misses`` counts corpus-sized calls
    that found a text not precomputed (it should stay 0: then no store's build pays for embedding)."""

    def __init__(self, texts: Sequence[str], vectors: np.ndarray, inner: HashEmbedder) -> None:
        self.inner = inner
        self.name = inner.name
        self._row = {t: i for i, t in enumerate(texts)}
        self._vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self._memo: dict[str, np.ndarray] = {}
        self.misses = 0

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = list(texts)
        out = np.empty((len(items), self.dim), dtype=np.float32)
        todo: list[int] = []
        for j, t in enumerate(items):
            row = self._row.get(t)
            if row is not None:
                out[j] = self._vectors[row]
            elif t in self._memo:
                out[j] = self._memo[t]
            else:
                todo.append(j)
        if todo:
            if len(items) > 4:
                self.misses += len(todo)
            vecs = np.asarray(self.inner.embed([items[j] for j in todo]), dtype=np.float32)
            for j, v in zip(todo, vecs, strict=True):
                out[j] = v
                if len(items) <= 4:
                    self._memo[items[j]] = v
        return out


# -------------------------------------------------------------------------------------- postgres


class Postgres:
    """A throw-away PostgreSQL 16 + pgvector from the pgserver wheel, in a temporary directory."""

    def __init__(self) -> None:
        import pgserver
        import psycopg
        from psycopg import sql

        self._tmp = tempfile.TemporaryDirectory(prefix="nlql-bench-stores-pg-")
        self._handle = pgserver.get_server(os.path.join(self._tmp.name, "pgdata"), cleanup_mode="delete")
        self.uri = self._handle.get_uri()
        with psycopg.connect(self.uri, autocommit=True) as conn:
            for name, value in PG_SETTINGS.items():
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name),
                                                                         sql.Literal(value)))
            conn.execute("SELECT pg_reload_conf()")
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")

            def one(query: str) -> str:
                row = conn.execute(query).fetchone()
                return str(row[0]) if row else "?"

            self.versions = {
                "postgres": one("SHOW server_version"),
                "pgvector": one("SELECT extversion FROM pg_extension WHERE extname = 'vector'"),
            }
        self.loaded: dict[str, Any] | None = None  # {"n", "ingest_s", "prefix"} once a table is loaded

    def stop(self) -> None:
        self._handle.cleanup()
        self._tmp.cleanup()


# -------------------------------------------------------------------------------------- measuring


def _path(hits: Any) -> str:
    st = hits.stats.get("store") or {}
    path = st.get("path") or "exact"  # the built-in store reports no path: it has only the exact one
    return f"{path}/{st['mode']}" if st.get("mode") else str(path)


def measure(engine: Engine, shape: str, texts: Sequence[str], reference: dict[str, list[str]] | None,
            repeat: int, budget_s: float) -> dict[str, Any]:
    """Median latency over every (text, run), recall@10 against ``reference``, rows and paths.

    Each text is run once unmeasured (warm-up, and its answer is the one checked); then up to ``repeat``
    timed runs, fewer when a text's warm-up says ``budget_s`` (for the whole shape) would be exceeded.
    """
    samples: list[float] = []
    recalls: list[float] = []
    rows: list[int] = []
    full = True
    paths: Counter[str] = Counter()
    rounds = 0
    per_text = budget_s / max(1, len(texts))
    for text in texts:
        q = SHAPES[shape].format(text=text)
        t = time.perf_counter()
        hits = engine.search(q)
        first = time.perf_counter() - t
        ids = [h.id for h in hits]
        rows.append(len(ids))
        paths[_path(hits)] += 1
        rounds = max(rounds, int((hits.stats.get("store") or {}).get("rounds") or 0))
        if reference is not None:
            want = reference[text]
            recalls.append(len(set(ids) & set(want)) / len(want) if want else 1.0)
            full = full and len(ids) == len(want)
        runs = max(1, min(repeat, int(per_text / max(first, 1e-4))))
        for _ in range(runs):
            t = time.perf_counter()
            engine.search(q)
            samples.append((time.perf_counter() - t) * 1000)
    out: dict[str, Any] = {
        "ms": round(statistics.median(samples), 3),
        "p90_ms": round(float(np.percentile(samples, 90)), 3),
        "recall": round(statistics.fmean(recalls), 4) if recalls else None,
        "rows": min(rows),
        "full": full,
        "path": ", ".join(f"{p}×{c}" if len(paths) > 1 else p for p, c in paths.most_common()),
        "rounds": rounds,
        "runs": len(samples),
    }
    return out


def answers(engine: Engine, texts: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """Per shape, per query text: the ids the engine returns (the reference when it is the built-in one)."""
    return {shape: {t: [h.id for h in engine.search(SHAPES[shape].format(text=t))] for t in texts}
            for shape in SHAPES}


# ----------------------------------------------------------------------------------------- stores


def make_store(key: str, n: int, pg: Postgres | None) -> Any:
    if key == "memory":
        return "memory"
    if key == "faiss-flat":
        from nlql.stores.faiss import FaissStore

        return FaissStore(index="flat")
    if key == "faiss-hnsw":
        from nlql.stores.faiss import FaissStore

        return FaissStore(index="hnsw")
    if key == "hnswlib":
        from nlql.stores.hnswlib import HnswlibStore

        return HnswlibStore()
    if key == "chroma":
        from nlql.stores.chroma import ChromaStore

        return ChromaStore(collection="bench")
    if key == "qdrant":
        from nlql.stores.qdrant import QdrantStore

        return QdrantStore(location=":memory:", collection="bench" + uuid.uuid4().hex[:8])
    if key == "milvus-lite":  # registry-driven: the row's URL scheme and exact options
        from nlql.stores import entry

        row = entry("milvus")
        return row.create(f"milvus://{tempfile.mkdtemp(prefix='nlql-bench-')}/bench.db", **row.exact)
    if key.startswith("pgvector"):
        from nlql.stores.pgvector import PgVectorStore

        assert pg is not None
        return PgVectorStore(pg.uri, table_prefix=f"bench{n}", exact=key == "pgvector-exact")
    raise ValueError(f"unknown store {key!r}")


def build(key: str, n: int, emb: CorpusEmbedder, pg: Postgres | None) -> tuple[Engine, dict[str, Any]]:
    """An engine on ``key`` holding the first ``n`` documents, and its build timings."""
    texts, ids, metas = corpus(n)
    store = make_store(key, n, pg)
    engine = Engine(embedder=emb, store=store, warm_up=False)
    out: dict[str, Any] = {}
    shared = key.startswith("pgvector") and pg is not None and pg.loaded is not None and pg.loaded["n"] == n
    if shared:  # the other pgvector row loaded these tables: attach, count its ingest
        assert pg is not None and pg.loaded is not None
        out["ingest_s"] = pg.loaded["ingest_s"]
        out["ingest_shared"] = True
    else:
        t = time.perf_counter()
        engine.add_texts(texts, ids=ids, metadatas=metas, batch_size=BATCH)
        out["ingest_s"] = round(time.perf_counter() - t, 2)
        steady(engine)
        if key.startswith("pgvector") and pg is not None:
            pg.loaded = {"n": n, "ingest_s": out["ingest_s"]}
    out["index_s"] = None
    if key == "pgvector-hnsw":
        t = time.perf_counter()
        engine.store.build_index()
        out["index_s"] = round(time.perf_counter() - t, 2)
    out["build_s"] = round(out["ingest_s"] + (out["index_s"] or 0.0), 2)
    return engine, out


# ------------------------------------------------------------------------------------------- main


def run(keys: Sequence[str], n: int, sizes: dict[str, int], repeat: int, budget_s: float,
        out_path: Path, data: dict[str, Any]) -> dict[str, Any]:
    top = max(sizes[k] for k in keys)
    texts, _, metas = corpus(top)
    inner = HashEmbedder(dim=DIM)
    t = time.perf_counter()
    vectors = np.concatenate([inner.embed(texts[i:i + 8192]) for i in range(0, len(texts), 8192)])
    data["embed_s"] = round(time.perf_counter() - t, 2)
    emb = CorpusEmbedder(texts, vectors, inner)
    for sz in sorted({sizes[k] for k in keys}):
        data["cohort_share"][str(sz)] = round(sum(m["cohort"] == COHORT for m in metas[:sz]) / sz, 4)
    del texts, metas
    log(f"corpus: {top:,} sentences embedded in {data['embed_s']} s")

    references: dict[int, dict[str, dict[str, list[str]]]] = {}
    pg: Postgres | None = None
    try:
        for key in keys:
            size = sizes[key]
            label, settings = STORES[key]
            data["config"][key] = {"label": label, "n": size, "batch_size": BATCH, "settings": settings}
            if size not in references:
                log(f"reference: built-in store at {size:,}")
                ref_engine, _ = build("memory", size, emb, None)
                references[size] = answers(ref_engine, QUERY_TEXTS)
                ref_engine.close()
                del ref_engine
                gc.collect()
            ref = references[size]
            row: dict[str, Any] = {"n": size}
            try:
                if key.startswith("pgvector") and pg is None:
                    log("postgres: starting a throw-away server (pgserver)")
                    pg = Postgres()
                    data["postgres"] = dict(pg.versions, **PG_SETTINGS)
                log(f"{key}: build at {size:,}")
                engine, timings = build(key, size, emb, pg)
                row.update(timings)
                log(f"{key}: built in {row['build_s']} s "
                    f"(ingest {row['ingest_s']} s, index {row['index_s']})")
                for shape in SHAPES:
                    row[shape] = measure(engine, shape, QUERY_TEXTS, ref[shape], repeat, budget_s)
                    log(f"{key}: {shape} {row[shape]['ms']} ms, recall {row[shape]['recall']}, "
                        f"rows {row[shape]['rows']}, path {row[shape]['path']}")
                row["topk_guarantee"] = all(row[s]["full"] for s in SHAPES)
                engine.close()
                del engine
            except Exception as exc:  # noqa: BLE001 - one store failing must not lose the others
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                log(f"{key}: FAILED {row['error']}")
            gc.collect()
            data["results"][key] = row
            data["embed_lookup_misses"] = emb.misses
            write_json(out_path, data)  # after every store: a long run that dies keeps what it measured
    finally:
        if pg is not None:
            pg.stop()
    return data


def table(data: dict[str, Any]) -> str:
    head = (f"{'store':<16}{'n':>8}{'build s':>9}{'index s':>9}  "
            + "".join(f"{s[:13]:>14} {'rec':>5} {'rows':>4}" for s in SHAPES) + "  paths")
    lines = [head, "-" * len(head)]
    for key, r in data["results"].items():
        if "error" in r:
            lines.append(f"{key:<16}{r['n']:>8}  FAILED: {r['error']}")
            continue
        idx = "—" if r["index_s"] is None else f"{r['index_s']:.1f}"
        cells = "".join(f"{r[s]['ms']:>11.2f} ms {r[s]['recall']:>5.2f} {r[s]['rows']:>4}" for s in SHAPES)
        paths = " | ".join(r[s]["path"] for s in SHAPES)
        lines.append(f"{key:<16}{r['n']:>8}{r['build_s']:>9.1f}{idx:>9}  {cells}  {paths}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="sentences (one per document)")
    ap.add_argument("--stores", nargs="+", choices=list(STORES), default=None,
                    help="stores to run (default: all; --quick leaves out " + ", ".join(SLOW) + ")")
    ap.add_argument("--store-n", nargs="*", default=[], metavar="STORE=N",
                    help="per-store size, e.g. chroma=50000 (default: --n for every store" +
                         "".join(f", {k}={v}" for k, v in SMALLER_N.items()) + ")")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per query text (median over all)")
    ap.add_argument("--budget", type=float, default=15.0,
                    help="seconds of timed runs per store and query shape, at most (fewer runs for "
                         "slow stores)")
    ap.add_argument("--quick", action="store_true", help="20k sentences, without " + ", ".join(SLOW))
    ap.add_argument("--out", type=Path, default=RESULTS / "stores.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    n = 20_000 if args.quick else args.n
    keys = args.stores or [k for k in STORES if not (args.quick and k in SLOW)]
    sizes = {k: min(n, SMALLER_N.get(k, n)) for k in keys}
    for item in args.store_n:
        k, _, v = item.partition("=")
        if k not in STORES or not v.isdigit():
            ap.error(f"--store-n takes STORE=N with STORE one of {', '.join(STORES)}, not {item!r}")
        if k in sizes:
            sizes[k] = int(v)
    data: dict[str, Any] = {
        "title": "Stores: build, latency, recall@10 (issue 4)",
        "description": DESCRIPTION,
        "benchmark": "stores",
        "profile": "quick" if args.quick else "default",
        "sentences": n,
        "dim": DIM,
        "seed": SEED,
        "k": K,
        "repeat": args.repeat,
        "budget_s_per_shape": args.budget,
        "query_texts": "; ".join(QUERY_TEXTS),
        "queries": {s: q.format(text="…") for s, q in SHAPES.items()},
        "cohort_share": {},
        "machine": machine_info(),
        "results": {},
        "config": {},
        "complete": False,
    }
    run(keys, n, sizes, args.repeat, args.budget, args.out, data)
    data["complete"] = True
    stamp_end(data, started)
    write_json(args.out, data)
    print(table(data))
    print(f"wrote {args.out} ({data['wall_s']} s)")
    return data


if __name__ == "__main__":
    main()
