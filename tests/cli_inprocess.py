"""`nlql args…` in this process (``nlql``) or in a real subprocess (``nlql_process``), for the tests of
the command (tests/test_cli.py and others that check what the command prints).

In process, each call gets its own argv, working directory, environment, stdin and captured stdout and
stderr (not terminals, as when piped), and the CLI's debug state is reset, so a call sees what a fresh
`nlql` process would see; it saves the ~3 s of interpreter and import start-up per call.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_ENV = {"HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
_DROP = ("NLQL_DEBUG", "NLQL_EMBEDDER")


def nlql_process(*args: str, cwd: Path, stdin: str | None = None, env: dict[str, str] | None = None,
                 module: str = "nlql") -> subprocess.CompletedProcess[str]:
    """`python -m <module> args…` in a real subprocess."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                **_ENV, **(env or {})}
    for name in _DROP:
        full_env.pop(name, None)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=full_env, text=True,
                          input=stdin if stdin is not None else "", capture_output=True, timeout=300)


def nlql(*args: str, cwd: Path, stdin: str | None = None, env: dict[str, str] | None = None,
         module: str = "nlql") -> subprocess.CompletedProcess[str]:
    """`nlql args…` in this process, with what a fresh process would have (see the module docstring)."""
    if module != "nlql":
        return nlql_process(*args, cwd=cwd, stdin=stdin, env=env, module=module)
    from nlql import cli

    saved_env, saved_cwd, saved_stdin = dict(os.environ), os.getcwd(), sys.stdin
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        for name in _DROP:
            os.environ.pop(name, None)
        os.environ.update({**_ENV, **(env or {})})
        os.chdir(cwd)
        sys.stdin = io.StringIO(stdin or "")
        cli.STATE.debug = os.environ.get("NLQL_DEBUG", "") not in ("", "0")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:  # what the interpreter does with an uncaught exception (--debug)
                traceback.print_exc()
                code = 1
    finally:
        sys.stdin = saved_stdin
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        cli.STATE.debug = False
    return subprocess.CompletedProcess(["nlql", *args], code, out.getvalue(), err.getvalue())
