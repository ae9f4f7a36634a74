"""SQLite: a third SQL dialect (:class:`SQLiteDialect`), written as flags and overrides only.

It exists to prove that the dialect base carries no other database's spelling, and for a future
store: every golden statement compiles to SQL that Python's ``sqlite3`` prepares
(``tests/sql/test_sqlite_dialect.py``). No SQLite store uses it yet.
"""

from __future__ import annotations

from nlql.sql.sqlite.dialect import SQLiteDialect

__all__ = ["SQLiteDialect"]
