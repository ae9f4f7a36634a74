"""Expression evaluation over one result row, with SQL three-valued logic (SPEC §6).

Expressions are compiled once per plan into closures, so evaluating a row is a chain of Python calls
with no tree walking or dispatch on node types.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nlql import ir
from nlql import values as V
from nlql.errors import EvaluationError
from nlql.functions import BUILTINS, parse_duration
from nlql.patterns import Regex, compile_regex

if TYPE_CHECKING:
    from nlql.text.graph import Activation

RowFn = Callable[["RowContext"], Any]


@dataclass(slots=True)
class RowContext:
    """What an expression can see: the unit's fields, its scores and its bindings (computed lazily)."""

    content: str
    id: str
    doc_id: str
    position: int
    metadata: dict[str, Any]
    scores: dict[str, float | None] = field(default_factory=dict)
    bindings: dict[str, Any] = field(default_factory=dict)
    seq: int = 0
    positions: tuple[int, ...] | None = None  # CHUNK / DOCUMENT rows: the positions of their sentences


@dataclass
class Env:
    """Plan-time environment: the clock, resolved periods, compiled bindings, user functions."""

    now: datetime
    score_names: Mapping[ir.Call, str]  # score Call (SIMILARITY/BM25/RRF/INTERLEAVE/MMR) -> score slot
    binding_exprs: Mapping[str, ir.Expr]
    functions: Mapping[str, Callable[..., Any]]
    periods: Mapping[ir.Node, tuple[datetime, datetime]]
    regexes: dict[str, Regex] = field(default_factory=dict)
    compiled_bindings: dict[str, RowFn] = field(default_factory=dict)
    # GRAPH: call -> (text, hops, decay), and (text, hops, decay) -> {(doc_id, position): activation},
    # filled by the executor before rows are evaluated (lazily: a GRAPH call asks for its values)
    graphs: Mapping[ir.Call, tuple[str, int, float]] = field(default_factory=dict)
    graph_values: Callable[[tuple[str, int, float]], Activation] | None = None
    # TEMPORAL: call -> the period extracted from its text at plan time (None: no period found)
    temporals: Mapping[ir.Call, Any] = field(default_factory=dict)
    analyzer: Any = None  # the BM25 analyzer HIGHLIGHT matches terms with (None: the default one)

    def binding_fn(self, name: str) -> RowFn:
        fn = self.compiled_bindings.get(name)
        if fn is None:
            inner = compile_expr(self.binding_exprs[name], self)

            def fn(ctx: RowContext, _name: str = name, _inner: RowFn = inner) -> Any:
                if _name in ctx.bindings:
                    return ctx.bindings[_name]
                value = _inner(ctx)
                ctx.bindings[_name] = value
                return value

            self.compiled_bindings[name] = fn
        return fn


def truth(v: Any) -> bool | None:
    """A value in a boolean position: bools are themselves, null is UNKNOWN, anything else UNKNOWN."""
    return v if isinstance(v, bool) else None


def _num(v: Any) -> float | int | None:
    if V.is_number(v):
        return v if not (isinstance(v, float) and math.isnan(v)) else None
    if isinstance(v, str):
        return V.numeric_string(v)
    return None


def arith(op: str, a: Any, b: Any) -> Any:
    """``+ - * /`` on numbers (numeric strings coerced); null or a non-number gives null; x/0 is null."""
    x, y = _num(a), _num(b)
    if x is None or y is None:
        return None
    try:
        if op == "+":
            r = x + y
        elif op == "-":
            r = x - y
        elif op == "*":
            r = x * y
        elif y == 0:
            return None
        else:
            r = x / y
    except OverflowError:
        return None
    if isinstance(r, float) and not math.isfinite(r):
        return None
    return r


