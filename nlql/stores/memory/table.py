"""Rows kept in RAM with columnar, vectorised filter evaluation.

The built-in store keeps every row here; Faiss and hnswlib keep their content and metadata here beside
the index. Keys are row numbers. A pushed filter becomes a boolean mask over all rows: each metadata
path is turned once (lazily, per table version) into typed columns — a kind code, a float view that
includes numeric strings, a categorical code for strings, an epoch view for ISO dates — so a leaf is a
handful of numpy comparisons, and string predicates (CONTAINS, LIKE, MATCH) run once per distinct
string, not once per row. The semantics are exactly :mod:`nlql.values`; tests compare the two.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from nlql import values as V
from nlql.patterns import matcher_for
from nlql.pushdown import HAS_OPS, Cond, FAnd, Filter, FOr
from nlql.schema import MetaSummary
from nlql.stores.base import DocRecord, Row, unit_id
from nlql.stores.batch import is_columnar, latest_per_id
from nlql.stores.pyfilter import eval_cond

K_NULL, K_NUM, K_STR, K_BOOL, K_OTHER = 0, 1, 2, 3, 4
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _micros(dt: datetime) -> int:
    return (dt - _EPOCH) // _ONE_US


_ONE_US = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc) - _EPOCH


@dataclass
class Column:
    """Typed views of one path over a list of values (per document or per row)."""

    kind: np.ndarray      # int8 K_*
    num: np.ndarray       # float64, NaN unless number or numeric string
    codes: np.ndarray     # int64 index into `strings` for string values, -1 otherwise
    strings: list[str]    # sorted distinct strings
    bools: np.ndarray     # int8: 0/1 for bools, -1 otherwise
    _dates: np.ndarray | None = None  # int64 microseconds; INT64_MIN where not an ISO date string

    @classmethod
    def build(cls, values: Sequence[Any]) -> Column:
        n = len(values)
        kind = np.zeros(n, dtype=np.int8)
        num = np.full(n, np.nan)
        bools = np.full(n, -1, dtype=np.int8)
        str_idx: list[int] = []
        str_val: list[str] = []
        for i, v in enumerate(values):
            if v is None:
                continue
            if isinstance(v, bool):
                kind[i] = K_BOOL
                bools[i] = int(v)
            elif isinstance(v, (int, float)):
                f = V.as_number(v)
                if f is None:  # NaN / inf / huge int: behave as null for numbers
                    kind[i] = K_NULL if isinstance(v, float) else K_OTHER
                else:
                    kind[i] = K_NUM
                    num[i] = f
            elif isinstance(v, str):
                kind[i] = K_STR
                str_idx.append(i)
                str_val.append(v)
                f = V.numeric_string(v)
                if f is not None:
                    num[i] = f
            else:
                kind[i] = K_OTHER
        strings = sorted(set(str_val))
        lookup = {s: j for j, s in enumerate(strings)}
        codes = np.full(n, -1, dtype=np.int64)
        if str_idx:
            codes[np.asarray(str_idx, dtype=np.int64)] = np.fromiter(
                (lookup[s] for s in str_val), dtype=np.int64, count=len(str_val)
            )
        return cls(kind, num, codes, strings, bools)

    @property
    def dates(self) -> np.ndarray:
        if self._dates is None:
            per_string = np.array(
                [_micros(d) if (d := V.iso_datetime(s)) is not None else np.iinfo(np.int64).min
                 for s in self.strings] or [0],
                dtype=np.int64,
            )
            out = np.full(len(self.codes), np.iinfo(np.int64).min, dtype=np.int64)
            has = self.codes >= 0
            out[has] = per_string[self.codes[has]]
            self._dates = out
        return self._dates

    # ---------------------------------------------------------------------------------------- leaves

    def eq(self, v: Any) -> tuple[np.ndarray, np.ndarray]:
        """(TRUE mask, KNOWN mask) of ``x == v``."""
        return self._cmp("eq", v)

    def _cmp(self, op: str, v: Any) -> tuple[np.ndarray, np.ndarray]:
        n = len(self.kind)
        if V.is_null(v):
            z = np.zeros(n, dtype=bool)
            return z, z
        if isinstance(v, bool):
            known = self.kind == K_BOOL
            return known & _apply(op, self.bools.astype(np.int64), int(v)), known
        if isinstance(v, datetime):
            d = self.dates
            known = d != np.iinfo(np.int64).min
            return known & _apply(op, d, _micros(v)), known
        if V.is_number(v):
            f = V.as_number(v)
            if f is None:
                z = np.zeros(n, dtype=bool)
                return z, z
            known = ~np.isnan(self.num)
            with np.errstate(invalid="ignore"):
                return known & _apply(op, self.num, f), known
        if isinstance(v, str):
            known = self.codes >= 0
            result = known & self._str_cmp(op, v)
            f = V.numeric_string(v)
            if f is not None:
                numeric = (self.kind == K_NUM)
                with np.errstate(invalid="ignore"):
                    result |= numeric & _apply(op, self.num, f)
                known = known | numeric
            return result, known
        z = np.zeros(n, dtype=bool)
        return z, z

    def _str_cmp(self, op: str, s: str) -> np.ndarray:
        lo = bisect.bisect_left(self.strings, s)
        hi = bisect.bisect_right(self.strings, s)
        c = self.codes
        if op == "eq":
            return (c == lo) if hi > lo else np.zeros(len(c), dtype=bool)
        if op == "ne":
            return (c != lo) if hi > lo else np.ones(len(c), dtype=bool)
        if op == "lt":
            return c < lo
        if op == "le":
            return c < hi
        if op == "gt":
            return c >= hi
        if op == "ge":
            return c >= lo
        raise ValueError(op)

    def per_string(self, fn: Any) -> np.ndarray:
        """TRUE mask of a string predicate evaluated once per distinct string."""
        if not self.strings:
            return np.zeros(len(self.codes), dtype=bool)
        table = np.fromiter((bool(fn(s)) for s in self.strings), dtype=bool, count=len(self.strings))
        has = self.codes >= 0
        out = np.zeros(len(self.codes), dtype=bool)
        out[has] = table[self.codes[has]]
        return out


def _apply(op: str, arr: np.ndarray, v: Any) -> np.ndarray:
    if op == "eq":
        return arr == v
    if op == "ne":
        return arr != v
    if op == "lt":
        return arr < v
    if op == "le":
        return arr <= v
    if op == "gt":
        return arr > v
    if op == "ge":
        return arr >= v
    raise ValueError(op)


def leaf_mask(col: Column, cond: Cond) -> np.ndarray:
    """TRUE mask of one pushed leaf over a column (three-valued: UNKNOWN is False)."""
    op = cond.op
    if op == "is_null":
        return col.kind == K_NULL
    if op == "is_not_null":
        return col.kind != K_NULL
    if op in ("eq", "ne", "lt", "le", "gt", "ge"):
        return col._cmp(op, cond.value)[0]
    if op in ("in", "not_in"):
        n = len(col.kind)
        any_true = np.zeros(n, dtype=bool)
        all_known = np.ones(n, dtype=bool)
        for opt in cond.value:
            t, k = col._cmp("eq", opt)
            any_true |= t
            all_known &= k
        if op == "in":
            return any_true
        return ~any_true & all_known & (col.kind != K_NULL)
    if op in ("contains", "not_contains", "like", "not_like", "match", "not_match"):
        if not isinstance(cond.value, str):
            return np.zeros(len(col.kind), dtype=bool)
        base = op.removeprefix("not_")
        fn: Callable[[str], bool]
        if base == "contains":
            needle = cond.value.casefold()

            def contains(s: str) -> bool:
                return needle in s.casefold()
            fn = contains
        else:  # LIKE and MATCH run in bounded time (nlql.patterns)
            fn = matcher_for(base, cond.value)
        if op.startswith("not_"):
            return col.per_string(lambda s: not fn(s))
        return col.per_string(fn)
    raise ValueError(f"unknown filter op {op!r}")


class ValueIndex:
    """Ascending row keys per typed value of one metadata path: ``==`` and ``IN`` cost their own rows.

    The views follow :meth:`Column.eq` exactly: a number literal matches numbers and numeric strings
    (``num``), a string literal matches equal strings and, when it is numeric, numbers (``real``), a
    bool matches bools. Rows are appended as the table grows (:meth:`extend`); dead rows stay listed
    (the caller drops them with the table's ``alive``); the table drops its indexes when it compacts.
    """

    def __init__(self) -> None:
        self._parts: dict[tuple[str, Any], list[np.ndarray]] = {}
        self._joined: dict[tuple[str, Any], np.ndarray] = {}

    def extend(self, col: Column, start: int) -> None:
        """Add the rows ``start..start+len(col)`` described by ``col``."""
        kinds = col.kind
        self._add("num", col.num, ~np.isnan(col.num), start)
        self._add("real", col.num, kinds == K_NUM, start)
        self._add("bool", col.bools, kinds == K_BOOL, start)
        has = col.codes >= 0
        if bool(has.any()):
            rows = np.flatnonzero(has)
            codes = col.codes[rows]
            order = np.argsort(codes, kind="stable")
            codes, rows = codes[order], rows[order]
            cut = np.flatnonzero(np.diff(codes)) + 1
            for c, r in zip(codes[np.r_[0, cut]], np.split(rows, cut)):
                self._put(("str", col.strings[int(c)]), r + start)

    def _add(self, view: str, values: np.ndarray, where: np.ndarray, start: int) -> None:
        rows = np.flatnonzero(where)
        if not len(rows):
            return
        vals = values[rows]
        order = np.argsort(vals, kind="stable")
        vals, rows = vals[order], rows[order]
        cut = np.flatnonzero(vals[1:] != vals[:-1]) + 1
        for v, r in zip(vals[np.r_[0, cut]].tolist(), np.split(rows, cut)):
            self._put((view, v), r + start)

    def _put(self, key: tuple[str, Any], rows: np.ndarray) -> None:
        self._parts.setdefault(key, []).append(rows.astype(np.int64, copy=False))
        self._joined.pop(key, None)

    def _get(self, key: tuple[str, Any]) -> np.ndarray:
        got = self._joined.get(key)
        if got is None:
            parts = self._parts.get(key)
            got = np.zeros(0, dtype=np.int64) if not parts else parts[0] if len(parts) == 1 else np.concatenate(parts)
            if parts and len(parts) > 1:
                self._parts[key] = [got]
            self._joined[key] = got
        return got

    def equal(self, v: Any) -> np.ndarray | None:
        """Ascending keys where ``x == v`` is TRUE, or None for a literal this index does not answer."""
        if V.is_null(v):
            return np.zeros(0, dtype=np.int64)
        if isinstance(v, bool):
            return self._get(("bool", int(v)))
        if isinstance(v, datetime):
            return None
        if V.is_number(v):
            f = V.as_number(v)
            return np.zeros(0, dtype=np.int64) if f is None else self._get(("num", f))
        if isinstance(v, str):
            rows = self._get(("str", v))
            f = V.numeric_string(v)
            if f is not None:
                rows = np.union1d(rows, self._get(("real", f)))
            return rows
        return None


class DocSlots(Mapping[str, int]):
    """A table's live doc_id -> slot, read from its rows (:meth:`RowTable.slot_of`)."""

    __slots__ = ("_table",)

    def __init__(self, table: RowTable) -> None:
        self._table = table

    def __getitem__(self, doc_id: str) -> int:
        slot = self._table.slot_of(doc_id)
        if slot is None:
            raise KeyError(doc_id)
        return slot

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._table.doc_rows

    def __iter__(self) -> Iterator[str]:
        return iter(self._table.doc_rows)

    def __len__(self) -> int:
        return len(self._table.doc_rows)


def _units_of(d: DocRecord) -> list[Any]:
    return d.units


def _grown(arr: np.ndarray, used: int, new: np.ndarray) -> np.ndarray:
    """``arr[:used]`` followed by ``new``, as a view of a buffer that doubles when full (amortised
    O(len(new)); a concatenation per call made many small writes quadratic). The spare capacity is the
    view's ``base``: appending again writes past the view, in place, while it fits."""
    n = used + len(new)
    base = arr.base
    if not (isinstance(base, np.ndarray) and base.ndim == 1 and base.dtype == arr.dtype and len(base) >= n
            and arr.__array_interface__["data"][0] == base.__array_interface__["data"][0]):
        base = np.empty(max(n, 2 * used, 1024), dtype=arr.dtype)
        base[:used] = arr[:used]
    base[used:n] = new
    return base[:n]


class RowTable:
    """Sentence rows in RAM; keys are row numbers (stable until :meth:`compact`)."""

    def __init__(self) -> None:
        self.doc_ids: list[str] = []     # per row
        self.positions: list[int] = []
        self.contents: list[str] = []
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.tails: list[str] = []
        self.row_doc = np.zeros(0, dtype=np.int64)   # row -> document slot
        self.alive = np.zeros(0, dtype=bool)
        self.seq = np.zeros(0, dtype=np.int64)
        self.pos = np.zeros(0, dtype=np.int64)
        # documents (slots; a replaced/deleted document's slot is dead)
        self.doc_meta: list[dict[str, Any]] = []
        self.doc_seq = np.zeros(0, dtype=np.int64)  # per slot: the document's seq (its rows' too)
        # live doc_id -> its row keys by position: always contiguous, so a ``range`` (not a list: a
        # million lists are a million objects the garbage collector walks on every full collection,
        # which made ingest superlinear)
        self.doc_rows: dict[str, range] = {}
        # a live document's slot is ``row_doc`` of its first row (no second dict of every id: issue 21's
        # ingest); a document without sentences has no row, so its slot is kept here
        self._empty_slot: dict[str, int] = {}
        # a bit per id hash modulo its size, set for every id ever added (:meth:`_maybe_present`)
        self._id_bits = np.zeros(0, dtype=np.uint8)
        self._id_count = 0  # ids whose bit was set (with repeats): when the bits are rebuilt larger
        self.summary = MetaSummary()                 # metadata keys of the live documents (nlql.schema)
        self.version = 0
        self._columns: dict[tuple[str, ...], Column] = {}
        # HAS leaves: the per-document values of a path (lists kept whole), built on first use
        self._doc_values: dict[tuple[str, ...], list[Any]] = {}
        self._row_columns: dict[str, Column] = {}
        self._folded: list[str] | None = None
        self._row_cache: dict[int, Row] = {}
        self._max_seq = 0
        self._live = 0
        self._indexes: dict[tuple[str, ...], ValueIndex] = {}  # kept across writes (extended on add)

    # ------------------------------------------------------------------------------------- mutation

    def __len__(self) -> int:
        return self._live

    @property
    def doc_slot(self) -> DocSlots:
        """Live doc_id -> its document slot (index into ``doc_meta``), as a read-only mapping."""
        return DocSlots(self)

    def slot_of(self, doc_id: str) -> int | None:
        """The slot of a live document, or None."""
        keys = self.doc_rows.get(doc_id)
        if keys is None:
            return None
        return int(self.row_doc[keys.start]) if len(keys) else self._empty_slot[doc_id]

    @property
    def size(self) -> int:
        """Number of row slots, dead ones included (the length of every per-row array)."""
        return len(self.doc_ids)

    def add(self, docs: Sequence[DocRecord], unique: bool = False) -> np.ndarray:
        """Append documents (replacing any live document with the same id); returns the new keys.

        The same id twice in ``docs``: the last one wins (pass :func:`latest_per_id` of the batch to
        know which rows were added; ``unique=True`` says the caller did, and skips it). A
        :class:`~nlql.stores.batch.DocBatch` nobody read as records is appended column by column."""
        if not unique:
            docs = latest_per_id(docs)
        if is_columnar(docs):
            b: Any = docs
            if b.one_sentence_each:
                row_ids = b.doc_ids
            else:
                row_ids = [d for d, c in zip(b.doc_ids, b.counts) for _ in range(c)]
            return self._append(b.doc_ids, b.metadatas, b.counts, b.seq, row_ids, b.positions, b.contents,
                                b.starts, b.ends, b.tails)
        # whole columns at a time (comprehensions and numpy, no per-row method calls): issue 21's ingest
        units = [u for d in docs for u in d.units]
        return self._append([d.doc_id for d in docs], [d.metadata for d in docs], list(map(len, map(_units_of, docs))),
                            np.fromiter((d.seq for d in docs), dtype=np.int64, count=len(docs)),
                            [d.doc_id for d in docs for _ in d.units], [u.position for u in units],
                            [u.content for u in units], [u.start for u in units], [u.end for u in units],
                            [u.tail for u in units])

    def _append(self, doc_ids: list[str], metas: list[dict[str, Any]], counts: list[int], seqs: np.ndarray,
                row_ids: list[str], positions: list[int], contents: list[str], starts: list[int], ends: list[int],
                tails: list[str]) -> np.ndarray:
        """Append documents with distinct ids given as columns (per document, then per row)."""
        doc_rows = self.doc_rows
        hashes = np.fromiter(map(hash, doc_ids), dtype=np.int64, count=len(doc_ids))
        if doc_rows:
            replaced = [d for d in self._maybe_present(doc_ids, hashes) if d in doc_rows]
            if replaced:
                self.remove(replaced)
        self._mark_ids(hashes)
        start = self.size
        n_docs = len(doc_ids)
        first_slot = len(self.doc_meta)
        self.doc_meta.extend(metas)
        self.doc_seq = _grown(self.doc_seq, first_slot, np.asarray(seqs, dtype=np.int64))
        self.summary.add_many(metas)
        self.doc_ids.extend(row_ids)
        self.positions.extend(positions)
        self.contents.extend(contents)
        self.starts.extend(starts)
        self.ends.extend(ends)
        self.tails.extend(tails)
        n_new = self.size - start
        if n_new == n_docs and counts.count(1) == n_docs:  # one row per document: row i is document i
            self.doc_rows.update(zip(doc_ids, map(range, range(start, start + n_docs),
                                                  range(start + 1, start + n_docs + 1))))
            per_doc = None
        else:
            per_doc = np.asarray(counts, dtype=np.int64)
            stops = (start + np.cumsum(per_doc)).tolist()
            self.doc_rows.update(zip(doc_ids, map(range, [start, *stops[:-1]], stops)))
            if 0 in counts:
                self._empty_slot.update((d, first_slot + i) for i, (d, c) in enumerate(zip(doc_ids, counts)) if not c)
        if n_docs:
            self._max_seq = max(self._max_seq, int(seqs.max()))
        # the per-row arrays grow by doubling (a concatenation per call made many small writes quadratic)
        slots = np.arange(first_slot, first_slot + n_docs, dtype=np.int64)
        self.row_doc = _grown(self.row_doc, start, slots if per_doc is None else np.repeat(slots, per_doc))
        self.seq = _grown(self.seq, start, seqs if per_doc is None else np.repeat(seqs, per_doc))
        self.pos = _grown(self.pos, start, np.asarray(positions, dtype=np.int64))
        self.alive = _grown(self.alive, start, np.ones(n_new, dtype=bool))
        self._live += n_new
        for path, index in self._indexes.items():
            index.extend(self._column_of_rows(path, start, self.size), start)
        self._changed()
        return np.arange(start, self.size, dtype=np.int64)

    #: Bits per id (at least) in :attr:`_id_bits`: about one new id in this many is probed in the dict.
    ID_BITS_PER_ID = 16

    def _maybe_present(self, doc_ids: list[str], hashes: np.ndarray) -> list[str]:
        """The ids (in order) that may be live: every live one, and about one in :attr:`ID_BITS_PER_ID`
        of the others. Probing a dict of a million ids once per new id cost more per id than at 100k
        (cache misses: issue 21's ingest); the bits are one small array read per write."""
        bits = self._id_bits
        if not len(bits):
            return list(doc_ids)
        at = hashes & (8 * len(bits) - 1)
        hit = np.flatnonzero((bits[at >> 3] >> (at & 7).astype(np.uint8)) & 1)
        return [doc_ids[i] for i in hit.tolist()]

    def _mark_ids(self, hashes: np.ndarray) -> None:
        """Set the bits of these ids' hashes (rebuilt from every live id, in twice as many bits per id,
        when the ids outgrow them)."""
        self._id_count += len(hashes)
        if self._id_count * self.ID_BITS_PER_ID > 8 * len(self._id_bits):
            live = np.fromiter(map(hash, self.doc_rows), dtype=np.int64, count=len(self.doc_rows))
            self._id_count = len(live) + len(hashes)
            self._id_bits = np.zeros(max(8192, 1 << (2 * self.ID_BITS_PER_ID * self._id_count // 8 - 1).bit_length()),
                                     dtype=np.uint8)
            self._set_bits(live)
        self._set_bits(hashes)

    def _set_bits(self, hashes: np.ndarray) -> None:
        at = hashes & (8 * len(self._id_bits) - 1)
        np.bitwise_or.at(self._id_bits, at >> 3, np.left_shift(1, (at & 7).astype(np.uint8), dtype=np.uint8))

    def remove(self, doc_ids: Iterable[str]) -> int:
        """Mark every row of these documents dead; returns the number of documents removed."""
        removed = 0
        for doc_id in doc_ids:
            keys = self.doc_rows.pop(doc_id, None)
            if keys is None:
                continue
            slot = int(self.row_doc[keys.start]) if len(keys) else self._empty_slot.pop(doc_id)
            self.summary.remove(self.doc_meta[slot])
            if len(keys):
                self.alive[keys.start : keys.stop] = False
                self._live -= len(keys)
            removed += 1
        if removed:
            self._changed()
        return removed

    def compact(self) -> np.ndarray:
        """Drop dead rows; returns the old keys of the kept rows (so callers can compact vectors)."""
        keep = np.flatnonzero(self.alive)
        # every live document's slot: those of the live rows (a document's rows live and die together)
        # and those of the documents without rows
        slots_kept = np.union1d(self.row_doc[keep], np.fromiter(self._empty_slot.values(), dtype=np.int64,
                                                                count=len(self._empty_slot))).tolist()
        slot_map = np.full(len(self.doc_meta), -1, dtype=np.int64)
        slot_map[np.asarray(slots_kept, dtype=np.int64)] = np.arange(len(slots_kept))
        self.doc_meta = [self.doc_meta[s] for s in slots_kept]
        self.doc_seq = self.doc_seq[np.asarray(slots_kept, dtype=np.int64)]
        for name in ("doc_ids", "positions", "contents", "starts", "ends", "tails"):
            old = getattr(self, name)
            setattr(self, name, [old[k] for k in keep])
        self.row_doc = slot_map[self.row_doc[keep]]
        self.seq = self.seq[keep]
        self.pos = self.pos[keep]
        self.alive = np.ones(len(keep), dtype=bool)
        self._live = len(keep)
        self._empty_slot = {d: int(slot_map[s]) for d, s in self._empty_slot.items()}
        remap = np.zeros(int(keep[-1]) + 1 if len(keep) else 0, dtype=np.int64)
        remap[keep] = np.arange(len(keep), dtype=np.int64)
        self.doc_rows = {d: range(int(remap[ks.start]), int(remap[ks.start]) + len(ks)) if len(ks) else range(0)
                         for d, ks in self.doc_rows.items()}
        self._indexes.clear()
        self._changed()
        return keep

    def _changed(self) -> None:
        self.version += 1
        self._columns.clear()
        self._doc_values.clear()
        self._row_columns.clear()
        self._folded = None
        self._row_cache.clear()

    @property
    def max_seq(self) -> int:
        return self._max_seq

    # -------------------------------------------------------------------------------------- reading

    def row(self, key: int) -> Row:
        """The stored row (cached until the next write; callers must not mutate it)."""
        k = int(key)
        cached = self._row_cache.get(k)
        if cached is not None:
            return cached
        row = Row(
            key=k, doc_id=self.doc_ids[k], position=self.positions[k], content=self.contents[k],
            metadata=self.doc_meta[int(self.row_doc[k])], seq=int(self.seq[k]),
            start=self.starts[k], end=self.ends[k], tail=self.tails[k],
        )
        self._row_cache[k] = row
        return row

    def rows(self, keys: Iterable[int]) -> list[Row]:
        return [self.row(k) for k in keys]

    def document_rows(self, doc_ids: Sequence[str]) -> dict[str, list[Row]]:
        return {d: self.rows(self.doc_rows[d]) for d in doc_ids if d in self.doc_rows}

    def live_sentences(self) -> list[tuple[str, int, int, str, dict[str, Any]]]:
        """``(doc_id, position, seq, content, metadata)`` of every live row, in row order, without
        building (and caching) a :class:`Row` per sentence: what a whole-corpus pass reads."""
        ids, pos, texts, meta = self.doc_ids, self.positions, self.contents, self.doc_meta
        keys = np.flatnonzero(self.alive)
        docs, seqs = self.row_doc[keys].tolist(), self.seq[keys].tolist()
        return [(ids[k], pos[k], q, texts[k], meta[d]) for k, d, q in zip(keys.tolist(), docs, seqs)]

    def live_keys(self) -> np.ndarray:
        """Live keys in insertion order (seq, then position)."""
        keys = np.flatnonzero(self.alive)
        return keys[np.lexsort((self.pos[keys], self.seq[keys]))]

    def order(self, keys: np.ndarray) -> np.ndarray:
        """Sort keys into insertion order (seq, then position)."""
        return keys[np.lexsort((self.pos[keys], self.seq[keys]))]

    # -------------------------------------------------------------------------------------- filters

    def meta_column(self, keys: tuple[str, ...]) -> Column:
        """Typed column of ``meta.<keys>`` per row (built per document, mapped to rows)."""
        col = self._columns.get(keys)
        if col is None:
            per_doc = Column.build([V.lookup(m, keys) for m in self.doc_meta])
            col = Column(
                per_doc.kind[self.row_doc], per_doc.num[self.row_doc], per_doc.codes[self.row_doc],
                per_doc.strings, per_doc.bools[self.row_doc],
            )
            self._columns[keys] = col
        return col

    def field_column(self, name: str) -> Column:
        col = self._row_columns.get(name)
        if col is None:
            if name == "doc_id":
                col = Column.build(self.doc_ids)
            elif name == "id":
                col = Column.build([unit_id(d, p) for d, p in zip(self.doc_ids, self.positions)])
            elif name == "position":
                col = Column.build(self.positions)
            else:
                raise ValueError(name)
            self._row_columns[name] = col
        return col

    def mask(self, flt: Filter | None) -> np.ndarray:
        """Live rows for which the filter is TRUE."""
        if flt is None:
            return self.alive.copy()
        return self.alive & self._mask(flt)

    def _mask(self, flt: Filter) -> np.ndarray:
        if isinstance(flt, FAnd):
            out = np.ones(self.size, dtype=bool)
            for item in flt.items:
                out &= self._mask(item)
            return out
        if isinstance(flt, FOr):
            out = np.zeros(self.size, dtype=bool)
            for item in flt.items:
                out |= self._mask(item)
            return out
        root = flt.path[0]
        if root == "meta" and flt.op in HAS_OPS:
            return self._has_mask(flt)[self.row_doc]
        if root == "meta":
            return leaf_mask(self.meta_column(flt.path[1:]), flt)
        if root == "content":
            return self._content_mask(flt)
        return leaf_mask(self.field_column(root), flt)

    def _has_mask(self, cond: Cond) -> np.ndarray:
        """TRUE mask per document slot of a HAS leaf: membership evaluated once per document
        (:func:`nlql.stores.pyfilter.eval_cond`, the engine's own semantics), over the documents' values."""
        keys = cond.path[1:]
        values = self._doc_values.get(keys)
        if values is None:
            values = self._doc_values[keys] = [V.lookup(m, keys) for m in self.doc_meta]
        return np.fromiter((eval_cond(cond, v) is True for v in values), dtype=bool, count=len(values))

    # ------------------------------------------------------------------------------------ row sets

    #: Below this many row slots a filter is always a mask (a full pass costs microseconds).
    ROWSET_MIN = 4096

    def matching(self, flt: Filter | None) -> tuple[np.ndarray, str]:
        """Live keys (ascending) for which the filter is TRUE, and how they were found: ``"rowset"``
        (equality and IN on metadata looked up in a :class:`ValueIndex`, any other leaf of an AND
        evaluated on those rows only) or ``"mask"`` (a vectorised pass over every row)."""
        if flt is not None and self.size >= self.ROWSET_MIN:
            rows = self._rowset(flt)
            if rows is not None:
                return rows[self.alive[rows]], "rowset"
        return np.flatnonzero(self.mask(flt)), "mask"

    def _rowset(self, flt: Filter) -> np.ndarray | None:
        """Ascending keys (dead ones included) where ``flt`` is TRUE, or None when no index applies."""
        if isinstance(flt, Cond):
            return self._leaf_rows(flt)
        if isinstance(flt, FOr):
            parts = [r for item in flt.items if (r := self._rowset(item)) is not None]
            if len(parts) < len(flt.items):
                return None
            return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        if isinstance(flt, FAnd):
            found = [(i, r) for i, item in enumerate(flt.items) if (r := self._rowset(item)) is not None]
            if not found:
                return None
            rows = found[0][1]
            for _, r in found[1:]:
                rows = np.intersect1d(rows, r, assume_unique=True)
            rest = [item for i, item in enumerate(flt.items) if i not in {j for j, _ in found}]
            for item in rest:
                if not len(rows):
                    break
                rows = rows[self._mask_rows(item, rows)]
            return rows
        return None

    def _leaf_rows(self, cond: Cond) -> np.ndarray | None:
        if cond.path[0] != "meta" or len(cond.path) < 2 or cond.op not in ("eq", "in"):
            return None
        keys = cond.path[1:]
        index = self._indexes.get(keys)
        if index is None:
            index = ValueIndex()
            index.extend(self.meta_column(keys), 0)
            self._indexes[keys] = index
        options = (cond.value,) if cond.op == "eq" else tuple(cond.value)
        parts = []
        for v in options:
            got = index.equal(v)
            if got is None:
                return None
            parts.append(got)
        if len(parts) == 1:
            return parts[0]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def _column_of_rows(self, keys: tuple[str, ...], lo: int, hi: int) -> Column:
        """The typed column of ``meta.<keys>`` over rows ``lo..hi`` (built from their documents)."""
        slots = self.row_doc[lo:hi]
        uniq, inverse = np.unique(slots, return_inverse=True)
        per_doc = Column.build([V.lookup(self.doc_meta[int(s)], keys) for s in uniq])
        return Column(per_doc.kind[inverse], per_doc.num[inverse], per_doc.codes[inverse], per_doc.strings,
                      per_doc.bools[inverse])

    def _mask_rows(self, flt: Filter, rows: np.ndarray) -> np.ndarray:
        """TRUE mask of ``flt`` over ``rows`` only (the same column code as :meth:`mask`, on a subset)."""
        if isinstance(flt, FAnd):
            out = np.ones(len(rows), dtype=bool)
            for item in flt.items:
                out &= self._mask_rows(item, rows)
            return out
        if isinstance(flt, FOr):
            out = np.zeros(len(rows), dtype=bool)
            for item in flt.items:
                out |= self._mask_rows(item, rows)
            return out
        root = flt.path[0]
        if root == "meta" and flt.op in HAS_OPS:
            slots = self.row_doc[rows]
            uniq, inverse = np.unique(slots, return_inverse=True)
            per_doc = np.fromiter((eval_cond(flt, V.lookup(self.doc_meta[int(s)], flt.path[1:])) is True
                                   for s in uniq), dtype=bool, count=len(uniq))
            return per_doc[inverse]
        if root == "meta":
            slots = self.row_doc[rows]
            uniq, inverse = np.unique(slots, return_inverse=True)
            doc_values = Column.build([V.lookup(self.doc_meta[int(s)], flt.path[1:]) for s in uniq])
            return leaf_mask(doc_values, flt)[inverse]
        if root == "content":
            if flt.op in ("contains", "not_contains") and isinstance(flt.value, str):
                needle = flt.value.casefold()
                hit = np.fromiter((needle in self.contents[int(k)].casefold() for k in rows), dtype=bool,
                                  count=len(rows))
                return hit if flt.op == "contains" else ~hit
            return np.fromiter((eval_cond(flt, self.contents[int(k)]) is True for k in rows), dtype=bool,
                               count=len(rows))
        if root == "doc_id":
            values: list[Any] = [self.doc_ids[int(k)] for k in rows]
        elif root == "id":
            values = [unit_id(self.doc_ids[int(k)], self.positions[int(k)]) for k in rows]
        elif root == "position":
            values = [self.positions[int(k)] for k in rows]
        else:
            raise ValueError(root)
        return leaf_mask(Column.build(values), flt)

    def _content_mask(self, cond: Cond) -> np.ndarray:
        if cond.op in ("contains", "not_contains") and isinstance(cond.value, str):
            if self._folded is None:
                self._folded = [c.casefold() for c in self.contents]
            needle = cond.value.casefold()
            hit = np.fromiter((needle in c for c in self._folded), dtype=bool, count=self.size)
            return hit if cond.op == "contains" else ~hit
        return np.fromiter((eval_cond(cond, c) is True for c in self.contents), dtype=bool, count=self.size)
