"""Checker: every semantic rule, all problems at once, params/schema/functions, and validate()."""

from __future__ import annotations

import pytest

from nlql import check as check_from_package
from nlql.check import check, validate
from nlql.errors import CheckError, Diagnostic, NLQLSyntaxError
from nlql.functions import BUILTINS, SCORE_FUNCTIONS, FunctionSig, parse_duration
from nlql.ir import Query
from nlql.parser import parse

S = "SELECT SENTENCE "
SIM = "LET s = SIMILARITY(content, 'x'), k = BM25(content, 'x') "


def messages(text: str, **kwargs) -> list[str]:
    return [d.message for d in check(text, **kwargs)]


def one(text: str, **kwargs) -> Diagnostic:
    diags = check(text, **kwargs)
    assert len(diags) == 1, [d.message for d in diags]
    return diags[0]


@pytest.mark.parametrize("text", [
    "SELECT SENTENCE",
    "SELECT SENTENCE LET rel = SIMILARITY(content, \"AI agents\") WHERE rel >= 0.3 AND meta.status == \"published\" "
    "AND content CONTAINS \"tool\" ORDER BY rel DESC, meta.created_at DESC NULLS LAST LIMIT 5 OFFSET 0",
    "SELECT SPAN(SENTENCE, window => 2) LET rel = SIMILARITY(content, $q) WHERE meta.lang IN (\"en\", \"de\") LIMIT 3",
    "SELECT DOCUMENT LET sem = SIMILARITY(content, \"language games\"), kw = BM25(content, \"language games\"), "
    "score = RRF(sem, kw, k => 60) WHERE meta.date WITHIN \"last week\" AND meta.year BETWEEN 2020 AND 2025 AND "
    "meta.author IS NOT NULL ORDER BY score DESC LIMIT 10",
    "SELECT SENTENCE LET s = 0.7 * SIMILARITY(content, \"rag\") + 0.3 * BM25(content, \"rag\") ORDER BY s DESC LIMIT 5",
    S + "LET a = SIMILARITY(content, ['a', 'b', $c]), b = a * IF(meta.section == 'summary', 1.5, 1), "
        "f = RRF(a, b, weights => [2, 1]), g = INTERLEAVE(a, f) ORDER BY g DESC",
    S + "LET r = RECENCY(meta.date, half_life => '2 weeks') WHERE LENGTH(content) > 3 AND LOWER(meta.t) == 'x' "
        "AND COUNT(content, 'ai') >= 1 AND meta.d < NOW() AND meta.d >= DATE('2024-01-01') "
        "AND meta.d < TIMESTAMP '2024-06-01T10:00:00Z' AND meta.d WITHIN (DATE '2024-01-01', '2024-02-01')",
    S + "WHERE 2025 == '2025' AND meta.a == NULL AND NOT (meta.b OR meta.c) AND content MATCH '\\d+'",
    S + "LET total = a + b, a = SIMILARITY(content, 'x'), b = BM25(content, 'x') ORDER BY total DESC",
])
def test_valid_queries_have_no_diagnostics(text: str) -> None:
    assert check(text) == []


def test_check_is_the_package_function() -> None:
    assert check_from_package is check


def test_syntax_error_is_returned_not_raised() -> None:
    [d] = check("SELECT SENTENCE WHERE")
    assert d.code == "syntax" and d.message == "expected a condition after WHERE"
    assert (d.line, d.column) == (1, 22)


def test_limit_error_is_returned_too() -> None:
    [d] = check("SELECT SENTENCE WHERE " + "(" * 500 + "1" + ")" * 500)
    assert d.code == "limit"


def test_accepts_a_parsed_query() -> None:
    assert check(parse(S + "WHERE topicc == 1"))[0].message == "unknown name 'topicc'"
    with pytest.raises(TypeError):
        check(42)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- names


def test_unknown_name_suggests_binding() -> None:
    d = one("SELECT SENTENCE\nLET rel = SIMILARITY(content, 'x')\nWHERE rell >= 0.3")
    assert (d.message, d.hint, d.line, d.column) == ("unknown name 'rell'", "did you mean 'rel'?", 3, 7)
    assert d.span is not None and (d.span.start, d.span.end) == (57, 61)


