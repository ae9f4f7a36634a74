"""The synthetic benchmark corpus: one-sentence documents with status/year/topic metadata (fixed seed)."""

from __future__ import annotations

import random
from collections.abc import Iterator

TOPICS = {
    "energy": ["solar", "wind", "grid", "battery", "renewable", "policy", "carbon", "power"],
    "health": ["vaccine", "clinic", "patients", "diet", "sleep", "hospital", "therapy", "doctor"],
    "tech": ["software", "agents", "compiler", "database", "network", "model", "cloud", "chip"],
    "sport": ["football", "match", "coach", "league", "season", "goal", "runner", "team"],
    "food": ["bread", "recipe", "cheese", "market", "coffee", "kitchen", "spice", "harvest"],
}
FILLER = ["the", "a", "new", "report", "says", "local", "people", "expect", "more", "than", "last",
          "year", "city", "plans", "change", "over", "study", "shows", "growth", "costs"]
STATUSES = ["published", "draft", "archived", "review"]


def iter_synthetic(n: int, seed: int = 42) -> Iterator[tuple[str, dict]]:
    """The ``(text, metadata)`` pairs of :func:`synthetic_corpus`, one at a time (nothing kept)."""
    rng = random.Random(seed)
    names = list(TOPICS)
    for i in range(n):
        topic = names[i % len(names)]
        words = rng.sample(TOPICS[topic], 3) + rng.sample(FILLER, 6)
        rng.shuffle(words)
        yield (" ".join(words).capitalize() + f" number {i}.",
               {"status": STATUSES[rng.randrange(4)], "year": 2015 + rng.randrange(11), "topic": topic})


def synthetic_corpus(n: int, seed: int = 42) -> tuple[list[str], list[dict]]:
    """``n`` one-sentence texts and their metadata, deterministic for a seed."""
    texts, metas = [], []
    for text, meta in iter_synthetic(n, seed):
        texts.append(text)
        metas.append(meta)
    return texts, metas
