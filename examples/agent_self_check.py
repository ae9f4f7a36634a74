"""An agent's loop without a model: write a query, check it, apply the hints, explain, then search.

    python examples/agent_self_check.py --embedder hash   # or NLQL_EXAMPLE_EMBEDDER=hash

This is what a model does with the nlql_check / nlql_explain / nlql_search tools: the diagnostics carry
line, column, the exact span (start/end offsets) and a did-you-mean hint, so a fix can be mechanical.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from nlql import Engine
from nlql.agent import check_query, explain_query, search_query
from nlql.data import load_demo

MODULES = {"datetime", "time", "calendar", "zoneinfo"}
SUGGESTION = re.compile(r"did you mean '?([^'?]+)'?\?")


def make_embedder(name: str) -> Any:
    if name == "hash":
        from nlql.embedders import HashEmbedder

        return HashEmbedder()
    from nlql.embedders import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


def apply_hints(query: str, diagnostics: list[dict[str, Any]]) -> str | None:
    """Replace each flagged span by the suggested name; None when some problem has no suggestion."""
    edits = []
    for d in diagnostics:
        m = SUGGESTION.search(d.get("hint") or "")
        if m is None or "start" not in d:
            return None
        edits.append((d["start"], d["end"], m.group(1)))
    for start, end, text in sorted(edits, reverse=True):  # right to left keeps earlier offsets valid
        query = query[:start] + text + query[end:]
    return query


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--embedder", choices=["minilm", "hash"],
                    default=os.environ.get("NLQL_EXAMPLE_EMBEDDER", "minilm"))
    args = ap.parse_args(argv)

    engine = Engine(embedder=make_embedder(args.embedder))
    docs = [d for d in load_demo() if d["metadata"]["module"] in MODULES]
    engine.add_texts([d["text"] for d in docs], ids=[d["id"] for d in docs],
                     metadatas=[d["metadata"] for d in docs])

    # The first draft has two mistakes: a misspelt binding and a metadata key without `meta.`.
    query = ('SELECT SENTENCE LET rel = SIMILARITY(content, "time zones") '
             'WHERE rell >= 0.2 AND module == "datetime" LIMIT 3')
    for attempt in range(1, 4):
        print(f"{attempt}. check: {query}")
        diagnostics = check_query(engine, query)
        if not diagnostics:
            print("   valid")
            break
        for d in diagnostics:
            print(f"   problem at {d['line']}:{d['column']}: {d['message']} (hint: {d['hint']})")
        fixed = apply_hints(query, diagnostics)
        if fixed is None:
            print("   no mechanical fix: a model would rewrite the query here")
            return 1
        query = fixed
    else:
        return 1

    plan = explain_query(engine, query)
    print("explain:")
    print("   " + plan["text"].replace("\n", "\n   "))

    result = search_query(engine, query, max_tokens=200)
    print(f"search: {len(result['hits'])} hits")
    for h in result["hits"]:
        print(f"   [{h['doc_id']}] rel={h['scores']['rel']:.3f} {h['content']}")
    for w in result["warnings"]:
        print(f"   warning: {w}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
