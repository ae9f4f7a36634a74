"""The entity graph: finding names in a question, spreading activation, exact incremental updates,
persistence, and the PostgreSQL tables + statement against the Python graph."""

from __future__ import annotations

import sqlite3
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlql.sql.binder import Binder
from nlql.sql.postgres import PostgresDialect
from nlql.text.entities import MAX_NAME_TOKENS, entity_key, token_spans
from nlql.text.graph import (
    SQLITE_SCHEMA,
    Activation,
    EntityGraph,
    check_spread,
    sentence_entities,
    sqlite_load,
    sqlite_save,
)

# ----------------------------------------------------------------------------- a reference graph


def reference(docs: dict[str, list[tuple[int, list[str]]]], text: str, hops: int, decay: float):
    """The SPEC §9 definitions computed the slow, obvious way, from the live documents only."""
    sent_keys: dict[tuple[str, int], set[str]] = {}
    for doc, sentences in docs.items():
        for pos, names in sentences:
            keys = {k for k, _ in sentence_entities(names)}
            if keys:
                sent_keys[(doc, pos)] = keys
    known = set().union(*sent_keys.values()) if sent_keys else set()
    weight: Counter[tuple[str, str]] = Counter()
    for keys in sent_keys.values():
        for a in keys:
            for b in keys:
                if a != b:
                    weight[(a, b)] += 1
    W = max(weight.values(), default=0)
    toks = [t for t, _, _ in token_spans(text)]
    occ = [(i, j, " ".join(toks[i:j])) for i in range(len(toks)) for j in range(i + 1, len(toks) + 1)
           if " ".join(toks[i:j]) in known]
    kept = [(i, j, k) for i, j, k in occ
            if not any(i2 <= i and j2 >= j and (j2 - i2) > (j - i) for i2, j2, _ in occ)]
    act = {k: 1.0 for _, _, k in kept}
    for _ in range(hops):
        new = dict(act)
        for (a, b), w in weight.items():
            if a in act:
                c = act[a] * ((decay * w) / W)
                if c > new.get(b, 0.0):
                    new[b] = c
        act = new
    rows = {}
    for sent, keys in sent_keys.items():
        vals = [act[k] for k in keys if k in act]
        if vals:
            rows[sent] = max(vals)
    found = list(dict.fromkeys(k for _, _, k in sorted(kept)))
    return found, act, rows, {k: w for k, w in weight.items() if k[0] < k[1]}


def build(docs: dict[str, list[tuple[int, list[str]]]]) -> EntityGraph:
    g = EntityGraph()
    for doc, sentences in docs.items():
        g.add(doc, sentences)
    return g


NOTES = {
    "n1": [(0, ["Bertrand Russell", "Whitehead"]), (1, ["Russell"]), (2, [])],
    "n2": [(0, ["Whitehead", "Cambridge"]), (1, ["Wittgenstein", "Russell", "Cambridge"])],
    "n3": [(0, ["Moore", "Cambridge"]), (1, ["Frege"])],
    "n4": [(0, ["Wittgenstein", "Vienna"])],
}


# ------------------------------------------------------------------------------ finding entities


def test_names_are_found_casefolded_as_whole_words_longest_first() -> None:
    g = build(NOTES)
    assert [f.key for f in g.find("Who mentioned RUSSELL?")] == ["russell"]
    assert [f.key for f in g.find("what did bertrand russell say")] == ["bertrand russell"]  # not also 'russell'
    assert g.find("Russellian logic, Cambridgeshire") == []  # whole words only
    assert [f.key for f in g.find("Russell's friend met Moore in Vienna")] == ["russell", "moore", "vienna"]
    found = g.find("Did Frege write to Russell?")
    assert [(f.name, f.start, f.end) for f in found] == [("Frege", 4, 9), ("Russell", 19, 26)]


