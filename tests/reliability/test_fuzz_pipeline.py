"""Bad input never escapes as anything but an NLQLError, and never breaks the engine (SPEC §8).

Hypothesis throws random and mutated query text, mutated IR JSON (``Query.from_dict``), odd parameter
values and odd metadata at engines over the built-in store, Qdrant (local mode) and pgvector. After each
example the engine must still answer fixed probe queries exactly as before. Limits (query length,
nesting depth, list length, LIMIT ceiling) must fail with a clear error instead of exhausting anything.

Decided and documented in docs/reliability.md: ``check``/``explain``/``search`` raise only ``NLQLError``
for anything inside a query or its parameter *values*; passing a non-string query or a non-mapping
``params`` is a programming error (``TypeError``), as are bad Python arguments such as ``timeout="1"``.
At ingest, a non-string text, a non-mapping metadata (``TypeError``) or an integer too large to write
as text (``ValueError``) is refused before anything is written.
"""

from __future__ import annotations

import copy
import math
import sys
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from relhelp import FUZZ_STORES, PROBES, answer, deep_mode, load, make_engine, make_store, same

from nlql import Engine, NLQLError, parse
from nlql import values as V
from nlql.errors import CheckError, IRValidationError, LimitError, PlanError
from nlql.ir import NODE_TYPES, Query
from nlql.parser import MAX_DEPTH, MAX_LENGTH, MAX_LIST_ITEMS
from nlql.render import quote_string
from nlql.text.split import split_sentences

SEEDS = [
    "SELECT SENTENCE",
    "select document limit 2 offset 1",
    'SELECT SENTENCE LET rel = SIMILARITY(content, "agents tools") WHERE rel >= 0.1 ORDER BY rel DESC LIMIT 5',
    'SELECT SENTENCE LET rel = SIMILARITY(content, $p) WHERE meta.status == $q ORDER BY rel DESC LIMIT 3',
    'SELECT DOCUMENT LET s = SIMILARITY(content, "solar"), k = BM25(content, "solar energy"), '
    'f = RRF(s, k, k => 60) WHERE meta.year BETWEEN 2020 AND 2022 ORDER BY f DESC LIMIT 4',
    'SELECT SPAN(SENTENCE, window => 1) WHERE content CONTAINS "use" AND meta.n IN (1, 2, "3") LIMIT 3',
    "SELECT CHUNK WHERE meta.nested.a >= $p OR meta.year IS NULL ORDER BY meta.n ASC NULLS FIRST LIMIT $1",
    "SELECT SENTENCE WHERE meta.year WITHIN (DATE '2020-01-01', TIMESTAMP '2024-06-01T10:00:00Z')",
    'SELECT SENTENCE WHERE meta.date WITHIN "last week" AND content NOT LIKE "The %"',
    'SELECT SENTENCE WHERE content MATCH "part [0-9]+" AND NOT meta.`content-type` == "x" -- comment',
    "SELECT SENTENCE LET s = 0.7 * SIMILARITY(content, ['a', 'b']) + 0.3 * BM25(content, 'a') "
    "ORDER BY s DESC LIMIT 5;",
    "SELECT SENTENCE LET r = RECENCY(meta.date, half_life => \"30d\"), x = IF(meta.n > 3, 1.5, 1) "
    "ORDER BY r * x DESC /* block */ LIMIT 2",
    "SELECT DOCUMENT WHERE LENGTH(content) > $p AND LOWER(meta.status) != UPPER($q) AND COUNT(content, 'e') > 1",
    "SELECT SENTENCE WHERE meta.tags IN $p AND position == 0 AND id != 'doc-01#0' AND doc_id <> $q",
    "SELECT SENTENCE LET a = SIMILARITY(content, $p), b = BM25(content, $p), i = INTERLEAVE(a, b) "
    "WHERE NOW() > DATE('2020-01-01') ORDER BY i DESC LIMIT 7",
]

TOKENS = [
    "SELECT", "SENTENCE", "CHUNK", "DOCUMENT", "SPAN", "LET", "WHERE", "ORDER", "BY", "LIMIT", "OFFSET", "AND",
    "OR", "NOT", "IN", "BETWEEN", "IS", "NULL", "CONTAINS", "LIKE", "MATCH", "WITHIN", "ASC", "DESC", "NULLS",
    "FIRST", "LAST", "true", "false", "null", "DATE", "TIMESTAMP", "content", "id", "doc_id", "position", "meta",
    "meta.status", "meta.`a b`", "rel", "SIMILARITY", "BM25", "RRF", "INTERLEAVE", "IF", "RECENCY", "LENGTH",
    "NOW", "COUNT", "window", "k", "weights", "half_life", "=>", "(", ")", "[", "]", ",", ".", "=", "==", "!=",
    "<>", "<", "<=", ">", ">=", "+", "-", "*", "/", ";", "$p", "$q", "$1", "$", "0", "-1", "3.5", ".5", "1e-3",
    "1e999", "9" * 400, '"x"', "'y'", '"', "'", "`", "\\", '"\\u12"', '"\\q"', "--", "/*", "*/", "\x00",
    "\u202e", "ÿ", "\U0001F600", "\n", "\t", "%", "_", "{", "}", "@", "#",
]

