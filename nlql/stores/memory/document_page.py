"""The page of a DOCUMENT query ranked by BM25, score arithmetic or a fusion, picked with numpy.

The planner's path over documents (``FastPath.unit == "DOCUMENT"``, :mod:`nlql.plan.choose_fastpath`)
leaves nothing to the engine but the ranking: no residual WHERE but lower bounds on the one BM25 score
the page is ordered by (the pushed filter is on document metadata and ids, so it keeps or drops whole
documents), no ``min =>``, no DISTINCT BY, no reranker.
A DOCUMENT row's SIMILARITY/BM25 is its best sentence's score (SPEC §6), so:

1. every row passing the pushed filter is scored as the row-by-row path scores it (the store's exact
   fp32 scan, rounded as :func:`nlql.execute.materialise.similarities` rounds; BM25 from the engine's
   sparse matches), and the store takes each document's maximum per slot
   (:func:`nlql.stores.memory.fastpath.document_best`);
2. the documents are ranked by those values: the ``need`` best by one BM25 (ties kept; documents
   matching no term fill a short page in insertion order) or by the arithmetic, or, for RRF /
   INTERLEAVE / FUSE, each arm ranks the documents (score descending, then insertion order; a BM25 arm only
   the documents holding a term; a GRAPH / TEMPORAL arm, whose row vectors come from
   :mod:`nlql.stores.memory.arm_values`, only the documents with a value) down to its window and the arms are fused with the SENTENCE fusion
   page's numpy code (:mod:`nlql.stores.memory.fused_page`), which gives every document the value
   :func:`nlql.execute.fuse.fuse` gives it;
3. only the documents that can be on the page are built, by :func:`nlql.execute.materialise.candidates`
   (the very rows, scores and ``hit.best`` of the row-by-row path); the executor orders and cuts them.
"""

from __future__ import annotations

import time
from typing import Any, cast

import numpy as np

from nlql import values as V
from nlql.stores.base import ScoresAll
from nlql.stores.memory.arm_values import value_arms
from nlql.stores.memory.fastpath import (
    document_best,
    document_formula,
    document_matches,
    first_documents,
    top_rows,
)
from nlql.stores.memory.fused_page import _fuse, _live, _spec

__all__ = ["document_page"]

Search = Any  # the engine's per-search state (nlql.execute.candidates.Search; see table_recall)
Candidate = Any
ScoreSpec = Any


def document_page(run: Search, qv: dict[str, np.ndarray]) -> list[Candidate] | None:
    """The candidates (documents) that can be on the page, or None: the row-by-row path runs instead."""
    plan, store = run.plan, run.store
    fast = plan.fast_path
    table = store.table
    sparse = None if run.bm25.fast_matches is None else run.bm25.fast_matches.sparse
    caps = store.capabilities
    if (fast is None or fast.unit != "DOCUMENT" or run.failed or run.need is None
            or not (caps.FAST_PATH and caps.FULL_SCORES)
            or (fast.bm25_texts and sparse is None)):
        return None
    spec = None
    if fast.kind == "fusion":
        spec = _spec(run)
        if spec is None:
            return None
    t = time.perf_counter()
    run.bm25.begin_search()  # the BM25 matches kept serve this search only
    got = _from_windows(run, qv, spec, sparse)
    if got is None:
        got = _from_every_row(run, qv, spec, sparse)
    if got is None:
        return None
    page_keys, fused = got
    run.stats.add("recall", (time.perf_counter() - t) * 1000)
    if run.deadline.expired():
        run.warnings.append("timeout during recall")
    t = time.perf_counter()
    counts = run.stats.counts
    counts.update({"fast_path": fast.kind, "fast_path_unit": fast.unit, "pruned_to": len(page_keys)})
    value = None
    if spec is not None and fused is not None:
        ids = table.doc_ids  # (before the rows are built: keyed by document)
        value = {ids[k]: v for k, v in zip(page_keys, fused, strict=True)}
    units = run.side.candidates(run, page_keys, qv, None)
    if spec is not None and value is not None:
        for u in units:
            u.ctx.scores[spec.slot] = value[u.ctx.doc_id]
        run.prefused.add(spec.slot)
        counts["fused_page"] = len(units)
    units = run.side.passing(run, units)
    run.stats.add("filter", (time.perf_counter() - t) * 1000)
    return units


