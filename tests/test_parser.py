"""Parser: text → IR shapes, spans, lexical rules, limits, caching and error wording."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nlql
import nlql.parser as parser_module
from nlql.errors import LimitError, NLQLError, NLQLSyntaxError
from nlql.ir import (
    Between,
    Binary,
    Call,
    Compare,
    Field,
    In,
    IsNull,
    ListExpr,
    Literal,
    Meta,
    Param,
    Query,
    Ref,
    TextMatch,
    TypedLiteral,
    Unary,
    Unit,
    Within,
)
from nlql.parser import MAX_DEPTH, MAX_LENGTH, MAX_LIST_ITEMS, clear_cache, grammar_path, parse
from nlql.render import KEYWORDS

ROOT = Path(__file__).resolve().parent.parent

SPEC_QUERIES = [
    """SELECT SENTENCE
LET rel = SIMILARITY(content, "AI agents")
WHERE rel >= 0.3 AND meta.status == "published" AND content CONTAINS "tool"
ORDER BY rel DESC, meta.created_at DESC NULLS LAST
LIMIT 5 OFFSET 0""",
    'SELECT SPAN(SENTENCE, window => 2) LET rel = SIMILARITY(content, $q) WHERE meta.lang IN ("en", "de") LIMIT 3',
    """SELECT DOCUMENT
LET sem = SIMILARITY(content, "language games"),
    kw  = BM25(content, "language games"),
    score = RRF(sem, kw, k => 60)
