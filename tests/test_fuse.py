"""FUSE (SPEC §11): Σ wᵢ·normᵢ(armᵢ) over each arm's window, minmax or dbsf, against a Python reference.

The reference reads each arm's per-row values from plain queries (no fusion), then ranks, windows,
normalises and sums in Python; the engine's FUSE query must give the same rows, order and values.
"""

from __future__ import annotations

import random
import statistics

import pytest

from nlql import Engine, NLQLError
from nlql.embedders import HashEmbedder

WORDS = "agents tools memory graphs vectors search ranking fusion cursor pages data query".split()


def _engine(store: str = "memory") -> Engine:
    rng = random.Random(21)
    e = Engine(embedder=HashEmbedder(dim=64), store=store)
    for i in range(40):
        text = " ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))).capitalize() + "."
                        for _ in range(rng.randint(1, 3)))
        e.add_text(text, id=f"d{i:02d}", metadata={"n": rng.choice([1, 2, 3, None]), "tag": rng.choice("ab")})
    return e


def _norm(values: list[float], method: str) -> list[float]:
    if method == "minmax":
        lo, hi = min(values), max(values)
        return [1.0 if hi == lo else (v - lo) / (hi - lo) for v in values]
    mu, sigma = statistics.fmean(values), statistics.pstdev(values)
    if sigma == 0:
        return [1.0] * len(values)
    return [min(1.0, max(0.0, (v - (mu - 3 * sigma)) / (6 * sigma))) for v in values]


def _reference(e: Engine, text: str, method: str, weights: list[float], window: int, where: str = "",
               limit: int = 10) -> list[tuple[str, float]]:
    rows = e.search(f'SELECT SENTENCE LET s = SIMILARITY(content, "{text}"), k = BM25(content, "{text}") {where}')
    # insertion order: the unit ids sort as doc ids (zero-padded) then positions
    order = sorted(rows, key=lambda h: (h.doc_id, h.position))
    fused: dict[str, float] = {}
    arms = [[(h.scores["s"], i) for i, h in enumerate(order) if h.scores["s"] is not None],
            [(h.scores["k"], i) for i, h in enumerate(order) if h.scores["k"] is not None and h.scores["k"] > 0],
            [(float(h.metadata["n"]), i) for i, h in enumerate(order) if h.metadata.get("n") is not None]]
    for w, arm in zip(weights, arms, strict=True):
        top = sorted(arm, key=lambda t: (-t[0], t[1]))[:window]
        for (_, i), v in zip(top, _norm([v for v, _ in top], method), strict=True):
            fused[order[i].id] = fused.get(order[i].id, 0.0) + w * v
    pos = {h.id: i for i, h in enumerate(order)}
    ranked = sorted(fused, key=lambda u: (-fused[u], pos[u]))
    return [(u, fused[u]) for u in ranked[:limit]]


CASES = [
    ("minmax", [1.0, 1.0, 1.0], 100, ""),
    ("dbsf", [1.0, 1.0, 1.0], 100, ""),
    ("minmax", [0.7, 0.3, 0.1], 8, ""),
    ("dbsf", [2.0, 0.5, 1.0], 5, 'WHERE meta.tag == "a"'),
]


@pytest.mark.parametrize(("method", "weights", "window", "where"), CASES)
@pytest.mark.parametrize("fast", [True, False])
def test_fuse_matches_the_reference(method: str, weights: list[float], window: int, where: str, fast: bool) -> None:
    e = _engine()
    if not fast:
        import dataclasses

        e.store.capabilities = dataclasses.replace(e.store.capabilities, FAST_PATH=False)
    text = "agents memory search"
    w = ", ".join(f"{x:g}" for x in weights)
    q = (f'SELECT SENTENCE LET s = SIMILARITY(content, "{text}"), k = BM25(content, "{text}"), '
         f'f = FUSE(s, k, meta.n, method => "{method}", weights => [{w}], window => {window}) {where} '
         'ORDER BY f DESC LIMIT 10')
    got = [(h.id, h.scores["f"]) for h in e.search(q)]
    want = _reference(e, text, method, weights, window, where)
    assert [u for u, _ in got] == [u for u, _ in want]
    assert all(abs(a - b) < 1e-9 for (_, a), (_, b) in zip(got, want, strict=True))


