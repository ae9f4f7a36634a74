"""The house rules that keep the layers apart: the store registry and the import-linter contracts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nlql import Engine, NLQLError
from nlql.embedders import HashEmbedder
from nlql.stores import REGISTRY, MemoryStore, entry, open_store, store_names

ROOT = Path(__file__).resolve().parent.parent


def _lint_imports() -> str:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (pip install import-linter)")
    return exe


def test_layer_contracts_hold() -> None:
    done = subprocess.run([_lint_imports(), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "broken" not in done.stdout.lower().replace("0 broken", "")


def test_a_broken_contract_fails(tmp_path: Path) -> None:
    # the same linter, with one more contract that today's code breaks: the engine imports the executor
    config = (ROOT / "pyproject.toml").read_text() + '''
[[tool.importlinter.contracts]]
name = "deliberately broken: the engine may not import the executor"
type = "forbidden"
source_modules = ["nlql.engine"]
forbidden_modules = ["nlql.execute"]
'''
    path = tmp_path / "pyproject.toml"
    path.write_text(config)
    done = subprocess.run([_lint_imports(), "--no-cache", "--config", str(path)], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode != 0
    assert "deliberately broken" in done.stdout and "BROKEN" in done.stdout


def test_registry_rows_are_complete() -> None:
    names = [e.name for e in REGISTRY]
    assert len(set(names)) == len(names) and names[0] == "memory"
    for e in REGISTRY:
        assert e.module.startswith("nlql.stores.") and e.cls.endswith("Store")
        assert e.extra is None or e.extra in (ROOT / "pyproject.toml").read_text()
    assert "memory" in store_names() and "pgvector" not in store_names()  # a server store opens by URL


def test_unknown_url_scheme_is_an_error_naming_the_known_ones(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(NLQLError) as err:
        Engine(embedder=HashEmbedder(dim=8), store="nosuchdb:///x.db", warm_up=False)
    assert "nosuchdb://" in str(err.value) and "postgresql://" in (err.value.hint or "")
    assert list(tmp_path.iterdir()) == []  # nothing was created in the working directory


def test_bare_unknown_word_is_an_error_with_did_you_mean(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(NLQLError) as err:
        open_store("qdrnat")
    assert "did you mean 'qdrant'" in (err.value.hint or "")
    with pytest.raises(NLQLError):
        open_store("")
    assert list(tmp_path.iterdir()) == []
    fresh = open_store("./fresh")
    assert isinstance(fresh, MemoryStore) and fresh.path is not None and fresh.path.name == "fresh"


def test_registered_names_open_their_store() -> None:
    assert isinstance(open_store("memory"), MemoryStore)
    assert entry("memory").load() is MemoryStore


def test_the_engine_and_the_executor_never_probe_a_store() -> None:
    """docs/architecture.md: the engine and the executor ask declared capabilities; no ``getattr`` or
    ``hasattr`` on a store, a store's parts or a BM25 source (``self.store``, ``run.store``, ``run.bm25``…)."""
    import ast

    probes = []
    for path in [ROOT / "nlql" / "engine.py", *sorted((ROOT / "nlql" / "execute").glob("*.py"))]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # a proxy's ``__getattr__`` (execute/guard.py's DeadlineStore) forwards every attribute the
        # engine names: delegation, not a probe; everything else in the file is still checked
        delegating = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "__getattr__"
                      for n in ast.walk(f)}
        for node in ast.walk(tree):
            if id(node) in delegating:
                continue
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args):
                target = ast.unparse(node.args[0])
                if any(word in target for word in ("store", "bm25", "index", "table", "matches")):
                    probes.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not probes, probes


def test_one_l2_normaliser() -> None:
    """docs/architecture.md: one L2 normaliser (nlql.values.normalize_rows); no module of the engine, the
    executor, the embedders or the table stores divides by its own norms."""
    offenders = []
    for path in sorted((ROOT / "nlql").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(ROOT).as_posix()
        if rel == "nlql/values.py" or rel.startswith("nlql/stores/duckdb/"):  # (the one; DuckDB's in-place sources)
            continue
        if any("linalg.norm(" in line and "keepdims=True" in line for line in text.splitlines()):
            offenders.append(rel)
    assert not offenders, offenders


def test_a_plan_is_frozen() -> None:
    """docs/architecture.md: a Plan is frozen; nothing writes to it after planning."""
    from nlql.plan.nodes import Plan

    assert Plan.__dataclass_params__.frozen  # type: ignore[attr-defined]