def _from_windows(run: Search, qv: dict[str, np.ndarray], spec: ScoreSpec | None,
                  sparse: Any) -> tuple[list[int], list[float] | None] | None:
    """(a row of each document that can be on the page, in row order; the fused values or None) from
    each arm's top documents only, without a score for every row, or None (then every row is scored).

    A BM25 arm's documents come from the sparse matches (:func:`~nlql.stores.memory.fastpath.document_matches`).
    A SIMILARITY arm's top ``depth`` documents are those of the store's exact top ``k`` sentences
    (``top_window``: best first by (score desc, seq, position), the bits of the fp32 scan) once they hold
    ``depth`` documents: a document's first row in that list is its best sentence, and a document outside
    it has no sentence above the ``k``-th, nor one tied with it that comes earlier in insertion order, so
    it ranks after all of them. ``k`` starts at twice the depth and grows ×4 while the list holds fewer.
    The ``bm25`` path takes its documents from the matches when at least ``need`` documents hold a term.
    """
    plan, store, fast = run.plan, run.store, run.plan.fast_path
    assert fast is not None and run.need is not None
    table = store.table
    if fast.kind == "formula" or plan.recall.min_score or any(a.kind == "VALUE" for a in fast.arms):
        return None  # (GRAPH / TEMPORAL arms: a value for every row passing the filter)
    live_rows: np.ndarray | None = None

    def matched(slot: str) -> tuple[np.ndarray, np.ndarray]:
        nonlocal live_rows
        if live_rows is None:
            live_rows = store.mask(plan.native)
        rows, vals = sparse(fast.bm25_text(slot), table)
        ok = live_rows[rows]
        if not ok.all():
            rows, vals = rows[ok], vals[ok]
        return document_matches(table, rows, vals)

    if fast.kind == "bm25":
        reps, best = matched(fast.slot or "")
        # documents matching no term are on the page (every row is read), unless WHERE's bound on the
        # score leaves them out (kw > 0): then the matching documents are every one that can pass
        if reps.size < run.need and not fast.floors:
            return None
        picked = np.sort(reps[top_rows(best, reps, table, run.need, ties=True)])
        run.stats.counts.update({"rounds": 1, "documents_matched": int(reps.size)})
        return picked.tolist(), None
    assert spec is not None and fast.depth is not None
    top = store.top_window
    depth = fast.depth
    ranked: list[np.ndarray] = []  # per arm: a row of each of its top documents, best first
    valued: list[np.ndarray] = []  # their values (FUSE normalises them)
    rounds = 0
    for arm in fast.arms:
        if arm.kind == "BM25":
            reps, best = matched(arm.slot)
            picked = top_rows(best, reps, table, depth, ties=False)
            ranked.append(reps[picked])
            valued.append(np.asarray(best[picked], dtype=np.float64))
            continue
        v = qv.get(arm.slot)
        if top is None or v is None or len(v) != 1 or not bool(np.isfinite(v).all()):
            return None
        k = 2 * depth
        while True:
            rounds += 1
            got = top(v[0], k, plan.native, None)
            if got is None:  # the int8 copy does not apply or did not certify: every row is scored
                return None
            rows, scores = got
            if not np.array_equal(V.round_scores(scores.copy()), scores):
                return None  # (rounding again would change a score: the row-by-row bits decide)
            first = first_documents(table, rows)
            if first.size >= depth or rows.size < k:  # depth documents, or every row passing the filter
                break
            k *= 4
        ranked.append(rows[first[:depth]])
        valued.append(np.asarray(scores[first[:depth]], dtype=np.float64))
    docs = [table.row_doc[r] for r in ranked]
    union, at = np.unique(np.concatenate(docs), return_index=True)
    reps = np.concatenate(ranked)[at]
    fused, present = _fuse(spec, [np.searchsorted(union, d) for d in docs], int(union.size), valued)
    live = _live(fused, run.need, table.seq[reps], table.pos[reps], present)
    order = np.argsort(reps[live])  # row order: the order the row-by-row path builds documents in
    run.stats.counts.update({"rounds": 1, "similarity_rounds": rounds, "documents_ranked": int(union.size)})
    return reps[live][order].tolist(), fused[live][order].tolist()


