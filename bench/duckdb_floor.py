#!/usr/bin/env python3
"""NLQL on DuckDB against DuckDB's own best hand-written statement, per query kind, in one run (issue 35).

Corpus: ``bench/pg_speed.py``'s (one-sentence texts, ``status`` "published" on 50%, ``tag`` t0-t999 so
one tag is 0.1%, clustered unit vectors of dim 384 precomputed and looked up: nobody pays for embedding).

- ``NLQL``: ``Engine(store=DuckDBStore()).search(q)`` (in memory) of ``bench/side_by_side.py``'s
  five shapes: ``top10``, ``canonical`` (``rel >= 0.2 AND status == "published"``), ``tag``
  (``tag == "t7"``, 0.1%), ``bm25`` (BM25 top-10), ``rrf`` (``RRF(SIMILARITY, BM25)``, windows of 100).
- ``raw``: the same rows in plain DuckDB tables of the same connection type, loaded from Arrow:
  ``raw(id BIGINT, status, tag, len, embedding FLOAT[384])`` and ``raw_terms(term, id, tf)`` (NLQL's
  analyzer's terms, so BM25 scores are the same); the statements an engineer would write by hand:
  ``array_inner_product(embedding, q) … ORDER BY … DESC LIMIT 10``, filters as plain ``WHERE`` on the
  columns, BM25 as one join of the query terms with the postings (idf from their counts, N and the mean
  length bound), RRF as one statement over the two top-100 lists.

Every (system, kind) pair is timed round-robin in one ``interleaved_runs`` call (cycling through the
ten query texts; medians after two warm-up rounds). ``same_top10``: NLQL's ids equal the raw
statement's ids in order on every query text. Wall and process CPU time are both recorded (on a
shared machine the wall time also holds the waits for a core). With ``--ingest``: ``Engine.add_texts`` against one Arrow
insert of the same rows (``bench/duckdb_ingest.py``'s functions), alternating, ``--ingest-rounds`` each; NLQL's time
is also split into the engine's text work, the store's Python preparation of the rows and the store's DuckDB
statements (``write_ratio``: those statements against the one raw insert; ``write_over_prepared``: against
DuckDB's own insert of the very rows the store writes, as the store prepared them, one Arrow insert per table).

    python bench/duckdb_floor.py --n 100000 --repeat 10 --ingest
    python bench/duckdb_floor.py --n 20000 --repeat 5 --out /tmp/f.json

Writes bench/results/duckdb_floor.json.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# run as a script, this file's folder is sys.path[0], where "duckdb" would be bench/duckdb.py: drop it
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, interleaved_cpu_runs, log, machine_info, stamp_end, write_json  # noqa: E402
from bench.pg_speed import DIM, QUERY_TEXTS, Lookup, corpus  # noqa: E402
from nlql import Engine  # noqa: E402

K, WINDOW, RRF_K, K1, B = 10, 100, 60, 1.2, 0.75
TAG = "t7"
KINDS = ("top10", "canonical", "tag", "bm25", "rrf")
NLQL_SHAPES = {
    "top10": 'SELECT SENTENCE LET rel = SIMILARITY(content, "{text}") ORDER BY rel DESC LIMIT 10',
    "canonical": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{text}") '
                  'WHERE rel >= 0.2 AND meta.status == "published" ORDER BY rel DESC LIMIT 10'),
    "tag": f'SELECT SENTENCE LET rel = SIMILARITY(content, "{{text}}") WHERE meta.tag == "{TAG}" '
           "ORDER BY rel DESC LIMIT 10",
    "bm25": 'SELECT SENTENCE LET kw = BM25(content, "{text}") ORDER BY kw DESC LIMIT 10',
    "rrf": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{text}"), kw = BM25(content, "{text}"), '
            "f = RRF(rel, kw) ORDER BY f DESC LIMIT 10"),
}

Search = Callable[[int], list[int]]


def raw_rows(texts: list[str], metas: list[dict[str, Any]], vecs: np.ndarray, qvecs: np.ndarray,
             analyzer: Any) -> tuple[dict[str, Search], Any]:
    """DuckDB's own statements over plain tables of the same rows (see the module doc)."""
    import duckdb
    import pyarrow as pa

    n = len(texts)
    conn = duckdb.connect()
    terms = [analyzer.terms(t) for t in texts]
    lens = np.fromiter((len(t) for t in terms), dtype=np.int32, count=n)
    pid: list[int] = []
    pterm: list[str] = []
    ptf: list[int] = []
    for i, ts in enumerate(terms):
        counts: dict[str, int] = {}
        for w in ts:
            counts[w] = counts.get(w, 0) + 1
        pid.extend([i] * len(counts))
        pterm.extend(counts)
        ptf.extend(counts.values())
    conn.register("src", pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)), "status": pa.array([m["status"] for m in metas]),
        "tag": pa.array([m["tag"] for m in metas]), "len": pa.array(lens),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), DIM)}))
    conn.execute(f"CREATE TABLE raw (id BIGINT, status VARCHAR, tag VARCHAR, len INTEGER, embedding FLOAT[{DIM}])")
    conn.execute("INSERT INTO raw SELECT * FROM src")
    conn.unregister("src")
    conn.register("src", pa.table({"term": pa.array(pterm), "id": pa.array(pid, type=pa.int64()),
                                   "tf": pa.array(ptf, type=pa.int32())}))
    conn.execute("CREATE TABLE raw_terms AS SELECT * FROM src ORDER BY term")
    conn.unregister("src")
    avgdl = float(lens.mean())
    score = f"array_inner_product(embedding, $1::FLOAT[{DIM}])"
    # BM25 over the postings: idf from the matching postings' count, N and avgdl bound
    def bm25_sql(first: int) -> str:  # the query terms, N and avgdl are $first, $first+1, $first+2
        terms, count, mean = (f"${first + j}" for j in range(3))
        return (f"SELECT t.id, sum(ln(1 + ({count} - d.df + 0.5) / (d.df + 0.5)) * t.tf * (1 + {K1}) / "
                f"(t.tf + {K1} * (1 - {B} + {B} * r.len / {mean}))) AS s FROM raw_terms t JOIN (SELECT term, "
                f"count(*) AS df FROM raw_terms WHERE term IN (SELECT unnest({terms}::VARCHAR[])) GROUP BY term) d "
                "ON t.term = d.term JOIN raw r ON r.id = t.id GROUP BY t.id")

    sql = {
        "top10": f"SELECT id FROM raw ORDER BY {score} DESC, id LIMIT {K}",
        "canonical": f"SELECT id FROM raw WHERE status = 'published' AND {score} >= 0.2 ORDER BY {score} DESC, id "
                     f"LIMIT {K}",
        "tag": f"SELECT id FROM raw WHERE tag = '{TAG}' ORDER BY {score} DESC, id LIMIT {K}",
        "bm25": f"SELECT id FROM ({bm25_sql(1)}) ORDER BY s DESC, id LIMIT {K}",
        "rrf": (f"WITH sem AS (SELECT id, row_number() OVER (ORDER BY s DESC, id) AS r FROM "
                f"(SELECT id, {score} AS s FROM raw ORDER BY s DESC, id LIMIT {WINDOW})), "
                f"kw AS (SELECT id, row_number() OVER (ORDER BY s DESC, id) AS r FROM "
                f"(SELECT id, s FROM ({bm25_sql(2)}) ORDER BY s DESC, id LIMIT {WINDOW})) "
                f"SELECT id FROM (SELECT id, sum(1.0 / ({RRF_K} + r)) AS f, min(r) AS best FROM "
                f"(SELECT * FROM sem UNION ALL SELECT * FROM kw) GROUP BY id) ORDER BY f DESC, id LIMIT {K}"),
    }
    qv = [v.tolist() for v in qvecs]
    qterms = [list(dict.fromkeys(analyzer.terms(t))) for t in QUERY_TEXTS]

    def make(kind: str) -> Search:
        text = sql[kind]

        def search(i: int) -> list[int]:
            params: list[Any] = {"bm25": [qterms[i], float(n), avgdl],
                                 "rrf": [qv[i], qterms[i], float(n), avgdl]}.get(kind, [qv[i]])
            return [int(r[0]) for r in conn.execute(text, params).fetchall()]

        return search

    return {kind: make(kind) for kind in KINDS}, conn