def test_unknown_name_suggests_meta_path_never_becomes_one() -> None:
    d = one(S + "WHERE topic == 'ai'")
    assert d.message == "unknown name 'topic'" and d.hint == "did you mean meta.topic?"
    assert one(S + "WHERE contnt CONTAINS 'x'").hint == "did you mean 'content'?"
    assert one(S + "WHERE topic == 1", schema={"topics": "string"}).hint == "did you mean meta.topics?"
    assert one(S + "WHERE now > 1").hint == "did you mean NOW(…)? functions need parentheses"
    assert one(S + "WHERE meta IS NULL").message == "'meta' needs a key"


def test_unknown_function_with_did_you_mean() -> None:
    d = one(S + "LET s = SIMILARTY(content, 'x')")
    assert (d.message, d.hint) == ("unknown function 'SIMILARTY'", "did you mean SIMILARITY?")
    assert "built-in functions" in (one(S + "WHERE zzz(1)").hint or "")


def test_user_functions() -> None:
    assert check(S + "WHERE sentiment(content) > 0", functions={"sentiment": 1}) == []
    assert check(S + "WHERE SENTIMENT(content, 1, 2) > 0", functions={"Sentiment": None}) == []
    assert one(S + "WHERE sentiment(content, 2) > 0", functions={"sentiment": 1}).message == (
        "SENTIMENT takes 1 argument, got 2"
    )
    assert one(S + "WHERE sentiment(content, x => 1) > 0", functions={"sentiment": None}).message == (
        "SENTIMENT takes no named arguments"
    )
    assert one(S + "WHERE sentimnt(content) > 0", functions={"sentiment": 1}).hint == "did you mean SENTIMENT?"


# ---------------------------------------------------------------------------------- arity / kwargs


@pytest.mark.parametrize("call, message", [
    ("SIMILARITY(content)", "SIMILARITY takes 2 arguments, got 1"),
    ("BM25(content, 'a', 'b')", "BM25 takes 2 arguments, got 3"),
    ("IF(TRUE, 1)", "IF takes 3 arguments, got 2"),
    ("NOW(1)", "NOW takes no arguments, got 1"),
    ("LOWER()", "LOWER takes 1 argument, got 0"),
    ("COUNT(content)", "COUNT takes 2 arguments, got 1"),
])
def test_arity(call: str, message: str) -> None:
    assert message in messages(S + f"LET x = {call}")


def test_named_arguments() -> None:
    base = S + "LET a = SIMILARITY(content, 'x'), b = BM25(content, 'x'), f = "
    d = one(base + "RRF(a, b, kk => 60)")
    assert (d.message, d.hint) == ("RRF has no named argument 'kk'", "did you mean k?")
    assert one(base + "RRF(a, b, k => 60, k => 10)").message == "named argument 'k' is given twice"
    d = one(S + "LET a = SIMILARITY(content, 'x', k => 1)")
    assert (d.message, d.hint) == ("SIMILARITY has no named argument 'k'", "SIMILARITY accepts min")
    assert one(S + "LET n = LENGTH(content, k => 1)").message == "LENGTH takes no named arguments"
    assert check(S + "LET r = RECENCY(meta.d, half_life => '12h')") == []
    assert one(S + "LET r = RECENCY(meta.d, half_life => 12)").message.startswith("half_life must be a duration")


# ----------------------------------------------------------------------------------------- bindings


def test_binding_cycles_and_self_reference() -> None:
    assert messages(S + "LET a = b, b = a") == ["bindings refer to each other in a cycle: a → b → a"]
    assert messages(S + "LET a = a + 1") == ["binding 'a' refers to itself"]
    assert messages(S + "LET a = b, b = c, c = a, d = d") == [
        "bindings refer to each other in a cycle: a → b → c → a",
        "binding 'd' refers to itself",
    ]
    assert check(S + "LET a = b + c, b = c, c = 1") == []


