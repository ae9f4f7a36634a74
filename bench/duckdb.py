#!/usr/bin/env python3
"""DuckDB against the built-in store and PostgreSQL: build, canonical, 1% filter, BM25 and RRF (issue 15).

The corpus, vectors and ``cohort`` field of ``bench/stores.py`` (one-sentence documents, seed 42,
HashEmbedder(dim=384) vectors computed once and looked up by every engine; query embedding memoised).
Stores:

- ``memory`` — the built-in store (numpy, exact; BM25 from the engine's in-process index);
- ``duckdb`` — ``DuckDBStore()`` in memory: its own tables, exact scans, hybrid plans as one statement;
- ``duckdb-parquet`` — the same rows written to a Parquet file and read in place
  (``DuckDBStore.from_table``): ``build_s`` is writing the file plus opening it (the one scan that
  derives the typed metadata and term statistics);
- ``pgvector`` — ``PgVectorStore(exact=True)`` on a throw-away PostgreSQL 16 + pgvector 0.6.2
  (pgserver), exact scans, hybrid plans as one statement.

Shapes (``{text}`` one of 8 query texts): ``canonical`` (threshold + ``status == "published"``),
``filtered_1pct`` (``cohort == 7``), ``bm25`` (one BM25 ranking, LIMIT 10) and ``rrf`` (SIMILARITY +
BM25 fused with RRF, LIMIT 10). ``ms``: median ``engine.search`` over texts × runs (warm);
``recall``: overlap@10 with the built-in store's answer (1.0 = the same rows).

    python bench/duckdb.py                  # 100k sentences
    python bench/duckdb.py --quick          # 20k
    python bench/duckdb.py --stores memory duckdb --n 50000
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# run as a script, this file's folder is sys.path[0], where "duckdb" would be this very file: drop it
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, log, machine_info, stamp_end, write_json  # noqa: E402
from bench.stores import COHORT, DIM, QUERY_TEXTS, CorpusEmbedder, Postgres, corpus  # noqa: E402
from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402

BATCH = 2048
DESCRIPTION = (
    "bench/stores.py's corpus (one-sentence documents, seed 42, `cohort` 0–99), HashEmbedder(dim=384) "
    "vectors computed once and looked up by every engine, query embedding memoised. Stores: `memory` "
    "(built-in, exact; BM25 and fusion in the engine), `duckdb` (DuckDBStore() in memory: own tables, "
    "exact scans, hybrid plans as one statement), `duckdb-parquet` (the same rows in a Parquet file read "
    "in place by DuckDBStore.from_table; `build_s` = writing the file + opening it), `pgvector` "
    "(PgVectorStore(exact=True), PostgreSQL 16 + pgvector 0.6.2 from pgserver). `ms`: median "
    "engine.search over 8 query texts × runs (warm); `recall`: overlap@10 with the built-in store's "
    "answer (1.00 = the same rows). The machine is shared: see the load averages in `machine`."
)

SHAPES: dict[str, str] = {
    "canonical": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{text}") '
                  'WHERE rel >= 0.2 AND meta.status == "published" ORDER BY rel DESC LIMIT 10'),
    "filtered_1pct": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{text}") '
                      f'WHERE meta.cohort == {COHORT} ORDER BY rel DESC LIMIT 10'),
    "bm25": 'SELECT SENTENCE LET kw = BM25(content, "{text}") ORDER BY kw DESC LIMIT 10',
    "rrf": ('SELECT SENTENCE LET sem = SIMILARITY(content, "{text}"), kw = BM25(content, "{text}"), '
            "f = RRF(sem, kw) ORDER BY f DESC LIMIT 10"),
}

STORES: dict[str, str] = {
    "memory": "MemoryStore: float32 matrix, exact top-k; BM25 and fusion in the engine",
    "duckdb": "DuckDBStore(): in memory, own tables, exact scans (array_inner_product), hybrid as one statement",
    "duckdb-parquet": "DuckDBStore.from_table(None, file.parquet, …): read in place, cosine computed "
                      "(array_cosine_distance), derived statistics in the connection's temp schema",
    "pgvector": "PgVectorStore(exact=True): sequential scan, hybrid as one statement",
}


def _path(hits: Any) -> str:
    st = hits.stats.get("store") or {}
    return str(st.get("path") or "exact")


def measure(engine: Engine, template: str, reference: dict[str, list[str]] | None, repeat: int,
            budget_s: float) -> dict[str, Any]:
    samples: list[float] = []
    overlap: list[float] = []
    paths: Counter[str] = Counter()
    rows: list[int] = []
    per_text = budget_s / len(QUERY_TEXTS)
    for text in QUERY_TEXTS:
        q = template.format(text=text)
        t = time.perf_counter()
        hits = engine.search(q)
        first = time.perf_counter() - t
        ids = [h.id for h in hits]
        rows.append(len(ids))
        paths[_path(hits)] += 1
        if reference is not None:
            want = reference[text]
            overlap.append(len(set(ids) & set(want)) / len(want) if want else 1.0)
        for _ in range(max(1, min(repeat, int(per_text / max(first, 1e-4))))):
            t = time.perf_counter()
            engine.search(q)
            samples.append((time.perf_counter() - t) * 1000)
    return {"ms": round(statistics.median(samples), 3), "p90_ms": round(float(np.percentile(samples, 90)), 3),
            "recall": round(statistics.fmean(overlap), 4) if overlap else None, "rows": min(rows),
            "path": ", ".join(p for p, _ in paths.most_common()), "runs": len(samples)}


def write_parquet(path: Path, n: int, emb: CorpusEmbedder) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts, ids, metas = corpus(n)
    vecs = emb.embed(texts)
    cols: dict[str, Any] = {"id": ids, "text": texts,
                            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), DIM)}
    for key in ("status", "year", "topic", "cohort"):
        cols[key] = [m[key] for m in metas]
    pq.write_table(pa.table(cols), path)


def build(key: str, n: int, emb: CorpusEmbedder, pg: Postgres | None, tmp: Path) -> tuple[Engine, dict[str, Any]]:
    texts, ids, metas = corpus(n)
    out: dict[str, Any] = {}
    t = time.perf_counter()
    if key == "duckdb-parquet":
        from nlql.stores.duckdb import DuckDBStore

        path = tmp / f"corpus{n}.parquet"
        write_parquet(path, n, emb)
        out["write_parquet_s"] = round(time.perf_counter() - t, 2)
        store = DuckDBStore.from_table(None, str(path), text="text", vector="embedding", id="id",
                                       metadata=["status", "year", "topic", "cohort"])
        engine = Engine(embedder=emb, store=store, warm_up=False)
        out["build_s"] = round(time.perf_counter() - t, 2)
        out["open_s"] = round(out["build_s"] - out["write_parquet_s"], 2)
        return engine, out
    if key == "memory":
        store: Any = "memory"
    elif key == "duckdb":
        from nlql.stores.duckdb import DuckDBStore

        store = DuckDBStore()
    else:
        from nlql.stores.pgvector import PgVectorStore

        assert pg is not None
        store = PgVectorStore(pg.uri, table_prefix=f"duck{n}", exact=True)
    engine = Engine(embedder=emb, store=store, warm_up=False)
    engine.add_texts(texts, ids=ids, metadatas=metas, batch_size=BATCH)
    out["build_s"] = round(time.perf_counter() - t, 2)
    return engine, out


def table(data: dict[str, Any]) -> str:
    head = f"{'store':<16}{'n':>8}{'build s':>9}  " + "".join(f"{s[:13]:>14} {'same':>5}" for s in SHAPES)
    lines = [head, "-" * len(head)]
    for key, r in data["results"].items():
        if "error" in r:
            lines.append(f"{key:<16}{r['n']:>8}  FAILED: {r['error']}")
            continue
        cells = "".join(f"{r[s]['ms']:>11.2f} ms {r[s]['recall']:>5.2f}" for s in SHAPES)
        lines.append(f"{key:<16}{r['n']:>8}{r['build_s']:>9.1f}  {cells}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--stores", nargs="+", choices=list(STORES), default=list(STORES))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--budget", type=float, default=10.0, help="seconds of timed runs per store and shape, at most")
    ap.add_argument("--quick", action="store_true", help="20k sentences")
    ap.add_argument("--out", type=Path, default=RESULTS / "duckdb.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    n = 20_000 if args.quick else args.n
    data: dict[str, Any] = {
        "title": "DuckDB vs the built-in store and PostgreSQL (issue 15)",
        "description": DESCRIPTION,
        "benchmark": "duckdb", "profile": "quick" if args.quick else "default", "sentences": n, "dim": DIM,
        "repeat": args.repeat, "queries": {s: q.format(text="…") for s, q in SHAPES.items()},
        "query_texts": "; ".join(QUERY_TEXTS), "config": {k: STORES[k] for k in args.stores},
        "machine": machine_info(), "results": {}, "complete": False,
    }
    texts, _, _ = corpus(n)
    inner = HashEmbedder(dim=DIM)
    vectors = np.concatenate([inner.embed(texts[i:i + 8192]) for i in range(0, len(texts), 8192)])
    emb = CorpusEmbedder(texts, vectors, inner)
    del texts
    try:
        import duckdb

        data["duckdb"] = duckdb.__version__
    except ImportError:
        pass
    reference: dict[str, dict[str, list[str]]] | None = None
    pg: Postgres | None = None
    with tempfile.TemporaryDirectory(prefix="nlql-bench-duckdb-") as tmp:
        try:
            for key in (["memory"] if "memory" not in args.stores else []) + list(args.stores):
                row: dict[str, Any] = {"n": n}
                try:
                    if key == "pgvector" and pg is None:
                        log("postgres: starting a throw-away server (pgserver)")
                        pg = Postgres()
                        data["postgres"] = pg.versions
                    log(f"{key}: build at {n:,}")
                    engine, timings = build(key, n, emb, pg, Path(tmp))
                    row.update(timings)
                    log(f"{key}: built in {row['build_s']} s")
                    if key == "memory":
                        reference = {s: {t: [h.id for h in engine.search(q.format(text=t))] for t in QUERY_TEXTS}
                                     for s, q in SHAPES.items()}
                    for shape, template in SHAPES.items():
                        row[shape] = measure(engine, template, reference[shape] if reference else None,
                                             args.repeat, args.budget)
                        log(f"{key}: {shape} {row[shape]['ms']} ms, same rows {row[shape]['recall']}, "
                            f"path {row[shape]['path']}")
                    engine.close()
                    del engine
                except Exception as exc:  # noqa: BLE001 - one store failing must not lose the others
                    row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                    log(f"{key}: FAILED {row['error']}")
                gc.collect()
                if key in args.stores:
                    data["results"][key] = row
                write_json(args.out, data)
        finally:
            if pg is not None:
                pg.stop()
    data["complete"] = True
    stamp_end(data, started)
    write_json(args.out, data)
    print(table(data))
    print(f"wrote {args.out} ({data['wall_s']} s)")
    return data


if __name__ == "__main__":
    main()
