"""One write's rows for a SQL store, prepared as columns in one pass (issue 35).

DuckDB and PostgreSQL write the same columns for a batch of documents (``<p>_docs``, ``<p>_units``
and the term table's input): the escaped text columns, the exact metadata JSON, the typed metadata
records by path (:func:`~nlql.sql.codec.flatten_metadata`), list members, the shadow columns of the
built-in string fields and each sentence's analyzed terms. :func:`prepare` computes them for a whole
batch with the work that repeats done once:

- a typed record is computed once per distinct scalar value of the batch (``status``, ``tag``, a year
  come back in every document) and shared;
- a document whose metadata is a flat dict of strings, booleans, integers and finite floats (the
  common case) skips the general walk (normalising, flattening, list members), with the same result;
- text escaping (:func:`~nlql.sql.codec.escape_text`) is looked for once per column: a batch without
  the few characters it rewrites keeps its strings as they are;
- the typed records are kept once per distinct (path, value) pair, each document's as indexes into
  them, so that a store builds its record columns from the distinct pairs and one index column;
- the shadow columns of the built-in string fields and the terms are computed a column at a time
  (:meth:`~nlql.text.analyzer.Analyzer.terms_flat`), the sentences' terms in one list (repeats kept;
  the store counts them set-wise in SQL);
- a store that holds the write as columns (the engine's ``DocBatch``) passes them as they are
  (``columns``): no record per document or sentence is read.

The result is the same, value for value, as the per-document codec functions give
(``tests/sql/test_sql_ingest.py`` checks this on awkward metadata and text).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol

import numpy as np

from nlql import values as V
from nlql.sql.codec import _NEEDS_ESCAPE, _SURROGATE, _typed, flatten_metadata, list_members, path_key, shadow

__all__ = ["Columns", "Prepared", "escaper", "prepare", "shadows", "verbatim"]

RECORD_FIELDS = ("s", "f", "n", "t", "b")
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_ASCII_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)
_FLAT_SCALARS = frozenset({str, int, bool})
_NUMBER_STARTS = frozenset("+-.")
_KEY_TYPES = frozenset({str, int, bool, float, type(None)})
_CONTROLS = tuple(map(chr, range(9)))  # the ASCII characters escape_text rewrites


class Columns(Protocol):
    """A write's documents as columns (what :class:`nlql.stores.batch.DocBatch` holds): documents
    ``doc_ids[i]`` with ``counts[i]`` sentences each, the sentence columns in document order and one
    vector row per sentence."""

    doc_ids: list[str]
    texts: list[str]
    metadatas: list[Any]
    seq: Any
    counts: list[int]
    positions: list[int]
    starts: list[int]
    ends: list[int]
    contents: list[str]
    tails: list[str]
    vectors: np.ndarray


@dataclass
class Prepared:
    """A batch's rows as columns: documents ``doc_ids[i]`` …, sentences ``unit_doc[j]`` (the index of
    their document) …; the typed metadata records as the batch's distinct ``(path key, record)``
    ``pairs`` and, document after document (``flat_counts[i]`` each, in :func:`flatten_metadata`'s
    order), the index of each record's pair (``flat_index``); ``members[i]`` document i's
    :func:`list_members` (``{}`` for none); ``term_list`` every sentence's escaped terms in one list
    (``nterms[j]`` each, repeats kept; None when the store keeps no BM25)."""

    doc_ids: list[str] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    metadata: list[str] = field(default_factory=list)
    pairs: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    flat_counts: list[int] = field(default_factory=list)
    flat_index: list[int] = field(default_factory=list)
    members: list[dict[str, list[dict[str, Any]]]] = field(default_factory=list)
    folds: list[str | None] = field(default_factory=list)
    nums: list[float | None] = field(default_factory=list)
    stamps: list[int | None] = field(default_factory=list)
    unit_doc: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    positions: list[int] = field(default_factory=list)
    contents: list[str] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    tails: list[str] = field(default_factory=list)
    unit_folds: list[str | None] = field(default_factory=list)
    unit_nums: list[float | None] = field(default_factory=list)
    unit_stamps: list[int | None] = field(default_factory=list)
    nterms: list[int] = field(default_factory=list)
    term_list: list[str] | None = None
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))

    @property
    def flat(self) -> list[list[tuple[str, dict[str, Any]]]]:
        """Each document's typed records as ``(path key, record)``, in :func:`flatten_metadata`'s order."""
        pairs, index = self.pairs, self.flat_index
        out = []
        lo = 0
        for n in self.flat_counts:
            out.append([pairs[i] for i in index[lo : lo + n]])
            lo += n
        return out

    @property
    def terms(self) -> list[list[str]] | None:
        """Each sentence's escaped terms (repeats kept), or None."""
        if self.term_list is None:
            return None
        it = iter(self.term_list)
        return [list(islice(it, n)) for n in self.nterms]

    @property
    def unit_ids(self) -> list[str]:
        """Each sentence's escaped document id."""
        ids = self.doc_ids
        return [ids[i] for i in self.unit_doc.tolist()]

    @property
    def unit_seqs(self) -> list[int]:
        seqs = self.seqs
        return [seqs[i] for i in self.unit_doc.tolist()]

    @property
    def total_terms(self) -> int:
        return sum(self.nterms)

    def pair_columns(self) -> tuple[list[str], list[list[Any]]]:
        """(path keys, [s, f, n, t, b] columns) of the distinct pairs (``flat_index`` points into them)."""
        recs = [r for _, r in self.pairs]
        return [p for p, _ in self.pairs], [[r.get(k) for r in recs] for k in RECORD_FIELDS]


