"""``nlql serve``: an HTTP JSON API over one engine, and a web playground (``pip install 'nlql-engine[serve]'``).

>>> from nlql.embedders import HashEmbedder
>>> from nlql.engine import Engine
>>> engine = Engine(embedder=HashEmbedder(dim=64))
>>> engine.add_text("Agents call tools. Cats sleep all day.", id="a")
'a'
>>> import httpx
>>> with BackgroundServer(engine, ServeConfig(port=0)) as server:
...     r = httpx.post(server.url + "/search", json={"query": 'SELECT SENTENCE WHERE content CONTAINS "tool"'})
>>> r.status_code, [h["content"] for h in r.json()["hits"]]
(200, ['Agents call tools.'])

See docs/serving.md for the endpoints, limits and the token.
"""

from __future__ import annotations

import gc
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from nlql.serve.app import STATIC_DIR, ServeConfig, ServeConfigError, create_app, features, is_loopback

if TYPE_CHECKING:
    from nlql.engine import Engine

__all__ = ["STATIC_DIR", "BackgroundServer", "ServeConfig", "ServeConfigError", "create_app", "features",
           "is_loopback", "serve"]


def _uvicorn() -> Any:
    try:
        import uvicorn
    except ImportError:
        from nlql.errors import MissingDependencyError

        raise MissingDependencyError("serve", "uvicorn") from None
    return uvicorn


def _bind(config: ServeConfig) -> socket.socket:
    family = socket.AF_INET6 if ":" in config.host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.host.strip("[]"), config.port))
    sock.set_inheritable(True)
    return sock


def _server(engine: Engine, config: ServeConfig, log_level: str) -> Any:
    """uvicorn over the app, with the guarded HTTP/1.1 protocol (:mod:`nlql.serve.protocol`): header
    timeout, connection bound with eviction of slow clients, JSON refusals. uvicorn's own
    ``limit_concurrency`` is off: it counted idle connections and answered plain text."""
    uvicorn = _uvicorn()
    from nlql.serve.protocol import guarded_protocol

    app = create_app(engine, config)
    cfg = uvicorn.Config(app, log_level=log_level, limit_concurrency=None, server_header=False,
                         timeout_graceful_shutdown=5, timeout_keep_alive=5, ws="none", lifespan="off",
                         http=guarded_protocol(config.header_timeout, config.max_connections),
                         backlog=max(2048, config.max_connections))
    server = uvicorn.Server(cfg)
    server.nlql_api = app.state.api
    return server


def freeze_heap() -> None:
    """In a process that only serves: move every object alive now (the engine, its store, the modules) out
    of the garbage collector's reach. Serving allocates short-lived objects (a burst of reconnecting slow
    clients, thousands); the full collections they trigger otherwise walk the whole heap each time, a
    pause of ~200 ms with the demo corpus loaded, during which no request is answered."""
    gc.collect()
    gc.freeze()


def serve(engine: Engine, config: ServeConfig | None = None, log_level: str = "info") -> None:
    """Serve ``engine`` until interrupted (what ``nlql serve`` runs).

    Raises:
        ServeConfigError: A public ``host`` without a token, or another invalid setting.
    """
    config = (config or ServeConfig()).validate()
    server = _server(engine, config, log_level)
    sock = _bind(config)
    freeze_heap()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        server.nlql_api.pool.shutdown(wait=False, cancel_futures=True)


class BackgroundServer:
    """The server in a background thread (for notebooks, tests and benchmarks); a context manager.

    ``ServeConfig(port=0)`` picks a free port; :attr:`url` is where it listens once started.
    """

    def __init__(self, engine: Engine, config: ServeConfig | None = None, log_level: str = "warning") -> None:
        self.config = (config or ServeConfig()).validate()
        self._server = _server(engine, self.config, log_level)
        self._sock = _bind(self.config)
        host, port = self._sock.getsockname()[:2]
        self.port = int(port)
        self.url = f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="nlql-serve", daemon=True)

    def start(self, wait: float = 10.0) -> BackgroundServer:
        self._thread.start()
        end = time.monotonic() + wait
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > end:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()
        self._server.nlql_api.pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
