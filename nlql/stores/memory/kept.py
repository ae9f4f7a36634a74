"""Files kept beside a directory store's SQLite log: what a fresh process would otherwise rebuild.

Each is one ``.npz`` of plain arrays (no pickles), written whole to a temporary file in the same
directory, flushed to disk and renamed over the old one, so a reader finds the old file or the new one,
never half of one; a write that fails or is killed leaves at most a ``.tmp`` file that nothing reads.
Every file carries the store's identity (a random id kept in the log's ``info`` table, so a file of a
deleted and recreated store is never taken for this one's) and the log's clock when it was written:
the reader applies what the log committed after that clock, or rebuilds when the file is missing,
unreadable or not this store's. The SQLite log stays the truth; these files are caches of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

#: The ``info`` key of the store's identity (written once, by the first writer of a kept file).
IDENTITY_KEY = "kept_files_id"
_FORMAT = 1


def file_name(kind: str, key: str) -> str:
    """``<kind>-<hash of key>.npz``: one file per kind and configuration (e.g. an analyzer)."""
    return f"{kind}-{hashlib.sha1(key.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}.npz"


def identity(store: Any, create: bool) -> str | None:
    """The store's identity, made (and committed) when ``create`` and there is none yet."""
    got = store.get_info(IDENTITY_KEY)
    if got is None and create:
        got = uuid.uuid4().hex
        store.set_info(IDENTITY_KEY, got)
        if store.get_info(IDENTITY_KEY) != got:  # (a read-only log keeps it in RAM only)
            return None
    return got


def temp_name(path: Path) -> Path:
    """A temporary file beside ``path`` for :func:`write_atomically` (its process id in the name)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def write_atomically(path: Path, fill: Callable[[BinaryIO], None], tmp: Path | None = None) -> bool:
    """``fill`` a temporary file, flush it to disk and rename it over ``path`` (and flush the rename):
    a reader finds the old file or the new one, never part of one. False when it could not be written
    (a full disk, a read-only directory); the temporary file is removed then."""
    tmp = temp_name(path) if tmp is None else tmp
    try:
        with open(tmp, "wb") as fh:
            fill(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        with contextlib.suppress(OSError):  # the rename itself on disk (not every system opens a directory)
            fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False


def write(path: Path, arrays: dict[str, np.ndarray], *, ident: str, key: str, clock: int) -> bool:
    """Write ``arrays`` with their stamp atomically to ``path``; False when it could not be written."""
    stamp = {"kept_format": np.array(_FORMAT, dtype=np.int64), "kept_identity": np.array(ident),
             "kept_key": np.array(key), "kept_clock": np.array(clock, dtype=np.int64)}
    # numpy's stubs give savez an ``allow_pickle: bool`` keyword, which mypy matches a ``**dict[str, ndarray]``
    # against (it cannot know that no key is named so); numpy 1.26, which nlql supports, has no such keyword,
    # so it cannot be passed by name to settle it
    return write_atomically(path, lambda fh: np.savez(fh, **arrays, **stamp))  # type: ignore[arg-type]


def read(path: Path, *, ident: str | None, key: str) -> tuple[dict[str, np.ndarray], int] | None:
    """The arrays of ``path`` and the clock they were written at; None when the file is missing,
    unreadable or not this store's (identity) or configuration's (key)."""
    if ident is None:
        return None
    try:
        with np.load(path, allow_pickle=False) as got:
            arrays = {name: got[name] for name in got.files}
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - truncated, not an npz (zipfile.BadZipFile, zlib.error, …): rebuilt
        return None
    try:
        if (int(arrays.pop("kept_format")) != _FORMAT or str(arrays.pop("kept_identity")) != ident
                or str(arrays.pop("kept_key")) != key):
            return None
        return arrays, int(arrays.pop("kept_clock"))
    except (KeyError, TypeError, ValueError):
        return None
