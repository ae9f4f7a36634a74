"""Fusion: RRF and INTERLEAVE over arms ranked among the candidates that passed WHERE (SPEC §5, §9).

An arm is any numeric expression. Each arm ranks the candidates by its value, descending (ties on
insertion order); a row whose value is NULL or not a number is absent from that arm (so is a row below
an arm-local ``min => x``), and so is a row that matches no term of a BM25-only arm. An arm ranks down
to its fusion's window. A row absent from every arm is not a fusion result.
"""

from __future__ import annotations

import math

from nlql import ir
from nlql import values as V
from nlql.evaluate import compile_expr
from nlql.execute.candidates import Candidate, Search
from nlql.plan.nodes import TEXT_SCORES, Plan, ScoreSpec

__all__ = ["fuse"]


def fuse(run: Search, specs: list[ScoreSpec], units: list[Candidate]) -> list[Candidate]:
    """Set each fusion's score on every candidate; keep the candidates some arm ranked."""
    plan, env = run.plan, run.env
    in_any: set[int] = set()
    for spec in specs:
        dropped = run.dropped_arms.get(spec.slot, set())
        ranked: list[list[int]] = []
        for a, arm in enumerate(spec.arm_exprs):
            if a in dropped:
                ranked.append([])
                continue
            fn = env.binding_fn(arm.name) if isinstance(arm, ir.Ref) else compile_expr(arm, env)
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
            if spec.window is not None:
                order = order[: spec.window]
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


def _is_bm25_arm(plan: Plan, arm: ir.Expr) -> bool:
    """The arm's own text scores are all BM25 (a row matching no term has no BM25 rank).

    Read in the arm's expression, or the expression of the binding it names, without following
    further bindings: ``k`` and ``BM25(…) + 0`` are BM25 arms, ``w`` with ``w = 2 * k`` ranks by value.
    """
    if isinstance(arm, ir.Ref):
        b = plan.query.binding(arm.name)
        if b is None:
            return False
        arm = b.expr
    calls = [n for n in arm.walk() if isinstance(n, ir.Call) and n.name in TEXT_SCORES]
    return bool(calls) and all(c.name == "BM25" for c in calls)
