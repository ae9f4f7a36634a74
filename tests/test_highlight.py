"""HIGHLIGHT(content, text) (SPEC §11) against an independent reference: Python's regex words of the
content, casefolded, English stopwords left out, Snowball-stemmed with snowballstemmer itself."""

from __future__ import annotations

import re

import pytest
import snowballstemmer

from nlql import Engine, NLQLError
from nlql.embedders import HashEmbedder
from nlql.text.analyzer import ENGLISH_STOPWORDS

STEM = snowballstemmer.stemmer("english")
STOP = {w.casefold() for w in ENGLISH_STOPWORDS}


def _terms(text: str) -> set[str]:
    return {STEM.stemWord(w) for w in re.findall(r"\w+", text.casefold()) if w not in STOP}


def _reference(content: str, text: str) -> list[list[int]]:
    wanted = _terms(text)
    return [[m.start(), m.end()] for m in re.finditer(r"\w+", content)
            if m.group(0).casefold() not in STOP and STEM.stemWord(m.group(0).casefold()) in wanted]


DOCS = {
    "a": "Agents call tools. The tool works for agents, and TOOLING matters.",
    "b": "Cats sleep all day. Running runners ran to the run.",
    "c": "Straße und Müller: naïve café owners\tare   here. Nothing of the sort.",
}


@pytest.fixture(scope="module")
def engine() -> Engine:
    e = Engine(embedder=HashEmbedder(dim=32))
    for k, v in DOCS.items():
        e.add_text(v, id=k)
    return e


@pytest.mark.parametrize("unit", ["SENTENCE", "DOCUMENT", "CHUNK"])
@pytest.mark.parametrize("text", ["the tooling agent", "run", "café owner STRASSE", "the of and", "zebra"])
def test_ranges_match_the_reference(engine: Engine, unit: str, text: str) -> None:
    hits = engine.search(f"SELECT {unit} LET h = HIGHLIGHT(content, $t)", {"t": text})
    assert hits
    for h in hits:
        assert h.scores["h"] == _reference(h.content, text)
        assert h.highlights == {"h": h.scores["h"]}
        assert all(h.content[s:e].strip() for s, e in h.scores["h"])


def test_none_is_an_empty_list_and_stopwords_never_match(engine: Engine) -> None:
    h = engine.search('SELECT SENTENCE LET h = HIGHLIGHT(content, "the of") LIMIT 1')[0]
    assert h.scores["h"] == [] and h.highlights == {"h": []}
    assert engine.search('SELECT SENTENCE LET s = SIMILARITY(content, "x") LIMIT 1')[0].highlights is None


def test_with_a_score_and_in_the_integrations(engine: Engine) -> None:
    q = ('SELECT SENTENCE LET k = BM25(content, $t), h = HIGHLIGHT(content, $t) WHERE k > 0 ORDER BY k DESC LIMIT 2')
    hits = engine.search(q, {"t": "agents tools"})
    assert [h.doc_id for h in hits] == ["a", "a"] and all(h.scores["h"] for h in hits)
    from nlql.integrations import hit_metadata

    assert hit_metadata(hits[0], 1.0)["highlights"] == {"h": hits[0].scores["h"]}
    assert hits.to_dict()["hits"][0]["highlights"] == {"h": hits[0].scores["h"]}


def test_cli_table_renders_matches_bold(engine: Engine) -> None:
    from nlql.cli import hits_table

    hits = engine.search('SELECT SENTENCE LET h = HIGHLIGHT(content, "tool") WHERE doc_id == "a" LIMIT 1')
    table = hits_table(hits)
    cell = table.columns[3]._cells[0]
    assert [cell.plain[s.start:s.end] for s in cell.spans if s.style == "bold"] == ["tools"]


def test_bad_text_is_an_error(engine: Engine) -> None:
    with pytest.raises(NLQLError):
        engine.search("SELECT SENTENCE LET h = HIGHLIGHT(content, 3) LIMIT 1")
