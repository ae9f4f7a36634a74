"""Fusion: RRF, FUSE, INTERLEAVE and MMR over arms ranked among the candidates that passed WHERE (SPEC §5, §9).

An arm is any numeric expression. Each arm ranks the candidates by its value, descending (ties on
insertion order); a row whose value is NULL or not a number is absent from that arm (so is a row below
an arm-local ``min => x``), and so is a row that matches no term of a BM25-only arm. An arm ranks down
to its fusion's window. A row absent from every arm of an RRF or INTERLEAVE is not a fusion result; MMR
(:mod:`nlql.execute.mmr`) removes no row, its value is NULL outside its window.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from nlql import ir
from nlql import values as V
from nlql.evaluate import compile_expr
from nlql.execute.candidates import Candidate, Search
from nlql.execute.mmr import mmr_order, unit_vectors
from nlql.kernels import fuse_normalise
from nlql.plan.nodes import TEXT_SCORES, Plan, ScoreSpec

__all__ = ["fuse"]


def fuse(run: Search, specs: list[ScoreSpec], units: list[Candidate]) -> list[Candidate]:
    """Set each fusion's score on every candidate; keep the candidates some RRF/INTERLEAVE arm ranked.

    A fusion over another fusion (``MMR(RRF(a, b))``) runs after it. MMR removes no row: a row outside
    its window has the value NULL (:mod:`nlql.execute.mmr`).
    """
    plan, env = run.plan, run.env
    in_any: set[int] = set()
    ranks = False
    for spec in _inner_first(plan, specs):
        dropped = run.dropped_arms.get(spec.slot, set())
        if spec.kind == "MMR":
            _mmr(run, spec, units, dropped)
            continue
        ranks = True
        ranked: list[list[int]] = []
        valued: list[list[tuple[float, int]]] = []
        for a, arm in enumerate(spec.arm_exprs):
            if a in dropped:
                ranked.append([])
                valued.append([])
                continue
            items = _ranked(plan, env, arm, units)
            if spec.window is not None:
                items = items[: spec.window]
            valued.append(items)
            ranked.append([i for _, i in items])
        fused: dict[int, float] = {}
        if spec.kind == "FUSE":
            for w, items in zip(spec.weights or [1.0] * len(valued), valued):
                for i, norm in zip((i for _, i in items), normalised([v for v, _ in items], spec.method)):
                    fused[i] = fused.get(i, 0.0) + w * norm
        elif spec.kind == "RRF":
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
    if not ranks:
        return units
    return [u for i, u in enumerate(units) if i in in_any]


def normalised(values: list[float], method: str) -> list[float]:
    """FUSE's normalisation of one arm's values over its window (SPEC §11), in float64
    (:func:`nlql.kernels.fuse_normalise`, which the built-in store's numpy page uses too)."""
    return fuse_normalise(np.asarray(values, dtype=np.float64), method).tolist()


def _ranked(plan: Plan, env: Any, arm: ir.Expr, units: list[Candidate]) -> list[tuple[float, int]]:
    """(value, candidate index) of the rows an arm ranks, best first; ties on insertion order."""
    slot = plan.slot_of(arm)
    spec = plan.spec(slot) if slot is not None else None
    fn: Callable[[Any], Any]
    if spec is not None and spec.kind in TEXT_SCORES:  # a bare score: its value is in every row's scores
        def score(ctx: Any, slot: str = spec.slot) -> Any:
            return ctx.scores.get(slot)
        fn = score
    else:
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
    return [(-v, i) for v, _, _, i in vals]


def _mmr(run: Search, spec: ScoreSpec, units: list[Candidate], dropped: set[int]) -> None:
    """MMR's value on every candidate: 1/position in the greedy order of its window, else NULL."""
    plan = run.plan
    arm = spec.arm_exprs[0]
    window = [] if 0 in dropped else _ranked(plan, run.env, arm, units)[: spec.window]
    value: dict[int, float] = {}
    if window:
        rel = np.array([v for v, _ in window], dtype=np.float64)
        arm_spec = plan.spec(plan.slot_of(arm))
        if arm_spec is None or arm_spec.kind != "SIMILARITY":  # no fixed scale: min-max over the window
            lo, hi = float(rel.min()), float(rel.max())
            rel = (rel - lo) / (hi - lo) if hi > lo else np.ones_like(rel)
        groups = [[r.key for r in units[i].rows] for _, i in window]
        vecs = unit_vectors(groups, run.store.vectors)
        order, complete = mmr_order(rel, vecs, spec.mmr_lambda, stop=run.deadline.expired)
        if not complete:
            run.warn_timeout(f"timeout during {spec.label}: past the first rows of its window, positions "
                             "follow the score order; results may be incomplete")
        for position, j in enumerate(order, start=1):
            value[window[j][1]] = 1.0 / position
    for i, u in enumerate(units):
        u.ctx.scores[spec.slot] = value.get(i)  # type: ignore[assignment]
        u.ctx.bindings.clear()


def _inner_first(plan: Plan, specs: list[ScoreSpec]) -> list[ScoreSpec]:
    """The fusions in an order where every fusion comes after the fusions its arms read (stable)."""
    slots = {s.slot for s in specs}
    reads: dict[str, set[str]] = {}
    for s in specs:
        found: set[str] = set()
        seen: set[str] = set()
        stack: list[ir.Node] = list(s.arm_exprs)
        while stack:
            node = stack.pop()
            if isinstance(node, ir.Ref):
                slot = plan.binding_slots.get(node.name)
                if slot in slots:
                    found.add(slot)
                b = plan.query.binding(node.name)
                if b is not None and node.name not in seen:
                    seen.add(node.name)
                    stack.append(b.expr)
                continue
            if isinstance(node, ir.Call) and plan.slots.get(node) in slots:
                found.add(plan.slots[node])
            stack.extend(node.children())
        reads[s.slot] = found - {s.slot}
    out: list[ScoreSpec] = []
    done: set[str] = set()
    pending = list(specs)
    while pending:
        ready = [s for s in pending if reads[s.slot] <= done] or pending[:1]  # (a cycle is a check error)
        out.append(ready[0])
        done.add(ready[0].slot)
        pending.remove(ready[0])
    return out


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
