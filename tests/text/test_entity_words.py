"""Entity names are matched as whole Unicode words (issue 30, SPEC §9 and §11 "Text in any language").

Python's ``re`` leaves combining marks out of ``\\w``, so keys cut with it broke every word of a script
that writes its vowels as marks into fragments: ``राम`` (Ram) and ``रोम`` (Rome) were both ``र म``, and GRAPH
on one activated the other. Keys are now Unicode words in NFC on every store; a SQL store whose keys were
written before keeps reading and writing them the old way, so its links still match.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.text.entities import RuleEntityExtractor, entity_key, token_spans

NOTES = [
    ("ram", "यह कहानी एक राजा के बारे में है।", {"entities": ["राम"]}),
    ("rome", "यह शहर बहुत पुराना है।", {"entities": ["रोम"]}),
    ("thai", "เรื่องนี้เกี่ยวกับครูคนหนึ่ง", {"entities": ["สมชาย"]}),
    ("marti", "Jose\u0301 Marti\u0301 wrote the poems in New York.", {}),  # decomposed accents
]
GRAPH_DOCS = "SELECT DOCUMENT LET g = GRAPH($q) WHERE g IS NOT NULL ORDER BY g DESC"


def _engine(store: Any = None) -> Engine:
    kw = {} if store is None else {"store": store}
    return Engine(embedder=HashEmbedder(dim=32), warm_up=False, **kw)


def _load(e: Engine) -> Engine:
    for doc_id, text, meta in NOTES:
        e.add_text(text, id=doc_id, metadata=meta)
    return e


def _graph_docs(e: Engine, text: str) -> list[str]:
    return [h.doc_id for h in e.search(GRAPH_DOCS, {"q": text})]


def test_words_keep_their_marks_and_compose() -> None:
    assert [w for w, _, _ in token_spans("राम और रोम")] == ["राम", "और", "रोम"]
    # the old reading, kept for stores written with it: both names are the same two fragments
    assert [w for w, _, _ in token_spans("राम रोम", "python")] == ["र", "म", "र", "म"]
    assert entity_key("Jose\u0301 MARTÍ") == entity_key("josé martí") == "josé martí"
    # spans stay those of the text as given (decomposed: one character more)
    assert token_spans("Jose\u0301 x") == [("josé", 0, 5), ("x", 6, 7)]
    # a letter of Thai is one word with its marks, as a CJK character is: a name is found inside unspaced text
    assert " ".join(w for w, _, _ in token_spans("ถามสมชายครับ")).find(entity_key("สมชาย")) > 0
    with pytest.raises(ValueError):
        token_spans("राम", "perl")


def test_the_extractor_reads_decomposed_accents_as_the_letter() -> None:
    assert RuleEntityExtractor()("Yesterday Jose\u0301 Marti\u0301 met E\u0301mile in Łódź.") == [
        "José Martí", "Émile", "Łódź"]


def _check_store(e: Engine) -> None:
    assert _graph_docs(e, "राम कौन था?") == ["ram"]  # not Rome: before, both were "र म"
    assert _graph_docs(e, "रोम") == ["rome"]
    assert _graph_docs(e, "ใครคือสมชายครับ") == ["thai"]
    assert _graph_docs(e, "Who was José Martí?") == ["marti"]  # the question precomposed, the text not
    found = str(e.explain(GRAPH_DOCS, {"q": "राम कौन था?"}))
    assert "राम" in found and "रोम" not in found


def test_graph_on_the_built_in_store() -> None:
    _check_store(_load(_engine()))


def test_graph_in_duckdb_matches_the_built_in_store(tmp_path: Path) -> None:
    pytest.importorskip("duckdb")
    e = _load(_engine(f"duckdb:///{tmp_path / 'g.duckdb'}"))
    assert e.store.dialect.entity_words == "unicode"
    _check_store(e)
    hybrid = ("SELECT DOCUMENT LET g = GRAPH($q), k = BM25(content, $q), f = RRF(g, k) "
              "WHERE g IS NOT NULL ORDER BY f DESC")
    assert [h.doc_id for h in e.search(hybrid, {"q": "राम"})] == ["ram"]
    e.close()
    again = _engine(f"duckdb:///{tmp_path / 'g.duckdb'}")  # the record reopens with the tables
    assert again.store.dialect.entity_words == "unicode"
    _check_store(again)


def test_graph_in_postgres_matches_the_built_in_store(pg_dsn: str) -> None:
    e = _load(_engine(pg_dsn))
    assert e.store.dialect.entity_words == "unicode"
    _check_store(e)


def test_a_duckdb_file_written_with_the_old_keys_keeps_matching_them(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "old.duckdb"
    _engine(f"duckdb:///{path}").close()
    conn = duckdb.connect(str(path))  # what a file written before the record looks like: no entity_words
    conn.execute("DELETE FROM nlql_meta WHERE key = 'entity_words'")
    conn.close()
    old = _load(_engine(f"duckdb:///{path}"))
    assert old.store.dialect.entity_words == "python"
    links = {k for (k,) in old.store._conn.execute("SELECT DISTINCT entity FROM nlql_entity_links").fetchall()}
    assert "र म" in links and "राम" not in links  # written the old way, as the rest of the file
    # its names are still found (and Ram and Rome are still one key there, as they always were in it)
    assert set(_graph_docs(old, "राम")) == {"ram", "rome"}
    assert _graph_docs(old, "Who was José Martí?") == ["marti"]
    old.close()
    reader = _engine(__import__("nlql.stores.duckdb", fromlist=["DuckDBStore"]).DuckDBStore(path, read_only=True))
    assert reader.store.dialect.entity_words == "python"
    assert set(_graph_docs(reader, "रोम")) == {"ram", "rome"}


@pytest.mark.parametrize("name", ["qdrant", "chroma", "faiss", "hnswlib"])
def test_graph_on_stores_that_keep_names_matches_the_built_in_store(name: str) -> None:
    """Stores that keep names (the engine builds the keys when it loads them) take the rule at once."""
    from nlql.stores import entry

    row = entry(name)
    options = dict(row.exact)
    if "collection" in __import__("inspect").signature(row.load()).parameters:
        options["collection"] = "entity_words"
    e = _load(_engine(row.create(**options)))
    try:
        _check_store(e)
    finally:
        e.close()


def test_graph_on_milvus_lite_matches_the_built_in_store(tmp_path: Path) -> None:
    pytest.importorskip("milvus_lite")
    e = _load(_engine(f"milvus:///{tmp_path / 'm.db'}"))
    try:
        _check_store(e)
    finally:
        e.close()


def test_odd_bytes_beside_cjk_text_are_no_crash() -> None:
    """A lone surrogate (bytes read with surrogateescape) beside Chinese text cannot cross into jieba's
    UTF-8: the extractor reads the rest, and the document is stored (it raised UnicodeEncodeError)."""
    pytest.importorskip("rjieba")
    text = "上周张伟在東京 \udcff タワー提到了罗素。"
    assert {"张伟", "罗素", "タワー"} <= set(RuleEntityExtractor()(text))
    e = _engine()
    e.add_text(text, id="odd")
    assert _graph_docs(e, "张伟") == ["odd"]
