"""SQLite dialect (3.38+, the ``->>`` operator): the shared statement skeleton in flags, a TRANSFORMS
table and three small overrides, no copied method.

What SQLite spells otherwise, all here:

- placeholders ``?n``; casts ``CAST(x AS t)`` (the base spelling) over SQLite's storage classes
  (``TYPES``); floats have no NaN (a NaN result is NULL already: ``NAN = False``);
- no array type: an array parameter is bound as JSON text (:meth:`SQLiteDialect.driver_value`) and
  read with ``json_each`` (array membership, the query terms with their order, parallel arrays);
- scalar ``min``/``max`` for ``least``/``greatest``, ``instr`` for substring tests;
- a compound SELECT cannot hold a parenthesised member: the under-fill rows of a single arm are a
  subquery (``SINGLE_FILL``).

Three operations SQLite lacks are functions the connection registers (``sqlite3``'s
``create_function`` / ``create_aggregate``), named in :attr:`SQLiteDialect.FUNCTIONS`: the cosine
distance of two vectors, a float sum in a given order (SQLite 3.44+ spells ``sum(x ORDER BY y)``
itself), and ``regexp`` for the ``REGEXP`` operator. LIKE is case-insensitive for ASCII unless the
connection sets ``PRAGMA case_sensitive_like = ON`` (NLQL's LIKE is case-sensitive).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from nlql.sql.binder import Fragment, Param, Slot, join, sql
from nlql.sql.dialect import Dialect
from nlql.sql.filters import SQL_FILTER_OPS, Subject
from nlql.sql.sqlite.filters import subject

__all__ = ["SQLiteDialect"]


class SQLiteDialect(Dialect):
    """SQLite over a schema like the DuckDB store's (:meth:`schema`): JSON text for arrays, vectors
    and typed metadata."""

    NAME = "sqlite"
    STORE_NAME = "sqlite"
    PLACEHOLDER = "?{n}"
    NAN = False
    MATERIALIZED_CTE = True
    WINDOW_FUNCTIONS = True
    ORDERED_AGGREGATES = True  # through nlql_ordered_sum (FUNCTIONS)
    BM25_NATIVE = True
    MULTI_VECTOR_SIMILARITY = True
    GRAPH_CTE = True
    TEMPORAL_CTE = True
    FUSIONS = frozenset({"RRF", "INTERLEAVE", "SINGLE"})
    UNITS = frozenset({"SENTENCE", "SPAN"})
    FILTER_OPS = SQL_FILTER_OPS
    #: functions the connection must register: name → (arguments, what it computes)
    FUNCTIONS: ClassVar[dict[str, tuple[int, str]]] = {
        "nlql_cosine_distance": (2, "1 - cosine of two JSON vectors (NULL for a zero vector)"),
        "nlql_ordered_sum": (2, "aggregate: sum of x in the order of y"),
        "regexp": (2, "regexp(pattern, s): the REGEXP operator"),
    }
    TYPES: ClassVar[dict[str, str]] = {
        "text": "TEXT", "numeric": "REAL", "float8": "REAL", "bigint": "INTEGER", "integer": "INTEGER",
        "boolean": "INTEGER", "vector": "TEXT", "jsonb": "TEXT",
    }
    TRANSFORMS: ClassVar[dict[str, str]] = {
        **Dialect.TRANSFORMS,
        "cosine_distance": "nlql_cosine_distance({a}, {b})",
        "terms_with_order": "SELECT q.value, q.key + 1 FROM json_each({terms}) q",
        "any": "({x} IN (SELECT value FROM json_each({items})))",
        "contains": "(instr({s}, {needle}) > 0)",
        "regex": "({s} REGEXP {pattern})",
        "greatest": "max({a}, {b})",
        "least": "min({items})",
        "ordered_sum": "nlql_ordered_sum({x}, {order})",
    }
    SINGLE_FILL = (
        "\n  UNION ALL\n"
        "  SELECT * FROM (SELECT u.key, u.seq, u.position, {0:float8} AS score\n"
        "   FROM {units} u{docs_join}\n"
        "   WHERE {where} AND NOT EXISTS (SELECT 1 FROM {name} x WHERE x.key = u.key{kept})\n"
        "     AND (SELECT count(*) FROM {name} WHERE {own}) < {fetch}\n"
        "   ORDER BY u.seq, u.position LIMIT {fetch})"
    )

    def type_name(self, type_name: str) -> str:
        """Arrays are JSON text."""
        return "TEXT" if type_name.endswith("[]") else self.TYPES.get(type_name, type_name)

    def number_value(self, f: float) -> Any:
        return float(f)

    def stamp_value(self, us: int) -> Any:
        return int(us)

    def driver_value(self, value: Any) -> Any:
        """Lists and vectors as JSON text (``tolist`` for numpy arrays)."""
        if isinstance(value, np.ndarray):
            value = value.tolist()
        return json.dumps(value) if isinstance(value, (list, tuple)) else value

    def array_rows(self, arrays: Sequence[Param | Slot]) -> Fragment:
        """Parallel JSON arrays zipped on their index."""
        cols = ", ".join(f"a{i}.value" for i in range(len(arrays)))
        sources = [sql("json_each(", a, f") a{i}") + (f" ON a{i}.key = a0.key" if i else "")
                   for i, a in enumerate(arrays)]
        return sql(f"SELECT {cols} FROM ", join(" JOIN ", sources))

    def subject(self, path: tuple[str, ...]) -> Subject:
        return subject(path)

    # -------------------------------------------------------------------------------------- writes

    def schema(self, dim: int) -> list[str]:
        """The tables (created if missing): the columns the statements read."""
        t = self.table
        return [
            f"CREATE TABLE IF NOT EXISTS {t('docs')} (doc_id TEXT PRIMARY KEY, seq INTEGER NOT NULL,"
            " text TEXT NOT NULL, metadata TEXT NOT NULL, mflat TEXT NOT NULL, fold TEXT, num REAL, ts INTEGER)",
            f"CREATE TABLE IF NOT EXISTS {t('units')} (key INTEGER PRIMARY KEY, doc_id TEXT NOT NULL,"
            " position INTEGER NOT NULL, content TEXT NOT NULL, start INTEGER NOT NULL, \"end\" INTEGER NOT NULL,"
            " tail TEXT NOT NULL, seq INTEGER NOT NULL, fold TEXT, num REAL, ts INTEGER,"
            " embedding TEXT NOT NULL, nterms INTEGER NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {t('terms')} (term TEXT NOT NULL, key INTEGER NOT NULL,"
            " tf INTEGER NOT NULL, PRIMARY KEY (term, key))",
            f"CREATE TABLE IF NOT EXISTS {t('bm25')} (n INTEGER NOT NULL, total_len INTEGER NOT NULL)",
            *self.graph_schema(),
        ]

    def key_value_table(self, suffix: str) -> str:
        return f"CREATE TABLE IF NOT EXISTS {self.table(suffix)} (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
