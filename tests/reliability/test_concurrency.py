"""Concurrency: searches running while another thread ingests, replaces and deletes.

Every version ``v`` of a document is written so that a torn result is visible: each of its sentences
starts with ``v<v>``, its metadata is ``{"version": v, …}``, and the number of sentences depends on the
version. Readers check every hit: its content belongs to the version its metadata names (a DOCUMENT hit
is exactly that version's text; a sentence, chunk or span is made of that version's sentences), no hit
appears twice in one result, and nothing but a result comes back. Runs on the built-in store (in RAM
and persistent), Qdrant local mode and pgvector — for pgvector also with the writer and the readers on
two separate engines sharing one database, as two processes would.

``asearch`` is checked from an event loop: a ticker coroutine keeps ticking while searches with a slow
embedder run.
"""

from __future__ import annotations

import asyncio
import random
import re
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from relhelp import CLOCK, DIM, deep_mode, make_store

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.text.split import split_sentences

N_DOCS = 24
WORDS = ["alpha", "beta", "gamma", "delta", "agents", "tools", "river", "solar"]
QUERIES = [
    'SELECT SENTENCE LET s = SIMILARITY(content, "alpha beta agents") ORDER BY s DESC LIMIT 10',
    'SELECT SENTENCE LET s = SIMILARITY(content, "river") WHERE meta.version >= 1 ORDER BY s DESC LIMIT 5',
    "SELECT DOCUMENT WHERE meta.version >= 0 LIMIT 20",
    'SELECT DOCUMENT LET s = SIMILARITY(content, "solar tools") ORDER BY s DESC LIMIT 6',
    'SELECT SPAN(SENTENCE, window => 2) WHERE content CONTAINS "gamma" LIMIT 8',
    "SELECT CHUNK WHERE meta.parity == 1 LIMIT 10",
    'SELECT SENTENCE LET k = BM25(content, "delta agents") WHERE k > 0 ORDER BY k DESC LIMIT 10',
    'SELECT SENTENCE LET s = SIMILARITY(content, "alpha"), k = BM25(content, "alpha"), f = RRF(s, k) '
    "ORDER BY f DESC LIMIT 10",
    "SELECT SENTENCE ORDER BY meta.version DESC, position ASC LIMIT 15",
]
_VERSION = re.compile(r"\bv(\d+)\b")


def text_of(doc_id: str, version: int) -> str:
    rng = random.Random(f"{doc_id}/{version}")
    return " ".join(f"v{version} {doc_id} says {rng.choice(WORDS)} {rng.choice(WORDS)} {j}."
                    for j in range(1 + (version % 4) + rng.randint(0, 2)))


def metadata_of(doc_id: str, version: int) -> dict[str, Any]:
    return {"version": version, "doc": doc_id, "parity": version % 2}


def _check_hit(hit: Any) -> None:
    version = hit.metadata["version"]
    assert hit.metadata == metadata_of(hit.doc_id, version), hit.metadata
    text = text_of(hit.doc_id, version)
    sentences = [text[s:e] for s, e in split_sentences(text)]
    seen = {int(m) for m in _VERSION.findall(hit.content)}
    assert seen == {version}, f"torn {hit.unit} hit {hit.id}: metadata says v{version}, content {hit.content!r}"
    if hit.unit == "DOCUMENT":
        assert hit.content == text
    elif hit.unit == "SENTENCE":
        assert hit.content == sentences[hit.position]
    else:
        assert hit.content in text


