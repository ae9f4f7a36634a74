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
- each sentence's terms are kept as a list (repeats kept); the store counts them set-wise in SQL.

The result is the same, value for value, as the per-document codec functions give
(``tests/sql/test_sql_ingest.py`` checks this on awkward metadata and text).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nlql import values as V
from nlql.sql.codec import _NEEDS_ESCAPE, _SURROGATE, _typed, flatten_metadata, list_members, path_key, shadow

__all__ = ["Prepared", "prepare"]

RECORD_FIELDS = ("s", "f", "n", "t", "b")
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_ASCII_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)
_FLAT_SCALARS = frozenset({str, int, bool})


@dataclass
class Prepared:
    """A batch's rows as columns: documents ``doc_ids[i]`` …, sentences ``unit_doc[j]`` (the index of
    their document) …; ``flat[i]`` is document i's typed records as ``(path key, record)`` in
    :func:`flatten_metadata`'s order, ``members[i]`` its :func:`list_members` (``{}`` for none);
    ``terms[j]`` sentence j's escaped terms (repeats kept; None when the store keeps no BM25)."""

    doc_ids: list[str] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    metadata: list[str] = field(default_factory=list)
    flat: list[list[tuple[str, dict[str, Any]]]] = field(default_factory=list)
    members: list[dict[str, list[dict[str, Any]]]] = field(default_factory=list)
    folds: list[str | None] = field(default_factory=list)
    nums: list[float | None] = field(default_factory=list)
    stamps: list[int | None] = field(default_factory=list)
    unit_doc: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    contents: list[str] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    tails: list[str] = field(default_factory=list)
    unit_folds: list[str | None] = field(default_factory=list)
    unit_nums: list[float | None] = field(default_factory=list)
    unit_stamps: list[int | None] = field(default_factory=list)
    nterms: list[int] = field(default_factory=list)
    terms: list[list[str]] | None = None
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))

    @property
    def unit_ids(self) -> list[str]:
        """Each sentence's escaped document id."""
        ids = self.doc_ids
        return [ids[i] for i in self.unit_doc]

    @property
    def unit_seqs(self) -> list[int]:
        seqs = self.seqs
        return [seqs[i] for i in self.unit_doc]

    @property
    def total_terms(self) -> int:
        return sum(self.nterms)

    def record_columns(self) -> tuple[list[int], list[str], list[list[Any]]]:
        """(records per document, path keys, [s, f, n, t, b] columns) of every typed record, in order."""
        counts = [len(f) for f in self.flat]
        paths = [p for f in self.flat for p, _ in f]
        recs = [r for f in self.flat for _, r in f]
        cols = [[r.get(k) for r in recs] for k in RECORD_FIELDS]
        return counts, paths, cols


def _identity(s: str) -> str:
    return s


def _escaper(escape: Callable[[str], str], *columns: Sequence[str]) -> Callable[[str], str]:
    """``escape``, or the identity when no string of ``columns`` holds a character it rewrites."""
    if escape is _identity:
        return escape
    for col in columns:
        if _NEEDS_ESCAPE.search("".join(col)) is not None:
            return escape
    return _identity


def _shadow(s: str, escape: Callable[[str], str]) -> tuple[str | None, float | None, int | None]:
    """:func:`shadow`, without the number and date parsers for a string that cannot be either (both
    start with a digit, a sign or a point)."""
    c = s[:1]
    if c.isdigit() or c in ("+", "-", "."):
        return shadow(s, escape)
    folded = s.casefold()
    return (escape(folded) if folded != s else None), None, None


def _exact_json(obj: Any) -> str:
    text = _ENCODER.encode(obj)
    if _SURROGATE.search(text) is not None:
        text = _ASCII_ENCODER.encode(obj)
    return text


