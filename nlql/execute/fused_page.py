"""The page of a fusion fast path, fused with numpy over the arms' windows only.

A table store's ``fusion`` fast path (:mod:`nlql.stores.fastpath`) keeps the union of each arm's top
``window`` rows. Every arm ranks inside that union exactly as it ranks over all candidates (each arm's
window is in it, and the rest ranks below), so RRF and INTERLEAVE computed on the union with numpy give
each row the value :func:`nlql.execute.fuse.fuse` would give it: the same ranks (score descending, then
insertion order), the same sums in the same order (arm by arm, from 0.0). Then only the rows that can
be on the page (the ``need`` best fused values, ties kept) are fetched; the executor skips ``fuse`` for
that fusion (``Search.prefused``) and orders and cuts them as usual.

Used only when nothing else reads the arms' ranks: no reranker (it reads ``need`` × factor rows in
fused order and would see the same rows, but is left to the general path), no fusion residual (the
planner's fast path excludes it), and the fusion is RRF or INTERLEAVE.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nlql.execute.candidates import Search
from nlql.plan.nodes import ScoreSpec

__all__ = ["fused_page"]


def _spec(run: Search) -> ScoreSpec | None:
    fast, plan = run.plan.fast_path, run.plan
    if fast is None or fast.kind != "fusion" or run.failed or len(plan.fusions) != 1:
        return None
    spec = plan.fusions[0]
    if spec.kind not in ("RRF", "INTERLEAVE") or spec.window != fast.depth or len(spec.arm_exprs) != len(fast.arms):
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
    table = getattr(run.store, "table", None)
    if spec is None or table is None or run.need is None or bm25_rows is None:
        return None
    fast = run.plan.fast_path
    assert fast is not None and fast.depth is not None
    keys = np.asarray(keys, dtype=np.int64)
    seq, pos = table.seq[keys], table.pos[keys]
    ranked: list[np.ndarray] = []
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
            ok &= vals >= arm.min
        idx = np.flatnonzero(ok)
        order = idx[np.lexsort((pos[idx], seq[idx], -vals[idx]))][: fast.depth]
        ranked.append(order)
    fused = np.zeros(keys.size, dtype=np.float64)
    if spec.kind == "RRF":
        weights = spec.weights or (1.0,) * len(ranked)
        for w, order in zip(weights, ranked):  # noqa: B905 - as fuse() pairs them
            fused[order] += w / (spec.k + np.arange(1, order.size + 1))
    else:  # INTERLEAVE: round robin over the arms, a row counted at its first appearance
        position = 0
        seen = np.zeros(keys.size, dtype=bool)
        lists = [o.tolist() for o in ranked]
        for depth in range(max((len(o) for o in lists), default=0)):
            for o in lists:
                if depth < len(o) and not seen[o[depth]]:
                    seen[o[depth]] = True
                    position += 1
                    fused[o[depth]] = 1.0 / position
    live = np.flatnonzero(fused > 0)
    if live.size > run.need:
        sub = fused[live]
        kth = np.partition(sub, sub.size - run.need)[sub.size - run.need]
        live = live[sub >= kth]  # ties with the need-th value kept: the executor orders them
    live = live[np.lexsort((pos[live], seq[live]))]
    out = {k: v[live] for k, v in scores.items() if not k.startswith("~")}  # (not a VALUE arm's vector)
    out[spec.slot] = fused[live]
    return keys[live], out, spec.slot
