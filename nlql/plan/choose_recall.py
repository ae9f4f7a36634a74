"""Pass: choose how candidates are found (top-k by one similarity, a full scoring pass, or a scan)."""

from __future__ import annotations

from nlql import ir
from nlql.functions import FUSION_FUNCTIONS
from nlql.plan.nodes import OrderSpec, Recall, ScoreSpec, slot_of
from nlql.pushdown import Capabilities

__all__ = ["choose_recall", "mmr_window_recall"]


def choose_recall(
    order: list[OrderSpec],
    specs: list[ScoreSpec],
    slots: dict[ir.Call, str],
    binding_slots: dict[str, str],
    limit: int | None,
    caps: Capabilities,
    thresholds: dict[str, float],
) -> Recall:
    """``knn`` when the first sort key is one SIMILARITY descending, LIMIT is set and no fusion is bound;
    else ``full`` when anything is scored; else ``scan``.

    A fusion (RRF, INTERLEAVE, FUSE, MMR) ranks its arms over every row passing WHERE, down to its
    window (SPEC §9), whether or not the page is ordered by it: its value on a row (``hit.scores``) is
    that row's place among all of them, so the nearest neighbours of another score are not enough."""
    by_slot = {s.slot: s for s in specs}
    fused = any(s.kind in FUSION_FUNCTIONS for s in specs)
    if order and limit is not None and order[0].descending and not fused:
        slot = slot_of(order[0].expr, slots, binding_slots)
        # with min => x, rows below x have no score and still come (NULLS LAST, in insertion order):
        # the nearest neighbours are not the page then
        if slot is not None and by_slot[slot].kind == "SIMILARITY" and by_slot[slot].min is None:
            return Recall("knn", slot=slot, min_score=dict(thresholds), exact=caps.EXACT,
                          reason=f"first sort key is {by_slot[slot].label} DESC with LIMIT")
    if specs:
        why = ("no LIMIT" if limit is None else "a fusion ranks its arms over them" if fused
               else "ordering is not a single similarity")
        return Recall("full", min_score=dict(thresholds), exact=True,
                      reason=f"scores every row passing the pushed filter ({why})")
    return Recall("scan", reason="no score: rows in insertion order")


def mmr_window_recall(recall: Recall, order: list[OrderSpec], specs: list[ScoreSpec], slots: dict[ir.Call, str],
                      binding_slots: dict[str, str], need: int | None, *, sentences: bool, engine_where: bool,
                      caps: Capabilities) -> Recall:
    """``knn`` of MMR's window when that is exactly the rows the page can come from, else ``recall``.

    When the first sort key is ``MMR(s, window => w)`` DESC over one SIMILARITY ``s`` (no ``min =>``),
    it is the only fusion, the rows are sentences, WHERE leaves nothing to the engine (nor after
    fusion) and the page (``need`` = (LIMIT + OFFSET) × rerank factor) fits in the window, the page is
    among the top ``w`` rows by ``s``: the store's top-``w`` knn is the window, and rows outside it (NULL,
    sorted last) are never reached. Anything else keeps the full pass.
    """
    if recall.kind != "full" or need is None or not sentences or engine_where or not order:
        return recall
    first = order[0]
    by_slot = {s.slot: s for s in specs}
    spec = by_slot.get(slot_of(first.expr, slots, binding_slots) or "")
    fusions = [s for s in specs if s.kind in FUSION_FUNCTIONS]
    if spec is None or spec.kind != "MMR" or not first.descending or len(fusions) != 1 or spec.window is None:
        return recall
    arm = by_slot.get(slot_of(spec.arm_exprs[0], slots, binding_slots) or "") if spec.arm_exprs else None
    if arm is None or arm.kind != "SIMILARITY" or arm.min is not None or need > spec.window:
        return recall
    return Recall("knn", slot=arm.slot, k=spec.window, min_score=dict(recall.min_score), exact=caps.EXACT,
                  reason=f"first sort key is {spec.label} DESC: its window is the top {spec.window} rows by "
                         f"{arm.label}")
