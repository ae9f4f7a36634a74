"""SPEC §11 front end: HAS / HAS ANY / HAS ALL, SELECT COUNT(unit) BY, FUSE, DOC("id") and vector
parameters in SIMILARITY, HIGHLIGHT, LIMIT n AUTOCUT k: parse → IR → render → JSON, and the checker."""

from __future__ import annotations

import numpy as np
import pytest

from nlql.check import check, is_vector
from nlql.errors import NLQLSyntaxError
from nlql.ir import Call, Count, Has, ListExpr, Literal, Meta, Param, Query, query_json_schema
from nlql.parser import parse
from nlql.render import KEYWORDS, render


def _roundtrip(text: str) -> Query:
    q = parse(text)
    assert parse(render(q)) == q
    assert Query.from_dict(q.to_dict()) == q
    return q


def test_has_nodes() -> None:
    q = _roundtrip('SELECT SENTENCE WHERE meta.tags HAS "rag"')
    assert q.where == Has(Meta(("tags",)), Literal("rag"))
    q = _roundtrip("SELECT SENTENCE WHERE meta.tags not has any ('a', 2)")
    assert q.where == Has(Meta(("tags",)), ListExpr((Literal("a"), Literal(2))), "ANY", True)
    q = _roundtrip("SELECT SENTENCE WHERE meta.tags HAS ALL ()")
    assert q.where == Has(Meta(("tags",)), ListExpr(()), "ALL")
    q = _roundtrip("SELECT SENTENCE WHERE meta.tags HAS ALL $t")
    assert q.where == Has(Meta(("tags",)), Param("t"), "ALL")
    assert {"HAS", "ANY", "ALL", "AUTOCUT"} <= KEYWORDS
    # the new keywords are still metadata keys after meta.
    assert _roundtrip("SELECT SENTENCE WHERE meta.any == 1").where.left == Meta(("any",))  # type: ignore[union-attr]


def test_count_and_autocut_nodes() -> None:
    q = _roundtrip("SELECT COUNT(DOCUMENT) BY meta.source, meta.tags WHERE meta.year >= 2024 LIMIT 10")
    assert q.unit.kind == "DOCUMENT" and q.count == Count((Meta(("source",)), Meta(("tags",))))
    assert _roundtrip("SELECT COUNT(SENTENCE)").count == Count(())
    assert parse("SELECT SENTENCE").count is None and parse("SELECT SENTENCE").autocut is None
    q = _roundtrip("SELECT SENTENCE LIMIT 10 AUTOCUT 2 OFFSET 1")
    assert q.limit == Literal(10) and q.autocut == Literal(2) and q.offset == Literal(1)
    # queries without the new clauses serialise as before
    assert "count" not in parse("SELECT SENTENCE").to_dict() and "autocut" not in parse("SELECT SENTENCE").to_dict()


def test_json_schema_knows_the_new_nodes() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = query_json_schema()
    for text in ('SELECT COUNT(CHUNK) BY meta.a WHERE meta.t HAS ANY (1, "x") LIMIT 3 AUTOCUT 1',
                 'SELECT SENTENCE LET s = FUSE(SIMILARITY(content, DOC("d1")), BM25(content, "x"), method => "dbsf")'):
        jsonschema.validate(parse(text).to_dict(), schema)


def test_function_calls() -> None:
    q = _roundtrip('SELECT SENTENCE LET s = SIMILARITY(content, doc("d7")), h = highlight(content, "x")')
    assert q.bindings[0].expr == Call("SIMILARITY", (q.bindings[0].expr.args[0], Call("DOC", (Literal("d7"),))))  # type: ignore[union-attr]
    assert q.bindings[1].expr.name == "HIGHLIGHT"  # type: ignore[union-attr]


def _messages(text: str, params: dict | None = None) -> list[str]:
    return [d.message for d in check(text, params if params is not None else {}) if d.severity == "error"]


