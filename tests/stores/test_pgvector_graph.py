"""GRAPH on PostgreSQL (SPEC §9, §10): links and edges in two tables written with the document, the
activation computed by SQL, no graph in the engine, explain from the database."""

from __future__ import annotations

from typing import Any

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder

pytest.importorskip("psycopg")

NOTES = [
    ("n1", "Russell reviewed the grammar with Moore. Keynes was away.", {}),
    ("n2", "Moore asked about the type checker. Keynes joined late.", {}),
    ("n3", "Russell wrote the letter to Frege about the paradox. Frege replied within a week.", {}),
    ("n4", "Wittgenstein proposed a new notation. Ramsey translated it for Keynes.", {}),
    ("n5", "The lecture notes on logic are ready.", {"entities": ["Bertrand Russell"]}),
]
QUERIES = [
    ("SELECT SENTENCE LET g = GRAPH($q, hops => 2) WHERE g IS NOT NULL ORDER BY g DESC", "who mentioned Russell?"),
    ("SELECT SENTENCE LET g = GRAPH($q) WHERE g IS NOT NULL ORDER BY g DESC LIMIT 3", "Keynes and Bertrand Russell"),
    ("SELECT SENTENCE LET g = GRAPH($q, hops => 3, decay => 0.9), k = BM25(content, $q), f = RRF(g, k) "
     "ORDER BY f DESC LIMIT 4", "Frege paradox"),
    ("SELECT DOCUMENT LET g = GRAPH($q, hops => 1) WHERE g IS NOT NULL ORDER BY g DESC", "Ramsey"),
]


def _load(e: Engine, notes: list[tuple[str, str, dict[str, Any]]] = NOTES) -> Engine:
    for doc_id, text, meta in notes:
        e.add_text(text, id=doc_id, metadata=meta)
    return e


def _rows(e: Engine) -> list[list[tuple[str, Any]]]:
    return [[(h.id, h.scores) for h in e.search(q, {"q": t})] for q, t in QUERIES]


def _engine(store: Any, **kw: Any) -> Engine:
    if store is not None:
        kw["store"] = store
    return Engine(embedder=HashEmbedder(dim=32), warm_up=False, **kw)


def _tables(dsn: str) -> tuple[int, int]:
    import psycopg

    with psycopg.connect(dsn) as c:
        return (c.execute('SELECT count(*) FROM "nlql_entity_links"').fetchone()[0],
                c.execute('SELECT count(*) FROM "nlql_entity_edges"').fetchone()[0])


def test_graph_rows_on_postgres_equal_the_built_in_store(pg_dsn: str) -> None:
    pg, mem = _load(_engine(pg_dsn)), _load(_engine(None))
    assert _rows(pg) == _rows(mem)
    assert not pg._graph.built  # the engine keeps no graph for PostgreSQL
    links, edges = _tables(pg_dsn)
    assert links > 0 and edges > 0
    # replace and delete follow, in the tables
    for e in (pg, mem):
        e.add_text("Frege met Ramsey and Moore.", id="n3")
        e.delete("n4")
    assert _rows(pg) == _rows(mem)
    assert not pg._graph.built
    for e in (pg, mem):
        for doc_id, _, _ in NOTES:
            e.delete(doc_id)
    assert _tables(pg_dsn) == (0, 0)
    pg.close()


def test_names_from_a_custom_extractor_survive_a_new_engine(pg_dsn: str) -> None:
    def greek(text: str) -> list[str]:
        return [w.strip(".") for w in text.split() if w.strip(".") in {"zeta", "omega"}]

    writer = _load(_engine(pg_dsn, entity_extractor=greek), [("a", "zeta met omega.", {}), ("b", "omega left.", {})])
    q = "SELECT SENTENCE LET g = GRAPH($q) WHERE g IS NOT NULL ORDER BY g DESC"
    want = [(h.id, h.scores["g"]) for h in writer.search(q, {"q": "zeta"})]
    assert want == [("a#0", 1.0), ("b#0", 0.5)]
    other = _engine(pg_dsn, entity_extractor=None)
    assert [(h.id, h.scores["g"]) for h in other.search(q, {"q": "zeta"})] == want
    writer.close()
    other.close()


