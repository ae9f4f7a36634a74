"""HIGHLIGHT(content, text) (SPEC §11): the [start, end) character ranges of ``content`` whose analysed
terms match the analysed terms of ``text``, with the BM25 analyzer (stemming, stopwords left out).

Words are found in the original string (so offsets are into the content as returned, whatever
casefolding does to lengths); each word is analysed alone and is a match when one of its terms is a
term of ``text``. A stopword never matches (it has no term).
"""

from __future__ import annotations

from typing import Any

from nlql.text.analyzer import Analyzer

__all__ = ["highlight"]

_DEFAULT = Analyzer()


def highlight(content: str, text: str, analyzer: Any = None) -> list[list[int]]:
    """The matching ranges, in order; [] when none.

    >>> highlight("Agents call tools; the tool works.", "tool")
    [[12, 17], [23, 27]]
    """
    an = analyzer if analyzer is not None else _DEFAULT
    wanted = set(an.terms(text))
    if not wanted:
        return []
    out = []
    for start, end in an.word_spans(content):
        if wanted.intersection(an.terms(content[start:end])):
            out.append([start, end])
    return out