def nlql_rows(engine: Any) -> dict[str, Search]:
    out: dict[str, Search] = {}
    for kind in KINDS:
        queries = [NLQL_SHAPES[kind].format(text=t) for t in QUERY_TEXTS]

        def search(i: int, qs: list[str] = queries) -> list[int]:
            return [int(h.doc_id) for h in engine.search(qs[i])]

        out[kind] = search
    return out


def nlql_phases(data: dict[str, Any], prepared: list[tuple[Any, ...]]) -> tuple[float, dict[str, float]]:
    """``bench/duckdb_ingest.py``'s NLQL ingest, with the seconds spent in the store's Python preparation
    of the rows (``DuckDBStore._prepare``: typed metadata, BM25 terms, Arrow columns) and in its DuckDB
    statements (``_write``: the bulk inserts of every table, the keys, the term counts; ``_finish``: the sorting);
    the Arrow tables each write was given are appended to ``prepared`` (for :func:`prepared_floor`)."""
    from bench.duckdb_ingest import nlql_duckdb
    from nlql.stores.duckdb import DuckDBStore

    spent = {"prepare": 0.0, "write": 0.0}
    # (_finish: the statements after a call's last batch, the sorting of the clustered tables)
    saved = {name: DuckDBStore.__dict__[f"_{name}"] for name in ("prepare", "write", "finish")}

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        phase = "prepare" if name == "prepare" else "write"

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if name == "write":  # (ids, docs, units, terms, n, length, entities, flat, members)
                prepared.append((args[1], args[2], args[6], args[7], args[3]))
            t = time.perf_counter()
            try:
                return fn(self, *args, **kwargs)
            finally:
                spent[phase] += time.perf_counter() - t
        return run

    for name, fn in saved.items():
        setattr(DuckDBStore, f"_{name}", timed(name, fn))
    try:
        dt = nlql_duckdb(data)
    finally:
        for name, fn in saved.items():
            setattr(DuckDBStore, f"_{name}", fn)
    return dt, spent


