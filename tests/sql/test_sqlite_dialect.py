"""The proof that the dialect base carries no other database's spelling: a SQLite dialect written as
flags and overrides only (``nlql/sql/sqlite/``) compiles every golden query that lowers on PostgreSQL
and DuckDB, and Python's ``sqlite3`` prepares (``EXPLAIN``) and runs each statement against the schema.

SQLite lacks three operations; the test registers them as Python functions, as a store would
(``SQLiteDialect.FUNCTIONS``). A few rows are loaded so that every CTE has something to read.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import sqlite3
from pathlib import Path

import pytest
import test_sql_goldens as goldens

from nlql.check import validate
from nlql.plan.planner import build_plan
from nlql.sql.binder import Slot
from nlql.sql.dialect import Dialect
from nlql.sql.sqlite import SQLiteDialect

DIM = 4


def _cosine_distance(a: str, b: str) -> float | None:
    x, y = json.loads(a), json.loads(b)
    nx, ny = math.sqrt(sum(v * v for v in x)), math.sqrt(sum(v * v for v in y))
    if nx == 0 or ny == 0:
        return None  # no cosine: the statement reads NULL as distance 1
    return 1 - sum(p * q for p, q in zip(x, y, strict=True)) / (nx * ny)


class _OrderedSum:
    def __init__(self) -> None:
        self.items: list[tuple[float, float]] = []

    def step(self, x: float, order: float) -> None:
        if x is not None:
            self.items.append((order, x))

    def finalize(self) -> float | None:
        if not self.items:
            return None
        total = 0.0
        for _, x in sorted(self.items, key=lambda t: t[0]):
            total += x
        return total


def _connect(d: SQLiteDialect) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.create_function("nlql_cosine_distance", 2, _cosine_distance, deterministic=True)
    conn.create_aggregate("nlql_ordered_sum", 2, _OrderedSum)  # type: ignore[arg-type]
    conn.create_function("regexp", 2, lambda p, s: s is not None and re.search(p, s, re.S) is not None,
                         deterministic=True)
    conn.execute("PRAGMA case_sensitive_like = ON")
    for ddl in d.schema(DIM):
        conn.execute(ddl)
    conn.execute(d.key_value_table("meta"))
    flat = json.dumps({'["year"]': {"n": 2021.0}, '["tag"]': {"s": "news", "f": "news"}})
    conn.execute(f"INSERT INTO {d.table('docs')} VALUES ('d1', 1, 'Alan Turing: solar.', '{{}}', ?, NULL, NULL, NULL)",
                 [flat])
    conn.execute(f"INSERT INTO {d.table('units')} VALUES (1, 'd1', 0, 'Alan Turing: solar.', 0, 18, '', 1,"
                 " NULL, NULL, NULL, '[1, 0, 0, 0]', 3)")
    conn.executemany(f"INSERT INTO {d.table('terms')} VALUES (?, 1, 1)", [("alan",), ("ture",), ("solar",)])
    conn.execute(f"INSERT INTO {d.table('bm25')} VALUES (1, 3)")
    conn.execute(f"INSERT INTO {d.table('entity_links')} VALUES ('d1', 0, 'alan turing', 'Alan Turing')")
    conn.execute(f"INSERT INTO {d.table('entity_edges')} VALUES ('alan turing', 'turing', 1)")
    return conn


def _statements():  # type: ignore[no-untyped-def]
    d = SQLiteDialect()
    target = goldens.Target(d, "sqlite", exact=True)
    for path in goldens.CASES:
        query, header = goldens._read(path)
        plan = build_plan(validate(query, params={}), params=None, store=target,  # type: ignore[arg-type]
                          now=goldens.CLOCK, functions={})
        yield path, plan


@pytest.mark.parametrize("path", goldens.CASES, ids=lambda p: p.stem)
def test_sqlite_prepares_every_golden_statement(path: Path) -> None:
    d = SQLiteDialect()
    (plan,) = [p for q, p in _statements() if q == path]
    lowers = not path.stem.startswith("engine_")
    assert ((plan.lowering or {}).get("strategy") == "sql") == lowers, plan.lowering
    if not lowers:
        return
    compiled = d.compile(plan.lowered, "exact")
    text = compiled.text
    assert "::" not in text and "ANY(" not in text and "unnest" not in text and "$" not in text
    slots = {p.key: [0.5, 0.5, 0.0, 0.0] for p in compiled.binder.params if isinstance(p, Slot)}
    params = compiled.params(slots)
    conn = _connect(d)
    conn.execute("EXPLAIN " + text, params).fetchall()  # prepared: every name, function and type known
    rows = conn.execute(text, params).fetchall()
    cur = conn.execute(text, params)
    names = [c[0] for c in cur.description]
    assert {"key", "doc_id", "position", "content", "metadata", "fused"} <= set(names)
    assert len(rows) <= plan.lowered.fetch
    # an empty database answers every statement with no rows
    empty = sqlite3.connect(":memory:")
    for name, (n, _) in d.FUNCTIONS.items():
        if name == "nlql_ordered_sum":
            empty.create_aggregate(name, n, _OrderedSum)  # type: ignore[arg-type]
        else:
            empty.create_function(name, n, lambda *a: None)
    for ddl in d.schema(DIM):
        empty.execute(ddl)
    assert empty.execute(text, params).fetchall() == []


def test_a_lowered_hybrid_finds_the_loaded_row() -> None:
    """Not only prepared: the RRF of BM25 and SIMILARITY ranks the one loaded sentence with both arms,
    its score the sum of both arms' 1 / (60 + 1)."""
    d = SQLiteDialect()
    (plan,) = [p for q, p in _statements() if q.stem == "rrf_basic"]
    compiled = d.compile(plan.lowered, "exact")
    slots = {p.key: [1.0, 0.0, 0.0, 0.0] for p in compiled.binder.params if isinstance(p, Slot)}
    cur = _connect(d).execute(compiled.text, compiled.params(slots))
    rows = cur.fetchall()
    col = {c[0]: i for i, c in enumerate(cur.description)}
    assert [r[col["doc_id"]] for r in rows] == ["d1"]
    assert rows[0][col["arm_rows_1"]] == 1 and rows[0][col["arm_rows_2"]] == 1
    assert rows[0][col["fused"]] == pytest.approx(2 / 61)


def test_the_sqlite_dialect_is_flags_and_overrides_only() -> None:
    """No private method of the base is copied: the subclass defines no ``_name`` and no ``visit_``."""
    own = {n for n, v in vars(SQLiteDialect).items() if inspect.isfunction(v)}
    assert not {n for n in own if n.startswith("_") or n.startswith("visit_")}
    assert own <= {n for n in dir(Dialect)} | {"schema", "key_value_table"}
