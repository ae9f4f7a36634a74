"""The IR: frozen, slotted, hashable dataclasses for what the user wrote.

Spans are excluded from equality and hashing, so two identical calls written in different places are
equal and deduplication is a dict lookup. The IR serialises to plain JSON (``Query.to_dict``) and back
(``Query.from_dict``, which validates fully and names the JSON path of a bad field), so an agent can emit
queries as JSON; ``query_json_schema()`` describes that JSON (JSON Schema 2020-12).

Conventions
- Keywords and built-in function names are stored upper-case (``Call.name == "SIMILARITY"``).
- ``=`` is stored as ``==`` and ``<>`` as ``!=``.
- A bare identifier that is a built-in field is a :class:`Field`; any other bare identifier is a
  :class:`Ref` (a LET binding reference; the checker reports unknown ones).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

from nlql.errors import IRValidationError
from nlql.span import Span

BUILTIN_FIELDS = ("content", "id", "doc_id", "position")
UNIT_KINDS = ("SENTENCE", "CHUNK", "DOCUMENT", "SPAN")
COMPARE_OPS = ("==", "!=", "<", "<=", ">", ">=")
ARITH_OPS = ("+", "-", "*", "/")
TEXT_OPS = ("CONTAINS", "LIKE", "MATCH")
TYPED_LITERALS = ("DATE", "TIMESTAMP")


@dataclass(frozen=True, slots=True)
class Node:
    """Base of every IR node. ``span`` locates the node in the query text (not part of equality)."""

    span: Span | None = field(default=None, compare=False, repr=False, kw_only=True)

    KIND: ClassVar[str] = "node"

    def children(self) -> Iterator[Node]:
        """Direct child nodes, in source order."""
        for f in dataclasses.fields(self):
            if f.name == "span":
                continue
            value = getattr(self, f.name)
            if isinstance(value, Node):
                yield value
            elif isinstance(value, tuple):
                for item in value:
                    if isinstance(item, Node):
                        yield item
                    elif isinstance(item, tuple):
                        yield from (x for x in item if isinstance(x, Node))

    def walk(self) -> Iterator[Node]:
        """This node and every descendant, pre-order (iterative: deep trees do not recurse)."""
        stack: list[Node] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(list(node.children())))


# ----------------------------------------------------------------------------------------- expressions


@dataclass(frozen=True, slots=True)
class Literal(Node):
    """A string, number, boolean or null literal."""

    value: None | bool | int | float | str


@dataclass(frozen=True, slots=True)
class TypedLiteral(Node):
    """``DATE '2024-06-01'`` or ``TIMESTAMP '2024-06-01T10:00:00Z'``; ``type`` is DATE or TIMESTAMP."""

    type: str
    value: str


@dataclass(frozen=True, slots=True)
class Param(Node):
    """``$name`` or ``$1``; ``name`` is without the dollar (``"name"``, ``"1"``)."""

    name: str


@dataclass(frozen=True, slots=True)
class Field(Node):
    """A built-in field: content, id, doc_id or position."""

    name: str


@dataclass(frozen=True, slots=True)
class Meta(Node):
    """A metadata path ``meta.a.b`` → ``keys == ("a", "b")``."""

    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Ref(Node):
    """A bare name that should be a LET binding."""

    name: str


@dataclass(frozen=True, slots=True)
class ListExpr(Node):
    """``[a, b, …]`` or the ``(a, b, …)`` of IN."""

    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Call(Node):
    """``NAME(arg, …, key => value, …)``; ``name`` upper-case, ``kwargs`` in source order."""

    name: str
    args: tuple[Expr, ...] = ()
    kwargs: tuple[tuple[str, Expr], ...] = ()

    def kwarg(self, key: str) -> Expr | None:
        for k, v in self.kwargs:
            if k == key:
                return v
        return None


@dataclass(frozen=True, slots=True)
class Unary(Node):
    """Unary minus (``op == "-"``) or logical NOT (``op == "NOT"``)."""

    op: str
    operand: Expr


@dataclass(frozen=True, slots=True)
class Binary(Node):
    """Arithmetic ``+ - * /`` or logical ``AND``/``OR`` (left-associative)."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Compare(Node):
    """``left op right`` with op in ``== != < <= > >=``."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class In(Node):
    """``expr [NOT] IN (a, b)``; ``options`` is a :class:`ListExpr` or a :class:`Param` bound to a list."""

    expr: Expr
    options: Expr
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Between(Node):
    """``expr [NOT] BETWEEN low AND high`` (inclusive)."""

    expr: Expr
    low: Expr
    high: Expr
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNull(Node):
    """``expr IS [NOT] NULL``."""

    expr: Expr
    negated: bool = False


@dataclass(frozen=True, slots=True)
class TextMatch(Node):
    """``expr [NOT] CONTAINS|LIKE|MATCH pattern``."""

    op: str
    expr: Expr
    pattern: Expr
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Within(Node):
    """``expr WITHIN "period"`` (``period`` set) or ``expr WITHIN (low, high)`` (``low``/``high`` set)."""

    expr: Expr
    period: Expr | None = None
    low: Expr | None = None
    high: Expr | None = None


@dataclass(frozen=True, slots=True)
class Has(Node):
    """``expr [NOT] HAS value``, ``expr [NOT] HAS ANY (a, b)``, ``expr [NOT] HAS ALL (a, b)`` (SPEC §11).

    ``quantifier`` is None for HAS (``value`` is one expression), ``"ANY"`` or ``"ALL"`` (``value`` is a
    :class:`ListExpr` or a :class:`Param` bound to a list). On a list HAS is membership with ``==``'s
    typing; on a scalar it is ``==``.
    """

    expr: Expr
    value: Expr
    quantifier: str | None = None
    negated: bool = False


Expr = Union[
    Literal, TypedLiteral, Param, Field, Meta, Ref, ListExpr, Call, Unary, Binary, Compare, In,
    Between, IsNull, TextMatch, Within, Has,
]

# ------------------------------------------------------------------------------------------- clauses


@dataclass(frozen=True, slots=True)
class Unit(Node):
    """What a row is: SENTENCE, CHUNK, DOCUMENT, or SPAN over ``base`` (SENTENCE|CHUNK) ± ``window``."""

    kind: str
    base: str | None = None
    window: Expr | None = None

    @property
    def rows_are_sentences(self) -> bool:
        """Each result row is one stored sentence: SENTENCE, or a SPAN centred on a sentence.

        Otherwise (DOCUMENT, CHUNK, SPAN over CHUNK) a row groups sentences and scores are the best
        sentence's.
        """
        return self.kind == "SENTENCE" or (self.kind == "SPAN" and self.base != "CHUNK")


@dataclass(frozen=True, slots=True)
class Binding(Node):
    """``LET name = expr``."""

    name: str
    expr: Expr


@dataclass(frozen=True, slots=True)
class OrderKey(Node):
    """``expr [ASC|DESC] [NULLS FIRST|LAST]``; ``nulls_first`` None means the default (LAST)."""

    expr: Expr
    descending: bool = False
    nulls_first: bool | None = None


@dataclass(frozen=True, slots=True)
class Distinct(Node):
    """``DISTINCT BY key, … [KEEP n]``: keep the first ``keep`` rows (in ORDER BY order) of each distinct
    value of the key tuple; ``keep`` None means the default, 1 (the checker wants a whole number ≥ 1)."""

    keys: tuple[Expr, ...]
    keep: Expr | None = None


@dataclass(frozen=True, slots=True)
class Count(Node):
    """``SELECT COUNT(unit) [BY key, …]``: count the rows of ``Query.unit`` passing WHERE, per distinct
    value of the key tuple (``by`` empty: one total). The unit stays in ``Query.unit``."""

    by: tuple[Expr, ...] = ()


@dataclass(frozen=True, slots=True)
class Query(Node):
    """A whole query, clauses in SPEC order (``distinct`` sits between WHERE and ORDER BY in the text;
    it and the later clauses are the last fields so that positional construction of the older clauses
    keeps working). ``count`` is set for ``SELECT COUNT(unit) BY …``; ``autocut`` is the k of
    ``LIMIT n AUTOCUT k``."""

    unit: Unit
    bindings: tuple[Binding, ...] = ()
    where: Expr | None = None
    order_by: tuple[OrderKey, ...] = ()
    limit: Expr | None = None
    offset: Expr | None = None
    distinct: Distinct | None = None
    count: Count | None = None
    autocut: Expr | None = None

    def binding(self, name: str) -> Binding | None:
        for b in self.bindings:
            if b.name == name:
                return b
        return None

    def to_dict(self) -> dict[str, Any]:
        """The IR as plain JSON-ready data (no spans)."""
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Query:
        """Rebuild and fully validate a query from :meth:`to_dict` output (or an agent's JSON)."""
        node = from_dict(data, "$", expect=Query)
        assert isinstance(node, Query)
        return node


NODE_TYPES: dict[str, type[Node]] = {
    c.__name__: c
    for c in (
        Literal, TypedLiteral, Param, Field, Meta, Ref, ListExpr, Call, Unary, Binary, Compare, In,
        Between, IsNull, TextMatch, Within, Has, Unit, Binding, OrderKey, Distinct, Count, Query,
    )
}
EXPR_TYPES = tuple(NODE_TYPES[n] for n in (
    "Literal", "TypedLiteral", "Param", "Field", "Meta", "Ref", "ListExpr", "Call", "Unary", "Binary",
    "Compare", "In", "Between", "IsNull", "TextMatch", "Within", "Has",
))
#: The quantifiers of HAS (None: plain HAS).
HAS_QUANTIFIERS = ("ANY", "ALL")


def conjuncts(expr: Expr | None) -> list[Expr]:
    """Split a WHERE expression on top-level AND."""
    if expr is None:
        return []
    out: list[Expr] = []
    stack: list[Expr] = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, Binary) and e.op == "AND":
            stack.append(e.right)
            stack.append(e.left)
        else:
            out.append(e)
    return out


