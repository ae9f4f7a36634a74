"""Runs a plan: embed → recall → fuse → filter → order → rerank → page → hits.

The stages live in their own modules (:mod:`~nlql.execute.recall`, :mod:`~nlql.execute.fuse`,
:mod:`~nlql.execute.order`, :mod:`~nlql.execute.materialise`); this one only sequences them, times
them and applies the deadline. The top-k guarantee lives in recall (knn widening).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nlql.errors import NLQLTimeoutError
from nlql.evaluate import Env, compile_expr
from nlql.execute.candidates import Candidate, Deadline, Search, keep_passing
from nlql.execute.fuse import fuse
from nlql.execute.materialise import estimate_tokens, hits, pack_tokens
from nlql.execute.order import order, rerank
from nlql.execute.recall import embed_queries, recall
from nlql.execute.results import Hits, Stats
from nlql.plan.nodes import Plan
from nlql.stores.base import Store, unit_id

__all__ = ["Candidate", "Executor", "estimate_tokens", "pack_tokens", "unit_id"]


class Executor:
    """Executes plans against one store. Stateless between searches; safe to share across threads."""

    def __init__(self, store: Store, embed: Callable[[Sequence[str]], np.ndarray],
                 bm25: Any, functions: dict[str, Callable[..., Any]], chunk_chars: int) -> None:
        self.store = store
        self.embed = embed
        self.bm25 = bm25
        self.functions = functions
        self.chunk_chars = chunk_chars

    def run(self, plan: Plan, *, reranker: Any = None, rerank_query: str | None = None,
            rerank_factor: int = 5, timeout: float | None = None, max_tokens: int | None = None) -> Hits:
        env = Env(now=plan.now, score_names=plan.slots,
                  binding_exprs={b.name: b.expr for b in plan.query.bindings},
                  functions=self.functions, periods=plan.periods)
        need = None
        if plan.limit is not None:
            need = plan.limit + plan.offset
            if reranker is not None:
                need = max(need, rerank_factor * need)
        run = Search(plan=plan, store=self.store, bm25=self.bm25, chunk_chars=self.chunk_chars, env=env,
                     stats=Stats(), warnings=list(plan.warnings), deadline=Deadline(timeout), need=need,
                     residual=[compile_expr(c, env) for c in plan.residual])
        stats = run.stats

        t = time.perf_counter()
        qv = embed_queries(run, self.embed)
        stats.add("embed", (time.perf_counter() - t) * 1000)
        if qv and run.deadline.expired():  # the embedding used the budget up: nothing recalled, nothing to return
            raise NLQLTimeoutError(f"the search ran out of time ({timeout} s) while embedding the query",
                                   hint="raise timeout= or use a faster embedder")

        units = recall(run, qv, fast_ok=reranker is None)

        fusion = plan.fusions
        if fusion and plan.lowered is None:
            t = time.perf_counter()
            units = fuse(run, fusion, units)
            stats.add("fuse", (time.perf_counter() - t) * 1000)
        if plan.fusion_residual:
            t = time.perf_counter()
            late = [compile_expr(c, env) for c in plan.fusion_residual]
            units = keep_passing(units, late, run.deadline, run.warnings)
            stats.add("filter", (time.perf_counter() - t) * 1000)

        t = time.perf_counter()
        units = order(run, units)
        stats.add("order", (time.perf_counter() - t) * 1000)
        stats.counts["matches_seen"] = len(units)

        if reranker is not None and units and run.deadline.expired():
            run.warnings.append("rerank skipped: the search ran out of time before it; results are in recall order")
        elif reranker is not None and units:
            t = time.perf_counter()
            units = rerank(run, units, reranker, rerank_query)
            stats.add("rerank", (time.perf_counter() - t) * 1000)

        page = units[plan.offset:]
        if plan.limit is not None:
            page = page[: plan.limit]
        t = time.perf_counter()
        out = hits(run, page)
        stats.add("materialize", (time.perf_counter() - t) * 1000)
        if max_tokens is not None:
            out = pack_tokens(out, max_tokens, run.warnings)
        if run.deadline.expired():
            if not out:
                raise NLQLTimeoutError(f"the search ran out of time ({timeout} s) before finding any row",
                                       hint="raise timeout= or narrow the query")
            run.warn_timeout(f"timeout after {timeout} s: results may be incomplete")
        stats.counts["returned"] = len(out)
        return Hits(out, stats.to_dict(), run.warnings)
