"""NLQL in five steps: ingest, check, explain, search, read the results.

    python examples/quickstart.py                  # the real offline MiniLM model
    python examples/quickstart.py --embedder hash  # fast and deterministic (also NLQL_EXAMPLE_EMBEDDER=hash)

The documents are a slice of the bundled demo corpus: Python standard library docstrings about dates,
times and JSON.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from nlql import Engine
from nlql.data import load_demo

MODULES = {"datetime", "time", "calendar", "zoneinfo", "json"}


def make_embedder(name: str) -> Any:
    if name == "hash":
        from nlql.embedders import HashEmbedder

        return HashEmbedder()
    from nlql.embedders import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--embedder", choices=["minilm", "hash"],
                    default=os.environ.get("NLQL_EXAMPLE_EMBEDDER", "minilm"))
    args = ap.parse_args(argv)

    # 1. Ingest: documents are split into sentences and embedded; metadata is kept per document.
    engine = Engine(embedder=make_embedder(args.embedder))  # store="memory"; a directory persists
    docs = [d for d in load_demo() if d["metadata"]["module"] in MODULES]
    engine.add_texts([d["text"] for d in docs], ids=[d["id"] for d in docs],
                     metadatas=[d["metadata"] for d in docs])
    print(f"ingested {len(docs)} docstrings, {len(engine)} sentences")

    # 2. Check: every problem at once, [] when the query is valid.
    query = """
        SELECT SENTENCE
        LET rel = SIMILARITY(content, $question)
        WHERE meta.module IN ("datetime", "zoneinfo") AND meta.kind != "module"
        ORDER BY rel DESC
        LIMIT 3
    """
    params = {"question": "convert a time to another time zone"}
    print("check:", engine.check(query, params=params))

    # 3. Explain: how it will run, before anything runs.
    print(engine.explain(query, params=params))

    # 4. Search.
    hits = engine.search(query, params=params)

    # 5. Results: each hit has id, doc_id, unit, position, content, metadata and scores.
    for rank, hit in enumerate(hits, start=1):
        print(f"{rank}. [{hit.doc_id}] rel={hit.scores['rel']:.3f}  {hit.content}")
    print("stats:", hits.stats)


if __name__ == "__main__":
    main()
