"""DuckDB store: the second SQL dialect, in process, over its own tables or over data where it lies.

``DuckDBStore()`` (``store="duckdb"``) keeps everything in memory; ``DuckDBStore("file.duckdb")``
(``store="duckdb:///path/file.duckdb"``) in a file. Hybrid plans run as one DuckDB statement built by
:class:`~nlql.sql.duckdb.DuckDBDialect` (the same skeleton as PostgreSQL); filters compile to SQL with
NLQL's semantics over typed metadata; BM25 comes from term tables kept in the same transaction as the
rows. Nothing is downloaded at run time: cosine is DuckDB's built-in ``array_inner_product`` /
``array_cosine_distance`` (no ``vss``), BM25 is SQL over term tables (no ``fts``).

:meth:`DuckDBStore.from_table` runs NLQL over an existing DuckDB table or a Parquet file, read-only,
without copying it (:mod:`~nlql.stores.duckdb.external`).

- :mod:`~nlql.stores.duckdb.store` — :class:`DuckDBStore` (schema, reads, writes, knn, hybrid, info);
- :mod:`~nlql.stores.duckdb.external` — tables NLQL did not write: checks and the derived statistics;
- :mod:`~nlql.stores.duckdb.driver` — the import, transactions, Arrow loads, URL parsing.
"""

from __future__ import annotations

from nlql.stores.duckdb.store import DuckDBStore, from_url

__all__ = ["DuckDBStore", "from_url"]
