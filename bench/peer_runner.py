#!/usr/bin/env python3
"""Drive python-nlql 0.3.3 (the peer) for bench/vs_peer.py. Runs inside the peer's own venv.

This file never imports our ``nlql``: it is executed by ``bench/.peer-venv/bin/python``, where ``nlql``
is the peer's package (the two share a top-level name, which is why the peer lives in its own venv).
It reads a work directory written by vs_peer.py::

    texts.json          the corpus, one string per document
    metas.json          one metadata dict per document
    vectors.npy         (N, 384) float32: our HashEmbedder's vectors of ``texts`` (unit rows)
    queries.json        {"texts": [query texts], "peer": {name: peer query string}}
    query_vectors.npy   (Q, 384) float32: the same embedder's vectors of the query texts

and prints one JSON object on stdout: ingest seconds, per-query median ms (warm-up excluded), row
counts and the returned document ids. The embedder it gives the peer only looks vectors up, so both
engines see bit-identical vectors and neither pays for embedding; a text it does not know is an error.

    python bench/peer_runner.py WORK_DIR [--repeat 5] [--granularity chunk]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


class LookupEmbedder:
    """The peer's Embedder protocol (``model_id``, ``dim``, ``embed``) over precomputed vectors."""

    def __init__(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        self._row = {t: i for i, t in enumerate(texts)}
        self._vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.calls = 0

    @property
    def model_id(self) -> str:
        return "nlql-hash-384-lookup"

    @property
    def dim(self) -> int:
        return int(self._vectors.shape[1])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        try:
            rows = [self._row[t] for t in texts]
        except KeyError as exc:  # the peer changed a text (normaliser/splitter): vectors would differ
            raise SystemExit(f"peer asked for a vector of an unknown text: {exc.args[0]!r}") from None
        return self._vectors[rows]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--granularity", default=None,
                    help="the peer's Engine(granularity=…); default: the peer's own default")
    ap.add_argument("--batch", type=int, default=None, help="add_documents(batch=…); default: the peer's")
    args = ap.parse_args()

    # the peer's ``nlql`` (this venv), never ours
    from nlql.model import Document

    import nlql

    if getattr(nlql, "__version__", None) != "0.3.3":
        raise SystemExit(f"expected python-nlql 0.3.3, got {getattr(nlql, '__version__', '?')} "
                         f"from {nlql.__file__}")
    work: Path = args.work
    texts: list[str] = json.loads((work / "texts.json").read_text())
    metas: list[dict[str, Any]] = json.loads((work / "metas.json").read_text())
    vectors = np.load(work / "vectors.npy")
    queries = json.loads((work / "queries.json").read_text())
    qvectors = np.load(work / "query_vectors.npy")
    embedder = LookupEmbedder(list(texts) + list(queries["texts"]), np.concatenate([vectors, qvectors]))

    kwargs: dict[str, Any] = {}
    if args.granularity:
        kwargs["granularity"] = args.granularity
    engine = nlql.Engine(embedder, **kwargs)
    add_kwargs: dict[str, Any] = {"batch": args.batch} if args.batch else {}

    t = time.perf_counter()
    engine.add_documents(
        (Document.from_text(text, id=str(i), metadata=meta) for i, (text, meta) in enumerate(zip(texts, metas, strict=True))),
        **add_kwargs,
    )
    ingest_s = time.perf_counter() - t
    if len(engine) != len(texts):
        raise SystemExit(f"peer holds {len(engine)} units for {len(texts)} one-sentence documents")

    out: dict[str, Any] = {
        "version": nlql.__version__,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "config": {"store": type(engine.store).__name__, "granularity": engine.granularity,
                   "add_documents_batch": args.batch or "default (256)", "embedder": "lookup of our vectors"},
        "n": len(texts),
        "ingest_s": round(ingest_s, 3),
        "queries_ms": {}, "runs_ms": {}, "rows": {}, "ids": {},
    }
    for name, q in queries["peer"].items():
        res = engine.search(q)
        out["rows"][name] = len(res)
        out["ids"][name] = [u.doc_id for u in res]
    # timed round-robin over the queries (as vs_peer.py times ours), after one unmeasured round
    calls = {name: functools.partial(engine.search, q) for name, q in queries["peer"].items()}
    for fn in calls.values():
        fn()
    runs: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(max(1, args.repeat)):
        for name, fn in calls.items():
            t = time.perf_counter()
            fn()
            runs[name].append((time.perf_counter() - t) * 1000)
    for name, r in runs.items():
        out["queries_ms"][name] = round(statistics.median(r), 3)
        out["runs_ms"][name] = [round(x, 3) for x in r]
        print(f"peer n={len(texts)} {name}: {statistics.median(r):.2f} ms", file=sys.stderr, flush=True)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