def test_a_name_inside_a_longer_name_of_the_text_is_not_found_but_overlaps_are() -> None:
    g = build({"d": [(0, ["New York", "York Times", "Times", "New"])]})
    # "new york" and "york times" overlap without containing each other: both kept; "times" and
    # "new" lie inside longer matches: dropped
    assert [f.key for f in g.find("the New York Times")] == ["new york", "york times"]


def test_chinese_names_are_found_inside_unspaced_text() -> None:
    g = build({"d": [(0, ["罗素", "维特根斯坦"])]})
    assert [(f.key, f.name) for f in g.find("谁提到了罗素？")] == [("罗 素", "罗素")]  # one word per character


def test_deleted_entities_are_no_longer_known() -> None:
    g = build(NOTES)
    g.remove("n4")
    assert "vienna" not in g and "wittgenstein" in g
    assert g.find("Vienna") == []
    g.remove("n1")
    g.remove("n2")
    assert [f.key for f in g.find("Bertrand Russell and Whitehead")] == []


def test_a_longer_name_that_is_gone_leaves_the_shorter_one_findable() -> None:
    g = build({"a": [(0, ["Bertrand Russell"])], "b": [(0, ["Russell"])]})
    assert [f.key for f in g.find("Bertrand Russell")] == ["bertrand russell"]
    g.remove("a")
    assert [f.key for f in g.find("Bertrand Russell")] == ["russell"]


def test_sentence_entities_dedupes_and_drops_overlong_names() -> None:
    long = " ".join(["Word"] * (MAX_NAME_TOKENS + 1))
    assert sentence_entities(["Russell", "russell", long, "", "?!"]) == [("russell", "Russell")]
    with pytest.raises(TypeError):
        sentence_entities([3])  # type: ignore[list-item]


# ---------------------------------------------------------------------------------- activation


def test_activation_by_hand() -> None:
    g = build(NOTES)
    # weights: cambridge–whitehead 1, cambridge–russell 1, cambridge–wittgenstein 1, cambridge–moore 1,
    # russell–wittgenstein 1, bertrand russell–whitehead 1, wittgenstein–vienna 1: W = 1
    a0 = g.activate("who mentioned Russell?", hops=0)
    assert a0.entities == {"russell": 1.0}
    assert a0.as_dict() == {("n1", 1): 1.0, ("n2", 1): 1.0}
    a1 = g.activate("who mentioned Russell?", hops=1, decay=0.5)
    assert a1.entities == {"russell": 1.0, "wittgenstein": 0.5, "cambridge": 0.5}
    assert a1.as_dict() == {("n1", 1): 1.0, ("n2", 0): 0.5, ("n2", 1): 1.0, ("n3", 0): 0.5, ("n4", 0): 0.5}
    a2 = g.activate("who mentioned Russell?", hops=2, decay=0.5)
    assert a2.entities["whitehead"] == 0.25 and a2.entities["vienna"] == 0.25 and a2.entities["moore"] == 0.25
    assert a2.as_dict()[("n1", 0)] == 0.25  # via whitehead
    assert ("n3", 1) not in a2.as_dict()  # Frege: no link to anyone
    assert [h.count for h in a2.per_hop] == [1, 2, 3]
    assert a2.per_hop[1].top == (("Cambridge", 0.5), ("Wittgenstein", 0.5))


def test_weights_count_sentences_and_scale_by_the_largest() -> None:
    g = build({"a": [(0, ["X1", "Y1"]), (1, ["X1", "Y1"]), (2, ["X1", "Y1", "X1"]), (3, ["X1", "Z1"])]})
    assert g.weight("X1", "Y1") == 3 and g.weight("x1", "z1") == 1 and g.weight("Y1", "Z1") == 0
    act = g.activate("X1", hops=1, decay=0.6).entities
    assert act == {"x1": 1.0, "y1": 0.6, "z1": 1.0 * ((0.6 * 1) / 3)}


