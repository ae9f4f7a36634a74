"""Table fast paths: pick a page (or every row that can still reach it) with numpy, before any row is built.

The table stores (the built-in store, Faiss, hnswlib) key rows by row number in a
:class:`~nlql.stores.memory.table.RowTable`, so insertion order, BM25 scores and score arithmetic are vectors
over those numbers. The planner chooses a :class:`~nlql.pushdown.FastPath` (explain shows it); the
store runs it here through its one method ``fast_select``. Every path is exact: rows left out could
not have been returned. A path declines (None) when its precondition fails at run time, and the
engine then runs its general path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from nlql.pushdown import FastPath, Formula
from nlql.stores.base import Bm25Matches
from nlql.stores.memory.table import RowTable

__all__ = ["document_best", "document_formula", "document_matches", "first_documents", "floor_rows", "select",
           "top_rows"]


def select(table: RowTable, path: FastPath, keys: np.ndarray, scores: Mapping[str, np.ndarray], need: int,
           bm25: Bm25Matches) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """What ``path`` selects among ``keys`` (see :meth:`~nlql.stores.base.TablePaths.fast_select`)."""
    if len(keys) == 0:
        return None
    keys = np.asarray(keys).astype(np.int64, copy=False)
    if path.floors and path.prunes:  # WHERE's BM25 lower bounds first: the arms rank the rows passing them
        kept = _floored(table, path, keys, bm25)
        if kept is None:
            return None
        if kept.size < len(keys):
            keys, scores = keys[kept], {k: np.asarray(v)[kept] for k, v in scores.items()}
        if len(keys) == 0:
            return keys, dict(scores)
    if path.kind == "insertion":
        idx = np.lexsort((table.pos[keys], table.seq[keys]))[:need]
    elif path.kind == "score":
        s = scores.get(path.slot or "")
        if s is None:
            return None
        idx = np.lexsort((table.pos[keys], table.seq[keys], -s if path.descending else s))[:need]
    elif path.kind == "bm25":
        matched = _bm25_matched(table, path, path.slot or "", keys, bm25)
        # fewer rows holding a term than the page: rows scoring 0 fill it (declined), unless there are none
        if matched is not None:  # only the rows holding a term: no vector over the whole table
            at, vals = matched
            if at.size < need and at.size < len(keys):
                return None
            idx = at[top_rows(vals, keys[at], table, need, ties=True)]
        else:
            bm = _bm25_over(table, path, path.slot or "", keys, bm25)
            if bm is None:
                return None
            eligible = bm > 0
            if int(np.count_nonzero(eligible)) < min(need, len(keys)):
                return None
            idx = top_rows(bm, keys, table, need, ties=True, eligible=eligible)
    elif path.kind == "formula":
        assert path.formula is not None
        values = _evaluate(path.formula, table, path, keys, scores, bm25)
        if values is None or bool(np.isnan(values).any()):
            return None
        idx = top_rows(values, keys, table, need, ties=True)
    elif path.kind == "fusion":
        assert path.depth is not None
        parts = []
        for arm in path.arms:
            eligible = None
            if arm.kind == "SIMILARITY":
                arm_scores = scores.get(arm.slot)
                if arm_scores is not None and bool(np.isnan(arm_scores).any()):  # NaN ranks nothing
                    eligible = ~np.isnan(arm_scores)
            elif arm.kind == "VALUE":  # the engine's vector of the arm's values, NaN where absent
                arm_scores = scores.get(arm.slot)
                eligible = ~np.isnan(arm_scores) if arm_scores is not None else None
            else:
                matched = _bm25_matched(table, path, arm.slot, keys, bm25)
                if matched is not None:  # rank only the rows holding a term (the others have no rank)
                    at, vals = matched
                    if arm.min is not None:
                        keep = vals >= np.float64(arm.min)
                        at, vals = at[keep], vals[keep]
                    parts.append(at[top_rows(vals, keys[at], table, path.depth, ties=False)])
                    continue
                arm_scores = _bm25_over(table, path, arm.slot, keys, bm25)
                eligible = arm_scores > 0 if arm_scores is not None else None  # no term: no rank
            if arm_scores is None:
                return None
            if arm.min is not None:  # below an arm-local min the row is out of that arm
                above = arm_scores >= np.float64(arm.min)  # (as doubles, as the row evaluator)
                eligible = above if eligible is None else eligible & above
            parts.append(top_rows(arm_scores, keys, table, path.depth, ties=False, eligible=eligible))
        idx = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
    else:
        return None
    return keys[idx], {k: v[idx] for k, v in scores.items()}


_PASSES = {">": np.greater, ">=": np.greater_equal}


def floor_rows(table: RowTable, path: FastPath, sparse: Any) -> np.ndarray | None:
    """The table rows (ascending) passing every floor of ``path``, from the engine's sparse BM25
    matches (``sparse(text, table)``: rows holding a term, ascending, and their scores; a floor fails at
    0, so only those can pass). None when a floor's text is unknown."""
    rows: np.ndarray | None = None
    for slot, op, value in path.floors:
        text = path.bm25_text(slot)
        if text is None:
            return None
        got, vals = sparse(text, table)
        got = got[_PASSES[op](vals, value)]
        rows = got if rows is None else np.intersect1d(rows, got, assume_unique=True)
    return np.zeros(0, dtype=np.int64) if rows is None else rows


