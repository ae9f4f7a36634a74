"""SQLite's typed views of a schema like DuckDB's, for the pushed filter (:mod:`nlql.sql.filters`).

Metadata is read from ``d.mflat``, a JSON object text (path key → typed record ``{"s", "f", "n", "t",
"b"}``, :func:`nlql.sql.codec.flatten_metadata`); the record of one path is looked up with
``json_each`` by exact key (no JSON-path parsing of the key), so a missing path is NULL and every view
of it is NULL (UNKNOWN). Numbers are REAL, dates INTEGER µs since the epoch, booleans 0/1.
"""

from __future__ import annotations

from nlql.sql.binder import Param, sql
from nlql.sql.codec import path_key
from nlql.sql.filters import Subject, field_subject

__all__ = ["subject"]


def subject(path: tuple[str, ...]) -> Subject:
    """The typed views of one filter path over ``u`` (``<p>_units``) and ``d`` (``<p>_docs``)."""
    root = path[0]
    if root == "meta":
        if len(path) < 2:
            raise ValueError(f"metadata path needs a key: {path!r}")
        return Subject(
            sql("(SELECT m.value FROM json_each(d.mflat) m WHERE m.key = ",
                Param(path_key(path[1:]), "text", "metadata path"), ")"),
            s="({r} ->> 's')", fold="coalesce({r} ->> 'f', {r} ->> 's')", n="({r} ->> 'n')",
            t="({r} ->> 't')", b="({r} ->> 'b')", exists="({r} IS NOT NULL)", is_str="(({r} ->> 's') IS NOT NULL)",
        )
    return field_subject(path)
