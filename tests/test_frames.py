"""Hits as tables (pandas, Arrow, polars), their repr, and `nlql query --format csv|jsonl|table`."""

from __future__ import annotations

import csv
import io
import json
import sys
from typing import Any

import pytest

from nlql.embedders import HashEmbedder
from nlql.engine import Engine
from nlql.errors import MissingDependencyError
from nlql.execute.frames import columns
from nlql.execute.results import Hit, Hits

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
pl = pytest.importorskip("polars")

DOCS = [
    ("a", "Agents call tools. Agents plan their steps.",
     {"year": 2024, "lang": "en", "author": {"name": "Ada", "age": 36}, "tags": ["x", "y"], "rating": 4,
      "content-type": "text/plain", "flag": True}),
    ("b", "Tools help agents act.", {"year": 2021, "rating": 4.5, "mixed": "2020", "flag": False}),
    ("c", "Cats sleep all day, with no tools.", {"lang": "de", "mixed": 7, "big": 2**70}),
]
QUERY = ('SELECT SENTENCE LET rel = SIMILARITY(content, "agents and tools"), kw = BM25(content, "tools"), '
         "n = LENGTH(content) ORDER BY rel DESC")


@pytest.fixture(scope="module")
def hits() -> Hits:
    engine = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    for doc_id, text, meta in DOCS:
        engine.add_text(text, id=doc_id, metadata=meta)
    result = engine.search(QUERY)
    assert len(result) == 4
    return result


def test_columns_are_named_and_ordered_like_the_query(hits: Hits) -> None:
    names = [c.name for c in columns(hits)]
    assert names[:8] == ["id", "doc_id", "unit", "position", "content", "rel", "kw", "n"]
    meta = set(names[8:])
    assert meta == {"meta.year", "meta.lang", "meta.author.name", "meta.author.age", "meta.tags", "meta.rating",
                    "meta.`content-type`", "meta.flag", "meta.mixed", "meta.big"}


def test_pandas_types_and_missing_metadata_as_nulls(hits: Hits) -> None:
    df = hits.to_pandas()
    assert len(df) == len(hits)
    assert list(df["id"]) == [h.id for h in hits]
    dt = df.dtypes
    assert str(dt["id"]) == "string" and str(dt["content"]) == "string"
    assert str(dt["position"]) == "Int64"
    assert str(dt["rel"]) == "Float64" and str(dt["kw"]) == "Float64"
    assert str(dt["n"]) == "Int64"                        # LENGTH is an integer binding
    assert str(dt["meta.year"]) == "Int64"                # ints stay ints although c has no year
    assert str(dt["meta.rating"]) == "Float64"            # 4 and 4.5: float
    assert str(dt["meta.flag"]) == "boolean"
    assert str(dt["meta.mixed"]) == "string"              # "2020" and 7: text
    assert str(dt["meta.big"]) == "string"                # beyond int64: exact decimal text
    by_doc = {d: df[df["doc_id"] == d].iloc[0] for d in ("a", "b", "c")}
    assert by_doc["c"]["meta.year"] is pd.NA
    assert by_doc["b"]["meta.lang"] is pd.NA
    assert by_doc["a"]["meta.author.name"] == "Ada" and by_doc["b"]["meta.author.name"] is pd.NA
    assert by_doc["c"]["meta.big"] == str(2**70)
    assert by_doc["b"]["meta.mixed"] == "2020" and by_doc["c"]["meta.mixed"] == "7"
    assert by_doc["a"]["meta.tags"] == ["x", "y"] and by_doc["b"]["meta.tags"] is pd.NA
    assert by_doc["a"]["meta.`content-type`"] == "text/plain"
    rel = [h.scores["rel"] for h in hits]
    assert list(df["rel"]) == pytest.approx(rel)


