"""An ``add_texts`` call written a batch behind on DuckDB (``Capabilities.WRITES_AHEAD``, issue 35): the
engine prepares batch b+1 while a thread of its own writes batch b. It must store exactly what writing
batch after batch stores, keep each batch one atomic write, name the committed batches when one fails
(the batch written ahead included), and leave no write running, no mutex held and the interpreter's
switch interval as it was once the call returns or raises."""

from __future__ import annotations

import dataclasses
import inspect
import sys
import threading
from contextlib import nullcontext
from typing import Any

import numpy as np
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.errors import BackendError, EmbedderError, NLQLError  # noqa: E402
from nlql.stores.duckdb import DuckDBStore  # noqa: E402


class BatchAfterBatch(DuckDBStore):
    """The same store without the two-half write: the engine writes each batch before preparing the next."""

    def _capabilities(self) -> Any:
        return dataclasses.replace(super()._capabilities(), WRITES_AHEAD=False)


class FailsAt(HashEmbedder):
    """A hash embedder whose ``at``-th call (counting from 1) raises ``error``: a call stopped while the
    batch before is being written."""

    def __init__(self, at: int, error: BaseException) -> None:
        super().__init__(dim=16)
        self.at, self.error, self.calls = at, error, 0

    def embed(self, texts: Any) -> np.ndarray:
        self.calls += 1
        if self.calls == self.at:
            raise self.error
        return super().embed(texts)


def docstrings() -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """Real text: whole docstrings of the standard library (long documents, odd bytes, names), ids that
    repeat (a bare name in several modules: the last text wins), metadata whose keys come and go."""
    import collections
    import json
    import re
    import textwrap

    texts, ids, metas = [], [], []
    for module in (collections, json, re, textwrap, inspect, threading, dataclasses):
        for name, obj in sorted(vars(module).items()):
            doc = inspect.getdoc(obj) if callable(obj) else None
            if not doc or name.startswith("__"):
                continue
            texts.append(doc)
            ids.append(name)
            meta: dict[str, Any] = {"module": module.__name__, "lines": doc.count("\n") + 1}
            if inspect.isclass(obj):
                meta["kind"] = "class"
                meta["bases"] = [b.__name__ for b in obj.__bases__]
            if len(texts) % 5 == 0:
                meta = {}
            metas.append(meta)
    return texts, ids, metas


def digests(store: DuckDBStore) -> dict[str, tuple[int, Any]]:
    """Per table of the store, its row count and the sum of its rows' hashes (every column but the
    internal keys, which a sequence numbers in call order either way)."""
    conn = store._conn.cursor()
    out = {}
    prefix = store.table_prefix
    names = [r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables() WHERE starts_with(table_name, $1)",
                                        [f"{prefix}_"]).fetchall()]
    for name in sorted(names):
        cols = [r[0] for r in conn.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = $1 "
                                           "ORDER BY column_index", [name]).fetchall()]
        quoted = ", ".join(f'"{c}"' for c in cols)
        out[name.removeprefix(prefix)] = conn.execute(
            f'SELECT count(*), coalesce(sum(hash({quoted})), 0)::VARCHAR FROM "{name}"').fetchone()
    return out


def test_only_a_database_of_its_own_is_written_ahead(tmp_path: Any) -> None:
    import duckdb

    for store, ahead in ((DuckDBStore(), True), (DuckDBStore(str(tmp_path / "f.duckdb")), False),
                         (DuckDBStore(connection=duckdb.connect()), False)):
        store.open(8)
        assert store.capabilities.WRITES_AHEAD is ahead
        store.close()


