"""GRAPH-ordered pages read only the activated rows they need (nlql/execute/graph_recall.py), and give
the rows the full scan gives; a write by another engine on the same store reaches the next GRAPH query.

``ORDER BY g + 0 DESC`` means the same order as ``ORDER BY g DESC`` but is not a bare GRAPH arm, so it
runs the full scan: the reference for every page here.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder

PEOPLE = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Kurt Goedel", "Emmy Noether", "John Neumann"]


def _corpus(n: int) -> list[tuple[str, str, dict]]:
    rng = random.Random(11)
    docs = []
    for i in range(n):
        names = rng.sample(PEOPLE, rng.choice([0, 1, 1, 2]))
        first = f"{' and '.join(names)} met the team." if names else "The team met."
        second = rng.choice(["Nothing else happened.", f"{rng.choice(PEOPLE)} wrote a note.", "Lunch was late."])
        docs.append((f"d{i}", f"{first} {second}", {"zoo": rng.choice(["north", "south"]), "n": i % 7}))
    return docs


@pytest.fixture(scope="module")
def engine() -> Engine:
    e = Engine(embedder=HashEmbedder(dim=32), warm_up=False)
    for doc_id, text, meta in _corpus(300):
        e.add_text(text, id=doc_id, metadata=meta)
    return e


def _page(engine: Engine, where: str, order: str, limit: int, offset: int = 0) -> tuple[list, dict]:
    q = (f"SELECT SENTENCE LET g = GRAPH($q, hops => 1) {where} ORDER BY {order} "
         f"LIMIT {limit} OFFSET {offset}")
    hits = engine.search(q, {"q": "what did Alan Turing say?"})
    return [(h.id, h.scores["g"]) for h in hits], hits.stats.get("counts", hits.stats)


@pytest.mark.parametrize("where", ["", "WHERE g IS NOT NULL", "WHERE meta.zoo == 'north'",
                                   "WHERE content LIKE '%team%'", "WHERE meta.n >= 3 AND g < 1"])
@pytest.mark.parametrize("limit,offset", [(1, 0), (10, 0), (10, 25), (200, 0), (2000, 0)])
def test_graph_pages_equal_the_full_scan(engine: Engine, where: str, limit: int, offset: int) -> None:
    got, stats = _page(engine, where, "g DESC", limit, offset)
    want, full_stats = _page(engine, where, "g + 0 DESC", limit, offset)
    assert got == want
    assert "graph_recall" not in full_stats


def test_the_graph_path_runs_and_reads_few_rows(engine: Engine) -> None:
    got, stats = _page(engine, "WHERE meta.zoo == 'north'", "g DESC", 5)
    assert len(got) == 5 and stats["graph_recall"] >= 5
    assert stats["candidates"] < engine.store.count() / 2  # not every stored row


def test_later_order_keys_break_graph_ties(engine: Engine) -> None:
    got, _ = _page(engine, "", "g DESC, doc_id DESC", 12)
    want, _ = _page(engine, "", "g + 0 DESC, doc_id DESC", 12)
    assert got == want and got[0][1] == got[1][1] == 1.0


def test_fewer_activated_rows_than_the_page_falls_back_to_null_rows(engine: Engine) -> None:
    got, stats = _page(engine, "", "g DESC", 100000)
    assert len(got) == engine.store.count() and got[-1][1] is None  # NULLs last, every row there
    assert "graph_recall" not in stats


def _two_stores(kind: str, tmp_path: Path) -> tuple[object, object]:
    if kind == "directory":  # the directory store replays the other writer's log itself
        return str(tmp_path / "store"), str(tmp_path / "store")
    pytest.importorskip("qdrant_client")
    from qdrant_client import QdrantClient

    from nlql.stores.qdrant import QdrantStore

    client = QdrantClient(location=":memory:")  # a server store: nothing tells this engine of b's writes
    return QdrantStore(client, collection="g"), QdrantStore(client, collection="g")


@pytest.mark.parametrize("kind", ["directory", "qdrant"])
def test_a_write_by_another_engine_reaches_the_next_graph_query(kind: str, tmp_path: Path) -> None:
    sa, sb = _two_stores(kind, tmp_path)
    a = Engine(embedder=HashEmbedder(dim=32), store=sa, warm_up=False)
    a.add_text("Alan Turing met the team.", id="x1")
    q = "SELECT SENTENCE LET g = GRAPH($q, hops => 0) WHERE g IS NOT NULL ORDER BY g DESC LIMIT 10"
    assert [h.id for h in a.search(q, {"q": "Alan Turing"})] == ["x1#0"]  # a's graph is built now
    b = Engine(embedder=HashEmbedder(dim=32), store=sb, warm_up=False)
    b.add_text("Alan Turing wrote to Grace Hopper.", id="x2")
    assert [h.id for h in a.search(q, {"q": "Grace Hopper"})] == ["x2#0"]
    b.delete("x1")
    assert [h.id for h in a.search(q, {"q": "Alan Turing"})] == ["x2#0"]
    b.close()
    a.close()
