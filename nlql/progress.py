"""Ingest progress that tells the truth: sentences embedded (the slow part), a rate and an ETA.

``Engine.add_texts(progress=True)`` counts every sentence before embedding the first one, then reports
after each chunk it embeds, so the rate and the ETA appear within the first seconds even when one batch
of long documents takes minutes. On a terminal the report is a live bar (tqdm) on stderr; when stderr
is not a terminal (a pipe, a log file, CI) it is plain lines, one after the first chunk, then one every
``interval`` seconds (``NLQL_PROGRESS_INTERVAL``, default 10) and one at the end, so a piped ingest is
never silent::

    ingest: 1,024/23,571 sentences (4%), 48/3,146 documents, 312 sentences/s, eta 1m12s
    ingest: done, 23,571 sentences of 3,146 documents in 1m15s (314 sentences/s)

Anything with ``start(total, documents)``, ``advance(sentences, documents)`` and ``close()`` can be
passed instead (:class:`Progress` is the protocol).

>>> import io
>>> buf = io.StringIO()
>>> clock = iter([0.0, 2.0, 2.0, 4.0]).__next__
>>> report = PlainProgress(stream=buf, interval=10, clock=clock)
>>> report.start(100, documents=4)
>>> report.advance(50, documents=2)
>>> report.advance(50, documents=2)
>>> report.close()
>>> print(buf.getvalue(), end="")
ingest: 50/100 sentences (50%), 2/4 documents, 25 sentences/s, eta 2s
ingest: done, 100 sentences of 4 documents in 4s (25 sentences/s)
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import IO, Any, Protocol, runtime_checkable

__all__ = ["PlainProgress", "Progress", "TerminalProgress", "chunks", "counting_progress", "format_seconds",
           "make_progress"]

#: Sentences embedded per call while progress is shown: small enough that the first report (and so
#: the ETA) comes within seconds on a slow CPU, large enough that batching by length still pays.
FIRST_CHUNK = 64
CHUNK = 256


def chunks(n: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` ranges over ``n`` sentences: a small first chunk (an early first report), then larger.

    >>> chunks(400)
    [(0, 64), (64, 320), (320, 400)]
    """
    out, lo, size = [], 0, FIRST_CHUNK
    while lo < n:
        out.append((lo, min(n, lo + size)))
        lo, size = lo + size, CHUNK
    return out


@runtime_checkable
class Progress(Protocol):
    """What ``Engine.add_texts(progress=...)`` reports to."""

    def start(self, total: int, documents: int = 0) -> None:
        """``total`` sentences of ``documents`` documents are about to be embedded."""
        ...

    def advance(self, sentences: int, documents: int = 0) -> None:
        """``sentences`` more were embedded (and ``documents`` more written)."""
        ...

    def close(self) -> None:
        """The ingest ended (finished or failed)."""
        ...


def format_seconds(seconds: float) -> str:
    """``"45s"``, ``"3m05s"``, ``"2h03m"``.

    >>> format_seconds(4.2), format_seconds(185), format_seconds(7380)
    ('4s', '3m05s', '2h03m')
    """
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


class _Counts:
    def __init__(self, label: str, clock: Callable[[], float]) -> None:
        self.label = label
        self.clock = clock
        self.total = 0
        self.documents_total = 0
        self.done = 0
        self.documents = 0
        self.started = 0.0

    def rate(self, now: float) -> float:
        elapsed = now - self.started
        return self.done / elapsed if elapsed > 0 else 0.0

    def eta(self, now: float) -> float | None:
        rate = self.rate(now)
        return (self.total - self.done) / rate if rate > 0 else None


