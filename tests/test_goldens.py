"""Golden fixtures for the front end; ``pytest --update-goldens`` rewrites the ``.out`` files.

- ``fixtures/parse/<name>.nlql`` → ``<name>.out``: the canonical text (``render(parse(query))``).
- ``fixtures/errors/<name>.nlql`` → ``<name>.out``: the full rendered error (SPEC §8 format).

An error fixture may start with header lines ``--! key: <json>``; they are removed before parsing (so
line numbers start at the query) and set ``params``, ``schema``, ``functions`` (as for
:func:`nlql.check.validate`: no ``params`` header means no parameters are bound) or the parser limits
``max_length``, ``max_depth``, ``max_list_items``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nlql.check import check
from nlql.errors import CheckError, NLQLError
from nlql.parser import parse
from nlql.render import render

FIXTURES = Path(__file__).parent / "fixtures"
PARSE_CASES = sorted((FIXTURES / "parse").glob("*.nlql"))
ERROR_CASES = sorted((FIXTURES / "errors").glob("*.nlql"))
_LIMITS = ("max_length", "max_depth", "max_list_items")


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").split("\n")
    header: dict[str, Any] = {}
    while lines and lines[0].startswith("--!"):
        key, _, value = lines.pop(0)[3:].partition(":")
        header[key.strip()] = json.loads(value)
    return "\n".join(lines).rstrip("\n"), header


def _compare(path: Path, got: str, update: bool) -> None:
    out = path.with_suffix(".out")
    if update:
        out.write_text(got, encoding="utf-8")
        return
    assert out.exists(), f"no golden file {out.name}; run pytest --update-goldens"
    assert got == out.read_text(encoding="utf-8")


def error_text(query: str, header: dict[str, Any]) -> str:
    """The message a user sees for ``query``: the syntax/limit error, else every check diagnostic."""
    limits = {k: header[k] for k in _LIMITS if k in header}
    try:
        q = parse(query, **limits)
    except NLQLError as exc:
        return str(exc)
    diagnostics = check(q, header.get("params", {}), header.get("schema"), header.get("functions"))
    if not diagnostics:
        return "<no error>"
    return str(CheckError(diagnostics, query))


def test_fixture_counts() -> None:
    assert len(PARSE_CASES) >= 40
    assert len(ERROR_CASES) >= 40


@pytest.mark.parametrize("path", PARSE_CASES, ids=lambda p: p.stem)
def test_parse_golden(path: Path, update_goldens: bool) -> None:
    query, _ = _read(path)
    q = parse(query)
    canonical = render(q)
    _compare(path, canonical + "\n", update_goldens)
    assert parse(canonical) == q, "the canonical text must parse back to the same IR"
    assert render(parse(canonical)) == canonical, "render must be a fixed point"


@pytest.mark.parametrize("path", ERROR_CASES, ids=lambda p: p.stem)
def test_error_golden(path: Path, update_goldens: bool) -> None:
    query, header = _read(path)
    got = error_text(query, header)
    assert got != "<no error>", f"{path.name} should fail"
    assert "$END" not in got and "LPAR" not in got and "__ANON" not in got
    _compare(path, got + "\n", update_goldens)