@pytest.mark.parametrize("batch_size", [1, 7, 64])
def test_a_call_written_ahead_stores_what_batch_after_batch_stores(batch_size: int) -> None:
    texts, ids, metas = docstrings()
    assert len(texts) > 150 and len(set(ids)) < len(ids)  # (repeated names: the last text wins)
    engines = {cls: Engine(embedder=HashEmbedder(dim=32), store=cls(), warm_up=False)
               for cls in (DuckDBStore, BatchAfterBatch)}
    for engine in engines.values():
        engine.add_text("Before the call. Russell met Whitehead.", id="before", metadata={"kind": "note"})
        engine.add_texts(texts, ids=ids, metadatas=metas, batch_size=batch_size)
        engine.add_texts(texts[:9], ids=ids[:9], batch_size=4)  # (replacing: the old rows go)
    ahead, plain = engines[DuckDBStore], engines[BatchAfterBatch]
    assert digests(ahead.store) == digests(plain.store)
    assert ahead.store.max_seq() == plain.store.max_seq()
    for query in ('SELECT SENTENCE LET s = SIMILARITY(content, "parse a string") ORDER BY s DESC LIMIT 8',
                  'SELECT DOCUMENT LET k = BM25(content, "regular expression match") ORDER BY k DESC LIMIT 8',
                  'SELECT DOCUMENT WHERE meta.module == "json" ORDER BY doc_id LIMIT 50'):
        assert [(h.id, h.scores) for h in ahead.search(query)] == [(h.id, h.scores) for h in plain.search(query)]
    assert sys.getswitchinterval() == pytest.approx(0.005)


class FailingWrite(DuckDBStore):
    """A store whose ``fail_at``-th write (counting from 1) fails in DuckDB, as a constraint would."""

    fail_at = 0

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def _write(self, *tables: Any, **options: Any) -> None:
        self.writes += 1
        if self.writes == self.fail_at:
            self._conn.execute("SELECT error('the disk is on fire')")
        super()._write(*tables, **options)


def test_a_write_that_fails_ahead_names_the_batches_before_it() -> None:
    store = FailingWrite()
    store.fail_at = 3
    engine = Engine(embedder=HashEmbedder(dim=16), store=store, warm_up=False)
    with pytest.raises(BackendError) as err:
        engine.add_texts([f"Sentence {i}." for i in range(12)], ids=[str(i) for i in range(12)], batch_size=2)
    assert err.value.committed == [str(i) for i in range(4)]  # type: ignore[attr-defined]
    assert "the disk is on fire" in str(err.value) and "in batch 3 of 6" in str(err.value)
    assert isinstance(err.value.__cause__, Exception)  # (DuckDB's own error, kept)
    assert store.writes == 3  # (batch 4 was prepared, never written)
    assert sorted(h.doc_id for h in engine.search("SELECT DOCUMENT")) == [str(i) for i in range(4)]
    engine.add_texts(["Again."], ids=["again"])  # (the write mutex is free)
    assert len(engine) == 5


def test_the_batch_being_written_is_waited_for_when_the_next_fails() -> None:
    """The embedder fails on batch 3 while batch 2 is written: batch 2 is committed, and named."""
    engine = Engine(embedder=FailsAt(3, RuntimeError("embedder down")), store=DuckDBStore(), warm_up=False)
    with pytest.raises(EmbedderError) as err:
        engine.add_texts([f"Sentence {i}." for i in range(10)], ids=[str(i) for i in range(10)], batch_size=3)
    assert err.value.committed == [str(i) for i in range(6)]  # type: ignore[attr-defined]
    assert "in batch 3 of 4" in str(err.value)
    assert len(engine) == 6


def test_an_earlier_failed_write_is_the_error_when_both_fail() -> None:
    """Batch 2's write fails while batch 3's embedding fails too: the call reports batch 2, the first."""
    store = FailingWrite()
    store.fail_at = 2
    engine = Engine(embedder=FailsAt(3, RuntimeError("embedder down")), store=store, warm_up=False)
    with pytest.raises(NLQLError) as err:
        engine.add_texts([f"Sentence {i}." for i in range(10)], ids=[str(i) for i in range(10)], batch_size=3)
    assert isinstance(err.value, BackendError) and "in batch 2 of 4" in str(err.value)
    assert err.value.committed == ["0", "1", "2"]  # type: ignore[attr-defined]
    assert len(engine) == 3


