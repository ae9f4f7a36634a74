"""Property tests: render/parse round trip over generated IR, and fuzzing that only NLQLErrors escape.

A few thousand examples in CI; with the environment variable ``NLQL_DEEP=1`` each test runs 100,000.
"""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nlql.check import check
from nlql.errors import NLQLError
from nlql.ir import (
    BUILTIN_FIELDS,
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
from nlql.render import KEYWORDS, render

DEEP = os.environ.get("NLQL_DEEP") == "1"


def _examples(ci: int) -> settings:
    return settings(
        max_examples=100_000 if DEEP else ci,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )


# ---------------------------------------------------------------------------------------- strategies

_RESERVED = {k.lower() for k in KEYWORDS} | set(BUILTIN_FIELDS) | {"meta"}
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,7}", fullmatch=True).filter(lambda s: s.lower() not in _RESERVED)
param_names = names | st.integers(0, 999).map(str)
keys = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), min_size=1, max_size=8)
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
numbers = st.integers(-(10**30), 10**30) | st.floats(allow_nan=False, allow_infinity=False)

leaves = st.one_of(
    st.builds(Literal, st.none() | st.booleans() | numbers | texts),
    st.builds(TypedLiteral, st.sampled_from(["DATE", "TIMESTAMP"]), texts),
    st.builds(Param, param_names),
    st.builds(Field, st.sampled_from(BUILTIN_FIELDS)),
    st.builds(Meta, st.lists(keys, min_size=1, max_size=3).map(tuple)),
    st.builds(Ref, names),
)


def _extend(children: st.SearchStrategy) -> st.SearchStrategy:
    small = st.lists(children, max_size=3).map(tuple)
    nonempty = st.lists(children, min_size=1, max_size=3).map(tuple)
    return st.one_of(
        st.builds(Unary, st.sampled_from(["-", "NOT"]), children),
        st.builds(Binary, st.sampled_from(["+", "-", "*", "/", "AND", "OR"]), children, children),
        st.builds(Compare, st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), children, children),
        st.builds(In, children, st.builds(ListExpr, nonempty) | st.builds(Param, param_names), st.booleans()),
        st.builds(Between, children, children, children, st.booleans()),
        st.builds(IsNull, children, st.booleans()),
        st.builds(TextMatch, st.sampled_from(["CONTAINS", "LIKE", "MATCH"]), children, children, st.booleans()),
        st.builds(lambda e, p: Within(e, period=p), children, children),
        st.builds(lambda e, lo, hi: Within(e, low=lo, high=hi), children, children, children),
        st.builds(Call, names.map(str.upper), small, st.lists(st.tuples(names, children), max_size=2).map(tuple)),
        st.builds(ListExpr, small),
    )


exprs = st.recursive(leaves, _extend, max_leaves=12)
counts = st.builds(Literal, st.integers(-(10**6), 10**6) | st.floats(-1e6, 1e6)) | st.builds(Param, param_names)
units = st.one_of(
    st.builds(Unit, st.sampled_from(["SENTENCE", "CHUNK", "DOCUMENT"])),
    st.builds(Unit, st.just("SPAN"), st.sampled_from(["SENTENCE", "CHUNK"]), st.none() | exprs),
)
queries = st.builds(
    Query,
    units,
    st.lists(st.builds(Binding, names, exprs), max_size=3).map(tuple),
    st.none() | exprs,
    st.lists(st.builds(OrderKey, exprs, st.booleans(), st.none() | st.booleans()), max_size=3).map(tuple),
    st.none() | counts,
    st.none() | counts,
)


@_examples(400)
@given(queries)
def test_render_parse_round_trip(q: Query) -> None:
    text = render(q)
    back = parse(text)
    assert back == q, text
    assert render(back) == text
    assert Query.from_dict(back.to_dict()) == back


@_examples(300)
@given(exprs)
def test_every_node_of_a_reparsed_query_has_a_span(e) -> None:
    text = render(Query(Unit("SENTENCE"), where=e))
    q = parse(text)
    for node in q.walk():
        assert node.span is not None
        assert 0 <= node.span.start <= node.span.end <= len(text)


# --------------------------------------------------------------------------------------------- fuzz

