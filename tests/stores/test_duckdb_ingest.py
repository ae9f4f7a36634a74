"""DuckDB ingest paths that must write exactly what the general path writes (issue 35): the term rows
of an ASCII batch counted in Arrow (``nlql.stores.duckdb.terms``) against the analyzer's own terms."""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nlql.stores.duckdb.terms import term_rows  # noqa: E402
from nlql.text.analyzer import Analyzer  # noqa: E402


def expected_rows(analyzer: Analyzer, texts: list[str]) -> tuple[list[tuple[str, int, int]], list[int]]:
    """(term, sentence, tf) sorted by term (code points) then sentence, and terms per sentence, from
    :meth:`Analyzer.terms` text by text."""
    rows = []
    counts = []
    for i, text in enumerate(texts):
        terms = analyzer.terms(text)
        counts.append(len(terms))
        rows.extend((term, i, tf) for term, tf in Counter(terms).items())
    return sorted(rows), counts


def got_rows(analyzer: Analyzer, texts: list[str]) -> tuple[list[tuple[str, int, int]], list[int]]:
    table, nterms = term_rows(analyzer, texts)
    rows = list(zip(table.column("term").to_pylist(), table.column("unit").to_pylist(), table.column("tf").to_pylist(),
                    strict=True))
    return rows, nterms.tolist()


AWKWARD = ["The stories were RUNNING, running and ran!", "", "   ", "x", "__init__ foo_bar 2025-01-02 3.5 42",
           "a\x00b c\x07d\x01e", "The the THE", "O'Brien's book; e-mail: a@b.c", "tabs\tand\nnewlines\r\n",
           "MiXeD CaSe WoRdS", "!!!", "9 99 999 stories story storied"]


@pytest.mark.parametrize("analyzer", [Analyzer(), Analyzer(stopwords=None), Analyzer(stemmer=None, stopwords=None),
                                      Analyzer(stopwords=["the", "and", "x"])], ids=["english", "no-stop", "plain",
                                                                                      "custom-stop"])
def test_ascii_batch_terms_are_the_analyzers(analyzer: Analyzer) -> None:
    assert got_rows(analyzer, AWKWARD) == expected_rows(analyzer, AWKWARD)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(max_codepoint=127), max_size=40), max_size=12))
def test_any_ascii_batch_gives_the_analyzers_terms(texts: list[str]) -> None:
    analyzer = Analyzer()
    assert got_rows(analyzer, texts) == expected_rows(analyzer, texts)


MIXED = ["Plain words here", "Curly ‘quotes’ — and a dash", "東京タワー is tall", "Ünïcödé e\u0301 café", "",
         "กรุงเทพมหานคร city", "Straße STRASSE", "plain again: stories", "ﬁle İstanbul", "the THE"]


@pytest.mark.parametrize("analyzer", [Analyzer(), Analyzer(stemmer=None, stopwords=None)], ids=["english", "plain"])
def test_mixed_batch_terms_are_the_analyzers(analyzer: Analyzer) -> None:
    assert got_rows(analyzer, MIXED) == expected_rows(analyzer, MIXED)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from("abcXYZ 09_.,-éüß東京タ‘’"), max_size=30), max_size=10))
def test_any_mixed_batch_gives_the_analyzers_terms(texts: list[str]) -> None:
    analyzer = Analyzer()
    assert got_rows(analyzer, texts) == expected_rows(analyzer, texts)


def test_other_sentences_terms_take_the_stores_escape() -> None:
    from nlql.sql.codec import escape_text

    texts = ["plain ascii", "lone \ud800x surrogate é"]
    table, _ = term_rows(Analyzer(stemmer=None, stopwords=None), texts, escape_text)
    want = sorted({escape_text(t) for text in texts for t in Analyzer(stemmer=None, stopwords=None).terms(text)})
    assert sorted(set(table.column("term").to_pylist())) == want


SHADOWED = ["", "12345", "0001", "1" * 301, "9" * 300, "+5", "-3.5", ".5", "2024-03-01", "2024-03-01T10:00:00Z",
            "2024-13-45", "1e5", "12a", "ABC", "abc", "Mixed Case", "--", "+", ".", "9-9", "1_000", "nan", "+nan",
            "+inf", "-Infinity", "00:00", " 12", "12 ", "id-7", "0x1F", "1,5", "Straight ASCII sentence."]


def test_ascii_shadow_columns_are_the_general_paths() -> None:
    from nlql.sql.ingest import shadows, verbatim
    from nlql.stores.duckdb.shadows import ascii_shadows

    got = ascii_shadows(SHADOWED, None, None)
    assert got is not None
    want = shadows(SHADOWED, verbatim)
    assert [c.to_pylist() for c in got] == [list(c) for c in want]


