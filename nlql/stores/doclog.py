"""Crash-safe, multi-process persistence of whole documents (text, metadata, units, vectors) in SQLite.

Used by the built-in store for ``store="<path>"`` and by Faiss/hnswlib for the content and metadata
they keep beside their index. Each ``write`` is one SQLite transaction in WAL mode, so a process killed
at any instant leaves the file holding exactly the documents whose write returned, each one whole.
Embeddings are stored as float32 bytes and never recomputed on reopen.

**Several processes.** The file is the truth; each process keeps a copy in RAM and catches up
incrementally. Every write allocates insertion-order numbers (``seq``) from a counter (``info.clock``)
inside its own transaction, so they never collide; a deletion leaves a tombstone
(``deleted(doc_id, seq)``) stamped from the same counter. A reader asks SQLite whether any other
connection committed since it last looked (``PRAGMA data_version``: a few microseconds, no disk read)
and only then reads the documents and tombstones newer than its clock (:meth:`DocLog.changes_since`).

**Files that are not (or no longer) ours.** Opening never writes before the file is known to be an
NLQL store: a SQLite file with other tables is refused untouched, and a file that is not SQLite at all,
unreadable or damaged is a :class:`~nlql.errors.BackendError` naming the path. A row that cannot be
decoded (bad metadata JSON, vector blob, units list or width) is skipped and reported by id; the other
rows load. A file on a read-only medium opens read-only (without WAL changes) and can be searched.
A failed write (a full disk, …) is rolled back and reports SQLite's own reason.

SQLite text must be valid UTF-8, but a Python string may hold lone surrogates (``"\\ud800"``), which
the in-RAM store accepts. Such a string (a doc id or a text) is stored as a BLOB of its
``surrogatepass`` UTF-8 bytes instead, and the JSON columns escape them (``\\ud800``); every other
string is stored as plain text, so the file stays readable and earlier files need no migration.

**Entity links.** ``entity_links(doc_id, seq, position, name)`` holds, per sentence, the entity names
the engine found at ingest (the canonical rows of :meth:`nlql.text.graph.EntityGraph.to_rows`), written
and removed in the same transaction as their document, so a reopened store rebuilds GRAPH's graph
without running an extractor. A file written before the table existed gets it on open (empty, and
without the ``info`` key :data:`ENTITY_LINKS_KEY`): :meth:`DocLog.entity_rows` then says None until
:meth:`DocLog.adopt_entities` has stored the links the engine built once.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from nlql.errors import BackendError
from nlql.stores.base import DocRecord, UnitRecord

FILE_NAME = "nlql.sqlite"
FORMAT = "nlql-doclog"
FORMAT_VERSION = "2"

_DOC_COLUMNS = ["doc_id", "seq", "text", "metadata", "units", "dim", "vectors"]
_SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (
  doc_id   TEXT PRIMARY KEY,
  seq      INTEGER NOT NULL,
  text     TEXT NOT NULL,
  metadata TEXT NOT NULL,
  units    TEXT NOT NULL,
  dim      INTEGER NOT NULL,
  vectors  BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS docs_seq ON docs(seq);
CREATE TABLE IF NOT EXISTS info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS deleted (doc_id TEXT PRIMARY KEY, seq INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS deleted_seq ON deleted(seq);
CREATE TABLE IF NOT EXISTS entity_links (
  doc_id   TEXT NOT NULL,
  seq      INTEGER NOT NULL,
  position INTEGER NOT NULL,
  name     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entity_links_doc ON entity_links(doc_id);
CREATE INDEX IF NOT EXISTS entity_links_seq ON entity_links(seq);
"""
#: ``info`` key saying every document's entity links are in ``entity_links`` (absent in files written
#: before the table existed, until the engine has adopted links built once from its extractor)
ENTITY_LINKS_KEY = "entity_links"
_SELECT = "SELECT doc_id, seq, text, metadata, units, dim, vectors FROM docs"


_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(s: str) -> str | bytes:
    """A string as SQLite can bind it (see the module docstring)."""
    return s.encode("utf-8", "surrogatepass") if _SURROGATE.search(s) else s


def _untext(v: str | bytes) -> str:
    return v.decode("utf-8", "surrogatepass") if isinstance(v, bytes) else v


def _json(obj: object) -> str:
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False)
    return json.dumps(obj, ensure_ascii=True, allow_nan=False) if _SURROGATE.search(text) else text


