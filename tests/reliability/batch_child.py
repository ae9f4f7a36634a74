"""A writer that dies at a chosen batch boundary: ``python batch_child.py <store> <kill_at> <mode>``.

Opens ``Engine(store=<store>)`` and calls :func:`ingest` once. The embedder kills the process with
SIGKILL when it is asked for batch number ``kill_at`` (0-based), so every batch before it has been
written and acknowledged by the store, and nothing of that batch has. ``mode`` ``"raise"`` raises
instead of dying and prints the error's ``committed`` ids as JSON. test_writes.py imports this module
for :data:`TEXTS`, :data:`IDS` and :func:`expected`, so both sides agree on the documents.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import numpy as np

BATCH = 3
# ten documents in four batches; "r1" and "r2" come back in later batches (the last text wins)
IDS = ["a0", "r1", "a2", "r2", "a4", "r1", "a6", "r2", "a8", "r1", "a10", "a11"]
TEXTS = [f"Document {i} of the batch run. It has two sentences about {d}." for i, d in enumerate(IDS)]


def order() -> list[int]:
    """The text indices written, in order: the last occurrence of each id (what add_texts keeps)."""
    last = {d: i for i, d in enumerate(IDS)}
    return [i for i, d in enumerate(IDS) if last[d] == i]


def batches() -> list[list[int]]:
    kept = order()
    return [kept[i : i + BATCH] for i in range(0, len(kept), BATCH)]


def expected(done: int) -> dict[str, str]:
    """doc id -> text once ``done`` batches were written."""
    out: dict[str, str] = {}
    for batch in batches()[:done]:
        for i in batch:
            out[IDS[i]] = TEXTS[i]
    return out


class DyingEmbedder:
    """A HashEmbedder that dies (or raises) at its ``kill_at``-th call."""

    def __init__(self, kill_at: int, mode: str) -> None:
        from nlql.embedders import HashEmbedder

        self.inner = HashEmbedder(dim=32)
        self.dim = 32
        self.model_id = "hash-32"  # the same vector space as the HashEmbedder that reopens the store
        self.calls = 0
        self.kill_at = kill_at
        self.mode = mode

    def embed(self, texts: Any) -> np.ndarray:
        if self.calls == self.kill_at:
            if self.mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"embedder down at batch {self.calls}")
        self.calls += 1
        return np.asarray(self.inner.embed(texts))


def ingest(engine: Any) -> list[str]:
    return engine.add_texts(TEXTS, ids=IDS, batch_size=BATCH)


def main(store: str, kill_at: int, mode: str) -> None:
    from nlql import Engine
    from nlql.errors import NLQLError

    engine = Engine(embedder=DyingEmbedder(kill_at, mode), store=store, warm_up=False)
    try:
        ingest(engine)
    except NLQLError as exc:
        print(json.dumps({"committed": getattr(exc, "committed", None), "message": str(exc)}))
        return
    print(json.dumps({"committed": "all"}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
