"""Corrupt, foreign and odd files under a directory store, read-only media and full disks (issue 20).

- Every failure to open a directory store is a ``BackendError`` naming the path (and the CLI prints it).
- One bad row does not make the rest unreadable: the other documents load, the damaged ids are reported.
- A store on a read-only medium opens read-only and can be searched; a write says why it cannot.
- A full disk reports SQLite's own reason ("database or disk is full") and leaves the store as it was.
- A SQLite file that is not an NLQL store is refused and left byte-for-byte untouched; ``store=""`` too.

The read-only and full-disk tests use a real tmpfs mounted in a private mount namespace
(``unshare --mount``) when run as root, and file permissions otherwise.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.errors import BackendError, NLQLError

ROOT = Path(__file__).resolve().parents[2]
DIM = 32


def _engine(store: Any) -> Engine:
    return Engine(embedder=HashEmbedder(dim=DIM), store=store, warm_up=False)


def _ids(engine: Engine) -> list[str]:
    return [h.doc_id for h in engine.search("SELECT DOCUMENT")]


def _make_store(path: Path, n: int = 6) -> Path:
    engine = _engine(str(path))
    engine.add_texts([f"Document {i}. Second sentence {i}." for i in range(n)], ids=[f"d{i}" for i in range(n)],
                     metadatas=[{"i": i} for i in range(n)])
    engine.close()
    return path


def _refused(store: Any, *needles: str) -> BackendError:
    with pytest.raises(BackendError) as info:
        _engine(store)
    for needle in needles:
        assert needle in str(info.value), str(info.value)
    return info.value


# ------------------------------------------------------------------------------------ open failures


def test_every_open_failure_is_a_backend_error_naming_the_path(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    _refused(str(a_file), str(a_file), "not a directory")

    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "nlql.sqlite").write_bytes(b"this is not a database " * 100)
    _refused(str(garbage), str(garbage), "not a database")

    a_dir = tmp_path / "dir-db"
    (a_dir / "nlql.sqlite").mkdir(parents=True)
    _refused(str(a_dir), str(a_dir), "not a file")

    torn = _make_store(tmp_path / "torn", n=200)
    blob = (torn / "nlql.sqlite").read_bytes()
    (torn / "nlql.sqlite").write_bytes(blob[: len(blob) // 2] + b"\x00" * 4096)
    _refused(str(torn), str(torn))

    bad_width = _make_store(tmp_path / "bad-width")
    with sqlite3.connect(bad_width / "nlql.sqlite") as db:
        db.execute("UPDATE info SET value = '64' WHERE key = 'dim'")
    _refused(str(bad_width), str(bad_width), "64-dimensional", str(DIM))


def test_the_cli_prints_the_open_failure(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "nlql.sqlite").write_bytes(b"\x00garbage" * 64)
    from cli_inprocess import nlql  # in process: an uncaught exception would still print its traceback

    proc = nlql("query", "SELECT SENTENCE", "--store", str(garbage), "--embedder", "hash", cwd=tmp_path)
    assert proc.returncode == 1
    assert "not a database" in proc.stderr and str(garbage) in proc.stderr.replace("\n", "")
    assert "Traceback" not in proc.stderr


def test_empty_store_name_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(NLQLError, match="names no store"):
        _engine("")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("schema", [
    ["CREATE TABLE users (name TEXT)", "INSERT INTO users VALUES ('x')"],
    # our table names, other columns: still not ours
    ["CREATE TABLE docs (id INTEGER, body TEXT)", "CREATE TABLE info (k, v)", "INSERT INTO docs VALUES (1, 'x')"],
])
def test_a_foreign_sqlite_file_is_refused_untouched(tmp_path: Path, schema: list[str]) -> None:
    directory = tmp_path / "foreign"
    directory.mkdir()
    path = directory / "nlql.sqlite"
    with sqlite3.connect(path) as db:
        for sql in schema:
            db.execute(sql)
    before = path.read_bytes()
    _refused(str(directory), str(directory), "not an NLQL store", "untouched")
    assert path.read_bytes() == before
    assert sorted(p.name for p in directory.iterdir()) == ["nlql.sqlite"]  # no -wal, no -shm
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_an_nlql_file_with_unknown_tables_is_not_taken_over(tmp_path: Path) -> None:
    store = _make_store(tmp_path / "store")
    with sqlite3.connect(store / "nlql.sqlite") as db:
        db.execute("CREATE TABLE mine (x)")
    _refused(str(store), "mine", "untouched")


# ------------------------------------------------------------------------------------ damaged rows


@pytest.mark.parametrize(("column", "value"), [
    ("metadata", "{not json"),
    ("metadata", "[1, 2]"),
    ("vectors", b"\x00\x01\x02"),
    ("units", "[[0, 1]]"),
    ("units", "{broken"),
    ("dim", "abc"),
    ("dim", "7"),
    ("text", b"\xff\xfe not utf-8"),
])
def test_one_bad_row_leaves_the_others_readable(tmp_path: Path, column: str, value: Any) -> None:
    store = _make_store(tmp_path / "store")
    with sqlite3.connect(store / "nlql.sqlite") as db:
        db.execute(f"UPDATE docs SET {column} = ? WHERE doc_id = 'd3'", (value,))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine = _engine(str(store))
    assert _ids(engine) == ["d0", "d1", "d2", "d4", "d5"]
    assert list(engine.store.damaged) == ["d3"]  # type: ignore[attr-defined]
    assert any("d3" in str(w.message) and "damaged" in str(w.message) for w in caught)
    engine.add_text("Document 3 again. Rewritten.", id="d3")  # rewriting the id repairs it
    engine.close()
    again = _engine(str(store))
    assert _ids(again) == ["d0", "d1", "d2", "d4", "d5", "d3"] and not again.store.damaged  # type: ignore[attr-defined]
    again.close()


# ------------------------------------------------------------------------------------ media


def _can_mount() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


def _in_namespace(script: str, tmp_path: Path, size: str) -> str:
    """Run ``script`` (Python; ``MNT`` is a fresh tmpfs of ``size``) in a private mount namespace."""
    mnt = tmp_path / "mnt"
    mnt.mkdir(exist_ok=True)
    child = tmp_path / "child.py"
    child.write_text(f"MNT = {str(mnt)!r}\n" + textwrap.dedent(script), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(["unshare", "--mount", "sh", "-c",
                           f"mount -t tmpfs -o size={size} tmpfs {mnt} && {sys.executable} {child}"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


_RO_SCRIPT = """
import os, subprocess, sys
from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.errors import BackendError
store = MNT + "/store"
writer = f'''
import os
from nlql import Engine
from nlql.embedders import HashEmbedder
e = Engine(embedder=HashEmbedder(dim=32), store={store!r}, warm_up=False)
e.add_texts(["Alpha one. Alpha two.", "Beta."], ids=["a", "b"])
if {CRASH}:
    os._exit(0)  # -wal and -shm stay behind, as after a crash
e.close()
'''
subprocess.run([sys.executable, "-c", writer], check=True)
subprocess.run(["mount", "-o", "remount,ro", MNT], check=True)
e = Engine(embedder=HashEmbedder(dim=32), store=store, warm_up=False)
print("read_only", e.store.read_only)
print("docs", [h.doc_id for h in e.search("SELECT DOCUMENT")])
print("similar", [h.doc_id for h in e.search("SELECT SENTENCE LET r = SIMILARITY(content, 'alpha') LIMIT 1")])
try:
    e.add_text("Refused.", id="c")