def _identity(s: str) -> str:
    return s


verbatim = _identity  # what escaper() gives when nothing needs escaping


def escaper(escape: Callable[[str], str], *columns: Sequence[str]) -> Callable[[str], str]:
    """``escape``, or the identity when no string of ``columns`` holds a character it rewrites."""
    if escape is _identity:
        return escape
    for col in columns:
        text = "".join(col)
        # (ASCII text needs escaping only for one of the nine control characters: a substring search each)
        if (any(c in text for c in _CONTROLS) if text.isascii() else _NEEDS_ESCAPE.search(text) is not None):
            return escape
    return _identity


def shadows(strings: list[str], escape: Callable[[str], str]) -> tuple[list[Any], list[Any], list[Any]]:
    """:func:`shadow` of every string (folds, numbers, µs) as three columns, the number and date parsers
    only for the strings that can be either (both start with a digit, a sign or a point); ``escape``
    must be the identity only when no string holds a character it rewrites (nor then does its fold)."""
    folds: list[Any] = [s.casefold() for s in strings]
    folds = [None if f == s else f for f, s in zip(folds, strings)]
    if escape is not _identity:
        folds = [None if f is None else escape(f) for f in folds]
    nums: list[Any] = [None] * len(strings)
    stamps: list[Any] = [None] * len(strings)
    for i in [i for i, s in enumerate(strings) if s[:1].isdigit() or s[:1] in _NUMBER_STARTS]:
        s = strings[i]
        if "-" in s:  # (an ISO date has one: anything else is no date)
            folds[i], nums[i], stamps[i] = shadow(s, escape)
        elif len(s) <= 300 and s.isdigit() and s.isascii():  # (an id such as "12345": a finite float)
            nums[i] = float(s)
        else:
            nums[i] = V.numeric_string(s)
    return folds, nums, stamps


def _exact_json(obj: Any) -> str:
    text = _ENCODER.encode(obj)
    if _SURROGATE.search(text) is not None:
        text = _ASCII_ENCODER.encode(obj)
    return text


class _Records:
    """A list of ``DocRecord``s read as :class:`Columns` (their vectors checked per document)."""

    def __init__(self, docs: Sequence[Any], dim: int) -> None:
        self.doc_ids = [d.doc_id for d in docs]
        self.texts = [d.text for d in docs]
        self.metadatas = [d.metadata for d in docs]
        self.seq = [d.seq for d in docs]
        self.counts = [len(d.units) for d in docs]
        units = [u for d in docs for u in d.units]
        self.positions = [int(u.position) for u in units]
        self.starts = [int(u.start) for u in units]
        self.ends = [int(u.end) for u in units]
        self.contents = [u.content for u in units]
        self.tails = [u.tail for u in units]
        vectors = []
        for d in docs:
            if not d.units:
                continue
            vecs = np.asarray(d.vectors, dtype=np.float32)
            if vecs.ndim != 2 or vecs.shape != (len(d.units), dim):
                raise ValueError(f"document {d.doc_id!r}: expected {len(d.units)}×{dim} vectors, got {vecs.shape}")
            vectors.append(vecs)
        self.vectors = np.concatenate(vectors) if vectors else np.zeros((0, dim), dtype=np.float32)


