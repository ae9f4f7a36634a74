"""Retrieval for a prompt: the best passages that fit a token budget, with citations.

    python examples/rag_with_token_budget.py --embedder hash --max-tokens 120
    python examples/rag_with_token_budget.py "How do I make a secure random token?"

search(..., max_tokens=N) keeps hits in rank order while their estimated tokens fit; a passage that
does not fit is skipped (the next ones are still tried), and if not even the first one fits it is cut
and flagged ``truncated``. ``hits.warnings`` says what happened.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from nlql import Engine
from nlql.data import load_demo
from nlql.execute.executor import estimate_tokens

MODULES = {"secrets", "random", "hashlib", "hmac", "uuid", "base64"}

QUERY = """
SELECT SPAN(SENTENCE, window => 1)
LET sem = SIMILARITY(content, $question),
    kw  = BM25(content, $question),
    score = RRF(sem, kw)
ORDER BY score DESC
LIMIT 8
"""


def make_embedder(name: str) -> Any:
    if name == "hash":
        from nlql.embedders import HashEmbedder

        return HashEmbedder()
    from nlql.embedders import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("question", nargs="?", default="How do I generate a secure random token?")
    ap.add_argument("--max-tokens", type=int, default=150)
    ap.add_argument("--embedder", choices=["minilm", "hash"],
                    default=os.environ.get("NLQL_EXAMPLE_EMBEDDER", "minilm"))
    args = ap.parse_args(argv)

    engine = Engine(embedder=make_embedder(args.embedder))
    docs = [d for d in load_demo() if d["metadata"]["module"] in MODULES]
    engine.add_texts([d["text"] for d in docs], ids=[d["id"] for d in docs],
                     metadatas=[d["metadata"] for d in docs])

    hits = engine.search(QUERY, params={"question": args.question}, max_tokens=args.max_tokens)
    context = "\n".join(f"[{h.doc_id}] {' '.join(h.content.split())}" for h in hits)
    used = sum(estimate_tokens(h.content) for h in hits)
    print(f"question: {args.question}")
    print(f"context: {len(hits)} passage{'s' if len(hits) != 1 else ''}, about {used} of {args.max_tokens} tokens")
    for w in hits.warnings:
        print(f"note: {w}")
    print()
    print("Answer the question using only these passages; cite them by [id].")
    print(context)
    print(f"\nQuestion: {args.question}")


if __name__ == "__main__":
    main()
