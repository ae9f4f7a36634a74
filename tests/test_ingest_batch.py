"""Ingest by columns (issue 21): the built-in store appends the engine's DocBatch whole; every other store
gets one record per document. Both must store exactly the same rows, and refuse the same input."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.engine import _check_metadata, _check_metadatas, _distinct
from nlql.errors import EmbedderError
from nlql.stores.batch import DocBatch
from nlql.stores.memory import MemoryStore


class RecordsOnly(MemoryStore):
    """The built-in store taking records (the path of every other store and of a user's own)."""

    capabilities = replace(MemoryStore.capabilities, DOC_BATCHES=False)
    seen: list[str] = []

    def upsert(self, docs: Any) -> None:
        self.seen.append("batch" if isinstance(docs, DocBatch) and docs.columnar else type(docs).__name__)
        super().upsert(docs)


class Columnar(RecordsOnly):
    capabilities = replace(MemoryStore.capabilities, DOC_BATCHES=True)
    seen: list[str] = []


def _corpus() -> tuple[list[str], list[str], list[Any]]:
    texts, ids, metas = [], [], []
    for i in range(300):
        kind = i % 6
        texts.append([f"One sentence {i}", f"  Padded {i}.  ", f"First {i}. Second one. Third!", "   ",
                      "", f"Line {i}\n\nNext para."][kind])
        ids.append(f"d{i % 250}")  # ids 0..49 twice: the later text wins
        metas.append(None if i % 7 == 0 else {"k": i % 5, "s": f"v{i % 3}", "f": i / 7, "b": i % 2 == 0})
    return texts, ids, metas


def _table(engine: Engine) -> dict[str, Any]:
    t = engine.store.table
    live = np.flatnonzero(t.alive)
    return {
        "rows": [(t.doc_ids[k], t.positions[k], t.contents[k], t.starts[k], t.ends[k], t.tails[k],
                  int(t.seq[k]), int(t.pos[k]), t.doc_meta[int(t.row_doc[k])]) for k in live],
        "doc_rows": {d: [t.doc_ids[k] for k in r] for d, r in t.doc_rows.items()},
        "slots": {d: t.doc_meta[t.doc_slot[d]] for d in t.doc_rows},
        "vectors": engine.store.matrix[live].tobytes(),
        "keys": t.summary.keys(), "count": len(engine), "max_seq": engine.store.max_seq(),
    }


def test_the_batch_and_the_records_store_the_same_rows() -> None:
    texts, ids, metas = _corpus()
    engines = [Engine(embedder=HashEmbedder(dim=32), store=s, warm_up=False) for s in (Columnar(), RecordsOnly())]
    for e in engines:
        assert e.add_texts(texts, ids=ids, metadatas=metas, batch_size=64) == ids
        e.add_texts(texts[:40], ids=[f"d{i}" for i in range(0, 80, 2)], batch_size=16)  # replacements
        e.delete("d3")
    assert set(Columnar.seen) == {"batch"} and set(RecordsOnly.seen) == {"list"}
    batch, records = (_table(e) for e in engines)
    assert batch == records
    assert {d for d, *_ in batch["rows"]} >= {"d0", "d248"} and "d3" not in batch["slots"]
    empty = [d for d in batch["slots"] if d not in {r[0] for r in batch["rows"]}]
    assert empty  # documents with no sentence are kept (a slot, no row) and replaced like the others
    hits = [[(h.doc_id, h.position, h.content, h.metadata) for h in e.search("SELECT SENTENCE")] for e in engines]
    assert hits[0] == hits[1] and len(hits[0]) == batch["count"]


def test_the_store_keeps_a_copy_of_the_metadata() -> None:
    engine = Engine(embedder=HashEmbedder(dim=32), warm_up=False)
    metas = [{"k": i} for i in range(20)]
    engine.add_texts([f"Text {i}" for i in range(20)], ids=[str(i) for i in range(20)], metadatas=metas)
    metas[3]["k"] = "changed"
    metas[4]["new"] = 1
    got = {h.doc_id: h.metadata for h in engine.search("SELECT DOCUMENT")}
    assert got["3"] == {"k": 3} and got["4"] == {"k": 4}


BAD_METADATA: list[Any] = [
    {"": 1}, {"k": 10 ** 5000}, {"k": -(10 ** 5000)}, {"entities": "Ada"}, "not a mapping", 5,
]
ODD_METADATA: list[Any] = [
    {"k": math.nan}, {"k": math.inf}, {"k": [1, {"x": 2}]}, {"k": {"deep": True}}, {"entities": ["Ada"]},
    {"k": 2 ** 70}, {"k": -0.0}, {"k": None}, None, {}, {1: "x"},
]


@pytest.mark.parametrize("odd", ODD_METADATA)
def test_metadata_checked_by_columns_is_checked_one_by_one(odd: Any) -> None:
    metas = [{"a": i, "b": "x", "c": i / 3, "d": True} for i in range(50)] + [odd] + [{"a": 1}, None]
    assert _check_metadatas(metas) == [_check_metadata(m) for m in metas]


@pytest.mark.parametrize("bad", BAD_METADATA)
def test_bad_metadata_is_refused_with_the_same_error_and_nothing_written(bad: Any) -> None:
    metas = [{"a": i} for i in range(50)] + [bad]
    with pytest.raises((TypeError, ValueError)) as one:
        _check_metadata(bad)
    with pytest.raises(type(one.value)) as batch:
        _check_metadatas(metas)
    assert str(batch.value) == str(one.value)
    engine = Engine(embedder=HashEmbedder(dim=32), warm_up=False)
    engine.add_text("Before.", id="before")
    with pytest.raises(type(one.value)):
        engine.add_texts([f"T {i}" for i in range(51)], metadatas=metas, batch_size=8)
    assert [h.doc_id for h in engine.search("SELECT DOCUMENT")] == ["before"] and len(engine) == 1


def test_a_failed_batch_leaves_the_committed_ones_whole() -> None:
    class FailsThird(HashEmbedder):
        calls = 0

        def embed(self, texts: Any) -> Any:
            FailsThird.calls += 1
            if FailsThird.calls == 3:
                raise RuntimeError("down")
            return super().embed(texts)

    engine = Engine(embedder=FailsThird(dim=32), warm_up=False)
    with pytest.raises(EmbedderError) as info:
        engine.add_texts([f"Doc {i}. Second." for i in range(30)], ids=[str(i) for i in range(30)], batch_size=10)
    assert info.value.committed == [str(i) for i in range(20)]  # type: ignore[attr-defined]
    t = engine.store.table
    assert len(engine) == 40 and t.size == 40 and engine.store.matrix.shape == (40, 32)
    assert [h.doc_id for h in engine.search("SELECT DOCUMENT")] == [str(i) for i in range(20)]


def test_a_batch_read_as_records_is_written_from_its_records() -> None:
    """What a reader (the entity graph, BM25, a persisted store's log) set on the records is what is stored."""
    vecs = np.eye(4, dtype=np.float32)[:3]
    batch = DocBatch(["a", "b"], ["A. B.", "C."], [{}, {"x": 1}], [2, 1], [0, 1, 0], [0, 3, 0], [2, 5, 2],
                     ["A.", "B.", "C."], [" ", "", ""], vecs)
    batch.assign_seq(10)
    assert batch.columnar and [r.seq for r in batch] == [10, 11] and not batch.columnar
    batch[1].seq = 42  # as a store allocating its own numbers does
    store = MemoryStore()
    store.open(4)
    store.upsert(batch)
    assert store.table.seq.tolist() == [10, 10, 42] and store.max_seq() == 42
    assert [r.content for r in store.fetch(store.scan())] == ["A.", "B.", "C."]
    with pytest.raises(ValueError, match="one position"):
        DocBatch(["a"], ["A."], [{}], [2], [0], [0], [2], ["A."], [""], vecs[:1])


def test_replaced_ids_are_found_as_the_table_grows_and_after_a_compaction() -> None:
    """A write probes its ids in the table only where the table's id bits say they may be live (issue 21):
    every earlier id must still be found (and replaced) after the bits were rebuilt larger, after
    deletions and after a compaction."""
    engine = Engine(embedder=HashEmbedder(dim=8), warm_up=False)
    n = 20_000  # the bits are rebuilt larger several times on the way
    engine.add_texts([f"Old {i}." for i in range(n)], ids=[str(i) for i in range(n)], batch_size=1000)
    t = engine.store.table
    # more ids than the first bits (8,192 bytes) hold at ID_BITS_PER_ID each: they were rebuilt larger
    assert t.ID_BITS_PER_ID * n > 8 * 8192
    again = list(range(0, n, 7))  # old ids spread over every write, mixed with new ones
    engine.add_texts([f"New {i}." for i in again] + ["Fresh."], ids=[str(i) for i in again] + ["fresh"],
                     batch_size=500)
    for i in range(1, n, 2):  # half gone: the store compacts its rows
        engine.delete(str(i))
    assert t is engine.store.table and t.size < n + len(again)  # compacted
    engine.add_texts(["Newer 14.", "Newer 3."], ids=["14", "3"])  # live (once replaced), and deleted
    got = {h.doc_id: h.content for h in engine.search("SELECT SENTENCE")}
    want = {str(i): f"New {i}." if i % 7 == 0 else f"Old {i}." for i in range(0, n, 2)}
    want.update({"fresh": "Fresh.", "14": "Newer 14.", "3": "Newer 3."})
    assert got == want and len(engine) == len(want) == len(t)


def test_ids_are_distinct_when_their_hashes_are_and_equal_hashes_are_decided_exactly() -> None:
    class SameHash(str):
        def __hash__(self) -> int:
            return 7

    assert _distinct([str(i) for i in range(5000)]) and _distinct([]) and not _distinct(["a", "b", "a"])
    assert _distinct([SameHash("a"), SameHash("b")]) and not _distinct([SameHash("a"), SameHash("a")])
