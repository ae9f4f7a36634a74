#!/usr/bin/env python3
"""Throughput and latency of ``POST /search`` under 1, 16 and 64 concurrent clients, then the same under a
slow-client attack (issues 19 and 33).

The server is the real command, ``nlql serve --demo --embedder hash``, in its own process: the bundled
demo corpus (Python standard-library docstrings, 1,698 sentences) in the built-in memory store with the
hash embedder (384 dims), so the figures are the HTTP stack, the thread pool and the engine, not a
neural model. Each client is a thread of this process with its own ``httpx.Client`` (one keep-alive
connection), sending its next request as soon as the last one is answered (closed loop; httpx's
``AsyncClient`` pool, tried first, became the bottleneck at 32 clients); four query shapes rotate (semantic,
hybrid RRF, filtered semantic, BM25). Per concurrency level: a warm-up, then ``--seconds`` of requests;
requests/s is answered requests over that window, p50/p99 are per-request latencies seen by the client.
Client and server share the machine's cores, as they would on one host. With ``--attack N`` (1,000 by
default) every level is also measured while N more connections each send ``POST /search HTTP/1.1`` and
a Host header, then one more header line a second, never finishing (slow-loris; reopened when the server
closes them): the figure to watch is p99 under attack against p99 without it.

Each level runs ``--rounds`` rounds (3), each a normal and an attacked half next to each other, in the
order normal-attacked, attacked-normal, … (ABBA), so that what else the machine does (2 cores shared
with other work) and what the level before left behind fall on both sides alike; the figures pool each
side's samples (one client answers ~3,500 requests in 10 s: p99 is the 35th slowest of them, so one
round's p99 moves with a handful of requests), and ``p99_vs_normal_ci95`` is a bootstrap interval of the
pooled ratio. An attacked half starts a fresh attacker process, which opens its connections and holds
them ``--attack-lead`` seconds (2) before the warm-up: with the server's 10 s header timeout (each
connection's a random 0–25 % longer), the measured window, 4 to 14 s after the connections opened,
holds their whole first time-out, the reads at it, the 408s and the reconnections, besides the header
lines dripping every second. Each level also records the CPU
each side got (CPU seconds per wall second) and the server's CPU per answered request, the figure that
bounds throughput on an idle machine (about cores / CPU per request, less the GIL's serialisation).

    python bench/serve.py [--clients 1 16 64] [--seconds 10] [--rounds 3] [--attack 1000] [--out bench/results/serve.json]
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import statistics
import subprocess
import sys
import threading
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


def start_server(port: int, workers: int, tree: Path = ROOT) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(tree) + os.pathsep + os.environ.get("PYTHONPATH", ""),
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


def _process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (Linux /proc), or None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def load(url: str, clients: int, seconds: float, warmup: float, server_pid: int) -> dict[str, Any]:
    """One round: ``clients`` closed-loop clients for ``warmup`` then ``seconds`` measured; the raw samples
    (:func:`summarize` turns rounds into the figures)."""
    import httpx

    latencies: list[float] = []
    per_shape: dict[str, list[float]] = {name: [] for name, _ in QUERIES}
    errors = [0]
    counter = itertools.count()
    phase = {"measuring": False, "stop_at": time.perf_counter() + warmup}
    barrier = threading.Barrier(clients + 1)

    def worker() -> None:
        # one thread and one keep-alive connection per client; the GIL is released while it waits
        with httpx.Client(base_url=url, timeout=60) as client:
            for measuring in (False, True):
                barrier.wait()
                while time.perf_counter() < phase["stop_at"]:
                    name, body = _body(next(counter))
                    t = time.perf_counter()
                    try:
                        r = client.post("/search", json=body)
                    except httpx.HTTPError:  # a refused or dropped connection is an error too
                        if measuring:
                            errors[0] += 1
                        continue
                    ms = (time.perf_counter() - t) * 1000
                    if not measuring:
                        continue
                    if r.status_code != 200:
                        errors[0] += 1
                        continue
                    latencies.append(ms)
                    per_shape[name].append(ms)
                barrier.wait()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()  # warm-up starts
    barrier.wait()  # warm-up done
    start = time.perf_counter()
    phase["stop_at"] = start + seconds
    cpu0, server0 = time.process_time(), _process_cpu_s(server_pid)
    barrier.wait()  # measuring starts
    barrier.wait()  # measuring done
    elapsed = time.perf_counter() - start
    client_cpu, server1 = time.process_time() - cpu0, _process_cpu_s(server_pid)
    for t in threads:
        t.join()
    return {"latencies": latencies, "per_shape": per_shape, "errors": errors[0], "elapsed": elapsed,
            "client_cpu": client_cpu,
            "server_cpu": server1 - server0 if server0 is not None and server1 is not None else None}


def pct(xs: list[float], q: float) -> float | None:
    """The ``q`` quantile of ``xs`` (nearest rank), rounded to 0.01 ms; None for no samples."""
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))], 2)


def summarize(clients: int, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one level, every round's samples pooled (and each round's p99 beside them)."""
    latencies = [x for r in rounds for x in r["latencies"]]
    elapsed = sum(r["elapsed"] for r in rounds)
    server_cpu = None if any(r["server_cpu"] is None for r in rounds) else sum(r["server_cpu"] for r in rounds)
    return {
        "clients": clients,
        "rounds": len(rounds),
        "requests": len(latencies),
        "errors": sum(r["errors"] for r in rounds),
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": pct(latencies, 0.50),
        "p95_ms": pct(latencies, 0.95),
        "p99_ms": pct(latencies, 0.99),
        "p99_ms_each_round": [pct(r["latencies"], 0.99) for r in rounds],
        "mean_ms": round(statistics.fmean(latencies), 2) if latencies else None,
        **{f"p50_{name}_ms": pct([x for r in rounds for x in r["per_shape"][name]], 0.50) for name, _ in QUERIES},
        # CPU used per second of wall time: how much of the 2 cores each side got
        "client_cpu_per_s": round(sum(r["client_cpu"] for r in rounds) / elapsed, 2),
        "server_cpu_per_s": round(server_cpu / elapsed, 2) if server_cpu is not None else None,
        # the server's CPU per answered request: what the figures would be bounded by on an idle machine
        "server_cpu_ms_per_request": round(server_cpu * 1000 / max(1, len(latencies)), 2)
        if server_cpu is not None else None,
    }


