"""PgVectorStore against a real PostgreSQL 16 + pgvector (pgserver), compared with nlql.values."""

from __future__ import annotations

import json
import sys
import threading
from datetime import datetime
from typing import Any

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from sql_kit import (  # noqa: E402
    DIM,
    HOSTILE,
    LITERALS,
    META_KEYS,
    NEEDLES,
    PATTERNS,
    UTC,
    _path,
    build_filter_corpus,
    filters,
    make_doc,
    unit_vectors,
)

from nlql import values as V  # noqa: E402
from nlql.errors import BackendError, MissingDependencyError, NLQLTimeoutError, UnsupportedError  # noqa: E402
from nlql.pushdown import Cond, FAnd, Filter, FOr, filter_pushable  # noqa: E402
from nlql.stores.base import DocRecord, Row  # noqa: E402
from nlql.stores.pgvector import (  # noqa: E402
    PgVectorStore,
    escape_text,
    flatten_metadata,
    like_sql,
    unescape_text,
)
from nlql.stores.pyfilter import row_passes  # noqa: E402


def open_store(dsn: str, **kw: Any) -> PgVectorStore:
    store = PgVectorStore(dsn, **kw)
    store.open(DIM)
    return store


def row_tuple(r: Row) -> tuple[Any, ...]:
    return (r.doc_id, r.position, r.content, r.metadata, r.seq, r.start, r.end, r.tail)


# ------------------------------------------------------------------------------------ pure parts


_any_char = st.one_of(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()),
                     st.characters(min_codepoint=0, max_codepoint=12),
                     st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=()))


@given(st.text(alphabet=_any_char, max_size=30))
def test_escape_round_trips_any_string(s: str) -> None:
    e = escape_text(s)
    assert "\x00" not in e
    assert unescape_text(e) == s
    e.encode("utf-8")  # storable: no lone surrogate left


_low = st.text(alphabet=st.sampled_from(["\x00", "\x01", "\x02", "\x08", "\t", "a", "b", "%", "_", "é"]),
               max_size=8)


@given(_low, _low)
def test_escape_preserves_order_equality_and_substrings(a: str, b: str) -> None:
    ea, eb = escape_text(a), escape_text(b)
    assert (a < b) == (ea < eb)  # code-point order == COLLATE "C" byte order
    assert (a == b) == (ea == eb)
    assert (a in b) == (ea in eb)
    assert (a.casefold() in b.casefold()) == (escape_text(a.casefold()) in escape_text(b.casefold()))


def test_like_translation_shapes() -> None:
    assert like_sql("a%b") == ("LIKE", "a%b")
    assert like_sql("50\\%") == ("LIKE", "50\\%")
    assert like_sql("trailing\\") == ("LIKE", "trailing\\\\")  # a lone trailing backslash is literal
    op, rx = like_sql("a_c")
    assert op == "~" and rx.startswith("^a") and rx.endswith("c$")


def test_flattened_metadata_is_typed_by_values_module() -> None:
    flat = flatten_metadata({"y": "2025", "d": "2024-06-01", "s": "Straße", "b": False, "big": 10**400,
                             "n": None, "o": {"k": [1]}})
    assert flat['["y"]'] == {"s": "2025", "n": 2025.0}
    assert flat['["d"]']["t"] == 1717200000 * 10**6
    assert flat['["s"]'] == {"s": "Straße", "f": "strasse"}
    assert flat['["b"]'] == {"b": False}
    assert flat['["big"]'] == {}  # present (IS NOT NULL) but never comparable
    assert '["n"]' not in flat
    assert flat['["o", "k"]'] == {}


def test_capabilities_are_declared_honestly() -> None:
    caps = PgVectorStore("postgresql://unused", exact=True).capabilities
    assert caps.NAME == "pgvector"
    assert "match" not in caps.OPS and "not_match" not in caps.OPS
    assert caps.OR and caps.NESTED_KEYS and caps.NUMERIC_STRINGS and caps.FLOAT_EQUALITY and caps.DATETIMES
    assert caps.EXACT and caps.SCORE_THRESHOLD
    assert not PgVectorStore("postgresql://unused").capabilities.EXACT
    assert PgVectorStore("postgresql://unused", hnsw=False).capabilities.EXACT


