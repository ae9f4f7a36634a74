"""Stores: the built-in numpy store and adapters for Qdrant, Chroma, Faiss, hnswlib and pgvector.

:data:`REGISTRY` is the one table of stores: ``Engine(store=...)``, the CLI, the contract suite, the
shared adapter tests and ``bench/stores.py`` all read it. Adding a store is its module, one row here,
its tests and its docs page (docs/architecture.md). Adapters import their optional dependency only when
used; a missing one raises an error naming the ``pip install 'nlql-engine[<extra>]'`` that fixes it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlql.errors import NLQLError
from nlql.pushdown import Capabilities
from nlql.stores.base import Store
from nlql.stores.memory import MemoryStore

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass(frozen=True)
class StoreEntry:
    """One row of the store registry.

    ``schemes`` are the URL schemes whose strings open this store (``"postgresql"`` for
    ``postgresql://…``); ``from_url`` turns such a string into the constructor's arguments. ``exact``
    holds the constructor options the contract suite uses so the store answers exactly (no ANN
    approximation); ``server`` stores keep all per-document state in a server (SPEC §10).
    """

    name: str
    cls: str
    module: str
    extra: str | None
    summary: str
    schemes: tuple[str, ...] = ()
    exact: Mapping[str, Any] = field(default_factory=dict)
    server: bool = False
    from_url: Callable[[str], dict[str, Any]] | None = None
    bare: bool = False  # also opens by its bare name (in-process defaults), though it has schemes

    @property
    def by_name(self) -> bool:
        """``Engine(store=name)`` opens it: stores without URL schemes, and those marked ``bare``."""
        return self.bare or not self.schemes

    def load(self) -> type:
        """The store class (imports its module, and so its optional dependency)."""
        return getattr(importlib.import_module(self.module), self.cls)

    def create(self, url: str | None = None, **options: Any) -> Store:
        """A new store: from a URL of one of ``schemes``, else with its in-process defaults."""
        kwargs: dict[str, Any] = {}
        if url is not None:
            kwargs = self.from_url(url) if self.from_url is not None else {"url": url}
        kwargs.update(options)
        return self.load()(**kwargs)


def _dsn(url: str) -> dict[str, Any]:
    return {"dsn": url}


def _duckdb_url(url: str) -> dict[str, Any]:
    from nlql.stores.duckdb.driver import parse_url  # no duckdb import: the driver loads in the store

    return parse_url(url)


def _qdrant_url(url: str) -> dict[str, Any]:
    from nlql.stores.qdrant import from_url

    return from_url(url)


def _milvus_url(url: str) -> dict[str, Any]:
    from nlql.stores.milvus import from_url

    return from_url(url)


REGISTRY: tuple[StoreEntry, ...] = (
    StoreEntry("memory", "MemoryStore", "nlql.stores.memory", None,
               "the built-in numpy store (in memory, or a directory path for the persistent one)"),
    StoreEntry("qdrant", "QdrantStore", "nlql.stores.qdrant", "qdrant",
               "Qdrant: Qdrant Edge in process (qdrant, qdrant:///path) or a server (qdrant+http://host:6333)",
               schemes=("qdrant", "qdrant+http", "qdrant+https"), exact={"exact": True}, from_url=_qdrant_url,
               bare=True),
    StoreEntry("chroma", "ChromaStore", "nlql.stores.chroma", "chroma", "Chroma (embedded)",
               exact={"hnsw_ef": 1000}),
    StoreEntry("faiss", "FaissStore", "nlql.stores.faiss", "faiss", "faiss-cpu (flat or HNSW index)",
               exact={"index": "flat"}),
    StoreEntry("hnswlib", "HnswlibStore", "nlql.stores.hnswlib", "hnswlib", "hnswlib (HNSW index)",
               exact={"ef_search": 1000}),
    StoreEntry("pgvector", "PgVectorStore", "nlql.stores.pgvector", "pgvector",
               "PostgreSQL + pgvector, hybrid plans as one SQL statement",
               schemes=("postgresql", "postgres"), exact={"exact": True}, server=True, from_url=_dsn),
    StoreEntry("duckdb", "DuckDBStore", "nlql.stores.duckdb", "duckdb",
               "DuckDB in process (memory, a file, or a table / Parquet file read in place), "
               "hybrid plans as one SQL statement", schemes=("duckdb",), from_url=_duckdb_url),
    StoreEntry("milvus", "MilvusStore", "nlql.stores.milvus", "milvus",
               "Milvus: Milvus Lite file (milvus:///path/file.db) or a server/cluster (milvus+http://host:19530)",
               schemes=("milvus", "milvus+http", "milvus+https"), exact={"index": "flat"}, server=True,
               from_url=_milvus_url),
)

_BY_NAME = {e.name: e for e in REGISTRY}
_BY_CLASS = {e.cls: e for e in REGISTRY}


def store_names() -> tuple[str, ...]:
    """The names ``Engine(store=…)`` accepts as bare words."""
    return tuple(e.name for e in REGISTRY if e.by_name)


def entry(name: str) -> StoreEntry:
    """The registry row of a store name (``KeyError`` if unknown)."""
    return _BY_NAME[name]


def _known() -> str:
    words = ", ".join(repr(n) for n in store_names())
    schemes = ", ".join(f"{s}://…" for e in REGISTRY for s in e.schemes)
    return f"{words}, a directory path, or a URL ({schemes})"


def open_store(store: str | Path | Store) -> Store:
    """A store from a registered name, a URL of a registered scheme, a directory path or a store object.

    A URL whose scheme no store registers, and an empty string, are :class:`NLQLError`\\ s naming what
    is known; any other string is the directory of a persistent built-in store.
    """
    if not isinstance(store, (str, Path)):
        return store
    name = str(store)
    if isinstance(store, str) and name in _BY_NAME and _BY_NAME[name].by_name:
        return _BY_NAME[name].create()
    if "://" in name or (isinstance(store, str) and name.partition(":")[0] in
                         {s for e in REGISTRY for s in e.schemes}):
        scheme = name.partition(":")[0].lower()
        for e in REGISTRY:
            if scheme in e.schemes:
                return e.create(name)
        raise NLQLError(f"unknown store URL scheme {scheme + '://'!r} in store={name!r}",
                        hint=f"known stores: {_known()}")
    if not name.strip():
        raise NLQLError("store='' names no store", hint=f"use one of {_known()}")
    bare = isinstance(store, str) and not any(c in name for c in "/\\") and not name.startswith((".", "~"))
    if bare and not Path(name).exists():
        # a bare word that is no store name: a typo far more often than a wish for a new directory here
        import difflib

        close = difflib.get_close_matches(name, store_names(), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise NLQLError(f"unknown store {name!r}",
                        hint=f"{hint}known stores: {_known()}; for a new directory store here write './{name}'")
    return MemoryStore(name)


def __getattr__(name: str) -> Any:
    e = _BY_CLASS.get(name)
    if e is None:
        raise AttributeError(name)
    return e.load()


__all__ = ["REGISTRY", "Capabilities", "MemoryStore", "Store", "StoreEntry", "entry", "open_store",
           "store_names", *(e.cls for e in REGISTRY if e.cls != "MemoryStore")]
