#!/usr/bin/env python3
"""NLQL against its closest peer, python-nlql 0.3.3, in one run on the same data and vectors (issue 7).

The peer is installed with pip into its own virtual environment (``bench/.peer-venv``; the two packages
share the top-level name ``nlql``) and driven by ``bench/peer_runner.py`` in a subprocess, JSON in and
out. Both engines index the same synthetic corpus (bench/corpus.py, seed 42: one-sentence documents with
status/year/topic metadata) and get bit-identical vectors: our ``HashEmbedder(dim=384)`` embeds the
corpus and the query text once, the vectors are saved as ``.npy``, and each engine gets an embedder that
only looks them up — so ingest time is the engine's own work, not embedding.

Measured per corpus size: ingest time, and the median latency (warm-up excluded) of five queries, each
written in NLQL for us and as the closest python-nlql statement (the two grammars agree on these):
the canonical thresholded query, similarity + metadata filter, metadata only, CONTAINS alone, and
similarity + CONTAINS (a residual predicate). Ratios are peer / ours from the same run. The returned
document ids are compared too, so a fast wrong answer would show.

    python bench/vs_peer.py --quick     # ours at 10k and 100k, the peer at 10k (default)
    python bench/vs_peer.py --full      # the peer at 100k too: its ingest is quadratic, minutes

Writes bench/results/vs_peer.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    CACHE,
    RESULTS,
    LookupEmbedder,
    interleaved_runs,
    log,
    machine_info,
    stamp_end,
    steady,
    write_json,
)
from bench.corpus import synthetic_corpus  # noqa: E402

PEER_PACKAGE = "python-nlql==0.3.3"
PEER_VENV = ROOT / "bench" / ".peer-venv"
PEER_RUNNER = ROOT / "bench" / "peer_runner.py"
DIM = 384
SEED = 42
QUERY_TEXT = "renewable energy policy"

_SIM = f'LET rel = SIMILARITY(content, "{QUERY_TEXT}")'
#: name -> (our NLQL, the closest python-nlql statement). Both grammars accept these texts as written.
QUERIES: dict[str, tuple[str, str]] = {
    "canonical": (
        f'SELECT SENTENCE {_SIM} WHERE rel >= 0.2 AND meta.status == "published" ORDER BY rel DESC LIMIT 10',
        f'SELECT SENTENCE {_SIM} WHERE rel >= 0.2 AND meta.status == "published" ORDER BY rel DESC LIMIT 10',
    ),
    "similarity_filter": (
        f'SELECT SENTENCE {_SIM} WHERE meta.status == "published" ORDER BY rel DESC LIMIT 10',
        f'SELECT SENTENCE {_SIM} WHERE meta.status == "published" ORDER BY rel DESC LIMIT 10',
    ),
    "metadata_only": (
        'SELECT SENTENCE WHERE meta.year == 2021 AND meta.topic == "energy" LIMIT 10',
        'SELECT SENTENCE WHERE meta.year == 2021 AND meta.topic == "energy" LIMIT 10',
    ),
    "contains": (
        'SELECT SENTENCE WHERE content CONTAINS "solar" LIMIT 10',
        'SELECT SENTENCE WHERE content CONTAINS "solar" LIMIT 10',
    ),
    "similarity_contains": (
        f'SELECT SENTENCE {_SIM} WHERE content CONTAINS "solar" AND meta.status == "published" '
        "ORDER BY rel DESC LIMIT 10",
        f'SELECT SENTENCE {_SIM} WHERE content CONTAINS "solar" AND meta.status == "published" '
        "ORDER BY rel DESC LIMIT 10",
    ),
}

PROFILES: dict[str, dict[str, Any]] = {
    "quick": {"ours": [10_000, 100_000], "peer": [10_000], "repeat": 30, "peer_repeat": 7},
    "full": {"ours": [10_000, 100_000], "peer": [10_000, 100_000], "repeat": 30, "peer_repeat": 5},
}


# ------------------------------------------------------------------------------------------ the peer


def _peer_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _clean_env() -> dict[str, str]:
    # our checkout must never shadow the peer's ``nlql`` package
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def peer_version(python: Path) -> str | None:
    """The installed python-nlql version in the peer venv, or None."""
    if not python.exists():
        return None
    proc = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('python-nlql'))"],
        capture_output=True, text=True, env=_clean_env(), cwd=str(PEER_VENV.parent),
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def ensure_peer(venv: Path = PEER_VENV) -> Path:
    """Create the peer's venv and pip-install python-nlql 0.3.3 + numpy into it if needed."""
    python = _peer_python(venv)
    if peer_version(python) == PEER_PACKAGE.split("==")[1]:
        return python
    log(f"creating {venv} and installing {PEER_PACKAGE} (pip only)")
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    PEER_PACKAGE, "numpy"], check=True, env=_clean_env())
    found = peer_version(python)
    if found != PEER_PACKAGE.split("==")[1]:
        raise SystemExit(f"could not install {PEER_PACKAGE} into {venv} (found {found})")
    return python


