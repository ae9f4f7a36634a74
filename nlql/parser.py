"""Query text → IR. The only module that imports Lark.

Lark parses (LALR, fed by the small regex lexer below) into a plain parse tree; an iterative builder
turns it into the frozen IR of :mod:`nlql.ir`, with a :class:`~nlql.span.Span` on every node. Building after parsing
(rather than inside ``Lark(...)``) keeps positions intact and lets the builder enforce the nesting limit
without recursion, so a 10,000-deep parenthesis is a clean :class:`~nlql.errors.LimitError`.

Every Lark error becomes an :class:`~nlql.errors.NLQLSyntaxError` worded for users: no terminal names,
the caret on the offending token (or just after the last token for a truncated query), and named
messages for the common mistakes (trailing AND, missing comma between bindings, clauses out of order,
unterminated strings, a missing SELECT, …).

>>> q = parse('SELECT SENTENCE WHERE meta.lang == "en" LIMIT 3')
>>> q.unit.kind, q.limit.value
('SENTENCE', 3)
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any, cast

from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedToken
from lark.lexer import Lexer, LexerState

from nlql.errors import LimitError, NLQLSyntaxError
from nlql.ir import (
    BUILTIN_FIELDS,
    Between,
    Binary,
    Binding,
    Call,
    Compare,
    Count,
    Distinct,
    Expr,
    Field,
    Has,
    In,
    IsNull,
    ListExpr,
    Literal,
    Meta,
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
from nlql.paths import cache_dir
from nlql.render import KEYWORDS, UNITS
from nlql.span import Span

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "MAX_LIST_ITEMS", "clear_cache", "grammar_path", "parse"]

#: Longest accepted query text, in characters.
MAX_LENGTH = 100_000
#: Deepest accepted nesting of expressions (parentheses, operators, calls, lists).
MAX_DEPTH = 200
#: Most items accepted in one list literal or IN (…) list.
MAX_LIST_ITEMS = 10_000

_CACHE_SIZE = 1024
_CACHE_MAX_CHARS = 10_000
# The largest integer literal kept exact; beyond the float range a number is an error, not inf.
_MAX_INT_DIGITS = 308


# ------------------------------------------------------------------------------------------- grammar


def grammar_path() -> Path:
    """Where the grammar file is: inside the installed package, else in the source checkout."""
    try:
        packaged = resources.files("nlql").joinpath("grammar", "nlql.lark")
        if packaged.is_file():
            return Path(str(packaged))
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):  # pragma: no cover - odd installs
        pass
    checkout = Path(__file__).resolve().parent.parent / "grammar" / "nlql.lark"
    if checkout.is_file():
        return checkout
    raise FileNotFoundError("nlql grammar not found: expected nlql/grammar/nlql.lark or grammar/nlql.lark")


class _Lexer(Lexer):
    """One compiled alternation over every terminal, in Lark's own precedence order.

    The same tokens as Lark's basic lexer with fewer regex calls: whitespace and comments are consumed
    by the same ``match`` as the token after them, and lines are counted only where a newline can occur.
    """

    __future_interface__ = 2

    def __init__(self, conf: Any) -> None:
        terminals = sorted(
            (t for t in conf.terminals if t.name not in conf.ignore),
            key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name),
        )
        skip = "|".join(t.pattern.to_regexp() for t in conf.terminals if t.name in conf.ignore)
        alternatives = "|".join(f"(?P<{t.name}>{t.pattern.to_regexp()})" for t in terminals)
        # Whitespace and comments before a token are part of the same match: one regex call per token.
        # The lookahead + backreference makes the skip atomic, so a trailing `-- comment` can never be
        # re-read as '-' '-' … when nothing follows it.
        self.match = re.compile(f"(?=(?P<_skipped>(?:{skip})?))(?P=_skipped)(?:{alternatives})").match
        self.skip = re.compile(f"(?:{skip})?").match
        self.allowed = frozenset(t.name for t in terminals)

    def lex(self, lexer_state: LexerState, parser_state: Any) -> Iterator[Token]:
        return self.tokens(lexer_state.text.text, parser_state)

    def tokens(self, text: str, parser_state: Any = None) -> Iterator[Token]:
        """The tokens of ``text``; raises Lark's UnexpectedCharacters where nothing matches."""
        match = self.match
        pos, line, line_start, end = 0, 1, 0, len(text)
        while pos < end:
            m = match(text, pos)
            if m is None:
                skipped = self.skip(text, pos)
                assert skipped is not None  # the skip pattern also matches the empty string
                pos = skipped.end()
                line = text.count("\n", 0, pos) + 1
                if pos < end:
                    line_start = text.rfind("\n", 0, pos) + 1
                    raise UnexpectedCharacters(text, pos, line, pos - line_start + 1, allowed=set(self.allowed),
                                               state=parser_state)
                return
            kind = cast(str, m.lastgroup)
            start = m.start(kind)
            if start != pos:  # skipped whitespace or comments: count their newlines
                newlines = text.count("\n", pos, start)
                if newlines:
                    line += newlines
                    line_start = text.rindex("\n", pos, start) + 1
            pos = m.end()
            column = start - line_start + 1
            yield Token(kind, m.group(kind), start, line, column, line, column + pos - start, pos)


def _table_cache() -> str | bool:
    """Where Lark keeps the LALR tables between processes (building them costs a fresh process about
    0.2 CPU-s, loading them 0.03): a file in the user's own :func:`~nlql.paths.cache_dir`, not a shared
    temporary directory, since Lark's cache is a pickle. Lark keys the file by the grammar's text, the
    options and its own version, and rebuilds when they differ. False (no cache) when the directory
    cannot be made or written, when it or the file belongs to another user or others may write it (a
    shared ``$NLQL_CACHE_DIR``: a planted pickle would run as code), or ``NLQL_PARSER_CACHE=0``."""
    if os.environ.get("NLQL_PARSER_CACHE", "").strip() == "0":
        return False
    folder = cache_dir() / "parser"
    path = folder / "lalr.pickle"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK) or not all(_private(p) for p in (folder, path) if p.exists()):
            return False
    except OSError:
        return False
    return str(path)


def _private(path: Path) -> bool:
    """Whether only the current user can have written ``path`` (always True where there are no uids)."""
    st = path.stat()
    getuid = getattr(os, "getuid", None)
    return getuid is None or (st.st_uid == getuid() and not st.st_mode & 0o022)


@functools.lru_cache(maxsize=1)
def _lark() -> Lark:
    """The Lark parser, built once per process (its tables loaded from :func:`_table_cache`)."""
    options: dict[str, Any] = dict(
        parser="lalr",
        lexer=_Lexer,
        start="start",
        maybe_placeholders=True,
        propagate_positions=False,  # spans come from tokens; positions would double the parse time
    )
    grammar = grammar_path().read_text(encoding="utf-8")
    cache = _table_cache()
    if cache:
        try:
            return Lark(grammar, cache=cache, **options)
        except Exception:  # noqa: BLE001 - a damaged or unwritable cache file: build without it
            pass
    return Lark(grammar, **options)


