"""`nlql serve`: the HTTP API through a real HTTP client (httpx) against uvicorn on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from nlql.data import load_demo  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.engine import Engine  # noqa: E402
from nlql.serve import BackgroundServer, ServeConfig, ServeConfigError, create_app, features  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "s3cret-token-for-tests"
SLEEP_TEXT = "__sleep__"
HYBRID = ('SELECT SENTENCE LET sem = SIMILARITY(content, "create a temporary directory"), '
          'kw = BM25(content, "temporary directory"), score = RRF(sem, kw) ORDER BY score DESC LIMIT 5')


class SleepyEmbedder:
    """HashEmbedder, except that embedding the text ``__sleep__`` takes ``delay`` seconds (a slow model)."""

    def __init__(self, delay: float) -> None:
        self.inner = HashEmbedder(dim=64)
        self.dim = self.inner.dim
        self.delay = delay

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if SLEEP_TEXT in texts:
            time.sleep(self.delay)
        return self.inner.embed(texts)


@pytest.fixture(scope="module")
def engine() -> Engine:
    e = Engine(embedder=SleepyEmbedder(delay=3.0), warm_up=False)
    docs = load_demo()
    e.add_texts([d["text"] for d in docs], ids=[d["id"] for d in docs], metadatas=[d["metadata"] for d in docs])
    return e


@pytest.fixture(scope="module")
def server(engine: Engine) -> Iterator[BackgroundServer]:
    with BackgroundServer(engine, ServeConfig(port=0, timeout=5.0, max_body_bytes=16_384,
                                              max_query_chars=2_000)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server: BackgroundServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def _error(r: httpx.Response, status: int, kind: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert err["kind"] == kind, err
    assert {"message", "line", "column", "hint", "rendered", "diagnostics"} <= set(err)
    return err


# ------------------------------------------------------------------------------------ endpoints


def test_health(client: httpx.Client, engine: Engine) -> None:
    r = client.get("/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["features"][:3] == ["search", "explain", "check"]
    assert body["sentences"] == len(engine) and body["auth"] is False


def test_search_returns_what_the_engine_returns(client: httpx.Client, engine: Engine) -> None:
    r = client.post("/search", json={"query": HYBRID})
    assert r.status_code == 200, r.text
    body = r.json()
    direct = engine.search(HYBRID)
    assert [h["id"] for h in body["hits"]] == [h.id for h in direct]
    assert [h["scores"]["score"] for h in body["hits"]] == pytest.approx([h.scores["score"] for h in direct])
    assert "timings_ms" in body["stats"] and body["warnings"] == []


def test_search_with_params_and_max_tokens(client: httpx.Client) -> None:
    q = "SELECT SENTENCE LET rel = SIMILARITY(content, $q) WHERE meta.module == $m LIMIT 3"
    r = client.post("/search", json={"query": q, "params": {"q": "encode", "m": "json"}, "max_tokens": 20})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert hits and all(h["metadata"]["module"] == "json" for h in hits)
    _error(client.post("/search", json={"query": q, "params": ["q"]}), 400, "request")
    _error(client.post("/search", json={"query": q, "params": {"q": "x", "m": "y"}, "max_tokens": 0}), 400, "request")


def test_search_pages_with_a_cursor(client: httpx.Client, engine: Engine) -> None:
    q = "SELECT SENTENCE LET rel = SIMILARITY(content, $q) LIMIT 3"
    first = client.post("/search", json={"query": q, "params": {"q": "encode json"}}).json()
    assert isinstance(first["cursor"], str)
    second = client.post("/search", json={"query": q, "params": {"q": "encode json"}, "cursor": first["cursor"]})
    assert second.status_code == 200, second.text
    want = [h.id for h in engine.search(q.replace("LIMIT 3", "LIMIT 6"), {"q": "encode json"})]
    assert [h["id"] for h in first["hits"] + second.json()["hits"]] == want
    _error(client.post("/search", json={"query": q, "params": {"q": "x"}, "cursor": 3}), 400, "request")
    bad = client.post("/search", json={"query": q, "params": {"q": "x"}, "cursor": "nope"})
    assert bad.status_code == 400, bad.text


def test_explain_and_check(client: httpx.Client, engine: Engine) -> None:
    r = client.post("/explain", json={"query": HYBRID})
    assert r.status_code == 200
    assert r.json()["text"] == str(engine.explain(HYBRID))
    assert r.json()["plan"]["fusion"][0]["method"] == "RRF"
    ok = client.post("/check", json={"query": HYBRID}).json()
    assert ok == {"valid": True, "diagnostics": []}
    bad = client.post("/check", json={"query": "SELECT SENTENCE\nWHERE rell >= 0.3 AND meta.x = 1"}).json()
    assert bad["valid"] is False
    d = bad["diagnostics"][0]
    assert (d["line"], d["column"], d["message"]) == (2, 7, "unknown name 'rell'")
    assert (d["start"], d["end"]) == (22, 26)
    assert "  2 | WHERE rell >= 0.3" in d["rendered"] and "^^^^" in d["rendered"]
    # a warning only (a key no document has): the query runs, so it is valid, with the warning
    warned = client.post("/check", json={"query": "SELECT SENTENCE WHERE meta.no_such_key == 1 LIMIT 1"}).json()
    assert warned["valid"] is True, warned
    assert [d["severity"] for d in warned["diagnostics"]] == ["warning"]


def test_a_bad_query_is_a_json_diagnostic(client: httpx.Client) -> None:
    err = _error(client.post("/search", json={"query": "SELECT SENTENCE LET rel = SIMILARITY(content, 'x') LIMT 3"}),
                 400, "syntax")
    assert (err["line"], err["column"]) == (1, 52)
    assert err["hint"] == "did you mean LIMIT?"
    assert "^^^^" in err["rendered"] and err["diagnostics"][0]["start"] == 51
    err = _error(client.post("/explain", json={"query": "SELECT SENTENCE WHERE meta.d WITHIN 'the day after never'"}),
                 400, "plan")
    assert err["line"] == 1 and err["column"] > 0


def test_bad_json_and_bad_bodies(client: httpx.Client) -> None:
    json_header = {"Content-Type": "application/json"}
    err = _error(client.post("/search", content=b'{"query": "SELECT SENTENCE",', headers=json_header), 400, "request")
    assert "not valid JSON" in err["message"]
    _error(client.post("/search", content=b"\xff\xfe", headers=json_header), 400, "request")
    _error(client.post("/search", content=b"[1, 2]", headers=json_header), 400, "request")
    _error(client.post("/search", content=b"", headers=json_header), 400, "request")
    _error(client.post("/search", content=b"[" * 10_000, headers=json_header), 400, "request")
    _error(client.post("/search", content=b'{"query": "SELECT SENTENCE"}', headers={"Content-Type": "text/plain"}),
           415, "request")
    err = _error(client.post("/search", json={"qeury": "SELECT SENTENCE"}), 400, "request")
    assert err["hint"] == "did you mean 'query'?"
    _error(client.post("/search", json={"query": 42}), 400, "request")
    _error(client.post("/search", json={"query": "SELECT SENTENCE", "timeout": -1}), 400, "request")


def test_a_huge_body_is_refused(client: httpx.Client) -> None:
    huge = json.dumps({"query": "SELECT SENTENCE", "params": {"pad": "x" * 100_000}})
    err = _error(client.post("/search", content=huge, headers={"Content-Type": "application/json"}), 413, "request")
    assert "16,384 bytes" in err["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the server counts as it reads
        yield b'{"query": "SELECT SENTENCE", "pad": "'
        for _ in range(100):
            yield b"x" * 1024
        yield b'"}'

    _error(client.post("/search", content=chunks(), headers={"Content-Type": "application/json"}), 413, "request")
    assert client.get("/health").status_code == 200  # and the server is fine


def test_a_long_query_is_refused(client: httpx.Client) -> None:
    query = "SELECT SENTENCE WHERE " + " OR ".join(f'content CONTAINS "w{i}"' for i in range(200))
    assert len(query) > 2_000
    err = _error(client.post("/check", json={"query": query}), 400, "limit")
    assert "2,000" in err["message"]


def test_too_many_rows_is_an_error_not_a_silent_cut(engine: Engine) -> None:
    with BackgroundServer(engine, ServeConfig(port=0, max_rows=100)) as s:
        r = httpx.post(s.url + "/search", json={"query": "SELECT SENTENCE"}, timeout=30)
        err = _error(r, 400, "limit")
        assert f"{len(engine):,} rows" in err["message"] and "LIMIT" in err["hint"]
        r = httpx.post(s.url + "/search", json={"query": "SELECT SENTENCE LIMIT 100 OFFSET 100"}, timeout=30)
        assert r.status_code == 200 and len(r.json()["hits"]) == 100


def test_unknown_routes_and_methods_are_json(client: httpx.Client) -> None:
    _error(client.get("/nope"), 404, "request")
    _error(client.get("/search"), 405, "request")


def test_a_foreign_host_header_is_refused(client: httpx.Client) -> None:
    # a page on another site that rebinds its name to 127.0.0.1 still sends its own Host header
    err = _error(client.get("/health", headers={"Host": "attacker.example"}), 400, "request")
    assert "Host" in err["message"]


def test_a_proxied_name_can_be_allowed(engine: Engine) -> None:
    with BackgroundServer(engine, ServeConfig(port=0, allowed_hosts=("search.example.org", "127.0.0.1"))) as s:
        assert httpx.get(s.url + "/health", headers={"Host": "search.example.org"}).status_code == 200
        assert httpx.get(s.url + "/health").status_code == 200
        assert httpx.get(s.url + "/health", headers={"Host": "other.example"}).status_code == 400
    with BackgroundServer(engine, ServeConfig(port=0, allowed_hosts=("*",))) as s:
        assert httpx.get(s.url + "/health", headers={"Host": "anything.example"}).status_code == 200


def test_openapi_describes_exactly_the_served_routes(client: httpx.Client, server: BackgroundServer,
                                                     engine: Engine) -> None:
    doc = client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.1") and doc["info"]["title"] == "NLQL"
    served = {"/search", "/explain", "/check", "/health", "/documents", "/documents/{doc_id}"} | {
        f"/{f}" for f in features(engine)[3:]}
    assert set(doc["paths"]) == served
    for path in served:
        method = next(iter(doc["paths"][path]))
        r = client.request(method.upper(), path.replace("{doc_id}", "x"),
                           **({"json": {}} if method in ("post", "put") else {}))
        assert r.status_code != 404, path


def test_ask_and_schema_exist_exactly_when_the_engine_has_them(client: httpx.Client, engine: Engine) -> None:
    has_ask, has_schema = callable(getattr(engine, "ask", None)), callable(getattr(engine, "schema", None))
    r = client.post("/ask", json={"question": "how do I make a temporary directory?"})
    if has_ask:
        assert r.status_code == 200, r.text
        assert r.json()["hits"] and "route" in r.json()
    else:
        assert r.status_code == 404
    r = client.get("/schema")
    assert (r.status_code == 200) if has_schema else (r.status_code == 404)


# ----------------------------------------------------------------------------------- deadline


def test_a_slow_request_times_out_without_blocking_others(client: httpx.Client, server: BackgroundServer) -> None:
    slow_query = f'SELECT SENTENCE LET rel = SIMILARITY(content, "{SLEEP_TEXT}") LIMIT 3'
    result: dict[str, object] = {}

    def slow() -> None:
        start = time.perf_counter()
        with httpx.Client(base_url=server.url, timeout=30) as c:
            result["response"] = c.post("/search", json={"query": slow_query, "timeout": 0.5})
        result["seconds"] = time.perf_counter() - start

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.1)
    start = time.perf_counter()
    fast = client.post("/search", json={"query": HYBRID})  # while the slow one waits on the embedder
    fast_seconds = time.perf_counter() - start
    t.join()
    assert fast.status_code == 200 and fast_seconds < 2.0
    err = _error(result["response"], 504, "timeout")  # type: ignore[arg-type]
    assert "time" in err["message"]
    assert result["seconds"] < 2.5  # 0.5 s deadline + grace, not the embedder's 3 s


def test_the_server_deadline_caps_what_a_request_asks_for(engine: Engine) -> None:
    with BackgroundServer(engine, ServeConfig(port=0, timeout=0.3)) as s:
        start = time.perf_counter()
        r = httpx.post(s.url + "/search", timeout=30, json={
            "query": f'SELECT SENTENCE LET rel = SIMILARITY(content, "{SLEEP_TEXT}") LIMIT 3', "timeout": 60})
        assert time.perf_counter() - start < 2.5
    _error(r, 504, "timeout")


# -------------------------------------------------------------------------------- concurrency


def test_50_concurrent_searches_all_succeed(server: BackgroundServer, engine: Engine) -> None:
    words = ["json", "directory", "thread", "random", "file", "socket", "time", "math", "path", "list"]
    queries = [f'SELECT SENTENCE LET rel = SIMILARITY(content, "{words[i % 10]} {i}"), kw = BM25(content, '
               f'"{words[i % 10]}"), s = RRF(rel, kw) ORDER BY s DESC LIMIT 5' for i in range(50)]

    async def main() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as c:
            return await asyncio.gather(*(c.post("/search", json={"query": q}) for q in queries))

    responses = asyncio.run(main())
    assert [r.status_code for r in responses] == [200] * 50
    for q, r in zip(queries, responses):
        assert [h["id"] for h in r.json()["hits"]] == [h.id for h in engine.search(q)]


def test_requests_wait_on_the_embedder_in_parallel(engine: Engine) -> None:
    """16 searches whose query embedding takes 0.4 s each finish in about 0.4 s, not 6.4 s."""
    sleepy: SleepyEmbedder = engine.embedder  # type: ignore[assignment]
    old = sleepy.delay
    sleepy.delay = 0.4
    try:
        with BackgroundServer(engine, ServeConfig(port=0, workers=16)) as s:
            q = f'SELECT SENTENCE LET rel = SIMILARITY(content, "{SLEEP_TEXT}") LIMIT 2'

            async def main() -> list[httpx.Response]:
                async with httpx.AsyncClient(base_url=s.url, timeout=60) as c:
                    return await asyncio.gather(*(c.post("/search", json={"query": q}) for _ in range(16)))

            start = time.perf_counter()
            responses = asyncio.run(main())
            elapsed = time.perf_counter() - start
    finally:
        sleepy.delay = old
    assert all(r.status_code == 200 for r in responses)
    assert elapsed < 3.2, f"16 searches took {elapsed:.1f} s: they waited on each other"


# -------------------------------------------------------------------------------------- tokens


def test_a_token_is_required_and_checked(engine: Engine) -> None:
    with BackgroundServer(engine, ServeConfig(port=0, token=TOKEN)) as s, \
            httpx.Client(base_url=s.url, timeout=30) as c:
        body = {"query": "SELECT SENTENCE LIMIT 1"}
        err = _error(c.post("/search", json=body), 401, "auth")
        assert "bearer token" in err["message"]
        r = c.post("/search", json=body, headers={"Authorization": "Bearer wrong-token-123"})
        assert _error(r, 401, "auth")["message"] == "wrong bearer token"
        assert r.headers["www-authenticate"].startswith("Bearer")
        _error(c.post("/search", json=body, headers={"Authorization": f"Basic {TOKEN}"}), 401, "auth")
        assert c.post("/search", json=body, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        open_health = c.get("/health").json()
        assert open_health["auth"] is True and "sentences" not in open_health
        assert "sentences" in c.get("/health", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        assert c.get("/").status_code == 200  # the page itself holds no data


def test_binding_beyond_loopback_needs_a_token(engine: Engine) -> None:
    for host in ("0.0.0.0", "::", "192.168.1.20", "example.org"):
        with pytest.raises(ServeConfigError, match="without a token"):
            create_app(engine, ServeConfig(host=host))
    create_app(engine, ServeConfig(host="0.0.0.0", token=TOKEN))  # fine with one
    create_app(engine, ServeConfig(host="localhost"))
    with pytest.raises(ServeConfigError):
        ServeConfig(token="short").validate()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NLQL_TOKEN", "NLQL_DEBUG")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["HF_HUB_OFFLINE"] = "1"
    return env


def test_cli_refuses_a_public_bind_without_a_token() -> None:
    r = subprocess.run([sys.executable, "-m", "nlql", "serve", "--demo", "--embedder", "hash", "--host", "0.0.0.0",
                        "--port", str(_free_port())], env=_cli_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "refusing to serve on 0.0.0.0 without a token" in r.stderr


def test_cli_serves_the_demo_in_a_subprocess(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "nlql", "serve", "--demo", "--embedder", "hash", "--port",
                             str(port), "--log-level", "warning"], env=_cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
        assert httpx.get(url + "/health").json()["sentences"] > 1000
        page = httpx.get(url + "/")
        assert page.status_code == 200 and "NLQL playground" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        for asset in ("/static/playground.js", "/static/playground.css"):
            assert httpx.get(url + asset).status_code == 200
        r = httpx.post(url + "/search", json={"query": HYBRID})
        assert r.status_code == 200 and len(r.json()["hits"]) == 5
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_benchmark_runs_and_writes_its_shape(tmp_path: Path) -> None:
    """bench/serve.py end to end on a tiny budget: shapes only, never timings."""
    out = tmp_path / "serve.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "serve.py"), "--clients", "1", "3", "--seconds", "0.5",
                        "--warmup", "0.2", "--attack", "40", "--rounds", "2", "--attack-lead", "0", "--out", str(out)], env=_cli_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert [run["clients"] for run in data["runs"]] == [1, 3]
    assert [run["clients"] for run in data["under_attack"]] == [1, 3]
    for run in data["runs"] + data["under_attack"]:
        assert run["errors"] == 0 and run["requests"] > 0 and run["p50_ms"] <= run["p95_ms"] <= run["p99_ms"]
    assert all(run["slow_connections"] == 40 for run in data["under_attack"])
    for run in data["under_attack"]:  # the rounds' samples pooled, each round's ratio beside them
        assert run["rounds"] == 2 and len(run["p99_vs_normal_each_round"]) == 2
        low, high = run["p99_vs_normal_ci95"]
        assert low <= high and run["slow_lines_per_s"] >= 0
    assert "hash" in data["embedder"] and "loadavg_at_start" in data["machine"]
