"""Text processing for NLQL: sentence splitting, the analyzer and BM25 index, and WITHIN periods.

``split`` (sentence spans), ``analyzer`` (text → terms), ``bm25`` (incremental SPEC §5 index) and
``temporal`` (English period → half-open range). dateparser is imported only when a period needs it.
"""

from __future__ import annotations

from nlql.text.analyzer import Analyzer
from nlql.text.bm25 import BM25Index
from nlql.text.split import sentences, split_sentences
from nlql.text.temporal import Period, resolve_period, warm_up

__all__ = ["Analyzer", "BM25Index", "Period", "resolve_period", "sentences", "split_sentences", "warm_up"]
