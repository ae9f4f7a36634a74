"""The page of a fusion fast path, fused with numpy over the arms' windows only.

A table store's ``fusion`` fast path (:mod:`nlql.stores.memory.fastpath`) keeps the union of each arm's top
``window`` rows. Every arm ranks inside that union exactly as it ranks over all candidates (each arm's
window is in it, and the rest ranks below), so RRF and INTERLEAVE computed on the union with numpy give
each row the value :func:`nlql.execute.fuse.fuse` would give it: the same ranks (score descending, then
insertion order), the same sums in the same order (arm by arm, from 0.0). Then only the rows that can
be on the page (the ``need`` best fused values, ties kept) are fetched; the executor skips ``fuse`` for
that fusion (``Search.prefused``) and orders and cuts them as usual.

Used only when nothing else reads the arms' ranks: no reranker (it reads ``need`` × factor rows in
fused order and would see the same rows, but is left to the general path), no fusion residual (the
planner's fast path excludes it), and the fusion is RRF, INTERLEAVE or FUSE (whose normalisation of each
arm over its window reads only the window's values: the same on the union).

:func:`window_page` goes further for a fusion of bare SIMILARITY and BM25 arms on the built-in store
family (``top_window``): it never builds a vector over the table. Each SIMILARITY arm's window is the
store's exact top ``depth`` (through the int8 copy, or the fp32 scan where that does not apply), each
BM25 arm's the top ``depth`` of the rows holding a query term (the engine's sparse matches), both
ranked by (score desc, seq, position) as the fast path ranks; the fusion runs over their union as above,
and only the page's rows get the SIMILARITY scores their windows did not give them.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from nlql.functions import RANK_FUSIONS
from nlql.kernels import fuse_normalise
from nlql.stores.memory.fastpath import floor_rows, top_rows

Search = Any  # the engine's per-search state (nlql.execute.candidates.Search; see table_recall)
Candidate = Any
ScoreSpec = Any

__all__ = ["fused_page", "window_page"]


def _spec(run: Search) -> ScoreSpec | None:
    fast, plan = run.plan.fast_path, run.plan
    if fast is None or fast.kind != "fusion" or run.failed or len(plan.fusions) != 1:
        return None
    spec = plan.fusions[0]
    if (spec.kind not in (*RANK_FUSIONS, "FUSE") or spec.window != fast.depth
            or len(spec.arm_exprs) != len(fast.arms)):
        return None
    first = plan.order[0] if plan.order else None
    if first is None or plan.slot_of(first.expr) != spec.slot:
        return None
    return spec


def fused_page(run: Search, keys: np.ndarray, scores: dict[str, np.ndarray],
               bm25_rows: Any) -> tuple[np.ndarray, dict[str, np.ndarray], str] | None:
    """``(keys, scores, fusion slot)`` of the rows that can reach the page, in insertion order; ``scores``
    holds the SIMILARITY arms' values and the fused value per row. None: the general path fuses.
    A ``VALUE`` arm (GRAPH, TEMPORAL, RECENCY) ranks by its vector in ``scores`` (NaN: absent).

    Args:
        keys: The fast path's union of the arms' windows (table row numbers).
        scores: SIMILARITY scores per slot, aligned with ``keys``.
        bm25_rows: ``rows(text, table)``: a BM25 text's score for every table row.
    """
    spec = _spec(run)
    table = run.store.table
    if spec is None or run.need is None or bm25_rows is None:
        return None
    fast = run.plan.fast_path
    assert fast is not None and fast.depth is not None
    keys = np.asarray(keys, dtype=np.int64)
    seq, pos = table.seq[keys], table.pos[keys]
    ranked: list[np.ndarray] = []
    valued: list[np.ndarray] = []
    for arm in fast.arms:
        if arm.kind in ("SIMILARITY", "VALUE"):
            vals = scores.get(arm.slot)
            if vals is None:
                return None
            vals = np.asarray(vals, dtype=np.float64)
            ok = ~np.isnan(vals)
        else:
            text = fast.bm25_text(arm.slot)
            full = bm25_rows(text, table) if text is not None else None
            if full is None:
                return None
            vals = full[keys]
            ok = vals > 0  # a row matching no term has no BM25 rank
        if arm.min is not None:
            ok &= vals >= np.float64(arm.min)
        idx = np.flatnonzero(ok)
        order = idx[np.lexsort((pos[idx], seq[idx], -vals[idx]))][: fast.depth]
        ranked.append(order)
        valued.append(vals[order])
    fused, present = _fuse(spec, ranked, keys.size, valued)
    live = _live(fused, run.need, seq, pos, present)
    out = {k: v[live] for k, v in scores.items() if not k.startswith("~")}  # (not a VALUE arm's vector)
    out[spec.slot] = fused[live]
    return keys[live], out, spec.slot


def _fuse(spec: ScoreSpec, ranked: list[np.ndarray], size: int,
          valued: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(the fused value of each of ``size`` rows, whether some arm ranks it), from each arm's rows
    (indices) best first and their values (``valued``, aligned with ``ranked``: FUSE normalises them
    with :func:`nlql.kernels.fuse_normalise`, as :func:`nlql.execute.fuse.fuse` does); 0.0: no arm."""
    fused = np.zeros(size, dtype=np.float64)
    present = np.zeros(size, dtype=bool)
    for order in ranked:
        present[order] = True
    if spec.kind == "FUSE":
        weights = spec.weights or (1.0,) * len(ranked)
        for w, order, vals in zip(weights, ranked, valued):  # noqa: B905 - as fuse() pairs them
            fused[order] += w * fuse_normalise(vals, spec.method)
    elif spec.kind == "RRF":
        weights = spec.weights or (1.0,) * len(ranked)
        for w, order in zip(weights, ranked):  # noqa: B905 - as fuse() pairs them
            fused[order] += w / (spec.k + np.arange(1, order.size + 1))
    else:  # INTERLEAVE: round robin over the arms, a row counted at its first appearance
        position = 0
        seen = np.zeros(size, dtype=bool)
        lists = [o.tolist() for o in ranked]
        for depth in range(max((len(o) for o in lists), default=0)):
            for o in lists:
                if depth < len(o) and not seen[o[depth]]:
                    seen[o[depth]] = True
                    position += 1
                    fused[o[depth]] = 1.0 / position
    return fused, present


