"""Fusion: RRF and INTERLEAVE over arms ranked among the candidates that passed WHERE (SPEC §5, §9).

Each arm ranks the candidates by its value, descending (ties on insertion order); a row whose value is
NULL or not a number is absent from that arm, and so is a row that matches no term of a BM25-only arm.
An arm is cut at the plan's arm depth. A row absent from every arm is not a fusion result.
"""

from __future__ import annotations

import math

from nlql import ir
from nlql import values as V
from nlql.execute.candidates import Candidate, Search
from nlql.plan.nodes import TEXT_SCORES, Plan, ScoreSpec

__all__ = ["fuse"]


def fuse(run: Search, specs: list[ScoreSpec], units: list[Candidate]) -> list[Candidate]:
    """Set each fusion's score on every candidate; keep the candidates some arm ranked."""
    plan, env = run.plan, run.env
    in_any: set[int] = set()
    for spec in specs:
        ranked: list[list[int]] = []
        for arm in spec.arms:
            fn = env.binding_fn(arm)
            bm25_only = _is_bm25_arm(plan, arm)
            vals = []
            for i, u in enumerate(units):
                v = fn(u.ctx)
                if v is None or not V.is_number(v) or (isinstance(v, float) and math.isnan(v)):
                    continue
                if bm25_only and v <= 0:
                    continue
                vals.append((-float(v), u.ctx.seq, u.ctx.position, i))
            vals.sort()
            order = [i for *_, i in vals]
            if plan.arm_depth is not None:
                order = order[: plan.arm_depth]
            ranked.append(order)
        fused: dict[int, float] = {}
        if spec.kind == "RRF":
            for w, order in zip(spec.weights or [1.0] * len(ranked), ranked):
                for r, i in enumerate(order, start=1):
                    fused[i] = fused.get(i, 0.0) + w / (spec.k + r)
        else:
            position = 0
            for depth in range(max((len(o) for o in ranked), default=0)):
                for order in ranked:
                    if depth < len(order) and order[depth] not in fused:
                        position += 1
                        fused[order[depth]] = 1.0 / position
        for i, u in enumerate(units):
            u.ctx.scores[spec.slot] = fused.get(i, 0.0)
            u.ctx.bindings.clear()
        in_any.update(fused)
    return [u for i, u in enumerate(units) if i in in_any]


def _is_bm25_arm(plan: Plan, arm: str) -> bool:
    """Every text score in the arm is BM25: a row that matches no term (BM25 0) has no rank in it."""
    b = plan.query.binding(arm)
    if b is None:
        return False
    calls = [n for n in b.expr.walk() if isinstance(n, ir.Call) and n.name in TEXT_SCORES]
    return bool(calls) and all(c.name == "BM25" for c in calls)
