"""The agent surface: tool_schema's shape, the language reference, and tool bodies that never raise."""

from __future__ import annotations

import json
import re

import pytest

from nlql.agent import (
    LANGUAGE_REFERENCE,
    TOOL_DESCRIPTION,
    check_query,
    explain_query,
    search_query,
    tool_schema,
)
from nlql.embedders import HashEmbedder
from nlql.engine import Engine
from nlql.functions import BUILTINS


@pytest.fixture(scope="module")
def engine() -> Engine:
    e = Engine(embedder=HashEmbedder(dim=64))
    e.add_text("Agents call tools. Cats sleep all day.", id="a", metadata={"status": "published", "year": 2024})
    e.add_text("Language games and meaning.", id="b", metadata={"status": "draft"})
    return e


def _examples(text: str) -> list[str]:
    """Queries in a text: runs of lines from one starting with SELECT up to a blank line or the next one."""
    out: list[str] = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("SELECT "):
            out.append(s)
        elif out and s and not s.startswith(("```", "#", "Tip", "1.")) and re.match(
                r"^(LET|WHERE|ORDER|LIMIT|OFFSET|\w+ *=|    )", line):
            out[-1] += "\n" + line
    return out


def test_tool_schema_shape() -> None:
    schema = tool_schema()
    assert schema["name"] == "nlql_search"
    assert schema["description"] == TOOL_DESCRIPTION
    assert schema["parameters"] == schema["input_schema"]
    params = schema["input_schema"]
    assert params["type"] == "object"
    assert params["required"] == ["query"]
    assert params["properties"]["query"]["type"] == "string"
    assert params["properties"]["params"]["type"] == "object"
    assert params["properties"]["max_tokens"]["type"] == "integer"
    json.dumps(schema)  # JSON-ready
    assert tool_schema() is not tool_schema() and tool_schema() == tool_schema()


def test_tool_schema_styles_match_the_apis() -> None:
    anthropic = tool_schema(style="anthropic")
    assert set(anthropic) == {"name", "description", "input_schema"}
    openai = tool_schema(style="openai")
    assert openai["type"] == "function"
    assert set(openai["function"]) == {"name", "description", "parameters"}
    assert openai["function"]["parameters"] == anthropic["input_schema"]
    with pytest.raises(ValueError):
        tool_schema(style="nope")


def test_description_teaches_the_language_compactly() -> None:
    d = TOOL_DESCRIPTION
    assert len(d) < 4000
    for word in ("SELECT", "LET", "WHERE", "ORDER BY", "LIMIT", "OFFSET", "SENTENCE", "CHUNK", "DOCUMENT",
                 "SPAN", "CONTAINS", "LIKE", "MATCH", "BETWEEN", "IS NULL", "WITHIN", "UNKNOWN", "meta.",
                 "nlql_check", "nlql_explain"):
        assert word in d, word
    for fn in BUILTINS:
        assert fn in d, fn
    assert d.index("SELECT unit") < d.index("[LET") < d.index("[WHERE") < d.index("[ORDER BY") < d.index("[LIMIT")
    assert len([e for e in _examples(d)]) == 3


def test_language_reference_covers_every_builtin_function() -> None:
    for fn in BUILTINS:
        assert f"`{fn}(" in LANGUAGE_REFERENCE, fn
    for section in ("## Clauses", "## Units", "## Functions", "## Operators", "## NULL rules", "## Examples"):
        assert section in LANGUAGE_REFERENCE


@pytest.mark.parametrize("source", ["description", "reference"])
def test_every_example_is_a_valid_query(engine: Engine, source: str) -> None:
    text = TOOL_DESCRIPTION if source == "description" else LANGUAGE_REFERENCE.split("## Examples")[1]
    examples = _examples(text)
    assert len(examples) >= 3
    for q in examples:
        params = {"q": "agents"} if "$q" in q else None
        # warnings (a key this small collection lacks) are allowed; errors are not
        assert [d for d in check_query(engine, q, params) if d.get("severity", "error") == "error"] == [], q
        assert "error" not in search_query(engine, q, params), q


BAD_QUERIES = [
    "",
    "SELECT",
    "SELECT SENTENCE WHERE",
    "SELECT SENTENCES",
    'SELECT SENTENCE WHERE content MATCH "("',
    'SELECT SENTENCE WHERE content CONTAINS "unterminated',
    "SELECT SENTENCE LIMIT -1",
    "SELECT SENTENCE LET a = b, b = a",
    "SELECT SENTENCE WHERE " + "(" * 5000 + "1" + ")" * 5000,
    'SELECT SENTENCE WHERE meta.d WITHIN "the day after never"',
    "SELECT SENTENCE WHERE LENGTH(content, 1, 2) > 1",
    "SELECT SENTENCE LET s = SIMILARITY(content, $q)",
]


@pytest.mark.parametrize("query", BAD_QUERIES)
def test_tool_bodies_return_errors_as_data_never_raise(engine: Engine, query: str) -> None:
    diags = check_query(engine, query, {})
    assert diags, query
    for d in diags:
        assert {"line", "column", "message", "hint", "rendered"} <= set(d)
        assert d["message"] and "$END" not in d["message"]
    result = search_query(engine, query, {})
    assert result["hits"] == [] and result["error"]["message"]
    assert result["error"]["rendered"].startswith(result["error"]["message"])
    plan = explain_query(engine, query, {})
    assert plan["ok"] is False and plan["error"]["message"]
    json.dumps([diags, result, plan])


def test_check_query_with_unknown_params_skips_parameter_checks(engine: Engine) -> None:
    q = "SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 1"
    assert check_query(engine, q) == []
    assert check_query(engine, q, {"q": "x"}) == []
    assert check_query(engine, q, {"q": "x", "extra": 1})  # unused parameter
    assert check_query(engine, 42) and check_query(engine, 42)[0]["code"] == "usage"  # type: ignore[arg-type]


def test_search_and_explain_results_are_json_ready(engine: Engine) -> None:
    q = 'SELECT SENTENCE LET rel = SIMILARITY(content, "tools") WHERE meta.status == "published" LIMIT 1'
    res = search_query(engine, q, None, max_tokens=50)
    assert [h["content"] for h in res["hits"]] == ["Agents call tools."]
    plan = explain_query(engine, q)
    assert plan["ok"] and plan["text"].startswith("query: ") and plan["plan"]["limit"] == 1
    json.dumps([res, plan])


def test_search_tool_takes_a_timeout(engine: Engine) -> None:
    assert tool_schema()["input_schema"]["properties"]["timeout"]["type"] == "number"
    slow = {"n": 0}

    def crawl(x: object) -> bool:
        import time

        slow["n"] += 1
        time.sleep(0.05)
        return True

    engine.register_function("CRAWL", crawl, arity=1)
    res = search_query(engine, "SELECT SENTENCE WHERE CRAWL(position)", timeout=0.01)
    assert res["hits"] and any(w.startswith("timeout") for w in res["warnings"])
    assert res["hits"] == search_query(engine, "SELECT SENTENCE WHERE CRAWL(position)")["hits"][: len(res["hits"])]