def constant_value(expr: ir.Expr, env: Env) -> tuple[bool, Any]:
    """(True, value) when ``expr`` does not depend on the row (literals, NOW(), DATE('…'), arithmetic)."""
    for node in expr.walk():
        if isinstance(node, (ir.Field, ir.Meta, ir.Ref, ir.Param)):
            return False, None
        if isinstance(node, ir.Call) and node.name not in ("NOW", "DATE", "TIMESTAMP", "LOWER", "UPPER", "LENGTH"):
            return False, None
        if isinstance(node, (ir.Within, ir.TextMatch, ir.Has)):
            return False, None
    fn = compile_expr(expr, env)
    return True, fn(_EMPTY)


_EMPTY = RowContext("", "", "", 0, {})
_HALF_LIFE: str = BUILTINS["RECENCY"].default("half_life")


def graph_slot(key: tuple[str, int, float]) -> str:
    """The score slot under which a one-statement SQL plan returns a GRAPH activation per row."""
    return "graph:" + repr(key)


def temporal_slot(call: ir.Call) -> str:
    """The score slot under which a one-statement SQL plan returns a TEMPORAL value per row."""
    from nlql.render import render_expr

    return "temporal:" + render_expr(call)


def _graph(expr: ir.Call, env: Env) -> RowFn:
    """GRAPH's value: the activation of the row's sentence (a CHUNK / DOCUMENT row: its best sentence).

    A sentence row that a one-statement SQL plan returned carries it in its scores (:func:`graph_slot`)."""
    key = env.graphs.get(expr)
    source = env.graph_values
    if key is None or source is None:
        raise EvaluationError("GRAPH needs the engine's entity graph", expr.span)
    values: list[Activation] = []
    slot = graph_slot(key)

    def f_graph(ctx: RowContext) -> Any:
        if ctx.positions is None and slot in ctx.scores:
            return ctx.scores[slot]
        if not values:
            values.append(source(key))
        got = values[0]
        if ctx.positions is None:
            return got.get((ctx.doc_id, ctx.position))
        best = None
        for p in ctx.positions:
            v = got.get((ctx.doc_id, p))
            if v is not None and (best is None or v > best):
                best = v
        return best
    return f_graph


