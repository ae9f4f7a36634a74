#!/usr/bin/env python3
"""NLQL side by side with LanceDB, Chroma, faiss, bm25s and the numpy floors, in one run (issue 21).

Optional peers (LanceDB and bm25s are NOT dependencies of NLQL): install them into a separate venv
that sees the project venv's packages, then run this script with that venv's python::

    .venv/bin/python -m venv /tmp/sbs-venv
    echo "$PWD/.venv/lib/python3.11/site-packages" > /tmp/sbs-venv/lib/python3.11/site-packages/_nlql.pth
    /tmp/sbs-venv/bin/python -m pip install lancedb==0.40.0 bm25s==0.3.16
    PYTHONPATH=$PWD /tmp/sbs-venv/bin/python bench/side_by_side.py          # 100k, about 10 minutes

In the project venv alone the script runs too: rows of a missing peer are reported as "not installed".

Corpus: bench/pg_speed.py's (bench/corpus.py's one-sentence texts, seed 42, so BM25 has real words;
``status`` "published" on 50%, ``tag`` t0-t999 so one tag is 0.1%; clustered unit vectors, dim 384,
precomputed for the corpus and for the ten query texts). Every system gets the same vectors: nobody
pays for embedding, at ingest or at query time.

Five query shapes, each over the ten query texts (a system's calls cycle through them): ``top10`` (pure
top-10 similarity), ``canonical`` (``rel >= 0.2 AND status == "published"``, a 50% filter), ``tag``
(top-10 under ``tag == "t7"``, 0.1%), ``bm25`` (BM25 top-10), ``rrf`` (RRF(SIMILARITY, BM25) top-10).
Every (system, shape) is timed round-robin with every other one in one ``interleaved_runs`` call
(medians of ``--repeat`` rounds after two warm-up rounds), so a burst of load from another process
lands on all of them alike.

The SQL stores come with their engines' own statements as floors, built from the same rows and timed
in the same interleaved call: **raw DuckDB SQL** (a ``FLOAT[384]`` table loaded from one Arrow table,
``array_inner_product … ORDER BY … DESC LIMIT 10``, filters as plain ``WHERE``) beside **NLQL on DuckDB**
(``DuckDBStore()`` in memory), and **raw pgvector SQL (HNSW)** (a table loaded by binary COPY, an HNSW
index with the store's parameters, ``ORDER BY embedding <=> q LIMIT 10`` at the store's ``ef_search``)
beside **NLQL on pgvector**. Their build times are in ``build``.

recall@10 against the exact answer on the ten query texts, for every row: numpy fp32 scores over the
allowed rows for the vector shapes; NLQL's BM25 (the SPEC formula with NLQL's analyzer, cross-checked
against a scipy sparse product) for ``bm25``, counting a returned row as right when its NLQL BM25 score
ties or beats the 10th best (short sentences tie a lot); NLQL's RRF top-10 (windows of 100) for
``rrf``. For peers with another tokenizer (bm25s, LanceDB FTS) the BM25 figure is an *overlap*, not an
error rate.

    PYTHONPATH=$PWD .venv/bin/python bench/side_by_side.py --size 2000 --repeat 3 --skip pg --out /tmp/s.json

Writes bench/results/side_by_side.json.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("LANCEDB_LOG", "error")  # lance warns on every query that projects no score column
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

ROOT = Path(__file__).resolve().parent.parent
# run as a script, this file's folder is sys.path[0], where "duckdb" would be bench/duckdb.py: drop it
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    RESULTS,
    SparseBM25,
    interleaved_runs,
    log,
    machine_info,
    stamp_end,
    steady,
    write_json,
)
from bench.pg_speed import QUERY_TEXTS, Lookup, corpus  # noqa: E402
from bench.pg_speed import SHAPES as PG_SHAPES  # noqa: E402

K, WINDOW, RRF_K = 10, 100, 60
# pg_speed's query shapes, except BM25 alone is written as bench/bm25_speed.py writes it: pg_speed's
# ``WHERE kw > 0`` sends the built-in store off its fast path (timed as an extra row, BM25_WHERE).
SHAPES = {**PG_SHAPES, "bm25": 'SELECT SENTENCE LET kw = BM25(content, "{text}") ORDER BY kw DESC LIMIT 10'}
BM25_WHERE = PG_SHAPES["bm25"]
TAG = "t7"
OPTIONAL = "not installed (optional peer: see the command at the top of bench/side_by_side.py)"
SHAPE_ORDER = ("top10", "canonical", "tag", "bm25", "rrf")
SHAPE_LABEL = {"top10": "pure top-10", "canonical": "canonical (50%)", "tag": "0.1% tag filter",
               "bm25": "BM25", "rrf": "RRF(SIMILARITY, BM25)"}

Search = Callable[[int], list[int]]  # query text index -> row indices, best first


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best scores, best first (ties by index)."""
    k = min(k, int(scores.size))
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    kth = np.partition(scores, scores.size - k)[scores.size - k]
    idx = np.flatnonzero(scores >= kth)
    return idx[np.lexsort((idx, -scores[idx]))][:k]


