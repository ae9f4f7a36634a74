"""``nlql serve --processes N``: several worker processes in front of one server store.

SPEC §10 makes server stores (PostgreSQL, Milvus, Qdrant by URL) stateless for the engine: two engines
in two processes see each other's writes at once and answer alike. So N processes can share one
listening socket: the parent binds it and supervises (uvicorn's ``Multiprocess``: it restarts a worker
that dies and stops them all on SIGINT/SIGTERM); each worker opens its own engine on the store, with
its own thread pool, limits and guarded HTTP protocol (every limit of :class:`ServeConfig` is per
process). An in-process or file store (memory, a directory, DuckDB, Milvus Lite, Qdrant Edge) holds
state in the process and would give each worker its own copy, so it is refused.

Workers start with ``spawn``: ``make_engine`` must be picklable (a module-level function, or a
``functools.partial`` of one), and is called once in each worker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import uvicorn
from uvicorn.supervisors import Multiprocess

from nlql.serve.app import ServeConfig, ServeConfigError, create_app

if TYPE_CHECKING:
    from nlql.engine import Engine

__all__ = ["MAX_PROCESSES", "SERVER_SCHEMES", "is_server_store", "serve_processes"]

#: URL schemes of stores that keep all their state in a server (SPEC §10).
SERVER_SCHEMES = ("postgresql", "postgres", "milvus+http", "milvus+https", "qdrant+http", "qdrant+https")
MAX_PROCESSES = 64


def is_server_store(spec: str) -> bool:
    """Whether ``spec`` names a store by a server URL (SPEC §10: the engine process holds no state).

    >>> is_server_store("postgresql://u@db/nlql"), is_server_store("milvus+http://m:19530")
    (True, True)
    >>> is_server_store("milvus:///tmp/a.db"), is_server_store("./store"), is_server_store("memory")
    (False, False, False)
    """
    scheme, sep, _ = spec.strip().partition("://")
    return bool(sep) and scheme.lower() in SERVER_SCHEMES


def check_processes(processes: int, store: str) -> None:
    """Raise :class:`ServeConfigError` unless ``processes`` workers may serve ``store``."""
    if not 1 <= processes <= MAX_PROCESSES:
        raise ServeConfigError(f"processes must be between 1 and {MAX_PROCESSES}, not {processes}")
    if processes > 1 and not is_server_store(store):
        raise ServeConfigError(
            f"--processes {processes} needs a server store (a {', '.join(s + '://' for s in SERVER_SCHEMES[:3])}"
            f"… URL): {store!r} keeps its data in the process, so each worker would serve a copy of its own "
            "and writes through one would not be seen by the others")


class _WorkerConfig(uvicorn.Config):
    """uvicorn's config, pickled into each worker, where :meth:`load` opens the engine and builds the app."""

    def __init__(self, make_engine: Callable[[], Engine], config: ServeConfig, **kwargs: Any) -> None:
        self.nlql_make_engine = make_engine
        self.nlql_config = config
        self.nlql_engine: Any = None
        super().__init__("nlql.serve.processes:_built_in_load", **kwargs)

    def load(self) -> None:
        if self.loaded:
            return
        from nlql.serve.protocol import guarded_protocol

        _exit_with_parent()
        self.nlql_engine = self.nlql_make_engine()
        app = create_app(self.nlql_engine, self.nlql_config)
        self.app = app
        self.http = guarded_protocol(self.nlql_config.header_timeout, self.nlql_config.max_connections)
        super().load()
        from nlql.serve import freeze_heap

        freeze_heap()


def _exit_with_parent(poll: float = 1.0) -> None:
    """In a worker: stop (SIGTERM to itself, a graceful shutdown) once the supervisor is gone, e.g.
    killed with SIGKILL, so that no orphan keeps serving the port."""
    import os
    import signal
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="nlql-parent-watch", daemon=True).start()


def serve_processes(make_engine: Callable[[], Engine], config: ServeConfig, processes: int,
                    log_level: str = "info") -> None:
    """Serve with ``processes`` worker processes on one socket until SIGINT/SIGTERM (``nlql serve
    --processes N``); the caller has checked the store with :func:`check_processes`."""
    import dataclasses

    from nlql.serve import _bind

    config = dataclasses.replace(config, processes=processes).validate()
    cfg = _WorkerConfig(make_engine, config, log_level=log_level, limit_concurrency=None, server_header=False,
                        timeout_graceful_shutdown=5, timeout_keep_alive=5, ws="none", lifespan="off",
                        backlog=max(2048, config.max_connections), workers=processes)
    sock = _bind(config)
    try:
        Multiprocess(cfg, sockets=[sock]).run()
    finally:
        sock.close()