def test_duplicate_and_shadowing_bindings() -> None:
    d = one(S + "LET s = 1, s = 2")
    assert d.message == "duplicate binding 's'" and d.hint == "'s' is first bound at line 1, column 21"
    assert one(S + "LET content = 1").message == "binding 'content' shadows the built-in field content"
    assert one(S + "LET Position = 1").message == "binding 'Position' shadows the built-in field position"
    assert one(S + "LET meta = 1").message == "'meta' cannot be a binding name"


# ---------------------------------------------------------------------------------- score functions


def test_similarity_and_bm25_arguments() -> None:
    assert one(S + "LET s = SIMILARITY(meta.x, 'a')").message == "the first argument of SIMILARITY must be content"
    assert one(S + "LET s = BM25(content, meta.x)").message == (
        "the text of BM25 must be a string literal or a $parameter"
    )
    assert one(S + "LET s = BM25(content, ['a'])").message == "BM25 takes one text, not a list"
    assert one(S + "LET s = SIMILARITY(content, [])").message == "SIMILARITY needs at least one text in the list"
    assert one(S + "LET s = SIMILARITY(content, ['a', 3])").message == (
        "each text of SIMILARITY must be a string literal or a $parameter"
    )
    assert check(S + "LET s = SIMILARITY(content, $q)", params={"q": ["a", "b"]}) == []
    assert one(S + "LET s = BM25(content, $q)", params={"q": ["a"]}).message == "$q must be a string for BM25, not list"
    assert one(S + "LET s = SIMILARITY(content, $q)", params={"q": 3}).message == (
        "$q must be a string, a list of strings or a vector of numbers for SIMILARITY, not int"
    )


def test_fusion_arms_are_any_numeric_expression() -> None:
    """SPEC §9: an arm is any numeric expression; score bindings, inline calls and values alike."""
    base = S + SIM + ", n = LENGTH(content), w = 2 * s + k "
    assert check(base + "LET f = RRF(s, w)".replace("LET ", ", ")) == []
    assert check(base.rstrip() + ", f = RRF(s, n)") == []
    assert check(S + "LET f = RRF(SIMILARITY(content, 'x'), BM25(content, 'x'), RECENCY(meta.d), k => 60)") == []
    assert messages(S + "LET f = INTERLEAVE(SIMILARITY(content, 'x'))") == [
        "INTERLEAVE takes at least 2 arguments, got 1",
    ]
    d = one(S + SIM + ", f = RRF(s, content)")
    column = len(S + SIM + ", f = RRF(s, ") + 1
    assert (d.message, d.column) == ("an arm of RRF must be a number or a score, not a string", column)
    assert "RECENCY(meta.date)" in (d.hint or "")
    assert one(S + SIM + ", f = INTERLEAVE(s, s > 0.5)").message == (
        "an arm of INTERLEAVE must be a number or a score, not a boolean")
    d = one(S + SIM + ", f = RRF(s, k, k = 60)")
    assert d.hint == "named arguments use =>: k => 60"


@pytest.mark.parametrize("query, message, hint", [
    ("LET s = SIMILARITY(content, 'x', min => 'a')", "SIMILARITY min must be a number",
     "e.g. SIMILARITY(content, $q, min => 0.3)"),
    ("LET s = BM25(content, 'x', min => true)", "BM25 min must be a number", "e.g. BM25(content, $q, min => 1.0)"),
    ("LET r = RECENCY(meta.d, min => 0.5)", "RECENCY has no min: min => is an arm threshold of SIMILARITY and BM25",
     "filter rows with WHERE, or write SIMILARITY(content, $q, min => 0.3)"),
    ("LET s = SIMILARITY(content, 'x'), f = RRF(s, s, min => 1)",
     "RRF has no min: min => is an arm threshold of SIMILARITY and BM25", None),
    ("LET s = SIMILARITY(content, 'x', window => 5)",
     "SIMILARITY has no window: window => is the arm depth of RRF and INTERLEAVE", "write RRF(a, b, window => 200)"),
    ("LET s = SIMILARITY(content, 'x'), f = RRF(s, s, window => 0)",
     "RRF window must be a whole number of rows, at least 1", "e.g. RRF(sem, kw, window => 200)"),
    ("LET s = SIMILARITY(content, 'x'), f = INTERLEAVE(s, s, window => 2.5)",
     "INTERLEAVE window must be a whole number of rows, at least 1", None),
    ("LET s = SIMILARITY(content, 'x'), f = RRF(s, s, window => $w)",
     "RRF window must be a whole number of rows, at least 1", None),
])
def test_arm_options_are_checked_with_position_and_hint(query: str, message: str, hint: str | None) -> None:
    params = {"w": -3} if "$w" in query else None
    d = one(S + query, params=params)
    assert d.message == message and d.line == 1 and d.column > 1
    if hint is not None:
        assert d.hint == hint
    assert check(S + "LET s = SIMILARITY(content, 'x', min => 0.3), k = BM25(content, 'x', min => $m), "
                     "f = RRF(s, k, window => 50), g = INTERLEAVE(s, k, window => $w)", params={"m": 1, "w": 9}) == []


