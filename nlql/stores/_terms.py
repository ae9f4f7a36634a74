"""BM25 term statistics kept inside a server store (Qdrant, Milvus), scored exactly as SPEC §5.

Each stored sentence carries its analysed terms (distinct, as :func:`term_key`\\ s), their term
frequencies and its length (number of terms), written in the same call as the row itself. The corpus
totals (``N`` sentences, total length, the largest ``seq``) are kept as one small record per *writer*
(a store instance that wrote): each writer only ever rewrites its own record, so two engines writing
through one server never lose each other's increments, and a reader sums the records (one per writer
that ever wrote, independent of the corpus size).

A query then reads only what its terms need: the rows that contain at least one query term, with
their terms, frequencies and lengths (the document frequency of a term is the number of those rows
that contain it), and the writer records. Nothing in the engine process outlives the query.

:func:`bm25_scores` is the formula of :class:`nlql.text.bm25.BM25Index`, in float64, so scores equal
the built-in store's to rounding (summation order aside).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

K1 = 1.2
B = 0.75
MAX_TERM_BYTES = 200  # longer terms are stored as a hash (exact match, collision-free in practice)


def term_key(term: str) -> str:
    """The stored form of one analysed term: valid UTF-8, at most ``MAX_TERM_BYTES`` bytes."""
    if len(term) <= MAX_TERM_BYTES and term.isascii():  # (the common case: itself, no encoding needed)
        return term
    raw = term.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_TERM_BYTES and not any(0xD800 <= ord(c) <= 0xDFFF for c in term):
        return term
    return "#" + hashlib.sha1(raw).hexdigest()


def sentence_terms(terms: Sequence[str]) -> tuple[list[str], list[int], int]:
    """``(distinct term keys, their frequencies, length)`` of one sentence's analysed terms."""
    counts: dict[str, int] = {}
    for t in terms:
        k = term_key(t)
        counts[k] = counts.get(k, 0) + 1
    return list(counts), list(counts.values()), len(terms)


def query_keys(terms: Iterable[str]) -> list[str]:
    """The distinct term keys of a query's analysed terms, in first-occurrence order."""
    return list(dict.fromkeys(term_key(t) for t in terms))


@dataclass(slots=True)
class Totals:
    """Corpus totals summed over every writer's record."""

    n: int = 0
    total_len: int = 0
    max_seq: int = 0
    signature: Any = None  # identifies the state of every writer record (changes with every write)

    @classmethod
    def sum(cls, records: Iterable[Mapping[str, int]], signature: Any = None) -> Totals:
        out = cls(signature=signature)
        for r in records:
            out.n += int(r.get("n", 0))
            out.total_len += int(r.get("len", 0))
            out.max_seq = max(out.max_seq, int(r.get("seq", 0)))
        return out


def bm25_scores(
    qkeys: Sequence[str],
    rows: Sequence[tuple[Sequence[str], Sequence[int], int]],
    df: Mapping[str, int],
    totals: Totals,
    k1: float = K1,
    b: float = B,
) -> np.ndarray:
    """BM25 of each row for the query term keys ``qkeys`` (0.0 where no query term occurs).

    Args:
        qkeys: Distinct query term keys (see :func:`query_keys`).
        rows: Per row, its stored ``(term keys, frequencies, length)``.
        df: Number of live rows containing each query term (terms absent or 0 score nothing).
        totals: ``N`` and the total length over all live rows.
    """
    out = np.zeros(len(rows), dtype=np.float64)
    big_n = float(totals.n)
    if big_n <= 0 or not qkeys:
        return out
    idf = {t: math.log1p((big_n - df[t] + 0.5) / (df[t] + 0.5)) for t in qkeys if df.get(t, 0) > 0}
    if not idf:
        return out
    avglen = totals.total_len / big_n
    for i, (terms, tfs, length) in enumerate(rows):
        norm = k1 * (1.0 - b + b * length / avglen) if avglen > 0 else k1 * (1.0 - b)
        own = dict(zip(terms, tfs))
        s = 0.0
        for t, w in idf.items():  # query-term order, as the built-in index sums
            tf = own.get(t)
            if tf is not None:
                f = float(tf)
                s += w * f * (k1 + 1.0) / (f + norm)
        out[i] = s
    return out


