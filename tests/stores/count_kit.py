"""What the store-side COUNT tests share: an engine over a small corpus, and a query's groups."""

from __future__ import annotations

from typing import Any

from nlql import Engine
from nlql.embedders import HashEmbedder

Corpus = list[tuple[str, str, dict[str, Any]]]


def engine_over(store: Any, corpus: Corpus) -> Engine:
    """An engine on ``store`` holding ``corpus`` (``(id, text, metadata)`` triples), hash embedder."""
    e = Engine(embedder=HashEmbedder(dim=16), store=store, warm_up=False)
    e.add_texts([t for _, t, _ in corpus], ids=[d for d, _, _ in corpus], metadatas=[m for _, _, m in corpus])
    return e


def groups(engine: Engine, query: str) -> tuple[list[tuple[Any, int]], dict[str, Any]]:
    """``([(group, count), …], stats)`` of a COUNT query."""
    hits = engine.search(query)
    return [(h.group, h.count) for h in hits], hits.stats