WHERE meta.date WITHIN "last week" AND meta.year BETWEEN 2020 AND 2025 AND meta.author IS NOT NULL
ORDER BY score DESC
LIMIT 10""",
    'SELECT SENTENCE LET s = 0.7 * SIMILARITY(content, "rag") + 0.3 * BM25(content, "rag") ORDER BY s DESC LIMIT 5',
]


def where(text: str):
    q = parse("SELECT SENTENCE WHERE " + text)
    assert q.where is not None
    return q.where


def expr(text: str):
    return parse(f"SELECT SENTENCE LET x = {text}").bindings[0].expr


# ------------------------------------------------------------------------------------------ shapes


def test_spec_query_1_shape() -> None:
    q = parse(SPEC_QUERIES[0])
    assert q.unit == Unit("SENTENCE")
    assert q.bindings[0].name == "rel"
    assert q.bindings[0].expr == Call("SIMILARITY", (Field("content"), Literal("AI agents")))
    assert q.where == Binary(
        "AND",
        Binary(
            "AND",
            Compare(">=", Ref("rel"), Literal(0.3)),
            Compare("==", Meta(("status",)), Literal("published")),
        ),
        TextMatch("CONTAINS", Field("content"), Literal("tool")),
    )
    assert [(k.expr, k.descending, k.nulls_first) for k in q.order_by] == [
        (Ref("rel"), True, None),
        (Meta(("created_at",)), True, False),
    ]
    assert q.limit == Literal(5) and q.offset == Literal(0)


def test_spec_query_2_shape() -> None:
    q = parse(SPEC_QUERIES[1])
    assert q.unit == Unit("SPAN", "SENTENCE", Literal(2))
    assert q.bindings[0].expr == Call("SIMILARITY", (Field("content"), Param("q")))
    assert q.where == In(Meta(("lang",)), ListExpr((Literal("en"), Literal("de"))))


def test_spec_query_3_shape() -> None:
    q = parse(SPEC_QUERIES[2])
    assert [b.name for b in q.bindings] == ["sem", "kw", "score"]
    assert q.bindings[2].expr == Call("RRF", (Ref("sem"), Ref("kw")), (("k", Literal(60)),))
    parts = q.where
    assert isinstance(parts, Binary) and parts.op == "AND"
    assert parts.right == IsNull(Meta(("author",)), negated=True)
    assert parts.left.right == Between(Meta(("year",)), Literal(2020), Literal(2025))
    assert parts.left.left == Within(Meta(("date",)), period=Literal("last week"))


def test_spec_query_4_arithmetic_precedence() -> None:
    s = parse(SPEC_QUERIES[3]).bindings[0].expr
    assert s == Binary(
        "+",
        Binary("*", Literal(0.7), Call("SIMILARITY", (Field("content"), Literal("rag")))),
        Binary("*", Literal(0.3), Call("BM25", (Field("content"), Literal("rag")))),
    )


@pytest.mark.parametrize("written, stored", [("=", "=="), ("==", "=="), ("!=", "!="), ("<>", "!="), ("<", "<"),
                                             ("<=", "<="), (">", ">"), (">=", ">=")])
def test_comparison_operators_are_normalised(written: str, stored: str) -> None:
    assert where(f"meta.a {written} 1") == Compare(stored, Meta(("a",)), Literal(1))


def test_units() -> None:
    assert parse("SELECT CHUNK").unit == Unit("CHUNK")
    assert parse("SELECT DOCUMENT").unit == Unit("DOCUMENT")
    assert parse("SELECT SPAN(CHUNK)").unit == Unit("SPAN", "CHUNK", None)
    assert parse("select span(sentence, window => $w)").unit == Unit("SPAN", "SENTENCE", Param("w"))


def test_bare_names_fields_refs_and_meta() -> None:
    assert expr("content") == Field("content")
    assert expr("CONTENT") == Field("content"), "built-in fields are case-insensitive"
    assert [expr(f) for f in ("id", "doc_id", "position")] == [Field("id"), Field("doc_id"), Field("position")]
    assert expr("topic") == Ref("topic"), "an unknown bare name is a Ref (the checker reports it)"
    assert expr("meta.a.b") == Meta(("a", "b"))
    assert expr("META.a") == Meta(("a",))


def test_backtick_and_keyword_meta_keys() -> None:
    assert expr("meta.`content-type`") == Meta(("content-type",))
    assert expr("meta.`select`") == Meta(("select",))
    assert expr("meta.select") == Meta(("select",))
    assert expr("meta.`a``b`.`x y`") == Meta(("a`b", "x y"))


def test_function_names_upper_case_and_named_args() -> None:
    assert expr("similarity(content, 'x')") == Call("SIMILARITY", (Field("content"), Literal("x")))
    assert expr("now()") == Call("NOW")
    call = expr("RRF(a, b, k => 60, weights => [2, 1])")
    assert call == Call("RRF", (Ref("a"), Ref("b")), (("k", Literal(60)), ("weights", ListExpr((Literal(2), Literal(1))))))
    assert isinstance(call, Call) and call.kwarg("k") == Literal(60)
    assert expr("myFn(1)") == Call("MYFN", (Literal(1),))


def test_logic_nodes() -> None:
    assert where("NOT meta.a") == Unary("NOT", Meta(("a",)))
    assert where("meta.a OR meta.b AND meta.c") == Binary(
        "OR", Meta(("a",)), Binary("AND", Meta(("b",)), Meta(("c",)))
    )
    assert where("NOT meta.a == 1") == Unary("NOT", Compare("==", Meta(("a",)), Literal(1)))
    assert where("NOT NOT meta.a") == Unary("NOT", Unary("NOT", Meta(("a",))))


def test_predicates() -> None:
    a = Meta(("a",))
    assert where("meta.a NOT IN (1, 2)") == In(a, ListExpr((Literal(1), Literal(2))), negated=True)
    assert where("meta.a IN $xs") == In(a, Param("xs"))
    assert where("meta.a IN [1]") == In(a, ListExpr((Literal(1),)))
    assert where("meta.a NOT BETWEEN 1 AND 2 AND TRUE") == Binary(
        "AND", Between(a, Literal(1), Literal(2), negated=True), Literal(True)
    )
    assert where("meta.a IS NULL") == IsNull(a)
    assert where("meta.a IS NOT NULL") == IsNull(a, negated=True)
    for op in ("CONTAINS", "LIKE", "MATCH"):
        assert where(f"meta.a {op} 'x'") == TextMatch(op, a, Literal("x"))
        assert where(f"meta.a not {op.lower()} 'x'") == TextMatch(op, a, Literal("x"), negated=True)
    assert where("meta.a WITHIN $p") == Within(a, period=Param("p"))
    assert where("meta.a WITHIN (DATE '2024-01-01', NOW())") == Within(
        a, low=TypedLiteral("DATE", "2024-01-01"), high=Call("NOW")
    )


def test_unary_minus_folds_only_on_a_number_literal() -> None:
    assert expr("-3") == Literal(-3)
    assert expr("- 2.5") == Literal(-2.5)
    assert expr("-(3)") == Unary("-", Literal(3))
    assert expr("- -3") == Unary("-", Literal(-3))
    assert expr("-meta.a") == Unary("-", Meta(("a",)))
    assert expr("-meta.a * 2") == Binary("*", Unary("-", Meta(("a",))), Literal(2))
    assert expr("2 - -meta.b") == Binary("-", Literal(2), Unary("-", Meta(("b",))))


def test_literals() -> None:
    assert [expr(t) for t in ("true", "FALSE", "Null")] == [Literal(True), Literal(False), Literal(None)]
    assert expr("DATE '2024-06-01'") == TypedLiteral("DATE", "2024-06-01")
    assert expr('timestamp "2024-06-01T10:00:00Z"') == TypedLiteral("TIMESTAMP", "2024-06-01T10:00:00Z")
    assert expr("DATE('2024-06-01')") == Call("DATE", (Literal("2024-06-01"),))
    assert expr("$1") == Param("1") and expr("$name_2") == Param("name_2")
    assert expr("[]") == ListExpr(())


@pytest.mark.parametrize("text, value", [
    ("42", 42), ("0.5", 0.5), (".5", 0.5), ("1e-3", 0.001), ("1E+3", 1000.0), ("007", 7),
    ("123456789012345678901234567890", 123456789012345678901234567890),
])
def test_numbers(text: str, value: float) -> None:
    got = expr(text)
    assert isinstance(got, Literal) and got.value == value and type(got.value) is type(value)


def test_huge_numbers_are_exact_or_a_clean_error() -> None:
    big = "9" * 300
    assert expr(big) == Literal(int(big))
    for text in ("9" * 400, "1e999", "9" * 5000 + ".5", "1" + "0" * 10_000):
        with pytest.raises(NLQLSyntaxError, match="too large"):
            expr(text)


@pytest.mark.parametrize("source, value", [
    (r'"say \"hi\""', 'say "hi"'),
    (r"'it\'s'", "it's"),
    (r'"a\\b"', "a\\b"),
    (r'"tab\tnl\nend"', "tab\tnl\nend"),
    (r'"\u00e9\u00E9"', "éé"),
    (r'"\ud83d\ude00"', "😀"),
    (r'"\d+"', "\\d+"),
    ('"it\'s"', "it's"),
    ("'say \"hi\"'", 'say "hi"'),
    ('"raw é 😀"', "raw é 😀"),
])
def test_string_escapes(source: str, value: str) -> None:
    assert expr(source) == Literal(value)


def test_comments_semicolon_and_whitespace() -> None:
    q = parse("-- lead\nSELECT /* a */ SENTENCE -- b\n/* multi\nline */ LIMIT 3; -- end")
    assert q == Query(Unit("SENTENCE"), limit=Literal(3))
    assert parse("SELECT SENTENCE;") == parse("SELECT SENTENCE")
    assert parse("\tselect\r\n sentence \n") == parse("SELECT SENTENCE")


def test_keywords_are_case_insensitive_and_never_glue() -> None:
    assert parse("sElEcT sEnTeNcE oRdEr bY position DeSc") == parse("SELECT SENTENCE ORDER BY position DESC")
    q = parse("SELECT SENTENCE LET selection = 1, notes = 2, orders = 3 WHERE notes == 2")
    assert [b.name for b in q.bindings] == ["selection", "notes", "orders"]
    with pytest.raises(NLQLSyntaxError, match="expected a unit"):
        parse("SELECT SENTENCES")
    with pytest.raises(NLQLSyntaxError):
        parse("SELECTSENTENCE")


def test_grammar_keywords_match_render_keywords() -> None:
    text = grammar_path().read_text()
    declared = {m.group(1) for m in re.finditer(r"^_?([A-Z]+)\.2: /", text, re.M)}
    assert declared == set(KEYWORDS)


# -------------------------------------------------------------------------------------------- spans


def _all_nodes(q: Query):
    yield from q.walk()


@pytest.mark.parametrize("text", SPEC_QUERIES)
def test_every_node_has_a_span_covering_its_text(text: str) -> None:
    q = parse(text)
    assert q.span is not None and text[q.span.start : q.span.end].startswith("SELECT")
    for node in _all_nodes(q):
        assert node.span is not None, node
        piece = text[node.span.start : node.span.end]
        assert piece.strip() == piece and piece, (node, piece)
        if isinstance(node, Call):
            assert piece.upper().startswith(node.name) and piece.endswith(")")
        if isinstance(node, Literal) and isinstance(node.value, str):
            assert piece[1:-1] == node.value
        if isinstance(node, (Field, Ref)):
            assert piece == node.name


def test_span_line_and_column() -> None:
    q = parse("SELECT SENTENCE\nWHERE\n   meta.a == 1")
    assert q.where is not None and q.where.span is not None
    s = q.where.span
    assert (s.line, s.column, s.end_line, s.end_column) == (3, 4, 3, 15)


def test_paren_span_includes_parentheses() -> None:
    text = "SELECT SENTENCE WHERE (meta.a == 1)"
    w = parse(text).where
    assert w is not None and w.span is not None
    assert text[w.span.start : w.span.end] == "(meta.a == 1)"


# ------------------------------------------------------------------------------------------- limits


def test_limit_constants() -> None:
    assert (MAX_LENGTH, MAX_DEPTH, MAX_LIST_ITEMS) == (100_000, 200, 10_000)


def test_query_length_limit() -> None:
    text = "SELECT SENTENCE WHERE meta.a == '" + "x" * MAX_LENGTH + "'"
    with pytest.raises(LimitError, match="characters long"):
        parse(text)
    assert parse(text, max_length=len(text)).where is not None
    with pytest.raises(LimitError):
        parse("SELECT SENTENCE", max_length=5)


def test_module_constant_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parser_module, "MAX_LENGTH", 10)
    with pytest.raises(LimitError):
        parse("SELECT SENTENCE LIMIT 1")


@pytest.mark.parametrize("opener, closer", [("(", ")"), ("[", "]"), ("NOT ", ""), ("- ", ""), ("f(", ")")])
def test_ten_thousand_deep_nesting_is_a_limit_error(opener: str, closer: str) -> None:
    n = 10_000
    text = "SELECT SENTENCE WHERE " + opener * n + "1" + closer * n
    with pytest.raises(LimitError, match="nested more than 200 levels"):
        parse(text)


def test_unclosed_deep_nesting_is_a_syntax_error() -> None:
    with pytest.raises(NLQLSyntaxError, match=r"missing '\)'"):
        parse("SELECT SENTENCE WHERE " + "(" * 10_000 + "meta.a")


def test_depth_within_limit_parses_and_is_adjustable() -> None:
    text = "SELECT SENTENCE WHERE " + "(" * 150 + "meta.a" + ")" * 150
    assert parse(text).where == Meta(("a",))
    with pytest.raises(LimitError):
        parse(text, max_depth=100)
    # an AND/OR chain is one level, however wide (issue 20): 300 equalities parse at the default limit
    long_chain = "SELECT SENTENCE WHERE " + " OR ".join(f"meta.a == {i}" for i in range(300))
    assert parse(long_chain).where is not None
    assert parse(long_chain, max_depth=3).where is not None


def test_list_length_limit() -> None:
    items = ", ".join(str(i) for i in range(MAX_LIST_ITEMS + 1))
    with pytest.raises(LimitError, match="10,001 items"):
        parse(f"SELECT SENTENCE WHERE meta.a IN ({items})")
    with pytest.raises(LimitError):
        parse(f"SELECT SENTENCE WHERE f([{items}])")
    ok = parse(f"SELECT SENTENCE WHERE meta.a IN ({items})", max_list_items=MAX_LIST_ITEMS + 1).where
    assert isinstance(ok, In) and isinstance(ok.options, ListExpr) and len(ok.options.items) == MAX_LIST_ITEMS + 1


def test_huge_string_literal() -> None:
    text = "SELECT SENTENCE WHERE content CONTAINS '" + "ab" * 40_000 + "'"
    w = parse(text).where
    assert isinstance(w, TextMatch) and w.pattern == Literal("ab" * 40_000)


# ---------------------------------------------------------------------------------------- caching


def test_parse_is_cached_and_cache_can_be_cleared() -> None:
    text = "SELECT SENTENCE WHERE meta.cached == 1"
    first = parse(text)
    assert parse(text) is first
    clear_cache()
    again = parse(text)
    assert again == first and again is not first


def test_parse_rejects_non_text() -> None:
    with pytest.raises(TypeError):
        parse(b"SELECT SENTENCE")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ errors

ERRORS = [
    ("", "empty query", 1, 1),
    ("SELECT", "expected a unit: SENTENCE, CHUNK, DOCUMENT or SPAN(…)", 1, 7),
    ("SELECT SENTENCE WHERE rel >= 0.3 AND", "expected a condition after AND", 1, 37),
    ("SELECT SENTENCE WHERE rel >= 0.3 AND\n\n", "expected a condition after AND", 1, 37),
    ("SELECT SENTENCE LET a = 1 b = 2", "missing comma between bindings", 1, 27),
    ("SELECT SENTENCE LIMIT 5 ORDER BY position", "ORDER BY must come before LIMIT", 1, 25),
    ("SELECT SENTENCE WHERE content CONTAINS 'abc", "unterminated string", 1, 40),
    ("SENTENCE LIMIT 5", "missing SELECT", 1, 1),
    ("SELECT SENTENCE WHERE x == 1 WHERE y == 2", "duplicate WHERE clause", 1, 30),
    ("SELECT SENTENCE WHERE (x == 1", "missing ')' at the end of the query", 1, 30),
    ("SELECT SENTENCE WHERE x IN 1", "expected a list after IN", 1, 28),
    ("SELECT SENTENCE WHERE x ==\n  == 2", "expected a value after '=='", 2, 3),
]


@pytest.mark.parametrize("text, message, line, column", ERRORS)
def test_error_messages_and_positions(text: str, message: str, line: int, column: int) -> None:
    with pytest.raises(NLQLSyntaxError) as info:
        parse(text)
    err = info.value
    assert err.message == message
    assert (err.line, err.column) == (line, column)
    assert err.source == text


def test_error_rendering_has_caret_and_hint() -> None:
    with pytest.raises(NLQLSyntaxError) as info:
        parse("SELECT SENTENCE\nWHERE rell >= 0.3 LIMT 5")
    assert str(info.value) == (
        "unknown word 'LIMT' at line 2, column 19\n"
        "  2 | WHERE rell >= 0.3 LIMT 5\n"
        "    |                   ^^^^\n"
        "hint: did you mean LIMIT?"
    )


_INTERNAL = re.compile(r"\$END|LPAR|RPAR|LSQB|COMMA|__ANON|COMPARE|_[A-Z]{2,}|EQEQ|LTGT|NAME\b|PARAM\b|STRING\b")


@pytest.mark.parametrize("text", [
    "SELECT SENTENCE WHERE", "SELECT SENTENCE ORDER BY", "SELECT SENTENCE LET", "SELECT SENTENCE WHERE a ==",
    "SELECT SENTENCE WHERE f(", "SELECT SENTENCE WHERE f(a,", "SELECT SENTENCE WHERE [1,", "SELECT SENTENCE LIMIT",
    "SELECT SENTENCE WHERE a b", "SELECT SENTENCE WHERE a = = b", "SELECT SENTENCE ORDER BY a ASC DESC",
    "SELECT SENTENCE OFFSET 1 LIMIT 1", "SELECT SENTENCE WHERE meta.", "SELECT SENTENCE WHERE a IS", "SELECT (",
    "SELECT SPAN(", "SELECT SPAN(SENTENCE", "SELECT SPAN(SENTENCE,", "SELECT SENTENCE WHERE a BETWEEN 1",
    "SELECT SENTENCE WHERE a WITHIN (1", "SELECT SENTENCE WHERE a WITHIN (1,", "SELECT SENTENCE ;;",
    "SELECT SENTENCE LET x = 1,", "SELECT SENTENCE WHERE NOT", "SELECT SENTENCE WHERE -", "SELECT SENTENCE @",
    "SELECT SENTENCE WHERE a NOT", "SELECT SENTENCE ORDER BY a NULLS", "SELECT SENTENCE WHERE f(k =>",
])
def test_messages_never_leak_parser_internals(text: str) -> None:
    with pytest.raises(NLQLSyntaxError) as info:
        parse(text)
    rendered = str(info.value)
    assert not _INTERNAL.search(info.value.message), rendered
    assert not _INTERNAL.search(info.value.hint or ""), rendered
    assert info.value.line >= 1 and info.value.column >= 1


def test_errors_are_nlql_errors_with_diagnostics() -> None:
    with pytest.raises(NLQLError) as info:
        parse("SELECT SENTENCE WHERE")
    [d] = info.value.diagnostics
    assert d.code == "syntax" and d.line == 1


# ---------------------------------------------------------------------------------- packaging/api


def test_grammar_file_locations() -> None:
    assert (ROOT / "grammar" / "nlql.lark").is_file()
    assert grammar_path().read_text() == (ROOT / "grammar" / "nlql.lark").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"grammar/nlql.lark" = "nlql/grammar/nlql.lark"' in pyproject


def test_grammar_has_no_conflicts() -> None:
    from lark import Lark

    # strict=True turns any shift/reduce or reduce/reduce conflict into a GrammarError.
    Lark(grammar_path().read_text(), parser="lalr", lexer=parser_module._Lexer, strict=True)


def test_packaged_grammar_is_preferred(tmp_path: Path) -> None:
    """In an installed wheel the grammar sits at nlql/grammar/nlql.lark inside the package."""
    shutil.copytree(ROOT / "nlql", tmp_path / "nlql", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "nlql" / "grammar").mkdir()
    shutil.copy(ROOT / "grammar" / "nlql.lark", tmp_path / "nlql" / "grammar" / "nlql.lark")
    code = "from nlql.parser import grammar_path, parse; print(grammar_path()); parse('SELECT SENTENCE LIMIT 1')"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert Path(out.stdout.strip()) == tmp_path / "nlql" / "grammar" / "nlql.lark"


def test_only_the_parser_imports_lark() -> None:
    pattern = re.compile(r"^\s*(import lark|from lark)", re.M)
    users = [p.relative_to(ROOT).as_posix() for p in (ROOT / "nlql").rglob("*.py") if pattern.search(p.read_text())]
    assert users == ["nlql/parser.py"]


def test_public_api_is_eager() -> None:
    assert callable(nlql.parse) and callable(nlql.check) and callable(nlql.render)
    assert nlql.check.__module__ == "nlql.check"
    from nlql import check, parse, render

    assert (check, parse, render) == (nlql.check, nlql.parse, nlql.render)
    assert "nlql.parser" in sys.modules