def test_missing_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(MissingDependencyError) as info:
        PgVectorStore("postgresql://unused")
    assert "nlql-engine[pgvector]" in str(info.value)


def test_compiled_filter_binds_every_value() -> None:
    store = PgVectorStore("postgresql://unused")
    evil = "'; DROP TABLE nlql_docs; --"
    nf = store.compile_filter(FOr((Cond("eq", ("meta", evil), evil), Cond("like", ("content",), evil + "_"))))
    assert "DROP" not in nf.text and "DROP" not in str(nf.native)
    assert any(evil in str(p) for p in nf.extra["params"])
    assert nf.text.count("%s") == len(nf.extra["params"])
    with pytest.raises(UnsupportedError, match="match"):
        store.compile_filter(Cond("match", ("content",), "a.*b"))


# ------------------------------------------------------------------------------ ingest and reads


@pytest.fixture
def store(pg_dsn: str) -> Any:
    s = open_store(pg_dsn)
    yield s
    s.close()


def small_corpus(rng: np.random.Generator) -> list[DocRecord]:
    return [
        make_doc("a", ["Alpha one.", "Alpha two.", "Alpha three."], {"k": 1, "tag": "x"}, 1, unit_vectors(rng, 3)),
        make_doc("b", ["Beta one."], {"k": 2.5, "tag": "y", "deep": {"er": "2025"}}, 2, unit_vectors(rng, 1)),
        make_doc("c", ["Gamma one.", "Gamma two."], {}, 3, unit_vectors(rng, 2)),
    ]


def test_ingest_fetch_and_document_rows(store: PgVectorStore) -> None:
    rng = np.random.default_rng(1)
    docs = small_corpus(rng)
    store.upsert(docs)
    assert store.count() == 6
    assert store.max_seq() == 3
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


def test_upsert_replaces_by_id_without_stale_rows(store: PgVectorStore) -> None:
    rng = np.random.default_rng(2)
    store.upsert(small_corpus(rng))
    store.upsert([make_doc("a", ["Only one now."], {"k": 9}, 4, unit_vectors(rng, 1))])
    assert store.count() == 4
    rows = store.document_rows(["a"])["a"]
    assert [(r.content, r.metadata, r.seq) for r in rows] == [("Only one now.", {"k": 9}, 4)]
    # the same id twice in one batch: the last one wins
    store.upsert([make_doc("d", ["first"], {}, 5, unit_vectors(rng, 1)),
                  make_doc("d", ["second", "third"], {}, 6, unit_vectors(rng, 2))])
    assert [r.content for r in store.document_rows(["d"])["d"]] == ["second", "third"]
    # a document without sentences still exists
    store.upsert([make_doc("empty", [], {"e": 1}, 7, np.zeros((0, DIM), dtype=np.float32))])
    assert store.document_rows(["empty"]) == {"empty": []}
    assert store.max_seq() == 7


def test_delete_returns_documents_deleted(store: PgVectorStore) -> None:
    store.upsert(small_corpus(np.random.default_rng(3)))
    assert store.delete(["a", "nope", "a"]) == 1
    assert store.count() == 3
    assert store.delete([]) == 0
    assert store.delete(["b", "c"]) == 2
    assert store.count() == 0 and store.scan() == []
    assert store.max_seq() == 3  # like the built-in store: insertion order never goes back


def test_concurrent_writers_replace_cleanly(pg_dsn: str) -> None:
    stores = [open_store(pg_dsn), open_store(pg_dsn)]
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        rng = np.random.default_rng(n)
        try:
            for i in range(15):
                stores[n].upsert([make_doc(f"shared{j}", ["x", "y"], {"w": n}, 10 * i + n, unit_vectors(rng, 2))
                                  for j in range(3)])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert stores[0].count() == 6 and stores[1].count() == 6
    for s in stores:
        s.close()


