"""The documentation site builds with `mkdocs build --strict` (no broken links, every page in the nav)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _mkdocs() -> list[str] | None:
    exe = Path(sys.executable).with_name("mkdocs")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("mkdocs")
    return [found] if found else None


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    mkdocs = _mkdocs()
    if mkdocs is None:
        pytest.skip("mkdocs is not installed (pip install 'nlql-engine[docs]')")
    pytest.importorskip("material")
    r = subprocess.run([*mkdocs, "build", "--strict", "-q", "-d", str(tmp_path / "site")], cwd=ROOT,
                       text=True, capture_output=True, timeout=300,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    for page in ("index", "quickstart", "language", "execution", "stores", "errors", "agents"):
        assert (tmp_path / "site" / page / "index.html").exists() or (tmp_path / "site" / f"{page}.html").exists() \
            or page == "index" and (tmp_path / "site" / "index.html").exists()
