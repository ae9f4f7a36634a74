"""Bad and odd input on every store (issue 20): ids, bare strings, search arguments, wide AND/OR chains,
empty metadata keys, integers beyond 2^53, LIKE escapes, deep metadata, NaN scores, lone surrogates.

Each test runs on every store of the registry plus the persistent built-in store, and compares with
what SPEC §6 and docs/reliability.md promise (or with the built-in store where the answer is data).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from relhelp import all_stores, fresh_store, make_engine, same

from nlql import Engine, parse, render
from nlql import values as V
from nlql.agent import build_mcp_server, search_query

STORES = all_stores()


@pytest.fixture(params=STORES)
def engine(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    e = make_engine(fresh_store(request.param, request, tmp_path))
    yield e
    e.close()


def _module_engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    """A fresh engine on ``request.param`` for one module's read-only tests (loaded once, never written)."""
    return make_engine(fresh_store(request.param, request, tmp_path_factory.mktemp("store"),
                                   dsn_fixture="pg_module_dsn"))


def _ids(hits: Any) -> list[str]:
    return [h.doc_id for h in hits]


# ------------------------------------------------------------------------------------------ ids


def test_int_ids_are_their_decimal_text_everywhere(engine: Engine) -> None:
    assert engine.add_text("Five is here.", id=5) == "5"
    assert engine.add_texts(["Six is here.", "Seven is here."], ids=[6, "7"]) == ["6", "7"]
    assert _ids(engine.search("SELECT DOCUMENT WHERE doc_id == '5'")) == ["5"]
    assert engine.delete(5) is True          # the same id as add_text(id=5) stored
    assert engine.delete("6") is True
    assert engine.delete(6) is False         # already gone
    assert _ids(engine.search("SELECT DOCUMENT")) == ["7"]


@pytest.mark.parametrize("bad", [b"ab", 1.5, float("nan"), True, object(), ("a",)])
def test_other_ids_are_refused_before_anything_is_written(bad: Any) -> None:
    engine = make_engine("memory")
    engine.add_text("Kept.", id="kept")
    with pytest.raises(TypeError, match="id must be a str or an int"):
        engine.add_text("Refused.", id=bad)
    with pytest.raises(TypeError, match="id must be a str or an int"):
        engine.add_texts(["Fine.", "Refused."], ids=["fine", bad])
    with pytest.raises(TypeError, match="id must be a str or an int"):
        engine.delete(bad)
    assert _ids(engine.search("SELECT DOCUMENT")) == ["kept"]


