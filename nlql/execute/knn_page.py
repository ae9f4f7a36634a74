"""The page of a plain top-k, in one stage: one knn call, the page's rows fetched, their hits.

For a plan whose recall is one SIMILARITY's knn over SENTENCE rows, ordered by that score DESC alone,
with nothing left for the engine to filter, fuse, cut or rerank, and every LET binding that score
(``LET rel = SIMILARITY(…) … ORDER BY rel DESC LIMIT n``, any pushed WHERE): a store whose knn lists rows
by (score desc, insertion order) with the very scores ``similarities()`` gives
(``Capabilities.KNN_ORDERED`` and ``KNN_SCORES``) has already answered recall, ORDER BY and the page,
so the rows go straight into hits; no candidate per row is made unless the page's cursor is read. The
same hits, stats keys and cursor as recall → order → hits (``tests/test_knn_order.py``); anything
else, or a knn answer it cannot use as it is (several query vectors, a NaN score), declines and the
general stages run (on the knn answer already had).
"""

from __future__ import annotations

import time

import numpy as np

from nlql.evaluate import RowContext
from nlql.execute.candidates import Candidate, Search
from nlql.execute.cursor import PageEnd, Paging, position
from nlql.execute.materialise import _copy_metadata as copy_metadata
from nlql.execute.recall import _float32s as float32s
from nlql.execute.recall import _store_stats as store_stats
from nlql.execute.recall import clear_of_ties, knn_ask
from nlql.execute.results import Hit
from nlql.plan.nodes import Plan
from nlql.stores.base import Row

__all__ = ["applies", "knn_page", "ordered_by_knn"]


def ordered_by_knn(plan: Plan) -> bool:
    """Whether ORDER BY is exactly the knn recall's slot DESC (one key) over sentence rows, nothing fused:
    a store's knn list in (score desc, insertion order) is then the order ``order()`` would sort into."""
    return (plan.recall.kind == "knn" and plan.lowered is None and len(plan.order) == 1
            and plan.order[0].descending and plan.slot_of(plan.order[0].expr) == plan.recall.slot
            and plan.unit.rows_are_sentences and not plan.fusions and plan.count is None)


def applies(plan: Plan) -> bool:
    """Whether ``plan`` has the shape this stage answers (decided once per plan): ordered by its knn, and
    that SIMILARITY its only score, every binding, with nothing left for the engine to filter or cut."""
    slot = plan.recall.slot
    return (ordered_by_knn(plan) and plan.unit.kind == "SENTENCE" and len(plan.scores) == 1
            and plan.scores[0].slot == slot and plan.scores[0].kind == "SIMILARITY" and plan.scores[0].min is None
            and not plan.residual and not plan.fusion_residual and plan.distinct is None and plan.autocut is None
            and plan.limit is not None and all(plan.binding_slots.get(b.name) == slot for b in plan.query.bindings))


def knn_page(run: Search, qv: dict[str, np.ndarray], paging: Paging | None) -> tuple[list[Hit], PageEnd | None] | None:
    """(the page's hits, where it ended), or None: declined (``run.knn_first`` then holds the knn answer)."""
    plan, store, stats = run.plan, run.store, run.stats
    slot = plan.recall.slot
    caps = store.capabilities
    k = max(1, plan.recall.k or run.need or 0)  # (recall's first round's k)
    if not (caps.KNN_ORDERED and caps.KNN_SCORES) or slot not in qv or run.need is None or k < run.need:
        return None  # (a round of k rows might not fill the page: recall widens)
    min_score = plan.recall.min_score.get(slot) if caps.SCORE_THRESHOLD else None
    ask = knn_ask(store, k)  # (one row past the cut, unless the store cuts ties as the engine orders them)
    t = time.perf_counter()
    lists = store.knn(qv[slot], ask, plan.native, min_score=min_score)
    stats.add("recall", (time.perf_counter() - t) * 1000)
    scores = float32s([s for _, s in lists[0]]) if len(lists) == 1 else []
    # the row past the cut within TIE_MARGIN of the page's last: a row tied with it may have been left out
    # (the store cut equal scores by its own arithmetic), and recall widens (past_ties)
    tied = len(scores) > k and not clear_of_ties(scores[run.need - 1], scores[k])
    if len(lists) != 1 or not all(x == x for x in scores) or tied:
        run.knn_first = (ask, lists)  # (recall's first round: the store is not asked again)
        return None
    lists, scores = [lists[0][:k]], scores[:k]
    t = time.perf_counter()
    rows = store.fetch([key for key, _ in lists[0]])
    stats.add("filter", (time.perf_counter() - t) * 1000)
    stats.counts.update({"rounds": 1, "candidates": len(rows), "recall_k": k})
    store_stats(run)
    stats.add("order", 0.0)  # (the store's order is ORDER BY's)
    stats.counts["matches_seen"] = len(rows)
    lo, limit = plan.offset, plan.limit
    assert limit is not None
    page = rows[lo:lo + limit]
    cursor = None
    if paging is not None:
        if not page:
            cursor = PageEnd(None, False)
        else:
            upto = lo + len(page)
            more = False if len(page) < limit else (True if len(rows) > upto else None)
            passed, values = rows[:upto], scores[:upto]
            cursor = PageEnd(lambda: position(run, _units(passed, values, slot), paging), more)
    t = time.perf_counter()
    names = [b.name for b in plan.query.bindings]
    out = [Hit(r.id, r.doc_id, "SENTENCE", r.position, r.content, copy_metadata(r.metadata), {n: v for n in names},
               False, None, None, None, None)
           for r, v in zip(page, scores[lo:lo + limit])]
    stats.add("materialize", (time.perf_counter() - t) * 1000)
    return out, cursor


def _units(rows: list[Row], values: list[float], slot: str) -> list[Candidate]:
    """The candidates recall would have made of ``rows`` (for the cursor's position, when it is read)."""
    return [Candidate(RowContext(r.content, r.id, r.doc_id, r.position, r.metadata, {slot: v}, {}, r.seq), [r])
            for r, v in zip(rows, values)]