def test_arrow_schema_and_nulls(hits: Hits) -> None:
    table = hits.to_arrow()
    schema = table.schema
    assert schema.field("id").type == pa.string() and not schema.field("id").nullable
    assert schema.field("position").type == pa.int64()
    assert schema.field("rel").type == pa.float64()
    assert schema.field("n").type == pa.int64()
    assert schema.field("meta.year").type == pa.int64()
    assert schema.field("meta.rating").type == pa.float64()
    assert schema.field("meta.flag").type == pa.bool_()
    assert schema.field("meta.tags").type == pa.list_(pa.string())
    assert schema.field("meta.mixed").type == pa.string()
    rows = table.to_pylist()
    assert [r["id"] for r in rows] == [h.id for h in hits]
    c_row = next(r for r in rows if r["doc_id"] == "c")
    assert c_row["meta.year"] is None and c_row["meta.tags"] is None and c_row["meta.author.age"] is None
    assert table.column("meta.year").null_count == sum(1 for h in hits if "year" not in h.metadata)


def test_polars_schema_and_nulls(hits: Hits) -> None:
    df = hits.to_polars()
    schema = df.schema
    assert schema["id"] == pl.String and schema["position"] == pl.Int64
    assert schema["rel"] == pl.Float64 and schema["n"] == pl.Int64
    assert schema["meta.year"] == pl.Int64 and schema["meta.flag"] == pl.Boolean
    assert schema["meta.tags"] == pl.List(pl.String)
    assert df.filter(pl.col("doc_id") == "c")["meta.year"].to_list() == [None]
    assert df["id"].to_list() == [h.id for h in hits]


def test_the_same_columns_in_all_three(hits: Hits) -> None:
    names = [c.name for c in columns(hits)]
    assert list(hits.to_pandas().columns) == names
    assert hits.to_arrow().column_names == names
    assert hits.to_polars().columns == names


def test_empty_hits_keep_typed_base_columns() -> None:
    empty = Hits([])
    assert list(empty.to_pandas().columns) == ["id", "doc_id", "unit", "position", "content"]
    assert str(empty.to_pandas().dtypes["position"]) == "Int64"
    assert empty.to_arrow().schema.field("position").type == pa.int64()
    assert empty.to_polars().schema["content"] == pl.String


def test_a_null_score_is_a_null_float_and_unit_binding_does_not_clash() -> None:
    hits = Hits([Hit("a#0", "a", "SENTENCE", 0, "x", {}, {"unit": 1.0, "s": None}),
                 Hit("b#0", "b", "SENTENCE", 0, "y", {}, {"unit": 2.0, "s": None})])
    table = hits.to_arrow()
    assert table.column("unit").to_pylist() == ["SENTENCE", "SENTENCE"]
    assert table.column("scores.unit").to_pylist() == [1.0, 2.0]
    assert table.schema.field("s").type == pa.float64() and table.column("s").null_count == 2


@pytest.mark.parametrize("method, module", [("to_pandas", "pandas"), ("to_arrow", "pyarrow"),
                                            ("to_polars", "polars")])