def _live(fused: np.ndarray, need: int, seq: np.ndarray, pos: np.ndarray, present: np.ndarray) -> np.ndarray:
    """The rows that can be on the page: of the rows some arm ranks (``present``; a FUSE row may have the
    value 0.0, the bottom of its arm's min–max), the ``need`` best fused values (ties kept), in
    insertion order."""
    live = np.flatnonzero(present) if need > 0 else np.zeros(0, dtype=np.int64)
    if live.size > need:
        sub = fused[live]
        kth = np.partition(sub, sub.size - need)[sub.size - need]
        live = live[sub >= kth]  # ties with the need-th value kept: the executor orders them
    return live[np.lexsort((pos[live], seq[live]))]


def window_page(run: Search, qv: dict[str, np.ndarray]) -> list[Candidate] | None:
    """The candidates of a fusion's page from the arms' windows only (see the module), or None: the
    recall stage's fast path runs instead. Only without a reranker (the caller's ``fast_ok``).

    The ``bm25`` fast path of a query with no SIMILARITY score takes the same road: its rows tied with
    or above the ``need``-th BM25 score among the matches alone (None when fewer rows match: the fast
    path declines there and says so)."""
    fast = run.plan.fast_path
    if fast is not None and fast.kind == "bm25":
        return _bm25_page(run, qv)
    plan, store = run.plan, run.store
    spec = _spec(run)
    table, top = store.table, store.top_window
    sparse = None if run.bm25.fast_matches is None else run.bm25.fast_matches.sparse
    caps = store.capabilities
    if (spec is None or fast is None or fast.depth is None or run.need is None
            or fast.floors  # the windows rank the whole table, not the rows passing WHERE's floors
            or not (caps.FULL_SCORES and caps.FAST_PATH) or plan.distinct is not None or plan.recall.min_score):
        return None
    sim_slots = [s.slot for s in plan.scores if s.kind == "SIMILARITY"]
    if any(s not in qv or len(qv[s]) != 1 or not bool(np.isfinite(qv[s]).all()) for s in sim_slots):
        return None  # several texts (a max over them) or an invalid query vector: the general fast path
    texts: dict[str, str] = {}
    for arm in fast.arms:
        if arm.kind == "BM25":
            text = fast.bm25_text(arm.slot)
            if text is None or sparse is None:
                return None
            texts[arm.slot] = text
        elif arm.kind != "SIMILARITY" or arm.slot not in sim_slots:
            return None
    t = time.perf_counter()
    run.bm25.begin_search()  # the BM25 matches kept serve this search only
    depth, seq, pos = fast.depth, table.seq, table.pos
    live_rows = store.mask(plan.native)
    ranked: list[np.ndarray] = []  # each arm's table rows, best first
    valued: list[np.ndarray] = []  # their values (FUSE normalises them)
    windows: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # SIMILARITY slot -> (rows, scores)
    certified = True
    for arm in fast.arms:
        if arm.kind == "SIMILARITY":
            got = top(qv[arm.slot][0], depth, plan.native, arm.min)
            if got is None:  # the int8 copy does not apply or did not certify: the exact fp32 scan
                certified = False
                got = _scanned(store, table, qv[arm.slot], plan.native, depth, arm.min)
            rows = np.asarray(got[0], dtype=np.int64)
            windows[arm.slot] = (rows, np.asarray(got[1]))
            valued.append(np.asarray(got[1], dtype=np.float64))
        else:
            assert sparse is not None  # (a BM25 arm: declined above without the sparse matches)
            rows, vals = sparse(texts[arm.slot], table)
            ok = live_rows[rows]
            if arm.min is not None:
                ok &= vals >= np.float64(arm.min)
            if not ok.all():
                rows, vals = rows[ok], vals[ok]
            picked = top_rows(vals, rows, table, depth, ties=False)
            rows = rows[picked]
            valued.append(np.asarray(vals[picked], dtype=np.float64))
        ranked.append(rows)
    # The windows hold a few hundred rows: fused over their union (local indices), as fused_page fuses
    union = np.unique(np.concatenate(ranked)) if ranked else np.zeros(0, dtype=np.int64)
    union_size = int(union.size)
    fused, present = _fuse(spec, [np.searchsorted(union, r) for r in ranked], union_size, valued)
    live = _live(fused, run.need, seq[union], pos[union], present)
    page, values = union[live].tolist(), fused[live].tolist()
    page_scores: dict[str, np.ndarray] = {}
    for s in sim_slots:
        known = dict(zip(*(a.tolist() for a in windows[s]), strict=True)) if s in windows else {}
        vals = np.array([known.get(k, np.nan) for k in page], dtype=np.float32)  # (float32 values: exact)
        miss = np.flatnonzero(np.isnan(vals))
        if miss.size:  # a page row outside this arm's window: its exact score, as a full scan gives it
            vals[miss] = store.similarities(qv[s], [page[i] for i in miss.tolist()])[0]
        page_scores[s] = vals
    counts = run.stats.counts
    counts.update({"rounds": 1, "candidates": int(np.count_nonzero(live_rows))})
    if certified and windows:
        counts["similarity_windows"] = depth
        if store.last_stats:
            counts["store"] = dict(store.last_stats)
    run.stats.add("recall", (time.perf_counter() - t) * 1000)
    if run.deadline.expired():
        run.warnings.append("timeout during recall")
    t = time.perf_counter()
    counts.update({"fast_path": "fusion", "pruned_to": union_size})
    units = run.side.candidates(run, page, qv, page_scores)
    for u, v in zip(units, values, strict=True):
        u.ctx.scores[spec.slot] = v
    run.prefused.add(spec.slot)
    counts["fused_page"] = len(units)
    units = run.side.passing(run, units)
    run.stats.add("filter", (time.perf_counter() - t) * 1000)
    return units


