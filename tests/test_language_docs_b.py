"""The examples of docs/language.md's sections on FUSE, query by vector, cursors and search_many run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "language.md"
SECTIONS = ("Normalised fusion: FUSE", "Query by vector, more like this", "Cursors",
            "Many queries at once: search_many", "Highlights")


def _example(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    part = re.split(r"\n## \d+\. ", text)
    body = next(p for p in part if p.startswith(title))
    blocks = re.findall(r"```python\n(.*?)```", body, flags=re.S)
    assert blocks, f"section {title!r} has no python example"
    return "\n".join(blocks)


@pytest.mark.parametrize("title", SECTIONS)
def test_section_example_runs(title: str) -> None:
    exec(compile(_example(title), f"docs/language.md: {title}", "exec"), {})  # noqa: S102