except BackendError as exc:
    print("write", "read-only" in str(exc) and store in str(exc))
"""


@pytest.mark.parametrize("crash", [False, True])
def test_a_store_on_a_read_only_medium_is_searchable(tmp_path: Path, crash: bool) -> None:
    if _can_mount():
        out = _in_namespace(_RO_SCRIPT.replace("{CRASH}", str(crash)), tmp_path, "16m")
        assert out.split("\n")[:4] == ["read_only True", "docs ['a', 'b']", "similar ['a']", "write True"], out
        return
    if os.geteuid() == 0:
        pytest.skip("root without a private mount namespace: permissions do not stop root")
    store = _make_store(tmp_path / "store")  # pragma: no cover - runs where tests are not root
    for p in [store, *store.iterdir()]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        engine = _engine(str(store))
        assert engine.store.read_only and len(_ids(engine)) == 6  # type: ignore[attr-defined]
        with pytest.raises(BackendError, match="read-only"):
            engine.add_text("Refused.", id="x")
    finally:
        for p in [store, *store.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)


_FULL_SCRIPT = """
from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.errors import BackendError
store = MNT + "/store"
e = Engine(embedder=HashEmbedder(dim=32), store=store, warm_up=False)
e.add_texts(["Seed one. Seed two."], ids=["seed"])
error = None
for i in range(100000):
    try:
        e.add_texts([f"Filler {i}-{j} " + "x" * 4000 + "." for j in range(40)], ids=[f"f{i}-{j}" for j in range(40)])
    except BackendError as exc:
        error = str(exc)
        break
