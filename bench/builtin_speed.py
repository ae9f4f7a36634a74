#!/usr/bin/env python3
"""The built-in store against the numpy fp32 floor at 100k (and 1M), measured in one run (issue 21).

One-sentence documents with precomputed *clustered* vectors (dim 384: random unit centres plus noise,
re-normalised), looked up by the engine (so embedding is excluded everywhere) and metadata

* ``status``: ``"published"`` on 50% of the documents (the canonical query's filter);
* ``stage``: ``"published"`` on 25%;
* ``tag``: an integer 0–999 (``meta.tag == 7`` selects 0.1%).

Timed round-robin (interleaved, median of ``--repeat`` rounds after a warm-up round), in one process:

* numpy floors on the very matrix the store holds: ``M @ q`` + ``argpartition`` with one and with two
  BLAS threads (the floor is the smaller); the same on prebuilt sub-matrices of the 50%, 25% and 0.1%
  rows; a full scan + mask for the 50% filter; for the 0.1% rows also ``M[rows] @ q`` on a prebuilt
  row list (the rows gathered by the call: issue 35's floor);
* ``engine.search`` end to end (query embedding memoised) for pure top-10, canonical with the 50% and
  25% filters, and top-10 under the 0.1% tag filter; the path the store reports (``hits.stats``);
* identity: every query's top-10 keys *and* scores against the exact fp32 answer computed with numpy;
* the 0.1% query and its floor once more, each on its own, back to back (``*_alone``: warm caches).

Ingest (``engine.add_texts`` of every document, precomputed vectors) is timed once, before the queries.

    python bench/builtin_speed.py                      # 100k
    python bench/builtin_speed.py --size 1000000       # 1M (about 4 GB of RAM)
    python bench/builtin_speed.py --size 2000 --repeat 3 --out /tmp/x.json   # smoke

Writes bench/results/builtin_speed[_SIZE].json.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    RESULTS,
    interleaved_runs,
    log,
    machine_info,
    median_ms,
    stamp_end,
    steady,
    write_json,
)

DIM = 384
K = 10
QUERY_TEXTS = [f"query {i}" for i in range(8)]
PURE = 'SELECT SENTENCE LET rel = SIMILARITY(content, "{t}") ORDER BY rel DESC LIMIT 10'
CANONICAL = ('SELECT SENTENCE LET rel = SIMILARITY(content, "{t}") '
             'WHERE rel >= 0.2 AND meta.{field} == "published" ORDER BY rel DESC LIMIT 10')
TAG = 'SELECT SENTENCE LET rel = SIMILARITY(content, "{t}") WHERE meta.tag == 7 ORDER BY rel DESC LIMIT 10'


def clustered(n: int, centres: int, noise: float, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors around random unit centres; ``noise`` is the noise norm relative to the centre's."""
    c = rng.standard_normal((centres, DIM)).astype(np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    out = np.empty((n, DIM), dtype=np.float32)
    for lo in range(0, n, 100_000):
        hi = min(n, lo + 100_000)
        x = c[rng.integers(0, centres, hi - lo)] + rng.standard_normal((hi - lo, DIM)).astype(np.float32) * (
            noise / DIM**0.5)
        out[lo:hi] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


class Lookup:
    """Precomputed vectors by text (documents and query texts).

    A batch of consecutive corpus texts (what ``add_texts`` hands over) is found by its first text and
    returned as a copy of its slice: a lookup per text in a dict of every text cost the harness itself
    more per text at 1M than at 100k (cache misses), which the ingest figure is not meant to include."""

    name = "bench-clustered-384"
    dim = DIM

    def __init__(self, texts: list[str], vectors: np.ndarray) -> None:
        self._texts = texts
        self._row = {t: i for i, t in enumerate(texts)}
        self._vectors = vectors

    def embed(self, texts: Any) -> np.ndarray:
        texts = list(texts)
        i = self._row.get(texts[0], -1) if texts else -1
        if i >= 0 and self._texts[i : i + len(texts)] == texts:  # the same str objects: identity compares
            return self._vectors[i : i + len(texts)].copy()
        return self._vectors[[self._row[t] for t in texts]]


def exact_top(mat: np.ndarray, q: np.ndarray, rows: np.ndarray | None, min_score: float | None) -> list[tuple[int, float]]:
    """The exact answer: fp32 scores (one BLAS thread, rounded to 6 places), best first, ties by row."""
    from nlql import values as V
    from nlql.kernels import blas_one_thread as _blas_one_thread

    qn = V.normalize_rows(q[None, :].copy(), zero_invalid=True)
    with _blas_one_thread():
        s = (qn @ mat.T)[0]
    s = np.round(s, 6)
    idx = np.arange(len(s)) if rows is None else rows
    if min_score is not None:
        idx = idx[s[idx] >= min_score]
    order = np.lexsort((idx, -s[idx]))[:K]
    return [(int(idx[i]), float(s[idx[i]])) for i in order]


def run(n: int, repeat: int, centres: int, noise: float) -> dict[str, Any]:
    from nlql import Engine
    from nlql.kernels import blas_one_thread as _blas_one_thread

    rng = np.random.default_rng(21)
    vecs = clustered(n + len(QUERY_TEXTS), centres, noise, rng)
    texts = [f"Sentence number {i} of the benchmark." for i in range(n)]
    status = rng.random(n) < 0.5
    stage = rng.integers(0, 4, n) == 0
    tag = rng.integers(0, 1000, n)
    metas = [{"status": "published" if s else "draft", "stage": "published" if g else "review", "tag": int(t)}
             for s, g, t in zip(status.tolist(), stage.tolist(), tag.tolist())]
    emb = Lookup(texts + QUERY_TEXTS, vecs)
    engine = Engine(embedder=emb, store="memory", warm_up=False)
    gc.collect()
    t = time.perf_counter()
    engine.add_texts(texts, ids=[str(i) for i in range(n)], metadatas=metas, batch_size=8192)
    ingest_s = time.perf_counter() - t
    steady(engine)
    log(f"[builtin_speed] n={n} ingest {ingest_s:.1f} s")
    del texts, metas
    gc.collect()

    store: Any = engine.store
    mat = store.matrix
    assert mat.shape == (n, DIM)
    qvs = vecs[n:]
    rows = {"status": np.flatnonzero(status), "stage": np.flatnonzero(stage), "tag": np.flatnonzero(tag == 7)}
    subs = {k: np.ascontiguousarray(mat[v]) for k, v in rows.items()}
    q0 = qvs[0]

    def floor(m: np.ndarray, threads: int) -> None:
        kk = min(K, len(m))
        if threads == 1:
            with _blas_one_thread():
                np.argpartition(-(m @ q0), kk - 1)[:kk]
        else:
            np.argpartition(-(m @ q0), kk - 1)[:kk]

    def floor_rows(keys: np.ndarray) -> None:
        # the rows' indices prebuilt, the rows gathered by the call (issue 35's "prebuilt row list")
        with _blas_one_thread():
            np.argpartition(-(mat[keys] @ q0), min(K, len(keys)) - 1)[:K]

    def scan_mask() -> None:
        with _blas_one_thread():
            s = mat @ q0
        s[~status] = -np.inf
        np.argpartition(-s, K - 1)[:K]

    queries = {"pure": PURE.format(t=QUERY_TEXTS[0]),
               "canonical_50": CANONICAL.format(t=QUERY_TEXTS[0], field="status"),
               "canonical_25": CANONICAL.format(t=QUERY_TEXTS[0], field="stage"),
               "tag_0.1pct": TAG.format(t=QUERY_TEXTS[0])}
    fns = {
        "numpy_full_1thread": functools.partial(floor, mat, 1),
        "numpy_full_default": functools.partial(floor, mat, 2),
        "numpy_sub50_1thread": functools.partial(floor, subs["status"], 1),
        "numpy_scan_mask50_1thread": scan_mask,
        "numpy_sub25_1thread": functools.partial(floor, subs["stage"], 1),
        "numpy_sub_tag_1thread": functools.partial(floor, subs["tag"], 1),
        "numpy_rows_tag_1thread": functools.partial(floor_rows, rows["tag"]),
    }
    for name, q in queries.items():
        fns[f"engine_{name}"] = functools.partial(engine.search, q)
    # the store's own top-10 (no parse, plan or rows): what the engine adds is the difference
    from nlql import values as V
    from nlql.pushdown import Cond

    qn = V.normalize_rows(q0[None, :].copy(), zero_invalid=True)
    natives = {"pure": None,
               "canonical_50": store.compile_filter(Cond("eq", ("meta", "status"), "published")),
               "canonical_25": store.compile_filter(Cond("eq", ("meta", "stage"), "published")),
               "tag_0.1pct": store.compile_filter(Cond("eq", ("meta", "tag"), 7))}
    for name, nf in natives.items():
        fns[f"store_knn_{name}"] = functools.partial(store.knn, qn, K, nf,
                                                     0.2 if name.startswith("canonical") else None)
    runs = interleaved_runs(fns, repeat)
    ms = {k: statistics.median(v) for k, v in runs.items()}
    # the selective query on its own, back to back (warm caches: a run of selective queries), beside
    # its interleaved figure (cold: each round's full scans evict it)
    ms["engine_tag_0.1pct_alone"] = median_ms(fns["engine_tag_0.1pct"], 10 * repeat, warmup=5)
    ms["numpy_sub_tag_1thread_alone"] = median_ms(fns["numpy_sub_tag_1thread"], 10 * repeat, warmup=5)
    floor_full = min(ms["numpy_full_1thread"], ms["numpy_full_default"])
    out: dict[str, Any] = {
        "n": n, "dim": DIM, "centres": centres, "noise": noise, "ingest_s": round(ingest_s, 2),
        "matrix_mb": round(mat.nbytes / 2**20, 1), "rows": {k: int(len(v)) for k, v in rows.items()},
        "ms": {k: round(v, 3) for k, v in ms.items()},
        "floor_ms": {"pure": round(floor_full, 3), "canonical_50": round(ms["numpy_sub50_1thread"], 3),
                     "canonical_25": round(ms["numpy_sub25_1thread"], 3),
                     "tag_0.1pct": round(ms["numpy_sub_tag_1thread"], 3)},
    }
    out["ratio_vs_floor"] = {name: round(ms[f"engine_{name}"] / out["floor_ms"][name], 2) for name in queries}
    # the 0.1% query against the other floor in the same rounds: numpy on a prebuilt row list
    out["floor_ms"]["tag_0.1pct_row_list"] = round(ms["numpy_rows_tag_1thread"], 3)
    out["ratio_vs_row_list_floor"] = {"tag_0.1pct": round(ms["engine_tag_0.1pct"] / ms["numpy_rows_tag_1thread"], 2)}
    out["store_ratio_vs_floor"] = {name: round(ms[f"store_knn_{name}"] / out["floor_ms"][name], 2)
                                   for name in queries}
    out["memory"] = dict(getattr(store, "memory_stats", lambda: {})())

    # identity on every query text: top-10 keys and scores against the exact fp32 answer
    identical, paths = {}, {}
    for name in queries:
        same = 0
        for tq, qv in zip(QUERY_TEXTS, qvs):
            q = queries[name].replace(QUERY_TEXTS[0], tq)
            hits = engine.search(q)
            got = [(int(h.doc_id), float(h.scores["rel"])) for h in hits]
            sel = {"pure": None, "canonical_50": rows["status"], "canonical_25": rows["stage"],
                   "tag_0.1pct": rows["tag"]}[name]
            want = exact_top(mat, qv, sel, 0.2 if name.startswith("canonical") else None)
            same += got == want
            paths[name] = hits.stats.get("store", {})
        identical[name] = f"{same}/{len(QUERY_TEXTS)}"
    out["identical_top10_and_scores"] = identical
    out["store_path"] = paths
    # where the engine's time goes on the selective query (plan cache hit after the timed rounds)
    tag_stats = engine.search(queries["tag_0.1pct"]).stats
    out["tag_stats"] = {"plan_cache": tag_stats.get("plan_cache"), "timings_ms": tag_stats.get("timings_ms")}
    engine.close()
    return out


def ingest_only(n: int, centres: int, noise: float) -> dict[str, Any]:
    """``engine.add_texts`` of the benchmark corpus alone: wall and CPU seconds."""
    from nlql import Engine

    rng = np.random.default_rng(21)
    vecs = clustered(n, centres, noise, rng)
    texts = [f"Sentence number {i} of the benchmark." for i in range(n)]
    metas = [{"status": "published" if i % 2 else "draft", "tag": i % 1000} for i in range(n)]
    engine = Engine(embedder=Lookup(texts, vecs), store="memory", warm_up=False)
    gc.collect()
    t, c = time.perf_counter(), time.process_time()
    engine.add_texts(texts, ids=[str(i) for i in range(n)], metadatas=metas, batch_size=8192)
    out = {"n": n, "ingest_wall_s": round(time.perf_counter() - t, 2), "ingest_cpu_s": round(time.process_time() - c, 2),
           "loadavg": os.getloadavg()}
    print(out)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--centres", type=int, default=1000)
    ap.add_argument("--noise", type=float, default=0.6)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--ingest-only", action="store_true",
                    help="time the ingest alone (the same corpus and batch size) and print it; writes no JSON")
    args = ap.parse_args(argv)
    if args.ingest_only:
        return ingest_only(args.size, args.centres, args.noise)
    out_path = args.out or RESULTS / ("builtin_speed.json" if args.size == 100_000 else f"builtin_speed_{args.size}.json")
    started = time.perf_counter()
    results: dict[str, Any] = {
        "title": f"Built-in store vs the numpy fp32 floor at {args.size:,} (dim 384, clustered vectors)",
        "machine": machine_info(),
        "command": "python bench/builtin_speed.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "method": __doc__.split("\n\n")[2].replace("\n", " "),
    }
    results["run"] = run(args.size, args.repeat, args.centres, args.noise)
    stamp_end(results, started)
    r = results["run"]
    for name in r["ratio_vs_floor"]:
        print(f"{name:>14}: {r['ms']['engine_' + name]:8.2f} ms (store.knn {r['ms']['store_knn_' + name]:.2f})  "
              f"floor {r['floor_ms'][name]:8.2f} ms  x{r['ratio_vs_floor'][name]}  identical {r['identical_top10_and_scores'][name]}  "
              f"path {r['store_path'][name]}")
    print(f"    tag_0.1pct against numpy on a prebuilt row list (M[rows] @ q): floor "
          f"{r['floor_ms']['tag_0.1pct_row_list']:.3f} ms, x{r['ratio_vs_row_list_floor']['tag_0.1pct']}")
    print(f"    tag_0.1pct alone, back to back: {r['ms']['engine_tag_0.1pct_alone']:.3f} ms "
          f"(floor alone {r['ms']['numpy_sub_tag_1thread_alone']:.3f} ms)")
    print(f"ingest {r['ingest_s']} s; load {results['machine'].get('loadavg_at_start')} -> "
          f"{results['machine'].get('loadavg_at_end')}; pid {os.getpid()}")
    write_json(out_path, results)
    log(f"wrote {out_path}")
    return results


if __name__ == "__main__":
    main()