def test_a_bare_string_is_not_a_list_of_texts(engine: Engine) -> None:
    for bad in ("abc", b"abc"):
        with pytest.raises(TypeError, match="single"):
            engine.add_texts(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        engine.add_texts({"a": "text"})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        engine.add_texts(["ok."], ids="x")  # type: ignore[arg-type]
    assert len(engine) == 0


# ------------------------------------------------------------------------------------ search arguments


def test_search_arguments_are_validated() -> None:
    engine = make_engine("memory")
    engine.add_text("Agents call tools. Cats sleep.", id="a")
    q = "SELECT SENTENCE"
    assert len(engine.search(q, timeout=10**400)) == 2     # no deadline at all, not an OverflowError
    assert len(engine.search(q, timeout=math.inf)) == 2
    for bad in (-1, -0.5):
        with pytest.raises(ValueError, match="timeout"):
            engine.search(q, timeout=bad)
    for bad in (0, -5):
        with pytest.raises(ValueError, match="max_tokens"):
            engine.search(q, max_tokens=bad)
    with pytest.raises(TypeError, match="score"):
        engine.search(q, reranker=42)
    with pytest.raises(TypeError, match="score"):
        make_engine("memory", reranker=object())
    assert len(engine.search(q, max_tokens=1)) == 1


def test_agent_tools_return_bad_arguments_as_data() -> None:
    engine = make_engine("memory")
    engine.add_text("Agents call tools in a loop. Cats sleep.", id="a")
    out = search_query(engine, "SELECT SENTENCE", max_tokens=-1)
    assert out["hits"] == [] and out["error"]["kind"] == "usage" and "max_tokens" in out["error"]["message"]
    json.dumps(out, allow_nan=False)


# ------------------------------------------------------------------------------------- AND / OR chains


def _wide(width: int) -> tuple[str, str]:
    return ("SELECT DOCUMENT WHERE " + " OR ".join(f"meta.n == {i}" for i in range(width)),
            "SELECT DOCUMENT WHERE " + " AND ".join(f"meta.n != {i + 1}" for i in range(width)))


@pytest.mark.parametrize("width", [300, 2000])
def test_a_wide_or_is_width_not_depth(engine: Engine, width: int) -> None:
    engine.add_texts([f"Doc {i}." for i in range(6)], ids=[f"d{i}" for i in range(6)],
                     metadatas=[{"n": i * 7} for i in range(6)])
    flat_or, flat_and = _wide(width)
    assert engine.check(flat_or) == [] and engine.check(flat_and) == []
    assert _ids(engine.search(flat_or)) == ["d0", "d1", "d2", "d3", "d4", "d5"][: (width - 1) // 7 + 1]
    assert _ids(engine.search(flat_and)) == ["d0"]
    engine.explain(flat_or)


@pytest.mark.parametrize("width", [300, 2000])
def test_a_wide_chain_renders_as_the_flat_chain_it_is(width: int) -> None:
    # parse and render know no store: once here, not once per store above
    for q in _wide(width):
        tree = parse(q)
        assert parse(render(tree)) == tree
        assert "(" not in render(tree)  # printed as the flat chain it is


def test_groups_inside_a_long_chain_keep_their_meaning() -> None:
    chain = " OR ".join(f"meta.n == {i}" for i in range(40))
    for q in (f"SELECT DOCUMENT WHERE {chain} OR (meta.n == 50 AND meta.m == 1)",
              f"SELECT DOCUMENT WHERE (meta.n == 41 OR meta.n == 42) OR {chain} OR (meta.n == 43 OR meta.n == 44)",
              f"SELECT DOCUMENT WHERE meta.m == 1 AND ({chain})"):
        tree = parse(q)
        assert parse(render(tree)) == tree, render(tree)


# ------------------------------------------------------------------------------------ metadata keys


def test_an_empty_metadata_key_is_refused_at_ingest(engine: Engine) -> None:
    for meta in ({"": 1}, {"a": {"": 1}}, {"a": {"b": {"": None}}}):
        with pytest.raises(ValueError, match="empty key"):
            engine.add_text("Refused.", id="x", metadata=meta)
    engine.add_text("Inside a list it names no path.", id="ok", metadata={"a": [{"": 1}]})
    assert _ids(engine.search("SELECT DOCUMENT")) == ["ok"]


def test_deep_metadata_becomes_text_below_depth_32(engine: Engine) -> None:
    deep: dict[str, Any] = {"leaf": 1}
    for i in range(1000):
        deep = {"k": deep, "i": i}
    engine.add_text("Deep doc.", id="deep", metadata={"d": deep})
    [hit] = engine.search("SELECT DOCUMENT WHERE meta.d.i == 999")
    node: Any = hit.metadata["d"]
    for _ in range(32):
        node = node["k"]
    assert isinstance(node, str) and node.startswith("{'k': {'k':")
    assert same(hit.metadata, V.normalize_metadata({"d": deep}))


# ------------------------------------------------------------------------------------ integers > 2^53

BIG = 2**53  # 9007199254740992: the first integer a float64 view shares with its successor


@pytest.fixture(scope="module", params=STORES)
def big_engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    engine = _module_engine(request, tmp_path_factory)
    engine.add_texts(["Exactly two to the 53.", "One more.", "As text.", "Far beyond.", "Farther."],
                     ids=["a", "b", "c", "d", "e"],
                     metadatas=[{"big": BIG}, {"big": BIG + 1}, {"big": str(BIG + 1)},
                                {"big": 10**20}, {"big": 10**20 + 1}])
    yield engine
    engine.close()


@pytest.mark.parametrize(("where", "want"), [
    (f"meta.big == {BIG + 1}", ["b", "c"]),
    (f"meta.big > {BIG}", ["b", "c", "d", "e"]),
    (f"meta.big >= {BIG + 1}", ["b", "c", "d", "e"]),
    (f"meta.big < {BIG + 1}", ["a"]),
    (f"meta.big != {BIG}", ["b", "c", "d", "e"]),
    (f"meta.big IN ({BIG + 1}, {10**20 + 1})", ["b", "c", "e"]),
    (f"meta.big NOT IN ({BIG})", ["b", "c", "d", "e"]),
    (f"meta.big BETWEEN {BIG + 1} AND {10**20}", ["b", "c", "d"]),
    (f"meta.big == '{BIG + 1}'", ["b", "c"]),
    (f"meta.big > {10**20}", ["e"]),
    (f"meta.big == {10**20}", ["d"]),
])
def test_integers_beyond_2_53_compare_exactly(big_engine: Engine, where: str, want: list[str]) -> None:
    assert _ids(big_engine.search(f"SELECT DOCUMENT WHERE {where}")) == want
    assert _ids(big_engine.search(f"SELECT DOCUMENT WHERE NOT ({where})")) == sorted(set("abcde") - set(want))


def test_integers_beyond_2_53_sort_exactly(big_engine: Engine) -> None:
    q = "SELECT DOCUMENT WHERE doc_id IN ('a', 'b', 'd', 'e') ORDER BY meta.big DESC"
    assert _ids(big_engine.search(q)) == ["e", "d", "b", "a"]


# ------------------------------------------------------------------------------------ LIKE escapes

LIKE_DOCS = {"pct": "50% off", "lit": "50\\% off", "abc": "abc", "a_c": "a_c", "back": "C:\\dir",
             "tail": "ends with \\", "two": "a%b_c"}


@pytest.fixture(scope="module", params=STORES)
def like_engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    engine = _module_engine(request, tmp_path_factory)
    engine.add_texts([f"Doc {k}." for k in LIKE_DOCS], ids=list(LIKE_DOCS),
                     metadatas=[{"s": v} for v in LIKE_DOCS.values()])
    yield engine
    engine.close()


@pytest.mark.parametrize(("pattern", "want"), [
    ("50\\%%", ["pct"]),            # \% is a literal percent sign
    ("50%", ["pct", "lit"]),
    ("a\\_c", ["a_c"]),             # \_ is a literal underscore
    ("a_c", ["abc", "a_c"]),
    ("%\\\\%", ["lit", "back", "tail"]),  # \\ is one backslash
    ("%\\", ["tail"]),              # a trailing lone backslash is itself
    ("a\\%b\\_c", ["two"]),
    ("\\a\\b\\c", ["abc"]),         # \ before an ordinary character is that character
])
def test_like_escapes_mean_the_same_on_every_store(like_engine: Engine, pattern: str, want: list[str]) -> None:
    engine = like_engine
    got = _ids(engine.search("SELECT DOCUMENT WHERE meta.s LIKE $p", params={"p": pattern}))
    assert got == [k for k in LIKE_DOCS if k in want]
    content = engine.search("SELECT DOCUMENT WHERE content LIKE $p", params={"p": "Doc " + pattern + "."})
    assert sorted(_ids(content)) == sorted(k for k in LIKE_DOCS if V.like(f"Doc {k}.", "Doc " + pattern + "."))


# ------------------------------------------------------------------------------------ NaN scores


def _nan_engine() -> Engine:
    engine = make_engine("memory")
    engine.add_texts(["Agents call tools. Cats sleep.", "Solar energy."], ids=["a", "b"])
    engine.register_function("NAN_OR", lambda s: math.nan if "Cats" in s else 1.0, arity=1)
    return engine


NAN_QUERY = "SELECT SENTENCE LET s = NAN_OR(content), rel = SIMILARITY(content, 'agents') ORDER BY rel DESC"


def test_a_nan_score_is_null_in_agent_json() -> None:
    out = search_query(_nan_engine(), NAN_QUERY)
    assert "error" not in out
    text = json.dumps(out, allow_nan=False)  # strict JSON: what an agent receives
    scores = [h["scores"]["s"] for h in json.loads(text)["hits"]]
    assert scores.count(None) == 1 and scores.count(1.0) == 2


def test_a_nan_score_is_null_over_mcp() -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client

    server = build_mcp_server(_nan_engine())

    async def call() -> Any:
        async with Client(server) as client:
            return await client.call_tool("nlql_search", {"query": NAN_QUERY})

    result = anyio.run(call)
    assert not result.is_error, result
    data = result.structured_content or json.loads(result.content[0].text)
    assert "error" not in data
    assert [h["scores"]["s"] for h in data["hits"]].count(None) == 1


# ------------------------------------------------------------------------------------ lone surrogates


@pytest.mark.parametrize("store", ["qdrant", "memory", "directory"])
def test_a_lone_surrogate_in_a_filter_is_data(store: str, request: pytest.FixtureRequest, tmp_path: Any) -> None:
    engine = make_engine(fresh_store(store, request, tmp_path))
    engine.add_texts(["One.", "Two."], ids=["a", "b\ud800"], metadatas=[{"s": "x\ud800"}, {"s": "y"}])
    for q, p, want in [("SELECT DOCUMENT WHERE meta.s == $p", "x\ud800", ["a"]),
                       ("SELECT DOCUMENT WHERE meta.s IN ($p, 'y')", "x\ud800", ["a", "b\ud800"]),
                       ("SELECT DOCUMENT WHERE doc_id == $p", "b\ud800", ["b\ud800"]),
                       ("SELECT DOCUMENT WHERE meta.s != $p", "\ud800", ["a", "b\ud800"])]:
        assert _ids(engine.search(q, params={"p": p})) == want
        plan = engine.explain(q, params={"p": p})
        str(plan)
        json.dumps(plan.to_dict(), default=str)
    engine.close()
