"""SPEC §11 HAS / HAS ANY / HAS ALL (each with NOT) pushed as SQL on DuckDB and PostgreSQL + pgvector:
the same documents as the built-in store for random lists, scalars, numeric strings, null members,
empty lists and missing keys, explain showing the SQL (no residual), and files written before the
stores kept list members (residual until opened writable, then migrated)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.render import quote_string

# needles and members: strings, numeric strings (integer and not), numbers (int, float, integral
# float), booleans, an ISO date, a big integer within float64's exact range, null
VALUES: list[Any] = ["rag", "llm", "RAG", "2025", "2025.0", 2025, 2025.0, 7, "7.0", 0.5, "0.5", True, False,
                     "2024-05-01", -3, "x", "a\x00b", None]


def _lit(v: Any) -> str:
    if v is None:
        return "NULL"
    if v is True:
        return "TRUE"
    if v is False:
        return "FALSE"
    if isinstance(v, str):
        return quote_string(v)
    return repr(v)


def _value(rng: random.Random) -> Any:
    kind = rng.randrange(8)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice(VALUES[:-1])  # a scalar
    if kind == 2:
        return {"k": rng.choice(VALUES)}  # a map: never a list, never equal to a needle
    if kind == 3:
        return []
    members = [rng.choice(VALUES) for _ in range(rng.randrange(1, 5))]
    if kind == 4:
        members.append([rng.choice(VALUES[:-1])])  # a nested list member matches nothing
    if kind == 5:
        members.append({"k": "rag"})
    return members


def _corpus() -> list[tuple[str, dict[str, Any]]]:
    rng = random.Random(31)
    docs = []
    for i in range(70):
        meta: dict[str, Any] = {}
        if rng.random() < 0.85:
            meta["tags"] = _value(rng)
        if rng.random() < 0.5:
            meta["nested"] = {"tags": _value(rng)}
        meta["n"] = i % 4
        docs.append((f"d{i:02d}", meta))
    return docs


def _queries() -> list[str]:
    rng = random.Random(5)
    out = []
    for _ in range(70):
        key = rng.choice(["meta.tags", "meta.tags", "meta.nested.tags"])
        quantifier = rng.choice(["", " ANY", " ALL"])
        word = rng.choice(["HAS", "NOT HAS"]) + quantifier
        if quantifier:
            needle = "(" + ", ".join(_lit(rng.choice(VALUES)) for _ in range(rng.randrange(0, 3))) + ")"
        else:
            needle = _lit(rng.choice(VALUES))
        cond = f"{key} {word} {needle}"
        shape = rng.randrange(4)
        if shape == 1:
            cond = f"NOT ({cond})"
        elif shape == 2:
            cond = f"({cond} OR meta.n == 1)"
        elif shape == 3:
            cond = f"{cond} AND meta.n != 2"
        out.append(cond)
    return out


CORPUS = _corpus()
QUERIES = _queries()


def _engine(store: Any) -> Engine:
    e = Engine(embedder=HashEmbedder(dim=16), store=store, warm_up=False)
    e.add_texts([f"Row {d} says hello." for d, _ in CORPUS], ids=[d for d, _ in CORPUS],
                metadatas=[m for _, m in CORPUS])
    return e


@pytest.fixture(scope="module")
def reference() -> Engine:
    return _engine("memory")


@pytest.fixture(scope="module", params=["duckdb", "pgvector"])
def sql_engine(request: pytest.FixtureRequest) -> Engine:
    if request.param == "duckdb":
        pytest.importorskip("duckdb")
        from nlql.stores.duckdb import DuckDBStore

        return _engine(DuckDBStore())
    pytest.importorskip("psycopg")
    from nlql.stores.pgvector import PgVectorStore

    return _engine(PgVectorStore(request.getfixturevalue("pg_module_dsn"), exact=True))


def _ids(engine: Engine, cond: str, unit: str = "DOCUMENT") -> list[str]:
    return [h.doc_id for h in engine.search(f"SELECT {unit} WHERE {cond}")]


def test_has_is_pushed_with_the_builtin_answers(reference: Engine, sql_engine: Engine) -> None:
    for cond in QUERIES:
        assert _ids(sql_engine, cond) == _ids(reference, cond), cond
        if "HAS NULL" in cond:  # a comparison with NULL: the planner's own rule, not the store's
            continue
        text = str(sql_engine.explain(f"SELECT DOCUMENT WHERE {cond}"))
        assert "residual filter (engine): (none)" in text, cond


def test_has_under_scores_and_limits(reference: Engine, sql_engine: Engine) -> None:
    for tail in ('LET s = SIMILARITY(content, "row d1 hello") WHERE meta.tags HAS ANY ("rag", 7) ORDER BY s DESC LIMIT 5',
                 'LET k = BM25(content, "row d1 hello") WHERE meta.tags NOT HAS "x" ORDER BY k DESC LIMIT 5',
                 'LET s = SIMILARITY(content, "hello"), k = BM25(content, "d2"), f = RRF(s, k) '
                 'WHERE meta.tags HAS ALL ("rag") OR meta.tags HAS 2025 ORDER BY f DESC LIMIT 6'):
        want = [(h.id, sorted((k, round(v, 5)) for k, v in h.scores.items() if v is not None)) for h in reference.search(f"SELECT SENTENCE {tail}")]
        got = [(h.id, sorted((k, round(v, 5)) for k, v in h.scores.items() if v is not None)) for h in sql_engine.search(f"SELECT SENTENCE {tail}")]
        assert got == want, tail


def test_explain_shows_the_sql(sql_engine: Engine) -> None:
    text = str(sql_engine.explain('SELECT SENTENCE WHERE meta.tags HAS ANY ("rag", "2025") AND meta.tags NOT HAS 7'))
    store = "duckdb" if "duckdb" in text.split("store: ")[1].split("\n")[0] else "pgvector"
    line = next(x for x in text.splitlines() if x.startswith("pushed filter"))
    if store == "duckdb":
        assert '"nlql_members"' in line and '"nlql_flat"' in line  # positive HAS: semi-joins only
    else:
        assert "d.mlists @>" in line and "jsonb_array_elements" in line  # containment; "2025" reads members
    assert "'rag'" not in line and "2025" not in line  # values are bound, never in the text
    assert "residual filter (engine): (none)" in text


def test_duckdb_file_written_before_members(tmp_path: Any, reference: Engine) -> None:
    duckdb = pytest.importorskip("duckdb")
    from nlql.stores.duckdb import DuckDBStore

    path = tmp_path / "old.duckdb"
    e = _engine(DuckDBStore(path))
    e.close()
    con = duckdb.connect(str(path))
    con.execute('DROP TABLE "nlql_members"')  # as a file of the previous release holds it
    con.close()
    cond = 'meta.tags HAS ANY ("rag", 2025) OR meta.tags NOT HAS ALL ("llm")'
    old = Engine(embedder=HashEmbedder(dim=16), store=DuckDBStore(path, read_only=True), warm_up=False)
    assert "residual filter (engine): (none)" not in str(old.explain(f"SELECT DOCUMENT WHERE {cond}"))
    assert _ids(old, cond) == _ids(reference, cond)
    old.close()
    migrated = Engine(embedder=HashEmbedder(dim=16), store=DuckDBStore(path), warm_up=False)
    assert "residual filter (engine): (none)" in str(migrated.explain(f"SELECT DOCUMENT WHERE {cond}"))
    for q in QUERIES[:25]:
        assert _ids(migrated, q) == _ids(reference, q), q
    migrated.close()


def test_pgvector_table_written_before_mlists(pg_dsn: str, reference: Engine) -> None:
    psycopg = pytest.importorskip("psycopg")
    from nlql.stores.pgvector import PgVectorStore

    e = _engine(PgVectorStore(pg_dsn, exact=True))
    e.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # as a table of the previous release holds it
        conn.execute('ALTER TABLE "nlql_docs" DROP COLUMN mlists')
        conn.execute("DELETE FROM \"nlql_meta\" WHERE key = 'lists'")
    migrated = Engine(embedder=HashEmbedder(dim=16), store=PgVectorStore(pg_dsn, exact=True), warm_up=False)
    for q in QUERIES[:25]:
        assert _ids(migrated, q) == _ids(reference, q), q
    migrated.close()