def _bm25_page(run: Search, qv: dict[str, np.ndarray]) -> list[Candidate] | None:
    """The ``bm25`` fast path's candidates from the sparse matches (no vector over the table), or None."""
    plan, store = run.plan, run.store
    fast = plan.fast_path
    assert fast is not None
    table = store.table
    sparse = None if run.bm25.fast_matches is None else run.bm25.fast_matches.sparse
    text = fast.bm25_text(fast.slot or "")
    if (sparse is None or text is None or run.need is None or run.failed
            or plan.distinct is not None or not (store.capabilities.FAST_PATH and store.capabilities.FULL_SCORES)
            or any(s.kind == "SIMILARITY" for s in plan.scores)):
        return None
    t = time.perf_counter()
    run.bm25.begin_search()
    live_rows = store.mask(plan.native)
    floors = fast.floors
    if floors:  # WHERE's BM25 floors (each fails at 0): only the rows passing them are candidates
        passing_rows = floor_rows(table, fast, sparse)
        if passing_rows is None:
            return None
        passing = np.zeros(table.size, dtype=bool)
        passing[passing_rows] = True
        live_rows = live_rows & passing
    rows, vals = sparse(text, table)
    ok = live_rows[rows]
    if not ok.all():
        rows, vals = rows[ok], vals[ok]
    # fewer matches than the page: rows without a term can be on it, unless a floor on this very score
    # left none of them
    if rows.size < run.need and not any(slot == fast.slot for slot, _, _ in floors):
        return None
    counts = run.stats.counts
    counts.update({"rounds": 1, "candidates": int(np.count_nonzero(live_rows))})
    run.stats.add("recall", (time.perf_counter() - t) * 1000)
    if run.deadline.expired():
        run.warnings.append("timeout during recall")
    t = time.perf_counter()
    kept = rows[top_rows(vals, rows, table, run.need, ties=True)]
    kept = kept[np.lexsort((table.pos[kept], table.seq[kept]))]  # into insertion order
    counts.update({"fast_path": "bm25", "pruned_to": int(kept.size)})
    units = run.side.candidates(run, [int(k) for k in kept], qv, {})
    units = run.side.passing(run, units)
    run.stats.add("filter", (time.perf_counter() - t) * 1000)
    return units


def _scanned(store: Any, table: Any, v: np.ndarray, native: Any, depth: int,
             min_score: float | None) -> tuple[np.ndarray, np.ndarray]:
    """A SIMILARITY arm's window from the exact scan: (rows, scores) of its top ``depth`` rows passing
    the filter (at or above ``min_score``), best first by (score desc, seq, position)."""
    keys, mat = store.score_all(v, native)
    keys = np.asarray(keys, dtype=np.int64)
    row = mat[0]
    eligible = row >= np.float64(min_score) if min_score is not None else None
    idx = top_rows(row, keys, table, depth, ties=False, eligible=eligible)
    return keys[idx], row[idx]
