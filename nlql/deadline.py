"""One deadline for a whole search, visible to every store call made for it (SPEC §9).

``search(timeout=s)`` (or ``Engine(default_timeout=s)``) starts a :class:`Deadline`; the executor makes
it *current* for the search (a context variable, so concurrent searches in other threads or tasks each
see their own). A store that declares ``Capabilities.DEADLINE`` bounds each backend call by the time
left, read with :func:`remaining`: Postgres as ``SET LOCAL statement_timeout``, Qdrant as the request
``timeout``, an embedded store by checking between rounds. Store call signatures stay as they are.

Neutral ground: stores, the SQL layer and the executor import this module; it imports only errors.

>>> with active(Deadline(None)):
...     remaining() is None
True
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from typing import Any

from nlql.errors import NLQLTimeoutError

__all__ = ["CURRENT", "Deadline", "active", "check", "current", "remaining"]


class Deadline:
    """The end of a search's time budget; ``timeout=None`` is no budget."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self.end = None if timeout is None else time.perf_counter() + timeout

    def remaining(self) -> float | None:
        """Seconds left (never negative); None without a budget."""
        return None if self.end is None else max(0.0, self.end - time.perf_counter())

    def expired(self) -> bool:
        return self.end is not None and time.perf_counter() > self.end


_CURRENT: ContextVar[Deadline | None] = ContextVar("nlql_deadline", default=None)
#: The variable :func:`active` sets, for a caller that enters it at every search without a context manager
#: (``token = CURRENT.set(d)`` … ``CURRENT.reset(token)`` in ``finally``: the executor's run).
CURRENT = _CURRENT


class _Active:
    """The context :func:`active` returns (a class, not a generator: every search enters one)."""

    __slots__ = ("_deadline", "_token")

    def __init__(self, deadline: Deadline) -> None:
        self._deadline = deadline
        self._token: Any = None

    def __enter__(self) -> Deadline:
        self._token = _CURRENT.set(self._deadline)
        return self._deadline

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)


def active(deadline: Deadline) -> _Active:
    """Make ``deadline`` the current one for the calls made inside the block."""
    return _Active(deadline)


def current() -> Deadline | None:
    """The deadline of the search this call is made for, if any."""
    return _CURRENT.get()


def remaining() -> float | None:
    """Seconds left for the current search (None: no deadline, or no search)."""
    d = _CURRENT.get()
    return None if d is None else d.remaining()


def check(store: str, what: str) -> None:
    """Raise :class:`~nlql.errors.NLQLTimeoutError` when the current search has no time left.

    For stores without a client timeout: called before each backend round.
    """
    d = _CURRENT.get()
    if d is not None and d.expired():
        raise NLQLTimeoutError(f"the {store} store ran out of time ({d.timeout} s) before {what}",
                               hint="raise timeout= or narrow the query")