def installed(module: str, dist: str) -> str | None:
    """The distribution's version if its module is importable here, else None (nothing is imported)."""
    if importlib.util.find_spec(module) is None:
        return None
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


class Data:
    """The corpus, its vectors and everything the exact answers need."""

    def __init__(self, n: int) -> None:
        self.texts, self.ids, self.metas, vecs, qvecs = corpus(n)
        self.n = n
        self.vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        self.qvecs = np.ascontiguousarray(qvecs, dtype=np.float32)
        self.published = np.array([m["status"] == "published" for m in self.metas])
        self.tagged = np.array([m["tag"] == TAG for m in self.metas])
        self.pub_rows = np.flatnonzero(self.published)
        self.tag_rows = np.flatnonzero(self.tagged)
        self.embedder = Lookup(self.texts + QUERY_TEXTS, np.concatenate([self.vecs, self.qvecs]))


class Truth:
    """Exact answers per shape and query text: a dense score array (-inf = not allowed) or a fixed set."""

    def __init__(self, data: Data, bm25: SparseBM25, nlql_rrf: list[list[int]]) -> None:
        self.dense: dict[str, list[np.ndarray]] = {s: [] for s in ("top10", "canonical", "tag", "bm25")}
        for i, text in enumerate(QUERY_TEXTS):
            s = (data.vecs @ data.qvecs[i]).astype(np.float64)
            self.dense["top10"].append(s)
            self.dense["canonical"].append(np.where(data.published & (s >= 0.2), s, -np.inf))
            self.dense["tag"].append(np.where(data.tagged, s, -np.inf))
            self.dense["bm25"].append(bm25.dense(text))
        self.rrf = nlql_rrf

    def recall(self, shape: str, i: int, got: list[int]) -> float:
        """Share of the exact top-10 found; a returned row tied with the 10th best counts as right."""
        if shape == "rrf":
            want = set(self.rrf[i])
            return len(want & set(got[:K])) / max(1, len(want))
        s = self.dense[shape][i]
        eligible = int(np.isfinite(s).sum())
        if eligible == 0:
            return 1.0
        kth = s[_top(s, K)[-1]]
        tol = 1e-6 * max(1.0, abs(kth))
        right = sum(1 for r in dict.fromkeys(got[:K]) if 0 <= r < len(s) and np.isfinite(s[r]) and s[r] >= kth - tol)
        return min(right, K) / min(K, eligible)


# ------------------------------------------------------------------------------------------- systems


def nlql_rows(engine: Any, shapes: dict[str, str] | None = None) -> dict[str, Search]:
    """Engine.search of the NLQL query of every shape (``SHAPES`` unless given)."""
    out: dict[str, Search] = {}
    for shape, template in (shapes or {s: SHAPES[s] for s in SHAPE_ORDER}).items():
        queries = [template.format(text=t) for t in QUERY_TEXTS]

        def search(i: int, qs: list[str] = queries) -> list[int]:
            return [int(h.doc_id) for h in engine.search(qs[i])]

        out[shape] = search
    return out