SEEDS = [
    'SELECT DOCUMENT LET rel = SIMILARITY(content, $q) WHERE rel > 0.1 DISTINCT BY meta.source, doc_id KEEP 2 '
    'ORDER BY rel DESC LIMIT 10 OFFSET 5',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "AI agents") WHERE rel >= 0.3 AND meta.status == "published" '
    'AND content CONTAINS "tool" ORDER BY rel DESC, meta.created_at DESC NULLS LAST LIMIT 5 OFFSET 0',
    'SELECT SPAN(SENTENCE, window => 2) LET rel = SIMILARITY(content, $q) WHERE meta.lang IN ("en", "de") LIMIT 3',
    "SELECT DOCUMENT\nLET sem = SIMILARITY(content, 'language games'),\n    kw = BM25(content, 'language games'),\n"
    "    score = RRF(sem, kw, k => 60)\nWHERE meta.date WITHIN \"last week\" AND meta.year BETWEEN 2020 AND 2025 "
    "AND meta.author IS NOT NULL -- note\nORDER BY score DESC /* x */ LIMIT 10;",
    'SELECT SENTENCE LET s = 0.7 * SIMILARITY(content, "rag") + 0.3 * BM25(content, "rag") ORDER BY s DESC LIMIT 5',
    "select chunk where meta.`content-type` not like 'a\\u00e9%' and -meta.x < -(2.5e3) and not (a or b) "
    "and meta.d within (DATE '2024-01-01', now()) and content match '\\d+' and x is not null",
]
_TOKEN = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|`[^`\n]*`|\$\w*|\w+|==|!=|<>|<=|>=|=>|--|/\*|\*/|\S")
VOCAB = sorted(KEYWORDS) + [
    "(", ")", "[", "]", ",", ".", ";", "=", "==", "!=", "<>", "<", ">", "<=", ">=", "=>", "+", "-", "*", "/",
    "$", "$x", "$1", "`", "``", "'", '"', "--", "/*", "*/", "meta", "meta.", "content", "SIMILARITY", "RRF",
    "1e999", "9" * 400, ".5", "1e-3", "DATE", "'2024-01-01'", "\\", "\\u12", "\x00", "é", "😀",
]


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    tokens = _tokens(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        if not tokens:
            break
        i = draw(st.integers(0, len(tokens) - 1))
        kind = draw(st.sampled_from(["delete", "insert", "swap", "duplicate", "replace", "truncate"]))
        if kind == "delete":
            del tokens[i]
        elif kind == "insert":
            tokens.insert(i, draw(st.sampled_from(VOCAB) | texts))
        elif kind == "swap" and i + 1 < len(tokens):
            tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
        elif kind == "duplicate":
            tokens.insert(i, tokens[i])
        elif kind == "replace":
            tokens[i] = draw(st.sampled_from(VOCAB))
        elif kind == "truncate":
            del tokens[i:]
    sep = draw(st.sampled_from([" ", "", "\n", " -- c\n"]))
    return sep.join(tokens)


@st.composite
def byte_noise(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        noise = draw(st.binary(min_size=1, max_size=4)).decode("latin-1")
        text = text[:at] + noise + text[at + draw(st.integers(0, 2)):]
    return text


def _only_nlql_errors(text: str) -> None:
    try:
        q = parse(text)
    except NLQLError as exc:
        str(exc)  # rendering the caret must not fail either
        assert exc.line >= 0 and exc.column >= 0
    else:
        assert parse(render(q)) == q
    for d in check(text):
        d.render(text)


@_examples(800)
@given(st.text(max_size=80))
def test_random_text_raises_only_nlql_errors(text: str) -> None:
    _only_nlql_errors(text)


@_examples(1500)
@given(mutated())
def test_mutated_queries_raise_only_nlql_errors(text: str) -> None:
    _only_nlql_errors(text)


@_examples(500)
@given(byte_noise())
def test_random_bytes_raise_only_nlql_errors(text: str) -> None:
    _only_nlql_errors(text)


@_examples(300)
@given(st.text(alphabet="()[]-,'\"`$NOT a1=.*/ \n", max_size=300))
def test_bracket_and_operator_soup(text: str) -> None:
    _only_nlql_errors("SELECT SENTENCE WHERE " + text)


@pytest.mark.parametrize("text", [
    "SELECT SENTENCE WHERE " + "(" * 10_000 + "1" + ")" * 10_000,
    "SELECT SENTENCE WHERE " + "(" * 10_000,
    "SELECT SENTENCE WHERE " + ")" * 10_000,
    "SELECT SENTENCE WHERE " + "NOT " * 10_000 + "x",
    "SELECT SENTENCE WHERE " + "- " * 10_000 + "x",
    "SELECT SENTENCE WHERE " + "[" * 10_000 + "]" * 10_000,
    "SELECT SENTENCE WHERE " + "f(" * 5_000 + ")" * 5_000,
    "SELECT SENTENCE WHERE x == " + "9" * 50_000,
    "SELECT SENTENCE WHERE x == 1" + "0" * 50_000 + ".5e99999",
    "SELECT SENTENCE WHERE x == '" + "y" * 99_000 + "'",
    "SELECT SENTENCE WHERE x == '" + "\\" * 99_000,
    "SELECT SENTENCE WHERE " + " AND ".join(["x == 1"] * 5_000),
    "SELECT SENTENCE WHERE x IN (" + ",".join(["1"] * 20_000) + ")",
    "SELECT SENTENCE " + "-" * 90_000 + "\né",
    "SELECT SENTENCE " + " " * 90_000 + "é",
    "x" * 200_000,
])
def test_pathological_inputs(text: str) -> None:
    _only_nlql_errors(text)
