"""Golden SQL per arm and per fused plan: ``fixtures/sql/<name>.nlql`` → ``<name>.sql``.

Each golden holds the lowering decision, each arm's SQL, the fusion, the whole statement and its
parameter list (values shown, query vectors redacted: they exist only at execution). No database is
needed: the PostgreSQL dialect compiles from the plan alone. ``pytest --update-goldens`` rewrites them.

Header lines ``--! key: <json>`` set ``now`` (the engine clock, ISO) and ``mode`` (``exact``/``index``).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg")

from nlql.check import validate  # noqa: E402
from nlql.plan.planner import build_plan  # noqa: E402
from nlql.sql import explain_sql  # noqa: E402
from nlql.stores.pgvector import PgVectorStore  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sql"
CASES = sorted(FIXTURES.glob("*.nlql"))
CLOCK = datetime(2025, 6, 11, 12, 0, tzinfo=timezone.utc)


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").split("\n")
    header: dict[str, Any] = {}
    while lines and lines[0].startswith("--!"):
        key, _, value = lines.pop(0)[3:].partition(":")
        header[key.strip()] = json.loads(value)
    return "\n".join(lines).strip(), header


def store() -> PgVectorStore:
    return PgVectorStore("postgresql://nlql-golden.invalid/none")  # never connects: compile only


def golden_text(query: str, header: dict[str, Any]) -> str:
    """What a golden file holds for one query."""
    s = store()
    now = datetime.fromisoformat(header["now"]) if "now" in header else CLOCK
    plan = build_plan(validate(query, params={}), params=None, store=s, now=now, functions={})
    low = plan.lowering or {"strategy": "none", "reason": "not a hybrid plan"}
    out = [f"-- query: {plan.canonical}"]
    if low["strategy"] != "sql":
        out.append(f"-- lowering: {low['strategy']} (arm by arm) because {low['reason']}")
        return "\n".join(out) + "\n"
    info = explain_sql(plan, s, mode=header.get("mode", "exact"))
    assert info is not None
    out.append(f"-- lowering: sql ({low['reason']}), semantic arms: {header.get('mode', 'exact')}")
    for arm in info["arms"]:
        out.append(f"-- arm {arm['binding']} ({arm['kind']}, k={arm['k']}):")
        out.append(arm["sql"])
    out.append(f"-- fusion: {info['fusion']['formula']}")
    out.append(info["fusion"]["sql"])
    out.append(f"-- statement ({info['rows']} rows):")
    out.append(info["statement"] + ";")
    out.append("-- parameters:")
    dialect = s.dialect
    assert dialect is not None
    compiled = dialect.compile(plan.lowered, header.get("mode", "exact"))
    for line in compiled.binder.describe(show=lambda p: True):
        out.append(f"-- {line}" + ("" if " = " in line else " = <redacted>"))
    return "\n".join(out) + "\n"


def test_fixture_count() -> None:
    assert len(CASES) >= 15
    lowered = [p for p in CASES if not p.stem.startswith("engine_")]
    assert len(lowered) >= 10


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_sql_golden(path: Path, update_goldens: bool) -> None:
    query, header = _read(path)
    got = golden_text(query, header)
    out = path.with_suffix(".sql")
    if update_goldens:
        out.write_text(got, encoding="utf-8")
        return
    assert out.exists(), f"no golden file {out.name}; run pytest --update-goldens"
    assert got == out.read_text(encoding="utf-8")
    # the lowering decision matches the fixture's name
    assert ("-- lowering: sql" in got) != path.stem.startswith("engine_")