def prepared_floor(prepared: list[tuple[Any, ...]]) -> float:
    """DuckDB's own insert of the rows NLQL's store writes, as NLQL prepared them: one Arrow insert per
    table of all the batches (documents, sentences with their vectors and keys, the BM25 postings as the
    store counted them, typed metadata rows, entity link rows) into plain tables, in one transaction;
    no keys from a sequence, no sorting, no statistics. Seconds."""
    import duckdb
    import pyarrow as pa
    import pyarrow.compute as pc

    docs = pa.concat_tables([p[0] for p in prepared])
    units = pa.concat_tables([p[1] for p in prepared])
    keys = pa.array(np.arange(units.num_rows, dtype=np.int64))
    # the counted term rows of each batch, their sentences (row in the batch) made keys
    firsts = np.cumsum([0] + [p[1].num_rows for p in prepared])
    postings = pa.concat_tables([pa.table({"term": p[4].column("term"), "key": pc.add(p[4].column("unit"), int(first)),
                                           "tf": p[4].column("tf")}) for p, first in zip(prepared, firsts[:-1], strict=True)])
    units = units.drop_columns(["doc_row"]).append_column("key", keys)
    flat = pa.concat_tables([p[3] for p in prepared]).drop_columns(["doc_row"])
    # the link rows, (doc_id, position, entity, name): an Arrow table per batch (a list of tuples in older trees)
    link_schema = pa.schema([("doc_id", pa.string()), ("position", pa.int32()), ("entity", pa.string()),
                             ("name", pa.string())])
    parts = [p[2] if isinstance(p[2], pa.Table) else
             pa.table({c: [r[i] for r in p[2]] for i, c in enumerate(link_schema.names)}, schema=link_schema)
             for p in prepared if p[2] is not None and len(p[2])]
    ents = pa.concat_tables(parts) if parts else link_schema.empty_table()
    conn = duckdb.connect()
    sources = {"docs": docs, "units": units, "postings": postings, "flat": flat, "ents": ents}
    for name, table in sources.items():
        conn.register(f"src_{name}", table)
        if name != "postings":
            conn.execute(f"CREATE TABLE {name} AS SELECT * FROM src_{name} LIMIT 0")
    conn.execute("CREATE TABLE terms (term VARCHAR, key BIGINT, tf INTEGER)")
    t = time.perf_counter()
    conn.execute("BEGIN")
    for name in ("docs", "units", "flat", "ents"):
        conn.execute(f"INSERT INTO {name} SELECT * FROM src_{name}")
    conn.execute("INSERT INTO terms SELECT term, key, tf FROM src_postings")
    conn.execute("COMMIT")
    dt = time.perf_counter() - t
    conn.close()
    return dt


