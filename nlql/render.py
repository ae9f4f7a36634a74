"""IR → canonical NLQL text.

The canonical form is one line: upper-case keywords and function names, ``==`` and ``!=``, strings in
double quotes, the fewest parentheses that keep the tree, ASC and default NULLS omitted::

    SELECT SENTENCE LET rel = SIMILARITY(content, "AI agents") WHERE rel >= 0.3 ORDER BY rel DESC LIMIT 5

``parse(render(q)) == q`` for every query the parser can produce, and ``render`` is a fixed point of
``render ∘ parse``. Two details keep that true: the parser reads ``-3`` as the literal -3 and ``-(3)`` as
a negation, and a metadata key that is not a plain name, or is a keyword, is written in backticks.
"""

from __future__ import annotations

import re

from nlql.ir import (
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
    OrderKey,
    Param,
    Query,
    Ref,
    TextMatch,
    TypedLiteral,
    Unary,
    Unit,
    Within,
)

__all__ = ["KEYWORDS", "UNITS", "quote_key", "quote_string", "render", "render_expr"]

#: Reserved words (case-insensitive). A metadata key spelled like one is written in backticks.
KEYWORDS = frozenset({
    "SELECT", "LET", "WHERE", "DISTINCT", "KEEP", "ORDER", "BY", "LIMIT", "OFFSET", "ASC", "DESC", "NULLS", "FIRST", "LAST",
    "SENTENCE", "CHUNK", "DOCUMENT", "SPAN", "OR", "AND", "NOT", "IN", "BETWEEN", "IS", "CONTAINS",
    "LIKE", "MATCH", "WITHIN", "TRUE", "FALSE", "NULL", "HAS", "ANY", "ALL", "AUTOCUT",
})
#: The units a query can select.
UNITS = ("SENTENCE", "CHUNK", "DOCUMENT", "SPAN")

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Binding strength, loosest first; an operand that binds looser than its slot needs parentheses.
_OR, _AND, _NOT, _PREDICATE, _SUM, _PRODUCT, _UNARY, _ATOM = range(1, 9)
_BINARY = {"OR": _OR, "AND": _AND, "+": _SUM, "-": _SUM, "*": _PRODUCT, "/": _PRODUCT}


def render(q: Query) -> str:
    """The canonical text of a query.

    Args:
        q: A query IR (from :func:`nlql.parse`, :meth:`Query.from_dict`, or built by hand).

    Returns:
        One line of NLQL that parses back to an equal query.

    >>> from nlql.parser import parse
    >>> render(parse("select sentence where meta.year = 2024 order by position asc limit 3"))
    'SELECT SENTENCE WHERE meta.year == 2024 ORDER BY position LIMIT 3'
    """
    parts = ["SELECT", _unit(q.unit) if q.count is None else _count(q.count, q.unit)]
    if q.bindings:
        parts.append("LET " + ", ".join(_binding(b) for b in q.bindings))
    if q.where is not None:
        parts.append("WHERE " + render_expr(q.where))
    if q.distinct is not None:
        parts.append(_distinct(q.distinct))
    if q.order_by:
        parts.append("ORDER BY " + ", ".join(_order_key(k) for k in q.order_by))
    if q.limit is not None:
        parts.append("LIMIT " + render_expr(q.limit))
    if q.autocut is not None:
        parts.append("AUTOCUT " + render_expr(q.autocut))
    if q.offset is not None:
        parts.append("OFFSET " + render_expr(q.offset))
    return " ".join(parts)


def render_expr(e: Node) -> str:
    """The canonical text of one expression (as it would appear in a WHERE clause).

    >>> from nlql.ir import Binary, Compare, Literal, Meta
    >>> render_expr(Binary("*", Binary("+", Literal(1), Literal(2)), Meta(("a-b",))))
    '(1 + 2) * meta.`a-b`'
    """
    return _expr(e, 0)


def quote_string(value: str, quote: str = '"') -> str:
    r"""A string literal: quoted, with the quote, ``\``, newline, tab and control characters escaped.

    >>> print(quote_string('say "hi"\n'))
    "say \"hi\"\n"
    """
    out = []
    for ch in value:
        if ch == quote or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch < " " or "\x7f" <= ch <= "\x9f" or ch in "\u2028\u2029":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return quote + "".join(out) + quote


