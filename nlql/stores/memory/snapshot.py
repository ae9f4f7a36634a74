"""The built-in store's vectors (and its int8 copy) kept beside a directory store's SQLite log (issue 35).

A fresh process that opened a 100k-row store read every vector blob out of SQLite (~208 MB) and
decoded it: about 1 CPU-s of the 3–4 an open cost, and an int8 copy then built again from scratch
(kernel, encoding) in the background. A snapshot is one file, ``vectors.snap``, holding the float32
matrix, each row's ``seq`` and ``position`` (which document version, which sentence) and, when the
store had one, its int8 copy (:meth:`nlql.stores.memory.quant.Int8Copy.state`). A reader maps it
(``mmap``, copy-on-write: pages are read from the file as they are first touched, a write of the
process stays private) instead of reading it.

**One file, replaced whole.** It is written to a temporary file in the same directory, flushed to
disk and renamed over the old one, so a reader finds the old snapshot or the new one, never half of
one; a write that fails or is killed leaves at most a ``.tmp`` file that nothing reads (and the next
write removes, when its process is gone). The header (JSON, after a magic string) carries the
format, the store's identity (:func:`nlql.stores.memory.kept.identity`: a file of a deleted and
recreated store is never taken for this one's), the width, the row count, the log's clock the rows
are in step with, the file's own size (a truncated file is refused) and a CRC-32 of every array
but the two large ones (the matrix and the int8 codes: checking them would read what the map is
there to leave unread).

**Stale is fine, wrong is not.** The SQLite log stays the truth: the reader (the store) takes the
snapshot's rows only for the documents the log still holds at the same ``seq`` (checked row by row
against the log's ``seq`` and positions), reads the vectors of the documents written since the
snapshot's clock from the log, and falls back to reading every vector when anything does not fit.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nlql.stores.memory import kept

FILE_NAME = "vectors.snap"
MAGIC = b"NLQLSNAP"
FORMAT = 1
_ALIGN = 64
#: Arrays too large to checksum at open (read lazily through the map); every other array is checked.
UNCHECKED = frozenset({"matrix", "int8.codes", "int8.split.codes"})
#: Rows written at a time when the rows are gathered (dead rows or another order): bounded extra memory.
CHUNK_ROWS = 1 << 16


@dataclass
class Snapshot:
    """A snapshot read back: its stamp, its arrays (views of the map) and its scalars."""

    clock: int
    rows: int
    dim: int
    arrays: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)


def _pad(n: int) -> int:
    return -n % _ALIGN


def write(path: Path, arrays: dict[str, tuple[np.ndarray, np.ndarray | None]], *, ident: str, clock: int,
          rows: int, dim: int, meta: dict[str, Any]) -> bool:
    """Write a snapshot atomically to ``path``; False when it could not be written.

    ``arrays`` maps a name to ``(array, order)``: the rows ``array[order]`` are written (``order``
    None: the array as it is), ``CHUNK_ROWS`` at a time, so a gather never copies the whole matrix.
    """
    _remove_orphans(path)
    specs: dict[str, dict[str, Any]] = {}
    offset = 0
    for name, (arr, order) in arrays.items():
        n = len(arr) if order is None else len(order)
        shape = [n, *arr.shape[1:]]
        nbytes = int(np.prod(shape, dtype=np.int64)) * arr.dtype.itemsize
        spec: dict[str, Any] = {"dtype": arr.dtype.str, "shape": shape, "offset": offset, "nbytes": nbytes}
        if name not in UNCHECKED:
            spec["crc32"] = zlib.crc32(np.ascontiguousarray(arr if order is None else arr[order]).data)
        specs[name] = spec
        offset += nbytes + _pad(nbytes)
    header = {"format": FORMAT, "identity": ident, "clock": int(clock), "rows": int(rows), "dim": int(dim),
              "meta": meta, "arrays": specs}
    # the header's length is fixed before the file size is known: the size is written last, in place
    header["file_size"] = 0
    text = json.dumps(header, sort_keys=True).encode()
    start = len(MAGIC) + 8 + len(text) + 32  # room for the size's digits
    start += _pad(start)
    header["file_size"] = start + offset
    text = json.dumps(header, sort_keys=True).encode()
    assert len(MAGIC) + 8 + len(text) <= start

    def fill(fh: Any) -> None:
        fh.write(MAGIC + len(text).to_bytes(8, "little") + text)
        fh.write(b"\0" * (start - fh.tell()))
        for name, (arr, order) in arrays.items():
            _write_rows(fh, arr, order)
            fh.write(b"\0" * _pad(specs[name]["nbytes"]))

    return kept.write_atomically(path, fill)


def _write_rows(fh: Any, arr: np.ndarray, order: np.ndarray | None) -> None:
    if order is None:
        fh.write(np.ascontiguousarray(arr).data)
        return
    for lo in range(0, len(order), CHUNK_ROWS):
        fh.write(np.ascontiguousarray(arr[order[lo:lo + CHUNK_ROWS]]).data)


def _remove_orphans(path: Path) -> None:
    """Remove the temporary files of writers that are gone (killed mid-write)."""
    with contextlib.suppress(OSError):
        for tmp in path.parent.glob(f".{path.name}.*.tmp"):
            try:
                pid = int(tmp.name.split(".")[-3])
            except (ValueError, IndexError):
                continue
            if pid == os.getpid():
                continue
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            except OSError:
                pass  # another user's process, alive


def stamp(path: Path) -> dict[str, Any] | None:
    """The header of ``path`` (None when missing or not a snapshot)."""
    try:
        with open(path, "rb") as fh:
            return _header(fh)
    except (OSError, ValueError):
        return None


def _header(fh: Any) -> dict[str, Any]:
    head = fh.read(len(MAGIC) + 8)
    if len(head) != len(MAGIC) + 8 or head[: len(MAGIC)] != MAGIC:
        raise ValueError("not a snapshot")
    n = int.from_bytes(head[len(MAGIC):], "little")
    if n > 1 << 24:
        raise ValueError("header too long")
    text = fh.read(n)
    header = json.loads(text)
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError("another format")
    return header


def read(path: Path, *, ident: str | None, dim: int) -> Snapshot | None:
    """The snapshot at ``path`` mapped copy-on-write; None when it is missing, damaged (truncated, a
    checksum that does not match, arrays that do not fit the header) or not this store's (identity,
    width)."""
    if ident is None:
        return None
    try:
        with open(path, "rb") as fh:
            header = _header(fh)
            if header.get("identity") != ident or int(header["dim"]) != dim:
                return None
            size = os.fstat(fh.fileno()).st_size
            if size != int(header["file_size"]):
                return None
            start = size - sum(s["nbytes"] + _pad(s["nbytes"]) for s in header["arrays"].values())
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)  # not empty: its header was read
        arrays = {}
        for name, spec in header["arrays"].items():
            dtype = np.dtype(spec["dtype"])
            shape = tuple(int(x) for x in spec["shape"])
            count = int(np.prod(shape, dtype=np.int64))
            if count * dtype.itemsize != int(spec["nbytes"]) or start + int(spec["offset"]) + int(spec["nbytes"]) > size:
                return None
            arr = np.frombuffer(mm, dtype=dtype, count=count, offset=start + int(spec["offset"])).reshape(shape) \
                if count else np.zeros(shape, dtype=dtype)
            if "crc32" in spec and zlib.crc32(arr.data) != int(spec["crc32"]):
                return None
            arrays[name] = arr
        rows = int(header["rows"])
        if arrays["matrix"].shape != (rows, dim):
            return None
        return Snapshot(int(header["clock"]), rows, dim, arrays, dict(header.get("meta") or {}))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):  # damaged: the store reads the log instead
        return None
