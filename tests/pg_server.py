"""A real PostgreSQL 16 + pgvector for the tests, started once per pytest run.

By default the server comes from the ``pgserver`` package (binaries inside the wheel, Unix socket, data
in a temporary directory that is deleted at exit). Set ``NLQL_TEST_PG_DSN`` to use an existing server
instead (its user must be allowed to CREATE DATABASE). Every test module or test gets its own database
(``CREATE DATABASE`` from a template that already has ``CREATE EXTENSION vector``), so tests never see
each other's tables.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import threading
from typing import Any
from urllib.parse import urlsplit, urlunsplit

TEMPLATE = "nlql_test_template"


class PgTestServer:
    """One running server; :meth:`new_database` returns the DSN of a fresh database with pgvector."""

    def __init__(self, uri: str, handle: Any = None, tmpdir: tempfile.TemporaryDirectory[str] | None = None):
        self.uri = uri
        self._handle = handle
        self._tmpdir = tmpdir
        self._names = itertools.count(1)
        self._lock = threading.Lock()
        self._prefix = f"nlql_test_{os.getpid()}_"
        self._make_template()

    def _admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.uri, autocommit=True)

    def _make_template(self) -> None:
        import psycopg
        from psycopg import sql

        with self._admin() as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [TEMPLATE]).fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
        with psycopg.connect(self.dsn_for(TEMPLATE), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")

    def dsn_for(self, database: str) -> str:
        """This server's URI with another database name."""
        parts = urlsplit(self.uri)
        return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))

    def new_database(self, *, with_vector: bool = True) -> str:
        """Create an empty database and return its DSN.

        Args:
            with_vector: Whether ``CREATE EXTENSION vector`` is already done in it (else it is bare,
                for tests of schema creation).
        """
        from psycopg import sql

        with self._lock:
            name = f"{self._prefix}{next(self._names)}"
        template = TEMPLATE if with_vector else "template0"
        with self._admin() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)))
        return self.dsn_for(name)

    def stop(self) -> None:
        """Stop a server this helper started (an external ``NLQL_TEST_PG_DSN`` server is left alone)."""
        if self._handle is not None:
            self._handle.cleanup()
            self._handle = None
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None


def _make_disposable(uri: str) -> None:
    """A throw-away server need not survive a crash: no fsync (CREATE DATABASE and shutdown get fast)."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        for name in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(psycopg.sql.SQL("ALTER SYSTEM SET {} = off").format(psycopg.sql.Identifier(name)))
        conn.execute("SELECT pg_reload_conf()")


_server: PgTestServer | None = None
_server_lock = threading.Lock()


def get_test_server() -> PgTestServer:
    """The server for this run, started on first use.

    Raises:
        ImportError: neither ``NLQL_TEST_PG_DSN`` is set nor ``pgserver``/``psycopg`` installed.
    """
    global _server
    with _server_lock:
        if _server is None:
            import psycopg  # noqa: F401 - fail early with ImportError when missing

            external = os.environ.get("NLQL_TEST_PG_DSN")
            if external:
                _server = PgTestServer(external)
            else:
                import pgserver

                tmp = tempfile.TemporaryDirectory(prefix="nlql-pg-")
                handle = pgserver.get_server(os.path.join(tmp.name, "pgdata"), cleanup_mode="delete")
                _make_disposable(handle.get_uri())
                _server = PgTestServer(handle.get_uri(), handle, tmp)
        return _server


def stop_test_server() -> None:
    """Stop the server started by :func:`get_test_server`, if any."""
    global _server
    with _server_lock:
        if _server is not None:
            _server.stop()
            _server = None
