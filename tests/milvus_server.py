"""A real Milvus standalone server for the tests: the ``milvus`` package's ``milvus-server`` (Milvus 2.3.5,
the C++ engine with its own etcd and object storage in one process tree), started on free ports in a
temporary directory and stopped at the end of the session.

It has no sparse vectors (Milvus 2.4 added them), so it is also the test of ``MilvusStore`` on a server
without them: BM25 is read from the stored term statistics.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

_PORTS = ("etcd", "proxy")  # the internal components' ports stay at their defaults (one server at a time)
# A Strong-consistency read waits for the proxy's next time tick (200 ms by default: every query, insert
# and delete paid it, ~0.2 s a call). A 10 ms tick keeps the same guarantee (a query ~0.02 s); idle, the
# server then uses ~15% of a core, so conftest.py stops it after the last test that uses it.
_FAST = ("--extra-config", "proxy.timeTickInterval=10")


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class MilvusServer:
    """``milvus-server --data DIR`` on free ports; ``url`` is what ``Engine(store=…)`` opens."""

    def __init__(self, data: Path, start_timeout: float = 300.0) -> None:
        beside = Path(sys.executable).parent / "milvus-server"  # the venv's, when its bin is not on PATH
        exe = str(beside) if beside.exists() else shutil.which("milvus-server")
        if exe is None:
            raise RuntimeError("milvus-server is not installed (pip install milvus)")
        ports = dict(zip(_PORTS, _free_ports(len(_PORTS)), strict=True))
        args = [exe, "--data", str(data), *_FAST]
        for name, port in ports.items():
            args += [f"--{name}-port", str(port)]
        self.data = data
        self.port = ports["proxy"]
        self.url = f"milvus+http://127.0.0.1:{self.port}"
        self.log = open(data.parent / "milvus-server.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait(start_timeout)

    def _wait(self, timeout: float) -> None:
        from pymilvus import MilvusClient

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"milvus-server exited with {self.proc.returncode}")
            try:
                client = MilvusClient(uri=f"http://127.0.0.1:{self.port}", timeout=5)
                client.list_collections()
                client.close()
                return
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(1.0)
        self.stop()
        raise RuntimeError(f"milvus-server did not answer within {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        # the launcher's `milvus run standalone` can outlive its process group; left running, it holds
        # the internal components' fixed ports and the next session's server cannot start
        _kill_engine(self.data)
        self.log.close()


def _kill_engine(data: Path) -> None:
    """Kill the processes running the server's own copy of the Milvus binary (found by /proc cmdline:
    the data directory in it), which outlive its process group."""
    marker = str(data).encode()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline and b"milvus" in cmdline and int(entry.name) != os.getpid():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


# ------------------------------------------------------------------- one server for every xdist worker
#
# Two servers cannot run at once on one machine: the embedded etcd's peer port (2380) is fixed, and the
# second server never answers (tests/stores/test_two_process.py skipped in CI when both pytest-xdist
# workers started one). So the workers of one run share one server: the first to need it starts it, the
# others attach to it, and the last to let it go stops it. A lock file serialises them; a JSON file holds
# the server's URL, its process group and how many workers hold it.

_OWNED: dict[Path, MilvusServer] = {}  # the server this process started, by its run's directory


@contextlib.contextmanager
def _locked(path: Path):  # type: ignore[no-untyped-def]
    import fcntl

    with open(path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Held:
    """A worker's hold on the run's shared server: ``url`` is what ``Engine(store=…)`` opens."""

    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url


def acquire(root: Path) -> Held:
    """Hold the run's server (``root``: a directory every worker of the run sees), starting it when none
    runs. Raises RuntimeError when it cannot start (the caller skips)."""
    import json

    root.mkdir(parents=True, exist_ok=True)
    state = root / "server.json"
    with _locked(root / "server.lock"):
        info = json.loads(state.read_text()) if state.exists() else None
        if info is not None and not _alive(info["pid"]):
            info = None  # (a server left by a run that was killed)
        if info is None:
            data = root / f"server-{os.getpid()}" / "data"
            data.parent.mkdir(parents=True, exist_ok=True)
            server = MilvusServer(data)
            _OWNED[root] = server
            info = {"url": server.url, "pid": server.proc.pid, "data": str(server.data), "holders": 0}
        info["holders"] += 1
        state.write_text(json.dumps(info))
    return Held(root, info["url"])


def release(held: Held) -> None:
    """Let the server go; the last holder stops it (the process that started it, or any other)."""
    import json

    state = held.root / "server.json"
    with _locked(held.root / "server.lock"):
        if not state.exists():
            return
        info = json.loads(state.read_text())
        info["holders"] -= 1
        if info["holders"] > 0:
            state.write_text(json.dumps(info))
            return
        state.unlink()
        own = _OWNED.pop(held.root, None)
        if own is not None:
            own.stop()
            return
        _stop_foreign(int(info["pid"]), Path(info["data"]))


def _stop_foreign(pid: int, data: Path) -> None:
    """Stop a server another process started: its process group, then its engine's processes."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    end = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    _kill_engine(data)
