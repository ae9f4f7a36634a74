"""SPEC §11 counting (SELECT COUNT(unit) BY …) and LIMIT n AUTOCUT k, and the two §6 changes (an inline
SIMILARITY/BM25 in WHERE orders the rows; ORDER BY sorts numeric strings with numbers), each against a
brute-force reference computed here from the rows themselves, not from the engine's grouping code."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from nlql import Engine, NLQLError
from nlql.embedders import HashEmbedder
from nlql.execute.autocut import cut_at

SOURCES = ["wiki", "news", "blog", None, "2024", 2024]
TAGS = ["rag", "llm", "agents", "2025", 2025]


def _docs() -> list[tuple[str, str, dict[str, Any]]]:
    rng = random.Random(5)
    out = []
    for i in range(40):
        meta: dict[str, Any] = {"n": i}
        if i % 9:
            meta["source"] = rng.choice(SOURCES)
        if i % 4 == 0:
            meta["tags"] = rng.choice(TAGS)
        elif i % 4 != 3:
            meta["tags"] = [rng.choice(TAGS) for _ in range(rng.randrange(0, 4))]
        text = f"Solar energy note {i}. Cats and dogs {i % 3}." + (" Extra line here." if i % 5 == 0 else "")
        out.append((f"d{i:02d}", text, meta))
    return out


@pytest.fixture(scope="module")
def engine() -> Engine:
    e = Engine(embedder=HashEmbedder(dim=64), store="memory", warm_up=False)
    docs = _docs()
    e.add_texts([t for _, t, _ in docs], ids=[d for d, _, _ in docs], metadatas=[m for _, _, m in docs])
    return e


def _norm(v: Any) -> Any:
    """The reference's own grouping key: numbers by value (1 == 1.0), strings apart from numbers."""
    if v is None:
        return ("null",)
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, (int, float)):
        return ("num", v)
    return ("str", v)


def _members(v: Any) -> list[Any]:
    if isinstance(v, list):
        out: dict[Any, Any] = {}
        for x in v:
            out.setdefault(_norm(x), x)
        return list(out.values())
    return [v]


def _sort_value(v: Any) -> tuple:
    if v is None:
        return (2, 0, "")
    if isinstance(v, (int, float)):
        return (0, v, "")
    try:
        return (0, float(v), "")
    except ValueError:
        return (1, 0, v)


def _reference(rows: list[dict[str, Any]], keys: list[str]) -> list[tuple[tuple, int]]:
    counts: Counter = Counter()
    shown: dict[tuple, tuple] = {}
    for meta in rows:
        combos: list[tuple] = [()]
        for k in keys:
            combos = [c + (m,) for c in combos for m in _members(meta.get(k))]
        for c in combos:
            key = tuple(_norm(v) for v in c)
            counts[key] += 1
            shown.setdefault(key, c)
    groups = sorted(counts, key=lambda k: (-counts[k], tuple(_sort_value(v) for v in shown[k])))
    return [(shown[k], counts[k]) for k in groups]


def _got(hits: Any, keys: list[str]) -> list[tuple[tuple, int]]:
    return [(tuple(h.group[f"meta.{k}"] for k in keys), h.count) for h in hits]


@pytest.mark.parametrize("keys", [["source"], ["tags"], ["source", "tags"]])
def test_count_by_documents(engine: Engine, keys: list[str]) -> None:
    rows = [m for _, _, m in _docs()]
    q = "SELECT COUNT(DOCUMENT) BY " + ", ".join(f"meta.{k}" for k in keys)
    assert _got(engine.search(q), keys) == _reference(rows, keys)


def test_count_sentences_with_a_similarity_threshold(engine: Engine) -> None:
    sims = engine.search('SELECT SENTENCE LET s = SIMILARITY(content, "solar energy") WHERE s >= 0.3')
    rows = [h.metadata for h in sims]
    assert rows, "the threshold must leave some rows"
    got = engine.search('SELECT COUNT(SENTENCE) BY meta.source LET s = SIMILARITY(content, "solar energy") '
                        "WHERE s >= 0.3")
    assert _got(got, ["source"]) == _reference(rows, ["source"])
    total = engine.search('SELECT COUNT(SENTENCE) WHERE SIMILARITY(content, "solar energy") >= 0.3')
    assert [(h.group, h.count) for h in total] == [({}, len(rows))]


def test_count_order_limit_offset(engine: Engine) -> None:
    rows = [m for _, _, m in _docs()]
    ref = _reference(rows, ["source"])
    by_value = sorted(ref, key=lambda g: _sort_value(g[0][0]))
    got = engine.search("SELECT COUNT(DOCUMENT) BY meta.source ORDER BY meta.source LIMIT 3 OFFSET 1")
    assert _got(got, ["source"]) == by_value[1:4]
    asc = engine.search("SELECT COUNT(DOCUMENT) BY meta.source ORDER BY count ASC")
    counts = [h.count for h in asc]
    assert counts == sorted(counts) and sum(counts) == len(rows)
    first = asc[0].to_dict()
    assert first["count"] == counts[0] and set(first["group"]) == {"meta.source"} and "best" not in first