def test_rows_without_an_activated_entity_have_no_value_and_no_entity_means_no_rows() -> None:
    g = build(NOTES)
    a = g.activate("nothing known here", hops=3)
    assert len(a) == 0 and a.found == () and a.describe() == ["entities found: none"]
    b = g.activate("Frege", hops=2)
    assert b.as_dict() == {("n3", 1): 1.0}
    assert np.isnan(g.values_for(b, [("n3", 0)])[0]) and g.values_for(b, [("n3", 1)])[0] == 1.0


def test_decay_zero_spreads_nothing() -> None:
    g = build(NOTES)
    assert g.activate("Russell", hops=3, decay=0.0).entities == {"russell": 1.0}


def test_rows_come_in_insertion_order_and_top_breaks_ties_on_it() -> None:
    g = EntityGraph()
    g.add("late", [(0, ["Ada"])], seq=5)
    g.add("early", [(3, ["Ada"]), (1, ["Ada", "Babbage"])], seq=2)
    a = g.activate("Ada and Babbage", hops=1)
    assert a.pairs() == [("early", 1), ("early", 3), ("late", 0)]
    assert [a.pairs()[i] for i in a.top(2)] == [("early", 1), ("early", 3)]
    assert [a.pairs()[i] for i in a.top(10)] == [("early", 1), ("early", 3), ("late", 0)]


@pytest.mark.parametrize(("hops", "decay"), [(-1, 0.5), (1.5, 0.5), (True, 0.5), ("1", 0.5), (1, 1.5),
                                             (1, -0.1), (1, float("nan")), (1, "0.5"), (1, None)])
def test_bad_hops_and_decay_are_value_errors(hops: object, decay: object) -> None:
    with pytest.raises(ValueError):
        check_spread(hops, decay)
    with pytest.raises(ValueError):
        EntityGraph().activate("x", hops=hops, decay=decay)  # type: ignore[arg-type]


def test_explain_detail() -> None:
    a = build(NOTES).activate("Who mentioned Russell?", hops=2, decay=0.5)
    assert a.describe() == [
        "entities found: Russell",
        "hop 1: 2 entities raised: Cambridge 0.5, Wittgenstein 0.5",
        "hop 2: 3 entities raised: Moore 0.25, Vienna 0.25, Whitehead 0.25",  # ties: by name
    ]
    d = a.to_dict()
    assert d["found"] == ["Russell"] and d["rows"] == len(a) and d["max_weight"] == 1


def test_display_name_is_the_commonest_spelling() -> None:
    g = build({"a": [(0, ["NASA"]), (1, ["Nasa"]), (2, ["NASA"])]})
    assert g.display_name("nasa") == "NASA"
    g.add("a", [(0, ["Nasa"])])
    assert g.display_name("nasa") == "Nasa"


# ------------------------------------------------------------------------------- properties

NAMES = ["Ada", "Babbage", "Ada Lovelace", "Lovelace", "Turing", "Church", "Gödel", "Alan Turing", "罗素", "NASA"]
sentence_st = st.lists(st.sampled_from(NAMES), max_size=4)
doc_st = st.lists(sentence_st, min_size=1, max_size=4).map(lambda ss: list(enumerate(ss)))
docs_st = st.dictionaries(st.sampled_from([f"d{i}" for i in range(8)]), doc_st, max_size=8)
question_st = st.lists(st.sampled_from(NAMES + ["who", "met", "and", "Ada's"]), max_size=6).map(" ".join)


@settings(max_examples=150, deadline=None)
@given(docs_st, question_st, st.integers(0, 4), st.sampled_from([0.0, 0.3, 0.5, 0.9, 1.0]))
def test_activation_equals_the_reference(docs, question, hops, decay) -> None:  # type: ignore[no-untyped-def]
    g = build(docs)
    found, act, rows, edges = reference(docs, question, hops, decay)
    a = g.activate(question, hops=hops, decay=decay)
    assert [f.key for f in a.found] == found
    assert a.entities == act  # exactly: the same float operations
    assert a.as_dict() == rows
    assert g.edges() == edges
    assert all(0 < v <= 1 for v in a.values)


