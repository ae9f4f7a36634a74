"""A directory store's snapshot: its rows, float32 matrix and int8 copy kept beside the log (issue 35).

The snapshot is used when it is this store's and fits the log (the rows written since are read from the
log, as another process's writes are); it is ignored when damaged (truncated, a byte changed), another
store's, newer than the log or holding documents the log does not; a write that fails or is killed
leaves the old snapshot (or none), never a wrong one; another process sees every committed write. In
every case the answers (rows and the bits of their scores) are those of a store read from the log
alone, and the int8 copy restored from the snapshot answers as a copy built from scratch does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nlql.stores.base import DocRecord, UnitRecord
from nlql.stores.memory import MemoryStore, quant, snapshot
from tests.stores.test_memory_speed_paths import focused, unit

DIM = 48
ROOT = Path(__file__).resolve().parents[2]
needs_faiss = pytest.mark.skipif(not quant.available(), reason="the int8 copy needs faiss-cpu and numba")


@pytest.fixture(autouse=True)
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots and int8 copies from a few hundred rows (the defaults are 4,096 and 16,384)."""
    monkeypatch.setattr(MemoryStore, "SNAPSHOT_MIN_ROWS", 64)
    monkeypatch.setattr(MemoryStore, "QUANT_MIN_ROWS", 64)


def records(x: np.ndarray, start: int = 0, prefix: str = "d") -> list[DocRecord]:
    """Documents of one to three sentences (and every 50th without any), metadata with a surrogate."""
    out, i, n = [], 0, start
    while i < len(x):
        k = 0 if n % 50 == 7 else 1 + n % 3
        k = min(k, len(x) - i)
        units = [UnitRecord(p, f"s{n}.{p} \ud800 é", 0, 3, " ") for p in range(k)]
        out.append(DocRecord(f"{prefix}{n}", f"t{n}", {"n": n, "tag": f"g{n % 5}", "x": {"y": [n, "\udc00"]}},
                             units, x[i:i + k] if k else np.zeros((0, DIM), dtype=np.float32), seq=0))
        i, n = i + k, n + 1
    return out


def opened(path: Path, *, snap: bool = True) -> MemoryStore:
    s = MemoryStore(path)
    s.SNAPSHOT = snap  # type: ignore[misc]
    if s.dim is None:
        s.open(DIM)
    return s


def log_only(path: Path) -> MemoryStore:
    """The store as the log alone gives it (no snapshot read)."""
    saved = MemoryStore.SNAPSHOT
    MemoryStore.SNAPSHOT = False  # type: ignore[misc]
    try:
        return MemoryStore(path)
    finally:
        MemoryStore.SNAPSHOT = saved  # type: ignore[misc]


def answers(s: MemoryStore, qs: np.ndarray, k: int = 10) -> list[list[tuple[str, int, str, float]]]:
    """Each query's top k as (doc id, position, content, score): rows and bits, not row numbers."""
    out = []
    for got in s.knn(qs, k):
        rows = s.fetch([key for key, _ in got])
        out.append([(r.doc_id, r.position, r.content, score) for r, (_, score) in zip(rows, got)])
    return out


def everything(s: MemoryStore) -> list[tuple[Any, ...]]:
    """Every live row with its vector's bytes and its metadata, in insertion order."""
    keys = s.scan()
    vecs = s.vectors(keys)
    return [(r.doc_id, r.position, r.content, r.tail, r.start, r.end, r.seq, json.dumps(r.metadata), v.tobytes())
            for r, v in zip(s.fetch(keys), vecs)]


def same(a: MemoryStore, b: MemoryStore, qs: np.ndarray, *, opened_both: bool = True) -> None:
    """The same rows, vectors, answers; when both were just opened, the same data summary too (a store
    that wrote and deleted since keeps a summary of its own: its top values after removals)."""
    assert everything(a) == everything(b)
    assert answers(a, qs) == answers(b, qs)
    assert a.max_seq() == b.max_seq()
    if opened_both:
        assert a.describe_data(0) == b.describe_data(0)
    assert sorted(a.table.doc_rows) == sorted(b.table.doc_rows)


