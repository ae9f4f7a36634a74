"""The routed row of bench/quality.py (issue 14): shapes only, never timings."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import quality  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402


def test_the_routed_row_on_a_tiny_slice_with_the_hash_embedder() -> None:
    ds = quality.load_beir(quality.STDLIB_SET).subset(12)
    result = quality.evaluate(ds, HashEmbedder(dim=64), methods=("rrf", "routed"), limit=20)
    row = result["methods"]["routed"]
    assert row["query"].startswith("engine.ask(question): ") and "RRF(sem, kw, k => 60)" in row["query"]
    for m in ("ndcg@10", "recall@100", "mrr@10", "recall@10"):
        assert 0.0 <= row[m] <= 1.0
    assert sum(row["intents"].values()) == 12 and 0 <= row["empty_answers"] <= 12
    assert row["mrr@10"] > 0  # the summaries share words with their passages: ask finds some
    floor = row["floor"]
    assert floor["similarity_floor"] == 0.5
    assert 0.0 <= floor["relevant_at_or_above"] <= 1.0 and 0.0 <= floor["non_relevant_pairs_at_or_above"] <= 1.0
    assert set(result["methods"]) == {"rrf", "routed", "rerank"}
    assert set(row["without_where"]) == {"ndcg@10", "mrr@10", "recall@10", "ms_per_query"}
