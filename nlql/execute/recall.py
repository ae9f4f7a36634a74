"""Recall: the candidates a plan starts from, by the strategy the planner chose.

- ``lowered``: one SQL statement ran the arms and the fusion (``Capabilities.SQL_ARMS``).
- ``knn``: top-k by one SIMILARITY, widened ×4 per round until LIMIT + OFFSET candidates survive the
  residual filter or the store has nothing more to give (the top-k guarantee, SPEC §6), and until no
  row the store left out can tie with the page's last row (:func:`past_ties`).
- ``full`` / ``scan``: every row passing the pushed filter, scored in one pass where the store can
  (``FULL_SCORES``); on a table store the planner's fast path (``FAST_PATH``) picks or prunes the page
  with numpy before any row is fetched (for DOCUMENT rows: :mod:`nlql.stores.memory.document_page`).
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
from nlql.execute.candidates import Candidate, Search, keep_passing
from nlql.execute.degrade import cause_of, drop_arms
from nlql.execute.distinct import kept
from nlql.execute.graph_recall import recall_by_graph
from nlql.execute.materialise import candidates, similarities
from nlql.plan.decide_overfetch import DISTINCT_FACTOR
from nlql.stores.base import RunsLowered, ScoresAll, TablePaths

WIDEN_FACTOR = 4
#: How far above the lowest score a store's knn returned a row it left out may score once rescored and
#: rounded as the built-in store scores (the store ranked it with its own arithmetic: a few 1e-7 off,
#: and one rounding step of 1e-6).
TIE_MARGIN = 2e-6

__all__ = ["TIE_MARGIN", "WIDEN_FACTOR", "clear_of_ties", "embed_queries", "knn_ask", "past_ties", "recall"]


def knn_ask(store: Any, k: int) -> int:
    """How many rows recall asks a store's knn for when the page needs ``k``: one more, so that the row
    after the cut shows whether the cut fell inside a group of equal scores (:func:`past_ties`), unless
    the store cuts its list as the engine orders it (``KNN_TIES``: the built-in store's first ``k`` by
    score, then insertion order)."""
    return k if store.capabilities.KNN_TIES else k + 1


def clear_of_ties(edge: float, probe: float) -> bool:
    """Whether a page whose last row scores ``edge`` is clear of a row that a knn cut left out, the best
    of which scores at most ``probe`` by the store's own arithmetic (:data:`TIE_MARGIN`)."""
    return edge > probe + TIE_MARGIN


def past_ties(store: Any, lists: list[list[tuple[Any, float]]], ask: int, units: list[Candidate], slot: str,
              need: int) -> bool:
    """Whether no row a knn left out can come on the page: the page's last row (the ``need``-th best by
    ``slot``) scores more than :data:`TIE_MARGIN` above the lowest score of every list the store cut at
    ``ask``. Equal scores break on insertion order (SPEC §6), but a store ranks with its own arithmetic
    and cuts a group of equal texts anywhere: a row it left out may come before the page's last one."""
    if store.capabilities.KNN_TIES:
        return True
    cut = [min(score for _, score in lst) for lst in lists if len(lst) >= ask]
    if not cut:
        return True
    scores = sorted((v for v in (u.ctx.scores.get(slot) for u in units) if v is not None and v == v), reverse=True)
    if len(scores) < need:
        return True  # (the page is short for another reason: the top-k rule widens or stops as before)
    return clear_of_ties(scores[need - 1], max(cut))


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
        if memo is not None and key is not None:
            memo[0] = (key, mat.copy())
    if len(specs) == 1 and len(specs[0].texts) == len(texts):  # one arm, its texts in order: the matrix itself
        return {specs[0].slot: mat}
    return {s.slot: mat[[index[tx] for tx in s.texts]] for s in specs}


class EngineSide:
    """The engine's stages a store's table fast paths call back (``Search.side``; the protocol
    :class:`nlql.stores.base.EngineSide`): rows built and filtered as the general path builds them."""

    DISTINCT_FACTOR = DISTINCT_FACTOR

    @staticmethod
    def candidates(run: Search, keys: Sequence[Any], qv: dict[str, np.ndarray],
                   known: dict[str, Any] | None = None) -> list[Candidate]:
        return candidates(run, keys, qv, known)

    @staticmethod
    def passing(run: Search, units: list[Candidate]) -> list[Candidate]:
        return keep_passing(units, run.residual, run.deadline, run.warnings)

    @staticmethod
    def enough(run: Search, units: list[Candidate], need: int) -> bool:
        return _enough(run, units, need)

    @staticmethod
    def wider(run: Search, units: list[Candidate], k: int, need: int) -> int:
        return _wider(run, units, k, need)

    @staticmethod
    def distinct_rounds(run: Search, rounds: int) -> None:
        _distinct_rounds(run, rounds)

    @staticmethod
    def store_stats(run: Search) -> None:
        _store_stats(run)

    @staticmethod
    def value_arms(run: Search, fast: Any, keys: np.ndarray) -> dict[str, np.ndarray] | None:
        return None  # (VALUE arms are the store's: nlql.stores.memory.arm_values)