def p99_ratio_ci(attacked: list[float], normal: list[float], draws: int = 1000,
                 seed: int = 0) -> list[float] | None:
    """A 95 % bootstrap interval of p99(attacked) / p99(normal): how far the ratio could move with other
    samples of the same two distributions (few samples past the 99th percentile make it wide)."""
    import numpy as np

    if not attacked or not normal:
        return None
    rng = np.random.default_rng(seed)
    a, n = np.asarray(attacked), np.asarray(normal)
    ratios = [np.quantile(rng.choice(a, a.size), 0.99) / np.quantile(rng.choice(n, n.size), 0.99)
              for _ in range(draws)]
    return [round(float(x), 2) for x in np.quantile(ratios, [0.025, 0.975])]


class SlowLoris:
    """``n`` connections that never finish their headers: one more header line a second each, reopened
    when the server closes them (its header timeout). Runs in a thread until :meth:`stop`."""

    def __init__(self, url: str, n: int) -> None:
        self.host, port = url.rsplit("//", 1)[1].rsplit(":", 1)
        self.port = int(port)
        self.n = n
        self.reopened = 0
        self.sent = 0
        self._stop = threading.Event()
        self._socks: list[socket.socket | None] = [None] * n
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> socket.socket | None:
        try:
            s = socket.create_connection((self.host, self.port), timeout=2)
            s.sendall(f"POST /search HTTP/1.1\r\nHost: {self.host}\r\n".encode())
            s.setblocking(False)
            return s
        except OSError:
            return None

    def _run(self) -> None:
        for i in range(self.n):
            if self._stop.is_set():
                return
            self._socks[i] = self._open()
        while not self._stop.wait(1.0):
            for i, s in enumerate(self._socks):
                try:
                    if s is None:
                        raise OSError
                    s.send(b"X-Slow: 1\r\n")
                    self.sent += 1
                except OSError:
                    if s is not None:
                        s.close()
                    self._socks[i] = self._open()
                    self.reopened += 1

    def start(self) -> SlowLoris:
        self._thread.start()
        end = time.monotonic() + 60
        while sum(s is not None for s in self._socks) < self.n and time.monotonic() < end:
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for s in self._socks:
            if s is not None:
                s.close()


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


