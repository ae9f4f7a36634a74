"""Semantic checks: names, functions, arity, binding cycles, parameters, types — every problem at once.

:func:`check` is what an agent calls to self-correct: it never raises for a bad query, it returns a list
of :class:`~nlql.errors.Diagnostic` (empty when the query is valid). :func:`validate` is what the engine
calls before planning: it parses, checks, and raises one :class:`~nlql.errors.CheckError` carrying
every diagnostic.

>>> [d.message for d in check("SELECT SENTENCE WHERE topic == 'ai'")]
["unknown name 'topic'"]
>>> check("SELECT SENTENCE WHERE topic == 'ai'")[0].hint
'did you mean meta.topic?'
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from nlql.errors import CheckError, Diagnostic, NLQLError
from nlql.functions import (
    BUILTINS,
    FUSE_METHODS,
    FUSION_FUNCTIONS,
    MAX_GRAPH_HOPS,
    QUERY_BY_EXAMPLE,
    SCORE_FUNCTIONS,
    TEXT_SCORES,
    FunctionSig,
    parse_duration,
)
from nlql.ir import (
    BUILTIN_FIELDS,
    Between,
    Binary,
    Binding,
    Call,
    Compare,
    Count,
    Distinct,
    Field,
    Has,
    In,
    IsNull,
    ListExpr,
    Literal,
    Meta,
    Node,
    Param,
    Query,
    Ref,
    TextMatch,
    TypedLiteral,
    Unary,
    Unit,
    Within,
)
from nlql.parser import MAX_DEPTH, MAX_LIST_ITEMS, parse
from nlql.render import quote_key, render_expr
from nlql.span import Span

__all__ = ["BindingFacts", "CheckedQuery", "check", "check_query", "is_vector", "validate"]

_SCHEMA_TYPES = {
    "number": "number", "int": "number", "integer": "number", "float": "number", "double": "number",
    "string": "string", "str": "string", "text": "string", "keyword": "string",
    "date": "datetime", "datetime": "datetime", "timestamp": "datetime",
    "bool": "bool", "boolean": "bool",
    "list": "list", "array": "list",
}
_FIELD_TYPES = {"content": "string", "id": "any", "doc_id": "any", "position": "number"}
_A = {
    "number": "a number", "score": "a score", "string": "a string", "datetime": "a date",
    "bool": "a boolean", "list": "a list", "null": "NULL", "any": "a value",
}
_NUMERIC = frozenset({"number", "score"})
_NOT_CONDITIONS = frozenset({"number", "score", "string", "datetime", "list"})
_MAX_DEPTH = 250  # hand-built IR deeper than this is reported, not recursed into (the parser stops at 200)


def check(
    query: str | Query,
    params: Mapping[Any, Any] | None = None,
    schema: Mapping[str, str] | None = None,
    functions: Mapping[str, int | None] | None = None,
) -> list[Diagnostic]:
    """Every problem in a query, in source order; ``[]`` when it is valid.

    Args:
        query: Query text or an already parsed :class:`~nlql.ir.Query`.
        params: Parameter values by name (``"q"`` or ``"$q"``; positional ones as ``1`` or ``"1"``).
            None means "not known yet": nothing is said about parameters. A mapping (even empty) means
            these are all the parameters: a missing or unused one is a problem, and values are checked.
        schema: Metadata key → type (``number``, ``string``, ``date``, ``bool``, ``list``), used for
            type errors such as ``meta.year == "abc"``. Dotted keys name nested paths. Or a
            :class:`nlql.schema.Schema` (``engine.schema()``, kept from an earlier session): a valid query
            then gets its data warnings (``severity="warning"``: unknown keys, types never seen).
        functions: User functions registered on an engine: name → arity (None for variadic).

    Returns:
        Diagnostics with line, column, span, message and hint. A syntax error is returned as a
        one-element list rather than raised.
    """
    if isinstance(query, str):
        try:
            q = parse(query)
        except NLQLError as exc:
            return exc.with_source(query).diagnostics
    elif isinstance(query, Query):
        q = query
    else:
        raise TypeError(f"check() needs query text or a Query, not {type(query).__name__}")
    from nlql.schema import Schema, data_warnings

    if isinstance(schema, Schema):
        diags = _Checker(q, params, None, functions).run()
        if any(d.severity == "error" for d in diags):
            return diags
        return sorted([*diags, *data_warnings(q, schema)], key=lambda d: (d.line == 0, d.line, d.column))
    return _Checker(q, params, schema, functions).run()


def _big_repr(value: Any) -> str:
    """``repr(value)``, short: a parameter may be an integer too long to print (Python refuses 4,300+ digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**12:
        return "a very large number"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class BindingFacts:
    """What the checker found out about one LET binding; the planner reads it instead of re-deriving.

    Attributes:
        name: The binding's name.
        type: Its checker type: ``number``, ``score``, ``string``, ``datetime``, ``bool``, ``list`` or ``any``.
        score: Its value is a score: a score call, a score binding, or arithmetic / IF over one. A
            comparison of a score (``SIMILARITY(…) > 2``) is a boolean, not a score.
        fusion: It reads a fusion score (RRF / INTERLEAVE / MMR), itself or through another binding.
    """

    name: str
    type: str
    score: bool
    fusion: bool


@dataclass(frozen=True)
class CheckedQuery:
    """A query that passed :func:`check`, with the facts found on the way (what :func:`check_query` returns)."""

    query: Query
    bindings: Mapping[str, BindingFacts]  # in LET order

    @property
    def score_bindings(self) -> tuple[str, ...]:
        """Bindings whose value is a score, in LET order (the first one is the default ORDER BY)."""
        return tuple(n for n, b in self.bindings.items() if b.score)

    @property
    def fusion_bindings(self) -> frozenset[str]:
        """Bindings that read a fusion score (their conditions apply after fusion)."""
        return frozenset(n for n, b in self.bindings.items() if b.fusion)


def check_query(
    query: str | Query,
    params: Mapping[Any, Any] | None = None,
    schema: Mapping[str, str] | None = None,
    functions: Mapping[str, int | None] | None = None,
) -> CheckedQuery:
    """Parse and check a query for execution; raise on any problem; return it with its facts.

    Unlike :func:`check`, parameters are always enforced: ``params=None`` means none are bound, so a
    ``$param`` in the query is an error.

    Args:
        query: Query text or a :class:`~nlql.ir.Query`.
        params: The bound parameters (None → none).
        schema: Optional metadata types, as for :func:`check`.
        functions: User functions (name → arity), as for :func:`check`.

    Returns:
        The parsed query and each binding's type and score-ness (:class:`CheckedQuery`).

    Raises:
        NLQLSyntaxError: The text does not parse.
        LimitError: The text exceeds a parser limit.
        CheckError: The query has semantic problems; ``.diagnostics`` lists all of them.
    """
    source = query if isinstance(query, str) else None
    q = parse(query) if isinstance(query, str) else query
    if not isinstance(q, Query):
        raise TypeError(f"check_query() needs query text or a Query, not {type(query).__name__}")
    checker = _Checker(q, params if params is not None else {}, schema, functions)
    diagnostics = checker.run()
    if diagnostics:
        raise CheckError(diagnostics, source)
    return checker.facts()


def validate(
    query: str | Query,
    params: Mapping[Any, Any] | None = None,
    schema: Mapping[str, str] | None = None,
    functions: Mapping[str, int | None] | None = None,
) -> Query:
    """Parse and check a query for execution; raise on any problem (:func:`check_query` without the facts).

    Returns:
        The parsed query.

    Raises:
        NLQLSyntaxError, LimitError, CheckError: As :func:`check_query`.
    """
    return check_query(query, params, schema, functions).query


# -------------------------------------------------------------------------------------------- helpers


def _value_type(value: Any) -> str | None:
    """The checker type of a bound parameter value; None if NLQL has no such value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (datetime, date)):
        return "datetime"
    if isinstance(value, (list, tuple)):
        return "list"
    return None


def _param_problem(value: Any) -> tuple[str, str, str] | None:
    """(problem, hint, code) when a bound value can never be used; the limits are the parser's (SPEC §8).

    Walks iteratively, so a list nested 100,000 deep is reported, not recursed into.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return "must be a finite number, not " + repr(v), "pass null for a missing value", "param"
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= _MAX_PARAM_INT:
            return "is too large a number", "numbers must be below 1e308", "limit"
        if _is_array(v):
            try:
                finite = bool(v.ndim == 1 and v.dtype.kind in "iuf" and _np_isfinite_all(v))
            except (TypeError, ValueError, AttributeError):  # pragma: no cover - odd array types
                finite = False
            if v.ndim == 1 and v.dtype.kind in "iuf" and not finite:
                return "must be a vector of finite numbers (it holds NaN or infinity)", \
                    "pass a vector of finite floats", "param"
        if isinstance(v, (list, tuple)):
            if depth >= MAX_DEPTH:
                return f"is nested more than {MAX_DEPTH} levels deep", "pass a flat list", "limit"
            if len(v) > MAX_LIST_ITEMS:
                return (f"has {len(v):,} items; the limit is {MAX_LIST_ITEMS:,}",
                        "filter on a shared metadata value instead of listing every item", "limit")
            stack.extend((x, depth + 1) for x in v)
    return None


_MAX_PARAM_INT = 10**308  # the parser's limit for integer literals


def _is_array(value: Any) -> bool:
    """A numpy array (duck-typed, so the checker does not import numpy for queries without one)."""
    return type(value).__module__ == "numpy" and hasattr(value, "ndim") and hasattr(value, "dtype")


def _np_isfinite_all(value: Any) -> bool:
    import numpy as np

    return bool(np.isfinite(value).all())


def is_vector(value: Any) -> bool:
    """Whether a bound value is a query vector for SIMILARITY: a non-empty sequence of real numbers
    (a list, a tuple or a 1-D numpy array; booleans are not numbers)."""
    if _is_array(value):
        return bool(value.ndim == 1 and value.size > 0 and value.dtype.kind in "iuf")
    return (isinstance(value, (list, tuple)) and bool(value)
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value))


