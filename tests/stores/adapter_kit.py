"""Shared helpers for the Qdrant and Chroma adapter tests: documents, the awkward-metadata filter
dataset, random filter trees, and hostile strings."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from typing import Any

import numpy as np
from hypothesis import strategies as st

from nlql.pushdown import Cond, FAnd, FOr
from nlql.stores.base import DocRecord, UnitRecord

DIM = 16
MISSING = object()


def unit_vectors(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_doc(doc_id: str, sentences: list[str], meta: dict[str, Any], seq: int, vectors: np.ndarray) -> DocRecord:
    units, pos = [], 0
    for p, s in enumerate(sentences):
        units.append(UnitRecord(p, s, pos, pos + len(s), " " if p + 1 < len(sentences) else ""))
        pos += len(s) + 1
    return DocRecord(doc_id, " ".join(sentences), meta, units, vectors, seq)


VALUES: list[Any] = [
    0, 1, -3, 2020, 2021, 2**53 + 1, 10**30, 0.5, 2020.0, -0.0, 1e300, 2020.5,
    "2020", "2020.0", "0.5", "-3", "1e3", " 5", "abc", "ABC", "abd", "", "a.b", "Straße", "x\x00y",
    "2024-06-01", "2024-06-01T10:00:00+02:00", "2024-06", "2024-06-01T08:00:00Z",
    True, False, None, MISSING, {"x": 1}, [1, "2020"], [], {"x": "2020"}, ["abc"], {"_": "abc"},
]
KEYS = ["a", "b", "c.d", "k y", "_"]  # ("_" is the typed views' presence mark: a key must never pass for it)
PATHS = [("meta", "a"), ("meta", "b"), ("meta", "c.d"), ("meta", "k y"), ("meta", "_"), ("meta", "n", "x"), ("meta", "n"),
         ("meta", "zz"), ("doc_id",), ("id",), ("position",), ("content",)]
LITERALS: list[Any] = [v for v in VALUES if v is not MISSING and not isinstance(v, (dict, list))] + [
    datetime(2024, 6, 1, 8, 0, tzinfo=timezone.utc), date(2024, 6, 1), datetime(2020, 1, 1),
    datetime(2024, 6, 1, 10, 0, tzinfo=timezone(timedelta(hours=2))), float("nan"), float("inf"),
    "doc7", "2024-06-05", "ss", "STRASSE", "a%", "%b%", "_bc", "^a", "[0-9]+",
]


def filter_dataset() -> list[DocRecord]:
    r = random.Random(1234)
    rng = np.random.default_rng(1234)
    words = ["Alpha", "beta", "GAMMA", "straße", "2020", "x\x00y", "Tool use", "abc"]
    docs = []
    for i in range(70):
        meta: dict[str, Any] = {}
        for key in KEYS:
            v = r.choice(VALUES)
            if v is not MISSING:
                meta[key] = v
        nested = r.choice(VALUES)
        if nested is not MISSING:
            meta["n"] = {"x": nested} if r.random() < 0.8 else nested
        doc_id = r.choice([f"doc{i}", str(2000 + i), f"2024-06-{1 + i % 28:02d}", f"D{i}.x"])
        n_units = 1 + (i % 3 == 0)
        sentences = [" ".join(r.choice(words) for _ in range(3)) for _ in range(n_units)]
        docs.append(make_doc(f"{doc_id}", sentences, meta, i + 1, unit_vectors(rng, n_units)))
    return docs


class FilterFixture(tuple):
    """(store, rows, vectors by key), with a short repr for hypothesis reports."""

    def __repr__(self) -> str:
        return f"FilterFixture({len(self[1])} rows)"



def _row_vectors(docs: list[DocRecord], rows: list[Any]) -> list[np.ndarray]:
    by = {(d.doc_id, u.position): d.vectors[j] for d in docs for j, u in enumerate(d.units)}
    return [by[(r.doc_id, r.position)] for r in rows]


OPS_BY_KIND = ["eq", "ne", "lt", "le", "gt", "ge", "in", "not_in", "is_null", "is_not_null",
               "contains", "not_contains", "like", "not_like", "match", "not_match"]


@st.composite
def leaves(draw: st.DrawFn) -> Cond:
    op = draw(st.sampled_from(OPS_BY_KIND))
    path = draw(st.sampled_from(PATHS))
    if op in ("is_null", "is_not_null"):
        return Cond(op, path, None)
    if op in ("in", "not_in"):
        return Cond(op, path, tuple(draw(st.lists(st.sampled_from(LITERALS), max_size=4))))
    if op in ("contains", "not_contains"):
        return Cond(op, path, draw(st.sampled_from(["a", "B", "", "ss", "ß", "\x00", "20", "tool u", "2024-06"])))
    if op in ("like", "not_like"):
        return Cond(op, path, draw(st.sampled_from(["a%", "%b%", "_bc", "20%", "%", "abc"])))
    if op in ("match", "not_match"):
        return Cond(op, path, draw(st.sampled_from(["^a", "[0-9]+", "(?i)alpha", "c$"])))
    return Cond(op, path, draw(st.sampled_from(LITERALS)))


filters = st.recursive(
    leaves(),
    lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=3).map(lambda xs: FAnd(tuple(xs))),
        st.lists(children, min_size=1, max_size=3).map(lambda xs: FOr(tuple(xs))),
    ),
    max_leaves=5,
)

HOSTILE = ["'; DROP TABLE x; --", 'quo"te', "nul\x00byte", "ünï©ødé 🚀", "back\\slash", "y" * 10_000, "", " ",
           "a.b[0]", "$where", "#x"]


def filter_fixture(store: Any) -> Iterator[FilterFixture]:
    """Open ``store``, load the filter dataset, yield (store, rows, vectors by key), close it."""
    store.open(DIM)
    docs = filter_dataset()
    store.upsert(docs)
    rows = store.fetch(store.scan())
    yield FilterFixture((store, rows, {r.key: v for r, v in zip(rows, _row_vectors(docs, rows), strict=True)}))
    store.close()


def check_tied_bm25_window(store_spec: str) -> None:
    """A BM25 arm's window on a KEYWORD_STATS store is exactly its depth, ties at the cut in insertion
    order; pages equal the built-in store's."""
    # 300 sentences tie on BM25 (the same words, the same length): the keyword arm's window is its first
    # rows in insertion order, so the store hands over exactly n, and pages on the store equal the built-in
    # store's for BM25, RRF and a filter
    from nlql import Engine
    from nlql.embedders import HashEmbedder

    texts = [f"zebra stripes in row {i % 7}. Plain words here {i}." for i in range(300)]
    texts += [f"zebra zebra stripes, twice {i}." for i in range(5)]  # five score higher
    metas = [{"g": i % 3} for i in range(len(texts))]
    engines = [Engine(embedder=HashEmbedder(dim=64), store=s, warm_up=False) for s in (store_spec, "memory")]
    for e in engines:
        e.add_texts(texts, ids=[f"d{i}" for i in range(len(texts))], metadatas=metas)
    store = engines[0].store
    keys, scores = store.bm25_candidates("zebra stripes", None, 40)
    assert len(keys) == 40 and list(scores[:5]) == sorted(scores[:5], reverse=True) and scores[0] > scores[-1]
    everything, _ = store.bm25_candidates("zebra stripes", None, None)
    assert len(everything) == 305
    for q in ['SELECT SENTENCE LET k = BM25(content, "zebra stripes") ORDER BY k DESC LIMIT 12',
              'SELECT SENTENCE LET s = SIMILARITY(content, "zebra row 3"), k = BM25(content, "zebra stripes"), '
              'f = RRF(s, k, window => 30) ORDER BY f DESC LIMIT 15',
              'SELECT SENTENCE LET s = SIMILARITY(content, "zebra"), k = BM25(content, "zebra stripes"), '
              'f = RRF(s, k, window => 20) WHERE meta.g == 1 ORDER BY f DESC LIMIT 10 OFFSET 3',
              'SELECT SENTENCE LET s = SIMILARITY(content, "zebra row 3"), k = BM25(content, "zebra stripes"), '
              'f = FUSE(s, k, window => 25) ORDER BY f DESC LIMIT 12',
              'SELECT SENTENCE LET s = SIMILARITY(content, "plain words"), k = BM25(content, "zebra stripes"), '
              'f = FUSE(k, s, method => "dbsf", weights => [2, 1], window => 30) WHERE meta.g != 0 '
              'ORDER BY f DESC LIMIT 9 OFFSET 2']:
        got, want = (e.search(q) for e in engines)
        assert [(h.id, h.scores) for h in got] == [(h.id, h.scores) for h in want], q
        assert got.stats.get("keyword_recall", 0) <= 60, got.stats
    for e in engines:
        e.close()