before = len(e)
print("cause", "database or disk is full" in error, "no transaction" not in error)
print("same", len(e) == before)
e.close()
again = Engine(embedder=HashEmbedder(dim=32), store=store, warm_up=False)
print("reopened", len(again) == before, len(again.search("SELECT DOCUMENT WHERE doc_id == 'seed'")))
"""


def test_a_full_disk_reports_the_real_cause(tmp_path: Path) -> None:
    if not _can_mount():
        pytest.skip("needs root and unshare for a small tmpfs (the max_page_count test covers the logic)")
    out = _in_namespace(_FULL_SCRIPT, tmp_path, "3m")
    assert out.split("\n")[:3] == ["cause True True", "same True", "reopened True 1"], out


def test_a_full_database_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    """SQLite's "database or disk is full", forced with max_page_count: the same path as a full disk."""
    store = _make_store(tmp_path / "store")
    engine = _engine(str(store))
    before = _ids(engine)
    db = engine.store._log._db  # type: ignore[attr-defined]
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages + 2}")
    with pytest.raises(BackendError) as info:
        engine.add_texts(["Big " + "y" * 200_000 + "."] * 3, ids=["b1", "b2", "b3"])
    assert "database or disk is full" in str(info.value) and "no transaction" not in str(info.value)
    assert _ids(engine) == before
    db.execute("PRAGMA max_page_count = 1073741823")
    engine.add_text("Fits now.", id="after")
    engine.close()
    again = _engine(str(store))
    assert _ids(again) == [*before, "after"]
    again.close()


_FULL_OPEN_SCRIPT = """
import os
from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.errors import BackendError

def store_for(path):
    if KIND == "faiss":
        from nlql.stores.faiss import FaissStore
        return FaissStore(path)
    return path

store = MNT + "/store"
e = Engine(embedder=HashEmbedder(dim=32), store=store_for(store), warm_up=False)
e.add_texts(["Alpha one. Alpha two.", "Beta."], ids=["a", "b"])
e.close()
fd = os.open(MNT + "/filler", os.O_WRONLY | os.O_CREAT)  # the disk full to the last byte
for size in (1 << 16, 1):
    try:
        while True:
            os.write(fd, b"x" * size)
    except OSError:
        pass
os.close(fd)
e = Engine(embedder=HashEmbedder(dim=32), store=store_for(store), warm_up=False)
print("read_only", e.store.read_only)
print("docs", [h.doc_id for h in e.search("SELECT DOCUMENT")])
print("similar", [h.doc_id for h in e.search("SELECT SENTENCE LET r = SIMILARITY(content, 'alpha') LIMIT 1")])
try:
    e.add_text("Refused.", id="c")
except BackendError as exc:
    print("write", "read-only" in str(exc) and "disk I/O error" in str(exc))
"""


@pytest.mark.parametrize("kind", ["memory", "faiss"])
def test_a_store_on_a_full_disk_opens_to_search(tmp_path: Path, kind: str) -> None:
    """Issue 33 item 11: reading works where writing cannot (a full disk has no room for the -shm file)."""
    if not _can_mount():
        pytest.skip("needs root and unshare for a small tmpfs (the mocked failure test covers the logic)")
    if kind == "faiss":
        pytest.importorskip("faiss")
    out = _in_namespace(_FULL_OPEN_SCRIPT.replace("KIND", repr(kind)), tmp_path, "3m")
    assert out.split("\n")[:4] == ["read_only True", "docs ['a', 'b']", "similar ['a']", "write True"], out


def test_a_store_whose_writable_open_fails_opens_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same without a mount: the writable connection fails as on a full disk; the store is searched
    read-only, a write names the cause, and a lock held by another writer is still an error."""
    from nlql.stores.doclog import DocLog

    store = _make_store(tmp_path / "store")

    def failing(cause: str) -> Any:
        def connect(path: Path) -> sqlite3.Connection:
            raise sqlite3.OperationalError(cause)
        return staticmethod(connect)

    monkeypatch.setattr(DocLog, "_connect_rw", failing("disk I/O error"))
    engine = _engine(str(store))
    assert engine.store.read_only  # type: ignore[attr-defined]
    assert _ids(engine) == [f"d{i}" for i in range(6)]
    assert [h.doc_id for h in engine.search("SELECT SENTENCE LET r = SIMILARITY(content, 'document 3') LIMIT 1")] \
        == ["d3"]
    with pytest.raises(BackendError, match=r"read-only \(cannot be written here: disk I/O error\)"):
        engine.add_text("Refused.", id="x")
    engine.close()
    monkeypatch.setattr(DocLog, "_connect_rw", failing("database is locked"))
    with pytest.raises(BackendError, match="cannot be opened for writing"):
        _engine(str(store))
