"""NLQL for agents: a function-tool definition, a compact language reference, and an MCP server.

An agent writes NLQL, calls ``nlql_check`` (and ``nlql_explain``) to correct itself, then ``nlql_search``.
The tool functions here never raise for a bad query: they return the error as data, with line, column,
hint and the caret rendering, so a model can read it and try again.

>>> schema = tool_schema()
>>> schema["name"], schema["input_schema"]["required"]
('nlql_search', ['query'])
>>> sorted(tool_schema(style="openai")["function"])
['description', 'name', 'parameters']
>>> from nlql.embedders import HashEmbedder
>>> from nlql.engine import Engine
>>> engine = Engine(embedder=HashEmbedder(dim=32))
>>> [(d["line"], d["column"], d["message"]) for d in check_query(engine, "SELECT SENTENCE WHERE rell >= 0.3")]
[(1, 23, "unknown name 'rell'")]
>>> check_query(engine, 'SELECT SENTENCE WHERE meta.lang == "en" LIMIT 3')
[]
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nlql.errors import Diagnostic, MissingDependencyError, NLQLError

if TYPE_CHECKING:
    from nlql.engine import Engine

__all__ = [
    "LANGUAGE_REFERENCE",
    "MCP_INSTRUCTIONS",
    "TOOL_DESCRIPTION",
    "build_mcp_server",
    "check_query",
    "error_dict",
    "explain_query",
    "search_query",
    "tool_schema",
]

#: The language in a few screens of markdown: what the ``nlql://language`` MCP resource serves.
LANGUAGE_REFERENCE = """\
# NLQL language reference (compact)

NLQL is a declarative query language for semantic and hybrid retrieval over text. Documents are split
into sentences when they are ingested; a query selects units of text, scores them, filters, orders and
limits them.

## Clauses, in this order

```
SELECT unit
[LET name = expr, ...]          -- bindings; may use earlier/other bindings (no cycles)
[WHERE condition]
[ORDER BY expr [ASC|DESC] [NULLS FIRST|NULLS LAST], ...]
[LIMIT n] [OFFSET m]            -- non-negative integers; no LIMIT means every matching row
[;]                             -- optional
```

Keywords and function names are case-insensitive. Comments: `-- to end of line`, `/* ... */`.

## Units

- `SENTENCE`: one row per matching sentence (the index unit).
- `SPAN(SENTENCE, window => k)`: the matching sentence plus k neighbours on each side (default 1);
  WHERE and scores apply to the centre sentence, the window only widens the returned text.
- `CHUNK`: consecutive sentences grouped up to a size.
- `DOCUMENT`: one row per document with its full text, scored by its best sentence.

## Names

`content`, `id`, `doc_id`, `position` are built-in fields; metadata is `meta.key` (nested: `meta.a.b`;
other keys in backticks: ``meta.`content-type` ``). A bare name must be a LET binding or a built-in
field: `topic` is an error (did you mean `meta.topic`?).

## Literals and parameters

Strings `"..."` or `'...'`; numbers `42`, `-3`, `0.5`, `1e-3`; `true`, `false`, `null`;
`DATE '2024-06-01'`, `TIMESTAMP '2024-06-01T10:00:00Z'`; lists `["a", "b"]`. Parameters `$name` or `$1`
go wherever a literal does and are bound with `params={"name": value}`; a missing or unused one is an error.

## Functions

| function | value |
|---|---|
| `SIMILARITY(content, "text")` | cosine in [-1, 1]; with a list of texts, the best of them |
| `BM25(content, "words")` | keyword score >= 0 (OR over terms); rows matching no term have no BM25 rank |
| `RRF(a, b, ... [, k => 60] [, weights => [w1, w2]])` | reciprocal rank fusion of bindings a, b: sum of w/(k + rank) |
| `INTERLEAVE(a, b, ...)` | round-robin fusion of rankings (value 1/position) |
| `IF(cond, a, b)` | a when cond is TRUE, else b (UNKNOWN takes b) |
| `RECENCY(meta.date [, half_life => "90d"])` | exponential decay in (0, 1]; null date gives null |
| `LENGTH(x)`, `LOWER(x)`, `UPPER(x)`, `COUNT(content, "needle")` | scalars |
| `NOW()`, `DATE(s)`, `TIMESTAMP(s)` | datetimes (NOW is fixed for the whole query) |

