"""The pushed filter as one SQL boolean, with exactly NLQL's semantics (:mod:`nlql.values`), per dialect.

A leaf reads one *subject* (a metadata path or a built-in field) through typed *views*, each an SQL
expression that is NULL where the value lacks that type: ``s`` (the string), ``fold`` (its casefold),
``n`` (as a number: numbers and numeric strings), ``t`` (ISO strings and dates as µs since the epoch),
``b`` (booleans), ``exists`` and ``is_str``. The dialect says how each view is spelled over its schema
(:meth:`~nlql.sql.dialect.Dialect.subject`); this module turns every operator into SQL over the views,
so SQL's three-valued logic gives SPEC §6's: a comparison with a value of another type is NULL (UNKNOWN),
and ``NOT`` of UNKNOWN stays UNKNOWN.

Every value is a :class:`~nlql.sql.binder.Param` part: the text never holds a value, and the
placeholders are numbered only when the whole statement is rendered. Casts and array tests are the
dialect's hooks (``cast``, ``in_array``); this module imports no dialect (the dialect imports it, and
hands itself to :func:`filter_sql`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from nlql import values as V
from nlql.errors import UnsupportedError
from nlql.pushdown import HAS_OPS, OPS, Cond, FAnd, Filter, FOr
from nlql.sql.binder import Fragment, Param, join, sql, template
from nlql.sql.codec import TextCodec, micros

__all__ = ["SQL_FILTER_OPS", "SQL_LIST_OPS", "ListMembers", "Subject", "equality_record", "filter_sql",
           "like_pattern"]

# the leaf operators a SQL dialect over NLQL's typed schema compiles: MATCH is a Python regex, which
# no SQL regex engine means exactly, so it is never pushed; HAS (list membership, SPEC §11) reads lists,
# which the typed views do not keep: a dialect whose store keeps each list's members
# (:meth:`~nlql.sql.dialect.Dialect.list_members`) compiles SQL_LIST_OPS
SQL_FILTER_OPS = frozenset(OPS - {"match", "not_match"} - HAS_OPS)
SQL_LIST_OPS = SQL_FILTER_OPS | HAS_OPS
SQL_OP = {"eq": "=", "ne": "<>", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_READS_DOCS = re.compile(r"\bd\.")
_VIEWS = ("s", "fold", "n", "t", "b", "exists", "is_str")


class Subject:
    """SQL views of one filter path: each is an expression that is NULL where the value lacks that type.

    Args:
        base: The expression the views read (``{r}`` in their templates), with its own values.
        views: View name → template over ``{r}``, or None where the subject never has that type.
    """

    def __init__(self, base: Fragment, **views: str | None) -> None:
        unknown = set(views) - set(_VIEWS)
        if unknown:
            raise ValueError(f"unknown views {sorted(unknown)}")
        self.base = base
        self._views = {v: views.get(v) for v in _VIEWS}
        self.reads_docs = False  # set once a view over the documents table (alias d) is used

    def has(self, view: str) -> bool:
        return self._views[view] is not None

    def view(self, name: str) -> Fragment:
        """A view as SQL; ``{r}`` in its template is the base expression (with its own values).

        Raises:
            KeyError: the subject never has that view (ask :meth:`has` first).
        """
        text = self._views[name]
        if text is None:
            raise KeyError(f"the subject has no view {name!r}")
        frag = template(text, r=self.base)
        if _READS_DOCS.search(frag.text_only()):
            self.reads_docs = True
        return frag

    @property
    def always_str(self) -> bool:
        return self._views["is_str"] == "TRUE"

    @property
    def never_str(self) -> bool:
        return self._views["s"] is None


def field_subject(path: tuple[str, ...], instant: str = "{}", position: str = "{}") -> Subject:
    """The typed views of a built-in field (``doc_id``, ``id``, ``content``, ``position``) over ``u``
    (``<p>_units``) and ``d`` (``<p>_docs``): the same columns in every dialect's schema. ``instant`` and
    ``position`` spell how the dialect reads the ``ts`` columns and the position as a number (a format
    with ``{}``, e.g. PostgreSQL's ``"{}::numeric"``).

    Raises:
        ValueError: ``path`` is not a built-in field.
    """
    root = path[0]
    if root == "doc_id":
        return Subject(sql("u.doc_id"), s="u.doc_id", fold="coalesce(d.fold, u.doc_id)",
                       n="d.num", t=instant.format("d.ts"), b=None, exists="TRUE", is_str="TRUE")
    if root == "id":
        # "<doc_id>#<position>" is never a number nor an ISO date ('#' cannot occur in either)
        return Subject(sql("u.doc_id"), s="(u.doc_id || '#' || u.position)",
                       fold="(coalesce(d.fold, u.doc_id) || '#' || u.position)",
                       n=None, t=None, b=None, exists="TRUE", is_str="TRUE")
    if root == "content":
        return Subject(sql("u.content"), s="u.content", fold="coalesce(u.fold, u.content)",
                       n="u.num", t=instant.format("u.ts"), b=None, exists="TRUE", is_str="TRUE")
    if root == "position":
        return Subject(sql("u.position"), s=None, fold=None, n=position.format("u.position"), t=None, b=None,
                       exists="TRUE", is_str=None)
    raise ValueError(f"unknown filter path {path!r}")


class ListMembers:
    """The members of the list values at one metadata path, as a dialect keeps them (SPEC §11 ``HAS``).

    Args:
        is_list: SQL that is TRUE where the row's value at the path is a list (an empty one too), FALSE
            elsewhere (never NULL).
        member: The typed views of one member (:class:`Subject`), read inside :meth:`some`.
        some: ``test`` (SQL over ``member``'s views) → SQL that is TRUE where some member of the row's
            list makes ``test`` TRUE, FALSE elsewhere (never NULL).
        holds: Optional: typed records (:func:`equality_record`) → SQL that is TRUE where the row's list
            holds, for each record, a member whose record contains it, FALSE elsewhere (e.g. jsonb
            containment, which an index serves).
        scalar: Optional: ``(views, where)``, the typed record of the row's value at the path as a
            :class:`Subject` (no typed value for a list) and ``test`` → SQL TRUE where that record makes
            ``test`` TRUE: the positive forms are then ``membership OR scalar test``, TRUE on exactly the
            rows where the leaf is TRUE (a WHERE form, as :meth:`~nlql.sql.dialect.Dialect.indexed_leaf`'s).
    """

    def __init__(self, is_list: Fragment, member: Subject, some: Any, holds: Any = None,
                 scalar: tuple[Subject, Any] | None = None) -> None:
        self.is_list = is_list
        self.member = member
        self.some = some
        self.holds = holds
        self.scalar = scalar


def equality_record(v: Any, escape: Any) -> dict[str, Any] | None:
    """The part of a stored typed record (:func:`nlql.sql.codec.flatten_metadata`, strings written with
    ``escape``) that a record holds exactly when ``meta.x == v`` is TRUE; None where equality needs more
    than that (a numeric string equals the number too: the typed views answer it). A dialect's
    :meth:`~nlql.sql.dialect.Dialect.indexed_leaf` may test it in a form its indexes serve."""
    if isinstance(v, bool):
        return {"b": v}
    if isinstance(v, (datetime, date)):
        dt = V.as_datetime(v)
        return {"t": micros(dt)} if dt is not None else None
    if V.is_number(v):
        f = V.as_number(v)
        return {"n": f} if f is not None else None
    if isinstance(v, str) and V.numeric_string(v) is None:
        return {"s": escape(v)}
    return None


def like_pattern(pattern: str, codec: TextCodec, regex_escape: Any = None) -> tuple[str, str]:
    """Translate an NLQL LIKE pattern to ``("like", pattern)`` or ``("regex", pattern)`` over stored text.

    Without ``_`` this is a SQL LIKE pattern with ``\\`` as its escape character; with ``_`` it is an
    anchored regular expression in which ``_`` matches one stored character (a whole escape code word
    when the codec escapes). ``regex_escape(c)`` spells a literal character in the dialect's regex.

    >>> like_pattern("a%b", TextCodec())
    ('like', 'a%b')
    >>> like_pattern("a_c%", TextCodec(escaped=False))
    ('regex', '^a.c.*$')
    """
    esc = regex_escape or _are_escape
    tokens = _like_tokens(pattern)
    if not any(kind == "one" for kind, _ in tokens):
        out = []
        for kind, ch in tokens:
            if kind == "any":
                out.append("%")
                continue
            for c in codec.escape(ch):
                out.append("\\" + c if c in "%_\\" else c)
        return "like", "".join(out)
    rx = ["^"]
    for kind, ch in tokens:
        if kind == "any":
            rx.append(".*")
        elif kind == "one":
            rx.append(codec.one_char)
        else:
            for c in codec.escape(ch):
                rx.append(esc(c))
    rx.append("$")
    return "regex", "".join(rx)


def _are_escape(c: str) -> str:
    # in a PostgreSQL ARE, a backslash before a non-alphanumeric character makes it literal
    return "\\" + c if c.isascii() and not c.isalnum() and c >= "\x09" else c


def _like_tokens(pattern: str) -> list[tuple[str, str]]:
    """Tokens of an NLQL LIKE pattern exactly as :class:`nlql.patterns.LikeMatcher` reads it."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(("lit", pattern[i + 1]))
            i += 2
            continue
        if ch == "%":
            out.append(("any", ""))
        elif ch == "_":
            out.append(("one", ""))
        else:
            out.append(("lit", ch))
        i += 1
    return out


class _Compiler:
    """One filter tree for one dialect."""

    def __init__(self, dialect: Any) -> None:
        self.d = dialect
        self.codec: TextCodec = dialect.codec
        self.reads_docs = False
        self.null = sql(dialect.cast("NULL", "boolean"))  # UNKNOWN

    def view(self, subj: Subject, name: str) -> Fragment:
        """A view of the subject, UNKNOWN where the subject never has that type."""
        return subj.view(name) if subj.has(name) else self.null

    # ------------------------------------------------------------------------------------ values

    def number(self, f: float) -> Param:
        return Param(self.d.number_value(f), "numeric")

    def stamp(self, dt: datetime) -> Param:
        return Param(self.d.stamp_value(micros(dt)), "numeric")

    def text(self, s: str) -> Param:
        return Param(self.codec.escape(s), "text")

    def binop(self, left: Fragment, op: str, value: Param) -> Fragment:
        return sql("(", left, f" {op} ", value, ")")

    # ------------------------------------------------------------------------------------ leaves

    def compare(self, subj: Subject, op: str, v: Any) -> Fragment:
        """``value op v`` with :func:`nlql.values.compare`'s semantics (NULL = UNKNOWN)."""
        sql_op = SQL_OP[op]
        if V.is_null(v):
            return self.null
        if isinstance(v, bool):
            return self.binop(self.view(subj, "b"), sql_op, Param(v, "boolean")) if subj.has("b") else self.null
        if isinstance(v, (datetime, date)):
            dt = V.as_datetime(v)
            if dt is None or not subj.has("t"):
                return self.null
            return self.binop(self.view(subj, "t"), sql_op, self.stamp(dt))
        if V.is_number(v):
            f = V.as_number(v)
            if f is None or not subj.has("n"):
                return self.null
            return self.binop(self.view(subj, "n"), sql_op, self.number(f))
        if isinstance(v, str):
            num = V.numeric_string(v)
            str_part = None
            if subj.has("s"):
                # code-point order for <, >; equality needs no collation (and keeps indexes usable)
                collate = "" if op in ("eq", "ne") else self.d.TRANSFORMS["text_order"]
                str_part = sql("(", self.view(subj, "s"), f"{collate} {sql_op} ", self.text(v), ")")
            num_part = None
            if num is not None and subj.has("n") and not subj.always_str:
                num_part = self.binop(self.view(subj, "n"), sql_op, self.number(num))
            if str_part is not None and subj.always_str:
                return str_part
            if str_part is None:
                return num_part or self.null
            if num_part is None:
                return str_part  # NULL for a non-string value: a non-numeric string never compares with it
            return sql("(CASE WHEN ", self.view(subj, "is_str"), " THEN ", str_part, " ELSE ", num_part, " END)")
        return self.null

    def any_of(self, subj: Subject, view: str, cast: str, values: list[Any]) -> Fragment:
        if not subj.has(view):
            return self.null
        return self.d.in_array(self.view(subj, view), Param(values, f"{cast}[]"))

    def in_list(self, subj: Subject, options: Sequence[Any]) -> Fragment:
        """SQL IN as an OR of equalities, grouped by literal type into one array test per type."""
        bools: list[bool] = []
        stamps: list[Any] = []
        nums: list[Any] = []
        strs: list[str] = []
        str_nums: list[Any] = []
        plain_strs = False
        unknown = False
        for o in options:
            if V.is_null(o):
                unknown = True
            elif isinstance(o, bool):
                bools.append(o)
            elif isinstance(o, (datetime, date)):
                dt = V.as_datetime(o)
                if dt is None:
                    unknown = True
                else:
                    stamps.append(self.d.stamp_value(micros(dt)))
            elif V.is_number(o):
                f = V.as_number(o)
                if f is None:
                    unknown = True
                else:
                    nums.append(self.d.number_value(f))
            elif isinstance(o, str):
                strs.append(self.codec.escape(o))
                num = V.numeric_string(o)
                if num is None:
                    plain_strs = True
                else:
                    str_nums.append(self.d.number_value(num))
            else:
                unknown = True
        parts: list[Fragment] = []
        if bools:
            parts.append(self.any_of(subj, "b", "boolean", bools))
        if stamps:
            parts.append(self.any_of(subj, "t", "numeric", stamps))
        if nums:
            parts.append(self.any_of(subj, "n", "numeric", nums))
        if strs:
            str_any = self.any_of(subj, "s", "text", strs)
            non_str: Fragment = self.null
            if str_nums and subj.has("n"):
                non_str = self.any_of(subj, "n", "numeric", str_nums)
                if plain_strs:
                    non_str = sql("(", non_str, " OR ", self.null, ")")
            if subj.always_str:
                parts.append(str_any)
            elif subj.never_str:
                parts.append(non_str)
            else:
                parts.append(sql("(CASE WHEN ", self.view(subj, "is_str"), " THEN ", str_any, " ELSE ", non_str, " END)"))
        if unknown:
            parts.append(self.null)
        if not parts:
            return sql("(CASE WHEN ", self.view(subj, "exists"), " THEN FALSE END)")
        return sql("(", join(" OR ", parts), ")")

    def string_test(self, subj: Subject, op: str, v: Any) -> Fragment:
        if not isinstance(v, str):
            return self.null
        if op == "contains":
            if not subj.has("fold"):
                return self.null
            return self.d.fn("contains", s=self.view(subj, "fold"), needle=sql(self.text(v.casefold())))
        if not subj.has("s"):
            return self.null
        kind, pattern = like_pattern(v, self.codec, self.d.regex_escape)
        # the pattern is already in stored form: bind it as is
        return self.d.fn(kind, s=self.view(subj, "s"), pattern=sql(Param(pattern, "text")))

    def leaf(self, cond: Cond) -> Fragment:
        op = cond.op
        if op not in self.d.FILTER_OPS:
            raise UnsupportedError(self.d.STORE_NAME, f"pushing the filter operator '{op}'",
                                   hint="keep it in the residual filter")
        indexed = self.d.indexed_leaf(cond)
        if indexed is not None:  # the same rows, in a form the dialect's index serves (WHERE only)
            frag, reads_docs = indexed
            self.reads_docs = self.reads_docs or reads_docs
            return frag
        if op in HAS_OPS:
            return self.has_leaf(cond)
        subj = self.d.subject(cond.path)
        frag = self.leaf_sql(subj, op, cond.value)
        if subj.reads_docs:
            self.reads_docs = True
        return frag

    # ------------------------------------------------------------------------------ list membership

    def has_leaf(self, cond: Cond) -> Fragment:
        """``HAS`` / ``HAS ANY`` / ``HAS ALL`` (and NOT) with :func:`nlql.values.has`'s semantics: on a
        list (``CASE WHEN`` the dialect's list marker) membership under ``==``'s typing, TRUE or FALSE;
        otherwise the scalar's ``==`` / IN / AND of ``==`` over the typed views (NULL on a missing key,
        so the NOT forms stay UNKNOWN there)."""
        base = cond.op.removeprefix("not_")
        subj = self.d.subject(cond.path)
        needles = [cond.value] if base == "has" else list(cond.value)
        if base == "has" and V.is_null(cond.value):
            frag: Fragment = self.null  # a comparison with null, on a list as on a scalar
        else:
            scalar = self.scalar_has(subj, base, needles)
            lists = self.d.list_members(cond.path) if cond.path[0] == "meta" else None
            if lists is None and cond.path[0] == "meta":
                raise UnsupportedError(self.d.STORE_NAME, f"pushing '{cond.op}' (the store keeps no list members)",
                                       hint="keep it in the residual filter")
            if lists is None:  # a built-in field is never a list
                frag = scalar
            elif lists.scalar is not None and not cond.op.startswith("not_") and not any(
                    V.is_null(n) for n in needles) and needles:
                # WHERE form (the pushed filter has no NOT above its leaves): a list holding the value OR
                # a scalar equal to it, each TRUE on exactly its rows
                views, where = lists.scalar
                return sql("(", self.list_has(lists, base, needles), " OR ",
                           where(self.scalar_has(views, base, needles)), ")")
            else:
                frag = sql("(CASE WHEN ", lists.is_list, " THEN ", self.list_has(lists, base, needles),
                           " ELSE ", scalar, " END)")
                if _READS_DOCS.search(frag.text_only()):
                    self.reads_docs = True
        if subj.reads_docs:
            self.reads_docs = True
        return sql("(NOT ", frag, ")") if cond.op.startswith("not_") else frag

    def scalar_has(self, subj: Subject, base: str, needles: list[Any]) -> Fragment:
        if base == "has":
            return self.compare(subj, "eq", needles[0])
        if base == "has_any":
            return self.in_list(subj, tuple(needles))
        if not needles:  # HAS ALL (): TRUE for any value, UNKNOWN on null
            return sql("(CASE WHEN ", self.view(subj, "exists"), " THEN TRUE END)")
        return sql("(", join(" AND ", [self.compare(subj, "eq", n) for n in needles]), ")")

    def list_has(self, lists: ListMembers, base: str, needles: list[Any]) -> Fragment:
        """Membership on a list: TRUE or FALSE (a null needle is never a member)."""
        if base == "has_all" and any(V.is_null(n) for n in needles):
            return sql("FALSE")
        wanted = [n for n in needles if not V.is_null(n)]
        if not wanted:
            return sql("TRUE") if base == "has_all" else sql("FALSE")
        records: list[dict[str, Any]] = []
        rest: list[Any] = []
        for n in wanted:
            rec = equality_record(n, self.codec.escape) if lists.holds is not None else None
            if rec is None:
                rest.append(n)
            else:
                records.append(rec)
        tests: list[Fragment] = []
        if base == "has_all":
            if records:
                tests.append(lists.holds(records))
            tests.extend(lists.some(self.compare(lists.member, "eq", n)) for n in rest)
            return sql("(", join(" AND ", tests), ")")
        tests.extend(lists.holds([r]) for r in records)
        if rest:
            tests.append(lists.some(self.in_list(lists.member, tuple(rest))))
        return sql("(", join(" OR ", tests), ")")

    def leaf_sql(self, subj: Subject, op: str, value: Any) -> Fragment:
        if op == "is_null":
            return sql("(NOT ", self.view(subj, "exists"), ")")
        if op == "is_not_null":
            return self.view(subj, "exists")
        if op in SQL_OP:
            return self.compare(subj, op, value)
        if op in ("in", "not_in"):
            frag = self.in_list(subj, tuple(value))
        else:
            frag = self.string_test(subj, op.removeprefix("not_"), value)
        if op.startswith("not_"):
            return sql("(NOT ", frag, ")")
        return frag

    def tree(self, flt: Filter) -> Fragment:
        if isinstance(flt, Cond):
            return self.leaf(flt)
        if isinstance(flt, (FAnd, FOr)):
            if not flt.items:
                return sql("TRUE") if isinstance(flt, FAnd) else sql("FALSE")
            joiner = " AND " if isinstance(flt, FAnd) else " OR "
            items = flt.items if isinstance(flt, FAnd) else _merge_equalities(flt.items)
            if len(items) == 1:
                return self.tree(items[0])
            return sql("(", join(joiner, [self.tree(item) for item in items]), ")")
        raise TypeError(f"not a filter: {flt!r}")


def _merge_equalities(items: tuple[Filter, ...]) -> tuple[Filter, ...]:
    """An OR's ``==``/``IN`` leaves on one path as one ``IN`` (SPEC: ``x IN (a, b)`` is ``x == a OR
    x == b``, in three-valued logic too), at the place of the first: a 2,000-term OR of equalities is
    one list test, not 2,000 (DuckDB refuses an expression deeper than 1,000 once each is a semi-join)."""
    groups: dict[tuple[str, ...], list[Cond]] = {}
    for item in items:
        if isinstance(item, Cond) and item.op in ("eq", "in"):
            groups.setdefault(item.path, []).append(item)
    if all(len(g) < 2 for g in groups.values()):
        return items
    out: list[Filter] = []
    for item in items:
        if isinstance(item, Cond) and item.op in ("eq", "in"):
            group = groups.get(item.path)
            if group is None:
                continue  # merged into the first of its path
            if len(group) == 1:
                out.append(item)
            else:
                values = tuple(v for c in group for v in ((c.value,) if c.op == "eq" else tuple(c.value)))
                out.append(Cond("in", item.path, values))
            del groups[item.path]
        else:
            out.append(item)
    return tuple(out)


def filter_sql(dialect: Any, flt: Filter) -> tuple[Fragment, bool]:
    """A filter tree as a SQL boolean fragment over ``u`` (units) and ``d`` (docs) in ``dialect``, and
    whether it reads the documents table. Values are :class:`~nlql.sql.binder.Param` parts, never text.

    Raises:
        UnsupportedError: a leaf operator the dialect does not push (see ``FILTER_OPS``).
    """
    c = _Compiler(dialect)
    frag = c.tree(flt)
    labelled = tuple(Param(p.value, p.cast, p.label or "filter value") if isinstance(p, Param) else p
                     for p in frag.parts)
    return Fragment(labelled), c.reads_docs