def test_reattach_sees_everything_and_checks_dim(pg_dsn: str) -> None:
    rng = np.random.default_rng(4)
    first = open_store(pg_dsn)
    docs = small_corpus(rng)
    first.upsert(docs)
    expected = [row_tuple(r) for r in first.fetch(first.scan())]
    first.close()
    second = open_store(pg_dsn)
    assert second.count() == 6 and second.max_seq() == 3
    assert [row_tuple(r) for r in second.fetch(second.scan())] == expected
    q = rng.normal(size=(1, DIM)).astype(np.float32)
    assert second.knn(q, 3)[0]  # vectors came back too
    with pytest.raises(BackendError, match="16-dimensional"):
        PgVectorStore(pg_dsn).open(DIM + 1)
    other = PgVectorStore(pg_dsn, table_prefix='we"ird; DROP TABLE nlql_docs; --')
    other.open(DIM + 1)  # another prefix is another store
    assert other.count() == 0 and second.count() == 6
    second.close()
    other.close()


# -------------------------------------------------------------------------------------------- knn


def brute_force(keys: list[int], seqpos: list[tuple[int, int]], matrix: np.ndarray, q: np.ndarray,
                k: int) -> list[int]:
    scores = matrix @ q
    order = sorted(range(len(keys)), key=lambda i: (-scores[i], seqpos[i]))
    return [keys[i] for i in order[:k]]