def _floored(table: RowTable, path: FastPath, keys: np.ndarray, bm25: Bm25Matches) -> np.ndarray | None:
    """Indices (into ``keys``, ascending) of the keys passing every floor of ``path``, from the sparse
    matches where the engine gives them, else from each key's BM25 (None: a floor's scores unknown)."""
    kept: np.ndarray | None = None
    for slot, op, value in path.floors:
        matched = _bm25_matched(table, path, slot, keys, bm25)
        if matched is not None:  # a floor fails at 0: only rows holding a term can pass it
            at, vals = matched
            at = at[_PASSES[op](vals, value)]
        else:
            bm = _bm25_over(table, path, slot, keys, bm25)
            if bm is None:
                return None
            at = np.flatnonzero(_PASSES[op](bm, value))
        kept = at if kept is None else np.intersect1d(kept, at, assume_unique=True)
    return np.arange(len(keys)) if kept is None else kept


def top_rows(scores: np.ndarray, keys: np.ndarray, table: RowTable, n: int, *, ties: bool,
             eligible: np.ndarray | None = None) -> np.ndarray:
    """Indices (into ``keys``) of the ``n`` best rows by (score desc, seq, position); with ``ties``, every
    row tied with the n-th score too. Only the rows at or above the n-th score are sorted."""
    if n <= 0:  # (LIMIT 0)
        return np.zeros(0, dtype=np.int64)
    if eligible is None:
        if len(scores) > n:
            kth = np.partition(scores, len(scores) - n)[len(scores) - n]
            idx = np.flatnonzero(scores >= kth)  # all rows at least as good as the n-th (ties included)
        else:
            idx = np.arange(len(scores))
    else:
        idx = np.flatnonzero(eligible)
        if len(idx) > n:
            sub = scores[idx]
            kth = np.partition(sub, len(sub) - n)[len(sub) - n]
            idx = idx[sub >= kth]
    rows = keys[idx]
    order = np.lexsort((table.pos[rows], table.seq[rows], -scores[idx]))
    return idx[order] if ties else idx[order[:n]]


def _bm25_matched(table: RowTable, path: FastPath, slot: str, keys: np.ndarray,
                  bm25: Bm25Matches) -> tuple[np.ndarray, np.ndarray] | None:
    """(indices into ``keys`` of the rows holding a term of a BM25 slot, ascending; their scores), from
    the engine's sparse matches (``bm25.sparse(text, table)``: table rows ascending, scores > 0); None
    when the matches do not come that way (then :func:`_bm25_over`)."""
    text = path.bm25_text(slot)
    sparse = getattr(bm25, "sparse", None)
    if text is None or sparse is None:
        return None
    rows, vals = sparse(text, table)
    n = len(keys)
    if n == table.size and n and keys[0] == 0 and keys[-1] == n - 1 and bool((keys[1:] > keys[:-1]).all()):
        return rows, vals  # every row of the table, in row order: a row's index is its number
    where = np.full(table.size, -1, dtype=np.int64)
    where[keys] = np.arange(n)
    at = where[rows]
    ok = at >= 0
    at, vals = at[ok], vals[ok]
    if at.size > 1 and not bool((at[1:] > at[:-1]).all()):
        order = np.argsort(at, kind="stable")
        at, vals = at[order], vals[order]
    return at, vals


def _bm25_over(table: RowTable, path: FastPath, slot: str, keys: np.ndarray,
               bm25: Bm25Matches) -> np.ndarray | None:
    """BM25 of a slot for each key, without fetching rows (0.0 where no query term occurs)."""
    text = path.bm25_text(slot)
    if text is None:
        return None
    dense = getattr(bm25, "rows", None)  # the engine's index maps its rows to the table's itself
    if dense is not None:
        full = dense(text, table)
        if full is not None and full.shape == (table.size,):
            return full[keys]
    found, values = bm25(text)
    full = np.zeros(table.size, dtype=np.float64)
    doc_rows = table.doc_rows
    for (doc_id, position), v in zip(found, values):
        rows = doc_rows.get(doc_id)
        if rows is not None and position < len(rows):
            full[rows[position]] = v
    return full[keys]


