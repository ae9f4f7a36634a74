"""Pass: the text arms GRAPH and TEMPORAL, resolved once per query (SPEC §9).

- ``GRAPH(text, hops => h, decay => d)``: each distinct (text, hops, decay) is one activation of the
  engine's entity graph, shared by every call that spells it (the executor activates it on first use).
- ``TEMPORAL(path, text)``: the period the text names, extracted once against the engine clock (rules
  first, dateparser as the fallback, warmed up the first time a plan has TEMPORAL); None when the text
  names no period (then the arm is empty).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nlql import ir
from nlql.errors import PlanError
from nlql.functions import BUILTINS

__all__ = ["GraphKey", "resolve_arms"]

#: (text, hops, decay): one activation of the entity graph.
GraphKey = tuple[str, int, float]

_HOPS: int = BUILTINS["GRAPH"].default("hops")
_DECAY: float = BUILTINS["GRAPH"].default("decay")


def _text(call: ir.Call, arg: ir.Expr) -> str:
    if isinstance(arg, ir.Literal) and isinstance(arg.value, str):
        return arg.value
    raise PlanError(f"{call.name} needs a text (a string literal or a $parameter)", arg.span)


def _value(call: ir.Call, name: str, default: Any) -> Any:
    node = call.kwarg(name)
    if node is None:
        return default
    if isinstance(node, ir.Literal):
        return node.value
    raise PlanError(f"GRAPH {name} must be a literal or a $parameter", node.span)


def resolve_arms(query: ir.Query, now: datetime) -> tuple[dict[ir.Call, GraphKey], dict[ir.Call, Any]]:
    """(GRAPH call → its activation key, TEMPORAL call → its period or None) for a params-bound query."""
    from nlql.text.graph import check_spread

    graphs: dict[ir.Call, GraphKey] = {}
    temporals: dict[ir.Call, Any] = {}
    for node in query.walk():
        if not isinstance(node, ir.Call):
            continue
        if node.name == "GRAPH" and node not in graphs and node.args:
            text = _text(node, node.args[0])
            try:
                hops, decay = check_spread(_value(node, "hops", _HOPS), _value(node, "decay", _DECAY))
            except ValueError as exc:  # the checker reports these first; this is for hand-built IR
                raise PlanError(str(exc), node.span, hint="hops: a whole number from 0 to 16; decay: between 0 and 1") from None
            graphs[node] = (text, hops, decay)
        elif node.name == "TEMPORAL" and node not in temporals and len(node.args) == 2:
            temporals[node] = _period(_text(node, node.args[1]), now)
    return graphs, temporals


def _period(text: str, now: datetime) -> Any:
    from nlql.text.temporal import extract_period, warm_up_extract

    try:
        warm_up_extract()  # once per process: dateparser's first search costs about 1.5 s
    except Exception:  # noqa: BLE001 - warming is an optimisation; extraction contains its own errors
        pass
    return extract_period(text, now)