def _lexer() -> _Lexer:
    lexer = _lark().parser.lexer
    assert isinstance(lexer, _Lexer)
    return lexer


# ---------------------------------------------------------------------------------------- public API


def parse(
    text: str,
    *,
    max_length: int | None = None,
    max_depth: int | None = None,
    max_list_items: int | None = None,
) -> Query:
    """Parse NLQL text into a :class:`~nlql.ir.Query` with a span on every node.

    Results are cached by text (the IR is immutable, so sharing is safe), so repeats are near-free;
    texts over 10,000 characters are parsed every time rather than kept.

    Args:
        text: The query.
        max_length: Longest accepted text in characters (default :data:`MAX_LENGTH`).
        max_depth: Deepest accepted expression nesting (default :data:`MAX_DEPTH`).
        max_list_items: Most items in one list or IN list (default :data:`MAX_LIST_ITEMS`).

    Returns:
        The query IR.

    Raises:
        NLQLSyntaxError: The text is not NLQL; the message points at the offending token.
        LimitError: The text exceeds one of the limits above.
        TypeError: ``text`` is not a string (a programming error).

    >>> parse("select chunk order by position").order_by[0].expr
    Field(name='position')
    """
    if not isinstance(text, str):
        raise TypeError(f"parse() needs the query as a str, not {type(text).__name__}")
    limits = (
        MAX_LENGTH if max_length is None else max_length,
        MAX_DEPTH if max_depth is None else max_depth,
        MAX_LIST_ITEMS if max_list_items is None else max_list_items,
    )
    if len(text) > _CACHE_MAX_CHARS:  # rare giant queries are not worth keeping in memory
        return _parse_uncached(text, *limits)
    return _parse_cached(text, *limits)


def clear_cache() -> None:
    """Forget every cached parse (benchmarks use this to time cold parses)."""
    _parse_cached.cache_clear()


def _parse_uncached(text: str, max_length: int, max_depth: int, max_list_items: int) -> Query:
    if len(text) > max_length:
        raise LimitError(
            f"the query is {len(text):,} characters long; the limit is {max_length:,}",
            Span.at(text, max_length, max_length + 1),
            text,
            "shorten the query, or bind long values as $parameters",
        )
    try:
        tree = _lark().parse(text)
    except UnexpectedCharacters as exc:
        raise _char_error(text, exc) from None
    except UnexpectedToken as exc:
        raise _token_error(text, exc) from None
    except LarkError as exc:  # pragma: no cover - every Lark error above is handled; keep the promise
        raise NLQLSyntaxError(f"not a valid query ({type(exc).__name__})", Span.at(text, 0), text) from None
    return _Builder(text, max_depth, max_list_items).build(tree)


_parse_cached = functools.lru_cache(maxsize=_CACHE_SIZE)(_parse_uncached)


# --------------------------------------------------------------------------------------- tree → IR


def _tok_span(tok: Token) -> Span:
    # Every token of _Lexer carries all six positions; Lark types them as optional.
    return Span(tok.start_pos, tok.end_pos, tok.line, tok.column, tok.end_line, tok.end_column)  # type: ignore[arg-type]


def _join(first: Span | None, last: Span | None) -> Span:
    """The span from ``first`` to ``last`` (the builder gives every node a span)."""
    assert first is not None and last is not None
    return Span(first.start, last.end, first.line, first.column, last.end_line, last.end_column)


@dataclasses.dataclass(frozen=True, slots=True)
class _Kwarg:
    """``name => value`` inside a call, before it is folded into :class:`~nlql.ir.Call`."""

    name: str
    value: Expr
    span: Span


@dataclasses.dataclass(frozen=True, slots=True)
class _Keep:
    """The ``KEEP n`` of DISTINCT BY, before it is folded into :class:`~nlql.ir.Distinct`."""

    value: Expr
    span: Span


@dataclasses.dataclass(frozen=True, slots=True)
class _Range:
    """The ``(low, high)`` of WITHIN."""

    low: Expr
    high: Expr
    span: Span


@dataclasses.dataclass(frozen=True, slots=True)
class _Clause:
    """One clause of a query: its tag (select, let, …), its value and its span."""

    tag: str
    value: Any
    span: Span | None