ENGINE_SIDE = EngineSide()


def recall(run: Search, qv: dict[str, np.ndarray], *, fast_ok: bool) -> list[Candidate]:
    """The candidates of the plan's recall strategy (``fast_ok``: no reranker, top fast paths allowed)."""
    plan = run.plan
    run.side = ENGINE_SIDE
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
        units = [Candidate(RowContext(r.content, r.id, r.doc_id, r.position, r.metadata, _below_min(scores, run.mins),
                                      {}, r.seq), [r]) for r, scores in got]
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


def _known_similarities(store: Any, vectors: np.ndarray, keys: list[Any],
                        known: dict[Any, float] | None) -> np.ndarray:
    """:func:`similarities` of ``keys``, taking the arm's knn score where it has one (``known``: the knn's
    scores are its rows' values, ``Capabilities.KNN_SCORES``) and asking the store for the others only."""
    if not known:
        return similarities(store, vectors, keys)
    out = np.empty(len(keys), dtype=np.float32)
    ask = []
    for i, key in enumerate(keys):
        v = known.get(key)
        if v is None:
            ask.append(i)
        else:
            out[i] = v
    if ask:
        out[ask] = similarities(store, vectors, [keys[i] for i in ask])
    return out


def _window_similarities(run: Search, vectors: np.ndarray, slot: str, keys: list[Any], window: list[Any],
                         known: dict[Any, float] | None = None) -> np.ndarray:
    """The SIMILARITY values of the rows of the arm's window among ``keys`` (the knn's scores where
    ``known``), NaN for the others (they rank nowhere in it, see
    :func:`nlql.execute.keyword_recall.window_only`); those are noted in ``run.extra["unread"]`` for
    :func:`nlql.execute.materialise.read_unread`."""
    inside = set(window)
    at = [i for i, key in enumerate(keys) if key in inside]
    out = np.full(len(keys), np.nan, dtype=np.float32)
    if at:
        out[at] = _known_similarities(run.store, vectors, [keys[i] for i in at], known)
    unread = {key for key in keys if key not in inside}
    if unread:
        run.extra.setdefault("unread", {})[slot] = (vectors, unread)
        run.stats.counts.setdefault("unread_similarities", {})[slot] = len(unread)
    return out


