"""Two engines, one server store (SPEC §10): a write from either is seen by the other at once, with
identical rows and BM25 scores, because every per-document fact (rows, vectors, BM25 terms and totals)
lives in the store and the engines hold nothing that grows with the corpus.

- Milvus: Milvus Lite allows one process per file, so the test runs on the session's real Milvus server
  (``milvus-server``, Milvus 2.3.5 standalone) and a second engine runs in a child process; both use ``milvus+http://``,
  the code path of a Milvus server or cluster.
- Qdrant: Qdrant Edge (the Rust shard) is one process's, and no Qdrant server can be installed here,
  so the two engines share one Edge directory (one ``EdgeClient``) in one process; each has its own
  store object (its own writer record), which is what a second process on a Qdrant server would have.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.stores._terms import StoreKeywordIndex

BM25_Q = 'SELECT SENTENCE LET kw = BM25(content, "zebra stripes") WHERE kw > 0 ORDER BY kw DESC'
QUERIES = [
    BM25_Q,
    'SELECT SENTENCE LET s = SIMILARITY(content, "zebra"), k = BM25(content, "stripes"), f = RRF(s, k) '
    'WHERE meta.zoo == "north" ORDER BY f DESC LIMIT 5',
    "SELECT DOCUMENT",
]
# the entity graph (SPEC §9): on PostgreSQL computed from its tables, elsewhere rebuilt when the store moved
GRAPH_Q = 'SELECT SENTENCE LET g = GRAPH("zebra stripes and lions", hops => 2) WHERE g IS NOT NULL ORDER BY g DESC'
QUERIES.append(GRAPH_Q)

CHILD = textwrap.dedent("""
    import json, sys
    from nlql import Engine
    from nlql.embedders import HashEmbedder
    e = Engine(embedder=HashEmbedder(dim=32), store=sys.argv[1], warm_up=False)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "search":
            out = [[h.id, h.content, h.scores] for h in e.search(cmd["q"])]
        elif cmd["op"] == "add":
            out = e.add_texts(cmd["texts"], ids=cmd["ids"], metadatas=cmd["metas"])
        else:
            out = e.delete(cmd["id"])
        print(json.dumps(out), flush=True)
""")


def _rows(hits: Any) -> list[list[Any]]:
    return [[h.id, h.content, h.scores] for h in hits]


class Child:
    """An engine in another process, driven over stdin/stdout."""

    def __init__(self, url: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, url], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def call(self, **cmd: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def search(self, q: str) -> list[list[Any]]:
        return self.call(op="search", q=q)

    def add_texts(self, texts: list[str], ids: list[str], metadatas: list[dict]) -> Any:
        return self.call(op="add", texts=texts, ids=ids, metas=metadatas)

    def delete(self, doc_id: str) -> Any:
        return self.call(op="delete", id=doc_id)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


class Local:
    """An engine in this process with the same calls as :class:`Child`."""

    def __init__(self, store: Any) -> None:
        self.engine = Engine(embedder=HashEmbedder(dim=32), store=store, warm_up=False)

    def search(self, q: str) -> list[list[Any]]:
        return json.loads(json.dumps(_rows(self.engine.search(q))))

    def add_texts(self, texts: list[str], ids: list[str], metadatas: list[dict]) -> Any:
        return self.engine.add_texts(texts, ids=ids, metadatas=metadatas)

    def delete(self, doc_id: str) -> Any:
        return self.engine.delete(doc_id)

    def close(self) -> None:
        self.engine.close()


def _same(a: Any, b: Any) -> None:
    for q in QUERIES:
        got, want = b.search(q), a.search(q)
        assert [r[:2] for r in got] == [r[:2] for r in want], q
        for g, w in zip(got, want):
            assert g[2] == pytest.approx(w[2], rel=1e-12, abs=1e-12), q


def _exercise(a: Any, b: Any) -> None:
    a.add_texts(["Zebra stripes are black. Lions sleep.", "A zebra has stripes."], ids=["z1", "z2"],
                metadatas=[{"zoo": "north"}, {"zoo": "south"}])
    first = b.search(BM25_Q)  # the shorter sentence (after stop words) ranks first under BM25
    assert [r[0] for r in first] == ["z2#0", "z1#0"]
    assert first[0][2]["kw"] > first[1][2]["kw"] > 0
    _same(a, b)
    a.add_texts(["Stripes, stripes and a zebra.", "Zebra crossings have stripes too."], ids=["z3", "z4"],
                metadatas=[{"zoo": "north"}, {"zoo": "north"}])
    second = b.search(BM25_Q)  # at once, with the new statistics: four rows, every score changed
    assert {r[0] for r in second} == {"z1#0", "z2#0", "z3#0", "z4#0"}
    old = {r[0]: r[2]["kw"] for r in first}
    assert all(r[2]["kw"] != old[r[0]] for r in second if r[0] in old)
    assert {"z3#0", "z4#0"} <= {r[0] for r in b.search(GRAPH_Q)}  # the other engine's entities, at once
    _same(a, b)
    b.add_texts(["No zebra here, only stripes."], ids=["z5"], metadatas=[{"zoo": "north"}])  # the other way
    _same(a, b)
    b.add_texts(["Replaced: nothing striped."], ids=["z1"], metadatas=[{"zoo": "north"}])
    a.delete("z3")
    _same(a, b)
    assert "z3#0" not in {r[0] for r in b.search(BM25_Q)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def milvus_url(milvus_server: Any) -> str:
    """A fresh collection on the session's real ``milvus-server`` process (tests/milvus_server.py)."""
    import uuid

    return f"{milvus_server.url}?collection=two{uuid.uuid4().hex[:8]}"


def test_two_processes_on_one_milvus(milvus_url: str) -> None:
    milvus_server = milvus_url
    a = Local(milvus_server)
    b = Child(milvus_server)
    try:
        _exercise(a, b)
        assert isinstance(a.engine._bm25, StoreKeywordIndex)  # nothing corpus-sized in the engine
    finally:
        b.close()
        a.close()


def test_two_processes_on_one_postgres(pg_dsn: str) -> None:
    pytest.importorskip("psycopg")
    a = Local(pg_dsn)
    b = Child(pg_dsn)
    try:
        _exercise(a, b)
        assert "z3#0" not in {r[0] for r in b.search(GRAPH_Q)}
        assert not a.engine._graph.built  # GRAPH ran in SQL: no graph in the engine
    finally:
        b.close()
        a.close()


def test_two_engines_on_one_qdrant(tmp_path: Path) -> None:
    pytest.importorskip("qdrant_client")
    pytest.importorskip("qdrant_edge")
    from nlql.stores.qdrant import EdgeClient, QdrantStore

    client = EdgeClient(tmp_path / "edge")
    a, b = Local(QdrantStore(client, collection="two")), Local(QdrantStore(client, collection="two"))
    _exercise(a, b)
    assert isinstance(a.engine._bm25, StoreKeywordIndex) and isinstance(b.engine._bm25, StoreKeywordIndex)
    a.close()
    b.close()
    client.close()
