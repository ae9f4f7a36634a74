"""An incremental BM25 index over integer-keyed rows, scoring exactly as SPEC §5.

For a query, a row's score is the sum over the *distinct* analysed query terms present in the row of::

    idf(t) · tf · (k1 + 1) / (tf + k1 · (1 − b + b · len / avglen))
    idf(t) = ln(1 + (N − n(t) + 0.5) / (n(t) + 0.5))

with ``tf`` the term's count in the row, ``len`` the row's number of terms, ``N`` the number of
live rows (rows without any term count too), ``n(t)`` the number of live rows containing ``t`` and
``avglen`` the mean ``len`` over live rows. A term repeated in the query counts once (SPEC: OR
semantics over terms), so ``"cat cat"`` scores like ``"cat"``. A row that matches no query term has
no score at all (it is absent from the result, not scored 0).

Implementation: term statistics as compressed sparse rows (CSR: one row of (slot, tf) postings per
term), in numpy, not bm25s and not a scipy matrix. bm25s bakes N, n and avglen into a precomputed
score matrix at index time and cannot add or remove rows (its maintainer says so in xhluca/bm25s#5;
#19 and #98 ask for it), and a scipy matrix of weights would have to be rebuilt after every
mutation, since every weight depends on avglen. Here ``add`` only analyses the text and appends to a
pending buffer; the buffer is sealed (sorted into an immutable CSR segment) lazily before the next
query or removal, and segments are merged log-structured (the newest two whenever the older is at
most twice the newer), so there is a large base segment plus O(log n) small deltas and mutations
stay cheap. A segment keeps the term-major CSR for queries and a slot-major copy (slot → terms) so a
removal can decrement document frequencies without a scan. Removing marks a slot dead; dead
postings are dropped on merge, and all slots are renumbered once dead ones outnumber live ones.

A query is a sparse row product: for each distinct query term, in query order, its CSR row in each
segment is one contiguous slice; the slice's contributions (the formula above, with the per-row
length norm cached until the next write) are added into a dense accumulator over slots, so a row's
sum is built term by term in query order, exactly as the other BM25 implementations of the project
sum (``nlql.stores._terms``, ``nlql.sql.keyword``). Dead rows and rows outside a key filter are
dropped from the matches, and ``top_k`` partitions (ties kept) before it sorts. Measured on a 2-core
box with 100k one-sentence rows (``bench/bm25_speed.py``): a three-term top-10 over 11k matching rows
≈ 0.5–1 ms, the order of a scipy product of a sparse query row with precomputed weights.

>>> index = BM25Index()
>>> index.add([10, 11, 12], ["the cat sat", "the dog sat", "a cat and a cat"])
>>> keys, scores = index.score("cat")
>>> keys.tolist(), scores.round(4).tolist()
([10, 12], [0.47, 0.6463])
>>> index.top_k("cat dog", 1)[0].tolist()
[11]
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlql.text.analyzer import Analyzer

__all__ = ["BM25Index"]

_STATE_FORMAT = 1
_EMPTY_KEYS = np.zeros(0, dtype=np.int64)
_EMPTY_SCORES = np.zeros(0, dtype=np.float64)


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenate ``arange(s, e)`` for every pair, vectorised."""
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    nonempty = lengths > 0
    starts, lengths = starts[nonempty], lengths[nonempty]
    # Each output position is its range's start plus its offset inside the range.
    run_starts = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) - np.repeat(run_starts - starts, lengths)


