"""The analyzer: casefold, unicode words, stopwords, Snowball stemming, config round-trip."""

from __future__ import annotations

import json

import pytest

from nlql.text.analyzer import Analyzer


def test_default_is_casefold_unicode_words() -> None:
    a = Analyzer()
    assert a.terms("Hello, WORLD! Straße naïve—café 3.14 foo_bar") == [
        "hello", "world", "strasse", "naïve", "café", "3", "14", "foo_bar",
    ]
    assert a.terms("") == []
    assert a.terms("!!! ... ???") == []
    assert a.terms("日本語 テキスト") == ["日本語", "テキスト"]


def test_repeats_are_kept() -> None:
    assert Analyzer().terms("a cat, a CAT") == ["a", "cat", "a", "cat"]


def test_stopwords_off_by_default_and_casefolded() -> None:
    assert "the" in Analyzer().terms("the end")
    a = Analyzer(stopwords=["The", "OF"])
    assert a.terms("The end of THE story") == ["end", "story"]
    assert a.stopwords == frozenset({"the", "of"})


def test_stemming_by_name_and_iso_code() -> None:
    en = Analyzer(stemmer="english")
    assert en.terms("Running runners easily") == ["run", "runner", "easili"]
    assert Analyzer(stemmer="en") == en
    assert Analyzer(stemmer="German").terms("Häuser") == Analyzer(stemmer="de").terms("Häuser")


def test_stopwords_apply_before_stemming() -> None:
    a = Analyzer(stemmer="english", stopwords=["running"])
    assert a.terms("running runs") == ["run"]


def test_unknown_stemmer_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown stemmer"):
        Analyzer(stemmer="klingon")


def test_pystemmer_and_snowballstemmer_agree() -> None:
    stemmer = pytest.importorskip("Stemmer")
    snowball = pytest.importorskip("snowballstemmer")
    words = "running runners generously caresses ponies happily agreed national nationalism".split()
    assert stemmer.Stemmer("english").stemWords(words) == snowball.stemmer("english").stemWords(words)


def test_config_round_trip_and_json() -> None:
    a = Analyzer(stemmer="english", stopwords=["b", "a"])
    cfg = a.config()
    assert cfg["stemmer"] == "english"
    assert cfg["stopwords"] == ["a", "b"]
    assert json.loads(json.dumps(cfg)) == cfg
    b = Analyzer.from_config(cfg)
    assert b == a and hash(b) == hash(a)
    assert b.terms("The running") == a.terms("The running")
    assert Analyzer.from_config(Analyzer().config()) == Analyzer()
    with pytest.raises(ValueError):
        Analyzer.from_config({**cfg, "token_pattern": "[a-z]+"})


def test_deterministic_across_instances() -> None:
    text = "Ünïcödé TEXT with Mixed case, numbers 42 and under_scores."
    assert Analyzer(stemmer="english").terms(text) == Analyzer(stemmer="english").terms(text)