def check_document_arms(store_spec: str) -> None:
    """DOCUMENT pages ordered by BM25 or by a fusion of SIMILARITY and BM25 arms on a KEYWORD_STATS store
    read only the documents of each arm's best sentences (widened until they span the arm's depth in
    documents), and equal the built-in store's: ids, scores, the scoring sentence, ties between whole
    documents in insertion order."""
    from nlql import Engine
    from nlql.embedders import HashEmbedder

    texts = []
    for i in range(120):
        body = [f"Plain words number {i}.", f"More filler about row {i % 9}."]
        if i % 4 == 0:
            body.insert(i % 3, "The zebra has stripes.")  # the same sentence in 30 documents: ties
        if i % 8 == 0:
            body.append("The zebra has stripes.")  # twice in 15 of them: the best sentences span fewer documents
        if i % 10 == 3:
            body.append("Zebra zebra stripes and a lion.")
        texts.append(" ".join(body))
    metas = [{"g": i % 3} for i in range(len(texts))]
    engines = [Engine(embedder=HashEmbedder(dim=64), store=s, warm_up=False) for s in (store_spec, "memory")]
    try:
        for e in engines:
            e.add_texts(texts, ids=[f"d{i}" for i in range(len(texts))], metadatas=metas)
        for q, narrowed in [
            ('SELECT DOCUMENT LET k = BM25(content, "zebra stripes") ORDER BY k DESC LIMIT 12', True),
            ('SELECT DOCUMENT LET k = BM25(content, "zebra stripes") ORDER BY k DESC LIMIT 25', True),
            ('SELECT DOCUMENT LET k = BM25(content, "zebra lion") WHERE k > 0 ORDER BY k DESC LIMIT 50', True),
            ('SELECT DOCUMENT LET k = BM25(content, "zebra") WHERE meta.g == 1 ORDER BY k DESC LIMIT 5 OFFSET 2',
             True),
            ('SELECT DOCUMENT LET s = SIMILARITY(content, "zebra has stripes"), k = BM25(content, "zebra stripes"), '
             'f = RRF(s, k, window => 15) ORDER BY f DESC LIMIT 10', True),
            ('SELECT DOCUMENT LET s = SIMILARITY(content, "The zebra has stripes."), k = BM25(content, "lion"), '
             'f = RRF(s, k, window => 20) ORDER BY f DESC LIMIT 20', True),
            ('SELECT DOCUMENT LET s = SIMILARITY(content, ["filler row 3", "lion"]), k = BM25(content, "lion"), '
             'f = RRF(k, s, window => 20) WHERE meta.g != 2 ORDER BY f DESC LIMIT 8 OFFSET 1', True),
            ('SELECT DOCUMENT LET s = SIMILARITY(content, "The zebra has stripes."), k = BM25(content, "lion"), '
             'f = FUSE(s, k, window => 20) ORDER BY f DESC LIMIT 20', True),
            ('SELECT DOCUMENT LET s = SIMILARITY(content, "filler row 3"), k = BM25(content, "zebra stripes"), '
             'f = FUSE(k, s, method => "dbsf", window => 25) WHERE meta.g == 1 ORDER BY f DESC LIMIT 10', True),
            ('SELECT DOCUMENT LET k = BM25(content, "zebra") ORDER BY k DESC LIMIT 60', False),  # 45 match: 0s fill
        ]:
            got, want = (e.search(q) for e in engines)
            assert [(h.id, h.scores, h.best.position if h.best else None) for h in got] == [
                (h.id, h.scores, h.best.position if h.best else None) for h in want], q
            assert ("keyword_recall" in got.stats) is narrowed, (q, got.stats)
    finally:
        for e in engines:
            e.close()
