"""Interrupting a running statement at the search's deadline (SPEC §9), for in-process engines whose
connection can be interrupted from another thread (DuckDB's ``connection.interrupt()``).

:func:`at_deadline` starts no call after the deadline (:func:`nlql.deadline.check`) and, while the call
runs, arms a timer that interrupts it when the time left runs out. The timer can fire only while the
call is running (a lock and a flag), so it never hits the next statement. The engine turns the driver's
interrupt into :class:`~nlql.errors.NLQLTimeoutError` with :func:`timed_out`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from nlql import deadline
from nlql.errors import NLQLTimeoutError

__all__ = ["at_deadline", "timed_out"]


@contextmanager
def at_deadline(store: str, interrupt: Callable[[], None], what: str = "a statement") -> Iterator[None]:
    """Run the block with ``interrupt()`` called if the current search's deadline passes meanwhile."""
    left = deadline.remaining()
    if left is None:
        yield
        return
    deadline.check(store, what)
    lock = threading.Lock()
    running = [True]

    def fire() -> None:
        with lock:
            if running[0]:
                interrupt()

    timer = threading.Timer(left, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            running[0] = False
        timer.cancel()


def timed_out(store: str) -> NLQLTimeoutError | None:
    """The error for a call the deadline interrupted (None when the search still has time)."""
    d = deadline.current()
    if d is None or not d.expired():
        return None
    return NLQLTimeoutError(f"the {store} store was interrupted at the deadline ({d.timeout} s)",
                            hint="raise timeout= or narrow the query")
