"""Recall: the candidates a plan starts from, by the strategy the planner chose.

- ``lowered``: one SQL statement ran the arms and the fusion (``Capabilities.SQL_ARMS``).
- ``knn``: top-k by one SIMILARITY, widened ×4 per round until LIMIT + OFFSET candidates survive the
  residual filter or the store has nothing more to give (the top-k guarantee, SPEC §6).
- ``full`` / ``scan``: every row passing the pushed filter, scored in one pass where the store can
  (``FULL_SCORES``); on a table store the planner's fast path (``FAST_PATH``) picks or prunes the page
  with numpy before any row is fetched (for DOCUMENT rows: :mod:`nlql.execute.document_page`).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np

from nlql import values as V
from nlql.errors import BackendError, NLQLTimeoutError
from nlql.evaluate import RowContext
from nlql.execute import keyword_recall
from nlql.execute.arm_values import value_arms
from nlql.execute.candidates import Candidate, Search, keep_passing
from nlql.execute.degrade import cause_of, drop_arms
from nlql.execute.distinct import kept
from nlql.execute.document_page import document_page
from nlql.execute.fused_page import fused_page, window_page
from nlql.execute.graph_recall import recall_by_graph
from nlql.execute.materialise import candidates, similarities
from nlql.plan.decide_overfetch import DISTINCT_FACTOR
from nlql.stores.base import RunsLowered, ScoresAll, TablePaths
from nlql.stores.memory.fastpath import floor_rows

WIDEN_FACTOR = 4

__all__ = ["WIDEN_FACTOR", "embed_queries", "recall"]


def embed_queries(run: Search, embed: Callable[[Sequence[str]], np.ndarray],
                  memo: list[Any] | None = None) -> dict[str, np.ndarray]:
    """Each SIMILARITY slot's query vectors (L2-normalised); each distinct text embedded once.

    ``memo``: a one-item list kept with the plan (its texts are fixed): the last raw matrix's bytes and
    its normalised rows, reused (copied) while the embedder returns the very same bytes.
    """
    specs = [s for s in run.plan.scores if s.kind == "SIMILARITY"]
    texts: list[str] = []
    index: dict[str, int] = {}
    for s in specs:
        for tx in s.texts:
            if tx not in index:
                index[tx] = len(texts)
                texts.append(tx)
    if not texts:
        return {}
    raw = embed(texts)
    mat = None
    key = None
    if memo is not None and type(raw) is np.ndarray and raw.dtype == np.float32:
        key = (raw.shape, raw.tobytes())
        got = memo[0]  # (key, normalised): one object, so threads read a matching pair
        if got is not None and got[0] == key:
            mat = got[1].copy()
    if mat is None:
        mat = V.normalize_rows(raw, zero_invalid=True)
        if key is not None:
            memo[0] = (key, mat.copy())
    if len(specs) == 1 and len(specs[0].texts) == len(texts):  # one arm, its texts in order: the matrix itself
        return {specs[0].slot: mat}
    return {s.slot: mat[[index[tx] for tx in s.texts]] for s in specs}


def recall(run: Search, qv: dict[str, np.ndarray], *, fast_ok: bool) -> list[Candidate]:
    """The candidates of the plan's recall strategy (``fast_ok``: no reranker, top fast paths allowed)."""
    plan = run.plan
    if plan.lowered is not None:
        return _lowered(run, qv)
    if plan.recall.kind == "knn":
        return _knn(run, qv)
    return _full(run, qv, fast_ok)


def _enough(run: Search, units: list[Candidate], need: int) -> bool:
    """Whether ``units`` fill the page: LIMIT + OFFSET rows, counted after DISTINCT BY when there is one.

    Before fusion the fused scores are not known yet, so a plan that fuses in the engine counts rows.
    """
    if run.plan.distinct is None or (run.plan.fusions and run.plan.lowered is None):
        return len(units) >= need
    return kept(run, units) >= need


