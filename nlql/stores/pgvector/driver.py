"""psycopg 3 glue for the pgvector store: the import, pgvector's binary wire format, statement helpers."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from nlql.errors import MissingDependencyError
from nlql.sql.binder import Binder, Fragment

__all__ = ["Vector", "first_line", "import_psycopg", "register_vector", "render", "vector_bytes"]


class Vector:
    """A vector already in pgvector's binary wire format (bound as a query parameter)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def vector_bytes(vec: np.ndarray) -> bytes:
    a = np.ascontiguousarray(vec, dtype=">f4").ravel()
    return struct.pack(">HH", a.shape[0], 0) + a.tobytes()


def import_psycopg() -> Any:
    try:
        import psycopg
        import psycopg.sql  # noqa: F401 - make the submodule an attribute
    except ImportError as exc:
        raise MissingDependencyError("pgvector", "psycopg") from exc
    return psycopg


def register_vector(conn: Any, oid: int) -> None:
    """Binary dumper/loader for pgvector's ``vector`` on this connection only (no global state)."""
    from psycopg.adapt import Dumper, Loader
    from psycopg.pq import Format

    class VectorDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            if isinstance(obj, Vector):
                return obj.data
            if isinstance(obj, (bytes, bytearray, memoryview)):
                return bytes(obj)
            return vector_bytes(np.asarray(obj))

    class VectorLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> np.ndarray:
            return np.frombuffer(bytes(data), dtype=">f4", offset=4).astype(np.float32)

    VectorDumper.oid = oid
    conn.adapters.register_dumper(Vector, VectorDumper)
    conn.adapters.register_loader(oid, VectorLoader)


def render(dialect: Any, frag: Fragment | str | Any) -> tuple[Any, list[Any] | None]:
    """A statement for psycopg's client-side binding: ``%s`` placeholders and every literal ``%`` of
    the text doubled (identifiers may hold one: ``table_prefix="a%b"``). Always executed *with* the
    returned list, even when empty, so psycopg reads ``%%`` back as ``%``. (A composed
    ``psycopg.sql`` object passes through as it is.)"""
    if not isinstance(frag, (str, Fragment)):
        return frag, None
    if isinstance(frag, str):
        return frag.replace("%", "%%"), []
    binder = Binder(dialect, style="pyformat")
    text = binder.render(frag)
    return text, binder.values


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
