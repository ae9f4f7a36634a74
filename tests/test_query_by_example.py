"""SIMILARITY by a vector parameter and by DOC("id") (SPEC §11), against numpy brute force."""

from __future__ import annotations

import random

import numpy as np
import pytest

from nlql import Engine, NLQLError
from nlql.embedders import HashEmbedder

WORDS = "agents tools memory graphs vectors search ranking fusion cursor pages data query".split()
DIM = 32


def _engine(store: str = "memory") -> Engine:
    rng = random.Random(4)
    e = Engine(embedder=HashEmbedder(dim=DIM), store=store)
    for i in range(30):
        text = " ".join(" ".join(rng.choice(WORDS) for _ in range(4)).capitalize() + "." for _ in range(rng.randint(1, 3)))
        e.add_text(text, id=f"d{i:02d}", metadata={"tag": rng.choice("ab")})
    return e


def _brute(e: Engine, q: np.ndarray, exclude: str | None = None, k: int = 5) -> list[str]:
    """Cosine of every sentence (its text embedded again, normalised) with ``q``, best first."""
    rows = [h for h in e.search("SELECT SENTENCE") if h.doc_id != exclude]
    vecs = e.embedder.embed([h.content for h in rows]).astype(np.float64)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    scores = vecs @ (q / np.linalg.norm(q))
    order = sorted(range(len(rows)), key=lambda i: (-round(scores[i], 6), i))
    return [rows[i].id for i in order[:k]]


@pytest.mark.parametrize("as_array", [False, True])
def test_vector_parameter(as_array: bool) -> None:
    e = _engine()
    rng = np.random.default_rng(1)
    q = rng.standard_normal(DIM)
    v = q.astype(np.float32) if as_array else [float(x) for x in q]
    got = e.search("SELECT SENTENCE LET s = SIMILARITY(content, $v) LIMIT 5", {"v": v})
    assert [h.id for h in got] == _brute(e, q)
    text = str(e.explain("SELECT SENTENCE LET s = SIMILARITY(content, $v) LIMIT 5", {"v": v}))
    assert "vector of 32 numbers" in text and "knn" in text
    # the same as the embedded text's vector: a vector parameter is what SIMILARITY of a text embeds
    t = e.embedder.embed(["agents memory"])[0]
    assert [h.id for h in e.search("SELECT SENTENCE LET s = SIMILARITY(content, $v) LIMIT 5", {"v": list(map(float, t))})] \
        == [h.id for h in e.search('SELECT SENTENCE LET s = SIMILARITY(content, "agents memory") LIMIT 5')]


def test_more_like_this() -> None:
    e = _engine()
    rows = [h for h in e.search("SELECT SENTENCE") if h.doc_id == "d07"]
    vecs = e.embedder.embed([h.content for h in rows]).astype(np.float64)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    got = e.search('SELECT SENTENCE LET s = SIMILARITY(content, DOC("d07")) WHERE doc_id != "d07" LIMIT 5')
    assert [h.id for h in got] == _brute(e, vecs.mean(axis=0), exclude="d07")
    docs = e.search('SELECT DOCUMENT LET s = SIMILARITY(content, DOC($d)) WHERE doc_id != $d LIMIT 3', {"d": "d07"})
    assert len(docs) == 3 and all(h.doc_id != "d07" for h in docs)


def test_bad_vectors_and_unknown_doc() -> None:
    e = _engine()
    q = "SELECT SENTENCE LET s = SIMILARITY(content, $v) LIMIT 5"
    with pytest.raises(NLQLError, match="has 3 numbers") as info:
        e.search(q, {"v": [0.1, 0.2, 0.3]})
    assert info.value.line == 1 and info.value.column > 1 and "^" in str(info.value)
    with pytest.raises(NLQLError):
        e.search(q, {"v": [float("nan")] * DIM})
    with pytest.raises(NLQLError, match="all zeros"):
        e.search(q, {"v": [0.0] * DIM})
    with pytest.raises(NLQLError, match="no document") as info:
        e.search('SELECT SENTENCE LET s = SIMILARITY(content, DOC("missing")) LIMIT 5')
    assert info.value.column > 1


@pytest.mark.parametrize("store", ["duckdb", "faiss", "hnswlib"])
def test_same_answer_on_other_stores(store: str) -> None:
    pytest.importorskip({"duckdb": "duckdb", "faiss": "faiss", "hnswlib": "hnswlib"}[store])
    mem, other = _engine(), _engine(store)
    v = [float(x) for x in np.random.default_rng(2).standard_normal(DIM)]
    for q, p in [("SELECT SENTENCE LET s = SIMILARITY(content, $v) LIMIT 5", {"v": v}),
                 ('SELECT SENTENCE LET s = SIMILARITY(content, DOC("d03")) WHERE doc_id != "d03" LIMIT 5', None),
                 ('SELECT SENTENCE LET s = SIMILARITY(content, DOC("d03")), k = BM25(content, "agents"), '
                  'r = RRF(s, k) ORDER BY r DESC LIMIT 5', None)]:
        assert [(h.id, h.scores) for h in other.search(q, p)] == [(h.id, h.scores) for h in mem.search(q, p)]