ops_st = st.lists(st.tuples(st.sampled_from(["add", "remove"]), st.sampled_from([f"d{i}" for i in range(6)]),
                            doc_st), max_size=25)


@settings(max_examples=120, deadline=None)
@given(ops_st, question_st, st.integers(0, 3))
def test_removes_and_replaces_leave_exactly_the_graph_of_what_is_left(ops, question, hops) -> None:  # type: ignore[no-untyped-def]
    g = EntityGraph()
    live: dict[str, list[tuple[int, list[str]]]] = {}
    for op, doc, sentences in ops:
        if op == "add":
            g.add(doc, sentences)
            live.pop(doc, None)
            live[doc] = sentences  # a replaced document moves to the end, as the engine writes it
        else:
            assert g.remove(doc) == (doc in live)
            live.pop(doc, None)
        g.activate(question, hops=hops)  # compile between writes too
    fresh = build(live)
    assert g.edges() == fresh.edges()
    assert g.entity_sentences() == fresh.entity_sentences()
    assert len(g) == len(fresh) and g.documents == fresh.documents == len(live)
    for key in fresh.entity_sentences():
        assert g.display_name(key) == fresh.display_name(key)
    a, b = g.activate(question, hops=hops), fresh.activate(question, hops=hops)
    assert a.pairs() == b.pairs() and a.values.tolist() == b.values.tolist() and a.entities == b.entities
    assert [(h.count, h.top) for h in a.per_hop] == [(h.count, h.top) for h in b.per_hop]


@settings(max_examples=100, deadline=None)
@given(docs_st, question_st, st.integers(0, 4), st.floats(0, 1), st.floats(0, 1))
def test_activation_is_monotone_in_decay_and_hops(docs, question, hops, d1, d2) -> None:  # type: ignore[no-untyped-def]
    lo, hi = sorted((d1, d2))
    g = build(docs)
    a_lo, a_hi = g.activate(question, hops, lo).entities, g.activate(question, hops, hi).entities
    assert set(a_lo) <= set(a_hi) and all(a_lo[k] <= a_hi[k] for k in a_lo)
    more = g.activate(question, hops + 1, hi).entities
    assert set(a_hi) <= set(more) and all(a_hi[k] <= more[k] for k in a_hi)


def test_compaction_after_many_removals_keeps_the_graph_exact() -> None:
    g = EntityGraph()
    for i in range(6000):
        g.add(f"d{i}", [(0, [f"P{i % 50}", f"Q{i % 7}"]), (1, ["Hub"])])
    for i in range(5000):
        assert g.remove(f"d{i}")
    g.add("new", [(0, ["Hub", "P1"])])
    live = {f"d{i}": [(0, [f"P{i % 50}", f"Q{i % 7}"]), (1, ["Hub"])] for i in range(5000, 6000)}
    live["new"] = [(0, ["Hub", "P1"])]
    fresh = build(live)
    assert len(g._slot_doc) < 2 * 6000  # compacted once on the way (dead slots outnumbered live ones)
    assert g.edges() == fresh.edges()
    a, b = g.activate("Hub", hops=2), fresh.activate("Hub", hops=2)
    assert a.pairs() == b.pairs() and a.values.tolist() == b.values.tolist()
    assert a.pairs()[-1] == ("new", 0)


# ----------------------------------------------------------------------------------- persistence


def test_rows_round_trip() -> None:
    g = build(NOTES)
    g.remove("n3")
    g.add("n1", [(0, ["Russell", "Frege"])])
    back = EntityGraph.from_rows(reversed(g.to_rows()))
    assert back.edges() == g.edges() and back.entity_sentences() == g.entity_sentences()
    a, b = g.activate("Frege", hops=2), back.activate("Frege", hops=2)
    assert a.pairs() == b.pairs() and a.values.tolist() == b.values.tolist()


