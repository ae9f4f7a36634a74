"""The page of a DOCUMENT query ranked by BM25, score arithmetic or a fusion, picked with numpy.

The planner's path over documents (``FastPath.unit == "DOCUMENT"``, :mod:`nlql.plan.choose_fastpath`)
leaves nothing to the engine but the ranking: no residual WHERE (the pushed filter is on document
metadata and ids, so it keeps or drops whole documents), no ``min =>``, no DISTINCT BY, no reranker.
A DOCUMENT row's SIMILARITY/BM25 is its best sentence's score (SPEC §6), so:

1. every row passing the pushed filter is scored as the row-by-row path scores it (the store's exact
   fp32 scan, rounded as :func:`nlql.execute.materialise.similarities` rounds; BM25 from the engine's
   sparse matches), and the store takes each document's maximum per slot
   (:func:`nlql.stores.fastpath.document_best`);
2. the documents are ranked by those values: the ``need`` best by one BM25 (ties kept; documents
   matching no term fill a short page in insertion order) or by the arithmetic, or, for RRF /
   INTERLEAVE, each arm ranks the documents (score descending, then insertion order; a BM25 arm only
   the documents holding a term) down to its window and the arms are fused with the SENTENCE fusion
   page's numpy code (:mod:`nlql.execute.fused_page`), which gives every document the value
   :func:`nlql.execute.fuse.fuse` gives it;
3. only the documents that can be on the page are built, by :func:`nlql.execute.materialise.candidates`
   (the very rows, scores and ``hit.best`` of the row-by-row path); the executor orders and cuts them.
"""

from __future__ import annotations

import time
from typing import cast

import numpy as np

from nlql import values as V
from nlql.execute.candidates import Candidate, Search, keep_passing
from nlql.execute.fused_page import _fuse, _live, _spec
from nlql.execute.materialise import candidates
from nlql.stores.base import ScoresAll
from nlql.stores.fastpath import document_best, document_formula, top_rows

__all__ = ["document_page"]


def document_page(run: Search, qv: dict[str, np.ndarray]) -> list[Candidate] | None:
    """The candidates (documents) that can be on the page, or None: the row-by-row path runs instead."""
    plan, store = run.plan, run.store
    fast = plan.fast_path
    table = getattr(store, "table", None)
    sparse = getattr(getattr(run.bm25, "fast_matches", None), "sparse", None)
    caps = store.capabilities
    if (fast is None or fast.unit != "DOCUMENT" or run.failed or run.need is None or table is None
            or not (caps.FAST_PATH and caps.FULL_SCORES) or not hasattr(store, "mask")
            or (fast.bm25_texts and sparse is None)):
        return None
    spec = None
    if fast.kind == "fusion":
        spec = _spec(run)
        if spec is None:
            return None
    t = time.perf_counter()
    begin = getattr(run.bm25, "begin_search", None)
    if begin is not None:
        begin()  # the BM25 matches kept serve this search only
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
    got = document_best(table, keys, scores, fast, sparse)
    if got is None:
        return None
    firsts, best = got
    n_docs = int(firsts.size)
    seq, pos = table.seq[firsts], table.pos[firsts]
    counts = run.stats.counts
    counts.update({"rounds": 1, "candidates": int(keys.size), "documents": n_docs})
    run.stats.add("recall", (time.perf_counter() - t) * 1000)
    if run.deadline.expired():
        run.warnings.append("timeout during recall")
    t = time.perf_counter()
    need = run.need
    fused: np.ndarray | None = None
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
        ranked = []
        for arm in fast.arms:
            vals = best[arm.slot]
            eligible = vals > 0 if arm.kind == "BM25" else None  # a document matching no term has no rank
            ranked.append(top_rows(vals, firsts, table, fast.depth, ties=False, eligible=eligible))
        fused = _fuse(spec, ranked, n_docs)
        picked = _live(fused, need, seq, pos)
    picked = np.sort(picked)  # row order: the order the row-by-row path builds documents in
    counts.update({"fast_path": fast.kind, "fast_path_unit": fast.unit, "pruned_to": int(picked.size)})
    page_keys = firsts[picked].tolist()
    value = None
    if spec is not None and fused is not None:
        ids = table.doc_ids
        value = {ids[k]: v for k, v in zip(page_keys, fused[picked].tolist(), strict=True)}
    units = candidates(run, page_keys, qv, None)
    if spec is not None and value is not None:
        for u in units:
            u.ctx.scores[spec.slot] = value[u.ctx.doc_id]
        run.prefused.add(spec.slot)
        counts["fused_page"] = len(units)
    units = keep_passing(units, run.residual, run.deadline, run.warnings)
    run.stats.add("filter", (time.perf_counter() - t) * 1000)
    return units
