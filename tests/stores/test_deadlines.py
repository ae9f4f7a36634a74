"""Deadlines reach the in-process engines (SPEC §9, issue 32): DuckDB interrupts the running statement
when the search's time runs out; Milvus gets the time left as each call's gRPC timeout; no call starts
after the deadline."""

from __future__ import annotations

import time

import pytest

from nlql import deadline
from nlql.errors import NLQLTimeoutError


def test_duckdb_interrupts_the_running_statement_at_the_deadline() -> None:
    pytest.importorskip("duckdb")
    from nlql.stores import entry

    store = entry("duckdb").create()
    store.open(4)
    heavy = "SELECT count(*) FROM range(100000000000) a WHERE a.range % 7 = 3"
    t0 = time.perf_counter()
    with deadline.active(deadline.Deadline(0.2)), pytest.raises(NLQLTimeoutError, match="interrupted"):
        store._guard(lambda: store._conn.execute(heavy).fetchall())
    assert time.perf_counter() - t0 < 0.3
    # the interrupt hit that statement only: the connection answers the next one
    with deadline.active(deadline.Deadline(5.0)):
        assert store.count() == 0
    with deadline.active(deadline.Deadline(0.0)), pytest.raises(NLQLTimeoutError):
        time.sleep(0.001)
        store.count()  # never started after the deadline
    store.close()


def test_milvus_calls_get_the_time_left_and_none_start_after_it(tmp_path) -> None:
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    from nlql.stores.milvus import MilvusStore, _Timed

    store = MilvusStore(str(tmp_path / "d.db"))
    store.open(4)
    assert isinstance(store.client, _Timed) and store.server_version >= (2, 5)
    seen: list[float | None] = []
    real = store.client._client

    class Spy:
        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            attr = getattr(real, name)

            def call(*a, **kw):  # type: ignore[no-untyped-def]
                seen.append(kw.get("timeout"))
                return attr(*a, **kw)
            return call

    store.client._client = Spy()
    with deadline.active(deadline.Deadline(2.0)):
        assert store.count() == 0
    assert seen and all(t is not None and 0 < t <= 2.0 for t in seen)
    seen.clear()
    with deadline.active(deadline.Deadline(0.0)), pytest.raises(NLQLTimeoutError):
        time.sleep(0.001)
        store.count()
    assert seen == []
    store.client._client = real
    store.close()
