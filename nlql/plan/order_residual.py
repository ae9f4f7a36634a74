"""Pass: order residual conjuncts cheap-first, so expensive ones (regex, user functions) see fewer rows."""

from __future__ import annotations

from nlql import ir

_COST = {
    "Literal": 0, "TypedLiteral": 0, "Field": 1, "Meta": 1, "Ref": 1, "Compare": 1, "IsNull": 1,
    "In": 2, "Between": 2, "Binary": 1, "Unary": 1, "ListExpr": 1, "Within": 2,
}


def _cost(expr: ir.Expr) -> int:
    total = 0
    for node in expr.walk():
        if isinstance(node, ir.TextMatch):
            total += {"CONTAINS": 5, "LIKE": 10, "MATCH": 20}[node.op]
        elif isinstance(node, ir.Call):
            total += 50 if node.name not in ("LENGTH", "LOWER", "UPPER", "IF", "NOW", "DATE",
                                             "TIMESTAMP", "RECENCY", "COUNT") else 4
        else:
            total += _COST.get(type(node).__name__, 1)
    return total


def order_residual(conjuncts: list[ir.Expr]) -> list[ir.Expr]:
    """Stable sort by estimated per-row cost."""
    return sorted(conjuncts, key=_cost)