def test_exact_knn_equals_numpy_brute_force(pg_dsn: str) -> None:
    rng = np.random.default_rng(5)
    vecs = unit_vectors(rng, 600)
    vecs[7] = vecs[3]  # an exact tie: insertion order decides
    vecs[300] = vecs[3]
    docs = [make_doc(f"d{i:03d}", [f"s{j}" for j in range(6)], {"g": i % 7}, i, vecs[i * 6:(i + 1) * 6])
            for i in range(100)]
    store = open_store(pg_dsn, exact=True)
    store.upsert(docs)
    keys = store.scan()
    seqpos = [(i // 6, i % 6) for i in range(600)]
    queries = np.vstack([unit_vectors(rng, 8), vecs[3:4]])
    got = store.knn(queries, 10)
    assert store.last_stats["path"] == "exact"
    for q, hits in zip(queries, got, strict=True):
        assert [k for k, _ in hits] == brute_force(keys, seqpos, vecs, q, 10)
        np.testing.assert_allclose([s for _, s in hits], np.sort(vecs @ q)[::-1][:10], atol=1e-5)
    tied = [k for k, _ in got[-1][:3]]
    assert tied == [keys[3], keys[7], keys[300]]
    # with a filter and a threshold
    flt = store.compile_filter(Cond("in", ("meta", "g"), (1, "3")))
    sub = [i for i in range(600) if (i // 6) % 7 in (1, 3)]
    for q, hits in zip(queries, store.knn(queries, 5, flt, min_score=0.2), strict=True):
        want = [k for k in brute_force([keys[i] for i in sub], [seqpos[i] for i in sub], vecs[sub], q, 5)]
        scores = {keys[i]: float(vecs[i] @ q) for i in sub}
        assert [k for k, _ in hits] == [k for k in want if scores[k] >= 0.2]
    store.close()


@pytest.fixture(scope="module")
def big_store(pg_module_dsn: str) -> Any:
    """5,000 sentences; meta.rare is set on 5 of them (0.1%)."""
    rng = np.random.default_rng(6)
    centers = unit_vectors(rng, 20)
    labels = rng.integers(0, 20, 5000)
    vecs = centers[labels] + 0.3 * rng.normal(size=(5000, DIM)).astype(np.float32)
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    docs = []
    for i in range(500):
        meta: dict[str, Any] = {"bucket": i % 10}
        if i % 100 == 0:
            meta["rare"] = True
        docs.append(make_doc(f"doc{i}", [f"sentence {j}" for j in range(10)], meta, i, vecs[i * 10:(i + 1) * 10]))
    store = open_store(pg_module_dsn, index_threshold=0)  # the first knn builds the index
    store.upsert(docs)
    yield store, vecs
    store.close()


def test_selective_filter_returns_min_k_matches(big_store: Any, pg_module_dsn: str) -> None:
    store, vecs = big_store
    rare = store.compile_filter(Cond("eq", ("meta", "rare"), True))  # 5 docs × 10 sentences = 1%
    one_doc = store.compile_filter(FAnd((Cond("eq", ("meta", "rare"), True), Cond("eq", ("position",), 3))))
    q = vecs[:4]
    for k in (3, 10, 80):
        for res in store.knn(q, k, rare):
            assert len(res) == min(k, 50)
        for res in store.knn(q, k, one_doc):  # 5 rows: 0.1%
            assert len(res) == min(k, 5)
    assert store.last_stats["path"] == "exact"  # the estimate (or count) said: few rows match
    # force the HNSW path: it must widen or fall back, never return a short list
    forced = open_store(pg_module_dsn, exact_threshold=0, index_threshold=0, ef_search=4, plan="index")
    for res in forced.knn(q, 4, rare):
        assert len(res) == 4
    assert forced.last_stats["path"] in ("hnsw", "hnsw+exact", "mixed")
    assert forced.last_stats["rounds"] > 1  # ef_search 4 under a 1% filter under-fills at first
    exact = open_store(pg_module_dsn, exact=True)
    for a, b in zip(forced.knn(q, 4, rare), exact.knn(q, 4, rare), strict=True):
        assert [k for k, _ in a] == [k for k, _ in b]
    forced.close()
    exact.close()


def test_index_is_built_lazily(pg_dsn: str) -> None:
    rng = np.random.default_rng(12)
    store = open_store(pg_dsn, index_threshold=50)
    store.upsert([make_doc(f"d{i}", ["a", "b"], {}, i, unit_vectors(rng, 2)) for i in range(20)])
    q = unit_vectors(rng, 1)
    assert len(store.knn(q, 5)[0]) == 5
    assert store.last_stats["path"] == "exact" and "no HNSW index" in store.last_stats["reason"]
    assert store.build_index() is True and store.build_index() is False
    assert len(store.knn(q, 5)[0]) == 5
    assert store.last_stats["path"] == "hnsw"
    other = open_store(pg_dsn, index_threshold=0)  # finds the index another store built
    other.knn(q, 5)
    assert "index_built" in other.last_stats and other.last_stats["index_built"] is False
    assert other.last_stats["path"] == "hnsw"
    store.close()
    other.close()


def test_hnsw_unfiltered_recall_and_threshold(big_store: Any) -> None:
    store, vecs = big_store
    keys = store.scan()
    q = vecs[10:30]
    got = store.knn(q, 10)
    assert store.last_stats["path"] == "hnsw"
    recall = np.mean([len({k for k, _ in hits} & {keys[i] for i in np.argsort(-(vecs @ v))[:10]}) / 10
                      for v, hits in zip(q, got, strict=True)])
    assert recall >= 0.9
    for hits in store.knn(q, 50, min_score=0.9):
        assert all(s >= 0.9 for _, s in hits)
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    assert store.knn(q, 0) == [[] for _ in range(len(q))]


# -------------------------------------------------------------------------- filters == nlql.values

@pytest.fixture(scope="module")
def filter_store(pg_server: Any) -> Any:
    dsn = pg_server.new_database()
    store = open_store(dsn, exact=True)
    store.upsert(build_filter_corpus(np.random.default_rng(7)))
    rows = store.fetch(store.scan())
    yield store, rows
    store.close()


def _needs_exact(flt: Filter) -> bool:
    from nlql import values as V
    from nlql.pushdown import filter_leaves

    return any(V.needs_exact(v) for c in filter_leaves(flt)
               for v in (c.value if isinstance(c.value, tuple) else (c.value,)))


def check_filter(store: PgVectorStore, rows: list[Row], flt: Filter) -> None:
    if not store.capabilities.EXACT_INTS and _needs_exact(flt):
        # a number at or beyond 2^53: float64 views cannot compare it exactly, so the planner keeps it residual
        assert not filter_pushable(store.capabilities, flt)
        return
    assert filter_pushable(store.capabilities, flt)
    want = [r.key for r in rows if row_passes(flt, r)]
    assert store.scan(store.compile_filter(flt)) == want, flt


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flt=filters)
def test_random_filters_match_python_semantics(filter_store: Any, flt: Filter) -> None:
    store, rows = filter_store
    check_filter(store, rows, flt)


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


# ---------------------------------------------------------------------------------- hostile input

def test_hostile_values_round_trip_and_filter(pg_dsn: str) -> None:
    rng = np.random.default_rng(8)
    conn = psycopg.connect(pg_dsn, autocommit=True)
    tables_before = conn.execute("SELECT count(*) FROM pg_tables").fetchone()[0]
    store = open_store(pg_dsn, exact=True)
    tables_before += 8  # the store's own tables (docs, units, meta, info; BM25: terms, bm25; GRAPH: entity_links, entity_edges)
    docs = []
    for i, h in enumerate(HOSTILE):
        meta = {h: h, "v": h, "nest": {h: {"k": h}}, "num": "1\x00"}
        docs.append(make_doc(h, [h, f"{h} tail"], meta, i + 1, unit_vectors(rng, 2)))
        docs[-1].units[0].tail = h
        docs[-1].text = h + "\x00" + h
    store.upsert(docs)
    rows = store.fetch(store.scan())
    assert len(rows) == 2 * len(HOSTILE)
    for d in docs:
        got = store.document_rows([d.doc_id])[d.doc_id]
        assert [r.content for r in got] == [u.content for u in d.units]
        assert got[0].tail == d.units[0].tail
        assert got[0].metadata == d.metadata
        assert got[0].doc_id == d.doc_id
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
    assert conn.execute("SELECT count(*) FROM pg_tables").fetchone()[0] == tables_before
    assert store.count() == 2 * (len(HOSTILE) - 2)
    conn.close()
    store.close()


# ---------------------------------------------------------------------------------- robustness


def test_concurrent_schema_creation(pg_server: Any) -> None:
    dsn = pg_server.new_database(with_vector=False)  # CREATE EXTENSION races too
    errors: list[BaseException] = []
    stores: list[PgVectorStore] = []
    barrier = threading.Barrier(4)

    def worker() -> None:
        try:
            s = PgVectorStore(dsn)
            barrier.wait()
            s.open(DIM)
            stores.append(s)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    rng = np.random.default_rng(9)
    stores[0].upsert(small_corpus(rng))
    assert all(s.count() == 6 for s in stores)
    for s in stores:
        s.close()


def test_lost_connection_raises_then_reconnects(store: PgVectorStore, pg_dsn: str) -> None:
    store.upsert(small_corpus(np.random.default_rng(10)))
    pid = store._connection().info.backend_pid
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    with pytest.raises(BackendError, match="pgvector"):
        store.count()
    assert store.count() == 6  # reconnected with the kept dsn
    assert len(store.knn(np.ones((1, DIM), dtype=np.float32), 2)[0]) == 2


def test_passed_in_connection(pg_dsn: str) -> None:
    conn = psycopg.connect(pg_dsn, autocommit=True)
    store = PgVectorStore(connection=conn)
    store.open(DIM)
    store.upsert(small_corpus(np.random.default_rng(13)))
    assert store.count() == 6
    store.close()
    assert not conn.closed  # not ours to close
    conn.close()
    with psycopg.connect(pg_dsn) as plain, pytest.raises(ValueError, match="autocommit"):
        PgVectorStore(connection=plain)


def test_statement_timeout(pg_dsn: str) -> None:
    store = open_store(pg_dsn, statement_timeout_ms=50)
    slow = psycopg.sql.SQL("SELECT count(*) FROM pg_sleep(1)")
    with pytest.raises(NLQLTimeoutError, match="50 ms"):
        store._guard(lambda: store._scalar(slow))
    assert store.count() == 0  # the connection is still usable
    store.close()


def test_metadata_numbers_keep_their_type(store: PgVectorStore) -> None:
    meta = {"f": 1e16, "i": 10**16, "tiny": 5e-324, "neg0": -0.0, "huge": 10**400, "nan": float("nan"),
            "when": datetime(2024, 6, 1, tzinfo=UTC)}
    store.upsert([make_doc("m", ["x"], meta, 1, unit_vectors(np.random.default_rng(11), 1))])
    got = store.fetch(store.scan())[0].metadata
    assert got == V.normalize_metadata(meta)
    assert isinstance(got["f"], float) and isinstance(got["i"], int)
    assert json.dumps(got["neg0"]) == "-0.0"


# ------------------------------------------------------------------- several processes, one database

_CHILD = r'''
import json, sys
from datetime import datetime, timezone
from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.stores.pgvector import PgVectorStore

engine = Engine(embedder=HashEmbedder(dim=16), store=PgVectorStore(sys.argv[1], exact=True, table_prefix="two"),
                clock=lambda: datetime(2026, 1, 5, tzinfo=timezone.utc), warm_up=False)
for line in sys.stdin:
    query = json.loads(line)
    hits = engine.search(query)
    print(json.dumps([[h.id, h.scores] for h in hits]), flush=True)
'''

TWO_PROCESS_QUERIES = [
    'SELECT SENTENCE LET kw = BM25(content, "zebra stripes") WHERE kw > 0 ORDER BY kw DESC',  # issue 16's query
    'SELECT SENTENCE LET kw = BM25(content, "zebra stripes") ORDER BY kw DESC LIMIT 5',  # one SQL statement
    'SELECT DOCUMENT LET kw = BM25(content, "zebra stripes") WHERE kw > 0 ORDER BY kw DESC',
    'SELECT SENTENCE LET s = 0.5 * SIMILARITY(content, "zebra") + BM25(content, "stripes") ORDER BY s DESC LIMIT 4',
    'SELECT SENTENCE LET a = SIMILARITY(content, "zebra"), k = BM25(content, "zebra stripes"), f = RRF(a, k) '
    'ORDER BY f DESC LIMIT 4',
]


def test_second_process_sees_writes_at_once_with_identical_bm25(pg_dsn: str) -> None:
    """Issue 16: an engine in another process on the same database answers from the tables, not from
    what it saw first: new and deleted documents and the changed BM25 statistics show at once."""
    import os
    import subprocess
    from pathlib import Path

    from nlql import Engine
    from nlql.embedders import HashEmbedder

    clock = datetime(2026, 1, 5, tzinfo=UTC)
    writer = Engine(embedder=HashEmbedder(dim=16), store=PgVectorStore(pg_dsn, exact=True, table_prefix="two"),
                    clock=lambda: clock, warm_up=False)
    reference = Engine(embedder=HashEmbedder(dim=16), clock=lambda: clock, warm_up=False)
    first = [("z1", "Zebra stripes confuse flies. Horses have none."), ("z2", "A zebra crossing has stripes.")]
    later = [("z3", "Stripes, stripes and more zebra stripes."), ("z4", "The zebra is striped. No stripes here?")]
    for e in (writer, reference):
        for doc_id, text in first:
            e.add_text(text, id=doc_id)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, pg_dsn], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env, cwd=str(root))
    try:
        def ask(query: str) -> list[list[Any]]:
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(json.dumps(query) + "\n")
            child.stdin.flush()
            line = child.stdout.readline()
            assert line, "the second engine process died"
            out: list[list[Any]] = json.loads(line)
            return out

        def local(e: Engine, query: str) -> list[list[Any]]:
            return [[h.id, h.scores] for h in e.search(query)]

        before = {q: ask(q) for q in TWO_PROCESS_QUERIES}
        assert sorted(r[0] for r in before[TWO_PROCESS_QUERIES[0]]) == ["z1#0", "z2#0"]
        for e in (writer, reference):
            for doc_id, text in later:
                e.add_text(text, id=doc_id)
            e.delete("z2")
        for q in TWO_PROCESS_QUERIES:
            got, mine, want = ask(q), local(writer, q), local(reference, q)
            assert got == mine, q  # the same rows and bit-identical scores in both processes
            assert [r[0] for r in got] == [r[0] for r in want], q
            for (_, g), (_, w) in zip(got, want):
                assert g.keys() == w.keys()
                for k in w:
                    assert g[k] == pytest.approx(w[k], abs=1e-6), (q, k)
            assert got != before[q], q
        # BM25 read from the term tables scores exactly as the built-in index does
        assert ask(TWO_PROCESS_QUERIES[0]) == local(reference, TWO_PROCESS_QUERIES[0])
        ids = {r[0] for r in ask(TWO_PROCESS_QUERIES[0])}
        assert ids == {"z1#0", "z3#0", "z4#0", "z4#1"}
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=60)
        writer.close()


