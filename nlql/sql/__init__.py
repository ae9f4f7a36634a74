"""SQL dialects: capability flags, a parameter binder, and hybrid plans as one statement.

- :mod:`nlql.sql.binder` — fragments whose values are never formatted into text, numbered by a binder.
- :mod:`nlql.sql.nodes` — what a lowered hybrid plan asks for (scores, arms, fusion, thresholds).
- :mod:`nlql.sql.dialect` — the :class:`~nlql.sql.dialect.Dialect` base: UPPERCASE flags, a
  ``TRANSFORMS`` table of spellings, the statement skeleton, ``visit_<Node>`` methods, the writes.
- :mod:`nlql.sql.filters` — the pushed filter over a dialect's typed views; :mod:`nlql.sql.codec` — how
  text and metadata are stored so SQL compares them as NLQL does.
- :mod:`nlql.sql.postgres` — :class:`~nlql.sql.postgres.PostgresDialect` (pgvector's schema);
  :mod:`nlql.sql.duckdb` — :class:`~nlql.sql.duckdb.DuckDBDialect`.
"""

from __future__ import annotations

from typing import Any

from nlql.sql.dialect import Dialect

__all__ = ["Dialect", "dialect_of", "explain_sql", "fusion_formula"]


def fusion_formula(lowered: Any) -> str:
    """The fusion of a lowered plan in words, with its constants."""
    f = lowered.fusion
    if f.method == "RRF":
        terms = " + ".join(f"{w:g}/({f.k:g} + rank_{a.binding})" for a, w in zip(f.arms, f.weights, strict=True))
        return f"RRF {f.slot} = {terms}; a row absent from an arm adds 0"
    if f.method == "INTERLEAVE":
        arms = ", ".join(a.binding for a in f.arms)
        return f"INTERLEAVE {f.slot} = 1/position in round-robin over {arms} (first place of a row wins)"
    fill = "rows matching no term follow with 0" if f.fill else "only rows matching a term"
    return f"BM25 ranking {f.slot} DESC ({fill})"


def dialect_of(target: Any) -> Dialect | None:
    """``target`` itself when it is a :class:`Dialect`; else the dialect of a store that runs lowered
    plans (``capabilities.SQL_ARMS`` and a ``dialect``); else None."""
    if isinstance(target, Dialect):
        return target
    caps = getattr(target, "capabilities", None)
    if caps is None or not getattr(caps, "SQL_ARMS", False):
        return None
    d = getattr(target, "dialect", None)
    return d if isinstance(d, Dialect) else None


def explain_sql(plan: Any, dialect: Any, mode: str | None = None) -> dict[str, Any] | None:
    """The ``sql`` section of explain for a lowered plan (None when the plan runs arm by arm).

    Each arm's SQL, its k, the fusion formula with its constants, the whole statement, and its
    parameters as placeholders with the values redacted (the statement text never holds a value).
    Needs no database: only the dialect.

    Args:
        plan: A plan from the planner.
        dialect: The :class:`Dialect` it compiles to (a store is accepted too: its ``dialect``).
        mode: ``exact`` or ``index`` for semantic arms; by default the dialect's ``semantic_mode``
            (the store's configuration: it still takes the exact scan at run time when the filter is
            selective or the table has no index yet).
    """
    lowered = getattr(plan, "lowered", None)
    d = dialect_of(dialect)
    if lowered is None or d is None:
        return None
    if mode is None:
        mode = d.semantic_mode if lowered.semantic_arms else "exact"
    compiled = d.compile(lowered, mode)
    arms = []
    for a in lowered.fusion.arms:
        arms.append({"binding": a.binding, "kind": a.kind, "k": lowered.depth,
                     "sql": compiled.parts[f"arm {a.binding}"]})
    return {
        "lowering": "sql (one statement)",
        "dialect": d.NAME,
        "semantic_arms": d.describe_semantic(mode) if lowered.semantic_arms else None,
        "arms": arms,
        "fusion": {"method": lowered.fusion.method, "formula": fusion_formula(lowered),
                   "k": lowered.fusion.k if lowered.fusion.method == "RRF" else None,
                   "weights": list(lowered.fusion.weights) if lowered.fusion.method == "RRF" else None,
                   "sql": compiled.parts["fusion"]},
        "bm25": {"k1": lowered.k1, "b": lowered.b,
                 "formula": "Σ idf·tf·(k1+1)/(tf+k1·(1−b+b·len/avglen)), idf = ln(1+(N−n+0.5)/(n+0.5))"}
        if any(a.kind == "bm25" for a in lowered.fusion.arms) or any(
            type(s).__name__ == "KeywordScore" for s in lowered.scores) else None,
        "rows": lowered.fetch,
        "statement": compiled.text,
        "params": compiled.binder.describe(),
    }
