#!/usr/bin/env python3
"""Throughput and latency of ``POST /search`` under 1, 8 and 32 concurrent clients (issue 19).

The server is the real command, ``nlql serve --demo --embedder hash``, in its own process: the bundled
demo corpus (Python standard-library docstrings, 1,698 sentences) in the built-in memory store with the
hash embedder (384 dims), so the figures are the HTTP stack, the thread pool and the engine, not a
neural model. Clients are asyncio tasks sharing one ``httpx.AsyncClient`` in this process, each sending
its next request as soon as the last one is answered (closed loop); four query shapes rotate (semantic,
hybrid RRF, filtered semantic, BM25). Per concurrency level: a warm-up, then ``--seconds`` of requests;
requests/s is answered requests over that window, p50/p99 are per-request latencies seen by the client.
Client and server share the machine's cores, as they would on one host.

    python bench/serve.py [--clients 1 8 32] [--seconds 10] [--out bench/results/serve.json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, log, machine_info, stamp_end, write_json  # noqa: E402

QUERIES = [
    ("semantic", 'SELECT SENTENCE LET rel = SIMILARITY(content, "{w} into a string") LIMIT 10'),
    ("hybrid", 'SELECT SENTENCE LET sem = SIMILARITY(content, "{w} files"), kw = BM25(content, "{w} files"), '
               "score = RRF(sem, kw, k => 60) ORDER BY score DESC LIMIT 10"),
    ("filtered", 'SELECT SENTENCE LET rel = SIMILARITY(content, "{w}") WHERE meta.kind == "function" '
                 "AND meta.year >= 2008 LIMIT 10"),
    ("bm25", 'SELECT SENTENCE LET kw = BM25(content, "{w} directory") LIMIT 10'),
]
WORDS = ["json", "temporary", "thread", "random", "socket", "path", "time", "decimal", "queue", "regex",
         "archive", "hash", "encode", "parse", "copy", "sort"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int, workers: int) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               HF_HUB_OFFLINE="1")
    env.pop("NLQL_TOKEN", None)
    cmd = [sys.executable, "-m", "nlql", "serve", "--demo", "--embedder", "hash", "--port", str(port),
           "--workers", str(workers), "--log-level", "warning"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_ready(url: str, proc: subprocess.Popen[str], timeout: float = 180.0) -> dict[str, Any]:
    import httpx

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError("the server exited: " + (proc.stderr.read() if proc.stderr else ""))
        try:
            r = httpx.get(url + "/health", timeout=2)
            if r.status_code == 200:
                return r.json()
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not start")


def _body(i: int) -> tuple[str, dict[str, Any]]:
    name, template = QUERIES[i % len(QUERIES)]
    return name, {"query": template.format(w=WORDS[(i // len(QUERIES)) % len(WORDS)])}


async def load(url: str, clients: int, seconds: float, warmup: float) -> dict[str, Any]:
    import httpx

    latencies: list[float] = []
    per_shape: dict[str, list[float]] = {name: [] for name, _ in QUERIES}
    errors = 0
    counter = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        measuring = False
        stop_at = 0.0

        async def worker() -> None:
            nonlocal counter, errors
            while time.perf_counter() < stop_at:
                i = counter
                counter += 1
                name, body = _body(i)
                t = time.perf_counter()
                r = await client.post("/search", json=body)
                ms = (time.perf_counter() - t) * 1000
                if not measuring:
                    continue
                if r.status_code != 200:
                    errors += 1
                    continue
                latencies.append(ms)
                per_shape[name].append(ms)

        stop_at = time.perf_counter() + warmup
        await asyncio.gather(*(worker() for _ in range(clients)))
        measuring = True
        start = time.perf_counter()
        stop_at = start + seconds
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - start

    def pct(xs: list[float], q: float) -> float | None:
        if not xs:
            return None
        xs = sorted(xs)
        return round(xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))], 2)

    return {
        "clients": clients,
        "requests": len(latencies),
        "errors": errors,
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": pct(latencies, 0.50),
        "p99_ms": pct(latencies, 0.99),
        "mean_ms": round(statistics.fmean(latencies), 2) if latencies else None,
        **{f"p50_{name}_ms": pct(xs, 0.50) for name, xs in per_shape.items()},
    }


def direct(seconds: float) -> dict[str, Any]:
    """The same query sequence through ``engine.search`` in this process, one at a time: the engine's own
    cost, without HTTP, JSON or threads (same corpus and embedder as the server)."""
    from nlql.data import load_demo
    from nlql.embedders import HashEmbedder
    from nlql.engine import Engine

    engine = Engine(embedder=HashEmbedder(dim=384), warm_up=False)
    docs = load_demo()
    engine.add_texts([d["text"] for d in docs], ids=[d["id"] for d in docs], metadatas=[d["metadata"] for d in docs])
    for i in range(len(QUERIES) * 2):  # warm-up
        engine.search(_body(i)[1]["query"])
    times: list[float] = []
    i = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        q = _body(i)[1]["query"]
        t = time.perf_counter()
        engine.search(q)
        times.append((time.perf_counter() - t) * 1000)
        i += 1
    engine.close()
    return {"requests": len(times), "p50_ms": round(statistics.median(times), 2),
            "p99_ms": round(sorted(times)[min(len(times) - 1, round(0.99 * (len(times) - 1)))], 2)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per concurrency level")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--workers", type=int, default=16, help="the server's engine threads (nlql serve --workers)")
    ap.add_argument("--out", type=Path, default=RESULTS / "serve.json")
    args = ap.parse_args(argv)

    started = time.perf_counter()
    machine = machine_info()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server(port, args.workers)
    try:
        health = wait_ready(url, proc)
        log(f"[serve] server up: {health.get('sentences')} sentences; clients {args.clients}")
        runs = []
        for c in args.clients:
            run = asyncio.run(load(url, c, args.seconds, args.warmup))
            log(f"[serve] {c:>3} clients: {run['requests_per_s']:>7.1f} req/s  p50 {run['p50_ms']} ms  "
                f"p99 {run['p99_ms']} ms  errors {run['errors']}")
            runs.append(run)
        reference = direct(min(args.seconds, 5.0))
        log(f"[serve] engine.search in-process, one at a time: p50 {reference['p50_ms']} ms")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    import httpx
    import starlette
    import uvicorn

    results: dict[str, Any] = {
        "title": "HTTP API: POST /search under concurrent clients",
        "description": (
            "`nlql serve --demo --embedder hash` (the demo corpus, {n:,} sentences, built-in memory store, "
            "**hash embedder**, 384 dims; {w} engine threads) in its own process; closed-loop clients in one "
            "asyncio process with httpx on the same machine; four query shapes rotating (semantic, hybrid "
            "RRF, filtered, BM25), LIMIT 10. {s:g} s measured per level after {wu:g} s of warm-up."
        ).format(n=int(health.get("sentences", 0)), w=args.workers, s=args.seconds, wu=args.warmup),
        "machine": machine,
        "embedder": "hash (HashEmbedder, dim 384)",
        "store": "memory (the demo corpus)",
        "server": f"uvicorn {uvicorn.__version__}, starlette {starlette.__version__}, {args.workers} workers",
        "client": f"httpx {httpx.__version__} AsyncClient, closed loop",
        "engine_search_in_process": reference,
        "runs": runs,
    }
    stamp_end(results, started)
    write_json(args.out, results)
    log(f"[serve] wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