def _slow_loris_main(url: str, n: int) -> None:
    """The attacker process: ``n`` slow connections until terminated; prints how many it reopened."""
    import signal

    loris = SlowLoris(url, n).start()
    print(f"{sum(s is not None for s in loris._socks)} slow connections open", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    loris.stop()
    print(f"reopened {loris.reopened} sent {loris.sent}", flush=True)


def _start_attacker(url: str, n: int) -> subprocess.Popen[str]:
    """The attacker is a process of its own (as it would be another machine): its sockets do not take the
    measuring clients' interpreter lock. Returns once its ``n`` connections are open."""
    loris = subprocess.Popen([sys.executable, __file__, "--slow-loris", url, str(n)], stdout=subprocess.PIPE,
                             text=True)
    if loris.stdout is not None:
        loris.stdout.readline()
    return loris


def _stop_attacker(loris: subprocess.Popen[str]) -> tuple[int, int]:
    """Stop it; (connections it reopened, header lines it sent)."""
    loris.terminate()
    out, _ = loris.communicate(timeout=30)
    words = out.split()
    return (int(words[-3]), int(words[-1])) if len(words) >= 4 and words[-2] == "sent" else (0, 0)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--slow-loris"]:
        _slow_loris_main(argv[1], int(argv[2]))
        return {}
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--attack", type=int, default=1000, help="slow-loris connections for the attack runs (0: none)")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per round")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds per level; with --attack, normal and attacked rounds alternate (ABBA)")
    ap.add_argument("--attack-lead", type=float, default=2.0,
                    help="seconds the attacker holds its connections before a round's warm-up starts")
    ap.add_argument("--workers", type=int, default=16, help="the server's engine threads (nlql serve --workers)")
    ap.add_argument("--server-rev", default=None,
                    help="serve this git revision's nlql instead of this tree's (a before/after comparison)")
    ap.add_argument("--out", type=Path, default=RESULTS / "serve.json")
    args = ap.parse_args(argv)
    if args.server_rev:
        from bench.common import earlier_tree

        with earlier_tree(args.server_rev) as (short, tree, _):
            return run(args, tree, short)
    return run(args, ROOT, None)


