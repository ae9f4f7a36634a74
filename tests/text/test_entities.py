"""The default rule-based entity extractor and the name normalisation used for matching."""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlql.text.entities import (
    MAX_NAME_TOKENS,
    STOPWORDS,
    RuleEntityExtractor,
    entity_key,
    entity_tokens,
    extract_entities,
    token_spans,
)
from nlql.text.split import split_sentences


@pytest.mark.parametrize(("sentence", "names"), [
    ("Bertrand Russell wrote to Frege.", ["Bertrand Russell", "Frege"]),
    ("Russell's paradox troubled Frege’s system.", ["Russell", "Frege"]),
    ("Wittgenstein's Tractatus appeared in 1921.", ["Wittgenstein", "Tractatus"]),
    ("NASA and the ESA signed with SpaceX.", ["NASA", "ESA", "SpaceX"]),
    ("The Bank of England raised rates.", ["Bank of England"]),
    ("Then Ludwig van Beethoven played.", ["Ludwig van Beethoven"]),
    ("She met Charles de Gaulle in Paris.", ["Charles de Gaulle", "Paris"]),
    ("Émile Durkheim lived in Épinal, not Łódź.", ["Émile Durkheim", "Épinal", "Łódź"]),
    ("On Monday in January we met Moore.", ["Moore"]),  # weekdays, months, pronouns are never names
    ("Monday Russell called.", ["Russell"]),  # a stopword splits a run
    ("I think He said It was Dr Watson.", ["Watson"]),
    ("Jean-Paul Sartre met O'Brien.", ["Jean-Paul Sartre", "O'Brien"]),
    ("Russell, Russell and RUSSELL again.", ["Russell"]),  # each name once, first spelling
    ("the re_Match type and my iPhone and A or B", []),  # identifiers, lower-case names, single letters
    ("Copy the list before it changes.", []),  # an opening instruction is not a name
    ("Return a new Counter for Python objects.", ["Counter", "Python"]),
    ("Russell of", ["Russell"]),  # a particle never ends a name
    ("“Moore,” said Russell.", ["Moore", "Russell"]),
    ("1. Whitehead wrote it.", ["Whitehead"]),
    ("Yesterday Russell and Whitehead met in Cambridge.", ["Russell", "Whitehead", "Cambridge"]),
    ("", []),
])
def test_extraction(sentence: str, names: list[str]) -> None:
    assert extract_entities(sentence) == names


def test_title_case_headings_longer_than_the_limit_are_not_names() -> None:
    heading = " ".join(f"Word{chr(65 + i)}x" for i in range(MAX_NAME_TOKENS + 1))
    assert extract_entities(heading + " is long.") == []
    assert extract_entities(" ".join(heading.split()[:MAX_NAME_TOKENS]) + " is fine.") != []


def test_options() -> None:
    assert RuleEntityExtractor(acronyms=False)("NASA met Russell.") == ["Russell"]
    assert RuleEntityExtractor(stopwords=["russell"])("Russell met Moore.") == ["Moore"]
    assert RuleEntityExtractor(initial_stopwords=[])("Support arrived.") == ["Support"]
    assert extract_entities("Support arrived.") == []
    with pytest.raises(TypeError):
        extract_entities(None)  # type: ignore[arg-type]
    assert RuleEntityExtractor().extract_many(["Moore ran.", "x"]) == [["Moore"], []]


def test_normalisation_is_casefolded_whole_words() -> None:
    assert entity_key("Bertrand  RUSSELL") == entity_key("bertrand russell") == "bertrand russell"
    assert entity_key("Straße") == "strasse"
    assert entity_tokens("U.S. Army") == ("u", "s", "army")
    assert entity_key("罗素") == "罗 素"  # every CJK character is a word
    assert entity_key("?!") == ""
    text = "Die Straße von Russell"
    assert [(t, text[s:e]) for t, s, e in token_spans(text)] == [
        ("die", "Die"), ("strasse", "Straße"), ("von", "von"), ("russell", "Russell")]


_WORDS = st.sampled_from(["Russell", "russell", "Russell's", "NASA", "the", "The", "of", "Bank", "England", "Monday",
                          "Émile", "x", "A", "re_x", "iPhone", "Moore,", "(Frege)", "van", "—", "Jean-Paul", "我",
                          "罗素", "42", "U.S.", "it's"])


def test_a_name_goes_on_through_its_combining_marks() -> None:
    # marks no precomposed letter holds stay marks in NFC: the name is whole, not cut before the mark
    # ("A" + ogonek + tilde is "Ą" + tilde in NFC, the form names are given in)
    assert extract_entities("We met A\u0328\u0303sa Brown there.") == ["\u0104\u0303sa Brown"]
    assert extract_entities("Yesterday \u0104\u0303sa met Ke\u0328stutis.") == ["\u0104\u0303sa", "K\u0119stutis"]
    # U+FB2A (shin with shin dot) is shin and a mark in NFC: the whole of it stays in the name
    assert extract_entities("A\ufb2a") == ["A\u05e9\u05c1"]
    # a mark does not open a word either: nothing inside "xá̱Yz" or "re_Match"
    assert extract_entities("See xa\u0331Yz and re_Match.") == []


@settings(max_examples=300, deadline=None)
@given(st.lists(_WORDS, max_size=15).map(" ".join) | st.text(max_size=60))
def test_names_are_pieces_of_the_text_and_never_stopwords(text: str) -> None:
    names = extract_entities(text)
    assert len({entity_key(n) for n in names}) == len(names)
    nfc = unicodedata.normalize("NFC", text)  # (names are read in NFC: "José" typed with a combining accent)
    for n in names:
        if "\t" not in text and "\u00a0" not in text:
            assert n in nfc
        assert n.casefold() not in STOPWORDS or n.isupper()  # all-caps words meet the English list only
        assert 1 <= len(n.split(" ")) <= MAX_NAME_TOKENS


def test_on_the_demo_corpus() -> None:
    lines = resources.files("nlql.data").joinpath("demo.jsonl").read_text(encoding="utf-8").splitlines()
    counts: Counter[str] = Counter()
    for line in lines:
        text = json.loads(line)["text"]
        for s, e in split_sentences(text):
            counts.update(extract_entities(text[s:e]))
    for name in ("Python", "JSON", "POSIX", "Unicode", "Perl", "Windows", "ValueError", "Berners-Lee"):
        assert counts[name] > 0, name
    # words that open docstring sentences are not taken for names
    for word in ("Return", "The", "This", "If", "None", "True", "Support", "Try", "Most"):
        assert counts[word] == 0, word


def test_output_is_unchanged_on_a_golden_of_real_sentences() -> None:
    """508 sentences (250 of the demo corpus, 250 of stdlib docstrings, a few hard cases) with the names
    the extractor gave before its regex and loop were made faster (tests/fixtures/entities_golden.json,
    written once by that version): a rewrite must give exactly the same names, in the same order."""
    from pathlib import Path

    golden = json.loads((Path(__file__).parent.parent / "fixtures" / "entities_golden.json").read_text("utf-8"))
    assert len(golden) > 500 and sum(bool(names) for _, names in golden) > 150
    extractor = RuleEntityExtractor()
    assert [extractor(s) for s, _ in golden] == [names for _, names in golden]
    assert [extractor(s) for s, _ in golden] == [names for _, names in golden]  # the run caches give the same