@pytest.mark.parametrize("prefix", ["p%s", "50%_off", "%(x)s%%"])
def test_table_prefix_with_percent_runs_every_statement(pg_dsn: str, prefix: str) -> None:
    """Issue 20: a ``%`` in ``table_prefix`` broke hybrid SQL ("3 placeholders but 2 parameters")."""
    from nlql import Engine
    from nlql.embedders import HashEmbedder

    store = PgVectorStore(pg_dsn, exact=True, table_prefix=prefix)
    e = Engine(embedder=HashEmbedder(dim=16), store=store, warm_up=False)
    e.add_text("Zebra stripes are nice. Cats too.", id="a", metadata={"k": "v%"})
    e.add_text("Another zebra.", id="b")
    hybrid = ('SELECT SENTENCE LET s = SIMILARITY(content, "zebra"), k = BM25(content, "zebra"), f = RRF(s, k) '
              'WHERE meta.k LIKE "v%" ORDER BY f DESC LIMIT 3')
    assert [h.id for h in e.search(hybrid)] == ["a#0", "a#1"]
    assert len(e.search('SELECT SENTENCE LET k = BM25(content, "zebra") WHERE k > 0')) == 2
    # GRAPH: its own statement, and one CTE chain of the hybrid statement (both over the entity tables)
    assert [h.id for h in e.search('SELECT SENTENCE LET g = GRAPH("Zebra") WHERE g IS NOT NULL')] == ["a#0"]
    fused = ('SELECT SENTENCE LET k = BM25(content, "zebra"), g = GRAPH("Zebra"), f = RRF(k, g) '
             'ORDER BY f DESC LIMIT 3')
    assert e.explain(fused).to_dict()["lowering"]["strategy"] == "sql"
    assert [h.id for h in e.search(fused)][0] == "a#0"
    assert e.delete("b") and store.count() == 2
    store.set_info("k", "v")
    tables = psycopg.connect(pg_dsn, autocommit=True).execute(
        "SELECT tablename FROM pg_tables WHERE tablename LIKE %s ORDER BY 1", [prefix.replace("%", "\\%") + "\\_%"]
    ).fetchall()
    assert [t[0] for t in tables] == [f"{prefix}_{s}" for s in ("bm25", "docs", "entity_edges", "entity_links", "info",
                                                                "meta", "terms", "units")]
    e.close()