P_NAMES = ["p", "q", "1", "$p", "x"]


def _huge_int() -> st.SearchStrategy[int]:
    """10**5000: Python refuses to write it as text (so it must never be repr'd, even by Hypothesis)."""
    return st.builds(lambda: 10**5000)


def scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(), st.booleans(), st.integers(),
        st.sampled_from([2**63, -(2**63) - 1, 10**30, 10**400, -(10**400), 0]), _huge_int(),
        st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([-0.0, 1e308, 5e-324]),
        st.text(max_size=20), st.sampled_from(["", "\x00", "\ud800", "2025", "2024-06-01", "%_", "a" * 300]),
        st.binary(max_size=8), st.datetimes(), st.dates(),
        st.datetimes(timezones=st.just(timezone.utc)),
        st.sampled_from([Decimal("1.5"), 1 + 2j, object(), {1, 2}, frozenset(), b"\xff"]),
    )


def values() -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars(),
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                                st.dictionaries(st.text(max_size=3), inner, max_size=3)),
        max_leaves=12,
    )


def param_maps() -> st.SearchStrategy[dict[Any, Any] | None]:
    keys = st.one_of(st.sampled_from(P_NAMES), st.text(max_size=4), st.integers(-2, 3))
    return st.one_of(st.none(), st.dictionaries(keys, values(), max_size=4))


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A seed query with a few character- or token-level edits."""
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        n = len(text)
        i = draw(st.integers(0, n))
        j = draw(st.integers(i, min(n, i + 12)))
        how = draw(st.sampled_from(["delete", "insert", "token", "duplicate", "swap", "case"]))
        if how == "delete":
            text = text[:i] + text[j:]
        elif how == "insert":
            text = text[:i] + draw(st.text(max_size=4)) + text[i:]
        elif how == "token":
            text = text[:i] + " " + draw(st.sampled_from(TOKENS)) + " " + text[j:]
        elif how == "duplicate":
            text = text[:j] + text[i:j] * draw(st.integers(1, 3)) + text[j:]
        elif how == "swap":
            k = draw(st.integers(0, n))
            text = text[:i] + text[k:] + text[i:k] if k > i else text[:k] + text[i:j] + text[k:i] + text[j:]
        else:
            text = text[:i] + text[i:j].swapcase() + text[j:]
    return text


def query_texts() -> st.SearchStrategy[str]:
    soup = st.lists(st.sampled_from(TOKENS), max_size=25).map(" ".join)
    return st.one_of(mutated(), mutated(), soup, st.text(max_size=60),
                     st.sampled_from(SEEDS).map(lambda s: s.replace("SELECT", "SELECT", 1)))


# ------------------------------------------------------------------------- well-formed random queries
# Mutated text mostly dies in the parser; these reach the checker, the planner, the pushed filters of
# each store and the executor, with odd literals (hostile strings, huge and tiny numbers, odd dates).

ODD_STRINGS = ["", "x", "agents", "2021", "2024-06-01", "2024-06-01T10:00:00Z", "%", "_", "a%b_", "\\", "'",
               '"', "\x00", "\ud800", "\u202e", "ß", "İ", "é", "🙂", "(", "[a-", ".*", "a" * 300, "NaN", "1e400",
               "-0", "null", "$p", "' OR 1=1 --", "$$", "\\u0000"]
PERIODS = ["last week", "yesterday", "the past 3 days", "last month", "2024", "March 2024", "nonsense", "",
           "year 99999", "last 1000000000 days"]
REGEXES = ["part [0-9]+", "^The", "(a|b)*c", "\\d{2}", "(?i)AGENTS", ".", "[", "(?P<x>a)(?P=x)", "\\"]
META_PATHS = ["meta.status", "meta.n", "meta.year", "meta.nested.a", "meta.tags", "meta.rare", "meta.missing",
              "meta.`content-type`", "meta.`select`", "meta.`a b`", "meta.`✓`", "meta.n.deeper"]


def _lit() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(ODD_STRINGS).map(quote_string),
        st.text(max_size=8).map(quote_string),
        st.integers(-10**20, 10**20).map(str),
        st.sampled_from(["0", "1", "3", "-1", "0.5", ".5", "1e-3", "1e308", "9" * 300, "4.9e-324", "2025"]),
        st.floats(allow_nan=False, allow_infinity=False).map(repr).filter(lambda t: "e+" not in t),
        st.sampled_from(["true", "false", "null", "DATE '2024-06-01'", "TIMESTAMP '2024-06-01T10:00:00Z'",
                         "DATE '2024-02-30'", "NOW()", "DATE('2021-01-01')", "$p", "$q"]),
    )


def _value_expr() -> st.SearchStrategy[str]:
    base = st.one_of(_lit(), st.sampled_from(META_PATHS),
                     st.sampled_from(["content", "id", "doc_id", "position", "s", "k", "f"]))
    return st.recursive(base, lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda x: f"-({x})"),
        st.tuples(st.sampled_from(["LENGTH", "LOWER", "UPPER", "ECHO"]), inner).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(inner, inner).map(lambda t: f"COUNT({t[0]}, {t[1]})"),
        st.tuples(_cond_leaf(inner), inner, inner).map(lambda t: f"IF({t[0]}, {t[1]}, {t[2]})"),
        st.tuples(st.sampled_from(META_PATHS), st.sampled_from(['"30d"', '"1h"', '"0d"', '"x"'])).map(
            lambda t: f"RECENCY({t[0]}, half_life => {t[1]})"),
    ), max_leaves=4)


def _cond_leaf(value: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    neg = st.sampled_from(["", "NOT "])
    path = st.sampled_from(META_PATHS + ["content", "doc_id", "id", "position", "s", "k"])
    value = st.one_of(path, path, value)
    return st.one_of(
        st.tuples(value, st.sampled_from(["==", "=", "!=", "<>", "<", "<=", ">", ">="]), value).map(" ".join),
        st.tuples(value, neg, st.lists(_lit(), min_size=1, max_size=5)).map(
            lambda t: f"{t[0]} {t[1]}IN ({', '.join(t[2])})"),
        st.tuples(value, neg).map(lambda t: f"{t[0]} {t[1]}IN $p"),
        st.tuples(value, neg, value, value).map(lambda t: f"{t[0]} {t[1]}BETWEEN {t[2]} AND {t[3]}"),
        st.tuples(value, st.sampled_from(["IS NULL", "IS NOT NULL"])).map(" ".join),
        st.tuples(value, neg, st.sampled_from(["CONTAINS", "LIKE"]), st.sampled_from(ODD_STRINGS)).map(
            lambda t: f"{t[0]} {t[1]}{t[2]} {quote_string(t[3])}"),
        st.tuples(value, neg, st.sampled_from(REGEXES)).map(lambda t: f"{t[0]} {t[1]}MATCH {quote_string(t[2])}"),
        st.tuples(value, st.sampled_from(PERIODS)).map(lambda t: f"{t[0]} WITHIN {quote_string(t[1])}"),
        st.tuples(value, _lit(), _lit()).map(lambda t: f"{t[0]} WITHIN ({t[1]}, {t[2]})"),
        value,
    )


def _condition(value: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.recursive(_cond_leaf(value), lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda x: f"NOT {x}"),
    ), max_leaves=5)


# built once: constructing recursive strategies per draw costs more than running the query
VALUE_EXPR = _value_expr()
CONDITION = _condition(VALUE_EXPR)


@st.composite
def generated_queries(draw: st.DrawFn) -> str:
    unit = draw(st.sampled_from(["SENTENCE", "CHUNK", "DOCUMENT", "SPAN(SENTENCE)", "SPAN(SENTENCE, window => 2)",
                                 "SPAN(CHUNK, window => 1)", "SPAN(SENTENCE, window => 0)"]))
    parts = [f"SELECT {unit}"]
    text = draw(st.one_of(st.sampled_from(ODD_STRINGS).map(quote_string), st.just("$p"),
                          st.lists(st.sampled_from(ODD_STRINGS).map(quote_string), min_size=1, max_size=3)
                          .map(lambda xs: "[" + ", ".join(xs) + "]")))
    lets = []
    if draw(st.booleans()):
        lets.append(f"s = SIMILARITY(content, {text})")
    if draw(st.booleans()):
        lets.append(f"k = BM25(content, {quote_string(draw(st.sampled_from(ODD_STRINGS)))})")
    if len(lets) == 2 and draw(st.booleans()):
        fuse = draw(st.sampled_from(["RRF(s, k)", "RRF(s, k, k => 60)", "RRF(s, k, k => 1, weights => [2, 0.5])",
                                     "INTERLEAVE(s, k)", "RRF(s, k, k => 0)", "s * 0.7 + k * 0.3"]))
        lets.append(f"f = {fuse}")
    if lets:
        parts.append("LET " + ", ".join(lets))
    if draw(st.booleans()):
        parts.append("WHERE " + draw(CONDITION))
    if draw(st.booleans()):
        keys = draw(st.lists(st.tuples(VALUE_EXPR, st.sampled_from(["", " ASC", " DESC"]),
                                       st.sampled_from(["", " NULLS FIRST", " NULLS LAST"])), min_size=1, max_size=3))
        parts.append("ORDER BY " + ", ".join(f"{e}{d}{n}" for e, d, n in keys))
    if draw(st.booleans()):
        parts.append("LIMIT " + draw(st.sampled_from(["0", "1", "3", "10", "$q", "100000", "100001"])))
        if draw(st.booleans()):
            parts.append("OFFSET " + draw(st.sampled_from(["0", "2", "1000000000000"])))
    return " ".join(parts)


def generated_params() -> st.SearchStrategy[dict[str, Any]]:
    usual = st.one_of(st.sampled_from(ODD_STRINGS), st.integers(0, 5), st.lists(st.sampled_from(ODD_STRINGS)))
    return st.fixed_dictionaries({"p": st.one_of(usual, usual, values()), "q": st.one_of(usual, values())})


def json_values() -> st.SearchStrategy[Any]:
    node = st.sampled_from(sorted(NODE_TYPES))
    leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.sampled_from([10**400, 2**70]), _huge_int(),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                     st.sampled_from(["==", "AND", "NOT", "-", "SENTENCE", "SPAN", "CHUNK", "DATE", "content",
                                      "SIMILARITY", "RRF", "k", "status", "p"]))
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.sampled_from(["node", "value", "op", "left", "right", "expr", "items",
                                             "keys", "name", "args", "kwargs", "negated", "options"]),
                            inner, max_size=4),
            st.fixed_dictionaries({"node": node}, optional={"value": inner, "name": inner, "op": inner,
                                                              "left": inner, "right": inner}),
        ),
        max_leaves=10,
    )


def _places(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(_places(v, (*path, k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.extend(_places(v, (*path, i)))
    return out


@st.composite
def ir_dicts(draw: st.DrawFn) -> Any:
    """The JSON IR of a seed query with a few subtrees replaced, deleted, duplicated or extended."""
    data: Any = parse(draw(st.sampled_from(SEEDS))).to_dict()
    for _ in range(draw(st.integers(1, 3))):
        places = _places(data)
        path = draw(st.sampled_from(places))
        how = draw(st.sampled_from(["replace", "replace", "delete", "extra", "wrap", "copy"]))
        if not path:
            if how == "replace":
                data = draw(json_values())
            continue
        parent = data
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        if how == "replace":
            parent[last] = draw(json_values())
        elif how == "delete":
            del parent[last]
        elif how == "extra" and isinstance(parent, dict):
            parent[draw(st.text(max_size=5))] = draw(json_values())
        elif how == "wrap":
            parent[last] = {"node": draw(st.sampled_from(["Unary", "ListExpr", "Binary"])), "op": "NOT",
                            "operand": parent[last], "items": [parent[last]]}
        else:
            parent[last] = copy.deepcopy(draw(st.sampled_from([data, parent[last]])))
    return data


def metadata_keys() -> st.SearchStrategy[Any]:
    return st.one_of(st.text(max_size=6), st.sampled_from(["", ".", "a.b", "$", "'", '"', "\x00", "n"]),
                     st.integers(-3, 3), st.none(), st.booleans(), st.tuples(st.integers(0, 2)),
                     st.floats(allow_nan=False))


def metadatas() -> st.SearchStrategy[Any]:
    inner = st.recursive(
        scalars(),
        lambda child: st.one_of(st.lists(child, max_size=3), st.dictionaries(metadata_keys(), child, max_size=3)),
        max_leaves=15,
    )
    deep = st.integers(20, 60).map(_nest)
    return st.one_of(st.dictionaries(metadata_keys(), inner, max_size=5), deep, st.none())


def _nest(depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {"leaf": depth}
    for i in range(depth):
        out = {f"k{i % 3}": out, "n": i}
    return out


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module", params=FUZZ_STORES)
def fuzz_engine(request: pytest.FixtureRequest) -> Any:
    engine = load(make_engine(make_store(request.param, request)))
    engine.register_function("ECHO", lambda x: x, arity=1)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def expected_probes() -> list[Any]:
    reference = load(make_engine("memory"))
    return [answer(reference, q) for q in PROBES]


def _examples(deep: bool, ci: int, store: str) -> int:
    n = ci if store == "memory" else max(10, ci // 3)
    return n * 20 if deep_mode(deep) else n


def _fuzz_settings(deep: bool, ci: int, engine: Engine) -> settings:
    return settings(max_examples=_examples(deep, ci, engine.store.capabilities.NAME), deadline=None,
                    derandomize=not deep_mode(deep), database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def _only_nlql(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; an NLQLError is fine (and must render), anything else fails the test."""
    try:
        return fn(*args, **kwargs)
    except NLQLError as exc:
        text = str(exc)
        assert text and isinstance(exc.line, int) and isinstance(exc.column, int)
        try:
            given_text = repr((args, kwargs))  # a user may well write "LPAR" themselves
        except (ValueError, RecursionError):
            given_text = ""
        for internal in ("$END", "LPAR", "RPAR", "COMPARE_OP", "__ANON"):
            assert internal not in text or internal in given_text, text
        return exc


