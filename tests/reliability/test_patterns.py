"""LIKE and MATCH in bounded time (issue 20, "a backtracking regex ignores timeout= and freezes the MCP
server"), with Python's ``re`` semantics kept exactly.

- Patterns that backtrack catastrophically in Python's ``re`` answer at once on every store: MATCH runs on
  RE2 (translated from Python's own parse tree), LIKE on a matcher that never backtracks.
- The translation is checked against Python's ``re``: every character class code point by code point,
  and random patterns on random strings.
- A pattern RE2 cannot run (a backreference) runs on a bounded backtracking engine: a ``LimitError``
  after ``BACKTRACK_LIMIT``, or the search's own deadline, also inside a store's pushed filter.
- The MCP server keeps answering other calls while a slow one runs (the real client, over stdio).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from relhelp import all_stores, fresh_store, make_engine

from nlql import patterns as P
from nlql.errors import LimitError, NLQLTimeoutError

ROOT = Path(__file__).resolve().parents[2]
STORES = all_stores()


def _ids(hits: Any) -> list[str]:
    return [h.doc_id for h in hits]


# ------------------------------------------------------------------------------------ bounded time


@pytest.mark.parametrize("store_kind", STORES)
def test_catastrophic_patterns_answer_at_once_on_every_store(store_kind: str, request: pytest.FixtureRequest,
                                                             tmp_path: Path) -> None:
    engine = make_engine(fresh_store(store_kind, request, tmp_path))
    engine.add_texts(["a" * 30 + "b", "a" * 3000, "aaaa", "xaaac"], ids=["ab", "many", "four", "c"],
                     metadatas=[{"s": "a" * 30 + "b"}, {"s": "a" * 3000}, {"s": "aaaa"}, {"s": "xaaac"}])
    cases = [
        ('content MATCH "(a+)+$"', ["many", "four"]),          # the 30 a's + b never match: no backtracking
        ('meta.s MATCH "(a+)+$"', ["many", "four"]),
        ('content MATCH "^(a|aa)+$"', ["many", "four"]),
        ('content LIKE "%a%a%a%a%a%a%c"', []),
        ('meta.s LIKE "%a%a%a%a%a%a%c"', []),
        ('meta.s LIKE "%a%a%c"', ["c"]),
        ('meta.s NOT LIKE "%a%a%a%a%a%a%c"', ["ab", "many", "four", "c"]),
    ]
    for where, want in cases:
        started = time.perf_counter()
        got = _ids(engine.search(f"SELECT DOCUMENT WHERE {where}", timeout=0.5))
        took = time.perf_counter() - started
        assert got == want, where
        assert took < 5.0, (where, took)  # Python's re needed minutes (2^30 paths) for each of these
    engine.close()


def test_a_backreference_is_bounded_by_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(P, "BACKTRACK_LIMIT", 0.2)
    engine = make_engine("memory")
    engine.add_texts(["a" * 40, "plain text"], ids=["slow", "plain"])
    rx = P.compile_regex(r"(a|aa)+\1c")
    assert rx.engine == "backtracking" and "backreference" in (rx.why or "")
    started = time.perf_counter()
    with pytest.raises(LimitError, match="took more than"):
        engine.search(r'SELECT SENTENCE WHERE content MATCH "(a|aa)+\\1c"')
    assert time.perf_counter() - started < 30
    # a backreference that does not explode simply answers, with re's meaning
    assert _ids(engine.search(r'SELECT SENTENCE WHERE content MATCH "(ai)n\\1"')) == []
    assert _ids(engine.search(r'SELECT SENTENCE WHERE content MATCH "(a)\\1"')) == ["slow"]


def test_the_search_deadline_holds_inside_a_pushed_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each value is bounded by BACKTRACK_LIMIT, and the whole filter by the search's timeout."""
    monkeypatch.setattr(P, "BACKTRACK_LIMIT", 5.0)
    engine = make_engine("memory")
    engine.add_texts([f"{'a' * (30 + i)}" for i in range(20)], ids=[f"d{i}" for i in range(20)],
                     metadatas=[{"s": "a" * (30 + i)} for i in range(20)])
    plan = engine.explain(r'SELECT DOCUMENT WHERE meta.s MATCH "(a|aa)+\\1c"')
    assert "match" in plan.to_dict()["pushed_filter"]  # evaluated inside the store, not row by row
    started = time.perf_counter()
    with pytest.raises(NLQLTimeoutError):
        engine.search(r'SELECT DOCUMENT WHERE meta.s MATCH "(a|aa)+\\1c"', timeout=0.3)
    assert time.perf_counter() - started < 30  # 20 values × 5 s without the deadline