def compile_expr(expr: ir.Expr, env: Env) -> RowFn:  # noqa: C901 - one dispatch table
    """Compile an expression into ``fn(ctx) -> value``."""
    if isinstance(expr, ir.Literal):
        v = expr.value
        return lambda ctx: v
    if isinstance(expr, ir.TypedLiteral):
        dt = V.iso_datetime(expr.value)
        return lambda ctx: dt
    if isinstance(expr, ir.Field):
        name = expr.name
        return lambda ctx: getattr(ctx, name)
    if isinstance(expr, ir.Meta):
        keys = expr.keys
        if len(keys) == 1:
            k0 = keys[0]
            return lambda ctx: ctx.metadata.get(k0)
        return lambda ctx: V.lookup(ctx.metadata, keys)
    if isinstance(expr, ir.Ref):
        return env.binding_fn(expr.name)
    if isinstance(expr, ir.ListExpr):
        items = [compile_expr(i, env) for i in expr.items]
        return lambda ctx: [f(ctx) for f in items]
    if isinstance(expr, ir.Unary):
        inner = compile_expr(expr.operand, env)
        if expr.op == "NOT":
            return lambda ctx: V.not3(truth(inner(ctx)))
        return lambda ctx: arith("-", 0, inner(ctx))
    if isinstance(expr, ir.Binary):
        left, right = compile_expr(expr.left, env), compile_expr(expr.right, env)
        op = expr.op
        if op == "AND":
            def f_and(ctx: RowContext) -> Any:
                a = truth(left(ctx))
                if a is False:
                    return False
                return V.and3(a, truth(right(ctx)))
            return f_and
        if op == "OR":
            def f_or(ctx: RowContext) -> Any:
                a = truth(left(ctx))
                if a is True:
                    return True
                return V.or3(a, truth(right(ctx)))
            return f_or
        return lambda ctx: arith(op, left(ctx), right(ctx))
    if isinstance(expr, ir.Compare):
        left, right = compile_expr(expr.left, env), compile_expr(expr.right, env)
        op = expr.op
        # `x == null` / `x != null` read as IS NULL / IS NOT NULL (SPEC §6)
        if isinstance(expr.right, ir.Literal) and expr.right.value is None and op in ("==", "!="):
            return lambda ctx: V.is_null(left(ctx)) == (op == "==")
        if isinstance(expr.left, ir.Literal) and expr.left.value is None and op in ("==", "!="):
            return lambda ctx: V.is_null(right(ctx)) == (op == "==")
        return lambda ctx: V.compare(op, left(ctx), right(ctx))
    if isinstance(expr, ir.In):
        value = compile_expr(expr.expr, env)
        opts = compile_expr(expr.options, env)
        neg = expr.negated

        def f_in(ctx: RowContext) -> Any:
            o = opts(ctx)
            if not isinstance(o, (list, tuple)):
                return None
            r = V.in_list(value(ctx), o)
            return V.not3(r) if neg else r
        return f_in
    if isinstance(expr, ir.Between):
        value, lo, hi = (compile_expr(e, env) for e in (expr.expr, expr.low, expr.high))
        neg = expr.negated

        def f_between(ctx: RowContext) -> Any:
            x = value(ctx)
            r = V.and3(V.compare(">=", x, lo(ctx)), V.compare("<=", x, hi(ctx)))
            return V.not3(r) if neg else r
        return f_between
    if isinstance(expr, ir.IsNull):
        value = compile_expr(expr.expr, env)
        neg = expr.negated
        return lambda ctx: V.is_null(value(ctx)) != neg
    if isinstance(expr, ir.TextMatch):
        return _compile_text_match(expr, env)
    if isinstance(expr, ir.Within):
        value = compile_expr(expr.expr, env)
        rng = env.periods.get(expr)
        if rng is None:
            lo_f = compile_expr(expr.low, env) if expr.low is not None else (lambda ctx: None)
            hi_f = compile_expr(expr.high, env) if expr.high is not None else (lambda ctx: None)

            def f_within_range(ctx: RowContext) -> Any:
                x = value(ctx)
                return V.and3(V.compare(">=", x, lo_f(ctx)), V.compare("<", x, hi_f(ctx)))
            return f_within_range
        start, end = rng

        def f_within(ctx: RowContext) -> Any:
            x = value(ctx)
            return V.and3(V.compare(">=", x, start), V.compare("<", x, end))
        return f_within
    if isinstance(expr, ir.Has):
        return _compile_has(expr, env)
    if isinstance(expr, ir.Call):
        return _compile_call(expr, env)
    if isinstance(expr, ir.Param):
        raise EvaluationError(f"parameter ${expr.name} was not bound", expr.span)
    raise TypeError(f"cannot evaluate {type(expr).__name__}")


def _compile_has(expr: ir.Has, env: Env) -> RowFn:
    """HAS / HAS ANY / HAS ALL (SPEC §11): :func:`nlql.values.has` and friends, negated as NOT is."""
    value, needle = compile_expr(expr.expr, env), compile_expr(expr.value, env)
    neg = expr.negated
    if expr.quantifier is None:
        def f(ctx: RowContext) -> Any:
            return V.has(value(ctx), needle(ctx))
    else:
        test = V.has_any if expr.quantifier == "ANY" else V.has_all

        def f(ctx: RowContext) -> Any:
            o = needle(ctx)
            if not isinstance(o, (list, tuple)):
                return None
            return test(value(ctx), o)
    if neg:
        return lambda ctx: V.not3(f(ctx))
    return f


def _compile_text_match(expr: ir.TextMatch, env: Env) -> RowFn:
    value, pattern = compile_expr(expr.expr, env), compile_expr(expr.pattern, env)
    neg = expr.negated
    if expr.op == "CONTAINS":
        def f(ctx: RowContext) -> Any:
            return V.contains(value(ctx), pattern(ctx))
    elif expr.op == "LIKE":
        def f(ctx: RowContext) -> Any:
            return V.like(value(ctx), pattern(ctx))
    else:
        def f(ctx: RowContext) -> Any:
            p = pattern(ctx)
            if not isinstance(p, str):
                return None
            rx = env.regexes.get(p)
            if rx is None:
                try:
                    rx = env.regexes[p] = compile_regex(p)  # RE2 where the pattern allows: linear time
                except re.error:
                    return None
            return V.match(value(ctx), rx)
    if neg:
        return lambda ctx: V.not3(f(ctx))
    return f