def and_all(parts: list[Expr]) -> Expr | None:
    """Join expressions with AND (left-deep); None for an empty list."""
    if not parts:
        return None
    acc = parts[0]
    for p in parts[1:]:
        acc = Binary("AND", acc, p)
    return acc


# ------------------------------------------------------------------------------------ JSON round trip

_ENUMS: dict[tuple[str, str], tuple[str, ...]] = {
    ("Field", "name"): BUILTIN_FIELDS,
    ("TypedLiteral", "type"): TYPED_LITERALS,
    ("Unary", "op"): ("-", "NOT"),
    ("Binary", "op"): ARITH_OPS + ("AND", "OR"),
    ("Compare", "op"): COMPARE_OPS,
    ("TextMatch", "op"): TEXT_OPS,
    ("Unit", "kind"): UNIT_KINDS,
    ("Unit", "base"): ("SENTENCE", "CHUNK"),
    ("Has", "quantifier"): ("ANY", "ALL"),
}
_NULLABLE_ENUMS = frozenset({("Unit", "base"), ("Has", "quantifier")})
# Clauses added after the first release: a query without them serialises as it did before.
_OPTIONAL_CLAUSES = frozenset({"distinct", "count", "autocut"})


def to_dict(node: Node) -> dict[str, Any]:
    """Serialise any node to JSON-ready data: ``{"node": "<Class>", <fields>…}`` (spans dropped)."""
    out: dict[str, Any] = {"node": type(node).__name__}
    for f in dataclasses.fields(node):
        if f.name == "span":
            continue
        value = getattr(node, f.name)
        if value is None and f.name in _OPTIONAL_CLAUSES and isinstance(node, Query):
            continue  # a query without these clauses serialises as it did before they existed
        out[f.name] = _value_to_json(value)
    return out


