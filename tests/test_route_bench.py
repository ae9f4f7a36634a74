"""bench/quality.py's table (issues 14 and 30): shapes only, never scores or timings."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import quality  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402


def test_the_table_on_a_tiny_slice_with_the_hash_embedder() -> None:
    ds = quality.load_beir(quality.STDLIB_SET).subset(12)
    result = quality.run_set(ds, "known-item", HashEmbedder(dim=64))
    assert result["n_tune"] + result["n_held_out"] == 12
    rows = result["held_out"]
    assert {"similarity", "bm25", "hybrid", "ask"} <= set(rows)
    for row in rows.values():
        assert all(0.0 <= row[m] <= 1.0 for m in ("ndcg@10", "mrr@10", "recall@10")) and row["ms_per_query"] > 0
    assert rows["ask"]["routed_query_ms"] > 0
    goals = {g["goal"] for g in result["goals"]}
    assert "hybrid >= best single arm (ndcg@10)" in goals and "ask >= hybrid (recall@10)" in goals
    assert any(g.startswith("ask costs <= 1.5x") for g in goals)
    assert sum(result["intents"].values()) == 12
    md = quality.render_markdown({"embedder": "hash", "sets": [result]})
    assert "| `engine.ask(question)` |" in md and "| goal | value | target | met |" in md


def test_the_halves_are_stable_and_disjoint() -> None:
    ids = [f"q{i}" for i in range(200)]
    halves = quality.split_halves(ids)
    assert set(halves["tune"]).isdisjoint(halves["held_out"]) and len(halves["tune"]) + len(halves["held_out"]) == 200
    assert quality.split_halves(ids[:50])["tune"] == [q for q in halves["tune"] if q in ids[:50]]
    assert 70 < len(halves["tune"]) < 130


def test_the_multilingual_set_is_real_text_in_twelve_languages() -> None:
    ds = quality.load_multilingual_set()
    langs = {d["lang"] for d in ds.corpus.values()}
    assert langs == {"zh", "es", "de", "ja", "ko", "fr", "ru", "pt", "id", "ar", "hi", "th"} and len(ds.corpus) >= 165
    assert len(ds.queries) >= 174 and {ds.info["languages"][q] for q in ds.queries} == langs
    assert all(r in ds.corpus for rels in ds.qrels.values() for r in rels)
