"""DuckDB dialect: the same statement skeleton as PostgreSQL, in flags, a TRANSFORMS table and overrides.

DuckDB runs the whole hybrid skeleton (MATERIALIZED CTEs, window functions, ordered aggregates,
``unnest … WITH ORDINALITY``, ``$n`` placeholders) as PostgreSQL does; what differs is spelled here:

- cosine: ``array_inner_product`` of the stored L2-normalised ``FLOAT[dim]`` vectors (built into DuckDB,
  no extension), or ``array_cosine_distance`` over a table NLQL did not write (``normalized=False``);
  DuckDB has no vector index without the ``vss`` extension, which NLQL never downloads: semantic arms
  are exact scans;
- types: ``DOUBLE`` for numbers (the typed metadata stores Python floats), ``VARCHAR``, ``FLOAT[dim]``;
- LIKE takes ``ESCAPE '\\'`` (DuckDB has no default escape character); regular expressions are RE2
  (``regexp_matches(s, p, 's')``: ``.`` matches a newline, as in PostgreSQL);
- strings compare in byte order (code-point order for UTF-8) without a collation;
- metadata views read a ``MAP(VARCHAR, STRUCT(…))`` (:mod:`nlql.sql.duckdb.filters`);
- writes: bulk loads from an Arrow relation, no advisory lock (a DuckDB file has one writing process).
"""

from __future__ import annotations

import string
from typing import Any, ClassVar

from nlql.sql.codec import TextCodec
from nlql.sql.dialect import Dialect
from nlql.sql.duckdb.filters import subject
from nlql.sql.filters import SQL_FILTER_OPS, Subject

__all__ = ["DuckDBDialect"]

_PUNCT = frozenset(string.punctuation)


class DuckDBDialect(Dialect):
    """DuckDB 1.1+ over :class:`~nlql.stores.duckdb.DuckDBStore`'s schema.

    Args:
        table_prefix: The store's tables (``<p>_units``, ``<p>_docs``, ``<p>_terms``, ``<p>_bm25``).
        dim: The vectors' dimension (the type of a query vector, ``FLOAT[dim]``).
        normalized: The stored vectors are L2-normalised (cosine is their inner product); else the
            cosine is computed (a zero vector has none: NaN, read as distance 1).
        analyzer, codec: see :class:`~nlql.sql.dialect.Dialect`.
    """

    NAME = "duckdb"
    STORE_NAME = "duckdb"
    PLACEHOLDER_STYLE = "numbered"
    CAST_OPERATOR = True
    VECTOR_ORDER = False
    MATERIALIZED_CTE = True
    WINDOW_FUNCTIONS = True
    ORDERED_AGGREGATES = True
    BM25_NATIVE = True
    MULTI_VECTOR_SIMILARITY = True
    ADVISORY_LOCKS = False
    FUSIONS = frozenset({"RRF", "INTERLEAVE", "SINGLE"})
    UNITS = frozenset({"SENTENCE", "SPAN"})
    FILTER_OPS = SQL_FILTER_OPS
    TYPES: ClassVar[dict[str, str]] = {
        "text": "VARCHAR", "text[]": "VARCHAR[]", "numeric": "DOUBLE", "numeric[]": "DOUBLE[]",
        "float8": "DOUBLE", "bigint": "BIGINT", "bigint[]": "BIGINT[]", "boolean": "BOOLEAN",
        "boolean[]": "BOOLEAN[]",
    }
    TRANSFORMS: ClassVar[dict[str, str]] = {
        **Dialect.TRANSFORMS,
        "cosine_distance": "(1 - array_inner_product({a}, {b})::DOUBLE)",
        "first_place": "min(ARRAY[rank, arm])",  # lists compare element by element
        "any": "({x} = ANY({items}))",
        "contains": "(strpos({s}, {needle}) > 0)",
        "regex": "regexp_matches({s}, {pattern}, 's')",
    }

    def __init__(self, table_prefix: str = "nlql", *, dim: int | None = None, normalized: bool = True,
                 analyzer: Any = None, codec: TextCodec | None = None) -> None:
        super().__init__(table_prefix, analyzer=analyzer, semantic_mode="exact", codec=codec)
        self.dim = dim
        self.normalized = normalized

    def type_name(self, type_name: str) -> str:
        if type_name == "vector":
            return f"FLOAT[{self.dim}]" if self.dim else "FLOAT[]"
        return self.TYPES.get(type_name, type_name)

    def fn(self, name: str, **holes: Any) -> Any:
        if name == "cosine_distance" and not self.normalized:
            from nlql.sql.binder import template

            return template("array_cosine_distance({a}, {b})::DOUBLE", **holes)
        return super().fn(name, **holes)

    def number_value(self, f: float) -> Any:
        return float(f)

    def stamp_value(self, us: int) -> Any:
        return int(us)

    @staticmethod
    def regex_escape(c: str) -> str:
        """RE2: a backslash before ASCII punctuation makes it literal (and is refused before letters)."""
        return "\\" + c if c in _PUNCT else c

    def subject(self, path: tuple[str, ...]) -> Subject:
        return subject(path)

    # -------------------------------------------------------------------------------------- writes

    def schema(self, dim: int) -> list[str]:
        """The tables (created if missing). ``mflat`` is a MAP of typed records; ``metadata`` the exact
        JSON text; keys come from a sequence."""
        t = self.table
        record = "STRUCT(s VARCHAR, f VARCHAR, n DOUBLE, t BIGINT, b BOOLEAN)"
        return [
            f"CREATE SEQUENCE IF NOT EXISTS {t('keys')}",
            f"CREATE TABLE IF NOT EXISTS {t('docs')} ("
            " doc_id VARCHAR NOT NULL, seq BIGINT NOT NULL, text VARCHAR NOT NULL,"
            f" metadata VARCHAR NOT NULL, mflat MAP(VARCHAR, {record}) NOT NULL,"
            " fold VARCHAR, num DOUBLE, ts BIGINT)",
            f"CREATE TABLE IF NOT EXISTS {t('units')} ("
            " key BIGINT NOT NULL, doc_id VARCHAR NOT NULL, position INTEGER NOT NULL, content VARCHAR NOT NULL,"
            " start INTEGER NOT NULL, \"end\" INTEGER NOT NULL, tail VARCHAR NOT NULL, seq BIGINT NOT NULL,"
            f" fold VARCHAR, num DOUBLE, ts BIGINT, embedding FLOAT[{int(dim)}] NOT NULL,"
            " nterms INTEGER NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {t('terms')} (term VARCHAR NOT NULL, key BIGINT NOT NULL, tf INTEGER NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {t('bm25')} (n BIGINT NOT NULL, total_len BIGINT NOT NULL)",
        ]

    def key_value_table(self, suffix: str) -> str:
        return f"CREATE TABLE IF NOT EXISTS {self.table(suffix)} (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)"