def test_sqlite_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "nlql.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(SQLITE_SCHEMA)
        for seq, (doc, sentences) in enumerate(NOTES.items(), start=1):
            sqlite_save(conn, doc, seq, sentences)
        sqlite_save(conn, "n1", 9, [(0, ["Frege", "Russell"])])  # a replace
    with sqlite3.connect(path) as conn:
        g = sqlite_load(conn)
    expected = dict(NOTES)
    del expected["n1"]
    expected["n1"] = [(0, ["Frege", "Russell"])]
    fresh = build(expected)
    assert g.edges() == fresh.edges() and g.entity_sentences() == fresh.entity_sentences()
    assert g.activate("Frege", hops=1).pairs() == fresh.activate("Frege", hops=1).pairs()


# -------------------------------------------------------------------------------------- PostgreSQL


PG = PostgresDialect("t")  # GRAPH's SQL is the dialect's (nlql.sql.graph), on the shared binder


def _pyformat(fragment):  # type: ignore[no-untyped-def]
    b = Binder(PG, style="pyformat")
    return b.render(fragment), b.values


def _run(conn, statements) -> None:  # type: ignore[no-untyped-def]
    for s in statements:
        conn.execute(*_pyformat(s))


def _pg_activation(conn, text, hops, decay):  # type: ignore[no-untyped-def]
    q, values = _pyformat(PG.graph_activation(text, hops, decay))
    return {(d, p): v for d, p, v in conn.execute(q, values).fetchall()}


def _pg_edges(conn) -> dict[tuple[str, str], int]:  # type: ignore[no-untyped-def]
    return {(a, b): w for a, b, w in conn.execute('SELECT a, b, weight FROM "t_entity_edges" WHERE a < b')}


def test_postgres_tables_and_statement_match_the_python_graph(pg_dsn: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    rng = np.random.default_rng(7)
    names = [f"Person{i}" for i in range(40)] + ["Bertrand Russell", "Russell", "O'Brien", "Müller", "罗素"]
    docs = {}
    for d in range(60):
        docs[f"doc{d}"] = [(p, list(rng.choice(names, size=int(rng.integers(0, 5)))))
                           for p in range(int(rng.integers(1, 5)))]
    questions = ["who mentioned Bertrand Russell and Person3?", "Person1", "was ist mit Müller, O'Brien",
                 "罗素说了什么", "nobody known"]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for ddl in PG.graph_schema():
            conn.execute(ddl)
        for ddl in PG.graph_schema():  # idempotent
            conn.execute(ddl)
        g = EntityGraph()
        live: dict[str, list] = {}

        def write(doc: str, sentences: list) -> None:
            with conn.transaction():
                _run(conn, PG.graph_remove([doc]))
                _run(conn, PG.graph_add([(doc, sentences)]))
            g.add(doc, sentences)
            live.pop(doc, None)
            live[doc] = sentences

        for doc, sentences in docs.items():
            write(doc, sentences)
        # replaces and deletes, then compare everything
        for d in range(0, 60, 7):
            write(f"doc{d}", [(0, ["Person1", "Russell"]), (1, ["Person2"])])
        for d in range(3, 60, 11):
            with conn.transaction():
                _run(conn, PG.graph_remove([f"doc{d}"]))
            g.remove(f"doc{d}")
            live.pop(f"doc{d}")
        assert _pg_edges(conn) == g.edges() == build(live).edges()
        assert conn.execute('SELECT count(*) FROM "t_entity_edges" WHERE weight <= 0').fetchone()[0] == 0
        for q in questions:
            for hops, decay in [(0, 0.5), (1, 0.5), (2, 0.3), (3, 0.9), (2, 0.0)]:
                a = g.activate(q, hops=hops, decay=decay)
                assert _pg_activation(conn, q, hops, decay) == a.as_dict(), (q, hops, decay)
                text, values = _pyformat(PG.graph_hop_detail(q, hops, decay))
                detail = conn.execute(text, values).fetchall()
                per_hop = [[(name, act) for hop, _, name, act in detail if hop == h] for h in range(hops + 1)]
                assert [len(x) for x in per_hop] == [h.count for h in a.per_hop]
                assert [tuple(x[:10]) for x in per_hop[1:]] == [h.top for h in a.per_hop[1:]]
        assert {r[0] for r in detail if r[0] == 0} == set()  # the last question finds nobody


def test_postgres_statements_bind_every_value(pg_dsn: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    hostile = "Robert'); DROP TABLE t_entity_links; --"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for ddl in PG.graph_schema():
            conn.execute(ddl)
        _run(conn, PG.graph_add([(hostile, [(0, [hostile, "Bobby Tables"])])]))
        got = _pg_activation(conn, hostile, 1, 0.5)
        assert got == {(hostile, 0): 1.0}
        for stmt in (PG.graph_activation(hostile), *PG.graph_add([("x", [(0, [hostile])])])):
            assert "DROP" not in stmt.text_only()
        assert entity_key(hostile) in {e for (e,) in conn.execute('SELECT entity FROM "t_entity_links"')}


@settings(max_examples=60, deadline=None)
@given(docs_st, question_st, st.integers(0, 3))
def test_both_ways_of_reaching_sentences_agree(docs, question, hops) -> None:  # type: ignore[no-untyped-def]
    import nlql.text.graph as graph_module

    g = build(docs)
    saved = graph_module._FULL_PASS
    try:
        graph_module._FULL_PASS = 0  # always gather the activated entities' sentences
        gathered = g.activate(question, hops=hops)
        graph_module._FULL_PASS = 10**9  # always one pass over every link
        scanned = g.activate(question, hops=hops)
    finally:
        graph_module._FULL_PASS = saved
    assert gathered.pairs() == scanned.pairs() and gathered.values.tolist() == scanned.values.tolist()
    idx = scanned.top(3)
    assert scanned.rows(idx) == [scanned.pairs()[i] for i in idx.tolist()]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([0.25, 0.5, 1.0, 0.125]), max_size=40), st.integers(0, 45))
