#!/usr/bin/env python3
"""Set up a virtual environment for NLQL and run the demo or the test suite.

    python3 scripts/bootstrap.py demo    # set up .venv, then run `nlql demo` (real model, offline)
    python3 scripts/bootstrap.py test    # set up .venv, then run the whole test suite (2 workers)

Needs nothing but Python 3.10+ and pip. torch is installed first as the CPU build (torch==2.13.0), so
that sentence-transformers does not pull a multi-GB CUDA build. Set-up is skipped when .venv is current.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("NLQL_VENV", ROOT / ".venv"))
TORCH = "torch==2.13.0"


def _bin(name: str) -> Path:
    return VENV / ("Scripts" if os.name == "nt" else "bin") / name


def _run(*cmd: str | Path, env: dict[str, str] | None = None) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, env=env)


def setup() -> None:
    stamp = VENV / ".nlql-setup"
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest and _bin("nlql").exists():
        return
    if not _bin("python").exists():
        venv.create(VENV, with_pip=True)
    py = _bin("python")
    _run(py, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    _run(py, "-m", "pip", "install", "--quiet", TORCH)
    _run(py, "-m", "pip", "install", "--quiet", "-e", ".[dev]")
    stamp.write_text(digest)


def _test_workers(extra: list[str]) -> list[str]:
    """pytest-xdist's ``-n N --dist loadfile`` (each test file on one worker, so a module's fixtures are
    built once), N = ``$NLQL_TEST_WORKERS`` or the cores up to 2; nothing for one worker or when the
    caller chose (``-n`` among the arguments)."""
    if any(a.startswith(("-n", "--numprocesses", "--dist")) for a in extra):
        return []
    n = int(os.environ.get("NLQL_TEST_WORKERS", "").strip() or min(2, os.cpu_count() or 1))
    return ["-n", str(n), "--dist", "loadfile"] if n > 1 else []


def main() -> int:
    what = sys.argv[1] if len(sys.argv) > 1 else "test"
    extra = sys.argv[2:]
    setup()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if what == "setup":
        return 0
    if what == "demo":
        return subprocess.run([str(_bin("nlql")), "demo", *extra], cwd=ROOT, env=env).returncode
    if what == "test":
        cmd = [str(_bin("python")), "-m", "pytest", "-q", *_test_workers(extra), *extra]
        return subprocess.run(cmd, cwd=ROOT, env=env).returncode
    if what == "bench":
        return subprocess.run([str(_bin("python")), "bench/run_all.py", *extra], cwd=ROOT, env=env).returncode
    print(f"unknown command {what!r}: use demo, test, bench or setup", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
