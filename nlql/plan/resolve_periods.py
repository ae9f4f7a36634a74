"""Pass: resolve every ``WITHIN "period"`` against the engine clock to an absolute half-open range."""

from __future__ import annotations

from datetime import datetime

from nlql import ir
from nlql import values as V
from nlql.errors import NLQLError, PlanError


def _as_datetime(expr: ir.Expr) -> datetime | None:
    if isinstance(expr, ir.TypedLiteral):
        return V.iso_datetime(expr.value)
    if isinstance(expr, ir.Literal) and isinstance(expr.value, str):
        return V.iso_datetime(expr.value)
    return None


def resolve_periods(query: ir.Query, now: datetime) -> dict[ir.Node, tuple[datetime, datetime]]:
    """Map each ``Within`` node with a period string to its (start, end); errors point at the string."""
    from nlql.text.temporal import resolve_period

    out: dict[ir.Node, tuple[datetime, datetime]] = {}
    for node in query.walk():
        if isinstance(node, ir.Within) and node.period is not None:
            p = node.period
            if not isinstance(p, ir.Literal) or not isinstance(p.value, str):
                raise PlanError("WITHIN needs a period string such as \"last week\"", p.span)
            try:
                period = resolve_period(p.value, now)
            except NLQLError as exc:
                raise PlanError(exc.message, p.span, hint=exc.hint) from None
            out[node] = (period.start, period.end)
        elif isinstance(node, ir.Within) and node.low is not None and node.high is not None:
            # WITHIN (a, b) is temporal: ISO strings and DATE/TIMESTAMP bounds are datetimes
            lo, hi = _as_datetime(node.low), _as_datetime(node.high)
            if lo is not None and hi is not None:
                out[node] = (lo, hi)
    return out
