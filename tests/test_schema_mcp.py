"""The MCP tools over stdio (`nlql mcp --store DIR` as a subprocess, the SDK's own client): text content
on every tool, the schema tool and resource, tool errors naming a bad argument, the server version, and a
scripted agent that fixes a syntax error and a wrong key from the tools' text alone (issue 18)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

import nlql  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOCS = [
    {"id": "intro", "text": "Agents call tools to act. Tools return text.", "metadata": {"section": 1, "year": 2023}},
    {"id": "rules", "text": "Tax rules change every year. Filing is due in April.",
     "metadata": {"section": 8, "year": 2024}},
    {"id": "cats", "text": "Cats sleep all day.", "metadata": {"section": 3, "year": 2024, "lang": "en"}},
]


@pytest.fixture(scope="module")
def stdio(tmp_path_factory: pytest.TempPathFactory) -> StdioServerParameters:
    tmp = tmp_path_factory.mktemp("mcp")
    data = tmp / "docs.jsonl"
    data.write_text("\n".join(json.dumps(d) for d in DOCS) + "\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1"}
    store = tmp / "store"
    from cli_inprocess import nlql  # the store is set-up, not what is tested: ingest in process

    r = nlql("ingest", str(data), "--store", str(store), "--embedder", "hash", "-q", cwd=tmp)
    assert r.returncode == 0, r.stderr
    return StdioServerParameters(command=sys.executable, args=["-m", "nlql", "mcp", "--store", str(store)],
                                 env=env, cwd=str(tmp))


def _text(result: Any) -> str:
    assert result.content and result.content[0].type == "text"
    return "\n".join(c.text for c in result.content)


def _session(stdio: StdioServerParameters, body: Any) -> Any:
    async def go() -> Any:
        with anyio.fail_after(120):
            async with Client(stdio) as client:
                return await body(client)

    return anyio.run(go)


def test_every_tool_answers_in_text_and_the_server_has_a_version(stdio: StdioServerParameters) -> None:
    async def body(client: Client) -> Any:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        out = {"version": client.server_info.version if client.server_info else None, "tools": tools}
        out["schema"] = await client.call_tool("nlql_schema", {})
        out["valid"] = await client.call_tool("nlql_check", {"query": "SELECT SENTENCE WHERE meta.year > 2023"})
        out["explain"] = await client.call_tool("nlql_explain", {"query": "SELECT SENTENCE LIMIT 2"})
        out["search"] = await client.call_tool("nlql_search", {"query": "SELECT DOCUMENT WHERE meta.lang == 'en'"})
        out["resource"] = await client.read_resource("nlql://schema")
        return out

    got = _session(stdio, body)
    assert got["version"] == nlql.__version__
    assert {"nlql_schema", "nlql_check", "nlql_explain", "nlql_search"} <= set(got["tools"])
    assert "nlql_schema" in (got["tools"]["nlql_search"].description or "")
    schema = _text(got["schema"])
    assert "3 documents, 5 sentences" in schema and "meta.section: number; 3 documents" in schema
    assert got["schema"].structured_content["documents"] == 3
    assert _text(got["valid"]) == "valid"
    assert "limit: 2" in _text(got["explain"]) and "plan" not in got["explain"].structured_content
    assert "cats#" in _text(got["search"]) or "cats" in _text(got["search"])
    assert "Cats sleep all day." in _text(got["search"])
    assert "meta.lang" in got["resource"].contents[0].text


@pytest.mark.parametrize(("tool", "args", "name"), [
    ("nlql_search", {"query": "SELECT SENTENCE", "max_tokens": 0}, "max_tokens"),
    ("nlql_search", {"query": "SELECT SENTENCE", "params": "q=1"}, "params"),
    ("nlql_check", {"query": 42}, "query"),
    ("nlql_schema", {"sample": 0}, "sample"),
    ("nlql_explain", {"query": "SELECT SENTENCE", "include_plan": [1]}, "include_plan"),
])
def test_a_bad_argument_is_a_tool_error_naming_it(stdio: StdioServerParameters, tool: str, args: dict[str, Any],
                                                  name: str) -> None:
    async def body(client: Client) -> Any:
        return await client.call_tool(tool, args)

    res = _session(stdio, body)
    assert res.is_error
    assert name in _text(res)


def test_an_agent_reaches_the_right_rows_from_the_tools_text_alone(stdio: StdioServerParameters) -> None:
    """A scripted agent: it reads only text content and applies the hints it is given, nothing else."""
    transcript: list[tuple[str, str, str]] = []

    async def body(client: Client) -> str:
        schema = _text(await client.call_tool("nlql_schema", {}))
        transcript.append(("nlql_schema", "", schema))
        query = "SELECT SENTENCE WHERE meta.sectoin == 8 ORDER BY position LIMT 5"
        for _ in range(5):
            said = _text(await client.call_tool("nlql_check", {"query": query}))
            transcript.append(("nlql_check", query, said))
            if said == "valid":
                break
            word = re.search(r"unknown word '([^']+)'.*?did you mean (\w+)\?", said, re.S)
            key = re.search(r"no document has metadata key (meta\.\S+).*?did you mean (meta\.\w+)\?", said, re.S)
            if word:
                query = query.replace(word.group(1), word.group(2))
            elif key:
                query = query.replace(key.group(1), key.group(2))
            else:
                raise AssertionError(f"the agent cannot act on: {said}")
        hits = _text(await client.call_tool("nlql_search", {"query": query}))
        transcript.append(("nlql_search", query, hits))
        return query

    final = _session(stdio, body)
    assert final == "SELECT SENTENCE WHERE meta.section == 8 ORDER BY position LIMIT 5"
    steps = [t for t, _, _ in transcript]
    assert steps == ["nlql_schema", "nlql_check", "nlql_check", "nlql_check", "nlql_search"]
    assert "did you mean LIMIT?" in transcript[1][2] and "^^^^" in transcript[1][2]
    assert "did you mean meta.section?" in transcript[2][2] and transcript[2][2].startswith("valid, with 1 warning")
    hits = transcript[-1][2]
    assert "Tax rules change every year." in hits and "Filing is due in April." in hits
    assert "Agents" not in hits and "Cats" not in hits and "warning" not in hits
    if os.environ.get("NLQL_PRINT_TRANSCRIPT"):  # what docs/agents.md shows
        for tool, q, said in transcript:
            print(f"--> {tool} {q}\n{said}\n")