def ingest(data: dict[str, Any], rounds: int) -> dict[str, Any]:
    from bench.duckdb_ingest import raw_duckdb

    times: dict[str, list[float]] = {"raw": [], "nlql": [], "store_prepare": [], "store_write": [], "prepared": []}
    for r in range(rounds):
        for name in ("raw", "nlql", "prepared"):
            gc.collect()
            if name == "raw":
                dt = raw_duckdb(data)
            elif name == "nlql":
                batches: list[tuple[Any, ...]] = []
                dt, spent = nlql_phases(data, batches)
                times["store_prepare"].append(spent["prepare"])
                times["store_write"].append(spent["write"])
            else:
                dt = prepared_floor(batches)
                del batches
            times[name].append(dt)
            log(f"[duckdb_floor] ingest round {r} {name}: {dt:.2f} s (load {os.getloadavg()[0]:.1f})")
    ratios = [a / b for a, b in zip(times["nlql"], times["raw"], strict=True)]
    write_ratios = [a / b for a, b in zip(times["store_write"], times["raw"], strict=True)]
    prepared_ratios = [a / b for a, b in zip(times["store_write"], times["prepared"], strict=True)]
    med = {k: round(statistics.median(v), 2) for k, v in times.items()}
    return {"nlql_s": med["nlql"], "raw_s": med["raw"], "ratio": round(statistics.median(ratios), 2),
            # where NLQL's time goes: the engine's text work (splitting, entity names, the vector lookup),
            # the store's Python preparation of the rows, and its DuckDB statements
            "store_prepare_s": med["store_prepare"], "store_write_s": med["store_write"],
            "engine_s": round(med["nlql"] - med["store_prepare"] - med["store_write"], 2),
            "write_ratio": round(statistics.median(write_ratios), 2),
            # DuckDB's own insert of the very rows the store writes (prepared_floor): the store's statements over it
            "prepared_floor_s": med["prepared"], "write_over_prepared": round(statistics.median(prepared_ratios), 2),
            "runs_s": {k: [round(x, 2) for x in v] for k, v in times.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--ingest", action="store_true", help="also time ingest against one Arrow insert")
    ap.add_argument("--ingest-rounds", type=int, default=1)
    ap.add_argument("--out", type=Path, default=RESULTS / "duckdb_floor.json")
    args = ap.parse_args()
    started = time.perf_counter()
    load_before = os.getloadavg()
    from nlql.stores.duckdb import DuckDBStore
    from nlql.text.analyzer import Analyzer

    texts, ids, metas, vecs, qvecs = corpus(args.n)
    emb = Lookup(texts + QUERY_TEXTS, np.concatenate([vecs, qvecs]))
    data = {"texts": texts, "ids": ids, "metas": metas, "vecs": vecs, "emb": emb}
    out: dict[str, Any] = {"title": "NLQL on DuckDB against DuckDB's own statements (issue 35)",
                           "description": __doc__.split("\n\n")[1], "benchmark": "duckdb_floor", "n": args.n,
                           "repeat": args.repeat, "nlql_shapes": NLQL_SHAPES}
    eng = Engine(embedder=emb, store=DuckDBStore(), warm_up=False)
    t = time.perf_counter()
    eng.add_texts(texts, ids=ids, metadatas=metas, batch_size=8192)
    out["nlql_ingest_s"] = round(time.perf_counter() - t, 2)
    log(f"[duckdb_floor] NLQL ingest {out['nlql_ingest_s']} s")
    raw, conn = raw_rows(texts, metas, vecs, qvecs, Analyzer())
    nlql = nlql_rows(eng)
    same = {k: sum(nlql[k](i) == raw[k](i) for i in range(len(QUERY_TEXTS))) for k in KINDS}
    fns: dict[str, Callable[[], Any]] = {}
    for sys_name, rows in (("nlql", nlql), ("raw", raw)):
        for kind, fn in rows.items():
            state = {"i": 0}

            def one(fn: Search = fn, state: dict[str, int] = state) -> None:
                fn(state["i"] % len(QUERY_TEXTS))
                state["i"] += 1

            fns[f"{sys_name}|{kind}"] = one
    runs, cpu = interleaved_cpu_runs(fns, args.repeat * len(QUERY_TEXTS) // 2, warmup=2)
    kinds: dict[str, Any] = {}
    for kind in KINDS:
        a, b = statistics.median(runs[f"nlql|{kind}"]), statistics.median(runs[f"raw|{kind}"])
        ca, cb = statistics.median(cpu[f"nlql|{kind}"]), statistics.median(cpu[f"raw|{kind}"])
        kinds[kind] = {"nlql_ms": round(a, 2), "raw_ms": round(b, 2), "ratio": round(a / b, 2),
                       "nlql_cpu_ms": round(ca, 2), "raw_cpu_ms": round(cb, 2), "cpu_ratio": round(ca / cb, 2),
                       "same_top10": f"{same[kind]}/{len(QUERY_TEXTS)}"}
        print(f"{kind:10s} NLQL {a:9.2f} ms  raw {b:9.2f} ms  {a / b:5.2f}x   CPU {ca:9.2f} / {cb:9.2f} ms "
              f"{ca / cb:5.2f}x  same top-10 {same[kind]}/{len(QUERY_TEXTS)}")
    out["kinds"] = kinds
    out["load_queries"] = [round(x, 2) for x in (*load_before, *os.getloadavg())]
    if args.ingest:
        del eng, conn
        gc.collect()
        out["ingest"] = ingest(data, args.ingest_rounds)
        g = out["ingest"]
        print(f"ingest     NLQL {g['nlql_s']} s  raw Arrow insert {g['raw_s']} s  {g['ratio']}x   (engine text work "
              f"{g['engine_s']} s, store's Python preparation {g['store_prepare_s']} s, its DuckDB statements "
              f"{g['store_write_s']} s: {g['write_ratio']}x the raw insert, {g['write_over_prepared']}x DuckDB's own insert "
              f"of the same prepared rows, {g['prepared_floor_s']} s)")
    out["load_before"] = [round(x, 2) for x in load_before]
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    out["machine"] = machine_info()
    print(f"load {load_before[0]:.1f} -> {out['load_after'][0]:.1f}")
    stamp_end(out, started)
    write_json(args.out, out)


if __name__ == "__main__":
    main()
