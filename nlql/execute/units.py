"""Building result units (SENTENCE, SPAN, CHUNK, DOCUMENT) from stored sentence rows."""

from __future__ import annotations

from collections.abc import Sequence

from nlql.stores.base import Row

DEFAULT_CHUNK_CHARS = 800


def join_rows(rows: Sequence[Row]) -> str:
    """The exact original text of consecutive sentences (each sentence plus the gap after it)."""
    if not rows:
        return ""
    parts = []
    for r in rows[:-1]:
        parts.append(r.content)
        parts.append(r.tail)
    parts.append(rows[-1].content)
    return "".join(parts)


def chunk_rows(rows: Sequence[Row], max_chars: int = DEFAULT_CHUNK_CHARS) -> list[list[Row]]:
    """Group a document's sentences (in position order) into consecutive chunks of ≤ ``max_chars``.

    Greedy and deterministic; a sentence longer than the limit is a chunk of its own.
    """
    chunks: list[list[Row]] = []
    cur: list[Row] = []
    size = 0
    for r in rows:
        add = len(r.content) + (len(cur[-1].tail) if cur else 0)
        if cur and size + add > max_chars:
            chunks.append(cur)
            cur, size = [], 0
            add = len(r.content)
        cur.append(r)
        size += add
    if cur:
        chunks.append(cur)
    return chunks