def written(tmp_path: Path, n: int = 900, seed: int = 0) -> tuple[Path, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = focused(rng, n, DIM)
    path = tmp_path / "store"
    s = opened(path)
    s.upsert(records(x))
    s.close()
    return path, x, unit(rng.standard_normal((4, DIM)))


def test_the_snapshot_is_used_when_fresh(tmp_path: Path) -> None:
    path, _, qs = written(tmp_path)
    assert (path / snapshot.FILE_NAME).exists()
    s = opened(path)
    assert s.opened_from == "snapshot"
    assert not s._matrix.flags.owndata  # the mapped file, not a copy  # noqa: SLF001
    same(s, log_only(path), qs)


def test_rows_written_and_deleted_since_are_read_from_the_log(tmp_path: Path) -> None:
    path, x, qs = written(tmp_path)
    other = opened(path, snap=False)  # another writer that keeps no snapshot
    rng = np.random.default_rng(5)
    other.upsert(records(unit(rng.standard_normal((40, DIM))), start=3))  # rewrites d3.. (new seq)
    other.upsert(records(unit(rng.standard_normal((30, DIM))), start=5000))
    other.delete(["d10", "d11", "d400"])
    s = opened(path)
    assert s.opened_from == "snapshot + log"
    same(s, log_only(path), qs)
    # and the store goes on as any other: a write, a compaction, a reload
    s.upsert(records(unit(rng.standard_normal((5, DIM))), start=9000))
    s.delete([f"d{i}" for i in range(0, 600)])
    same(s, log_only(path), qs, opened_both=False)


@needs_faiss
def test_the_kept_int8_copy_is_restored_not_encoded_and_answers_as_a_new_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _, qs = written(tmp_path, n=3000)
    head = snapshot.stamp(path / snapshot.FILE_NAME)
    assert head is not None and "int8.codes" in head["arrays"]
    fresh = log_only(path)
    assert fresh.build_int8()
    expected = answers(fresh, qs)
    assert "int8" in fresh.last_stats["scan"]

    def no_encoding(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the kept copy was encoded again")

    monkeypatch.setattr(quant, "new_copy", no_encoding)
    s = opened(path)
    assert s.build_int8()
    assert answers(s, qs) == expected and "int8" in s.last_stats["scan"]
    # rows written after: encoded into the restored copy, answers still those of a copy built anew
    rng = np.random.default_rng(9)
    s.upsert(records(unit(rng.standard_normal((20, DIM))), start=7000))
    monkeypatch.undo()
    again = log_only(path)
    assert again.build_int8()
    assert answers(s, qs) == answers(again, qs)


@needs_faiss
def test_the_int8_copy_is_ready_when_the_write_returns(tmp_path: Path) -> None:
    path, _, qs = written(tmp_path, n=3000)
    s = opened(path)
    rng = np.random.default_rng(2)
    s.upsert(records(unit(rng.standard_normal((2000, DIM))), start=10_000))  # due: a new snapshot
    assert "int8_bytes_per_vector" in s.memory_stats() and s._build is None  # noqa: SLF001
    s.knn(s.vectors([5, 2500]), 10)  # (queries near rows: certified by the int8 scan)
    assert "int8" in s.last_stats["scan"] and "int8" not in s.last_stats  # (no "building" note)


@needs_faiss
def test_a_snapshot_of_a_store_with_dead_rows_keeps_the_live_ones_in_the_logs_order(tmp_path: Path) -> None:
    """Documents rewritten and deleted (dead rows, not compacted): the snapshot's rows, codes and
    outliers are the live rows', renumbered in the order a fresh load gives them."""
    path, _, qs = written(tmp_path, n=3000)
    s = opened(path)
    assert s.build_int8()
    rng = np.random.default_rng(12)
    # rewritten with rows far from the others (outliers of the kept quantiser) and deleted
    s.upsert(records(unit(rng.standard_normal((300, DIM)) * np.linspace(0.1, 3, DIM)), start=100))
    s.delete([f"d{i}" for i in range(700, 760)])
    assert s.table.size > len(s.table) and s._quant is not None  # noqa: SLF001
    assert len(s._quant.outliers()) > 0  # noqa: SLF001
    assert s.keep_snapshot(force=True)
    again = opened(path)
    assert again.opened_from == "snapshot" and again.table.size == len(again.table)
    fresh = log_only(path)
    same(again, fresh, qs)
    assert again.build_int8() and fresh.build_int8()
    probes = np.concatenate([qs, again.vectors([0, 50, 400])])
    assert answers(again, probes) == answers(fresh, probes) == answers(s, probes)
    assert "int8" in again.last_stats["scan"]
    # the same rows are outliers, under their new numbers
    ours = s._quant._all_outliers()  # noqa: SLF001
    ours = ours[s.table.alive[ours]]
    kept = again._quant._all_outliers()  # noqa: SLF001
    assert {(r.doc_id, r.position) for r in s.fetch(ours)} == {(r.doc_id, r.position) for r in again.fetch(kept)}


def restamp(path: Path, **changes: Any) -> None:
    """Rewrite the snapshot at ``path`` with its own arrays and another stamp."""
    head = snapshot.stamp(path)
    assert head is not None
    snap = snapshot.read(path, ident=head["identity"], dim=head["dim"])
    assert snap is not None
    stamp = {"ident": head["identity"], "clock": snap.clock, "rows": snap.rows, "dim": snap.dim, "meta": snap.meta}
    stamp.update(changes)
    arrays = {name: (np.array(a), None) for name, a in snap.arrays.items()}
    assert snapshot.write(path, arrays, **stamp)


def damage_truncated(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) - 100)


def damage_byte(path: Path) -> None:
    head = snapshot.stamp(path)
    assert head is not None
    spec = head["arrays"]["row.contents"]
    at = os.path.getsize(path) - sum(s["nbytes"] + (-s["nbytes"] % 64) for s in head["arrays"].values())
    with open(path, "r+b") as fh:
        fh.seek(at + spec["offset"] + 5)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0x01]))


