"""engine.schema() on every registered store, and the data-aware warnings it feeds (issue 18)."""

from __future__ import annotations

import inspect
import json
import uuid
from typing import Any

import pytest

import nlql
from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.errors import Diagnostic
from nlql.schema import MetaSummary, Schema, closest, sample_summary
from nlql.stores import REGISTRY, entry

DOCS = [
    ("a", "Cats sleep all day. Dogs bark at night.", {"year": 2020, "section": 8, "lang": "en",
                                                     "tags": ["x"], "author": {"name": "Ann"}}),
    ("b", "Tools help agents. Agents call tools. Tools return text.", {"year": 2021, "section": 3, "lang": "en"}),
    ("c", "A third document here.", {"year": 2021, "lang": "de", "draft": True}),
]


def _store(name: str, request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    if name == "memory":
        return "memory"
    if name == "directory":
        return str(tmp_path / "store")
    e = entry(name)
    pytest.importorskip(e.module if e.extra is None else {
        "qdrant": "qdrant_client", "chroma": "chromadb", "faiss": "faiss", "hnswlib": "hnswlib",
        "pgvector": "psycopg"}.get(e.extra, e.module))
    options = dict(e.exact)
    params = inspect.signature(e.load()).parameters
    if "collection" in params:
        options["collection"] = "c" + uuid.uuid4().hex[:8]
    if e.name == "pgvector":
        options["table_prefix"] = "t" + uuid.uuid4().hex[:8]
        return e.create(request.getfixturevalue("pg_module_dsn"), **options)
    if e.schemes and e.server:  # another server store: a fresh one from its own fixture (milvus_module_url)
        return e.create(request.getfixturevalue(f"{e.name}_module_url"), **options)
    return e.create(**options)


STORES = [*(e.name for e in REGISTRY), "directory"]


def _loaded(store: Any) -> Engine:
    e = Engine(embedder=HashEmbedder(dim=32), store=store, warm_up=False)
    e.add_texts([t for _, t, _ in DOCS], ids=[i for i, _, _ in DOCS], metadatas=[m for _, _, m in DOCS])
    return e


@pytest.fixture(params=STORES)
def engine(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    """A fresh loaded engine, for a test that writes."""
    e = _loaded(_store(request.param, request, tmp_path))
    yield e
    e.close()


@pytest.fixture(scope="module", params=STORES)
def read_engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The same, loaded once per store for the tests that only read (check, search, to_pandas)."""
    e = _loaded(_store(request.param, request, tmp_path_factory.mktemp("schema")))
    yield e
    e.close()


def _keys(s: Schema) -> dict[str, tuple[dict[str, int], int, list[tuple[Any, int]]]]:
    return {k.name: (k.types, k.documents, k.values) for k in s.keys}


def test_schema_counts_after_add_replace_delete(engine: Engine) -> None:
    s = engine.schema()
    assert (s.documents, s.sentences) == (3, 6)
    assert s.exact and s.embedder is not None and s.embedder["dim"] == 32
    keys = _keys(s)
    assert keys["year"] == ({"number": 3}, 3, [(2021, 2), (2020, 1)])
    assert keys["section"] == ({"number": 2}, 2, [(3, 1), (8, 1)])
    assert keys["lang"] == ({"string": 3}, 3, [("en", 2), ("de", 1)])
    assert keys["author"][0] == {"object": 1} and keys["author.name"] == ({"string": 1}, 1, [("Ann", 1)])
    assert keys["tags"][:2] == ({"list": 1}, 1) and keys["draft"] == ({"bool": 1}, 1, [(True, 1)])

    engine.add_text("Replaced text. Two sentences.", id="b", metadata={"year": "2022", "lang": "fr"})
    s = engine.schema()
    assert (s.documents, s.sentences) == (3, 5)
    keys = _keys(s)
    assert keys["section"] == ({"number": 1}, 1, [(8, 1)])
    assert keys["year"][:2] == ({"number": 2, "string": 1}, 3)
    assert keys["lang"][2] == [("de", 1), ("en", 1), ("fr", 1)]

    assert engine.delete("a")
    s = engine.schema()
    assert (s.documents, s.sentences) == (2, 3)
    assert set(_keys(s)) == {"year", "lang", "draft"}
    json.dumps(s.to_dict())  # JSON-ready for --json and agents
    assert "meta.lang" in s.to_text()


def _rows(hits: Any) -> list[tuple[str, str]]:
    return [(h.id, h.content) for h in hits]


def test_unknown_key_warns_with_did_you_mean_and_never_changes_rows(read_engine: Engine, monkeypatch: Any) -> None:
    engine = read_engine
    q = "SELECT SENTENCE WHERE meta.sectoin == 8 OR meta.section == 3 LIMIT 10"
    diags = engine.check(q)
    assert [(d.severity, d.code) for d in diags] == [("warning", "data")]
    assert "meta.sectoin" in diags[0].message and diags[0].hint == "did you mean meta.section?"
    assert (diags[0].line, diags[0].column) == (1, 23)
    hits = engine.search(q)
    assert any("did you mean meta.section?" in w for w in hits.warnings)
    assert _rows(hits) == _rows(engine.search("SELECT SENTENCE WHERE meta.section == 3 LIMIT 10"))
    assert len(hits) == 3
    # the same query with the data warnings switched off answers the same rows
    monkeypatch.setattr(engine, "_data_warnings", lambda q, **_: [])
    quiet = engine.search(q)
    assert quiet.warnings == [] and _rows(quiet) == _rows(hits)


def test_type_never_seen_warns(read_engine: Engine) -> None:
    engine = read_engine
    diags = engine.check('SELECT SENTENCE WHERE meta.year == "twenty"')
    assert [d.severity for d in diags] == ["warning"]
    assert "meta.year is never a string" in diags[0].message and "number" in (diags[0].hint or "")
    assert len(engine.search('SELECT SENTENCE WHERE meta.year == "twenty"')) == 0
    # numeric text compares with numbers (SPEC §6): no warning, and it matches
    assert engine.check('SELECT SENTENCE WHERE meta.year == "2021"') == []
    assert len(engine.search('SELECT SENTENCE WHERE meta.year == "2021"')) == 4
    assert [d.severity for d in engine.check("SELECT SENTENCE WHERE meta.lang == 5")] == ["warning"]
    assert [d.severity for d in engine.check("SELECT SENTENCE WHERE meta.draft IN (1, 2)")] == ["warning"]
    assert engine.check("SELECT SENTENCE WHERE meta.author.name == 'Ann' AND meta.draft == true") == []


def test_errors_come_without_data_warnings(read_engine: Engine) -> None:
    engine = read_engine
    diags = engine.check("SELECT SENTENCE WHERE meta.sectoin == 8 AND rr > 1")
    assert [d.severity for d in diags] == ["error"]


@pytest.mark.parametrize("name", ["memory"])
def test_check_with_a_schema_needs_no_store(name: str) -> None:
    e = Engine(embedder=HashEmbedder(dim=16), store=name, warm_up=False)
    e.add_texts([t for _, t, _ in DOCS], metadatas=[m for _, _, m in DOCS])
    schema = e.schema()
    e.close()
    diags = nlql.check("SELECT SENTENCE WHERE meta.yaer > 2020", schema=schema)
    assert [(d.severity, d.hint) for d in diags] == [("warning", "did you mean meta.year?")]
    assert nlql.check("SELECT SENTENCE WHERE meta.year > 2020", schema=schema) == []
    # the old mapping form still gives type errors, without any store
    typed = nlql.check('SELECT SENTENCE WHERE meta.year == "abc"', schema={"year": "number"})
    assert [d.severity for d in typed] == ["error"]


def test_diagnostic_severity_defaults_to_error() -> None:
    d = Diagnostic(1, 1, "m")
    assert d.severity == "error" and "severity" not in d.to_dict()  # the error shape is unchanged
    w = Diagnostic(1, 1, "m", severity="warning")
    assert w.to_dict()["severity"] == "warning"


def test_directory_store_rebuilds_the_summary_on_reopen(tmp_path: Any) -> None:
    path = str(tmp_path / "s")
    e = Engine(embedder=HashEmbedder(dim=16), store=path, warm_up=False)
    e.add_texts([t for _, t, _ in DOCS], ids=[i for i, _, _ in DOCS], metadatas=[m for _, _, m in DOCS])
    e.delete("c")
    before = e.schema()
    e.close()
    again = Engine(embedder=HashEmbedder(dim=16), store=path, warm_up=False)
    after = again.schema()
    assert (after.documents, after.sentences, after.keys) == (before.documents, before.sentences, before.keys)
    assert after.documents == 2
    again.close()


def test_sampled_store_says_its_sample(pg_module_dsn: str) -> None:
    pytest.importorskip("psycopg")
    from nlql.stores.pgvector import PgVectorStore

    store = PgVectorStore(pg_module_dsn, table_prefix="s" + uuid.uuid4().hex[:8], exact=True)
    e = Engine(embedder=HashEmbedder(dim=16), store=store, warm_up=False)
    e.add_texts([f"Doc {i}." for i in range(12)], metadatas=[{"i": i, "even": i % 2 == 0} for i in range(12)])
    s = e.schema(sample=5)
    assert (s.documents, s.sentences, s.sampled) == (12, 12, 5)
    assert _keys(s)["i"][1] == 5 and "sample of 5" in s.to_text()
    # an unknown key in a sampled schema says the sample
    (w,) = e.check("SELECT SENTENCE WHERE meta.j == 1")
    assert w.severity == "warning" and "did you mean meta.i?" == w.hint
    assert e.schema(sample=100).sampled is None
    e.close()


@pytest.mark.parametrize("name", ["qdrant", "duckdb", "milvus", "pgvector"])
def test_a_store_that_describes_its_data_never_reads_every_row(name: str, request: pytest.FixtureRequest,
                                                               tmp_path: Any, monkeypatch: Any) -> None:
    """A server or SQL store answers the schema (and the data warnings of every query that reads a
    metadata key) from counts and a sample of first sentences: the Store API fallback enumerated every
    key, every five seconds, minutes at a million rows."""
    e = Engine(embedder=HashEmbedder(dim=16), store=_store(name, request, tmp_path), warm_up=False)
    e.add_texts([f"Doc {i}. Its second sentence." for i in range(12)],
                metadatas=[{"i": i, **({"odd": True} if i % 2 else {})} for i in range(12)])
    assert e.store.capabilities.DESCRIBES_DATA
    monkeypatch.setattr(e.store, "scan", lambda *a, **k: pytest.fail("the schema read every key"))
    monkeypatch.setattr(e.store, "fetch", lambda *a, **k: pytest.fail("the schema fetched rows"))
    s = e.schema(sample=5)
    assert (s.documents, s.sentences, s.sampled) == (12, 24, 5)
    assert _keys(s)["i"][1] == 5
    full = e.schema(sample=100)
    assert full.sampled is None and _keys(full)["odd"][:2] == ({"bool": 6}, 6)
    (w,) = e.check("SELECT SENTENCE WHERE meta.j == 1")
    assert w.severity == "warning" and w.hint == "did you mean meta.i?"
    e.close()


def test_store_api_fallback_samples_and_estimates() -> None:
    e = Engine(embedder=HashEmbedder(dim=16), warm_up=False)
    e.add_texts(["One. Two.", "Three. Four.", "Five. Six.", "Seven. Eight."],
                metadatas=[{"k": i} for i in range(4)])
    full = sample_summary(e.store, sample=10)
    assert (full.documents, full.sentences, full.sampled) == (4, 8, None)
    part = sample_summary(e.store, sample=2)
    assert (part.documents, part.sentences, part.sampled) == (4, 8, 2)
    assert [k.documents for k in part.keys] == [2]


def test_meta_summary_caps_distinct_values() -> None:
    s = MetaSummary.of({"id": f"v{i}"} for i in range(1000))
    (k,) = s.keys()
    assert k.documents == 1000 and not k.values_complete and len(k.values) == 5
    for i in range(1000):
        s.remove({"id": f"v{i}"})
    assert s.keys() == [] and s.documents == 0


def test_closest_prefers_the_first_candidate_on_ties() -> None:
    assert closest("rr", ["r", "id", "rrr"]) == "r"
    assert closest("sectoin", ["section", "year"]) == "section"
    assert closest("zzzz", ["section", "year"]) is None


def test_meta_summary_add_many_counts_as_add_one_by_one() -> None:
    """The batch count (per key over distinct values, as ingest writes) equals adding each in order:
    types, numeric strings, common values with 1 / 1.0 / True kept apart by type, the distinct cap,
    nested and mixed key sets, and removal afterwards."""
    import random

    rnd = random.Random(7)
    pool = [1, 1.0, True, False, 0, "1", "2025-06-01", "x", None, 2.5, "a" * 100, "y"]
    batches = [
        [{"k": rnd.choice(pool), "n": i % 7} for i in range(500)],              # one key set
        [{"k": rnd.choice(pool)} if i % 3 else {"j": i} for i in range(300)],  # mixed key sets
        [{"id": f"v{i}", "k": 1} for i in range(400)],                          # over the distinct cap
        [{"k": {"deep": i % 3}} if i % 5 == 0 else {"k": i % 4} for i in range(200)],  # nested values
        [{"n": i % 700} for i in range(1500)],                                  # one int column over the cap
        [{"n": i % 700 if i % 3 else True, "s": str(i % 9)} for i in range(1500)],  # mixed types over the cap
        [{"a": i} if i % 2 else {"b": str(i)} for i in range(50)],             # as many keys, not the same
    ]
    for metas in batches:
        one, many, chunked = MetaSummary(), MetaSummary(), MetaSummary()
        for m in metas:
            one.add(m)
        many.add_many(metas)
        for lo in range(0, len(metas), 128):  # as ingest writes: a batch at a time, past the cap in later ones
            chunked.add_many(metas[lo : lo + 128])
        assert many.keys() == one.keys() and many.documents == one.documents
        assert chunked.keys() == one.keys() and chunked.documents == one.documents
        for m in metas[::2]:
            one.remove(m)
            many.remove(m)
            chunked.remove(m)
        assert many.keys() == one.keys() and many.documents == one.documents
        assert chunked.keys() == one.keys() and chunked.documents == one.documents


def test_tables_take_their_columns_and_types_from_the_schema(read_engine: Engine) -> None:
    """Hits.to_pandas(): the same query gives the same columns and dtypes on every store, rows or none."""
    engine = read_engine
    pytest.importorskip("pandas")
    q = "SELECT SENTENCE LET n = LENGTH(content) WHERE meta.lang == $lang"
    en, none = engine.search(q, {"lang": "en"}), engine.search(q, {"lang": "zz"})
    assert len(en) == 5 and len(none) == 0
    types = {k: str(v) for k, v in en.to_pandas().dtypes.items()}
    assert types == {k: str(v) for k, v in none.to_pandas().dtypes.items()}
    assert types == {"id": "string", "doc_id": "string", "unit": "string", "position": "Int64", "content": "string",
                     "n": "Int64", "meta.author.name": "string", "meta.draft": "boolean", "meta.lang": "string",
                     "meta.section": "Int64", "meta.tags": "object", "meta.year": "Int64"}