# ------------------------------------------------------------------------------------------- data


class Dataset:
    """The corpus of size n, its HashEmbedder vectors, and the query text's vector."""

    def __init__(self, n: int) -> None:
        from nlql.embedders import HashEmbedder

        self.n = n
        self.texts, self.metas = synthetic_corpus(n, seed=SEED)
        emb = HashEmbedder(dim=DIM)
        t = time.perf_counter()
        self.vectors = emb.embed(self.texts)
        self.embed_s = time.perf_counter() - t
        self.query_texts = [QUERY_TEXT]
        self.query_vectors = emb.embed(self.query_texts)

    def embedder(self) -> LookupEmbedder:
        return LookupEmbedder(self.texts + self.query_texts, np.concatenate([self.vectors, self.query_vectors]))

    def write(self, work: Path) -> Path:
        """The files peer_runner.py reads."""
        work.mkdir(parents=True, exist_ok=True)
        (work / "texts.json").write_text(json.dumps(self.texts))
        (work / "metas.json").write_text(json.dumps(self.metas))
        np.save(work / "vectors.npy", self.vectors)
        np.save(work / "query_vectors.npy", self.query_vectors)
        (work / "queries.json").write_text(json.dumps(
            {"texts": self.query_texts, "peer": {k: v[1] for k, v in QUERIES.items()}}))
        return work


# ------------------------------------------------------------------------------------------- runs


