"""DuckDB's typed views of the DuckDB store's schema, for the pushed filter (:mod:`nlql.sql.filters`).

Metadata is read from ``d.mflat``, a ``MAP(VARCHAR, STRUCT(s, f, n, t, b))`` (path key → typed record,
:mod:`nlql.sql.codec`): a lookup of a missing path is NULL, so every view of it is NULL (UNKNOWN). The
built-in fields come from their columns and the casefold / number / date shadows written beside them.
Numbers are ``DOUBLE`` (they compare exactly as Python floats), dates ``BIGINT`` µs since the epoch.
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
            sql("d.mflat[", Param(path_key(path[1:]), "text", "metadata path"), "]"),
            s="({r}).s", fold="coalesce(({r}).f, ({r}).s)", n="({r}).n", t="({r}).t", b="({r}).b",
            exists="({r} IS NOT NULL)", is_str="(({r}).s IS NOT NULL)",
        )
    return field_subject(path, position="{}::DOUBLE")
