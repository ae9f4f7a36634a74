"""Recall by the entity graph: ``ORDER BY g DESC LIMIT n`` where ``g`` is a GRAPH arm.

The graph's activation already knows which sentences have a value, and the query wants the best few:
instead of scoring every stored row (the ``full`` strategy), take the ``k`` best activated sentences,
fetch just their rows, apply the pushed and residual filters, and widen ``k`` ×4 until the page is full
or every activated sentence was seen. When the activated sentences run out before the page is full,
rows with no activation (NULL sorts last) could complete it, so the search falls back to ``full``;
so it does when the plan has anything that reads other rows (a fusion, a reranker, grouped units).
The rows returned are exactly the ones ``full`` would put first: ties with the ``k``-th best break on
insertion order, as ``full`` breaks them, or are all kept when later ORDER BY keys break them.
"""

from __future__ import annotations

import time

import numpy as np

from nlql import ir
from nlql.execute.candidates import Candidate, Search, keep_passing
from nlql.execute.materialise import candidates
from nlql.plan.nodes import FUSION_FUNCTIONS, Plan

WIDEN = 4

__all__ = ["graph_order_key", "recall_by_graph"]


def graph_order_key(plan: Plan) -> tuple[str, int, float] | None:
    """The activation key of the GRAPH call the plan orders by first (descending, nulls last), or None
    when this strategy does not apply to the plan."""
    if not plan.order or not plan.unit.rows_are_sentences or plan.limit is None:
        return None
    if any(s.kind in FUSION_FUNCTIONS for s in plan.scores) or plan.fusion_residual:
        return None
    if getattr(plan, "distinct", None):  # DISTINCT BY widens on its own terms
        return None
    first = plan.order[0]
    if not first.descending or first.nulls_first:
        return None
    expr = first.expr
    if isinstance(expr, ir.Ref):
        expr = next((b.expr for b in plan.query.bindings if b.name == expr.name), expr)
    if isinstance(expr, ir.Call) and expr.name == "GRAPH":
        return plan.graphs.get(expr)
    return None


def recall_by_graph(run: Search, qv: dict[str, np.ndarray]) -> list[Candidate] | None:
    """The candidates for a GRAPH-ordered page, or None when ``full`` must run instead."""
    plan, store, need = run.plan, run.store, run.need
    key = graph_order_key(plan)
    if key is None or need is None or run.env.graph_values is None:
        return None
    t = time.perf_counter()
    act = run.env.graph_values(key)
    n = len(act)
    allowed = None
    if plan.native is not None:
        allowed = set(np.asarray(store.scan(plan.native)).tolist())
    k = max(need, 1)
    rounds = 0
    seen = 0
    units: list[Candidate] = []
    while True:
        rounds += 1
        if k >= n:
            idx = np.arange(n)
        elif len(plan.order) == 1:  # ties break on insertion order, as the activation's rows are kept
            idx = act.top(k)
        else:  # every sentence at least as good as the k-th best: later ORDER BY keys break the ties
            kth = np.partition(act.values, n - k)[n - k]
            idx = np.flatnonzero(act.values >= kth)
        pairs = act.rows(idx)
        wanted: dict[str, set[int]] = {}
        for d, p in pairs:
            wanted.setdefault(d, set()).add(p)
        by_doc = store.document_rows(list(wanted))
        keys = [r.key for d, ps in wanted.items() for r in by_doc.get(d, ()) if r.position in ps
                and (allowed is None or r.key in allowed)]
        seen = len(idx)
        units = candidates(run, keys, qv, None)
        units = keep_passing(units, run.residual, run.deadline, run.warnings)
        if len(units) >= need or seen >= n or run.deadline.expired():
            break
        k *= WIDEN
    run.stats.add("recall", (time.perf_counter() - t) * 1000)
    if len(units) < need and seen >= n and not run.deadline.expired():
        return None  # fewer activated rows pass than the page needs: rows with NULL complete it
    run.stats.counts.update({"rounds": rounds, "candidates": seen, "graph_recall": len(units)})
    return units
