"""The MCP server: a round trip through the SDK's own client, in process and over stdio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.types import TextResourceContents  # noqa: E402

from nlql.agent import LANGUAGE_REFERENCE, build_mcp_server  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.engine import Engine  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOOLS = {"nlql_check", "nlql_explain", "nlql_search"}


@pytest.fixture
def server() -> Any:
    engine = Engine(embedder=HashEmbedder(dim=64))
    engine.add_text("Agents call tools to act. Cats sleep all day.", id="a", metadata={"lang": "en"})
    engine.add_text("Tax rules change every year.", id="b", metadata={"lang": "en", "year": 2024})
    return build_mcp_server(engine)


def _structured(result: Any) -> Any:
    """The tool's return value: structured content (a list comes wrapped as {"result": [...]})."""
    assert not result.is_error, result
    data = result.structured_content
    if data is None:  # servers that only send text content
        data = json.loads(result.content[0].text) if result.content else []
    if isinstance(data, dict) and set(data) == {"result"}:
        return data["result"]
    return data


def _run(fn: Any) -> Any:
    return anyio.run(fn)


def test_lists_the_three_tools_and_the_language_resource(server: Any) -> None:
    async def go() -> tuple[set[str], list[str], dict[str, Any]]:
        async with Client(server) as client:
            tools = (await client.list_tools()).tools
            resources = (await client.list_resources()).resources
            search = next(t for t in tools if t.name == "nlql_search")
            return {t.name for t in tools}, [str(r.uri) for r in resources], search.input_schema

    names, uris, schema = _run(go)
    assert TOOLS <= names
    assert "nlql://language" in uris
    assert schema["required"] == ["query"]
    assert {"query", "params", "max_tokens"} <= set(schema["properties"])


def test_check_returns_diagnostics_for_a_bad_query_and_nothing_for_a_good_one(server: Any) -> None:
    async def go() -> tuple[Any, Any]:
        async with Client(server) as client:
            bad = await client.call_tool("nlql_check", {"query": "SELECT SENTENCE\nWHERE rell >= 0.3"})
            good = await client.call_tool("nlql_check", {"query": 'SELECT SENTENCE WHERE meta.lang == "en"'})
            return _structured(bad), _structured(good)

    bad, good = _run(go)
    assert good == []
    assert len(bad) == 1
    d = bad[0]
    assert (d["line"], d["column"]) == (2, 7)
    assert d["message"] == "unknown name 'rell'"
    assert "meta.rell" in d["hint"]
    assert "^^^^" in d["rendered"]


def test_check_reports_syntax_errors_and_plan_errors_as_data(server: Any) -> None:
    async def go() -> tuple[Any, Any]:
        async with Client(server) as client:
            syntax = await client.call_tool("nlql_check", {"query": "SELECT SENTENCE WHERE"})
            period = await client.call_tool("nlql_check",
                                            {"query": 'SELECT SENTENCE WHERE meta.d WITHIN "blorp"'})
            return _structured(syntax), _structured(period)

    syntax, period = _run(go)
    assert syntax and syntax[0]["line"] == 1 and syntax[0]["column"] == 22
    assert period and "blorp" in period[0]["message"]


def test_search_returns_hits_and_errors_come_back_as_data(server: Any) -> None:
    async def go() -> tuple[Any, Any, Any]:
        async with Client(server) as client:
            ok = await client.call_tool("nlql_search", {
                "query": "SELECT SENTENCE LET rel = SIMILARITY(content, $q) WHERE content CONTAINS 'tool' LIMIT 3",
                "params": {"q": "agents and tools"}})
            bad = await client.call_tool("nlql_search", {"query": "SELECT SENTENCE WHERE topic == 1"})
            budget = await client.call_tool("nlql_search", {"query": "SELECT DOCUMENT", "max_tokens": 3})
            return _structured(ok), _structured(bad), _structured(budget)

    ok, bad, budget = _run(go)
    assert [h["content"] for h in ok["hits"]] == ["Agents call tools to act."]
    assert ok["hits"][0]["doc_id"] == "a" and "rel" in ok["hits"][0]["scores"]
    assert bad["hits"] == []
    assert bad["error"]["message"] == "unknown name 'topic'"
    assert (bad["error"]["line"], bad["error"]["column"]) == (1, 23)
    assert "meta.topic" in bad["error"]["hint"]
    assert "^" in bad["error"]["rendered"]
    assert len(budget["hits"]) == 1 and budget["warnings"]


