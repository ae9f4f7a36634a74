#!/usr/bin/env python3
"""Engine overhead per query as the corpus grows, on a server store (Milvus Lite server or PostgreSQL, issue 16).

The store runs in its own processes: ``milvus-lite server`` (``--store milvus``, the engine connects by
``milvus+http://`` exactly as to a Milvus server or cluster) or PostgreSQL 16 + pgvector from the
``pgserver`` wheel (``--store postgres``, over its Unix socket, no HNSW index: exact scans). This
process is the engine. The corpus (bench/corpus.py, seed 42, one
sentence per document, plus ``cohort`` 0–99 for a 1% filter) is ingested in growing steps (10k, 100k,
1M by default) while a time budget lasts; at each size every query shape runs ``--repeat`` times per
query text and we record, per query (medians):

- ``wall_ms``: ``engine.search`` wall time;
- ``engine_cpu_ms``: CPU time of the engine process (``time.process_time``: user + system of every
  thread, including the gRPC client and decoding what the store returns);
- ``store_cpu_ms``: CPU time of the store's processes over the same query (psutil, 10 ms ticks; for
  PostgreSQL the postmaster and every backend);
- ``engine_rss_mb``: the resident memory of the engine that ran the queries, after them (and its peak,
  ``VmHWM``). That engine is a fresh **query worker** process per size (``--worker``), as a stateless
  API worker in front of the store would be; the ingest runs in the bench's own process, whose RSS is
  reported apart (``ingest_rss_mb``: it holds allocator high-water marks of the write batches, not
  corpus state).

Shapes: ``canonical`` (threshold + ``status == "published"``), ``filtered_1pct`` (``cohort == 7``),
``bm25`` (top 10 by BM25) and ``rrf`` (SIMILARITY + BM25 fused, top 10). Vectors come from
``HashEmbedder(dim=384)``. A size is skipped (and said so in the JSON) when the budget would be
exceeded by its ingest, estimated from the ingest rate measured so far.

    python bench/scale.py                          # Milvus Lite: 10k, 100k, 1M while the budget lasts
    python bench/scale.py --store postgres --budget 3000   # writes bench/results/scale_pg.json
    python bench/scale.py --sizes 10000 50000 --repeat 3
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, log, machine_info, stamp_end, write_json  # noqa: E402
from bench.corpus import iter_synthetic  # noqa: E402
from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402

TEXTS = ["renewable energy policy", "hospital patients therapy", "software agents database", "coffee market harvest"]
SHAPES = {
    "canonical": ('SELECT SENTENCE LET rel = SIMILARITY(content, "{t}") '
                  'WHERE rel >= 0.2 AND meta.status == "published" ORDER BY rel DESC LIMIT 10'),
    "filtered_1pct": 'SELECT SENTENCE LET rel = SIMILARITY(content, "{t}") WHERE meta.cohort == 7 '
                     "ORDER BY rel DESC LIMIT 10",
    "bm25": 'SELECT SENTENCE LET kw = BM25(content, "{t}") WHERE kw > 0 ORDER BY kw DESC LIMIT 10',
    "rrf": 'SELECT SENTENCE LET s = SIMILARITY(content, "{t}"), kw = BM25(content, "{t}"), f = RRF(s, kw) '
           "ORDER BY f DESC LIMIT 10",
}
BATCH = 2000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    exe = Path(sys.executable).with_name("milvus-lite")
    proc = subprocess.Popen([str(exe), "server", "--data-dir", str(data), "--host", "127.0.0.1", "--port",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"milvus+http://127.0.0.1:{port}?collection=scale"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("milvus-lite server did not start") from None
            time.sleep(0.2)


def corpus(n: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """The ``n`` sentences one at a time, so the bench itself holds no corpus (the engine's RSS is
    what is measured): bench/corpus.py's synthetic corpus plus ``cohort`` 0–99."""
    rng = random.Random(4242)
    for text, meta in iter_synthetic(n):
        meta["cohort"] = rng.randrange(100)
        yield text, meta


class StoreProcesses:
    """CPU and memory of the store's server processes (a process and all its children, re-listed at
    every reading because PostgreSQL starts a backend per connection)."""

    def __init__(self, root: psutil.Process) -> None:
        self.root = root

    def _procs(self) -> list[psutil.Process]:
        return [self.root, *self.root.children(recursive=True)]

    def cpu_s(self) -> float:
        """User + system CPU of the live processes, plus what the root's exited children used
        (PostgreSQL's parallel workers live for one query: the postmaster reaps them)."""
        t = self.root.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for p in self.root.children(recursive=True):
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def rss_mb(self) -> float:
        total = 0
        for p in self._procs():
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total / 2**20


def start_postgres() -> tuple[Any, str, psutil.Process]:
    """A throw-away PostgreSQL 16 + pgvector (bench/pg_speed.py's) and its postmaster process."""
    from bench.pg_speed import Postgres

    pg = Postgres()
    import psycopg

    with psycopg.connect(pg.uri, autocommit=True) as conn:
        data_dir = str(conn.execute("SHOW data_directory").fetchone()[0])
    pid = int(Path(data_dir, "postmaster.pid").read_text().split()[0])
    return pg, pg.uri, psutil.Process(pid)