def _all_entry_points(engine: Engine, query: Any, params: Any) -> None:
    _only_nlql(engine.check, query, params=params)
    plan = _only_nlql(engine.explain, query, params=params)
    if not isinstance(plan, NLQLError):
        str(plan)
        plan.to_dict()
    hits = _only_nlql(engine.search, query, params=params)
    if not isinstance(hits, NLQLError):
        for h in hits:
            assert isinstance(h.content, str) and isinstance(h.metadata, dict)


def _assert_probes(engine: Engine, expected: list[Any]) -> None:
    for q, want in zip(PROBES, expected, strict=True):
        assert answer(engine, q) == want, f"probe changed after an error: {q}"


# --------------------------------------------------------------------------------------------- tests


def test_random_query_text(fuzz_engine: Engine, expected_probes: list[Any], deep: bool) -> None:
    @_fuzz_settings(deep, 150, fuzz_engine)
    @given(text=query_texts(), params=param_maps())
    def run(text: str, params: dict[Any, Any] | None) -> None:
        _all_entry_points(fuzz_engine, text, params)
        _assert_probes(fuzz_engine, expected_probes)

    run()


def test_generated_queries(fuzz_engine: Engine, expected_probes: list[Any], deep: bool) -> None:
    outcomes = {"answered": 0, "refused": 0}

    @_fuzz_settings(deep, 150, fuzz_engine)
    @given(text=generated_queries(), params=generated_params())
    def run(text: str, params: dict[str, Any]) -> None:
        used = {k: v for k, v in params.items() if f"${k}" in text}
        hits = _only_nlql(fuzz_engine.search, text, params=used)
        outcomes["refused" if isinstance(hits, NLQLError) else "answered"] += 1
        _all_entry_points(fuzz_engine, text, used)
        _assert_probes(fuzz_engine, expected_probes)

    run()
    # the generator is worth its time only if most queries get past the checker and actually run
    assert outcomes["answered"] >= outcomes["refused"] / 2, outcomes


