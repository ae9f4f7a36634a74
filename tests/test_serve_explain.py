"""explain says where GRAPH runs (issue 33, item 12): in the engine's entity graph on the built-in store,
inside the SQL statement on PostgreSQL when the plan is lowered, by the store when it computes it."""

from __future__ import annotations

from nlql import Engine
from nlql.embedders import HashEmbedder

NOTES = ["Russell wrote to Frege about the paradox. Moore read the letter.",
         "Keynes met Ramsey in Cambridge. Ramsey translated Wittgenstein."]
HYBRID = ('SELECT SENTENCE LET g = GRAPH("Russell", hops => 2), k = BM25(content, "Russell letter"), '
          "f = RRF(g, k) ORDER BY f DESC LIMIT 3")
PLAIN = 'SELECT SENTENCE LET g = GRAPH("Russell") WHERE g IS NOT NULL ORDER BY g DESC'


def _fill(e: Engine) -> Engine:
    e.add_texts(NOTES, ids=["a", "b"])
    return e


def test_explain_on_the_builtin_store_names_the_engine_graph() -> None:
    e = _fill(Engine(embedder=HashEmbedder(dim=32), warm_up=False))
    for q in (HYBRID, PLAIN):
        ex = e.explain(q)
        assert [g["computed"] for g in ex.to_dict()["graph"]] == ["engine"]
        assert "entity graph in the engine" in str(ex)


def test_explain_on_postgres_says_graph_is_sql_in_the_statement(pg_dsn: str) -> None:
    from nlql.stores.pgvector import PgVectorStore

    e = _fill(Engine(embedder=HashEmbedder(dim=32), store=PgVectorStore(pg_dsn), warm_up=False))
    try:
        ex = e.explain(HYBRID)
        d = ex.to_dict()
        assert d["lowering"]["strategy"] == "sql", d["lowering"]
        assert [g["computed"] for g in d["graph"]] == ["sql"]
        assert "entity graph in the engine" not in str(ex)
        assert "computed in the SQL statement" in str(ex)
        plain = e.explain(PLAIN)
        assert [g["computed"] for g in plain.to_dict()["graph"]] == ["store"]
        assert "computed by the pgvector store" in str(plain)
        assert [h.id for h in e.search(HYBRID)]  # and it runs
    finally:
        e.close()