def prepare(docs: Sequence[Any], dim: int, escape: Callable[[str], str] | None, analyzer: Any = None,
            columns: Columns | None = None, shadows_of: Callable[..., tuple[Any, Any, Any]] = shadows) -> Prepared:
    """The columns of ``docs`` (``DocRecord``s with distinct ids; or, given ``columns``, the same
    documents as columns, which are read instead), strings written with ``escape`` (None: verbatim),
    terms by ``analyzer`` (None: no terms), the shadow columns of the ids and sentences by
    ``shadows_of(strings, escape)`` (:func:`shadows`, or a store's own that gives the same values in
    another container, e.g. Arrow arrays).

    Raises:
        ValueError: metadata that is not a dict, or vectors of the wrong shape or not finite.
    """
    c: Any = columns if columns is not None else _Records(docs, dim)
    mat = np.asarray(c.vectors, dtype=np.float32)
    if mat.ndim != 2 or mat.shape != (len(c.contents), dim):
        raise ValueError(f"expected {len(c.contents)}×{dim} vectors, got {mat.shape}")
    out = Prepared()
    n_docs = len(c.doc_ids)
    out.unit_doc = np.repeat(np.arange(n_docs, dtype=np.int64), np.asarray(c.counts, dtype=np.int64))
    if not np.isfinite(mat).all():
        bad = int(np.flatnonzero(~np.isfinite(mat).all(axis=1))[0])
        raise ValueError(f"document {c.doc_ids[int(out.unit_doc[bad])]!r}: vectors contain NaN or infinity")
    out.vectors = mat
    raw_escape = escape if escape is not None else _identity
    if not _documents_by_key(out, c.metadatas, raw_escape):
        _documents(out, c, raw_escape)
    esc_doc = escaper(raw_escape, c.doc_ids, c.texts)
    out.doc_ids = list(c.doc_ids) if esc_doc is _identity else [esc_doc(x) for x in c.doc_ids]
    out.texts = list(c.texts) if esc_doc is _identity else [esc_doc(x) for x in c.texts]
    out.seqs = np.asarray(c.seq, dtype=np.int64).tolist()
    out.folds, out.nums, out.stamps = shadows_of(list(c.doc_ids), esc_doc)
    raw_contents = list(c.contents)
    out.positions, out.starts, out.ends = list(c.positions), list(c.starts), list(c.ends)
    esc_unit = escaper(raw_escape, raw_contents, c.tails)
    out.unit_folds, out.unit_nums, out.unit_stamps = shadows_of(raw_contents, esc_unit)
    out.contents = raw_contents if esc_unit is _identity else [esc_unit(x) for x in raw_contents]
    out.tails = list(c.tails) if esc_unit is _identity else [esc_unit(x) for x in c.tails]
    if analyzer is not None:
        terms, out.nterms = analyzer.terms_flat(raw_contents)
        out.term_list = terms if esc_unit is _identity else [esc_unit(t) for t in terms]
    else:
        out.nterms = [0] * len(raw_contents)
    return out


def _documents_by_key(out: Prepared, metas: Sequence[Any], raw_escape: Callable[[str], str]) -> bool:
    """:func:`_documents` a key at a time, for a batch whose metadata are dicts with the same keys in the
    same order and only strings, booleans, integers, finite floats and nulls as values (a batch of one
    source usually is): each key's distinct values are typed and written as JSON once, every document
    takes its records' pairs and its JSON text from them. False (``out`` untouched) for any other batch."""
    if not metas or type(metas[0]) is not dict:
        return False
    shape = tuple(metas[0])
    if set(map(type, metas)) != {dict} or any(type(k) is not str for k in shape) or \
            set(map(tuple, metas)) != {shape}:
        return False
    n = len(metas)
    if not shape:
        out.metadata.extend(["{}"] * n)
        out.members.extend({} for _ in range(n))
        out.flat_counts.extend([0] * n)
        return True
    pairs: list[tuple[str, dict[str, Any]]] = []
    index_cols: list[np.ndarray] = []
    text_cols: list[list[str]] = []
    memo: dict[tuple[type, Any], dict[str, Any]] = {}
    for k in shape:
        col = [m[k] for m in metas]
        types = set(map(type, col))
        if not types <= _KEY_TYPES or (float in types and not all(
                math.isfinite(v) for v in col if type(v) is float)):
            return False
        head = _ENCODER.encode(k) + ":"
        pk = path_key((k,))
        # each distinct value once: its pair (-1 for a null) and its JSON member text; a float each time
        # (-0.0 == 0.0 would share one record)
        keyed: list[Any] = col if len(types) == 1 and float not in types else list(zip(map(type, col), col))
        if float in types:
            keyed = [(float, i) if type(v) is float else kv for i, (v, kv) in enumerate(zip(col, keyed))]
        seen: dict[Any, int] = {}
        codes = list(map(seen.setdefault, keyed, range(len(keyed))))  # each value's first occurrence
        firsts = sorted(set(codes))
        pair_of = np.full(len(col), -1, dtype=np.int64)
        text_of: dict[int, str] = {}
        for i in firsts:
            v = col[i]
            text = head + (float.__repr__(v) if type(v) is float else _ENCODER.encode(v))
            if _SURROGATE.search(text) is not None:
                return False
            text_of[i] = text
            if v is not None:
                mk = (type(v), v)
                rec = _typed(v, raw_escape) if type(v) is float else memo.get(mk)
                if rec is None:
                    rec = memo[mk] = _typed(v, raw_escape)
                pairs.append((pk, rec))
                pair_of[i] = len(out.pairs) + len(pairs) - 1
        index_cols.append(pair_of[np.asarray(codes, dtype=np.int64)])
        text_cols.append(list(map(text_of.__getitem__, codes)))
    out.pairs.extend(pairs)
    out.metadata.extend(["{" + ",".join(parts) + "}" for parts in zip(*text_cols)])
    out.members.extend({} for _ in range(n))
    mat = np.stack(index_cols, axis=1)  # (documents, keys): each record's pair, -1 for a null
    kept = mat >= 0
    out.flat_index.extend(mat[kept].tolist())  # (row-major: document after document, keys in order)
    out.flat_counts.extend(kept.sum(axis=1).tolist())
    return True


