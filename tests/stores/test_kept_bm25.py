"""The engine's BM25 index over the built-in store: built at ingest, kept in the directory (issues 34, 35).

The first BM25 query after an ``add_texts`` finds the index built (it follows every write), and a fresh
process on a directory store loads the index the last ingest kept beside the SQLite log instead of
reading every sentence again. The kept file is a cache: the same answers as an index built from the rows,
whatever happened after it was written (another engine's writes and deletes are applied from the log), and
a file that is missing, truncated, half-written or of another store is not read (the index is built).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.stores.memory import MemoryStore, kept

DIM = 32
WORDS = ["solar", "wind", "grid", "policy", "energy", "carbon", "tax", "river", "coal", "storage"]
QUERIES = ['SELECT SENTENCE LET kw = BM25(content, "solar energy policy") ORDER BY kw DESC LIMIT 10',
           'SELECT SENTENCE LET kw = BM25(content, "carbon tax") WHERE meta.n < 40 ORDER BY kw DESC LIMIT 5',
           'SELECT SENTENCE LET kw = BM25(content, "grid storage"), rel = SIMILARITY(content, "wind") '
           'ORDER BY rrf(kw, rel) DESC LIMIT 8']


def corpus(n: int, seed: int = 0) -> tuple[list[str], list[dict[str, Any]]]:
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=6)) + ". " + " ".join(rng.choice(WORDS, size=4)) + "."
             for _ in range(n)]
    return texts, [{"n": i} for i in range(n)]


def engine(path: Path | None) -> Engine:
    return Engine(embedder=HashEmbedder(dim=DIM), store="memory" if path is None else str(path), warm_up=False)


def answers(e: Engine) -> list[list[tuple[str, Any]]]:
    return [[(h.id, h.scores) for h in e.search(q)] for q in QUERIES]


def kept_files(path: Path) -> list[Path]:
    return sorted(path.glob("bm25-*.npz"))


def fresh_rebuilt(path: Path, tmp: Path) -> list[list[tuple[str, Any]]]:
    """The answers of an index built from the rows: a copy of the store without its kept file."""
    copy = tmp / "rebuilt"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(path, copy)
    for f in kept_files(copy):
        f.unlink()
    e = engine(copy)
    try:
        return answers(e)
    finally:
        e.close()


def no_scan(e: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail if the engine's BM25 indexes the store's rows (more than a few written since the kept file)."""
    add = e._bm25._add_rows  # noqa: SLF001

    def few(items: Any) -> Any:
        if len(items) > 5:
            raise AssertionError(f"the BM25 index was built from the rows ({len(items)})")
        return add(items)

    monkeypatch.setattr(e._bm25, "_add_rows", few)  # noqa: SLF001


@pytest.mark.parametrize("where", ["ram", "directory"])
def test_the_index_is_built_at_ingest(where: str, tmp_path: Path) -> None:
    e = engine(None if where == "ram" else tmp_path / "s")
    texts, metas = corpus(300)
    ids = [str(i) for i in range(300)]
    e.add_texts(texts[:200], ids=ids[:200], metadatas=metas[:200], batch_size=64)
    assert e._bm25.built  # noqa: SLF001 - the first BM25 query builds nothing
    e.add_texts(texts[200:], ids=ids[200:], metadatas=metas[200:], batch_size=64)
    e.delete("3")
    got = answers(e)
    fresh = engine(None)
    fresh.add_texts(texts, ids=ids, metadatas=metas)
    fresh.delete("3")
    assert got == answers(fresh)


def test_a_fresh_process_loads_the_kept_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s"
    e = engine(path)
    texts, metas = corpus(400)
    e.add_texts(texts, metadatas=metas, batch_size=100)
    want = answers(e)
    e.close()
    assert len(kept_files(path)) == 1
    again = engine(path)
    no_scan(again, monkeypatch)
    assert answers(again) == want
    monkeypatch.undo()
    assert fresh_rebuilt(path, tmp_path) == want


def test_writes_after_the_kept_index_are_applied_from_the_log(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s"
    texts, metas = corpus(400)
    e = engine(path)
    e.add_texts(texts[:300], ids=[str(i) for i in range(300)], metadatas=metas[:300], batch_size=100)
    before = kept_files(path)[0].read_bytes()
    # after the file was written: deletes (not kept) and, from a second engine, a replacement
    for i in range(0, 300, 7):
        e.delete(str(i))
    other = engine(path)
    other.add_texts([texts[350]], ids=["5"], metadatas=[metas[5]])
    assert kept_files(path)[0].read_bytes() != before  # (the other engine's ingest kept its own)
    kept_files(path)[0].write_bytes(before)  # the older file back: the log has moved on since
    want = fresh_rebuilt(path, tmp_path)
    fresh = engine(path)
    no_scan(fresh, monkeypatch)
    assert answers(fresh) == want
    monkeypatch.undo()
    # the first engine follows the other's write as it always did
    assert answers(e) == want


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "other store"])
def test_a_bad_kept_file_is_not_read(damage: str, tmp_path: Path) -> None:
    path = tmp_path / "s"
    texts, metas = corpus(200)
    e = engine(path)
    e.add_texts(texts, metadatas=metas)
    want = answers(e)
    e.close()
    f = kept_files(path)[0]
    if damage == "truncated":
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    elif damage == "garbage":
        f.write_bytes(os.urandom(4096))
    elif damage == "empty":
        f.write_bytes(b"")
    else:  # a store deleted and made again with other rows, and an old file put beside it
        saved = f.read_bytes()
        shutil.rmtree(path)
        other = engine(path)
        other.add_texts(texts[:50], metadatas=metas[:50])
        want = answers(other)
        other.close()
        kept_files(path)[0].write_bytes(saved)
    again = engine(path)
    assert answers(again) == want


def test_a_failed_kept_write_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s"
    texts, metas = corpus(300)
    e = engine(path)
    e.add_texts(texts[:200], metadatas=metas[:200])
    old = kept_files(path)[0].read_bytes()

    def broken(fh: Any, **arrays: Any) -> None:
        fh.write(b"PK\x03\x04 half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(kept.np, "savez", broken)
    e.add_texts(texts[200:], metadatas=metas[200:])  # the ingest itself succeeds
    monkeypatch.undo()
    assert kept_files(path)[0].read_bytes() == old
    assert not list(path.glob(".*.tmp"))
    want = answers(e)
    e.close()
    assert answers(engine(path)) == want  # the old file and the log's later rows


def test_a_read_only_store_keeps_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s"
    texts, metas = corpus(100)
    e = engine(path)
    e.add_texts(texts, metadatas=metas)
    e.close()
    for f in kept_files(path):
        f.unlink()
    store = MemoryStore(path)
    store._log.read_only = True  # noqa: SLF001 - (a read-only medium)
    assert store.keep_keyword_state("k", {"a": np.zeros(1)}) is False
    store.close()