def test_explain_shows_entities_found_and_activation_per_hop_from_the_database(pg_dsn: str) -> None:
    pg, mem = _load(_engine(pg_dsn)), _load(_engine(None))
    for q, t in QUERIES:
        got, want = pg.explain(q, {"q": t}).to_dict()["graph"], mem.explain(q, {"q": t}).to_dict()["graph"]
        # where the activation is computed differs by design (the database, the engine); nothing else
        assert [g.pop("computed") for g in got] != [g.pop("computed") for g in want]
        assert got == want
    text = str(pg.explain(QUERIES[0][0], {"q": QUERIES[0][1]}))
    assert "entities found: Russell" in text and "hop 1:" in text and "hop 2:" in text
    pg.close()


def test_a_database_written_before_the_graph_tables_is_adopted(pg_dsn: str) -> None:
    import psycopg

    pg = _load(_engine(pg_dsn))
    want = _rows(pg)
    pg.close()
    with psycopg.connect(pg_dsn, autocommit=True) as c:  # as an older version left it
        c.execute('DROP TABLE "nlql_entity_links", "nlql_entity_edges"')
        c.execute("DELETE FROM \"nlql_meta\" WHERE key = 'entity_links'")
    calls: list[str] = []
    from nlql.text.entities import RuleEntityExtractor

    rule = RuleEntityExtractor()

    def counting(text: str) -> list[str]:
        calls.append(text)
        return rule(text)

    again = _engine(pg_dsn, entity_extractor=counting)
    assert _rows(again) == want
    assert len(calls) == 9  # every stored sentence once, then read from the tables
    assert _rows(again) == want and len(calls) == 9
    assert not again._graph.built
    again.close()


ONE_STATEMENT = [
    "SELECT SENTENCE LET s = SIMILARITY(content, $q), k = BM25(content, $q), g = GRAPH($q, hops => 2), "
    "f = RRF(s, k, g) ORDER BY f DESC LIMIT 5",
    "SELECT SENTENCE LET k = BM25(content, $q), g = GRAPH($q), f = INTERLEAVE(g, k) ORDER BY f DESC LIMIT 6",
    "SELECT SENTENCE LET k = BM25(content, $q), g = GRAPH($q, decay => 0.9), f = RRF(k, g, k => 10) "
    'WHERE meta.entities IS NULL ORDER BY f DESC LIMIT 3',
]


def test_graph_fused_with_bm25_and_similarity_is_one_statement(pg_dsn: str) -> None:
    pg, mem = _load(_engine(pg_dsn)), _load(_engine(None))
    texts = ("Russell and Frege", "Keynes", "nobody at all")
    for q in ONE_STATEMENT:  # explain reads the entities found and the hops from the database
        for text in texts:
            assert pg.explain(q, {"q": text}).to_dict()["lowering"]["strategy"] == "sql"
    pg.search(ONE_STATEMENT[0], {"q": "Russell"})  # the first search checks the tables are whole, once

    def no_second_statement(*args: Any) -> Any:
        raise AssertionError("GRAPH ran as a statement of its own")

    pg.store.graph_activation = no_second_statement  # type: ignore[method-assign]
    for q in ONE_STATEMENT:
        for text in texts:
            got = pg.search(q, {"q": text})
            want = mem.search(q, {"q": text})
            assert [h.id for h in got] == [h.id for h in want], (q, text)
            for g, w in zip(got, want):  # GRAPH and the fusion exactly; BM25 sums may differ in the last bit
                assert g.scores["g"] == w.scores["g"] and g.scores["f"] == w.scores["f"]
                assert g.scores.keys() == w.scores.keys()
                assert all(g.scores[k] == pytest.approx(v, rel=1e-12) for k, v in w.scores.items() if v is not None)
            activated = got.stats["store"]["arm_rows"].get("g", 0)  # no row returned: no counts
            assert activated == 0 if text == "nobody at all" else activated > 0
    pg.close()
