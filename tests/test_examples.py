"""Every script in examples/ runs, with the hash embedder, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def run(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run([sys.executable, str(EXAMPLES / script), *args], cwd=ROOT, env=full, text=True,
                          capture_output=True, timeout=300)


def test_quickstart() -> None:
    r = run("quickstart.py", "--embedder", "hash")
    assert r.returncode == 0, r.stderr
    assert "check: []" in r.stdout
    assert "recall: knn on rel" in r.stdout
    assert "1. [" in r.stdout and "rel=" in r.stdout


def test_agent_self_check_fixes_its_query() -> None:
    r = run("agent_self_check.py", env={"NLQL_EXAMPLE_EMBEDDER": "hash"})
    assert r.returncode == 0, r.stderr
    assert "unknown name 'rell'" in r.stdout and "unknown name 'module'" in r.stdout
    assert "   valid" in r.stdout
    assert 'WHERE rel >= 0.2 AND meta.module == "datetime"' in r.stdout
    assert "search: 3 hits" in r.stdout


@pytest.mark.parametrize("budget", ["150", "5"])
def test_rag_with_token_budget(budget: str) -> None:
    r = run("rag_with_token_budget.py", "--embedder", "hash", "--max-tokens", budget)
    assert r.returncode == 0, r.stderr
    assert "Answer the question using only these passages" in r.stdout
    assert "[secrets." in r.stdout or budget == "5"
    if budget == "5":
        assert "context: 1 passage," in r.stdout and "truncated" in r.stdout


def test_every_example_is_tested() -> None:
    tested = {"quickstart.py", "agent_self_check.py", "rag_with_token_budget.py"}
    # hybrid_postgres.py and duckdb_parquet.py are run by tests/sql/test_example_*.py
    assert {p.name for p in EXAMPLES.glob("*.py")} - {"hybrid_postgres.py", "duckdb_parquet.py"} <= tested
