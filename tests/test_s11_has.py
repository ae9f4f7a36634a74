"""SPEC §11 lists in metadata: HAS, HAS ANY, HAS ALL (each with NOT), against a brute-force reference.

The reference below is written from the SPEC text alone (it does not call nlql.values): on a list HAS is
membership with ``==``'s typing (numbers and numeric strings numerically, integers exactly), on a scalar
it is ``==``, null or a missing key is UNKNOWN, an empty list has no member, HAS ALL () is TRUE on a list.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.render import quote_string

VALUES: list[Any] = ["rag", "llm", "2025", 2025, 2025.0, 7, "7.0", True, 2**53 + 1, 2**53, "x", None]


def _num(v: Any) -> Any:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return None
        if not math.isfinite(f) or v.strip() != v:
            return None
        return int(v) if v.lstrip("+-").isdigit() else f
    return None


def eq(a: Any, b: Any) -> bool | None:
    """``a == b`` as SPEC §6 reads it (None: UNKNOWN)."""
    if a is None or b is None:
        return None
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b if isinstance(a, bool) and isinstance(b, bool) else None
    if isinstance(a, (int, float)) or isinstance(b, (int, float)):
        x, y = _num(a), _num(b)
        return None if x is None or y is None else x == y
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return None


def ref_has(value: Any, needle: Any, quantifier: str | None, negated: bool) -> bool | None:
    if value is None:
        r: bool | None = None
    elif isinstance(value, list):
        def member(n: Any) -> bool:
            return n is not None and any(eq(item, n) is True for item in value)
        if quantifier is None:
            r = None if needle is None else member(needle)
        elif quantifier == "ANY":
            r = any(member(n) for n in needle)
        else:
            r = all(member(n) for n in needle)
    else:
        if quantifier is None:
            r = eq(value, needle)
        else:
            results = [eq(value, n) for n in needle]
            if quantifier == "ANY":
                r = True if True in results else (None if None in results else False)
            else:
                r = False if False in results else (None if None in results else True)
    if negated and r is not None:
        r = not r
    return r


def _lit(v: Any) -> str:
    if v is None:
        return "NULL"
    if v is True:
        return "TRUE"
    if isinstance(v, str):
        return quote_string(v)
    return repr(v)


def _corpus(rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for i in range(60):
        kind = rng.randrange(5)
        if kind == 0:
            meta: dict[str, Any] = {}
        elif kind == 1:
            meta = {"tags": None}
        elif kind == 2:
            meta = {"tags": rng.choice(VALUES[:-1])}
        else:
            meta = {"tags": [rng.choice(VALUES) for _ in range(rng.randrange(0, 4))]}
        docs.append((f"d{i:02d}", meta))
    return docs


@pytest.fixture(scope="module")
def corpus() -> tuple[Engine, list[tuple[str, dict[str, Any]]]]:
    rng = random.Random(11)
    docs = _corpus(rng)
    e = Engine(embedder=HashEmbedder(dim=32), store="memory", warm_up=False)
    e.add_texts([f"Row {d} says hello." for d, _ in docs], ids=[d for d, _ in docs], metadatas=[m for _, m in docs])
    return e, docs


def _queries(rng: random.Random) -> list[tuple[str, Any, str | None, bool]]:
    out = []
    for _ in range(80):
        quantifier = rng.choice([None, "ANY", "ALL"])
        negated = rng.random() < 0.4
        if quantifier is None:
            needle: Any = rng.choice(VALUES[:-1])
            text = _lit(needle)
        else:
            needle = [rng.choice(VALUES[:-1]) for _ in range(rng.randrange(0, 3))]
            text = "(" + ", ".join(_lit(v) for v in needle) + ")"
        word = ("NOT HAS" if negated else "HAS") + (f" {quantifier}" if quantifier else "")
        out.append((f"meta.tags {word} {text}", needle, quantifier, negated))
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_has_matches_the_reference(corpus: tuple[Engine, list[tuple[str, dict[str, Any]]]], seed: int) -> None:
    engine, docs = corpus
    for cond, needle, quantifier, negated in _queries(random.Random(seed)):
        want = [d for d, m in docs if ref_has(m.get("tags"), needle, quantifier, negated) is True]
        got = [h.doc_id for h in engine.search(f"SELECT DOCUMENT WHERE {cond}")]
        assert got == want, cond
        # NOT (…) around the whole predicate is the same three-valued negation (UNKNOWN stays out)
        not_want = [d for d, m in docs if ref_has(m.get("tags"), needle, quantifier, not negated) is True]
        assert [h.doc_id for h in engine.search(f"SELECT DOCUMENT WHERE NOT ({cond})")] == not_want, cond


def test_has_is_pushed_on_the_builtin_store(corpus: tuple[Engine, list[tuple[str, dict[str, Any]]]]) -> None:
    engine, _ = corpus
    text = str(engine.explain('SELECT SENTENCE WHERE meta.tags HAS ANY ("rag", 7) AND meta.tags NOT HAS "x"'))
    assert "pushed filter (memory): (has_any(meta.tags, ('rag', 7)) and not_has(meta.tags, 'x'))" in text
    assert "residual filter (engine): (none)" in text


def test_has_with_parameters_and_in_lets(corpus: tuple[Engine, list[tuple[str, dict[str, Any]]]]) -> None:
    engine, docs = corpus
    want = [d for d, m in docs if ref_has(m.get("tags"), ["rag", "llm"], "ALL", False) is True]
    got = engine.search("SELECT DOCUMENT WHERE meta.tags HAS ALL $t", params={"t": ["rag", "llm"]})
    assert [h.doc_id for h in got] == want
    # HAS as a value: a boolean binding, ordered on
    hits = engine.search('SELECT DOCUMENT LET r = meta.tags HAS "rag" WHERE r IS NOT NULL ORDER BY r DESC')
    values = [ref_has(dict(docs)[h.doc_id].get("tags"), "rag", None, False) for h in hits]
    assert values == sorted(values, reverse=True) and None not in values and True in values
    assert [h.scores["r"] for h in hits] == values


def test_schema_warns_when_a_key_is_never_a_list() -> None:
    e = Engine(embedder=HashEmbedder(dim=16), store="memory", warm_up=False)
    e.add_text("a", id="a", metadata={"source": "wiki", "tags": ["x"]})
    d = e.check('SELECT SENTENCE WHERE meta.source HAS "wiki" AND meta.tags HAS "x"')
    assert [x.severity for x in d] == ["warning"] and "never a list" in d[0].message
    assert [h.doc_id for h in e.search('SELECT SENTENCE WHERE meta.source HAS "wiki"')] == ["a"]


@pytest.mark.parametrize("unit", ["SENTENCE", "DOCUMENT"])
def test_has_under_the_builtin_fast_paths(corpus: tuple[Engine, list[tuple[str, dict[str, Any]]]], unit: str) -> None:
    """With LIMIT the built-in store picks pages with numpy (fast paths): the same rows as the full order."""
    engine, _ = corpus
    for tail in ('LET s = SIMILARITY(content, "row d1 hello") WHERE meta.tags HAS ANY ("rag", 7) ORDER BY s DESC',
                 'LET k = BM25(content, "row d1") WHERE meta.tags NOT HAS "x" ORDER BY k DESC',
                 'LET s = SIMILARITY(content, "hello"), k = BM25(content, "d2"), f = RRF(s, k) '
                 'WHERE meta.tags HAS ALL ("rag") ORDER BY f DESC',
                 'WHERE meta.tags HAS "llm"'):
        full = [h.id for h in engine.search(f"SELECT {unit} {tail}")]
        for limit, offset in ((3, 0), (4, 2)):
            page = [h.id for h in engine.search(f"SELECT {unit} {tail} LIMIT {limit} OFFSET {offset}")]
            assert page == full[offset:offset + limit], (tail, limit, offset)
