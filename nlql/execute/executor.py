"""Runs a plan: embed → recall → fuse → filter → order → rerank → distinct → page → hits.

The stages live in their own modules (:mod:`~nlql.execute.recall`, :mod:`~nlql.execute.fuse`,
:mod:`~nlql.execute.order`, :mod:`~nlql.execute.materialise`); this one only sequences them, times
them and applies the deadline. The top-k guarantee lives in recall (knn widening).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nlql.deadline import Deadline, active
from nlql.errors import EvaluationError, NLQLTimeoutError
from nlql.evaluate import Env, compile_expr
from nlql.execute.autocut import autocut
from nlql.execute.candidates import Candidate, Search, keep_passing
from nlql.execute.count import count_documents, count_groups
from nlql.execute.degrade import cause_of, drop_arms, embed_within
from nlql.execute.distinct import distinct
from nlql.execute.fuse import fuse
from nlql.execute.materialise import estimate_tokens, hits, pack_tokens
from nlql.execute.order import order, rerank
from nlql.execute.recall import embed_queries, recall
from nlql.execute.results import Hits, Stats
from nlql.plan.cache import reads_clock
from nlql.plan.nodes import Plan
from nlql.stores.base import Store, unit_id

__all__ = ["Candidate", "Executor", "estimate_tokens", "pack_tokens", "unit_id"]

#: Where a plan keeps what the executor prepared from it (:meth:`Executor._prepared`).
_PREP = "_executor_prepared"


@dataclass(slots=True)
class _Prepared:
    executor: Executor
    binding_exprs: dict[str, Any]
    mins: dict[str, float]
    # (Env, compiled residual, compiled ORDER BY keys, (binding name, compiled binding)) shared by every
    # search of the plan; None: compiled per search (the plan reads the clock or GRAPH)
    shared: tuple[Env, list[Any], list[Any], list[tuple[str, Any]]] | None
    # the query vectors normalised last time, by the bytes the embedder returned (recall.embed_queries)
    query_vectors: list[Any] = field(default_factory=lambda: [None])


class Executor:
    """Executes plans against one store. Stateless between searches; safe to share across threads.

    ``on_arm_error``: ``"raise"`` (an embedder or arm failure fails the search) or ``"degrade"`` (the
    arm is dropped and fusion runs over the others, :mod:`nlql.execute.degrade`).
    """

    def __init__(self, store: Store, embed: Callable[[Sequence[str]], np.ndarray],
                 bm25: Any, functions: dict[str, Callable[..., Any]], chunk_chars: int,
                 on_arm_error: str = "raise", graph: Any = None) -> None:
        self.store = store
        self.graph = graph  # the engine's entity graph (nlql.execute.graph.GraphSidecar), for GRAPH
        self.embed = embed
        self.bm25 = bm25
        self.functions = functions
        self.chunk_chars = chunk_chars
        self.on_arm_error = on_arm_error

    def run(self, plan: Plan, *, reranker: Any = None, rerank_query: str | None = None,
            rerank_factor: int = 5, timeout: float | None = None, max_tokens: int | None = None) -> Hits:
        deadline = Deadline(timeout)
        with active(deadline):  # every store call made for this search sees its deadline
            return self._run(plan, reranker, rerank_query, rerank_factor, deadline, max_tokens)

    def _prepared(self, plan: Plan) -> _Prepared:
        """What this executor derives from ``plan`` alone, computed once per plan.

        The engine's plan cache hands back shallow copies of one cached plan (only ``now`` differs), so
        this is kept in the plan's ``__dict__`` and shared by every copy made after it was set. The
        compiled expressions (and the :class:`Env` they close over) are shared only when the plan reads
        no clock and no GRAPH: nothing they compute then depends on the search (``now``, the graph).
        """
        got = plan.__dict__.get(_PREP)
        if got is not None and got.executor is self:
            return got
        binding_exprs = {b.name: b.expr for b in plan.query.bindings}
        shared = None
        if not plan.graphs and not reads_clock(plan.query):
            env = self._env(plan, binding_exprs)
            try:
                shared = (env, [compile_expr(c, env) for c in plan.residual],
                          [compile_expr(o.expr, env) for o in plan.order],
                          [(b, env.binding_fn(b)) for b in binding_exprs])
            except Exception:  # noqa: BLE001 - raised again where the stage compiles it, per search
                shared = None
        got = _Prepared(self, binding_exprs, {s.slot: s.min for s in plan.scores if s.min is not None}, shared)
        plan.__dict__[_PREP] = got
        return got

    def _env(self, plan: Plan, binding_exprs: dict[str, Any]) -> Env:
        return Env(now=plan.now, score_names=plan.slots, binding_exprs=binding_exprs,
                   functions=self.functions, periods=plan.periods, graphs=plan.graphs,
                   temporals=plan.temporals, graph_values=self._graph_values(plan) if plan.graphs else None)

    def _run(self, plan: Plan, reranker: Any, rerank_query: str | None, rerank_factor: int,
             deadline: Deadline, max_tokens: int | None) -> Hits:
        prep = self._prepared(plan)
        if prep.shared is not None:
            env, residual, order_fns, binding_fns = prep.shared
        else:
            env = self._env(plan, prep.binding_exprs)
            residual = [compile_expr(c, env) for c in plan.residual]
            order_fns = binding_fns = None
        if plan.lowered is not None and plan.graphs and self.graph is not None:
            self.graph.ensure_links()  # the statement reads the store's entity tables: they must be whole
        need = None
        if plan.limit is not None:
            need = plan.limit + plan.offset
            if reranker is not None:
                need = max(need, rerank_factor * need)
        run = Search(plan=plan, store=self.store, bm25=self.bm25, chunk_chars=self.chunk_chars, env=env,
                     stats=Stats(), warnings=list(plan.warnings), deadline=deadline, need=need,
                     residual=residual, degrade=self.on_arm_error == "degrade", mins=prep.mins,
                     order_fns=order_fns, binding_fns=binding_fns)
        stats = run.stats
        timeout = deadline.timeout

        if plan.count is not None:
            t = time.perf_counter()
            groups = count_documents(run)  # COUNT(DOCUMENT) by metadata: no document is built
            if groups is not None:
                stats.add("count", (time.perf_counter() - t) * 1000)
                stats.counts["returned"] = len(groups)
                return Hits(groups, stats.to_dict(), run.warnings)

        t = time.perf_counter()
        qv = self._embed(run)
        stats.add("embed", (time.perf_counter() - t) * 1000)

        units = recall(run, qv, fast_ok=reranker is None)
        plan = run.plan  # degrading may have replaced a lowered plan by its arm-by-arm form

        fusion = [f for f in plan.fusions if f.slot not in run.prefused]
        if fusion and plan.lowered is None:
            t = time.perf_counter()
            units = fuse(run, fusion, units)
            stats.add("fuse", (time.perf_counter() - t) * 1000)
        if plan.fusion_residual:
            t = time.perf_counter()
            late = [compile_expr(c, env) for c in plan.fusion_residual]
            units = keep_passing(units, late, run.deadline, run.warnings)
            stats.add("filter", (time.perf_counter() - t) * 1000)

        if plan.count is not None:  # SELECT COUNT(unit) BY …: group the rows, no ordering or paging of rows
            t = time.perf_counter()
            groups = count_groups(run, units)
            stats.add("count", (time.perf_counter() - t) * 1000)
            stats.counts["matches_seen"] = len(units)
            stats.counts["returned"] = len(groups)
            return Hits(groups, stats.to_dict(), run.warnings)

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

        if plan.distinct is not None:
            t = time.perf_counter()
            before = len(units)
            units = distinct(run, units)
            stats.add("distinct", (time.perf_counter() - t) * 1000)
            stats.counts["distinct"] = {"keys": list(plan.distinct.labels), "keep": plan.distinct.keep,
                                        "rounds": run.extra.get("distinct_rounds", 1),
                                        "kept": len(units), "dropped": before - len(units)}

        page = units[plan.offset:]
        if plan.limit is not None:
            page = page[: plan.limit]
        if plan.autocut is not None:
            before = len(page)
            page = autocut(run, page)
            stats.counts["autocut"] = {"k": plan.autocut, "of": before, "kept": len(page)}
        t = time.perf_counter()
        out = hits(run, page)
        stats.add("materialize", (time.perf_counter() - t) * 1000)
        if max_tokens is not None:
            out = pack_tokens(out, max_tokens, run.warnings)
        if deadline.expired():
            if not out and not run.failed:  # (a degraded search answers from the arms it kept)
                raise NLQLTimeoutError(f"the search ran out of time ({timeout} s) before finding any row",
                                       hint="raise timeout= or narrow the query")
            run.warn_timeout(f"timeout after {timeout} s: results may be incomplete")
        if run.failed:
            stats.counts["dropped_arms"] = sorted(
                spec.arms[i] for spec in plan.fusions for i in run.dropped_arms.get(spec.slot, ()))
        stats.counts["returned"] = len(out)
        return Hits(out, stats.to_dict(), run.warnings)

    def _graph_values(self, plan: Plan) -> Callable[[tuple[str, int, float]], Any]:
        """Each distinct GRAPH (text, hops, decay) activated once per search, on first use (an
        :class:`~nlql.text.graph.Activation`: ``.get((doc_id, position))`` per row read)."""
        cache: dict[tuple[str, int, float], Any] = {}
        graph = self.graph

        def values(key: tuple[str, int, float]) -> Any:
            got = cache.get(key)
            if got is None:
                if graph is None:
                    raise EvaluationError("GRAPH needs the engine's entity graph", None)
                got = cache[key] = graph.activate(*key)
            return got
        return values

    def _embed(self, run: Search) -> dict[str, np.ndarray]:
        """The query vectors; with ``"degrade"`` an embedder failure or timeout drops the SIMILARITY arms."""
        try:
            qv = embed_queries(run, lambda texts: embed_within(self.embed, texts, run.deadline),
                               self._prepared(run.plan).query_vectors)
        except Exception as exc:
            sims = [s.slot for s in run.plan.scores if s.kind == "SIMILARITY"]
            why = ("the embedder did not answer within the deadline" if isinstance(exc, NLQLTimeoutError)
                   else f"the embedder failed ({cause_of(exc)})")
            if not run.degrade or not drop_arms(run, sims, why):
                raise
            if run.deadline.expired():
                run.warn_timeout(f"timeout after {run.deadline.timeout} s: results may be incomplete")
                run.deadline = Deadline(None)  # what is left is the engine's own work on local arms
            return {}
        if qv and run.deadline.expired():  # the embedding used the budget up: nothing recalled, nothing to return
            raise NLQLTimeoutError(f"the search ran out of time ({run.deadline.timeout} s) while embedding the query",
                                   hint="raise timeout= or use a faster embedder")
        return qv
