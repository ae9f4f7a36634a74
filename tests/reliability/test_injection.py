"""Hostile strings against pgvector: nothing changes but what was asked for, every value round-trips.

A corpus of hostile strings (SQL and JSON-path metacharacters, comment markers, dollar quoting, backslashes,
NUL, confusables, RTL marks, a 1 MB string) is used as document text, ids, metadata keys and values, query
literals and parameters. Afterwards the database holds the same tables, the same row counts and the same
other documents, a canary table is untouched, and every hostile value came back exactly — and the same
rows came back as from the built-in store. Every SQL statement the store sends is captured (a psycopg
cursor factory, plus the server's own statement log when the test server is ours): none contains a
hostile string or the marker embedded in each one, so every value was bound, never formatted into SQL.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from relhelp import CLOCK, DIM, answer, corpus, same

psycopg = pytest.importorskip("psycopg")

from psycopg import sql  # noqa: E402

from nlql import Engine, NLQLError  # noqa: E402
from nlql import values as V  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.render import quote_key, quote_string  # noqa: E402
from nlql.stores.pgvector import PgVectorStore  # noqa: E402
from nlql.text.split import split_sentences  # noqa: E402

PREFIX = "inj"
MARK = "qz7mark"  # embedded in every hostile value: it may appear in bound parameters, never in SQL text
MEGA = ("';--$$\\\x00/*" * 100_000)[:1_000_000]

_BASE = [
    "'; DROP TABLE inj_docs; --", "' OR '1'='1", "' OR 1=1 --", '" OR ""="', "'); DELETE FROM inj_units; --",
    "'; UPDATE inj_docs SET text = 'pwned'; --", "x'::text; SELECT pg_sleep(5); --",
    "$$; DROP TABLE canary; $$", "$tag$ DROP TABLE canary $tag$", "$1", "$2::text", "%s", "%(name)s", "%%",
    "%", "_", "{}", "{0}", "\\", "\\\\'", "\\'", "\\x00", "\x00", "a\x00b", "-- comment", "/* open", "*/",
    ";", "\n;\n", "\r\n", "\t", "E'\\x41'", "U&'\\0041'", "\\copy canary to '/tmp/x'", "\\.",
    "COPY canary TO PROGRAM 'id'", "$.a[*] ? (@ > 1)", "$.**", "->", "->>", "#>", "@>", "?|", "::jsonb",
    '{"a": 1}', "[1, 2]", "null", "NaN", "Infinity", "-0", "1e400", "\u202e", "\u200f", "\u200b", "\ufeff",
    "ＳＥＬＥＣＴ", "ѕеlесt", "İ", "ß", "ﬀ", "🙂", "\ud800", "\udfff", "\x01", "\x01\x02\x03\x04",
    "\x7f", "\x1b[31m", "`", "``", "meta.status", "content", "\u0085", "\u2028",
]
HOSTILE = [f"{MARK}{i}{h}" for i, h in enumerate(_BASE)] + [MARK + "mega" + MEGA]


def _capturing_cursor(log: list[str]) -> type:
    class Capturing(psycopg.Cursor):  # type: ignore[misc, name-defined]
        def _record(self, query: Any) -> None:
            if isinstance(query, sql.Composable):
                query = query.as_string(self.connection)
            elif isinstance(query, (bytes, bytearray)):
                query = bytes(query).decode("utf-8", "replace")
            log.append(str(query))

        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            self._record(query)
            return super().execute(query, params, **kwargs)

        def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> Any:
            self._record(query)
            return super().executemany(query, params_seq, **kwargs)

        def copy(self, statement: Any, params: Any = None, **kwargs: Any) -> Any:
            self._record(statement)
            return super().copy(statement, params, **kwargs)

    return Capturing


class Database:
    """Snapshots of what must not change: tables, row counts, the canary."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def tables(self) -> list[tuple[str, str]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute("SELECT schemaname, tablename FROM pg_tables WHERE schemaname NOT IN "
                                "('pg_catalog', 'information_schema') ORDER BY 1, 2").fetchall()

    def counts(self) -> dict[str, int]:
        out = {}
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for schema, table in self.tables():
                q = sql.SQL("SELECT count(*) FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(table))
                out[f"{schema}.{table}"] = conn.execute(q).fetchone()[0]
        return out

    def canary(self) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute("SELECT id, secret FROM canary ORDER BY id").fetchall()

    def roles_and_functions(self) -> tuple[list[Any], list[Any]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            roles = conn.execute("SELECT rolname FROM pg_roles ORDER BY 1").fetchall()
            funcs = conn.execute("SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                                 "WHERE nspname = 'public' ORDER BY 1").fetchall()
        return roles, funcs


@pytest.fixture(scope="module")
def setup(pg_server: Any) -> Any:  # type: ignore[no-untyped-def]
    dsn = pg_server.new_database()
    server_log = _statement_log(pg_server, dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE canary (id int PRIMARY KEY, secret text NOT NULL)")
        conn.execute("INSERT INTO canary VALUES (1, 'tweet'), (2, 'chirp')")
    captured: list[str] = []
    conn = psycopg.connect(dsn, autocommit=True, cursor_factory=_capturing_cursor(captured))
    store = PgVectorStore(dsn, connection=conn, exact=True, table_prefix=PREFIX)
    engine = Engine(embedder=HashEmbedder(dim=DIM), store=store, clock=lambda: CLOCK, warm_up=False)
    reference = Engine(embedder=HashEmbedder(dim=DIM), clock=lambda: CLOCK, warm_up=False)
    texts, ids, metas = corpus()
    for e in (engine, reference):
        e.add_texts(texts, ids=ids, metadatas=metas)
    db = Database(dsn)
    before = {"tables": db.tables(), "counts": db.counts(), "canary": db.canary(),
              "catalog": db.roles_and_functions(),
              "docs": [answer(engine, "SELECT DOCUMENT"), answer(engine, "SELECT SENTENCE")]}
    yield engine, reference, db, before, captured, server_log
    engine.close()
    conn.close()


def _statement_log(pg_server: Any, dsn: str) -> Path | None:
    """Turn on the server's statement log for this database when the server is ours (pgserver)."""
    handle = getattr(pg_server, "_handle", None)
    log = getattr(handle, "log", None)
    if log is None:
        return None
    with psycopg.connect(dsn, autocommit=True) as conn:
        name = conn.info.dbname
        conn.execute(sql.SQL("ALTER DATABASE {} SET log_statement = 'all'").format(sql.Identifier(name)))
        conn.execute(sql.SQL("ALTER DATABASE {} SET log_min_error_statement = 'panic'").format(sql.Identifier(name)))
    return Path(log)


def _visible(text: str) -> str:
    spans = split_sentences(text)
    return text[spans[0][0]:spans[-1][1]]


def _docs(reference_too: bool = True) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, text, metadata) of every hostile document: each hostile value as id, text, key and value."""
    out = []
    for i, h in enumerate(HOSTILE):
        short = h if len(h) < 2000 else h[:2000]  # a PostgreSQL btree key holds at most ~2.7 kB
        out.append((short, f"Hostile text {i}: {h} end.", {"k": h, short: "v", "nested": {short: {"x": h}},
                                                          "list": [h, i]}))
    return out


def _queries(h: str) -> list[tuple[str, dict[str, Any] | None]]:
    """Queries that carry ``h`` as literals and as parameters, in every place a value can go.

    Predicates are OR-ed into a few statements: each one still reaches the SQL compiler separately.
    """
    lit = quote_string(h)
    short = h if len(h) < 2000 else h[:2000]
    key = quote_key(short)
    like = "%" + h + "%" if len(h) < 10_000 else "%" + h[:100] + "%"
    out: list[tuple[str, dict[str, Any] | None]] = [
        ("SELECT SENTENCE WHERE content CONTAINS $v OR meta.k == $v OR meta.k IN $l OR content LIKE $like "
         "OR doc_id == $d ORDER BY doc_id, position", {"v": h, "l": [h, "x"], "like": like, "d": short}),
        ("SELECT SENTENCE WHERE meta.k >= $v AND meta.k NOT IN $l1 ORDER BY meta.k LIMIT 5", {"v": h, "l1": [h]}),
        ("SELECT SENTENCE LET s = SIMILARITY(content, $v) ORDER BY s DESC LIMIT 3", {"v": h}),
        ("SELECT SENTENCE LET b = BM25(content, $v) WHERE b > 0 ORDER BY b DESC LIMIT 3", {"v": h}),
        ("SELECT SENTENCE WHERE meta.k WITHIN $v", {"v": h}),
        (f"SELECT DOCUMENT WHERE (meta.{key} == 'v' AND meta.nested.{key}.x IS NOT NULL) "
         f"OR meta.{key} != 'v' LIMIT 3", None),
    ]
    if len(lit) < 50_000:
        out += [
            (f"SELECT SENTENCE WHERE (meta.k == {lit} OR content CONTAINS {lit} OR meta.k IN ({lit}, 'x') "
             f"OR meta.k BETWEEN {lit} AND {lit}) AND doc_id != {lit}", None),
            (f"SELECT SENTENCE LET s = SIMILARITY(content, [{lit}, 'agents']) WHERE content NOT LIKE {lit} "
             "ORDER BY s DESC LIMIT 2", None),
        ]
    return out


def _run(engine: Engine, q: str, params: Any) -> Any:
    try:
        return answer(engine, q, params)
    except NLQLError as exc:
        return ("error", type(exc).__name__)


def test_hostile_values_everywhere(setup: Any) -> None:
    engine, reference, db, before, captured, server_log = setup
    docs = _docs()
    for doc_id, text, meta in docs:
        for e in (engine, reference):
            assert e.add_text(text, id=doc_id, metadata=meta) == doc_id
    # every value round-trips exactly
    for doc_id, text, meta in docs:
        hits = engine.search("SELECT DOCUMENT WHERE doc_id == $d", params={"d": doc_id})
        assert len(hits) == 1, repr(doc_id[:80])
        assert hits[0].doc_id == doc_id
        assert hits[0].content == _visible(text)
        assert same(hits[0].metadata, V.normalize_metadata(meta)), repr(doc_id[:80])
        rows = engine.search("SELECT SENTENCE WHERE doc_id == $d", params={"d": doc_id})
        assert [r.position for r in rows] == list(range(len(rows)))
    # queries carrying hostile values: the same answer as the built-in store, or the same error
    for h in HOSTILE:
        for q, params in _queries(h):
            got, want = _run(engine, q, params), _run(reference, q, params)
            assert got == want, (q[:200], repr(h[:60]))
    # replacing and deleting by hostile ids touches only those documents
    for doc_id, text, meta in docs[::3]:
        engine.add_text(text + " Again.", id=doc_id, metadata=meta)
    for doc_id, _, _ in docs:
        assert engine.delete(doc_id)
        assert not engine.delete(doc_id)
    assert db.tables() == before["tables"]
    assert db.counts() == before["counts"]
    assert db.canary() == before["canary"]
    assert db.roles_and_functions() == before["catalog"]
    assert [answer(engine, "SELECT DOCUMENT"), answer(engine, "SELECT SENTENCE")] == before["docs"]


def _fragments() -> list[str]:
    """Distinctive pieces of the hostile strings that ordinary SQL never contains."""
    out = [MARK]
    for h in _BASE:
        if len(h) >= 6 and not h.isalpha() and h not in ("content", "meta.status", "Infinity", "::jsonb", "$2::text"):
            out.append(h)
    out += ["DROP TABLE", "pg_sleep", "pwned", "tweet", "PROGRAM"]
    return out


def test_no_user_value_in_sql_text(setup: Any) -> None:
    """Runs after the test above (same module): every statement it caused is in ``captured``."""
    engine, _, _, _, captured, server_log = setup
    # make sure this test also has traffic of its own
    engine.add_text(f"{MARK} solo. {_BASE[0]}", id=f"{MARK}solo", metadata={f"{MARK}key": f"{MARK}value"})
    engine.search(f"SELECT SENTENCE WHERE meta.`{MARK}key` == '{MARK}value' AND content CONTAINS '{MARK}'")
    engine.delete(f"{MARK}solo")
    assert len(captured) > 100
    bad = [(f, s[:300]) for s in captured for f in _fragments() if f in s]
    assert not bad, bad[:5]
    if server_log is not None and server_log.exists():
        text = server_log.read_text(encoding="utf-8", errors="replace")
        statements = _logged_statements(text)
        assert statements, "the server logged no statement"
        # the hostile values did reach the server, as bound parameters
        assert re.search(r"DETAIL:\s+parameters:.*" + MARK, text, re.IGNORECASE)
        bad = [(f, s[:300]) for s in statements for f in _fragments() if f in s]
        assert not bad, bad[:5]


def test_the_capture_catches_a_formatted_value(pg_dsn: str) -> None:
    """Control: a value formatted into SQL text (the bug the test above hunts) is caught; a bound one not."""
    log: list[str] = []
    with psycopg.connect(pg_dsn, autocommit=True, cursor_factory=_capturing_cursor(log)) as conn:
        conn.execute("SELECT %s::text", [MARK + _BASE[0]])
        assert not [f for s in log for f in _fragments() if f in s]
        conn.execute(sql.SQL("SELECT {}::text").format(sql.Literal(MARK + "x")))
        assert [f for s in log for f in _fragments() if f in s]


_LOG_STATEMENT = re.compile(r"LOG:\s+(?:statement|execute [^:]*):\s(.*)")


def _logged_statements(text: str) -> list[str]:
    """Statement texts from the server log (``DETAIL: parameters: …`` lines hold the bound values)."""
    return [m.group(1) for m in _LOG_STATEMENT.finditer(text) if PREFIX in m.group(1) or MARK in m.group(1)]


def test_pgvector_keeps_ids_of_any_length_or_says_why(pg_dsn: str) -> None:
    """A 1 MB id: stored whole, or refused with a BackendError that leaves nothing behind."""
    store = PgVectorStore(pg_dsn, exact=True, table_prefix="p" + uuid.uuid4().hex[:8])
    engine = Engine(embedder=HashEmbedder(dim=DIM), store=store, clock=lambda: CLOCK, warm_up=False)
    engine.add_text("Keep me.", id="keep")
    big = "x" + uuid.uuid4().hex * 31_250  # 1 MB that does not compress away
    try:
        engine.add_text("Big id.", id=big)
    except NLQLError as exc:
        assert "pgvector" in str(exc)
        assert engine.search("SELECT DOCUMENT WHERE doc_id == $d", params={"d": big}) == []
    else:
        assert [h.doc_id for h in engine.search("SELECT DOCUMENT WHERE doc_id == $d", params={"d": big})] == [big]
    assert [h.id for h in engine.search("SELECT DOCUMENT")][0] == "keep"
    engine.add_text("Still works.", id="after")
    assert len(engine.search("SELECT DOCUMENT WHERE doc_id IN ('keep', 'after')")) == 2
    engine.close()


# the empty key is refused at ingest (no query can name it), see test_inputs.py
PATH_KEYS = ["a.b", "a", "$", "[0]", "a[0]", "a[]", "*", "a.*", "..", ".", " ", "\x00", "\ud800", "ключ", "a\\.b",
             "`", "@", "has space", "x:y", "[", "a[", "$.a", "null", "'", '"', "%s", "->>", "?"]


@pytest.mark.parametrize("store", ["qdrant", "pgvector"])
def test_metadata_key_metacharacters(store: str, request: pytest.FixtureRequest) -> None:
    """Keys that mean something in JSON paths or payload filters name exactly one key on every store."""
    from relhelp import make_engine, make_store

    def build(backend: Any) -> Engine:
        e = make_engine(backend)
        for i, k in enumerate(PATH_KEYS):
            e.add_text(f"Doc {i} text.", id=f"k{i}", metadata={k: f"v{i}", "n": i})
        e.add_text("Nested doc.", id="nested", metadata={"a": {"b": "nested", "[0]": "br", " ": "blank"}, "n": 100})
        e.add_text("List doc.", id="list", metadata={"a": ["x", {"b": "inlist"}], "n": 101})
        return e

    reference, engine = build("memory"), build(make_store(store, request, dsn_fixture="pg_dsn"))
    for i, k in enumerate(PATH_KEYS):
        key = quote_key(k)
        for q in (f"SELECT DOCUMENT WHERE meta.{key} == 'v{i}'", f"SELECT DOCUMENT WHERE meta.{key} IS NOT NULL",
                  f"SELECT DOCUMENT WHERE meta.{key} IS NULL", f"SELECT DOCUMENT WHERE meta.{key} != 'zz'",
                  f"SELECT DOCUMENT WHERE meta.a.{key} IS NOT NULL", f"SELECT DOCUMENT WHERE meta.{key} CONTAINS 'V'",
                  f"SELECT DOCUMENT WHERE meta.{key} IN ('v{i}', 'nested') OR meta.a.{key} == 'nested'"):
            assert _run(engine, q, None) == _run(reference, q, None), (repr(k), q)
    engine.close()
