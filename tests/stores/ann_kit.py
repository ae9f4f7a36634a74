"""Shared helpers for the Faiss and hnswlib store tests: documents, clustered vectors, a reference
built-in store with the same keys, and forcing the index path."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from nlql.stores.ann import AnnStore
from nlql.stores.base import DocRecord, UnitRecord
from nlql.stores.memory import MemoryStore

DIM = 16


def unit(v: np.ndarray) -> np.ndarray:
    v = np.atleast_2d(np.asarray(v, dtype=np.float32))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def docs_from(vectors: np.ndarray, metas: list[dict[str, Any]], *, per_doc: int = 1, seq0: int = 1,
              prefix: str = "d") -> list[DocRecord]:
    out = []
    for i in range(len(vectors) // per_doc):
        vs = vectors[i * per_doc : (i + 1) * per_doc]
        units = [UnitRecord(p, f"{prefix}{i} s{p}", 0, 1) for p in range(per_doc)]
        out.append(DocRecord(f"{prefix}{i}", " ".join(u.content for u in units), metas[i], units, vs,
                             seq=seq0 + i))
    return out


def clustered(n: int, dim: int, centres: int, rng: np.random.Generator, noise: float = 0.8) -> np.ndarray:
    c = unit(rng.standard_normal((centres, dim)))
    x = c[rng.integers(0, centres, n)] + rng.standard_normal((n, dim)).astype(np.float32) * (noise / dim**0.5)
    return unit(x)


def pair(store: Any, docs: list[DocRecord], dim: int = DIM) -> MemoryStore:
    """Ingest the same documents into ``store`` and a reference MemoryStore (same keys)."""
    ref = MemoryStore()
    for s in (ref, store):
        s.open(dim)
        s.upsert(docs)
    return ref


def force_index(store: AnnStore) -> None:
    """Never take the exact shortcut: every search goes through the index or graph (per instance)."""
    store.EXACT_PER_K = 0  # type: ignore[misc]
    store.EXACT_ROWS = 0  # type: ignore[misc]


@contextmanager
def forced(store: AnnStore, ef_search: int | None = None) -> Iterator[AnnStore]:
    """Temporarily force the index path (and an ef_search) on a shared store."""
    ef = store.ef_search
    force_index(store)
    if ef_search is not None:
        store.ef_search = ef_search
    try:
        yield store
    finally:
        del store.EXACT_PER_K, store.EXACT_ROWS
        store.ef_search = ef


def ident(store: Any, hits: list[tuple[Any, float]]) -> list[tuple[str, int]]:
    return [(r.doc_id, r.position) for r in store.fetch([k for k, _ in hits])]


def clustered_reference(store: AnnStore) -> tuple[AnnStore, MemoryStore, np.ndarray]:
    """5,000 vectors around 50 centres (dim 64), 5 of them tagged "rare", in ``store`` and a reference;
    returns (store, reference, 50 query vectors)."""
    rng = np.random.default_rng(3)
    vecs = clustered(5050, 64, 50, rng)
    metas = [{"tag": "rare" if i % 1000 == 17 else "common", "b": i % 50} for i in range(5000)]
    ref = pair(store, docs_from(vecs[:5000], metas), dim=64)
    return store, ref, vecs[5000:]
