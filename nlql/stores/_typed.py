"""Typed shadow views of metadata, and the lowering of pushed filters onto them.

Stores with a JSON-ish filter language (Qdrant, Chroma) cannot evaluate SPEC §6 comparisons directly:
their equality is type-strict, their ranges ignore numeric strings, their negations match missing keys
and their list values match element-wise. So at ingest each scalar reachable through dicts in the
metadata (and each built-in field) is written into *typed views*, one per kind of comparison NLQL can
make with it:

=====  ==========================================================  ==========================
kind   holds                                                        used when the literal is
=====  ==========================================================  ==========================
``s``  the value, if it is a string                                 a string
``n``  the number, for numbers *and* numeric strings (``"2025"``)   a number
``f``  the number, for real numbers only                            a numeric string
``b``  the value, if it is a bool                                   a bool
``d``  the instant, for ISO-8601 strings                            a date or timestamp
``c``  the casefolded string                                        CONTAINS
``p``  a marker: the value is not null (lists and dicts included)   IS [NOT] NULL
=====  ==========================================================  ==========================

A leaf such as ``meta.year >= "2020"`` is then the disjunction of one comparison per view that can
decide it (``s`` compared as strings, ``f`` compared as numbers): :func:`lower_filter` turns a pushed
:class:`~nlql.stores.base.Filter` into this small view-level algebra, exactly equivalent to
:func:`nlql.stores.pyfilter.row_passes`, and each store renders the algebra in its own syntax.

A comparison no view can decide natively (string ordering: neither Qdrant nor Chroma has a string
range) lowers to :class:`Opaque`, which carries a *superset* condition: the store evaluates the
superset natively and re-checks the candidates with ``pyfilter`` in the adapter, so results stay exact.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from typing import Any, Union

from nlql import values as V
from nlql.pushdown import HAS_OPS, Cond, FAnd, Filter, FOr

BUILTINS = ("doc_id", "id", "position", "content")
KINDS = ("s", "n", "f", "b", "d", "c", "p")
PRESENCE_MARK = "_"  # the key under which nested views hold a path's value; never an encoded key

_PLAIN_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def member_key(key: str) -> bool:
    """Whether HAS names ``key`` in a raw payload path as it is (letters, digits, ``_``)."""
    return _MEMBER_KEY.match(key) is not None


@lru_cache(maxsize=4096)  # (a corpus repeats its keys: ingest encodes each document's every key)
def encode_key(key: str) -> str:
    """One metadata key as a path component every JSON-path dialect accepts, injectively.

    Keys that look like identifiers are kept (``created_at``); any other key becomes ``-`` followed by
    its ASCII letters and digits, every other character written ``_<hex>_``. Plain keys start with a
    letter and escaped ones with ``-``, so no two keys collide and ``_`` is never produced.

    >>> encode_key("year"), encode_key("a.b"), encode_key(""), encode_key("2024"), encode_key("_")
    ('year', '-a_2e_b', '-', '-2024', '-_5f_')
    """
    if _PLAIN_KEY.fullmatch(key):
        return key
    out = ["-"]
    for ch in key:
        if ch.isascii() and ch.isalnum():
            out.append(ch)
        else:
            out.append(f"_{ord(ch):x}_")
    return "".join(out)


def encode_path(keys: tuple[str, ...]) -> tuple[str, ...]:
    """Every component of a metadata key path through :func:`encode_key`."""
    return tuple(encode_key(k) for k in keys)


def datetime_micros(dt: datetime) -> int | None:
    """An aware datetime as integer microseconds since the Unix epoch (exact), or None on overflow."""
    try:
        return (dt - _EPOCH) // timedelta(microseconds=1)
    except OverflowError:
        return None


def scalar_views(value: Any) -> dict[str, Any]:
    """The typed views of one value (see the module docstring). Datetimes are aware ``datetime``\\ s."""
    out: dict[str, Any] = {}
    if V.is_null(value):
        return out
    out["p"] = True
    if isinstance(value, bool):
        out["b"] = value
    elif V.is_number(value):
        num = V.as_number(value)
        if num is not None:
            out["n"] = num
            out["f"] = num
    elif isinstance(value, str):
        out["s"] = value
        out["c"] = value.casefold()
        num = V.numeric_string(value)
        if num is not None:
            out["n"] = num
        dt = V.iso_datetime(value)
        if dt is not None:
            out["d"] = dt
    elif isinstance(value, (datetime, date)):  # only if a caller skipped normalize_metadata
        out["d"] = V.as_datetime(value)
    return out


def walk_metadata(meta: dict[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every ``(key path, value)`` reachable through dicts, as ``values.lookup`` would reach it."""
    for key, value in meta.items():
        path = (*prefix, key)
        yield path, value
        if isinstance(value, dict):
            yield from walk_metadata(value, path)