@pytest.mark.parametrize("kwargs, message", [
    ("k => 0", "RRF k must be a positive number"),
    ("k => -5", "RRF k must be a positive number"),
    ("k => 'x'", "RRF k must be a positive number"),
    ("weights => [1]", "RRF has 2 arms but 1 weights"),
    ("weights => ['a', 1]", "RRF weights must be a list of numbers"),
    ("weights => [null, 1]", "RRF weights must be a list of numbers"),
    ("weights => 3", "RRF weights must be a list of numbers"),
])
def test_rrf_k_and_weights(kwargs: str, message: str) -> None:
    assert message in messages(S + SIM + f", f = RRF(s, k, {kwargs})")


def test_rrf_params() -> None:
    q = S + SIM + ", f = RRF(s, k, k => $k, weights => $w)"
    assert check(q, params={"k": 30, "w": [1, 2]}) == []
    assert messages(q, params={"k": 0, "w": [1]}) == ["RRF k must be a positive number", "RRF has 2 arms but 1 weights"]
    assert messages(q, params={"k": 30, "w": [1, None]}) == ["RRF weights must be a list of numbers"]
    one_weight = S + SIM + ", f = RRF(s, k, weights => [$w, 1])"
    assert messages(one_weight, params={"w": None}) == ["RRF weights must be a list of numbers"]
    assert check(one_weight) == [] and check(one_weight, params={"w": 2}) == []  # unbound: checked once bound


# ----------------------------------------------------------------------------------- limit/offset/unit


@pytest.mark.parametrize("clause, message", [
    ("LIMIT -1", "LIMIT must not be negative"),
    ("LIMIT 2.5", "LIMIT must be a whole number"),
    ("LIMIT 1 OFFSET -3", "OFFSET must not be negative"),
    ("LIMIT 1 OFFSET 0.5", "OFFSET must be a whole number"),
])
def test_limit_offset_literals(clause: str, message: str) -> None:
    assert messages(S + clause) == [message]


def test_limit_offset_params() -> None:
    assert check(S + "LIMIT $n OFFSET $m", params={"n": 5, "m": 0}) == []
    assert messages(S + "LIMIT $n OFFSET $m", params={"n": -1, "m": True}) == [
        "LIMIT $n is -1; it must not be negative",
        "OFFSET $m is True; it must be a whole number",
    ]
    assert check(S + "LIMIT $n") == [], "without params nothing is said about parameters"


def test_span_unit() -> None:
    assert check("SELECT SPAN(CHUNK, window => 0)") == []
    assert messages("SELECT SPAN(DOCUMENT)") == ["SPAN works over SENTENCE or CHUNK, not DOCUMENT"]
    assert messages("SELECT SPAN(SENTENCE, window => -1)") == ["the SPAN window must not be negative"]
    assert messages("SELECT SPAN(SENTENCE, window => 'x')") == ["the SPAN window must be a whole number"]
    assert messages("SELECT SPAN(SENTENCE, window => $w)", params={"w": 1.5}) == [
        "the SPAN window $w is 1.5; it must be a whole number"
    ]


# ---------------------------------------------------------------------------------------- regex/within


def test_invalid_regex() -> None:
    d = one(S + "WHERE content MATCH '(unclosed'")
    assert d.code == "regex" and d.message.startswith("invalid regular expression: missing )")
    assert one(S + "WHERE content MATCH $r", params={"r": "[z-a]"}).code == "regex"
    assert check(S + "WHERE content MATCH $r") == []
    assert check(S + "WHERE content LIKE '(unclosed'") == []