_COMPARE = {"=": "==", "==": "==", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_FIELDS = frozenset(BUILTIN_FIELDS)
# Structural rules do not add to the nesting depth; every other rule is one level (like the IR).
_FLAT_RULES = frozenset({
    "start", "query", "select_clause", "let_clause", "where_clause", "distinct_clause", "keep", "order_clause",
    "limit_clause", "offset_clause", "direction", "nulls", "span_base", "unit", "keyword_key", "count_select",
    "count_by", "autocut",
})
_ESCAPES = {'"': '"', "'": "'", "\\": "\\", "n": "\n", "t": "\t", "r": "\r"}
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")


_CHAINS = frozenset({"or_", "and_"})
#: Chains of AND/OR up to this many operands become left-deep trees (``(a OR b) OR c``, what the
#: grammar reads); longer ones a balanced tree of the same operands, so that width is not depth.
BALANCE_AFTER = 16


def _flatten_chain(tree: Tree) -> Tree:
    """``a OR b OR c`` (Lark's left-deep ``or_`` nodes) as one node with every operand as a child.

    A parenthesised chain of the same operator in first place joins the chain: ``(a OR b) OR c`` is
    ``a OR b OR c`` (the IR the grammar's left-associativity gives anyway). Groups elsewhere stay groups.
    """
    rights = []
    node: Any = tree
    while True:
        if isinstance(node, Tree) and node.data == tree.data and len(node.children) == 2:
            rights.append(node.children[1])
            node = node.children[0]
        elif isinstance(node, Tree) and node.data == "paren":
            inner: Any = node
            while isinstance(inner, Tree) and inner.data == "paren" and len(inner.children) == 3:
                inner = inner.children[1]
            if not (isinstance(inner, Tree) and inner.data == tree.data):
                break
            node = inner
        else:
            break
    return Tree(tree.data, [node, *reversed(rights)])


class _Builder:
    """Turns a Lark parse tree into IR, iteratively (no recursion, whatever the nesting)."""

    def __init__(self, text: str, max_depth: int, max_list_items: int) -> None:
        self.text = text
        self.max_depth = max_depth
        self.max_list_items = max_list_items

    def build(self, root: Tree) -> Query:
        handlers = _HANDLERS
        max_depth = self.max_depth
        values: list[Any] = []
        # (item, depth, leaving): a Tree is visited twice, entering (children pushed) and leaving.
        stack: list[tuple[Any, int, bool]] = [(root, 0, False)]
        while stack:
            item, depth, leaving = stack.pop()
            if leaving:
                n = len(item.children)
                if n:
                    args = values[-n:]
                    del values[-n:]
                else:
                    args = []
                values.append(handlers[item.data](self, args))
            elif isinstance(item, Tree):
                if item.data in _CHAINS:  # a whole AND/OR chain is one level of nesting
                    item = _flatten_chain(item)
                if item.data not in _FLAT_RULES:
                    depth += 1
                    if depth > max_depth:
                        raise self._too_deep(item)
                stack.append((item, depth, True))
                stack.extend((child, depth, False) for child in reversed(item.children))
            else:
                values.append(item)  # a Token, or None for an absent optional part
        query = values[0]
        assert isinstance(query, Query)
        return query

    # -------------------------------------------------------------------------------------- errors

    def _error(self, message: str, span: Span, hint: str | None = None) -> NLQLSyntaxError:
        return NLQLSyntaxError(message, span, self.text, hint)

    def _too_deep(self, tree: Tree) -> LimitError:
        node: Any = tree
        while isinstance(node, Tree):  # the leftmost token locates the construct
            node = next((c for c in node.children if c is not None), None)
        span = _tok_span(node) if isinstance(node, Token) else Span.at(self.text, 0)
        return LimitError(
            f"the query is nested more than {self.max_depth} levels deep",
            span,
            self.text,
            "simplify the expression (IN (…) replaces long OR chains)",
        )

    def _check_list(self, items: list[Any], span: Span) -> None:
        if len(items) > self.max_list_items:
            raise LimitError(
                f"the list has {len(items):,} items; the limit is {self.max_list_items:,}",
                span,
                self.text,
                "bind a long list as a $parameter",
            )

    # ------------------------------------------------------------------------------------- clauses

    def on_start(self, c: list[Any]) -> Query:
        return c[0]

    def on_query(self, c: list[_Clause]) -> Query:
        flat: list[_Clause] = []
        for clause in c:
            flat.extend(clause if isinstance(clause, list) else [clause])
        c = flat
        parts = {clause.tag: clause.value for clause in c}
        limit, autocut = parts.get("limit", (None, None))
        return Query(
            parts["select"],
            parts.get("let", ()),
            parts.get("where"),
            parts.get("order", ()),
            limit,
            parts.get("offset"),
            parts.get("distinct"),
            count=parts.get("count"),
            autocut=autocut,
            span=_join(c[0].span, c[-1].span),
        )

    def on_select_clause(self, c: list[Any]) -> _Clause:
        unit: Unit = c[1]
        return _Clause("select", unit, _join(_tok_span(c[0]), unit.span))

    def on_count_select(self, c: list[Any]) -> list[_Clause]:
        name: Token = c[1]
        unit: Unit = c[3]
        if name.upper() != "COUNT":
            guess = _close(name.value, ["COUNT"])
            raise self._error(
                f"'{name.value}' is not something a query can select",
                _tok_span(name),
                "did you mean COUNT?" if guess else "select a unit (SELECT SENTENCE) or count one: "
                "SELECT COUNT(DOCUMENT) BY meta.source",
            )
        by: tuple[Expr, ...] = c[5] if len(c) > 5 and c[5] is not None else ()
        end = by[-1].span if by else _tok_span(c[4])
        count = Count(by, span=_join(_tok_span(name), end))
        return [_Clause("select", unit, _join(_tok_span(c[0]), end)), _Clause("count", count, end)]

    def on_count_by(self, c: list[Any]) -> tuple[Expr, ...]:
        return tuple(c)

    def on_unit(self, c: list[Token]) -> Unit:
        return Unit(c[0].upper(), span=_tok_span(c[0]))

    def on_span_base(self, c: list[Token]) -> Token:
        return c[0]

    def on_span_unit(self, c: list[Any]) -> Unit:
        base: Token = c[2]
        window: Expr | None = None
        seen = False
        for kw in c[3:-1]:
            if kw.name != "window":
                raise self._error(
                    f"SPAN has no option '{kw.name}'", kw.span, "SPAN takes window => n, e.g. SPAN(SENTENCE, window => 2)"
                )
            if seen:
                raise self._error("window is given twice", kw.span)
            seen = True
            window = kw.value
        return Unit("SPAN", base.upper(), window, span=_join(_tok_span(c[0]), _tok_span(c[-1])))

    def on_let_clause(self, c: list[Binding]) -> _Clause:
        return _Clause("let", tuple(c), c[-1].span)

    def on_binding(self, c: list[Any]) -> Binding:
        name: Token = c[0]
        expr: Expr = c[2]
        return Binding(str(name), expr, span=_join(_tok_span(name), expr.span))

    def on_where_clause(self, c: list[Any]) -> _Clause:
        return _Clause("where", c[0], c[0].span)

    def on_distinct_clause(self, c: list[Any]) -> _Clause:
        keep = c[-1] if isinstance(c[-1], _Keep) or c[-1] is None else None
        keys = tuple(c[:-1]) if keep is not None or c[-1] is None else tuple(c)
        value = keep.value if isinstance(keep, _Keep) else None
        end = keep.span if isinstance(keep, _Keep) else keys[-1].span
        return _Clause("distinct", Distinct(keys, value, span=_join(keys[0].span, end)), end)

    def on_keep(self, c: list[Any]) -> _Keep:
        return _Keep(c[0], c[0].span)

    def on_order_clause(self, c: list[OrderKey]) -> _Clause:
        return _Clause("order", tuple(c), c[-1].span)

    def on_order_key(self, c: list[Any]) -> OrderKey:
        expr: Expr = c[0]
        descending = False
        nulls_first: bool | None = None
        end = expr.span
        for tok in c[1:]:
            end = _tok_span(tok)
            if tok.type == "DESC":
                descending = True
            elif tok.type in ("FIRST", "LAST"):
                nulls_first = tok.type == "FIRST"
        return OrderKey(expr, descending, nulls_first, span=_join(expr.span, end))

    def on_direction(self, c: list[Token]) -> Token:
        return c[0]

    def on_nulls(self, c: list[Token]) -> Token:
        return c[0]

    def on_limit_clause(self, c: list[Any]) -> _Clause:
        autocut = c[1] if len(c) > 1 else None
        return _Clause("limit", (c[0], autocut), (autocut or c[0]).span)

    def on_autocut(self, c: list[Any]) -> Expr:
        return c[0]  # type: ignore[no-any-return]

    def on_offset_clause(self, c: list[Any]) -> _Clause:
        return _Clause("offset", c[0], c[0].span)

    # ----------------------------------------------------------------------------------- operators

    def on_or_(self, c: list[Any]) -> Binary:
        return _chain("OR", c)

    def on_and_(self, c: list[Any]) -> Binary:
        return _chain("AND", c)

    def on_not_(self, c: list[Any]) -> Unary:
        return Unary("NOT", c[1], span=_join(_tok_span(c[0]), c[1].span))

    def on_compare(self, c: list[Any]) -> Compare:
        return Compare(_COMPARE[c[1].value], c[0], c[2], span=_join(c[0].span, c[2].span))

    def on_in_(self, c: list[Any]) -> In:
        negated = len(c) == 3
        return In(c[0], c[-1], negated, span=_join(c[0].span, c[-1].span))

    def on_in_list(self, c: list[Any]) -> ListExpr:
        span = _join(_tok_span(c[0]), _tok_span(c[-1]))
        items = c[1:-1]
        self._check_list(items, span)
        return ListExpr(tuple(items), span=span)

    def on_has(self, c: list[Any]) -> Has:
        return Has(c[0], c[-1], None, len(c) == 3, span=_join(c[0].span, c[-1].span))

    def on_has_any(self, c: list[Any]) -> Has:
        return Has(c[0], c[-1], "ANY", len(c) == 3, span=_join(c[0].span, c[-1].span))

    def on_has_all(self, c: list[Any]) -> Has:
        return Has(c[0], c[-1], "ALL", len(c) == 3, span=_join(c[0].span, c[-1].span))

    def on_has_list(self, c: list[Any]) -> ListExpr:
        span = _join(_tok_span(c[0]), _tok_span(c[-1]))
        items = [x for x in c[1:-1] if x is not None]
        self._check_list(items, span)
        return ListExpr(tuple(items), span=span)

    def on_between(self, c: list[Any]) -> Between:
        negated = len(c) == 4
        return Between(c[0], c[-2], c[-1], negated, span=_join(c[0].span, c[-1].span))

    def on_is_null(self, c: list[Any]) -> IsNull:
        return IsNull(c[0], len(c) == 3, span=_join(c[0].span, _tok_span(c[-1])))

    def on_text_match(self, c: list[Any]) -> TextMatch:
        negated = len(c) == 4
        return TextMatch(c[-2].type, c[0], c[-1], negated, span=_join(c[0].span, c[-1].span))

    def on_within(self, c: list[Any]) -> Within:
        expr: Expr = c[0]
        arg = c[1]
        span = _join(expr.span, arg.span)
        if isinstance(arg, _Range):
            return Within(expr, low=arg.low, high=arg.high, span=span)
        return Within(expr, period=arg, span=span)

    def on_within_range(self, c: list[Any]) -> _Range:
        return _Range(c[1], c[2], _join(_tok_span(c[0]), _tok_span(c[3])))

    def on_arith(self, c: list[Any]) -> Binary:
        return Binary(c[1].value, c[0], c[2], span=_join(c[0].span, c[2].span))

    def on_neg(self, c: list[Any]) -> Expr:
        operand: Expr = c[1]
        span = _join(_tok_span(c[0]), operand.span)
        # `-3` is the literal -3, but `-(3)` and `- -3` stay negations: render relies on that distinction.
        if (
            isinstance(operand, Literal)
            and type(operand.value) in (int, float)
            and operand.span is not None
            and self.text[operand.span.start] in "0123456789."
        ):
            return Literal(-operand.value, span=span)  # type: ignore[operator]
        return Unary("-", operand, span=span)

    def on_paren(self, c: list[Any]) -> Expr:
        return dataclasses.replace(c[1], span=_join(_tok_span(c[0]), _tok_span(c[2])))

    # -------------------------------------------------------------------------------------- atoms

    def on_number(self, c: list[Token]) -> Literal:
        return Literal(self._number(c[0]), span=_tok_span(c[0]))

    def on_neg_number(self, c: list[Token]) -> Literal:
        return Literal(-self._number(c[1]), span=_join(_tok_span(c[0]), _tok_span(c[1])))

    def _number(self, tok: Token) -> int | float:
        text = tok.value
        if text.isdigit():
            if len(text.lstrip("0")) > _MAX_INT_DIGITS:
                raise self._error("the number is too large", _tok_span(tok), "numbers must be below 1e308")
            return int(text)
        value = float(text)
        if not math.isfinite(value):
            raise self._error("the number is too large", _tok_span(tok), "numbers must be below 1e308")
        return value

    def on_string(self, c: list[Token]) -> Literal:
        return Literal(self._string(c[0]), span=_tok_span(c[0]))

    def _string(self, tok: Token) -> str:
        body = tok.value[1:-1]
        if "\\" not in body:
            return body
        out: list[str] = []
        i = 0
        while True:
            j = body.find("\\", i)
            if j < 0:
                out.append(body[i:])
                return "".join(out)
            out.append(body[i:j])
            c = body[j + 1]  # the STRING terminal guarantees a character after every backslash
            if c == "u":
                code, i = self._unicode_escape(tok, body, j)
                out.append(code)
            elif c in _ESCAPES:
                out.append(_ESCAPES[c])
                i = j + 2
            else:  # unknown escapes stay as written, so regexes like "\d+" read naturally
                out.append(body[j : j + 2])
                i = j + 2

    def _unicode_escape(self, tok: Token, body: str, j: int) -> tuple[str, int]:
        def bad(message: str, width: int) -> NLQLSyntaxError:
            token_span = _tok_span(tok)
            start = token_span.start + 1 + j
            column = token_span.column + 1 + j
            span = Span(start, start + width, token_span.line, column, token_span.line, column + width)
            return self._error(message, span, "write \\u followed by exactly four hex digits, e.g. \\u00e9")

        digits = body[j + 2 : j + 6]
        if not _HEX4.fullmatch(digits):
            raise bad("invalid \\u escape in string", min(6, len(body) - j))
        code = int(digits, 16)
        if 0xDC00 <= code <= 0xDFFF:
            raise bad("invalid \\u escape in string: a lone low surrogate", 6)
        if 0xD800 <= code <= 0xDBFF:
            low = body[j + 8 : j + 12]
            if body[j + 6 : j + 8] == "\\u" and _HEX4.fullmatch(low) and 0xDC00 <= int(low, 16) <= 0xDFFF:
                return chr(0x10000 + ((code - 0xD800) << 10) + (int(low, 16) - 0xDC00)), j + 12
            raise bad("invalid \\u escape in string: a high surrogate without its low half", 6)
        return chr(code), j + 6

    def on_true(self, c: list[Token]) -> Literal:
        return Literal(True, span=_tok_span(c[0]))

    def on_false(self, c: list[Token]) -> Literal:
        return Literal(False, span=_tok_span(c[0]))

    def on_null(self, c: list[Token]) -> Literal:
        return Literal(None, span=_tok_span(c[0]))

    def on_param(self, c: list[Token]) -> Param:
        return Param(c[0].value[1:], span=_tok_span(c[0]))

    def on_typed_literal(self, c: list[Token]) -> TypedLiteral:
        name, string = c
        span = _join(_tok_span(name), _tok_span(string))
        kind = name.upper()
        if kind not in ("DATE", "TIMESTAMP"):
            raise self._error(
                f"unexpected string after '{name}'",
                _tok_span(string),
                "is a comma missing? (typed literals are DATE '2024-06-01' and TIMESTAMP '2024-06-01T10:00:00Z')",
            )
        return TypedLiteral(kind, self._string(string), span=span)

    def on_keyword_key(self, c: list[Token]) -> Token:
        return c[0]

    def on_path(self, c: list[Token]) -> Expr:
        head = c[0]
        span = _join(_tok_span(head), _tok_span(c[-1]))
        if len(c) == 1:
            name = head.value
            lower = name.lower()
            if lower in _FIELDS:
                return Field(lower, span=span)
            return Ref(name, span=span)
        if head.lower() != "meta":
            written = ".".join(t.value for t in c)
            raise self._error(
                f"'{written}' is not a field",
                span,
                f"metadata is written meta.<key>, e.g. meta.{c[1].value}" if head.lower() not in _FIELDS
                else f"{head.lower()} has no sub-fields; metadata is written meta.<key>",
            )
        keys = tuple(
            tok.value[1:-1].replace("``", "`") if tok.type == "QUOTED_KEY" else tok.value for tok in c[1:]
        )
        return Meta(keys, span=span)

    def on_call(self, c: list[Any]) -> Call:
        name: Token = c[0]
        span = _join(_tok_span(name), _tok_span(c[-1]))
        args: list[Expr] = []
        kwargs: list[tuple[str, Expr]] = []
        for arg in c[2:-1]:
            if arg is None:
                continue
            if isinstance(arg, _Kwarg):
                kwargs.append((arg.name, arg.value))
            elif kwargs:
                raise self._error(
                    "a positional argument follows a named argument",
                    arg.span,
                    "put positional arguments first, e.g. RRF(a, b, k => 60)",
                )
            else:
                args.append(arg)
        return Call(name.upper(), tuple(args), tuple(kwargs), span=span)

    def on_named_arg(self, c: list[Any]) -> _Kwarg:
        name: Token = c[0]
        return _Kwarg(str(name), c[1], _join(_tok_span(name), c[1].span))

    def on_list(self, c: list[Any]) -> ListExpr:
        span = _join(_tok_span(c[0]), _tok_span(c[-1]))
        items = [x for x in c[1:-1] if x is not None]
        self._check_list(items, span)
        return ListExpr(tuple(items), span=span)


def _chain(op: str, operands: list[Any]) -> Binary:
    """The IR of ``o1 op o2 op …``: left-deep up to :data:`BALANCE_AFTER` operands, else balanced.

    A balanced node's span starts at its first operand (a parenthesised group's starts at ``(``), which
    is how rendering tells a chain it may print flat from a group the user wrote.
    """
    if len(operands) <= BALANCE_AFTER:
        node = operands[0]
        for right in operands[1:]:
            node = Binary(op, node, right, span=_join(node.span, right.span))
        return node  # type: ignore[no-any-return]
    return _balanced(op, operands)


def _balanced(op: str, operands: list[Any]) -> Any:
    # iterative bottom-up pairing keeps the builder free of recursion (no node deeper than log2 n)
    level = list(operands)
    while len(level) > 1:
        nxt = [Binary(op, level[i], level[i + 1], span=_join(level[i].span, level[i + 1].span))
               for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


# Rule name → handler, resolved once: `on_compare` handles the `compare` rule.
_HANDLERS: dict[str, Callable[[_Builder, list[Any]], Any]] = {
    name[3:]: getattr(_Builder, name) for name in dir(_Builder) if name.startswith("on_")
}

# ------------------------------------------------------------------------------------ syntax errors

_OPERAND_STARTS = frozenset({
    "NAME", "NUMBER", "STRING", "PARAM", "LPAR", "LSQB", "MINUS", "NOT", "TRUE", "FALSE", "NULL",
})
_CLAUSES = ("SELECT", "_LET", "_WHERE", "_DISTINCT", "_ORDER", "_LIMIT", "_OFFSET")
_CLAUSE_WORDS = {"SELECT": "SELECT", "_LET": "LET", "_WHERE": "WHERE", "_DISTINCT": "DISTINCT BY", "_ORDER": "ORDER BY",
                 "_LIMIT": "LIMIT", "_OFFSET": "OFFSET"}
_PUNCT = {
    "EQEQ": "==", "EQUAL": "=", "NE": "!=", "LTGT": "<>", "LE": "<=", "GE": ">=", "LT": "<", "GT": ">",
    "PLUS": "+", "MINUS": "-", "STAR": "*", "SLASH": "/", "_ARROW": "=>", "LPAR": "(", "RPAR": ")",
    "LSQB": "[", "RSQB": "]", "_COMMA": ",", "_DOT": ".", "_SEMI": ";",
}
_COMPARISONS = frozenset({"EQEQ", "EQUAL", "NE", "LTGT", "LE", "GE", "LT", "GT"})
_VALUE_AFTER = _COMPARISONS | {"PLUS", "MINUS", "STAR", "SLASH", "_ARROW", "CONTAINS", "LIKE", "MATCH",
                               "_BETWEEN"}
_CONDITION_AFTER = frozenset({"_AND", "_OR", "NOT", "_WHERE"})
_OPERATORS = _COMPARISONS | {"PLUS", "MINUS", "STAR", "SLASH", "_IN", "_BETWEEN", "_IS", "CONTAINS",
                             "LIKE", "MATCH", "_WITHIN", "NOT", "_HAS"}
_ORDER_HINT = "clauses go in this order: SELECT, LET, WHERE, DISTINCT BY, ORDER BY, LIMIT, OFFSET"
_SELECT_HINT = "a query looks like: SELECT SENTENCE WHERE … LIMIT 5"
_UNIT_MESSAGE = "expected a unit: SENTENCE, CHUNK, DOCUMENT or SPAN(…)"


def _word(terminal: str) -> str:
    """A terminal name in user words: a keyword, a quoted symbol or a description."""
    if terminal in _PUNCT:
        return f"'{_PUNCT[terminal]}'"
    return {
        "NAME": "a name", "NUMBER": "a number", "STRING": "a string", "PARAM": "a $parameter",
        "QUOTED_KEY": "a `quoted` key", "$END": "the end of the query",
    }.get(terminal, terminal.lstrip("_"))


def _show(tok: Token) -> str:
    """The unexpected token as a user sees it."""
    kind = tok.type
    if kind == "$END":
        return "end of the query"
    value = tok.value if len(tok.value) <= 40 else tok.value[:37] + "…"
    if kind in _PUNCT:
        return f"'{value}'"
    if kind == "NAME":
        return f"'{value}'"
    if kind == "NUMBER":
        return f"number {value}"
    if kind == "STRING":
        return f"string {value}"
    if kind == "PARAM":
        return f"parameter {value}"
    if kind == "QUOTED_KEY":
        return f"key {value}"
    return f"keyword {kind.lstrip('_')}"


def _describe(accepts: Iterable[str], operand: str = "an expression") -> str:
    """A short 'one of …' description of what the parser would have accepted."""
    accepts = set(accepts)
    words: list[str] = []
    if accepts & {"NAME", "NUMBER"}:
        words.append(operand)
    elif accepts & _OPERATORS:
        words.append("an operator")
    for group in (("_AND", "_OR"), ("ASC", "DESC", "_NULLS"), _CLAUSES):
        words.extend(_word(t) for t in group if t in accepts)
    for t in sorted(accepts):
        if t in _PUNCT and t not in _OPERATORS and t not in ("LPAR", "LSQB"):
            words.append(_word(t))
    if "$END" in accepts:
        words.append("the end of the query")
    if not words:
        words = [_word(t) for t in sorted(accepts)]
    if len(words) > 6:
        words = words[:6] + ["…"]
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " or " + words[-1]


def _close(word: str, candidates: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(word.upper(), list(candidates), n=1, cutoff=0.7)
    return found[0] if found else None


def _tokens_before(text: str, pos: int) -> list[Token]:
    """Every token that starts before ``pos`` (re-lexed; the error path only)."""
    out: list[Token] = []
    try:
        for tok in _lexer().tokens(text):
            if _tok_span(tok).start >= pos:
                break
            out.append(tok)
    except UnexpectedCharacters:
        pass
    return out


def _open_brackets(tokens: list[Token]) -> tuple[list[Token], Token | None]:
    """Brackets still open after ``tokens``, innermost last, and the first unmatched closer if any."""
    stack: list[Token] = []
    for tok in tokens:
        if tok.type in ("LPAR", "LSQB"):
            stack.append(tok)
        elif tok.type in ("RPAR", "RSQB"):
            if not stack:
                return stack, tok
            stack.pop()
    return stack, None


def _clauses_seen(tokens: list[Token]) -> list[Token]:
    depth = 0
    seen: list[Token] = []
    for tok in tokens:
        if tok.type in ("LPAR", "LSQB"):
            depth += 1
        elif tok.type in ("RPAR", "RSQB"):
            depth -= 1
        elif depth <= 0 and tok.type in _CLAUSES:
            seen.append(tok)
    return seen


def _end_span(text: str, prev: list[Token]) -> Span:
    """A zero-width span just after the last token: where a truncated query stops."""
    if not prev:
        return Span.at(text, 0)
    last = _tok_span(prev[-1])
    return Span(last.end, last.end, last.end_line, last.end_column, last.end_line, last.end_column)


def _char_error(text: str, exc: UnexpectedCharacters) -> NLQLSyntaxError:
    pos = exc.pos_in_stream or 0
    char = text[pos]
    line_end = text.find("\n", pos)
    line_end = len(text) if line_end < 0 else line_end
    one = Span.at(text, pos, pos + 1)
    if char in "\"'":
        return NLQLSyntaxError(
            "unterminated string", Span.at(text, pos, line_end), text,
            f"close the string with {char}; write a {char} inside it as \\{char}",
        )
    if char == "`":
        if text.startswith("``", pos):
            return NLQLSyntaxError("empty backtick key", Span.at(text, pos, pos + 2), text,
                                   "write a key between the backticks, e.g. meta.`content-type`")
        return NLQLSyntaxError("unterminated backtick key", Span.at(text, pos, line_end), text,
                               "close the key with a backtick, e.g. meta.`content-type`")
    if char == "$":
        return NLQLSyntaxError("expected a parameter name after '$'", one, text,
                               "parameters are written $name or $1")
    hints = {
        "!": "not-equal is written != or <>; negation is NOT",
        "&": "use AND to combine conditions",
        "|": "use OR to combine conditions",
        "{": "lists are written [a, b] or, after IN, (a, b)",
        "}": "lists are written [a, b] or, after IN, (a, b)",
    }
    hint = hints.get(char)
    if hint is None and char.isalpha():
        hint = "names use ASCII letters, digits and _; put text in quotes, metadata keys in backticks"
    shown = char if char.isprintable() and not char.isspace() else f"U+{ord(char):04X}"
    return NLQLSyntaxError(f"unexpected character '{shown}'", one, text, hint)


def _token_error(text: str, exc: UnexpectedToken) -> NLQLSyntaxError:
    tok: Token = exc.token
    at_end = tok.type == "$END"
    pos = len(text) if at_end else _tok_span(tok).start
    prev = _tokens_before(text, pos)
    try:
        accepts = set(exc.accepts or exc.expected)
    except LarkError:  # pragma: no cover - accepts() only re-feeds tokens
        accepts = set(exc.expected)
    span = _end_span(text, prev) if at_end else _tok_span(tok)
    try:
        message, hint, span = _describe_token_error(text, tok, prev, accepts, span)
    except (IndexError, KeyError, ValueError, AttributeError):  # pragma: no cover - never hide the error itself
        message, hint = f"unexpected {_show(tok)}", None
    return NLQLSyntaxError(message, span, text, hint)


def _describe_token_error(  # noqa: C901 - one flat list of named cases reads best
    text: str, tok: Token, prev: list[Token], accepts: set[str], span: Span
) -> tuple[str, str | None, Span]:
    kind = tok.type
    at_end = kind == "$END"

    # An unterminated /* lexes as '/' '*': a real comment would have been skipped.
    pair = [*prev[-1:], tok]
    for a, b in zip(pair, pair[1:], strict=False):
        if a.type == "SLASH" and b.type == "STAR" and a.end_pos == b.start_pos:
            return "unterminated comment", "close the comment with */", _tok_span(a)
    for a, b in zip(prev, prev[1:], strict=False):
        if a.type == "SLASH" and b.type == "STAR" and a.end_pos == b.start_pos:
            return "unterminated comment", "close the comment with */", _tok_span(a)
    if kind == "SLASH" and text.startswith("*", tok.end_pos):
        return "unterminated comment", "close the comment with */", span

    if not prev:
        if at_end:
            return "empty query", _SELECT_HINT, span
        if kind in ("SENTENCE", "CHUNK", "DOCUMENT", "SPAN"):
            return "missing SELECT", f"write SELECT {tok.value.upper()} …", span
        guess = _close(tok.value, ["SELECT"]) if kind == "NAME" else None
        return "a query starts with SELECT", "did you mean SELECT?" if guess else _SELECT_HINT, span

    last = prev[-1]
    if last.type == "_SEMI":
        return f"unexpected {_show(tok)} after ';'", "';' ends the query; only one query is allowed", span

    if len(prev) >= 2 and prev[-2].type == "SELECT" and last.type == "NAME" and kind != "LPAR":
        # SELECT SENTENCES …: a NAME after SELECT can only start COUNT(…); the word itself is the mistake
        guess = _close(last.value, [*UNITS, "COUNT"])
        return _UNIT_MESSAGE, f"did you mean {guess}?" if guess else None, _tok_span(last)
    if len(prev) >= 3 and prev[-3].type == "SELECT" and prev[-2].type == "NAME" and last.type == "LPAR":
        if prev[-2].upper() == "COUNT":
            hint: str | None = ("COUNT counts units: SELECT COUNT(SENTENCE) or SELECT COUNT(DOCUMENT) BY meta.source"
                    if kind in ("STAR", "NAME", "RPAR") else "write SELECT COUNT(DOCUMENT) BY meta.source")
            return "expected a unit inside COUNT(…): SENTENCE, CHUNK or DOCUMENT", hint, span
        return _UNIT_MESSAGE, None, _tok_span(prev[-2])
    if last.type == "SELECT":
        if kind == "STAR":
            return _UNIT_MESSAGE, "NLQL selects units, not columns: SELECT SENTENCE", span
        guess = _close(tok.value, UNITS) if kind == "NAME" else None
        return _UNIT_MESSAGE, f"did you mean {guess}?" if guess else None, span
    if last.type == "SPAN" and kind != "LPAR":
        return "expected '(' after SPAN", "write SPAN(SENTENCE, window => 2)", span
    if len(prev) >= 2 and prev[-2].type == "SPAN" and last.type == "LPAR":
        return "expected SENTENCE or CHUNK inside SPAN(…)", "write SPAN(SENTENCE, window => 2)", span
    if len(prev) >= 4 and prev[-4].type == "SPAN" and last.type == "_COMMA":
        return "expected window => n inside SPAN(…)", "write SPAN(SENTENCE, window => 2)", span

    opened, unmatched = _open_brackets(prev)
    if kind in ("RPAR", "RSQB") and not opened:
        return f"unmatched {_show(tok)}", "remove it or add the opening bracket", span

    clauses = _clauses_seen(prev)
    clause = clauses[-1].type if clauses else None

    if last.type in ("_ANY", "_ALL") and len(prev) >= 2 and prev[-2].type == "_HAS":
        word = last.type.lstrip("_")
        return (f"expected a list after HAS {word}",
                f'write HAS {word} ("a", "b"), HAS {word} $values, or HAS "a" for one value', span)
    if last.type == "_AUTOCUT":
        return "expected a whole number after AUTOCUT", "e.g. LIMIT 10 AUTOCUT 1", span
    if kind == "_AUTOCUT" and not opened:
        if any(c.type == "_LIMIT" for c in clauses):
            return "AUTOCUT goes right after LIMIT n", "write LIMIT n AUTOCUT k [OFFSET m], e.g. LIMIT 10 AUTOCUT 1", span
        return "AUTOCUT needs a LIMIT", "write LIMIT n AUTOCUT k, e.g. LIMIT 10 AUTOCUT 1", span
    if kind == "_COMMA" and opened and opened[-1].type == "LPAR" and _has_before(prev, opened[-1]):
        return ("HAS takes one value, not a list",
                'for several values write HAS ANY ("a", "b") or HAS ALL ("a", "b")', span)
    if last.type == "_LET":
        if kind in _KEYWORD_TERMINALS:
            return f"'{tok.value}' is a keyword and cannot be a binding name", "choose another name", span
        return "expected a binding after LET", "write LET name = expression", span
    if last.type == "_DOT":
        if kind == "STRING":
            return ("a metadata key is written in backticks, not quotes",
                    f"write meta.`{tok.value[1:-1]}`", span)
        return "expected a key after '.'", "keys that are not names go in backticks: meta.`content-type`", span
    if last.type == "_COMMA" and clause == "_LET" and kind in _KEYWORD_TERMINALS:
        return f"'{tok.value}' is a keyword and cannot be a binding name", "choose another name", span

    # Where an operand must follow (after AND, WHERE, '>=', …) but none does.
    if accepts & {"NAME", "NUMBER"} and kind not in _OPERAND_STARTS:
        if last.type == "_COMMA":
            where = ("binding" if clause == "_LET" else "sort key" if clause == "_ORDER" else "BY key"
                     if clause == "SELECT" and not opened
                     else "DISTINCT BY key" if clause == "_DISTINCT" else "item")
            if at_end or kind in ("RPAR", "RSQB") or kind in _CLAUSES:
                return f"trailing comma: expected another {where}", "remove the comma or add another " + where, span
            return f"expected another {where} after ','", None, span
        if last.type in ("LPAR", "LSQB"):
            return f"expected an expression after {_show(last)}", None, span
        if last.type in _CONDITION_AFTER:
            word = last.type.lstrip("_")
            hint = None
            dangling = at_end or kind in _CLAUSES or kind in ("RPAR", "_SEMI")
            if dangling and last.type == "_WHERE":
                hint = 'add a condition, e.g. WHERE meta.lang == "en", or remove WHERE'
            elif dangling:
                hint = f"remove the trailing {word} or add a condition after it"
            elif kind in _KEYWORD_TERMINALS:
                hint = _keyword_name_hint(tok)
            return f"expected a condition after {word}", hint, span
        if last.type == "_WITHIN":
            return ('expected a period after WITHIN', 'write WITHIN "last week", WITHIN $period or '
                    "WITHIN (DATE '2024-01-01', DATE '2024-02-01')", span)
        if last.type == "EQUAL" and clause == "_LET" and len(prev) >= 3 and prev[-3].type in ("_LET", "_COMMA"):
            return f"expected an expression after '{prev[-2].value} ='", None, span
        if last.type == "_BY" and len(prev) >= 2 and prev[-2].type == "RPAR" and clause == "SELECT":
            return "expected a key after COUNT(…) BY", "e.g. SELECT COUNT(DOCUMENT) BY meta.source", span
        if last.type == "_HAS":
            return "expected a value after HAS", 'e.g. meta.tags HAS "rag" or meta.tags HAS ANY ("rag", "llm")', span
        if last.type == "_BY" and len(prev) >= 2 and prev[-2].type == "_DISTINCT":
            return "expected a key after DISTINCT BY", "e.g. DISTINCT BY doc_id KEEP 2", span
        if last.type == "_BY":
            return "expected a sort key after ORDER BY", "e.g. ORDER BY rel DESC", span
        if last.type == "_KEEP":
            return "expected a whole number after KEEP", "e.g. DISTINCT BY doc_id KEEP 2", span
        if last.type in _VALUE_AFTER or last.type == "_AND":
            hint = _keyword_name_hint(tok) if kind in _KEYWORD_TERMINALS else None
            return f"expected a value after {_show(last)}", hint, span
        return f"expected an expression, got {_show(tok)}", None, span

    if last.type == "_ORDER":
        return "expected BY after ORDER", "write ORDER BY key [ASC|DESC]", span
    if last.type == "_DISTINCT":
        return "expected BY after DISTINCT", "write DISTINCT BY key, … [KEEP n]", span
    if last.type == "_NULLS":
        return "expected FIRST or LAST after NULLS", None, span
    if last.type == "_IS":
        return "expected NULL or NOT NULL after IS", None, span
    if last.type == "NOT" and len(prev) >= 2 and prev[-2].type == "_IS":
        return "expected NULL after IS NOT", None, span
    if last.type == "_IN":
        return "expected a list after IN", 'write IN ("a", "b") or IN $values', span
    if last.type in ("_LIMIT", "_OFFSET"):
        word = last.type.lstrip("_")
        return f"expected a whole number or a $parameter after {word}", f"e.g. {word} 10", span
    if last.type == "NOT" and accepts <= {"_IN", "_BETWEEN", "CONTAINS", "LIKE", "MATCH", "_HAS"}:
        return "expected IN, BETWEEN, CONTAINS, LIKE, MATCH or HAS after NOT", None, span

    if kind in _CLAUSES or at_end or kind == "_SEMI":
        if opened and accepts & {"RPAR", "RSQB"}:
            bracket = opened[-1]
            closer = ")" if bracket.type == "LPAR" else "]"
            where = "at the end of the query" if at_end else f"before {_show(tok)}"
            return (f"missing '{closer}' {where}",
                    f"the '{bracket.value}' at line {bracket.line}, column {bracket.column} is not closed", span)
    if kind in _CLAUSES:
        word = _CLAUSE_WORDS[kind]
        if any(c.type == kind for c in clauses):
            hint = {
                "_WHERE": "combine conditions with AND in one WHERE",
                "_LET": "bind several names in one LET: LET a = …, b = …",
                "_ORDER": "list several sort keys in one ORDER BY: ORDER BY a DESC, b",
                "_DISTINCT": "list several keys in one DISTINCT BY: DISTINCT BY a, b",
            }.get(kind, _ORDER_HINT)
            return f"duplicate {word} clause", hint, span
        later = [c for c in clauses if _CLAUSES.index(c.type) > _CLAUSES.index(kind)]
        if later:
            return f"{word} must come before {_CLAUSE_WORDS[later[0].type]}", _ORDER_HINT, span

    if clause == "_LET" and kind == "NAME" and re.match(r"\s*=(?![=>])", text[tok.end_pos:]):
        return "missing comma between bindings", "separate bindings with commas: LET a = …, b = …", span
    if (clause == "_LET" and last.type == "NAME" and len(prev) >= 2 and prev[-2].type in ("_LET", "_COMMA")
            and "EQUAL" in accepts):
        if kind == "EQEQ":
            return "a binding uses '=', not '=='", f"write LET {last.value} = …", span
        return f"expected '=' after the binding name '{last.value}'", "write LET name = expression", span
    if opened and kind in _OPERAND_STARTS and "_COMMA" in accepts:
        bracket = opened[-1]
        what = "list items" if bracket.type == "LSQB" else "arguments"
        return f"missing comma between {what}", None, span
    if clause == "_ORDER" and kind in _OPERAND_STARTS and "_COMMA" in accepts and not opened:
        guess = _close(tok.value, [_word(t) for t in accepts if t in _KEYWORD_TERMINALS]) if kind == "NAME" else None
        if guess:  # ORDER BY rel LIMT 5: a misspelt keyword, not a second sort key
            return f"unknown word '{tok.value}'", f"did you mean {guess}?", span
        return "missing comma between sort keys", "separate sort keys with commas: ORDER BY a DESC, b", span
    if "_AND" in accepts and _pending_between(prev):
        return "expected AND in BETWEEN", "write x BETWEEN low AND high", span

    if kind in _PREDICATE_TERMINALS and _in_predicate(prev):
        return ("comparisons do not chain", "combine them with AND, e.g. 1 < x AND x < 3, or write x BETWEEN 1 AND 3",
                span)
    if kind == "NAME":
        guess = _close(tok.value, [_word(t) for t in accepts if t in _KEYWORD_TERMINALS])
        if guess:
            return f"unknown word '{tok.value}'", f"did you mean {guess}?", span
    if at_end:
        return f"unexpected end of the query: expected {_describe(accepts)}", None, span
    return f"unexpected {_show(tok)}", f"expected {_describe(accepts)}", span


_KEYWORD_TERMINALS = frozenset({
    "SELECT", "_LET", "_WHERE", "_DISTINCT", "_KEEP", "_ORDER", "_BY", "_LIMIT", "_OFFSET", "ASC", "DESC", "_NULLS", "FIRST", "LAST",
    "SENTENCE", "CHUNK", "DOCUMENT", "SPAN", "_OR", "_AND", "NOT", "_IN", "_BETWEEN", "_IS", "CONTAINS",
    "LIKE", "MATCH", "_WITHIN", "TRUE", "FALSE", "NULL", "_HAS", "_ANY", "_ALL", "_AUTOCUT",
})
assert {t.lstrip("_") for t in _KEYWORD_TERMINALS} == set(KEYWORDS)


def _keyword_name_hint(tok: Token) -> str:
    return f"{tok.value.upper()} is a keyword; a metadata key named so is written meta.`{tok.value.lower()}`"


_PREDICATE_TERMINALS = _COMPARISONS | {"_IN", "_BETWEEN", "_IS", "CONTAINS", "LIKE", "MATCH", "_WITHIN", "_HAS"}


def _in_predicate(prev: list[Token]) -> bool:
    """True when the current operand already sits in a comparison (so another one would chain)."""
    depth = 0
    for tok in reversed(prev):
        if tok.type in ("RPAR", "RSQB"):
            depth += 1
        elif tok.type in ("LPAR", "LSQB"):
            if depth == 0:
                return False
            depth -= 1
        elif depth == 0 and tok.type in ("_AND", "_OR", "NOT", "_WHERE", "_COMMA", "EQUAL", "_ARROW", "_BY"):
            return tok.type == "_AND" and _pending_between(prev[: prev.index(tok)])
        elif depth == 0 and tok.type in _PREDICATE_TERMINALS:
            return True
    return False


def _has_before(prev: list[Token], bracket: Token) -> bool:
    """True when ``bracket`` directly follows HAS (``x HAS ("a", …``: a list given to plain HAS)."""
    i = next((i for i, t in enumerate(prev) if t is bracket), 0)
    return i > 0 and prev[i - 1].type == "_HAS"


def _pending_between(prev: list[Token]) -> bool:
    """True when the last BETWEEN at this level has not had its AND yet."""
    depth = 0
    for tok in reversed(prev):
        if tok.type in ("RPAR", "RSQB"):
            depth += 1
        elif tok.type in ("LPAR", "LSQB"):
            if depth == 0:
                return False
            depth -= 1
        elif depth == 0 and tok.type == "_AND":
            return False
        elif depth == 0 and tok.type == "_BETWEEN":
            return True
    return False
