"""Render: IR → canonical text, minimal parentheses, quoting, and the round trip."""

from __future__ import annotations

import pytest

from nlql.ir import (
    Between,
    Binary,
    Binding,
    Call,
    Compare,
    Field,
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
from nlql.parser import parse
from nlql.render import quote_key, quote_string, render, render_expr

a, b, c = Meta(("a",)), Meta(("b",)), Meta(("c",))


def test_canonical_example_from_the_brief() -> None:
    text = ('select sentence let rel = similarity(content, \'AI agents\') where rel >= 0.3 and meta.status = "published"'
            " order by rel desc limit 5")
    assert render(parse(text)) == (
        'SELECT SENTENCE LET rel = SIMILARITY(content, "AI agents") WHERE rel >= 0.3 AND meta.status == "published" '
        "ORDER BY rel DESC LIMIT 5"
    )


def test_clause_layout() -> None:
    q = Query(
        Unit("SPAN", "CHUNK", Literal(1)),
        (Binding("s", Call("BM25", (Field("content"), Param("q")))),),
        IsNull(a, negated=True),
        (OrderKey(Ref("s"), True, True), OrderKey(b, False, False), OrderKey(c)),
        Param("n"),
        Literal(10),
    )
    assert render(q) == (
        "SELECT SPAN(CHUNK, window => 1) LET s = BM25(content, $q) WHERE meta.a IS NOT NULL "
        "ORDER BY s DESC NULLS FIRST, meta.b NULLS LAST, meta.c LIMIT $n OFFSET 10"
    )
    assert render(Query(Unit("SENTENCE"))) == "SELECT SENTENCE"


@pytest.mark.parametrize("node, text", [
    (Binary("+", Binary("+", a, b), c), "meta.a + meta.b + meta.c"),
    (Binary("+", a, Binary("+", b, c)), "meta.a + (meta.b + meta.c)"),
    (Binary("-", a, Binary("-", b, c)), "meta.a - (meta.b - meta.c)"),
    (Binary("*", Binary("+", a, b), c), "(meta.a + meta.b) * meta.c"),
    (Binary("+", Binary("*", a, b), c), "meta.a * meta.b + meta.c"),
    (Binary("/", a, Binary("*", b, c)), "meta.a / (meta.b * meta.c)"),
    (Binary("OR", Binary("AND", a, b), c), "meta.a AND meta.b OR meta.c"),
    (Binary("AND", Binary("OR", a, b), c), "(meta.a OR meta.b) AND meta.c"),
    (Binary("AND", a, Binary("AND", b, c)), "meta.a AND (meta.b AND meta.c)"),
    (Unary("NOT", Binary("AND", a, b)), "NOT (meta.a AND meta.b)"),
    (Unary("NOT", Compare("==", a, b)), "NOT meta.a == meta.b"),
    (Binary("AND", Unary("NOT", a), b), "NOT meta.a AND meta.b"),
    (Compare("==", Compare("<", a, b), Literal(True)), "(meta.a < meta.b) == TRUE"),
    (Compare("<", Binary("+", a, Literal(1)), b), "meta.a + 1 < meta.b"),
    (Compare("==", Binary("AND", a, b), c), "(meta.a AND meta.b) == meta.c"),
    (Unary("-", a), "-meta.a"),
    (Unary("-", Literal(3)), "-(3)"),
    (Unary("-", Literal(-3)), "-(-3)"),
    (Unary("-", Unary("-", a)), "-(-meta.a)"),
    (Unary("-", Binary("*", a, b)), "-(meta.a * meta.b)"),
    (Binary("*", Unary("-", a), b), "-meta.a * meta.b"),
    (Binary("-", a, Literal(-3)), "meta.a - -3"),
    (Binary("-", a, Unary("-", b)), "meta.a - -meta.b"),
    (In(Binary("+", a, b), ListExpr((Binary("OR", a, b),))), "meta.a + meta.b IN (meta.a OR meta.b)"),
    (In(a, Param("xs"), negated=True), "meta.a NOT IN $xs"),
    (Between(a, Literal(-1), Binary("+", b, Literal(1)), negated=True), "meta.a NOT BETWEEN -1 AND meta.b + 1"),
    (Between(Compare("==", a, b), Literal(1), Literal(2)), "(meta.a == meta.b) BETWEEN 1 AND 2"),
    (IsNull(Binary("+", a, b)), "meta.a + meta.b IS NULL"),
    (TextMatch("LIKE", a, Literal("x%"), negated=True), 'meta.a NOT LIKE "x%"'),
    (Within(a, period=Literal("last week")), 'meta.a WITHIN "last week"'),
    (Within(a, period=Literal(-3)), "meta.a WITHIN (-3)"),
    (Within(a, period=Binary("+", b, c)), "meta.a WITHIN (meta.b + meta.c)"),
    (Within(a, low=TypedLiteral("DATE", "2024-01-01"), high=Call("NOW")), "meta.a WITHIN (DATE '2024-01-01', NOW())"),
    (Call("RRF", (Ref("x"), Ref("y")), (("k", Literal(60)),)), "RRF(x, y, k => 60)"),
    (ListExpr((Literal(1), ListExpr(()))), "[1, []]"),
    (Literal(None), "NULL"),
    (Literal(1e-05), "1e-05"),
    (Literal(1e20), "1e+20"),
    (Literal(-0.5), "-0.5"),
])
def test_render_expr_minimal_parentheses(node, text: str) -> None:
    assert render_expr(node) == text
    assert parse(f"SELECT SENTENCE LET x = {text}").bindings[0].expr == node


@pytest.mark.parametrize("value, text", [
    ("plain", '"plain"'),
    ('say "hi"', r'"say \"hi\""'),
    ("it's", '"it\'s"'),
    ("back\\slash", r'"back\\slash"'),
    ("a\nb\tc", r'"a\nb\tc"'),
    ("\x00\x1f\x7f\u2028", r'"\u0000\u001f\u007f\u2028"'),
    ("é 😀", '"é 😀"'),
])
def test_strings_are_double_quoted_with_escapes(value: str, text: str) -> None:
    assert quote_string(value) == text
    assert parse(f"SELECT SENTENCE WHERE content CONTAINS {text}").where == TextMatch(
        "CONTAINS", Field("content"), Literal(value)
    )


@pytest.mark.parametrize("key, text", [
    ("lang", "lang"), ("_x1", "_x1"), ("content-type", "`content-type`"), ("select", "`select`"),
    ("First", "`First`"), ("a`b", "`a``b`"), ("with space", "`with space`"), ("1abc", "`1abc`"), ("é", "`é`"),
])
def test_meta_keys_are_backticked_when_needed(key: str, text: str) -> None:
    assert quote_key(key) == text
    assert render_expr(Meta(("x", key))) == f"meta.x.{text}"
    assert parse(f"SELECT SENTENCE WHERE meta.x.{text} IS NULL").where == IsNull(Meta(("x", key)))


def test_typed_literals_use_single_quotes() -> None:
    assert render_expr(TypedLiteral("DATE", "2024-06-01")) == "DATE '2024-06-01'"
    assert render_expr(TypedLiteral("TIMESTAMP", "it's")) == r"TIMESTAMP 'it\'s'"


def test_numbers() -> None:
    assert render_expr(Literal(10**40)) == "1" + "0" * 40
    assert render_expr(Literal(0.1)) == "0.1"
    with pytest.raises(ValueError):
        render_expr(Literal(float("inf")))


def test_render_is_a_fixed_point_and_round_trips_json() -> None:
    text = ("SELECT DOCUMENT LET sem = SIMILARITY(content, [\"a\", $b]), kw = BM25(content, 'a'), "
            "s = RRF(sem, kw, k => 60, weights => [2, 1]) WHERE meta.`x-y` NOT IN (1, -2.5) AND NOT (meta.a OR "
            "meta.b) ORDER BY s DESC NULLS FIRST LIMIT 3 OFFSET $o")
    q = parse(text)
    canonical = render(q)
    assert render(parse(canonical)) == canonical
    assert parse(canonical) == q
    assert render(Query.from_dict(q.to_dict())) == canonical


def test_render_expr_renders_clause_nodes_too() -> None:
    assert render_expr(OrderKey(a, True)) == "meta.a DESC"
    assert render_expr(Binding("x", Literal(1))) == "x = 1"
    assert render_expr(Unit("DOCUMENT")) == "DOCUMENT"
