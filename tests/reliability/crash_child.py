"""The writer that test_crash.py kills: applies a deterministic list of operations, acknowledging each.

Run as ``python crash_child.py <store> <round> <seed>``: opens ``Engine(store=<store>)`` (a directory for
the persistent built-in store, or a ``postgresql://`` DSN), then applies :func:`operations` in order and
prints one line per operation *after* the call returned (``"<index>\\n"``, flushed). The parent kills the
process with SIGKILL at a random moment, so every printed index is a write the engine acknowledged.

The parent imports this module for :func:`operations`, :func:`text_of` and :func:`metadata_of`, so both
sides agree on what each document must look like.
"""

from __future__ import annotations

import random
import sys
from typing import Any

Op = tuple[str, list[tuple[str, int]]]  # ("add" | "delete", [(doc_id, version), ...])


def text_of(doc_id: str, version: int) -> str:
    """The text of one version of a document: 2 to 30 sentences, each naming the id and version."""
    rng = random.Random(f"{doc_id}/{version}")
    n = rng.randint(2, 30)
    words = ["alpha", "beta", "gamma", "delta", "solar", "river", "agents", "tools"]
    return " ".join(
        f"Doc {doc_id} v{version} sentence {j} talks about {rng.choice(words)} and {rng.choice(words)}."
        for j in range(n)
    )


def metadata_of(doc_id: str, version: int) -> dict[str, Any]:
    return {"doc": doc_id, "version": version, "nested": {"v": version, "tags": ["a", doc_id]}, "half": version / 2}


def operations(round_no: int, seed: int, n: int = 400) -> list[Op]:
    """The operations of one round: batches of adds, replacements (a new version) and deletes."""
    rng = random.Random(seed)
    live: dict[str, int] = {}
    next_id = 0
    out: list[Op] = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.5 or not live:
            batch = []
            for _ in range(rng.randint(1, 4)):
                doc_id = f"r{round_no}-d{next_id}"
                next_id += 1
                batch.append((doc_id, 0))
                live[doc_id] = 0
            out.append(("add", batch))
        elif roll < 0.8:
            doc_id = rng.choice(sorted(live))
            live[doc_id] += 1
            out.append(("add", [(doc_id, live[doc_id])]))
        else:
            doc_id = rng.choice(sorted(live))
            del live[doc_id]
            out.append(("delete", [(doc_id, -1)]))
    return out


def apply(state: dict[str, int], op: Op) -> dict[str, int]:
    """The expected state (doc_id → version) after one operation."""
    out = dict(state)
    kind, docs = op
    for doc_id, version in docs:
        if kind == "add":
            out[doc_id] = version
        else:
            out.pop(doc_id, None)
    return out


def main(store: str, round_no: int, seed: int) -> None:
    from nlql import Engine
    from nlql.embedders import HashEmbedder

    engine = Engine(embedder=HashEmbedder(dim=64), store=store, warm_up=False)
    for i, (kind, docs) in enumerate(operations(round_no, seed)):
        if kind == "add":
            engine.add_texts([text_of(d, v) for d, v in docs], ids=[d for d, _ in docs],
                             metadatas=[metadata_of(d, v) for d, v in docs])
        else:
            engine.delete(docs[0][0])
        sys.stdout.write(f"{i}\n")
        sys.stdout.flush()
    sys.stdout.write("done\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