def run(args: argparse.Namespace, tree: Path, rev: str | None) -> dict[str, Any]:
    """The whole benchmark against ``nlql serve`` from ``tree`` (``rev``: the revision it holds, when not
    this tree)."""

    started = time.perf_counter()
    machine = machine_info()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server(port, args.workers, tree)
    runs, attacked = [], []
    try:
        health = wait_ready(url, proc)
        log(f"[serve] server up: {health.get('sentences')} sentences; clients {args.clients}; "
            f"{args.rounds} round(s) per level" + (f", alternating with {args.attack} slow connections"
                                                  if args.attack else ""))
        for c in args.clients:
            normal: list[dict[str, Any]] = []
            hit: list[dict[str, Any]] = []
            attack_stats = {"reopened": 0, "sent": 0, "seconds": 0.0}
            for r in range(args.rounds):
                order = (False, True) if r % 2 == 0 else (True, False)
                for under_attack in order if args.attack else (False,):
                    if not under_attack:
                        normal.append(load(url, c, args.seconds, args.warmup, proc.pid))
                        continue
                    loris, t0 = _start_attacker(url, args.attack), time.perf_counter()
                    try:
                        time.sleep(args.attack_lead)
                        hit.append(load(url, c, args.seconds, args.warmup, proc.pid))
                    finally:
                        reopened, sent = _stop_attacker(loris)
                    attack_stats["reopened"] += reopened
                    attack_stats["sent"] += sent
                    attack_stats["seconds"] += time.perf_counter() - t0
            run = summarize(c, normal)
            log(f"[serve] {c:>3} clients: {run['requests_per_s']:>7.1f} req/s  p50 {run['p50_ms']} ms  "
                f"p95 {run['p95_ms']} ms  p99 {run['p99_ms']} ms {run['p99_ms_each_round']}  errors {run['errors']}  "
                f"cpu/s client {run['client_cpu_per_s']} server {run['server_cpu_per_s']}")
            runs.append(run)
            if not hit:
                continue
            run = summarize(c, hit)
            run["slow_connections"] = args.attack
            run["slow_reopened"] = attack_stats["reopened"]
            run["slow_lines_per_s"] = round(attack_stats["sent"] / attack_stats["seconds"], 1)
            run["p99_vs_normal"] = round(run["p99_ms"] / runs[-1]["p99_ms"], 2) \
                if run["p99_ms"] and runs[-1]["p99_ms"] else None
            # round r's attacked and normal halves ran next to each other
            run["p99_vs_normal_each_round"] = [round(pa / pn, 2) if pa and pn else None for pa, pn
                                               in zip(run["p99_ms_each_round"], runs[-1]["p99_ms_each_round"])]
            run["p99_vs_normal_ci95"] = p99_ratio_ci([x for h in hit for x in h["latencies"]],
                                                     [x for n in normal for x in n["latencies"]])
            log(f"[serve] {c:>3} clients + {args.attack} slow: {run['requests_per_s']:>7.1f} req/s  "
                f"p50 {run['p50_ms']} ms  p95 {run['p95_ms']} ms  p99 {run['p99_ms']} ms {run['p99_ms_each_round']} "
                f"({run['p99_vs_normal']}x, 95% interval {run['p99_vs_normal_ci95']}, each round "
                f"{run['p99_vs_normal_each_round']})  errors {run['errors']}  "
                f"{run['slow_lines_per_s']} slow header lines/s, {run['slow_reopened']} reopened")
            attacked.append(run)
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
            "process (one thread and one httpx keep-alive connection per client) on the same machine; four "
            "query shapes rotating (semantic, hybrid RRF, filtered, BM25), LIMIT 10. {r} round(s) per level of {s:g} s "
            "measured after {wu:g} s of warm-up, samples pooled{att}."
        ).format(n=int(health.get("sentences", 0)), w=args.workers, s=args.seconds, wu=args.warmup, r=args.rounds,
                 att="" if not args.attack else f"; each round also attacked by {args.attack:,} slow-loris "
                 "connections (normal and attacked halves alternating ABBA; the attacker opens its connections "
                 f"{args.attack_lead:g} s before the warm-up)"),
        "machine": machine,
        "embedder": "hash (HashEmbedder, dim 384)",
        "store": "memory (the demo corpus)",
        "server": f"uvicorn {uvicorn.__version__}, starlette {starlette.__version__}, {args.workers} workers"
                  + (f"; nlql of revision {rev}" if rev else ""),
        "client": f"httpx {httpx.__version__} Client per thread, closed loop",
        "engine_search_in_process": reference,
        "runs": runs,
        "under_attack": attacked,
    }
    stamp_end(results, started)
    write_json(args.out, results)
    log(f"[serve] wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