def _value_to_json(value: Any) -> Any:
    if isinstance(value, Node):
        return to_dict(value)
    if isinstance(value, tuple):
        return [_value_to_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("non-finite float in IR")
    return value


def _fail(message: str, path: str) -> IRValidationError:
    return IRValidationError(message, path)


def _show(value: Any) -> str:
    """A short repr of a bad value for a message (some values cannot be shown: 10**5000, deep lists)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"a {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


def from_dict(data: Any, path: str = "$", expect: type[Node] | tuple[type[Node], ...] | None = None) -> Node:
    """Deserialise one node, validating every field; errors name the JSON path."""
    # The recursion below is bounded by _MAX_DEPTH; a caller already deep in its own stack can still run
    # out of Python frames first, and that is the same mistake (too deep) reported the same way.
    try:
        return _from_dict(data, path, expect, 0)
    except RecursionError:
        raise _fail("expression nested too deeply to read here", path) from None


_MAX_DEPTH = 200
_MAX_INT = 10**308  # the parser's limit for integer literals


def _from_dict(data: Any, path: str, expect: Any, depth: int) -> Node:
    if depth > _MAX_DEPTH:
        raise _fail(f"expression nested deeper than {_MAX_DEPTH} levels", path)
    if not isinstance(data, dict):
        raise _fail(f"expected an object, got {type(data).__name__}", path)
    kind = data.get("node")
    if not isinstance(kind, str) or kind not in NODE_TYPES:
        raise _fail(f"unknown or missing node type {_show(kind)}", path + ".node")
    cls = NODE_TYPES[kind]
    if expect is not None and not issubclass(cls, expect):
        names = expect.__name__ if isinstance(expect, type) else "expression"
        raise _fail(f"expected {names} here, got {kind}", path)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "span"}
    for key in data:
        if key != "node" and key not in fields:
            raise _fail(f"unknown field {_show(key)} for {kind}", f"{path}.{_show(key)}")
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        sub = f"{path}.{name}"
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if name not in data:
            if has_default:
                continue
            raise _fail(f"missing field {name!r} for {kind}", sub)
        kwargs[name] = _field_from_json(cls, name, data[name], sub, depth)
    return cls(**kwargs)


def _expect_str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _fail(f"expected a string, got {type(value).__name__}", path)
    return value


def _expect_bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(f"expected true or false, got {type(value).__name__}", path)
    return value


def _expr(value: Any, path: str, depth: int) -> Node:
    return _from_dict(value, path, EXPR_TYPES, depth + 1)


def _expr_list(value: Any, path: str, depth: int) -> tuple[Node, ...]:
    if not isinstance(value, list):
        raise _fail(f"expected a list, got {type(value).__name__}", path)
    return tuple(_expr(v, f"{path}[{i}]", depth) for i, v in enumerate(value))


def _field_from_json(cls: type[Node], name: str, value: Any, path: str, depth: int) -> Any:  # noqa: C901
    kind = cls.__name__
    enum = _ENUMS.get((kind, name))
    if enum is not None:
        if value is None and (kind, name) in _NULLABLE_ENUMS:
            return None
        if value not in enum:
            raise _fail(f"expected one of {', '.join(enum)}, got {_show(value)}", path)
        return value
    if kind == "Literal" and name == "value":
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise _fail(f"a literal must be a string, number, boolean or null, not {type(value).__name__}", path)
        if isinstance(value, float) and not math.isfinite(value):
            raise _fail("a literal number must be finite", path)
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _MAX_INT:
            raise _fail("a literal number is too large (numbers must be below 1e308)", path)
        return value
    if name in ("negated", "descending"):
        return _expect_bool(value, path)
    if name == "nulls_first":
        return None if value is None else _expect_bool(value, path)
    if kind == "Meta" and name == "keys":
        if not isinstance(value, list) or not value:
            raise _fail("expected a non-empty list of keys", path)
        return tuple(_expect_str(v, f"{path}[{i}]") for i, v in enumerate(value))
    if kind == "Call" and name == "kwargs":
        if not isinstance(value, list):
            raise _fail("expected a list of [name, value] pairs", path)
        pairs = []
        for i, pair in enumerate(value):
            if not isinstance(pair, list) or len(pair) != 2:
                raise _fail("expected a [name, value] pair", f"{path}[{i}]")
            pairs.append((_expect_str(pair[0], f"{path}[{i}][0]"), _expr(pair[1], f"{path}[{i}][1]", depth)))
        return tuple(pairs)
    if name in ("args", "items") or (kind == "Distinct" and name == "keys") or (kind == "Count" and name == "by"):
        if kind == "Distinct" and isinstance(value, list) and not value:
            raise _fail("DISTINCT BY needs at least one key", path)
        return _expr_list(value, path, depth)
    if kind == "Query":
        if name == "unit":
            return _from_dict(value, path, Unit, depth + 1)
        if name == "bindings":
            if not isinstance(value, list):
                raise _fail("expected a list of bindings", path)
            return tuple(_from_dict(v, f"{path}[{i}]", Binding, depth + 1) for i, v in enumerate(value))
        if name == "order_by":
            if not isinstance(value, list):
                raise _fail("expected a list of order keys", path)
            return tuple(_from_dict(v, f"{path}[{i}]", OrderKey, depth + 1) for i, v in enumerate(value))
        if name == "distinct":
            return None if value is None else _from_dict(value, path, Distinct, depth + 1)
        if name == "count":
            return None if value is None else _from_dict(value, path, Count, depth + 1)
    if isinstance(cls.__dataclass_fields__[name].type, str) and "Expr" in cls.__dataclass_fields__[name].type:
        if value is None and "None" in cls.__dataclass_fields__[name].type:
            return None
        return _expr(value, path, depth)
    return _expect_str(value, path)


def query_json_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of ``Query.to_dict()`` output, for agents that emit queries as JSON."""
    defs: dict[str, Any] = {}
    expr_ref = {"$ref": "#/$defs/Expr"}
    for kind, cls in NODE_TYPES.items():
        props: dict[str, Any] = {"node": {"const": kind}}
        required = ["node"]
        for f in dataclasses.fields(cls):
            if f.name == "span":
                continue
            enum = _ENUMS.get((kind, f.name))
            typ = str(f.type)
            if enum is not None:
                schema: Any = {"enum": list(enum) + ([None] if "None" in typ else [])}
            elif kind == "Literal":
                schema = {"type": ["string", "number", "boolean", "null"]}
            elif f.name in ("negated", "descending"):
                schema = {"type": "boolean"}
            elif f.name == "nulls_first":
                schema = {"type": ["boolean", "null"]}
            elif kind == "Meta":
                schema = {"type": "array", "items": {"type": "string"}, "minItems": 1}
            elif kind == "Call" and f.name == "kwargs":
                schema = {
                    "type": "array",
                    "items": {"type": "array", "prefixItems": [{"type": "string"}, expr_ref],
                              "minItems": 2, "maxItems": 2},
                }
            elif f.name in ("args", "items"):
                schema = {"type": "array", "items": expr_ref}
            elif kind == "Distinct" and f.name == "keys":
                schema = {"type": "array", "items": expr_ref, "minItems": 1}
            elif kind == "Count" and f.name == "by":
                schema = {"type": "array", "items": expr_ref}
            elif kind == "Query" and f.name == "distinct":
                schema = {"anyOf": [{"$ref": "#/$defs/Distinct"}, {"type": "null"}]}
            elif kind == "Query" and f.name == "count":
                schema = {"anyOf": [{"$ref": "#/$defs/Count"}, {"type": "null"}]}
            elif kind == "Query" and f.name == "unit":
                schema = {"$ref": "#/$defs/Unit"}
            elif kind == "Query" and f.name == "bindings":
                schema = {"type": "array", "items": {"$ref": "#/$defs/Binding"}}
            elif kind == "Query" and f.name == "order_by":
                schema = {"type": "array", "items": {"$ref": "#/$defs/OrderKey"}}
            elif "Expr" in typ:
                schema = {"anyOf": [expr_ref, {"type": "null"}]} if "None" in typ else expr_ref
            else:
                schema = {"type": "string"}
            props[f.name] = schema
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
        defs[kind] = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    defs["Expr"] = {"oneOf": [{"$ref": f"#/$defs/{c.__name__}"} for c in EXPR_TYPES]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://nlql.dev/schema/query.json",
        "title": "NLQL query IR",
        "$ref": "#/$defs/Query",
        "$defs": defs,
    }