def _show(value: Any) -> str:
    """A short repr of a user's value for a message (10**5000 or a deeply nested list has none)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"a {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number_text(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _iso_datetime(text: str) -> bool:
    candidate = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        datetime.fromisoformat(candidate)
    except ValueError:
        try:
            date.fromisoformat(text)
        except ValueError:
            return False
    return True


def _iso_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _misnamed_kwarg(e: Node) -> bool:
    """``k = 60`` inside RRF(…): a named argument written with ``=`` instead of ``=>``."""
    return isinstance(e, Compare) and e.op == "==" and isinstance(e.left, Ref) and e.left.name in ("k", "weights")


def _items(node: Node) -> str:
    """The items of a list as written inside HAS ANY (…): ``"a", "b"`` (or the value itself)."""
    if isinstance(node, ListExpr):
        return ", ".join(_short(x) for x in node.items) or '"a", "b"'
    return _short(node)


def _short(node: Node | None) -> str:
    if node is None:
        return "the value"
    try:
        text = render_expr(node)
    except (TypeError, ValueError):
        return type(node).__name__
    return text if len(text) <= 40 else text[:37] + "…"


class _Checker:
    def __init__(
        self,
        query: Query,
        params: Mapping[Any, Any] | None,
        schema: Mapping[str, str] | None,
        functions: Mapping[str, int | None] | None,
    ) -> None:
        self.query = query
        if params is not None and not isinstance(params, Mapping):
            raise TypeError(f"params must be a mapping of parameter names to values, not {type(params).__name__}")
        self.params = None if params is None else {str(k).lstrip("$"): v for k, v in params.items()}
        # values that can never be used (NaN, 1e400, a 10-million-item list): reported once where used
        self.bad_params: dict[str, tuple[str, str, str]] = {}
        for name, value in (self.params or {}).items():
            problem = _param_problem(value)
            if problem is not None:
                self.bad_params[name] = problem
        self.schema = {k: _SCHEMA_TYPES.get(str(v).lower(), "any") for k, v in (schema or {}).items()}
        self.functions = {k.upper(): v for k, v in (functions or {}).items()}
        self.diagnostics: list[Diagnostic] = []
        self.bindings: dict[str, Binding] = {}
        for b in query.bindings:
            self.bindings.setdefault(b.name, b)
        self.types: dict[str, str] = {}
        self.score_memo: dict[str, bool] = {}
        self.used_params: set[str] = set()
        self.missing_reported: set[str] = set()

    # ------------------------------------------------------------------------------------------ run

    def run(self) -> list[Diagnostic]:
        q = self.query
        self._unit(q.unit)
        self._bindings()
        if q.count is not None:
            self._count_select(q, q.count)
        if q.where is not None:
            self._condition(q.where, self._expr(q.where), "WHERE")
        if q.distinct is not None:
            self._distinct(q.distinct)
        for key in q.order_by:
            if q.count is not None:
                self._count_order_key(q.count, key.expr)
                continue
            t = self._expr(key.expr)
            if t == "list":
                self._report(key.expr, "cannot sort by a list", code="type")
        if q.limit is not None:
            self._count(q.limit, "LIMIT")
        if q.autocut is not None:
            self._autocut(q.autocut, q.limit is None)
        if q.offset is not None:
            self._count(q.offset, "OFFSET")
        for name, (problem, hint, code) in self.bad_params.items():
            if name in self.used_params and name not in self.missing_reported:
                self._report(None, f"parameter ${name} {problem}", hint, code=code)
        if self.params is not None:
            for name in self.params:
                if name not in self.used_params:
                    self._report(None, f"unused parameter ${name}", "remove it from params or use it in the query",
                                 code="param")
        return sorted(self.diagnostics, key=lambda d: (d.span is None, d.span.start if d.span else 0))

    def facts(self) -> CheckedQuery:
        """The binding facts of a checked query (call after :meth:`run`)."""
        fusion = {name for name, b in self.bindings.items()
                  if any(isinstance(n, Call) and n.name.upper() in FUSION_FUNCTIONS for n in b.expr.walk())}
        changed = True
        while changed:  # a binding that uses a fusion binding reads a fusion score too
            changed = False
            for name, b in self.bindings.items():
                if name not in fusion and any(isinstance(n, Ref) and n.name in fusion for n in b.expr.walk()):
                    fusion.add(name)
                    changed = True
        facts = {name: BindingFacts(name, self.types.get(name, "any"), self.score_memo.get(name, False),
                                    name in fusion)
                 for name in self.bindings}
        return CheckedQuery(self.query, facts)

    def _report(self, node: Node | Span | None, message: str, hint: str | None = None, code: str = "check") -> None:
        span = node if isinstance(node, Span) or node is None else node.span
        line, column = (span.line, span.column) if span is not None else (0, 0)
        self.diagnostics.append(Diagnostic(line, column, message, hint, span, code))

    # --------------------------------------------------------------------------------------- clauses

    def _unit(self, unit: Unit) -> None:
        if unit.kind != "SPAN":
            return
        if unit.base not in ("SENTENCE", "CHUNK"):
            what = f"not {unit.base}" if unit.base else "but has no base"
            self._report(unit, f"SPAN works over SENTENCE or CHUNK, {what}",
                         "write SPAN(SENTENCE, window => 2)", code="unit")
        if unit.window is not None:
            self._count(unit.window, "the SPAN window")

    def _distinct(self, d: Distinct) -> None:
        """DISTINCT BY: the keys are ordinary expressions; KEEP is a whole number literal ≥ 1."""
        if not d.keys:
            self._report(d, "DISTINCT BY needs at least one key", "e.g. DISTINCT BY doc_id", code="distinct")
        for key in d.keys:
            self._expr(key)
        e = d.keep
        if e is None:
            return
        hint = "KEEP n keeps the first n rows of each distinct key, e.g. DISTINCT BY doc_id KEEP 2"
        if isinstance(e, Param):
            self._param(e)
            self._report(e, "KEEP takes a whole number written in the query, not a $parameter", hint,
                         code="distinct")
            return
        if not isinstance(e, Literal):
            self._expr(e)
            self._report(e, f"KEEP must be a whole number ≥ 1, not {_short(e)}", hint, code="distinct")
            return
        v = e.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self._report(e, f"KEEP must be a whole number ≥ 1, not {_A[self._expr(e)]}", hint, code="distinct")
        elif not _whole(v):
            self._report(e, f"KEEP must be a whole number ≥ 1, not {_show(v)}", hint, code="distinct")
        elif v < 1:
            self._report(e, f"KEEP must be at least 1, not {v}", hint, code="distinct")

    def _count_select(self, q: Query, c: Count) -> None:
        """``SELECT COUNT(unit) BY …``: a unit that is a row of the store, keys that are values."""
        hint = "SELECT COUNT(SENTENCE), COUNT(CHUNK) or COUNT(DOCUMENT), e.g. SELECT COUNT(DOCUMENT) BY meta.source"
        if q.unit.kind == "SPAN":
            self._report(q.unit, "COUNT cannot count SPAN rows: a span is a window around a sentence, "
                         "one per hit, so it counts the same rows as SENTENCE", hint, code="count")
        for key in c.by:
            t = self._expr(key)
            if t == "score" or self._is_score(key):
                self._report(key, "cannot count BY a score: every row has its own",
                             "count by metadata, e.g. BY meta.source; filter on the score in WHERE", code="count")
        if q.distinct is not None:
            self._report(q.distinct, "DISTINCT BY has no meaning in a COUNT query",
                         "COUNT … BY key counts each distinct key once already", code="count")
        for b in q.bindings:
            if b.name.lower() == "count":
                self._report(b, "a binding named 'count' hides the count of a COUNT query",
                             "choose another name, e.g. n", code="binding")

    def _count_order_key(self, c: Count, key: Node) -> None:
        """ORDER BY in a COUNT query: ``count`` or one of the BY keys (as written there)."""
        if isinstance(key, Ref) and key.name.lower() == "count":
            return
        if any(key == k for k in c.by):
            return
        names = ["count", *(_short(k) for k in c.by)]
        text = _short(key)
        close = difflib.get_close_matches(text, names, n=1, cutoff=0.6)
        hint = (f"did you mean {close[0]}?" if close
                else "sort on " + " or ".join(names) + ", e.g. ORDER BY count DESC")
        self._report(key, f"a COUNT query sorts by count or by a BY key, not {text}", hint, code="count")

    def _autocut(self, e: Node, no_limit: bool) -> None:
        """``LIMIT n AUTOCUT k``: k a whole number ≥ 1 (literal or bound parameter)."""
        hint = "AUTOCUT k keeps the rows before the k-th jump in the first sort key, e.g. LIMIT 10 AUTOCUT 1"
        if no_limit:
            self._report(e, "AUTOCUT needs a LIMIT", "write LIMIT n AUTOCUT k, e.g. LIMIT 10 AUTOCUT 1", code="limit")
        if isinstance(e, Param):
            self._param(e)
            value = self._param_value(e)
            if value is _UNBOUND:
                return
            shown = f"AUTOCUT ${e.name} is {_show(value)}; it"
            least = "must be at least 1"
        elif isinstance(e, Literal):
            value = e.value
            shown = "AUTOCUT"
            least = f"must be at least 1, not {_show(value)}"
        else:
            self._expr(e)
            self._report(e, "AUTOCUT must be a whole number or a $parameter", hint, code="limit")
            return
        if not _whole(value):
            self._report(e, f"{shown} must be a whole number", hint, code="limit")
        elif value < 1:
            self._report(e, f"{shown} {least}", hint, code="limit")

    def _count(self, e: Node, what: str) -> None:
        """LIMIT, OFFSET and the SPAN window: a whole number ≥ 0, literal or bound parameter."""
        if isinstance(e, Param):
            self._param(e)
            value = self._param_value(e)
            if value is _UNBOUND:
                return
            shown = f"{what} ${e.name} is {_show(value)}; it"
        elif isinstance(e, Literal):
            value = e.value
            shown = what
        else:
            self._expr(e)
            self._report(e, f"{what} must be a whole number or a $parameter", code="limit")
            return
        if not _whole(value):
            self._report(e, f"{shown} must be a whole number", code="limit")
        elif value < 0:
            self._report(e, f"{shown} must not be negative", code="limit")

    def _bindings(self) -> None:
        first: dict[str, Binding] = {}
        for b in self.query.bindings:
            earlier = first.get(b.name)
            if earlier is not None:
                where = f" at line {earlier.span.line}, column {earlier.span.column}" if earlier.span else ""
                self._report(b, f"duplicate binding '{b.name}'", f"'{b.name}' is first bound{where}",
                             code="binding")
            else:
                first[b.name] = b
            lower = b.name.lower()
            if lower in BUILTIN_FIELDS:
                self._report(b, f"binding '{b.name}' shadows the built-in field {lower}",
                             f"choose another name, e.g. {lower}_score", code="binding")
            elif lower == "meta":
                self._report(b, "'meta' cannot be a binding name", "it starts metadata paths: meta.<key>",
                             code="binding")
        # Bindings are checked dependencies first, iteratively: a chain of thousands of bindings
        # (a → b → c …) never recurses, and a Ref just looks up the type of an already checked binding.
        for name in self._dependency_order():
            expr = self.bindings[name].expr
            self.types[name] = self._expr(expr)
            self.score_memo[name] = self._is_score(expr)
        for b in self.query.bindings:
            if self.bindings[b.name] is not b:
                self._expr(b.expr)

    def _dependency_order(self) -> list[str]:
        """Binding names, each after the bindings it uses; reports each cycle once on the way.

        A binding in a cycle comes after the others of its cycle that were reached first; its uses of
        them see the type ``any`` (the cycle is already an error).
        """
        graph = {name: [r for r in b.expr.walk() if isinstance(r, Ref) and r.name in self.bindings]
                 for name, b in self.bindings.items()}
        state: dict[str, int] = {}  # 1 = on the current path, 2 = done
        reported: set[frozenset[str]] = set()
        order: list[str] = []
        for root in graph:
            if state.get(root):
                continue
            path: list[str] = [root]
            iters = [iter(graph[root])]
            state[root] = 1
            while iters:
                ref = next(iters[-1], None)
                if ref is None:
                    done = path.pop()
                    state[done] = 2
                    order.append(done)
                    iters.pop()
                    continue
                target = ref.name
                if state.get(target) == 1:
                    cycle = path[path.index(target):]
                    key = frozenset(cycle)
                    if key not in reported:
                        reported.add(key)
                        if len(cycle) == 1:
                            self._report(ref, f"binding '{target}' refers to itself",
                                         "a binding cannot use its own value", code="cycle")
                        else:
                            shown = cycle if len(cycle) <= 6 else [*cycle[:3], "…", *cycle[-2:]]
                            chain = " → ".join([*shown, target])
                            if len(cycle) > 6:
                                chain += f" ({len(cycle)} bindings)"
                            self._report(ref, f"bindings refer to each other in a cycle: {chain}",
                                         "break the cycle: a binding may only use bindings that do not use it",
                                         code="cycle")
                elif not state.get(target):
                    state[target] = 1
                    path.append(target)
                    iters.append(iter(graph[target]))
        return order

    def _is_score(self, e: Node) -> bool:
        """Whether an expression is a score: a score call, a score binding, or arithmetic over one."""
        if isinstance(e, Call):
            name = e.name.upper()
            if name in SCORE_FUNCTIONS:
                return True
            if name == "IF" and len(e.args) == 3:
                return self._is_score(e.args[1]) or self._is_score(e.args[2])
            return False
        if isinstance(e, Ref):
            return self.score_memo.get(e.name, False)
        if isinstance(e, Binary) and e.op in ("+", "-", "*", "/"):
            return self._is_score(e.left) or self._is_score(e.right)
        if isinstance(e, Unary) and e.op == "-":
            return self._is_score(e.operand)
        return False

    # ------------------------------------------------------------------------------------ parameters

    def _param(self, p: Param) -> None:
        self.used_params.add(p.name)
        bad = self.bad_params.get(p.name)
        if bad is not None and p.name not in self.missing_reported:
            self.missing_reported.add(p.name)
            self._report(p, f"parameter ${p.name} {bad[0]}", bad[1], code=bad[2])
        if self.params is None or p.name in self.params or p.name in self.missing_reported:
            return
        self.missing_reported.add(p.name)
        self._report(p, f"missing parameter ${p.name}", f"pass it in params, e.g. params={{'{p.name}': …}}",
                     code="param")

    def _param_value(self, p: Param) -> Any:
        if self.params is None or p.name not in self.params or p.name in self.bad_params:
            return _UNBOUND
        return self.params[p.name]

    # ----------------------------------------------------------------------------------- expressions

    def _list_ok(self, e: ListExpr) -> bool:
        """The parser's list-length limit, for IR that did not come from text (``Query.from_dict``)."""
        if len(e.items) <= MAX_LIST_ITEMS:
            return True
        self._report(e, f"the list has {len(e.items):,} items; the limit is {MAX_LIST_ITEMS:,}",
                     "filter on a shared metadata value instead of listing every item", code="limit")
        return False

    def _condition(self, e: Node, t: str, where: str) -> None:
        if t in _NOT_CONDITIONS:
            hint = "compare it, e.g. rel >= 0.5" if t in _NUMERIC else "compare it, e.g. meta.status == \"published\""
            self._report(e, f"{where} needs a condition, not {_A[t]}", hint, code="type")

    def _expr(self, e: Node, depth: int = 0) -> str:  # noqa: C901 - one case per node type
        if depth > _MAX_DEPTH:
            self._report(e, "the expression is nested too deeply", code="limit")
            return "any"
        d = depth + 1
        if isinstance(e, Literal):
            v = e.value
            if v is None:
                return "null"
            if isinstance(v, bool):
                return "bool"
            if isinstance(v, str):
                return "string"
            return "number"
        if isinstance(e, TypedLiteral):
            self._typed(e, e.type, e.value)
            return "datetime"
        if isinstance(e, Param):
            self._param(e)
            value = self._param_value(e)
            if value is _UNBOUND:
                return "any"
            t = _value_type(value)
            if t is None:
                self._report(e, f"parameter ${e.name} has an unsupported type {type(value).__name__}",
                             "use a string, number, boolean, null, date or list", code="param")
                return "any"
            return t
        if isinstance(e, Field):
            return _FIELD_TYPES.get(e.name, "any")
        if isinstance(e, Meta):
            return self.schema.get(".".join(e.keys), "any")
        if isinstance(e, Ref):
            if e.name in self.bindings:
                return self.types.get(e.name, "any")
            self._unknown_name(e)
            return "any"
        if isinstance(e, ListExpr):
            if not self._list_ok(e):
                return "list"
            for item in e.items:
                self._expr(item, d)
            return "list"
        if isinstance(e, Call):
            return self._call(e, d)
        if isinstance(e, Unary):
            t = self._expr(e.operand, d)
            if e.op == "NOT":
                self._condition(e.operand, t, "NOT")
                return "bool"
            self._arith_operand(e.operand, t, "-")
            return "score" if t == "score" else "number"
        if isinstance(e, Binary):
            lt, rt = self._expr(e.left, d), self._expr(e.right, d)
            if e.op in ("AND", "OR"):
                self._condition(e.left, lt, e.op)
                self._condition(e.right, rt, e.op)
                return "bool"
            self._arith_operand(e.left, lt, e.op)
            self._arith_operand(e.right, rt, e.op)
            if "datetime" in (lt, rt):
                return "any"
            return "score" if "score" in (lt, rt) else "number"
        if isinstance(e, Compare):
            self._comparable(e, e.left, self._expr(e.left, d), e.right, self._expr(e.right, d))
            return "bool"
        if isinstance(e, In):
            t = self._expr(e.expr, d)
            if isinstance(e.options, ListExpr):
                if not self._list_ok(e.options):
                    return "bool"
                for item in e.options.items:
                    self._comparable(item, e.expr, t, item, self._expr(item, d))
            else:
                ot = self._expr(e.options, d)
                if ot not in ("list", "any"):
                    self._report(e.options, f"IN needs a list, not {_A[ot]}", 'write IN ("a", "b")', code="type")
            return "bool"
        if isinstance(e, Between):
            t = self._expr(e.expr, d)
            self._comparable(e.low, e.expr, t, e.low, self._expr(e.low, d))
            self._comparable(e.high, e.expr, t, e.high, self._expr(e.high, d))
            return "bool"
        if isinstance(e, IsNull):
            self._expr(e.expr, d)
            return "bool"
        if isinstance(e, TextMatch):
            self._text_match(e, d)
            return "bool"
        if isinstance(e, Within):
            self._within(e, d)
            return "bool"
        if isinstance(e, Has):
            self._has(e, d)
            return "bool"
        return "any"

    def _has(self, e: Has, d: int) -> None:
        """``x HAS v`` / ``x HAS ANY (…)`` / ``x HAS ALL (…)``: membership on lists, ``==`` on scalars."""
        t = self._expr(e.expr, d)
        if t in ("score", "bool"):
            self._report(e.expr, f"HAS needs a list (or a value), not {_A[t]}",
                         'e.g. meta.tags HAS "rag"', code="type")
        word = "HAS" if e.quantifier is None else f"HAS {e.quantifier}"
        element = "any" if t == "list" else t
        if e.quantifier is None:
            vt = self._expr(e.value, d)
            if isinstance(e.value, ListExpr) or vt == "list":
                self._report(e.value, "HAS takes one value, not a list",
                             f'for several values write HAS ANY ({_items(e.value)}) or HAS ALL ({_items(e.value)})',
                             code="type")
            elif vt != "null":
                self._comparable(e.value, e.expr, element, e.value, vt)
            return
        if isinstance(e.value, ListExpr):
            if not self._list_ok(e.value):
                return
            for item in e.value.items:
                it = self._expr(item, d)
                if it == "list":
                    self._report(item, f"the values of {word} must be single values, not lists", code="type")
                elif it != "null":
                    self._comparable(item, e.expr, element, item, it)
            return
        vt = self._expr(e.value, d)
        if vt not in ("list", "any"):
            self._report(e.value, f"{word} needs a list, not {_A[vt]}",
                         f'write {word} ("a", "b"), or HAS "a" for one value', code="type")

    def _unknown_name(self, ref: Ref) -> None:
        name = ref.name
        if name.lower() == "meta":
            self._report(ref, "'meta' needs a key", "write meta.<key>, e.g. meta.author", code="name")
            return
        from nlql.schema import closest

        # one ranking by edit distance over bindings, built-in fields and metadata keys; ties go to the
        # earlier group, so `rr` with a binding `r` suggests r, not meta.rr
        names = [*self.bindings, *BUILTIN_FIELDS]
        best = closest(name, [*names, *self.schema])
        if name.upper() in BUILTINS or name.upper() in self.functions:
            hint = f"did you mean {name.upper()}(…)? functions need parentheses"
        elif best is not None and best in names:
            hint = f"did you mean '{best}'?"
        else:
            key = best if best is not None else name
            hint = f"did you mean meta.{'.'.join(quote_key(k) for k in key.split('.'))}?"
        self._report(ref, f"unknown name '{name}'", hint, code="name")

    def _arith_operand(self, e: Node, t: str, op: str) -> None:
        if t in ("string", "bool", "list"):
            self._report(e, f"arithmetic on {_A[t]}: '{op}' needs numbers", code="type")

    def _comparable(self, at: Node, left: Node, lt: str, right: Node, rt: str) -> None:
        """Report a comparison that can never be TRUE because the two sides have incompatible types."""
        if "any" in (lt, rt) or "null" in (lt, rt):
            return
        if lt in _NUMERIC and rt in _NUMERIC or lt == rt:
            return
        pair = {lt, rt}
        if "list" in pair:
            self._report(at, f"cannot compare {_A[lt]} with {_A[rt]}", "to test membership, write x IN (a, b)",
                         code="type")
            return
        string_side = left if lt == "string" else right if rt == "string" else None
        literal = self._constant(string_side)
        if pair & _NUMERIC and "string" in pair:
            if isinstance(literal, str) and _is_number_text(literal):
                return  # numbers compare with numeric strings numerically
            score = "score" in pair
            hint = ("a score is a number, e.g. rel >= 0.3" if score
                    else f"{_short(string_side)} is not a number" if literal is not None else None)
            self._report(at, f"cannot compare {_A[lt]} with {_A[rt]}", hint, code="type")
            return
        if pair == {"datetime", "string"}:
            if literal is None or _iso_datetime(literal):
                return  # ISO-8601 strings compare with dates as dates
            self._report(at, f"{_short(string_side)} is not a date", "write an ISO-8601 date, e.g. '2024-06-01'",
                         code="type")
            return
        self._report(at, f"cannot compare {_A[lt]} with {_A[rt]}", code="type")

    def _constant(self, e: Node | None) -> Any:
        """The value of a literal or bound parameter; None for anything else."""
        if isinstance(e, Literal):
            return e.value
        if isinstance(e, Param):
            value = self._param_value(e)
            return None if value is _UNBOUND else value
        return None

    def _typed(self, node: Node, kind: str, value: str) -> None:
        if kind == "DATE" and not _iso_date(value):
            hint = ("use TIMESTAMP for a date with a time" if _iso_datetime(value)
                    else "write an ISO-8601 date, e.g. DATE '2024-06-01'")
            self._report(node, f"invalid DATE {value!r}", hint, code="type")
        elif kind == "TIMESTAMP" and not _iso_datetime(value):
            self._report(node, f"invalid TIMESTAMP {value!r}",
                         "write an ISO-8601 timestamp, e.g. TIMESTAMP '2024-06-01T10:00:00Z'", code="type")

    def _string_operand(self, e: Node, t: str, what: str) -> None:
        if t in ("number", "score", "bool", "datetime", "list"):
            self._report(e, f"{what} needs a string, not {_A[t]}", code="type")

    def _text_match(self, e: TextMatch, d: int) -> None:
        t = self._expr(e.expr, d)
        pt = self._expr(e.pattern, d)
        self._string_operand(e.expr, t, e.op)
        self._string_operand(e.pattern, pt, e.op)
        if e.op != "MATCH":
            return
        pattern: Any = None
        if isinstance(e.pattern, Literal):
            pattern = e.pattern.value
        elif isinstance(e.pattern, Param):
            value = self._param_value(e.pattern)
            pattern = None if value is _UNBOUND else value
        if isinstance(pattern, str):
            try:
                re.compile(pattern)
            except (re.error, RecursionError, OverflowError, ValueError) as exc:
                detail = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
                pos = getattr(exc, "pos", None)
                hint = f"the problem is at position {pos} of the pattern" if pos is not None else None
                self._report(e.pattern, f"invalid regular expression: {detail}", hint, code="regex")

    def _within(self, e: Within, d: int) -> None:
        t = self._expr(e.expr, d)
        if isinstance(e.expr, Field):
            self._report(e.expr, f"WITHIN needs a date, not {e.expr.name}", 'e.g. meta.date WITHIN "last week"',
                         code="type")
        elif t in ("number", "score", "bool", "list"):
            self._report(e.expr, f"WITHIN needs a date, not {_A[t]}", 'e.g. meta.date WITHIN "last week"',
                         code="type")
        if e.period is not None:
            pt = self._expr(e.period, d)
            ok = isinstance(e.period, (Literal, Param)) and pt in ("string", "any")
            if not ok:
                self._report(e.period, "WITHIN needs a period string", 'e.g. WITHIN "last week" or WITHIN $period',
                             code="type")
            return
        for bound in (e.low, e.high):
            if bound is None:
                continue
            bt = self._expr(bound, d)
            if bt in ("number", "score", "bool", "list"):
                self._report(bound, f"a WITHIN range needs dates, not {_A[bt]}",
                             "e.g. WITHIN (DATE '2024-01-01', DATE '2024-02-01')", code="type")
            elif isinstance(bound, Literal) and isinstance(bound.value, str) and not _iso_datetime(bound.value):
                self._report(bound, f"{_short(bound)} is not a date", "write an ISO-8601 date, e.g. '2024-06-01'",
                             code="type")

    # ------------------------------------------------------------------------------------- functions

    def _query_vector(self, name: str, index: int, arg: Node) -> bool:
        """SIMILARITY's second argument given as DOC("id") or a $parameter bound to a vector: checked
        by :meth:`_score_text`, not as an ordinary expression (a vector is no NLQL value elsewhere)."""
        if name not in TEXT_SCORES or index != 1:
            return False
        if isinstance(arg, Call) and arg.name.upper() == QUERY_BY_EXAMPLE:
            return True
        return name == "SIMILARITY" and isinstance(arg, Param) and is_vector(self._param_value(arg))

    def _call(self, e: Call, d: int) -> str:
        name = e.name.upper()
        if name == QUERY_BY_EXAMPLE:
            for arg in e.args:
                self._expr(arg, d)
            self._report(e, "DOC(…) is only allowed as the second argument of SIMILARITY",
                         'e.g. SIMILARITY(content, DOC("d7")) ranks rows by similarity to document d7', code="score")
            return "any"
        sig = BUILTINS.get(name)
        if sig is None:
            return self._user_call(e, name, d)
        n = len(e.args)
        if n < sig.min_args or (sig.max_args is not None and n > sig.max_args):
            self._report(e, f"{name} takes {sig.arity()}, got {n}", _ARITY_HINTS.get(name), code="arity")
        self._kwargs(e, sig)
        # `RRF(a, b, k = 60)` is a mistyped named argument: reported once, by _fusion, not as unknown name k.
        types = ["any" if (name in FUSION_FUNCTIONS and _misnamed_kwarg(arg)) or self._query_vector(name, i, arg)
                 else self._expr(arg, d) for i, arg in enumerate(e.args)]
        for _, value in e.kwargs:
            self._expr(value, d)
        if name in TEXT_SCORES:
            self._score_call(e, name)
        elif name in FUSION_FUNCTIONS:
            self._fusion(e, name, types)
        elif name == "HIGHLIGHT":
            if n >= 1 and not (isinstance(e.args[0], Field) and e.args[0].name == "content"):
                self._report(e.args[0], "the first argument of HIGHLIGHT must be content",
                             'write HIGHLIGHT(content, "your text")', code="type")
            if n >= 2:
                self._arm_text(e.args[1], name, 'e.g. HIGHLIGHT(content, $q) or HIGHLIGHT(content, "rag")')
        elif name == "IF":
            if n == 3:
                self._condition(e.args[0], types[0], "the first argument of IF")
                a, b = types[1], types[2]
                if a == b:
                    return a
                if {a, b} <= {"number", "score"}:
                    return "score"
                return "any"
            return "any"
        elif name == "RECENCY":
            if n >= 1 and types[0] in ("number", "score", "bool", "list"):
                self._report(e.args[0], f"RECENCY needs a date, not {_A[types[0]]}", "e.g. RECENCY(meta.date)",
                             code="type")
            self._half_life(e.kwarg("half_life"))
        elif name == "GRAPH":
            if n >= 1:
                self._arm_text(e.args[0], name, 'e.g. GRAPH($q) or GRAPH("Bertrand Russell", hops => 2)')
            self._spread(e)
        elif name == "TEMPORAL":
            if n >= 1:
                self._temporal_path(e.args[0], types[0])
            if n >= 2:
                self._arm_text(e.args[1], name, "e.g. TEMPORAL(meta.date, $q) or TEMPORAL(meta.date, \"last week\")")
        elif name in ("DATE", "TIMESTAMP"):
            if n == 1 and isinstance(e.args[0], Literal) and isinstance(e.args[0].value, str):
                self._typed(e.args[0], name, e.args[0].value)
            elif n == 1:
                self._string_operand(e.args[0], types[0], name)
        else:
            for i, (arg, t) in enumerate(zip(e.args, types, strict=False)):
                if sig.arg_type(i) == "string":
                    self._string_operand(arg, t, name)
        return sig.returns

    def _user_call(self, e: Call, name: str, d: int) -> str:
        for arg in e.args:
            self._expr(arg, d)
        for _, value in e.kwargs:
            self._expr(value, d)
        if name not in self.functions:
            close = difflib.get_close_matches(name, [*BUILTINS, *self.functions], n=1, cutoff=0.6)
            hint = (f"did you mean {close[0]}?" if close
                    else "the built-in functions are " + ", ".join(BUILTINS))
            self._report(e, f"unknown function '{e.name}'", hint, code="function")
            return "any"
        arity = self.functions[name]
        if arity is not None and len(e.args) != arity:
            self._report(e, f"{name} takes {arity} argument{'s' * (arity != 1)}, got {len(e.args)}", code="arity")
        if e.kwargs:
            self._report(e, f"{name} takes no named arguments", "user functions take positional arguments only",
                         code="arity")
        return "any"

    def _kwargs(self, e: Call, sig: FunctionSig) -> None:
        seen: set[str] = set()
        for key, value in e.kwargs:
            if key in seen:
                self._report(value, f"named argument '{key}' is given twice", code="arity")
            seen.add(key)
            if key in sig.named_args:
                continue
            if key in _ARM_KWARGS:
                what, hint = _ARM_KWARGS[key]
                self._report(value, f"{sig.name} has no {key}: {what}", hint, code="arity")
                continue
            if not sig.named:
                self._report(value, f"{sig.name} takes no named arguments", code="arity")
                continue
            close = difflib.get_close_matches(key, sig.named_args, n=1, cutoff=0.6)
            allowed = " or ".join(sig.named_args)
            hint = f"did you mean {close[0]}?" if close else f"{sig.name} accepts {allowed}"
            self._report(value, f"{sig.name} has no named argument '{key}'", hint, code="arity")

    def _score_call(self, e: Call, name: str) -> None:
        self._arm_min(e, name)
        if not e.args:
            return
        field = e.args[0]
        if not (isinstance(field, Field) and field.name == "content"):
            self._report(field, f"the first argument of {name} must be content",
                         f'write {name}(content, "your text")', code="score")
        if len(e.args) < 2:
            return
        text = e.args[1]
        allow_list = name == "SIMILARITY"
        if isinstance(text, ListExpr) and allow_list:
            if not text.items:
                self._report(text, "SIMILARITY needs at least one text in the list", code="score")
            for item in text.items:
                self._score_text(item, name, in_list=True)
            return
        self._score_text(text, name, in_list=False, allow_list=allow_list)

    def _doc_example(self, doc: Call, name: str) -> None:
        """``DOC("id")`` as SIMILARITY's text: one id, a string literal or a $parameter bound to one."""
        hint = 'e.g. SIMILARITY(content, DOC("d7")) WHERE doc_id != "d7"'
        if name != "SIMILARITY":
            self._report(doc, f"{name} cannot take DOC(…): only SIMILARITY compares with a document's vector",
                         hint, code="score")
        if doc.kwargs:
            self._report(doc, "DOC takes no named arguments", hint, code="arity")
        if len(doc.args) != 1:
            self._report(doc, f"DOC takes 1 argument (a document id), got {len(doc.args)}", hint, code="arity")
            for arg in doc.args:
                self._expr(arg)
            return
        arg = doc.args[0]
        if isinstance(arg, Literal) and isinstance(arg.value, (str, int)) and not isinstance(arg.value, bool):
            return
        if isinstance(arg, Param):
            self._param(arg)
            value = self._param_value(arg)
            if value is _UNBOUND or (isinstance(value, (str, int)) and not isinstance(value, bool)):
                return
            self._report(arg, f"${arg.name} must be a document id for DOC, not {type(value).__name__}", hint,
                         code="score")
            return
        self._expr(arg)
        self._report(arg, f"DOC needs a document id (a string literal or a $parameter), not {_short(arg)}", hint,
                     code="score")

    def _score_text(self, text: Node, name: str, in_list: bool, allow_list: bool = False) -> None:
        what = "each text" if in_list else "the text"
        if isinstance(text, Literal) and isinstance(text.value, str):
            return
        if isinstance(text, Call) and text.name.upper() == QUERY_BY_EXAMPLE and not in_list:
            self._doc_example(text, name)
            return
        if isinstance(text, Param):
            value = self._param_value(text)
            if value is _UNBOUND or isinstance(value, str):
                return
            if allow_list and isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
                return
            if allow_list and not in_list and is_vector(value):
                self._param(text)  # not walked by _expr (a vector is no NLQL value elsewhere)
                return
            kind = "a string, a list of strings or a vector of numbers" if allow_list else "a string"
            self._report(text, f"${text.name} must be {kind} for {name}, not {type(value).__name__}",
                         code="score")
            return
        if isinstance(text, ListExpr):
            self._report(text, f"{name} takes one text, not a list", "fuse several with RRF over BM25 bindings",
                         code="score")
            return
        options = "a string literal or a $parameter" + ("" if in_list or not allow_list else ", or a list of them")
        self._report(text, f"{what} of {name} must be {options}", code="score")

    def _fusion(self, e: Call, name: str, types: list[str]) -> None:
        for arg, t in zip(e.args, types, strict=False):
            if _misnamed_kwarg(arg):
                assert isinstance(arg, Compare) and isinstance(arg.left, Ref)
                self._report(arg, f"the arguments of {name} are arms, not settings",
                             f"named arguments use =>: {arg.left.name} => {_short(arg.right)}", code="score")
            elif t not in _NUMERIC and t != "any":
                self._report(arg, f"an arm of {name} must be a number or a score, not {_A[t]}",
                             f'e.g. {name}(sem, kw, RECENCY(meta.date)): each arm ranks rows by its value',
                             code="score")
        self._window(e.kwarg("window"), name)
        if name == "MMR":
            self._mmr_lambda(e.kwarg("lambda"))
        if name == "FUSE":
            self._fuse_method(e.kwarg("method"))
            weights = e.kwarg("weights")
            if weights is not None:
                self._weights(weights, len(e.args), name)
            return
        if name != "RRF":
            return
        k = e.kwarg("k")
        if k is not None:
            value = k.value if isinstance(k, Literal) else self._param_value(k) if isinstance(k, Param) else None
            if value is _UNBOUND:
                pass
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                self._report(k, "RRF k must be a positive number", "the usual value is k => 60", code="score")
        weights = e.kwarg("weights")
        if weights is not None:
            self._weights(weights, len(e.args))

    def _fuse_method(self, node: Node | None) -> None:
        """FUSE's ``method => "minmax" | "dbsf"`` (a string literal or a $parameter bound to one)."""
        if node is None or (isinstance(node, Param) and self._param_value(node) is _UNBOUND):
            return
        value = self._constant(node) if isinstance(node, (Literal, Param)) else _UNBOUND
        if isinstance(value, str) and value in FUSE_METHODS:
            return
        methods = " or ".join(f'"{m}"' for m in FUSE_METHODS)
        close = difflib.get_close_matches(value.lower(), FUSE_METHODS, n=1, cutoff=0.5) if isinstance(value, str) \
            else None
        hint = (f'did you mean "{close[0]}"?' if close
                else f'FUSE normalises each arm by {methods}, e.g. FUSE(sem, kw, method => "minmax")')
        shown = repr(value) if isinstance(value, str) else _short(node)
        self._report(node, f"FUSE method must be {methods}, not {shown}", hint, code="score")

    def _mmr_lambda(self, node: Node | None) -> None:
        """MMR's ``lambda => λ``: a number in [0, 1] (1 is pure relevance, 0 pure diversity)."""
        if node is None or (isinstance(node, Param) and self._param_value(node) is _UNBOUND):
            return
        value = self._constant(node) if isinstance(node, (Literal, Param)) else _UNBOUND
        ok = (value is not _UNBOUND and not isinstance(value, bool) and isinstance(value, (int, float))
              and 0 <= value <= 1)
        if not ok:
            shown = _short(node) if value is _UNBOUND or isinstance(node, Literal) else repr(value)
            self._report(node, f"MMR lambda must be a number between 0 and 1, not {shown}",
                         "e.g. MMR(s, lambda => 0.5): 1 orders by relevance only, lower values favour diversity",
                         code="score")

    def _window(self, w: Node | None, name: str) -> None:
        """``window => n``: how deep each arm of a fusion ranks; a whole number ≥ 1."""
        if w is None:
            return
        value = self._constant(w) if isinstance(w, (Literal, Param)) else _UNBOUND
        if isinstance(w, Param) and self._param_value(w) is _UNBOUND:
            return
        if not (isinstance(w, (Literal, Param)) and _whole(value) and value >= 1):
            example = "MMR(s, window => 100)" if name == "MMR" else f"{name}(sem, kw, window => 200)"
            self._report(w, f"{name} window must be a whole number of rows, at least 1",
                         f"e.g. {example}", code="score")

    def _arm_min(self, e: Call, name: str) -> None:
        """``min => x`` on SIMILARITY / BM25: a number (rows below it are out of that arm)."""
        m = e.kwarg("min")
        if m is None:
            return
        if isinstance(m, Param) and self._param_value(m) is _UNBOUND:
            return
        value = self._constant(m) if isinstance(m, (Literal, Param)) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self._report(m, f"{name} min must be a number", f"e.g. {name}(content, $q, min => "
                         f"{'0.3' if name == 'SIMILARITY' else '1.0'})", code="score")

    def _weights(self, w: Node, arms: int, name: str = "RRF") -> None:
        values: list[Any]
        if isinstance(w, ListExpr):
            values = []
            for item in w.items:
                if isinstance(item, Param):
                    values.append(self._param_value(item))  # an unbound one is checked once bound
                elif isinstance(item, Literal):
                    values.append(item.value)
                else:
                    values.append("?")
        elif isinstance(w, Param):
            v = self._param_value(w)
            if v is _UNBOUND:
                return
            if not isinstance(v, (list, tuple)):
                self._report(w, f"{name} weights must be a list of numbers", code="score")
                return
            values = list(v)
        else:
            self._report(w, f"{name} weights must be a list of numbers", "e.g. weights => [2, 1]", code="score")
            return
        if any(v is not _UNBOUND and (isinstance(v, bool) or not isinstance(v, (int, float))) for v in values):
            self._report(w, f"{name} weights must be a list of numbers", "e.g. weights => [2, 1]", code="score")
        elif len(values) != arms:
            self._report(w, f"{name} has {arms} arms but {len(values)} weights", "give one weight per argument",
                         code="score")

    def _arm_text(self, text: Node, name: str, hint: str) -> None:
        """The text of GRAPH / TEMPORAL: a string literal or a $parameter bound to a string."""
        if isinstance(text, Literal) and isinstance(text.value, str):
            return
        if isinstance(text, Param):
            value = self._param_value(text)
            if value is _UNBOUND or isinstance(value, str):
                return
            self._report(text, f"${text.name} must be a string for {name}, not {type(value).__name__}", hint,
                         code="type")
            return
        self._report(text, f"{name} needs a text (a string literal or a $parameter), not {_short(text)}", hint,
                     code="type")

    def _temporal_path(self, path: Node, t: str) -> None:
        """TEMPORAL's first argument: a metadata path holding dates (whether it does is known with data only)."""
        if not isinstance(path, Meta):
            self._report(path, f"the first argument of TEMPORAL must be a metadata path, not {_short(path)}",
                         "e.g. TEMPORAL(meta.date, $q)", code="type")
        elif t in ("number", "score", "bool", "list"):
            self._report(path, f"TEMPORAL needs a date, not {_A[t]}", "e.g. TEMPORAL(meta.date, $q)", code="type")

    def _spread(self, e: Call) -> None:
        """GRAPH's ``hops`` (a whole number from 0 to MAX_GRAPH_HOPS) and ``decay`` (a number in [0, 1])."""
        for key, ok, message, hint in (
            ("hops", lambda v: _whole(v) and v >= 0, "GRAPH hops must be a whole number >= 0",
             "e.g. GRAPH($q, hops => 2); hops => 0 scores only the entities named in the text"),
            ("hops", lambda v: not _whole(v) or v <= MAX_GRAPH_HOPS, f"GRAPH hops must be at most {MAX_GRAPH_HOPS}",
             "a handful of hops reaches most of a co-occurrence graph; e.g. GRAPH($q, hops => 3)"),
            ("decay", lambda v: not isinstance(v, bool) and isinstance(v, (int, float)) and 0 <= v <= 1,
             "GRAPH decay must be a number between 0 and 1", "e.g. GRAPH($q, decay => 0.5)"),
        ):
            node = e.kwarg(key)
            if node is None or (isinstance(node, Param) and self._param_value(node) is _UNBOUND):
                continue
            value = self._constant(node) if isinstance(node, (Literal, Param)) else _UNBOUND
            if value is _UNBOUND or not ok(value):
                if value is _UNBOUND and message.endswith(f"at most {MAX_GRAPH_HOPS}"):
                    continue  # (reported once, as not a whole number)
                shown = _short(node) if value is _UNBOUND or isinstance(node, Literal) else _big_repr(value)
                self._report(node, f"{message}, not {shown}", hint, code="type")

    def _half_life(self, h: Node | None) -> None:
        if h is None:
            return
        value = h.value if isinstance(h, Literal) else self._param_value(h) if isinstance(h, Param) else None
        if value is _UNBOUND:
            return
        if not isinstance(value, str) or parse_duration(value) is None:
            self._report(h, "half_life must be a duration such as \"90d\"", "units: s, m, h, d, w, y",
                         code="arity")


class _Unbound:
    def __repr__(self) -> str:
        return "<unbound>"


_UNBOUND: Any = _Unbound()

#: Named arguments of arms, reported in their own words when given to a function without them.
_ARM_KWARGS = {
    "min": ("min => is an arm threshold of SIMILARITY and BM25",
            "filter rows with WHERE, or write SIMILARITY(content, $q, min => 0.3)"),
    "window": ("window => is the arm depth of RRF and INTERLEAVE",
               "write RRF(a, b, window => 200)"),
}

_ARITY_HINTS = {
    "SIMILARITY": 'write SIMILARITY(content, "your text")',
    "BM25": 'write BM25(content, "your text")',
    "RRF": "write RRF(a, b, k => 60) over two or more arms (scores or numbers)",
    "INTERLEAVE": "write INTERLEAVE(a, b) over two or more arms (scores or numbers)",
    "MMR": "write MMR(s, lambda => 0.5, window => 100) over one arm (a score or a number)",
    "IF": "write IF(condition, then, else)",
    "COUNT": 'write COUNT(content, "needle")',
    "NOW": "write NOW()",
}
