"""docs/language.md §12 (lists, counts, autocut): every example there runs, with the rows it states."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder

DOC = (Path(__file__).resolve().parent.parent / "docs" / "language.md").read_text(encoding="utf-8")
SECTION = DOC[DOC.index("## 12. Lists, counts and autocut"):]


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", SECTION, flags=re.S)


@pytest.fixture(scope="module")
def engine() -> Engine:
    setup = _blocks("python")[0].replace("engine = Engine()", "engine = Engine(embedder=HashEmbedder(dim=64), warm_up=False)")
    scope: dict = {"HashEmbedder": HashEmbedder}
    exec(setup, scope)  # noqa: S102 - the documentation's own set-up code
    return scope["engine"]


def test_has_examples_return_the_rows_they_state(engine: Engine) -> None:
    lines = [line for block in _blocks("sql") for line in block.splitlines() if "HAS" in line]
    assert len(lines) == 4
    for line in lines:
        query, _, stated = line.partition("--")
        want = [d.strip() for d in stated.split(",")]
        assert [h.doc_id for h in engine.search(query.strip())] == want, line


def test_count_example_prints_the_table_shown(engine: Engine) -> None:
    query = next(b for b in _blocks("sql") if "COUNT" in b).strip()
    hits = engine.search(query)
    table = _blocks("text")[0].strip()
    assert "\n".join(repr(hits).splitlines()[1:]) == table
    assert hits[0].group == {"meta.source": "wiki"} and hits[0].count == 2
    tags = {h.group["meta.tags"]: h.count for h in engine.search("SELECT COUNT(DOCUMENT) BY meta.tags")}
    assert tags["rag"] == 2 and tags["llm"] == 2  # as the text says
    inline = [q for q in re.findall(r"`(SELECT COUNT[^`]*)`", SECTION) if "[" not in q]  # not the syntax line
    assert inline
    for q in inline:
        assert engine.search(q) is not None, q


def test_autocut_example_runs(engine: Engine) -> None:
    query = next(b for b in _blocks("sql") if "AUTOCUT" in b).strip()
    hits = engine.search(query)
    assert hits.stats["autocut"]["k"] == 1 and 1 <= hits.stats["autocut"]["kept"] <= hits.stats["autocut"]["of"]
    assert "autocut: 1 on s" in str(engine.explain(query))


def test_order_examples() -> None:
    e = Engine(embedder=HashEmbedder(dim=32), warm_up=False)
    e.add_texts(["a", "b", "c"], ids=["x", "y", "z"], metadatas=[{"y": "2025"}, {"y": 9}, {"y": "10"}])
    assert [h.doc_id for h in e.search("SELECT DOCUMENT ORDER BY meta.y")] == ["y", "z", "x"]
