"""Order: the stable multi-key sort of SPEC §6 (nulls last unless NULLS FIRST, ties on insertion
order), and the optional rerank that reorders the head of it."""

from __future__ import annotations

from typing import Any

from nlql import values as V
from nlql.evaluate import compile_expr
from nlql.execute.candidates import Candidate, Search
from nlql.execute.distinct import head_for
from nlql.execute.materialise import unit_text

__all__ = ["order", "rerank"]


def order(run: Search, units: list[Candidate]) -> list[Candidate]:
    """Candidates sorted by the plan's ORDER BY keys (insertion order first, so ties keep it)."""
    if run.in_order:  # recall's rows are in this order already (Search.in_order)
        return units
    specs = run.plan.order
    fns = run.order_fns
    first: list[tuple[Any, Candidate]] | None = None
    if len(specs) == 1 and fns is not None:
        first = [(fns[0](u.ctx), u) for u in units]
        if all(type(v) is float and v == v for v, _ in first):
            # every value a score (no null, no NaN): one sort by (value, insertion order), the order
            # the two stable sorts below give (a stable reverse sort keeps equal values in order)
            first.sort(key=_score_desc if specs[0].descending else _score_asc)
            return [u for _, u in first]
        first.sort(key=_insertion_of)  # (the values already read: each is computed once)
    else:
        units = sorted(units, key=_insertion)
    for i in range(len(specs) - 1, -1, -1):
        spec = specs[i]
        if first is not None:
            keyed = first
        else:
            fn = fns[i] if fns is not None else compile_expr(spec.expr, run.env)
            keyed = [(fn(u.ctx), u) for u in units]
        if spec.descending:
            null_rank = 2 if spec.nulls_first else 0
        else:
            null_rank = 0 if spec.nulls_first else 2

        def key(item: tuple[Any, Candidate], _nr: int = null_rank) -> tuple[int, Any]:
            v = item[0]
            if V.is_null(v):
                return (_nr, (0, 0))
            return (1, V.sort_key(v))
        if all(type(v) is float and v == v for v, _ in keyed):
            keyed.sort(key=_first, reverse=spec.descending)  # only scores (no null): the same order, cheaper
        else:
            keyed.sort(key=key, reverse=spec.descending)
        units = [u for _, u in keyed]
    return units


def _insertion(u: Candidate) -> tuple[int, int]:
    ctx = u.ctx
    return (ctx.seq, ctx.position)


def _insertion_of(item: tuple[Any, Candidate]) -> tuple[int, int]:
    ctx = item[1].ctx
    return (ctx.seq, ctx.position)


def _first(item: tuple[Any, Candidate]) -> Any:
    return item[0]


def _score_desc(item: tuple[float, Candidate]) -> tuple[float, int, int]:
    ctx = item[1].ctx
    return (-item[0], ctx.seq, ctx.position)


def _score_asc(item: tuple[float, Candidate]) -> tuple[float, int, int]:
    ctx = item[1].ctx
    return (item[0], ctx.seq, ctx.position)


def rerank(run: Search, units: list[Candidate], reranker: Any, rerank_query: str | None) -> list[Candidate]:
    """Score the first ``need`` candidates with the reranker into ``scores["rerank"]``; order by it unless
    ORDER BY names keys of its own."""
    plan = run.plan
    query = rerank_query
    if query is None:
        for s in plan.scores:
            if s.texts:
                query = s.texts[0]
                break
    if query is None:
        run.warnings.append("rerank skipped: no rerank_query and no SIMILARITY/BM25 text in the query")
        return units
    need = run.need
    if need is not None and plan.distinct is not None:
        need = head_for(run, units, need)  # enough rows that DISTINCT BY still keeps LIMIT + OFFSET of them
    head = units if need is None else units[:need]
    tail = [] if need is None else units[need:]
    texts = [unit_text(run, u) for u in head]
    scores = list(reranker.score(query, texts))
    for u, sc in zip(head, scores):
        u.ctx.scores["rerank"] = float(sc)
        u.extra["rerank"] = float(sc)
    if not any(not k.implicit for k in plan.order):
        head = sorted(head, key=lambda u: -u.extra["rerank"])
    return head + tail