def test_top_k_is_the_stable_sort_prefix(values, k) -> None:  # type: ignore[no-untyped-def]
    g = EntityGraph()
    for i in range(len(values)):
        g.add(f"d{i}", [(0, ["Seed"])])
    fake = np.array(values, dtype=np.float64)
    a = Activation("Seed", 0, 0.5, 0, (), (), np.arange(fake.size), fake, np.zeros(0, np.int64), np.zeros(0),
                   g._snapshot())
    expected = sorted(range(fake.size), key=lambda i: (-fake[i], i))[:k]
    assert a.top(k).tolist() == expected
    assert a.rows(a.top(k)) == [(f"d{i}", 0) for i in expected]


def test_add_many_equals_adding_one_by_one_and_restores_the_collector() -> None:
    import gc

    docs = [(f"d{i}", [(p, [f" N{(i * 7 + p) % 13} ", f"M{i % 5}"][: 1 + (i + p) % 2]) for p in (2, 0, 1)], i + 1)
            for i in range(60)]
    docs += [("d3", [(0, ["N1", "Q"])], 99), ("e", [(0, [])], None)]  # a replace in the batch, no names
    one, many = EntityGraph(), EntityGraph()
    for d, s, q in docs:
        one.add(d, s, q)
    many.add_many(docs)
    assert many.to_rows() == one.to_rows() and many.edges() == one.edges()
    assert many.activate("N1 and M2", hops=2).as_dict() == one.activate("N1 and M2", hops=2).as_dict()
    assert gc.isenabled()
    with pytest.raises(TypeError):
        many.add_many([("x", [(0, ["ok"])], None), ("y", [(0, [3])], None)])
    assert gc.isenabled() and "ok" not in many  # nothing of a failing batch is added
    gc.disable()
    try:
        many.add_many([("z", [(0, ["Z"])], None)])
        assert not gc.isenabled()  # a paused collector stays paused
    finally:
        gc.enable()
