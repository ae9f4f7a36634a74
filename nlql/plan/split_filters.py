"""Pass: split WHERE into the part the store evaluates natively and the residual the engine evaluates.

A conjunct is pushed when it can be written as a pushed-filter tree (NOT moved into the leaves) whose
every leaf the store's Capabilities declare; otherwise it stays residual, in NLQL, and explain says so.
Score thresholds (``rel >= 0.3`` on a SIMILARITY binding) become a minimum score inside recall.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from nlql import ir
from nlql.evaluate import Env, constant_value
from nlql.plan.nodes import FUSION_FUNCTIONS, score_condition
from nlql.pushdown import Capabilities, Cond, FAnd, Filter, FOr, filter_pushable

_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_OPS = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
_NEG = {"eq": "ne", "ne": "eq", "lt": "ge", "le": "gt", "gt": "le", "ge": "lt",
        "in": "not_in", "not_in": "in", "is_null": "is_not_null", "is_not_null": "is_null",
        "contains": "not_contains", "not_contains": "contains", "like": "not_like",
        "not_like": "like", "match": "not_match", "not_match": "match",
        "has": "not_has", "not_has": "has", "has_any": "not_has_any", "not_has_any": "has_any",
        "has_all": "not_has_all", "not_has_all": "has_all"}


def _path(expr: ir.Expr, unit: str) -> tuple[str, ...] | None:
    """The pushed-filter path of a row-level field, or None if it is not a sentence-level value."""
    if isinstance(expr, ir.Meta):
        return ("meta", *expr.keys)
    if isinstance(expr, ir.Field):
        if expr.name == "doc_id":
            return ("doc_id",)
        if unit in ("SENTENCE", "SPAN"):  # id/position/content of a SENTENCE or SPAN centre
            return (expr.name,)
    return None


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, datetime))


class _Converter:
    def __init__(self, env: Env, unit: str, base: str | None) -> None:
        self.env = env
        # a SPAN over CHUNK centres on a chunk: only document-level paths are sentence-level values
        self.unit = "CHUNK" if (unit == "SPAN" and base == "CHUNK") else unit

    def const(self, expr: ir.Expr) -> tuple[bool, Any]:
        if isinstance(expr, ir.Literal):
            return True, expr.value
        return constant_value(expr, self.env)

    def leaf(self, op: str, path: tuple[str, ...], value: Any, negate: bool) -> Filter:
        return Cond(_NEG[op] if negate else op, path, value)

    def convert(self, expr: ir.Expr, negate: bool = False) -> Filter | None:  # noqa: C901
        if isinstance(expr, ir.Binary) and expr.op in ("AND", "OR"):
            left, right = self.convert(expr.left, negate), self.convert(expr.right, negate)
            if left is None or right is None:
                return None
            is_and = (expr.op == "AND") != negate
            cls = FAnd if is_and else FOr
            items: list[Filter] = []
            for part in (left, right):
                items.extend(part.items if isinstance(part, cls) else (part,))
            return cls(tuple(items))
        if isinstance(expr, ir.Unary) and expr.op == "NOT":
            return self.convert(expr.operand, not negate)
        if isinstance(expr, ir.Compare):
            op, lhs, rhs = expr.op, expr.left, expr.right
            path = _path(lhs, self.unit)
            other = rhs
            if path is None:
                path, other, op = _path(rhs, self.unit), lhs, _FLIP[op]
            if path is None:
                return None
            ok, value = self.const(other)
            if not ok or not _scalar(value):
                return None
            if value is None:
                if op not in ("==", "!="):
                    return None  # comparison with null is UNKNOWN: leave it to the evaluator
                return self.leaf("is_null" if op == "==" else "is_not_null", path, None, negate)
            return self.leaf(_OPS[op], path, value, negate)
        if isinstance(expr, ir.In):
            path = _path(expr.expr, self.unit)
            if path is None or not isinstance(expr.options, ir.ListExpr):
                return None
            vals = []
            for item in expr.options.items:
                ok, v = self.const(item)
                if not ok or not _scalar(v):
                    return None
                vals.append(v)
            return self.leaf("not_in" if expr.negated else "in", path, tuple(vals), negate)
        if isinstance(expr, ir.Between):
            path = _path(expr.expr, self.unit)
            ok1, lo = self.const(expr.low)
            ok2, hi = self.const(expr.high)
            if path is None or not (ok1 and ok2) or not (_scalar(lo) and _scalar(hi)) or lo is None or hi is None:
                return None
            neg = expr.negated != negate
            if neg:
                return FOr((Cond("lt", path, lo), Cond("gt", path, hi)))
            return FAnd((Cond("ge", path, lo), Cond("le", path, hi)))
        if isinstance(expr, ir.IsNull):
            path = _path(expr.expr, self.unit)
            if path is None:
                return None
            return self.leaf("is_not_null" if expr.negated else "is_null", path, None, negate)
        if isinstance(expr, ir.TextMatch):
            path = _path(expr.expr, self.unit)
            ok, pattern = self.const(expr.pattern)
            if path is None or not ok or not isinstance(pattern, str):
                return None
            if expr.op == "MATCH":
                try:
                    re.compile(pattern)
                except re.error:
                    return None
            op = expr.op.lower()
            return self.leaf(("not_" + op) if expr.negated else op, path, pattern, negate)
        if isinstance(expr, ir.Has):
            path = _path(expr.expr, self.unit)
            if path is None or path[0] != "meta":  # only metadata holds lists; fields stay residual
                return None
            op = "has" if expr.quantifier is None else "has_" + expr.quantifier.lower()
            if expr.quantifier is None:
                ok, value = self.const(expr.value)
                if not ok or value is None or not _scalar(value):
                    return None
            else:
                if not isinstance(expr.value, ir.ListExpr):
                    return None
                items = []
                for item in expr.value.items:
                    ok, v = self.const(item)
                    if not ok or not _scalar(v):
                        return None
                    items.append(v)
                value = tuple(items)
            return self.leaf(("not_" + op) if expr.negated else op, path, value, negate)
        if isinstance(expr, ir.Within):
            path = _path(expr.expr, self.unit)
            if path is None:
                return None
            rng = self.env.periods.get(expr)
            if rng is None:
                if expr.low is None or expr.high is None:
                    return None
                ok1, lo = self.const(expr.low)
                ok2, hi = self.const(expr.high)
                if not (ok1 and ok2) or lo is None or hi is None or not (_scalar(lo) and _scalar(hi)):
                    return None
                rng = (lo, hi)
            if negate:
                return FOr((Cond("lt", path, rng[0]), Cond("ge", path, rng[1])))
            return FAnd((Cond("ge", path, rng[0]), Cond("lt", path, rng[1])))
        return None


def threshold_of(expr: ir.Expr, binding_slots: dict[str, str], sim_slots: dict[ir.Call, str]) -> tuple[str, float] | None:
    """``rel >= 0.3`` / ``0.3 <= rel`` / ``rel > 0.3`` on a SIMILARITY score → (slot, min score)."""
    cond = score_condition(expr, sim_slots, binding_slots)
    if cond is None or cond.op not in (">", ">=") or cond.slot not in sim_slots.values():
        return None
    return cond.slot, cond.value


def split_filters(
    where: ir.Expr | None,
    caps: Capabilities,
    env: Env,
    unit: ir.Unit,
    binding_slots: dict[str, str],
    sim_slots: dict[ir.Call, str],
    fusion_bindings: frozenset[str],
) -> tuple[Filter | None, list[ir.Expr], list[ir.Expr], dict[str, float]]:
    """(pushed filter, residual conjuncts, conjuncts reading a fusion score, min score per slot)."""
    conv = _Converter(env, unit.kind, unit.base)
    pushed: list[Filter] = []
    residual: list[ir.Expr] = []
    late: list[ir.Expr] = []
    thresholds: dict[str, float] = {}
    for c in ir.conjuncts(where):
        refs = {n.name for n in c.walk() if isinstance(n, ir.Ref)}
        if refs & fusion_bindings or any(
                isinstance(n, ir.Call) and n.name in FUSION_FUNCTIONS for n in c.walk()):
            late.append(c)
            continue
        th = threshold_of(c, binding_slots, sim_slots)
        if th is not None:
            slot, value = th
            thresholds[slot] = max(value, thresholds.get(slot, value))
            residual.append(c)  # re-checked exactly on the candidates (cheap)
            continue
        f = conv.convert(c)
        if f is not None and filter_pushable(caps, f):
            pushed.append(f)
        else:
            residual.append(c)
    flt: Filter | None
    if not pushed:
        flt = None
    elif len(pushed) == 1:
        flt = pushed[0]
    else:
        items: list[Filter] = []
        for p in pushed:
            items.extend(p.items if isinstance(p, FAnd) else (p,))
        flt = FAnd(tuple(items))
    return flt, residual, late, thresholds
