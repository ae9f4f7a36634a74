"""The built-in store family's recall fast paths, called by the engine's recall stage through
:class:`nlql.stores.base.TablePaths` (moved from ``nlql.execute.recall``):

- :func:`floored`: the rows passing WHERE's BM25 floors (from the engine's sparse matches), scored alone;
- :func:`windows`: each SIMILARITY arm's exact top window through the int8 copy (NaN elsewhere);
- :func:`fast_page`: the planner's fast path (``fast_select``) over the candidates, the fusion's page
  fused with numpy (:mod:`nlql.stores.memory.fused_page`), VALUE arms as vectors
  (:mod:`nlql.stores.memory.arm_values`).

``run`` is the engine's per-search state (``nlql.execute.candidates.Search``); rows are built and filtered
by the engine's own stages, ``run.side`` (:class:`nlql.stores.base.EngineSide`), so every page holds
the very rows and scores of the general path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nlql.stores.memory.arm_values import value_arms
from nlql.stores.memory.fastpath import floor_rows
from nlql.stores.memory.fused_page import fused_page

__all__ = ["fast_page", "floored", "windows"]


def _sparse(run: Any) -> Any:
    fast = run.bm25.fast_matches
    return None if fast is None else fast.sparse


def floored(run: Any, qv: dict[str, np.ndarray], sim_slots: list[str],
             fast_ok: bool) -> tuple[np.ndarray, dict[str, np.ndarray], bool] | None:
    """(keys, SIMILARITY scores) of the rows passing the pushed filter and every BM25 floor of a prune
    fast path (``FastPath.floors``), keys ascending: the floors from the engine's sparse BM25 matches
    (a floor fails at 0, so only rows holding a term can pass), each SIMILARITY score computed for those
    rows only, with the bits of the full scan (``similarities``: the store scans the whole matrix where
    that is cheaper than gathering the rows), or for a fusion each SIMILARITY arm's exact window among
    them through the int8 copy (NaN outside it, filled for the rows kept: the third item True). The
    store applies the floors again (:func:`nlql.stores.memory.fastpath.select`). None: the usual recall (no
    floors, or the store or the BM25 index cannot answer this way)."""
    plan, store = run.plan, run.store
    fast = plan.fast_path
    table = store.table
    sparse = _sparse(run)
    if (fast is None or not fast.floors or not fast.prunes or run.failed or run.need is None
            or sparse is None or not store.capabilities.FAST_PATH):
        return None
    rows = floor_rows(table, fast, sparse)
    if rows is None:
        return None
    rows = rows[store.mask(plan.native)[rows]]
    scores: dict[str, np.ndarray] = {}
    windows = _floor_windows(run, qv, sim_slots, rows, fast_ok) if sim_slots else None
    if windows is not None:
        run.stats.counts["floor_rows"] = int(rows.size)
        return rows, windows, True
    if sim_slots:
        # the exact scores of these rows only (the store scans the whole matrix where that is cheaper)
        mat = store.similarities(np.concatenate([qv[s] for s in sim_slots]), rows)
        at = 0
        for s in sim_slots:
            n = len(qv[s])
            scores[s] = mat[at:at + n].max(axis=0)
            at += n
    run.stats.counts["floor_rows"] = int(rows.size)
    return rows, scores, False


def _floor_windows(run: Any, qv: dict[str, np.ndarray], sim_slots: list[str], rows: np.ndarray,
                   fast_ok: bool) -> dict[str, np.ndarray] | None:
    """:func:`_windows` among the rows passing the floors (``rows``, ascending): each SIMILARITY arm's
    exact top ``depth`` of those rows through the int8 copy (``top_window(…, keys=rows)``), NaN
    elsewhere, or None (the exact scores of every such row instead)."""
    plan, store = run.plan, run.store
    fast = plan.fast_path
    top = store.top_window
    if (fast is None or fast.kind != "fusion" or fast.depth is None or not fast_ok
            or plan.distinct is not None or plan.recall.min_score):
        return None
    if any(len(qv[s]) != 1 or not bool(np.isfinite(qv[s]).all()) for s in sim_slots):
        return None
    out = {s: np.full(len(rows), np.nan, dtype=np.float32) for s in sim_slots}
    for arm in fast.arms:
        if arm.kind != "SIMILARITY" or arm.slot not in out:
            continue
        got = top(qv[arm.slot][0], fast.depth, None, arm.min, keys=rows)
        if got is None:
            return None
        out[arm.slot][np.searchsorted(rows, got[0])] = got[1]
    run.stats.counts["similarity_windows"] = fast.depth
    run.side.store_stats(run)
    return out


def windows(run: Any, qv: dict[str, np.ndarray], sim_slots: list[str],
             fast_ok: bool) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """(candidate keys in row order, SIMILARITY scores NaN outside each arm's window) for a fusion fast
    path on a store with an int8 copy (``top_window``): each SIMILARITY arm's top ``depth`` rows, exact
    rows and bits of the fp32 scan, without scoring the others (the fast path ranks nothing below an
    arm's window; the rows it keeps get their exact scores afterwards, :func:`_filled`). None: scan."""
    plan, store = run.plan, run.store
    fast = plan.fast_path
    top = store.top_window
    if (fast is None or fast.kind != "fusion" or fast.depth is None or not fast_ok
            or fast.floors or run.failed or run.need is None or plan.distinct is not None or plan.recall.min_score):
        return None
    if any(len(qv[s]) != 1 or not bool(np.isfinite(qv[s]).all()) for s in sim_slots):
        return None  # several texts (a max over them) or an invalid query vector: the full scan
    keys_arr = np.flatnonzero(store.mask(plan.native))
    out = {s: np.full(len(keys_arr), np.nan, dtype=np.float32) for s in sim_slots}
    for arm in fast.arms:
        if arm.kind != "SIMILARITY" or arm.slot not in out:
            continue
        got = top(qv[arm.slot][0], fast.depth, plan.native, arm.min)
        if got is None:
            return None
        keys, scores = got
        out[arm.slot][np.searchsorted(keys_arr, keys)] = scores
    run.stats.counts["similarity_windows"] = fast.depth
    run.side.store_stats(run)
    return keys_arr, out


def _filled(run: Any, picked: tuple[np.ndarray, dict[str, np.ndarray]], qv: dict[str, np.ndarray],
            fill: Sequence[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The kept rows' exact SIMILARITY scores where :func:`_windows` left them out (NaN)."""
    keys, scores = picked
    scores = dict(scores)
    for s in fill:
        arr = np.array(scores[s], copy=True)
        miss = np.flatnonzero(np.isnan(arr))
        if miss.size:
            arr[miss] = run.store.similarities(qv[s], [int(k) for k in keys[miss]])[0]
        scores[s] = arr
    return keys, scores


def _select(run: Any, fast: Any, keys_arr: np.ndarray, sentence_scores: dict[str, np.ndarray],
          qv: dict[str, np.ndarray], *, fast_ok: bool, unordered: bool,
          fill: Sequence[str] = ()) -> list[Any] | None:
    """The table fast path's page (None when the store declines it).

    With DISTINCT BY the path picks ``need`` rows, then ×4 per round, until enough rows are kept or it
    picked fewer than it was asked for (every matching row is then in). Without it, a fusion's page is
    fused with numpy over the arms' windows (:mod:`nlql.stores.memory.fused_page`). ``unordered``: ``keys_arr``
    is in row order (no similarity slot), so pruned keys are put in insertion order here.
    """
    assert run.need is not None
    store = run.store
    want, rounds = run.need, 0
    if run.plan.distinct is not None:
        want = int(want * run.side.DISTINCT_FACTOR)
    while True:
        rounds += 1
        table_matches = run.bm25.fast_matches
        matches = table_matches or run.bm25.matches  # dense BM25 for a table
        picked = store.fast_select(fast, keys_arr, sentence_scores, want, matches)
        run.stats.counts["fast_path"] = fast.kind if picked is not None else f"{fast.kind} (declined)"
        if picked is None:
            return None
        if fill:
            picked = _filled(run, picked, qv, fill)
        page = None
        if fast.kind == "fusion" and fast_ok and run.plan.distinct is None:
            page = fused_page(run, picked[0], picked[1], None if table_matches is None else table_matches.rows)
        if page is not None:
            page_keys, page_scores, slot = page
            fused = page_scores.pop(slot)
            run.stats.counts["pruned_to"] = int(len(picked[0]))
            units = run.side.candidates(run, [int(k) for k in page_keys], qv, page_scores)
            for u, v in zip(units, fused.tolist(), strict=True):
                u.ctx.scores[slot] = v
            run.prefused.add(slot)
            run.stats.counts["fused_page"] = len(units)
            return run.side.passing(run, units)
        if not fast.prunes:
            top_keys, scores = picked
            units = run.side.candidates(run, [int(k) for k in top_keys], qv, scores)
        else:
            pruned, pruned_scores = picked
            pruned_scores = {k: v for k, v in pruned_scores.items() if not k.startswith("~")}  # (VALUE arms)
            if unordered:  # into insertion order, with their scores
                pruned = np.asarray(pruned, dtype=np.int64)
                table = run.store.table
                back = np.lexsort((table.pos[pruned], table.seq[pruned]))
                pruned = pruned[back]
                pruned_scores = {k: np.asarray(v)[back] for k, v in pruned_scores.items()}
            run.stats.counts["pruned_to"] = int(len(pruned))
            units = run.side.candidates(run, list(pruned), qv, dict(pruned_scores))
            units = run.side.passing(run, units)
            top_keys = pruned
        if run.plan.distinct is None or len(top_keys) < want or run.side.enough(run, units, run.need):
            break
        if want >= len(keys_arr) or run.deadline.expired():
            break
        want = run.side.wider(run, units, want, run.need)
    run.side.distinct_rounds(run, rounds)
    return units


def fast_page(run: Any, fast: Any, keys_arr: np.ndarray, sentence_scores: dict[str, np.ndarray],
              qv: dict[str, np.ndarray], *, fast_ok: bool, unordered: bool,
              fill: Sequence[str] = ()) -> list[Any] | None:
    """The fast path's candidates over ``keys_arr`` (GRAPH / TEMPORAL / RECENCY arms as vectors first),
    or None: the engine's general path runs."""
    arm_scores: dict[str, np.ndarray] | None = sentence_scores
    if any(a.kind == "VALUE" for a in fast.arms):  # GRAPH / TEMPORAL / RECENCY arms as vectors
        values = value_arms(run, fast, keys_arr)
        arm_scores = None if values is None else {**sentence_scores, **values}
    if arm_scores is None:
        return None
    return _select(run, fast, keys_arr, arm_scores, qv, fast_ok=fast_ok, unordered=unordered, fill=fill)
