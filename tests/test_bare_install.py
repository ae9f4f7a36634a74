"""A bare ``pip install nlql-engine`` (no extra) works: an Engine, the demo, BM25 with stemming, the CLI.

Builds the wheel, makes a fresh virtual environment with its own pip, installs the wheel *with* its
base dependencies from the configured package index (nothing from this environment), then runs what a
new user runs first. Skips, saying why, when the index cannot be reached. About a minute.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import json, sys
from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.errors import MissingDependencyError, NLQLError

engine = Engine(embedder=HashEmbedder())
engine.add_texts(["The dogs were running in the park.", "Cats sleep all day."], ids=["a", "b"],
                 metadatas=[{"year": 2020}, {"year": 2021}])
hits = engine.search('SELECT SENTENCE LET kw = BM25(content, "run") WHERE kw > 0 ORDER BY kw DESC')
out = {"bm25": [h.id for h in hits]}
meta = engine.search("SELECT SENTENCE WHERE meta.year >= 2021")
out["meta"] = [h.id for h in meta]
try:
    Engine()  # the default embedder needs the [onnx] extra
    out["default"] = "built"
except MissingDependencyError as exc:
    out["default"] = exc.hint
import importlib.util
out["torch"] = importlib.util.find_spec("torch") is not None
out["pysbd"] = importlib.util.find_spec("pysbd") is not None
print(json.dumps(out))
"""


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout)


def _clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "NLQL_EMBEDDER", "NLQL_DEBUG", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(HF_HUB_OFFLINE="1", COLUMNS="200", NLQL_CACHE_DIR=str(tmp_path / "cache"),
               HOME=str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return env


def _build_wheel(tmp_path: Path, env: dict[str, str]) -> Path:
    dist = tmp_path / "dist"
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
                 cwd=tmp_path, env=env)
    if built.returncode != 0:
        pytest.skip("the wheel cannot be built here (no build backend from the index): " + built.stderr[-300:])
    return next(dist.glob("nlql_engine-*.whl"))


def _fresh_venv(tmp_path: Path, requirement: str, env: dict[str, str]) -> Path:
    """A new virtual environment holding ``requirement`` installed from the package index; its bin dir."""
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, symlinks=os.name != "nt").create(target)
    bindir = target / ("Scripts" if os.name == "nt" else "bin")
    installed = _run([str(bindir / "python"), "-m", "pip", "install", "-q", requirement], cwd=tmp_path, env=env,
                     timeout=900)
    if installed.returncode != 0 and any(s in installed.stderr for s in (
            "No matching distribution", "Could not find a version", "NewConnectionError", "Network is unreachable")):
        pytest.skip("the package index cannot be reached: " + installed.stderr[-300:])
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return bindir


@pytest.mark.slow
def test_bare_install_runs_engine_demo_and_bm25(tmp_path: Path) -> None:
    env = _clean_env(tmp_path)
    wheel = _build_wheel(tmp_path, env)
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: MIT" in meta and "Classifier: Programming Language :: Python :: 3" in meta
    base = [line for line in meta.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert any("snowballstemmer" in line for line in base)
    assert not any("pysbd" in line for line in base)  # nothing in nlql imports it

    bindir = _fresh_venv(tmp_path, str(wheel), env)
    py = bindir / "python"

    work = tmp_path / "elsewhere"
    work.mkdir()
    demo = _run([str(bindir / "nlql"), "demo", "--embedder", "hash", "--quiet"], cwd=work, env=env)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-3000:]
    assert "ingested 522 documents" in demo.stdout and "Traceback" not in demo.stderr

    import json

    res = _run([str(py), "-c", SCRIPT], cwd=work, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["bm25"] == ["a#0"]  # "run" matches "running": the default analyzer stems on a bare install
    assert out["meta"] == ["b#0"]
    assert "nlql-engine[onnx]" in out["default"] and "--embedder hash" in out["default"], out["default"]
    assert out["torch"] is False and out["pysbd"] is False

    store = work / "store"
    (work / "notes.txt").write_text("Stemming makes runners find running.\n", encoding="utf-8")
    ing = _run([str(bindir / "nlql"), "ingest", str(work / "notes.txt"), "--store", str(store),
                "--embedder", "hash"], cwd=work, env=env)
    assert ing.returncode == 0, ing.stdout + ing.stderr
    q = _run([str(bindir / "nlql"), "query", 'SELECT SENTENCE LET kw = BM25(content, "runs") WHERE kw > 0',
              "--store", str(store), "--embedder", "hash", "--format", "jsonl"], cwd=work, env=env)
    assert q.returncode == 0 and "running" in q.stdout, q.stdout + q.stderr
    assert not (tmp_path / "home" / ".cache" / "Microsoft").exists()


ONNX_SCRIPT = r"""
import importlib.util, json, time
t = time.perf_counter()
from nlql import Engine
engine = Engine()  # the default embedder, from the [onnx] extra alone
engine.add_texts(["Cats sleep for most of the day.", "The stock market fell sharply on Monday.",
                  "du estimates the disk space used by each directory."], ids=["cats", "market", "du"])
hits = engine.search('SELECT DOCUMENT LET s = SIMILARITY(content, $q) ORDER BY s DESC LIMIT 1',
                     params={"q": "how much disk space does a folder use"})
print(json.dumps({"top": hits[0].doc_id, "model": engine.embedder.model_id, "seconds": time.perf_counter() - t,
                  "torch": importlib.util.find_spec("torch") is not None,
                  "st": importlib.util.find_spec("sentence_transformers") is not None}))
"""


@pytest.mark.slow
def test_the_onnx_extra_runs_the_default_model_without_torch(tmp_path: Path) -> None:
    """``pip install 'nlql-engine[onnx]'`` in a fresh environment: no torch, and ``Engine()`` embeds."""
    env = _clean_env(tmp_path)
    wheel = _build_wheel(tmp_path, env)
    bindir = _fresh_venv(tmp_path, f"{wheel}[onnx]", env)
    work = tmp_path / "elsewhere"
    work.mkdir()
    res = _run([str(bindir / "python"), "-c", ONNX_SCRIPT], cwd=work, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    import json

    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["torch"] is False and out["st"] is False
    assert out["model"] == "sentence-transformers/all-MiniLM-L6-v2@onnx-int8" and out["top"] == "du", out
    assert not (tmp_path / "home" / ".cache" / "Microsoft").exists()  # no telemetry database