def _evaluate(f: Formula, table: RowTable, path: FastPath, keys: np.ndarray, scores: Mapping[str, np.ndarray],
              bm25: Bm25Matches) -> np.ndarray | None:
    """A formula as a float64 vector over ``keys`` (the row evaluator's double arithmetic), or None when
    a divisor is zero or a value is not finite somewhere (the engine's evaluator then decides)."""
    if f.op == "num":
        return np.full(len(keys), float(f.value))
    if f.op == "slot":
        slot = str(f.value)
        if path.bm25_text(slot) is not None:
            return _bm25_over(table, path, slot, keys, bm25)
        arr = scores.get(slot)
        return None if arr is None else arr.astype(np.float64)
    args = []
    for sub in f.args:
        v = _evaluate(sub, table, path, keys, scores, bm25)
        if v is None:
            return None
        args.append(v)
    if f.op == "neg":
        return 0.0 - args[0]
    a, b = args
    if f.op == "/" and bool((b == 0).any()):
        return None
    with np.errstate(all="ignore"):
        out = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}[f.op](a, b)
    return out if bool(np.isfinite(out).all()) else None


# ------------------------------------------------------------------------------------------ documents


def document_best(table: RowTable, keys: np.ndarray, scores: Mapping[str, np.ndarray], path: FastPath,
                  sparse: Any, values: Mapping[str, np.ndarray] | None = None,
                  ) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """Each document's best sentence score per slot, for a path over DOCUMENT rows (``path.unit``).

    ``keys``: the live rows passing the pushed filter, ascending; ``scores``: SIMILARITY scores per slot
    aligned with them; the BM25 slots of ``path`` come from the engine's sparse matches
    (``sparse(text, table)``; 0.0 for a document whose sentences match no term); ``values``: a ``VALUE``
    arm's vector per slot aligned with ``keys`` (NaN: the row has no value), whose maximum per document
    ignores NaN (NaN when no row has one). A document's rows are one run of consecutive row numbers, so
    each maximum is one ``reduceat`` over those runs.

    Returns ``(first row of each document, in row order; {slot: best value per document})``, or None
    when a document has rows outside ``keys`` (its best sentence could be one of them).
    """
    keys = np.asarray(keys, dtype=np.int64)
    n = int(keys.size)
    if n == 0:
        return keys, {**{s: np.zeros(0, dtype=np.float32) for s in scores},
                      **{s: np.zeros(0) for s, _ in path.bm25_texts}, **{s: np.zeros(0) for s in values or {}}}
    slot_of = table.row_doc
    slots = slot_of[keys]
    starts = np.concatenate(([0], np.flatnonzero((slots[1:] != slots[:-1]) | (keys[1:] != keys[:-1] + 1)) + 1))
    firsts, lasts = keys[starts], keys[np.append(starts[1:] - 1, n - 1)]
    run_slots = slots[starts]
    # whole documents only: the row before a run and the row after it belong to other documents
    before = (firsts == 0) | (slot_of[np.maximum(firsts - 1, 0)] != run_slots)
    after = (lasts == table.size - 1) | (slot_of[np.minimum(lasts + 1, table.size - 1)] != run_slots)
    if not (bool(before.all()) and bool(after.all())):
        return None
    best: dict[str, np.ndarray] = {s: np.maximum.reduceat(np.asarray(v), starts) for s, v in scores.items()}
    for slot, v in (values or {}).items():
        best[slot] = np.fmax.reduceat(np.asarray(v, dtype=np.float64), starts)
    for slot, text in path.bm25_texts:
        rows, vals = sparse(text, table)
        at = np.minimum(np.searchsorted(keys, rows), n - 1)
        ok = keys[at] == rows
        reps, doc_best = document_matches(table, rows[ok], vals[ok])
        out = np.zeros(starts.size, dtype=np.float64)
        out[np.searchsorted(firsts, reps, side="right") - 1] = doc_best  # each document's run
        best[slot] = out
    return firsts, best


def document_formula(table: RowTable, path: FastPath, best: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """A ``formula`` path's value per document from each slot's best per document (:func:`document_best`),
    in float64 as the row evaluator computes it, or None (a zero divisor, a value not finite)."""
    assert path.formula is not None
    size = len(next(iter(best.values()))) if best else 0
    return _evaluate(path.formula, table, replace(path, bm25_texts=()), np.arange(size), best, _NO_MATCHES)


def _no_matches(text: str) -> tuple[list[tuple[str, int]], np.ndarray]:
    return [], np.zeros(0)


_NO_MATCHES: Bm25Matches = _no_matches


def first_documents(table: RowTable, rows: np.ndarray) -> np.ndarray:
    """Indices (into ``rows``) of each document's first row, in the order of ``rows``: for rows best first
    by (score desc, seq, position), each document's best row, so the documents best first by their best
    sentence (ties on insertion order: a document's rows share its seq)."""
    _, first = np.unique(table.row_doc[rows], return_index=True)
    return np.sort(first)


def document_matches(table: RowTable, rows: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a row of each document holding a term, that document's best BM25) from sparse matches (``rows``
    ascending, ``vals`` > 0): a document's rows are consecutive, so one ``np.maximum.reduceat``."""
    if rows.size == 0:
        return rows, np.zeros(0, dtype=np.float64)
    docs = table.row_doc[rows]
    cut = np.concatenate(([0], np.flatnonzero(docs[1:] != docs[:-1]) + 1))
    return rows[cut], np.maximum.reduceat(vals, cut)
