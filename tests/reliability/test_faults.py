"""Timeouts and faults: slow stages, store timeouts, a PostgreSQL server stopped mid-query.

- ``search(q, timeout=…)`` returns what it has, with a warning, when a stage runs out of time, and raises
  ``NLQLTimeoutError`` when it has nothing; made deterministic with a slow user function (WHERE) and a
  slow embedder.
- ``PgVectorStore(statement_timeout_ms=…)`` cancels a statement blocked behind a table lock and the same
  engine keeps working; ingest under the lock fails cleanly and writes nothing.
- A PostgreSQL server of our own (a pgserver instance in a temp dir, not the shared test server) is
  stopped with ``pg_ctl -m immediate`` while a search is blocked in it: the search fails with a
  ``BackendError`` naming the store, so do calls while it is down, and once it is restarted the same engine
  reconnects and every acknowledged document is still there.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from relhelp import CLOCK, DIM, answer, corpus, load, make_engine

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.errors import BackendError, EvaluationError, NLQLError, NLQLTimeoutError
from nlql.rerankers import FakeReranker


def _slow_engine(delay: float, result: bool = True) -> tuple[Engine, list[int]]:
    engine = load(make_engine("memory"))
    calls: list[int] = []

    def slow(x: Any) -> bool:
        calls.append(1)
        time.sleep(delay)
        return result

    engine.register_function("SLOW", slow, arity=1)
    return engine, calls


def test_slow_filter_returns_what_it_has_with_a_warning() -> None:
    engine, calls = _slow_engine(0.02)
    total = len(engine.search("SELECT SENTENCE"))
    start = time.perf_counter()
    hits = engine.search("SELECT SENTENCE WHERE SLOW(position) LIMIT 100", timeout=0.2)
    elapsed = time.perf_counter() - start
    assert 1 <= len(hits) < total
    assert len(hits) == len(calls)
    assert elapsed < 0.2 + 0.5, elapsed  # one slow call past the deadline, plus slack for a busy machine
    assert any(w.startswith("timeout while filtering") for w in hits.warnings), hits.warnings
    # the rows it returns are the first rows in order, each a real match
    assert [h.id for h in hits] == [h.id for h in engine.search("SELECT SENTENCE")][: len(hits)]


def test_slow_filter_with_recall_by_similarity() -> None:
    engine, calls = _slow_engine(0.02)
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, "agents tools") WHERE SLOW(position) ORDER BY s DESC LIMIT 50'
    hits = engine.search(q, timeout=0.15)
    assert 1 <= len(hits) < 24 and hits.warnings
    scores = [h.scores["s"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    full = engine.search(q)  # no timeout: every row checked, no warning
    assert len(full) == 24 and not any("timeout" in w for w in full.warnings)


def test_timeout_with_nothing_found_raises() -> None:
    engine, calls = _slow_engine(0.02, result=False)
    start = time.perf_counter()
    with pytest.raises(NLQLTimeoutError, match="ran out of time") as info:
        engine.search("SELECT SENTENCE WHERE SLOW(position)", timeout=0.15)
    assert time.perf_counter() - start < 0.15 + 0.5
    assert info.value.hint and "timeout" in info.value.hint
    assert 1 <= len(calls) < 24


class SlowEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(dim=DIM)
        self.delay = 0.0

    def embed(self, texts: Any) -> np.ndarray:
        time.sleep(self.delay)
        return super().embed(texts)


def test_slow_embedder() -> None:
    emb = SlowEmbedder()
    engine = Engine(embedder=emb, clock=lambda: CLOCK, warm_up=False)
    texts, ids, metas = corpus()
    engine.add_texts(texts, ids=ids, metadatas=metas)
    emb.delay = 0.3
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, "solar energy") ORDER BY s DESC LIMIT 3'
    with pytest.raises(NLQLTimeoutError, match="embedding"):
        engine.search(q, timeout=0.1)
    hits = engine.search(q, timeout=5)
    assert len(hits) == 3 and not hits.warnings
    # no SIMILARITY, nothing to embed: the embedder's speed does not matter
    assert len(engine.search("SELECT SENTENCE LIMIT 2", timeout=0.1)) == 2


def test_rerank_is_skipped_when_the_time_is_up() -> None:
    engine, _ = _slow_engine(0.02)
    reranker = FakeReranker()
    hits = engine.search('SELECT SENTENCE LET s = SIMILARITY(content, "agents") WHERE SLOW(position) LIMIT 3',
                         reranker=reranker, timeout=0.1)
    assert hits and any("rerank skipped" in w for w in hits.warnings)
    assert reranker.calls == []
    assert "rerank" not in hits[0].scores


def test_a_failing_user_function_is_an_nlql_error_naming_it() -> None:
    engine = load(make_engine("memory"))

    def broken(x: Any) -> Any:
        raise ZeroDivisionError("boom")

    engine.register_function("BROKEN", broken, arity=1)
    with pytest.raises(EvaluationError, match="BROKEN"):
        engine.search("SELECT SENTENCE WHERE BROKEN(position) == 1")
    assert len(engine.search("SELECT SENTENCE LIMIT 3")) == 3


# ------------------------------------------------------------------------------------ pgvector timeouts


def _pg_engine(dsn: str, **kwargs: Any) -> Engine:
    from nlql.stores.pgvector import PgVectorStore

    return load(make_engine(PgVectorStore(dsn, exact=True, **kwargs)))


class TableLock:
    """Holds ACCESS EXCLUSIVE on the units table from another connection: every statement on it waits."""

    def __init__(self, dsn: str, table: str = "nlql_units") -> None:
        import psycopg

        self.conn = psycopg.connect(dsn)
        self.conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


def test_pgvector_statement_timeout(pg_dsn: str) -> None:
    pytest.importorskip("psycopg")
    engine = _pg_engine(pg_dsn, statement_timeout_ms=300)
    probe = 'SELECT SENTENCE WHERE meta.status == "published" LIMIT 5'
    want = answer(engine, probe)
    lock = TableLock(pg_dsn)
    try:
        start = time.perf_counter()
        with pytest.raises(NLQLTimeoutError, match="300 ms"):
            engine.search(probe)
        assert time.perf_counter() - start < 3
        with pytest.raises(NLQLTimeoutError):
            engine.add_text("Written under the lock.", id="blocked")
    finally:
        lock.release()
    assert answer(engine, probe) == want  # the same engine, the same connection, working again
    assert engine.search("SELECT DOCUMENT WHERE doc_id == 'blocked'") == []
    engine.add_text("Written after the lock.", id="after")
    assert len(engine.search("SELECT DOCUMENT WHERE doc_id == 'after'")) == 1
    engine.close()


def test_search_timeout_bounds_a_blocked_pgvector_statement(pg_dsn: str) -> None:
    """search(timeout=…) reaches the statement: SET LOCAL statement_timeout from the time left."""
    pytest.importorskip("psycopg")
    engine = _pg_engine(pg_dsn)
    lock = TableLock(pg_dsn)
    out: dict[str, Any] = {}

    def run() -> None:
        start = time.perf_counter()
        try:
            out["result"] = engine.search("SELECT SENTENCE LIMIT 3", timeout=0.3)
        except NLQLError as exc:
            out["result"] = exc
        out["elapsed"] = time.perf_counter() - start

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=2.0)
    lock.release()
    thread.join(timeout=30)
    engine.close()
    assert out["elapsed"] < 1.5, out
    assert isinstance(out["result"], NLQLTimeoutError) and "deadline" in str(out["result"]), out


# ------------------------------------------------------------------------- a server stopped mid-query


class OwnServer:
    """A PostgreSQL + pgvector server of our own (pgserver, temp dir) that the test may stop and restart."""

    def __init__(self, root: Path) -> None:
        import pgserver

        self.pgdata = root / "pgdata"
        self.handle = pgserver.get_server(self.pgdata, cleanup_mode="delete")
        self.uri = self.handle.get_uri()
        import psycopg

        with psycopg.connect(self.uri, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")

    def stop(self) -> None:
        """Like a crash: no checkpoint, every session cut off (committed work survives in the WAL)."""
        import pgserver

        pgserver.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=self.pgdata, user=self.handle.system_user)

    def start(self) -> None:
        with self.handle._lock:  # pgserver's own inter-process lock around (re)starting
            self.handle.ensure_postgres_running()
        assert self.handle.get_uri() == self.uri

    def cleanup(self) -> None:
        self.handle.cleanup()


@pytest.fixture
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("pgserver")
    pytest.importorskip("psycopg")
    server = OwnServer(tmp_path_factory.mktemp("own-pg"))
    yield server
    server.cleanup()


def test_server_stopped_mid_query_then_back(own_server: OwnServer) -> None:
    engine = _pg_engine(own_server.uri)
    everything = "SELECT SENTENCE ORDER BY doc_id, position"
    want = answer(engine, everything)
    engine.add_text("Acknowledged just before the crash.", id="last", metadata={"n": 99})
    lock = TableLock(own_server.uri)
    out: dict[str, Any] = {}

    def blocked_search() -> None:
        try:
            out["result"] = engine.search("SELECT SENTENCE WHERE meta.n >= 0 LIMIT 5")
        except Exception as exc:  # noqa: BLE001 - inspected below
            out["result"] = exc

    thread = threading.Thread(target=blocked_search)
    thread.start()
    time.sleep(0.5)
    assert thread.is_alive(), "the search should be waiting for the table lock"
    own_server.stop()
    thread.join(timeout=30)
    lock.conn.close()
    assert not thread.is_alive()
    err = out["result"]
    assert isinstance(err, BackendError), repr(err)
    assert err.store == "pgvector" and "pgvector" in str(err)
    # while the server is down: clear errors naming the store, nothing half-written
    with pytest.raises(BackendError, match="pgvector"):
        engine.search(everything)
    with pytest.raises(BackendError, match="pgvector"):
        engine.add_text("Written while the server is down.", id="down")
    own_server.start()
    # the same engine reconnects; nothing acknowledged was lost, nothing refused was written
    got = answer(engine, everything)
    assert [g for g in got if not g[0].startswith("last#")] == want
    assert [h.id for h in engine.search("SELECT DOCUMENT WHERE doc_id IN ('last', 'down')")] == ["last"]
    engine.add_text("Written after the restart.", id="after", metadata={"n": 100})
    assert len(engine.search("SELECT DOCUMENT WHERE meta.n >= 99")) == 2
    engine.close()
    # a fresh engine (a new process, in effect) sees the same data
    again = _reopen(own_server.uri)
    assert len(again.search("SELECT DOCUMENT")) == len(corpus()[0]) + 2
    again.close()


def _reopen(dsn: str) -> Engine:
    from nlql.stores.pgvector import PgVectorStore

    return make_engine(PgVectorStore(dsn, exact=True))