def test_within() -> None:
    assert one(S + "WHERE meta.d WITHIN 7").message == "WITHIN needs a period string"
    assert one(S + "WHERE meta.d WITHIN meta.p").message == "WITHIN needs a period string"
    assert one(S + "WHERE content WITHIN 'last week'").message == "WITHIN needs a date, not content"
    assert messages(S + "WHERE meta.d WITHIN (1, 2)") == ["a WITHIN range needs dates, not a number"] * 2
    assert one(S + "WHERE meta.d WITHIN ('soon', NOW())").message == '"soon" is not a date'
    assert one(S + "WHERE meta.d WITHIN $p", params={"p": 3}).message == "WITHIN needs a period string"
    assert check(S + "WHERE meta.d WITHIN $p", params={"p": "yesterday"}) == []


# ---------------------------------------------------------------------------------------- params


def test_params_none_means_unknown() -> None:
    assert check(S + "WHERE meta.a == $a AND meta.b == $1") == []


def test_missing_and_unused_params() -> None:
    diags = check(S + "WHERE meta.a == $a AND meta.b == $a AND meta.c == $1", params={"b": 1, "$1": 2})
    assert [(d.message, d.line) for d in diags] == [("missing parameter $a", 1), ("unused parameter $b", 0)]
    assert check(S + "WHERE meta.a == $1", params={1: "x"}) == []
    assert one(S + "WHERE meta.a == $x", params={"x": object()}).message.startswith(
        "parameter $x has an unsupported type"
    )


def test_param_values_are_type_checked() -> None:
    assert one(S + "WHERE meta.a IN $xs", params={"xs": "abc"}).message == "IN needs a list, not a string"
    assert check(S + "WHERE meta.a IN $xs", params={"xs": ("a", "b")}) == []
    assert one(S + "WHERE 3 == $s", params={"s": "abc"}).message == "cannot compare a number with a string"
    assert check(S + "WHERE 3 == $s", params={"s": "3"}) == []


# ------------------------------------------------------------------------------------------- types


@pytest.mark.parametrize("condition, message", [
    ("'a' == 3", "cannot compare a string with a number"),
    ("content + 1 > 2", "arithmetic on a string: '+' needs numbers"),
    ("-'x' < 0", "arithmetic on a string: '-' needs numbers"),
    ("TRUE * 2 > 1", "arithmetic on a boolean: '*' needs numbers"),
    ("3 == [1, 2]", "cannot compare a number with a list"),
    ("meta.tags == ['a', 'b']", ""),
    ("DATE '2024-01-01' > 3", "cannot compare a date with a number"),
    ("DATE '2024-01-01' > 'soon'", '"soon" is not a date'),
    ("LENGTH(3) > 1", "LENGTH takes 1 argument, got 1"),
    ("UPPER(3) == 'A'", "UPPER needs a string, not a number"),
    ("3 CONTAINS 'x'", "CONTAINS needs a string, not a number"),
    ("content LIKE 3", "LIKE needs a string, not a number"),
    ("meta.a IN (1, 'x')", ""),
    ("3 IN ('x')", "cannot compare a number with a string"),
    ("3 BETWEEN 'a' AND 5", "cannot compare a number with a string"),
    ("DATE '2024-02-30' < NOW()", "invalid DATE '2024-02-30'"),
    ("DATE '2024-02-01T10:00' < NOW()", "invalid DATE '2024-02-01T10:00'"),
    ("TIMESTAMP 'noon' < NOW()", "invalid TIMESTAMP 'noon'"),
    ("DATE('x') < NOW()", "invalid DATE 'x'"),
    ("RECENCY(3) > 0", "RECENCY needs a date, not a number"),
])
def test_type_errors(condition: str, message: str) -> None:
    got = messages(S + f"WHERE {condition}")
    if message == "" or message.endswith("got 1"):
        assert got == []  # LENGTH of a number and mixed IN lists are allowed at check time
    else:
        assert got == [message]


