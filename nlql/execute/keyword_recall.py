"""Recall for a store that keeps BM25 in itself: read only the rows a query's terms and arms can rank.

Without it, a query ordered by BM25 (or by a fusion with a BM25 arm) on a store other than the built-in
one scans the store and fetches every row to score it in the engine, so per-query work grows with the
corpus. For a store declaring ``Capabilities.KEYWORD_STATS`` (its keyword index's ``candidates`` returns
the keys and scores of the rows passing the pushed filter that hold a query term), they are narrowed
before any row is fetched, in the two cases where that is exact (the rows left out could not be on the
page):

- the first sort key is one BM25 score, descending, and WHERE leaves nothing in the engine but
  thresholds ``kw > c`` / ``kw >= c`` (c ≥ 0) on that score: the rows scoring at least the ``need``-th
  best score (ties kept) — when fewer than ``need`` rows match, rows without a term can be on the page,
  so the full path runs, unless a threshold leaves them out (``kw > 0``: the matching rows are the page);
- the first sort key is ``RRF``/``INTERLEAVE``/``FUSE`` of bare SIMILARITY and BM25 arms, descending, with
  nothing left in the engine's WHERE (FUSE normalises each arm over its window, the same rows): each SIMILARITY arm's top ``arm_depth`` rows by the store's knn and each BM25
  arm's top ``arm_depth`` rows (ties kept), so every row an arm ranks inside its window is a candidate;
  a SIMILARITY arm dropped by ``on_arm_error="degrade"`` (no query vector) adds none.

Anything else returns None and the executor takes its full path.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np

from nlql import ir
from nlql.functions import RANK_FUSIONS
from nlql.stores.base import KEYWORD_READS_SENT, KNN_VECTORS


def _is_threshold_on(expr: ir.Expr, name: str) -> bool:
    """``name > c`` or ``name >= c`` with a number c ≥ 0 (every passing row holds a query term)."""
    if not isinstance(expr, ir.Compare) or expr.op not in (">", ">="):
        return False
    left, right = expr.left, expr.right
    if not (isinstance(left, ir.Ref) and left.name == name and isinstance(right, ir.Literal)):
        return False
    v = right.value
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0


def _excludes_zero(expr: ir.Expr) -> bool:
    """A threshold (see :func:`_is_threshold_on`) that a row holding no query term fails: ``> c`` with
    c ≥ 0 or ``>= c`` with c > 0 (such a row's BM25 is 0), so the rows holding a term are every row that
    can pass, however few."""
    assert isinstance(expr, ir.Compare) and isinstance(expr.right, ir.Literal)
    c = expr.right.value
    assert isinstance(c, (int, float))
    return expr.op == ">" or c > 0


def _top(keys: list[Any], scores: np.ndarray, n: int) -> list[Any]:
    """The rows scoring at least the ``n``-th best score (ties kept)."""
    if len(keys) <= n:
        return list(keys)
    cut = np.partition(scores, len(scores) - n)[len(scores) - n]
    return [k for k, s in zip(keys, scores) if s >= cut]


_pool: ThreadPoolExecutor | None = None
_HANDOFF_S = 0.01  # the longest a keyword arm waits for the arms it launched to begin (a busy pool)
_pool_lock = threading.Lock()


def _arm_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="nlql-arm")
        return _pool


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t) * 1000


def _in_parallel(calls: dict[str, Callable[[], Any]]) -> tuple[dict[str, Any], dict[str, float]]:
    """Run the arms' store calls at once (a server store answers them concurrently; drivers and the Rust
    and C++ engines release the interpreter lock): the first in this thread (a store may keep what its
    knn read for this search's fetch, per thread), the others on a small pool, each in a copy of the
    caller's context (the search's deadline). Their results and each one's milliseconds; the first
    failure is raised."""
    names = list(calls)
    if len(names) < 2:
        got = {name: _timed(calls[name]) for name in names}
    else:
        pool = _arm_pool()
        futures = {name: pool.submit(contextvars.copy_context().run, _timed, calls[name]) for name in names[1:]}
        got = {names[0]: _timed(calls[names[0]])}
        got.update((name, f.result()) for name, f in futures.items())
    return {n: got[n][0] for n in names}, {n: round(got[n][1], 3) for n in names}


def _keyword_reads_first(first: dict[str, Callable[[], Any]],
                         later: dict[str, Callable[[], Any]]) -> tuple[dict[str, Any], dict[str, float]]:
    """For a store whose engine answers one call at a time (Milvus Lite): the keyword arms in this thread,
    and the other arms on the pool from the moment the first keyword arm's reads are answered
    (:func:`nlql.stores.base.keyword_reads_sent`; at the latest when the keyword arms are done). Their short
    reads then do not wait behind a knn's long search, and their scoring overlaps it. As
    :func:`_in_parallel` returns."""
    base = contextvars.copy_context()  # (before the hook is set: the later arms run without it)
    futures: dict[str, Any] = {}
    started = threading.Event()

    def begun(fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            started.set()
            return fn()
        return run

    def launch() -> None:
        if not futures:
            pool = _arm_pool()
            for name, fn in later.items():
                futures[name] = pool.submit(base.copy().run, _timed, begun(fn))
            # the keyword arm's scoring is the interpreter's: left running, it would keep the GIL from the
            # pool thread for up to a switch interval (5 ms) before the knn's request is even sent. Waiting
            # here until an arm has begun hands the GIL over; that thread holds it until its call blocks
            # in the driver, then the scoring resumes beside the engine's search
            started.wait(_HANDOFF_S)

    got: dict[str, tuple[Any, float]] = {}
    token = KEYWORD_READS_SENT.set(launch)
    try:
        for name, fn in first.items():
            got[name] = _timed(fn)
    finally:
        KEYWORD_READS_SENT.reset(token)
    launch()
    got.update((name, f.result()) for name, f in futures.items())
    names = [*first, *later]
    return {n: got[n][0] for n in names}, {n: round(got[n][1], 3) for n in names}


def narrow(plan: Any, store: Any, index: Any, qv: dict[str, np.ndarray], need: int | None,
           arm_ms: dict[str, float] | None = None, windows: dict[str, list[Any]] | None = None,
           known: dict[str, dict[Any, float]] | None = None) -> list[Any] | None:
    """Candidate keys for ``plan`` on a ``KEYWORD_STATS`` store (``index``: its keyword index), or None
    when only the full path is exact. A fusion's arms are asked at once (:func:`_in_parallel`); each
    arm's milliseconds go into ``arm_ms``, each SIMILARITY arm's window (the keys its knn returned)
    into ``windows``, by score slot, and, when they are its rows' SIMILARITY values (one query vector on a
    store declaring ``Capabilities.KNN_SCORES``), the knn's scores by key into ``known`` (SENTENCE rows;
    a DOCUMENT page reads its documents whole)."""
    documents = plan.unit.kind == "DOCUMENT"
    if (need is None or plan.fusion_residual or plan.recall.min_score or not plan.order
            or not plan.order[0].descending or not (plan.unit.rows_are_sentences or documents)):
        return None
    first = plan.order[0].expr
    slot = plan.binding_slots.get(first.name) if isinstance(first, ir.Ref) else None
    by_slot = {s.slot: s for s in plan.scores}
    spec = by_slot.get(slot) if slot is not None else None
    if spec is None or any(f.slot != spec.slot for f in plan.fusions):
        # (another fusion ranks its own arms over every row passing WHERE: narrowing would change its values)
        return None
    if spec.kind == "BM25":
        assert isinstance(first, ir.Ref)
        if not all(_is_threshold_on(c, first.name) for c in plan.residual):
            return None
        text = " ".join(spec.texts)
        if documents:
            keys, complete = _documents_by_keyword(store, index, text, plan.native, need)
        else:
            keys, scores = index.candidates(text, plan.native, need)
            complete = len(keys) >= need
            keys = _top(keys, np.asarray(scores, dtype=np.float64), need)
        if not complete and not any(_excludes_zero(c) for c in plan.residual):
            return None  # rows holding no term (BM25 0) can fill the page: only the full path is exact
        return keys
    if (spec.kind in RANK_FUSIONS or spec.kind == "FUSE") and plan.arm_depth is not None and not plan.residual:
        depth = plan.arm_depth
        calls: dict[str, Callable[[], Any]] = {}
        # the knn's scores are the window's values and nothing after it reads a row's vector (no other
        # SIMILARITY score, no MMR): the store need not return the hits' vectors with them
        scores_only = (known is not None and store.capabilities.KNN_SCORES
                       and not any(f.kind == "MMR" for f in plan.fusions)
                       and all(s.slot in qv and len(qv[s.slot]) == 1
                               and any(plan.binding_slots.get(a) == s.slot for a in spec.arms)
                               for s in plan.scores if s.kind == "SIMILARITY"))
        for arm in spec.arms:
            arm_spec = by_slot.get(plan.binding_slots.get(arm, ""))
            if arm_spec is None or arm_spec.kind not in ("SIMILARITY", "BM25"):
                return None
            if arm in calls:
                continue
            if arm_spec.kind == "SIMILARITY":
                if arm_spec.slot not in qv:  # dropped (on_arm_error="degrade"): the arm ranks nothing
                    continue
                vec = qv[arm_spec.slot]
                if documents:
                    calls[arm] = partial(_documents_by_knn, store, vec, depth, plan.native)
                    continue

                def similarity_arm(vec: np.ndarray = vec) -> list[list[tuple[Any, float]]]:
                    token = KNN_VECTORS.set(not scores_only)  # (the first arm runs in the caller's thread)
                    try:
                        out: list[list[tuple[Any, float]]] = store.knn(vec, depth, plan.native)
                    finally:
                        KNN_VECTORS.reset(token)
                    return out
                calls[arm] = similarity_arm
            else:
                text = " ".join(arm_spec.texts)

                def keyword_arm(text: str = text) -> list[Any]:
                    if documents:
                        return _documents_by_keyword(store, index, text, plan.native, depth)[0]
                    keys, scores = index.candidates(text, plan.native, depth)
                    return _top(keys, np.asarray(scores, dtype=np.float64), depth)
                calls[arm] = keyword_arm
        keyword = {a: fn for a, fn in calls.items() if by_slot[plan.binding_slots[a]].kind == "BM25"}
        if store.capabilities.SERIAL_CALLS and keyword and len(keyword) < len(calls):
            got, ms = _keyword_reads_first(keyword, {a: fn for a, fn in calls.items() if a not in keyword})
        else:
            got, ms = _in_parallel(calls)
        if arm_ms is not None:
            arm_ms.update(ms)
        for arm in calls:
            arm_spec = by_slot[plan.binding_slots[arm]]
            if arm_spec.kind == "SIMILARITY" and not documents:  # (a DOCUMENT arm returns its keys)
                lists = got[arm]
                got[arm] = [key for lst in lists for key, _ in lst]
                if windows is not None:
                    windows[arm_spec.slot] = got[arm]
                if known is not None and store.capabilities.KNN_SCORES and len(lists) == 1:
                    known[arm_spec.slot] = dict(lists[0])
        out: dict[Any, None] = {}
        for arm in calls:  # (in the arms' order, as before)
            out.update((k, None) for k in got[arm])
        return list(out)
    return None


def _documents(store: Any, keys: list[Any]) -> int:
    """How many documents the sentence ``keys`` belong to."""
    if store.capabilities.FAST_PATH:  # (a table store knows each key's document without building rows)
        return len(set(store.key_documents(keys)))
    return len({r.doc_id for r in store.fetch(keys)})


def _documents_by_keyword(store: Any, index: Any, text: str, native: Any, n: int) -> tuple[list[Any], bool]:
    """Sentence keys whose documents hold the ``n`` best documents by BM25 (a document scores its best
    sentence), and whether they span ``n`` documents (else every row holding a term was read).

    The store's ``m`` best sentences (ties cut in insertion order), ``m`` widened from ``n`` until they
    span ``n`` documents: every document whose best sentence scores above the ``m``-th is among them, and
    a document tied with it but unread comes later in insertion order than the tied ones read, so the
    ``n`` best documents (ties in insertion order, as the engine ranks them) are theirs. The caller reads
    each such document whole."""
    depth = n
    while True:
        keys, scores = index.candidates(text, native, depth)
        keys = _top(keys, np.asarray(scores, dtype=np.float64), depth)
        if len(keys) < depth:
            return keys, _documents(store, keys) >= n if keys else False
        if _documents(store, keys) >= n:
            return keys, True
        depth *= 4


def _documents_by_knn(store: Any, vec: np.ndarray, n: int, native: Any) -> list[Any]:
    """Sentence keys whose documents hold the ``n`` most similar documents (a document scores its best
    sentence; with several query vectors, its best over them): for each query vector, the store's knn
    widened until its rows span ``n`` documents (the argument of :func:`_documents_by_keyword`)."""
    out: dict[Any, None] = {}
    for row in np.atleast_2d(vec):
        k = n
        while True:
            keys = [key for key, _ in store.knn(row[None, :], k, native)[0]]
            if len(keys) < k or _documents(store, keys) >= n:
                break
            k *= 4
        out.update(dict.fromkeys(keys))
    return list(out)


def window_only(plan: Any, caps: Any, windows: dict[str, list[Any]], *, plain: bool) -> set[str]:
    """The SIMILARITY slots whose values only the rows of their arm's window need during the search.

    The fusion ranks an arm's rows by value (ties on insertion order) and cuts the ranking at its
    window, which is the arm's knn window (``arm_depth`` rows) when the store's knn is exact
    (``Capabilities.EXACT``): every other candidate ranks below it, so its value changes no fused
    score. When nothing else reads the value before the page is cut (one fusion, ordering by it alone;
    no DISTINCT BY, COUNT, arm-local ``min =>``, residual WHERE, reranker or degraded arms: ``plain``),
    the other rows' values can be read for the page's rows only
    (:func:`nlql.execute.materialise.read_unread`)."""
    if not (plain and caps.EXACT and windows) or len(plan.order) != 1 or plan.distinct is not None \
            or plan.count is not None or plan.residual or plan.fusion_residual or plan.recall.min_score:
        return set()
    fusions = plan.fusions
    if len(fusions) != 1 or fusions[0].kind not in RANK_FUSIONS or fusions[0].window is None \
            or fusions[0].window != plan.arm_depth:
        return set()
    spec = fusions[0]
    first = plan.order[0].expr
    if not isinstance(first, ir.Ref) or plan.binding_slots.get(first.name) != spec.slot:
        return set()
    arms = {plan.binding_slots.get(a) for a in spec.arms}
    return {s.slot for s in plan.scores
            if s.kind == "SIMILARITY" and s.slot in windows and s.slot in arms and s.min is None}


__all__ = ["narrow", "window_only"]
