"""Milvus store on Milvus Lite (the real pymilvus client, an in-process Milvus Lite per file): lifecycle,
reopen, URLs, filters with hostile strings, the HNSW top-k guarantee, BM25 kept in the store, info
records, and the real MiniLM model once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from adapter_kit import HOSTILE, make_doc, unit_vectors  # noqa: E402

from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.errors import BackendError, NLQLError, StoreMismatchError  # noqa: E402
from nlql.pushdown import Cond, FAnd  # noqa: E402
from nlql.stores import pyfilter  # noqa: E402
from nlql.stores._terms import StoreKeywordIndex  # noqa: E402
from nlql.stores.milvus import MilvusStore, escape, from_url, literal  # noqa: E402
from nlql.text.analyzer import Analyzer  # noqa: E402

BM25_Q = 'SELECT SENTENCE LET kw = BM25(content, "zebra stripes") WHERE kw > 0 ORDER BY kw DESC'
TEXTS = ["Zebra stripes confuse flies. Lions sleep.", "A zebra has stripes and stripes. Horses run.",
         "Cats sleep all day.", "Agents call tools. Tools return stripes of data."]


def _engine(store: object) -> Engine:
    return Engine(embedder=HashEmbedder(dim=32), store=store, warm_up=False)


def _rows(hits) -> list[tuple]:  # type: ignore[no-untyped-def]
    return [(h.id, h.content, h.metadata, {k: round(v, 12) for k, v in h.scores.items()}) for h in hits]


def test_url_forms_map_to_constructor_arguments(tmp_path: Path) -> None:
    assert from_url("milvus:///data/x.db") == {"uri": "/data/x.db"}
    assert from_url("milvus://rel/x.db") == {"uri": "rel/x.db"}
    assert from_url("milvus+http://h:19530") == {"uri": "http://h:19530"}
    assert from_url("milvus+https://h:443/prod?collection=docs&index=hnsw&hnsw_ef=64") == {
        "uri": "https://h:443", "db_name": "prod", "collection": "docs", "index": "hnsw", "hnsw_ef": 64}
    with pytest.raises(NLQLError, match="unknown option 'colection'"):
        from_url("milvus:///x.db?colection=a")
    with pytest.raises(NLQLError, match="names no host"):
        from_url("milvus+http://")
    with pytest.raises(NLQLError, match="unknown Milvus index"):
        MilvusStore(str(tmp_path / "a.db"), index="ivf")
    with pytest.raises(NLQLError, match="invalid Milvus collection name"):
        MilvusStore(str(tmp_path / "a.db"), collection="no-dash")


def test_engine_lifecycle_and_reopen(tmp_path: Path) -> None:
    url = f"milvus://{tmp_path}/life.db?collection=life"
    e = _engine(url)
    e.add_texts(TEXTS, ids=["z1", "z2", "c", "t"], metadatas=[{"k": i, "tag": ["x", i]} for i in range(4)])
    e.add_text("Only one sentence now.", id="z2", metadata={"k": 9})  # replace: no stale sentences
    assert e.delete("c") is not False
    assert e.store.count() == 2 + 1 + 2
    before = _rows(e.search("SELECT SENTENCE"))
    bm_before = _rows(e.search(BM25_Q))
    assert [r[0] for r in before] == ["z1#0", "z1#1", "t#0", "t#1", "z2#0"]
    assert before[-1][2] == {"k": 9}
    e.store.set_info("owner", '{"model": "hash"}')
    e.close()

    again = _engine(url)  # a new client on the same file: everything is back, nothing re-ingested
    assert _rows(again.search("SELECT SENTENCE")) == before
    assert _rows(again.search(BM25_Q)) == bm_before
    assert again.store.get_info("owner") == '{"model": "hash"}'
    assert again.store.max_seq() == 5  # 4 documents, then the replacement
    again.close()
    with pytest.raises(BackendError, match="size 32"):
        MilvusStore(str(tmp_path / "life.db"), collection="life").open(16)


@pytest.mark.xfail(strict=True, reason="Milvus Lite 2.5 prints 'the file has been opened by another program' "
                   "but the second process's client still connects: there is no error to turn into a BackendError")
def test_second_process_on_one_lite_file_is_a_clear_error(tmp_path: Path) -> None:
    store = MilvusStore(str(tmp_path / "one.db"))
    store.open(8)
    child = textwrap.dedent(f"""
        from nlql.errors import BackendError
        from nlql.stores.milvus import MilvusStore
        try:
            MilvusStore({str(tmp_path / 'one.db')!r})
        except BackendError as exc:
            print("BackendError", exc.hint)
    """)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    store.close()
    assert "BackendError" in out.stdout and "milvus-server" in out.stdout, out.stderr[-2000:]


def test_bm25_is_read_from_the_store_and_equals_the_builtin(tmp_path: Path) -> None:
    e = _engine(f"milvus://{tmp_path}/bm.db")
    ref = _engine("memory")
    for eng in (e, ref):
        eng.add_texts(TEXTS, ids=["z1", "z2", "c", "t"])
        eng.delete("c")
    queries = [BM25_Q, 'SELECT SENTENCE LET s = 0.5 * SIMILARITY(content, "zebra") + BM25(content, "stripes") '
                       "ORDER BY s DESC LIMIT 3",
               'SELECT DOCUMENT LET a = SIMILARITY(content, "zebra"), k = BM25(content, "stripes sleep"), '
               "f = RRF(a, k) ORDER BY f DESC"]
    for q in queries:
        got, want = e.search(q), ref.search(q)
        assert [h.id for h in got] == [h.id for h in want], q
        for g, w in zip(got, want):
            for k, v in w.scores.items():
                assert g.scores[k] == pytest.approx(v, rel=1e-12, abs=1e-12)
    assert isinstance(e._bm25, StoreKeywordIndex)  # the engine holds no keyword index
    e.close()


def test_the_recorded_analyzer_wins_over_a_store_objects_own(tmp_path: Path) -> None:
    """The terms on disk were cut by the analyzer the store recorded: a store object made with another
    analyzer gets the recorded one back (BM25 stays in the store, same scores); an engine asked for
    another analyzer is refused with a hint, before anything is read or written."""
    path = str(tmp_path / "an.db")
    e = _engine(MilvusStore(path))
    e.add_texts(TEXTS[:2], ids=["a", "b"])
    want = _rows(e.search(BM25_Q))
    recorded = e.store.analyzer.describe()
    e.close()
    other = _engine(MilvusStore(path, analyzer=Analyzer(stopwords=["a"])))
    assert other.store.analyzer.describe() == recorded
    assert other.store.capabilities.KEYWORD_STATS and isinstance(other._bm25, StoreKeywordIndex)
    assert _rows(other.search(BM25_Q)) == want
    other.close()
    with pytest.raises(StoreMismatchError, match="BM25 analyzer") as err:
        Engine(embedder=HashEmbedder(dim=32), store=MilvusStore(path), analyzer=Analyzer(stopwords=["a"]),
               warm_up=False)
    assert "omit the analyzer" in (err.value.hint or "")
    again = _engine(MilvusStore(path))
    assert _rows(again.search(BM25_Q)) == want
    again.close()


@pytest.mark.parametrize("text", HOSTILE + ["line\nbreak\ttab\r", "\ud800lone", "%_\\", "\x01\x02", '"\'"'])
def test_hostile_strings_are_data(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    store = _shared_store(tmp_path_factory)
    e = _engine(store)
    doc_id = "id:" + text
    e.add_text("Plain words " + text + " end.", id=doc_id, metadata={"s": text, "other": "x" + text})
    e.add_text("Decoy sentence.", id="decoy:" + text, metadata={"s": text + "!"})
    got = e.search("SELECT SENTENCE WHERE meta.s == $v", params={"v": text})
    assert {h.doc_id for h in got} == {doc_id}
    assert got[0].metadata == {"s": text, "other": "x" + text}
    assert {h.doc_id for h in e.search("SELECT SENTENCE WHERE doc_id == $v", params={"v": doc_id})} == {doc_id}
    if text:
        hits = e.search("SELECT SENTENCE WHERE meta.other CONTAINS $v AND meta.s IN ($v, 'zz')", params={"v": text})
        assert {h.doc_id for h in hits} == {doc_id}
        assert doc_id not in {h.doc_id for h in e.search("SELECT SENTENCE WHERE meta.s != $v", params={"v": text})}
    e.delete(doc_id)
    e.delete("decoy:" + text)


_SHARED: dict[str, MilvusStore] = {}


def _shared_store(tmp_path_factory: pytest.TempPathFactory) -> MilvusStore:
    if "s" not in _SHARED:
        _SHARED["s"] = MilvusStore(str(tmp_path_factory.mktemp("hostile") / "h.db"))
    return _SHARED["s"]


def test_literal_encoder_is_strict() -> None:
    assert literal('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    assert literal(-0.0) == "-0.0" and literal(1e300) == "1e+300" and literal(False) == "false"
    for bad in ("nul\x00", "\udfff"):
        with pytest.raises(ValueError):
            literal(bad)
    with pytest.raises(ValueError):
        literal(float("nan"))
    # the escape keeps equality and substrings: a needle matches only where it matched before
    texts = ["\x00", "\x01", "\x00\x01", "a\ud800b", "\x08\x07", "plain"]
    for a in texts:
        for b in texts:
            assert (escape(b) in escape(a)) == (b in a), (a, b)
            assert (escape(a) == escape(b)) == (a == b)


def test_hnsw_returns_the_exact_top_k_of_a_selective_filter(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    centres = unit_vectors(rng, 4, 16)
    docs = []
    for i in range(400):
        v = centres[i % 4] + 0.2 * rng.normal(size=16)
        docs.append(make_doc(f"d{i}", [f"Sentence {i}."], {"g": i % 50}, i + 1, (v / np.linalg.norm(v))[None, :]
                             .astype(np.float32)))
    exact, ann = MilvusStore(str(tmp_path / "e.db")), MilvusStore(str(tmp_path / "a.db"), index="hnsw", hnsw_ef=8)
    for s in (exact, ann):
        s.open(16)
        s.upsert(docs)
    flt = FAnd((Cond("eq", ("meta", "g"), 7), Cond("ge", ("position",), 0)))
    q = unit_vectors(rng, 3, 16)
    want = exact.knn(q, 10, exact.compile_filter(flt))
    got = ann.knn(q, 10, ann.compile_filter(flt))
    assert [len(r) for r in got] == [8, 8, 8]  # min(k, matches): 400 / 50
    assert [[k for k, _ in r] for r in got] == [[k for k, _ in r] for r in want]
    rows = exact.fetch(exact.scan(exact.compile_filter(flt)))
    assert all(pyfilter.row_passes(flt, r) for r in rows) and len(rows) == 8
    assert not ann.capabilities.EXACT and exact.capabilities.EXACT
    for s in (exact, ann):
        s.close()


def test_info_records_round_trip(tmp_path: Path) -> None:
    s = MilvusStore(str(tmp_path / "i.db"))
    s.open(4)
    assert s.get_info("missing") is None
    for key in ["embedder", "k\x00ey", "\ud800", "x" * 600]:
        s.set_info(key, "value of " + key)
        assert s.get_info(key) == "value of " + key
    s.set_info("embedder", "second")
    assert s.get_info("embedder") == "second"
    s.close()


def test_the_record_is_read_before_open(tmp_path: Path) -> None:
    """``get_info`` before ``open`` (the Store contract): None where no store is yet, which the engine reads
    to choose its default embedder (it raised "collection not found"), and the record of one that is."""
    path = str(tmp_path / "r.db")
    assert MilvusStore(path).get_info("embedder") is None
    s = MilvusStore(path)
    s.open(4)
    s.set_info("embedder", "hash-4")
    s.close()
    assert MilvusStore(path).get_info("embedder") == "hash-4"


@pytest.mark.model
def test_the_default_embedder_opens_a_new_milvus_store_and_reopens_it(tmp_path: Path) -> None:
    """``Engine(store="milvus://…")`` with no embedder: the default model, recorded, and found again."""
    url = f"milvus://{tmp_path}/d.db"
    e = Engine(store=url, warm_up=False)
    e.add_texts(["The cat sat on the warm windowsill.", "Stock markets fell sharply on Monday."], ids=["cat", "stocks"])
    assert e.search('SELECT DOCUMENT LET s = SIMILARITY(content, "a sleeping pet") ORDER BY s DESC LIMIT 1')[0].doc_id \
        == "cat"
    model = e.embedder.name
    e.close()
    again = Engine(store=url, warm_up=False)
    assert again.embedder.name == model and len(again) == 2
    again.close()


@pytest.mark.model
def test_real_minilm_on_milvus(tmp_path: Path) -> None:
    from nlql.embedders import SentenceTransformerEmbedder

    e = Engine(embedder=SentenceTransformerEmbedder(), store=f"milvus://{tmp_path}/m.db", warm_up=False)
    e.add_texts(["The cat sat on the warm windowsill.", "Stock markets fell sharply on Monday.",
                 "A kitten naps in the sun."], ids=["cat", "stocks", "kitten"])
    hits = e.search('SELECT DOCUMENT LET s = SIMILARITY(content, "sleeping pets") ORDER BY s DESC LIMIT 2')
    assert {h.doc_id for h in hits} == {"cat", "kitten"}
    fused = e.search('SELECT SENTENCE LET s = SIMILARITY(content, "markets"), k = BM25(content, "markets"), '
                     "f = RRF(s, k) ORDER BY f DESC LIMIT 1")
    assert fused[0].doc_id == "stocks"
    e.close()


NARROW_QUERIES = [
    ('SELECT SENTENCE LET kw = BM25(content, "zebra stripes") WHERE kw > 0 ORDER BY kw DESC LIMIT 3', True),
    ('SELECT SENTENCE LET kw = BM25(content, "zebra") ORDER BY kw DESC LIMIT 2', True),
    ('SELECT SENTENCE LET kw = BM25(content, "zebra") ORDER BY kw DESC LIMIT 40', False),  # too few matches
    ('SELECT SENTENCE LET kw = BM25(content, "stripes") WHERE meta.g == 1 AND kw >= 0 ORDER BY kw DESC LIMIT 2',
     True),
    ('SELECT SENTENCE LET kw = BM25(content, "stripes") WHERE meta.name < "m" ORDER BY kw DESC LIMIT 2', True),
    ('SELECT SENTENCE LET kw = BM25(content, "stripes") WHERE meta.name LIKE "a%" ORDER BY kw DESC LIMIT 2',
     False),
    ('SELECT SENTENCE LET s = SIMILARITY(content, "zebra"), kw = BM25(content, "stripes zebra"), '
     "f = RRF(s, kw) ORDER BY f DESC LIMIT 4", True),
    ('SELECT SENTENCE LET s = SIMILARITY(content, ["zebra", "cats"]), kw = BM25(content, "stripes"), '
     'f = INTERLEAVE(kw, s) WHERE meta.g != 0 ORDER BY f DESC LIMIT 3', True),
]


@pytest.fixture(scope="module")
def narrow_pair(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    texts = ["Zebra stripes here.", "Stripes, stripes.", "A zebra.", "Cats sleep.", "Zebra stripes here.",
             "Plain text.", "Stripes of a zebra and more zebra.", "Stripes."] * 3
    metas = [{"g": i % 3, "name": "abcdefghijklmnopqrstuvwx"[i]} for i in range(len(texts))]
    ids = [f"n{i:02d}" for i in range(len(texts))]
    got = _engine(MilvusStore(str(tmp_path_factory.mktemp("narrow") / "n.db")))
    want = _engine("memory")
    for e in (got, want):
        e.add_texts(texts, ids=ids, metadatas=metas)
    yield got, want
    got.close()


@pytest.mark.parametrize(("query", "narrowed"), NARROW_QUERIES)
def test_keyword_recall_reads_only_what_can_rank_and_answers_the_same(narrow_pair, query: str,
                                                                      narrowed: bool) -> None:
    got_engine, want_engine = narrow_pair
    got, want = got_engine.search(query), want_engine.search(query)
    assert [h.id for h in got] == [h.id for h in want]
    for g, w in zip(got, want):
        for k, v in w.scores.items():
            assert g.scores[k] == pytest.approx(v, rel=1e-9, abs=1e-12)
    assert ("keyword_recall" in got.stats) == narrowed, got.stats
    if narrowed and "ORDER BY kw DESC" in query:
        assert got.stats["keyword_recall"] < got_engine.store.count()  # not every row was read


def test_bm25_top_n_bound_holds_when_sentences_are_longer_than_the_reference(tmp_path: Path) -> None:
    # average length ~70 terms > A0 = 32: the bound factor exceeds 1 and the sparse search must widen
    import random

    rng = random.Random(5)
    words = [f"w{i}" for i in range(40)]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randrange(5, 140))) + "." for _ in range(300)]
    got, want = _engine(MilvusStore(str(tmp_path / "long.db"))), _engine("memory")
    for e in (got, want):
        e.add_texts(texts, ids=[f"l{i}" for i in range(len(texts))])
    for q in ["w1", "w2 w3", "w39 w0 w7"]:
        query = f'SELECT SENTENCE LET kw = BM25(content, "{q}") ORDER BY kw DESC LIMIT 5'
        g, w = got.search(query), want.search(query)
        assert [h.id for h in g] == [h.id for h in w]
        assert [h.scores["kw"] for h in g] == pytest.approx([h.scores["kw"] for h in w], rel=1e-9)
        assert got.store.last_stats["path"] == "bm25-sparse"
    got.close()


def test_bm25_reads_what_the_page_needs(tmp_path: Path) -> None:
    # scores that do not tie: the sparse search reads one window of rows whatever the corpus size
    import random

    rng = random.Random(1)
    words = [f"w{i}" for i in range(300)]
    e = _engine(MilvusStore(str(tmp_path / "reads.db")))
    query = 'SELECT SENTENCE LET kw = BM25(content, "w7 w100 w250") WHERE kw > 0 ORDER BY kw DESC LIMIT 10'
    reads = []
    for lo, hi in ((0, 500), (500, 2000)):
        e.add_texts([" ".join(rng.choice(words) for _ in range(rng.randrange(4, 30))) + "." for _ in range(lo, hi)],
                    ids=[f"d{i}" for i in range(lo, hi)])
        hits = e.search(query)
        assert len(hits) == 10
        reads.append((e.store.last_stats["read"], hits.stats["keyword_recall"]))
    assert reads[0][0] == reads[1][0] == 64 and all(c <= 20 for _, c in reads), reads
    e.close()


def test_bm25_candidates_cut_tied_scores_in_insertion_order(tmp_path: Path) -> None:
    from adapter_kit import check_tied_bm25_window

    check_tied_bm25_window(f"milvus://{tmp_path}/ties.db")


def test_document_pages_by_bm25_and_fusions_read_only_their_arms_documents(tmp_path: Path) -> None:
    from adapter_kit import check_document_arms

    check_document_arms(f"milvus://{tmp_path}/docs.db")


def test_bm25_and_rrf_pages_read_each_row_once_and_no_term_arrays(narrow_pair, monkeypatch: pytest.MonkeyPatch) -> None:
    # the rows a search's knn and sparse reads returned serve its fetch and its scoring; terms come from
    # the rows' content (Milvus Lite returns an ARRAY field at ~0.1 ms a row): the same answers
    got_engine, want_engine = narrow_pair
    inner = got_engine.store.client._client
    calls: list[tuple[str, str, list[str]]] = []
    for name in ("query", "search"):
        real = getattr(inner, name)

        def spy(*args, _real=real, _name=name, **kwargs):  # type: ignore[no-untyped-def]
            calls.append((_name, kwargs.get("filter") or "", list(kwargs.get("output_fields") or [])))
            return _real(*args, **kwargs)
        monkeypatch.setattr(inner, name, spy)
    bm25 = 'SELECT SENTENCE LET kw = BM25(content, "zebra stripes") WHERE kw > 0 ORDER BY kw DESC LIMIT 3'
    rrf = ('SELECT SENTENCE LET s = SIMILARITY(content, "zebra stripes"), kw = BM25(content, "zebra stripes"), '
           'f = RRF(s, kw) ORDER BY f DESC LIMIT 3')
    for query, extra_searches in ((bm25, 0), (rrf, 1)):
        for _ in range(2):  # (the second time the document frequencies are memoised)
            calls.clear()
            got, want = got_engine.search(query), want_engine.search(query)
        assert [h.id for h in got] == [h.id for h in want]
        for g, w in zip(got, want):
            assert g.scores == pytest.approx(w.scores, rel=1e-9, abs=1e-12)
        assert not [c for c in calls if "terms" in c[2] or "tfs" in c[2]], calls
        assert not [c for c in calls if c[0] == "query" and "key in" in c[1]], calls  # no row read again
        by_key = [c for c in calls if c[0] == "search" and "key in" in c[1]]
        assert len(by_key) <= extra_searches and all(c[2] == ["vec"] for c in by_key), calls  # (vectors the knn did not read)


WINDOW_QUERIES = [
    # (query, whether rows outside the SIMILARITY arm's window are left unread until the page is cut)
    ('SELECT SENTENCE LET s = SIMILARITY(content, "w3 w7"), kw = BM25(content, "w3 w7"), '
     "f = RRF(s, kw, window => 5) ORDER BY f DESC LIMIT 10", True),
    ('SELECT SENTENCE LET s = SIMILARITY(content, "w1 w12"), kw = BM25(content, "w12 w5"), '
     "f = INTERLEAVE(kw, s, window => 4) WHERE meta.g != 0 ORDER BY f DESC LIMIT 8", True),
    ('SELECT SENTENCE LET s = SIMILARITY(content, "w3 w7"), kw = BM25(content, "w3 w7"), '
     "f = RRF(s, kw, window => 5), x = s * 2 ORDER BY f DESC LIMIT 10 OFFSET 2", True),
    # a later sort key reads every candidate's similarity
    ('SELECT SENTENCE LET s = SIMILARITY(content, "w3 w7"), kw = BM25(content, "w3 w7"), '
     "f = RRF(s, kw, window => 5) ORDER BY f DESC, s DESC LIMIT 10", False),
    # so does an arm-local floor
    ('SELECT SENTENCE LET s = SIMILARITY(content, "w3 w7", min => 0.1), kw = BM25(content, "w3 w7"), '
     "f = RRF(s, kw, window => 5) ORDER BY f DESC LIMIT 10", False),
]


@pytest.fixture(scope="module")
def window_pair(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    import random

    rng = random.Random(3)
    words = [f"w{i}" for i in range(20)]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randrange(3, 9))) + "." for _ in range(200)]
    metas = [{"g": i % 3} for i in range(len(texts))]
    ids = [f"r{i:03d}" for i in range(len(texts))]
    got = _engine(MilvusStore(str(tmp_path_factory.mktemp("window") / "w.db")))
    want = _engine("memory")
    for e in (got, want):
        e.add_texts(texts, ids=ids, metadatas=metas)
    yield got, want
    got.close()


@pytest.mark.parametrize(("query", "unread"), WINDOW_QUERIES)
def test_fusion_reads_similarities_outside_the_arm_window_only_for_the_page(window_pair, query: str,
                                                                          unread: bool) -> None:
    # a row outside the SIMILARITY arm's knn window ranks nowhere in that arm: its similarity is read only
    # when it is on the page (which shows it), and every hit's values are the built-in store's
    got_engine, want_engine = window_pair
    got, want = got_engine.search(query), want_engine.search(query)
    assert [h.id for h in got] == [h.id for h in want]
    assert [h.scores for h in got] == [pytest.approx(h.scores, rel=1e-9, abs=1e-12) for h in want]
    assert all(h.scores["s"] is not None for h in got)
    assert ("unread_similarities" in got.stats) == unread, got.stats
    if unread:  # the page holds rows of the BM25 arm that the knn window did not return
        assert got.stats["unread_similarities"]["s"] > 0


def test_a_fusion_asks_milvus_lite_its_keyword_reads_before_its_knn(window_pair, monkeypatch: pytest.MonkeyPatch) -> None:
    # Milvus Lite answers one call at a time: a knn's long search first would make the short sparse
    # read wait behind it. The keyword arm's reads go first and its scoring overlaps the knn.
    got_engine, want_engine = window_pair
    assert got_engine.store.capabilities.SERIAL_CALLS
    inner = got_engine.store.client._client
    order: list[str] = []
    real = inner.search

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        order.append(kwargs.get("anns_field", ""))
        return real(*args, **kwargs)
    monkeypatch.setattr(inner, "search", spy)
    query = ('SELECT SENTENCE LET s = SIMILARITY(content, "w2 w9"), kw = BM25(content, "w2 w9"), '
             "f = RRF(s, kw, window => 5) ORDER BY f DESC LIMIT 6")
    for _ in range(3):
        order.clear()
        got, want = got_engine.search(query), want_engine.search(query)
        assert order[:2] == ["sp", "vec"], order
        assert [h.id for h in got] == [h.id for h in want]
        assert [h.scores for h in got] == [pytest.approx(h.scores, rel=1e-9, abs=1e-12) for h in want]


@pytest.mark.parametrize(("query", "vectors"), [
    ('SELECT SENTENCE LET s = SIMILARITY(content, "w2 w9"), kw = BM25(content, "w2 w9"), '
     "f = RRF(s, kw, window => 5) ORDER BY f DESC LIMIT 6", False),
    # another SIMILARITY score is read for the knn's rows too: their vectors come with them
    ('SELECT SENTENCE LET s = SIMILARITY(content, "w2 w9"), kw = BM25(content, "w2 w9"), o = SIMILARITY(content, "w4"), '
     "f = RRF(s, kw, window => 5) ORDER BY f DESC LIMIT 6", True),
    # two query vectors: a row's value is its best cosine over both, not one knn's score
    ('SELECT SENTENCE LET s = SIMILARITY(content, ["w2", "w9"]), kw = BM25(content, "w2 w9"), '
     "f = RRF(s, kw, window => 5) ORDER BY f DESC LIMIT 6", True),
])
def test_a_fusion_knn_returns_vectors_only_when_the_search_reads_them(window_pair, monkeypatch: pytest.MonkeyPatch,
                                                                       query: str, vectors: bool) -> None:
    # the SIMILARITY arm's window takes the knn's scores as its values (KNN_SCORES): decoding 100 vectors
    # costs Milvus Lite's client ~3 ms a query, spent only when something after the knn reads them
    got_engine, want_engine = window_pair
    inner = got_engine.store.client._client
    fields: list[list[str]] = []
    real = inner.search

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        if kwargs.get("anns_field") == "vec" and not kwargs.get("filter"):
            fields.append(list(kwargs.get("output_fields") or []))
        return real(*args, **kwargs)
    monkeypatch.setattr(inner, "search", spy)
    got, want = got_engine.search(query), want_engine.search(query)
    assert [h.id for h in got] == [h.id for h in want]
    assert [h.scores for h in got] == [pytest.approx(h.scores, rel=1e-9, abs=1e-12) for h in want]
    assert fields and all(("vec" in f) == vectors for f in fields), fields


def _builtin_and_milvus_rows(tmp_path: Path, query: str) -> tuple[list[tuple], list[tuple]]:
    texts = [f"Sentence number {i} about topic {i % 3}." for i in range(30)]
    engines = [_engine(f"milvus://{tmp_path}/m.db"), _engine("memory")]
    for e in engines:
        e.add_texts(texts, ids=[f"d{i:02d}" for i in range(30)], metadatas=[{"s": f"x{i}"} for i in range(30)])
    got, want = (_rows(e.search(query)) for e in engines)
    engines[0].close()
    return got, want


@pytest.mark.parametrize("where", ["", "WHERE meta.s > 'x1'"])  # (the second is re-checked by the adapter)
def test_a_recall_deeper_than_the_milvus_window_returns_the_rows_of_the_builtin_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    # a recall depth above Milvus's top-k window is answered by a streamed exact scan; the window
    # (16384 in Milvus) is made small here so that 30 rows exceed it
    import nlql.stores.milvus as milvus

    monkeypatch.setattr(milvus, "_MAX_TOPK", 8)
    got, want = _builtin_and_milvus_rows(
        tmp_path, f'SELECT SENTENCE LET s = SIMILARITY(content, "topic 1") {where} ORDER BY s DESC LIMIT 12')
    assert got == want and len(want) == 12


def test_a_rechecked_filter_over_many_rows_returns_the_rows_of_the_builtin_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # more candidates than four key batches are scored by a streamed exact scan; the batch is made
    # small here so that 30 rows are "many" (with Milvus's own batch this takes 4001 rows)
    import nlql.stores.milvus as milvus

    monkeypatch.setattr(milvus, "_READ_BATCH", 2)
    got, want = _builtin_and_milvus_rows(
        tmp_path, 'SELECT SENTENCE LET s = SIMILARITY(content, "topic 1") WHERE meta.s > \'x1\' ORDER BY s DESC LIMIT 5')
    assert got == want and len(want) == 5
