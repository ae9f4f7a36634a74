"""Pass: find every score call and give each distinct one a single slot (embedded/scored once)."""

from __future__ import annotations

from nlql import ir
from nlql.functions import BUILTINS
from nlql.plan.nodes import SCORE_FUNCTIONS, TEXT_SCORES, ScoreSpec
from nlql.render import render_expr


def _number(expr: ir.Expr | None) -> float | None:
    if isinstance(expr, ir.Literal) and isinstance(expr.value, (int, float)) and not isinstance(expr.value, bool):
        return float(expr.value)
    return None


def _texts(expr: ir.Expr) -> tuple[str, ...]:
    if isinstance(expr, ir.Literal) and isinstance(expr.value, str):
        return (expr.value,)
    if isinstance(expr, ir.ListExpr):
        return tuple(str(i.value) for i in expr.items if isinstance(i, ir.Literal))
    return ()


def _vector(expr: ir.Expr) -> tuple[float, ...] | None:
    """A bound vector parameter: a list of numbers (SPEC §11), else None."""
    if isinstance(expr, ir.ListExpr) and expr.items:
        numbers = tuple(n for n in map(_number, expr.items) if n is not None)
        if len(numbers) == len(expr.items):
            return numbers
    return None


def _weights(expr: ir.Expr | None, arms: int) -> tuple[float, ...]:
    """The ``weights =>`` of a fusion (a list of numbers: check() reports anything else), else 1 per arm."""
    if not isinstance(expr, ir.ListExpr):
        return (1.0,) * arms
    weights = tuple(n for n in map(_number, expr.items) if n is not None)
    if len(weights) != len(expr.items):
        raise TypeError(f"weights must be numbers: {render_expr(expr)}")  # check() should have said so
    return weights


def _example(expr: ir.Expr) -> str | None:
    """The document id of ``DOC("id")`` (an int id is its text, as ingest makes it), else None."""
    if isinstance(expr, ir.Call) and expr.name == "DOC" and expr.args and isinstance(expr.args[0], ir.Literal):
        return str(expr.args[0].value)
    return None


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
                vector = _vector(sub.args[1]) if sub.name == "SIMILARITY" and len(sub.args) > 1 else None
                doc = _example(sub.args[1]) if sub.name == "SIMILARITY" and len(sub.args) > 1 else None
                if vector is not None:  # (the label names the vector; its numbers would fill explain)
                    label = f"SIMILARITY({render_expr(sub.args[0])}, [vector of {len(vector)} numbers])"
                if sub.name in TEXT_SCORES:
                    specs.append(ScoreSpec(slot, sub.name, sub, texts=() if vector or doc else _texts(sub.args[1]),
                                           label=label, min=_number(sub.kwarg("min")), vector=vector, doc=doc))
                else:
                    # any numeric expression is an arm (SPEC §9); a binding arm is labelled by its name
                    arms = tuple(a.name if isinstance(a, ir.Ref) else render_expr(a) for a in sub.args)
                    k = _number(sub.kwarg("k"))
                    weights = _weights(sub.kwarg("weights"), len(arms))
                    window = _number(sub.kwarg("window"))
                    lam = None
                    if sub.name == "MMR":  # SPEC §9: lambda => 0.5, window => 100 (not the fusion arm depth)
                        lam = _number(sub.kwarg("lambda"))
                        window = float(BUILTINS["MMR"].default("window")) if window is None else window
                    method = ""
                    if sub.name == "FUSE":  # SPEC §11: method => "minmax" (default) | "dbsf"
                        m = sub.kwarg("method")
                        method = (m.value if isinstance(m, ir.Literal) and isinstance(m.value, str)
                                  else str(BUILTINS["FUSE"].default("method")))
                    specs.append(ScoreSpec(slot, sub.name, sub, arms=arms, k=60.0 if k is None else k, method=method,
                                           weights=weights, label=label, arm_exprs=tuple(sub.args),
                                           window=None if window is None else int(window),
                                           mmr_lambda=BUILTINS["MMR"].default("lambda") if lam is None else lam))

    for b in query.bindings:
        visit(b.expr, b.name)
        if isinstance(b.expr, ir.Call) and b.expr in slots:
            binding_slots[b.name] = slots[b.expr]
    keys = query.distinct.keys if query.distinct is not None else ()
    for part in (query.where, *keys, *(k.expr for k in query.order_by)):
        if part is not None:
            visit(part, None)
    return specs, slots, binding_slots