def test_info_record_persists_and_is_shared(pg_dsn: str) -> None:
    store = open_store(pg_dsn, table_prefix="inf")
    assert store.get_info("embedder") is None
    store.set_info("embedder", '{"name": "HashEmbedder", "dim": 16}')
    store.set_info("analyzer", "x\x00y")  # any text round-trips (NUL included)
    store.set_info("embedder", "replaced")
    other = open_store(pg_dsn, table_prefix="inf")  # another store on the same tables sees it at once
    assert other.get_info("embedder") == "replaced" and other.get_info("analyzer") == "x\x00y"
    assert open_store(pg_dsn, table_prefix="inf2").get_info("embedder") is None  # per table prefix
    with pytest.raises(ValueError):
        store.set_info("", "v")
    with pytest.raises(TypeError):
        store.set_info("k", 5)  # type: ignore[arg-type]
    store.close()
    other.close()


def test_bm25_candidates_read_only_the_filtered_rows_of_the_terms(pg_dsn: str) -> None:
    """The store scores BM25 from its term tables for the rows passing a pushed filter (KeywordStats'
    ``bm25_candidates``; the capability stays undeclared while recall's narrowing cannot take a dropped arm)."""
    from nlql import Engine
    from nlql.embedders import HashEmbedder

    texts = ["Solar panels and solar power.", "Wind power for the grid.", "Solar grid storage.", "Cats nap."]
    metas = [{"k": 1}, {"k": 2}, {"k": 1}, {"k": 1}]
    pg = Engine(embedder=HashEmbedder(dim=DIM), store=PgVectorStore(pg_dsn, exact=True), warm_up=False)
    ref = Engine(embedder=HashEmbedder(dim=DIM), warm_up=False)
    for e in (pg, ref):
        e.add_texts(texts, ids=[f"t{i}" for i in range(4)], metadatas=metas)
    store = pg.store
    keys, scores = store.bm25_candidates("solar power", store.compile_filter(Cond("eq", ("meta", "k"), 1)))
    got = {r.id: s for r, s in zip(store.fetch(keys), scores, strict=True)}
    want = {h.id: h.scores["kw"] for h in ref.search(
        'SELECT SENTENCE LET kw = BM25(content, "solar power") WHERE kw > 0 AND meta.k == 1')}
    assert got == want and set(got) == {"t0#0", "t2#0"}
    pg.close()


