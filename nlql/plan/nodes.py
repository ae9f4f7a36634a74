"""Plan nodes: what will run (the IR is what the user wrote)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nlql import ir
from nlql.functions import FUSION_FUNCTIONS, SCORE_FUNCTIONS, TEXT_SCORES
from nlql.pushdown import FastPath, Filter, NativeFilter

__all__ = ["ARM_DEPTH_FACTOR", "ARM_DEPTH_MIN", "FUSION_FUNCTIONS", "SCORE_FUNCTIONS", "TEXT_SCORES",
           "CountSpec", "DistinctSpec", "OrderSpec", "Plan", "Recall", "ScoreCondition", "ScoreSpec", "score_condition", "slot_of"]

ARM_DEPTH_MIN = 100      # rows per fusion arm, at least
ARM_DEPTH_FACTOR = 10    # … or this many times LIMIT + OFFSET


def slot_of(expr: ir.Expr, slots: dict[ir.Call, str], binding_slots: dict[str, str]) -> str | None:
    """The score slot an expression is exactly: a score call, or a binding bound to one; else None."""
    if isinstance(expr, ir.Ref):
        return binding_slots.get(expr.name)
    if isinstance(expr, ir.Call):
        return slots.get(expr)
    return None


_FLIP = {">": "<", ">=": "<=", "<": ">", "<=": ">="}


@dataclass(frozen=True)
class ScoreCondition:
    """``score op number`` with the score on the left (``0.3 <= rel`` reads as ``rel >= 0.3``)."""

    slot: str
    op: str        # > >= < <=
    value: float
    expr: ir.Expr  # the condition as written


def score_condition(expr: ir.Expr, slots: dict[ir.Call, str],
                    binding_slots: dict[str, str]) -> ScoreCondition | None:
    """The one threshold recogniser: ``rel >= 0.3``, ``0.3 < SIMILARITY(…)``, … → :class:`ScoreCondition`."""
    if not isinstance(expr, ir.Compare) or expr.op not in _FLIP:
        return None
    op, score, other = expr.op, expr.left, expr.right
    slot = slot_of(score, slots, binding_slots)
    if slot is None:
        op, score, other = _FLIP[op], expr.right, expr.left
        slot = slot_of(score, slots, binding_slots)
    if slot is None:
        return None
    if not isinstance(other, ir.Literal) or isinstance(other.value, bool) or not isinstance(
            other.value, (int, float)):
        return None
    return ScoreCondition(slot, op, float(other.value), expr)


@dataclass(frozen=True)
class ScoreSpec:
    """One deduplicated score computation. ``slot`` is its name in ``hit.scores`` when unbound."""

    slot: str
    kind: str                       # SIMILARITY | BM25 | RRF | INTERLEAVE | MMR
    call: ir.Call
    texts: tuple[str, ...] = ()     # SIMILARITY / BM25: the query texts (params bound)
    arms: tuple[str, ...] = ()      # RRF / INTERLEAVE: each arm's label (a binding name, or its text)
    k: float = 60.0                 # RRF constant
    weights: tuple[float, ...] = ()  # RRF weights (one per arm)
    label: str = ""                 # canonical text of the call
    min: float | None = None        # SIMILARITY / BM25: min => x (below it the score is NULL: out of the arm)
    window: int | None = None       # RRF / INTERLEAVE: rows each arm ranks (None: every row); MMR: its window
    arm_exprs: tuple[ir.Expr, ...] = ()  # RRF / INTERLEAVE / MMR: each arm's expression (a Ref for a binding)
    mmr_lambda: float = 0.5         # MMR: weight of relevance against diversity (lambda => λ)
    method: str = ""                # FUSE: each arm's normalisation ("minmax" | "dbsf")
    vector: tuple[float, ...] | None = None  # SIMILARITY by a vector parameter (not embedded)
    doc: str | None = None          # SIMILARITY by example: DOC("id"), the mean of that document's vectors


@dataclass(frozen=True)
class OrderSpec:
    expr: ir.Expr
    descending: bool
    nulls_first: bool
    label: str
    implicit: bool = False


@dataclass(frozen=True)
class DistinctSpec:
    """``DISTINCT BY keys KEEP keep``: applied by the engine after WHERE, fusion, ORDER BY and rerank."""

    keys: tuple[ir.Expr, ...]
    labels: tuple[str, ...]
    keep: int = 1


@dataclass(frozen=True)
class CountSpec:
    """``SELECT COUNT(unit) BY keys``: the rows passing WHERE, counted per distinct key tuple by the
    engine (:mod:`nlql.execute.count`). ``order`` is ``(key, descending, nulls_first)`` with key -1 for
    ``count`` and i for the i-th BY key; an empty order means count DESC, then each key ascending."""

    keys: tuple[ir.Expr, ...]
    labels: tuple[str, ...]
    order: tuple[tuple[int, bool, bool], ...] = ()
    limit: int | None = None
    offset: int = 0
    #: The BY keys as stored paths (``("doc_id",)``, ``("meta", key, …)``) when the store groups them
    #: itself (``Capabilities.COUNTS``, :class:`~nlql.stores.base.CountsGroups`); None: the engine counts.
    paths: tuple[tuple[str, ...], ...] | None = None
    #: How the store groups them (``Capabilities.COUNT_CALLS``), for explain.
    calls: str = ""


@dataclass
class Recall:
    """How candidates are found.

    kind: ``knn`` (top-k by one SIMILARITY, widened until the top-k guarantee holds), ``full`` (every
    row passing the pushed filter is scored), ``scan`` (no score: rows in insertion order).
    """

    kind: str
    slot: str | None = None
    k: int | None = None
    overfetch: float = 1.0
    min_score: dict[str, float] = field(default_factory=dict)
    exact: bool = True
    reason: str = ""


class PlanIdentity:
    """One planned query: the plan and every copy made of it (the plan cache's per-search copies, the
    passes' ``replace``) share it, so the executor keys what it prepares from a plan on it (weakly)."""

    __slots__ = ("__weakref__",)


@dataclass(frozen=True)
class Plan:
    """A query planned against one store's capabilities: frozen (the passes return new plans with
    ``dataclasses.replace``; the executor keeps per-search state in ``nlql.execute.candidates.Search``)."""

    query: ir.Query                       # params bound
    canonical: str
    unit: ir.Unit
    window: int
    scores: list[ScoreSpec]
    slots: dict[ir.Call, str]             # score call -> slot
    binding_slots: dict[str, str]         # binding whose expr is exactly one score call -> slot
    pushed: Filter | None
    native: NativeFilter | None
    residual: list[ir.Expr]
    fusion_residual: list[ir.Expr]        # conjuncts that read a fusion score: applied after fusion
    recall: Recall
    order: list[OrderSpec]
    limit: int | None
    offset: int
    rerank: dict[str, Any] | None
    periods: dict[ir.Node, tuple[datetime, datetime]]
    now: datetime
    store: str
    arm_depth: int | None
    residual_is_thresholds: bool = False  # every residual conjunct is a similarity threshold
    graphs: dict[ir.Call, tuple[str, int, float]] = field(default_factory=dict)  # GRAPH call -> (text, hops, decay)
    temporals: dict[ir.Call, Any] = field(default_factory=dict)  # TEMPORAL call -> Period, or None (no period)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # set by lower_hybrid for hybrid plans (BM25 / RRF / INTERLEAVE): the statement a SQL store runs
    # instead of arm-by-arm execution (nlql.sql.nodes.Lowered), and {"strategy", "reason"} for explain
    lowered: Any = None
    lowering: dict[str, str] | None = None
    # set by choose_fastpath on table stores (Capabilities.FAST_PATH): the page picked with numpy
    fast_path: FastPath | None = None
    fast_path_reason: str = ""
    distinct: DistinctSpec | None = None  # DISTINCT BY … KEEP n (recall widens until enough rows are kept)
    autocut: int | None = None            # LIMIT n AUTOCUT k: the page is cut before the k-th jump of its first key
    count: CountSpec | None = None        # SELECT COUNT(unit) BY …: every row passing WHERE, counted per key
    identity: PlanIdentity = field(default_factory=PlanIdentity, compare=False, repr=False)

    def slot_of(self, expr: ir.Expr) -> str | None:
        """The score slot ``expr`` is exactly (a score call or a binding bound to one), else None."""
        return slot_of(expr, self.slots, self.binding_slots)

    def spec(self, slot: str | None) -> ScoreSpec | None:
        """The score spec of a slot."""
        return next((s for s in self.scores if s.slot == slot), None)

    def score_condition(self, expr: ir.Expr) -> ScoreCondition | None:
        """``expr`` as ``score op number`` on one of this plan's slots, else None."""
        return score_condition(expr, self.slots, self.binding_slots)

    @property
    def fusions(self) -> list[ScoreSpec]:
        """The RRF / INTERLEAVE / MMR scores (computed by the engine's fusion stage, or a lowered statement)."""
        return [s for s in self.scores if s.kind in FUSION_FUNCTIONS]
