"""Shared pieces of the reliability suite: a small corpus, engines over each store, a probe query.

Imported by the test modules of ``tests/reliability`` as ``relhelp`` (pytest puts this folder on
``sys.path``). Nothing here is a test.
"""

from __future__ import annotations

import math
import os
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder

CLOCK = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)
DIM = 64

#: Every store the fuzz tests run against (the built-in one, Qdrant local mode, pgvector).
FUZZ_STORES = ["memory", "qdrant", "pgvector"]

WORDS = ["agents", "tools", "memory", "retrieval", "cats", "dogs", "energy", "solar", "policy", "graphs",
         "planning", "search", "vectors", "language", "games", "river"]
STATUSES = ["published", "draft", "archived"]


def corpus(n: int = 12) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """``n`` small documents with mixed metadata (numbers, numeric strings, nulls, nesting)."""
    texts, ids, metas = [], [], []
    for i in range(n):
        w = [WORDS[(i * 5 + j * 3) % len(WORDS)] for j in range(4)]
        texts.append(f"{w[0].capitalize()} use {w[1]} in part {i}. The {w[2]} of {w[3]} matters here.")
        ids.append(f"doc-{i:02d}")
        meta: dict[str, Any] = {"status": STATUSES[i % 3], "n": i, "year": [2020, "2021", 2022.0, None][i % 4],
                                "nested": {"a": i % 4}, "tags": ["x", "y"][: i % 3]}
        if i % 5 == 0:
            meta["rare"] = "needle"
        metas.append(meta)
    return texts, ids, metas


#: Queries whose answers must never change, whatever was thrown at the engine before.
PROBES = [
    'SELECT SENTENCE LET rel = SIMILARITY(content, "agents tools memory") '
    'WHERE meta.status == "published" ORDER BY rel DESC LIMIT 3',
    'SELECT DOCUMENT WHERE meta.n >= 3 AND meta.rare == "needle" ORDER BY meta.n DESC',
    'SELECT SENTENCE LET k = BM25(content, "solar energy") WHERE k > 0 ORDER BY k DESC LIMIT 4',
]


def answer(engine: Engine, query: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    """A comparable form of a result: (id, content, metadata) per hit, in order."""
    return [(h.id, h.content, h.metadata) for h in engine.search(query, params=params)]


def make_store(name: str, request: pytest.FixtureRequest, *, dsn_fixture: str = "pg_module_dsn") -> Any:
    """A fresh store object (or name) of one kind, with exact recall so results match the built-in store."""
    if name == "memory":
        return "memory"
    if name == "qdrant":
        pytest.importorskip("qdrant_client")
        from nlql.stores.qdrant import QdrantStore

        return QdrantStore(location=":memory:", collection="r" + uuid.uuid4().hex[:10], exact=True)
    if name == "pgvector":
        pytest.importorskip("psycopg")
        from nlql.stores.pgvector import PgVectorStore

        return PgVectorStore(request.getfixturevalue(dsn_fixture), exact=True,
                             table_prefix="r" + uuid.uuid4().hex[:10])
    raise ValueError(name)


def make_engine(store: Any, **kwargs: Any) -> Engine:
    """An engine with the test embedder and the fixed clock."""
    return Engine(embedder=HashEmbedder(dim=DIM), store=store, clock=lambda: CLOCK, warm_up=False, **kwargs)


def load(engine: Engine) -> Engine:
    texts, ids, metas = corpus()
    engine.add_texts(texts, ids=ids, metadatas=metas)
    return engine


def deep_mode(deep: bool) -> bool:
    """Whether the long versions run (``--deep`` or ``NLQL_DEEP=1``)."""
    return deep or os.environ.get("NLQL_DEEP") == "1"


def same(a: Any, b: Any) -> bool:
    """Equality that also compares types (``1`` is not ``1.0``, a list is not a tuple) and NaN to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return bool(a == b)


#: Every store of the registry, plus the persistent built-in store ("directory").
def all_stores() -> list[str]:
    from nlql.stores import REGISTRY

    return [e.name for e in REGISTRY] + ["directory"]


def fresh_store(name: str, request: pytest.FixtureRequest, tmp_path: Any, *, dsn_fixture: str = "pg_dsn") -> Any:
    """A new, empty store of one kind in exact mode (what ``Engine(store=…)`` takes), built from its
    registry row; ``"directory"`` is a persistent built-in store in ``tmp_path``. A module-scoped fixture
    passes ``dsn_fixture="pg_module_dsn"`` (each store still gets its own table prefix)."""
    import inspect

    from nlql.stores import entry

    if name == "memory":
        return "memory"
    if name == "directory":
        return str(tmp_path / f"store-{uuid.uuid4().hex[:6]}")
    from nlql.errors import MissingDependencyError

    e = entry(name)
    try:
        e.load()
    except (ImportError, MissingDependencyError) as exc:
        pytest.skip(f"{name}: {exc}")
    options = dict(e.exact)
    params = inspect.signature(e.load()).parameters
    if "collection" in params:
        options["collection"] = "c" + uuid.uuid4().hex[:8]
    if e.schemes:
        url = request.getfixturevalue(dsn_fixture if name == "pgvector" else f"{name}_module_url")
        if "table_prefix" in params:
            options["table_prefix"] = "r" + uuid.uuid4().hex[:8]
        return e.create(url, **options)
    return e.create(**options)
