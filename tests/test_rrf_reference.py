"""RRF against a brute-force reference: SPEC §9's Σ wᵢ/(k + rankᵢ), every arm ranked over the rows that
pass WHERE, down to its window, rows below an arm's ``min =>`` out of that arm (NULL, so failing a WHERE
condition on it), any ``k`` (non-integer too) and weights (issue 33 item 2: 8 rows where 10 qualified
and 0.18 where the formula gives 0.29 on the built-in store and Faiss).

The embedder gives each sentence the cosine written in it (``s69`` → 0.69 to the query), so the
similarities are spread evenly and independent of the words, which set BM25. The reference reads only
the raw scores of every sentence (a plain query with neither ``min =>`` nor fusion, row by row) and
does the rest in Python: thresholds as doubles, ranks, windows, sums, order, the page.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from nlql import Engine

WORDS = ["solar", "wind", "grid", "storage", "policy", "tariff", "budget", "battery"]
Q = "solar wind"


class Dial:
    """Sentence ``s<N> …`` → a unit vector at cosine N/100 to any text without a tag (the query)."""

    dim = 4
    name = model_id = "dial-4"

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            m = re.search(r"\bs(\d+)\b", t, re.IGNORECASE)
            c = int(m.group(1)) / 100 if m else 1.0
            out[i, 0], out[i, 1] = c, np.sqrt(max(0.0, 1 - c * c))
        return out


def _texts() -> list[str]:
    rng = random.Random(33)
    out = []
    for _ in range(300):
        sentences = [f"S{rng.randrange(0, 100)} " + " ".join(rng.choices(WORDS, k=rng.choice([1, 2, 3, 4]))) + "."
                     for _ in range(rng.choice([1, 1, 2]))]
        out.append(" ".join(sentences))
    return out


def _engine(kind: str) -> Engine:
    store: Any = "memory"
    if kind == "faiss":
        pytest.importorskip("faiss")
        from nlql.stores.faiss import FaissStore

        store = FaissStore(index="flat")
    e = Engine(embedder=Dial(), store=store, warm_up=False)
    if kind == "int8":
        from nlql.stores.memory import quant

        if not quant.available():
            pytest.skip("the int8 copy needs Faiss or Numba")
        e.store.QUANTISE = True
        e.store.QUANT_MIN_ROWS = 64
        e.store.INT8_BACKGROUND = False
    texts = _texts()
    e.add_texts(texts, ids=[f"d{i:03d}" for i in range(len(texts))])
    if kind == "rows":
        e.store.capabilities = replace(e.store.capabilities, FAST_PATH=False)
    return e


@pytest.fixture(scope="module")
def raw() -> list[tuple[str, float, float]]:
    """(id, raw similarity, raw BM25) of every sentence in insertion order, row by row."""
    e = _engine("rows")
    hits = e.search("SELECT SENTENCE LET s = SIMILARITY(content, $q), b = BM25(content, $q) "
                    "ORDER BY doc_id ASC, position ASC", params={"q": Q})
    return [(h.id, float(h.scores["s"]), float(h.scores["b"])) for h in hits]


def _reference(raw: list[tuple[str, float, float]], *, smin: float | None, bmin: float | None,
               where: tuple[str, str, float] | None, k: float, window: int, weights: tuple[float, float] | None,
               limit: int, offset: int) -> list[tuple[str, float]]:
    def value(x: float, lo: float | None) -> float | None:
        return None if lo is not None and x < lo else x

    rows = []
    for i, (hid, s, b) in enumerate(raw):
        sem, kw = value(s, smin), value(b, bmin)
        if where is not None:
            name, op, v = where
            x = sem if name == "sem" else kw
            if x is None or not (x >= v if op == ">=" else x > v):
                continue
        rows.append((i, hid, sem, kw))
    fused: dict[str, float] = {}
    w = weights or (1.0, 1.0)
    for arm, weight in ((2, w[0]), (3, w[1])):
        ranked = sorted((-r[arm], r[0], r[1]) for r in rows
                        if r[arm] is not None and not (arm == 3 and r[arm] <= 0))  # no term: no BM25 rank
        for rank, (_, _, hid) in enumerate(ranked[:window], start=1):
            fused[hid] = fused.get(hid, 0.0) + weight / (k + rank)
    page = sorted((-fused[hid], i, hid) for i, hid, _, _ in rows if hid in fused)  # in no arm: no result
    return [(hid, -v) for v, _, hid in page[offset:offset + limit]]


def _query(*, smin: float | None, bmin: float | None, where: tuple[str, str, float] | None, k: float,
           window: int, weights: tuple[float, float] | None, limit: int, offset: int) -> str:
    sem = f"SIMILARITY(content, $q{'' if smin is None else f', min => {smin}'})"
    kw = f"BM25(content, $q{'' if bmin is None else f', min => {bmin}'})"
    w = "" if weights is None else f", weights => [{weights[0]}, {weights[1]}]"
    cond = "" if where is None else f" WHERE {where[0]} {where[1]} {where[2]}"
    return (f"SELECT SENTENCE LET sem = {sem}, kw = {kw}, score = RRF(sem, kw, k => {k}, window => {window}{w})"
            f"{cond} ORDER BY score DESC LIMIT {limit}" + (f" OFFSET {offset}" if offset else ""))


ISSUE = dict(smin=0.69, bmin=1.0, where=("sem", ">=", 0.32), k=2.5, window=30, weights=None, limit=10, offset=0)


def _cases() -> list[dict[str, Any]]:
    rng = random.Random(2)
    out = [ISSUE]
    for _ in range(40):
        out.append(dict(
            smin=rng.choice([None, 0.5, 0.69, 0.9]), bmin=rng.choice([None, 0.8, 1.2]),
            where=rng.choice([None, ("sem", ">=", 0.32), ("sem", ">", 0.75), ("sem", ">=", 0.6), ("kw", ">", 0.5),
                              ("kw", ">=", 1.1)]),
            k=rng.choice([2.5, 60, 1, 0.5, 10, 7.25]), window=rng.choice([3, 5, 12, 30, 100]),
            weights=rng.choice([None, (2.0, 0.5), (0.3, 1.7)]), limit=rng.choice([5, 10, 25]),
            offset=rng.choice([0, 0, 4])))
    return out


CASES = _cases()


@pytest.mark.parametrize("kind", ["memory", "int8", "rows", "faiss"])
def test_rrf_matches_the_reference(kind: str, raw: list[tuple[str, float, float]]) -> None:
    e = _engine(kind)
    wrong = []
    for case in CASES:
        text = _query(**case)
        want = _reference(raw, **case)
        got = [(h.id, h.scores["score"]) for h in e.search(text, params={"q": Q})]
        if [g[0] for g in got] != [w[0] for w in want] or any(g[1] != pytest.approx(w[1], rel=1e-12, abs=0)
                                                               for g, w in zip(got, want)):
            wrong.append(f"{text}\n  got  {got[:4]}… ({len(got)} rows)\n  want {want[:4]}… ({len(want)} rows)")
    assert not wrong, f"{len(wrong)} of {len(CASES)} queries differ:\n" + "\n".join(wrong[:5])


def test_the_issue_query_gives_every_qualifying_row(raw: list[tuple[str, float, float]]) -> None:
    want = _reference(raw, **ISSUE)
    assert len(want) == 10  # the corpus has ten qualifying rows (and more)
    hits = _engine("memory").search(_query(**ISSUE), params={"q": Q})
    assert [h.id for h in hits] == [w[0] for w in want]
    assert [h.scores["score"] for h in hits] == pytest.approx([w[1] for w in want], rel=1e-12)
