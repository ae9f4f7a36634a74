"""uvicorn's HTTP/1.1 protocol (h11) with the limits a server on a network needs (issue 33, items 3 and 9).

uvicorn waits for a request's headers forever, and its only bound, ``limit_concurrency``, counts
connections: 256 clients that send ``POST /search HTTP/1.1`` and never finish their headers made every
real request a plain-text 503. This protocol instead

- gives every request ``header_timeout`` seconds from the moment the server waits for it (a new
  connection, or the end of the previous response on a kept-alive one) to finish its headers; a byte a
  second does not restart the clock. Then it answers 408 and closes. Each connection's clock runs a
  random 0–25 % longer (:data:`JITTER`): connections an attacker opens together would otherwise all
  time out together, and all be reopened in one burst that stalls the event loop (and, with them, the
  requests it is serving) for tens of milliseconds, and triggers a full garbage collection;
- stops reading a connection whose headers are still unfinished :func:`patience` (a second at most)
  after their first piece came: a slow client then costs the event loop nothing per byte it drips (1,000 such connections
  sending a header line a second each cost it a thousand wake-ups a second, in bursts that delayed the
  requests served meanwhile). When its time is up the connection is read once more, so headers that
  did arrive in time are served, and answered 408 otherwise;
- holds at most ``max_connections`` connections: one more, and the connection that has waited longest for
  its headers is closed to make room (a slow client displaces a slow client, never a request being
  served); when every connection is serving a request, the newcomer gets 503;
- answers every refusal it makes itself (bad HTTP, 408, 503) in the API's JSON error shape.

Request bodies are bounded by the app (size, and ``body_timeout`` to arrive: :mod:`nlql.serve.app`).
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["JITTER", "error_bytes", "guarded_protocol", "patience"]

#: Each connection's header clock is ``header_timeout`` times 1 plus up to this (uniformly at random).
JITTER = 0.25
#: Seconds, after its time is up, that a connection whose reading was stopped gets for what it sent
#: meanwhile to be read (it is in the kernel's buffer: one turn of the event loop is enough).
LAST_READ = 0.25


def patience(header_timeout: float) -> float:
    """Seconds, from the first piece of a request's headers, after which a connection still sending them
    is no longer read until its time is up: a second, or half the header timeout when that is shorter."""
    return min(1.0, header_timeout / 2)


def error_bytes(status: int, reason: str, kind: str, message: str, hint: str | None,
                extra_headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A whole HTTP/1.1 response (``Connection: close``) carrying the API's JSON error."""
    body = json.dumps({"error": {"kind": kind, "message": message, "line": 0, "column": 0, "hint": hint,
                                 "rendered": message + (f"\nhint: {hint}" if hint else ""),
                                 "diagnostics": []}}).encode()
    head = [f"HTTP/1.1 {status} {reason}", "content-type: application/json", f"content-length: {len(body)}",
            "connection: close", *(f"{k}: {v}" for k, v in extra_headers)]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def guarded_protocol(header_timeout: float, max_connections: int) -> type[H11Protocol]:
    """The protocol class uvicorn is given (``Config(http=…)``), with these limits."""

    hold_after = patience(header_timeout)

    class GuardedH11Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._header_timer: Any = None
            self._waiting_since = time.monotonic()
            self._first_piece: float | None = None  # when the first bytes of the awaited headers came
            self._held = False  # reading stopped until the header time is up
            self._last_read = False  # the time is up: what arrives now is read, then 408

        # -------------------------------------------------------------- the header clock

        def _waiting(self) -> bool:
            """No request in progress: the connection owes us the headers of its next one."""
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            self._disarm()
            self._waiting_since = time.monotonic()
            self._first_piece = None
            self._header_timer = self.loop.call_later(header_timeout * (1 + JITTER * random.random()),
                                                      self._header_expired)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            self._last_read = False
            if self._held:
                self._held = False
                if not self.transport.is_closing():
                    self.flow.resume_reading()

        def _header_expired(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or not self._waiting():
                return
            if self._held:  # read what came meanwhile (headers that did arrive in time are served)
                self._held = False
                self._last_read = True
                self.flow.resume_reading()
                self._header_timer = self.loop.call_later(LAST_READ, self._header_expired)
                return
            self._refuse(408, "Request Timeout", "request",
                         f"the request headers did not arrive within {header_timeout:g} s",
                         "send the whole request at once")

        def _refuse(self, status: int, reason: str, kind: str, message: str, hint: str | None,
                    extra: tuple[tuple[str, str], ...] = ()) -> None:
            try:
                self.transport.write(error_bytes(status, reason, kind, message, hint, extra))
            finally:
                self.transport.close()

        # -------------------------------------------------------------- uvicorn's hooks

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()
            if len(self.connections) > max_connections:
                self._make_room()

        def _make_room(self) -> None:
            idle = [c for c in self.connections if c is not self and isinstance(c, GuardedH11Protocol)
                    and c._waiting() and not c.transport.is_closing()]
            if idle:
                oldest = min(idle, key=lambda c: c._waiting_since)
                oldest._disarm()
                oldest._refuse(503, "Service Unavailable", "overload",
                               f"the server holds at most {max_connections:,} connections and this one was "
                               "the longest waiting for its request", "retry")
                return
            self._disarm()
            self._refuse(503, "Service Unavailable", "overload",
                         f"the server is serving {max_connections:,} connections", "retry in a moment",
                         (("retry-after", "1"),))

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            if self._header_timer is None:
                return
            if not self._waiting():
                self._disarm()  # the headers are in: the app bounds the body and the work
            elif self._first_piece is None:
                self._first_piece = time.monotonic()
            elif (not self._held and not self._last_read and not self.transport.is_closing()
                  and time.monotonic() - self._first_piece >= hold_after):
                # still not all of the headers `patience` after their first piece: a slow client (the
                # clock starts at the first piece: a kept-alive connection may idle long before a
                # request whose headers come in several packets)
                self._held = True
                self.flow.pause_reading()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self._waiting() and self._header_timer is None:
                self._arm()

        def send_400_response(self, msg: str) -> None:
            self._disarm()
            self._refuse(400, "Bad Request", "request", f"invalid HTTP request: {msg}", None)

    return GuardedH11Protocol