def _from_every_row(run: Search, qv: dict[str, np.ndarray], spec: ScoreSpec | None,
                    sparse: Any) -> tuple[list[int], list[float] | None] | None:
    """:func:`_from_windows`'s answer from a score for every row passing the filter and each document's
    maximum per slot (:func:`~nlql.stores.memory.fastpath.document_best`), or None (the row-by-row path)."""
    plan, store, fast = run.plan, run.store, run.plan.fast_path
    assert fast is not None and run.need is not None
    table = store.table
    # the SIMILARITY slots the ranking reads (the page's documents get every score from candidates())
    reads = ({a.slot for a in fast.arms} if fast.kind == "fusion" else set(fast.formula.slots())
             if fast.kind == "formula" and fast.formula is not None else set())
    sim_slots = [s.slot for s in plan.scores if s.kind == "SIMILARITY" and s.slot in reads]
    scores: dict[str, np.ndarray] = {}
    if sim_slots:
        keys, mat = cast(ScoresAll, store).score_all(np.concatenate([qv[s] for s in sim_slots]), plan.native)
        keys = np.asarray(keys, dtype=np.int64)
        at = 0
        for s in sim_slots:
            n = len(qv[s])
            # rounded again, as materialise.similarities rounds the store's (already rounded) scores
            scores[s] = V.round_scores(mat[at:at + n].max(axis=0))
            at += n
        if any(bool(np.isnan(v).any()) for v in scores.values()):
            return None  # NaN has no order: the row-by-row path decides
    else:
        keys = np.flatnonzero(store.mask(plan.native))  # type: ignore[attr-defined]
    values: dict[str, np.ndarray] | None = None
    if fast.kind == "fusion" and any(a.kind == "VALUE" for a in fast.arms):
        values = value_arms(run, fast, keys)  # GRAPH / TEMPORAL per row (NaN: NULL), as the evaluator gives them
        if values is None:
            return None
    got = document_best(table, keys, scores, fast, sparse, values)
    if got is None:
        return None
    firsts, best = got
    n_docs = int(firsts.size)
    seq, pos = table.seq[firsts], table.pos[firsts]
    run.stats.counts.update({"rounds": 1, "candidates": int(keys.size), "documents": n_docs})
    need = run.need
    fused: np.ndarray | None = None
    vals: np.ndarray | None
    if fast.kind == "bm25":
        vals = best[fast.slot or ""]
        matched = vals > 0
        n_matched = int(np.count_nonzero(matched))
        picked = top_rows(vals, firsts, table, need, ties=True, eligible=matched)
        if n_matched < need:  # documents matching no term (BM25 0.0) fill the page in insertion order
            rest = np.flatnonzero(~matched)
            picked = np.concatenate([picked, rest[np.lexsort((rest, seq[rest]))][: need - n_matched]])
    elif fast.kind == "formula":
        vals = document_formula(table, fast, best)
        if vals is None:
            return None
        picked = top_rows(vals, firsts, table, need, ties=True)
    else:
        assert spec is not None and fast.depth is not None
        ranked, valued = [], []
        for arm in fast.arms:
            vals = best[arm.slot]
            # a document matching no term, or with no GRAPH / TEMPORAL value, has no rank in that arm
            eligible = vals > 0 if arm.kind == "BM25" else ~np.isnan(vals) if arm.kind == "VALUE" else None
            order = top_rows(vals, firsts, table, fast.depth, ties=False, eligible=eligible)
            ranked.append(order)
            valued.append(np.asarray(vals[order], dtype=np.float64))
        fused, present = _fuse(spec, ranked, n_docs, valued)
        picked = _live(fused, need, seq, pos, present)
    picked = np.sort(picked)  # row order: the order the row-by-row path builds documents in
    return firsts[picked].tolist(), None if fused is None else fused[picked].tolist()
