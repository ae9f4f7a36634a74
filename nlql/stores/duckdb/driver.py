"""duckdb glue: the import, statements with bound values, Arrow relations for bulk loads, URLs."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from nlql.errors import MissingDependencyError, NLQLError
from nlql.sql.binder import Binder, Fragment

__all__ = ["arrow_table", "import_duckdb", "parse_url", "registered", "render"]

_names = itertools.count(1)


def import_duckdb() -> Any:
    try:
        import duckdb
    except ImportError as exc:
        raise MissingDependencyError("duckdb", "duckdb") from exc
    return duckdb


def import_arrow() -> Any:
    try:
        import pyarrow
    except ImportError as exc:
        raise MissingDependencyError("duckdb", "pyarrow") from exc
    return pyarrow


def render(dialect: Any, frag: Fragment | str) -> tuple[str, list[Any]]:
    """A statement with DuckDB's numbered placeholders (``$1``), and its values."""
    if isinstance(frag, str):
        return frag, []
    binder = Binder(dialect)
    return binder.render(frag), binder.values


@contextmanager
def registered(conn: Any, table: Any) -> Iterator[str]:
    """An Arrow table visible to SQL under a fresh name for the duration of the block."""
    name = f"nlql_in_{next(_names)}"
    conn.register(name, table)
    try:
        yield name
    finally:
        conn.unregister(name)


def arrow_table(columns: dict[str, Any], types: dict[str, Any]) -> Any:
    """An Arrow table from Python columns with explicit types."""
    pa = import_arrow()
    return pa.table({k: pa.array(v, type=types[k]) for k, v in columns.items()})


def record_type() -> Any:
    """The Arrow type of a typed metadata record (``nlql.sql.codec``)."""
    pa = import_arrow()
    return pa.struct([("s", pa.string()), ("f", pa.string()), ("n", pa.float64()), ("t", pa.int64()),
                      ("b", pa.bool_())])


def parse_url(url: str) -> dict[str, Any]:
    """``DuckDBStore`` arguments of a store string.

    ``duckdb`` / ``duckdb://`` / ``duckdb:///:memory:`` — in memory; ``duckdb:///abs/file.duckdb`` or
    ``duckdb://rel/file.duckdb`` — a file; query parameters ``table``, ``text``, ``vector``, ``id``,
    ``metadata`` (comma-separated), ``read_only`` and ``table_prefix`` — e.g.
    ``duckdb:///data/docs.parquet?text=body&vector=embedding&id=id&metadata=year,lang`` reads a Parquet
    file in place (its path is the table).

    >>> parse_url("duckdb:///tmp/x.duckdb")
    {'path': '/tmp/x.duckdb'}
    >>> parse_url("duckdb:///d/a.parquet?text=t&vector=v&metadata=y,z")["table"]
    '/d/a.parquet'
    """
    if url.strip().lower() in ("duckdb", "duckdb:", "duckdb://"):
        return {"path": None}
    parts = urlsplit(url)
    if parts.scheme.lower() != "duckdb":
        raise NLQLError(f"not a DuckDB store URL: {url!r}", hint="write duckdb:///path/file.duckdb")
    path = unquote((parts.netloc or "") + (parts.path or "")) or None
    if path is not None and path.startswith("//"):  # duckdb:///{absolute path} has four slashes
        path = path[1:]
    if path in (":memory:", "/:memory:"):
        path = None
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    known = {"table", "text", "vector", "id", "metadata", "read_only", "table_prefix"}
    unknown = sorted(set(query) - known)
    if unknown:
        raise NLQLError(f"unknown DuckDB store option {unknown[0]!r} in {url!r}",
                        hint=f"known options: {', '.join(sorted(known))}")
    out: dict[str, Any] = {"path": path}
    if path is not None and _is_file_table(path) and "table" not in query:
        out["path"], out["table"] = None, path
    for k in ("table", "text", "vector", "id", "table_prefix"):
        if k in query:
            out[k] = query[k]
    if "metadata" in query:
        out["metadata"] = [m for m in query["metadata"].split(",") if m]
    if "read_only" in query:
        out["read_only"] = query["read_only"].lower() in ("1", "true", "yes")
    return out


def _is_file_table(path: str) -> bool:
    return path.lower().endswith((".parquet", ".parq")) or "*" in path


def is_file_table(table: str) -> bool:
    """Whether ``table`` names a Parquet file (or glob) rather than a table of the database."""
    return _is_file_table(table) or "/" in table or "\\" in table


def qualified(name: str, quote: Any) -> str:
    """A possibly dotted table name (``schema.table``), each part quoted."""
    return ".".join(quote(p) for p in name.split("."))
