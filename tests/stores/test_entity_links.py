"""Entity links kept with the data (SPEC §9: "Entities are kept by every store … and reopen with it").

The directory store writes each sentence's entity names into its SQLite file in the same transaction
as the document; a reopened store gives GRAPH the same rows whatever extractor (or none) the engine
that reopens it has, replaces and deletes take their links along, and a file written before links were
kept is adopted (links built once from the extractor, then read back).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.stores.doclog import FILE_NAME

QUERY = "SELECT SENTENCE LET g = GRAPH($q, hops => 2) WHERE g IS NOT NULL ORDER BY g DESC"

DOCS = [
    ("a", "zeta met omega at the lab. Then omega wrote to kappa."),
    ("b", "kappa and zeta argued. Nobody else came."),
    ("c", "sigma worked alone."),
]


def lower_greek(text: str) -> list[str]:
    """A custom extractor the default one would never match: lower-case Greek letter names."""
    return [w.strip(".,") for w in text.split() if w.strip(".,") in {"zeta", "omega", "kappa", "sigma"}]


def _engine(path: Path, kind: str = "memory", **kwargs) -> Engine:  # type: ignore[no-untyped-def]
    store: object = str(path)
    if kind == "faiss":  # an ANN store keeps its documents in the same SQLite log
        from nlql.stores.faiss import FaissStore

        store = FaissStore(path)
    return Engine(store=store, embedder=HashEmbedder(dim=32), warm_up=False, **kwargs)


def _graph(e: Engine, q: str) -> list[tuple[str, float]]:
    return [(h.id, h.scores["g"]) for h in e.search(QUERY, {"q": q})]


def _links(path: Path) -> list[tuple[str, int, str]]:
    db = sqlite3.connect(path / FILE_NAME)
    try:
        return sorted(db.execute("SELECT doc_id, position, name FROM entity_links"))
    finally:
        db.close()


@pytest.mark.parametrize("kind", ["memory", "faiss"])
def test_links_reopen_without_the_extractor(tmp_path: Path, kind: str) -> None:
    if kind == "faiss":
        pytest.importorskip("faiss")
    writer = _engine(tmp_path, kind, entity_extractor=lower_greek)
    for doc_id, text in DOCS:
        writer.add_text(text, id=doc_id, metadata={"entities": ["Lab"]} if doc_id == "c" else {})
    before = {q: _graph(writer, q) for q in ("zeta", "kappa", "lab", "sigma")}
    assert before["zeta"][0][1] == 1.0 and len(before["zeta"]) == 3
    assert [i for i, _ in before["lab"]] == ["c#0"]  # metadata["entities"] kept too
    writer.close()

    calls: list[str] = []

    def spy(text: str) -> list[str]:
        calls.append(text)
        return ["Nobody"]

    for kwargs in ({"entity_extractor": None}, {"entity_extractor": spy}, {}):
        reopened = _engine(tmp_path, kind, **kwargs)
        assert {q: _graph(reopened, q) for q in before} == before
        assert _graph(reopened, "nobody") == []  # the reopening engine's extractor is not run on stored rows
        reopened.close()
    assert calls == []


def test_replace_and_delete_take_their_links_along(tmp_path: Path) -> None:
    e = _engine(tmp_path, entity_extractor=lower_greek)
    for doc_id, text in DOCS:
        e.add_text(text, id=doc_id)
    assert _graph(e, "sigma") == [("c#0", 1.0)]
    e.add_text("sigma and omega met.", id="c")  # replaced: its old links go, the new ones come
    e.delete("b")
    live = {q: _graph(e, q) for q in ("zeta", "kappa", "sigma", "omega")}
    assert {d for d, _, _ in _links(tmp_path)} == {"a", "c"}
    assert ("c", 0, "omega") in _links(tmp_path)
    e.close()
    reopened = _engine(tmp_path, entity_extractor=None)
    assert {q: _graph(reopened, q) for q in live} == live
    # the same answers as a graph built from scratch over the documents still present
    fresh = Engine(embedder=HashEmbedder(dim=32), warm_up=False, entity_extractor=lower_greek)
    fresh.add_text(DOCS[0][1], id="a")
    fresh.add_text("sigma and omega met.", id="c")
    assert {q: _graph(fresh, q) for q in live} == live
    reopened.close()


def test_a_write_that_fails_leaves_no_links(tmp_path: Path) -> None:
    e = _engine(tmp_path, entity_extractor=lower_greek)
    e.add_text(DOCS[0][1], id="a")
    log = e.store._log  # type: ignore[attr-defined]
    real = log._db
    # the links' INSERT fails after the document's: the transaction rolls back whole

    class Failing:
        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(real, name)

        def executemany(self, sql: str, rows):  # type: ignore[no-untyped-def]
            if sql.startswith("INSERT INTO entity_links"):
                raise sqlite3.OperationalError("disk I/O error")
            return real.executemany(sql, rows)

    log._db = Failing()
    with pytest.raises(Exception, match="disk I/O"):
        e.add_text("kappa met sigma.", id="b")
    log._db = real
    assert {d for d, _, _ in _links(tmp_path)} == {"a"}
    db = sqlite3.connect(tmp_path / FILE_NAME)
    assert [r[0] for r in db.execute("SELECT doc_id FROM docs")] == ["a"]
    db.close()
    e.close()


def test_a_store_written_before_links_were_kept_is_adopted(tmp_path: Path) -> None:
    e = _engine(tmp_path, entity_extractor=lower_greek)
    for doc_id, text in DOCS:
        e.add_text(text, id=doc_id)
    expected = {q: _graph(e, q) for q in ("zeta", "kappa")}
    e.close()
    db = sqlite3.connect(tmp_path / FILE_NAME)  # as an older version wrote it: no links table, no flag
    db.execute("DROP TABLE entity_links")
    db.execute("DELETE FROM info WHERE key = 'entity_links'")
    db.commit()
    db.close()

    calls: list[str] = []

    def counting(text: str) -> list[str]:
        calls.append(text)
        return lower_greek(text)

    adopting = _engine(tmp_path, entity_extractor=counting)
    assert {q: _graph(adopting, q) for q in expected} == expected
    assert len(calls) == 5  # every stored sentence, once
    adopting.close()
    assert len(_links(tmp_path)) == 7
    after = _engine(tmp_path, entity_extractor=None)  # from now on read back, not extracted
    assert {q: _graph(after, q) for q in expected} == expected
    after.close()


def test_a_second_engine_on_the_directory_sees_links_written_by_the_first(tmp_path: Path) -> None:
    a = _engine(tmp_path, entity_extractor=lower_greek)
    a.add_text(DOCS[0][1], id="a")
    b = _engine(tmp_path, entity_extractor=None)
    assert [i for i, _ in _graph(b, "kappa")] == ["a#1", "a#0"]
    a.add_text(DOCS[1][1], id="b")
    assert _graph(b, "kappa") == _graph(a, "kappa")
    a.delete("a")
    assert _graph(b, "omega") == [] and _graph(b, "kappa") == _graph(a, "kappa")
    a.close()
    b.close()


def _shared(kind: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A factory of store objects on one collection (a second engine there is what another process sees)."""
    if kind == "qdrant":
        pytest.importorskip("qdrant_client")
        from qdrant_client import QdrantClient

        from nlql.stores.qdrant import QdrantStore

        client = QdrantClient(location=":memory:")
        return lambda: QdrantStore(client, collection="ents")
    pytest.importorskip("chromadb")
    from nlql.stores.chroma import ChromaStore

    first = ChromaStore(path=str(tmp_path / "chroma"), collection="ents")
    return lambda: ChromaStore(first.client, collection="ents")