@pytest.mark.parametrize(("damage", "why"), [
    (damage_truncated, "damaged"),
    (damage_byte, "damaged"),
    (lambda p: restamp(p, ident="another store"), "damaged or not this store's"),
    (lambda p: restamp(p, dim=DIM + 1), "damaged or not this store's"),
    (lambda p: restamp(p, clock=10**6), "newer than the log"),
    (lambda p: p.write_bytes(b"NLQLSNAP" + b"\xff" * 40), "damaged"),
])
def test_a_damaged_or_wrong_snapshot_is_ignored(tmp_path: Path, damage: Any, why: str) -> None:
    path, _, qs = written(tmp_path)
    damage(path / snapshot.FILE_NAME)
    s = opened(path)
    assert s.opened_from.startswith("log: ") and why in s.opened_from
    same(s, log_only(path), qs)


def test_a_snapshot_of_documents_the_log_does_not_hold_is_ignored(tmp_path: Path) -> None:
    """The log put back from a copy taken before the snapshot, then written again past its clock: the
    snapshot's documents are not the log's (other ids at those seq numbers), so it is not taken for them.
    (A snapshot whose documents have the log's ids and seq numbers but other vectors, stamped with this
    store's identity, cannot be told apart without reading every vector: the identity and the clock
    guard against that.)"""
    path, _, qs = written(tmp_path)
    backup = (path / "nlql.sqlite").read_bytes()
    s = opened(path)
    rng = np.random.default_rng(3)
    s.upsert(records(unit(rng.standard_normal((600, DIM))), start=50_000))
    s.close()
    for name in ("nlql.sqlite-wal", "nlql.sqlite-shm"):
        (path / name).unlink(missing_ok=True)
    (path / "nlql.sqlite").write_bytes(backup)
    assert opened(path).opened_from == "log: the snapshot is newer than the log"
    w = opened(path, snap=False)
    w.upsert(records(unit(rng.standard_normal((600, DIM))), start=60_000))
    w.close()
    s = opened(path)
    assert s.opened_from == "log: the snapshot's documents do not match the log's"
    same(s, log_only(path), qs)