def builtin_value(field: str, doc_id: str, position: int, content: str) -> Any:
    """The value of a built-in filter field for one row."""
    if field == "doc_id":
        return doc_id
    if field == "id":
        return f"{doc_id}#{position}"
    if field == "position":
        return position
    return content


# --------------------------------------------------------------------------- the view-level algebra


@dataclass(frozen=True, slots=True)
class VConst:
    """TRUE or FALSE."""

    value: bool


TRUE = VConst(True)
FALSE = VConst(False)


@dataclass(frozen=True, slots=True)
class Present:
    """The ``kind`` view of ``path`` exists (for ``p``: the value is not null)."""

    kind: str
    path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Absent:
    """The ``kind`` view of ``path`` does not exist (used with ``p``: the value is null or missing)."""

    kind: str
    path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Cmp:
    """``view op value`` with op in ``eq lt le gt ge``; false when the view is absent."""

    kind: str
    path: tuple[str, ...]
    op: str
    value: Any


@dataclass(frozen=True, slots=True)
class InSet:
    """The view equals one of ``values``; false when the view is absent."""

    kind: str
    path: tuple[str, ...]
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class NotIn:
    """The view exists and equals none of ``values``."""

    kind: str
    path: tuple[str, ...]
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Substr:
    """The ``c`` (casefolded) view contains ``needle`` (already casefolded, non-empty)."""

    path: tuple[str, ...]
    needle: str


@dataclass(frozen=True, slots=True)
class NotSubstr:
    """The ``c`` view exists and does not contain ``needle``."""

    path: tuple[str, ...]
    needle: str


@dataclass(frozen=True, slots=True)
class Member:
    """``meta.<path>`` holds one of ``values``: a list with such a member, or the value itself (HAS, SPEC §11).

    Lowered only for non-numeric string needles on plain-name paths, where a raw payload match (Qdrant's
    MatchAny on the stored metadata) means exactly that: such a string equals only the same string.
    """

    path: tuple[str, ...]
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Opaque:
    """A leaf no view decides natively; ``superset`` is implied by it. Needs a check in the adapter."""

    cond: Cond
    superset: VNode


@dataclass(frozen=True, slots=True)
class VAnd:
    items: tuple[VNode, ...]


@dataclass(frozen=True, slots=True)
class VOr:
    items: tuple[VNode, ...]


VNode = Union[VConst, Present, Absent, Cmp, InSet, NotIn, Substr, NotSubstr, Member, Opaque, VAnd, VOr]


_ALWAYS = {
    "doc_id": frozenset({"s", "c", "p"}),
    "id": frozenset({"s", "c", "p"}),
    "content": frozenset({"s", "c", "p"}),
    "position": frozenset({"n", "f", "p"}),
}


_NEVER = {
    "doc_id": frozenset({"f", "b"}),
    "id": frozenset({"f", "b"}),
    "content": frozenset({"f", "b"}),
    "position": frozenset({"s", "c", "b", "d"}),
}


def possible(kind: str, path: tuple[str, ...]) -> bool:
    """Whether a view can exist at all (a built-in string is never a bool, a position never a string)."""
    return kind not in _NEVER.get(path[0], ())


def always_present(kind: str, path: tuple[str, ...]) -> bool:
    """Whether a view exists on every row (a built-in field's own type)."""
    return kind in _ALWAYS.get(path[0], ())


def present(kind: str, path: tuple[str, ...]) -> VNode:
    """:class:`Present`, folded to TRUE (FALSE) for views every (no) row has."""
    if not possible(kind, path):
        return FALSE
    return TRUE if always_present(kind, path) else Present(kind, path)


def native_part(node: VNode) -> VNode:
    """The tree a store evaluates natively: each :class:`Opaque` replaced by its superset, simplified."""
    return simplify(_strip(node))


def _strip(node: VNode) -> VNode:
    if isinstance(node, Opaque):
        return node.superset
    if isinstance(node, VAnd):
        return VAnd(tuple(_strip(i) for i in node.items))
    if isinstance(node, VOr):
        return VOr(tuple(_strip(i) for i in node.items))
    return node


def opaque_leaves(node: VNode) -> list[Cond]:
    """The leaves of a lowered tree that the adapter must re-check."""
    if isinstance(node, Opaque):
        return [node.cond]
    if isinstance(node, (VAnd, VOr)):
        return [c for item in node.items for c in opaque_leaves(item)]
    return []


