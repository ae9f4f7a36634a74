"""Pass: replace every ``$param`` with the literal value it is bound to."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, timezone
from typing import Any

from nlql import ir
from nlql.errors import ParamError
from nlql.plan.rewrite import rewrite


def _literal(value: Any, span: Any) -> ir.Expr:
    if getattr(value, "ndim", None) == 1 and callable(getattr(value, "tolist", None)):
        value = value.tolist()  # a 1-D numpy array: a query vector (SPEC §11)
    if isinstance(value, (list, tuple)):
        return ir.ListExpr(tuple(_literal(v, span) for v in value), span=span)
    if isinstance(value, datetime):
        v = value if value.tzinfo else value.replace(tzinfo=timezone.utc)  # naive -> UTC
        return ir.TypedLiteral("TIMESTAMP", v.isoformat(), span=span)
    if isinstance(value, date):
        return ir.TypedLiteral("DATE", value.isoformat(), span=span)
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, float) and value != value:
            raise ParamError("a parameter cannot be NaN", span)
        return ir.Literal(value, span=span)
    raise ParamError(f"a parameter must be a string, number, boolean, date, null or a list, "
                     f"not {type(value).__name__}", span)


def bind_params(query: ir.Query, params: Mapping[str, Any] | None) -> ir.Query:
    """Substitute bound values; a missing parameter is a :class:`ParamError` at its position."""
    params = dict(params or {})

    def fn(node: ir.Node) -> ir.Node | None:
        if isinstance(node, ir.Param):
            key = node.name
            if key not in params and f"${key}" in params:
                key = f"${key}"
            if key not in params:
                raise ParamError(f"parameter ${node.name} is not bound", node.span,
                                 hint=f"pass params={{'{node.name}': …}} to search()")
            return _literal(params[key], node.span)
        return None

    out = rewrite(query, fn)
    assert isinstance(out, ir.Query)
    return out
