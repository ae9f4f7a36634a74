"""Several processes on one directory store (issue 20, "stale reads across processes").

The directory store is multi-process like SQLite itself: every search sees every write committed
before it began (by any process), ``seq`` numbers are allocated inside the write transaction (never
colliding), counts are the store's, and a document another process added can be deleted here.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder

ROOT = Path(__file__).resolve().parents[2]
PER_WRITER = 200


def _engine(directory: str, dim: int = 32) -> Engine:
    return Engine(embedder=HashEmbedder(dim=dim), store=directory, warm_up=False)


def _writer(directory: str, name: str, start: Any, done: Any, out: Any) -> None:
    engine = _engine(directory)
    start.wait()
    for i in range(0, PER_WRITER, 20):  # small batches, interleaving with the other writers
        engine.add_texts([f"Writer {name} document {j}. It mentions zebra{name}." for j in range(i, i + 20)],
                         ids=[f"{name}-{j}" for j in range(i, i + 20)])
    done.wait()  # every writer has finished: now each must see everything
    hits = engine.search("SELECT DOCUMENT")
    bm25 = engine.search("SELECT SENTENCE LET k = BM25(content, 'zebraA zebraB zebraC') WHERE k > 0")
    out.put((name, len(hits), len(engine), len({h.doc_id for h in bm25})))
    engine.close()


def test_concurrent_writers_each_see_every_document(tmp_path: Path) -> None:
    directory = str(tmp_path / "store")
    _engine(directory).close()  # created once; the writers race on writes, not on creation
    ctx = mp.get_context("spawn")
    names = ["A", "B", "C"]
    start, done, out = ctx.Barrier(len(names)), ctx.Barrier(len(names)), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(directory, n, start, done, out)) for n in names]
    for p in procs:
        p.start()
    results = sorted(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(60)
    total = PER_WRITER * len(names)
    assert results == [(n, total, 2 * total, total) for n in names]
    import sqlite3

    with sqlite3.connect(Path(directory) / "nlql.sqlite") as db:
        seqs = [r[0] for r in db.execute("SELECT seq FROM docs")]
    assert len(seqs) == total and len(set(seqs)) == total  # insertion order never collides


def _run(code: str, directory: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    prelude = ("from nlql import Engine\nfrom nlql.embedders import HashEmbedder\n"
               f"e = Engine(embedder=HashEmbedder(dim=32), store={directory!r}, warm_up=False)\n")
    proc = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_an_open_engine_sees_other_processes_writes_and_deletes(tmp_path: Path) -> None:
    directory = str(tmp_path / "store")
    engine = _engine(directory)
    engine.add_texts(["Ours to keep. Two sentences.", "Ours to lose."], ids=["keep", "lose"])
    assert len(engine.search("SELECT DOCUMENT")) == 2
    # another process deletes one, replaces one and adds one while this engine stays open
    _run("print(e.delete('lose'))\ne.add_text('Theirs, new.', id='theirs')\ne.add_text('Kept, revised.', id='keep')",
         directory)
    assert {h.doc_id: h.content for h in engine.search("SELECT DOCUMENT")} == {
        "keep": "Kept, revised.", "theirs": "Theirs, new."}
    assert len(engine) == 2  # the store's count, not this process's
    assert [h.doc_id for h in engine.search("SELECT SENTENCE LET k = BM25(content, 'revised') WHERE k > 0")] \
        == ["keep"]
    assert [h.doc_id for h in engine.search("SELECT SENTENCE LET k = BM25(content, 'lose') WHERE k > 0")] == []
    # a document another process added can be deleted here, and that is reported
    assert engine.delete("theirs") is True
    assert _run("print(sorted(h.doc_id for h in e.search('SELECT DOCUMENT')))", directory) == "['keep']"
    engine.close()


def test_an_engine_writing_after_another_process_keeps_both(tmp_path: Path) -> None:
    directory = str(tmp_path / "store")
    engine = _engine(directory)
    engine.add_text("First, ours.", id="ours-1")
    _run("e.add_texts(['Theirs one.', 'Theirs two.'], ids=['t1', 't2'])", directory)
    engine.add_text("Second, ours.", id="ours-2")  # catches up first, then writes with fresh seq numbers
    assert [h.doc_id for h in engine.search("SELECT DOCUMENT")] == ["ours-1", "t1", "t2", "ours-2"]
    assert _run("print([h.doc_id for h in e.search('SELECT DOCUMENT')])", directory) == \
        "['ours-1', 't1', 't2', 'ours-2']"
    engine.close()


def test_cli_ingests_in_parallel_report_the_stores_count(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    dirs = {}
    for name, n in (("seed", 1), ("x", 300), ("y", 300)):
        d = tmp_path / name
        d.mkdir()
        for i in range(n):
            (d / f"{name}{i}.txt").write_text(f"File {name} {i}. Second sentence {i}.", encoding="utf-8")
        dirs[name] = d
    subprocess.run([sys.executable, "-m", "nlql", "ingest", str(dirs["seed"]), "--store", str(store), "--embedder",
                    "hash", "-q"], check=True, env=env, capture_output=True, timeout=300)
    procs = [subprocess.Popen([sys.executable, "-m", "nlql", "ingest", str(dirs[n]), "--store", str(store),
                               "--batch-size", "10"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in ("x", "y")]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    total = 2 * (1 + 300 + 300)
    engine = _engine(str(store), dim=384)  # the CLI's hash embedder
    assert len(engine.search("SELECT DOCUMENT")) == 601 and len(engine) == total
    engine.close()
    # the ingest that finished last reports the whole store, not only the seed and what it wrote itself
    assert any(f"now holds {total} sentences" in " ".join(out.split()) for out, _ in outs), outs


@pytest.mark.parametrize("n", [1, 3])
def test_nothing_changes_without_a_commit(tmp_path: Path, n: int) -> None:
    """The freshness check is cheap when nothing changed: searches do not reload anything."""
    directory = str(tmp_path / "store")
    engine = _engine(directory)
    engine.add_texts([f"Doc {i}." for i in range(n)], ids=[f"d{i}" for i in range(n)])
    store: Any = engine.store
    assert store.stale() is False
    engine.search("SELECT DOCUMENT")
    assert store.sync() is None
    _run("e.add_text('Elsewhere.', id='e1')", directory)
    assert store.stale() is True
    assert len(engine.search("SELECT DOCUMENT")) == n + 1
    assert store.stale() is False
    engine.close()