def numpy_rows(data: Data, mat: np.ndarray, sparse: SparseBM25) -> tuple[dict[str, Search], dict[str, Search]]:
    """The floors: ``M @ q`` + argpartition (one BLAS thread), prebuilt sub-matrices for the filters, the
    scipy BM25 product, RRF of the two windows in numpy; and the plain scan with the default threads."""
    from nlql.kernels import blas_one_thread as _blas_one_thread

    sub_pub, sub_tag = np.ascontiguousarray(mat[data.pub_rows]), np.ascontiguousarray(mat[data.tag_rows])
    q = data.qvecs

    def unordered(s: np.ndarray, k: int = K) -> np.ndarray:
        k = min(k, s.size)
        return np.argpartition(-s, k - 1)[:k] if k else np.zeros(0, dtype=np.int64)

    def top10(i: int) -> list[int]:
        with _blas_one_thread():
            s = mat @ q[i]
        return unordered(s).tolist()

    def top10_default(i: int) -> list[int]:
        return unordered(mat @ q[i]).tolist()

    def canonical(i: int) -> list[int]:
        with _blas_one_thread():
            s = sub_pub @ q[i]
        keep = np.flatnonzero(s >= 0.2)
        return data.pub_rows[keep[unordered(s[keep])]].tolist()

    def tag(i: int) -> list[int]:
        with _blas_one_thread():
            s = sub_tag @ q[i]
        return data.tag_rows[unordered(s)].tolist()

    def bm25(i: int) -> list[int]:
        rows, scores = sparse.scores(QUERY_TEXTS[i])
        return rows[unordered(scores)].tolist()

    def rrf(i: int) -> list[int]:
        with _blas_one_thread():
            sim = mat @ q[i]
        kw_rows, kw_scores = sparse.scores(QUERY_TEXTS[i])
        sem_w = _top(sim, WINDOW)
        kw_w = kw_rows[_top(np.round(kw_scores, 9), WINDOW)]  # sums in another order differ in the last bits
        cand = np.union1d(sem_w, kw_w)
        fused = np.zeros(cand.size)
        fused[np.searchsorted(cand, sem_w)] += 1.0 / (RRF_K + np.arange(1, sem_w.size + 1))
        fused[np.searchsorted(cand, kw_w)] += 1.0 / (RRF_K + np.arange(1, kw_w.size + 1))
        return cand[_top(fused, K)].tolist()

    return ({"top10": top10, "canonical": canonical, "tag": tag, "bm25": bm25, "rrf": rrf},
            {"top10": top10_default})


def faiss_rows(data: Data) -> tuple[dict[str, Search], dict[str, Any]]:
    """faiss IndexFlatIP on one OpenMP thread; filters as search-time ID selectors, the 0.2 threshold
    applied to the returned top-10 (faiss has no threshold in a k-NN search)."""
    import faiss

    faiss.omp_set_num_threads(1)
    t = time.perf_counter()
    index = faiss.IndexFlatIP(data.vecs.shape[1])
    index.add(data.vecs)
    build = time.perf_counter() - t
    pub = faiss.SearchParameters(sel=faiss.IDSelectorBitmap(np.packbits(data.published, bitorder="little")))
    tag_sel = faiss.IDSelectorBatch(data.tag_rows.astype(np.int64))
    tag = faiss.SearchParameters(sel=tag_sel)
    q = data.qvecs

    def top10(i: int) -> list[int]:
        return [int(x) for x in index.search(q[i : i + 1], K)[1][0] if x >= 0]

    def canonical(i: int) -> list[int]:
        d, ids = index.search(q[i : i + 1], K, params=pub)
        return [int(x) for x, s in zip(ids[0], d[0], strict=True) if x >= 0 and s >= 0.2]

    def tagged(i: int) -> list[int]:
        return [int(x) for x in index.search(q[i : i + 1], K, params=tag)[1][0] if x >= 0]

    return ({"top10": top10, "canonical": canonical, "tag": tagged},
            {"build_s": round(build, 2), "keep": (index, pub, tag, tag_sel)})


def chroma_rows(data: Data) -> tuple[dict[str, Search], dict[str, Any]]:
    """Chroma, embedded in-process (EphemeralClient), its default HNSW with the inner-product space; the
    filters as its ``where`` clauses; the 0.2 threshold applied to the returned top-10 (a Chroma query has
    no score threshold). Chroma's embedded client has no BM25."""
    import chromadb

    client = chromadb.EphemeralClient(chromadb.config.Settings(anonymized_telemetry=False))
    col = client.create_collection("side_by_side", configuration={"hnsw": {"space": "ip"}})
    batch = int(client.get_max_batch_size())
    t = time.perf_counter()
    for lo in range(0, data.n, batch):
        hi = min(data.n, lo + batch)
        col.add(ids=data.ids[lo:hi], embeddings=data.vecs[lo:hi],
                metadatas=[{"status": m["status"], "tag": m["tag"]} for m in data.metas[lo:hi]],
                documents=data.texts[lo:hi])
    build = time.perf_counter() - t
    q = data.qvecs

    def run(i: int, where: dict[str, Any] | None, threshold: float | None = None) -> list[int]:
        res = col.query(query_embeddings=q[i : i + 1], n_results=K, where=where, include=["distances"])
        ids, dist = res["ids"][0], res["distances"][0]
        return [int(x) for x, d in zip(ids, dist, strict=True) if threshold is None or 1.0 - d >= threshold]

    return ({"top10": lambda i: run(i, None),
             "canonical": lambda i: run(i, {"status": "published"}, 0.2),
             "tag": lambda i: run(i, {"tag": TAG})},
            {"build_s": round(build, 2), "keep": (client, col)})


