"""`nlql ask` on the command line and the `nlql_ask` MCP tool, through their real entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder

ROOT = Path(__file__).resolve().parent.parent
DOCS = {
    "witt.txt": "Wittgenstein wrote about language games. The meaning of a word is its use.",
    "agents.txt": "Agents call tools to act in the world. A planner decides which tool comes next.",
    "cats.txt": "Cats sleep most of the day. They hunt at night.",
}


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    env.pop("NLQL_DEBUG", None)
    env.pop("NLQL_EMBEDDER", None)
    return env


def nlql(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`nlql args…` in process (tests/cli_inprocess.py): these tests check what it prints; the process
    boundary is tested by test_nlql_ask_over_stdio and tests/test_cli.py."""
    from cli_inprocess import nlql as run

    return run(*args, cwd=cwd)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ask")
    (root / "docs").mkdir()
    for name, text in DOCS.items():
        (root / "docs" / name).write_text(text, encoding="utf-8")
    r = nlql("ingest", "docs", "--store", str(root / "store"), "--embedder", "hash", "-q", cwd=root)
    assert r.returncode == 0, r.stderr
    return root / "store"


# ------------------------------------------------------------------------------------------------ CLI


def test_ask_prints_the_intent_the_query_and_the_answer(store: Path) -> None:
    r = nlql("ask", "Who mentioned Wittgenstein?", "--store", str(store), cwd=store.parent)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("intent: entity\n")
    assert "BM25(content, $keywords)" in r.stdout
    assert "Wittgenstein wrote about language games." in r.stdout
    assert "docs/witt.txt" in r.stdout and r.stderr == ""


def test_ask_json_has_the_route_and_the_hits(store: Path) -> None:
    r = nlql("ask", "who talked about tools?", "--store", str(store), "--json", cwd=store.parent)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["route"]["intent"] == "entity"
    # the entity template's GRAPH arm reads the whole question ($q)
    assert data["route"]["params"] == {"q": "who talked about tools?", "rewrites": ["who talked about tools?"],
                                       "keywords": "tools", "arm_weights": [1.0, 2.5, 1.0]}
    assert data["route"]["query"].startswith("SELECT DOCUMENT")  # the entity's own document (issue 30)
    assert data["hits"][0]["doc_id"] == "docs/agents.txt"
    # "tools" is no known entity: ask says the graph arm found none (issue 30's suggestion)
    assert len(data["warnings"]) == 1 and data["warnings"][0].startswith("the graph arm found no known entity")


def test_ask_explain_shows_route_and_plan(store: Path) -> None:
    r = nlql("ask", "What is a language game?", "--store", str(store), "--explain", cwd=store.parent)
    assert r.returncode == 0, r.stderr
    head = r.stdout.split("\n", 3)
    assert head[0] == "intent: conceptual" and head[1].startswith("rule: ")
    assert "recall: full" in r.stdout and "fusion: RRF" in r.stdout
    assert "Wittgenstein wrote about language games." in r.stdout
    j = nlql("ask", "What is a language game?", "--store", str(store), "--explain", "--json", cwd=store.parent)
    data = json.loads(j.stdout)
    assert data["explain"]["route"]["intent"] == "conceptual" and data["explain"]["recall"]["strategy"] == "full"


def test_ask_says_when_the_store_holds_nothing(store: Path) -> None:
    r = nlql("ask", "What is quantum chromodynamics?", "--store", str(store), cwd=store.parent)
    assert r.returncode == 0, r.stderr
    assert "the store holds nothing about 'What is quantum chromodynamics?'" in r.stdout
    assert "warning" not in r.stderr  # the empty answer is the answer, not a warning
    j = nlql("ask", "What is quantum chromodynamics?", "--store", str(store), "--json", cwd=store.parent)
    data = json.loads(j.stdout)
    assert data["hits"] == [] and any("holds nothing" in w for w in data["warnings"])


def test_ask_errors_are_messages_not_tracebacks(store: Path) -> None:
    r = nlql("ask", "  ", "--store", str(store), cwd=store.parent)
    assert r.returncode == 1
    assert "the question is empty" in r.stderr and "Traceback" not in r.stderr
    missing = nlql("ask", "cats", "--store", str(store.parent / "nowhere"), cwd=store.parent)
    assert missing.returncode == 1 and "no NLQL store" in missing.stderr


# ------------------------------------------------------------------------------------------------ MCP

mcp = pytest.importorskip("mcp")
from mcp import Client, StdioServerParameters  # noqa: E402

from nlql.agent import build_mcp_server  # noqa: E402


def _structured(result: Any) -> Any:
    assert not result.is_error, result
    data = result.structured_content
    if data is None:
        data = json.loads(result.content[0].text) if result.content else []
    if isinstance(data, dict) and set(data) == {"result"}:
        return data["result"]
    return data


def test_nlql_ask_returns_hits_and_the_routed_query_in_process() -> None:
    engine = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    for name, text in DOCS.items():
        engine.add_text(text, id=name)
    server = build_mcp_server(engine)

    async def go() -> tuple[Any, Any, Any, Any]:
        async with Client(server) as client:
            tool = next(t for t in (await client.list_tools()).tools if t.name == "nlql_ask")
            ok = _structured(await client.call_tool("nlql_ask", {"question": "Who mentioned Wittgenstein?"}))
            empty = _structured(await client.call_tool("nlql_ask", {"question": "What is quantum chromodynamics?"}))
            bad = _structured(await client.call_tool("nlql_ask", {"question": " "}))
            return tool, ok, empty, bad

    tool, ok, empty, bad = anyio.run(go)
    assert tool.input_schema["required"] == ["question"]
    assert ok["route"]["intent"] == "entity" and ok["route"]["params"]["keywords"] == "Wittgenstein"
    assert ok["hits"][0]["doc_id"] == "witt.txt"
    # the routed query runs as it is through nlql_search: an agent can refine it from here
    again = engine.search(ok["route"]["query"], params=ok["route"]["params"])
    assert [h.id for h in again] == [h["id"] for h in ok["hits"]]
    assert empty["hits"] == [] and any("holds nothing" in w for w in empty["warnings"])
    assert bad["hits"] == [] and bad["error"]["kind"] == "route" and "empty" in bad["error"]["message"]


def test_nlql_ask_over_stdio(store: Path) -> None:
    """`nlql mcp --store DIR` as a subprocess, driven by the SDK's stdio client."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "nlql", "mcp", "--store", str(store)],
                                   env=_env(), cwd=str(store.parent))

    async def go() -> tuple[set[str], Any, Any]:
        with anyio.fail_after(120):
            async with Client(params) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                asked = _structured(await client.call_tool("nlql_ask", {"question": "who talked about tools?"}))
                refined = _structured(await client.call_tool("nlql_search", {
                    "query": asked["route"]["query"].replace("LIMIT 10", "LIMIT 1"),
                    "params": asked["route"]["params"]}))
                return names, asked, refined

    names, asked, refined = anyio.run(go)
    assert {"nlql_ask", "nlql_search", "nlql_check", "nlql_explain"} <= names
    assert asked["route"]["intent"] == "entity"
    assert asked["hits"][0]["content"].startswith("Agents call tools to act in the world.")
    assert [h["id"] for h in refined["hits"]] == [asked["hits"][0]["id"]]