@dataclass(frozen=True)
class _Segment:
    """Immutable postings for the contiguous slot range ``[lo, hi)``.

    The same (slot, term, tf) triplets are kept twice: term-major for queries (``terms``,
    ``offsets``, ``slots``, ``tf``) and slot-major for removals and merges (``fwd_*``).
    """

    lo: int
    hi: int
    terms: np.ndarray  # sorted distinct term ids present in the segment
    offsets: np.ndarray  # postings of terms[i] are [offsets[i], offsets[i+1])
    slots: np.ndarray  # posting → slot, ascending within a term
    tf: np.ndarray  # posting → term frequency
    fwd_ptr: np.ndarray  # slot s owns fwd entries [fwd_ptr[s-lo], fwd_ptr[s-lo+1])
    fwd_terms: np.ndarray
    fwd_tf: np.ndarray

    @property
    def size(self) -> int:
        return int(self.slots.shape[0]) + (self.hi - self.lo)

    def forward(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(slot, term, tf) of every posting, slot-major."""
        counts = np.diff(self.fwd_ptr)
        return np.repeat(np.arange(self.lo, self.hi, dtype=np.int64), counts), self.fwd_terms, self.fwd_tf

    @staticmethod
    def build(lo: int, hi: int, slot: np.ndarray, term: np.ndarray, tf: np.ndarray) -> _Segment:
        """A segment from (slot, term, tf) triplets sorted by slot; each (slot, term) at most once."""
        counts = np.bincount(slot - lo, minlength=hi - lo) if slot.size else np.zeros(hi - lo, dtype=np.int64)
        fwd_ptr = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(counts, out=fwd_ptr[1:])
        # Stable, so slots stay ascending within a term; narrow keys let numpy use a radix sort.
        narrow = term.astype(np.uint16 if term.size and term.max() < 65536 else np.uint32)
        order = np.argsort(narrow, kind="stable")
        p_term = term[order]
        if p_term.size:
            starts = np.concatenate(([0], np.flatnonzero(np.diff(p_term)) + 1))
            terms = p_term[starts]
            offsets = np.concatenate((starts, [p_term.size])).astype(np.int64)
        else:
            terms = np.zeros(0, dtype=np.int64)
            offsets = np.zeros(1, dtype=np.int64)
        return _Segment(lo, hi, terms, offsets, slot[order], tf[order], fwd_ptr, term, tf)


class BM25Index:
    """An incremental inverted index with SPEC §5 BM25 scoring over integer row keys.

    Thread-safe: every public method holds an internal lock.

    Args:
        analyzer: Turns text into terms, for rows and queries alike; ``Analyzer()`` by default.
        k1: Term-frequency saturation (SPEC: 1.2).
        b: Length normalisation (SPEC: 0.75).
    """

    def __init__(self, analyzer: Analyzer | None = None, k1: float = 1.2, b: float = 0.75) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.analyzer = analyzer if analyzer is not None else Analyzer()
        self.k1 = float(k1)
        self.b = float(b)
        self._lock = threading.RLock()
        self._vocab: dict[str, int] = {}
        self._terms: list[str] = []
        self._df = np.zeros(0, dtype=np.int64)
        # Per slot (insertion order); capacity grows by doubling.
        self._n_slots = 0
        self._slot_key = np.zeros(0, dtype=np.int64)
        self._slot_len = np.zeros(0, dtype=np.int64)
        self._alive = np.zeros(0, dtype=bool)
        self._key_to_slot: dict[int, int] = {}
        self._keys_are_slots = True  # _slot_key[:_n_slots] == arange(_n_slots): a slot is its own key
        self._n_live = 0
        self._total_len = 0
        self._segments: list[_Segment] = []
        # Rows added since the last seal: their keys, lengths and flat term ids.
        self._pending_keys: list[int] = []
        self._pending_lens: list[int] = []
        self._pending_ids: list[int] = []
        self._sealed_slots = 0  # slots [0, _sealed_slots) are in segments
        self._key_table: tuple[str, np.ndarray, np.ndarray] | None = None
        self._norm_cache: tuple[tuple[int, int, int], np.ndarray] | None = None

    # ------------------------------------------------------------------ mutation

    def add(self, keys: Sequence[int] | np.ndarray, texts: Sequence[str]) -> None:
        """Index ``texts`` under ``keys``. A key that is already live is replaced.

        Raises:
            ValueError: ``keys`` and ``texts`` differ in length, or ``keys`` repeats a key.
        """
        key_list = [int(k) for k in keys]
        if len(key_list) != len(texts):
            raise ValueError(f"{len(key_list)} keys for {len(texts)} texts")
        if len(set(key_list)) != len(key_list):
            raise ValueError("duplicate keys in one add() call")
        if not key_list:
            return
        analysed = [self.analyzer.terms(t) for t in texts]
        with self._lock:
            replaced = [k for k in key_list if k in self._key_to_slot]
            if replaced:
                self._remove_locked(replaced)
            vocab, terms = self._vocab, self._terms
            flat: list[str] = [w for ws in analysed for w in ws]
            for w in dict.fromkeys(flat):
                if w not in vocab:
                    vocab[w] = len(terms)
                    terms.append(w)
            first = self._n_slots + len(self._pending_keys)
            for i, k in enumerate(key_list):
                self._key_to_slot[k] = first + i
            lens = [len(ws) for ws in analysed]
            self._pending_keys.extend(key_list)
            self._pending_lens.extend(lens)
            self._pending_ids.extend(map(vocab.__getitem__, flat))
            self._n_live += len(key_list)
            self._total_len += sum(lens)
            self._key_table = None

    def remove(self, keys: Iterable[int] | np.ndarray) -> None:
        """Forget the rows with these keys; keys that are not live are ignored."""
        with self._lock:
            self._remove_locked([int(k) for k in keys])

    def seal(self) -> None:
        """Index the rows added since the last query now (a writer calls this so that the next query
        does not pay for the sort)."""
        with self._lock:
            self._seal()

    def __len__(self) -> int:
        """The number of live rows."""
        return self._n_live

    def __contains__(self, key: object) -> bool:
        return key in self._key_to_slot

    def keys(self) -> np.ndarray:
        """The live keys, ascending."""
        with self._lock:
            self._seal()
            return np.sort(self._slot_key[: self._n_slots][self._alive[: self._n_slots]])

    # ------------------------------------------------------------------ queries

    def query_terms(self, query: str) -> list[str]:
        """The distinct analysed terms of ``query``, in first-occurrence order (what ``score`` uses)."""
        return list(dict.fromkeys(self.analyzer.terms(query)))

    def score(self, query: str, keys: np.ndarray | Sequence[int] | None = None, *,
              ordered: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """BM25 of every live row that contains at least one query term.

        Args:
            query: The query text (analysed like the rows).
            keys: If given, only these rows are scored (unknown or removed keys are ignored).
                ``N``, ``n`` and ``avglen`` still come from all live rows.
            ordered: Sort by key (the default); ``False`` returns insertion order, which skips a sort.

        Returns:
            ``(keys, scores)``: int64 keys (ascending when ``ordered``) and their float64 scores (all > 0).
        """
        with self._lock:
            slots, scores = self._score_slots(query, keys)
            out_keys = slots if self._keys_are_slots else self._slot_key[slots]
            if not ordered or out_keys.size < 2 or bool((out_keys[1:] > out_keys[:-1]).all()):
                return out_keys, scores
            order = np.argsort(out_keys, kind="stable")
            return out_keys[order], scores[order]

    def top_k(
        self, query: str, k: int, mask_keys: np.ndarray | Sequence[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best rows: score descending, ties by key ascending.

        Args:
            query: The query text.
            k: How many rows at most.
            mask_keys: If given, only these rows compete (as ``keys`` in ``score``).

        Returns:
            ``(keys, scores)`` of at most ``k`` rows, best first.
        """
        if k <= 0:
            return _EMPTY_KEYS.copy(), _EMPTY_SCORES.copy()
        with self._lock:
            slots, scores = self._score_slots(query, mask_keys)
            out_keys = slots if self._keys_are_slots else self._slot_key[slots]
        if scores.size > k:
            # Keep every row tied with the k-th score, then order exactly.
            kth = np.partition(scores, scores.size - k)[scores.size - k]
            keep = scores >= kth
            out_keys, scores = out_keys[keep], scores[keep]
        order = np.lexsort((out_keys, -scores))[:k]
        return out_keys[order], scores[order]

    def stats(self, terms: Iterable[str] | str) -> dict[str, Any]:
        """The collection statistics BM25 uses, so another backend can check it computes the same.

        Args:
            terms: Analysed terms (e.g. ``index.query_terms(q)``); a ``str`` is analysed first.

        Returns:
            ``{"N", "avglen", "total_len", "df": {term: n}, "k1", "b", "analyzer"}``.
        """
        term_list = self.query_terms(terms) if isinstance(terms, str) else list(dict.fromkeys(terms))
        with self._lock:
            self._seal()
            df = {}
            for t in term_list:
                i = self._vocab.get(t)
                df[t] = int(self._df[i]) if i is not None else 0
            return {
                "N": self._n_live,
                "avglen": self._total_len / self._n_live if self._n_live else 0.0,
                "total_len": self._total_len,
                "df": df,
                "k1": self.k1,
                "b": self.b,
                "analyzer": self.analyzer.config(),
            }

    # ------------------------------------------------------------------ persistence

    def state(self) -> dict[str, np.ndarray]:
        """The index as plain numpy arrays (no object dtype), ready for ``np.savez``.

        Only live rows and terms they use are kept; ``BM25Index.from_state`` restores an index
        that scores identically.
        """
        with self._lock:
            self._seal()
            self._compact(force=True)
            n = self._n_slots
            keys = self._slot_key[:n].copy()
            lens = self._slot_len[:n].copy()
            if self._segments:
                slot, term, tf = self._segments[0].forward()
            else:
                slot = term = tf = np.zeros(0, dtype=np.int64)
            used = self._df[: len(self._terms)] > 0
            new_id = np.cumsum(used) - 1
            vocab = [t for t, u in zip(self._terms, used.tolist(), strict=True) if u]
            return {
                "format": np.array(_STATE_FORMAT, dtype=np.int64),
                "k1": np.array(self.k1),
                "b": np.array(self.b),
                "analyzer": np.array(json.dumps(self.analyzer.config(), sort_keys=True)),
                "vocab": np.array(vocab, dtype=str),
                "keys": keys,
                "lens": lens,
                "post_term": new_id[term].astype(np.int64) if term.size else term.astype(np.int64),
                "post_slot": slot.astype(np.int64),
                "post_tf": tf.astype(np.int64),
            }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], analyzer: Analyzer | None = None) -> BM25Index:
        """Rebuild an index from ``state()`` (a dict or an ``np.load`` result).

        Args:
            state: The arrays returned by ``state()``.
            analyzer: The analyzer to use; by default rebuilt from the stored config. If given,
                it must have the same config as the stored one.

        Raises:
            ValueError: the state is malformed or its analyzer differs from ``analyzer``.
        """
        fmt = int(np.asarray(state["format"]))
        if fmt != _STATE_FORMAT:
            raise ValueError(f"unsupported BM25 state format {fmt}")
        config = json.loads(str(np.asarray(state["analyzer"])))
        if analyzer is None:
            analyzer = Analyzer.from_config(config)
        elif json.loads(json.dumps(analyzer.config(), sort_keys=True)) != config:
            raise ValueError(f"analyzer {analyzer.config()} differs from the stored one {config}")
        index = cls(analyzer, k1=float(np.asarray(state["k1"])), b=float(np.asarray(state["b"])))
        vocab = [str(t) for t in np.asarray(state["vocab"]).tolist()]
        keys = np.asarray(state["keys"], dtype=np.int64)
        lens = np.asarray(state["lens"], dtype=np.int64)
        term = np.asarray(state["post_term"], dtype=np.int64)
        slot = np.asarray(state["post_slot"], dtype=np.int64)
        tf = np.asarray(state["post_tf"], dtype=np.int64)
        n = keys.shape[0]
        if (
            lens.shape != (n,)
            or not (term.shape == slot.shape == tf.shape)
            or len(set(keys.tolist())) != n
            or (term.size and (term.min() < 0 or term.max() >= len(vocab) or slot.min() < 0 or slot.max() >= n))
        ):
            raise ValueError("malformed BM25 state")
        index._terms = vocab
        index._vocab = {t: i for i, t in enumerate(vocab)}
        index._df = np.bincount(term, minlength=len(vocab)).astype(np.int64)
        index._ensure_capacity(n)
        index._slot_key[:n] = keys
        index._keys_are_slots = bool((keys == np.arange(n)).all())
        index._slot_len[:n] = lens
        index._alive[:n] = True
        index._n_slots = index._sealed_slots = n
        index._key_to_slot = dict(zip(keys.tolist(), range(n), strict=True))
        index._n_live = n
        index._total_len = int(lens.sum())
        if n:
            order = np.lexsort((term, slot))
            slot, term, tf = slot[order], term[order], tf[order]
            if slot.size > 1 and not (np.diff(slot * len(vocab) + term) > 0).all():
                raise ValueError("malformed BM25 state: a (row, term) pair appears twice")
            index._segments = [_Segment.build(0, n, slot, term, tf)]
        return index

    # ------------------------------------------------------------------ internals

    def _ensure_capacity(self, n: int) -> None:
        cap = self._slot_key.shape[0]
        if n <= cap:
            return
        new_cap = max(n, 2 * cap, 1024)
        for name in ("_slot_key", "_slot_len", "_alive"):
            old = getattr(self, name)
            new = np.zeros(new_cap, dtype=old.dtype)
            new[:cap] = old
            setattr(self, name, new)

    def _seal(self) -> None:
        """Turn the pending rows into a postings segment (lock held)."""
        m = len(self._pending_keys)
        if m == 0:
            return
        lo = self._n_slots
        hi = lo + m
        self._ensure_capacity(hi)
        lens = np.array(self._pending_lens, dtype=np.int64)
        ids = np.array(self._pending_ids, dtype=np.int64)
        self._slot_key[lo:hi] = self._pending_keys
        if self._keys_are_slots:
            self._keys_are_slots = self._pending_keys == list(range(lo, hi))
        self._slot_len[lo:hi] = lens
        self._alive[lo:hi] = True
        self._n_slots = hi
        self._pending_keys, self._pending_lens, self._pending_ids = [], [], []
        v = len(self._terms)
        if self._df.shape[0] < v:
            self._df = np.concatenate((self._df, np.zeros(max(v - self._df.shape[0], self._df.shape[0]), np.int64)))
        if ids.size:
            rows = np.repeat(np.arange(m, dtype=np.int64), lens)
            codes, tf = np.unique(rows * v + ids, return_counts=True)  # row-major, each (row, term) once
            slot = codes // v + lo
            term = codes % v
            self._df[:v] += np.bincount(term, minlength=v)
        else:
            slot = term = tf = np.zeros(0, dtype=np.int64)
        self._segments.append(_Segment.build(lo, hi, slot, term, tf.astype(np.int64)))
        self._sealed_slots = hi
        while len(self._segments) >= 2 and self._segments[-2].size <= 2 * self._segments[-1].size:
            newer = self._segments.pop()
            older = self._segments.pop()
            self._segments.append(self._merge(older, newer))

    def _merge(self, older: _Segment, newer: _Segment) -> _Segment:
        """One segment for two adjacent ones, dropping dead rows' postings."""
        parts = [seg.forward() for seg in (older, newer)]
        slot = np.concatenate([p[0] for p in parts])
        term = np.concatenate([p[1] for p in parts])
        tf = np.concatenate([p[2] for p in parts])
        keep = self._alive[slot]
        if not keep.all():
            slot, term, tf = slot[keep], term[keep], tf[keep]
        return _Segment.build(older.lo, newer.hi, slot, term, tf)

    def _remove_locked(self, keys: list[int]) -> None:
        slots = [self._key_to_slot.pop(k) for k in keys if k in self._key_to_slot]
        if not slots:
            return
        if any(s >= self._sealed_slots for s in slots):
            self._seal()
        arr = np.array(sorted(slots), dtype=np.int64)
        self._alive[arr] = False
        self._n_live -= arr.size
        self._total_len -= int(self._slot_len[arr].sum())
        gone_terms = []  # the forward index names the terms whose df drops
        for seg in self._segments:
            inside = arr[(arr >= seg.lo) & (arr < seg.hi)]
            if inside.size:
                idx = _ranges(seg.fwd_ptr[inside - seg.lo], seg.fwd_ptr[inside - seg.lo + 1])
                gone_terms.append(seg.fwd_terms[idx])
        if gone_terms:
            terms = np.concatenate(gone_terms)
            if terms.size < 4096:
                np.subtract.at(self._df, terms, 1)
            else:
                self._df -= np.bincount(terms, minlength=self._df.shape[0])
        self._key_table = None
        self._compact(force=False)

    def _compact(self, force: bool) -> None:
        """Renumber slots densely when dead ones dominate (or when ``force``); one segment results."""
        self._seal()
        n = self._n_slots
        dead = n - self._n_live
        if force:
            if dead == 0 and len(self._segments) <= 1:
                return
        elif dead <= self._n_live or dead <= 1024:
            return
        alive = self._alive[:n].copy()
        new_slot = np.cumsum(alive) - 1
        parts = [seg.forward() for seg in self._segments]
        live = self._n_live
        keys = self._slot_key[:n][alive].copy()
        lens = self._slot_len[:n][alive].copy()
        self._slot_key[:live] = keys
        self._keys_are_slots = bool((keys == np.arange(live)).all())
        self._slot_len[:live] = lens
        self._alive[:live] = True
        self._alive[live:n] = False
        self._n_slots = self._sealed_slots = live
        self._key_to_slot = dict(zip(keys.tolist(), range(live), strict=True))
        self._key_table = None
        if live == 0:
            self._segments = []
            return
        empty = np.zeros(0, dtype=np.int64)
        slot = np.concatenate([p[0] for p in parts] or [empty])
        term = np.concatenate([p[1] for p in parts] or [empty])
        tf = np.concatenate([p[2] for p in parts] or [empty])
        keep = alive[slot]
        # Segments are in slot order and each is slot-major, so the concatenation is slot-sorted.
        self._segments = [_Segment.build(0, live, new_slot[slot[keep]], term[keep], tf[keep])]

    def _slots_for_keys(self, keys: np.ndarray | Sequence[int]) -> np.ndarray:
        """The live slots of the given keys (unknown keys dropped)."""
        arr = np.asarray(keys, dtype=np.int64).ravel()
        if arr.size == 0 or self._n_live == 0:
            return np.zeros(0, dtype=np.int64)
        if self._key_table is None:
            n = self._n_slots
            alive = self._alive[:n]
            live_slots = np.flatnonzero(alive)
            live_keys = self._slot_key[:n][alive]
            lo, hi = int(live_keys.min()), int(live_keys.max())
            if lo >= 0 and hi <= 4 * n + 65536:  # dense keys (the engine's row numbers): direct table
                table = np.full(hi + 1, -1, dtype=np.int64)
                table[live_keys] = live_slots
                self._key_table = ("direct", table, np.zeros(0, dtype=np.int64))
            else:
                order = np.argsort(live_keys)
                self._key_table = ("sorted", live_keys[order], live_slots[order])
        kind, a, b = self._key_table
        if kind == "direct":
            inside = arr[(arr >= 0) & (arr < a.shape[0])]
            slots = a[inside]
            return slots[slots >= 0]
        pos = np.searchsorted(a, arr)
        pos[pos >= a.shape[0]] = 0
        hit = a[pos] == arr
        return b[pos[hit]]

    def _norms(self) -> np.ndarray:
        """``k1 · (1 − b + b · len / avglen)`` per slot, cached until the next write (lock held)."""
        key = (self._n_slots, self._n_live, self._total_len)
        if self._norm_cache is None or self._norm_cache[0] != key:
            k1, b = self.k1, self.b
            avglen = self._total_len / self._n_live if self._n_live else 0.0
            length = self._slot_len[: self._n_slots].astype(np.float64)
            norm = k1 * (1.0 - b + b * length / avglen) if avglen > 0 else np.full(length.size, k1 * (1.0 - b))
            self._norm_cache = (key, norm)
        return self._norm_cache[1]

    def _score_slots(
        self, query: str, keys: np.ndarray | Sequence[int] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(slots, scores) of matching live rows, slots ascending (lock held).

        One pass per distinct query term, in query order: its postings are a contiguous slice of each
        segment's term-major arrays (a CSR row), their contributions are added into the rows' sums. A
        row's sum is thus built in query-term order, as every other BM25 in the project sums.
        """
        self._seal()
        q_ids = [self._vocab[t] for t in self.query_terms(query) if t in self._vocab]
        if not q_ids or self._n_live == 0:
            return _EMPTY_KEYS.copy(), _EMPTY_SCORES.copy()
        q = np.array(q_ids, dtype=np.int64)
        n_q = self._df[q].astype(np.float64)
        present = n_q > 0
        q, n_q = q[present], n_q[present]
        if q.size == 0:
            return _EMPTY_KEYS.copy(), _EMPTY_SCORES.copy()
        big_n = float(self._n_live)
        idf = np.log1p((big_n - n_q + 0.5) / (n_q + 0.5))
        # Where each query term's postings lie in each segment (a CSR row per term).
        spans: list[tuple[_Segment, int, int]] = []
        total = 0
        for seg in self._segments:
            if seg.terms.size == 0:
                continue
            pos = np.searchsorted(seg.terms, q)
            pos_c = np.minimum(pos, seg.terms.size - 1)
            found = seg.terms[pos_c] == q
            starts = np.where(found, seg.offsets[pos_c], 0)
            ends = np.where(found, seg.offsets[pos_c + 1], 0)
            for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
                spans.append((seg, lo, hi))
                total += hi - lo
        if total == 0:
            return _EMPTY_KEYS.copy(), _EMPTY_SCORES.copy()
        norms = self._norms()
        k1p = self.k1 + 1.0
        n_slots = self._n_slots
        dense_path = total * 8 >= n_slots
        acc = np.zeros(n_slots, dtype=np.float64) if dense_path else None
        slot_parts, contrib_parts = [], []
        first = True  # nothing added to the accumulator yet: 0.0 + x is x, so the first term assigns
        for t in range(q.size):
            w = idf[t]
            for seg, lo, hi in spans[t::q.size]:
                if hi == lo:
                    continue
                sl = seg.slots[lo:hi]
                tf = seg.tf[lo:hi].astype(np.float64)
                contrib = w * tf * k1p / (tf + norms[sl])
                if acc is not None:
                    if first:
                        acc[sl] = contrib
                    else:
                        acc[sl] += contrib  # one posting per (term, slot): no repeated index in ``sl``
                else:
                    slot_parts.append(sl)
                    contrib_parts.append(contrib)
            first = False  # (a term's segments hold disjoint slots; untouched slots are still 0.0)
        scores: np.ndarray  # float64 both ways (numpy's stubs type a weighted bincount as integers)
        if acc is not None:
            uniq = np.flatnonzero(acc > 0)  # every contribution is > 0 (idf > 0, tf ≥ 1)
            scores = acc[uniq]
        else:
            slot = np.concatenate(slot_parts)
            uniq, inverse = np.unique(slot, return_inverse=True)
            # bincount adds in array order: term by term, the query order
            scores = np.bincount(inverse, weights=np.concatenate(contrib_parts), minlength=uniq.size)
        keep = self._alive[uniq]
        if keys is not None:
            allowed = np.zeros(n_slots, dtype=bool)
            allowed[self._slots_for_keys(keys)] = True
            keep &= allowed[uniq]
        if not keep.all():
            uniq, scores = uniq[keep], scores[keep]
        return uniq, scores
