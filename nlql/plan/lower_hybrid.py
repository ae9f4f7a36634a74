"""Pass: decide whether a hybrid plan runs as one SQL statement on the store, and build it.

A plan with a BM25, RRF or INTERLEAVE score is *lowered* (``plan.lowered`` set to a
:class:`~nlql.sql.nodes.Lowered`) when all of these hold; otherwise the engine runs it arm by arm and
``plan.lowering["reason"]`` says which rule failed (explain prints it):

1. there is a dialect (a store passes its ``dialect`` when it declares ``Capabilities.SQL_ARMS``);
2. the unit is SENTENCE or SPAN(SENTENCE) (the statement ranks sentences);
3. there is a LIMIT (arms are cut at ``plan.arm_depth``);
4. at most one fusion score; every arm is a binding that is exactly one SIMILARITY or BM25 call (an
   arm-local ``min => x`` included: the arm keeps its rows scoring at least x), or (SENTENCE rows, a
   dialect with the store's entity tables) one GRAPH call, or one TEMPORAL call (the period extracted
   at plan time, the dates read from the metadata's typed date view);
5. ORDER BY is one key, DESC: the fusion binding, or (no fusion) a BM25 binding, written or implicit;
6. the whole WHERE is pushed, except score conditions ``score op number`` (op one of > >= < <=) on a
   SIMILARITY, BM25 or the fusion binding, which the statement applies to every arm before its LIMIT
   (and on the fusion score after fusion), and none on a score with an arm-local ``min =>``;
7. BM25 terms come from the same analyzer on both sides (the dialect's ``analyzer``, which built the
   store's term table, equals the engine's);
8. the dialect's capability flags cover the plan (:meth:`~nlql.sql.dialect.Dialect.missing_feature`);
9. there is no MMR (its greedy selection reads the window's own vectors, in the engine).

Everything else — the bindings' values (a score below its ``min =>`` NULL), ORDER BY, OFFSET/LIMIT, hits — stays the engine's shared code, so both paths give the
same rows in the same order with the same scores.

The pass needs only the dialect, never a database: SQL goldens compile plans for every dialect without
a driver installed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from nlql import ir
from nlql.evaluate import graph_slot, temporal_slot
from nlql.functions import FUSION_FUNCTIONS, RANK_FUSIONS
from nlql.plan.decide_overfetch import DISTINCT_FACTOR
from nlql.plan.nodes import Plan, ScoreSpec
from nlql.render import render_expr
from nlql.sql import dialect_of
from nlql.sql.codec import micros
from nlql.sql.dialect import Dialect
from nlql.sql.nodes import (
    Arm,
    Fusion,
    GraphScore,
    KeywordScore,
    Lowered,
    Score,
    SimilarityScore,
    TemporalScore,
    Threshold,
)

__all__ = ["lower_hybrid"]

def _threshold(expr: ir.Expr, plan: Plan, kinds: dict[str, str]) -> Threshold | None:
    """``score op number`` / ``number op score`` on a score slot (the plan's one recogniser), else None."""
    cond = plan.score_condition(expr)
    if cond is None or cond.slot not in kinds:
        return None
    kind = kinds[cond.slot]
    return Threshold(cond.slot, "FUSED" if kind in RANK_FUSIONS else kind, cond.op, cond.value,
                     render_expr(expr))


def _graph_arm(plan: Plan, name: str) -> GraphScore | None:
    """The GRAPH call a fusion arm's binding is exactly, as a SQL score, or None."""
    binding = plan.query.binding(name)
    if binding is None or not isinstance(binding.expr, ir.Call) or binding.expr not in plan.graphs:
        return None
    key = plan.graphs[binding.expr]
    return GraphScore(graph_slot(key), key[0], key[1], key[2], render_expr(binding.expr))


def _temporal_arm(plan: Plan, name: str) -> TemporalScore | None:
    """The TEMPORAL call a fusion arm's binding is exactly, as a SQL score (its period resolved at plan
    time, in µs since the epoch), or None."""
    binding = plan.query.binding(name)
    if binding is None or not isinstance(binding.expr, ir.Call) or binding.expr not in plan.temporals:
        return None
    call = binding.expr
    path = call.args[0] if call.args else None
    if not isinstance(path, ir.Meta) or not path.keys:
        return None
    period = plan.temporals[call]
    slot, label = temporal_slot(call), render_expr(call)
    if period is None:  # no period in the text: the arm is empty
        return TemporalScore(slot, tuple(path.keys), None, None, False, label)
    return TemporalScore(slot, tuple(path.keys), micros(period.start), micros(period.end),
                         bool(period.open_start or period.open_end), label)


def _engine(plan: Plan, why: str) -> Plan:
    return replace(plan, lowered=None, lowering={"strategy": "engine", "reason": why})


def lower_hybrid(plan: Plan, dialect: Dialect | Any, analyzer: Any = None) -> Plan:
    """Set ``plan.lowered``/``plan.lowering`` for hybrid plans (see the module docstring).

    Args:
        plan: A finished plan.
        dialect: The :class:`~nlql.sql.dialect.Dialect` the plan compiles to, or None (the store runs no
            SQL). A store is accepted too: its ``dialect`` when it declares ``Capabilities.SQL_ARMS``.
        analyzer: The engine's BM25 analyzer (``None`` is the default :class:`~nlql.text.analyzer.Analyzer`).
    """
    if not any(s.kind == "BM25" or s.kind in FUSION_FUNCTIONS for s in plan.scores):
        return plan
    d = dialect_of(dialect) if dialect is not None else None
    if d is None:
        return _engine(plan, f"the {plan.store} store has no SQL dialect")
    fuse = next((s for s in plan.scores if s.kind == "FUSE"), None)
    if fuse is not None:  # the normalisation reads each arm's whole window (min/max or mean/σ)
        return _engine(plan, f"{fuse.label} (normalised fusion) runs in the engine over the arms' windows")
    mmr = next((s for s in plan.scores if s.kind == "MMR"), None)
    if mmr is not None:  # the greedy selection reads the rows' own vectors: the engine runs it
        return _engine(plan, f"{mmr.label} runs in the engine over the window's own vectors")
    unit = plan.unit
    if unit.kind not in d.UNITS or (unit.kind == "SPAN" and unit.base == "CHUNK"):
        shown = unit.kind if unit.kind != "SPAN" else f"SPAN({unit.base})"
        return _engine(plan, f"{shown} rows group sentences (the statement ranks sentences)")
    if plan.limit is None or plan.arm_depth is None:
        return _engine(plan, "there is no LIMIT (every row is ranked)")
    by_slot: dict[str, ScoreSpec] = {s.slot: s for s in plan.scores}
    fusions = [s for s in plan.scores if s.kind in RANK_FUSIONS]
    graphs: list[GraphScore] = []
    temporals: list[TemporalScore] = []
    if len(fusions) > 1:
        return _engine(plan, "the query has more than one fusion score")
    if len(plan.order) != 1:
        return _engine(plan, f"ORDER BY has {len(plan.order)} keys (the statement orders by one score)"
                       if plan.order else "there is no score to order by")
    key = plan.order[0]
    order_slot = plan.slot_of(key.expr)
    if fusions:
        spec = fusions[0]
        if order_slot != spec.slot or not key.descending:
            return _engine(plan, f"ORDER BY {key.label}{' DESC' if key.descending else ' ASC'} is not "
                                 f"the fusion score {spec.slot} DESC")
        arms = []
        for name in spec.arms:
            slot = plan.binding_slots.get(name)
            graph = _graph_arm(plan, name) if slot is None else None
            temporal = _temporal_arm(plan, name) if slot is None and graph is None else None
            if temporal is not None:
                if temporal not in temporals:
                    temporals.append(temporal)
                arms.append(Arm(name, temporal.slot, "temporal"))
                continue
            if graph is not None:
                if unit.kind != "SENTENCE":
                    return _engine(plan, f"GRAPH arm {name} over {unit.kind} rows runs in the engine")
                if graph not in graphs:
                    graphs.append(graph)
                arms.append(Arm(name, graph.slot, "graph"))
                continue
            kind = by_slot[slot].kind if slot in by_slot else None
            if slot is None or kind not in ("SIMILARITY", "BM25"):
                return _engine(plan, f"arm {name} is not exactly one SIMILARITY or BM25 call")
            arms.append(Arm(name, slot, "semantic" if kind == "SIMILARITY" else "bm25", min=by_slot[slot].min))
        if len(spec.weights) != len(arms):
            return _engine(plan, "RRF weights do not match its arms")
        fusion = Fusion(spec.kind, spec.slot, tuple(arms), k=spec.k, weights=spec.weights)
    else:
        if order_slot is None or by_slot[order_slot].kind != "BM25" or not key.descending:
            return _engine(plan, f"ORDER BY {key.label} is not a fusion or BM25 score DESC")
        binding = key.label if isinstance(key.expr, ir.Ref) else order_slot
        fusion = Fusion("SINGLE", order_slot, (Arm(binding, order_slot, "bm25", min=by_slot[order_slot].min),))

    kinds = {s.slot: s.kind for s in plan.scores}
    thresholds: list[Threshold] = []
    for c in plan.residual:
        t = _threshold(c, plan, kinds)
        if t is None or t.kind == "FUSED":
            return _engine(plan, f"WHERE {render_expr(c)} is evaluated by the engine (not pushed)")
        if by_slot[t.slot].min is not None:  # NULL below min: the condition is UNKNOWN there
            return _engine(plan, f"WHERE {render_expr(c)} reads {by_slot[t.slot].label}, which has an arm-local "
                                 "min => (evaluated by the engine)")
        thresholds.append(t)
    fused: list[Threshold] = []
    for c in plan.fusion_residual:
        t = _threshold(c, plan, kinds)
        if t is None or t.slot != fusion.slot:
            return _engine(plan, f"WHERE {render_expr(c)} is evaluated by the engine after fusion")
        fused.append(t)
    if fusion.method == "SINGLE":
        own = [t for t in thresholds if t.slot == fusion.slot]
        fusion = Fusion("SINGLE", fusion.slot, fusion.arms, fill=all(t.holds(0.0) for t in own))

    from nlql.text.analyzer import Analyzer

    engine_an = analyzer if analyzer is not None else Analyzer()
    scores: list[Score] = []
    for s in plan.scores:
        if s.kind == "SIMILARITY":
            if not s.texts:
                return _engine(plan, f"{s.label} has no text to embed")
            scores.append(SimilarityScore(s.slot, len(s.texts), s.label))
        elif s.kind == "BM25":
            store_an = d.analyzer
            if store_an != engine_an:
                return _engine(plan, f"the store's BM25 terms use {store_an!r}, the engine {engine_an!r}")
            terms = tuple(dict.fromkeys(engine_an.terms(" ".join(s.texts))))
            scores.append(KeywordScore(s.slot, terms, s.label))
    scores.extend(graphs)
    scores.extend(temporals)

    fetch = plan.limit + plan.offset
    if plan.rerank:
        fetch = max(fetch, int(plan.rerank.get("factor") or 1) * fetch)
    if plan.distinct is not None:  # the engine keeps LIMIT + OFFSET of these rows (and widens if short)
        fetch = int(fetch * DISTINCT_FACTOR)
    lowered = Lowered(scores=tuple(scores), fusion=fusion, filter=plan.pushed, thresholds=tuple(thresholds),
                      fused_thresholds=tuple(fused), depth=plan.arm_depth, fetch=max(fetch, 0))
    why = d.missing_feature(lowered)
    if why is not None:
        return _engine(plan, why)
    plan = replace(plan, lowered=lowered,
                   lowering={"strategy": "sql", "reason": f"one statement on {d.NAME}", "dialect": d.NAME})
    return plan