def document_frequencies(qkeys: Sequence[str], rows: Iterable[Sequence[str]]) -> dict[str, int]:
    """How many of ``rows`` (each a list of term keys) contain each query term."""
    wanted = set(qkeys)
    df = dict.fromkeys(qkeys, 0)
    for terms in rows:
        for t in wanted.intersection(terms):
            df[t] += 1
    return df


class StoreKeywordIndex:
    """The engine's BM25 source for a store that keeps BM25 itself: every score read from the store.

    It has the interface of the engine's in-process index (``matches``, ``scores``, ``on_upsert``,
    ``on_delete``) and keeps no state, so writes of any process are visible to the next query.
    ``candidates`` is what recall narrows with (:mod:`nlql.execute.keyword_recall`).
    """

    built = True
    in_store = True
    fast_matches = None  # (KeywordSource: no table of row numbers)

    def __init__(self, store: Any, analyzer: Any = None) -> None:
        self.store = store
        self.analyzer = analyzer  # what the engine passed (None: the default analyzer)

    def on_upsert(self, docs: Sequence[Any]) -> None:
        """Nothing to do: the store wrote the terms with the rows."""

    def on_delete(self, doc_ids: Sequence[str]) -> None:
        """Nothing to do: the store removed the terms with the rows."""

    def begin_search(self) -> None:
        """Nothing kept between searches."""

    def matches(self, text: str) -> tuple[list[tuple[str, int]], np.ndarray]:
        """Every row that contains a term of ``text``: its (doc_id, position) and BM25 score."""
        out: tuple[list[tuple[str, int]], np.ndarray] = self.store.bm25_matches(text)
        return out

    def scores(self, text: str, keys: Sequence[Any], rows: Sequence[Any]) -> np.ndarray:
        """BM25 of ``text`` for each row (0.0 where no query term occurs)."""
        out: np.ndarray = self.store.bm25_scores(text, rows)
        return out

    def candidates(self, text: str, flt: Any, n: int | None) -> tuple[list[Any], np.ndarray]:
        """Store keys and scores of rows passing ``flt`` holding a term: at least the ``n`` best."""
        out: tuple[list[Any], np.ndarray] = self.store.bm25_candidates(text, flt, n)
        return out


def first_n(keys: Sequence[Any], scores: np.ndarray, seq: Sequence[int], position: Sequence[int],
            n: int | None) -> tuple[list[Any], np.ndarray]:
    """The ``n`` best of a BM25 arm's rows as the engine ranks an arm: score descending, ties in insertion
    order (``seq``, ``position``); every row, in that order, when ``n`` is None or not smaller. A store's
    ``bm25_candidates`` hands over exactly its depth this way, however many rows tie at the cut."""
    scores = np.asarray(scores, dtype=np.float64)
    order = np.lexsort((np.asarray(position, dtype=np.int64), np.asarray(seq, dtype=np.int64), -scores))
    if n is not None:
        order = order[:n]
    return [keys[i] for i in order.tolist()], scores[order]


# ---------------------------------------------------------------- BM25 as a sparse-vector search

#: The average length the stored sparse BM25 weights are computed at (see :func:`sparse_weights`).
SPARSE_REF_AVGLEN = 32.0
#: Sparse dimensions are below this (a store that needs a non-empty vector may use it for "no term").
SPARSE_DIMS = 2**32 - 2
#: The widest sparse search before a store reads every row holding a term instead.
SPARSE_MAX_LIMIT = 16_384


def sparse_dim(key: str) -> int:
    """The sparse-vector dimension of a term key (a hash; a collision only costs widening)."""
    return int(hashlib.sha1(key.encode("utf-8")).hexdigest()[:8], 16) % SPARSE_DIMS