def needs_check(node: VNode) -> bool:
    """Whether a lowered filter contains an :class:`Opaque` leaf (so the adapter must re-check rows)."""
    if isinstance(node, Opaque):
        return True
    if isinstance(node, (VAnd, VOr)):
        return any(needs_check(item) for item in node.items)
    return False


# --------------------------------------------------------------------------- lowering


def _branches(value: Any) -> list[tuple[str, Any]]:
    """The views that can decide ``x op value`` for some stored x, with the literal in that view's type."""
    if isinstance(value, bool):
        return [("b", value)]
    if isinstance(value, (datetime, date)):
        return [("d", V.as_datetime(value))]
    if V.is_number(value):
        num = V.as_number(value)
        return [] if num is None else [("n", num)]
    if isinstance(value, str):
        num = V.numeric_string(value)
        return [("s", value)] if num is None else [("s", value), ("f", num)]
    return []  # null or an unsupported literal: every comparison is UNKNOWN


def _bool_order(path: tuple[str, ...], op: str, value: bool) -> VNode:
    """``x op value`` over bools (False < True)."""
    table: dict[tuple[str, bool], VNode] = {
        ("lt", True): Cmp("b", path, "eq", False),
        ("lt", False): FALSE,
        ("le", True): present("b", path),
        ("le", False): Cmp("b", path, "eq", False),
        ("gt", True): FALSE,
        ("gt", False): Cmp("b", path, "eq", True),
        ("ge", True): Cmp("b", path, "eq", True),
        ("ge", False): present("b", path),
    }
    return table[(op, value)]


def _eq(path: tuple[str, ...], value: Any) -> VNode:
    return VOr(tuple(Cmp(kind, path, "eq", lit) for kind, lit in _branches(value) if possible(kind, path)))


def _ne(path: tuple[str, ...], value: Any) -> VNode:
    items: list[VNode] = []
    for kind, lit in _branches(value):
        if not possible(kind, path):
            continue
        items.append(Cmp("b", path, "eq", not lit) if kind == "b" else NotIn(kind, path, (lit,)))
    return VOr(tuple(items))


def _order(cond: Cond) -> VNode:
    path = cond.path
    items: list[VNode] = []
    for kind, lit in _branches(cond.value):
        if not possible(kind, path):
            continue
        if kind == "b":
            items.append(_bool_order(path, cond.op, lit))
        elif kind == "s":  # string ordering: no native string range anywhere we render to
            items.append(Opaque(cond, present("s", path)))
        else:
            items.append(Cmp(kind, path, cond.op, lit))
    return VOr(tuple(items))


def lower_cond(cond: Cond) -> VNode:
    """One leaf as view-level conditions, exactly equivalent to ``pyfilter.eval_cond`` being TRUE."""
    path = cond.path
    root = path[0]
    if root not in ("meta", *BUILTINS) or (root == "meta" and len(path) < 2):
        return Opaque(cond, TRUE)
    builtin = root != "meta"
    op = cond.op
    if op == "is_null":
        return FALSE if builtin else Absent("p", path)
    if op == "is_not_null":
        return present("p", path)
    if op == "eq":
        return _eq(path, cond.value)
    if op == "ne":
        return _ne(path, cond.value)
    if op in ("lt", "le", "gt", "ge"):
        return _order(cond)
    if op == "in":
        return VOr(tuple(_eq(path, v) for v in cond.value))
    if op == "not_in":
        if len(cond.value) == 0:
            return present("p", path)
        return VAnd(tuple(_ne(path, v) for v in cond.value))
    if op in ("contains", "not_contains"):
        if not isinstance(cond.value, str) or not possible("c", path):
            return FALSE
        needle = cond.value.casefold()
        if op == "contains":
            return present("s", path) if needle == "" else Substr(path, needle)
        return FALSE if needle == "" else NotSubstr(path, needle)
    if op in HAS_OPS:
        return _has(cond)
    # like / match and anything unknown: only strings can pass, checked in the adapter
    return Opaque(cond, present("s", path) if op in ("like", "not_like", "match", "not_match") else TRUE)


