"""DuckDB: the second SQL dialect (:class:`DuckDBDialect`) and the typed views its filters read."""

from __future__ import annotations

from nlql.sql.duckdb.dialect import DuckDBDialect

__all__ = ["DuckDBDialect"]