def test_score_compared_with_string() -> None:
    d = one(S + "LET rel = SIMILARITY(content, 'x') WHERE rel == 'high'")
    assert (d.message, d.hint) == ("cannot compare a score with a string", "a score is a number, e.g. rel >= 0.3")
    d = one(S + "LET rel = 2 * SIMILARITY(content, 'x') + 1 WHERE rel > 'x'")
    assert d.message == "cannot compare a score with a string"


def test_schema_types() -> None:
    schema = {"year": "number", "date": "date", "title": "string", "flag": "bool", "a.b": "number"}
    assert messages(S + "WHERE meta.year == 'abc' AND meta.title > 3 AND meta.date > 'soon' AND meta.flag == 1 "
                        "AND meta.a.b == 'x'", schema=schema) == [
        "cannot compare a number with a string",
        "cannot compare a string with a number",
        '"soon" is not a date',
        "cannot compare a boolean with a number",
        "cannot compare a number with a string",
    ]
    ok = "WHERE meta.year == '2020' AND meta.date > '2024-01-01' AND meta.date < NOW() AND meta.flag == TRUE"
    assert check(S + ok, schema=schema) == []
    assert check(S + "WHERE meta.year == 'abc'", schema={"year": "mystery"}) == []


@pytest.mark.parametrize("condition, context, kind", [
    ("3 + 4", "WHERE", "a number"),
    ("'text'", "WHERE", "a string"),
    ("NOW()", "WHERE", "a date"),
    ("[1]", "WHERE", "a list"),
    ("NOT 3", "NOT", "a number"),
    ("meta.a == 1 AND 3", "AND", "a number"),
    ("3 OR meta.a == 1", "OR", "a number"),
])
def test_boolean_context(condition: str, context: str, kind: str) -> None:
    assert messages(S + f"WHERE {condition}") == [f"{context} needs a condition, not {kind}"]


def test_boolean_context_in_if_and_score_in_where() -> None:
    assert messages(S + "LET x = IF(1, 2, 3)") == ["the first argument of IF needs a condition, not a number"]
    assert messages(S + "LET s = SIMILARITY(content, 'x') WHERE s") == ["WHERE needs a condition, not a score"]
    assert check(S + "WHERE meta.flag AND NULL AND $p", params={"p": True}) == []


# -------------------------------------------------------------------------------------- all at once


def test_all_problems_at_once_in_source_order() -> None:
    text = ("SELECT SPAN(DOCUMENT)\nLET rel = SIMILARITY(content, 'x'),\n    rel = BM25(content, 'x')\n"
            "WHERE rell > 0.5 AND topic == 'ai' AND content MATCH '('\nLIMIT -5")
    diags = check(text)
    assert [d.message for d in diags] == [
        "SPAN works over SENTENCE or CHUNK, not DOCUMENT",
        "duplicate binding 'rel'",
        "unknown name 'rell'",
        "unknown name 'topic'",
        "invalid regular expression: missing ), unterminated subpattern",
        "LIMIT must not be negative",
    ]
    assert [d.line for d in diags] == [1, 3, 4, 4, 4, 5]
    assert all(d.span is not None and d.hint is not None or d.code in ("limit", "unit") for d in diags)


def test_diagnostics_are_json_ready() -> None:
    d = one(S + "WHERE topic == 1")
    assert d.to_dict() == {
        "line": 1, "column": 23, "message": "unknown name 'topic'", "hint": "did you mean meta.topic?",
        "code": "name", "start": 22, "end": 27,
    }


# ------------------------------------------------------------------------------------------ validate


def test_validate_returns_the_query() -> None:
    q = validate("SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 3", params={"q": "x"})
    assert isinstance(q, Query) and q.limit is not None
    assert validate(q, params={"q": "x"}) is q


def test_validate_enforces_params() -> None:
    with pytest.raises(CheckError) as info:
        validate("SELECT SENTENCE WHERE meta.a == $a")
    assert [d.message for d in info.value.diagnostics] == ["missing parameter $a"]
    with pytest.raises(CheckError):
        validate("SELECT SENTENCE", params={"unused": 1})


