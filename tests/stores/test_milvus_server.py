"""The contract suite's queries on a real Milvus server process (``milvus-server``, Milvus 2.3.5), started
by the tests: the same rows, scores and best sentences as the built-in store.

That server has no sparse vectors, so ``MilvusStore`` reads its version at open, creates no sparse field
and ranks BM25 from the stored term statistics; the in-process Milvus Lite file (2.5, sparse vectors) is
what ``tests/contract/test_contract.py -k milvus`` runs on.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip("pymilvus")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "contract"))
from test_contract import QUERIES, _load, _rows  # noqa: E402

from nlql import Engine  # noqa: E402


@pytest.fixture(scope="module")
def server_engine(milvus_server):  # type: ignore[no-untyped-def]
    from nlql.stores import entry

    store = entry("milvus").create(milvus_server.url, collection="c" + uuid.uuid4().hex[:8], index="flat")
    e = _load(store)
    assert store.server_version[:2] == (2, 3)
    assert not e.store._sparse  # no sparse vectors on this server: BM25 from the stored terms
    yield e
    e.close()


@pytest.fixture(scope="module")
def reference() -> Engine:
    return _load("memory")


@pytest.mark.parametrize("query", QUERIES)
def test_server_same_rows_as_builtin(server_engine: Engine, reference: Engine, query: str) -> None:
    want = reference.search(query)
    got = server_engine.search(query)
    assert _rows(got) == _rows(want), server_engine.explain(query)
    for g, w in zip(got, want):
        for k in w.scores:
            if isinstance(w.scores[k], float):
                assert g.scores[k] == pytest.approx(w.scores[k], abs=1e-5)
        assert (g.best is None) == (w.best is None)
        if w.best is not None:
            assert (g.best.position, g.best.content) == (w.best.position, w.best.content)


def test_bm25_limit_0_is_empty(server_engine: Engine) -> None:
    assert list(server_engine.search(
        'SELECT SENTENCE LET k = BM25(content, "agents memory") ORDER BY k DESC LIMIT 0')) == []
