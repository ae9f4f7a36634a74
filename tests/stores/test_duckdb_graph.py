"""GRAPH on DuckDB (SPEC §9, §10): links and edges in two tables written with the document, the
activation computed by SQL (inside the one hybrid statement when fused), no graph in the engine; a file
written when names were kept in ``<prefix>_entities`` answers the same, in SQL once opened writable."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder

duckdb = pytest.importorskip("duckdb")

from nlql.stores.duckdb import DuckDBStore  # noqa: E402

CLOCK = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)
NOTES = [
    ("n1", "Russell reviewed the grammar with Moore. Keynes was away.", {"date": "2026-10-02"}),
    ("n2", "Moore asked about the type checker. Keynes joined late.", {"date": "2026-10-20T09:00:00Z"}),
    ("n3", "Russell wrote the letter to Frege about the paradox. Frege replied within a week.", {"date": "2026-06-01"}),
    ("n4", "Wittgenstein proposed a new notation. Ramsey translated it for Keynes.", {"date": "soon"}),
    ("n5", "The lecture notes on logic are ready.", {"entities": ["Bertrand Russell"], "date": "2026-10-15"}),
    ("n6", "Ramsey and Moore met Russell in October about the letter.", {}),
]
QUERIES = [
    ("SELECT SENTENCE LET g = GRAPH($q, hops => 2) WHERE g IS NOT NULL ORDER BY g DESC", "who mentioned Russell?"),
    ("SELECT SENTENCE LET g = GRAPH($q) WHERE g IS NOT NULL ORDER BY g DESC LIMIT 3", "Keynes and Bertrand Russell"),
    ("SELECT SENTENCE LET g = GRAPH($q, hops => 3, decay => 0.9), k = BM25(content, $q), f = RRF(g, k) "
     "ORDER BY f DESC LIMIT 4", "Frege paradox"),
    ("SELECT DOCUMENT LET g = GRAPH($q, hops => 1) WHERE g IS NOT NULL ORDER BY g DESC", "Ramsey"),
]
# the query: four arms, GRAPH among them, one statement
FOUR_ARMS = ("SELECT SENTENCE LET s = SIMILARITY(content, $q), k = BM25(content, $q), g = GRAPH($q, hops => 2), "
             "t = TEMPORAL(meta.date, $q), f = RRF(s, k, g, t) ORDER BY f DESC LIMIT 8")
TEXTS = ("what did Russell say last month?", "Keynes in October 2026", "Frege and the paradox in June 2026",
         "nobody at all")


class Counting:
    """A DuckDB connection whose statements are counted (``execute`` and ``sql`` calls)."""

    def __init__(self, conn: Any) -> None:
        self._c = conn
        self.count = 0

    def execute(self, *a: Any, **k: Any) -> Any:
        self.count += 1
        return self._c.execute(*a, **k)

    def sql(self, *a: Any, **k: Any) -> Any:
        self.count += 1
        return self._c.sql(*a, **k)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)


def _engine(store: Any = None, **kw: Any) -> Engine:
    if store is not None:
        kw["store"] = store
    return Engine(embedder=HashEmbedder(dim=32), warm_up=False, clock=lambda: CLOCK, **kw)


def _load(e: Engine) -> Engine:
    for doc_id, text, meta in NOTES:
        e.add_text(text, id=doc_id, metadata=meta)
    return e


def _rows(e: Engine) -> list[list[tuple[str, Any]]]:
    return [[(h.id, h.scores) for h in e.search(q, {"q": t})] for q, t in QUERIES]


def _four(e: Engine) -> list[list[tuple[str, Any]]]:
    return [[(h.id, h.scores) for h in e.search(FOUR_ARMS, {"q": t})] for t in TEXTS]


def _tables(conn: Any) -> tuple[int, int]:
    return (conn.execute('SELECT count(*) FROM "nlql_entity_links"').fetchone()[0],
            conn.execute('SELECT count(*) FROM "nlql_entity_edges"').fetchone()[0])


def _same(got: list[list[tuple[str, Any]]], want: list[list[tuple[str, Any]]]) -> None:
    """The same rows; GRAPH, TEMPORAL and the fusion exactly, BM25 to the last bits, SIMILARITY as float32
    cosines agree (DuckDB's inner product of FLOAT arrays, numpy's)."""
    assert [[i for i, _ in r] for r in got] == [[i for i, _ in r] for r in want]
    for g_rows, w_rows in zip(got, want):
        for (_, g), (_, w) in zip(g_rows, w_rows):
            assert g.keys() == w.keys()
            for k in ("g", "t", "f"):
                assert g.get(k) == w.get(k)
            for k, tolerance in (("k", {"rel": 1e-12}), ("s", {"abs": 1e-6})):
                if w.get(k) is not None:
                    assert g[k] == pytest.approx(w[k], **tolerance)


def test_graph_on_duckdb_equals_the_built_in_store_and_follows_writes(tmp_path: Path) -> None:
    duck, mem = _load(_engine(f"duckdb:///{tmp_path / 'g.duckdb'}")), _load(_engine())
    _same(_rows(duck), _rows(mem))
    assert not duck._graph.built  # the engine keeps no graph for DuckDB
    links, edges = _tables(duck.store._conn)
    assert links > 0 and edges > 0
    for e in (duck, mem):  # replace and delete follow, in the tables
        e.add_text("Frege met Ramsey and Moore.", id="n3")
        e.delete("n4")
    _same(_rows(duck), _rows(mem))
    assert not duck._graph.built
    for e in (duck, mem):
        for doc_id, _, _ in NOTES:
            e.delete(doc_id)
    assert _tables(duck.store._conn) == (0, 0)
    duck.close()


def test_explain_reads_entities_and_hops_from_duckdb(tmp_path: Path) -> None:
    duck, mem = _load(_engine(f"duckdb:///{tmp_path / 'g.duckdb'}")), _load(_engine())
    for q, t in QUERIES:
        got, want = duck.explain(q, {"q": t}).to_dict()["graph"], mem.explain(q, {"q": t}).to_dict()["graph"]
        assert [g.pop("computed") for g in got] != [g.pop("computed") for g in want]  # where, by design
        assert got == want
    duck.close()


def test_four_arms_with_graph_are_one_statement_on_duckdb(tmp_path: Path) -> None:
    conn = Counting(duckdb.connect(str(tmp_path / "four.duckdb")))
    duck, mem = _load(_engine(DuckDBStore(connection=conn))), _load(_engine())
    for t in TEXTS:
        assert duck.explain(FOUR_ARMS, {"q": t}).to_dict()["lowering"] == {
            "strategy": "sql", "reason": "one statement on duckdb", "dialect": "duckdb"}
    duck.search(FOUR_ARMS, {"q": TEXTS[0]})  # the first search checks once that the tables are whole

    def no_second_statement(*args: Any) -> Any:
        raise AssertionError("GRAPH ran as a statement of its own")

    duck.store.graph_activation = no_second_statement  # type: ignore[method-assign]
    for t in TEXTS:
        before = conn.count
        got = duck.search(FOUR_ARMS, {"q": t})
        assert conn.count - before == 1, t  # SIMILARITY, BM25, GRAPH, TEMPORAL and RRF: one statement
        assert got.stats["store"]["path"] == "sql"
        activated = got.stats["store"]["arm_rows"].get("g", 0)
        assert activated == 0 if t == "nobody at all" else activated > 0
    _same(_four(duck), _four(mem))
    assert sum(len(r) for r in _four(mem)) > 8 and not duck._graph.built
    duck.close()


def _old_layout(path: Path, flag: bool = True) -> None:
    """Make a file as DuckDB stores kept names before the two tables: ``nlql_entities(doc_id, position,
    name)`` (a row per sentence and entity, its first spelling), and (``flag``) ``entity_links`` set."""
    conn = duckdb.connect(str(path))
    conn.execute('CREATE TABLE "nlql_entities" (doc_id VARCHAR NOT NULL, position INTEGER NOT NULL, name VARCHAR NOT NULL)')
    conn.execute('INSERT INTO "nlql_entities" SELECT doc_id, position, name FROM "nlql_entity_links"')
    conn.execute('DROP TABLE "nlql_entity_links"')
    conn.execute('DROP TABLE "nlql_entity_edges"')
    if not flag:
        conn.execute("DELETE FROM \"nlql_meta\" WHERE key = 'entity_links'")
    conn.close()


def _names() -> tuple[list[str], Any]:
    from nlql.text.entities import RuleEntityExtractor

    calls: list[str] = []
    rule = RuleEntityExtractor()

    def counting(text: str) -> list[str]:
        calls.append(text)
        return rule(text)

    return calls, counting


def test_an_old_layout_file_read_only_answers_from_its_names_and_writable_in_sql(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    mem = _load(_engine())
    writer = _load(_engine(f"duckdb:///{path}"))
    writer.close()
    _old_layout(path)
    want, want_four = _rows(mem), _four(mem)

    calls, counting = _names()
    reader = _engine(DuckDBStore(path, read_only=True), entity_extractor=counting)
    assert not reader.store.dialect.GRAPH_CTE and not reader.store.capabilities.GRAPH_ARM
    _same(_rows(reader), want)
    _same(_four(reader), want_four)
    low = reader.explain(FOUR_ARMS, {"q": TEXTS[0]}).to_dict()["lowering"]
    assert low["strategy"] == "engine" and "GRAPH" in low["reason"]
    assert reader._graph.built and calls == []  # the graph from the stored names, no extractor
    reader.close()

    conn = Counting(duckdb.connect(str(path)))
    again = _engine(DuckDBStore(connection=conn), entity_extractor=counting)
    tables = {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert {"nlql_entity_links", "nlql_entity_edges"} <= tables and "nlql_entities" not in tables
    assert again.explain(FOUR_ARMS, {"q": TEXTS[0]}).to_dict()["lowering"]["strategy"] == "sql"
    _same(_rows(again), want)
    _same(_four(again), want_four)
    before = conn.count
    again.search(FOUR_ARMS, {"q": TEXTS[1]})
    assert conn.count - before == 1
    assert calls == [] and not again._graph.built  # moved from the old table: nothing built or extracted
    again.close()


def test_a_file_written_before_names_were_kept_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "older.duckdb"
    mem = _load(_engine())
    writer = _load(_engine(f"duckdb:///{path}"))
    writer.close()
    _old_layout(path, flag=False)
    duckdb.connect(str(path)).execute('DROP TABLE "nlql_entities"').close()
    calls, counting = _names()
    again = _engine(f"duckdb:///{path}", entity_extractor=counting)
    _same(_four(again), _four(mem))
    sentences = again.store.count()
    assert len(calls) == sentences == 10  # every stored sentence once, then read from the tables
    _same(_rows(again), _rows(mem))
    assert len(calls) == sentences and not again._graph.built
    again.close()


def test_read_only_before_the_links_were_adopted_answers_from_the_engine(tmp_path: Path) -> None:
    path = tmp_path / "half.duckdb"
    mem = _load(_engine())
    writer = _load(_engine(f"duckdb:///{path}"))
    writer.close()
    _old_layout(path, flag=False)
    duckdb.connect(str(path)).execute('DROP TABLE "nlql_entities"').close()
    opened = DuckDBStore(path)
    opened.open(32)  # opened writable once: the tables exist, empty, nothing adopted yet
    opened.close()
    calls, counting = _names()
    reader = _engine(DuckDBStore(path, read_only=True), entity_extractor=counting)
    assert not reader.store.dialect.GRAPH_CTE and not reader.store.capabilities.GRAPH_ARM
    _same(_four(reader), _four(mem))  # not the empty tables: the engine's graph, from the extractor
    assert len(calls) == reader.store.count() and reader._graph.built
    _same(_rows(reader), _rows(mem))
    reader.close()