def test_validate_raises_every_diagnostic_with_source() -> None:
    text = "SELECT SENTENCE\nLET rel = SIMILARITY(content, 'x')\nWHERE rell >= 0.3 AND topic == 1"
    with pytest.raises(CheckError) as info:
        validate(text)
    err = info.value
    assert len(err.diagnostics) == 2 and err.more == 1
    assert err.source == text and (err.line, err.column) == (3, 7)
    assert str(err) == (
        "unknown name 'rell' at line 3, column 7\n"
        "  3 | WHERE rell >= 0.3 AND topic == 1\n"
        "    |       ^^^^\n"
        "hint: did you mean 'rel'?\n"
        "\n"
        "unknown name 'topic' at line 3, column 23\n"
        "  3 | WHERE rell >= 0.3 AND topic == 1\n"
        "    |                       ^^^^^\n"
        "hint: did you mean meta.topic?"
    )


def test_validate_raises_syntax_errors() -> None:
    with pytest.raises(NLQLSyntaxError):
        validate("SELECT")


def test_check_of_ir_without_spans() -> None:
    q = Query.from_dict(parse(S + "WHERE topic == 1").to_dict())
    [d] = check(q)
    assert (d.line, d.column, d.span) == (0, 0, None)


# ------------------------------------------------------------------------------------------ functions


def test_function_table() -> None:
    assert set(BUILTINS) == {"SIMILARITY", "BM25", "RRF", "INTERLEAVE", "IF", "RECENCY", "LENGTH", "LOWER", "UPPER",
                             "COUNT", "NOW", "DATE", "TIMESTAMP", "GRAPH", "TEMPORAL", "MMR", "FUSE", "HIGHLIGHT"}
    assert SCORE_FUNCTIONS == {"SIMILARITY", "BM25", "RRF", "INTERLEAVE", "MMR", "FUSE"}
    assert BUILTINS["FUSE"].fuses and BUILTINS["FUSE"].default("method") == "minmax"
    assert BUILTINS["HIGHLIGHT"].returns == "list"
    rrf = BUILTINS["RRF"]
    assert isinstance(rrf, FunctionSig) and rrf.default("k") == 60 and rrf.default("weights") is None
    assert rrf.max_args is None and rrf.named_args == ("k", "weights", "window") and rrf.returns == "score"
    assert BUILTINS["RECENCY"].default("half_life") == "90d"
    assert BUILTINS["NOW"].returns == "datetime" and BUILTINS["NOW"].arity() == "no arguments"
    assert BUILTINS["IF"].arg_type(0) == "bool" and BUILTINS["RRF"].arg_type(5) == "number"
    assert BUILTINS["LENGTH"].arity() == "1 argument" and BUILTINS["RRF"].arity() == "at least 2 arguments"
    with pytest.raises(KeyError):
        BUILTINS["SIMILARITY"].default("k")
    for name, sig in BUILTINS.items():
        assert sig.name == name and sig.doc


@pytest.mark.parametrize("text, seconds", [
    ("90d", 90 * 86400), ("12h", 43200), ("2 weeks", 14 * 86400), ("1.5y", 1.5 * 365 * 86400), ("30 min", 1800),
])
def test_parse_duration(text: str, seconds: float) -> None:
    got = parse_duration(text)
    assert got is not None and got.total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "soon", "0d", "5 parsecs", "-3d", "1e9y"])
def test_parse_duration_rejects(text: str) -> None:
    assert parse_duration(text) is None


def test_long_binding_chains_do_not_recurse() -> None:
    n = 5000
    chain = ", ".join(f"a{i} = a{i + 1} + 1" for i in range(n))
    text = f"SELECT SENTENCE LET {chain}, a{n} = SIMILARITY(content, 'x'), f = RRF(a0, a{n}) WHERE a0 > 'x'"
    assert messages(text) == ["cannot compare a score with a string"], "types flow through 5,000 bindings"
    loop = ", ".join(f"a{i} = a{i - 1} + 1" for i in range(1, n)) + f", a0 = a{n - 1}"
    [d] = check(f"SELECT SENTENCE LET {loop}")
    assert d.message == f"bindings refer to each other in a cycle: a1 → a0 → a{n - 1} → … → a3 → a2 → a1 ({n} bindings)"
