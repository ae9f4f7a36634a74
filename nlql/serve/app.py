"""The HTTP JSON API over one engine (Starlette), and the playground it serves at ``/``.

Every engine call runs in a bounded thread pool, so the event loop never waits on the embedder or the
store and many requests run at once (searches share the engine's read lock). Every error is JSON:
``{"error": {"kind", "message", "line", "column", "hint", "rendered", "diagnostics"}}``, the same shape
as the MCP tools' errors (:func:`nlql.agent.error_dict`).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import itertools
import json
import math
import secrets
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlql import __version__
from nlql.errors import MissingDependencyError, NLQLError

try:
    import anyio
    import anyio.to_thread
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.requests import Request
    from starlette.responses import FileResponse, JSONResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles
except ImportError:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("serve", "starlette") from None

if TYPE_CHECKING:
    from nlql.engine import Engine

__all__ = ["STATIC_DIR", "ServeConfig", "ServeConfigError", "create_app", "features", "is_loopback"]

#: The playground's files (plain HTML, CSS and JavaScript, shipped inside the package).
STATIC_DIR = Path(__file__).resolve().parent / "static"
#: Extra seconds the server waits past a search's own deadline before it answers 504 itself.
DEADLINE_GRACE = 0.5
#: HTTP status for each :class:`~nlql.errors.NLQLError` kind (anything else: 400).
STATUS = {"timeout": 504, "backend": 502, "dependency": 501}
#: The shortest deadline a request may ask for (seconds): shorter ones are refused (400), not run to a 504.
MIN_TIMEOUT = 0.05
#: A ``timeout`` above this many seconds is the server's own deadline (JSON allows integers of any size).
_HUGE_SECONDS = 1e9
_SERVERS = itertools.count(1)
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


class ServeConfigError(ValueError):
    """The server cannot start as configured (e.g. a public bind address without a token)."""


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach: ``127.0.0.0/8``, ``::1`` and ``localhost``.

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("::1"), is_loopback("0.0.0.0")
    (True, True, True, False)
    """
    name = host.strip().strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServeConfig:
    """How ``nlql serve`` runs. Every limit is per request.

    Attributes:
        host: Address to bind; ``127.0.0.1`` (only this machine) by default.
        port: TCP port (0: any free port).
        token: Bearer token every API request must send (``Authorization: Bearer …``). Required when
            ``host`` is not a loopback address; optional otherwise.
        max_body_bytes: Largest request body accepted (413 beyond).
        max_query_chars: Longest query (or question) accepted (400, kind ``limit``, beyond).
        timeout: Deadline of one request in seconds; a request may ask for less, never more (504 beyond).
        max_rows: Most hits one response carries: a search that matches more (a query without LIMIT on a
            big store) is refused (400, kind ``limit``) rather than cut short silently.
        workers: Threads that run engine calls, a bound that holds: a request that timed out keeps its
            thread until the engine's own deadline ends the call, and no thread is ever added.
        max_pending: Requests queued or running at once; one more is refused (503, kind ``overload``,
            with ``Retry-After``) rather than queued without end.
        max_response_bytes: Largest response body; a search whose hits are larger is refused (400, kind
            ``limit``) rather than built and sent.
        max_span_window: Largest ``SPAN(…, window => n)`` a query may ask for (400, kind ``limit``).
        header_timeout: Seconds a client has to send a request's headers (then 408 and the connection is
            closed): a connection that never finishes them cannot hold the server.
        body_timeout: Seconds a client has to send a request's body (408 beyond).
        max_connections: Connections held at once; one more closes the connection that has waited
            longest for its request (a slow client), or is refused (503) when every one is being served.
        cors_origins: Origins a browser page may call the API from (``"*"``: any); none by default.
        allowed_hosts: ``Host`` header names accepted (without port; ``"*"``: any); default: loopback
            names when bound to loopback (which stops DNS-rebinding pages from reading a local server),
            any host otherwise. Behind a reverse proxy that forwards its public name, list that name.
        playground: Serve the web playground at ``/``.
        processes: Worker processes serving one server store (``nlql serve --processes``,
            :mod:`nlql.serve.processes`); every other limit is per process. With more than one, each
            response names its worker in ``X-NLQL-Worker`` (a random id, not the pid), as ``/health`` does.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    max_body_bytes: int = 256 * 1024
    max_query_chars: int = 10_000
    timeout: float = 30.0
    max_rows: int = 10_000
    workers: int = 16
    max_pending: int = 1024
    max_response_bytes: int = 8 * 1024 * 1024
    max_span_window: int = 50
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 2048
    cors_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] | None = None
    playground: bool = True
    processes: int = 1

    def validate(self) -> ServeConfig:
        """Self, after checking the settings; raises :class:`ServeConfigError` when they are unsafe or wrong."""
        if not is_loopback(self.host) and not self.token:
            raise ServeConfigError(
                f"refusing to serve on {self.host} without a token: anyone who can reach it could read the "
                "store; pass --token (or set NLQL_TOKEN), or bind 127.0.0.1")
        if self.token is not None and (len(self.token) < 8 or any(c.isspace() for c in self.token)):
            raise ServeConfigError("the token must be at least 8 characters without spaces")
        for name in ("max_body_bytes", "max_query_chars", "max_rows", "workers", "max_pending",
                     "max_response_bytes", "max_span_window", "max_connections", "processes"):
            if int(getattr(self, name)) < 1:
                raise ServeConfigError(f"{name} must be at least 1")
        for name in ("timeout", "header_timeout", "body_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ServeConfigError(f"{name} must be a positive number of seconds")
        return self

    def hosts(self) -> set[str] | None:
        """The accepted ``Host`` names (without port), or None for any."""
        if self.allowed_hosts is not None:
            names = {h.strip().lower() for h in self.allowed_hosts}
            return None if "*" in names else names
        if is_loopback(self.host):
            return {"127.0.0.1", "localhost", "::1", "[::1]", self.host.lower()}
        return None


def features(engine: Any) -> list[str]:
    """The API endpoints this engine supports: always search, explain, check; ask and schema when the
    engine has those methods."""
    out = ["search", "explain", "check"]
    out += [name for name in ("ask", "schema") if callable(getattr(engine, name, None))]
    return out


# ------------------------------------------------------------------------------------------ errors


class RequestError(Exception):
    """A bad request that is not about the query text: bad JSON, too big, a missing field, auth."""

    def __init__(self, status: int, kind: str, message: str, hint: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.hint = hint
        self.headers = headers


def _error_body(kind: str, message: str, hint: str | None = None) -> dict[str, Any]:
    rendered = message + (f"\nhint: {hint}" if hint else "")
    return {"error": {"kind": kind, "message": message, "line": 0, "column": 0, "hint": hint,
                      "rendered": rendered, "diagnostics": []}}


def _request_error(exc: RequestError) -> JSONResponse:
    headers = dict(exc.headers or {})
    if exc.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="nlql"'
    return JSONResponse(_error_body(exc.kind, exc.message, exc.hint), status_code=exc.status, headers=headers)


def _nlql_error(exc: NLQLError, source: str | None) -> JSONResponse:
    from nlql.agent import error_dict

    return JSONResponse({"error": _jsonable(error_dict(exc, source))}, status_code=STATUS.get(exc.kind, 400))


async def _http_exception(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 500)
    detail = getattr(exc, "detail", "") or ""
    message = {404: f"no such endpoint: {request.method} {request.url.path}",
               405: f"{request.method} is not allowed on {request.url.path}"}.get(status, str(detail))
    headers = dict(getattr(exc, "headers", None) or {})  # 405 names the methods it allows (Allow)
    return JSONResponse(_error_body("request", message, "GET /openapi.json lists the endpoints"),
                        status_code=status, headers=headers or None)


async def _internal_error(request: Request, exc: Exception) -> Response:
    return JSONResponse(_error_body("internal", "internal server error",
                                    "the server log has the details"), status_code=500)


# ------------------------------------------------------------------------------------------ the app


class _Api:
    """The endpoints, bound to one engine and one configuration."""

    def __init__(self, engine: Engine, config: ServeConfig) -> None:
        self.engine = engine
        self.config = config
        # a fixed pool: the thread count never passes ``workers``, whatever times out (issue 33, item 5)
        self.thread_prefix = f"nlql-worker-{next(_SERVERS)}"  # its threads' names (tests count them)
        self.pool = ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix=self.thread_prefix)
        self._pending = 0  # engine calls queued or running in the pool
        self._pending_lock = threading.Lock()
        self.hosts = config.hosts()
        self.features = features(engine)
        self.writes = bool(config.token)  # write endpoints exist only behind a token
        # several worker processes (nlql serve --processes): this one's random name
        self.worker: str | None = secrets.token_hex(6) if config.processes > 1 else None

    # ---------------------------------------------------------------- request plumbing

    def _check_host(self, request: Request) -> None:
        if self.hosts is None:
            return
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        if name.lower() not in self.hosts:
            raise RequestError(400, "request", f"unexpected Host header {host!r}",
                               "this server answers only to " + ", ".join(sorted(self.hosts)))

    def authorized(self, request: Request) -> bool:
        token = self.config.token
        if not token:
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())

    def _check_auth(self, request: Request) -> None:
        if not self.authorized(request):
            wrong = "authorization" in request.headers
            raise RequestError(401, "auth", "wrong bearer token" if wrong else "this server needs a bearer token",
                               "send the header 'Authorization: Bearer <token>'")

    async def _body(self, request: Request) -> dict[str, Any]:
        limit = self.config.max_body_bytes
        too_big = RequestError(413, "request", f"the request body is larger than {limit:,} bytes",
                               "send a shorter query or fewer parameters")
        length = request.headers.get("content-length")
        if length is not None:
            try:
                if int(length) > limit:
                    raise too_big
            except ValueError:
                raise RequestError(400, "request", "the Content-Length header is not a number") from None
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            # also makes browsers send a CORS preflight, so another site's page cannot post here blind
            raise RequestError(415, "request", "the body must be JSON (Content-Type: application/json)")
        body = bytearray()
        try:
            with anyio.fail_after(self.config.body_timeout):
                async for chunk in request.stream():
                    body += chunk
                    if len(body) > limit:
                        raise too_big
        except TimeoutError:
            raise RequestError(408, "request", f"the request body did not arrive within "
                               f"{self.config.body_timeout:g} s", "send the whole body at once") from None
        if not body.strip():
            raise RequestError(400, "request", "the request body is empty", 'send a JSON object: {"query": "…"}')
        try:
            data = json.loads(body.decode("utf-8"))
        except json.JSONDecodeError as exc:
            raise RequestError(400, "request", f"the request body is not valid JSON: {exc.msg} at line "
                               f"{exc.lineno}, column {exc.colno}", 'send a JSON object: {"query": "…"}') from None
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise RequestError(400, "request", f"the request body is not valid JSON ({type(exc).__name__})") \
                from None
        if not isinstance(data, dict):
            raise RequestError(400, "request", f"the body must be a JSON object, not {type(data).__name__}",
                               'send a JSON object: {"query": "…"}')
        return data

    @staticmethod
    def _fields(data: Mapping[str, Any], allowed: set[str]) -> None:
        unknown = sorted(set(data) - allowed)
        if unknown:
            import difflib

            close = difflib.get_close_matches(unknown[0], sorted(allowed), n=1)
            raise RequestError(400, "request", f"unknown field {unknown[0]!r} in the request body",
                               f"did you mean {close[0]!r}?" if close else "fields: " + ", ".join(sorted(allowed)))

    def _text(self, data: Mapping[str, Any], name: str) -> str:
        value = data.get(name)
        if not isinstance(value, str):
            raise RequestError(400, "request", f"'{name}' is required and must be a string"
                               if value is None else f"'{name}' must be a string, not {type(value).__name__}")
        if len(value) > self.config.max_query_chars:
            raise RequestError(400, "limit", f"the {name} is {len(value):,} characters, over the limit of "
                               f"{self.config.max_query_chars:,}", "shorten it")
        return value

    @staticmethod
    def _params(data: Mapping[str, Any]) -> dict[str, Any] | None:
        params = data.get("params")
        if params is not None and not isinstance(params, dict):
            raise RequestError(400, "request", "'params' must be a JSON object of parameter values",
                               'e.g. "params": {"q": "AI agents"}')
        return params

    def _deadline(self, data: Mapping[str, Any]) -> float:
        asked = data.get("timeout")
        cap = float(self.config.timeout)
        if asked is None:
            return cap
        bad = RequestError(400, "request", "'timeout' must be a positive number of seconds",
                           f"e.g. \"timeout\": 5 (this server allows at most {cap:g})")
        if isinstance(asked, bool) or not isinstance(asked, (int, float)):
            raise bad
        if asked > _HUGE_SECONDS:  # (compared exactly: float() of a 400-digit integer would overflow)
            raise RequestError(400, "request", f"'timeout' is too large a number of seconds (at most {cap:g} "
                               "here)", f"e.g. \"timeout\": {cap:g}")
        if not math.isfinite(asked) or asked <= 0:
            raise bad
        if asked < MIN_TIMEOUT:
            raise RequestError(400, "request", f"'timeout' must be at least {MIN_TIMEOUT:g} s, not {asked:g}",
                               "a deadline shorter than a round trip only ever times out")
        return min(float(asked), cap)

    def _admit(self) -> None:
        with self._pending_lock:
            if self._pending >= self.config.max_pending:
                raise RequestError(503, "overload", f"the server is busy: {self._pending:,} requests are queued "
                                   f"or running (at most {self.config.max_pending:,})", "retry in a moment",
                                   headers={"Retry-After": "1"})
            self._pending += 1

    def _done(self, _: Any = None) -> None:
        with self._pending_lock:
            self._pending -= 1

    async def _run(self, fn: Callable[[float], Any], deadline: float) -> Any:
        """``fn(seconds left)`` in the worker pool. The deadline counts from now, queueing included: a
        call that starts late gets only what is left (a request still queued at it never starts). Past the deadline
        (plus grace) the request gets a 504 and the worker finishes at the engine's own deadline; it
        stays counted (``max_pending``) until it does."""
        self._admit()
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline

        def job() -> Any:
            # (at least a millisecond: a query's own mistakes are reported before its time is)
            return fn(max(end - loop.time(), 1e-3))

        try:
            future = self.pool.submit(job)
        except RuntimeError:  # the pool is shutting down
            self._done()
            raise RequestError(503, "overload", "the server is shutting down", "retry on another instance",
                               headers={"Retry-After": "1"}) from None
        future.add_done_callback(self._done)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), deadline + DEADLINE_GRACE)
        except asyncio.TimeoutError:
            future.cancel()  # (if it is still queued it never runs)
            raise TimeoutError from None

    def endpoint(self, handler: Callable[[Request], Awaitable[Response]], *, auth: bool = True) \
            -> Callable[[Request], Awaitable[Response]]:
        async def wrapped(request: Request) -> Response:
            source: str | None = None
            try:
                self._check_host(request)
                if auth:
                    self._check_auth(request)
                return await handler(request)
            except RequestError as exc:
                return _request_error(exc)
            except TimeoutError:
                return JSONResponse(_error_body("timeout", "the request ran out of time",
                                                "narrow the query or ask for a longer 'timeout'"), status_code=504)
            except NLQLError as exc:
                source = request.scope.get("nlql.source")
                return _nlql_error(exc, source)
        return wrapped

    # ---------------------------------------------------------------- endpoints

    async def search(self, request: Request) -> Response:
        data = await self._body(request)
        self._fields(data, {"query", "params", "timeout", "max_tokens", "cursor"})
        query = self._text(data, "query")
        cursor = data.get("cursor")
        if cursor is not None and (not isinstance(cursor, str) or len(cursor) > self.config.max_query_chars):
            raise RequestError(400, "request", "'cursor' must be the string a previous page returned",
                               'send back "cursor" from the last answer of the same query')
        request.scope["nlql.source"] = query
        max_tokens = data.get("max_tokens")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or max_tokens < 1):
            raise RequestError(400, "request", "'max_tokens' must be a positive integer")
        deadline = self._deadline(data)
        params = self._params(data)
        self._check_window(query, params)
        hits = await self._run(lambda left: self._search_page(query, params, left, max_tokens, cursor), deadline)
        self._check_rows(len(hits))
        return self._hits_response(hits, {"cursor": hits.cursor})

    def _search_page(self, query: str, params: Any, left: float, max_tokens: int | None, cursor: str | None) -> Any:
        """One page (SPEC §11: ``cursor`` continues an earlier page of the same query); the next page's
        cursor is read here, in the worker, as it may ask the store."""
        kw = {"cursor": cursor} if cursor is not None else {}
        hits = self.engine.search(query, params=params, timeout=left, max_tokens=max_tokens, **kw)
        _ = hits.cursor
        return hits

    def _check_window(self, query: str, params: Mapping[str, Any] | None) -> None:
        """Refuse ``SPAN(…, window => n)`` beyond ``max_span_window`` before anything runs: one span of a
        million sentences each side is a whole corpus per row (issue 33, item 4)."""
        if "SPAN" not in query.upper():
            return
        from nlql import ir
        from nlql.parser import parse

        try:
            q = parse(query)
        except NLQLError:
            return  # the engine reports it, with its position
        window = q.unit.window if isinstance(q.unit, ir.Unit) else None
        if window is None:
            return
        value: Any = window.value if isinstance(window, ir.Literal) else (
            (params or {}).get(window.name) if isinstance(window, ir.Param) else None)
        limit = self.config.max_span_window
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > limit:
            from nlql.errors import LimitError

            raise LimitError(f"SPAN window {_short_number(value)} is larger than this server allows ({limit})",
                             window.span, hint=f"ask for window => {limit} or less (nlql serve "
                                               "--max-span-window)")

    def _hits_response(self, hits: Any, extra: dict[str, Any] | None = None) -> Response:
        """The hits as JSON, built hit by hit and refused once larger than ``max_response_bytes``."""
        limit = self.config.max_response_bytes
        data = hits.to_dict()
        rows = data.pop("hits")
        head = _dumps({**_jsonable(data), **(extra or {})})
        parts: list[bytes] = []
        size = len(head) + 16
        for i, row in enumerate(rows):
            part = _dumps(row)
            size += len(part) + 1
            if size > limit:
                raise RequestError(400, "limit", f"the response would be larger than this server sends "
                                   f"({limit:,} bytes, --max-response-bytes): {i:,} of {len(rows):,} hits fit",
                                   "add LIMIT, ask for fewer or shorter rows (SENTENCE or CHUNK, a smaller "
                                   "SPAN window), or set max_tokens")
            parts.append(part)
        body = b'{"hits":[' + b",".join(parts) + b"]," + head[1:]
        return Response(body, media_type="application/json")

    def _check_rows(self, n: int) -> None:
        if n > self.config.max_rows:
            raise RequestError(400, "limit", f"the query matched {n:,} rows, more than this server sends in one "
                               f"response ({self.config.max_rows:,})",
                               f"add LIMIT (at most {self.config.max_rows:,}) and page with OFFSET")

    async def explain(self, request: Request) -> Response:
        data = await self._body(request)
        self._fields(data, {"query", "params", "timeout"})
        query = self._text(data, "query")
        request.scope["nlql.source"] = query
        deadline = self._deadline(data)
        params = self._params(data)
        plan = await self._run(lambda _: self.engine.explain(query, params=params), deadline)
        return JSONResponse({"text": str(plan), "plan": _jsonable(plan.to_dict())})

    async def check(self, request: Request) -> Response:
        from nlql.agent import check_query

        data = await self._body(request)
        self._fields(data, {"query", "params", "timeout"})
        query = self._text(data, "query")
        request.scope["nlql.source"] = query
        deadline = self._deadline(data)
        params = self._params(data)
        diags = await self._run(lambda _: check_query(self.engine, query, params), deadline)
        # valid: it can run; a warning (severity "warning", e.g. a key no document has) does not stop it
        valid = not any(d.get("severity", "error") == "error" for d in diags)
        return JSONResponse({"valid": valid, "diagnostics": diags})

    async def ask(self, request: Request) -> Response:
        data = await self._body(request)
        self._fields(data, {"question", "params", "timeout"})
        question = self._text(data, "question")
        deadline = self._deadline(data)
        params = self._params(data)
        hits = await self._run(lambda left: self.engine.ask(question, params=params,  # type: ignore[attr-defined]
                                                            timeout=left), deadline)
        self._check_rows(len(hits))
        route = getattr(hits, "route", None)
        return self._hits_response(hits, {"route": _jsonable(_as_dict(route))} if route is not None else None)

    async def schema(self, request: Request) -> Response:
        value = await self._run(lambda _: self.engine.schema(), self.config.timeout)  # type: ignore[attr-defined]
        return JSONResponse(_jsonable(_as_dict(value)))

    async def health(self, request: Request) -> Response:
        out: dict[str, Any] = {"status": "ok", "version": __version__, "features": self.features,
                               "auth": bool(self.config.token)}
        if self.worker is not None:
            out["worker"] = self.worker
        if self.authorized(request):
            out["store"] = self.engine.store.capabilities.NAME
            out["sentences"] = await self._run(lambda _: len(self.engine), self.config.timeout)
        return JSONResponse(out)

    async def openapi(self, request: Request) -> Response:
        from nlql.serve.openapi import openapi

        return JSONResponse(openapi(self.features, auth=bool(self.config.token), writes=self.writes,
                                    max_query_chars=self.config.max_query_chars))

    # ---------------------------------------------------------------- writes (behind a token)

    def _document(self, item: Any, where: str, id_required: bool = False) -> tuple[str | None, str, Any]:
        if not isinstance(item, dict):
            raise RequestError(400, "request", f"{where} must be a JSON object, not {type(item).__name__}",
                               '{"id": "a", "text": "…", "metadata": {…}}')
        self._fields(item, {"id", "text", "metadata"} if not id_required else {"text", "metadata"})
        text = item.get("text")
        if not isinstance(text, str):
            raise RequestError(400, "request", f"{where}: 'text' is required and must be a string")
        doc_id = item.get("id")
        if doc_id is not None and (not isinstance(doc_id, str) or not doc_id):
            raise RequestError(400, "request", f"{where}: 'id' must be a non-empty string")
        meta = item.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise RequestError(400, "request", f"{where}: 'metadata' must be a JSON object")
        return doc_id, text, meta

    async def _write(self, fn: Callable[[float], Any]) -> Any:
        try:
            return await self._run(fn, self.config.timeout)
        except (TypeError, ValueError) as exc:  # the engine's checks of texts, ids and metadata
            raise RequestError(400, "request", f"the documents were refused: {exc}",
                               "nothing was written") from None

    async def add_documents(self, request: Request) -> Response:
        data = await self._body(request)
        self._fields(data, {"documents"})
        docs = data.get("documents")
        if not isinstance(docs, list) or not docs:
            raise RequestError(400, "request", "'documents' is required: a non-empty list of documents",
                               '{"documents": [{"id": "a", "text": "…", "metadata": {…}}]}')
        items = [self._document(d, f"documents[{i}]") for i, d in enumerate(docs)]
        ids = await self._write(lambda _: self.engine.add_texts(
            [t for _, t, _ in items], ids=[i for i, _, _ in items], metadatas=[m for _, _, m in items]))
        return JSONResponse({"ids": list(ids)}, status_code=201)

    async def replace_document(self, request: Request) -> Response:
        doc_id = request.path_params["doc_id"]
        data = await self._body(request)
        _, text, meta = self._document(data, "the body", id_required=True)
        await self._write(lambda _: self.engine.add_text(text, id=doc_id, metadata=meta))
        return JSONResponse({"id": doc_id})

    async def delete_document(self, request: Request) -> Response:
        doc_id = request.path_params["doc_id"]
        existed = await self._write(lambda _: self.engine.delete(doc_id))
        if not existed:
            raise RequestError(404, "request", f"no document {doc_id!r}", "GET nothing: it is not there")
        return JSONResponse({"id": doc_id, "deleted": True})

    async def document(self, request: Request) -> Response:
        if request.method == "DELETE":
            return await self.delete_document(request)
        return await self.replace_document(request)

    async def no_writes(self, request: Request) -> Response:
        raise RequestError(403, "auth", "this server takes no writes: it has no token",
                           "start it with --token (or NLQL_TOKEN) to add, replace and delete documents")

    async def playground(self, request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html",
                            headers=_PAGE_HEADERS)


_PAGE_HEADERS = {
    # the playground loads only its own files and talks only to this server
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def _dumps(value: Any) -> bytes:
    """Compact JSON bytes of an engine value (datetimes as ISO text, NaN and infinities as null)."""
    from nlql.values import json_default

    text = json.dumps(value, default=json_default, ensure_ascii=False, separators=(",", ":"), allow_nan=True)
    if "NaN" in text or "Infinity" in text:  # (rare: an engine value should never be one)
        text = json.dumps(_jsonable(value), ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8")


def _short_number(value: Any) -> str:
    return f"{value:,}" if abs(value) < 10**15 else "a very large number"


def _jsonable(value: Any) -> Any:
    """A deep copy that JSON accepts: datetimes as ISO text, numpy scalars as numbers, NaN as null."""
    from nlql.values import json_default

    text = json.dumps(value, default=json_default, ensure_ascii=False)
    # NaN and infinities are not JSON; an engine value should never be one, but a response must parse
    return json.loads(text, parse_constant=lambda _: None)


def _as_dict(value: Any) -> Any:
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


class _WorkerHeader:
    """ASGI middleware: ``X-NLQL-Worker`` on every response."""

    def __init__(self, app: Any, worker: str) -> None:
        self.app, self.header = app, (b"x-nlql-worker", worker.encode())

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, sending)


def create_app(engine: Engine, config: ServeConfig | None = None) -> Starlette:
    """The ASGI application: the JSON API over ``engine`` and (unless disabled) the playground at ``/``.

    Endpoints: ``POST /search``, ``POST /explain``, ``POST /check``, ``GET /health``, ``GET /openapi.json``;
    ``POST /ask`` and ``GET /schema`` when the engine has ``ask`` / ``schema``.

    Raises:
        ServeConfigError: The configuration is unsafe (a public ``host`` without a token) or invalid.
    """
    config = (config or ServeConfig()).validate()
    api = _Api(engine, config)
    ep = api.endpoint
    routes: list[Any] = [
        Route("/search", ep(api.search), methods=["POST"]),
        Route("/explain", ep(api.explain), methods=["POST"]),
        Route("/check", ep(api.check), methods=["POST"]),
        Route("/health", ep(api.health, auth=False), methods=["GET"]),
        Route("/openapi.json", ep(api.openapi), methods=["GET"]),
    ]
    routes += [Route("/documents", ep(api.add_documents if api.writes else api.no_writes), methods=["POST"]),
               Route("/documents/{doc_id:path}", ep(api.document if api.writes else api.no_writes),
                     methods=["PUT", "DELETE"])]
    if "ask" in api.features:
        routes.append(Route("/ask", ep(api.ask), methods=["POST"]))
    if "schema" in api.features:
        routes.append(Route("/schema", ep(api.schema), methods=["GET"]))
    if config.playground:
        routes.append(Route("/", ep(api.playground, auth=False), methods=["GET"]))
        routes.append(Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"))
    middleware = []
    if config.cors_origins:  # off by default: only the listed origins' pages may call the API
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(config.cors_origins),
                                     allow_methods=["GET", "POST", "PUT", "DELETE"],
                                     allow_headers=["Authorization", "Content-Type"], max_age=600))
    if api.worker is not None:  # several processes: which one answered (a random id, not the pid)
        middleware.append(Middleware(_WorkerHeader, worker=api.worker))
    app = Starlette(routes=routes, middleware=middleware,
                    exception_handlers={HTTPException: _http_exception, Exception: _internal_error})
    app.state.api = api
    return app