def test_random_ir_json(fuzz_engine: Engine, expected_probes: list[Any], deep: bool) -> None:
    @_fuzz_settings(deep, 100, fuzz_engine)
    @given(data=ir_dicts(), params=param_maps())
    def run(data: Any, params: dict[Any, Any] | None) -> None:
        q = _only_nlql(Query.from_dict, data)
        if isinstance(q, NLQLError):
            assert isinstance(q, IRValidationError)
        else:
            _all_entry_points(fuzz_engine, q, params)
        _assert_probes(fuzz_engine, expected_probes)

    run()


def test_random_param_values(fuzz_engine: Engine, expected_probes: list[Any], deep: bool) -> None:
    query = st.sampled_from([s for s in SEEDS if "$" in s])

    @_fuzz_settings(deep, 100, fuzz_engine)
    @given(q=query, p=values(), q2=values(), one=values(), extra=st.booleans())
    def run(q: str, p: Any, q2: Any, one: Any, extra: bool) -> None:
        params: dict[str, Any] = {"p": p, "q": q2, "1": one}
        if extra:
            params["unused"] = 1
        used = {k: v for k, v in params.items() if f"${k}" in q or k == "unused"}
        _all_entry_points(fuzz_engine, q, used)
        _assert_probes(fuzz_engine, expected_probes)

    run()


