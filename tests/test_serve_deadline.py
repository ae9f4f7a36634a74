"""The deadline is a deadline (issue 33, items 6 and 7): the engine starts no store call once a search's
time is up, and a GRAPH walk stops at it.

A store wrapper that sleeps before every call stands for a slow backend; the built-in store underneath
answers. Each call's start is recorded, so the test sees exactly what the engine asked after the deadline.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.errors import NLQLTimeoutError
from nlql.execute.guard import grace
from nlql.stores.memory import MemoryStore


class SlowStore:
    """``inner``, with ``delay`` seconds of sleep before every public method call once ``delay`` is set."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.delay = 0.0
        self.starts: list[tuple[str, float]] = []

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name.startswith("_") or not callable(value) or name in ("stale", "compile_filter"):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.delay:
                self.starts.append((name, time.perf_counter()))
                time.sleep(self.delay)
            return value(*args, **kwargs)
        return call


def _engine() -> tuple[Engine, SlowStore]:
    store = SlowStore(MemoryStore())
    e = Engine(embedder=HashEmbedder(dim=64), store=store, warm_up=False)
    for i in range(30):
        e.add_text(f"Sentence {i} about solar energy and cats. Another line {i} on rivers.", id=f"d{i}",
                   metadata={"n": i})
    e.search('SELECT SENTENCE LET k = BM25(content, "solar") LIMIT 1')  # the keyword index, the grammar
    return e, store


QUERIES = [
    'SELECT SENTENCE LET rel = SIMILARITY(content, "solar") LIMIT 5',
    'SELECT SENTENCE LET rel = SIMILARITY(content, "solar") WHERE meta.n > 25 LIMIT 5',
    'SELECT SENTENCE LET k = BM25(content, "solar") LIMIT 5',
    'SELECT SENTENCE LET s = SIMILARITY(content, "solar"), k = BM25(content, "rivers"), f = RRF(s, k) '
    "ORDER BY f DESC LIMIT 5",
    'SELECT DOCUMENT LET rel = SIMILARITY(content, "solar") LIMIT 5',
    'SELECT SENTENCE WHERE content CONTAINS "cats" LIMIT 5',
]


@pytest.mark.parametrize("query", QUERIES)
def test_no_store_call_starts_after_the_deadline(query: str) -> None:
    e, store = _engine()
    store.delay, timeout = 0.4, 0.15
    start = time.perf_counter()
    try:
        hits = e.search(query, timeout=timeout)
    except NLQLTimeoutError as exc:
        assert "ran out of time" in str(exc)
    else:
        assert any(w.startswith("timeout") for w in hits.warnings), hits.warnings
    elapsed = time.perf_counter() - start
    late = [(name, round(t - start, 3)) for name, t in store.starts if t - start > timeout + grace(timeout)]
    assert not late, f"store calls started after the deadline: {late}"
    # the deadline, one call in flight at it, the grace (and slack for a busy machine)
    assert elapsed < timeout + store.delay + grace(timeout) + 0.3, elapsed


def test_a_fast_store_still_returns_what_it_has_at_the_deadline() -> None:
    """The grace lets a search whose store calls are quick materialise the rows it found in time."""
    e, _ = _engine()

    def slow(x: Any) -> bool:
        time.sleep(0.01)
        return True

    e.register_function("SLOW", slow, arity=1)
    hits = e.search("SELECT SENTENCE WHERE SLOW(position) LIMIT 100", timeout=0.1)
    assert 1 <= len(hits) < 60
    assert any(w.startswith("timeout while filtering") for w in hits.warnings), hits.warnings


def test_without_a_deadline_nothing_is_wrapped() -> None:
    from nlql.deadline import Deadline
    from nlql.execute.guard import DeadlineStore, guarded

    store = MemoryStore()
    assert guarded(store, Deadline(None)) is store
    wrapped = guarded(store, Deadline(5))
    assert isinstance(wrapped, DeadlineStore) and wrapped.wrapped is store
    assert wrapped.capabilities is store.capabilities


# ------------------------------------------------------------------------------------------ GRAPH (item 7)


def _graph_engine() -> Engine:
    e = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    e.add_text("Russell wrote to Frege. Frege replied to Moore. Moore met Keynes.", id="a")
    e.add_text("Keynes met Ramsey. Ramsey translated Wittgenstein.", id="b")
    return e


def test_graph_hops_have_a_documented_maximum_checked_before_anything_runs() -> None:
    from nlql import check
    from nlql.errors import NLQLError
    from nlql.text.graph import MAX_HOPS

    e = _graph_engine()
    q = 'SELECT SENTENCE LET g = GRAPH("Russell", hops => {h}) ORDER BY g DESC LIMIT 3'
    assert len(e.search(q.format(h=MAX_HOPS))) == 3
    start = time.perf_counter()
    for hops in (MAX_HOPS + 1, 1_000_000):
        with pytest.raises(NLQLError) as info:
            e.search(q.format(h=hops), timeout=10)
        assert f"at most {MAX_HOPS}" in str(info.value) and info.value.line == 1 and info.value.hint
        assert any(f"at most {MAX_HOPS}" in d.message for d in check(q.format(h=hops)))
    with pytest.raises(NLQLError, match=f"at most {MAX_HOPS}"):  # a parameter's value too
        e.search('SELECT SENTENCE LET g = GRAPH("Russell", hops => $h) LIMIT 3', params={"h": 10**6})
    assert time.perf_counter() - start < 2.0


def test_the_graph_walk_stops_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from nlql.text import graph as graph_module

    e = _graph_engine()
    slow = graph_module._ranges

    def crawl(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:  # each hop of the walk takes 0.1 s
        time.sleep(0.1)
        return slow(starts, ends)

    monkeypatch.setattr(graph_module, "_ranges", crawl)
    start = time.perf_counter()
    from nlql.text.graph import MAX_HOPS

    with pytest.raises(NLQLTimeoutError, match="GRAPH"):
        e.search(f'SELECT SENTENCE LET g = GRAPH("Russell", hops => {MAX_HOPS}, decay => 1) ORDER BY g DESC '
                 "LIMIT 3", timeout=0.25)
    assert time.perf_counter() - start < 0.25 + 0.1 + 0.4
