"""PostgreSQL + pgvector: the dialect, the typed views its filters read, and the text codec it stores.

- :mod:`nlql.sql.postgres.dialect` — :class:`PostgresDialect` (flags, ``TRANSFORMS``, the overrides).
- :mod:`nlql.sql.postgres.filters` — the typed views of the pgvector schema for pushed filters.
- :mod:`nlql.sql.codec` — the text escape and the typed flattened metadata (shared with DuckDB).
"""

from __future__ import annotations

from nlql.sql.codec import escape_text, flatten_metadata, path_key, unescape_text
from nlql.sql.dialect import quote_ident
from nlql.sql.postgres.dialect import PostgresDialect, compile_where, describe_params, filter_sql
from nlql.sql.postgres.filters import PGVECTOR_OPS, like_sql

__all__ = ["PGVECTOR_OPS", "PostgresDialect", "compile_where", "describe_params", "escape_text",
           "filter_sql", "flatten_metadata", "like_sql", "path_key", "quote_ident", "unescape_text"]
