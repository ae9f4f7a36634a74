"""The planner: runs the passes in order and returns a :class:`~nlql.plan.nodes.Plan`."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from nlql import ir
from nlql.check import CheckedQuery, check_query
from nlql.errors import PlanError
from nlql.evaluate import Env
from nlql.plan.bind_params import bind_params
from nlql.plan.choose_fastpath import choose_fastpath
from nlql.plan.choose_recall import choose_recall, mmr_window_recall
from nlql.plan.decide_overfetch import decide_overfetch
from nlql.plan.dedupe_scores import dedupe_scores
from nlql.plan.lower_hybrid import lower_hybrid
from nlql.plan.nodes import (
    ARM_DEPTH_FACTOR,
    ARM_DEPTH_MIN,
    FUSION_FUNCTIONS,
    TEXT_SCORES,
    CountSpec,
    DistinctSpec,
    OrderSpec,
    Plan,
)
from nlql.plan.order_residual import order_residual
from nlql.plan.resolve_arms import resolve_arms
from nlql.plan.resolve_periods import resolve_periods
from nlql.plan.split_filters import split_filters, threshold_of
from nlql.render import render, render_expr
from nlql.sql import dialect_of
from nlql.stores.base import Store


def _int_value(expr: ir.Expr | None, what: str) -> int | None:
    if expr is None:
        return None
    if isinstance(expr, ir.Literal) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        if expr.value < 0:
            raise PlanError(f"{what} must not be negative", expr.span)
        return expr.value
    if isinstance(expr, ir.Literal) and isinstance(expr.value, float) and expr.value.is_integer() and expr.value >= 0:
        return int(expr.value)
    raise PlanError(f"{what} must be a non-negative integer", expr.span)


def _first_inline_score(where: ir.Expr | None, slots: Mapping[ir.Call, str]) -> ir.Call | None:
    """The first SIMILARITY/BM25 call written in WHERE (source order), if it has a score slot."""
    if where is None:
        return None
    for node in where.walk():
        if isinstance(node, ir.Call) and node.name in TEXT_SCORES and node in slots:
            return node
    return None


def _count_spec(q: ir.Query) -> CountSpec:
    """The COUNT … BY keys and the order of the groups (``count`` or a BY key per ORDER BY key)."""
    assert q.count is not None
    keys = tuple(q.count.by)
    order = []
    for key in q.order_by:
        nulls_first = bool(key.nulls_first) if key.nulls_first is not None else False
        if isinstance(key.expr, ir.Ref) and key.expr.name.lower() == "count":
            order.append((-1, key.descending, nulls_first))
            continue
        index = next((i for i, k in enumerate(keys) if k == key.expr), None)
        if index is None:
            raise PlanError("a COUNT query sorts by count or by a BY key", key.expr.span,
                            hint="e.g. ORDER BY count DESC")
        order.append((index, key.descending, nulls_first))
    return CountSpec(keys, tuple(render_expr(k) for k in keys), tuple(order))


def build_plan(
    query: CheckedQuery | ir.Query,
    *,
    params: Mapping[str, Any] | None,
    store: Store,
    now: datetime,
    functions: Mapping[str, Callable[..., Any]],
    rerank: dict[str, Any] | None = None,
    rerank_factor: int | None = None,
    limit_ceiling: int | None = None,
    analyzer: Any = None,
) -> Plan:
    """Plan a checked query for one store (``analyzer``: the engine's BM25 analyzer, for lowering).

    A plain :class:`~nlql.ir.Query` is checked first; a :class:`~nlql.check.CheckedQuery` (what
    :func:`~nlql.check.check_query` returns) brings the facts the checker found, which the passes read.
    """
    checked = query if isinstance(query, CheckedQuery) else check_query(
        query, params, functions={name: None for name in functions})
    query = checked.query
    canonical = render(query)
    bound = bind_params(query, params)
    specs, slots, binding_slots = dedupe_scores(bound)
    periods = resolve_periods(bound, now)
    graphs, temporals = resolve_arms(bound, now)
    env = Env(now=now, score_names=slots, binding_exprs={b.name: b.expr for b in bound.bindings},
              functions=dict(functions), periods=periods, graphs=graphs, temporals=temporals)
    caps = store.capabilities
    sim_slots = {c: s for c, s in slots.items() if c.name == "SIMILARITY"}
    pushed, residual, late, thresholds = split_filters(
        bound.where, caps, env, bound.unit, binding_slots, sim_slots, checked.fusion_bindings)
    residual_is_thresholds = all(threshold_of(c, binding_slots, sim_slots) is not None for c in residual)
    # a score with min => m is NULL below m, so `s >= v` in WHERE keeps only rows at or above max(v, m):
    # recall leaves the others out before any arm ranks (SPEC §9: arms rank the rows passing WHERE)
    arm_mins = {s.slot: s.min for s in specs if s.min is not None}
    thresholds = {slot: max(v, arm_mins.get(slot, v)) for slot, v in thresholds.items()}
    residual = order_residual(residual)

    order: list[OrderSpec] = []
    count = _count_spec(bound) if bound.count is not None else None
    for key in bound.order_by if count is None else ():
        nulls_first = bool(key.nulls_first) if key.nulls_first is not None else False
        order.append(OrderSpec(key.expr, key.descending, nulls_first, render_expr(key.expr)))
    if not order and count is None:
        # SPEC §6: the first score binding, descending (a comparison of a score is no score), else the
        # first SIMILARITY/BM25 call written inline in WHERE, descending
        scored = checked.score_bindings
        inline = _first_inline_score(bound.where, slots) if not scored else None
        if scored:
            order.append(OrderSpec(ir.Ref(scored[0]), True, False, scored[0], implicit=True))
        elif inline is not None:
            order.append(OrderSpec(inline, True, False, render_expr(inline), implicit=True))

    limit = _int_value(bound.limit, "LIMIT")
    offset = _int_value(bound.offset, "OFFSET") or 0
    autocut = _int_value(bound.autocut, "AUTOCUT")
    if autocut is not None and autocut < 1:
        raise PlanError("AUTOCUT must be at least 1", bound.autocut.span if bound.autocut else None)
    if count is not None:  # the rows pipeline returns every row passing WHERE; the groups are paged
        count = replace(count, limit=limit, offset=offset)
        limit, offset = None, 0
    if limit_ceiling is not None and limit is not None and limit > limit_ceiling:
        raise PlanError(f"LIMIT {limit} is above the ceiling of {limit_ceiling}",
                        bound.limit.span if bound.limit else None,
                        hint="lower LIMIT, or raise Engine(limit_ceiling=…)")
    recall = choose_recall(order, specs, slots, binding_slots, limit, caps, thresholds)
    # a residual that is only thresholds on the knn's own score, which an exact store applies inside the
    # knn (its min score), removes no row recall returns: nothing to over-fetch for
    in_knn = (recall.kind == "knn" and caps.SCORE_THRESHOLD and caps.EXACT and recall.slot in recall.min_score
              and all((threshold_of(c, binding_slots, sim_slots) or ("",))[0] == recall.slot for c in residual))
    recall = decide_overfetch(recall, limit, offset, bound.unit, bool(residual) and not in_knn,
                              rerank_factor if rerank else None, distinct=bound.distinct is not None)
    if limit is not None and bound.distinct is None and any(s.kind == "MMR" for s in specs):
        need = (limit + offset) * (max(1, rerank_factor or 1) if rerank else 1)
        recall = mmr_window_recall(recall, order, specs, slots, binding_slots, need,
                                   sentences=bound.unit.rows_are_sentences, engine_where=bool(residual or late),
                                   caps=caps)
    native = store.compile_filter(pushed) if pushed is not None else None
    window = 1
    if bound.unit.window is not None:
        window = _int_value(bound.unit.window, "window") or 0
    # each fusion ranks its arms down to its window (SPEC §9): window => n, else the default depth
    default_depth = None if limit is None else max(ARM_DEPTH_MIN, ARM_DEPTH_FACTOR * (limit + offset))
    specs = [replace(s, window=s.window if s.window is not None else default_depth)
             if s.kind in FUSION_FUNCTIONS else s for s in specs]
    fusions = [s for s in specs if s.kind in FUSION_FUNCTIONS and s.kind != "MMR"]  # MMR has its own window
    arm_depth = fusions[0].window if fusions else default_depth
    plan = Plan(
        query=bound, canonical=canonical, unit=bound.unit, window=window, scores=specs, slots=slots,
        binding_slots=binding_slots, pushed=pushed, native=native, residual=residual,
        fusion_residual=late, recall=recall, order=order, limit=limit, offset=offset, rerank=rerank,
        periods=periods, now=now, store=caps.NAME, arm_depth=arm_depth,
        residual_is_thresholds=residual_is_thresholds, graphs=graphs, temporals=temporals,
        autocut=autocut, count=count,
    )
    if bound.distinct is not None:
        keep = _int_value(bound.distinct.keep, "KEEP")
        if keep is not None and keep < 1:
            raise PlanError("KEEP must be at least 1", bound.distinct.keep.span if bound.distinct.keep else None)
        plan = replace(plan, distinct=DistinctSpec(tuple(bound.distinct.keys),
                                                   tuple(render_expr(k) for k in bound.distinct.keys), keep or 1))
    sql_graph = bool(getattr(dialect_of(store), "GRAPH_CTE", False))
    if graphs and not sql_graph and dialect_of(store) is not None:
        # without the store's entity tables the entity graph lives in the engine: on a SQL store such
        # plans run arm by arm in the engine (TEMPORAL and min => are the lowering's: lower_hybrid)
        plan = replace(plan, lowering={"strategy": "engine", "reason": "GRAPH run in the engine (not lowered to SQL)"})
    else:
        plan = lower_hybrid(plan, store, analyzer)
        if graphs and plan.lowering is None and dialect_of(store) is not None:  # no BM25 or fusion to lower
            plan = replace(plan, lowering={"strategy": "engine",
                                           "reason": "GRAPH runs as its own statement (nothing to fuse in SQL)"})
    if count is not None and caps.COUNTS and (not caps.COUNT_KEYS or len(count.keys) <= caps.COUNT_KEYS):
        plan = _count_in_store(plan, caps.COUNT_CALLS)
    return choose_fastpath(plan, caps)


#: A metadata key the stores' JSON paths can name as they are (letters, digits, ``_``, ``-``).
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")


def _count_in_store(plan: Plan, calls: str) -> Plan:
    """COUNT … BY grouped by the store (``CountSpec.paths``) when nothing but the pushed filter decides which
    rows count: SENTENCE or DOCUMENT, no score, no residual condition, and BY keys (no more than the
    store's ``COUNT_KEYS``) that are metadata paths of plain keys or ``doc_id``."""
    spec = plan.count
    assert spec is not None
    if (plan.unit.kind not in ("SENTENCE", "DOCUMENT") or plan.scores or plan.residual or plan.fusion_residual
            or plan.graphs or plan.temporals or plan.lowered is not None):
        return plan
    paths: list[tuple[str, ...]] = []
    for key in spec.keys:
        if isinstance(key, ir.Field) and key.name == "doc_id":
            paths.append(("doc_id",))
        elif isinstance(key, ir.Meta) and key.keys and all(_PLAIN_KEY.match(k) for k in key.keys):
            paths.append(("meta", *key.keys))
        else:
            return plan
    return replace(plan, count=replace(spec, paths=tuple(paths), calls=calls))