# ------------------------------------------------------------------------------------ exact semantics


def _without_surrogates(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out = []
    for lo, hi in ranges:
        if lo < 0xD800 <= hi or lo <= 0xDFFF < hi or 0xD800 <= lo <= hi <= 0xDFFF:
            if lo < 0xD800:
                out.append((lo, 0xD7FF))
            if hi > 0xDFFF:
                out.append((0xE000, hi))
        else:
            out.append((lo, hi))
    return P._merge(out)


def _scan(rx: Any) -> list[tuple[int, int]]:
    """The code points (as ranges, surrogates left out) matched by ``rx`` = ``(?:unit)+``, in one scan."""
    gap = 0xDFFF - 0xD800 + 1
    cp = P._code_point
    return P._merge([(cp(m.start(), gap), cp(m.end() - 1, gap)) for m in rx.finditer(P._every_code_point())])


@pytest.mark.parametrize("flags", [re.IGNORECASE, re.IGNORECASE | re.ASCII])
def test_case_insensitive_literals_match_what_python_matches(flags: int) -> None:
    """The one hand-derived part of the translation: (?i) literals, every code point checked."""
    chars = [chr(c) for c in range(0x20, 0x7F)] + list("ßẞſKµΣσςİıǅǆΩΩÅåﬀ")
    for ch in chars:
        got = _without_surrogates(P._literal_set(ord(ch), flags))
        assert got == _scan(re.compile(f"(?:{re.escape(ch)})+", flags)), (ch, flags)


@pytest.mark.parametrize("unit", [r"\w", r"\W", r"\d", r"\D", r"\s", r"\S", r"[\w\-]", r"[^\d\s]", r"[a-zé]",
                                  r"[^a-z]", r"(?i:[a-z])", r"(?i:[^k])", r"(?a:\w)", r"(?i:[\W\d_])", r"."])
def test_character_classes_match_what_python_matches(unit: str) -> None:
    re2 = pytest.importorskip("re2")
    translated = P._to_re2(unit, re.compile(unit).flags)
    assert _scan(re2.compile(f"(?:{translated})+")) == _scan(re.compile(f"(?:{unit})+")), unit


_ATOMS = ["a", "b", "ab", ".", r"\d", r"\w", r"\s", r"\W", "[ab]", "[^a]", "[a-c]", "x", "é", r"\n", "K",
          "(?i:k)", "(?i:s)", "(?i:ß)"]


@st.composite
def _patterns(draw: Any, depth: int = 0) -> str:
    kind = draw(st.integers(0, 9 if depth < 3 else 2))
    if kind <= 2:
        return str(draw(st.sampled_from(_ATOMS)))
    if kind == 3:
        return draw(_patterns(depth + 1)) + draw(_patterns(depth + 1))
    if kind == 4:
        return "(?:" + draw(_patterns(depth + 1)) + "|" + draw(_patterns(depth + 1)) + ")"
    if kind == 5:
        return "(" + draw(_patterns(depth + 1)) + ")" + draw(st.sampled_from(["*", "+", "?", "{2}", "{1,3}", "*?",
                                                                             "+?"]))
    if kind == 6:
        return draw(st.sampled_from(["^", "", "\\A"])) + draw(_patterns(depth + 1)) + draw(
            st.sampled_from(["$", "", "\\Z"]))
    if kind == 7:
        return "(?i)" + draw(_patterns(depth + 1)) if depth == 0 else draw(_patterns(depth + 1))
    if kind == 8:
        return "(?m)" + draw(_patterns(depth + 1)) if depth == 0 else "(?s:" + draw(_patterns(depth + 1)) + ")"
    return draw(_patterns(depth + 1)) + draw(st.sampled_from([r"\b", r"\B", "$", "^"])) + draw(_patterns(depth + 1))


_SUBJECT = st.text(alphabet=st.sampled_from(list("aabbcxK\u212as\u017fßẞé1٣ _\n\t-") + ["\ud800"]), max_size=12)


@settings(max_examples=1500 if os.environ.get("NLQL_DEEP") == "1" else 400, deadline=None, database=None,
          derandomize=os.environ.get("NLQL_DEEP") != "1", suppress_health_check=list(HealthCheck))
@given(pattern=_patterns(), subjects=st.lists(_SUBJECT, min_size=1, max_size=8))
def test_random_patterns_mean_what_python_means(pattern: str, subjects: list[str]) -> None:
    try:
        want = re.compile(pattern)
    except re.error:
        return
    rx = P.compile_regex(pattern)
    for s in subjects:
        assert rx.search(s) == (want.search(s) is not None), (pattern, rx.engine, s)


def test_most_patterns_run_on_re2() -> None:
    pytest.importorskip("re2")
    for pattern in [r"(a+)+$", r"^\w+@\w+\.com$", r"(?i)agent(s)?", r"\d{3}-\d{4}", r"colou?r", r"[^\s]+$",
                    r"(?m)^#", r"(?s)a.*b", r"\Aab\Z", r"a{2,1000}"]:
        assert P.compile_regex(pattern).engine == "re2", pattern
    for pattern, why in [(r"(a)\1", "backreference"), (r"a(?=b)", "lookaround"), (r"\bcat\b", "word boundary"),
                         (r"a$b", "$ followed"), (r"a{1001}", "repeat count")]:
        rx = P.compile_regex(pattern)
        assert rx.engine == "backtracking" and why in (rx.why or ""), pattern


@pytest.mark.parametrize(("pattern", "text", "want"), [
    ("%a%a%a%a%a%a%c", "a" * 3000, False), ("%a%a%c", "xaaac", True), ("a%", "a", True), ("%", "", True),
    ("_", "", False), ("__", "ab", True), ("a_c", "a\nc", True), ("%ab%ab%", "abab", True),
    ("%ab%ab%", "aba", False), ("%aa%aa%", "aaa", False), ("%aa%aa%", "aaaa", True), ("50\\%", "50%", True),
    ("50\\%", "50x", False), ("a\\", "a\\", True), ("\\\\", "\\", True), ("%\\_%", "a_b", True),
    ("%\\_%", "ab", False), ("x%y%z", "xzyz", True), ("x%y%z", "xzy", False), ("_%_", "a", False),
])
def test_like_matcher(pattern: str, text: str, want: bool) -> None:
    assert P.compile_like(pattern)(text) is want


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(pattern=st.text(alphabet="ab%_\\", max_size=7), text=st.text(alphabet="ab%_\\", max_size=8))
def test_like_matcher_is_sql_like(pattern: str, text: str) -> None:
    """Against a reference: LIKE as a backtracking regex (fine on these tiny inputs)."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    want = re.fullmatch("".join(out), text, re.DOTALL) is not None
    assert P.compile_like(pattern)(text) is want


# ------------------------------------------------------------------------------------ MCP


def test_the_mcp_server_answers_while_a_slow_search_runs(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client, StdioServerParameters

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "slow.txt").write_text("a" * 40, encoding="utf-8")
    (docs / "ok.txt").write_text("Agents call tools.", encoding="utf-8")
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "HF_HUB_OFFLINE": "1"}
    from cli_inprocess import nlql  # the store is set-up, not what is tested: ingest in process

    r = nlql("ingest", str(docs), "--store", str(store), "--embedder", "hash", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    params = StdioServerParameters(command=sys.executable, args=["-m", "nlql", "mcp", "--store", str(store)],
                                   env=env, cwd=str(tmp_path))
    order: list[str] = []
    slow_result: dict[str, Any] = {}

    async def go() -> None:
        with anyio.fail_after(120):
            async with Client(params) as client:
                await client.call_tool("nlql_check", {"query": "SELECT SENTENCE"})  # warm

                async def slow() -> None:
                    res = await client.call_tool("nlql_search", {
                        "query": r'SELECT SENTENCE WHERE content MATCH "(a|aa)+\\1c"'})
                    slow_result.update(res.structured_content or json.loads(res.content[0].text))
                    order.append("search")

                async def quick() -> None:
                    await anyio.sleep(0.3)
                    for _ in range(3):
                        diags = await client.call_tool("nlql_check", {"query": "SELECT SENTENCE WHERE rell > 1"})
                        assert not diags.is_error
                    order.append("check")

                async with anyio.create_task_group() as tg:
                    tg.start_soon(slow)
                    tg.start_soon(quick)

    anyio.run(go)
    assert order == ["check", "search"], order  # the checks were answered while the search ran
    assert slow_result["hits"] == [] and slow_result["error"]["kind"] == "limit"
