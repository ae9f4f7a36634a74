"""Evaluate a pushed filter tree in Python, with exactly NLQL's semantics.

Stores whose native filter is a callable (hnswlib) or an id set (Faiss ``IDSelector``) use this over the
metadata they keep beside the index, so what they push means what the engine would compute.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from nlql import values as V
from nlql.patterns import Regex, compile_regex
from nlql.pushdown import Cond, FAnd, Filter, FOr
from nlql.stores.base import Row


def row_value(row: Row, path: tuple[str, ...]) -> Any:
    """The value a filter path names on a stored row (``content`` is the sentence text)."""
    root = path[0]
    if root == "meta":
        return V.lookup(row.metadata, path[1:])
    if root == "doc_id":
        return row.doc_id
    if root == "id":
        return row.id
    if root == "position":
        return row.position
    if root == "content":
        return row.content
    raise ValueError(f"unknown filter path {path!r}")


def eval_cond(cond: Cond, value: Any) -> bool | None:
    """One leaf on one value: True, False or None (UNKNOWN)."""
    op = cond.op
    if op == "is_null":
        return V.is_null(value)
    if op == "is_not_null":
        return not V.is_null(value)
    if op in ("eq", "ne", "lt", "le", "gt", "ge"):
        return V.compare(_CMP[op], value, cond.value)
    if op == "in":
        return V.in_list(value, cond.value)
    if op == "not_in":
        return V.not3(V.in_list(value, cond.value))
    if op == "contains":
        return V.contains(value, cond.value)
    if op == "not_contains":
        return V.not3(V.contains(value, cond.value))
    if op == "like":
        return V.like(value, cond.value)
    if op == "not_like":
        return V.not3(V.like(value, cond.value))
    if op == "match":
        return V.match(value, _regex(cond.value))
    if op == "not_match":
        return V.not3(V.match(value, _regex(cond.value)))
    if op in _HAS:
        r = _HAS[op](value, cond.value)
        return V.not3(r) if op.startswith("not_") else r
    raise ValueError(f"unknown filter op {op!r}")


_HAS = {"has": V.has, "not_has": V.has, "has_any": V.has_any, "not_has_any": V.has_any,
        "has_all": V.has_all, "not_has_all": V.has_all}
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _regex(p: str | re.Pattern[str] | Regex) -> Regex:
    if isinstance(p, Regex):
        return p
    return compile_regex(p.pattern if isinstance(p, re.Pattern) else p)


def eval_filter(flt: Filter, get: Callable[[tuple[str, ...]], Any]) -> bool | None:
    """A filter tree under three-valued logic; ``get(path)`` returns the row's value for a path."""
    if isinstance(flt, Cond):
        return eval_cond(flt, get(flt.path))
    if isinstance(flt, FAnd):
        acc: bool | None = True
        for item in flt.items:
            acc = V.and3(acc, eval_filter(item, get))
            if acc is False:
                return False
        return acc
    if isinstance(flt, FOr):
        acc = False
        for item in flt.items:
            acc = V.or3(acc, eval_filter(item, get))
            if acc is True:
                return True
        return acc
    raise TypeError(f"not a filter: {flt!r}")


def row_passes(flt: Filter, row: Row) -> bool:
    """Whether a row passes (TRUE only; UNKNOWN and FALSE reject)."""
    return eval_filter(flt, lambda path: row_value(row, path)) is True
