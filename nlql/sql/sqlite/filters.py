"""SQLite's typed views of a schema like DuckDB's, for the pushed filter (:mod:`nlql.sql.filters`).

Metadata is read from ``d.mflat``, a JSON object text (path key → typed record ``{"s", "f", "n", "t",
"b"}``, :func:`nlql.sql.codec.flatten_metadata`); the record of one path is looked up with
``json_each`` by exact key (no JSON-path parsing of the key), so a missing path is NULL and every view
of it is NULL (UNKNOWN). Numbers are REAL, dates INTEGER µs since the epoch, booleans 0/1.
"""

from __future__ import annotations

from nlql.sql.binder import Param, sql
from nlql.sql.codec import path_key
from nlql.sql.filters import Subject

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
    if root == "doc_id":
        return Subject(sql("u.doc_id"), s="u.doc_id", fold="coalesce(d.fold, u.doc_id)",
                       n="d.num", t="d.ts", b=None, exists="TRUE", is_str="TRUE")
    if root == "id":
        # "<doc_id>#<position>" is never a number nor an ISO date ('#' cannot occur in either)
        return Subject(sql("u.doc_id"), s="(u.doc_id || '#' || u.position)",
                       fold="(coalesce(d.fold, u.doc_id) || '#' || u.position)",
                       n=None, t=None, b=None, exists="TRUE", is_str="TRUE")
    if root == "content":
        return Subject(sql("u.content"), s="u.content", fold="coalesce(u.fold, u.content)",
                       n="u.num", t="u.ts", b=None, exists="TRUE", is_str="TRUE")
    if root == "position":
        return Subject(sql("u.position"), s=None, fold=None, n="u.position", t=None, b=None,
                       exists="TRUE", is_str=None)
    raise ValueError(f"unknown filter path {path!r}")