@dataclass
class Changes:
    """What other connections committed since a clock: documents to (re)load, ids to drop."""

    docs: list[DocRecord] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    damaged: dict[str, str] = field(default_factory=dict)  # doc id -> what is wrong with its row
    clock: int = 0

    def __bool__(self) -> bool:
        return bool(self.docs or self.deleted)


def _error(path: Path, what: str, exc: BaseException | None = None) -> BackendError:
    detail = f": {exc}" if exc is not None and str(exc) else ""
    return BackendError("memory", f"the store at {path.parent} {what}{detail}")


class DocLog:
    """Documents in a SQLite file; one transaction per write. Use :meth:`attach` or :meth:`create`."""

    def __init__(self, path: Path, db: sqlite3.Connection, *, read_only: bool, first_format: bool) -> None:
        self.path = path
        self._db = db
        self.read_only = read_only
        #: Why the file is read-only (a read-only medium, or the cause a writable open failed with).
        self.read_only_reason = "opened from a read-only file or medium" if read_only else ""
        self._lock = threading.RLock()
        self._has_deleted = not first_format or self._table_exists("deleted")
        self._has_links = self._table_exists("entity_links")
        self._data_version = self._version()

    # ---------------------------------------------------------------------------------- opening

    @classmethod
    def attach(cls, path: str | Path) -> DocLog | None:
        """Open an existing store file; None when there is none yet.

        Raises:
            BackendError: The path is not a directory, the file is not SQLite, is not an NLQL store
                (refused untouched), is damaged or cannot be read.
        """
        path = Path(path)
        directory = path.parent
        if directory.exists() and not directory.is_dir():
            raise _error(path, "is not a directory (a file of that name exists)")
        if not path.exists():
            return None
        if not path.is_file():
            raise _error(path, f"holds {path.name}, which is not a file")
        try:
            db = cls._connect_ro(path)
            tables = cls._inspect(path, db)
        except BackendError:
            raise
        except (sqlite3.Error, OSError) as exc:
            raise _error(path, f"cannot be read ({path.name})", exc) from exc
        writable = os.access(path, os.W_OK) and os.access(directory, os.W_OK)
        if not tables and not writable:  # an empty file that cannot become a store: as if absent
            db.close()
            return None
        why = "" if writable else "opened from a read-only file or medium"
        if writable:
            db.close()
            try:
                db = cls._connect_rw(path)
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):  # another writer holds it: not ours to hide
                    raise _error(path, f"cannot be opened for writing ({path.name})", exc) from exc
                # a full disk ("disk I/O error": no room for the -shm file), a read-only medium, …: reading
                # must work where writing cannot, so the store opens read-only and a write names the cause
                db = cls._connect_ro(path)
                writable, why = False, f"cannot be written here: {exc}"
            except sqlite3.Error as exc:
                raise _error(path, f"cannot be opened ({path.name})", exc) from exc
        if writable and not tables >= {"deleted", "entity_links"}:
            try:  # an empty file, or an NLQL file of the first format: add what is missing (ours to change)
                with _transaction(db):
                    _create_schema(db)
                    if not tables:
                        db.executemany("INSERT OR IGNORE INTO info(key, value) VALUES (?, ?)",
                                       [("format", FORMAT), ("format_version", FORMAT_VERSION), ("clock", "0"),
                                        (ENTITY_LINKS_KEY, "1")])
            except sqlite3.OperationalError as exc:
                if not tables or "locked" in str(exc) or "busy" in str(exc):
                    raise _error(path, f"cannot be upgraded ({path.name})", exc) from exc
                db.close()  # a first-format store on a full disk: read as it is
                db = cls._connect_ro(path)
                writable, why = False, f"cannot be upgraded or written here: {exc}"
            except sqlite3.Error as exc:
                raise _error(path, f"cannot be upgraded ({path.name})", exc) from exc
        log = cls(path, db, read_only=not writable, first_format="deleted" not in tables)
        log.read_only_reason = why
        return log

    @classmethod
    def create(cls, path: str | Path, dim: int) -> DocLog:
        """A new store file recording ``dim`` in the transaction that creates it (or, when another
        process created it first, the existing one: :meth:`ensure_dim` then compares widths)."""
        path = Path(path)
        existing = cls.attach(path)
        if existing is not None:
            return existing
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError as exc:
            raise _error(path, "is not a directory (a file of that name exists)") from exc
        except OSError as exc:
            raise _error(path, "cannot be created", exc) from exc
        try:
            db = cls._connect_rw(path)
            with _transaction(db):
                tables = cls._inspect(path, db)
                _create_schema(db)
                if not tables:  # ours and new: stamp it in the same transaction as the schema
                    db.executemany("INSERT OR IGNORE INTO info(key, value) VALUES (?, ?)",
                                   [("format", FORMAT), ("format_version", FORMAT_VERSION),
                                    ("dim", str(int(dim))), ("clock", "0"), (ENTITY_LINKS_KEY, "1")])
        except BackendError:
            raise
        except sqlite3.Error as exc:
            raise _error(path, f"cannot be created ({path.name})", exc) from exc
        return cls(path, db, read_only=False, first_format=False)

    @staticmethod
    def _connect_rw(path: Path) -> sqlite3.Connection:
        db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30.0)
        # Switching to WAL needs an exclusive lock and SQLite does not wait for it with the busy handler:
        # another process creating or writing the same file at this instant makes it fail at once, so
        # retry (and skip it when the file is in WAL mode already).
        deadline = time.monotonic() + 30.0
        while True:
            try:
                if str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                    db.execute("PRAGMA journal_mode=WAL").fetchone()
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                    db.close()
                    raise
                time.sleep(0.01)
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    @staticmethod
    def _connect_ro(path: Path) -> sqlite3.Connection:
        uri = "file:" + quote(str(path.resolve())) + "?mode=ro"
        db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None, timeout=30.0)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:
            # a WAL file on a read-only medium without its -shm file: nothing can change it there, but
            # reading it as immutable would skip what its -wal holds, so that is refused
            db.close()
            wal = path.with_name(path.name + "-wal")
            if wal.exists() and wal.stat().st_size > 0:
                raise _error(path, f"cannot be read here: {wal.name} holds committed writes but {path.name}-shm "
                             "is missing and the medium is read-only (copy the directory somewhere writable)") from None
            db = sqlite3.connect(uri + "&immutable=1", uri=True, check_same_thread=False,
                                 isolation_level=None)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return db

    @staticmethod
    def _inspect(path: Path, db: sqlite3.Connection) -> set[str]:
        """The tables of an NLQL store file (empty for a new one); refuses a file that is not ours."""
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        tables = {t for t in tables if not t.startswith("sqlite_")}
        if not tables:
            return tables
        ours = "docs" in tables and "info" in tables
        if ours:
            cols = [r[1] for r in db.execute("PRAGMA table_info(docs)")]
            info_cols = [r[1] for r in db.execute("PRAGMA table_info(info)")]
            ours = cols == _DOC_COLUMNS and info_cols == ["key", "value"]
        if ours:
            fmt = db.execute("SELECT value FROM info WHERE key = 'format'").fetchone()
            ours = fmt is None or fmt[0] == FORMAT
        if not ours:
            names = ", ".join(sorted(tables)[:6])
            raise _error(path, f"holds a SQLite file {path.name} that is not an NLQL store (tables: {names}); "
                         "it was left untouched")
        extra = tables - {"docs", "info", "deleted", "entity_links"}
        if extra:
            raise _error(path, f"holds {path.name} with tables NLQL does not know ({', '.join(sorted(extra))}); "
                         "it was left untouched")
        return tables

    def _table_exists(self, name: str) -> bool:
        return self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                (name,)).fetchone() is not None

    def _version(self) -> int:
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    # ---------------------------------------------------------------------------------- info

    def get_info(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM info WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_info(self, key: str, value: str) -> None:
        self._writable()
        with self._lock, _transaction(self._db):
            self._db.execute("INSERT OR REPLACE INTO info(key, value) VALUES (?, ?)", (key, value))

    def dim(self) -> int | None:
        """The recorded vector width (None when none is recorded or it is unreadable)."""
        return _as_dim(self.get_info("dim"))

    def ensure_dim(self, dim: int) -> int:
        """Record ``dim`` if no width is recorded yet (under the write lock); returns the recorded width."""
        recorded = self.dim()
        if recorded is not None or self.read_only:
            return recorded if recorded is not None else dim
        with self._lock, _transaction(self._db):
            recorded = _as_dim(self._one("SELECT value FROM info WHERE key = 'dim'"))
            if recorded is None:
                self._db.execute("INSERT OR REPLACE INTO info(key, value) VALUES ('dim', ?)", (str(int(dim)),))
                recorded = int(dim)
        return recorded

    def _one(self, sql: str, args: Sequence[Any] = ()) -> Any:
        row = self._db.execute(sql, args).fetchone()
        return None if row is None else row[0]

    def _writable(self) -> None:
        if self.read_only:
            raise _error(self.path, f"is read-only ({self.read_only_reason}); it can be searched but not changed")

    # ---------------------------------------------------------------------------------- writing

    def write(self, docs: Sequence[DocRecord] = (), delete: Sequence[str] = (), *, dim: int | None = None,
              since: int = 0) -> tuple[int, Changes]:
        """Replace/insert ``docs`` and delete ``delete`` ids in one transaction.

        Allocates each document's ``seq`` (written into the records) from the file's clock inside the
        transaction, and first reads what other connections committed since ``since``.

        Returns:
            (how many of ``delete`` existed, the other connections' changes since ``since``).

        Raises:
            BackendError: The file is read-only, or its recorded width is not ``dim``.
            sqlite3.Error: The write failed (nothing of it was written).
        """
        self._writable()
        rows = [
            [
                _text(d.doc_id), 0, _text(d.text),
                _json(d.metadata),
                _json([[u.position, u.content, u.start, u.end, u.tail] for u in d.units]),
                int(d.vectors.shape[1]) if d.vectors.ndim == 2 else 0,
                np.ascontiguousarray(d.vectors, dtype=np.float32).tobytes(),
            ]
            for d in docs
        ]
        with self._lock, _transaction(self._db):
            if dim is not None:
                recorded = _as_dim(self._one("SELECT value FROM info WHERE key = 'dim'"))
                if recorded is not None and recorded != dim:
                    raise _error(self.path, f"holds {recorded}-dimensional vectors (recorded by another "
                                 f"process); this engine's embedder gives {dim}")
                if recorded is None:
                    self._db.execute("INSERT OR REPLACE INTO info(key, value) VALUES ('dim', ?)", (str(dim),))
            others = self._changes_since(since)
            version = self._version()
            clock = self._clock()
            for row, d in zip(rows, docs, strict=True):
                clock += 1
                row[1] = clock
                d.seq = clock
            removed = 0
            if delete:
                keys = [(_text(x),) for x in dict.fromkeys(delete)]
                for key in keys:
                    removed += self._db.execute("DELETE FROM docs WHERE doc_id = ?", key).rowcount
                if self._has_links:
                    self._db.executemany("DELETE FROM entity_links WHERE doc_id = ?", keys)
                clock += 1
                self._db.executemany("INSERT OR REPLACE INTO deleted(doc_id, seq) VALUES (?, ?)",
                                     [(k[0], clock) for k in keys])
            if rows:
                self._db.executemany("DELETE FROM deleted WHERE doc_id = ?", [(r[0],) for r in rows])
                self._db.executemany(
                    "INSERT OR REPLACE INTO docs(doc_id, seq, text, metadata, units, dim, vectors) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                if self._has_links:
                    self._write_links(rows, docs)
            self._db.execute("INSERT OR REPLACE INTO info(key, value) VALUES ('clock', ?)", (str(clock),))
            others.clock = clock
        self._data_version = version  # our own commit does not change it; others' later ones will
        return removed, others

    def _write_links(self, rows: list[list[Any]], docs: Sequence[DocRecord]) -> None:
        """Replace the written documents' entity links (inside the write's transaction)."""
        from nlql.text.graph import sentence_entities

        self._db.executemany("DELETE FROM entity_links WHERE doc_id = ?", [(r[0],) for r in rows])
        links = [
            (row[0], row[1], int(u.position), _text(name))
            for row, d in zip(rows, docs, strict=True) if d.entities is not None
            for u, names in zip(d.units, d.entities, strict=True) for _, name in sentence_entities(names)
        ]
        if links:
            self._db.executemany("INSERT INTO entity_links(doc_id, seq, position, name) VALUES (?, ?, ?, ?)",
                                 links)

    def entity_rows(self) -> list[tuple[str, int, int, str]] | None:
        """Every entity link as ``(doc_id, seq, position, name)``, read in one snapshot; None when the
        file cannot vouch for them (written before links were kept, and not adopted yet)."""
        with self._lock:
            if not self._has_links:
                return None
            self._db.execute("BEGIN")
            try:
                if self._one("SELECT value FROM info WHERE key = ?", (ENTITY_LINKS_KEY,)) is None:
                    return None
                # only links of live documents at their current seq (a link outliving its row is ignored)
                cur = self._db.execute("SELECT l.doc_id, l.seq, l.position, l.name FROM entity_links l "
                                       "JOIN docs d ON d.doc_id = l.doc_id AND d.seq = l.seq")
                return [(_untext(d), int(s), int(p), _untext(n)) for d, s, p, n in cur]
            finally:
                self._db.execute("COMMIT")

    def adopt_entities(self, rows: Sequence[tuple[str, int, int, str]]) -> bool:
        """Store links built by the engine for a file that kept none, and mark the file as keeping them.

        Documents that already have links (written meanwhile by a version that keeps them) keep theirs;
        a row whose document is gone or was rewritten since (another ``seq``) is skipped. False when
        the file is read-only (nothing is stored).
        """
        if self.read_only or not self._has_links:
            return False
        with self._lock, _transaction(self._db):
            if self._one("SELECT value FROM info WHERE key = ?", (ENTITY_LINKS_KEY,)) is not None:
                return True
            have = {_untext(r[0]) for r in self._db.execute("SELECT DISTINCT doc_id FROM entity_links")}
            live = {_untext(r[0]): int(r[1]) for r in self._db.execute("SELECT doc_id, seq FROM docs")}
            self._db.executemany(
                "INSERT INTO entity_links(doc_id, seq, position, name) VALUES (?, ?, ?, ?)",
                [(_text(d), int(s), int(p), _text(n)) for d, s, p, n in rows
                 if d not in have and live.get(d) == int(s)])
            self._db.execute("INSERT OR REPLACE INTO info(key, value) VALUES (?, '1')", (ENTITY_LINKS_KEY,))
        return True

    def _clock(self) -> int:
        """The last allocated number: the recorded clock, or (an older file) the largest stored one."""
        value = self._one("SELECT value FROM info WHERE key = 'clock'")
        try:
            clock = int(value) if value is not None else 0
        except ValueError:
            clock = 0
        top = self._one("SELECT max(seq) FROM docs")
        tomb = self._one("SELECT max(seq) FROM deleted") if self._has_deleted else None
        return max(clock, int(top or 0), int(tomb or 0))

    # ---------------------------------------------------------------------------------- reading

    def changed(self) -> bool:
        """Whether another connection committed since this one last read changes (no disk read)."""
        with self._lock:
            return self._version() != self._data_version

    def changes_since(self, clock: int, *, entities: bool = True, mark: bool = True) -> Changes:
        """Documents written and ids deleted after ``clock``, read in one snapshot (with their entity
        links in ``DocRecord.entities`` when ``entities`` and the file keeps them). ``mark=False``: a
        look that leaves :meth:`changed` as it was (the reader is not the RAM copy catching up)."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                out = self._changes_since(clock, entities=entities)
                out.clock = self._clock()
                version = self._version()  # the snapshot's: a commit after it still shows as a change
            finally:
                self._db.execute("COMMIT")
            if mark:
                self._data_version = version
        return out

    def catch_up(self, clock: int, probe: Sequence[str] = ()) -> tuple[Changes, int, dict[str, tuple[int, bytes]]]:
        """:meth:`changes_since` ``clock`` (without entity links), the number of documents written at or
        before ``clock`` that the file still holds (read from the ``seq`` index alone), and the ``seq``
        and vector bytes of the documents ``probe`` (those the file holds), in one snapshot: a copy of
        the rows at ``clock`` (the built-in store's snapshot file) is brought up to date with the first
        and checked against the others."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                out = self._changes_since(clock, entities=False)
                out.clock = self._clock()
                count = int(self._one("SELECT count(*) FROM docs WHERE seq <= ?", (int(clock),)) or 0)
                probed: dict[str, tuple[int, bytes]] = {}
                ids = list(dict.fromkeys(probe))
                for lo in range(0, len(ids), 500):
                    part = ids[lo:lo + 500]
                    for d, seq, blob in self._db.execute(
                            f"SELECT doc_id, seq, vectors FROM docs WHERE doc_id IN ({','.join('?' * len(part))})",
                            [_text(x) for x in part]):
                        probed[_untext(d)] = (int(seq), bytes(blob) if isinstance(blob, (bytes, memoryview)) else b"")
                version = self._version()
            finally:
                self._db.execute("COMMIT")
            self._data_version = version
        return out, count, probed

    def _changes_since(self, clock: int, *, entities: bool = True) -> Changes:
        out = Changes()
        docs, damaged = _decode_rows(self._db.execute(_SELECT + " WHERE seq > ? ORDER BY seq", (clock,)))
        out.docs, out.damaged = docs, damaged
        if entities and docs and self._has_links and \
                self._one("SELECT value FROM info WHERE key = ?", (ENTITY_LINKS_KEY,)) is not None:
            links: dict[tuple[str, int], dict[int, list[str]]] = {}
            for d, sq, p, n in self._db.execute("SELECT doc_id, seq, position, name FROM entity_links "
                                                "WHERE seq > ?", (clock,)):
                links.setdefault((_untext(d), int(sq)), {}).setdefault(int(p), []).append(_untext(n))
            for doc in docs:
                got = links.get((doc.doc_id, doc.seq), {})
                doc.entities = [got.get(u.position, []) for u in doc.units]
        if self._has_deleted:
            out.deleted = [_untext(r[0]) for r in
                           self._db.execute("SELECT doc_id FROM deleted WHERE seq > ? ORDER BY seq", (clock,))]
        return out

    def load(self) -> Changes:
        """Every document in insertion order (``Changes.docs``), with the damaged rows and the clock."""
        return self.changes_since(-(2**62), entities=False)

    def close(self) -> None:
        with self._lock:
            self._db.close()


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on failure without hiding why it failed."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if db.in_transaction:  # SQLite may have rolled back itself (a full disk does)
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        raise
    db.execute("COMMIT")


def _create_schema(db: sqlite3.Connection) -> None:
    # statement by statement: executescript() would COMMIT the transaction it runs in
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


def _as_dim(value: Any) -> int | None:
    try:
        dim = int(value)
    except (TypeError, ValueError):
        return None
    return dim if dim > 0 else None


def _decode_rows(cursor: Any) -> tuple[list[DocRecord], dict[str, str]]:
    docs: list[DocRecord] = []
    damaged: dict[str, str] = {}
    for doc_id, seq, text, metadata, units, dim, blob in cursor:
        try:
            did = _untext(doc_id)
        except (AttributeError, UnicodeDecodeError):
            damaged[repr(doc_id)] = "the document id cannot be read"
            continue
        try:
            docs.append(_decode(did, seq, text, metadata, units, dim, blob))
        except (TypeError, ValueError, AttributeError, UnicodeDecodeError) as exc:
            damaged[did] = f"{type(exc).__name__}: {exc}"
    return docs, damaged


def _decode(doc_id: str, seq: Any, text: Any, metadata: Any, units: Any, dim: Any, blob: Any) -> DocRecord:
    meta = json.loads(metadata)
    if not isinstance(meta, dict):
        raise ValueError("the metadata is not a JSON object")
    unit_rows = json.loads(units)
    if not isinstance(unit_rows, list):
        raise ValueError("the units are not a JSON list")
    recs = []
    for u in unit_rows:
        p, c, s, e, t = u
        if not (isinstance(p, int) and isinstance(c, str) and isinstance(s, int) and isinstance(e, int)
                and isinstance(t, str)):
            raise ValueError(f"a unit has the wrong shape: {u!r:.80}")
        recs.append(UnitRecord(p, c, s, e, t))
    if not isinstance(blob, bytes):
        raise ValueError("the vectors are not a blob")
    width = int(dim)
    vecs = np.frombuffer(blob, dtype=np.float32)
    if width <= 0:
        if len(vecs) or recs:
            raise ValueError(f"the stored width {dim!r} does not fit the vectors")
        vecs = vecs.reshape(0, 0)
    else:
        if len(vecs) != width * len(recs):
            raise ValueError(f"{len(vecs)} floats do not make {len(recs)} vectors of width {width}")
        vecs = vecs.reshape(len(recs), width)
    if not np.isfinite(vecs).all():
        raise ValueError("the vectors hold NaN or infinity")
    return DocRecord(doc_id=doc_id, text=_untext(text), metadata=meta, units=recs, vectors=vecs, seq=int(seq))