@pytest.mark.parametrize("in_sql", [False, True])
def test_term_rows_are_each_sentences_terms_counted(pg_dsn: str, in_sql: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The BM25 term rows written at ingest (counted in Python and copied with the keys read back, or,
    when those keys cannot be vouched for, sent as one text per sentence and split and counted in SQL)
    are exactly each sentence's escaped analyzer terms with their counts, for hostile text and for an
    analyzer that gives empty and repeated terms; a replaced document's rows go."""
    from collections import Counter

    from nlql.text.analyzer import Analyzer

    class Odd(Analyzer):
        def terms(self, text: str) -> list[str]:
            return [*super().terms(text), "", "", text[:3], text[:3]]

    rng = np.random.default_rng(11)
    store = open_store(pg_dsn, exact=True, analyzer=Odd())
    if in_sql:
        monkeypatch.setattr(store, "_written_keys", lambda *a: None)
    docs = [make_doc(f"d{i}", [h, f"{h} {h} tail"], {}, i + 1, unit_vectors(rng, 2)) for i, h in enumerate(HOSTILE)]
    docs.append(make_doc("empty", [""], {}, len(docs) + 1, unit_vectors(rng, 1)))
    store.upsert(docs)
    store.upsert([make_doc("d0", ["replaced words"], {}, len(docs) + 1, unit_vectors(rng, 1))])
    docs[0] = make_doc("d0", ["replaced words"], {}, len(docs) + 1, unit_vectors(rng, 1))
    want = Counter()
    lengths = {}
    for d in docs:
        for u in d.units:
            terms = store.analyzer.terms(u.content)
            lengths[(d.doc_id, u.position)] = len(terms)
            for t, n in Counter(terms).items():
                want[(d.doc_id, u.position, t)] = n
    with psycopg.connect(pg_dsn) as conn:
        got = {(unescape_text(doc), pos, unescape_text(term)): tf for doc, pos, term, tf in conn.execute(
            "SELECT u.doc_id, u.position, t.term, t.tf FROM nlql_terms t JOIN nlql_units u ON u.key = t.key")}
        nterms = {(unescape_text(doc), pos): n for doc, pos, n in conn.execute(
            "SELECT doc_id, position, nterms FROM nlql_units")}
        stats = conn.execute("SELECT n, total_len FROM nlql_bm25").fetchone()
    assert got == dict(want)
    assert ("d0", 0, "") in got and got[("d0", 0, "")] == 2
    assert nterms == lengths
    assert stats == (len(lengths), sum(lengths.values()))
    store.close()


def test_document_pages_by_bm25_and_fusions_read_only_their_arms_documents(pg_dsn: str) -> None:
    from adapter_kit import check_document_arms

    check_document_arms(pg_dsn)
