"""NLQL on the real engines beside each engine's own search call (the floor), at --size sentences.

- Qdrant Edge (in process): NLQL top-10 and filtered top-10 against ``EdgeShard.query`` with the same
  vector, filter and exactness.
- Milvus (Milvus Lite 2.5 file, the C++ engine): NLQL filtered top-10 against ``MilvusClient.search``
  with the same expression; BM25 and RRF latencies, RRF beside the dense top-101 search its SIMILARITY
  arm makes (timed round-robin).
- Deadlines: ``search(timeout=0.2)`` of a slow query on DuckDB and Milvus, wall time until it returns.

Prints the figures and writes ``bench/results/engines.json`` (load average included: a shared machine).

    python -m bench.engines --size 100000   (as a module: bench/duckdb.py would shadow the driver)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.common import (  # noqa: E402
    RESULTS,
    QueryMemo,
    interleaved_runs,
    log,
    machine_info,
    median_ms,
    stamp_end,
    write_json,
)
from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402

WORDS = ("solar energy policy agents memory retrieval graphs planning search vectors language games music "
         "river mountain cats dogs tools zebra stripes").split()
DIM = 384
QV = "agents memory retrieval"


def corpus(n: int) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """``n`` one-sentence documents of 8 words drawn Zipf-like (s = 1.1) from a 20,000-word vocabulary
    whose most frequent words are ``WORDS`` (as in text, a query term is in a small share of rows)."""
    rng = np.random.default_rng(7)
    vocab = list(WORDS) + [f"w{i}" for i in range(20_000 - len(WORDS))]
    weights = 1.0 / np.arange(1, len(vocab) + 1) ** 1.1
    weights /= weights.sum()
    draws = rng.choice(len(vocab), size=(n, 8), p=weights)
    texts, ids, metas = [], [], []
    for i in range(n):
        texts.append(" ".join(vocab[j] for j in draws[i]) + f" item{i % 997}.")
        ids.append(f"d{i}")
        metas.append({"tag": f"t{i % 10}", "rare": i % 1000 == 0, "n": i})
    return texts, ids, metas


def load(store: Any, n: int) -> tuple[Engine, float]:
    # query texts are embedded once and remembered: the timings are the engine's and the store's
    e = Engine(embedder=QueryMemo(HashEmbedder(dim=DIM)), store=store, warm_up=False)
    texts, ids, metas = corpus(n)
    t0 = time.perf_counter()
    e.add_texts(texts, ids=ids, metadatas=metas, batch_size=2048)
    return e, time.perf_counter() - t0


def q(filt: str = "", limit: int = 10) -> str:
    where = f" WHERE {filt}" if filt else ""
    return f'SELECT SENTENCE LET s = SIMILARITY(content, "{QV}"){where} ORDER BY s DESC LIMIT {limit}'


def run(e: Engine, query: str) -> Any:
    return e.search(query)


BM25 = 'SELECT SENTENCE LET k = BM25(content, "zebra w400 w3000") WHERE k > 0 ORDER BY k DESC LIMIT 10'
RRF = ('SELECT SENTENCE LET s = SIMILARITY(content, "zebra w400 w3000"), k = BM25(content, "zebra w400 w3000"), '
       'f = RRF(s, k) ORDER BY f DESC LIMIT 10')


def qdrant(n: int, repeat: int) -> dict[str, Any]:
    import qdrant_edge as qe

    e, ingest = load("qdrant", n)
    store = e.store
    shard = store.client._shard(store.collection)
    vec = [float(x) for x in HashEmbedder(dim=DIM).embed([QV])[0]]
    exact = qe.SearchParams(exact=True)
    flt = qe.Filter(must=[qe.FieldCondition(key="_s.tag._", match=qe.MatchValue("t3"))])

    def raw(f: Any = None) -> Any:
        return shard.query(qe.QueryRequest(limit=11, query=qe.Query.Nearest(vec), filter=f, params=exact,
                                           with_payload=["seq", "position"]))

    out = {
        "ingest_s": round(ingest, 2),
        "top10_ms": median_ms(lambda: run(e, q()), repeat, 2),
        "top10_floor_ms": median_ms(lambda: raw(), repeat, 2),
        "filtered_top10_ms": median_ms(lambda: run(e, q('meta.tag == "t3"')), repeat, 2),
        "filtered_top10_floor_ms": median_ms(lambda: raw(flt), repeat, 2),
        "bm25_ms": median_ms(lambda: run(e, BM25), max(3, repeat // 3), 1),
        "rrf_ms": median_ms(lambda: run(e, RRF), max(3, repeat // 3), 1),
    }
    e.close()
    return out


def milvus(n: int, repeat: int, tmp: Path) -> dict[str, Any]:
    e, ingest = load(f"milvus://{tmp / 'bench.db'}", n)
    store = e.store
    client = store.client._client
    vec = HashEmbedder(dim=DIM).embed([QV])[0].tolist()
    expr = 'v["s"]["tag"]["_"] == "t3"'  # what NLQL pushes for meta.tag == "t3" (explain shows it)

    def raw() -> Any:
        return client.search(store.collection, data=[vec], limit=11, filter=expr, anns_field="vec",
                             output_fields=["seq", "position"], search_params={"metric_type": "COSINE"})

    # the dense search an RRF's SIMILARITY arm makes (its window, 100 rows, + 1), no output fields
    rrf_vec = HashEmbedder(dim=DIM).embed(["zebra w400 w3000"])[0].tolist()

    def dense101() -> Any:
        return client.search(store.collection, data=[rrf_vec], limit=101, anns_field="vec", output_fields=[],
                             search_params={"metric_type": "COSINE"})

    # round-robin, so that a burst of load from another process lands on every case alike
    runs = interleaved_runs({
        "filtered_top10_ms": lambda: run(e, q('meta.tag == "t3"')),
        "filtered_top10_floor_ms": raw,
        "top10_ms": lambda: run(e, q()),
        "bm25_ms": lambda: run(e, BM25),
        "rrf_ms": lambda: run(e, RRF),
        "rrf_dense_floor_ms": dense101,
    }, repeat, 2)
    out: dict[str, Any] = {"ingest_s": round(ingest, 2)}
    out.update({name: statistics.median(v) for name, v in runs.items()})
    out["rrf_over_dense_floor"] = round(out["rrf_ms"] / out["rrf_dense_floor_ms"], 2)
    t0 = time.perf_counter()
    try:
        e.search('SELECT SENTENCE WHERE content CONTAINS "zzz" LIMIT 10', timeout=0.2)
        out["timeout_0_2_outcome"] = "returned"
    except Exception as exc:  # noqa: BLE001
        out["timeout_0_2_outcome"] = type(exc).__name__
    out["timeout_0_2_wall_s"] = round(time.perf_counter() - t0, 3)
    e.close()
    return out


def duckdb_deadline() -> dict[str, Any]:
    from nlql import deadline
    from nlql.stores import entry

    store = entry("duckdb").create()
    store.open(4)
    heavy = "SELECT count(*) FROM range(100000000000) a WHERE a.range % 7 = 3"
    t0 = time.perf_counter()
    outcome = "returned"
    try:
        with deadline.active(deadline.Deadline(0.2)):
            store._guard(lambda: store._conn.execute(heavy).fetchall())
    except Exception as exc:  # noqa: BLE001
        outcome = type(exc).__name__
    wall = time.perf_counter() - t0
    store.close()
    return {"timeout_0_2_wall_s": round(wall, 3), "timeout_0_2_outcome": outcome,
            "statement": "a 1e11-row count the deadline interrupts"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--only", choices=["qdrant", "milvus", "duckdb"], default=None)
    args = ap.parse_args()
    started = time.perf_counter()  # (stamp_end takes a perf_counter start)
    results: dict[str, Any] = {"size": args.size, "dim": DIM, "machine": machine_info(),
                               "loadavg_start": os.getloadavg()}
    if args.only in (None, "duckdb"):
        results["duckdb"] = duckdb_deadline()
        log(f"duckdb {results['duckdb']}")
    if args.only in (None, "qdrant"):
        results["qdrant_edge"] = qdrant(args.size, args.repeat)
        log(f"qdrant edge {results['qdrant_edge']}")
    if args.only in (None, "milvus"):
        with tempfile.TemporaryDirectory() as tmp:
            results["milvus_lite"] = milvus(args.size, args.repeat, Path(tmp))
        log(f"milvus lite {results['milvus_lite']}")
    results["loadavg_end"] = os.getloadavg()
    stamp_end(results, started)
    name = "engines" + ("" if args.size == 100_000 else f"_{args.size}") + (f"_{args.only}" if args.only else "")
    write_json(RESULTS / f"{name}.json", results)


if __name__ == "__main__":
    main()