def _documents(out: Prepared, c: Any, raw_escape: Callable[[str], str]) -> None:
    """Each document's exact metadata JSON, typed records (``out.pairs``, ``flat_counts``,
    ``flat_index``) and list members, the work that repeats done once (see the module docstring)."""
    memo: dict[tuple[type, Any], dict[str, Any]] = {}
    keys: dict[str, str] = {}
    pairs, index = out.pairs, out.flat_index
    # per (key, type, value): the index of its (path key, shared typed record) pair (None for a null)
    # and the JSON member text, or None when the value takes another form (a float, a nested dict or
    # list) or its text holds a lone surrogate
    entries: dict[tuple[str, type, Any], tuple[int | None, str] | None] = {}

    def entry(k: Any, v: Any) -> tuple[int | None, str] | None:
        tv = type(v)
        if type(k) is not str or not (v is None or tv in _FLAT_SCALARS):
            return None
        text = _ENCODER.encode(k) + ":" + _ENCODER.encode(v)
        if _SURROGATE.search(text) is not None:
            return None
        if v is None:
            return None, text
        pk = keys.get(k)
        if pk is None:
            pk = keys[k] = path_key((k,))
        mk = (tv, v)
        rec = memo.get(mk)
        if rec is None:
            rec = memo[mk] = _typed(v, raw_escape)
        pairs.append((pk, rec))
        return len(pairs) - 1, text

    def flat_doc(meta: dict[Any, Any]) -> str | None:
        """The exact JSON of a flat dict of scalars, its records' pairs appended to ``index``; None
        otherwise (the caller takes back what was appended)."""
        parts: list[str] = []
        for k, v in meta.items():
            if type(v) is float:
                if not math.isfinite(v) or type(k) is not str:
                    return None
                pk = keys.get(k)
                if pk is None:
                    pk = keys[k] = path_key((k,))
                pairs.append((pk, _typed(v, raw_escape)))  # not shared: -0.0 == 0.0
                index.append(len(pairs) - 1)
                parts.append(_ENCODER.encode(k) + ":" + float.__repr__(v))
                continue
            try:
                e = entries[(k, type(v), v)]
            except KeyError:
                e = entries[(k, type(v), v)] = entry(k, v)
            except TypeError:  # an unhashable value (a list, a dict)
                return None
            if e is None:
                return None
            if e[0] is not None:
                index.append(e[0])
            parts.append(e[1])
        return "{" + ",".join(parts) + "}"

    metadata, members, counts = out.metadata, out.members, out.flat_counts
    for doc_id, meta in zip(c.doc_ids, c.metadatas, strict=True):
        meta = meta or {}
        start = len(index)
        text = flat_doc(meta) if type(meta) is dict else None
        if text is not None:
            members.append({})
        else:
            del index[start:]
            meta = V.normalize_metadata(meta)
            if not isinstance(meta, dict):
                raise ValueError(f"metadata of {doc_id!r} must be a dict")
            for pair in flatten_metadata(meta, raw_escape).items():
                pairs.append(pair)
                index.append(len(pairs) - 1)
            members.append(list_members(meta, raw_escape))
            text = _exact_json(meta)
        metadata.append(text)
        counts.append(len(index) - start)
