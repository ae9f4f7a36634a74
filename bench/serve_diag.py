#!/usr/bin/env python3
"""Where the slow ``/search`` requests under a slow-loris attack come from: one client, timestamps on
every side (CLOCK_MONOTONIC is shared by the processes), correlated afterwards.

- server (its own process, the demo corpus as ``nlql serve --demo --embedder hash`` serves it): event-loop
  lag (a 1 ms ticker's lateness), GC pauses (``gc.callbacks``), connections made and header timeouts fired
  (per 10 ms), and each /search request's span inside the server;
- attacker (its own process): each one-a-second tick's start and end and the reconnects it made;
- client: each request's start and latency.

    python bench/serve_diag.py [--seconds 20] [--attack 1000] [--out /tmp/serve_diag.json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import signal
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
#: the tree whose nlql the server imports (another worktree, to compare revisions); this one by default
TREE = os.environ.get("DIAG_TREE", str(ROOT))

TICK = float(os.environ.get("DIAG_TICK", "0.01"))  # the loop-lag ticker's period (0: none)

from bench.serve import SlowLoris, _body, _free_port, _process_cpu_s, wait_ready  # noqa: E402


def server_main(port: int, out: str, header_timeout: float) -> None:
    sys.path.insert(0, TREE)
    for name in [m for m in sys.modules if m == "nlql" or m.startswith("nlql.")]:
        del sys.modules[name]
    from nlql.data import load_demo
    from nlql.embedders import HashEmbedder
    from nlql.engine import Engine
    from nlql.serve import ServeConfig, _bind, _server

    engine = Engine(embedder=HashEmbedder(dim=384))
    docs = load_demo()
    engine.add_texts([d["text"] for d in docs], ids=[d["id"] for d in docs], metadatas=[d["metadata"] for d in docs])
    config = ServeConfig(port=port, header_timeout=header_timeout).validate()
    server = _server(engine, config, "warning")
    rec: dict[str, list[Any]] = {"lag": [], "gc": [], "made": [], "expired": [], "req": [], "reads": []}
    gc_start: dict[str, float] = {}

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_start["t"] = time.monotonic()
        else:
            rec["gc"].append((gc_start.get("t", 0.0), time.monotonic() - gc_start.get("t", 0.0), info["generation"]))

    gc.callbacks.append(on_gc)
    proto = server.config.http
    made0, expired0 = proto.connection_made, proto._header_expired

    def made(self: Any, transport: Any) -> None:
        rec["made"].append(time.monotonic())
        made0(self, transport)

    def expired(self: Any) -> None:
        rec["expired"].append(time.monotonic())
        expired0(self)

    received0 = proto.data_received

    def received(self: Any, data: bytes) -> None:
        rec["reads"].append(time.monotonic())
        received0(self, data)

    proto.connection_made, proto._header_expired, proto.data_received = made, expired, received
    app = server.config.app

    async def timed(scope: Any, receive: Any, send: Any) -> None:
        t = time.monotonic()
        await app(scope, receive, send)
        if scope.get("path") == "/search":
            rec["req"].append((t, time.monotonic() - t))

    server.config.app = timed

    async def ticker() -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(TICK)
            late = time.monotonic() - t - TICK
            if late > 0.002:
                rec["lag"].append((t, late))

    startup0 = server.startup

    async def startup(*a: Any, **k: Any) -> None:
        await startup0(*a, **k)
        if TICK > 0:
            asyncio.get_running_loop().create_task(ticker())

    server.startup = startup

    def dump(*_: Any) -> None:
        Path(out).write_text(json.dumps(rec))
        server.should_exit = True

    signal.signal(signal.SIGUSR1, dump)
    sock = _bind(config)
    import nlql.serve

    if os.environ.get("DIAG_FREEZE", "1") == "1" and hasattr(nlql.serve, "freeze_heap"):
        nlql.serve.freeze_heap()
    print(f"diag server: nlql from {nlql.serve.__file__}, frozen {gc.get_freeze_count()}", file=sys.stderr)
    server.run(sockets=[sock])


def attacker_main(url: str, n: int, out: str) -> None:
    ticks: list[tuple[float, float, int]] = []

    class Logged(SlowLoris):
        def _run(self) -> None:
            for i in range(self.n):
                self._socks[i] = self._open()
            while not self._stop.wait(1.0):
                t, before = time.monotonic(), self.reopened
                for i, s in enumerate(self._socks):
                    try:
                        if s is None:
                            raise OSError
                        s.send(b"X-Slow: 1\r\n")
                    except OSError:
                        if s is not None:
                            s.close()
                        self._socks[i] = self._open()
                        self.reopened += 1
                ticks.append((t, time.monotonic(), self.reopened - before))

    loris = Logged(url, n).start()
    print("ready", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    loris.stop()
    Path(out).write_text(json.dumps(ticks))


def sink_main(n: int) -> None:
    """A listener that accepts and never reads (the kernel buffers what is sent), holding the newest ``n``
    connections: an attacker aimed at it spends its own CPU as against the server, and the server none."""
    import collections
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(n + 64)
    print(s.getsockname()[1], flush=True)
    held: collections.deque[socket.socket] = collections.deque()
    while True:
        conn, _ = s.accept()
        held.append(conn)
        if len(held) > n:
            held.popleft().close()


def clients(url: str, n: int, seconds: float) -> int:
    done = [0]

    def run() -> None:
        done[0] += len(client(url, seconds))

    ts = [threading.Thread(target=run) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return done[0]


def client(url: str, seconds: float) -> list[tuple[float, float]]:
    import httpx

    out: list[tuple[float, float]] = []
    i = 0
    with httpx.Client(base_url=url, timeout=60) as c:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.monotonic()
            r = c.post("/search", json=_body(i)[1])
            assert r.status_code == 200, r.text
            out.append((t, time.monotonic() - t))
            i += 1
    return out


def p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def main() -> None:
    if sys.argv[1:2] == ["--server"]:
        server_main(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]))
        return
    if sys.argv[1:2] == ["--attacker"]:
        attacker_main(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    if sys.argv[1:2] == ["--sink"]:
        sink_main(int(sys.argv[2]))
        return
    if sys.argv[1:2] == ["--cpu"]:
        attack_cpu(float(sys.argv[2]))
        return
    if sys.argv[1:2] in (["--order"], ["--rounds"]):
        experiments(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--attack", type=int, default=1000)
    ap.add_argument("--header-timeout", type=float, default=10.0)
    ap.add_argument("--out", default="/tmp/serve_diag.json")
    args = ap.parse_args()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    srv_out, att_out = args.out + ".server", args.out + ".attacker"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    srv = subprocess.Popen([sys.executable, __file__, "--server", str(port), srv_out, str(args.header_timeout)],
                           env=env)
    load0 = os.getloadavg()
    try:
        wait_ready(url, srv)  # type: ignore[arg-type]
        client(url, 3)  # warm-up
        normal = client(url, args.seconds)
        att = subprocess.Popen([sys.executable, __file__, "--attacker", url, str(args.attack), att_out],
                               env=env, stdout=subprocess.PIPE, text=True)
        att.stdout.readline()  # type: ignore[union-attr]
        t_attack = time.monotonic()
        attacked = client(url, args.seconds)
        att.terminate()
        att.wait(30)
        srv.send_signal(signal.SIGUSR1)
        srv.wait(30)
    finally:
        if srv.poll() is None:
            srv.kill()
    rec = json.loads(Path(srv_out).read_text())
    ticks = json.loads(Path(att_out).read_text())
    result = {"normal": normal, "attacked": attacked, "t_attack": t_attack, "server": rec, "ticks": ticks,
              "load": [load0, os.getloadavg()]}
    Path(args.out).write_text(json.dumps(result))
    n99, a99 = p([x[1] for x in normal], .99), p([x[1] for x in attacked], .99)
    # what the attack's one-a-second ticks cost the server: its reads, and the event loop's lateness after
    reads = sorted(rec["reads"])
    steady = [t for t in ticks if t[2] == 0]
    hit = sum(any(s0 <= lt <= e0 + 0.05 and late > 0.004 for lt, late in rec["lag"]) for s0, e0, _ in steady)
    per_tick = statistics.median(sum(1 for r in reads if s0 <= r <= e0 + 0.05) for s0, e0, _ in steady) \
        if steady else 0
    print(f"attacker ticks without reconnections: {len(steady)}; the server's reads in each (median) {per_tick}; "
          f"ticks followed by a loop lag > 4 ms: {hit}; gc pauses > 2 ms under attack (gen, ms): "
          f"{[(g[2], round(g[1] * 1000, 1)) for g in rec['gc'] if g[1] > 0.002 and g[0] >= t_attack]}")
    print(f"normal: {len(normal)} req p50 {p([x[1] for x in normal], .5)*1000:.2f} p99 {n99*1000:.2f} ms; "
          f"attacked: {len(attacked)} req p50 {p([x[1] for x in attacked], .5)*1000:.2f} p99 {a99*1000:.2f} ms "
          f"({a99/n99:.2f}x); load {load0[0]:.2f} -> {os.getloadavg()[0]:.2f}")


def attack_cpu(seconds: float) -> None:
    """The server's CPU per second under the attack alone (no client): what the attack costs it."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), DIAG_TICK="0")
    srv = subprocess.Popen([sys.executable, __file__, "--server", str(port), "/tmp/diag_cpu.server", "10"], env=env)
    try:
        wait_ready(url, srv)  # type: ignore[arg-type]
        time.sleep(2)
        s0, w0 = _process_cpu_s(srv.pid) or 0.0, time.monotonic()
        time.sleep(seconds)
        idle = ((_process_cpu_s(srv.pid) or 0.0) - s0) / (time.monotonic() - w0)
        att = subprocess.Popen([sys.executable, __file__, "--attacker", url, "1000", "/tmp/diag_cpu.attacker"],
                               env=env, stdout=subprocess.PIPE, text=True)
        att.stdout.readline()  # type: ignore[union-attr]
        s0, a0, w0 = _process_cpu_s(srv.pid) or 0.0, _process_cpu_s(att.pid) or 0.0, time.monotonic()
        time.sleep(seconds)
        w = time.monotonic() - w0
        busy = ((_process_cpu_s(srv.pid) or 0.0) - s0) / w
        attacker = ((_process_cpu_s(att.pid) or 0.0) - a0) / w
        att.terminate()
        att.wait(30)
        srv.send_signal(signal.SIGUSR1)
        srv.wait(30)
    finally:
        if srv.poll() is None:
            srv.kill()
    rec = json.loads(Path("/tmp/diag_cpu.server").read_text())
    ticks = json.loads(Path("/tmp/diag_cpu.attacker").read_text())
    print(f"server cpu/s idle {idle*1000:.1f} ms, under attack {busy*1000:.1f} ms; attacker {attacker*1000:.1f} ms/s; "
          f"reopened {sum(t[2] for t in ticks)}; connections made {len(rec['made'])}, header timeouts "
          f"{len(rec['expired'])}; gc >2 ms during the attack (gen, ms) "
          f"{[(g[2], round(g[1]*1000, 1)) for g in rec['gc'] if g[1] > 0.002 and g[0] >= w0]}; "
          f"load {os.getloadavg()[0]:.2f}")


