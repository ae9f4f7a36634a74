"""The injection corpus of ``test_injection.py`` against DuckDB: nothing changes but what was asked for.

The same hostile strings (SQL and JSON-path metacharacters, comment markers, dollar quoting, backslashes,
NUL, confusables, RTL marks, a 1 MB string) go in as document text, ids, metadata keys and values, query
literals and parameters, on a DuckDB file store and on a Parquet file read in place. Afterwards the
database holds the same tables and row counts, a canary table is untouched, every hostile value came
back exactly, and the same rows came back as from the built-in store. Every statement the store sends
is captured (a recording connection): none contains a hostile string or the marker embedded in each
one, so every value was bound, never formatted into SQL. (The corpus is imported from
``test_injection.py``, so this module runs where that one does.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from relhelp import CLOCK, DIM, answer, corpus, same

duckdb = pytest.importorskip("duckdb")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from test_injection import HOSTILE, MARK, _docs, _fragments, _queries, _run, _visible  # noqa: E402

from nlql import Engine  # noqa: E402
from nlql import values as V  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.stores.duckdb import DuckDBStore  # noqa: E402


class Recording:
    """A duckdb connection that records the text of every statement it is asked to run."""

    def __init__(self, conn: Any, log: list[str]) -> None:
        self._conn = conn
        self.log = log

    def execute(self, query: str, parameters: Any = None) -> Any:
        self.log.append(str(query))
        return self._conn.execute(query, parameters) if parameters is not None else self._conn.execute(query)

    def sql(self, query: str, **kwargs: Any) -> Any:
        self.log.append(str(query))
        return self._conn.sql(query, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _tables(conn: Any) -> dict[str, int]:
    names = [r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary").fetchall()]
    return {n: conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in sorted(names)}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Any:
    raw = duckdb.connect(str(tmp_path_factory.mktemp("inj") / "inj.duckdb"))
    raw.execute("CREATE TABLE canary (id INTEGER PRIMARY KEY, secret VARCHAR NOT NULL)")
    raw.execute("INSERT INTO canary VALUES (1, 'tweet'), (2, 'chirp')")
    captured: list[str] = []
    store = DuckDBStore(connection=Recording(raw, captured), table_prefix="inj")
    engine = Engine(embedder=HashEmbedder(dim=DIM), store=store, clock=lambda: CLOCK, warm_up=False)
    reference = Engine(embedder=HashEmbedder(dim=DIM), clock=lambda: CLOCK, warm_up=False)
    texts, ids, metas = corpus()
    for e in (engine, reference):
        e.add_texts(texts, ids=ids, metadatas=metas)
    before = {"tables": _tables(raw), "canary": raw.execute("SELECT * FROM canary ORDER BY id").fetchall(),
              "docs": [answer(engine, "SELECT DOCUMENT"), answer(engine, "SELECT SENTENCE")]}
    yield engine, reference, raw, before, captured
    engine.close()
    raw.close()


def test_hostile_values_everywhere(setup: Any) -> None:
    engine, reference, raw, before, captured = setup
    docs = _docs()
    for doc_id, text, meta in docs:
        for e in (engine, reference):
            assert e.add_text(text, id=doc_id, metadata=meta) == doc_id
    for doc_id, text, meta in docs:
        hits = engine.search("SELECT DOCUMENT WHERE doc_id == $d", params={"d": doc_id})
        assert len(hits) == 1, repr(doc_id[:80])
        assert hits[0].doc_id == doc_id and hits[0].content == _visible(text)
        assert same(hits[0].metadata, V.normalize_metadata(meta)), repr(doc_id[:80])
    for h in HOSTILE:
        for q, params in _queries(h):
            assert _run(engine, q, params) == _run(reference, q, params), (q[:200], repr(h[:60]))
    for doc_id, text, meta in docs[::3]:
        engine.add_text(text + " Again.", id=doc_id, metadata=meta)
    for doc_id, _, _ in docs:
        assert engine.delete(doc_id)
        assert not engine.delete(doc_id)
    assert _tables(raw) == before["tables"]
    assert raw.execute("SELECT * FROM canary ORDER BY id").fetchall() == before["canary"]
    assert [answer(engine, "SELECT DOCUMENT"), answer(engine, "SELECT SENTENCE")] == before["docs"]


def test_no_user_value_in_sql_text(setup: Any) -> None:
    """Runs after the test above (same module): every statement it caused is in ``captured``."""
    engine, _, _, _, captured = setup
    engine.add_text(f"{MARK} solo. x", id=f"{MARK}solo", metadata={f"{MARK}key": f"{MARK}value"})
    engine.search(f"SELECT SENTENCE WHERE meta.`{MARK}key` == '{MARK}value' AND content CONTAINS '{MARK}'")
    engine.delete(f"{MARK}solo")
    assert len(captured) > 100
    bad = [(f, s[:300]) for s in captured for f in _fragments() if f in s]
    assert not bad, bad[:5]


def test_the_recording_catches_a_formatted_value() -> None:
    """Control: a value formatted into SQL text is caught; a bound one is not."""
    log: list[str] = []
    conn = Recording(duckdb.connect(), log)
    conn.execute("SELECT $1::VARCHAR", [MARK + "x"])
    assert not [f for s in log for f in _fragments() if f in s]
    conn.execute(f"SELECT '{MARK}x'")
    assert [f for s in log for f in _fragments() if f in s]


def test_hostile_values_in_a_parquet_file_read_in_place(tmp_path: Path) -> None:
    """Hostile ids, texts and metadata in a user's file: bound as parameters, returned exactly."""
    emb = HashEmbedder(dim=DIM)
    rows = [(h if len(h) < 2000 else h[:2000], f"Hostile text {i}: {h[:5000]} end.") for i, h in enumerate(HOSTILE)
            if "\x00" not in h and not any(0xD800 <= ord(c) <= 0xDFFF for c in h)]  # Parquet text is UTF-8
    ids, texts = [r[0] for r in rows], [r[1] for r in rows]
    vecs = emb.embed(texts)
    path = tmp_path / "hostile.parquet"
    pq.write_table(pa.table({"id": ids, "body": texts, "k": ids,
                             "emb": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), DIM)}), path)
    log: list[str] = []
    store = DuckDBStore.from_table(Recording(duckdb.connect(), log), str(path), text="body", vector="emb", id="id",
                                   metadata=["k"])
    engine = Engine(embedder=emb, store=store, clock=lambda: CLOCK, warm_up=False)
    for doc_id, text in zip(ids, texts, strict=True):
        hits = engine.search("SELECT DOCUMENT WHERE doc_id == $d AND meta.k == $d AND content CONTAINS $d",
                             params={"d": doc_id})
        assert [(h.doc_id, h.content, h.metadata) for h in hits] == [(doc_id, text, {"k": doc_id})], repr(doc_id[:60])
    for h in ids[::3]:
        like = "%" + h[:100] + "%"
        q = ("SELECT DOCUMENT WHERE content CONTAINS $v OR meta.k IN $l OR content LIKE $like OR doc_id == $d "
             "OR meta.k >= $v ORDER BY doc_id")
        got = [x.doc_id for x in engine.search(q, params={"v": h, "l": [h, "x"], "like": like, "d": h})]
        want = sorted(d for d, t in zip(ids, texts, strict=True)
                      if V.contains(t, h) or d in (h, "x") or V.like(t, like) or V.compare(">=", d, h))
        assert got == sorted(want), repr(h[:60])
    bad = [(f, s[:300]) for s in log for f in _fragments() if f in s and f != str(path)]
    assert not bad, bad[:5]
    engine.close()