def quote_key(key: str) -> str:
    """A metadata key as written after ``meta.``: bare if it is a plain non-keyword name, else backticked.

    >>> quote_key("lang"), quote_key("content-type"), quote_key("select")
    ('lang', '`content-type`', '`select`')
    """
    if _NAME.match(key) and key.upper() not in KEYWORDS:
        return key
    return "`" + key.replace("`", "``") + "`"


# ------------------------------------------------------------------------------------------ pieces


def _unit(u: Unit) -> str:
    if u.kind != "SPAN":
        return u.kind
    inner = u.base or "SENTENCE"
    if u.window is not None:
        inner += ", window => " + _expr(u.window, 0)
    return f"SPAN({inner})"


def _count(c: Count, unit: Unit) -> str:
    text = f"COUNT({_unit(unit)})"
    if c.by:
        text += " BY " + ", ".join(_expr(k, 0) for k in c.by)
    return text


def _binding(b: Binding) -> str:
    return f"{b.name} = {_expr(b.expr, 0)}"


def _distinct(d: Distinct) -> str:
    text = "DISTINCT BY " + ", ".join(_expr(k, 0) for k in d.keys)
    if d.keep is not None:
        text += " KEEP " + _expr(d.keep, _UNARY)
    return text


def _order_key(k: OrderKey) -> str:
    text = _expr(k.expr, 0)
    if k.descending:
        text += " DESC"
    if k.nulls_first is not None:
        text += " NULLS FIRST" if k.nulls_first else " NULLS LAST"
    return text


def _strength(e: Node) -> int:
    if isinstance(e, Binary):
        return _BINARY.get(e.op, _SUM)
    if isinstance(e, Unary):
        return _NOT if e.op == "NOT" else _UNARY
    if isinstance(e, (Compare, In, Between, IsNull, TextMatch, Within, Has)):
        return _PREDICATE
    if isinstance(e, Literal) and isinstance(e.value, (int, float)) and not isinstance(e.value, bool) \
            and _number(e.value).startswith("-"):
        return _UNARY  # a negative number is read as unary minus: `x WITHIN -3` needs `(-3)`
    return _ATOM


def _balanced_part(parent: Binary, child: Node) -> bool:
    """Whether ``child`` is an inner node of a chain the parser balanced, not a group the user wrote.

    The parser gives an inner chain node the span of its operands (starting where its left operand
    starts); a parenthesised group's span starts at its ``(``. Without spans (hand-built IR) a same-op
    right operand is a group.
    """
    if parent.op not in ("AND", "OR") or not isinstance(child, Binary) or child.op != parent.op:
        return False
    span, left = child.span, child.left.span
    return span is not None and left is not None and span.start == left.start


def _group(parent: Binary, child: Node) -> bool:
    """Whether a same-op left operand is a parenthesised group the user wrote inside a balanced chain
    (the parser folds one in first place into the chain, so only balanced chains hold such a group)."""
    if parent.op not in ("AND", "OR") or not isinstance(child, Binary) or child.op != parent.op:
        return False
    span, left = child.span, child.left.span
    return span is not None and left is not None and span.start != left.start


def _expr(e: Node, slot: int) -> str:
    """Render ``e`` for a slot that accepts strength ``slot`` or tighter; parenthesise otherwise."""
    text = _bare(e)
    return f"({text})" if _strength(e) < slot else text