def _visible_text(text: str) -> str | None:
    """What a DOCUMENT hit shows of ``text``: from its first sentence to its last (None: no sentence)."""
    spans = split_sentences(text)
    return text[spans[0][0]:spans[-1][1]] if spans else None


def test_random_metadata_at_ingest(fuzz_engine: Engine, expected_probes: list[Any], deep: bool) -> None:
    counter = iter(range(10**9))
    texts = st.one_of(st.text(max_size=40), st.sampled_from(["Plain text. Two sentences.", "\x00 NUL. ok",
                                                             "\ud800 lone surrogate.", "   ", ""]))

    @_fuzz_settings(deep, 80, fuzz_engine)
    @given(text=texts, meta=metadatas())
    def run(text: str, meta: Any) -> None:
        doc_id = f"fuzz-{next(counter)}"
        try:
            fuzz_engine.add_text(text, id=doc_id, metadata=meta)
            stored = True
        except (TypeError, ValueError) as exc:  # documented programmer errors, refused before writing
            assert str(exc)
            stored = False
        hits = fuzz_engine.search("SELECT DOCUMENT WHERE doc_id == $d", params={"d": doc_id})
        visible = _visible_text(text)
        if not stored or visible is None:
            assert list(hits) == []
        else:
            assert len(hits) == 1
            assert hits[0].content == visible
            want = V.normalize_metadata(dict(meta or {}))
            assert same(hits[0].metadata, want), (hits[0].metadata, want)
        fuzz_engine.delete(doc_id)
        _assert_probes(fuzz_engine, expected_probes)

    run()


