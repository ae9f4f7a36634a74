"""The engine's side of a search deadline: no store call starts once the time is up (issue 33, item 6).

A store that declares ``Capabilities.DEADLINE`` bounds each of its backend calls by the time left; an
embedded store cannot stop a call that is running. Either way the engine must not *start* store calls
after the deadline: a store that takes 2 s a call would otherwise turn ``timeout=0.5`` into as many
seconds as the plan has calls. With a deadline, the executor hands the stages a :class:`DeadlineStore`
in place of the store: every method call is timed, and once the deadline has passed a call is made only
to finish what the search has (materialising the rows it found) when the calls so far say it will end
within a grace of the deadline (:func:`grace`: a quarter of the timeout, at most one second). Otherwise
the call raises :class:`~nlql.errors.NLQLTimeoutError` and the store is not called. A search therefore
ends within its deadline plus the one store call in flight at it, plus the grace.

Attributes (``capabilities``, ``table``, ``last_stats``, …) pass through unchanged; without a deadline
the executor uses the store itself (nothing is wrapped).
"""

from __future__ import annotations

import time
from typing import Any

from nlql.deadline import Deadline
from nlql.errors import NLQLTimeoutError

__all__ = ["DeadlineStore", "grace", "guarded"]


def grace(timeout: float) -> float:
    """Seconds past the deadline a search may still spend finishing what it has (materialising rows)."""
    return min(1.0, 0.25 * timeout)


class DeadlineStore:
    """``store``, with every method call checked against ``deadline`` before it starts (see the module)."""

    __slots__ = ("_deadline", "_grace", "_slowest", "_store", "calls")

    def __init__(self, store: Any, deadline: Deadline) -> None:
        self._store = store
        self._deadline = deadline
        self._grace = grace(float(deadline.timeout or 0.0))
        self._slowest = 0.0  # the longest store call of this search so far (seconds)
        self.calls = 0

    @property
    def wrapped(self) -> Any:
        """The store itself."""
        return self._store

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if name.startswith("_") or not callable(value) or isinstance(value, type):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self._admit(name)
            t = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                took = time.perf_counter() - t
                self.calls += 1
                if took > self._slowest:
                    self._slowest = took

        return call

    def _admit(self, name: str) -> None:
        d = self._deadline
        end = d.end
        if end is None:
            return
        now = time.perf_counter()
        if now <= end:
            return
        # past the deadline: only a call the search's own calls say ends within the grace
        if (now - end) + self._slowest <= self._grace:
            return
        store = self._store.capabilities.NAME
        raise NLQLTimeoutError(
            f"the search ran out of time ({d.timeout} s) before the {store} store's {name} call "
            f"(its slowest call in this search took {self._slowest:.2f} s)",
            hint="raise timeout= or narrow the query")


def guarded(store: Any, deadline: Deadline) -> Any:
    """The store the stages of one search call: ``store`` itself without a deadline, else a
    :class:`DeadlineStore` over it."""
    if deadline.end is None:
        return store
    return DeadlineStore(store, deadline)