def _compile_call(expr: ir.Call, env: Env) -> RowFn:  # noqa: C901
    name = expr.name
    slot = env.score_names.get(expr)
    if slot is not None:
        return lambda ctx: ctx.scores.get(slot)
    args = [compile_expr(a, env) for a in expr.args]
    if name == "IF":
        cond, a, b = args
        return lambda ctx: a(ctx) if truth(cond(ctx)) is True else b(ctx)
    if name == "LENGTH":
        (x,) = args
        return lambda ctx: len(v) if isinstance(v := x(ctx), (str, list)) else None
    if name == "LOWER":
        (x,) = args
        return lambda ctx: v.lower() if isinstance(v := x(ctx), str) else None
    if name == "UPPER":
        (x,) = args
        return lambda ctx: v.upper() if isinstance(v := x(ctx), str) else None
    if name == "HIGHLIGHT":
        from nlql.text.highlight import highlight

        x, t = args
        an = env.analyzer

        def f_highlight(ctx: RowContext) -> Any:
            s, q = x(ctx), t(ctx)
            return highlight(s, q, an) if isinstance(s, str) and isinstance(q, str) else None
        return f_highlight
    if name == "COUNT":
        x, needle = args

        def f_count(ctx: RowContext) -> Any:
            s, n = x(ctx), needle(ctx)
            if not isinstance(s, str) or not isinstance(n, str) or not n:
                return None
            return s.casefold().count(n.casefold())
        return f_count
    if name == "NOW":
        now = env.now
        return lambda ctx: now
    if name in ("DATE", "TIMESTAMP"):
        (x,) = args
        return lambda ctx: V.as_datetime(x(ctx))
    if name == "RECENCY":
        (x,) = args
        hl_expr = expr.kwarg("half_life")
        # the checker accepted exactly what parse_duration reads (one duration parser for both)
        hl_value = compile_expr(hl_expr, env)(_EMPTY) if hl_expr is not None else _HALF_LIFE
        half_life = (parse_duration(hl_value) if isinstance(hl_value, str) else None) or parse_duration(_HALF_LIFE)
        assert half_life is not None
        now = env.now
        hl_seconds = half_life.total_seconds()

        def f_recency(ctx: RowContext) -> Any:
            dt = V.as_datetime(x(ctx))
            if dt is None:
                return None
            age = max(0.0, (now - dt).total_seconds())
            return math.exp(-math.log(2) * age / hl_seconds)
        return f_recency
    if name == "GRAPH":
        return _graph(expr, env)
    if name == "TEMPORAL":
        x = args[0]
        period = env.temporals.get(expr)
        if period is None:
            return lambda ctx: None
        from nlql.text.temporal import temporal_value

        t_slot = temporal_slot(expr)

        def f_temporal(ctx: RowContext) -> Any:
            if t_slot in ctx.scores:  # a row a one-statement SQL plan returned: the statement's value
                return ctx.scores[t_slot]
            return temporal_value(V.as_datetime(x(ctx)), period)
        return f_temporal
    fn = env.functions.get(name)
    if fn is not None:
        kw = {k: compile_expr(v, env) for k, v in expr.kwargs}

        def f_user(ctx: RowContext) -> Any:
            try:
                return fn(*(a(ctx) for a in args), **{k: v(ctx) for k, v in kw.items()})
            except Exception as exc:  # a user function's failure becomes an NLQL error naming it
                raise EvaluationError(
                    f"function {name} raised {type(exc).__name__}: {exc}", expr.span,
                    hint=f"check the implementation registered for {name}",
                ) from exc
        return f_user
    raise EvaluationError(f"unknown function {name}", expr.span)