def test_persistent_store_round_trips_odd_values(tmp_path: Path, deep: bool) -> None:
    """What the built-in store accepts in RAM, its persistent form keeps across a reopen, exactly."""
    directory = str(tmp_path / "store")
    texts = st.one_of(st.text(min_size=1, max_size=30),
                      st.sampled_from(["\ud800 lone surrogate. \udfff", "NUL \x00 inside.", "\ufeff\u202e rtl."]))
    ids = st.one_of(st.text(min_size=1, max_size=10), st.sampled_from(["\ud800", "a\x00b", "\udfff\ud800"]))
    docs: dict[str, tuple[str, Any]] = {}

    @settings(max_examples=200 if deep_mode(deep) else 25, deadline=None, derandomize=not deep_mode(deep),
              database=None, suppress_health_check=list(HealthCheck))
    @given(text=texts, doc_id=ids, meta=metadatas())
    def run(text: str, doc_id: str, meta: Any) -> None:
        in_ram = make_engine("memory")
        try:
            in_ram.add_text(text, id=doc_id, metadata=meta)
        except (TypeError, ValueError) as exc:
            refused: type[Exception] | None = type(exc)
        else:
            refused = None
        engine = make_engine(directory)
        try:
            if refused is not None:
                with pytest.raises(refused):
                    engine.add_text(text, id=doc_id, metadata=meta)
                return
            engine.add_text(text, id=doc_id, metadata=meta)
        finally:
            engine.close()
        docs[doc_id] = (text, V.normalize_metadata(dict(meta or {})))
        reopened = make_engine(directory)
        for d, (t, m) in docs.items():
            hits = reopened.search("SELECT DOCUMENT WHERE doc_id == $d", params={"d": d})
            visible = _visible_text(t)
            assert [h.content for h in hits] == ([] if visible is None else [visible]), repr(d)
            if hits:
                assert same(hits[0].metadata, m)
        reopened.close()

    run()


def test_ingest_programmer_errors_are_plain_python_errors() -> None:
    engine = load(make_engine("memory"))
    before = len(engine)
    with pytest.raises(TypeError, match="texts must be strings"):
        engine.add_text(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="metadata must be a mapping"):
        engine.add_text("Some text.", id="m", metadata="not a dict")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="too large"):
        engine.add_text("Some text.", id="big", metadata={"a": {"b": [10**5000]}})
    with pytest.raises(ValueError, match="too large"):
        engine.add_text("Some text.", id="big", metadata={10**5000: "as a key"})
    deep_big: dict[str, Any] = {"leaf": -(10**5000)}
    for _ in range(40):  # deeper than normalisation keeps, where it would become str(...) and fail
        deep_big = {"k": deep_big}
    with pytest.raises(ValueError, match="too large"):
        engine.add_texts(["Fine.", "Not fine."], ids=["fine", "big"], metadatas=[{"ok": 1}, deep_big])
    assert engine.search('SELECT DOCUMENT WHERE doc_id == "fine"') == []  # the whole call was refused
    with pytest.raises(ValueError, match="one entry per text"):
        engine.add_texts(["a.", "b."], ids=["x"])
    assert len(engine) == before
    assert engine.search('SELECT DOCUMENT WHERE doc_id IN ("m", "big")') == []
    cyclic: dict[str, Any] = {"a": 1}
    cyclic["self"] = cyclic
    engine.add_text("Cyclic metadata is cut like any deep nesting.", id="cyc", metadata=cyclic)
    assert engine.search('SELECT DOCUMENT WHERE meta.self.a == 1')[0].id == "cyc"


