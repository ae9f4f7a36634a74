"""Crash safety: a writer killed with SIGKILL at random points never loses or tears a document.

A child process (crash_child.py) ingests, replaces and deletes documents, printing the index of each
operation after the engine acknowledged it; the parent kills it at a random moment. After each kill the
store is reopened and must hold exactly the state after the acknowledged operations — or after one more,
the one in flight when the kill landed (its write may have committed before the acknowledgement was
printed) — with every document whole: its text, its metadata, all its sentences once each in order.
Then the parent ingests one more document, proving the store still takes writes. Rounds accumulate in
one store, so every reopen also re-checks what earlier rounds left.

CI: 20 rounds on the persistent built-in store, 5 on pgvector; ``NLQL_DEEP=1``/``--deep``: 10 stores of
20 rounds, and 30 on pgvector.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from crash_child import apply, metadata_of, operations, text_of
from relhelp import deep_mode, same

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.text.split import split_sentences

CHILD = Path(__file__).with_name("crash_child.py")
ROOT = Path(__file__).resolve().parents[2]


def _spawn(store: str, round_no: int, seed: int) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return subprocess.Popen([sys.executable, str(CHILD), store, str(round_no), str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _run_and_kill(store: str, round_no: int, seed: int, rng: random.Random) -> tuple[int, bool]:
    """Start a writer, kill it at a random point; returns (operations acknowledged, finished)."""
    proc = _spawn(store, round_no, seed)
    assert proc.stdout is not None
    lines: list[str] = []
    wait_for = rng.choice([0, 0, 1, 2, 4, 8, 16, 32])
    while len(lines) < wait_for:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
    time.sleep(rng.uniform(0, 0.03))
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    lines += proc.stdout.read().splitlines()  # through the same buffer readline() filled
    proc.wait(timeout=120)
    err = proc.stderr.read() if proc.stderr is not None else ""
    finished = "done" in (s.strip() for s in lines)
    if not finished:
        assert proc.returncode == -signal.SIGKILL, f"the writer failed on its own:\n{err}"
    acked = [int(s) for s in lines if s.strip() and s.strip() != "done"]
    assert acked == list(range(len(acked)))
    return len(acked), finished


def _read_state(engine: Engine) -> dict[str, int]:
    """doc_id → version of what the store holds, checking that every document is whole."""
    docs = engine.search("SELECT DOCUMENT")
    rows = engine.search("SELECT SENTENCE")
    by_doc: dict[str, list[Any]] = {}
    for r in rows:
        by_doc.setdefault(r.doc_id, []).append(r)
    state: dict[str, int] = {}
    for hit in docs:
        assert hit.doc_id not in state, f"document {hit.doc_id} twice"
        version = hit.metadata.get("version")
        assert isinstance(version, int), hit.metadata
        text = text_of(hit.doc_id, version)
        assert hit.content == text, f"{hit.doc_id}: torn or stale text"
        assert same(hit.metadata, metadata_of(hit.doc_id, version)), hit.metadata
        got = sorted(by_doc.get(hit.doc_id, []), key=lambda r: r.position)
        want = [text[s:e] for s, e in split_sentences(text)]
        assert [r.position for r in got] == list(range(len(want))), f"{hit.doc_id}: missing or duplicate sentences"
        assert [r.content for r in got] == want
        assert all(same(r.metadata, hit.metadata) for r in got)
        state[hit.doc_id] = version
    assert set(by_doc) == set(state), "sentences without their document"
    assert len(engine) == len(rows)
    return state


SCORED = {
    "k": 'SELECT SENTENCE LET k = BM25(content, "alpha river tools") WHERE k > 0',
    "s": 'SELECT SENTENCE LET s = SIMILARITY(content, "agents talk about solar gamma")',
}


def _check_scores(engine: Engine, state: dict[str, int]) -> None:
    """BM25 statistics and stored vectors agree with a fresh in-RAM engine holding the same documents."""
    reference = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    ids = sorted(state)
    reference.add_texts([text_of(d, state[d]) for d in ids], ids=ids,
                        metadatas=[metadata_of(d, state[d]) for d in ids])
    for name, q in SCORED.items():
        got = {h.id: h.scores[name] for h in engine.search(q)}
        want = {h.id: h.scores[name] for h in reference.search(q)}
        assert got.keys() == want.keys(), name
        assert all(abs(got[i] - want[i]) < 1e-5 for i in want), name


def _check_round(engine: Engine, before: dict[str, int], round_no: int, seed: int, acked: int) -> dict[str, int]:
    ops = operations(round_no, seed)
    after = dict(before)
    for op in ops[:acked]:
        after = apply(after, op)
    allowed = [after]
    if acked < len(ops):
        allowed.append(apply(after, ops[acked]))
    state = _read_state(engine)
    if round_no % 4 == 3:  # a full rescore is slower than the rest of a round: every fourth round
        _check_scores(engine, state)
    assert state in allowed, (
        f"round {round_no}: {acked} operations acknowledged; store differs from the expected state: "
        f"missing {sorted(set(after) - set(state))[:5]}, extra {sorted(set(state) - set(allowed[-1]))[:5]}, "
        f"versions {[(d, state[d], after.get(d)) for d in state if state[d] != after.get(d)][:5]}"
    )
    return state


def _crash_rounds(open_engine: Any, store: str, rounds: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    state: dict[str, int] = {}
    stats = {"rounds": 0, "mid_run_kills": 0, "acknowledged": 0}
    for round_no in range(rounds):
        child_seed = rng.randrange(2**31)
        acked, finished = _run_and_kill(store, round_no, child_seed, rng)
        engine = open_engine()
        try:
            state = _check_round(engine, state, round_no, child_seed, acked)
            # the reopened store takes writes: one more document, checked on the next reopen
            extra = f"after-{round_no}"
            engine.add_text(text_of(extra, 0), id=extra, metadata=metadata_of(extra, 0))
            state[extra] = 0
            assert _read_state(engine) == state
        finally:
            engine.close()
        stats["rounds"] += 1
        stats["mid_run_kills"] += not finished
        stats["acknowledged"] += acked
    return stats


def test_sigkill_persistent_builtin_store(tmp_path: Path, deep: bool) -> None:
    # deep mode: 10 stores of 20 rounds each (one store of 200 would spend its time re-reading itself)
    for store_no in range(10 if deep_mode(deep) else 1):
        directory = tmp_path / f"store{store_no}"

        def reopen(directory: Path = directory) -> Engine:
            return Engine(embedder=HashEmbedder(dim=64), store=str(directory), warm_up=False)

        stats = _crash_rounds(reopen, str(directory), 20, seed=20240601 + store_no)
        assert stats["rounds"] == 20
        assert stats["mid_run_kills"] >= 10, stats
        assert stats["acknowledged"] > 0, stats
        with sqlite3.connect(directory / "nlql.sqlite") as db:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_sigkill_pgvector(pg_dsn: str, deep: bool) -> None:
    pytest.importorskip("psycopg")
    rounds = 30 if deep_mode(deep) else 5

    def reopen() -> Engine:
        return Engine(embedder=HashEmbedder(dim=64), store=pg_dsn, warm_up=False)

    stats = _crash_rounds(reopen, pg_dsn, rounds, seed=77)
    assert stats["rounds"] == rounds and stats["mid_run_kills"] >= 1, stats
