"""SQL dialects: capability flags, a parameter binder, and hybrid plans as one statement.

- :mod:`nlql.sql.binder` — fragments whose values are never formatted into text, numbered by a binder.
- :mod:`nlql.sql.nodes` — what a lowered hybrid plan asks for (scores, arms, fusion, thresholds).
- :mod:`nlql.sql.dialect` — the :class:`~nlql.sql.dialect.Dialect` base (UPPERCASE flags, TRANSFORMS).
- :mod:`nlql.sql.postgres` — :class:`~nlql.sql.postgres.PostgresDialect` over the pgvector store's schema.
"""

from __future__ import annotations

from typing import Any

__all__ = ["explain_sql", "fusion_formula"]


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


def explain_sql(plan: Any, store: Any, mode: str | None = None) -> dict[str, Any] | None:
    """The ``sql`` section of explain for a lowered plan (None when the plan runs arm by arm).

    Each arm's SQL, its k, the fusion formula with its constants, the whole statement, and its
    parameters as placeholders with the values redacted (the statement text never holds a value).

    Args:
        plan: A plan from the planner.
        store: The store it runs on (its ``dialect``).
        mode: ``exact`` or ``index`` for semantic arms; by default what the store's configuration
            prefers (the store still takes the exact scan at run time when the filter is selective or
            the table has no index yet).
    """
    lowered = getattr(plan, "lowered", None)
    dialect = getattr(store, "dialect", None)
    if lowered is None or dialect is None:
        return None
    if mode is None:
        mode = "exact" if store.capabilities.EXACT or not lowered.semantic_arms else "index"
    compiled = dialect.compile(lowered, mode)
    arms = []
    for a in lowered.fusion.arms:
        arms.append({"binding": a.binding, "kind": a.kind, "k": lowered.depth,
                     "sql": compiled.parts[f"arm {a.binding}"]})
    semantic = ("exact scan (ORDER BY distance, seq, position)" if mode == "exact" else
                "HNSW index (ef_search = max(ef_search, k), doubled while an arm under-fills, then exact); "
                "exact when the filter matches few rows or the table has no index yet")
    return {
        "lowering": "sql (one statement)",
        "dialect": dialect.NAME,
        "semantic_arms": semantic if lowered.semantic_arms else None,
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