def test_api_argument_errors_are_plain_python_errors() -> None:
    engine = load(make_engine("memory"))
    for bad in (None, 5, b"SELECT SENTENCE"):
        with pytest.raises(TypeError):
            engine.search(bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            engine.check(bad)  # type: ignore[arg-type]
    for bad_params in ([1], "p", 3):
        for fn in (engine.search, engine.explain, engine.check):
            with pytest.raises(TypeError, match="params must be a mapping"):
                fn("SELECT SENTENCE WHERE meta.n == $p", params=bad_params)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="timeout"):
        engine.search("SELECT SENTENCE", timeout="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        engine.search("SELECT SENTENCE", timeout=float("nan"))
    with pytest.raises(TypeError, match="max_tokens"):
        engine.search("SELECT SENTENCE", max_tokens="5")  # type: ignore[arg-type]
    assert len(engine.search("SELECT SENTENCE LIMIT 2")) == 2


# -------------------------------------------------------------------------------------------- limits


@pytest.fixture(scope="module")
def small_engine() -> Engine:
    return load(make_engine("memory"))


def _raises_limit(engine: Engine, query: Any, params: Any = None, match: str = "") -> NLQLError:
    for fn in (engine.explain, engine.search):
        with pytest.raises(NLQLError, match=match) as info:
            fn(query, params=params)
    diags = engine.check(query, params=params)
    assert diags and any(match in d.message for d in diags), diags
    return info.value


def test_query_length_limit(small_engine: Engine) -> None:
    q = 'SELECT SENTENCE WHERE content CONTAINS "' + "x" * MAX_LENGTH + '"'
    err = _raises_limit(small_engine, q, match="characters long")
    assert isinstance(err, LimitError) and err.line == 1
    # the same needle bound as a parameter is fine
    assert small_engine.search('SELECT SENTENCE WHERE content CONTAINS $p', params={"p": "x" * MAX_LENGTH}) == []
    # a 1 MB query is refused without being parsed
    _raises_limit(small_engine, "SELECT SENTENCE " + "-" * 1_000_000, match="characters long")


@pytest.mark.parametrize("shape", ["parens", "not", "minus", "plus", "call", "list"])
def test_expression_depth_limit(small_engine: Engine, shape: str) -> None:
    n = 5_000
    where = {
        "parens": "(" * n + "true" + ")" * n,
        "not": "NOT " * n + "true",
        "minus": "meta.n == " + "- " * n + "1",
        "plus": "meta.n == " + " + ".join(["1"] * n),
        "call": "LENGTH(" * n + "content" + ")" * n + " > 1",
        "list": "meta.n IN (" + "[" * n + "1" + "]" * n + ")",
    }[shape]
    err = _raises_limit(small_engine, f"SELECT SENTENCE WHERE {where}", match="nested more than")
    assert isinstance(err, LimitError)
    assert f"{MAX_DEPTH} levels" in err.message


def test_depth_just_under_the_limit_works_even_from_a_deep_stack(small_engine: Engine) -> None:
    """A query at the nesting limit must not hit Python's recursion limit, even when called deep."""
    depth = MAX_DEPTH - 5
    queries = ["SELECT SENTENCE WHERE " + "NOT " * depth + "true",
               "SELECT SENTENCE WHERE " + "(" * depth + "meta.n >= 0" + ")" * depth,
               "SELECT SENTENCE LET x = " + " + ".join(["1"] * depth) + " WHERE x > 0 LIMIT 1"]

    def nested(k: int, q: str) -> Any:
        if k == 0:
            try:
                return small_engine.search(q)
            except NLQLError as exc:
                return exc
        return nested(k - 1, q)

    room = sys.getrecursionlimit() - len(_stack())
    for q in queries:
        for used in (0, room // 2, room - 150):
            out = nested(max(0, used), q)
            assert isinstance(out, (list, NLQLError)), type(out)
            if isinstance(out, NLQLError):
                assert "too deep" in out.message or "nested" in out.message, out.message


def _stack() -> list[Any]:
    import traceback

    return traceback.extract_stack()


def test_ir_json_depth_limit(small_engine: Engine) -> None:
    node: dict[str, Any] = {"node": "Literal", "value": True}
    for _ in range(5_000):
        node = {"node": "Unary", "op": "NOT", "operand": node}
    data = parse("SELECT SENTENCE").to_dict()
    data["where"] = node
    with pytest.raises(IRValidationError, match="nested deeper than"):
        Query.from_dict(data)


def test_binding_chain_is_an_error_not_a_crash(small_engine: Engine) -> None:
    """LET bindings that refer to each other nest too: a long chain must be refused or answered cleanly."""
    chain = ", ".join(f"b{i} = b{i - 1} + 1" for i in range(1, 3_000))
    q = f"SELECT SENTENCE LET b0 = 1, {chain} WHERE b2999 > 0 LIMIT 1"
    for fn in (small_engine.explain, small_engine.search):
        try:
            out = fn(q)
        except NLQLError as exc:
            assert "nested" in exc.message or "too" in exc.message, exc.message
        else:
            if fn is small_engine.search:
                assert len(out) == 1


def test_in_list_length_limit(small_engine: Engine) -> None:
    items = ", ".join(str(i) for i in range(MAX_LIST_ITEMS + 1))
    err = _raises_limit(small_engine, f"SELECT SENTENCE WHERE meta.n IN ({items})", match="the limit is")
    assert isinstance(err, LimitError)
    ok = ", ".join(str(i) for i in range(MAX_LIST_ITEMS))
    assert len(small_engine.search(f"SELECT DOCUMENT WHERE meta.n IN ({ok})")) == 12


def test_in_list_length_limit_applies_to_params_and_ir(small_engine: Engine) -> None:
    q = "SELECT SENTENCE WHERE meta.n IN $p"
    err = _raises_limit(small_engine, q, params={"p": list(range(MAX_LIST_ITEMS + 1))}, match="items")
    assert isinstance(err, CheckError)
    assert any(d.code == "limit" for d in err.diagnostics)
    assert len(small_engine.search("SELECT DOCUMENT WHERE meta.n IN $p", params={"p": list(range(MAX_LIST_ITEMS))})) == 12
    data = parse("SELECT SENTENCE WHERE meta.n IN (1)").to_dict()
    data["where"]["options"]["items"] = [{"node": "Literal", "value": i} for i in range(MAX_LIST_ITEMS + 1)]
    _raises_limit(small_engine, Query.from_dict(data), match="items")


def test_limit_ceiling() -> None:
    engine = load(make_engine("memory", limit_ceiling=50))
    assert len(engine.search("SELECT SENTENCE LIMIT 50")) == 24
    for q, params in [("SELECT SENTENCE LIMIT 51", None), ("SELECT SENTENCE LIMIT $n", {"n": 10**12}),
                      ("SELECT SENTENCE LIMIT 99999999999999999999999999", None)]:
        with pytest.raises(PlanError, match="above the ceiling of 50") as info:
            engine.search(q, params=params)
        assert info.value.hint and "limit_ceiling" in info.value.hint
        with pytest.raises(PlanError, match="ceiling"):
            engine.explain(q, params=params)
    default = make_engine("memory")
    assert default.limit_ceiling == 100_000
    with pytest.raises(PlanError, match="ceiling of 100,?000"):
        default.search("SELECT SENTENCE LIMIT 100001")
    # no LIMIT means every row (the ceiling bounds what a LIMIT may ask for, not the data size)
    assert len(engine.search("SELECT SENTENCE")) == 24


ODD_PARAMS = {"int5000": 10**5000, "list-int5000": [1, 10**5000], "int400": -(10**400), "nan": float("nan"),
              "list-nan": [float("nan")], "nested-lists": [[[[1]]]] * 3, "dict": {"a": 1}, "bytes": b"x",
              "object": object(), "inf": float("inf"), "set": {1, 2}}


@pytest.mark.parametrize("value", list(ODD_PARAMS.values()), ids=list(ODD_PARAMS))
def test_odd_param_values_are_nlql_errors_or_answers(small_engine: Engine, value: Any) -> None:
    for q in ("SELECT SENTENCE WHERE meta.n == $p", "SELECT SENTENCE WHERE meta.n IN $p",
              "SELECT SENTENCE LET s = SIMILARITY(content, $p) ORDER BY s DESC LIMIT 1",
              "SELECT SENTENCE LIMIT $p", "SELECT SPAN(SENTENCE, window => $p) LIMIT 1"):
        _all_entry_points(small_engine, q, {"p": value})


def test_deeply_nested_param_list(small_engine: Engine) -> None:
    value: Any = 1
    for _ in range(5_000):
        value = [value]
    q = "SELECT SENTENCE WHERE meta.n IN $p"
    for fn in (small_engine.explain, small_engine.search):
        with pytest.raises(NLQLError, match="nested"):
            fn(q, params={"p": value})


def test_huge_integer_literal_in_ir_json(small_engine: Engine) -> None:
    data = parse("SELECT SENTENCE WHERE meta.n == 1").to_dict()
    data["where"]["right"]["value"] = 10**5000
    with pytest.raises(IRValidationError, match="too large"):
        Query.from_dict(data)


def test_positional_params_given_as_int_keys(small_engine: Engine) -> None:
    """check() accepts {1: …} for $1 (documented); search() and explain() must agree with it."""
    q = "SELECT DOCUMENT WHERE meta.n == $1 OR meta.n == $2"
    assert small_engine.check(q, params={1: 3, "2": 4}) == []
    assert [h.id for h in small_engine.search(q, params={1: 3, "2": 4})] == ["doc-03", "doc-04"]
    small_engine.explain(q, params={1: 3, 2: 4})


def test_dates_and_odd_values_in_params_are_fine(small_engine: Engine) -> None:
    q = "SELECT SENTENCE WHERE meta.year == $p"
    for v in (date(2020, 1, 1), datetime(2020, 1, 1), datetime(2020, 1, 1, tzinfo=timezone.utc), -0.0,
              math.inf, 2**63, "2021", "\x00"):
        _all_entry_points(small_engine, q, {"p": v})