def test_a_failed_write_keeps_the_old_snapshot_and_every_document(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _, qs = written(tmp_path)
    before = (path / snapshot.FILE_NAME).read_bytes()
    s = opened(path)

    def full_disk(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    rng = np.random.default_rng(4)
    s.upsert(records(unit(rng.standard_normal((600, DIM))), start=20_000))  # due, but cannot be written
    monkeypatch.undo()
    assert (path / snapshot.FILE_NAME).read_bytes() == before
    assert not list(path.glob(".*.tmp"))
    again = opened(path)
    assert again.opened_from == "snapshot + log"
    same(again, log_only(path), qs)
    same(again, s, qs, opened_both=False)


KILLED = textwrap.dedent("""
    import os, sys
    import numpy as np
    from nlql.stores.memory import MemoryStore, snapshot
    from tests.stores.test_snapshot import DIM, records, unit
    MemoryStore.SNAPSHOT_MIN_ROWS = 64
    MemoryStore.QUANT_MIN_ROWS = 64
    real = snapshot._write_rows
    def write_rows(fh, arr, order):  # the matrix half written, then the process is killed
        if arr.ndim == 2 and arr.dtype == np.float32 and arr.shape[1] == DIM:
            fh.write(np.ascontiguousarray(arr[: len(arr) // 2]).data)
            fh.flush()
            print("killed", flush=True)
            os._exit(9)
        real(fh, arr, order)
    snapshot._write_rows = write_rows
    s = MemoryStore(sys.argv[1])
    if s.dim is None:
        s.open(DIM)
    s.upsert(records(unit(np.random.default_rng(int(sys.argv[2])).standard_normal((900, DIM))), start=int(sys.argv[2])))
""")


@pytest.mark.parametrize("first", [True, False], ids=["no snapshot yet", "an old snapshot"])
def test_a_write_killed_midway_leaves_the_old_snapshot_or_none(tmp_path: Path, first: bool) -> None:
    if first:
        path, qs = tmp_path / "store", unit(np.random.default_rng(1).standard_normal((4, DIM)))
        before = None
    else:
        path, _, qs = written(tmp_path)
        before = (path / snapshot.FILE_NAME).read_bytes()
    done = subprocess.run([sys.executable, "-c", KILLED, str(path), "100000"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 9 and "killed" in done.stdout, done.stderr
    assert list(path.glob(".vectors.snap.*.tmp"))  # the half-written file, which nothing reads
    if before is None:
        assert not (path / snapshot.FILE_NAME).exists()
    else:
        assert (path / snapshot.FILE_NAME).read_bytes() == before
    s = opened(path)
    assert s.opened_from == ("log" if first else "snapshot + log")
    assert len(s.table.doc_rows) == len(log_only(path).table.doc_rows) > 0  # the killed write's documents committed
    same(s, log_only(path), qs)
    # the next snapshot written removes the dead writer's file
    assert s.keep_snapshot(force=True)
    assert not list(path.glob(".vectors.snap.*.tmp"))
    assert opened(path).opened_from == "snapshot"


TWO = textwrap.dedent("""
    import json, sys
    import numpy as np
    from nlql.stores.memory import MemoryStore
    from tests.stores.test_snapshot import DIM, answers, records, unit
    MemoryStore.SNAPSHOT_MIN_ROWS = 64
    MemoryStore.QUANT_MIN_ROWS = 64
    s = MemoryStore(sys.argv[1])
    qs = np.load(sys.argv[3])
    if sys.argv[2] == "write":
        s.upsert(records(unit(np.random.default_rng(8).standard_normal((50, DIM))), start=30_000))
        s.delete(["d1", "d2"])
    print(json.dumps({"from": s.opened_from, "answers": answers(s, qs), "docs": len(s.table.doc_rows)}))
""")


def _child(path: Path, what: str, qs: np.ndarray) -> dict[str, Any]:
    np.save(path.parent / "qs.npy", qs)
    done = subprocess.run([sys.executable, "-c", TWO, str(path), what, str(path.parent / "qs.npy")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1], object_hook=None)


def test_two_processes_see_each_others_writes(tmp_path: Path) -> None:
    path, _, qs = written(tmp_path)
    s = opened(path)
    assert s.opened_from == "snapshot"
    child = _child(path, "write", qs)  # another process: opens from the snapshot, writes (not due: none kept)
    assert child["from"] == "snapshot"
    assert s.stale()
    s.sync()  # this process catches up as before
    mine = answers(s, qs)
    assert [[list(r) for r in q] for q in mine] == child["answers"]
    assert len(s.table.doc_rows) == child["docs"]
    # a third process opening now: the snapshot, then both writes from the log
    third = _child(path, "read", qs)
    assert third["from"] == "snapshot + log" and third["answers"] == child["answers"]
    # this process writes enough for a new snapshot; the other process reads it
    rng = np.random.default_rng(6)
    s.upsert(records(unit(rng.standard_normal((600, DIM))), start=40_000))
    assert snapshot.stamp(path / snapshot.FILE_NAME)["clock"] == s._clock  # noqa: SLF001
    fourth = _child(path, "read", qs)
    assert fourth["from"] == "snapshot"
    assert fourth["answers"] == [[list(r) for r in q] for q in answers(s, qs)]
    same(s, log_only(path), qs, opened_both=False)


def test_an_ann_store_and_a_store_in_ram_keep_no_snapshot(tmp_path: Path) -> None:
    s = MemoryStore()
    s.open(DIM)
    s.upsert(records(unit(np.random.default_rng(0).standard_normal((300, DIM)))))
    assert not s.keep_snapshot(force=True)
    pytest.importorskip("hnswlib")
    from nlql.stores.hnswlib import HnswlibStore

    h = HnswlibStore(tmp_path / "h")
    h.open(DIM)
    h.upsert(records(unit(np.random.default_rng(0).standard_normal((300, DIM)))))
    h.close()
    assert not (tmp_path / "h" / snapshot.FILE_NAME).exists()


def test_an_engine_writes_one_snapshot_per_add_texts_and_answers_the_same_over_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nlql import Engine
    from nlql.embedders import HashEmbedder

    writes: list[int] = []
    real = snapshot.write

    def counted(*args: Any, **kwargs: Any) -> bool:
        writes.append(kwargs["rows"])
        return real(*args, **kwargs)

    monkeypatch.setattr(snapshot, "write", counted)
    path = tmp_path / "s"
    texts = [f"Note {i} about topic {i % 13}. It mentions item {i % 7} twice." for i in range(600)]
    metas = [{"topic": i % 13, "odd": bool(i % 2)} for i in range(600)]
    with Engine(embedder=HashEmbedder(dim=64), store=MemoryStore(path), warm_up=False) as e:
        e.add_texts(texts, ids=[str(i) for i in range(600)], metadatas=metas, batch_size=100)
        assert len(writes) == 1  # at the end of the call, not after each of its six batches
        if quant.available():  # the copy made before the snapshot: ready when add_texts returns
            assert "int8_bytes_per_vector" in e.store.memory_stats()
        e.delete("5")
    queries = ['SELECT SENTENCE LET rel = SIMILARITY(content, "topic 7 item") ORDER BY rel DESC LIMIT 8',
               'SELECT SENTENCE LET kw = BM25(content, "item twice") ORDER BY kw DESC LIMIT 8',
               'SELECT SENTENCE LET rel = SIMILARITY(content, "topic 3") WHERE meta.odd == true '
               'ORDER BY rel DESC LIMIT 5',
               'SELECT DOCUMENT LET rel = SIMILARITY(content, "item 4") ORDER BY rel DESC LIMIT 4']

    def run(store: MemoryStore) -> list[list[tuple[Any, ...]]]:
        with Engine(embedder=HashEmbedder(dim=64), store=store, warm_up=False) as e:
            assert isinstance(e.store, MemoryStore)
            out = [e.store.opened_from]
            for q in queries:
                out.append([(h.id, h.doc_id, h.content, json.dumps(h.scores), json.dumps(h.metadata))
                            for h in e.search(q)])
            return out

    over_snapshot = run(MemoryStore(path))
    over_log = run(log_only(path))
    assert over_snapshot[0] == "snapshot + log" and over_log[0] == "log"  # (the delete: not due, read from the log)
    assert over_snapshot[1:] == over_log[1:]