def experiments(kind: str, seconds: float, rounds: int) -> None:
    """``--order``: is the 1-client tail worse right after a 64-client level, without any attack?
    ``--rounds``: 1 client, rounds of no attack / an attacker aimed at a sink (its CPU only) / the attack."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), DIAG_TICK="0")
    srv = subprocess.Popen([sys.executable, __file__, "--server", str(port), "/tmp/diag_exp.server", "10"], env=env)
    load0 = os.getloadavg()
    res: dict[str, list[float]] = {}
    try:
        wait_ready(url, srv)  # type: ignore[arg-type]
        client(url, 3)
        if kind == "--order":
            for _ in range(rounds):
                res.setdefault("fresh", []).extend(x[1] for x in client(url, seconds))
                clients(url, 64, seconds)
                res.setdefault("after64", []).extend(x[1] for x in client(url, seconds))
        else:
            sink = subprocess.Popen([sys.executable, __file__, "--sink", "2100"], stdout=subprocess.PIPE, text=True)
            sink_url = f"http://127.0.0.1:{sink.stdout.readline().strip()}"  # type: ignore[union-attr]
            for r in range(rounds):
                for name, target in (("normal", None), ("sink", sink_url), ("attack", url)):
                    att = None
                    if target:
                        att = subprocess.Popen([sys.executable, __file__, "--attacker", target, "1000",
                                                f"/tmp/diag_exp.{name}"], env=env, stdout=subprocess.PIPE, text=True)
                        att.stdout.readline()  # type: ignore[union-attr]
                    client(url, 2)
                    c0, s0, w0 = _process_cpu_s(att.pid) if att else 0.0, _process_cpu_s(srv.pid), time.monotonic()
                    lat = [x[1] for x in client(url, seconds)]
                    w = time.monotonic() - w0
                    cpu = f"attacker cpu/s {((_process_cpu_s(att.pid) or 0) - (c0 or 0)) / w:.3f}" if att else ""
                    cpu += f" server cpu/s {((_process_cpu_s(srv.pid) or 0) - (s0 or 0)) / w:.3f}"
                    res.setdefault(name, []).extend(lat)
                    print(f"round {r} {name}: {len(lat)} req p99 {p(lat, .99)*1000:.2f} ms {cpu} load {os.getloadavg()[0]:.2f}",
                          flush=True)
                    if att:
                        att.terminate()
                        att.wait(30)
            sink.terminate()
    finally:
        srv.kill()
    base = p(res[next(iter(res))], .99)
    for k, v in res.items():
        print(f"{k}: {len(v)} req p50 {p(v, .5)*1000:.2f} p99 {p(v, .99)*1000:.2f} ms ({p(v, .99)/base:.2f}x)")
    print(f"load {load0[0]:.2f} -> {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
