"""Pass: find every score call and give each distinct one a single slot (embedded/scored once)."""

from __future__ import annotations

from nlql import ir
from nlql.plan.nodes import SCORE_FUNCTIONS, TEXT_SCORES, ScoreSpec
from nlql.render import render_expr


def _texts(expr: ir.Expr) -> tuple[str, ...]:
    if isinstance(expr, ir.Literal) and isinstance(expr.value, str):
        return (expr.value,)
    if isinstance(expr, ir.ListExpr):
        return tuple(str(i.value) for i in expr.items if isinstance(i, ir.Literal))
    return ()


def dedupe_scores(query: ir.Query) -> tuple[list[ScoreSpec], dict[ir.Call, str], dict[str, str]]:
    """(score specs in first-use order, call → slot, binding name → slot for bare score bindings).

    Two calls with the same function, field and texts are equal IR nodes (spans are not compared), so
    they share a slot: the text is embedded once however often it is written.
    """
    specs: list[ScoreSpec] = []
    slots: dict[ir.Call, str] = {}
    binding_slots: dict[str, str] = {}

    def visit(node: ir.Node, preferred: str | None) -> None:
        for sub in node.walk():
            if isinstance(sub, ir.Call) and sub.name in SCORE_FUNCTIONS:
                if sub in slots:
                    continue
                slot = preferred if (preferred and sub is node) else f"_{sub.name.lower()}{len(specs)}"
                slots[sub] = slot
                label = render_expr(sub)
                if sub.name in TEXT_SCORES:
                    specs.append(ScoreSpec(slot, sub.name, sub, texts=_texts(sub.args[1]), label=label))
                else:
                    arms = tuple(a.name for a in sub.args if isinstance(a, ir.Ref))
                    k_expr = sub.kwarg("k")
                    k = float(k_expr.value) if isinstance(k_expr, ir.Literal) and isinstance(
                        k_expr.value, (int, float)) else 60.0
                    w_expr = sub.kwarg("weights")
                    weights = tuple(float(i.value) for i in w_expr.items) if isinstance(
                        w_expr, ir.ListExpr) else tuple(1.0 for _ in arms)
                    specs.append(ScoreSpec(slot, sub.name, sub, arms=arms, k=k, weights=weights, label=label))

    for b in query.bindings:
        visit(b.expr, b.name)
        if isinstance(b.expr, ir.Call) and b.expr in slots:
            binding_slots[b.name] = slots[b.expr]
    for part in (query.where, *(k.expr for k in query.order_by)):
        if part is not None:
            visit(part, None)
    return specs, slots, binding_slots