def test_shadow_columns_needing_escapes_or_not_ascii_take_the_general_path() -> None:
    from nlql.sql.codec import escape_text
    from nlql.stores.duckdb.shadows import ascii_shadows

    assert ascii_shadows(["plain", "Ünï"], None, None) is None
    assert ascii_shadows(["plain", "bell\x07"], None, escape_text) is None
    assert ascii_shadows(["plain", "Bell"], None, escape_text) is not None  # (nothing to escape)


def test_writes_leave_the_databases_threads_for_queries() -> None:
    """A write runs its statements on one DuckDB thread (DuckDBStore._one_thread); searches after it, or
    after a failed write, have the database's threads again."""
    import duckdb

    from nlql import Engine
    from nlql.embedders import HashEmbedder
    from nlql.stores.duckdb import DuckDBStore

    default = duckdb.connect().execute("SELECT current_setting('threads')").fetchone()[0]
    engine = Engine(embedder=HashEmbedder(dim=16), store=DuckDBStore(), warm_up=False)
    engine.add_texts(["One sentence. Another one."] * 3, ids=["a", "b", "c"])
    threads = "SELECT current_setting('threads')"
    assert engine.store._conn.execute(threads).fetchone()[0] == default
    store = engine.store
    bad = store._prepare  # a write whose statements fail midway: rolled back, the threads restored

    def failing(docs: object) -> object:
        tables = list(bad(docs))
        tables[1] = tables[1].rename_columns(["nope"] + tables[1].column_names[1:])
        return tuple(tables)

    store._prepare = failing  # type: ignore[method-assign]
    with pytest.raises(Exception):  # noqa: B017,PT011 - the store's translation of DuckDB's binder error
        engine.add_texts(["Fails."], ids=["d"])
    assert store._conn.execute(threads).fetchone()[0] == default
    assert store.count() == 6  # (nothing of the failed write)


def test_a_call_that_stops_between_batches_leaves_the_threads_for_queries() -> None:
    """A call's writes hold the database to one DuckDB thread from its first batch to its last; a call
    that stops between two batches (its embedder failed) leaves the batches before committed, and the
    next operation has the database's threads again."""
    import duckdb
    import numpy as np

    from nlql import Engine
    from nlql.embedders import HashEmbedder
    from nlql.errors import NLQLError
    from nlql.stores.duckdb import DuckDBStore

    class FailsOnSecondBatch(HashEmbedder):
        calls = 0

        def embed(self, texts: list[str]) -> np.ndarray:
            self.calls += 1
            if self.calls == 2:
                raise RuntimeError("embedder down")
            return super().embed(texts)

    default = duckdb.connect().execute("SELECT current_setting('threads')").fetchone()[0]
    threads = "SELECT current_setting('threads')"
    engine = Engine(embedder=FailsOnSecondBatch(dim=16), store=DuckDBStore(), warm_up=False)
    with pytest.raises(NLQLError) as err:
        engine.add_texts([f"Sentence {i}." for i in range(6)], ids=[str(i) for i in range(6)], batch_size=3)
    assert err.value.committed == ["0", "1", "2"]  # type: ignore[attr-defined]
    assert engine.store._conn.execute(threads).fetchone()[0] == 1  # (held: nothing ran since)
    assert engine.store.count() == 3
    assert engine.store._conn.execute(threads).fetchone()[0] == default


def test_max_seq_follows_every_kind_of_write() -> None:
    """max_seq, which the store gives again after its own writes without reading the tables, is the
    value the tables hold: after calls of several batches, replacements, a deletion of the newest
    document (never lowered) and another store's writes to a connection it shares."""
    import duckdb

    from nlql import Engine
    from nlql.embedders import HashEmbedder
    from nlql.stores.duckdb import DuckDBStore

    def read(store: DuckDBStore) -> int:
        store._seq_known = None  # (the tables, not what the store remembers)
        return store.max_seq()

    engine = Engine(embedder=HashEmbedder(dim=16), store=DuckDBStore(), warm_up=False)
    store = engine.store
    engine.add_texts([f"Text {i}." for i in range(7)], ids=[str(i) for i in range(7)], batch_size=2)
    assert store.max_seq() == read(store) == 7
    engine.add_texts(["Again.", "New."], ids=["3", "n"], batch_size=1)
    assert store.max_seq() == read(store) == 9
    engine.delete("n")
    assert store.max_seq() == read(store) == 9
    engine.add_text("After.", id="m")
    assert store.max_seq() == read(store) == 10
    conn = duckdb.connect()  # a connection shared with another writer: read every time
    mine = Engine(embedder=HashEmbedder(dim=16), store=DuckDBStore(connection=conn), warm_up=False)
    other = Engine(embedder=HashEmbedder(dim=16), store=DuckDBStore(connection=conn), warm_up=False)
    mine.add_texts(["A.", "B."], ids=["a", "b"])
    assert mine.store.max_seq() == 2
    other.add_texts(["C."], ids=["c"])
    assert mine.store.max_seq() == 3