def test_count_chunks_match_the_chunk_rows(engine: Engine) -> None:
    chunks = engine.search("SELECT CHUNK WHERE meta.n < 20")
    got = engine.search("SELECT COUNT(CHUNK) BY meta.source WHERE meta.n < 20")
    assert _got(got, ["source"]) == _reference([h.metadata for h in chunks], ["source"])


def test_count_explain_and_errors(engine: Engine) -> None:
    text = str(engine.explain("SELECT COUNT(DOCUMENT) BY meta.source LIMIT 2"))
    assert "count by: meta.source" in text and "groups ordered by: count DESC, meta.source ASC" in text
    with pytest.raises(NLQLError) as info:
        engine.search("SELECT COUNT(SPAN(SENTENCE)) BY meta.source")
    assert "SPAN" in str(info.value)


# ---------------------------------------------------------------------------------------------- autocut


def _ref_cut(values: list[float], k: int) -> int:
    if len(values) < 3:
        return len(values)
    gaps = [abs(a - b) for a, b in zip(values, values[1:])]
    mean = sum(gaps) / len(gaps)
    seen = 0
    for i, g in enumerate(gaps):
        if g > 2 * mean:
            seen += 1
            if seen == k:
                return i + 1
    return len(values)


def test_cut_rule() -> None:
    assert cut_at([0.9, 0.89, 0.88, 0.3, 0.29, 0.28, 0.27], 1) == 3
    assert cut_at([1.0, 0.99, 0.5, 0.49, 0.48, 0.0], 1) == 2
    assert cut_at([1.0, 0.99, 0.5, 0.49, 0.48, 0.0], 2) == 5
    assert cut_at([1.0, 0.99, 0.5, 0.49, 0.48, 0.0], 3) == 6
    assert cut_at([0.9, 0.89, 0.5, 0.49, 0.1], 1) == 5  # gaps .01 .39 .01 .39: none above 2 × mean (.4)
    assert cut_at([0.9, 0.1], 1) == 2 and cut_at([0.5, 0.5, 0.5], 1) == 3
    rng = random.Random(3)
    for _ in range(200):
        vals = sorted((rng.random() for _ in range(rng.randrange(0, 12))), reverse=True)
        k = rng.randrange(1, 4)
        assert cut_at(vals, k) == _ref_cut(vals, k)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_autocut_keeps_the_rows_before_the_kth_jump(engine: Engine, k: int) -> None:
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, "solar energy note 3") ORDER BY s DESC LIMIT 12'
    full = engine.search(q)
    want = _ref_cut([h.scores["s"] for h in full], k)
    got = engine.search(f"{q} AUTOCUT {k}")
    assert [h.id for h in got] == [h.id for h in full][:want]
    assert got.stats["autocut"] == {"k": k, "of": len(full), "kept": want}
    assert f"autocut: {k} on s" in str(engine.explain(f"{q} AUTOCUT {k}"))


def test_autocut_errors(engine: Engine) -> None:
    for q in ("SELECT SENTENCE LIMIT 5 AUTOCUT 0", "SELECT SENTENCE AUTOCUT 1"):
        with pytest.raises(NLQLError):
            engine.search(q)


# ------------------------------------------------------------------------------------------- §6 order


def test_inline_similarity_in_where_orders_the_rows(engine: Engine) -> None:
    inline = engine.search('SELECT SENTENCE WHERE SIMILARITY(content, "cats and dogs") > 0.1 LIMIT 7')
    bound = engine.search('SELECT SENTENCE LET s = SIMILARITY(content, "cats and dogs") WHERE s > 0.1 '
                          "ORDER BY s DESC LIMIT 7")
    assert [h.id for h in inline] == [h.id for h in bound]
    kw = engine.search('SELECT SENTENCE WHERE BM25(content, "extra line") > 0 AND meta.n < 30')
    ref = engine.search('SELECT SENTENCE LET k = BM25(content, "extra line") WHERE k > 0 AND meta.n < 30 '
                        "ORDER BY k DESC")
    assert [h.id for h in kw] == [h.id for h in ref] and kw


def test_order_by_sorts_numeric_strings_with_numbers() -> None:
    e = Engine(embedder=HashEmbedder(dim=16), store="memory", warm_up=False)
    years: list[Any] = [2025, "2024", 2023.5, "2025", "n/a", 10, None]
    e.add_texts([f"row {i}" for i in range(len(years))], ids=[f"r{i}" for i in range(len(years))],
                metadatas=[{"year": y} for y in years])
    got = [h.metadata.get("year") for h in e.search("SELECT DOCUMENT ORDER BY meta.year")]
    assert got == [10, 2023.5, "2024", 2025, "2025", "n/a", None]  # 2025 and "2025" tie: insertion order
    got = [h.metadata.get("year") for h in e.search("SELECT DOCUMENT ORDER BY meta.year DESC")]
    assert got == ["n/a", 2025, "2025", "2024", 2023.5, 10, None]
