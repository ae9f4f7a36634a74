"""Which pushed-filter leaves a store can evaluate with exactly NLQL's semantics.

The rules read a store's :class:`~nlql.stores.base.Capabilities` as data; nothing is probed at run time.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from nlql import values as V
from nlql.stores.base import Cond, FAnd, Filter, FOr

if TYPE_CHECKING:
    from nlql.stores.base import Capabilities


def _scalars(cond: Cond) -> list[Any]:
    if cond.op in ("in", "not_in"):
        return list(cond.value)
    if cond.op in ("is_null", "is_not_null"):
        return []
    return [cond.value]


def leaf_pushable(caps: Capabilities, cond: Cond) -> bool:
    """Whether ``caps`` declares everything this leaf needs.

    A leaf needs: its op in ``OPS``; its path root in ``FIELDS``; ``NESTED_KEYS`` for ``meta.a.b``;
    ``NUMERIC_STRINGS`` when a value is a number or a numeric string (stored strings like "2025" must
    compare numerically); ``FLOAT_EQUALITY`` for equality on non-integral floats; ``DATETIMES`` for
    datetime values.
    """
    if cond.op not in caps.OPS:
        return False
    if cond.path[0] not in caps.FIELDS:
        return False
    if cond.path[0] == "meta" and len(cond.path) > 2 and not caps.NESTED_KEYS:
        return False
    for v in _scalars(cond):
        if isinstance(v, (datetime, date)):
            if not caps.DATETIMES:
                return False
        elif isinstance(v, bool) or v is None:
            continue
        elif V.is_number(v) or (isinstance(v, str) and V.numeric_string(v) is not None):
            if cond.path[0] == "meta" and not caps.NUMERIC_STRINGS:
                return False
            if (
                cond.op in ("eq", "ne", "in", "not_in")
                and isinstance(v, float)
                and not float(v).is_integer()
                and not caps.FLOAT_EQUALITY
            ):
                return False
    return True


def filter_pushable(caps: Capabilities, flt: Filter) -> bool:
    """A whole tree: every leaf pushable, and ``OR`` declared if the tree has a disjunction."""
    if isinstance(flt, Cond):
        return leaf_pushable(caps, flt)
    if isinstance(flt, FOr) and not caps.OR:
        return False
    return all(filter_pushable(caps, item) for item in flt.items)


__all__ = ["FAnd", "FOr", "filter_pushable", "leaf_pushable"]
