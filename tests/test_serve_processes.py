"""``nlql serve --processes N``: worker processes in front of one server store (SPEC §10).

The real command is started (``python -m nlql serve``) on a real PostgreSQL (pgserver, the conftest
fixture): a document written through one worker is read through the other, each answer naming its
worker; the workers are separate processes (children of the command, each with its own pid).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.engine import Engine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "processes-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Connection": "close"}  # a new connection per request


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NLQL_TOKEN": TOKEN}
    return subprocess.Popen([sys.executable, "-m", "nlql", "serve", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # the supervisor stops its workers
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group this test started
            proc.wait(timeout=10)
    return proc.stdout.read() if proc.stdout else ""


def _children(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return {int(p) for p in out.stdout.split()}


def _until(predicate, what: str, proc: subprocess.Popen[str], timeout: float = 90.0):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"nlql serve exited ({proc.returncode}) waiting for {what}:\n{_stop(proc)}")
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}:\n{_stop(proc)}")


def test_two_processes_share_one_postgres_store(pg_dsn: str) -> None:
    with Engine(embedder=HashEmbedder(dim=384), store=pg_dsn, warm_up=False) as e:  # what --embedder hash makes
        e.add_text("Solar panels turn sunlight into power. Wind farms do it with air.", id="seed",
                   metadata={"k": 1})
    port = _free_port()
    proc = _serve("--store", pg_dsn, "--embedder", "hash", "--processes", "2", "--workers", "2",
                  "--port", str(port), "--no-playground", "--log-level", "warning")
    url = f"http://127.0.0.1:{port}"
    try:
        def health() -> dict | None:
            try:
                r = httpx.get(url + "/health", headers=AUTH, timeout=5)
            except httpx.HTTPError:
                return None
            return r.json() if r.status_code == 200 else None

        _until(health, "the server", proc)
        # both workers answer, each with its own name in the header and in /health
        seen: dict[str, dict] = {}

        def two_workers() -> bool:
            h = health()
            if h is not None:
                seen[h["worker"]] = h
            return len(seen) == 2

        _until(two_workers, "answers from two workers", proc, timeout=60)
        assert all(h["sentences"] == 2 and h["store"] for h in seen.values())
        workers = _children(proc.pid)
        assert len(workers) >= 2 and proc.pid not in workers  # separate processes

        # write through one worker ...
        doc = {"documents": [{"id": "fresh", "text": "Tidal turbines harvest the sea.", "metadata": {"k": 2}}]}
        r = httpx.post(url + "/documents", json=doc, headers=AUTH, timeout=30)
        assert r.status_code == 201, r.text
        writer = r.headers["x-nlql-worker"]
        assert writer in seen
        # ... and read it through the other, at once (several requests until the other one answers)
        query = {"query": 'SELECT SENTENCE WHERE content CONTAINS "turbines"'}
        by_worker: dict[str, list[str]] = {}

        def read_by_both() -> bool:
            r = httpx.post(url + "/search", json=query, headers=AUTH, timeout=30)
            assert r.status_code == 200, r.text
            by_worker[r.headers["x-nlql-worker"]] = [h["doc_id"] for h in r.json()["hits"]]
            return len(by_worker) == 2

        _until(read_by_both, "a search answered by each worker", proc, timeout=60)
        reader = next(w for w in by_worker if w != writer)
        assert by_worker[reader] == ["fresh"] and by_worker[writer] == ["fresh"]

        # a delete through one is gone from both
        r = httpx.delete(url + "/documents/fresh", headers=AUTH, timeout=30)
        assert r.status_code == 200, r.text
        by_worker.clear()
        _until(read_by_both, "searches after the delete", proc, timeout=60)
        assert by_worker == {w: [] for w in seen}
    finally:
        out = _stop(proc)
    assert proc.returncode is not None
    assert "Traceback" not in out, out
    assert not (_children(proc.pid) & workers)  # the workers are gone with the supervisor


def test_processes_need_a_server_store(tmp_path: Path) -> None:
    proc = _serve("--store", str(tmp_path / "store"), "--processes", "2", "--embedder", "hash")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "needs a server store" in out and "postgresql://" in out, out
    proc = _serve("--demo", "--processes", "2", "--embedder", "hash")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "needs a server store" in out, out


def test_one_process_has_no_worker_header() -> None:
    from nlql.serve import BackgroundServer, ServeConfig

    e = Engine(embedder=HashEmbedder(dim=32), warm_up=False)
    e.add_text("One process.", id="a")
    with BackgroundServer(e, ServeConfig(port=0)) as s:
        r = httpx.get(s.url + "/health", timeout=10)
    assert "x-nlql-worker" not in r.headers and "worker" not in r.json()


def test_workers_exit_when_the_supervisor_is_killed(pg_dsn: str) -> None:
    with Engine(embedder=HashEmbedder(dim=384), store=pg_dsn, warm_up=False) as e:
        e.add_text("One sentence.", id="seed")
    port = _free_port()
    proc = _serve("--store", pg_dsn, "--embedder", "hash", "--processes", "2", "--workers", "1",
                  "--port", str(port), "--no-playground", "--log-level", "warning")
    try:
        _until(lambda: len(_children(proc.pid)) >= 2 and _answers(port), "two workers", proc)
        workers = _children(proc.pid)
        proc.kill()  # SIGKILL: the supervisor cannot stop them itself
        proc.wait(timeout=10)
        end = time.monotonic() + 30
        while time.monotonic() < end and any(_alive(w) for w in workers):
            time.sleep(0.2)
        assert not any(_alive(w) for w in workers), "a worker outlived its supervisor"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # any worker left in the group this test started
            except ProcessLookupError:
                pass


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _alive(pid: int) -> bool:
    out = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(out) and not out.startswith("Z")