class Workload:
    """One writer and several readers on (possibly) different engines; collects every failure."""

    def __init__(self, writer: Engine, readers: list[Engine], seconds: float, seed: int = 1,
                 queries: list[str] | None = None, n_docs: int = N_DOCS) -> None:
        self.queries = queries or QUERIES
        self.writer = writer
        self.readers = readers
        self.seconds = seconds
        self.rng = random.Random(seed)
        self.version = {f"d{i}": 0 for i in range(n_docs)}
        self.errors: list[str] = []
        self.searches = 0
        self.writes = 0
        self.stop = threading.Event()
        ids = list(self.version)
        writer.add_texts([text_of(d, 0) for d in ids], ids=ids, metadatas=[metadata_of(d, 0) for d in ids])

    def write_loop(self) -> None:
        try:
            while not self.stop.is_set():
                doc = self.rng.choice(sorted(self.version))
                roll = self.rng.random()
                if roll < 0.15:
                    self.writer.delete(doc)
                    self.writer.delete("never-existed")
                elif roll < 0.3:
                    batch = self.rng.sample(sorted(self.version), 4)
                    for d in batch:
                        self.version[d] += 1
                    self.writer.add_texts([text_of(d, self.version[d]) for d in batch], ids=batch,
                                          metadatas=[metadata_of(d, self.version[d]) for d in batch])
                else:
                    self.version[doc] += 1
                    self.writer.add_text(text_of(doc, self.version[doc]), id=doc,
                                         metadata=metadata_of(doc, self.version[doc]))
                self.writes += 1
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(f"writer: {type(exc).__name__}: {exc}")

    def read_loop(self, engine: Engine, seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not self.stop.is_set():
                q = rng.choice(self.queries)
                hits = engine.search(q)
                ids = [h.id for h in hits]
                assert len(ids) == len(set(ids)), f"duplicate hits in {q}: {ids}"
                for h in hits:
                    _check_hit(h)
                self.searches += 1
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(f"reader: {type(exc).__name__}: {exc}")

    def run(self, n_readers: int = 3) -> None:
        threads = [threading.Thread(target=self.write_loop)]
        threads += [threading.Thread(target=self.read_loop, args=(self.readers[i % len(self.readers)], i))
                    for i in range(n_readers)]
        for t in threads:
            t.start()
        time.sleep(self.seconds)
        self.stop.set()
        for t in threads:
            t.join(timeout=120)
            assert not t.is_alive(), "a thread hung"


def _seconds(deep: bool) -> float:
    return 30.0 if deep_mode(deep) else 2.5


@pytest.mark.parametrize("store", ["memory", "directory", "qdrant", "pgvector"])
def test_search_while_writing(store: str, request: pytest.FixtureRequest, tmp_path: Path, deep: bool) -> None:
    backend = str(tmp_path / "store") if store == "directory" else make_store(store, request, dsn_fixture="pg_dsn")
    engine = Engine(embedder=HashEmbedder(dim=DIM), store=backend, clock=lambda: CLOCK, warm_up=False)
    work = Workload(engine, [engine], _seconds(deep))
    work.run()
    assert not work.errors, work.errors[:3]
    assert work.searches > 10 and work.writes > 10, (work.searches, work.writes)
    # afterwards the store holds exactly the writer's last state
    final = {h.doc_id: h.metadata["version"] for h in engine.search("SELECT DOCUMENT")}
    assert all(final[d] == v for d, v in final.items() if d in work.version)
    for h in engine.search("SELECT SENTENCE"):
        _check_hit(h)
    engine.close()


def test_pgvector_two_engines_one_database(pg_dsn: str, deep: bool) -> None:
    """Writer and readers on separate engines (no shared lock), as separate processes would be."""
    pytest.importorskip("psycopg")
    from nlql.stores.pgvector import PgVectorStore

    writer = Engine(embedder=HashEmbedder(dim=DIM), store=PgVectorStore(pg_dsn, exact=True), clock=lambda: CLOCK,
                    warm_up=False)
    readers = [Engine(embedder=HashEmbedder(dim=DIM), store=PgVectorStore(pg_dsn, exact=True), clock=lambda: CLOCK,
                      warm_up=False) for _ in range(2)]
    # SPAN hits read their window in a second statement: the place a concurrent replace can tear them
    spans = ['SELECT SPAN(SENTENCE, window => 3) WHERE content CONTAINS "says" LIMIT 30',
             'SELECT SPAN(SENTENCE, window => 1) LET s = SIMILARITY(content, "alpha") ORDER BY s DESC LIMIT 10']
    work = Workload(writer, readers, _seconds(deep), seed=7, queries=QUERIES + spans * 4, n_docs=6)
    work.run(n_readers=2)
    assert not work.errors, work.errors[:3]
    assert work.searches > 5 and work.writes > 5
    for e in (writer, *readers):
        e.close()


class SlowEmbedder(HashEmbedder):
    """A HashEmbedder that takes ``delay`` seconds per call (like a remote embedding API)."""

    def __init__(self, delay: float) -> None:
        super().__init__(dim=DIM)
        self.delay = delay

    def embed(self, texts: Any) -> np.ndarray:
        time.sleep(self.delay)
        return super().embed(texts)


def test_asearch_does_not_block_the_event_loop() -> None:
    engine = Engine(embedder=SlowEmbedder(0.0), clock=lambda: CLOCK, warm_up=False)
    engine.add_texts([text_of(f"d{i}", 1) for i in range(10)], ids=[f"d{i}" for i in range(10)],
                     metadatas=[metadata_of(f"d{i}", 1) for i in range(10)])
    engine.embedder.delay = 0.3
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, "alpha") ORDER BY s DESC LIMIT 3'

    async def main() -> tuple[list[float], list[Any], float]:
        ticks: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            while not done.is_set():
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.01)

        tick_task = asyncio.create_task(ticker())
        start = time.perf_counter()
        results = await asyncio.gather(*(engine.asearch(q) for _ in range(4)),
                                       engine.asearch(q, timeout=5.0, max_tokens=50))
        elapsed = time.perf_counter() - start
        done.set()
        await tick_task
        return ticks, results, elapsed

    ticks, results, elapsed = asyncio.run(main())
    assert all(len(r) >= 1 for r in results)
    assert elapsed >= 0.3
    gaps = np.diff(ticks)
    # the loop kept running: ticks all along, never a stall as long as one embedding call
    assert len(ticks) >= elapsed / 0.01 * 0.3, (len(ticks), elapsed)
    assert gaps.max() < 0.25, gaps.max()
