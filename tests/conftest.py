"""Shared test configuration: the --update-goldens option and offline model settings."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite golden fixture files from the current output")
    parser.addoption("--deep", action="store_true", default=False,
                     help="run the long versions of fuzzing / crash / concurrency tests")


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


@pytest.fixture
def deep(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--deep")) or os.environ.get("NLQL_DEEP") == "1"


# ---------------------------------------------------------------------------------------------------
# PostgreSQL + pgvector fixtures (owner: the pgvector store; helper in tests/pg_server.py).
# One real server per pytest run (pgserver, or NLQL_TEST_PG_DSN); each test or module gets a fresh
# database that already has CREATE EXTENSION vector. Tests are skipped when neither is available.


@pytest.fixture(scope="session")
def pg_server():  # type: ignore[no-untyped-def]
    """The test PostgreSQL server (``.uri``, ``.new_database(with_vector=True)``)."""
    try:
        from pg_server import get_test_server, stop_test_server
    except ImportError as exc:  # pragma: no cover - tests/ is on sys.path under pytest
        pytest.skip(f"no PostgreSQL test helper: {exc}")
    try:
        server = get_test_server()
    except ImportError as exc:
        pytest.skip(f"no PostgreSQL for tests (pip install pgserver psycopg[binary]): {exc}")
    yield server
    stop_test_server()


@pytest.fixture
def pg_dsn(pg_server) -> str:  # type: ignore[no-untyped-def]
    """DSN of a fresh database (with pgvector) for one test."""
    return str(pg_server.new_database())


@pytest.fixture(scope="module")
def pg_module_dsn(pg_server) -> str:  # type: ignore[no-untyped-def]
    """DSN of a fresh database (with pgvector) shared by one test module."""
    return str(pg_server.new_database())


@pytest.fixture(scope="module")
def pgvector_module_url(pg_module_dsn) -> str:  # type: ignore[no-untyped-def]
    """The registry's name for a fresh server database: what the contract suite opens by URL."""
    return pg_module_dsn
# ------------------------------------------------------------------------------ end of pgvector fixtures


@pytest.fixture(scope="module")
def duckdb_module_url(tmp_path_factory) -> str:  # type: ignore[no-untyped-def]
    """A fresh DuckDB file for one test module, as the registry opens it (``duckdb:///…``)."""
    return "duckdb:///" + str(tmp_path_factory.mktemp("duckdb") / "store.duckdb").lstrip("/")

# ------------------------------------------------------------------------------ Qdrant fixtures (owner: the Qdrant store)


@pytest.fixture(scope="module")
def qdrant_module_url(tmp_path_factory) -> str:  # type: ignore[no-untyped-def]
    """A fresh Qdrant Edge directory for one test module, as the registry opens it (``qdrant:///…``)."""
    pytest.importorskip("qdrant_edge")
    return "qdrant://" + str(tmp_path_factory.mktemp("qdrant") / "edge")

# ------------------------------------------------------------------------------ Milvus fixtures (owner: the Milvus store)


@pytest.fixture(scope="module")
def milvus_module_url(tmp_path_factory) -> str:  # type: ignore[no-untyped-def]
    """A fresh Milvus Lite file (in-process Milvus through the same client as a server)."""
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    return "milvus://" + str(tmp_path_factory.mktemp("milvus") / "contract.db")


_LAST_MILVUS_USER = pytest.StashKey[str]()
_MILVUS: list = []  # this process's hold on the run's server, so the last test that uses it can let it go


def pytest_collection_finish(session: pytest.Session) -> None:
    users = [item.nodeid for item in session.items if "milvus_server" in getattr(item, "fixturenames", ())]
    if users:
        session.config.stash[_LAST_MILVUS_USER] = users[-1]


@pytest.hookimpl(trylast=True)  # after the item's fixtures (which may still use the server) are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    # the server idles at ~15% of a core (tests/milvus_server.py): let it go once no later test needs it
    # (under pytest-xdist every worker collects every test, so this is the worker that runs the last one;
    # the others let it go when their session ends, and the last to let it go stops it)
    if _MILVUS and item.nodeid == item.config.stash.get(_LAST_MILVUS_USER, None):
        _release_milvus()


def _release_milvus() -> None:
    from milvus_server import release

    release(_MILVUS.pop())


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The run's real ``milvus-server`` process (Milvus 2.3.5 standalone), shared by every pytest-xdist
    worker of the run (two cannot run at once: tests/milvus_server.py) and stopped by the last to let it
    go; skipped only when it cannot be started here."""
    pytest.importorskip("pymilvus")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from milvus_server import acquire

    base = tmp_path_factory.getbasetemp()  # (under pytest-xdist, its parent is the run's: every worker's)
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    try:
        held = acquire((base.parent / f"milvus-{run}") if run else (base / "milvus-server"))
    except RuntimeError as exc:
        pytest.skip(f"milvus-server cannot start here: {exc}")
    _MILVUS.append(held)
    yield held
    if _MILVUS:
        _release_milvus()