def _below_min(scores: dict[str, Any], mins: dict[str, float]) -> dict[str, Any]:
    """A copy of a row's scores where a score below its arm-local ``min => x`` is NULL (SPEC §9; the
    statement left the row out of that arm only), as :func:`nlql.execute.materialise.candidates` does."""
    out = dict(scores)
    for slot, m in mins.items():
        v = out.get(slot)
        if v is not None and not v >= m:
            out[slot] = None
    return out


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
        ask = knn_ask(store, k)
        try:
            first = run.knn_first if rounds == 1 else None
            lists = first[1] if first is not None and first[0] == ask else store.knn(qv[slot], ask, plan.native,
                                                                                    min_score=min_score)
        except NLQLTimeoutError:
            if rounds == 1:
                raise
            # a wider round hit the store's own statement timeout: keep what the last round found
            run.warnings.append("timeout while widening recall: the store timed out; "
                                "fewer rows than LIMIT may be returned")
            break
        run.stats.add("recall", (time.perf_counter() - t) * 1000)
        caps = store.capabilities
        ordered = len(lists) == 1 and caps.KNN_ORDERED  # (best first, each key once: _merged's answer)
        if ordered:
            keys, best = [key for key, _ in lists[0]], [score for _, score in lists[0]]
        else:
            keys, best = _merged(lists)
        n_candidates = len(keys)
        exhausted = all(len(lst) < ask for lst in lists)
        t = time.perf_counter()
        known = None
        if len(lists) == 1 and caps.KNN_SCORES:
            # one query vector: knn's scores are the very ones similarities() would compute again
            known = {slot: _float32s(best)}
            # the rows in knn order are in ORDER BY's when it is this slot DESC alone (no NaN score to place)
            run.in_order = ordered and run.knn_order and all(x == x for x in best)
        units = candidates(run, keys, qv, known,
                           restrict=None if plan.unit.rows_are_sentences else set(keys))
        units = keep_passing(units, run.residual, run.deadline, run.warnings)
        run.stats.add("filter", (time.perf_counter() - t) * 1000)
        if exhausted or (_enough(run, units, need)
                         and (plan.distinct is not None or past_ties(store, lists, ask, units, slot, need))):
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
    caps = store.capabilities
    paths = cast(TablePaths, store) if caps.FAST_PATH else None  # the store's own fast paths
    if plan.fast_path is not None and plan.fast_path.unit != "SENTENCE":
        # a path over DOCUMENT rows: the page's documents from numpy, else every row, row by row
        by_documents = paths.document_page(run, qv) if fast_ok and paths is not None else None
        if by_documents is not None:
            return by_documents
        run.stats.counts["fast_path"] = f"{plan.fast_path.kind} (declined)"
        run.plan = plan = replace(plan, fast_path=None)
    if fast_ok and not run.failed:
        by_graph = recall_by_graph(run, qv)
        if by_graph is not None:
            return by_graph
        # a fusion of SIMILARITY/BM25 arms from their windows only
        by_windows = paths.window_page(run, qv) if paths is not None else None
        if by_windows is not None:
            return by_windows
    t = time.perf_counter()
    sim_slots = [s.slot for s in plan.scores if s.kind == "SIMILARITY" and s.slot not in run.failed]
    sentence_scores: dict[str, np.ndarray] = {}
    unordered = False
    if plan.fast_path is not None:
        run.bm25.begin_search()  # the BM25 scores a fast path keeps serve this search only
    floored, windowed = None, False
    try:
        floored = paths.floored(run, qv, sim_slots, fast_ok) if caps.FULL_SCORES and paths is not None else None
        windows = (paths.windows(run, qv, sim_slots, fast_ok)
                   if caps.FULL_SCORES and paths is not None and sim_slots and floored is None else None)
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
            elif plan.fast_path is not None and plan.fast_path.prunes and paths is not None:
                # a table's live keys as an array, in row order: the fast path orders what it picks, and
                # if it declines they are put in insertion order below
                keys_arr = np.flatnonzero(paths.mask(plan.native))
                unordered = True
            else:
                keys_arr = np.asarray(store.scan(plan.native))
        else:
            narrowed = None
            arm_windows: dict[str, list[Any]] = {}
            arm_known: dict[str, dict[Any, float]] = {}  # each SIMILARITY arm's knn scores, when they are its values
            # BM25 kept in the store (narrowing keeps the top LIMIT rows: not with DISTINCT BY)
            if caps.KEYWORD_STATS and run.bm25.in_store and plan.distinct is None:
                arm_ms: dict[str, float] = {}
                narrowed = keyword_recall.narrow(plan, store, run.bm25, qv, run.need, arm_ms, arm_windows, arm_known)
                if narrowed is not None:
                    run.stats.counts["keyword_recall"] = len(narrowed)
                    if arm_ms:  # each arm's store call, run at once (the arms' names)
                        run.stats.counts["arm_ms"] = arm_ms
            keys_arr = np.asarray(narrowed if narrowed is not None else store.scan(plan.native), dtype=object)
            lazy = (keyword_recall.window_only(plan, caps, arm_windows, plain=fast_ok and not run.degrade and not run.mins)
                    if narrowed is not None else set())
            # (a grouped unit's rows are read and scored whole by candidates(): no sentence values needed here)
            for s in sim_slots if plan.unit.rows_are_sentences else ():
                if s in lazy:  # the arm's window now; the page's other rows before the hits are made
                    sentence_scores[s] = _window_similarities(run, qv[s], s, list(keys_arr), arm_windows[s],
                                                              arm_known.get(s))
                else:
                    sentence_scores[s] = _known_similarities(store, qv[s], list(keys_arr), arm_known.get(s))
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
    if fast is not None and paths is not None and run.need is not None and (fast.prunes or fast_ok):
        units = paths.fast_page(run, fast, keys_arr, sentence_scores, qv, fast_ok=fast_ok, unordered=unordered,
                                fill=sim_slots if windows is not None or windowed else ())
        if units is not None:
            run.stats.add("filter", (time.perf_counter() - t) * 1000)
            return units
    if windows is not None:  # the fast path declined: every row's exact scores after all
        keys_arr, mat = cast(ScoresAll, store).score_all(np.concatenate([qv[s] for s in sim_slots]), plan.native)
        keys_arr, unordered = np.asarray(keys_arr), False
        sentence_scores = {s: mat[i:i + 1].max(axis=0) for i, s in enumerate(sim_slots)}
    if floored is not None:  # the rows failing a floor fail WHERE: the general path reads the others
        assert paths is not None  # (floored: a table store)
        if windowed:  # (their exact scores after all)
            mat = paths.similarities(np.concatenate([qv[s] for s in sim_slots]), keys_arr)
            sentence_scores = {s: mat[i:i + 1].max(axis=0) for i, s in enumerate(sim_slots)}
        back = paths.insertion_order(keys_arr)
        keys_arr, unordered = keys_arr[back], False
        sentence_scores = {k: v[back] for k, v in sentence_scores.items()}
    if unordered:  # the general path reads the keys in insertion order
        keys_arr = np.asarray(store.scan(plan.native))
    units = candidates(run, list(keys_arr), qv, dict(sentence_scores))
    units = keep_passing(units, run.residual, run.deadline, run.warnings)
    run.stats.add("filter", (time.perf_counter() - t) * 1000)
    return units