def test_a_missing_package_names_its_install(monkeypatch: pytest.MonkeyPatch, method: str, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import now raises ImportError
    with pytest.raises(MissingDependencyError) as info:
        getattr(Hits([]), method)()
    assert "pip install 'nlql-engine[frames]'" in str(info.value) and module in str(info.value)


def test_repr_is_a_readable_table(hits: Hits) -> None:
    text = repr(hits)
    lines = text.splitlines()
    assert lines[0].startswith("<Hits: 4 rows in ")
    assert lines[1].split() == ["#", "id", "rel", "kw", "n", "content"]
    assert lines[2].split()[:2] == ["1", hits[0].id]
    assert f"{hits[0].scores['rel']:.4f}" in lines[2] and hits[0].content in lines[2]
    many = Hits([Hit(f"d{i}#0", f"d{i}", "SENTENCE", 0, "word " * 50, {}, {"rel": i / 10}) for i in range(12)])
    many_text = repr(many)
    assert "… 2 more" in many_text and "d11#0" not in many_text
    assert all(len(line) < 140 for line in many_text.splitlines())  # long content is cut
    assert repr(Hits([])) == "<Hits: 0 rows>"
    one = repr(hits[0])
    assert one.startswith(f"Hit({hits[0].id!r}, SENTENCE, scores rel=") and "content=" in one


def test_repr_html_escapes_content() -> None:
    hits = Hits([Hit("a#0", "a", "SENTENCE", 0, "<script>alert(1)</script> & more", {"k": "<b>"},
                     {"rel": 0.5})], warnings=["arm <kw> lost"])
    page = hits._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;b&gt;" in page
    assert "<table>" in page and "<th>rel</th>" in page and "0.5000" in page
    assert "arm &lt;kw&gt; lost" in page


# ------------------------------------------------------------------------------------------ CLI


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    from nlql.cli import main

    path = tmp_path_factory.mktemp("store") / "s"
    docs = tmp_path_factory.mktemp("docs") / "docs.jsonl"
    docs.write_text("\n".join(json.dumps({"id": d, "text": t, "metadata": m}) for d, t, m in DOCS) + "\n")
    with pytest.raises(SystemExit) as done:
        main(["ingest", str(docs), "--store", str(path), "--embedder", "hash", "-q"])
    assert done.value.code in (0, None)
    return str(path)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from nlql.cli import main

    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_csv_has_the_table_columns(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "query", QUERY, "--store", store, "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 4
    assert list(rows[0])[:8] == ["id", "doc_id", "unit", "position", "content", "rel", "kw", "n"]
    c = next(r for r in rows if r["doc_id"] == "c")
    assert c["meta.year"] == "" and c["meta.big"] == str(2**70)
    a = next(r for r in rows if r["doc_id"] == "a")
    assert json.loads(a["meta.tags"]) == ["x", "y"] and a["meta.flag"] == "true"


def test_cli_jsonl_one_object_per_hit(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "query", QUERY, "--store", store, "-f", "jsonl", "--explain")
    assert code == 0
    lines = out.strip().splitlines()
    objs = [json.loads(line) for line in lines]  # the plan went to stderr, so every line parses
    assert len(objs) == 4 and {"id", "doc_id", "content", "metadata", "scores"} <= set(objs[0])
    assert objs[0]["scores"]["rel"] >= objs[-1]["scores"]["rel"]


def test_cli_table_format_and_conflicting_flags(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "query", QUERY, "--store", store, "--format", "table")
    assert code == 0 and "4 rows" in out
    code, _, err = _run(capsys, "query", QUERY, "--store", store, "--format", "csv", "--json")
    assert code == 2 and "not both" in err


def test_document_hits_carry_their_best_sentence_as_columns() -> None:
    engine = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    for doc_id, text, meta in DOCS:
        engine.add_text(text, id=doc_id, metadata=meta)
    engine.add_text("Birds sing at dawn.", id="d")
    result = engine.search('SELECT DOCUMENT LET kw = BM25(content, "tools") ORDER BY kw DESC')
    by_id = {h.id: h for h in result}
    assert by_id["d"].best is None and all(by_id[k].best is not None for k in "abc")
    df = result.to_pandas()
    names = list(df.columns)
    assert names[names.index("kw") + 1: names.index("kw") + 4] == ["best.position", "best.content", "best.kw"]
    for row in df.itertuples(index=False):
        best = by_id[row.id].best
        if best is None:
            assert pd.isna(row[names.index("best.position")]) and pd.isna(row[names.index("best.content")])
            continue
        assert row[names.index("best.position")] == best.position
        assert row[names.index("best.content")] == best.content
        assert row[names.index("best.kw")] == pytest.approx(best.scores["kw"])
    assert str(df.dtypes["best.position"]) == "Int64" and str(df.dtypes["best.kw"]) == "Float64"
    assert pl.from_arrow(result.to_arrow()).columns == result.to_polars().columns == names
    # a sentence query has no best columns
    assert not any(c.name.startswith("best.") for c in columns(engine.search(QUERY)))


# ------------------------------------------------------------------- columns from the query and the schema

DATED = [
    ("p", "Planning agents call tools.", {"year": 2024, "rating": 4, "mixed": "2020", "tags": ["x", "y"],
                                          "ranks": [1, 2], "when": "2024-06-01T10:00:00+02:00", "lang": "en"}),
    ("q", "Tools help agents act.", {"year": 2021, "rating": 4.5, "mixed": 7, "when": "2024-06-02",
                                     "lang": "en", "author": {"name": "Ada"}}),
    ("r", "Cats sleep all day.", {"year": 2020, "rating": 3, "when": "2024-06-03T08:30:00Z", "lang": "de",
                                  "tags": []}),
]
PARAM_QUERY = ('SELECT SENTENCE LET rel = SIMILARITY(content, "agents and tools"), n = LENGTH(content), '
               "later = meta.year + 1, half = meta.rating / 2, big = rel > 0.1, at = NOW(), "
               "hl = HIGHLIGHT(content, \"tools\") WHERE meta.lang == $lang ORDER BY rel DESC")


@pytest.fixture(scope="module")
def dated() -> Engine:
    engine = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    for doc_id, text, meta in DATED:
        engine.add_text(text, id=doc_id, metadata=meta)
    return engine


def _types(hits: Hits) -> tuple[dict[str, str], Any, dict[str, Any]]:
    df = hits.to_pandas()
    return ({k: str(v) for k, v in df.dtypes.items()}, hits.to_arrow().schema, dict(hits.to_polars().schema))


def test_the_same_query_gives_the_same_columns_and_types_for_any_rows(dated: Engine) -> None:
    en = dated.search(PARAM_QUERY, {"lang": "en"})   # p and q: ints and floats, the string and the int
    de = dated.search(PARAM_QUERY, {"lang": "de"})   # r alone: rating 3 (an int), no mixed, no author
    none = dated.search(PARAM_QUERY, {"lang": "zz"})  # no rows
    assert len(en) == 2 and len(de) == 1 and len(none) == 0
    pd_en, arrow_en, pl_en = _types(en)
    for other in (de, none):
        pd_o, arrow_o, pl_o = _types(other)
        assert pd_o == pd_en
        assert arrow_o.equals(arrow_en, check_metadata=False)
        assert pl_o == pl_en
    names = list(pd_en)
    assert names[:12] == ["id", "doc_id", "unit", "position", "content", "rel", "n", "later", "half", "big",
                          "at", "hl"]
    assert set(names[12:]) == {"meta.year", "meta.rating", "meta.mixed", "meta.tags", "meta.ranks", "meta.when",
                               "meta.lang", "meta.author.name"}
    assert pd_en["n"] == "Int64" and pd_en["later"] == "Int64" and pd_en["half"] == "Float64"
    assert pd_en["big"] == "boolean" and pd_en["at"] == "datetime64[us, UTC]" and pd_en["hl"] == "object"
    assert arrow_en.field("hl").type == pa.list_(pa.list_(pa.int64()))
    assert pd_en["meta.year"] == "Int64"          # integers only in the store
    assert pd_en["meta.rating"] == "Float64"      # 4, 4.5 and 3: float, even where the rows hold only 3
    assert pd_en["meta.mixed"] == "string"        # "2020" and 7: text, even where only 7 came back
    assert pd_en["meta.when"] == "datetime64[us, UTC]"
    assert arrow_en.field("meta.tags").type == pa.list_(pa.string())
    assert arrow_en.field("meta.ranks").type == pa.list_(pa.int64())
    assert pl_en["meta.when"] == pl.Datetime("us", "UTC") and pl_en["meta.ranks"] == pl.List(pl.Int64)
    assert de.to_pandas()["meta.rating"].tolist() == [3.0]
    assert de.to_arrow().column("meta.author.name").to_pylist() == [None]


def test_datetimes_are_utc_and_a_missing_offset_is_read_as_utc(dated: Engine) -> None:
    from datetime import datetime, timezone

    hits = dated.search("SELECT DOCUMENT ORDER BY meta.year DESC")
    df = hits.to_pandas()
    when = dict(zip(df["doc_id"], df["meta.when"]))
    assert when["p"] == pd.Timestamp("2024-06-01T08:00:00", tz="UTC")   # +02:00 moved to UTC
    assert when["q"] == pd.Timestamp("2024-06-02T00:00:00", tz="UTC")   # a date without offset: UTC midnight
    assert when["r"] == pd.Timestamp("2024-06-03T08:30:00", tz="UTC")
    field = hits.to_arrow().schema.field("meta.when")
    assert field.type == pa.timestamp("us", tz="UTC")
    assert field.metadata == {b"nlql.naive_as_utc": b"1"}               # says how many had no offset
    values = hits.to_polars()["meta.when"].to_list()
    assert datetime(2024, 6, 1, 8, tzinfo=timezone.utc) in values
    # the same reading as a WHERE: the date without offset is midnight UTC
    assert [h.doc_id for h in dated.search('SELECT DOCUMENT WHERE meta.when < TIMESTAMP "2024-06-02T00:00:01Z"'
                                           ' ORDER BY meta.year DESC')] == ["p", "q"]


def test_missing_lists_are_na_and_empty_lists_stay_lists(dated: Engine) -> None:
    df = dated.search("SELECT DOCUMENT ORDER BY meta.year DESC").to_pandas()
    tags = dict(zip(df["doc_id"], df["meta.tags"]))
    assert tags["p"] == ["x", "y"] and tags["r"] == [] and tags["q"] is pd.NA
    ranks = dict(zip(df["doc_id"], df["meta.ranks"]))
    assert ranks["p"] == [1, 2] and ranks["q"] is pd.NA and ranks["r"] is pd.NA


def test_grouped_units_keep_their_best_columns_when_empty(dated: Engine) -> None:
    query = 'SELECT DOCUMENT LET kw = BM25(content, "tools") WHERE meta.lang == $lang ORDER BY kw DESC'
    full, empty = dated.search(query, {"lang": "en"}), dated.search(query, {"lang": "zz"})
    assert len(full) == 2 and len(empty) == 0
    assert _types(full)[0] == _types(empty)[0]
    assert list(empty.to_pandas().columns)[5:9] == ["kw", "best.position", "best.content", "best.kw"]
    assert str(empty.to_pandas().dtypes["best.kw"]) == "Float64"


def test_the_schema_counts_int_float_and_list_items() -> None:
    engine = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    engine.add_text("One.", id="a", metadata={"n": 1, "f": 1.5, "l": [1, "x"], "big": 2**70})
    engine.add_text("Two.", id="b", metadata={"n": 2, "f": 2, "l": [2]})
    keys = {k.name: k for k in engine.schema().keys}
    assert keys["n"].kinds == {"int": 2} and keys["f"].kinds == {"float": 1, "int": 1}
    assert keys["l"].kinds == {"item:int": 2, "item:string": 1} and keys["big"].kinds == {"bigint": 1}
    engine.delete("a")
    keys = {k.name: k for k in engine.schema().keys}
    assert keys["f"].kinds == {"int": 1} and keys["l"].kinds == {"item:int": 1} and "big" not in keys
    assert str(engine.search("SELECT SENTENCE").to_pandas().dtypes["meta.f"]) == "Int64"


def test_a_value_the_schema_did_not_foresee_widens_its_column() -> None:
    from nlql.execute.frames import Layout

    hits = Hits([Hit("a#0", "a", "SENTENCE", 0, "x", {"x": 1.5, "d": "not a date", "new": True}, {}),
                 Hit("b#0", "b", "SENTENCE", 0, "y", {"x": 2, "d": "2024-01-01"}, {})])
    hits.frame = Layout((), None, (("meta.x", "int"), ("meta.d", "datetime")))
    kinds = {c.name: c.kind for c in columns(hits)}
    assert kinds["meta.x"] == "float" and kinds["meta.d"] == "string" and kinds["meta.new"] == "bool"


def test_a_count_query_is_a_table_of_counts_and_keys(dated: Engine) -> None:
    query = "SELECT COUNT(DOCUMENT) BY meta.lang, meta.year WHERE meta.rating >= $low"
    hits, none = dated.search(query, {"low": 0}), dated.search(query, {"low": 99})
    df = hits.to_pandas()
    assert list(df.columns) == ["id", "doc_id", "unit", "position", "content", "count", "meta.lang", "meta.year"]
    assert _types(hits)[0] == _types(none)[0] and len(none) == 0
    assert str(df.dtypes["count"]) == "Int64" and str(df.dtypes["meta.year"]) == "Int64"
    assert sorted(zip(df["meta.lang"], df["count"])) == [("de", 1), ("en", 1), ("en", 1)]


def test_a_user_function_is_typed_by_its_return_annotation(dated: Engine) -> None:
    def stars(x: object) -> float:
        return 1 if x else 0  # an int value, declared float: the column is float for every result

    def raw(x):  # type: ignore[no-untyped-def]  # no annotation: typed from the rows
        return 1

    dated.register_function("stars", stars, 1)
    dated.register_function("raw", raw, 1)
    query = "SELECT SENTENCE LET s = STARS(meta.year), r = RAW(meta.year) WHERE meta.lang == $lang"
    full, empty = dated.search(query, {"lang": "en"}), dated.search(query, {"lang": "zz"})
    assert str(full.to_pandas().dtypes["s"]) == str(empty.to_pandas().dtypes["s"]) == "Float64"
    assert str(full.to_pandas().dtypes["r"]) == "Int64" and str(empty.to_pandas().dtypes["r"]) == "Float64"


def test_a_key_that_is_sometimes_not_a_date_is_text_in_every_result() -> None:
    engine = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    engine.add_text("One.", id="a", metadata={"d": "2024-06-01T10:00:00+0200", "lang": "en"})
    engine.add_text("Two.", id="b", metadata={"d": "2024-02-30", "lang": "de"})  # no such day: a string
    assert {k.name: k.types for k in engine.schema().keys}["d"] == {"date": 1, "string": 1}
    query = "SELECT SENTENCE WHERE meta.lang == $lang"
    for lang in ("en", "de", "zz"):
        assert str(engine.search(query, {"lang": lang}).to_pandas().dtypes["meta.d"]) == "string"
    assert engine.search(query, {"lang": "en"}).to_pandas()["meta.d"].tolist() == ["2024-06-01T10:00:00+0200"]


def test_timestamps_are_tz_aware_datetimes_and_naive_timestamps_stay_text() -> None:
    import datetime as dt

    engine = Engine(embedder=HashEmbedder(dim=32), warm_up=False)
    plus2 = dt.timezone(dt.timedelta(hours=2))
    engine.add_texts(["one.", "two.", "three."], ids=["1", "2", "3"], metadatas=[
        {"when": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=plus2), "day": "2024-01-02", "naive": "2024-01-02T10:00"},
        {"when": "2023-05-06T07:08:09Z", "day": "2020-02-29", "naive": "2024-01-03"}, {}])
    for query in ("SELECT SENTENCE ORDER BY id", 'SELECT SENTENCE WHERE id == "2#0"', 'SELECT SENTENCE WHERE id == "x"'):
        hits = engine.search(query)
        df = hits.to_pandas()
        assert str(df.dtypes["meta.when"]) == str(df.dtypes["meta.day"]) == "datetime64[us, UTC]"
        # a timestamp without an offset: no time zone is made up for it, the key is text in every result
        assert str(df.dtypes["meta.naive"]) == "string"
        assert hits.to_arrow().schema.field("meta.when").type == pa.timestamp("us", tz="UTC")
        assert hits.to_polars().schema["meta.when"] == pl.Datetime("us", "UTC")
    df = engine.search("SELECT SENTENCE ORDER BY id").to_pandas()
    assert df["meta.when"][0] == pd.Timestamp("2024-01-02T01:04:05Z") and df["meta.when"][2] is pd.NaT
    assert df["meta.day"][1] == pd.Timestamp("2020-02-29T00:00:00Z")
    assert df["meta.naive"].tolist()[:2] == ["2024-01-02T10:00", "2024-01-03"]
    pl_when = engine.search("SELECT SENTENCE ORDER BY id").to_polars()["meta.when"]
    assert pl_when[1] == dt.datetime(2023, 5, 6, 7, 8, 9, tzinfo=dt.timezone.utc)
    engine.delete("1")  # the naive timestamp is gone: its key is a date column again
    assert str(engine.search("SELECT SENTENCE").to_pandas().dtypes["meta.naive"]) == "datetime64[us, UTC]"
