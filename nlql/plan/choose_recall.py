"""Pass: choose how candidates are found (top-k by one similarity, a full scoring pass, or a scan)."""

from __future__ import annotations

from nlql import ir
from nlql.plan.nodes import OrderSpec, Recall, ScoreSpec, slot_of
from nlql.pushdown import Capabilities


def choose_recall(
    order: list[OrderSpec],
    specs: list[ScoreSpec],
    slots: dict[ir.Call, str],
    binding_slots: dict[str, str],
    limit: int | None,
    caps: Capabilities,
    thresholds: dict[str, float],
) -> Recall:
    """``knn`` when the first sort key is one SIMILARITY descending and LIMIT is set; else ``full``
    when anything is scored; else ``scan``."""
    by_slot = {s.slot: s for s in specs}
    if order and limit is not None and order[0].descending:
        slot = slot_of(order[0].expr, slots, binding_slots)
        # with min => x, rows below x have no score and still come (NULLS LAST, in insertion order):
        # the nearest neighbours are not the page then
        if slot is not None and by_slot[slot].kind == "SIMILARITY" and by_slot[slot].min is None:
            return Recall("knn", slot=slot, min_score=dict(thresholds), exact=caps.EXACT,
                          reason=f"first sort key is {by_slot[slot].label} DESC with LIMIT")
    if specs:
        why = "no LIMIT" if limit is None else "ordering is not a single similarity"
        return Recall("full", min_score=dict(thresholds), exact=True,
                      reason=f"scores every row passing the pushed filter ({why})")
    return Recall("scan", reason="no score: rows in insertion order")
