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
import math
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from nlql.errors import Diagnostic, MissingDependencyError, NLQLError
from nlql.values import json_default

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from nlql.engine import Engine

__all__ = [
    "ASK_DESCRIPTION",
    "LANGUAGE_REFERENCE",
    "MCP_INSTRUCTIONS",
    "TOOL_DESCRIPTION",
    "ask_question",
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
[DISTINCT BY expr, ... [KEEP n]] -- at most n rows (default 1) per distinct key value, in ORDER BY order
[ORDER BY expr [ASC|DESC] [NULLS FIRST|NULLS LAST], ...]
[LIMIT n [AUTOCUT k]] [OFFSET m] -- non-negative integers; no LIMIT means every matching row
[;]                             -- optional
```

`SELECT COUNT(unit) [BY expr, ...]` (unit SENTENCE, CHUNK or DOCUMENT) counts the rows passing WHERE per
distinct value of the BY keys (NULL is one value; a list counts once per member, as facets do): each hit
has `group` ({key: value}) and `count`, ordered by count descending, then value, unless `ORDER BY count`
or `ORDER BY <a BY key>` says otherwise. Without BY: one hit with the total.

`LIMIT n AUTOCUT k` (k >= 1): of the first n rows, keep those before the k-th jump of the first sort
key (a gap larger than twice the mean gap); fewer than 3 rows or no jump keeps all.

Keywords and function names are case-insensitive. Comments: `-- to end of line`, `/* ... */`.

## Units

- `SENTENCE`: one row per matching sentence (the index unit).
- `SPAN(SENTENCE, window => k)`: the matching sentence plus k neighbours on each side (default 1);
  WHERE and scores apply to the centre sentence, the window only widens the returned text.
- `CHUNK`: consecutive sentences grouped up to a size.
- `DOCUMENT`: one row per document with its full text, scored by its best sentence.

DOCUMENT and CHUNK hits carry `best`: the position, content and scores of the sentence that scored
the row (null when nothing scored it). `DISTINCT BY doc_id KEEP 2` gives at most two rows per document;
`DISTINCT BY meta.source` one per source (NULL is one value); LIMIT and OFFSET count the rows kept.

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
| `SIMILARITY(content, "text" [, min => 0.3])` | cosine in [-1, 1]; with a list of texts, the best of them; NULL below min (out of that arm only) |
| `BM25(content, "words" [, min => 1.0])` | keyword score >= 0 (OR over terms); rows matching no term have no BM25 rank |
| `RRF(a, b, ... [, k => 60] [, weights => [w1, w2]] [, window => n])` | reciprocal rank fusion of arms a, b (scores or any numbers, e.g. RECENCY(meta.date)): sum of w/(k + rank) |
| `FUSE(a, b, ... [, method => "minmax"] [, weights => [w1, w2]] [, window => n])` | normalised fusion: sum of w * norm(arm) over each arm's window; `"minmax"` maps an arm to [0, 1], `"dbsf"` maps mean +- 3 sigma to [0, 1]; a row absent from an arm adds 0 |
| `INTERLEAVE(a, b, ... [, window => n])` | round-robin fusion of rankings (value 1/position) |
| `MMR(s [, lambda => 0.5] [, window => 100])` | diversity: 1/position in the greedy MMR order of the top window rows by s (near-duplicates pushed down); NULL outside the window |
| `SIMILARITY(content, $vector)`, `SIMILARITY(content, DOC("id"))` | by a vector of the embedder's dimension, or by a document's mean sentence vector ("more like this": add `WHERE doc_id != "id"`) |
| `HIGHLIGHT(content, "text")` | the list of [start, end) character ranges of content whose words match the text's (BM25 analyzer) |
| `IF(cond, a, b)` | a when cond is TRUE, else b (UNKNOWN takes b) |
| `RECENCY(meta.date [, half_life => "90d"])` | exponential decay in (0, 1]; null date gives null |
| `GRAPH($q [, hops => 1] [, decay => 0.5])` | entity arm: 1.0 for rows naming an entity named in the text (a whole question works), less for entities named together with them; null otherwise |
| `TEMPORAL(meta.date, $q)` | time arm: in (0.5, 1] when the date lies in the period the text names ("last week", "la semana pasada"); null otherwise or when no period is named |
| `LENGTH(x)`, `LOWER(x)`, `UPPER(x)`, `COUNT(content, "needle")` | scalars |
| `NOW()`, `DATE(s)`, `TIMESTAMP(s)` | datetimes (NOW is fixed for the whole query) |

Score functions go in LET bindings; the first score binding, descending, is the default order.
Arithmetic mixes scores: `LET s = 0.7 * SIMILARITY(content, "rag") + 0.3 * BM25(content, "rag")`.

## Operators (loosest first)

`OR` < `AND` < `NOT` < predicates < `+ -` < `* /` < unary `-`.
Predicates: `= == != <> < <= > >=`, `[NOT] IN (a, b)`, `[NOT] BETWEEN a AND b`, `IS [NOT] NULL`,
`[NOT] CONTAINS "s"` (case-insensitive substring), `[NOT] LIKE "a%_"` (SQL LIKE, case-sensitive, whole
string; a backslash escapes `%`, `_` and itself), `[NOT] MATCH "regex"` (Python regex search), `WITHIN "last week"` (calendar periods such as
"yesterday", "last month", "the past 3 days") or `WITHIN (a, b)`, and for lists in metadata
`meta.tags [NOT] HAS "rag"`, `[NOT] HAS ANY ("rag", "llm")`, `[NOT] HAS ALL ("rag", "llm")` (membership as
`==` compares; on a single value HAS is `==`; an empty list has no member; `HAS ALL ()` is TRUE on a list).

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
Returns hits (id, doc_id, unit, content, metadata, scores; DOCUMENT/CHUNK hits: best sentence).

Clauses, in order: SELECT unit [LET name = expr, ...] [WHERE cond] \
[DISTINCT BY expr, ... [KEEP n]] (at most n rows per distinct key, e.g. DISTINCT BY doc_id) \
[ORDER BY expr [ASC|DESC] [NULLS FIRST|LAST], ...] [LIMIT n [AUTOCUT k]] [OFFSET m] \
(AUTOCUT k: keep the rows before the k-th jump in the first sort key). \
Counts and facets: SELECT COUNT(DOCUMENT) BY meta.source WHERE ... (hits carry group and count; \
ORDER BY count).
Units: SENTENCE | CHUNK | DOCUMENT (whole document, scored by its best sentence) | \
SPAN(SENTENCE, window => k) (hit sentence + k neighbours).
Names: content, id, doc_id, position, meta.key (meta.a.b; meta.`odd-key`), LET bindings. \
A bare unknown name is an error: write meta.topic, not topic.
Score functions (use in LET): SIMILARITY(content, "text" | ["t1", "t2"]) cosine in [-1, 1]; \
BM25(content, "words") keyword score (min => x on either: NULL below x); RRF(a, b, k => 60, \
weights => [1, 1], window => 100) fuses arms (scores or numbers like RECENCY(meta.date)); INTERLEAVE(a, b); \
MMR(s, lambda => 0.5) orders the top rows by s for diversity (near-duplicates pushed down); \
FUSE(a, b, method => "minmax" | "dbsf", weights => [0.7, 0.3]) adds normalised arms. \
SIMILARITY(content, $vector) takes a vector; SIMILARITY(content, DOC("id")) is "more like this". \
HIGHLIGHT(content, $q) lists the [start, end) ranges of matched words. \
Arms from a question: GRAPH($q, hops => 1) (entities named in $q and their neighbours), \
TEMPORAL(meta.date, $q) (the period $q names); null when they do not apply. \
Others: IF(c, a, b), RECENCY(meta.date, half_life => "90d"), LENGTH, LOWER, UPPER, \
COUNT(content, "x"), NOW(), DATE("2024-01-01"), TIMESTAMP(...).
Operators: OR, AND, NOT; = == != <> < <= > >=; + - * /; [NOT] IN (a, b); [NOT] BETWEEN a AND b; \
IS [NOT] NULL; [NOT] CONTAINS "s" (case-insensitive); [NOT] LIKE "a%" (case-sensitive); \
[NOT] MATCH "regex"; WITHIN "last week" | WITHIN (a, b); lists in metadata: meta.tags [NOT] HAS "rag", \
HAS ANY ("a", "b"), HAS ALL ("a", "b").
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
Before writing a WHERE on meta.*, call nlql_schema (or read the resource nlql://schema): it lists every \
metadata key with its types, how many documents have it and common values. \
Tip: call nlql_check first (it returns every error with line, column and a hint; [] means valid; \
a warning such as an unknown key does not stop the query), and nlql_explain to see the plan, then \
nlql_search. Always set LIMIT."""

#: Instructions an MCP client shows the model when it connects.
MCP_INSTRUCTIONS = (
    "NLQL searches a text collection. Call nlql_schema first to learn the metadata keys, their types "
    "and values. Write a query, call nlql_check until it says valid (each problem has line, column, "
    "message and hint; fix warnings too: a key no document has matches nothing), optionally "
    "nlql_explain to see the plan, then nlql_search. The full language reference is the resource "
    "nlql://language; the store's schema is nlql://schema."
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
            "timeout": {"type": "number", "exclusiveMinimum": 0,
                        "description": "Optional deadline in seconds for the whole search: what is complete "
                                       "by then comes back with a warning."},
            "cursor": {"type": "string",
                       "description": "Optional: the 'cursor' of an earlier result of the same query, for the "
                                      "next LIMIT rows after it (no OFFSET with a cursor)."},
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
    """A deep copy of ``value`` that strict JSON accepts: datetimes and numpy scalars become text and
    numbers, and NaN or infinite floats (a score of NaN, say) become null, as JSON has no such number."""
    return json.loads(json.dumps(_finite(value), default=json_default, allow_nan=False))


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (iterative: any nesting)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if not isinstance(value, (dict, list, tuple)):
        return _finite_scalar(value)
    root: list[Any] = [value]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]  # (container, key, value to convert)
    while stack:
        parent, key, item = stack.pop()
        if isinstance(item, dict):
            copy_: Any = {}
            parent[key] = copy_
            for k, v in item.items():
                copy_[k] = None
                stack.append((copy_, k, v))
        elif isinstance(item, (list, tuple)):
            copy_ = [None] * len(item)
            parent[key] = copy_
            for i, v in enumerate(item):
                stack.append((copy_, i, v))
        else:
            parent[key] = _finite_scalar(item)
    return root[0]


def _finite_scalar(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and not isinstance(value, (str, bytes)):
        try:
            value = item()
        except Exception:  # noqa: BLE001 - not a scalar after all
            return value
        if isinstance(value, float) and not math.isfinite(value):
            return None
    return value



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
    found = _jsonable([_diag_dict(d, query) for d in diags])
    if any(d.severity == "error" for d in diags):
        return found
    if params is None and _has_params(query):
        return found  # a plan needs the parameter values, which are not known yet
    try:
        engine.explain(query, params=_params(params))
    except NLQLError as exc:
        return _jsonable(error_dict(exc, query)["diagnostics"]) + found
    return found


def check_text(diagnostics: list[dict[str, Any]]) -> str:
    """What ``nlql_check`` says as text: ``valid``, or each problem rendered with its caret."""
    errors = [d for d in diagnostics if d.get("severity", "error") == "error"]
    warnings = [d for d in diagnostics if d.get("severity", "error") != "error"]
    parts = []
    if not errors:
        parts.append("valid" if not warnings else f"valid, with {len(warnings)} warning(s):")
    else:
        parts.append(f"{len(errors)} error(s):")
    for d in [*errors, *warnings]:
        tag = "warning: " if d in warnings else "error: "
        parts.append(tag + str(d.get("rendered") or d.get("message")))
    return "\n\n".join(parts)


def hits_text(result: dict[str, Any]) -> str:
    """A search result (``search_query``'s dict) as readable text: an error, or one block per hit."""
    if "error" in result:
        return "error: " + str(result["error"].get("rendered") or result["error"].get("message"))
    lines = []
    for w in result.get("warnings", []):
        lines.append(f"warning: {w}")
    hits = result.get("hits", [])
    if not hits:
        lines.append("no hits")
    for i, h in enumerate(hits, 1):
        scores = ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in h.get("scores", {}).items())
        meta = json.dumps(h.get("metadata", {}), ensure_ascii=False, sort_keys=True)
        lines.append(f"{i}. {h['id']} ({h['unit']}{', ' + scores if scores else ''}) meta={meta}")
        lines.append(f"   {h['content']}")
        best = h.get("best")
        if best:  # DOCUMENT / CHUNK hits: the sentence that scored the row
            lines.append(f"   best sentence {best['position']}: {best['content']}")
    return "\n".join(lines)


def schema_query(engine: Engine, sample: int = 1000) -> dict[str, Any]:
    """``engine.schema(sample).to_dict()`` plus its text form under ``"text"``, or ``{"error": ...}``."""
    try:
        schema = engine.schema(sample=sample)
    except NLQLError as exc:
        return {"error": _jsonable(error_dict(exc))}
    return {**_jsonable(schema.to_dict()), "text": schema.to_text()}


def _has_params(query: str) -> bool:
    from nlql import ir
    from nlql.parser import parse

    return any(isinstance(n, ir.Param) for n in parse(query).walk())


def explain_query(engine: Engine, query: str, params: Mapping[str, Any] | None = None,
                  include_plan: bool = True) -> dict[str, Any]:
    """``{"ok": True, "text": <plan tree>, "plan": <plan dict>}`` or ``{"ok": False, "error": {...}}``
    (``include_plan=False`` leaves the plan dict out)."""
    try:
        plan = engine.explain(query, params=_params(params))
    except NLQLError as exc:
        return {"ok": False, "error": _jsonable(error_dict(exc, query))}
    out: dict[str, Any] = {"ok": True, "text": str(plan)}
    if include_plan:
        out["plan"] = _jsonable(plan.to_dict())
    return out


def search_query(engine: Engine, query: str, params: Mapping[str, Any] | None = None,
                 max_tokens: int | None = None, timeout: float | None = None,
                 cursor: str | None = None) -> dict[str, Any]:
    """``Hits.to_dict()`` (hits, stats, warnings) with ``cursor`` (the next page's, or None on the last),
    or ``{"hits": [], ..., "error": {...}}`` for a bad query (a search that timed out with nothing found
    included)."""
    try:
        hits = engine.search(query, params=_params(params), max_tokens=max_tokens, timeout=timeout,
                             cursor=cursor)
        out = hits.to_dict()
        out["cursor"] = hits.cursor
    except NLQLError as exc:
        return {"hits": [], "stats": {}, "warnings": [], "error": _jsonable(error_dict(exc, query))}
    except (TypeError, ValueError) as exc:  # an argument the engine refuses (max_tokens=-1, …): as data too
        return {"hits": [], "stats": {}, "warnings": [], "error": _usage_error(exc)}
    return _jsonable(out)


def _usage_error(exc: Exception) -> dict[str, Any]:
    message = str(exc)
    return {"kind": "usage", "message": message, "line": 0, "column": 0, "hint": None, "rendered": message,
            "diagnostics": [{"line": 0, "column": 0, "message": message, "hint": None, "code": "usage",
                             "rendered": message}]}


#: What ``nlql_ask`` tells a model.
ASK_DESCRIPTION = """\
Answer a question in plain words: the question is routed to an intent (entity: "who mentioned X", \
temporal: "when did ...", "last week", conceptual: "what is X", general: the rest) and that intent's NLQL \
query runs with the question bound as $q, $rewrites and $keywords. Returns hits plus "route": the intent, \
the rule that matched, the NLQL query and its params, so you can refine the query and run it with \
nlql_search(query, params). No hits means the collection holds nothing about the question (see warnings)."""


def ask_question(engine: Engine, question: str, params: Mapping[str, Any] | None = None,
                 max_tokens: int | None = None) -> dict[str, Any]:
    """``engine.ask`` as data: hits, stats, warnings and ``route`` (intent, rule, query, params), or
    ``{"hits": [], ..., "error": {...}}`` when the question cannot be answered as asked."""
    if not isinstance(question, str):
        return {"hits": [], "stats": {}, "warnings": [], "route": None,
                "error": {"kind": "usage", "message": "the question must be a string", "line": 0, "column": 0,
                          "hint": None, "rendered": "the question must be a string", "diagnostics": []}}
    route: Any = None
    try:
        route = engine.route(question)
        hits = engine.ask(route, params=_params(params), max_tokens=max_tokens)
    except NLQLError as exc:
        return {"hits": [], "stats": {}, "warnings": [], "route": _jsonable(route.to_dict() if route else None),
                "error": _jsonable(error_dict(exc, route.query if route else None))}
    return _jsonable(hits.to_dict())


# ------------------------------------------------------------------------------------------- MCP


class _Opener:
    """The engine of a server, opened by ``open()`` on first use (``nlql mcp`` answers ``initialize``
    before the store is read) and kept; a failed opening is tried again on the next call."""

    def __init__(self, engine: Engine | Callable[[], Engine]) -> None:
        self._engine: Engine | None = None
        self._open: Callable[[], Engine] | None = None
        if _opens_engine(engine):
            self._open = engine
        else:
            self._engine = engine
        self._lock = threading.Lock()

    def __call__(self) -> Engine:
        engine = self._engine
        if engine is None:
            with self._lock:
                engine = self._engine
                if engine is None:
                    assert self._open is not None  # (no engine given: a function that opens one was)
                    engine = self._engine = self._open()
        return engine

    @property
    def opened(self) -> Engine | None:
        return self._engine


def _opens_engine(engine: Engine | Callable[[], Engine]) -> TypeIs[Callable[[], Engine]]:
    """Whether ``engine`` is a function that opens the engine rather than one (which has ``search``)."""
    return callable(engine) and not hasattr(engine, "search")


def build_mcp_server(engine: Engine | Callable[[], Engine], name: str = "nlql") -> Any:
    """An MCP server (the SDK's ``MCPServer``, formerly ``FastMCP``) exposing one engine.

    ``engine`` is an :class:`~nlql.engine.Engine`, or a function that opens one: it is then called on
    the first tool or resource read, not before (a client's ``initialize`` is answered at once), and
    its error, if any, is that call's tool error.

    Tools (each returns readable text content and the same result as structured content):
    ``nlql_schema(sample=1000)`` → the store's size, embedder, analyzer and metadata keys;
    ``nlql_check(query, params=None)`` → "valid" or the diagnostics with carets (structured: the list,
    ``[]`` when valid); ``nlql_explain(query, params=None, include_plan=False)`` → the readable plan
    (the plan dict only with ``include_plan``); ``nlql_search(query, params=None, max_tokens=None,
    timeout=None)`` → hits; ``nlql_ask(question, params=None, max_tokens=None)`` → hits and the routed
    query. None of them raises for a bad query: the error comes back as data. A bad argument (a wrong
    type, ``max_tokens=0``) is a tool error naming the argument. Resources: ``nlql://language``, the
    compact language reference (markdown), and ``nlql://schema``, the store's schema as text. The server
    reports the package version. Serve it over stdio with ``server.run("stdio")`` (what ``nlql mcp
    --store DIR`` does).

    Raises:
        MissingDependencyError: The ``mcp`` package is not installed (``pip install 'nlql-engine[mcp]'``).
    """
    try:
        from mcp.server.mcpserver import MCPServer as Server
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:  # mcp 1.x
        try:
            from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef,attr-defined]
            from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef]
        except ImportError:
            raise MissingDependencyError("mcp", "mcp") from None
    from mcp.types import CallToolResult, TextContent

    from nlql import __version__

    class Served(Server):
        """The SDK's server, with the engine it serves (``nlql mcp`` closes it)."""

        nlql_engine: _Opener  # its ``opened``: the engine, or None before first use

    try:
        server = Served(name, instructions=MCP_INSTRUCTIONS, version=__version__)
    except TypeError:  # an SDK without the version argument
        server = Served(name, instructions=MCP_INSTRUCTIONS)

    opener = _Opener(engine)

    def store() -> Engine:
        try:
            return opener()
        except NLQLError as exc:
            raise ToolError(f"cannot open the store: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - the CLI's own errors (a bad store), as the tool's error
            hint = getattr(exc, "hint", None)
            raise ToolError(f"cannot open the store: {exc}" + (f" (hint: {hint})" if hint else "")) from None

    def result(text: str, structured: Any) -> Any:
        data = structured if isinstance(structured, dict) else {"result": structured}
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)

    def argument(name: str, value: Any, kind: type | tuple[type, ...], what: str, optional: bool = True,
                 minimum: int | None = None) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            raise ToolError(f"argument {name!r} must be {what}, not {type(value).__name__}")
        if minimum is not None and isinstance(value, int) and value < minimum:
            raise ToolError(f"argument {name!r} must be at least {minimum}, not {value}")

    def common(query: Any, params: Any) -> None:
        argument("query", query, str, "a string (an NLQL query)", optional=False)
        argument("params", params, dict, 'an object of parameter values, e.g. {"q": "text"}')

    @server.tool(name="nlql_schema")
    def nlql_schema(sample: int = 1000):  # noqa: ANN202 - a CallToolResult, passed through as is
        """What the store holds: documents, sentences, the embedder and analyzer, and every metadata key
        with its types, how many documents have it and common values. Read it before writing a WHERE
        on meta.* (a key no document has matches nothing)."""
        argument("sample", sample, int, "an integer (documents to sample on a large store)", minimum=1)
        out = schema_query(store(), sample)
        text = out.get("text") or "error: " + str(out.get("error", {}).get("rendered"))
        return result(text, out)

    @server.tool(name="nlql_check")
    def nlql_check(query: str, params: dict[str, Any] | None = None):  # noqa: ANN202 - a CallToolResult, passed through as is
        """Check an NLQL query without running it. Says "valid", or every problem at once (line, column,
        message, hint, rendered with a caret); warnings (e.g. a metadata key no document has, with
        did-you-mean over the real keys) do not stop the query but usually mean no rows."""
        common(query, params)
        diags = check_query(store(), query, params)
        return result(check_text(diags), diags)

    @server.tool(name="nlql_explain")
    def nlql_explain(query: str, params: dict[str, Any] | None = None,
                     include_plan: bool = False):  # noqa: ANN202 - a CallToolResult, passed through as is
        """Show how an NLQL query would run (recall strategy, pushed and residual filters, order,
        limit) without running it, as a readable plan; include_plan=true adds the plan as data."""
        common(query, params)
        argument("include_plan", include_plan, bool, "true or false", optional=False)
        out = explain_query(store(), query, params, include_plan=include_plan)
        text = out["text"] if out["ok"] else "error: " + str(out["error"].get("rendered"))
        return result(text, out)

    @server.tool(name="nlql_search", description=TOOL_DESCRIPTION)
    def nlql_search(query: str, params: dict[str, Any] | None = None,
                    max_tokens: int | None = None, timeout: float | None = None,
                    cursor: str | None = None):  # noqa: ANN202 - a CallToolResult
        common(query, params)
        argument("max_tokens", max_tokens, int, "a positive integer", minimum=1)
        argument("timeout", timeout, (int, float), "a number of seconds")
        argument("cursor", cursor, str, "the cursor string of an earlier result")
        if timeout is not None and not timeout > 0:
            raise ToolError(f"argument 'timeout' must be a positive number of seconds, not {timeout}")
        try:
            out = search_query(store(), query, params, max_tokens, timeout, cursor)
        except (TypeError, ValueError) as exc:
            raise ToolError(f"bad argument: {exc}") from None
        return result(hits_text(out), out)

    @server.tool(name="nlql_ask", description=ASK_DESCRIPTION)
    def nlql_ask(question: str, params: dict[str, Any] | None = None,
                 max_tokens: int | None = None):  # noqa: ANN202 - a CallToolResult, passed through as is
        argument("question", question, str, "a string (a question in plain words)", optional=False)
        argument("params", params, dict, "an object of parameter values")
        argument("max_tokens", max_tokens, int, "a positive integer", minimum=1)
        out = ask_question(store(), question, params, max_tokens)
        route = out.get("route") or {}
        head = f"intent: {route.get('intent')}\nquery: {route.get('query')}\n\n" if route else ""
        return result(head + hits_text(out), out)

    @server.resource("nlql://language", name="nlql-language", title="NLQL language reference",
                     description="Clauses, units, functions, operators, NULL rules and examples.",
                     mime_type="text/markdown")
    def language() -> str:
        return LANGUAGE_REFERENCE

    @server.resource("nlql://schema", name="nlql-schema", title="The store's schema",
                     description="Documents, sentences, embedder, analyzer and every metadata key with its "
                                 "types, document count and common values.",
                     mime_type="text/plain")
    def schema_resource() -> str:
        out = schema_query(store())
        return str(out.get("text") or out.get("error"))

    server.nlql_engine = opener
    return server
