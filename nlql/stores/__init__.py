"""Stores: the built-in numpy store and adapters for Qdrant, Chroma, Faiss, hnswlib and pgvector.

Adapters import their optional dependency only when used; a missing one raises an error naming the
``pip install 'nlql[<name>]'`` that fixes it.
"""

from __future__ import annotations

from typing import Any

from nlql.stores.base import Capabilities, Store
from nlql.stores.memory import MemoryStore

_LAZY = {
    "QdrantStore": "nlql.stores.qdrant",
    "ChromaStore": "nlql.stores.chroma",
    "FaissStore": "nlql.stores.faiss",
    "HnswlibStore": "nlql.stores.hnswlib",
    "PgVectorStore": "nlql.stores.pgvector",
}

__all__ = ["Capabilities", "MemoryStore", "Store", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(module), name)
