"""examples/duckdb_parquet.py runs offline with the hash embedder over a Parquet file it writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def test_duckdb_parquet_example() -> None:
    pytest.importorskip("duckdb")
    pytest.importorskip("pyarrow")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1", "NLQL_EXAMPLE_EMBEDDER": "hash"}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "duckdb_parquet.py"), "--docs", "80"],
                       cwd=ROOT, env=env, text=True, capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "passages to passages.parquet" in out
    assert "lowering: sql (one statement on duckdb)" in out and "sql (duckdb):" in out
    assert "arm sem (semantic, k=100):" in out and "arm kw (bm25, k=100):" in out
    assert "array_cosine_distance(u.embedding, $" in out and "WHERE term = $1::VARCHAR" in out  # (a scan per term)
    assert "search: 5 hits (sql," in out
    assert "writing is refused: duckdb: this store reads" in out
    assert "the file is unchanged: True" in out
    assert "same rows: True" in out
    assert "same documents for a filter query: True" in out
    assert "split a string" not in out.split("lowering:")[1].split("search:")[0]  # no value in the SQL