def test_fuse_default_is_minmax_with_weights_one() -> None:
    e = _engine()
    base = 'SELECT SENTENCE LET s = SIMILARITY(content, "tools"), k = BM25(content, "tools"), f = {f} ORDER BY f DESC LIMIT 8'
    a = [(h.id, h.scores["f"]) for h in e.search(base.format(f="FUSE(s, k)"))]
    b = [(h.id, h.scores["f"]) for h in e.search(base.format(f='FUSE(s, k, method => "minmax", weights => [1, 1])'))]
    assert a == b and a


def test_explain_prints_the_formula() -> None:
    e = _engine()
    text = str(e.explain('SELECT SENTENCE LET s = SIMILARITY(content, "x"), k = BM25(content, "x"), '
                         'f = FUSE(s, k, method => "dbsf", weights => [0.7, 0.3]) ORDER BY f DESC LIMIT 5'))
    assert "0.7·norm(s) + 0.3·norm(k)" in text and "μ − 3σ" in text and "100" in text


def test_unknown_method_is_an_error() -> None:
    e = _engine()
    with pytest.raises(NLQLError) as info:
        e.search('SELECT SENTENCE LET s = SIMILARITY(content, "x"), f = FUSE(s, s, method => "minmaxx") LIMIT 3')
    assert info.value.line == 1 and "minmax" in (info.value.hint or "") + info.value.message


@pytest.mark.parametrize("store", ["duckdb"])
def test_fuse_on_a_sql_store_runs_in_the_engine(store: str) -> None:
    pytest.importorskip("duckdb")
    mem, other = _engine(), _engine(store)
    q = ('SELECT SENTENCE LET s = SIMILARITY(content, "agents tools"), k = BM25(content, "agents tools"), '
         'f = FUSE(s, k, method => "dbsf") ORDER BY f DESC LIMIT 6')
    assert [(h.id, round(h.scores["f"], 9)) for h in other.search(q)] == \
           [(h.id, round(h.scores["f"], 9)) for h in mem.search(q)]
    assert "normalised fusion" in str(other.explain(q))


SENTENCE_CASES = [
    'f = FUSE(s, k) ORDER BY f DESC LIMIT 10',
    'f = FUSE(s, k, method => "dbsf", window => 6) ORDER BY f DESC LIMIT 5 OFFSET 2',
    'f = FUSE(k, s, weights => [2.0, 0.5], window => 4) WHERE meta.tag == "b" ORDER BY f DESC LIMIT 8',
    'f = FUSE(s, k, weights => [1.0, -1.0]) ORDER BY f DESC LIMIT 7',
    'f = FUSE(s, k, window => 3) ORDER BY f DESC LIMIT 200',  # every row some arm ranks, 0.0 values too
]


@pytest.mark.parametrize("tail", SENTENCE_CASES)
def test_fuse_on_the_built_in_stores_numpy_page_equals_row_by_row(tail: str) -> None:
    """The built-in store fuses FUSE's page with numpy over the arms' windows (no row built outside it):
    the same rows, order and bits as the engine's fusion over every candidate."""
    import dataclasses

    fast, slow = _engine(), _engine()
    slow.store.capabilities = dataclasses.replace(slow.store.capabilities, FAST_PATH=False)
    q = f'SELECT SENTENCE LET s = SIMILARITY(content, "agents memory"), k = BM25(content, "agents memory"), {tail}'
    got, want = fast.search(q), slow.search(q)
    assert got.stats.get("fast_path") == "fusion" and got.stats.get("fused_page") is not None, got.stats
    assert [(h.id, h.scores) for h in got] == [(h.id, h.scores) for h in want]


@pytest.mark.parametrize("fusion", ["RRF", "FUSE"])
def test_a_null_weight_is_a_clear_error(fusion: str) -> None:
    e = _engine()
    q = f'SELECT SENTENCE LET r = {fusion}(SIMILARITY(content, "agents"), BM25(content, "agents"), weights => {{}})'
    for weights, params in (("[null, 1]", None), ("[$w, 1]", {"w": None}), ("$ws", {"ws": [1, None]})):
        with pytest.raises(NLQLError, match=f"{fusion} weights must be a list of numbers"):
            e.search(q.format(weights), params=params)