def test_checker_accepts_the_new_syntax() -> None:
    ok = [
        ('SELECT SENTENCE WHERE meta.tags HAS "rag" AND meta.tags NOT HAS ANY ("a", "b") AND meta.t HAS ALL ()', {}),
        ("SELECT SENTENCE WHERE meta.tags HAS ANY $t", {"t": ["a", 1]}),
        ("SELECT COUNT(DOCUMENT) BY meta.source ORDER BY count DESC, meta.source LIMIT 5", {}),
        ("SELECT COUNT(SENTENCE) LET s = SIMILARITY(content, 'x') WHERE s > 0.3", {}),
        ("SELECT SENTENCE LET a = SIMILARITY(content, 'x'), b = BM25(content, 'x'), "
         "f = FUSE(a, b, method => 'dbsf', weights => [0.7, 0.3], window => 50) ORDER BY f DESC", {}),
        ('SELECT SENTENCE LET s = SIMILARITY(content, DOC("d7")) WHERE doc_id != "d7"', {}),
        ("SELECT SENTENCE LET s = SIMILARITY(content, DOC($d))", {"d": "d7"}),
        ("SELECT SENTENCE LET s = SIMILARITY(content, $v)", {"v": [0.1, 0.2, 0.3]}),
        ("SELECT SENTENCE LET s = SIMILARITY(content, $v)", {"v": np.ones(8, dtype=np.float32)}),
        ("SELECT SENTENCE LET h = HIGHLIGHT(content, $q)", {"q": "rag"}),
        ("SELECT SENTENCE LET s = SIMILARITY(content, 'x') LIMIT 10 AUTOCUT $k", {"k": 2}),
    ]
    for text, params in ok:
        assert _messages(text, params) == [], text


def test_checker_errors() -> None:
    assert _messages('SELECT SENTENCE WHERE meta.t HAS ["a"]') == ["HAS takes one value, not a list"]
    assert _messages("SELECT SENTENCE WHERE meta.t HAS ANY $t", {"t": "a"}) == ["HAS ANY needs a list, not a string"]
    assert _messages("SELECT COUNT(SPAN(SENTENCE)) BY meta.a")[0].startswith("COUNT cannot count SPAN rows")
    assert _messages("SELECT COUNT(DOCUMENT) BY meta.a ORDER BY meta.b") == [
        "a COUNT query sorts by count or by a BY key, not meta.b"]
    assert _messages("SELECT SENTENCE LIMIT 3 AUTOCUT 0") == ["AUTOCUT must be at least 1, not 0"]
    assert _messages("SELECT SENTENCE LIMIT 3 AUTOCUT $k", {"k": -1}) == ["AUTOCUT $k is -1; it must be at least 1"]
    d = check("SELECT SENTENCE LET f = FUSE(SIMILARITY(content, 'x'), BM25(content, 'x'), method => 'MinMx')")
    assert [x.message for x in d] == ["FUSE method must be \"minmax\" or \"dbsf\", not 'MinMx'"]
    assert d[0].hint == 'did you mean "minmax"?' and d[0].line == 1 and d[0].column > 1
    assert _messages('SELECT SENTENCE WHERE DOC("d") IS NULL') == [
        "DOC(…) is only allowed as the second argument of SIMILARITY"]
    assert _messages("SELECT SENTENCE LET s = SIMILARITY(content, $v)", {"v": np.array([1.0, np.nan])}) == [
        "parameter $v must be a vector of finite numbers (it holds NaN or infinity)"]
    assert _messages("SELECT SENTENCE LET s = SIMILARITY(content, $v)", {"v": [1.0, True]})[0].startswith("$v must be")
    assert _messages("SELECT SENTENCE LET s = BM25(content, $v)", {"v": [1.0, 2.0]}) == [
        "$v must be a string for BM25, not list"]


@pytest.mark.parametrize(("text", "message"), [
    ('SELECT SENTENCE WHERE meta.t HAS ANY "a"', "expected a list after HAS ANY"),
    ('SELECT SENTENCE WHERE meta.t HAS ("a", "b")', "HAS takes one value, not a list"),
    ("SELECT COUNT(*)", "expected a unit inside COUNT(…): SENTENCE, CHUNK or DOCUMENT"),
    ("SELECT COUNTS(DOCUMENT)", "'COUNTS' is not something a query can select"),
    ("SELECT SENTENCES LIMIT 3", "expected a unit: SENTENCE, CHUNK, DOCUMENT or SPAN(…)"),
    ("SELECT SENTENCE AUTOCUT 2", "AUTOCUT needs a LIMIT"),
    ("SELECT SENTENCE LIMIT 2 AUTOCUT", "expected a whole number after AUTOCUT"),
])
def test_syntax_errors(text: str, message: str) -> None:
    with pytest.raises(NLQLSyntaxError) as info:
        parse(text)
    assert info.value.message == message and info.value.hint


def test_is_vector() -> None:
    assert is_vector([0.1, 2]) and is_vector(np.zeros(3)) and is_vector((1.0,))
    assert not is_vector([]) and not is_vector([True]) and not is_vector(["a"]) and not is_vector(np.zeros((2, 2)))
