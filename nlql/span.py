"""Source positions: every IR node and every error points back into the query text."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """A half-open character range ``[start, end)`` in the query text, with 1-based line/column.

    ``line``/``column`` locate ``start``; ``end_line``/``end_column`` locate ``end``.
    """

    start: int
    end: int
    line: int
    column: int
    end_line: int
    end_column: int

    @classmethod
    def at(cls, text: str, start: int, end: int | None = None) -> Span:
        """Build a span from character offsets into ``text``.

        >>> Span.at("ab\\ncd", 3, 5)
        Span(start=3, end=5, line=2, column=1, end_line=2, end_column=3)
        """
        start = max(0, min(start, len(text)))
        end = start if end is None else max(start, min(end, len(text)))
        line, column = _line_col(text, start)
        end_line, end_column = _line_col(text, end)
        return cls(start, end, line, column, end_line, end_column)

    def merge(self, other: Span | None) -> Span:
        """The smallest span covering both."""
        if other is None:
            return self
        first = self if self.start <= other.start else other
        last = self if self.end >= other.end else other
        return Span(first.start, last.end, first.line, first.column, last.end_line, last.end_column)


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    line_start = text.rfind("\n", 0, offset) + 1
    return line, offset - line_start + 1