def _wider(run: Search, units: list[Candidate], k: int, need: int) -> int:
    """The next round's k: ×4, or with DISTINCT BY as far as the rows kept so far suggest (twice that)."""
    if run.plan.distinct is None or (run.plan.fusions and run.plan.lowered is None):
        return k * WIDEN_FACTOR
    got = kept(run, units)
    return max(k * WIDEN_FACTOR, 2 * k * need // max(1, got))


def _distinct_rounds(run: Search, rounds: int) -> None:
    if run.plan.distinct is not None:
        run.extra["distinct_rounds"] = rounds


def _store_stats(run: Search) -> None:
    last = run.store.last_stats
    if last:
        run.stats.counts["store"] = dict(last)


def _lowered(run: Search, qv: dict[str, np.ndarray]) -> list[Candidate]:
    """Rows of a lowered plan, scored by the store's statement (ORDER BY/LIMIT/hits stay shared)."""
    lowered = run.plan.lowered
    rounds = 0
    while True:
        rounds += 1
        t = time.perf_counter()
        got = cast(RunsLowered, run.store).run_lowered(lowered, qv)
        run.stats.add("recall", (time.perf_counter() - t) * 1000)
        units = [Candidate(RowContext(r.content, r.id, r.doc_id, r.position, r.metadata, dict(scores), {}, r.seq),
                           [r]) for r, scores in got]
        # DISTINCT BY: the statement returns the top `fetch` rows; widen until enough rows are kept
        if (run.plan.distinct is None or run.need is None or len(got) < lowered.fetch
                or _enough(run, units, run.need)):
            break
        if run.deadline.expired():
            run.warn_timeout("timeout while widening recall: fewer rows than LIMIT may be returned")
            break
        lowered = replace(lowered, fetch=_wider(run, units, lowered.fetch, run.need))
    run.stats.counts.update({"rounds": rounds, "candidates": len(got)})
    _distinct_rounds(run, rounds)
    _store_stats(run)
    return units


def _knn(run: Search, qv: dict[str, np.ndarray]) -> list[Candidate]:
    plan, store, need = run.plan, run.store, run.need
    slot = plan.recall.slot
    assert slot is not None and need is not None
    min_score = plan.recall.min_score.get(slot) if store.capabilities.SCORE_THRESHOLD else None
    k = max(1, plan.recall.k or need)
    total: int | None = None  # the store's row count, asked only when a short page might widen
    rounds = 0
    units: list[Candidate] = []
    n_candidates = 0
    while True:
        rounds += 1
        t = time.perf_counter()
        try:
            first = run.knn_first if rounds == 1 else None
            lists = first[1] if first is not None and first[0] == k else store.knn(qv[slot], k, plan.native,
                                                                                  min_score=min_score)
        except NLQLTimeoutError:
            if rounds == 1:
                raise
            # a wider round hit the store's own statement timeout: keep what the last round found
            run.warnings.append("timeout while widening recall: the store timed out; "
                                "fewer rows than LIMIT may be returned")
            break
        run.stats.add("recall", (time.perf_counter() - t) * 1000)
        keys, best = _merged(lists)
        n_candidates = len(keys)
        exhausted = all(len(lst) < k for lst in lists)
        t = time.perf_counter()
        known = None
        if len(lists) == 1 and store.capabilities.KNN_SCORES:
            # one query vector: knn's scores are the very ones similarities() would compute again
            known = {slot: _float32s(best)}
        units = candidates(run, keys, qv, known,
                           restrict=None if plan.unit.rows_are_sentences else set(keys))
        units = keep_passing(units, run.residual, run.deadline, run.warnings)
        run.stats.add("filter", (time.perf_counter() - t) * 1000)
        if exhausted or _enough(run, units, need):
            break
        if total is None:  # (one round trip on a server store: not paid by a page that is full)
            total = store.count()
        if k >= total:
            break
        if run.deadline.expired():
            run.warn_timeout("timeout while widening recall: fewer rows than LIMIT may be returned")
            break
        k = _wider(run, units, k, need)
    run.stats.counts.update({"rounds": rounds, "candidates": n_candidates, "recall_k": k})
    _distinct_rounds(run, rounds)
    _store_stats(run)
    return units


def _float32s(scores: list[float]) -> list[float]:
    """Each score rounded to float32 (what ``np.array(scores, dtype=np.float32).tolist()`` gives: the
    same C cast), as Python floats; the ``array`` module's few lines instead of two numpy calls."""
    return array("f", scores).tolist()


def _merged(lists: list[list[tuple[Any, float]]]) -> tuple[list[Any], list[float]]:
    """The knn lists of several query vectors as one: each key once with its best score, best first
    (a stable sort: equal scores keep the store's order, which breaks ties on insertion order)."""
    if len(lists) == 1:
        lst = lists[0]
        keys = [key for key, _ in lst]
        scores = [score for _, score in lst]
        # the common case: one list, best first, each key once (what the sort below would give)
        if len(set(keys)) == len(keys) and all(a >= b for a, b in zip(scores, scores[1:])):
            return keys, scores
    seen: dict[Any, float] = {}
    for lst in lists:
        for key, score in lst:
            if key not in seen or score > seen[key]:
                seen[key] = score
    keys = sorted(seen, key=lambda x: -seen[x])
    return keys, [seen[x] for x in keys]


def _full(run: Search, qv: dict[str, np.ndarray], fast_ok: bool) -> list[Candidate]:
    plan, store = run.plan, run.store
    if plan.fast_path is not None and plan.fast_path.unit != "SENTENCE":
        # a path over DOCUMENT rows: the page's documents from numpy, else every row, row by row
        by_documents = document_page(run, qv) if fast_ok else None
        if by_documents is not None:
            return by_documents
        run.stats.counts["fast_path"] = f"{plan.fast_path.kind} (declined)"
        run.plan = plan = replace(plan, fast_path=None)
    if fast_ok and not run.failed:
        by_graph = recall_by_graph(run, qv)
        if by_graph is not None:
            return by_graph
        by_windows = window_page(run, qv)  # a fusion of SIMILARITY/BM25 arms from their windows only
        if by_windows is not None:
            return by_windows
    caps = store.capabilities
    t = time.perf_counter()
    sim_slots = [s.slot for s in plan.scores if s.kind == "SIMILARITY" and s.slot not in run.failed]
    sentence_scores: dict[str, np.ndarray] = {}
    unordered = False
    begin = getattr(run.bm25, "begin_search", None)
    if begin is not None and plan.fast_path is not None:
        begin()  # the BM25 scores a fast path keeps serve this search only
    floored, windowed = None, False
    try:
        floored = _floored(run, qv, sim_slots, fast_ok) if caps.FULL_SCORES else None
        windows = (_windows(run, qv, sim_slots, fast_ok) if caps.FULL_SCORES and sim_slots and floored is None
                   else None)
        if floored is not None:  # only the rows passing WHERE's BM25 floors, with their exact scores
            keys_arr, sentence_scores, windowed = floored
            unordered = True
        elif windows is not None:  # each SIMILARITY arm's exact top window through the int8 copy
            keys_arr, sentence_scores = windows
            unordered = True
        elif caps.FULL_SCORES:
            if sim_slots:
                stacked = np.concatenate([qv[s] for s in sim_slots])
                keys_arr, mat = cast(ScoresAll, store).score_all(stacked, plan.native)
                row = 0
                for s in sim_slots:
                    n = len(qv[s])
                    sentence_scores[s] = mat[row:row + n].max(axis=0)
                    row += n
                keys_arr = np.asarray(keys_arr)
            elif plan.fast_path is not None and plan.fast_path.prunes and hasattr(store, "mask"):
                # a table's live keys as an array, in row order: the fast path orders what it picks, and
                # if it declines they are put in insertion order below
                keys_arr = np.flatnonzero(store.mask(plan.native))
                unordered = True
            else:
                keys_arr = np.asarray(store.scan(plan.native))
        else:
            narrowed = None
            # BM25 kept in the store (narrowing keeps the top LIMIT rows: not with DISTINCT BY)
            if caps.KEYWORD_STATS and getattr(run.bm25, "in_store", False) and plan.distinct is None:
                narrowed = keyword_recall.narrow(plan, store, run.bm25, qv, run.need)
                if narrowed is not None:
                    run.stats.counts["keyword_recall"] = len(narrowed)
            keys_arr = np.asarray(narrowed if narrowed is not None else store.scan(plan.native), dtype=object)
            for s in sim_slots:
                sentence_scores[s] = similarities(store, qv[s], list(keys_arr))
    except (NLQLTimeoutError, BackendError) as exc:
        if not (run.degrade and sim_slots and drop_arms(run, sim_slots, f"the store's similarity call failed "
                                                                        f"({cause_of(exc)})")):
            raise
        sentence_scores, floored, unordered = {}, None, False
        keys_arr = np.asarray(store.scan(plan.native), dtype=None if caps.FULL_SCORES else object)
    run.stats.add("recall", (time.perf_counter() - t) * 1000)
    run.stats.counts.update({"rounds": 1, "candidates": int(len(keys_arr))})
    if run.deadline.expired():
        run.warnings.append("timeout during recall")
    if plan.unit.rows_are_sentences:  # thresholds inside recall
        for s, m in plan.recall.min_score.items():
            if s in sentence_scores:
                keep = sentence_scores[s] >= np.float64(m)  # (as doubles, as WHERE compares)
                keys_arr = keys_arr[keep]
                sentence_scores = {k: v[keep] for k, v in sentence_scores.items()}
    t = time.perf_counter()
    fast = run.plan.fast_path if not run.failed else None
    if fast is not None and run.need is not None and (fast.prunes or fast_ok):
        arm_scores: dict[str, np.ndarray] | None = sentence_scores
        if any(a.kind == "VALUE" for a in fast.arms):  # GRAPH / TEMPORAL / RECENCY arms as vectors
            values = value_arms(run, fast, keys_arr)
            arm_scores = None if values is None else {**sentence_scores, **values}
        units = (None if arm_scores is None else
                 _fast(run, fast, keys_arr, arm_scores, qv, fast_ok=fast_ok, unordered=unordered,
                       fill=sim_slots if windows is not None or windowed else ()))
        if units is not None:
            run.stats.add("filter", (time.perf_counter() - t) * 1000)
            return units
    if windows is not None:  # the fast path declined: every row's exact scores after all
        keys_arr, mat = cast(ScoresAll, store).score_all(np.concatenate([qv[s] for s in sim_slots]), plan.native)
        keys_arr, unordered = np.asarray(keys_arr), False
        sentence_scores = {s: mat[i:i + 1].max(axis=0) for i, s in enumerate(sim_slots)}
    if floored is not None:  # the rows failing a floor fail WHERE: the general path reads the others
        if windowed:  # (their exact scores after all)
            mat = store.similarities(np.concatenate([qv[s] for s in sim_slots]), keys_arr)
            sentence_scores = {s: mat[i:i + 1].max(axis=0) for i, s in enumerate(sim_slots)}
        table = cast(Any, store).table
        back = np.lexsort((table.pos[keys_arr], table.seq[keys_arr]))  # into insertion order
        keys_arr, unordered = keys_arr[back], False
        sentence_scores = {k: v[back] for k, v in sentence_scores.items()}
    if unordered:  # the general path reads the keys in insertion order
        keys_arr = np.asarray(store.scan(plan.native))
    units = candidates(run, list(keys_arr), qv, dict(sentence_scores))
    units = keep_passing(units, run.residual, run.deadline, run.warnings)
    run.stats.add("filter", (time.perf_counter() - t) * 1000)
    return units


def _floored(run: Search, qv: dict[str, np.ndarray], sim_slots: list[str],
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
    table = getattr(store, "table", None)
    sparse = getattr(getattr(run.bm25, "fast_matches", None), "sparse", None)
    if (fast is None or not fast.floors or not fast.prunes or run.failed or run.need is None or table is None
            or sparse is None or not store.capabilities.FAST_PATH or not hasattr(store, "mask")):
        return None
    rows = floor_rows(table, fast, sparse)
    if rows is None:
        return None
    rows = rows[cast(Any, store).mask(plan.native)[rows]]
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


def _floor_windows(run: Search, qv: dict[str, np.ndarray], sim_slots: list[str], rows: np.ndarray,
                   fast_ok: bool) -> dict[str, np.ndarray] | None:
    """:func:`_windows` among the rows passing the floors (``rows``, ascending): each SIMILARITY arm's
    exact top ``depth`` of those rows through the int8 copy (``top_window(…, keys=rows)``), NaN
    elsewhere, or None (the exact scores of every such row instead)."""
    plan, store = run.plan, run.store
    fast = plan.fast_path
    top = getattr(store, "top_window", None)
    if (top is None or fast is None or fast.kind != "fusion" or fast.depth is None or not fast_ok
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
    _store_stats(run)
    return out


def _windows(run: Search, qv: dict[str, np.ndarray], sim_slots: list[str],
             fast_ok: bool) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
    """(candidate keys in row order, SIMILARITY scores NaN outside each arm's window) for a fusion fast
    path on a store with an int8 copy (``top_window``): each SIMILARITY arm's top ``depth`` rows, exact
    rows and bits of the fp32 scan, without scoring the others (the fast path ranks nothing below an
    arm's window; the rows it keeps get their exact scores afterwards, :func:`_filled`). None: scan."""
    plan, store = run.plan, run.store
    fast = plan.fast_path
    top = getattr(store, "top_window", None)
    if (top is None or fast is None or fast.kind != "fusion" or fast.depth is None or not fast_ok
            or fast.floors or run.failed or run.need is None or plan.distinct is not None or plan.recall.min_score
            or not hasattr(store, "mask")):
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
    _store_stats(run)
    return keys_arr, out


def _filled(run: Search, picked: tuple[np.ndarray, dict[str, np.ndarray]], qv: dict[str, np.ndarray],
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


def _fast(run: Search, fast: Any, keys_arr: np.ndarray, sentence_scores: dict[str, np.ndarray],
          qv: dict[str, np.ndarray], *, fast_ok: bool, unordered: bool,
          fill: Sequence[str] = ()) -> list[Candidate] | None:
    """The table fast path's page (None when the store declines it).

    With DISTINCT BY the path picks ``need`` rows, then ×4 per round, until enough rows are kept or it
    picked fewer than it was asked for (every matching row is then in). Without it, a fusion's page is
    fused with numpy over the arms' windows (:mod:`nlql.execute.fused_page`). ``unordered``: ``keys_arr``
    is in row order (no similarity slot), so pruned keys are put in insertion order here.
    """
    assert run.need is not None
    store = cast(TablePaths, run.store)
    want, rounds = run.need, 0
    if run.plan.distinct is not None:
        want = int(want * DISTINCT_FACTOR)
    while True:
        rounds += 1
        matches = getattr(run.bm25, "fast_matches", None) or run.bm25.matches  # dense BM25 for a table
        picked = store.fast_select(fast, keys_arr, sentence_scores, want, matches)
        run.stats.counts["fast_path"] = fast.kind if picked is not None else f"{fast.kind} (declined)"
        if picked is None:
            return None
        if fill:
            picked = _filled(run, picked, qv, fill)
        page = None
        if fast.kind == "fusion" and fast_ok and run.plan.distinct is None:
            page = fused_page(run, picked[0], picked[1], getattr(matches, "rows", None))
        if page is not None:
            page_keys, page_scores, slot = page
            fused = page_scores.pop(slot)
            run.stats.counts["pruned_to"] = int(len(picked[0]))
            units = candidates(run, [int(k) for k in page_keys], qv, page_scores)
            for u, v in zip(units, fused.tolist(), strict=True):
                u.ctx.scores[slot] = v
            run.prefused.add(slot)
            run.stats.counts["fused_page"] = len(units)
            return keep_passing(units, run.residual, run.deadline, run.warnings)
        if not fast.prunes:
            top_keys, scores = picked
            units = candidates(run, [int(k) for k in top_keys], qv, scores)
        else:
            pruned, pruned_scores = picked
            pruned_scores = {k: v for k, v in pruned_scores.items() if not k.startswith("~")}  # (VALUE arms)
            if unordered:  # into insertion order, with their scores
                pruned = np.asarray(pruned, dtype=np.int64)
                table = cast(Any, run.store).table
                back = np.lexsort((table.pos[pruned], table.seq[pruned]))
                pruned = pruned[back]
                pruned_scores = {k: np.asarray(v)[back] for k, v in pruned_scores.items()}
            run.stats.counts["pruned_to"] = int(len(pruned))
            units = candidates(run, list(pruned), qv, dict(pruned_scores))
            units = keep_passing(units, run.residual, run.deadline, run.warnings)
            top_keys = pruned
        if run.plan.distinct is None or len(top_keys) < want or _enough(run, units, run.need):
            break
        if want >= len(keys_arr) or run.deadline.expired():
            break
        want = _wider(run, units, want, run.need)
    _distinct_rounds(run, rounds)
    return units
