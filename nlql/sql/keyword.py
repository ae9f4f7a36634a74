"""BM25 read from a SQL store's term tables per query, scored exactly as the built-in index scores.

A store that keeps SPEC §5's statistics in tables (a term table, each sentence's length, N and the
total length) gives the engine a :class:`KeywordIndex` instead of the engine's in-process index: only
the postings of the query's terms are read, nothing in the engine process grows with the corpus, and
every committed write (of any process) is seen by the next query.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nlql.sql.codec import TextCodec

__all__ = ["KeywordIndex", "bm25_scores"]


def bm25_scores(key: np.ndarray, tf: np.ndarray, df: np.ndarray, length: np.ndarray, n: int, total_len: int,
                k1: float = 1.2, b: float = 0.75) -> tuple[np.ndarray, np.ndarray]:
    """SPEC §5's BM25 per row from its postings, with the same float operations in the same order as
    :class:`nlql.text.bm25.BM25Index` (so the scores are identical): postings sorted by row, then by
    query term; ``df``/``length`` per posting. Returns (distinct rows ascending, scores)."""
    if key.size == 0 or n <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    big_n = float(n)
    n_q = df.astype(np.float64)
    idf = np.log1p((big_n - n_q + 0.5) / (n_q + 0.5))
    avglen = total_len / n
    tf = tf.astype(np.float64)
    length = length.astype(np.float64)
    norm = k1 * (1.0 - b + b * length / avglen) if avglen > 0 else np.full(key.size, k1 * (1.0 - b))
    contrib = idf * tf * (k1 + 1.0) / (tf + norm)
    uniq, inverse = np.unique(key, return_inverse=True)
    return uniq, np.bincount(inverse, weights=contrib, minlength=uniq.size)


class KeywordIndex:
    """The engine's BM25 source for a SQL store: every score read from the term tables per query.

    It has the interface of the engine's in-process index (``matches``, ``scores``, ``on_upsert``,
    ``on_delete``) but keeps no state: writes of any process are visible to the next query.

    Args:
        postings: ``postings(escaped terms, keys or None, pushed filter or None) -> (rows, N, total
            length)``, rows ``(key, qi, tf, df, nterms, doc_id, position, …)`` sorted by key then qi
            (the store runs :meth:`nlql.sql.dialect.Dialect.keyword_postings`).
        terms_analyzer: The analyzer that wrote the term table (analyses the query the same way).
        analyzer: What the engine passed (None: the default analyzer), for lowering.
        codec: How the store's text is written (terms are escaped like every stored text).
    """

    built = True
    fast_matches = None  # (KeywordSource: no table of row numbers)
    in_store = True  # BM25 kept in the store: with Capabilities.KEYWORD_STATS recall may narrow with candidates()

    def __init__(self, postings: Callable[..., tuple[list[tuple[Any, ...]], int, int]],
                 terms_analyzer: Any, analyzer: Any = None, codec: TextCodec | None = None) -> None:
        self._postings_of = postings
        self._terms_analyzer = terms_analyzer
        self.analyzer = analyzer
        self.codec = codec if codec is not None else TextCodec()

    def on_upsert(self, docs: Sequence[Any]) -> None:
        """Nothing to do: the store wrote the terms in the same transaction as the rows."""

    def on_delete(self, doc_ids: Sequence[str]) -> None:
        """Nothing to do: the store removed the terms in the same transaction as the rows."""

    def begin_search(self) -> None:
        """Nothing kept between searches."""

    def _postings(self, text: str, keys: list[int] | None, flt: Any = None) -> tuple[list[tuple[Any, ...]], int, int]:
        terms = [self.codec.escape(t) for t in dict.fromkeys(self._terms_analyzer.terms(text))]
        if not terms or keys == []:
            return [], 0, 0
        return self._postings_of(terms, keys, flt)

    def candidates(self, text: str, flt: Any = None, n: int | None = None) -> tuple[list[Any], np.ndarray]:
        """Store keys and BM25 scores (> 0) of every row passing the compiled filter ``flt`` that holds a
        term of ``text`` (all of them, so at least the ``n`` best)."""
        rows, total_n, total = self._postings(text, None, flt)
        if not rows:
            return [], np.zeros(0, dtype=np.float64)
        uniq, scores = self._score(rows, total_n, total)
        return [int(k) for k in uniq], scores

    def matches(self, text: str) -> tuple[list[tuple[str, int]], np.ndarray]:
        """Every row that contains a term of ``text``: its (doc_id, position) and BM25 score."""
        rows, n, total = self._postings(text, None)
        if not rows:
            return [], np.zeros(0, dtype=np.float64)
        uniq, scores = self._score(rows, n, total)
        where = {r[0]: (self.codec.unescape(r[5]), int(r[6])) for r in rows}
        return [where[int(k)] for k in uniq], scores

    def scores(self, text: str, keys: Sequence[Any], rows: Sequence[Any]) -> np.ndarray:
        """BM25 of ``text`` for each row (0.0 where no query term occurs)."""
        wanted = [int(k) for k in keys]
        out = np.zeros(len(wanted), dtype=np.float64)
        found, n, total = self._postings(text, wanted)
        if not found:
            return out
        uniq, scores = self._score(found, n, total)
        by_key = dict(zip(uniq.tolist(), scores.tolist(), strict=True))
        out[:] = [by_key.get(k, 0.0) for k in wanted]
        return out

    @staticmethod
    def _score(rows: list[tuple[Any, ...]], n: int, total: int) -> tuple[np.ndarray, np.ndarray]:
        arr = np.array([(r[0], r[2], r[3], r[4]) for r in rows], dtype=np.int64)
        return bm25_scores(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], n, total)
