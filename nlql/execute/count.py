"""``SELECT COUNT(unit) [BY key, …]`` (SPEC §11): count the rows that passed WHERE per distinct key tuple.

The rows are what the plan's row pipeline returns with no LIMIT (every row passing WHERE, a SIMILARITY
threshold included); this module groups them. NULL (and a missing key) is one value; a list value counts
the row once under each distinct member (as facets do; an empty list puts the row in no group); values
fall together as DISTINCT BY's do (:func:`nlql.values.distinct_key`). Groups come out ordered by count
descending, then by each key ascending (NULL last), unless ORDER BY says otherwise, then paged.
"""

from __future__ import annotations

import itertools
import json
from typing import Any, cast

from nlql import ir
from nlql import values as V
from nlql.evaluate import RowContext, compile_expr
from nlql.execute.candidates import Candidate, Search
from nlql.execute.results import Hit
from nlql.plan.nodes import CountSpec
from nlql.stores.base import CountsGroups

__all__ = ["count_documents", "count_groups", "count_in_store"]


def _key(v: Any) -> Any:
    """:func:`nlql.values.distinct_key`, with the common case (a string) inline."""
    return ("str", v) if type(v) is str else V.distinct_key(v)


def _members(v: Any) -> list[tuple[Any, Any]]:
    """(group key, value) of what one row contributes for one key: each distinct member of a list, else
    the value itself."""
    if not isinstance(v, (list, tuple)):
        return [(_key(v), v)]
    seen: dict[Any, Any] = {}
    for item in v:
        k = _key(item)
        if k not in seen:
            seen[k] = item
    return list(seen.items())


def count_groups(run: Search, units: list[Candidate]) -> list[Hit]:
    """The COUNT hits of ``units`` (each a group with ``group`` and ``count``), ordered and paged."""
    return _groups(run, [u.ctx for u in units])


def _document_level(e: ir.Expr) -> bool:
    """Whether an expression reads only a document's own values (metadata, doc_id, constants)."""
    for node in e.walk():
        if isinstance(node, ir.Field) and node.name != "doc_id":
            return False
        if isinstance(node, (ir.Ref, ir.Param)) or (isinstance(node, ir.Call) and node.name not in _PLAIN_CALLS):
            return False
    return True


_PLAIN_CALLS = frozenset({"LOWER", "UPPER", "LENGTH", "IF", "DATE", "TIMESTAMP"})


def count_documents(run: Search) -> list[Hit] | None:
    """``COUNT(DOCUMENT)`` straight from the rows the pushed filter selects, one context per document
    (no documents are built), when nothing else decides which documents pass: no score, no residual
    filter, and BY keys that read document-level values only. None: the general path counts."""
    plan = run.plan
    spec = plan.count
    if (spec is None or plan.unit.kind != "DOCUMENT" or plan.scores or plan.residual or plan.fusion_residual
            or plan.lowered is not None or plan.graphs or plan.temporals
            or not all(_document_level(k) for k in spec.keys)):
        return None
    native = plan.native
    if native is not None and native.extra.get("empty"):
        return _groups(run, [])
    keys = run.store.scan(native)
    contexts: dict[str, RowContext] = {}
    for row in run.store.fetch(keys):
        if row.doc_id not in contexts:
            contexts[row.doc_id] = RowContext("", row.doc_id, row.doc_id, 0, row.metadata)
    run.stats.counts["count_path"] = "documents from the pushed filter's rows (no document built)"
    return _groups(run, list(contexts.values()))


