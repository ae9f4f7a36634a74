"""Smoke test of the measurement scripts (issue 7): shapes only, never timings.

Runs the quality evaluation on a tiny slice of the committed known-item set with the hash embedder, the
BEIR loader on a hand-written set, and the report generator (with plots) on fake and real JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import quality, report  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402


def _write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data), encoding="utf-8")


@pytest.fixture
def tiny_beir(tmp_path: Path) -> Path:
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    corpus = [
        {"_id": "d1", "title": "Solar power", "text": "Panels turn sunlight into electricity. They need sun."},
        {"_id": "d2", "title": "", "text": "Bread needs flour, water and time. Bake it hot."},
        {"_id": "d3", "title": "Wind", "text": "Turbines turn wind into power. They need wind."},
    ]
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(c) for c in corpus) + "\n", encoding="utf-8")
    queries = [{"_id": "q1", "text": "sunlight electricity"}, {"_id": "q2", "text": "bake bread"},
               {"_id": "q3", "text": "a query without judgements"}]
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n", encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td3\t1\nq2\td2\t1\n",
                                             encoding="utf-8")
    return root


def test_beir_loader_and_round_trip(tiny_beir: Path, tmp_path: Path) -> None:
    ds = quality.load_beir(tiny_beir)
    assert set(ds.corpus) == {"d1", "d2", "d3"}
    assert set(ds.queries) == {"q1", "q2"}  # q3 has no judgement in the split
    assert ds.qrels == {"q1": {"d1": 2, "d3": 1}, "q2": {"d2": 1}}
    assert ds.passage("d1").startswith("Solar power. Panels")
    quality.write_beir(ds, tmp_path / "copy")
    again = quality.load_beir(tmp_path / "copy")
    assert (again.corpus, again.queries, again.qrels) == (ds.corpus, ds.queries, ds.qrels)


def test_metrics_known_values() -> None:
    rels = {"a": 2, "b": 1}
    assert quality.ndcg_at(["a", "b", "c"], rels, 10) == pytest.approx(1.0)
    assert quality.ndcg_at(["c", "d"], rels, 10) == 0.0
    assert quality.mrr_at(["c", "b", "a"], rels, 10) == pytest.approx(0.5)
    assert quality.recall_at(["c", "b"], rels, 10) == pytest.approx(0.5)
    assert quality.recall_at(["c", "b", "a"], rels, 2) == pytest.approx(0.5)


def test_committed_known_item_set_shape() -> None:
    ds = quality.load_beir(quality.STDLIB_SET)
    assert 300 <= len(ds.queries) <= 2000
    assert all(len(r) == 1 and next(iter(r.values())) == 1 for r in ds.qrels.values())
    assert len(ds.corpus) == len(ds.queries)
    size = sum(p.stat().st_size for p in quality.STDLIB_SET.rglob("*") if p.is_file())
    assert size < 2 * 2**20


def test_quality_on_a_tiny_slice_with_the_hash_embedder(tiny_beir: Path) -> None:
    ds = quality.load_beir(quality.STDLIB_SET).subset(12)
    assert len(ds.judged_queries()) == 12
    result = quality.run_set(ds, "known-item", HashEmbedder(dim=64))
    assert result["n_queries"] == 12 and result["n_passages"] == len(ds.corpus)
    assert result["n_tune"] + result["n_held_out"] == 12
    rows = result["all"]
    assert {"similarity", "bm25", "hybrid", "ask"} <= set(rows)  # plus the candidates
    for method in ("similarity", "bm25", "hybrid", "ask"):
        for m in ("ndcg@10", "mrr@10", "recall@10"):
            assert 0.0 <= rows[method][m] <= 1.0
    names = [g["goal"] for g in result["goals"]]
    assert "hybrid >= best single arm (ndcg@10)" in names and "ask costs <= 1.5x the routed query" in names
    for g in result["goals"]:  # every goal row is a comparison of the figures it shows
        assert g["met"] == (g["value"] <= g["target"] if g["goal"].startswith("ask costs") else g["value"] >= g["target"])
    tiny = quality.run_set(quality.load_beir(tiny_beir), "BEIR", HashEmbedder(dim=64))
    assert tiny["all"]["bm25"]["recall@10"] == pytest.approx(1.0)


def _fake_results(results: Path) -> None:
    machine = {"cpu_count": 2, "cpu_model": "test cpu", "python": "3.11", "numpy": "2", "ram_gb": 1.0,
               "platform": "test", "loadavg_at_start": [1.0, 1.0, 1.0], "blas": ["openblas"]}
    q = {"canonical": 1.0, "metadata_only": 0.5}
    ids = {"canonical": ["1", "2"], "metadata_only": ["3"]}
    _write(results / "vs_peer.json", {
        "profile": "quick", "machine": machine, "method": {"queries": {"canonical": {"ours": "SELECT …", "peer": "SELECT …"}}},
        "runs": [{"n": 10_000,
                  "ours": {"ingest_s": 0.2, "queries_ms": q, "ids": ids},
                  "peer": {"ingest_s": 2.0, "queries_ms": {"canonical": 100.0, "metadata_only": 5.0}, "ids": ids,
                           "config": {"granularity": "sentence"}},
                  "ratio_peer_over_ours": {"ingest": 10.0, "canonical": 100.0, "metadata_only": 10.0},
                  "agreement": {"canonical": {"same_set": True, "same_order": True, "overlap": 2},
                                "metadata_only": {"same_set": False, "same_order": False, "overlap": 0}}}],
        "goals_100k": {"note": "not run"}})
    _write(results / "floor.json", {"machine": machine, "runs": [{
        "n": 100_000, "floor_ms": 5.0, "read_gb_per_s": 30.0, "store_knn_over_floor": 1.1,
        "recall_at_10_vs_numpy": 1.0,
        "ms": {"numpy_default": 8.0, "numpy_one_thread": 5.0, "numpy_filtered_one_thread": 1.0, "store_knn": 5.5,
               "engine_similarity_only": 6.0, "engine_canonical": 2.0}}]})
    _write(results / "trace.json", {"machine": machine, "minilm_query_embed_ms": {"one_thread": 10.0}, "traces": [{
        "store": "memory", "n": 100_000, "repeat": 3, "query": "SELECT …", "params": {"q": "x"},
        "stages_ms": {"embed": 0.1, "recall": 5.0, "filter": 1.0, "fuse": 1.0, "order": 0.1, "rerank": 0.0,
                      "materialize": 0.1},
        "outside_stages_ms": 0.5, "wall_ms": 7.8, "arms_alone_ms": {"bm25 arm alone": 3.0}}]})
    # a result another engineer's script might write: only JSON, no code in the report
    _write(results / "hybrid.json", {"title": "Hybrid arms", "description": "made up", "machine": machine,
                                     "repeat": 5, "runs": [{"n": 10, "ms": {"a": 1.5, "b": 2}},
                                                           {"n": 20, "ms": {"a": 3.0, "b": 4}}]})
    _write(results / "stores.json", {"queries": {"q1": {"ms": 1.0, "rows": 10}, "q2": {"ms": 2.0, "rows": 3}},
                                     "series": list(range(50))})
    (results / "broken.json").write_text("{not json", encoding="utf-8")


def test_report_renders_every_json_and_plots(tmp_path: Path, tiny_beir: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    _fake_results(results)
    # every set, method and goal row through main(); 12 queries a set are as good as all for the report
    quality.main(["--beir", str(tiny_beir), "--embedder", "hash", "--limit", "12", "--out", str(results / "quality.json")])
    doc = report.generate(results, tmp_path / "docs" / "performance.md", plots=True)
    text = doc.read_text(encoding="utf-8")
    for heading in ("# Performance", "## Summary", "## Machine", "## How to reproduce",
                    "## 1. Against python-nlql 0.3.3", "## 2. Against the physical limit (numpy)",
                    "## 3. Retrieval quality", "## 4. Trace of one hybrid query", "## 5. Other benchmarks",
                    report.OTHER_MARKER, "### Hybrid arms (`bench/results/hybrid.json`)",
                    "### stores (`bench/results/stores.json`)"):
        assert heading in text, heading
    assert "| canonical (ms) | 1.00 | 100.0 | 100.0× | same |" in text
    assert "default hybrid `RRF(s, k)`" in text and "held-out" in text  # the quality table (bench/quality.py)
    assert "[50 values]" in text  # long lists are elided, not dumped
    assert "broken" not in text
    images = sorted(p.name for p in (tmp_path / "docs" / "img").glob("*.png"))
    assert images == ["latency_vs_size.png", "quality.png", "trace.png"]
    assert "](img/latency_vs_size.png)" in text
    # deterministic for the same JSON
    assert report.render(results, tmp_path / "docs" / "img", doc) == text


def test_generic_section_shapes() -> None:
    wide = {"runs": [{"n": i, **{f"k{j}": j for j in range(12)}} for i in range(2)]}
    text = report.generic_section("wide", wide)
    assert "| runs | n=0 | n=1 |" in text  # transposed when there are many columns
    assert report.fmt(1234567) == "1,234,567" and report.fmt(0.00012) == "1.20e-04" and report.fmt(None) == "—"


def test_diversity_bench_at_tiny_size(tmp_path: Path) -> None:
    from bench import diversity

    out = tmp_path / "diversity.json"
    result = diversity.main(["--n", "400", "--per-doc", "10", "--repeat", "2", "--out", str(out)])
    assert json.loads(out.read_text(encoding="utf-8"))["benchmark"] == "diversity"
    clustered = result["layouts"]["clustered"]
    assert clustered["plain_top10_distinct_docs_median"] == 1  # the layout makes DISTINCT BY work for it
    assert {"plain_ms", "distinct_ms", "ratio", "distinct_rounds_median"} <= set(clustered)
    assert set(result["layouts"]) == {"clustered", "random"}


def test_side_by_side_tiny_run_without_optional_peers(tmp_path: Path) -> None:
    from bench import side_by_side

    out = tmp_path / "side_by_side.json"
    data = side_by_side.main(["--size", "600", "--repeat", "1", "--skip", "pg,chromadb,lancedb,bm25s",
                              "--out", str(out)])
    assert json.loads(out.read_text(encoding="utf-8"))["median_ms"] == data["median_ms"]
    labels = list(side_by_side.SHAPE_LABEL.values())
    for row in ("NLQL built-in", "numpy floor (1 BLAS thread)"):
        assert all(data["median_ms"][row][lab] > 0 for lab in labels), row
        assert all(data["recall_at_10"][row][lab] == 1.0 for lab in labels), row  # both are exact
    assert data["median_ms"]["NLQL built-in, BM25 with WHERE kw > 0"]["pure top-10"] is None
    assert {"NLQL on pgvector", "Chroma", "LanceDB", "bm25s"} <= set(data["notes"])
    assert "LanceDB flat" not in data["median_ms"]
    section = report.generic_section("side_by_side", data)
    assert "**median_ms**" in section and "**recall_at_10**" in section
    assert "| NLQL built-in |" in section


def test_ask_speed_bench_at_tiny_size(tmp_path: Path) -> None:
    from bench import ask_speed

    out = ask_speed.main(["--copies", "1", "--repeat", "1", "--out", str(tmp_path / "ask.json")])
    rows = {r["question"]: r for r in out["rows"]}
    assert set(rows) == {q for q, _ in ask_speed.QUESTIONS}
    for question, intent in ask_speed.QUESTIONS:
        assert rows[question]["intent"] == intent
        assert rows[question]["same_page"] and rows[question]["fast_path"] == "fusion"
    assert json.loads((tmp_path / "ask.json").read_text())["sentences"] == out["sentences"]


def test_duckdb_floor_bench_at_tiny_size(tmp_path: Path) -> None:
    """The DuckDB floor bench end to end, ingest phases included (its prepared-rows floor reads what the
    store prepares: a change to the store's prepared rows must keep the bench running)."""
    import subprocess

    out = tmp_path / "floor.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "duckdb_floor.py"), "--n", "2000", "--repeat", "1",
                           "--ingest", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["ingest"]["prepared_floor_s"] > 0 and data["ingest"]["nlql_s"] > 0
    assert {"top10", "tag", "bm25", "rrf"} <= set(data["kinds"])


def test_duckdb_small_filter_bench_at_tiny_size(tmp_path: Path) -> None:
    """The DuckDB filtered-knn bench end to end: knn ranked in numpy and in SQL give the same hits for
    every filter (selective ones under SMALL_ROWS, the 50% one above it)."""
    import subprocess

    out = tmp_path / "small.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "duckdb_small_filter.py"), "--n", "4000",
                           "--repeat", "1", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text(encoding="utf-8"))
    assert set(data["filters"]) == {"0.1%", "0.3%", "1%", "50%"}
    assert all(f["same_hits"] == "10/10" for f in data["filters"].values())
    assert data["filters"]["50%"]["passing_rows"] > data["small_rows"] >= data["filters"]["1%"]["passing_rows"]


def test_qdrant_sparse_bench_at_tiny_size(tmp_path: Path) -> None:
    """The Qdrant BM25 bench end to end: the sparse-search collection and one made without the sparse
    vector answer every query the same."""
    import subprocess

    pytest.importorskip("qdrant_edge")
    out = tmp_path / "qs.json"
    done = subprocess.run([sys.executable, "-m", "bench.qdrant_sparse", "--size", "2000", "--repeat", "1",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text(encoding="utf-8"))
    assert all(data["same_answers"].values()) and set(data["speedup"]) == {"bm25", "bm25_filtered", "bm25_rare", "rrf"}