def _peak_rss_kb() -> float:
    """This process's resident high-water mark: ``VmHWM`` (reset by exec, so a worker's own peak), else
    ``ru_maxrss`` (which on Linux a child inherits from the parent that forked it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1])
    except OSError:
        pass
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def measure(engine: Engine, server: StoreProcesses, repeat: int, texts: list[str]) -> dict[str, Any]:
    me = psutil.Process()
    out: dict[str, Any] = {}
    for shape, q in SHAPES.items():
        wall, cpu, scpu, rows = [], [], [], []
        for t in texts:
            query = q.format(t=t)
            engine.search(query)  # warm
            for _ in range(repeat):
                c0, s0 = time.process_time(), server.cpu_s()
                w0 = time.perf_counter()
                hits = engine.search(query)
                wall.append((time.perf_counter() - w0) * 1e3)
                c1, s1 = time.process_time(), server.cpu_s()
                cpu.append((c1 - c0) * 1e3)
                scpu.append((s1 - s0) * 1e3)
                rows.append(len(hits))
        out[shape] = {"wall_ms": round(statistics.median(wall), 1), "engine_cpu_ms": round(statistics.median(cpu), 2),
                      "store_cpu_ms": round(statistics.median(scpu), 1), "rows_min": min(rows)}
    out["engine_rss_mb"] = round(me.memory_info().rss / 2**20, 1)
    out["engine_peak_rss_mb"] = round(_peak_rss_kb() / 1024, 1)
    out["store_rss_mb"] = round(server.rss_mb(), 1)
    return out


def run_worker(kind: str, url: str, store_pid: int, repeat: int, texts: int) -> dict[str, Any]:
    """A query worker in a new process: a fresh engine on ``url``, every shape measured (see measure)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", url, "--store-pid", str(store_pid), "--store", kind,
           "--repeat", str(repeat), "--texts", str(texts)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=3600)
    return json.loads(done.stdout.strip().splitlines()[-1])


def open_store(kind: str, url: str) -> Any:
    """The store the engines use: the URL as given for Milvus; for PostgreSQL without an HNSW index
    (maintained row by row it takes ingest from ~2,400 to ~130 sentences/s past 200k here, and with it
    the store's plan would change with the corpus): every knn is an exact scan."""
    if kind == "postgres":
        from nlql.stores.pgvector import PgVectorStore

        return PgVectorStore(url, hnsw=False)
    return url


def worker_main(args: argparse.Namespace) -> None:
    engine = Engine(embedder=HashEmbedder(dim=384), store=open_store(args.store, args.worker), warm_up=False)
    row = measure(engine, StoreProcesses(psutil.Process(args.store_pid)), args.repeat, TEXTS[: args.texts])
    engine.close()
    print(json.dumps(row))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", metavar="URL", help=argparse.SUPPRESS)
    ap.add_argument("--store-pid", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--texts", type=int, default=len(TEXTS), help="how many query texts per shape")
    ap.add_argument("--budget", type=float, default=900.0, help="seconds of machine time for the whole run")
    ap.add_argument("--store", choices=("milvus", "postgres"), default="milvus")
    ap.add_argument("--out", type=Path, default=None, help="default: bench/results/scale.json (milvus), "
                    "scale_pg.json (postgres)")
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args)
        return {}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the store is stopped on a kill
    out_path = args.out or RESULTS / ("scale.json" if args.store == "milvus" else "scale_pg.json")
    started = time.perf_counter()
    results: dict[str, Any] = {
        "title": "Scale: engine beside a server store" + (" (PostgreSQL)" if args.store == "postgres" else " (Milvus Lite)"),
        "description": __doc__.split("\n\n")[1].replace("\n", " "),
        "store": ("milvus-lite server (separate process), MilvusStore(index='flat') over milvus+http://"
                  if args.store == "milvus" else
                  "PostgreSQL 16 + pgvector (pgserver, separate processes), PgVectorStore without an HNSW index"),
        "shapes": SHAPES, "texts": TEXTS, "repeat": args.repeat, "machine": machine_info(), "sizes": {},
        "skipped": [],
    }
    with tempfile.TemporaryDirectory(prefix="nlql-scale-") as tmp:
        if args.store == "milvus":
            proc, url = start_server(Path(tmp) / "data")
            server = StoreProcesses(psutil.Process(proc.pid))
            pg = None
        else:
            pg, url, root = start_postgres()
            server = StoreProcesses(root)
            proc = None
        source = corpus(max(args.sizes))
        try:
            engine = Engine(embedder=HashEmbedder(dim=384), store=open_store(args.store, url), warm_up=False)
            have, ingest_s = 0, 0.0
            for n in sorted(args.sizes):
                elapsed = time.perf_counter() - started
                rate = have / ingest_s if ingest_s else None
                if rate and elapsed + (n - have) / rate > args.budget:
                    log(f"skip n={n}: ingest would take ~{(n - have) / rate:.0f} s, {args.budget - elapsed:.0f} s left")
                    results["skipped"].append({"n": n, "estimated_ingest_s": round((n - have) / rate),
                                               "reason": f"over the {args.budget:.0f} s budget"})
                    continue
                t = time.perf_counter()
                for lo in range(have, n, BATCH * 5):
                    hi = min(n, lo + BATCH * 5)
                    texts, metas = zip(*itertools.islice(source, hi - lo), strict=True)
                    engine.add_texts(list(texts), ids=[f"d{i}" for i in range(lo, hi)],
                                     metadatas=list(metas), batch_size=BATCH)
                    del texts, metas
                dt = time.perf_counter() - t
                ingest_s += dt
                have = n
                log(f"n={n}: ingested in {dt:.1f} s")
                row = run_worker(args.store, url, server.root.pid, args.repeat, args.texts)
                row["ingest_rss_mb"] = round(psutil.Process().memory_info().rss / 2**20, 1)
                row["ingest_s_step"] = round(dt, 1)
                row["sentences_per_s"] = round(have / ingest_s)
                results["sizes"][str(n)] = row
                log(f"n={n}: {row}")
            engine.close()
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=60)
            if pg is not None:
                pg.stop()
    results["load_avg_end"] = os.getloadavg()
    stamp_end(results, started)
    write_json(out_path, results)
    return results


if __name__ == "__main__":
    main()
