"""Runs a plan: embed → recall → fuse → filter → order → rerank → distinct → page → hits.

The stages live in their own modules (:mod:`~nlql.execute.recall`, :mod:`~nlql.execute.fuse`,
:mod:`~nlql.execute.order`, :mod:`~nlql.execute.materialise`); this one only sequences them, times
them and applies the deadline. The top-k guarantee lives in recall (knn widening).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nlql.deadline import CURRENT, Deadline
from nlql.errors import EvaluationError, NLQLTimeoutError
from nlql.evaluate import Env, compile_expr
from nlql.execute.autocut import autocut
from nlql.execute.candidates import Candidate, Search, keep_passing
from nlql.execute.count import count_documents, count_groups, count_in_store
from nlql.execute.cursor import PageEnd, Paging, cursor_page, first_cursor
from nlql.execute.degrade import cause_of, drop_arms, embed_within
from nlql.execute.distinct import distinct
from nlql.execute.examples import example_vectors
from nlql.execute.fuse import fuse
from nlql.execute.guard import guarded
from nlql.execute.knn_page import applies as knn_page_applies
from nlql.execute.knn_page import knn_page, ordered_by_knn
from nlql.execute.materialise import estimate_tokens, hits, pack_tokens, read_unread
from nlql.execute.order import order, rerank
from nlql.execute.recall import embed_queries, recall
from nlql.execute.results import Hits, Stats
from nlql.plan.cache import reads_clock
from nlql.plan.nodes import Plan
from nlql.stores.base import Store, unit_id

if TYPE_CHECKING:
    from nlql.text.graph import Activation

__all__ = ["Candidate", "Executor", "estimate_tokens", "pack_tokens", "unit_id"]



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
    examples: bool = False  # whether a SIMILARITY arm reads an example vector or document (execute/examples.py)
    knn_order: bool = False  # ORDER BY is the knn slot DESC alone, over sentence rows (Search.knn_order)
    fusions: bool = True  # whether the plan has an RRF / INTERLEAVE / MMR score (plan.fusions, a list made per call)
    knn_page: bool = False  # a plain top-k the knn page stage answers (execute/knn_page.py)


class Executor:
    """Executes plans against one store. Stateless between searches; safe to share across threads.

    ``on_arm_error``: ``"raise"`` (an embedder or arm failure fails the search) or ``"degrade"`` (the
    arm is dropped and fusion runs over the others, :mod:`nlql.execute.degrade`).
    """

    def __init__(self, store: Store, embed: Callable[[Sequence[str]], np.ndarray],
                 bm25: Any, functions: dict[str, Callable[..., Any]], chunk_chars: int,
                 on_arm_error: str = "raise", graph: Any = None, dim: int | None = None) -> None:
        self.store = store
        self.dim = dim  # the embedder's dimension: a vector parameter must have it (execute/examples.py)
        self.graph = graph  # the engine's entity graph (nlql.execute.graph.GraphSidecar), for GRAPH
        self.embed = embed
        self.bm25 = bm25
        self.functions = functions
        self.chunk_chars = chunk_chars
        self.on_arm_error = on_arm_error
        # what this executor prepared from each plan, by the plan's identity (shared by its copies)
        self._prep: weakref.WeakKeyDictionary[Any, _Prepared] = weakref.WeakKeyDictionary()
        self._prep_lock = threading.Lock()
        self._last_prep: tuple[Any, _Prepared] | None = None  # (identity, what was prepared): the last plan's

    def run(self, plan: Plan, *, reranker: Any = None, rerank_query: str | None = None,
            rerank_factor: int = 5, timeout: float | None = None, max_tokens: int | None = None,
            deadline: Deadline | None = None, embed: Callable[[Sequence[str]], np.ndarray] | None = None,
            knn_first: Any = None, page: Paging | None = None,
            vectors: dict[str, np.ndarray] | None = None) -> Hits:
        """Run ``plan``; ``deadline`` (one started earlier, e.g. before the engine's sync) or else
        ``timeout`` bounds it (SPEC §9). ``embed``: the query texts' vectors from elsewhere
        (``search_many``'s one batch); ``knn_first``: (k, lists) the store already answered for recall's
        first knn round; ``page``: how to cut the page and make ``hits.cursor`` (:mod:`nlql.execute.cursor`);
        ``vectors``: the query vectors of an earlier search of the same texts (nothing is embedded)."""
        if deadline is None:
            deadline = Deadline(timeout)
        token = CURRENT.set(deadline)  # every store call made for this search sees its deadline (active())
        try:
            return self._run(plan, reranker, rerank_query, rerank_factor, deadline, max_tokens,
                             embed, knn_first, page, vectors)
        finally:
            CURRENT.reset(token)

    def _prepared(self, plan: Plan) -> _Prepared:
        """What this executor derives from ``plan`` alone, computed once per plan.

        The engine's plan cache hands back shallow copies of one cached plan (only ``now`` differs), so
        this is kept by the plan's ``identity`` (shared by the copies; weakly, it goes with them). The
        compiled expressions (and the :class:`Env` they close over) are shared only when the plan reads
        no clock and no GRAPH: nothing they compute then depends on the search (``now``, the graph).
        """
        last = self._last_prep  # (the plan of the last search, most often this one: no weak reference made)
        if last is not None and last[0] is plan.identity:
            return last[1]
        got = self._prep.get(plan.identity)
        if got is not None:
            self._last_prep = (plan.identity, got)
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
        got = _Prepared(self, binding_exprs, {s.slot: s.min for s in plan.scores if s.min is not None}, shared,
                        examples=any(s.vector is not None or s.doc is not None for s in plan.scores),
                        knn_order=ordered_by_knn(plan), fusions=bool(plan.fusions), knn_page=knn_page_applies(plan))
        with self._prep_lock:
            self._prep[plan.identity] = got
        self._last_prep = (plan.identity, got)
        return got

    def _env(self, plan: Plan, binding_exprs: dict[str, Any]) -> Env:
        return Env(now=plan.now, score_names=plan.slots, binding_exprs=binding_exprs,
                   functions=self.functions, periods=plan.periods, graphs=plan.graphs,
                   temporals=plan.temporals, graph_values=self._graph_values(plan) if plan.graphs else None,
                   analyzer=self.bm25.analyzer)

    def _run(self, plan: Plan, reranker: Any, rerank_query: str | None, rerank_factor: int,
             deadline: Deadline, max_tokens: int | None, embed: Any = None, knn_first: Any = None,
             paging: Paging | None = None, vectors: dict[str, np.ndarray] | None = None) -> Hits:
        prep = self._prepared(plan)
        order_fns: list[Any] | None
        binding_fns: list[tuple[str, Any]] | None
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
        run = Search(plan=plan, store=guarded(self.store, deadline), bm25=self.bm25, chunk_chars=self.chunk_chars, env=env,
                     stats=Stats(), warnings=list(plan.warnings), deadline=deadline, need=need,
                     residual=residual, degrade=self.on_arm_error == "degrade", mins=prep.mins,
                     order_fns=order_fns, binding_fns=binding_fns, knn_first=knn_first, knn_order=prep.knn_order)
        stats = run.stats
        timeout = deadline.timeout

        if deadline.expired():  # the engine's sync with the store, or planning, used the budget up
            raise NLQLTimeoutError(f"the search ran out of time ({timeout} s) before it started (syncing with "
                                   "the store and planning took it)", hint="raise timeout=")

        if plan.count is not None:
            t = time.perf_counter()
            # the store's GROUP BY, else COUNT(DOCUMENT) by metadata from the rows: no document is built
            groups = count_in_store(run)
            if groups is None:
                groups = count_documents(run)
            if groups is not None:
                stats.add("count", (time.perf_counter() - t) * 1000)
                stats.counts["returned"] = len(groups)
                return Hits(groups, stats.to_dict(), run.warnings)

        t = time.perf_counter()
        qv = {k: v.copy() for k, v in vectors.items()} if vectors is not None else self._embed(run, embed, prep)
        stats.add("embed", (time.perf_counter() - t) * 1000)

        if (prep.knn_page and reranker is None and max_tokens is None and knn_first is None and deadline.end is None
                and (paging is None or paging.cursor is None) and not run.failed):
            direct = knn_page(run, qv, paging)  # recall, ORDER BY and the page's hits at once (execute/knn_page.py)
            if direct is not None:
                out, cursor = direct
                stats.counts["returned"] = len(out)
                page_hits = Hits(out, stats.to_dict(), run.warnings)
                page_hits.page_end = cursor
                page_hits.query_vectors = qv if cursor is not None and cursor.more is None else None
                return page_hits

        units = recall(run, qv, fast_ok=reranker is None)
        plan = run.plan  # degrading may have replaced a lowered plan by its arm-by-arm form

        fusion = [f for f in plan.fusions if f.slot not in run.prefused] if prep.fusions else None
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

        if paging is not None and paging.cursor is not None:
            page, cursor = cursor_page(run, units, paging)
        else:
            page = units[plan.offset:]
            if plan.limit is not None:
                page = page[: plan.limit]
            cursor = first_cursor(run, units, page, paging) if paging is not None and reranker is None else None
        if plan.autocut is not None:
            before = len(page)
            page = autocut(run, page)
            stats.counts["autocut"] = {"k": plan.autocut, "of": before, "kept": len(page)}
            cursor = PageEnd(None, False)  # the cut is where the relevant rows end: no next page
        t = time.perf_counter()
        if "unread" in run.extra:  # (recall left SIMILARITY values unread)
            read_unread(run, page)
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
        got = Hits(out, stats.to_dict(), run.warnings)
        got.page_end = cursor
        got.query_vectors = qv if cursor is not None and cursor.more is None else None  # (for its probe)
        return got

    def _graph_values(self, plan: Plan) -> Callable[[tuple[str, int, float]], Activation]:
        """Each distinct GRAPH (text, hops, decay) activated once per search, on first use (an
        :class:`~nlql.text.graph.Activation`: ``.get((doc_id, position))`` per row read)."""
        cache: dict[tuple[str, int, float], Activation] = {}
        graph = self.graph

        def values(key: tuple[str, int, float]) -> Activation:
            got = cache.get(key)
            if got is None:
                if graph is None:
                    raise EvaluationError("GRAPH needs the engine's entity graph", None)
                got = cache[key] = graph.activate(*key)
            return got
        return values

    def _embed(self, run: Search, embed: Any = None, prep: _Prepared | None = None) -> dict[str, np.ndarray]:
        """The query vectors; with ``"degrade"`` an embedder failure or timeout drops the SIMILARITY arms."""
        own = embed or self.embed
        if prep is None:
            prep = self._prepared(run.plan)
        try:
            qv = embed_queries(run, own if run.deadline.end is None else
                               (lambda texts: embed_within(own, texts, run.deadline)), prep.query_vectors)
        except Exception as exc:
            sims = [s.slot for s in run.plan.scores if s.kind == "SIMILARITY"]
            why = ("the embedder did not answer within the deadline" if isinstance(exc, NLQLTimeoutError)
                   else f"the embedder failed ({cause_of(exc)})")
            if not run.degrade or not drop_arms(run, sims, why):
                raise
            if run.deadline.expired():
                run.warn_timeout(f"timeout after {run.deadline.timeout} s: results may be incomplete")
                # what is left is the engine's own work on the arms it kept: the deadline is lifted for
                # every call of this search (the store guard and the stores read this same object)
                run.deadline.end = None
            return {}
        if prep.examples:
            qv = {**qv, **example_vectors(run, self.dim)}
        if qv and run.deadline.expired():  # the embedding used the budget up: nothing recalled, nothing to return
            raise NLQLTimeoutError(f"the search ran out of time ({run.deadline.timeout} s) while embedding the query",
                                   hint="raise timeout= or use a faster embedder")
        return qv