Score functions go in LET bindings; the first score binding, descending, is the default order.
Arithmetic mixes scores: `LET s = 0.7 * SIMILARITY(content, "rag") + 0.3 * BM25(content, "rag")`.

## Operators (loosest first)

`OR` < `AND` < `NOT` < predicates < `+ -` < `* /` < unary `-`.
Predicates: `= == != <> < <= > >=`, `[NOT] IN (a, b)`, `[NOT] BETWEEN a AND b`, `IS [NOT] NULL`,
`[NOT] CONTAINS "s"` (case-insensitive substring), `[NOT] LIKE "a%_"` (SQL LIKE, case-sensitive, whole
string), `[NOT] MATCH "regex"` (Python regex search), `WITHIN "last week"` (calendar periods such as
"yesterday", "last month", "the past 3 days") or `WITHIN (a, b)`.

## NULL rules (as SQL)

A comparison with null or with a missing metadata key is UNKNOWN and WHERE keeps only TRUE rows;
`NOT UNKNOWN` is UNKNOWN. `IS NULL` is true for a missing key and for null. `x == null` / `x != null` mean
`IS NULL` / `IS NOT NULL`. Numbers compare with numeric strings numerically; ISO-8601 strings compare
with DATE/TIMESTAMP. Any other mixed-type comparison is UNKNOWN for that row. ORDER BY puts nulls last
in both directions unless `NULLS FIRST`; ties keep insertion order.

## Examples

```sql
SELECT SENTENCE LET rel = SIMILARITY(content, "AI agents")
WHERE rel >= 0.3 AND meta.status == "published" ORDER BY rel DESC LIMIT 5

SELECT DOCUMENT
LET sem = SIMILARITY(content, "language games"), kw = BM25(content, "language games"),
    score = RRF(sem, kw, k => 60)
WHERE meta.year BETWEEN 2020 AND 2025 AND meta.author IS NOT NULL
ORDER BY score DESC LIMIT 10

SELECT SPAN(SENTENCE, window => 2) LET rel = SIMILARITY(content, $q)
WHERE content CONTAINS "tool" AND meta.lang IN ("en", "de") LIMIT 3
```

## Workflow for agents

1. Write the query. 2. Call `nlql_check`: it returns every problem at once (line, column, message,
hint), or `[]`. 3. Optionally call `nlql_explain` to see the plan (recall strategy, pushed and residual
filters, order, limit). 4. Call `nlql_search`; pass `max_tokens` to fit the results in a budget.
"""

#: The tool description: the language in the fewest words that let a model write correct queries.
TOOL_DESCRIPTION = """\
Search the text collection with NLQL, a SQL-like query language for semantic and hybrid retrieval. \
Returns hits (id, doc_id, unit, content, metadata, scores).