def _bare(e: Node) -> str:  # noqa: C901 - one case per node type
    if isinstance(e, Literal):
        return _literal(e.value)
    if isinstance(e, Field):
        return e.name
    if isinstance(e, Ref):
        return e.name
    if isinstance(e, Meta):
        return "meta." + ".".join(quote_key(k) for k in e.keys)
    if isinstance(e, Param):
        return "$" + e.name
    if isinstance(e, TypedLiteral):
        return f"{e.type} {quote_string(e.value, chr(39))}"
    if isinstance(e, Binary):
        strength = _BINARY.get(e.op, _SUM)
        # Left-associative: the right operand must bind strictly tighter to keep the tree's shape,
        # except inside a long AND/OR chain the parser balanced (nlql.parser.BALANCE_AFTER).
        right = strength if _balanced_part(e, e.right) else strength + 1
        left = strength + 1 if _group(e, e.left) else strength
        return f"{_expr(e.left, left)} {e.op} {_expr(e.right, right)}"
    if isinstance(e, Unary):
        if e.op == "NOT":
            return "NOT " + _expr(e.operand, _NOT)
        inner = _expr(e.operand, _UNARY)
        # `-3` would read back as a literal and `--x` as a comment, so both keep parentheses.
        if inner.startswith("-") or (isinstance(e.operand, Literal) and type(e.operand.value) in (int, float)):
            inner = f"({_bare(e.operand)})"
        return "-" + inner
    if isinstance(e, Compare):
        return f"{_expr(e.left, _SUM)} {e.op} {_expr(e.right, _SUM)}"
    if isinstance(e, In):
        options = e.options
        if isinstance(options, ListExpr) and not options.items:
            listed = "[]"  # `IN ()` does not parse; an empty bracket list does
        elif isinstance(options, ListExpr):
            listed = "(" + ", ".join(_expr(x, 0) for x in options.items) + ")"
        elif isinstance(options, Param):
            listed = _bare(options)
        else:
            listed = "(" + _expr(options, 0) + ")"
        return f"{_expr(e.expr, _SUM)} {'NOT IN' if e.negated else 'IN'} {listed}"
    if isinstance(e, Has):
        word = ("NOT HAS" if e.negated else "HAS") + (f" {e.quantifier}" if e.quantifier else "")
        value = e.value
        if e.quantifier and isinstance(value, ListExpr):
            listed = "(" + ", ".join(_expr(x, 0) for x in value.items) + ")"
        elif e.quantifier and isinstance(value, Param):
            listed = _bare(value)
        elif e.quantifier:
            listed = "(" + _expr(value, 0) + ")"  # hand-built IR; the checker reports it
        else:
            listed = _expr(value, _SUM)
        return f"{_expr(e.expr, _SUM)} {word} {listed}"
    if isinstance(e, Between):
        word = "NOT BETWEEN" if e.negated else "BETWEEN"
        return f"{_expr(e.expr, _SUM)} {word} {_expr(e.low, _SUM)} AND {_expr(e.high, _SUM)}"
    if isinstance(e, IsNull):
        return f"{_expr(e.expr, _SUM)} IS {'NOT NULL' if e.negated else 'NULL'}"
    if isinstance(e, TextMatch):
        word = f"NOT {e.op}" if e.negated else e.op
        return f"{_expr(e.expr, _SUM)} {word} {_expr(e.pattern, _SUM)}"
    if isinstance(e, Within):
        if e.period is not None:
            return f"{_expr(e.expr, _SUM)} WITHIN {_expr(e.period, _ATOM)}"
        low = _expr(e.low, 0) if e.low is not None else "NULL"
        high = _expr(e.high, 0) if e.high is not None else "NULL"
        return f"{_expr(e.expr, _SUM)} WITHIN ({low}, {high})"
    if isinstance(e, Call):
        args = [_expr(a, 0) for a in e.args] + [f"{k} => {_expr(v, 0)}" for k, v in e.kwargs]
        return f"{e.name}({', '.join(args)})"
    if isinstance(e, ListExpr):
        return "[" + ", ".join(_expr(x, 0) for x in e.items) + "]"
    if isinstance(e, Query):
        return render(e)
    if isinstance(e, Unit):
        return _unit(e)
    if isinstance(e, Binding):
        return _binding(e)
    if isinstance(e, OrderKey):
        return _order_key(e)
    if isinstance(e, Distinct):
        return _distinct(e)
    if isinstance(e, Count):
        return "COUNT BY " + ", ".join(_expr(k, 0) for k in e.by)
    raise TypeError(f"cannot render {type(e).__name__}")


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if value is True:
        return "TRUE"
    if value is False:
        return "FALSE"
    if isinstance(value, (int, float)):
        return _number(value)
    if isinstance(value, str):
        return quote_string(value)
    raise TypeError(f"cannot render a literal of type {type(value).__name__}")


def _number(value: int | float) -> str:
    if isinstance(value, int):
        return str(value)
    text = repr(value)
    if text in ("inf", "-inf", "nan"):
        raise ValueError("a literal number must be finite")
    return text
