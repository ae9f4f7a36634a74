"""PostgreSQL's typed views of the pgvector store's schema, for the pushed filter (:mod:`nlql.sql.filters`).

Metadata is read from ``d.mflat`` (``jsonb``: path key → typed record, :mod:`nlql.sql.codec`); the
built-in fields from their columns and the casefold / number / date shadows written beside them.
Numbers are compared as ``numeric`` built from ``repr(float)`` on both sides, which orders exactly like
the floats themselves; strings under ``COLLATE "C"`` (code-point order).
"""

from __future__ import annotations

from typing import Any

from nlql import values as V
from nlql.pushdown import Cond, FAnd, Filter, FOr
from nlql.sql.binder import Fragment, Param, join, sql
from nlql.sql.codec import TextCodec, compact_json, escape_text, path_key
from nlql.sql.filters import SQL_LIST_OPS, ListMembers, Subject, equality_record, field_subject, like_pattern

__all__ = ["PGVECTOR_OPS", "containment", "indexable", "like_sql", "list_members", "subject"]

# MATCH is a Python regex; PostgreSQL's POSIX regex means something else, so it is never pushed. HAS
# reads the list members kept in ``d.mlists`` (:func:`list_members`).
PGVECTOR_OPS = SQL_LIST_OPS

_TYPED_VIEWS = {"s": "({r} ->> 's')", "fold": "coalesce({r} ->> 'f', {r} ->> 's')",
                "n": "({r} -> 'n')::numeric", "t": "({r} -> 't')::numeric", "b": "({r} -> 'b')::boolean"}


def subject(path: tuple[str, ...]) -> Subject:
    """The typed views of one filter path over ``u`` (``<p>_units``) and ``d`` (``<p>_docs``)."""
    root = path[0]
    if root == "meta":
        if len(path) < 2:
            raise ValueError(f"metadata path needs a key: {path!r}")
        return Subject(
            sql("(d.mflat -> ", Param(path_key(path[1:]), "text", "metadata path"), ")"),
            **_TYPED_VIEWS, exists="({r} IS NOT NULL)", is_str="(({r} ->> 's') IS NOT NULL)",
        )
    return field_subject(path, instant="{}::numeric", position="{}::numeric")


def list_members(path: tuple[str, ...]) -> ListMembers | None:
    """The members of list values at ``path``, from ``d.mlists`` (``jsonb``: path key → the list's
    distinct member records, :func:`~nlql.sql.codec.list_members`; every list has its key, an empty
    one too): a record test is jsonb containment (``@>``, which the GIN index on ``mlists`` serves), any
    other test reads the members with ``jsonb_array_elements``."""
    if path[0] != "meta" or len(path) < 2:
        return None
    key = path_key(path[1:])

    def entry() -> Fragment:
        return sql("(d.mlists -> ", Param(key, "text", "metadata path"), ")")

    member = Subject(sql("m.r"), **_TYPED_VIEWS, exists="TRUE", is_str="(({r} ->> 's') IS NOT NULL)")
    return ListMembers(
        sql("(", entry(), " IS NOT NULL)"), member,
        lambda test: sql("(EXISTS (SELECT 1 FROM jsonb_array_elements(", entry(), ") AS m(r) WHERE ", test, "))"),
        lambda records: sql("(d.mlists @> ", Param(compact_json({key: records}), "jsonb", "metadata value"), ")"))


def _has_containment(cond: Cond) -> tuple[Fragment, bool] | None:
    """``HAS``/``HAS ANY``/``HAS ALL`` as containment on ``mlists`` (a list holding the value) OR on
    ``mflat`` (a scalar equal to it): TRUE on exactly the rows where the leaf is TRUE, for needles with
    an equality record (not numeric strings), in a WHERE. None for any other leaf."""
    if cond.op not in ("has", "has_any", "has_all") or len(cond.path) < 2:
        return None
    needles = [cond.value] if cond.op == "has" else list(cond.value)
    if not needles or any(V.is_null(n) for n in needles):
        return None
    records = [equality_record(n, escape_text) for n in needles]
    if any(r is None for r in records):
        return None
    key = path_key(cond.path[1:])

    def test(column: str, doc: Any) -> Fragment:
        return sql(f"(d.{column} @> ", Param(compact_json({key: doc}), "jsonb", "metadata value"), ")")

    if cond.op == "has_all":
        scalar = join(" AND ", [test("mflat", r) for r in dict((compact_json(r), r) for r in records).values()])
        return sql("(", test("mlists", records), " OR (", scalar, "))"), True
    distinct = dict((compact_json(r), r) for r in records).values()
    return sql("(", join(" OR ", [sql(test("mlists", [r]), " OR ", test("mflat", r)) for r in distinct]), ")"), True


def containment(cond: Cond) -> tuple[Fragment, bool] | None:
    """``meta.x == v`` / ``meta.x IN (…)`` as ``d.mflat @> '{"[\"x\"]": {"s": "v"}}'`` (an OR of
    them for IN), which the GIN index on ``mflat`` (``jsonb_path_ops``) serves and PostgreSQL's
    statistics estimate. TRUE on exactly the rows where the typed-view form is TRUE (the stored record
    holds that typed value), FALSE where that form is FALSE or UNKNOWN: right in a WHERE
    (:meth:`~nlql.sql.dialect.Dialect.indexed_leaf`). None for any other leaf."""
    if cond.path[0] != "meta" or len(cond.path) < 2:
        return None
    if cond.op in ("has", "has_any", "has_all"):
        return _has_containment(cond)
    if cond.op not in ("eq", "in"):
        return None
    values = [cond.value] if cond.op == "eq" else list(cond.value)
    records = [equality_record(v, escape_text) for v in values]
    if not records or any(r is None for r in records):
        return None
    key = path_key(cond.path[1:])
    docs = dict.fromkeys(compact_json({key: r}) for r in records)  # one test per distinct value
    tests = [sql("(d.mflat @> ", Param(doc, "jsonb", "metadata value"), ")") for doc in docs]
    return (tests[0] if len(tests) == 1 else sql("(", join(" OR ", tests), ")")), True


def indexable(flt: Filter) -> bool:
    """Whether the GIN index on ``mflat`` can narrow ``flt``: a containment leaf (:func:`containment`),
    a conjunction with one, or a disjunction of such branches only."""
    if isinstance(flt, Cond):
        return containment(flt) is not None
    if isinstance(flt, FAnd):
        return any(indexable(i) for i in flt.items)
    if isinstance(flt, FOr):
        return bool(flt.items) and all(indexable(i) for i in flt.items)
    return False


def like_sql(pattern: str) -> tuple[str, str]:
    """Translate an NLQL LIKE pattern to ``(operator, pattern)`` over escaped text.

    Without ``_`` this is a PostgreSQL LIKE pattern (escape ``\\``); with ``_`` it is an anchored
    regular expression in which ``_`` matches one whole escape code word or one ordinary character.

    >>> like_sql("50\\\\%_off%")
    ('~', '^50\\\\%(?:\\x01[\\x02-\\x08]{4}|[^\\x01-\\x08])off.*$')
    >>> like_sql("a%b")
    ('LIKE', 'a%b')
    """
    kind, out = like_pattern(pattern, TextCodec())
    return ("LIKE" if kind == "like" else "~"), out

