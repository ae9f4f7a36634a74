"""The pages of the rows an add_texts call announces are faulted in on a thread of their own (issue 21's
1M ingest): the bytes never change, a stop or a failing kernel call leaves the writer's own faults,
and the store holds exactly what it holds without it."""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import numpy as np
import pytest

from nlql import Engine
from nlql.stores.memory import MemoryStore, _pages

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE is Linux's")


class Lookup:
    name = "lookup"

    def __init__(self, texts: list[str], vecs: np.ndarray) -> None:
        self.dim = vecs.shape[1]
        self._row = {t: i for i, t in enumerate(texts)}
        self._vecs = vecs

    def embed(self, texts: Any) -> np.ndarray:
        return self._vecs[[self._row[t] for t in texts]]


def supported() -> bool:
    """Whether this kernel faults pages in on request (``prefault`` starts one for any large region)."""
    big = np.zeros(_pages.MIN_BYTES // 4, dtype=np.float32)  # untouched pages: mapped lazily, costs nothing
    pf = _pages.prefault(big)
    if pf is None:
        return False
    pf.stop()
    assert pf.done.wait(30)
    return True


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[_pages.Prefault]:
    """Every prefault a store starts (``_pages.prefault``'s non-None answers), in order."""
    made: list[_pages.Prefault] = []
    real = _pages.prefault

    def spy(region: np.ndarray) -> _pages.Prefault | None:
        pf = real(region)
        if pf is not None:
            made.append(pf)
        return pf

    monkeypatch.setattr(_pages, "prefault", spy)
    return made


@pytest.fixture
def stopped(monkeypatch: pytest.MonkeyPatch) -> list[_pages.Prefault]:
    """Every prefault told to stop (a store closing or replacing its matrix), in order."""
    made: list[_pages.Prefault] = []
    real = _pages.Prefault.stop

    def stop(self: _pages.Prefault) -> None:
        made.append(self)
        real(self)

    monkeypatch.setattr(_pages.Prefault, "stop", stop)
    return made


@linux_only
def test_populating_a_fresh_array_keeps_every_byte_written_before_and_during() -> None:
    a = np.zeros((20_000, 384), dtype=np.float32)  # 30 MB, fresh pages
    rng = np.random.default_rng(0)
    head = rng.standard_normal((3_000, 384)).astype(np.float32)
    a[:3_000] = head
    pf = _pages.Prefault(a[1_000:])  # a region starting inside written pages, not on a page boundary
    a[3_000:6_000] = head  # the writer goes on meanwhile
    assert pf.done.wait(30)
    if supported():
        assert pf.populated >= a[1_000:].nbytes - 2 * _pages.PAGE
    assert np.array_equal(a[:3_000], head) and np.array_equal(a[3_000:6_000], head)
    assert not a[6_000:].any()


@linux_only
def test_a_stop_ends_the_thread_and_small_regions_start_none() -> None:
    assert _pages.prefault(np.zeros((10, 4), dtype=np.float32)) is None
    a = np.zeros((1 << 26) // 4, dtype=np.float32)  # 256 MB
    pf = _pages.Prefault(a)
    pf.stop()
    assert pf.done.wait(30)
    assert pf.populated < a.nbytes  # stopped within a chunk or two, not at the end
    assert not a.any()


def _ingest(monkeypatch: pytest.MonkeyPatch, started: list[_pages.Prefault],
            n: int = 6_000) -> tuple[Engine, np.ndarray]:
    """An engine with n rows ingested in batches, and the matrix the store holds without a prefault."""
    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((n, 384)).astype(np.float32)
    texts = [f"sentence {i}" for i in range(n)]

    def run() -> Engine:
        eng = Engine(embedder=Lookup(texts, vecs), store=MemoryStore(), warm_up=False)
        eng.add_texts(texts, ids=[str(i) for i in range(n)], batch_size=1000)
        return eng

    with monkeypatch.context() as m:
        m.setattr(_pages, "MIN_BYTES", 1 << 40)
        plain = run()
        want = plain.store.matrix.copy()  # type: ignore[attr-defined]
        assert not started  # regions under MIN_BYTES: none started
        plain.close()
    return run(), want


@linux_only
def test_an_ingest_with_rows_announced_prefaults_them_and_stores_the_same_matrix(
        monkeypatch: pytest.MonkeyPatch, started: list[_pages.Prefault], stopped: list[_pages.Prefault]) -> None:
    monkeypatch.setattr(_pages, "MIN_BYTES", 1 << 20)
    eng, vecs = _ingest(monkeypatch, started)
    assert len(started) == 1  # the first batch grew the matrix for the whole call
    assert started[0].done.wait(30)
    store = eng.store
    assert isinstance(store, MemoryStore)
    assert np.array_equal(store.matrix, vecs)
    hits = eng.search('SELECT SENTENCE LET rel = SIMILARITY(content, "sentence 17") ORDER BY rel DESC LIMIT 3')
    assert hits[0].id.split("#")[0] == "17"
    assert started[0] not in stopped
    eng.close()
    assert started[0] in stopped  # closing the store stops (and lets go of) its prefault


@linux_only
def test_a_failing_kernel_call_leaves_the_writers_own_faults(monkeypatch: pytest.MonkeyPatch,
                                                             started: list[_pages.Prefault]) -> None:
    calls: list[int] = []

    def refuse(addr: int, n: int, advice: int) -> int:
        calls.append(advice)
        ctypes.set_errno(12)  # ENOMEM
        return -1

    monkeypatch.setattr(_pages, "MIN_BYTES", 1 << 20)
    monkeypatch.setattr(_pages, "_libc_madvise", lambda: refuse)
    eng, vecs = _ingest(monkeypatch, started)
    store = eng.store
    assert isinstance(store, MemoryStore) and len(started) == 1
    assert started[0].done.wait(30)
    assert calls == [_pages.MADV_POPULATE_WRITE]  # tried once, then left alone
    assert np.array_equal(store.matrix, vecs)
    eng.close()
