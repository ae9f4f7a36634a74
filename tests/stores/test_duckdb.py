"""DuckDBStore against a real DuckDB (in memory and in files), compared with nlql.values.

The store keeps its own tables (``DuckDBStore()``, ``duckdb:///file``) or reads a table / Parquet file
in place (``DuckDBStore.from_table``); both must agree with the built-in store row for row.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

duckdb = pytest.importorskip("duckdb")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from sql_kit import (  # noqa: E402
    DIM,
    HOSTILE,
    LITERALS,
    META_KEYS,
    NEEDLES,
    PATTERNS,
    _path,
    build_filter_corpus,
    filters,
    make_doc,
    unit_vectors,
)

from nlql import Engine, NLQLError  # noqa: E402
from nlql import values as V  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.errors import BackendError, MissingDependencyError  # noqa: E402
from nlql.pushdown import Cond, Filter, filter_pushable  # noqa: E402
from nlql.stores import REGISTRY, entry, open_store  # noqa: E402
from nlql.stores.base import DocRecord, Row, UnitRecord  # noqa: E402
from nlql.stores.duckdb import DuckDBStore  # noqa: E402
from nlql.stores.duckdb.driver import parse_url  # noqa: E402
from nlql.stores.pyfilter import row_passes  # noqa: E402

CLOCK = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)


def opened(path: Any = None, **kw: Any) -> DuckDBStore:
    store = DuckDBStore(path, **kw)
    store.open(DIM)
    return store


def small_corpus(rng: np.random.Generator) -> list[DocRecord]:
    return [
        make_doc("a", ["Alpha one.", "Alpha two.", "Alpha three."], {"k": 1, "tag": "x"}, 1, unit_vectors(rng, 3)),
        make_doc("b", ["Beta one."], {"k": 2.5, "tag": "y", "deep": {"er": "2025"}}, 2, unit_vectors(rng, 1)),
        make_doc("c", ["Gamma one.", "Gamma two."], {}, 3, unit_vectors(rng, 2)),
    ]


def row_tuple(r: Row) -> tuple[Any, ...]:
    return (r.doc_id, r.position, r.content, r.metadata, r.seq, r.start, r.end, r.tail)


# ------------------------------------------------------------------------------------ the basics


def test_registry_row_and_urls(tmp_path: Path) -> None:
    e = entry("duckdb")
    assert e.extra == "duckdb" and "duckdb" in e.schemes and not e.server and e in REGISTRY
    assert parse_url("duckdb") == {"path": None} and parse_url("duckdb:///:memory:") == {"path": None}
    assert parse_url("duckdb:///abs/x.duckdb") == {"path": "/abs/x.duckdb"}
    assert parse_url("duckdb://rel/x.duckdb?read_only=1") == {"path": "rel/x.duckdb", "read_only": True}
    got = parse_url("duckdb:///d/a.parquet?text=t&vector=v&id=i&metadata=y,z")
    assert got == {"path": None, "table": "/d/a.parquet", "text": "t", "vector": "v", "id": "i", "metadata": ["y", "z"]}
    with pytest.raises(NLQLError, match="unknown DuckDB store option"):
        parse_url("duckdb:///x.duckdb?colour=red")
    assert isinstance(open_store("duckdb"), DuckDBStore)
    path = tmp_path / "f.duckdb"
    store = open_store(f"duckdb:///{path}")
    assert isinstance(store, DuckDBStore) and store.path == str(path)
    store.open(DIM)
    store.close()
    assert path.exists()


def test_missing_duckdb_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "duckdb", None)
    with pytest.raises(MissingDependencyError) as info:
        DuckDBStore()
    assert "nlql-engine[duckdb]" in str(info.value)


def test_capabilities_are_declared_honestly() -> None:
    caps = DuckDBStore().capabilities
    assert caps.NAME == "duckdb" and caps.EXACT and caps.SQL_ARMS and caps.BM25 and caps.SCORE_THRESHOLD
    assert "match" not in caps.OPS and "not_match" not in caps.OPS
    assert caps.OR and caps.NESTED_KEYS and caps.NUMERIC_STRINGS and caps.FLOAT_EQUALITY and caps.DATETIMES


def test_ingest_fetch_and_document_rows() -> None:
    store = opened()
    docs = small_corpus(np.random.default_rng(1))
    store.upsert(docs)
    assert store.count() == 6 and store.max_seq() == 3
    keys = store.scan()
    rows = store.fetch(keys)
    assert [(r.doc_id, r.position) for r in rows] == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("c", 0), ("c", 1)]
    assert rows[3].metadata == {"k": 2.5, "tag": "y", "deep": {"er": "2025"}}
    assert rows[1].content == "Alpha two." and rows[1].tail == " " and rows[1].start == 11
    assert [r.key for r in store.fetch(keys[::-1])] == keys[::-1]
    by_doc = store.document_rows(["c", "missing", "a"])
    assert list(by_doc) == ["c", "a"]
    assert [r.content for r in by_doc["a"]] == ["Alpha one.", "Alpha two.", "Alpha three."]
    sims = store.similarities(docs[0].vectors[:2], keys[:3])
    np.testing.assert_allclose(sims, docs[0].vectors[:2] @ docs[0].vectors.T, atol=1e-6)


def test_upsert_replaces_and_delete_counts() -> None:
    rng = np.random.default_rng(2)
    store = opened()
    store.upsert(small_corpus(rng))
    store.upsert([make_doc("a", ["Only one now."], {"k": 9}, 4, unit_vectors(rng, 1))])
    assert store.count() == 4
    assert [(r.content, r.metadata, r.seq) for r in store.document_rows(["a"])["a"]] == [("Only one now.", {"k": 9}, 4)]
    store.upsert([make_doc("d", ["first"], {}, 5, unit_vectors(rng, 1)),
                  make_doc("d", ["second", "third"], {}, 6, unit_vectors(rng, 2))])
    assert [r.content for r in store.document_rows(["d"])["d"]] == ["second", "third"]
    store.upsert([make_doc("empty", [], {"e": 1}, 7, np.zeros((0, DIM), dtype=np.float32))])
    assert store.document_rows(["empty"]) == {"empty": []}
    assert store.delete(["a", "nope", "a"]) == 1 and store.delete([]) == 0
    assert store.count() == 5 and store.max_seq() == 7
    n, total = store._conn.execute("SELECT n, total_len FROM nlql_bm25").fetchone()
    assert n == 5 and total == sum(len(store.analyzer.terms(r.content)) for r in store.fetch(store.scan()))


@pytest.mark.parametrize("in_file", [False, True])
def test_max_seq_outlives_the_documents_that_held_it(tmp_path: Path, in_file: bool) -> None:
    """max_seq never goes down: not when the newest document is deleted, nor when it is replaced by a
    record of a lower seq, in memory and in a file reopened (the largest seq is recorded when documents
    go, not at every write)."""
    rng = np.random.default_rng(7)
    path = tmp_path / "seq.duckdb" if in_file else None
    store = opened(path)
    store.upsert([make_doc("a", ["One."], {}, 3, unit_vectors(rng, 1)),
                  make_doc("z", ["Newest."], {}, 10, unit_vectors(rng, 1))])
    store.upsert([make_doc("z", ["Older now."], {}, 5, unit_vectors(rng, 1))])
    assert store.max_seq() == 10
    store._seq_known = None  # (the tables, not what the store remembers)
    assert store.max_seq() == 10
    store.upsert([make_doc("b", ["Eleven."], {}, 11, unit_vectors(rng, 1))])
    assert store.delete(["b", "z"]) == 2 and store.delete(["nothing"]) == 0
    assert store.max_seq() == 11
    if in_file:
        store.close()
        store = opened(path)
    store._seq_known = None
    assert store.max_seq() == 11 and [r.doc_id for r in store.fetch(store.scan())] == ["a"]
    store.close()


def test_reopen_file_sees_everything_and_checks_dim(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    first = opened(path)
    first.upsert(small_corpus(np.random.default_rng(4)))
    expected = [row_tuple(r) for r in first.fetch(first.scan())]
    first.close()
    second = opened(path)
    assert [row_tuple(r) for r in second.fetch(second.scan())] == expected and second.max_seq() == 3
    second.close()
    with pytest.raises(BackendError, match="16-dimensional"):
        DuckDBStore(path).open(DIM + 1)
    other = DuckDBStore(path, table_prefix='we"ird; DROP TABLE nlql_docs; --')
    other.open(DIM + 1)  # another prefix is another store in the same file
    assert other.count() == 0
    other.close()


def test_exact_knn_equals_numpy_brute_force() -> None:
    rng = np.random.default_rng(5)
    vecs = unit_vectors(rng, 600)
    vecs[7] = vecs[3]  # exact ties: insertion order decides
    vecs[300] = vecs[3]
    docs = [make_doc(f"d{i:03d}", [f"s{j}" for j in range(6)], {"g": i % 7}, i, vecs[i * 6:(i + 1) * 6])
            for i in range(100)]
    store = opened()
    store.upsert(docs)
    keys = store.scan()
    rows = store.fetch(keys)
    order = {r.key: (r.seq, r.position) for r in rows}
    q = np.vstack([vecs[3], unit_vectors(rng, 4)])
    for k in (1, 5, 37):
        got = store.knn(q, k)
        for v, hits in zip(q, got, strict=True):
            scores = vecs @ v
            want = sorted(range(600), key=lambda i: (-round(float(scores[i]), 5), order[keys[i]]))[:k]
            assert [h[0] for h in hits][:3] == [keys[i] for i in want][:3] or k == 1
            # (the scores rounded to SCORE_DECIMALS, as every store reports them)
            assert np.allclose([s for _, s in hits], [float(scores[i]) for i in want], rtol=0, atol=1e-6)
            # the very bits similarities() gives the same rows (Capabilities.KNN_SCORES: the engine keeps them)
            again = V.round_scores(store.similarities(v[None, :], [h[0] for h in hits])[0])
            assert [s for _, s in hits] == again.tolist()
    assert store.last_stats["path"] == "exact"
    flt = store.compile_filter(Cond("eq", ("meta", "g"), 3))
    for hits in store.knn(q, 10, flt, min_score=0.0):
        assert all(s >= 0 for _, s in hits)
        assert {r.metadata["g"] for r in store.fetch([k for k, _ in hits])} <= {3}


@pytest.mark.parametrize("small_rows", [DuckDBStore.SMALL_ROWS, 0, 40])
def test_filtered_knn_ranks_as_brute_force_with_ties_in_insertion_order(small_rows: int) -> None:
    """Under a filter the k winners come best first, exact ties by (seq, position), with the rows' own
    fields: whether the passing rows are ranked in numpy (up to SMALL_ROWS of them) or in SQL (0: always;
    40: until a write leaves fewer than 40 of the 90 passing rows)."""
    rng = np.random.default_rng(8)
    vecs = unit_vectors(rng, 600)
    for i in (48, 50, 53, 94, 132, 595):  # exact ties among the rows of documents with g == 1 ((i // 6) % 7 == 1)
        vecs[i] = vecs[7]
    docs = [make_doc(f"d{i:03d}", [f"s{j}" for j in range(6)], {"g": i % 7}, 100 - i, vecs[i * 6:(i + 1) * 6])
            for i in range(100)]
    store = opened()
    store.SMALL_ROWS = small_rows
    store.upsert(docs)
    rows = store.fetch(store.scan())
    vec = {r.key: vecs[int(r.doc_id[1:]) * 6 + r.position] for r in rows}
    q = np.vstack([vecs[7], unit_vectors(rng, 3)])
    flt = store.compile_filter(Cond("eq", ("meta", "g"), 1))

    def check(passing: list[Row]) -> None:
        for k in (1, 4, 10, 200):
            for min_score in (None, 0.05):
                for v, hits in zip(q, store.knn(q, k, flt, min_score=min_score), strict=True):
                    ranked = sorted(passing, key=lambda r: (-float(vec[r.key] @ v), r.seq, r.position))
                    want = [r for r in ranked if min_score is None or float(vec[r.key] @ v) >= min_score][:k]
                    assert [h[0] for h in hits] == [r.key for r in want]
                    assert np.allclose([s for _, s in hits], [float(vec[r.key] @ v) for r in want], atol=1e-6)
                    assert store.fetch([h[0] for h in hits]) == want
                    assert np.allclose(store.vectors([h[0] for h in hits]), [vec[r.key] for r in want], atol=1e-6)

    check([r for r in rows if r.metadata["g"] == 1])
    assert (store.last_stats.get("scan") == "numpy") == (small_rows > 90)
    store.delete([f"d{i:03d}" for i in range(60)])  # 36 rows pass now
    check([r for r in rows if r.metadata["g"] == 1 and int(r.doc_id[1:]) >= 60])
    assert (store.last_stats.get("scan") == "numpy") == (small_rows > 36)
    assert store.knn(q, 5, store.compile_filter(Cond("eq", ("meta", "g"), 99))) == [[] for _ in q]
    store.close()


# -------------------------------------------------------------------------- filters == nlql.values


@pytest.fixture(scope="module")
def filter_store() -> Any:
    store = opened()
    store.upsert(build_filter_corpus(np.random.default_rng(7)))
    yield store, store.fetch(store.scan())
    store.close()


def _needs_exact(flt: Filter) -> bool:
    from nlql import values as V
    from nlql.pushdown import filter_leaves

    return any(V.needs_exact(v) for c in filter_leaves(flt)
               for v in (c.value if isinstance(c.value, tuple) else (c.value,)))


def check_filter(store: DuckDBStore, rows: list[Row], flt: Filter) -> None:
    if not store.capabilities.EXACT_INTS and _needs_exact(flt):
        # a number at or beyond 2^53: float64 views cannot compare it exactly, so the planner keeps it residual
        assert not filter_pushable(store.capabilities, flt)
        return
    assert filter_pushable(store.capabilities, flt)
    want = [r.key for r in rows if row_passes(flt, r)]
    assert store.scan(store.compile_filter(flt)) == want, flt


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flt=filters)
def test_random_filters_match_python_semantics(filter_store: Any, flt: Filter) -> None:
    check_filter(*filter_store, flt)


@pytest.mark.parametrize("op", ["has", "not_has", "has_any", "not_has_any", "has_all", "not_has_all"])
def test_every_list_membership_against_every_literal(filter_store: Any, op: str) -> None:
    """HAS in SQL (list members kept at ingest) against nlql.values on lists with numeric strings, mixed
    types, null and nested members, empty lists, scalars, maps and missing keys (SPEC §11)."""
    store, rows = filter_store
    for key in [*META_KEYS, "doc_id", "content"]:
        for i, lit in enumerate(LITERALS):
            if op in ("has", "not_has"):
                check_filter(store, rows, Cond(op, _path(key), lit))
            else:
                check_filter(store, rows, Cond(op, _path(key), (lit, LITERALS[(i * 7 + 3) % len(LITERALS)])))
                check_filter(store, rows, Cond(op, _path(key), (lit,)))
        if op not in ("has", "not_has"):
            check_filter(store, rows, Cond(op, _path(key), ()))


@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_every_comparison_against_every_literal(filter_store: Any, op: str) -> None:
    store, rows = filter_store
    for key in [*META_KEYS, "doc_id", "id", "position", "content"]:
        for lit in LITERALS:
            check_filter(store, rows, Cond(op, _path(key), lit))


def test_string_predicates_against_every_needle(filter_store: Any) -> None:
    store, rows = filter_store
    for key in [*META_KEYS, "doc_id", "id", "content"]:
        for needle in NEEDLES:
            check_filter(store, rows, Cond("contains", _path(key), needle))
            check_filter(store, rows, Cond("not_contains", _path(key), needle))
        for pattern in PATTERNS:
            check_filter(store, rows, Cond("like", _path(key), pattern))
            check_filter(store, rows, Cond("not_like", _path(key), pattern))
        check_filter(store, rows, Cond("in", _path(key), ()))
        check_filter(store, rows, Cond("not_in", _path(key), ("abc", 7, None)))
        check_filter(store, rows, Cond("is_null", _path(key)))


def test_hostile_values_round_trip_and_filter() -> None:
    rng = np.random.default_rng(8)
    store = opened()
    docs = []
    for i, h in enumerate(HOSTILE):
        docs.append(make_doc(h, [h, f"plain {i}"], {h: h, "v": h, "nest": {h: {"k": h}}}, i + 1, unit_vectors(rng, 2)))
        docs[-1].units[0].tail = h
        docs[-1].text = h + "\x00" + h
    store.upsert(docs)
    rows = store.fetch(store.scan())
    assert len(rows) == 2 * len(HOSTILE)
    for d in docs:
        got = store.document_rows([d.doc_id])[d.doc_id]
        assert [r.content for r in got] == [u.content for u in d.units]
        assert got[0].tail == d.units[0].tail and got[0].metadata == d.metadata and got[0].doc_id == d.doc_id
    for h in HOSTILE:
        for flt in (Cond("eq", ("doc_id",), h), Cond("eq", ("meta", h), h), Cond("eq", ("meta", "nest", h, "k"), h),
                    Cond("contains", ("content",), h), Cond("contains", ("meta", "v"), h.upper()),
                    Cond("like", ("meta", "v"), h), Cond("like", ("content",), h + "%"),
                    Cond("lt", ("meta", "v"), h), Cond("in", ("id",), (h + "#1", "x")),
                    Cond("like", ("doc_id",), "%" + h[:3] + "_%")):
            want = [r.key for r in rows if row_passes(flt, r)]
            assert store.scan(store.compile_filter(flt)) == want, flt
            if flt.op == "eq":
                assert want
    assert store.delete([HOSTILE[0], HOSTILE[2]]) == 2
    tables = sorted(r[0] for r in store._conn.execute("SELECT table_name FROM duckdb_tables()").fetchall())
    assert tables == ["nlql_bm25", "nlql_docs", "nlql_entity_edges", "nlql_entity_links", "nlql_flat", "nlql_info",
                      "nlql_members", "nlql_meta", "nlql_terms", "nlql_units"]


def test_metadata_numbers_keep_their_type() -> None:
    store = opened()
    meta = {"f": 1e16, "i": 10**16, "tiny": 5e-324, "neg0": -0.0, "huge": 10**400, "nan": float("nan"),
            "when": datetime(2024, 6, 1, tzinfo=timezone.utc)}
    store.upsert([make_doc("m", ["x"], meta, 1, unit_vectors(np.random.default_rng(11), 1))])
    got = store.fetch(store.scan())[0].metadata
    assert got == V.normalize_metadata(meta)
    assert isinstance(got["f"], float) and isinstance(got["i"], int) and json.dumps(got["neg0"]) == "-0.0"


def test_info_record_persists(tmp_path: Path) -> None:
    path = tmp_path / "i.duckdb"
    store = opened(path)
    assert store.get_info("embedder") is None
    store.set_info("embedder", "HashEmbedder(16)")
    store.set_info("analyzer", "x\x00y")
    store.set_info("embedder", "replaced")
    store.close()
    again = opened(path)
    assert again.get_info("embedder") == "replaced" and again.get_info("analyzer") == "x\x00y"
    with pytest.raises(ValueError):
        again.set_info("", "v")
    again.close()


# -------------------------------------------------------------------------------------- read-only


def test_read_only_file_searches_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "ro.duckdb"
    e = Engine(embedder=HashEmbedder(dim=DIM), store=DuckDBStore(path), clock=lambda: CLOCK, warm_up=False)
    e.add_texts(["Zebra stripes.", "Cats nap."], ids=["z", "c"])
    want = [(h.id, h.scores) for h in e.search('SELECT SENTENCE LET k = BM25(content, "zebra") ORDER BY k DESC LIMIT 2')]
    e.close()
    ro = Engine(embedder=HashEmbedder(dim=DIM), store=f"duckdb:///{path}?read_only=true", clock=lambda: CLOCK,
                warm_up=False)
    got = ro.search('SELECT SENTENCE LET k = BM25(content, "zebra") ORDER BY k DESC LIMIT 2')
    assert [(h.id, h.scores) for h in got] == want
    for write in (lambda: ro.add_text("More.", id="m"), lambda: ro.delete("z"), lambda: ro.store.set_info("k", "v")):
        with pytest.raises(BackendError, match="read-only"):
            write()
    assert len(ro.search("SELECT DOCUMENT")) == 2
    ro.close()
    with pytest.raises(BackendError, match="holds no NLQL store"):
        DuckDBStore(path, read_only=True, table_prefix="other").open(DIM)


# -------------------------------------------------------------------------- tables read in place


def _source(n: int = 40, dim: int = DIM) -> tuple[list[str], np.ndarray, dict[str, list[Any]]]:
    emb = HashEmbedder(dim=dim)
    texts = [f"Item {i} is about {['cats', 'solar energy', 'rivers', 'Music'][i % 4]} and more." for i in range(n)]
    meta = {"year": [[2020, 2021, None, 2023][i % 4] for i in range(n)],
            "lang": [["en", "de", "fr"][i % 3] for i in range(n)],
            "day": [date(2024, 1 + i % 12, 1 + i % 27) for i in range(n)],
            "score": [[0.25, 0.5, None][i % 3] for i in range(n)],
            "flag": [i % 2 == 0 for i in range(n)],
            "tags": [["a", "b"][: i % 3] for i in range(n)]}
    return texts, emb.embed(texts), meta


def _write_parquet(path: Path, ids: list[Any], texts: list[str], vecs: np.ndarray, meta: dict[str, list[Any]],
                   as_list: bool = False) -> None:
    flat = pa.array(vecs.astype(np.float32).ravel())
    vec = (pa.ListArray.from_arrays(pa.array(np.arange(0, vecs.size + 1, vecs.shape[1], dtype=np.int32)), flat)
           if as_list else pa.FixedSizeListArray.from_arrays(flat, vecs.shape[1]))
    pq.write_table(pa.table({"id": ids, "body": texts, "emb": vec, **meta}), path)


EXTERNAL_QUERIES = [
    "SELECT SENTENCE",
    'SELECT SENTENCE LET s = SIMILARITY(content, "solar") ORDER BY s DESC LIMIT 5',
    'SELECT SENTENCE LET s = SIMILARITY(content, "cats") WHERE s >= 0.1 AND meta.lang != "fr" ORDER BY s DESC LIMIT 8',
    'SELECT SENTENCE WHERE meta.year >= 2021 AND meta.lang IN ("en", "de")',
    'SELECT SENTENCE WHERE meta.year == "2020" OR meta.score > 0.3',
    "SELECT SENTENCE WHERE meta.day >= DATE '2024-06-01' AND meta.day < \"2024-10-01\"",
    "SELECT SENTENCE WHERE meta.flag == true AND meta.score IS NULL",
    'SELECT SENTENCE WHERE content CONTAINS "MUSIC" OR content LIKE "Item 1_ %"',
    'SELECT SENTENCE WHERE doc_id IN ("x3", "x7") OR id == "x9#0"',
    'SELECT DOCUMENT LET s = SIMILARITY(content, "rivers") ORDER BY s DESC LIMIT 4',
    # MMR reads the source's own vectors (not normalised there): DuckDBStore.vectors normalises them
    'SELECT SENTENCE LET s = SIMILARITY(content, "cats music"), m = MMR(s, lambda => 0.3, window => 12) '
    "ORDER BY m DESC LIMIT 8",
    'SELECT SENTENCE LET k = BM25(content, "solar energy") WHERE k > 0 ORDER BY k DESC',
    'SELECT SENTENCE LET s = SIMILARITY(content, "cats"), k = BM25(content, "cats music"), f = RRF(s, k) '
    "WHERE meta.year IS NOT NULL ORDER BY f DESC LIMIT 6",
    'SELECT SENTENCE LET s = SIMILARITY(content, "energy"), k = BM25(content, "energy"), f = INTERLEAVE(k, s) '
    "ORDER BY f DESC LIMIT 5 OFFSET 2",
    "SELECT SENTENCE ORDER BY meta.score DESC, meta.year ASC NULLS FIRST LIMIT 9",
    'SELECT SENTENCE WHERE meta.tags IS NOT NULL AND meta.lang MATCH "^(en|de)$"',
]


@pytest.fixture(scope="module")
def external(tmp_path_factory: pytest.TempPathFactory) -> Any:
    texts, vecs, meta = _source()
    ids = [f"x{i}" for i in range(len(texts))]
    path = tmp_path_factory.mktemp("ext") / "docs.parquet"
    _write_parquet(path, ids, texts, vecs, meta)
    reference = Engine(embedder=HashEmbedder(dim=DIM), clock=lambda: CLOCK, warm_up=False)
    for i, (doc_id, text) in enumerate(zip(ids, texts, strict=True)):
        reference.add_text(text, id=doc_id, metadata={k: v[i] for k, v in meta.items()})
    return path, reference


def _same(got: Any, want: Any) -> None:
    """The same rows in the same order, with the same content and metadata; scores to 1e-6."""
    assert [(h.id, h.content, h.metadata) for h in got] == [(h.id, h.content, h.metadata) for h in want]
    for g, w in zip(got, want, strict=True):
        assert g.scores.keys() == w.scores.keys()
        for k, v in w.scores.items():
            assert g.scores[k] == pytest.approx(v, abs=1e-6), (g.id, k)


@pytest.mark.parametrize("query", EXTERNAL_QUERIES)
@pytest.mark.parametrize("how", ["parquet", "table", "url"])
def test_table_read_in_place_answers_like_the_builtin_store(external: Any, query: str, how: str) -> None:
    path, reference = external
    cols = {"text": "body", "vector": "emb", "id": "id", "metadata": ["year", "lang", "day", "score", "flag", "tags"]}
    if how == "parquet":
        store: Any = DuckDBStore.from_table(None, str(path), **cols)  # type: ignore[arg-type]
    elif how == "table":
        conn = duckdb.connect()
        conn.execute("CREATE TABLE docs AS SELECT * FROM read_parquet($1)", [str(path)])
        store = DuckDBStore.from_table(conn, "docs", **cols)  # type: ignore[arg-type]
    else:
        store = f"duckdb:///{path}?text=body&vector=emb&id=id&metadata=year,lang,day,score,flag,tags"
    e = Engine(embedder=HashEmbedder(dim=DIM), store=store, clock=lambda: CLOCK, warm_up=False)
    _same(e.search(query), reference.search(query))
    if "RRF" in query or "INTERLEAVE" in query:
        assert e.explain(query).to_dict()["lowering"]["strategy"] == "sql"
    e.close()


def test_read_in_place_never_writes_the_source(tmp_path: Path) -> None:
    texts, vecs, meta = _source(12)
    db = tmp_path / "src.duckdb"
    conn = duckdb.connect(str(db))
    parquet = tmp_path / "p.parquet"
    _write_parquet(parquet, list(range(12)), texts, vecs, meta, as_list=True)  # integer ids, list vectors
    conn.execute("CREATE TABLE docs AS SELECT * FROM read_parquet($1)", [str(parquet)])
    conn.execute("CREATE VIEW recent AS SELECT * FROM docs WHERE year IS NOT NULL")
    conn.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    for table in ("docs", "recent"):
        store = DuckDBStore.from_table(str(db), table, text="body", vector="emb", id="id", metadata=["year"])
        e = Engine(embedder=HashEmbedder(dim=DIM), store=store, clock=lambda: CLOCK, warm_up=False)
        hits = e.search('SELECT SENTENCE LET s = SIMILARITY(content, "solar"), k = BM25(content, "solar"), '
                        "f = RRF(s, k) ORDER BY f DESC LIMIT 3")
        assert hits and hits.stats["store"]["path"] == "sql"
        assert {h.doc_id for h in e.search("SELECT SENTENCE WHERE doc_id == '3'")} == {"3"}
        assert len(e.search("SELECT DOCUMENT")) == (12 if table == "docs" else 9)
        with pytest.raises(BackendError, match="read-only"):
            e.add_text("New row.", id="n")
        with pytest.raises(BackendError, match="read-only"):
            e.delete("3")
        store.set_info("embedder", "hash")  # kept beside, never in the source
        assert store.get_info("embedder") == "hash"
        e.close()
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_read_in_place_errors_are_clear(tmp_path: Path) -> None:
    texts, vecs, meta = _source(6)
    path = tmp_path / "e.parquet"
    _write_parquet(path, [f"i{i}" for i in range(6)], texts, vecs, meta)
    conn = duckdb.connect()
    conn.execute("CREATE TABLE docs AS SELECT * FROM read_parquet($1)", [str(path)])
    conn.execute("CREATE TABLE dup AS SELECT 'same' AS id, body, emb FROM docs")
    conn.execute("CREATE TABLE holes AS SELECT id, body, CASE WHEN id = 'i2' THEN NULL ELSE emb END AS emb FROM docs")
    cases = [
        (dict(table="docs", text="nope", vector="emb"), "has no column 'nope' (the text column)"),
        (dict(table="docs", text="body", vector="emb", metadata=["year", "colour"]), "has no column 'colour'"),
        (dict(table="docs", text="year", vector="emb"), "not VARCHAR"),
        (dict(table="docs", text="body", vector="lang"), "not an array or list of FLOAT/DOUBLE"),
        (dict(table="no_such_table", text="body", vector="emb"), "cannot read 'no_such_table'"),
        (dict(table=str(tmp_path / "missing.parquet"), text="body", vector="emb"), "cannot read"),
    ]
    for kw, message in cases:
        with pytest.raises(BackendError, match=re.escape(message)) as err:
            DuckDBStore.from_table(conn, **kw)  # type: ignore[arg-type]
        if "column" in message:
            assert "its columns: id, body, emb" in (err.value.hint or "")
    with pytest.raises(BackendError, match=f"holds {DIM}-dimensional vectors, the embedder gives 8"):
        Engine(embedder=HashEmbedder(dim=8), store=DuckDBStore.from_table(conn, "docs", text="body", vector="emb"),
               warm_up=False)
    with pytest.raises(BackendError, match="repeats 'same'"):
        DuckDBStore.from_table(conn, "dup", text="body", vector="emb", id="id").open(DIM)
    with pytest.raises(BackendError, match="1 rows .* have no vector"):
        DuckDBStore.from_table(conn, "holes", text="body", vector="emb", id="id").open(DIM)
    # a NaN vector has no cosine: it was scored 0.0, silently (issue 33, item 10)
    bad = vecs.astype(np.float32).copy()
    bad[3, 0], bad[4, 1] = np.nan, np.inf
    _write_parquet(tmp_path / "nan.parquet", [f"i{i}" for i in range(6)], texts, bad, meta)
    with pytest.raises(BackendError, match=r"2 rows .* hold NaN or infinity in 'emb' \(the first is row 3\)"):
        DuckDBStore.from_table(None, str(tmp_path / "nan.parquet"), text="body", vector="emb", id="id").open(DIM)
    with pytest.raises(NLQLError, match="needs text="):
        DuckDBStore(table="docs", connection=conn)


def test_no_extension_is_installed_or_loaded_at_run_time() -> None:
    """Everything NLQL runs is built into DuckDB: connections it opens may not fetch an extension."""
    e = Engine(embedder=HashEmbedder(dim=DIM), store="duckdb", clock=lambda: CLOCK, warm_up=False)
    e.add_texts(["Zebra stripes.", "Cats nap in the sun."], ids=["z", "c"], metadatas=[{"y": "2024-01-02"}, {}])
    for q in ('SELECT SENTENCE LET s = SIMILARITY(content, "zebra"), k = BM25(content, "zebra"), f = RRF(s, k) '
              "WHERE meta.y >= DATE '2024-01-01' OR content LIKE 'C_ts%' ORDER BY f DESC LIMIT 2",
              'SELECT SENTENCE LET k = BM25(content, "cats") WHERE k > 0'):
        assert e.search(q)
    conn = e.store._conn  # type: ignore[attr-defined]
    assert conn.execute("SELECT current_setting('autoinstall_known_extensions'), "
                        "current_setting('autoload_known_extensions')").fetchone() == (False, False)
    loaded = {r[0] for r in conn.execute("SELECT extension_name FROM duckdb_extensions() WHERE loaded").fetchall()}
    assert "vss" not in loaded and "fts" not in loaded
    e.close()


def test_bm25_candidates_read_only_the_filtered_rows_of_the_terms() -> None:
    """The store scores BM25 from its term tables for the rows passing a pushed filter (KeywordStats'
    ``bm25_candidates``; the capability stays undeclared while recall's narrowing cannot take a dropped arm)."""
    texts = ["Solar panels and solar power.", "Wind power for the grid.", "Solar grid storage.", "Cats nap."]
    metas = [{"k": 1}, {"k": 2}, {"k": 1}, {"k": 1}]
    duck = Engine(embedder=HashEmbedder(dim=DIM), store="duckdb", clock=lambda: CLOCK, warm_up=False)
    ref = Engine(embedder=HashEmbedder(dim=DIM), clock=lambda: CLOCK, warm_up=False)
    for e in (duck, ref):
        e.add_texts(texts, ids=[f"t{i}" for i in range(4)], metadatas=metas)
    store = duck.store
    keys, scores = store.bm25_candidates("solar power", store.compile_filter(Cond("eq", ("meta", "k"), 1)))
    got = {r.id: s for r, s in zip(store.fetch(keys), scores, strict=True)}
    want = {h.id: h.scores["kw"] for h in ref.search(
        'SELECT SENTENCE LET kw = BM25(content, "solar power") WHERE kw > 0 AND meta.k == 1')}
    assert got == want and set(got) == {"t0#0", "t2#0"}
    assert store.bm25_candidates("nothing here", None) == ([], pytest.approx(np.zeros(0)))
    duck.close()


def test_a_bm25_ranking_fills_with_non_matching_rows_only_when_too_few_rows_match() -> None:
    """A lone BM25 ranking runs without its fill branch first (``DuckDBStore.run_lowered``): with LIMIT
    or more matching rows that is the answer (one statement); with fewer, the whole statement runs (two),
    and the rows matching no term follow in insertion order with BM25 0, as on the built-in store; a
    query asked again after a write answers from the data as written."""
    texts = [f"Solar grid {i}." if i % 3 == 0 else f"Wind farm number {i}." for i in range(30)]  # 10 solar
    metas = [{"k": i % 2} for i in range(30)]
    duck = Engine(embedder=HashEmbedder(dim=DIM), store="duckdb", clock=lambda: CLOCK, warm_up=False)
    ref = Engine(embedder=HashEmbedder(dim=DIM), clock=lambda: CLOCK, warm_up=False)
    for e in (duck, ref):
        e.add_texts(texts, ids=[f"t{i}" for i in range(30)], metadatas=metas)
    for where, limit, statements in (("", 10, 1), ("", 9, 1), ("", 11, 2), ("WHERE meta.k == 0", 5, 1),
                                     ("WHERE meta.k == 0", 6, 2), ("", 40, 2)):
        q = f'SELECT SENTENCE LET kw = BM25(content, "solar") {where} ORDER BY kw DESC LIMIT {limit}'
        got, want = duck.search(q), ref.search(q)
        assert [(h.id, h.scores["kw"]) for h in got] == [(h.id, pytest.approx(h.scores["kw"])) for h in want], q
        assert duck.store.last_stats["path"] == "sql" and duck.store.last_stats["rounds"] == statements, q
    q = 'SELECT SENTENCE LET kw = BM25(content, "solar") ORDER BY kw DESC LIMIT 13'
    assert [h.id for h in duck.search(q)][10:] == ["t1#0", "t2#0", "t4#0"]
    # the same query again after a write (its statement kept per plan): the new row and statistics are read
    for e in (duck, ref):
        e.add_texts(["Solar solar solar panels."], ids=["new"])
    got, want = duck.search(q), ref.search(q)
    assert got[0].id == "new#0"
    assert [(h.id, h.scores["kw"]) for h in got] == [(h.id, pytest.approx(h.scores["kw"])) for h in want]
    duck.close()


def test_metadata_equality_reads_the_flat_table_and_a_store_written_before_it_rebuilds_it(tmp_path: Path) -> None:
    """``meta.x == v`` / ``IN`` compile to a semi-join on ``<p>_flat`` (``DuckDBDialect.indexed_leaf``)
    with exactly the typed views' rows; a file written before the table existed gets it on open."""
    from sql_kit import META_VALUES

    rng = np.random.default_rng(11)
    docs = build_filter_corpus(rng)
    path = tmp_path / "old.duckdb"
    store = DuckDBStore(path)
    store.open(DIM)
    store.upsert(docs)
    store.upsert([docs[0]])  # a replaced document keeps one set of flat rows
    store._conn.execute('DROP TABLE "nlql_flat"')  # as a version before the table left the file
    store.close()
    store = DuckDBStore(path)
    store.open(DIM)
    rows = store.fetch(store.scan())
    conds = [Cond("eq", _path(k), v) for k in META_KEYS for v in META_VALUES]
    conds += [Cond("in", _path(k), tuple(META_VALUES[i:i + 3])) for k in META_KEYS for i in range(0, len(META_VALUES), 3)]
    used = 0
    for flt in conds:
        if not filter_pushable(store.capabilities, flt):
            continue
        compiled = store.compile_filter(flt)
        used += '"nlql_flat"' in compiled.native
        assert store.scan(compiled) == [r.key for r in rows if row_passes(flt, r)], flt
    assert used > len(conds) // 3
    assert store.delete([docs[1].doc_id]) == 1
    left = store._conn.execute('SELECT count(*) FROM "nlql_flat" WHERE doc_id = $1', [docs[1].doc_id]).fetchone()[0]
    assert left == 0
    store.close()


def test_a_store_written_before_document_keys_filters_the_same_read_only_and_gets_them_when_writable(
        tmp_path: Path) -> None:
    """Metadata semi-joins match the documents' integer key (``dkey`` in ``<p>_units``, ``_flat`` and
    ``_members``); a file written before the column still answers every filter when opened read-only
    (on ``doc_id``), and opened writable it gets one key per document, the same in every table."""
    from sql_kit import META_VALUES

    docs = build_filter_corpus(np.random.default_rng(5))
    docs.append(make_doc("no-sentences", [], {"i": 1, "m": [1, "abc"]}, 900, unit_vectors(np.random.default_rng(1), 0)))
    path = tmp_path / "old.duckdb"
    store = opened(path)
    store.upsert(docs)
    conds = [Cond("eq", _path(k), v) for k in META_KEYS for v in META_VALUES[:10]]
    conds += [Cond("has", _path(k), v) for k in META_KEYS for v in (1, "abc", None)]
    conds += [Cond("not", (Cond("has", _path(k), 1),)) for k in META_KEYS]
    want = {}
    for flt in conds:
        if filter_pushable(store.capabilities, flt):
            compiled = store.compile_filter(flt)
            want[flt] = store.scan(compiled)
    assert any("u.dkey IN" in store.compile_filter(flt).native for flt in want)
    for table in ("units", "flat", "members"):
        store._conn.execute(f'ALTER TABLE "nlql_{table}" DROP COLUMN dkey')  # as a version before the key
    store.close()
    old = opened(path, read_only=True)
    assert all("dkey" not in old.compile_filter(flt).native for flt in want)
    assert {flt: old.scan(old.compile_filter(flt)) for flt in want} == want
    old.close()
    store = opened(path)
    assert {flt: store.scan(store.compile_filter(flt)) for flt in want} == want
    conn = store._conn
    keys = dict(conn.execute('SELECT doc_id, min(dkey) FROM "nlql_units" GROUP BY doc_id '
                             'HAVING min(dkey) = max(dkey)').fetchall())
    assert len(keys) == len(docs) - 1 and len(set(keys.values())) == len(keys)
    for table in ("flat", "members"):
        rows = conn.execute(f'SELECT doc_id, dkey FROM "nlql_{table}"').fetchall()
        assert all(k is not None and keys.get(d, k) == k for d, k in rows), table
    store.upsert(docs[:2])  # written now: keys from the same sequence, none reused
    assert conn.execute('SELECT count(DISTINCT dkey) FROM "nlql_units"').fetchone()[0] == len(docs) - 1
    store.close()


def test_string_equality_compares_checksums_first_and_an_older_store_answers_the_same(tmp_path: Path) -> None:
    """``<p>_flat.hkey`` holds each string's checksum with its path (``string_key``), which string
    equality and IN compare before the strings; a file written before the column answers every filter
    the same when opened read-only (no checksum in the SQL), and opened writable gets the checksums of
    every row, also when it predates the documents' keys and its tables are rewritten sorted after."""
    from sql_kit import META_VALUES

    from nlql.sql.codec import string_key

    docs = build_filter_corpus(np.random.default_rng(9))
    path = tmp_path / "old.duckdb"
    store = opened(path)
    store.upsert(docs)
    strings = [v for v in META_VALUES if isinstance(v, str)]
    conds = [Cond("eq", _path(k), v) for k in META_KEYS for v in META_VALUES[:36] if not isinstance(v, list)]
    conds += [Cond("in", _path(k), tuple(strings[i:i + 3])) for k in META_KEYS for i in range(0, len(strings), 3)]
    conds += [Cond("in", _path(k), ("abc", 2025, True)) for k in META_KEYS]
    conds = [flt for flt in conds if filter_pushable(store.capabilities, flt)]  # (a list: 1 == True as values)

    def answers(s: DuckDBStore) -> list[list[tuple[str, int]]]:  # (by row, not key: a rewrite gets new keys)
        return [sorted((r.doc_id, r.position) for r in s.fetch(s.scan(s.compile_filter(flt)))) for flt in conds]

    def checked(s: DuckDBStore) -> list[bool]:
        return ["hkey" in s.compile_filter(flt).native for flt in conds]

    want, keyed = answers(store), checked(store)
    hits = [(flt.op, bool(rows)) for flt, rows, k in zip(conds, want, keyed, strict=True) if k]
    assert ("eq", True) in hits and ("in", True) in hits
    def plain(v: Any) -> bool:  # (a numeric string also equals the number: the typed views answer it)
        return isinstance(v, str) and V.numeric_string(v) is None

    assert keyed == [all(plain(v) for v in (flt.value if flt.op == "in" else (flt.value,))) for flt in conds]
    conn = store._conn
    rows = conn.execute('SELECT path, s, hkey FROM "nlql_flat"').fetchall()
    assert rows and all(h == (None if v is None else string_key(p, v)) for p, v, h in rows)
    conn.execute('ALTER TABLE "nlql_flat" DROP COLUMN hkey')  # as a version before the checksums
    for table in ("units", "flat", "members"):  # (and before the documents' keys)
        conn.execute(f'ALTER TABLE "nlql_{table}" DROP COLUMN dkey')
    store.close()
    old = opened(path, read_only=True)
    assert not any(checked(old))
    assert answers(old) == want
    old.close()
    store = opened(path)
    assert answers(store) == want and checked(store) == keyed
    conn = store._conn
    assert conn.execute('SELECT path, s, hkey FROM "nlql_flat"').fetchall() == rows
    for statement in store.dialect.cluster("flat"):  # the rewrite keeps each column where it was
        conn.execute(statement)
    assert sorted(conn.execute('SELECT path, s, hkey FROM "nlql_flat"').fetchall(), key=repr) == sorted(rows, key=repr)
    store.upsert(docs[:3])  # rows written now carry theirs
    assert answers(store) == want
    assert conn.execute('SELECT count(*) FROM "nlql_flat" WHERE s IS NOT NULL AND hkey IS NULL').fetchone()[0] == 0
    store.close()


@pytest.mark.model
def test_the_default_embedder_opens_a_new_duckdb_store_and_reopens_it(tmp_path: Path) -> None:
    """``Engine(store="duckdb://…")`` with no embedder: the engine reads the store's record before ``open``
    to choose its default model (``get_info`` raised "open(dim) must be called first"), and a file
    reopened finds the model that filled it."""
    for url in ("duckdb://", f"duckdb://{tmp_path}/d.duckdb"):
        e = Engine(store=url, warm_up=False)
        e.add_texts(["The cat sat on the warm windowsill.", "Stock markets fell sharply on Monday."],
                    ids=["cat", "stocks"])
        hits = e.search('SELECT DOCUMENT LET s = SIMILARITY(content, "a sleeping pet") ORDER BY s DESC LIMIT 1')
        assert hits[0].doc_id == "cat"
        model = e.embedder.name
        e.close()
    assert DuckDBStore(str(tmp_path / "d.duckdb")).get_info("embedder") is not None
    again = Engine(store=f"duckdb://{tmp_path}/d.duckdb", warm_up=False)
    assert again.embedder.name == model and len(again) == 2
    again.close()


def test_opening_an_old_store_adds_every_column_before_it_writes_a_row(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A store written before several columns (the units' metadata and packed fields, the documents'
    keys, the strings' checksums) gets them all in the transaction that opens it: every ``ALTER TABLE``
    before the first statement that writes rows of that table. DuckDB 1.5 refuses to commit a transaction
    that alters a table after updating it ("another transaction has altered this table"), so a store
    lacking two of them could not be opened there (found running these tests on DuckDB 1.5.5)."""
    import re

    docs = build_filter_corpus(np.random.default_rng(5))
    path = tmp_path / "older.duckdb"
    store = opened(path)
    store.upsert(docs)
    want = [row_tuple(r) for r in store.fetch(store.scan())]
    conn = store._conn
    conn.execute('ALTER TABLE "nlql_flat" DROP COLUMN hkey')
    for table in ("units", "flat", "members"):
        conn.execute(f'ALTER TABLE "nlql_{table}" DROP COLUMN dkey')
    conn.execute('ALTER TABLE "nlql_units" DROP COLUMN packed')
    conn.execute('ALTER TABLE "nlql_units" DROP COLUMN metadata')
    store.close()
    ran: list[str] = []
    run = DuckDBStore._run

    def recording(self: DuckDBStore, conn: Any, frag: Any) -> Any:
        from nlql.stores.duckdb.driver import render

        ran.append(render(self.dialect, frag)[0])
        return run(self, conn, frag)

    monkeypatch.setattr(DuckDBStore, "_run", recording)
    store = opened(path)
    monkeypatch.undo()
    altered = [(i, m.group(1)) for i, q in enumerate(ran) if (m := re.match(r'ALTER TABLE "(\w+)" ADD', q))]
    assert {t for _, t in altered} == {"nlql_units", "nlql_flat", "nlql_members"}
    for at, table in altered:
        written = [i for i, q in enumerate(ran) if re.match(rf'(UPDATE|INSERT INTO|DELETE FROM) "{table}"', q)]
        assert all(at < i for i in written), (table, ran[at], [ran[i] for i in written if i < at])
    assert [row_tuple(r) for r in store.fetch(store.scan())] == want
    for table, column, which in (("units", "metadata", "true"), ("units", "packed", "true"), ("units", "dkey", "true"),
                                 ("flat", "dkey", "true"), ("flat", "hkey", "s IS NOT NULL")):
        unfilled = store._conn.execute(f'SELECT count(*) FROM "nlql_{table}" WHERE {column} IS NULL AND {which}')
        assert unfilled.fetchone()[0] == 0, (table, column)
    store.close()


def test_term_and_metadata_tables_are_kept_sorted_and_answer_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """``<p>_terms``, ``<p>_flat`` and ``<p>_members`` are rewritten sorted by what statements look up
    once they grow by half (``DuckDBStore._cluster``): the same rows, so filters and BM25 answer as in
    a store that never sorts, through replacements and deletes."""
    from sql_kit import META_VALUES

    docs = build_filter_corpus(np.random.default_rng(11))
    sorting, plain = opened(), opened()
    monkeypatch.setattr(sorting, "CLUSTER_MIN_ROWS", 0)
    monkeypatch.setattr(plain, "CLUSTER_MIN_ROWS", 10**12)
    for store in (sorting, plain):
        for lo in range(0, len(docs), 7):
            store.upsert(docs[lo:lo + 7])
        store.upsert(docs[:3])  # replaced: their old rows leave every table
        assert store.delete([docs[5].doc_id, docs[9].doc_id]) == 2
    conn = sorting._conn
    for suffix, first in (("terms", "term"), ("flat", "path"), ("members", "path")):
        done = conn.execute("SELECT value::BIGINT FROM nlql_meta WHERE key = $1", [f"sorted_rows:{suffix}"]).fetchone()
        assert done is not None and done[0] > 0, suffix
        table = f'"nlql_{suffix}"'
        rows = conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
        assert sorted(rows, key=repr) == sorted(plain._conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
        col = [r[0] for r in conn.execute(f"SELECT {first} FROM {table} ORDER BY rowid LIMIT $1", [done[0] // 2])
               .fetchall()]
        assert col == sorted(col), suffix  # (the rows written after the last sort follow them)
    assert sorting.scan() == plain.scan()
    conds = [Cond("eq", _path(k), v) for k in META_KEYS for v in META_VALUES[:12]]
    conds += [Cond("has", _path(k), v) for k in META_KEYS for v in (1, "abc", None)]
    for flt in conds:
        if filter_pushable(sorting.capabilities, flt):
            assert sorting.scan(sorting.compile_filter(flt)) == plain.scan(plain.compile_filter(flt)), flt
    for text in ("alpha beta", "solar", "the grid storage"):
        keys, scores = sorting.bm25_candidates(text)
        want_keys, want_scores = plain.bm25_candidates(text)
        assert keys == want_keys and scores.tolist() == want_scores.tolist()
    sorting.close()
    plain.close()


def test_knn_rows_are_the_stored_rows_and_a_write_forgets_them(tmp_path: Path) -> None:
    """knn reads its hits' rows and vectors in the same statement (``fetch`` and ``similarities`` of those
    keys answer from it): the same rows and vectors the tables give, and after any write the tables'
    own again; a file written before ``<p>_units.metadata`` gets the column on open."""
    rng = np.random.default_rng(3)
    path = tmp_path / "s.duckdb"
    store = opened(path)
    store.upsert(small_corpus(rng))
    q = unit_vectors(rng, 1)
    keys = [k for k, _ in store.knn(q, 4)[0]]
    via_knn = [row_tuple(r) for r in store.fetch(keys)]
    vecs = store.vectors(keys)
    store._seen.rows = None  # what the tables give
    assert via_knn == [row_tuple(r) for r in store.fetch(keys)]
    assert np.array_equal(vecs, store.vectors(keys))
    assert np.array_equal(store.similarities(q, keys), q @ vecs.T)
    store.knn(q, 4)
    first = store.fetch(keys)[0]
    store.upsert([make_doc(first.doc_id, ["Replaced."], {"new": True}, 9, unit_vectors(rng, 1))])
    assert [r.doc_id for r in store.fetch(keys)] == [r[0] for r in via_knn if r[0] != first.doc_id]
    store._conn.execute('ALTER TABLE "nlql_units" DROP COLUMN metadata')  # as a version before the column
    store.close()
    store = opened(path)
    hits = store.knn(q, 4)[0]
    rows = store.fetch([k for k, _ in hits])
    store._seen.rows = None
    assert [row_tuple(r) for r in rows] == [row_tuple(r) for r in store.fetch([k for k, _ in hits])]
    assert any(r.metadata == {"new": True} for r in store.fetch(store.scan()))
    store.close()


def test_filtered_knn_reads_each_rows_fields_packed_as_the_tables_hold_them(tmp_path: Path) -> None:
    """Under a selective filter knn reads each passing row's fields packed in one column
    (``<p>_units.packed``): the rows ``fetch`` then gives are the tables' own for any text (control
    characters, the separator's characters, lone surrogates, in the id, the sentence, the text after it
    and the metadata); a file written before the column gets it on open, and one opened read-only is
    read from the separate columns."""
    rng = np.random.default_rng(11)
    texts = [*HOSTILE, "\x01\x01", "a\x01\x01b", "\x01\x02\x02\x02\x02", "end\x01"]
    docs = []
    for i, text in enumerate(texts):
        units = [UnitRecord(position=0, content=text, start=0, end=len(text), tail=texts[-1 - i]),
                 UnitRecord(position=1, content="plain", start=len(text) + 1, end=len(text) + 6)]
        docs.append(DocRecord(doc_id=f"{text[:40]}#{i}", text=text + " plain", metadata={"g": i % 2, "v": text},
                              units=units, vectors=unit_vectors(rng, 2), seq=i + 1))
    path = tmp_path / "p.duckdb"
    store = opened(path)
    store.upsert(docs)
    flt = store.compile_filter(Cond("eq", ("meta", "g"), 1))
    q = unit_vectors(rng, 1)

    def rows_via_knn(s: DuckDBStore) -> tuple[list[Any], list[Any]]:
        hits = s.knn(q, 50, flt)[0]
        assert s.last_stats["scan"] == "numpy"  # (read with its fields, ranked in numpy)
        via = [row_tuple(r) for r in s.fetch([k for k, _ in hits])]
        s._seen.rows = None  # what the tables give
        return via, [row_tuple(r) for r in s.fetch([k for k, _ in hits])]

    via, tables = rows_via_knn(store)
    assert via == tables and len(via) == sum(i % 2 for i in range(len(texts))) * 2
    assert {r[2] for r in via} >= {t for i, t in enumerate(texts) if i % 2}
    # rows an older version wrote into the same file (no packed fields) are read from the tables
    store._conn.execute('UPDATE "nlql_units" SET packed = NULL WHERE position = 1')
    store._generation += 1
    assert rows_via_knn(store) == (via, tables)
    store._conn.execute('UPDATE "nlql_units" SET packed = concat_ws(chr(1) || chr(1), doc_id, content, '
                        'start::VARCHAR, "end"::VARCHAR, tail, metadata)')
    store._conn.execute('ALTER TABLE "nlql_units" DROP COLUMN packed')  # as a version before the column
    store.close()
    old = DuckDBStore(path, read_only=True)
    old.open(DIM)
    assert not old.dialect.unit_packed
    assert rows_via_knn(old) == (via, tables)
    old.close()
    store = opened(path)
    assert store.dialect.unit_packed
    assert rows_via_knn(store) == (via, tables)
    store.close()


def test_document_pages_by_bm25_and_fusions_read_only_their_arms_documents(tmp_path: Path) -> None:
    from adapter_kit import check_document_arms

    check_document_arms("duckdb:///" + str(tmp_path / "docs.duckdb").lstrip("/"))


def test_a_call_in_many_batches_leaves_the_tables_sorted_after_its_last_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's batches of one ``add_texts`` call are read as columns and the tables are sorted once,
    after the last one (``DuckDBStore._finish``): every term and metadata row is in the sorted part, and
    searches answer as on a store that never sorts."""
    texts = [f"Solar grid {i} storage report number {i % 7} by Alice" for i in range(60)]
    metas = [{"tag": f"t{i % 5}", "year": 2000 + i % 3} for i in range(60)]
    engines = {}
    for name, floor in (("sorting", 0), ("plain", 10**12)):
        store = DuckDBStore()
        monkeypatch.setattr(store, "CLUSTER_MIN_ROWS", floor)
        engines[name] = eng = Engine(store=store, embedder=HashEmbedder(dim=16), warm_up=False)
        eng.add_texts(texts, ids=[f"d{i}" for i in range(60)], metadatas=metas, batch_size=7)
    conn = engines["sorting"].store._conn
    for suffix, first in (("terms", "term"), ("flat", "path")):
        n = conn.execute(f'SELECT count(*) FROM "nlql_{suffix}"').fetchone()[0]
        done = conn.execute("SELECT value::BIGINT FROM nlql_meta WHERE key = $1", [f"sorted_rows:{suffix}"]).fetchone()
        assert done == (n,), suffix
        col = [r[0] for r in conn.execute(f'SELECT {first} FROM "nlql_{suffix}" ORDER BY rowid').fetchall()]
        assert col == sorted(col), suffix
    for q in ('SELECT SENTENCE LET kw = BM25(content, "solar alice") ORDER BY kw DESC LIMIT 5',
              'SELECT SENTENCE WHERE meta.tag == "t3" AND meta.year == 2001 LIMIT 10'):
        got = [(h.doc_id, h.content) for h in engines["sorting"].search(q)]
        assert got and got == [(h.doc_id, h.content) for h in engines["plain"].search(q)]
    for eng in engines.values():
        eng.close()


def test_a_write_that_fails_after_its_rows_went_in_leaves_every_table_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch is one transaction: a statement failing after the documents, sentences, term and metadata
    rows were inserted (the BM25 statistics' update, the write's last) takes them all back, and the
    documents committed before stay whole; the same batch written again then succeeds."""
    eng = Engine(store=DuckDBStore(), embedder=HashEmbedder(dim=16), warm_up=False)
    eng.add_texts(["Alice met Bob in Paris. They talked.", "Solar storage grows."], ids=["a", "b"],
                  metadatas=[{"tag": "x", "l": [1, 2]}, {"tag": "y"}])
    conn = eng.store._conn
    tables = ("docs", "units", "terms", "flat", "members", "entity_links", "entity_edges", "bm25", "meta")

    def snapshot() -> dict[str, list[Any]]:
        return {t: conn.execute(f'SELECT * FROM "nlql_{t}" ORDER BY ALL').fetchall() for t in tables}

    before = snapshot()
    monkeypatch.setattr(eng.store.dialect, "add_term_stats", lambda n, length: "SELECT no_such_column FROM nlql_bm25")
    texts = ["Carol met Dave in Rome.", "Alice went home. Bob stayed in Paris."]
    with pytest.raises(NLQLError):
        eng.add_texts(texts, ids=["c", "a"], metadatas=[{"tag": "z", "l": [3]}, {"tag": "w"}])
    assert snapshot() == before
    monkeypatch.undo()
    eng.add_texts(texts, ids=["c", "a"], metadatas=[{"tag": "z", "l": [3]}, {"tag": "w"}])
    got = {h.doc_id: h.content for h in eng.search("SELECT DOCUMENT")}
    assert got == {"a": "Alice went home. Bob stayed in Paris.", "b": "Solar storage grows.", "c": "Carol met Dave in Rome."}
    eng.close()


def test_a_write_inserts_its_metadata_rows_as_one_sorted_run() -> None:
    """Each write's ``<p>_flat`` rows go in ordered by (path, s, n, t), nulls last, as DuckDB's own ORDER BY
    puts them (the store orders them in Python), and each document's MAP holds its own records."""
    metas = [{"tag": f"t{i % 7}", "n": [3, 1.5, -2, 0, None, 10**15][i % 6], "b": i % 2 == 0, "s": ["é", "a", "Z", "1", "\x00x", ""][i % 6],
              "when": ["2024-01-02", "1999-12-31T10:00:00", "not a date"][i % 3], "deep": {"k": i % 4, "z": None}}
             for i in range(40)]
    metas[5] = {"only": "one"}
    metas[6] = {}
    store = DuckDBStore()
    eng = Engine(store=store, embedder=HashEmbedder(dim=16), warm_up=False)
    eng.add_texts([f"Text {i}." for i in range(40)], ids=[f"d{i}" for i in range(40)], metadatas=metas)
    conn = store._conn
    rows = conn.execute('SELECT path, s, n, t FROM "nlql_flat" ORDER BY rowid').fetchall()
    assert rows == conn.execute('SELECT path, s, n, t FROM "nlql_flat" ORDER BY path, s, n, t, rowid').fetchall()
    assert len({r[0] for r in rows}) > 5 and any(r[1] is None for r in rows)
    # the MAP column and <p>_flat hold the same records per document
    maps = conn.execute('SELECT doc_id, map_entries(mflat) FROM "nlql_docs"').fetchall()
    flat = conn.execute('SELECT doc_id, path, s, f, n, t, b FROM "nlql_flat"').fetchall()
    def key(r: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple((x is None, x) for x in r)

    from_maps = sorted(((d, e["key"], *e["value"].values()) for d, entries in maps for e in entries), key=key)
    assert from_maps == sorted(flat, key=key)
    assert eng.search('SELECT DOCUMENT WHERE meta.tag == "t3"')
    eng.close()
