"""SPEC §11 ``SELECT COUNT(unit) BY …`` on Qdrant's Rust engine (Qdrant Edge) with its own ``count`` and
``facet`` calls: one BY key that is ``doc_id`` or a metadata key whose values are strings (the common
facet: source, status, language), SENTENCE and DOCUMENT, with a pushed filter or none; the same groups,
counts and order as the built-in store. What Qdrant's facet cannot hold (numbers, booleans, lists, two
BY keys, a filter the adapter re-checks) is counted by the engine, with the same answers."""

from __future__ import annotations

from typing import Any

import pytest
from count_kit import engine_over
from count_kit import groups as _groups

from nlql import Engine

pytest.importorskip("qdrant_edge")

from nlql.stores.qdrant import QdrantStore  # noqa: E402

SOURCES = ["wiki", "news", "Wiki", "forum", "a\x01b", "lone \ud800", "é", "2025", "", "x" * 300]


def _corpus() -> list[tuple[str, str, dict[str, Any]]]:
    docs = []
    for i in range(60):
        meta: dict[str, Any] = {"n": i % 3, "lang": ["en", "fr", None][i % 3]}
        if i % 7:
            meta["source"] = SOURCES[i % len(SOURCES)]
        if i % 11 == 0:
            meta["mixed"] = i  # a number among strings: the engine counts
        else:
            meta["mixed"] = f"m{i % 4}"
        text = " ".join(f"Row {i} sentence {j} about {['cats', 'dogs', 'birds'][(i + j) % 3]}."
                        for j in range(i % 4))  # every fourth document has no sentence at all
        docs.append((f"d{i:02d}", text, meta))
    return docs


CORPUS = _corpus()

#: grouped by Qdrant itself
STORE_QUERIES = [
    "SELECT COUNT(SENTENCE) BY meta.source",
    "SELECT COUNT(DOCUMENT) BY meta.source",
    "SELECT COUNT(DOCUMENT) BY meta.lang ORDER BY meta.lang DESC NULLS FIRST",
    "SELECT COUNT(SENTENCE) BY doc_id LIMIT 7",
    "SELECT COUNT(DOCUMENT) BY doc_id WHERE meta.n == 1",
    "SELECT COUNT(DOCUMENT)",
    "SELECT COUNT(SENTENCE) WHERE meta.n == 99",
    'SELECT COUNT(DOCUMENT) BY meta.source WHERE meta.n != 1 AND meta.lang == "en" LIMIT 3 OFFSET 1',
    'SELECT COUNT(SENTENCE) BY meta.source WHERE id == "d05#1" OR position == 2',
    'SELECT COUNT(SENTENCE) BY doc_id WHERE content CONTAINS "CATS"',
    "SELECT COUNT(DOCUMENT) BY meta.missing",
]

#: counted by the engine (what the facet cannot hold), with the same answers
ENGINE_QUERIES = [
    "SELECT COUNT(DOCUMENT) BY meta.mixed",
    "SELECT COUNT(SENTENCE) BY meta.n",
    "SELECT COUNT(DOCUMENT) BY meta.source, meta.lang",
    'SELECT COUNT(SENTENCE) BY meta.source WHERE meta.source < "m"',
]






@pytest.fixture(scope="module")
def engines() -> tuple[Engine, Engine]:
    return engine_over(QdrantStore(), CORPUS), engine_over("memory", CORPUS)


@pytest.mark.parametrize("query", STORE_QUERIES)
def test_qdrant_groups_with_the_builtin_answers(engines: tuple[Engine, Engine], query: str) -> None:
    qdrant, reference = engines
    got, stats = _groups(qdrant, query)
    assert got == _groups(reference, query)[0]
    assert stats["count_path"] == "the store's own grouping"
    assert "store: exact count and facet calls" in str(qdrant.explain(query))


@pytest.mark.parametrize("query", ENGINE_QUERIES)
def test_what_the_facet_cannot_hold_is_counted_by_the_engine(engines: tuple[Engine, Engine], query: str) -> None:
    qdrant, reference = engines
    got, stats = _groups(qdrant, query)
    assert got == _groups(reference, query)[0]
    assert stats.get("count_path") != "the store's own grouping"


def test_counts_follow_writes_and_deletes() -> None:
    """A replaced document moves between groups and a deleted one leaves them (the store counts what it
    holds now)."""
    corpus = [("a", "One. Two.", {"s": "x"}), ("b", "Three.", {"s": "y"}), ("c", "Four.", {"s": "x"})]
    engine = engine_over(QdrantStore(), corpus)
    query = "SELECT COUNT(DOCUMENT) BY meta.s"
    assert _groups(engine, query)[0] == [({"meta.s": "x"}, 2), ({"meta.s": "y"}, 1)]
    engine.add_texts(["Five. Six. Seven."], ids=["a"], metadatas=[{"s": "y"}])
    engine.delete("c")
    got, stats = _groups(engine, query)
    assert got == [({"meta.s": "y"}, 2)]
    assert stats["count_path"] == "the store's own grouping"
    assert _groups(engine, "SELECT COUNT(SENTENCE) BY meta.s")[0] == [({"meta.s": "y"}, 4)]