#: A metadata key HAS can name in a raw payload path as it is (``meta.tags``); not :data:`_PLAIN_KEY`, which
#: decides what :func:`encode_key` keeps (a key starting with ``_`` is escaped there: ``_`` is the mark).
_MEMBER_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _has(cond: Cond) -> VNode:
    """HAS / HAS ANY / HAS ALL: a native :class:`Member` where a raw match is exact (positive leaves with
    non-numeric string needles); anything else is checked in the adapter over the rows with a value."""
    path, op = cond.path, cond.op
    needles = (cond.value,) if op in ("has", "not_has") else tuple(cond.value)
    plain = (path[0] == "meta" and all(_MEMBER_KEY.match(k) for k in path[1:])
             and all(isinstance(v, str) and V.numeric_string(v) is None for v in needles))
    if plain and op in ("has", "has_any"):
        return Member(path, needles) if needles else FALSE
    if plain and op == "has_all":
        return VAnd(tuple(Member(path, (v,)) for v in needles)) if needles else present("p", path)
    return Opaque(cond, present("p", path) if path[0] == "meta" else TRUE)


def lower_filter(flt: Filter) -> VNode:
    """A pushed filter tree as a simplified view-level tree (see :func:`simplify`)."""
    return simplify(_lower(flt))


def _lower(flt: Filter) -> VNode:
    if isinstance(flt, Cond):
        return lower_cond(flt)
    if isinstance(flt, FAnd):
        return VAnd(tuple(_lower(item) for item in flt.items))
    if isinstance(flt, FOr):
        return VOr(tuple(_lower(item) for item in flt.items))
    raise TypeError(f"not a filter: {flt!r}")


def _dedupe(values: list[Any]) -> tuple[Any, ...]:
    out: list[Any] = []
    seen: set[tuple[type, Any]] = set()
    for v in values:
        tag = (type(v), v)
        if tag not in seen:
            seen.add(tag)
            out.append(v)
    return tuple(out)


def simplify(node: VNode) -> VNode:
    """Fold constants, flatten nested AND/OR, merge equalities (OR) and exclusions (AND) per view."""
    if isinstance(node, VAnd):
        items: list[VNode] = []
        for item in (simplify(i) for i in node.items):
            if item == FALSE:
                return FALSE
            if item == TRUE:
                continue
            items.extend(item.items if isinstance(item, VAnd) else (item,))
        items = _merge(items, NotIn)
        return items[0] if len(items) == 1 else (TRUE if not items else VAnd(tuple(items)))
    if isinstance(node, VOr):
        items = []
        for item in (simplify(i) for i in node.items):
            if item == TRUE:
                return TRUE
            if item == FALSE:
                continue
            items.extend(item.items if isinstance(item, VOr) else (item,))
        items = _merge(items, InSet)
        return items[0] if len(items) == 1 else (FALSE if not items else VOr(tuple(items)))
    return node


def _merge(items: list[VNode], kind: type) -> list[VNode]:
    """Merge ``Cmp eq``/``InSet`` (under OR) or ``NotIn`` (under AND) on the same view, keeping order."""
    groups: dict[tuple[str, tuple[str, ...]], list[Any]] = {}
    out: list[VNode | tuple[str, tuple[str, ...]]] = []
    for item in items:
        key: tuple[str, tuple[str, ...]] | None = None
        vals: tuple[Any, ...] = ()
        if kind is InSet and isinstance(item, Cmp) and item.op == "eq":
            key, vals = (item.kind, item.path), (item.value,)
        elif kind is InSet and isinstance(item, InSet):
            key, vals = (item.kind, item.path), item.values
        elif kind is NotIn and isinstance(item, NotIn):
            key, vals = (item.kind, item.path), item.values
        if key is None:
            out.append(item)
            continue
        if key not in groups:
            groups[key] = []
            out.append(key)
        groups[key].extend(vals)
    merged: list[VNode] = []
    for entry in out:
        if isinstance(entry, tuple):
            vals = _dedupe(groups[entry])
            if kind is InSet:
                merged.append(Cmp(entry[0], entry[1], "eq", vals[0]) if len(vals) == 1 else InSet(*entry, vals))
            else:
                merged.append(NotIn(*entry, vals))
        else:
            merged.append(entry)
    return merged


__all__ = [
    "BUILTINS",
    "FALSE",
    "KINDS",
    "PRESENCE_MARK",
    "TRUE",
    "Absent",
    "Cmp",
    "InSet",
    "NotIn",
    "NotSubstr",
    "Member",
    "Opaque",
    "Present",
    "Substr",
    "VAnd",
    "VConst",
    "VNode",
    "VOr",
    "always_present",
    "builtin_value",
    "datetime_micros",
    "encode_key",
    "encode_path",
    "lower_cond",
    "lower_filter",
    "native_part",
    "needs_check",
    "opaque_leaves",
    "possible",
    "present",
    "scalar_views",
    "simplify",
    "walk_metadata",
]
