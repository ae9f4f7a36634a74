"""SPEC §11 ``SELECT COUNT(unit) BY …`` grouped by DuckDB and PostgreSQL themselves (one ``GROUP BY``):
the same groups, counts and order as the built-in store for lists (members once, nested lists, null
members, empty lists), scalars, numeric strings, booleans, big integers, odd bytes, missing keys and
``doc_id``; explain and the stats say the store grouped; and one value stored in two forms (``1`` and
``1.0``) or a value PostgreSQL's JSON functions cannot read (``\\u0000``) is counted by the engine
instead, with the built-in store's answer."""

from __future__ import annotations

import random
from typing import Any

import pytest
from count_kit import engine_over
from count_kit import groups as _groups

from nlql import Engine

# (no number beside a numeric string of the same value: such groups sort as equal, and their order is
# the rows', which the engine keeps: see the last tests)
VALUES: list[Any] = ["rag", "llm", "RAG", "2025", 7, "7.5", 0.5, True, False, "2024-05-01", "a\x01b",
                     "é", "\U0001f600 x", 12345678901234567890, None, [1, 2]]


def _value(rng: random.Random) -> Any:
    kind = rng.randrange(6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice(VALUES)
    if kind == 2:
        return []
    return [rng.choice(VALUES) for _ in range(rng.randrange(1, 5))]  # repeats, null and list members too


def _corpus() -> list[tuple[str, str, dict[str, Any]]]:
    rng = random.Random(7)
    docs = []
    for i in range(80):
        meta: dict[str, Any] = {"n": i % 4}
        if rng.random() < 0.85:
            meta["tags"] = _value(rng)
        if rng.random() < 0.5:
            meta["nested"] = {"tags": _value(rng)}
        text = " ".join(f"Row {i} sentence {j} about {rng.choice(['cats', 'dogs', 'birds'])}."
                        for j in range(rng.randrange(0, 4)))  # some documents have no sentence at all
        docs.append((f"d{i:02d}", text, meta))
    return docs


CORPUS = _corpus()
QUERIES = [
    "SELECT COUNT(DOCUMENT) BY meta.tags",
    "SELECT COUNT(SENTENCE) BY meta.tags",
    "SELECT COUNT(DOCUMENT) BY meta.nested.tags, meta.n",
    "SELECT COUNT(SENTENCE) BY doc_id LIMIT 7",
    "SELECT COUNT(DOCUMENT) BY meta.tags ORDER BY meta.tags DESC NULLS FIRST LIMIT 9 OFFSET 2",
    "SELECT COUNT(DOCUMENT)",
    "SELECT COUNT(SENTENCE) WHERE meta.n == 99",
    'SELECT COUNT(SENTENCE) BY meta.tags WHERE content CONTAINS "cats" AND meta.n != 1',
    'SELECT COUNT(DOCUMENT) BY meta.n WHERE meta.tags HAS ANY ("rag", 7)',
    "SELECT COUNT(DOCUMENT) BY meta.missing",
]




def _sql_store(kind: str, request: pytest.FixtureRequest) -> Any:
    if kind == "duckdb":
        pytest.importorskip("duckdb")
        from nlql.stores.duckdb import DuckDBStore

        return DuckDBStore()
    pytest.importorskip("psycopg")
    from nlql.stores.pgvector import PgVectorStore

    return PgVectorStore(request.getfixturevalue("pg_dsn"), exact=True)


@pytest.fixture(scope="module")
def reference() -> Engine:
    return engine_over("memory", CORPUS)


@pytest.fixture(params=["duckdb", "pgvector"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)




def test_the_store_groups_with_the_builtin_answers(reference: Engine, kind: str,
                                                  request: pytest.FixtureRequest) -> None:
    engine = engine_over(_sql_store(kind, request), CORPUS)
    for query in QUERIES:
        got, stats = _groups(engine, query)
        want, _ = _groups(reference, query)
        assert got == want, query
        assert stats["count_path"] == "the store's own grouping", query
        assert "store: one GROUP BY" in str(engine.explain(query)), query


def test_what_the_store_cannot_group_is_counted_by_the_engine(reference: Engine, kind: str,
                                                              request: pytest.FixtureRequest) -> None:
    engine = engine_over(_sql_store(kind, request), CORPUS)
    for query in ('SELECT COUNT(DOCUMENT) BY meta.tags LET s = SIMILARITY(content, "cats") WHERE s >= 0.1',
                  "SELECT COUNT(CHUNK) BY meta.tags", "SELECT COUNT(DOCUMENT) BY LOWER(doc_id)"):
        assert "engine: every row passing WHERE" in str(engine.explain(query)), query
        assert _groups(engine, query)[0] == _groups(reference, query)[0], query


def test_one_value_in_two_forms_is_counted_by_the_engine(kind: str, request: pytest.FixtureRequest) -> None:
    """``1`` and ``1.0`` are one group; a document holding both in one list counts once."""
    corpus = [("a", "One.", {"v": [1, 1.0, "x"]}), ("b", "Two.", {"v": 1}), ("c", "Three.", {"v": 1.0}),
              ("d", "Four.", {"v": [2, 2]})]
    engine, reference = engine_over(_sql_store(kind, request), corpus), engine_over("memory", corpus)
    for query in ("SELECT COUNT(DOCUMENT) BY meta.v", "SELECT COUNT(SENTENCE) BY meta.v"):
        got, stats = _groups(engine, query)
        assert got == _groups(reference, query)[0]
        assert got[0] == ({"meta.v": 1}, 3) and ({"meta.v": "x"}, 1) in got and ({"meta.v": 2}, 1) in got
        assert stats["count_path"] != "the store's own grouping"


def test_groups_that_sort_as_equal_keep_the_rows_order(kind: str, request: pytest.FixtureRequest) -> None:
    """``"2"`` and ``2`` are two groups that sort as equal: first seen, first shown, as on the built-in store."""
    for corpus, first in (([("a", "One.", {"v": "2"}), ("b", "Two.", {"v": 2})], "2"),
                          ([("a", "One.", {"v": [2, "2"]}), ("b", "Two.", {"v": "2"}), ("c", "Three.", {"v": 2})], 2)):
        engine, reference = engine_over(_sql_store(kind, request), corpus), engine_over("memory", corpus)
        for query in ("SELECT COUNT(SENTENCE) BY meta.v", "SELECT COUNT(DOCUMENT) BY meta.v ORDER BY meta.v DESC"):
            got, stats = _groups(engine, query)
            assert got == _groups(reference, query)[0], query
            assert [type(g["meta.v"]) for g, _ in got] == [type(first), str if first == 2 else int], query
            assert stats["count_path"] != "the store's own grouping"


def test_odd_bytes_in_metadata_count_as_the_builtin_store_counts(kind: str, request: pytest.FixtureRequest) -> None:
    """NUL, a lone surrogate, control characters: the store's JSON functions may refuse some (PostgreSQL
    ``\\u0000``, DuckDB a lone surrogate); the engine then counts, with the same groups."""
    corpus = [("a", "One.", {"v": ["a\x00b", "x"]}), ("b", "Two.", {"v": "a\x00b"}), ("c", "Three.", {"v": "lone \ud800"}),
              ("d", "Four.", {"v": ["x", "\x08"]})]
    engine, reference = engine_over(_sql_store(kind, request), corpus), engine_over("memory", corpus)
    for query in ("SELECT COUNT(DOCUMENT) BY meta.v", "SELECT COUNT(SENTENCE) BY meta.v, doc_id"):
        got = _groups(engine, query)[0]
        assert got == _groups(reference, query)[0], query
    assert ({"meta.v": "a\x00b"}, 2) in _groups(engine, "SELECT COUNT(DOCUMENT) BY meta.v")[0]