Clauses, in order: SELECT unit [LET name = expr, ...] [WHERE cond] \
[ORDER BY expr [ASC|DESC] [NULLS FIRST|LAST], ...] [LIMIT n] [OFFSET m]
Units: SENTENCE | CHUNK | DOCUMENT (whole document, scored by its best sentence) | \
SPAN(SENTENCE, window => k) (hit sentence + k neighbours).
Names: content, id, doc_id, position, meta.key (meta.a.b; meta.`odd-key`), LET bindings. \
A bare unknown name is an error: write meta.topic, not topic.
Score functions (use in LET): SIMILARITY(content, "text" | ["t1", "t2"]) cosine in [-1, 1]; \
BM25(content, "words") keyword score; RRF(a, b, k => 60, weights => [1, 1]) fuses bindings a, b; \
INTERLEAVE(a, b). Others: IF(c, a, b), RECENCY(meta.date, half_life => "90d"), LENGTH, LOWER, UPPER, \
COUNT(content, "x"), NOW(), DATE("2024-01-01"), TIMESTAMP(...).
Operators: OR, AND, NOT; = == != <> < <= > >=; + - * /; [NOT] IN (a, b); [NOT] BETWEEN a AND b; \
IS [NOT] NULL; [NOT] CONTAINS "s" (case-insensitive); [NOT] LIKE "a%" (case-sensitive); \
[NOT] MATCH "regex"; WITHIN "last week" | WITHIN (a, b).
Literals: "str", 'str', 42, 0.5, true, false, null, DATE '2024-06-01', [list]; parameters $name \
bound via params.
NULL rules: comparing with null or a missing meta key is UNKNOWN and the row is dropped; use IS NULL / \
IS NOT NULL (x == null means IS NULL). Nulls sort last unless NULLS FIRST. Default order: first score \
binding DESC.
Examples:
SELECT SENTENCE LET rel = SIMILARITY(content, "AI agents") WHERE rel >= 0.3 AND meta.status == \
"published" LIMIT 5
SELECT DOCUMENT LET sem = SIMILARITY(content, "tax rules"), kw = BM25(content, "tax rules"), \
s = RRF(sem, kw) ORDER BY s DESC LIMIT 10
SELECT SPAN(SENTENCE, window => 1) LET rel = SIMILARITY(content, $q) WHERE meta.year >= 2020 AND \
content CONTAINS "tool" LIMIT 3
Tip: call nlql_check first (it returns every error with line, column and a hint; [] means valid), \
and nlql_explain to see the plan, then nlql_search. Always set LIMIT."""

#: Instructions an MCP client shows the model when it connects.
MCP_INSTRUCTIONS = (
    "NLQL searches a text collection. Write a query, call nlql_check until it returns [] (each "
    "problem has line, column, message and hint), optionally nlql_explain to see the plan, then "
    "nlql_search. The full language reference is the resource nlql://language."
)

_PARAMS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": 'Values for $name parameters in the query, e.g. {"q": "AI agents", "year": 2020}.',
    "additionalProperties": True,
}


def _input_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "An NLQL query, e.g. "
                      'SELECT SENTENCE LET rel = SIMILARITY(content, "topic") LIMIT 5'},
            "params": copy.deepcopy(_PARAMS_SCHEMA),
            "max_tokens": {"type": "integer", "minimum": 1,
                           "description": "Optional budget: keep hits in rank order while their "
                                          "estimated tokens fit (the top hit is truncated if needed)."},
        },
        "required": ["query"],
        "additionalProperties": False,
    }


def tool_schema(style: str = "generic") -> dict[str, Any]:
    """A function-tool definition for ``nlql_search`` whose description teaches the language.

    Args:
        style: ``"generic"`` (default): ``{"name", "description", "parameters", "input_schema"}`` with
            the same JSON schema under both keys, so either convention finds it; ``"anthropic"``:
            ``{"name", "description", "input_schema"}``, ready for the Messages API ``tools=``;
            ``"openai"``: ``{"type": "function", "function": {"name", "description", "parameters"}}``,
            ready for Chat Completions ``tools=``.

    Returns:
        A new dict each call (safe to mutate).

    Raises:
        ValueError: An unknown ``style``.
    """
    if style == "generic":
        return {"name": "nlql_search", "description": TOOL_DESCRIPTION,
                "parameters": _input_schema(), "input_schema": _input_schema()}
    if style == "anthropic":
        return {"name": "nlql_search", "description": TOOL_DESCRIPTION, "input_schema": _input_schema()}
    if style == "openai":
        return {"type": "function", "function": {"name": "nlql_search", "description": TOOL_DESCRIPTION,
                                                 "parameters": _input_schema()}}
    raise ValueError(f"style must be 'generic', 'anthropic' or 'openai', not {style!r}")


# ------------------------------------------------------------------------------------ tool bodies


def _jsonable(value: Any) -> Any:
    """A deep copy of ``value`` that ``json.dumps`` accepts (datetimes and numpy scalars become text/numbers)."""
    return json.loads(json.dumps(value, default=_json_default, allow_nan=False))


def _json_default(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return item()
    iso = getattr(value, "isoformat", None)
    if callable(iso):
        return iso()
    return str(value)


def _diag_dict(d: Diagnostic, source: str | None) -> dict[str, Any]:
    out = d.to_dict()
    out["rendered"] = d.render(source)
    return out


def error_dict(exc: NLQLError, source: str | None = None) -> dict[str, Any]:
    """An :class:`~nlql.errors.NLQLError` as data: kind, message, line, column, hint, rendered text
    (message, source line, caret, hint) and every diagnostic it carries."""
    if source is not None:
        exc.with_source(source)
    src = exc.source if exc.source is not None else source
    return {
        "kind": exc.kind,
        "message": exc.message,
        "line": exc.line,
        "column": exc.column,
        "hint": exc.hint,
        "rendered": str(exc),
        "diagnostics": [_diag_dict(d, src) for d in exc.diagnostics],
    }


def _params(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if params is None else dict(params)


def check_query(engine: Engine, query: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every problem the query would hit, as JSON-ready dicts; ``[]`` when it is valid.

    Runs the semantic check and then plans the query (without running it), so plan-time problems such
    as an unresolvable ``WITHIN`` period or a negative LIMIT are reported too. With ``params=None``,
    parameters are not checked (they are not known yet).
    """
    if not isinstance(query, str):
        return [{"line": 0, "column": 0, "message": "the query must be a string", "hint": None,
                 "code": "usage", "rendered": "the query must be a string"}]
    try:
        diags = engine.check(query, params=_params(params))
    except NLQLError as exc:
        return _jsonable(error_dict(exc, query)["diagnostics"])
    if diags:
        return _jsonable([_diag_dict(d, query) for d in diags])
    if params is None and _has_params(query):
        return []  # a plan needs the parameter values, which are not known yet
    try:
        engine.explain(query, params=_params(params))
    except NLQLError as exc:
        return _jsonable(error_dict(exc, query)["diagnostics"])
    return []