def run_ours(data: Dataset, repeat: int, ingest_runs: int = 3) -> dict[str, Any]:
    """Ingest (median of ``ingest_runs`` fresh engines) and query medians on the built-in store."""
    from nlql import Engine

    ids = [str(i) for i in range(data.n)]
    ingest = []
    engine: Any = None
    for _ in range(max(1, ingest_runs)):
        engine = Engine(embedder=data.embedder(), store="memory", warm_up=False)
        t = time.perf_counter()
        engine.add_texts(data.texts, ids=ids, metadatas=data.metas)
        ingest.append(time.perf_counter() - t)
        steady(engine)
    assert engine is not None and len(engine) == data.n
    out: dict[str, Any] = {
        "n": data.n,
        "config": {"store": "memory", "add_texts_batch": "default (256)", "embedder": "lookup of HashEmbedder(384)"},
        "ingest_s": round(sorted(ingest)[len(ingest) // 2], 3),
        "ingest_runs_s": [round(x, 3) for x in ingest],
        "hash_embed_s": round(data.embed_s, 3),
        "queries_ms": {}, "runs_ms": {}, "rows": {}, "ids": {},
    }
    for name, (q, _) in QUERIES.items():
        hits = engine.search(q)
        out["rows"][name] = len(hits)
        out["ids"][name] = [h.doc_id for h in hits]
    runs = interleaved_runs({name: functools.partial(engine.search, q) for name, (q, _) in QUERIES.items()}, repeat)
    for name, r in runs.items():
        out["queries_ms"][name] = round(statistics.median(r), 3)
        out["runs_ms"][name] = [round(x, 3) for x in r]
    return out


def run_peer(python: Path, data: Dataset, repeat: int, granularity: str | None,
             timeout: float) -> dict[str, Any]:
    """Run peer_runner.py in the peer's venv on ``data``; its JSON answer."""
    work = data.write(CACHE / "peer" / f"n{data.n}")
    cmd = [str(python), str(PEER_RUNNER), str(work), "--repeat", str(repeat)]
    if granularity:
        cmd += ["--granularity", granularity]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_clean_env(),
                          cwd=str(work))
    if proc.returncode != 0:
        raise RuntimeError(f"peer runner failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def agreement(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per query: do both return the same document ids (as a set, and in the same order)?"""
    out = {}
    for name in QUERIES:
        a, b = ours["ids"].get(name, []), peer["ids"].get(name, [])
        out[name] = {"same_set": sorted(a) == sorted(b), "same_order": a == b,
                     "overlap": len(set(a) & set(b)), "rows_ours": len(a), "rows_peer": len(b)}
    return out


def ratios(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, float]:
    """peer / ours for ingest and every query (bigger means we are faster)."""
    out = {"ingest": round(peer["ingest_s"] / ours["ingest_s"], 1)}
    for name in QUERIES:
        a, b = ours["queries_ms"].get(name), peer["queries_ms"].get(name)
        if a and b:
            out[name] = round(b / a, 1)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    prof = ap.add_mutually_exclusive_group()
    prof.add_argument("--quick", dest="profile", action="store_const", const="quick")
    prof.add_argument("--full", dest="profile", action="store_const", const="full")
    ap.add_argument("--repeat", type=int, default=None, help="runs per query for us (median)")
    ap.add_argument("--peer-repeat", type=int, default=None, help="runs per query for the peer (median)")
    ap.add_argument("--peer-granularity", default="sentence",
                    help="python-nlql Engine(granularity=…) for the ratios (default 'sentence', its fastest "
                         "for these queries; at 10k its own default 'chunk' is measured too)")
    ap.add_argument("--peer-timeout", type=float, default=3600.0)
    ap.add_argument("--out", type=Path, default=RESULTS / "vs_peer.json")
    args = ap.parse_args(argv)
    profile = PROFILES[args.profile or "quick"]
    repeat = args.repeat or profile["repeat"]
    peer_repeat = args.peer_repeat or profile["peer_repeat"]

    started = time.perf_counter()
    python = ensure_peer()
    results: dict[str, Any] = {
        "title": "NLQL vs python-nlql 0.3.3 (built-in stores, same corpus, same vectors)",
        "profile": args.profile or "quick",
        "machine": machine_info(),
        "method": {
            "corpus": f"bench/corpus.py synthetic_corpus(n, seed={SEED}): one-sentence docs, status/year/topic",
            "vectors": f"nlql HashEmbedder(dim={DIM}) computed once, looked up by both engines (identical)",
            "latency": f"median of {repeat} (ours) / {peer_repeat} (peer) runs after one warm-up round; "
                       "the queries are timed round-robin (interleaved); query embedding is a lookup for both",
            "ingest": "ours: median of 3 fresh engines; peer: one run (minutes at 100k)",
            "peer_config": "python-nlql's built-in store as documented: Engine(embedder) -> LocalStore (exact "
                           "numpy flat index, metadata pushed down as numpy masks), add_documents(batch=256), "
                           f"granularity={args.peer_granularity!r}. Its default granularity is 'chunk'; for "
                           "SELECT SENTENCE over one-sentence documents 'sentence' is faster for it (it skips "
                           "query-time re-splitting), so the ratios use 'sentence'; 'chunk' is measured at "
                           "10k as peer_default.",
            "queries": {k: {"ours": v[0], "peer": v[1]} for k, v in QUERIES.items()},
        },
        "runs": [],
    }
    for n in sorted(set(profile["ours"]) | set(profile["peer"])):
        log(f"[vs_peer] n={n}: corpus + vectors")
        data = Dataset(n)
        entry: dict[str, Any] = {"n": n}
        if n in profile["ours"]:
            log(f"[vs_peer] n={n}: ours")
            entry["ours"] = run_ours(data, repeat)
        if n in profile["peer"]:
            log(f"[vs_peer] n={n}: python-nlql (subprocess)")
            entry["peer"] = run_peer(python, data, peer_repeat, args.peer_granularity, args.peer_timeout)
            if n <= 10_000 and args.peer_granularity != "chunk":
                log(f"[vs_peer] n={n}: python-nlql with its default granularity ('chunk')")
                entry["peer_default"] = run_peer(python, data, peer_repeat, None, args.peer_timeout)
        if "ours" in entry and "peer" in entry:
            entry["ratio_peer_over_ours"] = ratios(entry["ours"], entry["peer"])
            entry["agreement"] = agreement(entry["ours"], entry["peer"])
        if "ours" in entry and "peer_default" in entry:
            entry["ratio_peer_default_over_ours"] = ratios(entry["ours"], entry["peer_default"])
        results["runs"].append(entry)
        _print_entry(entry)
        del data
    big = [r for r in results["runs"] if r["n"] == 100_000 and "ratio_peer_over_ours" in r]
    if big:
        r = big[0]["ratio_peer_over_ours"]
        results["goals_100k"] = {"ingest_ge_10x": r["ingest"] >= 10, "canonical_ge_50x": r["canonical"] >= 50,
                                 "ingest_x": r["ingest"], "canonical_x": r["canonical"]}
    else:
        results["goals_100k"] = {"note": "the peer was not run at 100k in this profile (use --full)"}
    stamp_end(results, started)
    write_json(args.out, results)
    log(f"wrote {args.out}")
    return results


def _print_entry(entry: dict[str, Any]) -> None:
    n = entry["n"]
    ours, peer = entry.get("ours"), entry.get("peer")
    print(f"n={n}" + (f"  (peer granularity {peer['config']['granularity']!r})" if peer else ""))
    if ours:
        print(f"  ingest  ours {ours['ingest_s']:.3f} s" + (f"   peer {peer['ingest_s']:.3f} s" if peer else ""))
    for name in QUERIES:
        a = ours["queries_ms"].get(name) if ours else None
        b = peer["queries_ms"].get(name) if peer else None
        line = f"  {name:<20}"
        line += f" ours {a:9.3f} ms" if a is not None else " " * 18
        if b is not None:
            line += f"   peer {b:10.3f} ms"
        if a and b:
            line += f"   x{b / a:.1f}"
        print(line)
    if "ratio_peer_default_over_ours" in entry:
        print(f"  peer with its default granularity 'chunk': peer/ours = {entry['ratio_peer_default_over_ours']}")
    if "agreement" in entry:
        for name, agr in entry["agreement"].items():
            if not agr["same_set"]:
                print(f"  !! {name}: results differ (overlap {agr['overlap']}, rows {agr['rows_ours']} "
                      f"vs {agr['rows_peer']})")


if __name__ == "__main__":
    main()
