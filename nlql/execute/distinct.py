"""DISTINCT BY … KEEP n (SPEC §9 "Diversity"): in the final order, keep the first n rows of each key.

The keys are ordinary expressions evaluated per candidate; equal values fall into one group by
:func:`nlql.values.distinct_key` (NULL is one value, ``1`` and ``1.0`` are one value, as SQL DISTINCT).
Recall stages that stop early (knn rounds, table fast paths, a lowered statement's fetch) ask
:func:`kept` how many rows survive, and widen until LIMIT + OFFSET do or nothing more can come.
"""

from __future__ import annotations

from typing import Any

from nlql import values as V
from nlql.evaluate import RowFn, compile_expr
from nlql.execute.candidates import Candidate, Search

__all__ = ["distinct", "head_for", "kept", "key_fns"]


def key_fns(run: Search) -> list[RowFn]:
    """The compiled keys of the plan's DISTINCT BY (compiled once per search)."""
    fns = run.extra.get("distinct_fns")
    if fns is None:
        assert run.plan.distinct is not None
        fns = run.extra["distinct_fns"] = [compile_expr(k, run.env) for k in run.plan.distinct.keys]
    return fns


def _key(fns: list[RowFn], u: Candidate) -> Any:
    return tuple(V.distinct_key(f(u.ctx)) for f in fns)


def distinct(run: Search, units: list[Candidate]) -> list[Candidate]:
    """The candidates kept, in their order: at most ``keep`` per distinct key tuple."""
    spec = run.plan.distinct
    if spec is None:
        return units
    fns = key_fns(run)
    seen: dict[Any, int] = {}
    out = []
    for u in units:
        k = _key(fns, u)
        n = seen.get(k, 0)
        if n < spec.keep:
            seen[k] = n + 1
            out.append(u)
    return out


def kept(run: Search, units: list[Candidate]) -> int:
    """How many of ``units`` DISTINCT BY keeps: ``sum(min(count, keep))`` over the key groups.

    The count does not depend on the order, so recall can ask it before the final sort.
    """
    spec = run.plan.distinct
    if spec is None:
        return len(units)
    fns = key_fns(run)
    counts: dict[Any, int] = {}
    for u in units:
        k = _key(fns, u)
        counts[k] = counts.get(k, 0) + 1
    return sum(min(c, spec.keep) for c in counts.values())


def head_for(run: Search, units: list[Candidate], need: int) -> int:
    """The length of the shortest prefix of ``units`` in which DISTINCT BY keeps ``need`` rows.

    The reranker scores that prefix: whatever order it gives them, the prefix still holds ``need`` kept
    rows (each group keeps ``min(count, keep)`` in any order).
    """
    spec = run.plan.distinct
    if spec is None:
        return need
    fns = key_fns(run)
    seen: dict[Any, int] = {}
    got = 0
    for i, u in enumerate(units):
        if got >= need:
            return i
        k = _key(fns, u)
        n = seen.get(k, 0)
        if n < spec.keep:
            seen[k] = n + 1
            got += 1
    return len(units)
