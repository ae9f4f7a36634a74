#!/usr/bin/env python3
"""PNG plots for docs/performance.md from bench/results/*.json (matplotlib, headless).

* ``latency_vs_size.png``: median latency against corpus size, log-log: NLQL's canonical query, the
  peer's (python-nlql 0.3.3), NLQL's SIMILARITY-only search, and the numpy floor (``M @ q`` + argpartition).
* ``quality.png``: held-out nDCG@10 of each single arm, the default hybrid and ``ask`` per labelled set.
* ``trace.png``: the stages of the hybrid query trace, as one horizontal stacked bar per store.

    python bench/plots.py [--results bench/results] [--out docs/img]

Each plot is drawn only when its JSON exists; returns (and prints) the files written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
IMG = ROOT / "docs" / "img"


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def latency_series(vs_peer: dict[str, Any] | None, floor: dict[str, Any] | None) -> dict[str, list[tuple[int, float]]]:
    """{series label: [(n, ms), …]} for the latency-vs-size plot."""
    series: dict[str, list[tuple[int, float]]] = {}

    def add(label: str, n: int, ms: float | None) -> None:
        if ms is not None and ms > 0:
            series.setdefault(label, []).append((int(n), float(ms)))

    for run in (vs_peer or {}).get("runs", []):
        n = run["n"]
        add("NLQL canonical (threshold + filter)", n, run.get("ours", {}).get("queries_ms", {}).get("canonical"))
        add("python-nlql 0.3.3 canonical", n, run.get("peer", {}).get("queries_ms", {}).get("canonical"))
    for run in (floor or {}).get("runs", []):
        n, ms = run["n"], run.get("ms", {})
        add("NLQL canonical (threshold + filter)", n, ms.get("engine_canonical"))
        add("NLQL SIMILARITY only", n, ms.get("engine_similarity_only"))
        add("numpy floor: M @ q + argpartition", n, run.get("floor_ms"))
    for label, pts in series.items():
        # one point per size: the same size measured by two scripts keeps the first (vs_peer's)
        seen: dict[int, float] = {}
        for n, ms in pts:
            seen.setdefault(n, ms)
        series[label] = sorted(seen.items())
    return series


def plot_latency(results: Path, out: Path) -> Path | None:
    series = latency_series(_load(results, "vs_peer"), _load(results, "floor"))
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.6), dpi=110)
    styles = {"python-nlql": ("tab:red", "s"), "canonical": ("tab:blue", "o"), "SIMILARITY": ("tab:green", "^"),
              "numpy": ("black", "x")}
    for label, pts in series.items():
        color, marker = next((v for k, v in styles.items() if k in label), ("tab:gray", "."))
        xs, ys = zip(*pts, strict=True)
        ax.plot(xs, ys, marker=marker, color=color, label=label, linestyle="--" if "numpy" in label else "-")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("corpus size (one-sentence documents)")
    ax.set_ylabel("median latency per query (ms)")
    ax.set_title("Top-10 latency vs corpus size (dim 384, fp32, exact)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "latency_vs_size.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_quality(results: Path, out: Path) -> Path | None:
    """Held-out nDCG@10 of the single arms, the default hybrid and ``ask`` on every labelled set
    (``bench/quality.py``)."""
    data = _load(results, "quality")
    if not data or not data.get("sets"):
        return None
    methods = ("similarity", "bm25", "hybrid", "ask")
    sets = [s for s in data["sets"] if all(m in s.get("held_out", {}) for m in methods)]
    if not sets:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.0), dpi=110)
    width = 0.8 / len(methods)
    for i, method in enumerate(methods):
        vals = [s["held_out"][method]["ndcg@10"] for s in sets]
        xs = [j + i * width for j in range(len(sets))]
        ax.bar(xs, vals, width=width, label=method)
        for x, v in zip(xs, vals, strict=True):
            ax.text(x, v + 0.01, f"{v:.3f}", ha="center", fontsize=7)
    ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(sets))],
                  [f"{s['name']} ({s['n_held_out']} q)" for s in sets])
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("nDCG@10, held-out half")
    ax.set_title("Retrieval quality by method and labelled set")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path = out / "quality.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_trace(results: Path, out: Path) -> Path | None:
    data = _load(results, "trace")
    if not data or not data.get("traces"):
        return None
    plt = _pyplot()
    traces = data["traces"]
    fig, ax = plt.subplots(figsize=(7.5, 1.2 + 0.7 * len(traces)), dpi=110)
    for row, tr in enumerate(traces):
        left = 0.0
        parts = list(tr["stages_ms"].items()) + [("outside stages", tr.get("outside_stages_ms", 0.0))]
        for i, (stage, ms) in enumerate(parts):
            if ms <= 0:
                continue
            ax.barh(row, ms, left=left, color=f"C{i}", label=stage if row == 0 else None)
            left += ms
    ax.set_yticks(range(len(traces)), [f"{t['store']} @ {t['n']:,}" for t in traces])
    ax.set_xlabel("ms (median per stage)")
    ax.set_title("Hybrid query (SIMILARITY + BM25, RRF): where the time goes")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    path = out / "trace.png"
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def make_plots(results: Path = RESULTS, out: Path = IMG) -> list[Path]:
    """Draw every plot whose data exists; the PNG paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for fn in (plot_latency, plot_quality, plot_trace):
        path = fn(results, out)
        if path is not None:
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> list[Path]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--out", type=Path, default=IMG)
    args = ap.parse_args(argv)
    written = make_plots(args.results, args.out)
    for p in written:
        print(p)
    return written


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
