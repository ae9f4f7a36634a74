"""What one search carries through the stages: the candidate rows and the shared state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nlql.deadline import Deadline
from nlql.evaluate import Env, RowContext, RowFn, truth
from nlql.execute.results import Stats
from nlql.plan.nodes import Plan
from nlql.stores.base import Row, Store


@dataclass(slots=True)
class Candidate:
    """One candidate result row while the query runs (a sentence, chunk, span or document)."""

    ctx: RowContext
    rows: list[Row]                 # the sentences of this unit (one for SENTENCE/SPAN)
    chunk_index: int = -1           # for CHUNK units: index of the chunk in its document
    doc_chunks: list[list[Row]] | None = None
    fused: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Search:
    """The state of one search, handed from stage to stage (nothing outlives the search)."""

    plan: Plan
    store: Store
    bm25: Any                       # the engine's keyword index (nlql.execute.keywords.BM25Sidecar)
    chunk_chars: int
    env: Env
    stats: Stats
    warnings: list[str]
    deadline: Deadline
    need: int | None                # rows the page needs (LIMIT + OFFSET, × rerank factor); None: all
    residual: list[RowFn]           # compiled residual conjuncts (WHERE left to the engine)
    degrade: bool = False           # on_arm_error="degrade": a failing arm is dropped, not raised
    mins: dict[str, float] = field(default_factory=dict)   # slot -> arm-local min => x
    failed: dict[str, str] = field(default_factory=dict)   # slot -> why its arm was dropped
    dropped_arms: dict[str, set[int]] = field(default_factory=dict)  # fusion slot -> indices of lost arms
    prefused: set[str] = field(default_factory=set)  # fusion slots recall already set (nlql.stores.memory.fused_page)
    extra: dict[str, Any] = field(default_factory=dict)    # per-search caches (compiled DISTINCT BY keys, …)
    # compiled once per plan by the executor when the plan reads no clock (None: compiled per search)
    order_fns: list[RowFn] | None = None                    # ORDER BY keys, in plan.order's order
    binding_fns: list[tuple[str, RowFn]] | None = None      # (binding name, its compiled value), in order
    knn_first: Any = None           # (k, lists): recall's first knn round, answered for a batch (search_many)
    # the plan's ORDER BY is its knn slot DESC alone (Executor._prepared), and, set by recall, the rows are
    # already in that order (a store's knn list, Capabilities.KNN_ORDERED): order() keeps them as they are
    knn_order: bool = False
    in_order: bool = False
    # the engine's stages a store's own fast paths call back (nlql.execute.recall.ENGINE_SIDE)
    side: Any = None

    def warn_timeout(self, message: str) -> None:
        """Add a timeout warning unless one is there already."""
        if not any(w.startswith("timeout") for w in self.warnings):
            self.warnings.append(message)


def keep_passing(units: list[Candidate], residual: list[RowFn], deadline: Deadline | None = None,
                 warnings: list[str] | None = None) -> list[Candidate]:
    """Candidates passing every residual predicate; stops (with a warning) when the deadline passes."""
    if not residual:
        return units
    if deadline is None or deadline.end is None:
        return [u for u in units if all(truth(f(u.ctx)) is True for f in residual)]
    out = []
    for i, u in enumerate(units):
        # checked per row: a slow user function in WHERE is where a search spends its time
        if deadline.expired():
            if warnings is not None:
                warnings.append(f"timeout while filtering: {len(units) - i} of {len(units)} candidate rows "
                                "were not checked; results may be incomplete")
            break
        if all(truth(f(u.ctx)) is True for f in residual):
            out.append(u)
    return out
