"""A bounded, thread-safe cache of plans (issue 21: parse + check + plan cost ~1 ms a query).

The engine keys an entry on everything planning reads: the query (its text, or the IR it was given),
the parameter values (type-tagged, so ``1``, ``1.0`` and ``True`` differ), the store's capabilities,
the engine's write count (a write, or another process's write seen by a sync, changes the data and
may change the schema: every entry before it is unreachable), the registered functions, the
reranker, the rerank factor, the LIMIT ceiling and the BM25 analyzer. A plan that reads the clock
(``WITHIN "last week"``, ``NOW()``, ``RECENCY``, ``TEMPORAL``) is keyed on the instant it was planned
at too, so it is reused only while the clock reads the same instant (a fixed clock), never across a
resolved period.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from datetime import date, datetime, time, timedelta
from typing import Any

from nlql import ir

#: Calls whose value depends on the clock (the planner resolves or folds them against ``now``).
CLOCK_CALLS = frozenset({"NOW", "RECENCY", "TEMPORAL"})

_SCALARS = (str, int, bool, type(None), bytes)


class Unkeyable(Exception):
    """A parameter value the cache cannot key on (the query is planned without the cache)."""


def freeze(value: Any) -> Hashable:
    """A hashable, type-tagged copy of a parameter value: equal only when planning would be equal.

    Floats by ``repr`` (``0.0`` and ``-0.0`` differ, NaN equals NaN); datetimes with their offset
    (the same instant in two zones prints differently); containers element by element. Anything else
    raises :class:`Unkeyable`.
    """
    t = type(value)
    if t in _SCALARS:
        return (t, value)
    if t is float:
        return (t, repr(value))
    if t in (datetime, date, time, timedelta):
        return (t, repr(value))
    if t in (list, tuple):
        return (t, tuple(freeze(v) for v in value))
    if t in (set, frozenset):
        return (t, frozenset(freeze(v) for v in value))
    if t is dict:
        return (t, tuple((freeze(k), freeze(v)) for k, v in value.items()))
    raise Unkeyable(t.__name__)


def params_key(params: Mapping[str, Any] | None) -> Hashable:
    """The parameters as a key (names sorted; raises :class:`Unkeyable`)."""
    if not params:
        return ()
    return tuple(sorted((k, freeze(v)) for k, v in params.items()))


def reads_clock(query: ir.Query) -> bool:
    """Whether planning ``query`` (params bound) reads the clock: a ``WITHIN "period"``, NOW, RECENCY
    or TEMPORAL (``WITHIN (a, b)`` with absolute bounds does not)."""
    for node in query.walk():
        if isinstance(node, ir.Within) and node.period is not None:
            return True
        if isinstance(node, ir.Call) and node.name in CLOCK_CALLS:
            return True
    return False


class PlanCache:
    """A least-recently-used map of at most ``size`` entries (0: caches nothing); safe across threads."""

    def __init__(self, size: int = 256) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"plan_cache_size must be a non-negative integer, not {size!r}")
        self.size = size
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Any:
        """The entry for ``key`` (now the most recently used), or None."""
        if not self.size:
            return None
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry

    def put(self, key: Hashable, entry: Any) -> None:
        """Store ``entry``, dropping the least recently used entries beyond the bound."""
        if not self.size:
            return
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