def test_explain_returns_text_and_plan(server: Any) -> None:
    async def go() -> tuple[Any, Any]:
        async with Client(server) as client:
            q = 'SELECT SENTENCE LET rel = SIMILARITY(content, "x") WHERE meta.lang == "en" LIMIT 2'
            ok = await client.call_tool("nlql_explain", {"query": q, "include_plan": True})
            plain = await client.call_tool("nlql_explain", {"query": q})
            bad = await client.call_tool("nlql_explain", {"query": "SELECT SENTENCE LIMIT -1"})
            return _structured(ok), plain, _structured(bad)

    ok, plain, bad = _run(go)
    # by default the readable plan only, as text content and in the structured result
    assert "plan" not in plain.structured_content and "recall: knn" in plain.content[0].text
    assert ok["ok"] is True
    assert "recall: knn" in ok["text"]
    assert ok["plan"]["limit"] == 2 and ok["plan"]["pushed_filter"]
    assert bad["ok"] is False and "negative" in bad["error"]["message"]


def test_language_resource_is_the_reference(server: Any) -> None:
    async def go() -> str:
        async with Client(server) as client:
            res = await client.read_resource("nlql://language")
            content = res.contents[0]
            assert isinstance(content, TextResourceContents)
            return content.text

    text = _run(go)
    assert text == LANGUAGE_REFERENCE
    assert "SELECT" in text and "NULL" in text


def _ingest(docs: Path, store: Path) -> None:
    """``nlql ingest DOCS --store STORE --embedder hash -q``, in process: the store is the tests' set-up."""
    from cli_inprocess import nlql

    r = nlql("ingest", str(docs), "--store", str(store), "--embedder", "hash", "-q", cwd=docs.parent)
    assert r.returncode == 0, r.stderr


def test_nlql_mcp_serves_a_store_over_stdio(tmp_path: Path) -> None:
    """`nlql mcp --store DIR` as a subprocess: the SDK's stdio client lists tools and searches."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Agents call tools to act in the world. Cats sleep.", encoding="utf-8")
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1"}
    _ingest(docs, store)
    params = StdioServerParameters(command=sys.executable, args=["-m", "nlql", "mcp", "--store", str(store)],
                                   env=env, cwd=str(tmp_path))

    async def go() -> tuple[set[str], Any]:
        with anyio.fail_after(120):
            async with Client(params) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                res = await client.call_tool("nlql_search", {
                    "query": 'SELECT SENTENCE LET rel = SIMILARITY(content, "tools") LIMIT 1'})
                return names, _structured(res)

    names, res = _run(go)
    assert TOOLS <= names
    assert res["hits"][0]["content"] == "Agents call tools to act in the world."


def test_nlql_mcp_answers_initialize_before_it_opens_the_store(tmp_path: Path) -> None:
    """Raw JSON-RPC over the pipes of `nlql mcp`: the initialize reply comes before the store is opened
    (the server says on stderr when it opens it: nothing there yet), and the first tool call opens it."""
    import select

    from mcp.types import LATEST_PROTOCOL_VERSION

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Agents call tools to act in the world. Cats sleep.", encoding="utf-8")
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1"}
    _ingest(docs, store)
    proc = subprocess.Popen([sys.executable, "-m", "nlql", "mcp", "--store", str(store)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

    def send(message: dict[str, Any]) -> None:
        proc.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]

    def reply(want: int) -> dict[str, Any]:
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], 120)
            assert ready, "no reply within 120 s"
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, proc.stderr.read().decode()  # type: ignore[union-attr]
            message = json.loads(line)
            if message.get("id") == want:
                return message

    def stderr_so_far() -> str:
        out = b""
        while select.select([proc.stderr], [], [], 0)[0]:
            chunk = os.read(proc.stderr.fileno(), 65536)  # type: ignore[union-attr]
            if not chunk:
                break
            out += chunk
        return out.decode()

    try:
        send({"id": 1, "method": "initialize", "params": {
            "protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}})
        init = reply(1)
        assert init["result"]["serverInfo"]["name"] == "nlql"
        before = stderr_so_far()
        assert "opened" not in before, before  # answered without reading the store
        send({"method": "notifications/initialized"})
        send({"id": 2, "method": "tools/call", "params": {"name": "nlql_search", "arguments": {
            "query": 'SELECT SENTENCE LET rel = SIMILARITY(content, "tools") LIMIT 1'}}})
        res = reply(2)["result"]
        assert not res.get("isError"), res
        assert res["structuredContent"]["hits"][0]["content"] == "Agents call tools to act in the world."
        proc.stdin.close()
        proc.wait(timeout=60)
        assert f"opened {store}" in before + proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
