"""Crash-safe persistence of whole documents (text, metadata, units, vectors) in one SQLite file.

Used by the built-in store for ``store="<path>"`` and by Faiss/hnswlib for the content and metadata
they keep beside their index. Each ``write`` is one SQLite transaction in WAL mode, so a process killed
at any instant leaves the file holding exactly the documents whose write returned, each one whole.
Embeddings are stored as float32 bytes and never recomputed on reopen.

SQLite text must be valid UTF-8, but a Python string may hold lone surrogates (``"\\ud800"``), which
the in-RAM store accepts. Such a string (a doc id or a text) is stored as a BLOB of its
``surrogatepass`` UTF-8 bytes instead, and the JSON columns escape them (``\\ud800``); every other
string is stored as plain text, so the file stays readable and earlier files need no migration.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from nlql.stores.base import DocRecord, UnitRecord

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
"""


_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(s: str) -> str | bytes:
    """A string as SQLite can bind it (see the module docstring)."""
    return s.encode("utf-8", "surrogatepass") if _SURROGATE.search(s) else s


def _untext(v: str | bytes) -> str:
    return v.decode("utf-8", "surrogatepass") if isinstance(v, bytes) else v


def _json(obj: object) -> str:
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False)
    return json.dumps(obj, ensure_ascii=True, allow_nan=False) if _SURROGATE.search(text) else text


class DocLog:
    """Documents in a SQLite file; one transaction per write."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def get_info(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM info WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_info(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO info(key, value) VALUES (?, ?)", (key, value))

    def write(self, docs: Sequence[DocRecord] = (), delete: Sequence[str] = ()) -> None:
        """Replace/insert ``docs`` and delete ``delete`` ids, atomically."""
        rows = [
            (
                _text(d.doc_id), d.seq, _text(d.text),
                _json(d.metadata),
                _json([[u.position, u.content, u.start, u.end, u.tail] for u in d.units]),
                int(d.vectors.shape[1]) if d.vectors.ndim == 2 else 0,
                np.ascontiguousarray(d.vectors, dtype=np.float32).tobytes(),
            )
            for d in docs
        ]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if delete:
                    self._db.executemany("DELETE FROM docs WHERE doc_id = ?", [(_text(d),) for d in delete])
                self._db.executemany(
                    "INSERT OR REPLACE INTO docs(doc_id, seq, text, metadata, units, dim, vectors) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def __iter__(self) -> Iterator[DocRecord]:
        """Every document in insertion order."""
        cur = self._db.execute(
            "SELECT doc_id, seq, text, metadata, units, dim, vectors FROM docs ORDER BY seq"
        )
        for doc_id, seq, text, metadata, units, dim, blob in cur:
            vecs = np.frombuffer(blob, dtype=np.float32)
            vecs = vecs.reshape(-1, dim) if dim else vecs.reshape(0, 0)
            yield DocRecord(
                doc_id=_untext(doc_id), text=_untext(text), metadata=json.loads(metadata),
                units=[UnitRecord(p, c, s, e, t) for p, c, s, e, t in json.loads(units)],
                vectors=vecs, seq=int(seq),
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()
