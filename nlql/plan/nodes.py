"""Plan nodes: what will run (the IR is what the user wrote)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nlql import ir
from nlql.pushdown import Filter, NativeFilter

SCORE_FUNCTIONS = ("SIMILARITY", "BM25", "RRF", "INTERLEAVE")
ARM_DEPTH_MIN = 100      # rows per fusion arm, at least
ARM_DEPTH_FACTOR = 10    # … or this many times LIMIT + OFFSET


@dataclass(frozen=True)
class ScoreSpec:
    """One deduplicated score computation. ``slot`` is its name in ``hit.scores`` when unbound."""

    slot: str
    kind: str                       # SIMILARITY | BM25 | RRF | INTERLEAVE
    call: ir.Call
    texts: tuple[str, ...] = ()     # SIMILARITY / BM25: the query texts (params bound)
    arms: tuple[str, ...] = ()      # RRF / INTERLEAVE: binding names of the arms
    k: float = 60.0                 # RRF constant
    weights: tuple[float, ...] = ()  # RRF weights (one per arm)
    label: str = ""                 # canonical text of the call


@dataclass(frozen=True)
class OrderSpec:
    expr: ir.Expr
    descending: bool
    nulls_first: bool
    label: str
    implicit: bool = False


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


@dataclass
class Plan:
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
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # set by lower_hybrid for hybrid plans (BM25 / RRF / INTERLEAVE): the statement a SQL store runs
    # instead of arm-by-arm execution (nlql.sql.nodes.Lowered), and {"strategy", "reason"} for explain
    lowered: Any = None
    lowering: dict[str, str] | None = None