def _has_params(query: str) -> bool:
    from nlql import ir
    from nlql.parser import parse

    return any(isinstance(n, ir.Param) for n in parse(query).walk())


def explain_query(engine: Engine, query: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{"ok": True, "text": <plan tree>, "plan": <plan dict>}`` or ``{"ok": False, "error": {...}}``."""
    try:
        plan = engine.explain(query, params=_params(params))
    except NLQLError as exc:
        return {"ok": False, "error": _jsonable(error_dict(exc, query))}
    return {"ok": True, "text": str(plan), "plan": _jsonable(plan.to_dict())}


def search_query(engine: Engine, query: str, params: Mapping[str, Any] | None = None,
                 max_tokens: int | None = None) -> dict[str, Any]:
    """``Hits.to_dict()`` (hits, stats, warnings), or ``{"hits": [], ..., "error": {...}}`` for a bad query."""
    try:
        hits = engine.search(query, params=_params(params), max_tokens=max_tokens)
    except NLQLError as exc:
        return {"hits": [], "stats": {}, "warnings": [], "error": _jsonable(error_dict(exc, query))}
    return _jsonable(hits.to_dict())


# ------------------------------------------------------------------------------------------- MCP


def build_mcp_server(engine: Engine, name: str = "nlql") -> Any:
    """An MCP server (the SDK's ``MCPServer``, formerly ``FastMCP``) exposing one engine.

    Tools: ``nlql_check(query, params=None)`` → list of diagnostics (``[]`` when valid),
    ``nlql_explain(query, params=None)`` → plan text and dict, ``nlql_search(query, params=None,
    max_tokens=None)`` → hits. None of them raises for a bad query; the error comes back as data.
    Resource: ``nlql://language``, the compact language reference (markdown). Serve it over stdio
    with ``server.run("stdio")`` (what ``nlql mcp --store DIR`` does).

    Raises:
        MissingDependencyError: The ``mcp`` package is not installed (``pip install 'nlql-engine[mcp]'``).
    """
    try:
        from mcp.server.mcpserver import MCPServer as Server
    except ImportError:  # mcp 1.x
        try:
            from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef,attr-defined]
        except ImportError:
            raise MissingDependencyError("mcp", "mcp") from None

    server = Server(name, instructions=MCP_INSTRUCTIONS)

    @server.tool(name="nlql_check")
    def nlql_check(query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Check an NLQL query without running it. Returns every problem at once (line, column,
        message, hint, rendered with a caret); an empty list means the query is valid."""
        return check_query(engine, query, params)

    @server.tool(name="nlql_explain")
    def nlql_explain(query: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Show how an NLQL query would run (recall strategy, pushed and residual filters, order,
        limit) without running it: {"ok", "text", "plan"} or {"ok": false, "error"}."""
        return explain_query(engine, query, params)

    @server.tool(name="nlql_search", description=TOOL_DESCRIPTION)
    def nlql_search(query: str, params: dict[str, Any] | None = None,
                    max_tokens: int | None = None) -> dict[str, Any]:
        return search_query(engine, query, params, max_tokens)

    @server.resource("nlql://language", name="nlql-language", title="NLQL language reference",
                     description="Clauses, units, functions, operators, NULL rules and examples.",
                     mime_type="text/markdown")
    def language() -> str:
        return LANGUAGE_REFERENCE

    return server

