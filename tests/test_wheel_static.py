"""The built wheel carries the web playground's files (nlql/serve/static) and the integration modules."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_ships_the_playground(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                           cwd=tmp_path, env=env, text=True, capture_output=True, timeout=600)
    if built.returncode != 0 and ("No matching distribution" in built.stderr
                                  or "Could not find a version" in built.stderr):
        pytest.skip("the build backend (hatchling) cannot be installed here: " + built.stderr[-300:])
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = tmp_path.glob("nlql_engine-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    static = sorted(p.name for p in (ROOT / "nlql" / "serve" / "static").iterdir() if p.is_file())
    assert {"index.html", "playground.js", "playground.css"} <= set(static)
    for name in static:
        assert f"nlql/serve/static/{name}" in names
    for module in ("nlql/serve/app.py", "nlql/serve/openapi.py", "nlql/integrations/langchain.py",
                   "nlql/integrations/llamaindex.py", "nlql/execute/frames.py"):
        assert module in names
