"""Hybrid retrieval on PostgreSQL: semantic + BM25 arms fused with RRF in one SQL statement.

    python examples/hybrid_postgres.py                 # all-MiniLM-L6-v2 (offline model)
    NLQL_EXAMPLE_EMBEDDER=hash python examples/hybrid_postgres.py   # no model at all

Starts a throw-away PostgreSQL 16 + pgvector (the ``pgserver`` wheel) in a temporary directory, ingests
the Python standard library docs that ship with nlql, prints the plan of a hybrid query — each arm's
SQL, its k, the RRF formula, the whole statement with numbered placeholders — then runs it, and runs
the same query on the built-in store to show that both give the same rows.
Needs ``pip install 'nlql-engine[pgvector]' pgserver``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

from nlql import Engine
from nlql.data import load_demo

QUERY = """
SELECT SENTENCE
LET sem = SIMILARITY(content, $q),
    kw  = BM25(content, $q),
    score = RRF(sem, kw, k => 60)
WHERE meta.kind == "module" AND meta.section IN ("Text Processing", "Data Types", "Generic Operating System")
ORDER BY score DESC
LIMIT 5
"""


def make_embedder(name: str) -> Any:
    if name == "hash":
        from nlql.embedders import HashEmbedder

        return HashEmbedder()
    from nlql.embedders import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--embedder", choices=["minilm", "hash"],
                    default=os.environ.get("NLQL_EXAMPLE_EMBEDDER", "minilm"))
    ap.add_argument("--docs", type=int, default=200, help="how many demo documents to ingest")
    ap.add_argument("--question", default="split a string with a regular expression")
    args = ap.parse_args(argv)

    import pgserver

    from nlql.stores import PgVectorStore

    docs = load_demo()[: args.docs]
    embedder = make_embedder(args.embedder)
    with tempfile.TemporaryDirectory(prefix="nlql-example-pg-") as tmp:
        server = pgserver.get_server(os.path.join(tmp, "pgdata"), cleanup_mode="delete")
        try:
            engine = Engine(embedder=embedder, store=PgVectorStore(server.get_uri()))
            engine.add_texts([d["text"] for d in docs], ids=[d["id"] for d in docs],
                             metadatas=[d["metadata"] for d in docs])
            print(f"ingested {len(docs)} documents, {len(engine)} sentences into PostgreSQL\n")
            params = {"q": args.question}
            print(engine.explain(QUERY, params=params))
            hits = engine.search(QUERY, params=params)
            print(f"\nsearch: {len(hits)} hits ({hits.stats['store']['path']}, "
                  f"semantic arm {hits.stats['store']['mode']}, rows per arm {hits.stats['store']['arm_rows']})")
            for i, h in enumerate(hits, start=1):
                print(f"{i}. [{h.id}] score={h.scores['score']:.5f} sem={h.scores['sem']:.3f} "
                      f"kw={h.scores['kw']:.3f}  {h.content[:90]!r}")

            builtin = Engine(embedder=embedder)
            builtin.add_texts([d["text"] for d in docs], ids=[d["id"] for d in docs],
                              metadatas=[d["metadata"] for d in docs])
            same = [h.id for h in builtin.search(QUERY, params=params)] == [h.id for h in hits]
            print(f"\nbuilt-in store, arm by arm: same rows in the same order: {same}")
            engine.close()
        finally:
            server.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