def lancedb_rows(data: Data, workdir: str) -> tuple[dict[str, dict[str, Search]], dict[str, Any]]:
    """LanceDB (embedded, a local directory): one table, an FTS index on the text and an IVF-PQ index
    (its defaults: partitions about sqrt(n), 384/16 = 24 sub-vectors, dot distance). ``flat`` bypasses the
    vector index (exact scan); filters are ``where(..., prefilter=True)``; the 0.2 threshold is
    ``distance_range(upper_bound=0.8)`` (LanceDB's dot distance is 1 - dot). ``hybrid``: its hybrid query
    (vector + FTS, RRFReranker, k = 60) with ``limit(100)`` so each arm brings a window of 100 like
    NLQL's RRF, first 10 kept; ``hybrid_w10`` is the plain ``limit(10)`` form (windows of 10)."""
    import lancedb
    import pyarrow as pa
    from lancedb.index import FTS, IvfPq
    from lancedb.rerankers import RRFReranker

    db = lancedb.connect(os.path.join(workdir, "lancedb"))
    dim = data.vecs.shape[1]
    table = pa.table({
        "id": pa.array(np.arange(data.n, dtype=np.int64)),
        "text": pa.array(data.texts),
        "status": pa.array([m["status"] for m in data.metas]),
        "tag": pa.array([m["tag"] for m in data.metas]),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(data.vecs.ravel()), dim),
    })
    info: dict[str, Any] = {}
    t = time.perf_counter()
    tbl = db.create_table("side_by_side", data=table)
    info["ingest_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    tbl.create_index("text", config=FTS())
    info["fts_index_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    tbl.create_index("vector", config=IvfPq(distance_type="dot"))
    info["ivf_pq_index_s"] = round(time.perf_counter() - t, 2)
    for idx in tbl.list_indices():
        info[f"index_{idx.name}"] = str(idx.index_type)
    q = data.qvecs
    pub, tag = "status = 'published'", f"tag = '{TAG}'"
    reranker = RRFReranker(K=RRF_K)

    def ids(res: Any) -> list[int]:
        return [int(x) for x in res.column("id").to_pylist()]

    def vector(i: int, flat: bool, where: str | None, threshold: bool = False, refine: int | None = None) -> list[int]:
        b = tbl.search(q[i], vector_column_name="vector").distance_type("dot")
        if flat:
            b = b.bypass_vector_index()
        if refine:
            b = b.refine_factor(refine)
        if where:
            b = b.where(where, prefilter=True)
        if threshold:
            b = b.distance_range(upper_bound=0.8)
        return ids(b.limit(K).select(["id"]).to_arrow())

    def fts(i: int) -> list[int]:
        return ids(tbl.search(QUERY_TEXTS[i], query_type="fts").limit(K).select(["id"]).to_arrow())

    def hybrid(i: int, flat: bool, window: int) -> list[int]:
        b = (tbl.search(query_type="hybrid").vector(q[i]).text(QUERY_TEXTS[i]).distance_type("dot")
             .rerank(reranker))
        if flat:
            b = b.bypass_vector_index()
        return ids(b.limit(window).select(["id"]).to_arrow())[:K]

    rows = {
        "LanceDB flat": {
            "top10": lambda i: vector(i, True, None), "canonical": lambda i: vector(i, True, pub, True),
            "tag": lambda i: vector(i, True, tag), "bm25": fts, "rrf": lambda i: hybrid(i, True, WINDOW)},
        "LanceDB IVF-PQ": {
            "top10": lambda i: vector(i, False, None), "canonical": lambda i: vector(i, False, pub, True),
            "tag": lambda i: vector(i, False, tag), "rrf": lambda i: hybrid(i, False, WINDOW)},
        "LanceDB IVF-PQ, refine x10": {
            "top10": lambda i: vector(i, False, None, refine=10),
            "canonical": lambda i: vector(i, False, pub, True, refine=10)},
        "LanceDB IVF-PQ hybrid, limit(10)": {"rrf": lambda i: hybrid(i, False, K)},
    }
    info["keep"] = (db, tbl)
    return rows, info


def bm25s_rows(data: Data) -> tuple[dict[str, Search], dict[str, Any]]:
    """bm25s with NLQL's parameters (k1 1.2, b 0.75, Lucene idf = NLQL's formula), its English stop
    words and PyStemmer's English Snowball stemmer (NLQL's stemmer); its tokenizer keeps ``\\w\\w+``
    (drops one-character words) and its stop-word list differs from Snowball's, so document lengths and
    hence some scores differ. Timed: query tokenization + ``retrieve(k=10)`` (one thread)."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    t = time.perf_counter()
    tokens = bm25s.tokenize(data.texts, stopwords="en", stemmer=stemmer, show_progress=False)
    retriever = bm25s.BM25(k1=1.2, b=0.75)
    retriever.index(tokens, show_progress=False)
    build = time.perf_counter() - t

    def search(i: int) -> list[int]:
        qt = bm25s.tokenize([QUERY_TEXTS[i]], stopwords="en", stemmer=stemmer, return_ids=False,
                            show_progress=False)
        docs, _ = retriever.retrieve(qt, k=K, show_progress=False, n_threads=0)
        return [int(x) for x in docs[0]]

    return {"bm25": search}, {"build_s": round(build, 2), "keep": retriever}


def raw_duckdb_rows(data: Data) -> tuple[dict[str, Search], dict[str, Any]]:
    """DuckDB's own statements, the floor of NLQL on DuckDB: ``raw(id, status, tag, embedding
    FLOAT[384])`` loaded from one Arrow table, ``array_inner_product`` (the vectors are unit) ``ORDER BY
    … DESC LIMIT 10``, filters as plain ``WHERE`` on the columns. No BM25 without an extension."""
    import duckdb
    import pyarrow as pa

    dim = data.vecs.shape[1]
    conn = duckdb.connect()
    t = time.perf_counter()
    table = pa.table({
        "id": pa.array(np.arange(data.n, dtype=np.int64)),
        "status": pa.array([m["status"] for m in data.metas]),
        "tag": pa.array([m["tag"] for m in data.metas]),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(data.vecs.ravel()), dim)})
    conn.execute(f"CREATE TABLE raw (id BIGINT, status VARCHAR, tag VARCHAR, embedding FLOAT[{dim}])")
    conn.register("src", table)
    conn.execute("INSERT INTO raw SELECT * FROM src")
    conn.unregister("src")
    build = time.perf_counter() - t
    score = f"array_inner_product(embedding, $1::FLOAT[{dim}])"
    q = [v.tolist() for v in data.qvecs]

    def run(where: str, extra: list[Any]) -> Search:
        text = f"SELECT id FROM raw {where} ORDER BY {score} DESC LIMIT {K}"

        def search(i: int) -> list[int]:
            return [int(r[0]) for r in conn.execute(text, [q[i], *extra]).fetchall()]

        return search

    rows = {"top10": run("", []), "canonical": run(f"WHERE status = $2 AND {score} >= 0.2", ["published"]),
            "tag": run("WHERE tag = $2", [TAG])}
    return rows, {"build_s": round(build, 2), "keep": conn}


def raw_pg_rows(data: Data, uri: str, m: int, ef_construction: int, ef_search: int
                ) -> tuple[dict[str, Search], dict[str, Any]]:
    """pgvector's own SQL, the floor of NLQL on pgvector: ``raw(id, status, tag, embedding vector)``
    by binary COPY, an HNSW index (``vector_cosine_ops``, the store's ``m``/``ef_construction``),
    ``hnsw.ef_search`` as the store's, ``ORDER BY embedding <=> q LIMIT 10``; filters as plain
    ``WHERE`` (pgvector 0.6 filters the index's candidates: a selective filter under-fills)."""
    import psycopg

    from nlql.stores.pgvector.driver import Vector, register_vector, vector_bytes

    conn = psycopg.connect(uri, autocommit=True)
    oid = conn.execute("SELECT 'vector'::regtype::oid").fetchone()[0]
    register_vector(conn, oid)
    dim = data.vecs.shape[1]
    t = time.perf_counter()
    conn.execute(f"CREATE TABLE raw (id bigint, status text, tag text, embedding vector({dim}))")
    with conn.transaction(), conn.cursor() as cur, cur.copy("COPY raw FROM STDIN WITH (FORMAT BINARY)") as cp:
        cp.set_types(["int8", "text", "text", oid])
        for i, (meta, vec) in enumerate(zip(data.metas, data.vecs, strict=True)):
            cp.write_row((i, meta["status"], meta["tag"], Vector(vector_bytes(vec))))
    copy_s = time.perf_counter() - t
    t = time.perf_counter()
    conn.execute(f"CREATE INDEX ON raw USING hnsw (embedding vector_cosine_ops) WITH (m = {int(m)}, "
                 f"ef_construction = {int(ef_construction)})")
    conn.execute("ANALYZE raw")
    index_s = time.perf_counter() - t
    conn.execute(f"SET hnsw.ef_search = {int(ef_search)}")
    q = [Vector(vector_bytes(v)) for v in data.qvecs]

    def run(where: str, extra: list[Any]) -> Search:
        text = f"SELECT id FROM raw {where} ORDER BY embedding <=> %(q)s LIMIT {K}"

        def search(i: int) -> list[int]:
            return [int(r[0]) for r in conn.execute(text, {"q": q[i], **dict(extra)}).fetchall()]

        return search

    rows = {"top10": run("", []),
            "canonical": run("WHERE status = %(s)s AND 1 - (embedding <=> %(q)s) >= 0.2", [("s", "published")]),
            "tag": run("WHERE tag = %(t)s", [("t", TAG)])}
    return rows, {"copy_s": round(copy_s, 2), "index_s": round(index_s, 2), "keep": conn}


# ---------------------------------------------------------------------------------------------- run


def run(n: int, repeat: int, skip: set[str]) -> dict[str, Any]:
    from nlql import Engine

    started_build = time.perf_counter()
    data = Data(n)
    peers = {"lancedb": installed("lancedb", "lancedb"), "bm25s": installed("bm25s", "bm25s"),
             "chromadb": installed("chromadb", "chromadb"), "faiss": installed("faiss", "faiss-cpu")}
    use = {name: bool(version) and name not in skip for name, version in peers.items()}
    with_pg = "pg" not in skip
    builds: dict[str, Any] = {}
    notes: dict[str, str] = {}
    systems: dict[str, dict[str, Search]] = {}
    keep: list[Any] = []

    mem = Engine(embedder=data.embedder, warm_up=False)
    t = time.perf_counter()
    mem.add_texts(data.texts, ids=data.ids, metadatas=data.metas, batch_size=8192)
    builds["NLQL built-in ingest_s"] = round(time.perf_counter() - t, 2)
    steady(mem)
    t = time.perf_counter()
    mem.search(SHAPES["bm25"].format(text=QUERY_TEXTS[0]))
    builds["NLQL built-in first BM25 query_s"] = round(time.perf_counter() - t, 2)
    systems["NLQL built-in"] = nlql_rows(mem)
    systems["NLQL built-in, BM25 with WHERE kw > 0"] = nlql_rows(mem, {"bm25": BM25_WHERE})
    log(f"[side_by_side] n={n}: NLQL built-in ingest {builds['NLQL built-in ingest_s']} s")

    pg_server = None
    if with_pg:
        try:
            from bench.pg_speed import Postgres
            from nlql.stores.pgvector import PgVectorStore

            pg_server = Postgres()
            store = PgVectorStore(pg_server.uri, table_prefix="sbs")
            pg = Engine(embedder=data.embedder, store=store, warm_up=False)
            t = time.perf_counter()
            pg.add_texts(data.texts, ids=data.ids, metadatas=data.metas, batch_size=8192)
            builds["NLQL on pgvector ingest_s"] = round(time.perf_counter() - t, 2)
            t = time.perf_counter()
            store.build_index()
            builds["NLQL on pgvector HNSW index_s"] = round(time.perf_counter() - t, 2)
            systems["NLQL on pgvector"] = nlql_rows(pg)
            notes["NLQL on pgvector"] = ("PgVectorStore() with its HNSW index, PostgreSQL "
                                         f"{pg_server.versions['postgres']} + pgvector {pg_server.versions['pgvector']}")
            log(f"[side_by_side] pgvector ingest {builds['NLQL on pgvector ingest_s']} s, "
                f"index {builds['NLQL on pgvector HNSW index_s']} s")
            systems["raw pgvector SQL (HNSW)"], info = raw_pg_rows(data, pg_server.uri, store.m,
                                                                  store.ef_construction, store.ef_search)
            keep.append(info.pop("keep"))
            builds["raw pgvector COPY_s"], builds["raw pgvector HNSW index_s"] = info["copy_s"], info["index_s"]
            notes["raw pgvector SQL (HNSW)"] = (f"ORDER BY embedding <=> q LIMIT 10, hnsw.ef_search {store.ef_search}, "
                                                "filters as plain WHERE on columns")
        except Exception as exc:  # noqa: BLE001 - an optional row; the reason is reported
            notes["NLQL on pgvector"] = f"not run: {type(exc).__name__}: {exc}"
            log(f"[side_by_side] pgvector skipped: {exc}")
    else:
        notes["NLQL on pgvector"] = "not run (--skip pg)"

    if "duckdb" not in skip:
        from nlql.stores.duckdb import DuckDBStore

        duck = Engine(embedder=data.embedder, store=DuckDBStore(), warm_up=False)
        t = time.perf_counter()
        duck.add_texts(data.texts, ids=data.ids, metadatas=data.metas, batch_size=8192)
        builds["NLQL on DuckDB ingest_s"] = round(time.perf_counter() - t, 2)
        systems["NLQL on DuckDB"] = nlql_rows(duck)
        systems["raw DuckDB SQL"], info = raw_duckdb_rows(data)
        keep.append(info.pop("keep"))
        builds["raw DuckDB insert_s"] = info["build_s"]
        notes["NLQL on DuckDB"] = "DuckDBStore() in memory: exact scans, hybrid plans as one statement"
        notes["raw DuckDB SQL"] = ("array_inner_product(embedding, q) ORDER BY … DESC LIMIT 10 on a FLOAT[384] "
                                   "table, filters as plain WHERE on columns")
        log(f"[side_by_side] DuckDB ingest {builds['NLQL on DuckDB ingest_s']} s, raw insert {info['build_s']} s")
    else:
        notes["NLQL on DuckDB"] = "not run (--skip duckdb)"

    from nlql.text.analyzer import Analyzer

    mat = mem.store.matrix  # type: ignore[attr-defined]
    sparse = SparseBM25(data.texts, Analyzer())
    floor, floor_default = numpy_rows(data, mat, sparse)
    systems["numpy floor (1 BLAS thread)"] = floor
    systems["numpy M @ q, default threads"] = floor_default

    if use["faiss"]:
        systems["faiss IndexFlatIP (1 thread)"], info = faiss_rows(data)
        keep.append(info.pop("keep"))
        builds["faiss build_s"] = info["build_s"]
    else:
        notes["faiss"] = peers["faiss"] and "skipped (--skip)" or "not installed"
    if use["chromadb"]:
        systems["Chroma (embedded, HNSW defaults)"], info = chroma_rows(data)
        keep.append(info.pop("keep"))
        builds["Chroma ingest_s"] = info["build_s"]
        log(f"[side_by_side] Chroma ingest {info['build_s']} s")
    else:
        notes["Chroma"] = peers["chromadb"] and "skipped (--skip)" or "not installed"
    workdir = tempfile.TemporaryDirectory(prefix="nlql-bench-sbs-")
    if use["lancedb"]:
        rows, info = lancedb_rows(data, workdir.name)
        keep.append(info.pop("keep"))
        systems.update(rows)
        builds.update({f"LanceDB {k}": v for k, v in info.items()})
        log(f"[side_by_side] LanceDB {info}")
    else:
        notes["LanceDB"] = peers["lancedb"] and "skipped (--skip)" or OPTIONAL
    if use["bm25s"]:
        systems["bm25s"], info = bm25s_rows(data)
        keep.append(info.pop("keep"))
        builds["bm25s index_s"] = info["build_s"]
    else:
        notes["bm25s"] = peers["bm25s"] and "skipped (--skip)" or OPTIONAL
    builds["all builds_s"] = round(time.perf_counter() - started_build, 1)
    gc.collect()

    # exact answers, then every row's recall on every query text (before timing: a wrong row is loud)
    nlql_rrf = [systems["NLQL built-in"]["rrf"](i) for i in range(len(QUERY_TEXTS))]
    truth = Truth(data, sparse, nlql_rrf)
    nlql_bm25 = [systems["NLQL built-in"]["bm25"](i) for i in range(len(QUERY_TEXTS))]
    for i, text in enumerate(QUERY_TEXTS):  # the BM25 floor is NLQL's formula: same scores, row for row
        assert truth.recall("bm25", i, nlql_bm25[i]) == 1.0, (text, nlql_bm25[i])
    recall: dict[str, dict[str, float | None]] = {}
    for name, shapes in systems.items():
        recall[name] = {}
        for shape in SHAPE_ORDER:
            if shape in shapes:
                vals = [truth.recall(shape, i, shapes[shape](i)) for i in range(len(QUERY_TEXTS))]
                recall[name][SHAPE_LABEL[shape]] = round(float(np.mean(vals)), 3)
            else:
                recall[name][SHAPE_LABEL[shape]] = None

    # timing: every (system, shape) round-robin in one call, each cycling through the query texts
    fns: dict[tuple[str, str], Callable[[], Any]] = {}
    for name, shapes in systems.items():
        for shape, fn in shapes.items():
            state = {"i": 0}

            def one(fn: Search = fn, state: dict[str, int] = state) -> None:
                fn(state["i"] % len(QUERY_TEXTS))
                state["i"] += 1

            fns[(name, shape)] = one
    keyed = {f"{a} | {b}": f for (a, b), f in fns.items()}
    log(f"[side_by_side] timing {len(keyed)} (system, shape) pairs x {repeat} interleaved rounds")
    load_before = os.getloadavg()
    t = time.perf_counter()
    runs = interleaved_runs(keyed, repeat, warmup=2)
    timing_s = time.perf_counter() - t
    load_after = os.getloadavg()
    median: dict[str, dict[str, float | None]] = {}
    for name, shapes in systems.items():
        median[name] = {SHAPE_LABEL[s]: (round(statistics.median(runs[f"{name} | {s}"]), 3) if s in shapes else None)
                        for s in SHAPE_ORDER}
    if pg_server is not None:
        pg_server.stop()
    workdir.cleanup()
    return {
        "size": n, "dim": int(data.vecs.shape[1]), "repeat": repeat, "query_texts": len(QUERY_TEXTS),
        "timing_s": round(timing_s, 1),
        "loadavg_during_timing": {"before": [round(x, 2) for x in load_before],
                                  "after": [round(x, 2) for x in load_after]},
        "peers": {k: (v or "not installed") for k, v in peers.items()},
        "notes": notes,
        "build": builds,
        "median_ms": median,
        "recall_at_10": recall,
        "nlql_queries": {**{SHAPE_LABEL[s]: SHAPES[s] for s in SHAPE_ORDER}, "BM25 with WHERE kw > 0": BM25_WHERE},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--skip", default="", help="comma list of rows to leave out: pg, duckdb, chromadb, faiss, lancedb, bm25s")
    ap.add_argument("--out", type=Path, default=RESULTS / "side_by_side.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    results: dict[str, Any] = {
        "title": f"Side by side at {args.size:,} sentences: NLQL, LanceDB, Chroma, faiss, bm25s, numpy",
        "description": (
            "One run, one process: every (system, query) timed round-robin with all the others (medians of "
            f"{args.repeat} interleaved rounds, ten query texts cycled), precomputed clustered vectors (dim 384), "
            "no embedding timed. `median_ms`: milliseconds per query; `recall_at_10`: against the exact answer "
            "(BM25 rows of bm25s and LanceDB: overlap with NLQL's BM25, their tokenizers differ). — = the "
            "system has no such query here. See the prose below for what each row is."),
        "machine": machine_info(),
        "command": "python bench/side_by_side.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    results.update(run(args.size, args.repeat, {x.strip() for x in args.skip.split(',') if x.strip()}))
    stamp_end(results, started)
    write_json(args.out, results)
    labels = [SHAPE_LABEL[s] for s in SHAPE_ORDER]
    print(f"{'system':<36}" + "".join(f"{lab[:18]:>20}" for lab in labels))
    for name, row in results["median_ms"].items():
        rec = results["recall_at_10"][name]
        cells = []
        for lab in labels:
            ms = row[lab]
            cells.append("—" if ms is None else f"{ms:.2f} ({rec[lab]:.2f})")
        print(f"{name:<36}" + "".join(f"{c:>20}" for c in cells))
    for k, v in results["notes"].items():
        print(f"{k}: {v}")
    print(f"load {results['loadavg_during_timing']}; wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