def sparse_weights(terms: Sequence[str], tfs: Sequence[int], length: int) -> dict[int, float]:
    """A sentence's BM25 term weights at the fixed reference average length, as a sparse vector.

    ``w(t) = tf·(k1+1) / (tf + k1·(1 − b + b·len/A₀))`` with ``A₀ =`` :data:`SPARSE_REF_AVGLEN`. For query
    weights ``idf(t)`` the sparse inner product ``S₀`` and the true score ``S`` (at the current average
    length ``A``) satisfy ``S ≤ max(1, A/A₀)·S₀`` term by term: the ratio of the two saturations is at most
    ``A/A₀``, approached as ``len → ∞``, and at most 1 when ``A ≤ A₀``. So once the ``n``-th best true
    score among the rows read exceeds that factor times the smallest ``S₀`` read, no unread row can reach
    the top ``n`` (:func:`sparse_top`). Hash collisions only raise ``S₀``. Empty for a sentence without
    terms.
    """
    norm = K1 * (1.0 - B + B * length / SPARSE_REF_AVGLEN)
    out: dict[int, float] = {}
    for t, tf in zip(terms, tfs):
        d = sparse_dim(t)
        out[d] = out.get(d, 0.0) + tf * (K1 + 1.0) / (tf + norm)
    return out


def sparse_query(qkeys: Sequence[str], df: Mapping[str, int], totals: Totals) -> tuple[dict[int, float], float]:
    """The sparse query vector (each live term's idf at its dimension) and the bound's factor
    ``max(1, A/A₀)`` (with float32 slack) of :func:`sparse_weights`; empty when no term is live."""
    query: dict[int, float] = {}
    if totals.n <= 0:
        return query, 1.0
    for t in qkeys:
        if df.get(t, 0) > 0:
            d = sparse_dim(t)
            query[d] = query.get(d, 0.0) + math.log1p((totals.n - df[t] + 0.5) / (df[t] + 0.5))
    ratio = max(1.0, (totals.total_len / totals.n) / SPARSE_REF_AVGLEN) * (1 + 1e-5)
    return query, ratio


def sparse_top(n: int, read: Any, score: Any, ratio: float,
               max_limit: int = SPARSE_MAX_LIMIT) -> tuple[list[Any], np.ndarray, int, int] | None:
    """Rows that provably hold the ``n`` best BM25 scores (every row tied with the ``n``-th kept), read
    best-first by a store's sparse-vector search and widened until the bound of :func:`sparse_weights`
    closes.

    Args:
        read: ``read(limit) -> (rows, smallest inner product read, exhausted)``: the store's sparse search
            for the ``limit`` best rows (those failing a re-checked filter left out).
        score: ``score(rows) -> np.ndarray``: their true BM25 scores.
        ratio: The bound's factor from :func:`sparse_query`.

    Returns:
        ``(rows with a score > 0, their scores, rounds, last limit)``, or None when the bound did not close
        within ``max_limit`` rows (the store then reads every row holding a term).
    """
    limit = min(max(4 * n, 64), max_limit)
    rounds = 0
    while True:
        rounds += 1
        rows, smallest, exhausted = read(limit)
        scores = np.asarray(score(rows), dtype=np.float64)
        keep = scores > 0
        kept = [r for r, k in zip(rows, keep) if k]
        scores = scores[keep]
        if exhausted or (len(scores) >= n and float(np.sort(scores)[-n]) > ratio * smallest):
            return kept, scores, rounds, limit
        if limit >= max_limit:
            return None
        limit = min(limit * 4, max_limit)


def keyword_index(store: Any, analyzer: Any) -> StoreKeywordIndex | None:
    """The store's own BM25 source if its terms were written by ``analyzer`` (None: the default)."""
    from nlql.text.analyzer import Analyzer

    if not store.capabilities.KEYWORD_STATS or (analyzer if analyzer is not None else Analyzer()) != store.analyzer:
        return None
    return StoreKeywordIndex(store, analyzer)


__all__ = ["B", "K1", "SPARSE_DIMS", "SPARSE_MAX_LIMIT", "SPARSE_REF_AVGLEN", "StoreKeywordIndex", "first_n",
           "keyword_index", "Totals", "bm25_scores", "document_frequencies", "query_keys", "sentence_terms",
           "sparse_dim", "sparse_query", "sparse_top", "sparse_weights", "term_key"]