def count_in_store(run: Search) -> list[Hit] | None:
    """The COUNT hits from the store's own grouping (``CountSpec.paths``: the planner chose it), or None
    when the engine must count: two stored forms of one value came back (``1`` and ``1.0`` are one group
    for NLQL, and a row holding both would be counted twice by the store), the store could not group
    some value, or two groups sort as equal (their order is the rows' order)."""
    plan = run.plan
    spec = plan.count
    if spec is None or spec.paths is None:
        return None
    counts: dict[tuple[Any, ...], int] = {}
    shown: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    native = plan.native
    if native is None or not native.extra.get("empty"):
        got = cast(CountsGroups, run.store).count_groups(native, plan.unit.kind, spec.paths)
        if got is None:
            run.stats.counts["count_path"] = ("the engine: the store cannot group these values itself (a value it "
                                              "cannot read, or one its grouping cannot hold)")
            return None
        for values, n in got:
            key = tuple(_key(v) for v in values)
            if key in counts:
                run.stats.counts["count_path"] = "the engine: the store holds one value in two forms"
                return None
            counts[key] = n
            shown[key] = tuple(None if V.is_null(v) else v for v in values)
        # distinct groups that sort as equal (2025 and "2025") come in the order the rows first showed them,
        # which only the engine's pass over the rows knows
        if len({tuple(_value_key(v, False, False) for v in s) for s in shown.values()}) < len(shown):
            run.stats.counts["count_path"] = "the engine: groups that sort as equal come in the rows' order"
            return None
    run.stats.counts["count_path"] = "the store's own grouping"
    return _page(spec, plan.unit.kind, counts, shown)


def _groups(run: Search, contexts: list[RowContext]) -> list[Hit]:
    spec = run.plan.count
    assert spec is not None
    fns = [compile_expr(k, run.env) for k in spec.keys]
    counts: dict[tuple[Any, ...], int] = {}
    shown: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for ctx in contexts:
        per_key = [_members(f(ctx)) for f in fns]
        for combo in itertools.product(*per_key) if len(per_key) != 1 else ((m,) for m in per_key[0]):
            key = tuple(k for k, _ in combo)
            if key in counts:
                counts[key] += 1
            else:
                counts[key] = 1
                shown[key] = tuple(None if V.is_null(v) else v for _, v in combo)
    return _page(spec, run.plan.unit.kind, counts, shown)


def _page(spec: CountSpec, unit: str, counts: dict[tuple[Any, ...], int],
          shown: dict[tuple[Any, ...], tuple[Any, ...]]) -> list[Hit]:
    """The groups ordered (count DESC, then each key ascending, unless ORDER BY says otherwise) and paged.
    Values that sort as equal but are distinct groups (``2025`` and ``"2025"``) keep the order in which
    they were first seen. With no BY key there is always one row, the total (0 when no row passed)."""
    if not spec.keys and not counts:
        counts, shown = {(): 0}, {(): ()}
    groups = sorted(counts, key=lambda k: tuple(_value_key(v, False, False) for v in shown[k]))
    order = spec.order or ((-1, True, False),)
    for index, descending, nulls_first in reversed(order):  # stable sorts, last key first
        if index < 0:
            groups.sort(key=lambda k: counts[k], reverse=descending)
        else:
            def by_value(k: tuple[Any, ...], i: int = index, d: bool = descending,
                         n: bool = nulls_first) -> tuple[int, Any]:
                return _value_key(shown[k][i], d, n)

            groups.sort(key=by_value, reverse=descending)
    page = groups[spec.offset:]
    if spec.limit is not None:
        page = page[: spec.limit]
    return [_hit(spec, unit, shown[k], counts[k]) for k in page]


def _value_key(v: Any, descending: bool, nulls_first: bool) -> tuple[int, Any]:
    """ORDER BY's key for one group value (nulls last in both directions unless NULLS FIRST)."""
    if v is None:
        rank = (2 if nulls_first else 0) if descending else (0 if nulls_first else 2)
        return (rank, (0, 0))
    return (1, V.sort_key(v))


def _hit(spec: CountSpec, unit: str, values: tuple[Any, ...], n: int) -> Hit:
    group = dict(zip(spec.labels, values))
    text = ", ".join(f"{k} = {json.dumps(v, default=V.json_default, ensure_ascii=False)}" for k, v in group.items())
    return Hit(id="count:" + (json.dumps(list(values), default=V.json_default, ensure_ascii=False) if values else "*"),
               doc_id="", unit=unit, position=0, content=text or "all rows", metadata={}, scores={},
               group=group, count=n)