@pytest.mark.parametrize("kind", ["qdrant", "chroma"])
def test_server_stores_keep_names_in_their_payload(tmp_path: Path, kind: str) -> None:
    make = _shared(kind, tmp_path)

    def engine(**kwargs) -> Engine:  # type: ignore[no-untyped-def]
        return Engine(store=make(), embedder=HashEmbedder(dim=32), warm_up=False, **kwargs)

    writer = engine(entity_extractor=lower_greek)
    for doc_id, text in DOCS:
        writer.add_text(text, id=doc_id, metadata={"entities": ["Lab"]} if doc_id == "c" else {})
    want = {q: _graph(writer, q) for q in ("zeta", "kappa", "lab", "sigma")}
    calls: list[str] = []

    def spy(text: str) -> list[str]:
        calls.append(text)
        return []

    other = engine(entity_extractor=spy)  # another engine on the same collection: names read, not extracted
    assert {q: _graph(other, q) for q in want} == want
    assert calls == []
    writer.add_text("sigma met zeta.", id="c")
    writer.delete("b")
    assert {q: _graph(other, q) for q in want} == {q: _graph(writer, q) for q in want}
    assert calls == []


def test_duckdb_keeps_names_in_a_table(tmp_path: Path) -> None:
    pytest.importorskip("duckdb")
    url = f"duckdb:///{tmp_path / 'g.duckdb'}"
    writer = Engine(store=url, embedder=HashEmbedder(dim=32), warm_up=False, entity_extractor=lower_greek)
    for doc_id, text in DOCS:
        writer.add_text(text, id=doc_id, metadata={"entities": ["Lab"]} if doc_id == "c" else {})
    writer.add_text("sigma and omega met.", id="c")
    writer.delete("b")
    want = {q: _graph(writer, q) for q in ("zeta", "kappa", "lab", "sigma", "omega")}
    assert want["lab"] == [] and want["sigma"][0] == ("c#0", 1.0) and len(want["sigma"]) == 3
    writer.close()
    reopened = Engine(store=url, embedder=HashEmbedder(dim=32), warm_up=False, entity_extractor=None)
    assert {q: _graph(reopened, q) for q in want} == want
    reopened.close()


def test_milvus_lite_keeps_names_in_its_records(tmp_path: Path) -> None:
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    url = f"milvus://{tmp_path / 'm.db'}"
    writer = Engine(store=url, embedder=HashEmbedder(dim=32), warm_up=False, entity_extractor=lower_greek)
    for doc_id, text in DOCS:
        writer.add_text(text, id=doc_id)
    writer.add_text("sigma and omega met.", id="c")
    writer.delete("b")
    want = {q: _graph(writer, q) for q in ("zeta", "kappa", "sigma")}
    writer.close()
    calls: list[str] = []

    def spy(text: str) -> list[str]:
        calls.append(text)
        return []

    reopened = Engine(store=url, embedder=HashEmbedder(dim=32), warm_up=False, entity_extractor=spy)
    assert {q: _graph(reopened, q) for q in want} == want and calls == []
    reopened.close()