def prepare(docs: Sequence[Any], dim: int, escape: Callable[[str], str] | None, analyzer: Any = None,
            check_vectors: bool = True) -> Prepared:
    """The columns of ``docs`` (``DocRecord``s with distinct ids), strings written with ``escape``
    (None: verbatim), terms by ``analyzer`` (None: no terms).

    Raises:
        ValueError: metadata that is not a dict, or vectors of the wrong shape or not finite.
    """
    out = Prepared()
    raw_escape = escape if escape is not None else _identity
    esc_doc = _escaper(raw_escape, [d.doc_id for d in docs], [d.text for d in docs])
    memo: dict[tuple[type, Any], dict[str, Any]] = {}
    keys: dict[str, str] = {}
    # per (key, type, value): the path key, the shared typed record (None for a null) and the JSON
    # member text, or None when the value takes another form (a float, a nested dict or list)
    entries: dict[tuple[str, type, Any], tuple[str, dict[str, Any] | None, str] | None] = {}

    def entry(k: Any, v: Any) -> tuple[str, dict[str, Any] | None, str] | None:
        tv = type(v)
        if type(k) is not str or not (v is None or tv in _FLAT_SCALARS):
            return None
        pk = keys.get(k)
        if pk is None:
            pk = keys[k] = path_key((k,))
        rec = None
        if v is not None:
            mk = (tv, v)
            rec = memo.get(mk)
            if rec is None:
                rec = memo[mk] = _typed(v, raw_escape)
        text = _ENCODER.encode(k) + ":" + _ENCODER.encode(v)
        return pk, rec, text if _SURROGATE.search(text) is None else None  # type: ignore[return-value]

    def flat_doc(meta: dict[Any, Any]) -> tuple[list[tuple[str, dict[str, Any]]], str] | None:
        """(typed records, exact JSON) of a flat dict of scalars, from the shared entries; None otherwise."""
        flat: list[tuple[str, dict[str, Any]]] = []
        parts: list[str] = []
        for k, v in meta.items():
            if type(v) is float:
                if not math.isfinite(v) or type(k) is not str:
                    return None
                pk = keys.get(k)
                if pk is None:
                    pk = keys[k] = path_key((k,))
                flat.append((pk, _typed(v, raw_escape)))  # not shared: -0.0 == 0.0
                parts.append(_ENCODER.encode(k) + ":" + float.__repr__(v))
                continue
            try:
                e = entries[(k, type(v), v)]
            except KeyError:
                e = entries[(k, type(v), v)] = entry(k, v)
            except TypeError:  # an unhashable value (a list, a dict)
                return None
            if e is None or e[2] is None:
                return None
            if e[1] is not None:
                flat.append((e[0], e[1]))
            parts.append(e[2])
        return flat, "{" + ",".join(parts) + "}"

    vectors: list[np.ndarray] = []
    for i, d in enumerate(docs):
        meta = d.metadata or {}
        quick = flat_doc(meta) if type(meta) is dict else None
        if quick is not None:
            flat, text = quick
            members: dict[str, list[dict[str, Any]]] = {}
        else:
            meta = V.normalize_metadata(meta)
            if not isinstance(meta, dict):
                raise ValueError(f"metadata of {d.doc_id!r} must be a dict")
            flat = list(flatten_metadata(meta, raw_escape).items())
            members = list_members(meta, raw_escape)
            text = _exact_json(meta)
        out.doc_ids.append(esc_doc(d.doc_id))
        out.seqs.append(int(d.seq))
        out.texts.append(esc_doc(d.text))
        out.metadata.append(text)
        out.flat.append(flat)
        out.members.append(members)
        fold, num, ts = _shadow(d.doc_id, raw_escape)
        out.folds.append(fold)
        out.nums.append(num)
        out.stamps.append(ts)
        if not d.units:
            continue
        if check_vectors:
            vecs = np.asarray(d.vectors, dtype=np.float32)
            if vecs.ndim != 2 or vecs.shape != (len(d.units), dim):
                raise ValueError(f"document {d.doc_id!r}: expected {len(d.units)}×{dim} vectors, got {vecs.shape}")
            vectors.append(vecs)
        for u in d.units:
            out.unit_doc.append(i)
            out.positions.append(int(u.position))
            out.contents.append(u.content)
            out.starts.append(int(u.start))
            out.ends.append(int(u.end))
            out.tails.append(u.tail)
    mat = np.concatenate(vectors) if vectors else np.zeros((0, dim), dtype=np.float32)
    if not np.isfinite(mat).all():
        bad = int(np.flatnonzero(~np.isfinite(mat).all(axis=1))[0])
        raise ValueError(f"document {docs[out.unit_doc[bad]].doc_id!r}: vectors contain NaN or infinity")
    out.vectors = mat
    raw_contents = out.contents
    for c in raw_contents:
        f, n, t = _shadow(c, raw_escape)
        out.unit_folds.append(f)
        out.unit_nums.append(n)
        out.unit_stamps.append(t)
    esc_unit = _escaper(raw_escape, raw_contents, out.tails)
    if esc_unit is not _identity:
        out.contents = [esc_unit(c) for c in raw_contents]
        out.tails = [esc_unit(c) for c in out.tails]
    if analyzer is not None:
        terms = [analyzer.terms(c) for c in raw_contents]
        if esc_unit is not _identity:
            terms = [[esc_unit(t) for t in ts] for ts in terms]
        out.terms = terms
        out.nterms = [len(t) for t in terms]
    else:
        out.nterms = [0] * len(raw_contents)
    return out
