"""examples/hybrid_postgres.py runs offline with the hash embedder and its own PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def test_hybrid_postgres_example() -> None:
    pytest.importorskip("pgserver")
    pytest.importorskip("psycopg")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1", "NLQL_EXAMPLE_EMBEDDER": "hash"}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "hybrid_postgres.py"), "--docs", "120"],
                       cwd=ROOT, env=env, text=True, capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "lowering: sql (one statement on postgres)" in out
    assert "arm sem (semantic, k=100):" in out and "arm kw (bm25, k=100):" in out
    assert "fusion: RRF score = 1/(60 + rank_sem) + 1/(60 + rank_kw)" in out
    assert "unnest($1::text[])" in out and "parameters (values redacted):" in out
    assert "search: 5 hits (sql," in out
    assert "same rows in the same order: True" in out
    assert "split a string" not in out.split("lowering:")[1].split("search:")[0]  # no value in the SQL