class PlainProgress(_Counts):
    """Plain lines on a stream: after the first chunk (so the ETA comes early), then at most one every
    ``interval`` seconds, and a summary at the end."""

    def __init__(self, stream: IO[str] | None = None, *, interval: float = 10.0, label: str = "ingest",
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(label, clock)
        self.stream = stream
        self.interval = float(interval)
        self._last: float | None = None

    def _write(self, line: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):  # a closed pipe must not fail the ingest
            pass

    def start(self, total: int, documents: int = 0) -> None:
        self.total, self.documents_total = int(total), int(documents)
        self.started = self.clock()

    def advance(self, sentences: int, documents: int = 0) -> None:
        self.done += int(sentences)
        self.documents += int(documents)
        now = self.clock()
        if self._last is not None and now - self._last < self.interval:
            return
        if self.done >= self.total and self._last is None and self.total:
            return  # finished within the first chunk: the summary line says it all
        self._last = now
        pct = f" ({100 * self.done // self.total}%)" if self.total else ""
        docs = f", {self.documents:,}/{self.documents_total:,} documents" if self.documents_total else ""
        eta = self.eta(now)
        tail = f", eta {format_seconds(eta)}" if eta is not None else ""
        self._write(f"{self.label}: {self.done:,}/{self.total:,} sentences{pct}{docs}, "
                    f"{self.rate(now):,.0f} sentences/s{tail}")

    def close(self) -> None:
        now = self.clock()
        docs = f" of {self.documents:,} documents" if self.documents_total else ""
        state = "done" if self.done >= self.total else "stopped"
        self._write(f"{self.label}: {state}, {self.done:,} sentences{docs} in {format_seconds(now - self.started)} "
                    f"({self.rate(now):,.0f} sentences/s)")


class TerminalProgress(_Counts):
    """A live tqdm bar counting sentences (rate and ETA included) on a terminal."""

    def __init__(self, stream: IO[str] | None = None, *, label: str = "ingest",
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(label, clock)
        self.stream = stream
        self._bar: Any = None

    def start(self, total: int, documents: int = 0) -> None:
        from tqdm import tqdm

        self.total, self.documents_total = int(total), int(documents)
        self.started = self.clock()
        self._bar = tqdm(total=self.total, unit=" sentences", desc=self.label, file=self.stream or sys.stderr,
                         dynamic_ncols=True, smoothing=0.1, mininterval=0.5)

    def advance(self, sentences: int, documents: int = 0) -> None:
        self.done += int(sentences)
        self.documents += int(documents)
        if self._bar is not None:
            if self.documents_total:
                self._bar.set_postfix_str(f"{self.documents:,}/{self.documents_total:,} documents", refresh=False)
            self._bar.update(int(sentences))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _width(stream: IO[str]) -> int:
    """The columns of the terminal behind ``stream`` (0 when it reports no size or none can be read)."""
    try:
        return int(os.get_terminal_size(stream.fileno()).columns)
    except (AttributeError, ValueError, OSError):
        return 0


def counting_progress(*, label: str = "ingest", stream: IO[str] | None = None) -> TerminalProgress | PlainProgress:
    """The built-in reporter (``make_progress(True)``): a bar when ``stream`` (stderr by default) is a
    terminal, plain lines otherwise; it counts the sentences (``total``, ``done``)."""
    out = stream if stream is not None else sys.stderr
    try:
        tty = bool(out.isatty())
    except (AttributeError, ValueError):
        tty = False
    if tty and _width(out) > 0:
        return TerminalProgress(out, label=label)
    # not a terminal, or a terminal with no size (a pty nobody sized: `docker exec -t`, `script`,
    # some CI runners), where a bar draws nothing: plain lines
    try:  # NLQL_PROGRESS_INTERVAL: seconds between plain lines (default 10)
        interval = float(os.environ.get("NLQL_PROGRESS_INTERVAL", "") or 10.0)
    except ValueError:
        interval = 10.0
    return PlainProgress(out, label=label, interval=interval)


def make_progress(progress: Any, *, label: str = "ingest", stream: IO[str] | None = None) -> Progress | None:
    """The reporter for ``add_texts(progress=...)``: ``False``/``None`` → none; ``True`` → a bar when
    ``stream`` (stderr by default) is a terminal, plain lines otherwise; a :class:`Progress` → itself."""
    if progress is None or progress is False:
        return None
    if progress is True:
        return counting_progress(label=label, stream=stream)
    if isinstance(progress, Progress):
        return progress
    raise TypeError("progress must be a bool or an object with start(), advance() and close()")
