"""Golden SQL per arm and per fused plan, per dialect, side by side: ``fixtures/sql/<name>.nlql`` →
``<name>.sql`` (PostgreSQL) and ``<name>.<dialect>.sql`` (every other dialect).

Each golden holds the lowering decision, each arm's SQL, the fusion, the whole statement and its
parameter list (values shown, query vectors redacted: they exist only at execution). No database and
no driver is needed: a dialect compiles from the plan alone (``test_goldens_need_no_driver`` proves it
with the drivers made unimportable). ``pytest --update-goldens`` rewrites them.

Header lines ``--! key: <json>`` set ``now`` (the engine clock, ISO) and ``mode`` (``exact``/``index``;
a dialect without a vector index compiles ``exact``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from nlql.check import validate
from nlql.plan.planner import build_plan
from nlql.pushdown import Filter, NativeFilter
from nlql.sql import explain_sql
from nlql.sql.dialect import Dialect
from nlql.sql.duckdb import DuckDBDialect
from nlql.sql.postgres import PostgresDialect

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sql"
CASES = sorted(FIXTURES.glob("*.nlql"))
CLOCK = datetime(2025, 6, 11, 12, 0, tzinfo=timezone.utc)


class Target:
    """What the planner reads of a store, made from a dialect alone (no database, no driver)."""

    def __init__(self, dialect: Dialect, name: str, exact: bool) -> None:
        self.dialect = dialect
        self.capabilities = dialect.capabilities(NAME=name, EXACT=exact, SCORE_THRESHOLD=True, BM25=True,
                                                 SQL_ARMS=True)

    def compile_filter(self, flt: Filter) -> NativeFilter:
        return self.dialect.compile_filter(flt)


def _postgres() -> Target:
    return Target(PostgresDialect(semantic_mode="index"), "pgvector", exact=False)


def _duckdb() -> Target:
    return Target(DuckDBDialect(dim=384), "duckdb", exact=True)


DIALECTS: dict[str, tuple[Callable[[], Target], str]] = {"postgres": (_postgres, ".sql"),
                                                          "duckdb": (_duckdb, ".duckdb.sql")}


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").split("\n")
    header: dict[str, Any] = {}
    while lines and lines[0].startswith("--!"):
        key, _, value = lines.pop(0)[3:].partition(":")
        header[key.strip()] = json.loads(value)
    return "\n".join(lines).strip(), header


def golden_text(query: str, header: dict[str, Any], target: Target) -> str:
    """What a golden file holds for one query on one dialect."""
    now = datetime.fromisoformat(header["now"]) if "now" in header else CLOCK
    plan = build_plan(validate(query, params={}), params=None, store=target, now=now, functions={})  # type: ignore[arg-type]
    low = plan.lowering or {"strategy": "none", "reason": "not a hybrid plan"}
    out = [f"-- query: {plan.canonical}"]
    if low["strategy"] != "sql":
        out.append(f"-- lowering: {low['strategy']} (arm by arm) because {low['reason']}")
        return "\n".join(out) + "\n"
    dialect = target.dialect
    mode = header.get("mode", "exact") if dialect.VECTOR_ORDER else "exact"
    info = explain_sql(plan, dialect, mode=mode)
    assert info is not None
    out.append(f"-- lowering: sql ({low['reason']}), semantic arms: {mode}")
    for arm in info["arms"]:
        out.append(f"-- arm {arm['binding']} ({arm['kind']}, k={arm['k']}):")
        out.append(arm["sql"])
    out.append(f"-- fusion: {info['fusion']['formula']}")
    out.append(info["fusion"]["sql"])
    out.append(f"-- statement ({info['rows']} rows):")
    out.append(info["statement"] + ";")
    out.append("-- parameters:")
    compiled = dialect.compile(plan.lowered, mode)
    for line in compiled.binder.describe(show=lambda p: True):
        out.append(f"-- {line}" + ("" if " = " in line else " = <redacted>"))
    return "\n".join(out) + "\n"


def test_fixture_count() -> None:
    assert len(CASES) >= 15
    lowered = [p for p in CASES if not p.stem.startswith("engine_")]
    assert len(lowered) >= 10


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_sql_golden(path: Path, dialect: str, update_goldens: bool) -> None:
    make, suffix = DIALECTS[dialect]
    query, header = _read(path)
    got = golden_text(query, header, make())
    out = path.with_suffix(suffix)
    if update_goldens:
        out.write_text(got, encoding="utf-8")
        return
    assert out.exists(), f"no golden file {out.name}; run pytest --update-goldens"
    assert got == out.read_text(encoding="utf-8")
    # the lowering decision matches the fixture's name (a GRAPH arm lowers only where the dialect reads
    # the store's entity tables)
    lowers = not path.stem.startswith("engine_") and ("graph" not in path.stem or make().dialect.GRAPH_CTE)
    assert ("-- lowering: sql" in got) == lowers


def test_goldens_need_no_driver() -> None:
    """Every dialect compiles every golden with the database drivers made unimportable."""
    code = (
        "import sys\n"
        "for m in ('psycopg', 'duckdb', 'pgserver'):\n"
        "    sys.modules[m] = None\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "import test_sql_goldens as g\n"
        "for name, (make, suffix) in g.DIALECTS.items():\n"
        "    for path in g.CASES:\n"
        "        query, header = g._read(path)\n"
        "        assert g.golden_text(query, header, make()) == path.with_suffix(suffix).read_text(), path\n"
        "print('ok', len(g.DIALECTS) * len(g.CASES))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=str(Path(__file__).resolve().parents[2]))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok ")