def test_an_interrupted_call_lets_its_last_write_end_and_leaves_nothing_running() -> None:
    """Ctrl-C in the caller's thread while a batch is written: the write ends (committed whole), and when
    the interrupt reaches the caller no write of the call runs, the mutex is free and the switch interval
    is the interpreter's again."""
    before = sys.getswitchinterval()
    engine = Engine(embedder=FailsAt(3, KeyboardInterrupt()), store=DuckDBStore(), warm_up=False)
    with pytest.raises(KeyboardInterrupt):
        engine.add_texts([f"Sentence {i}." for i in range(10)], ids=[str(i) for i in range(10)], batch_size=3)
    assert not [t for t in threading.enumerate() if t.name.startswith("nlql-write")]
    assert sys.getswitchinterval() == before
    assert len(engine) == 6  # (batches 1 and 2, whole)
    engine.add_text("After.", id="after")
    assert len(engine) == 7


def test_searches_during_a_call_see_whole_batches() -> None:
    """Each batch is one atomic write: a search in another thread while the call runs counts a whole
    number of batches, never part of one."""
    n, size = 400, 40
    engine = Engine(embedder=HashEmbedder(dim=16), store=DuckDBStore(), warm_up=False)
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(len(engine.search("SELECT DOCUMENT LIMIT 1000")))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        engine.add_texts([f"Document {i}. Its second sentence." for i in range(n)], ids=[str(i) for i in range(n)],
                         batch_size=size)
    finally:
        done.set()
        watcher.join()
    assert seen and all(k % size == 0 for k in seen), sorted(set(seen))
    assert len(engine) == 2 * n  # (sentences)


def test_progress_counts_every_document_once_when_written_ahead() -> None:
    """A progress report hears of each batch's documents once its write has ended, the last batch's too."""

    class Recording:
        def __init__(self) -> None:
            self.total = self.sentences = self.documents = self.expected = 0
            self.closed = False

        def start(self, total: int, documents: int = 0) -> None:
            self.total, self.expected = total, documents

        def advance(self, sentences: int, documents: int = 0) -> None:
            self.sentences += sentences
            self.documents += documents

        def close(self) -> None:
            self.closed = True

    texts, ids, metas = docstrings()
    report = Recording()
    engine = Engine(embedder=HashEmbedder(dim=16), store=DuckDBStore(), warm_up=False)
    engine.add_texts(texts, ids=ids, metadatas=metas, batch_size=25, progress=report)
    kept = len(set(ids))
    assert report.closed and report.expected == report.documents == kept
    assert report.sentences == report.total == len(engine)


def test_the_ids_a_private_store_keeps_follow_failed_writes_deletes_and_replacements() -> None:
    """A store of its own finds the documents a write replaces in the ids it keeps, not by reading every
    stored id: a write that fails after noting its ids, a delete, a re-add and a replacement all leave
    the same rows as the built-in store (no document twice, none lost)."""

    class FailsInside(DuckDBStore):
        fail = False

        def _key_block(self, conn: Any, n: int) -> Any:  # (inside the write's transaction)
            if self.fail:
                self._conn.execute("SELECT error('failed inside the write')")
            return super()._key_block(conn, n)

    store = FailsInside()
    engines = [Engine(embedder=HashEmbedder(dim=16), store=s, warm_up=False) for s in (store, "memory")]
    for e in engines:
        store.fail = e.store is store
        with pytest.raises(BackendError) if e.store is store else nullcontext():
            e.add_texts(["First a.", "First b."], ids=["a", "b"])
        store.fail = False
        e.add_texts(["Second a. More.", "Second b."], ids=["a", "b"])
        e.add_text("Third a.", id="a", metadata={"k": 1})
        e.delete("b")
        e.add_text("Fourth b.", id="b")
        e.add_texts([f"Doc {i}." for i in range(5)] + ["Fifth a."], ids=[*map(str, range(5)), "a"], batch_size=2)
    want, got = ([(h.id, h.content, h.metadata) for h in e.search("SELECT SENTENCE")] for e in engines[::-1])
    assert got == want and len(got) == 7
    assert store._ids == {"a", "b", "0", "1", "2", "3", "4"}
