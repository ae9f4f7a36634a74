"""The analyzer: casefold, unicode words, stopwords, Snowball stemming, config round-trip."""

from __future__ import annotations

import json
import sys

import pytest

from nlql.text.analyzer import ENGLISH_STOPWORDS, Analyzer


def test_plain_is_casefold_unicode_words() -> None:
    a = Analyzer.named("plain")
    assert a == Analyzer(stemmer=None, stopwords=None)
    assert a.terms("Hello, WORLD! Straße naïve—café 3.14 foo_bar") == [
        "hello", "world", "strasse", "naïve", "café", "3", "14", "foo_bar",
    ]
    assert a.terms("") == []
    assert a.terms("!!! ... ???") == []
    assert a.terms("日本語 テキスト") == ["日本", "本語", "テキ", "キス", "スト"]  # CJK bigrams (SPEC §11)
    assert "the" in a.terms("the end")


def test_default_is_english_stopwords_and_stemming() -> None:
    a = Analyzer()
    assert a.name == "english" and a.stemmer == "english" and a.stopwords == ENGLISH_STOPWORDS
    assert a == Analyzer.named("english") == Analyzer(stemmer="en", stopwords="english")
    # the query of issue 17: question words go, inflections meet their stems
    assert a.terms("How much disk space does a directory use?") == ["much", "disk", "space", "directori", "use"]
    assert a.terms("estimate file space usage of directories") == ["estim", "file", "space", "usag", "directori"]
    assert a.terms("Don't stop") == ["stop"]  # contraction pieces are stopwords
    assert a.terms("日本語 テキスト 3.14") == ["日本", "本語", "テキ", "キス", "スト", "3", "14"]


def test_repeats_are_kept() -> None:
    assert Analyzer().terms("a cat, a CAT, cats") == ["cat", "cat", "cat"]
    assert Analyzer.named("plain").terms("a cat, a CAT") == ["a", "cat", "a", "cat"]


def test_custom_stopwords_are_casefolded() -> None:
    a = Analyzer(stopwords=["The", "OF"], stemmer=None)
    assert a.terms("The end of THE story") == ["end", "story"]
    assert a.stopwords == frozenset({"the", "of"})
    assert a.name == "custom"
    with pytest.raises(ValueError, match="stop word list"):
        Analyzer(stopwords="klingon")


def test_named_presets_and_languages() -> None:
    assert Analyzer.named("English") == Analyzer()
    assert Analyzer.named("german").terms("Die Häuser") == ["die", "haus"]  # stemming only
    assert Analyzer.named("german").name == "german"
    with pytest.raises(ValueError, match="unknown analyzer"):
        Analyzer.named("klingon")


def test_stemming_by_name_and_iso_code() -> None:
    en = Analyzer(stemmer="english")
    assert en.terms("Running runners easily") == ["run", "runner", "easili"]
    assert Analyzer(stemmer="en") == en
    assert Analyzer(stemmer="German").terms("Häuser") == Analyzer(stemmer="de").terms("Häuser")


def test_stopwords_apply_before_stemming() -> None:
    a = Analyzer(stemmer="english", stopwords=["running"])
    assert a.terms("running runs") == ["run"]


def test_stem_memo_gives_the_same_terms() -> None:
    a = Analyzer()
    text = "generously caresses ponies " * 3
    first = a.terms(text)
    assert a.terms(text) == first == Analyzer().terms(text) == ["generous", "caress", "poni"] * 3


def test_unknown_stemmer_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown stemmer"):
        Analyzer(stemmer="klingon")


def test_pystemmer_and_snowballstemmer_agree() -> None:
    stemmer = pytest.importorskip("Stemmer")
    snowball = pytest.importorskip("snowballstemmer")
    import re

    from nlql.data import demo_text

    words = sorted(set(re.findall(r"\w+", demo_text().casefold())))  # a few thousand real words
    assert len(words) > 2000
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
    assert Analyzer().config()["stopwords"] == "english"  # a named list is written by name
    assert Analyzer.from_config(Analyzer.named("plain").config()) == Analyzer.named("plain")
    assert "stemmer_backend" not in cfg  # the library is an implementation detail, not the analyzer
    with pytest.raises(ValueError):
        Analyzer.from_config({**cfg, "token_pattern": "[a-z]+"})


def test_deterministic_across_instances() -> None:
    text = "Ünïcödé TEXT with Mixed case, numbers 42 and under_scores."
    assert Analyzer(stemmer="english").terms(text) == Analyzer(stemmer="english").terms(text)


def test_a_full_stem_memo_is_dropped_without_losing_the_words_being_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # a store that ingests many distinct words fills the memo; the text that overflows it mixes words
    # already memoised with new ones (this raised KeyError at about 190k one-sentence documents)
    a = Analyzer()
    monkeypatch.setattr(a, "MAX_MEMO", 5)
    want = Analyzer().terms
    assert a.terms("harvest markets") == want("harvest markets")
    text = "harvest markets grow with rains and farmers expect more harvests"
    assert a.terms(text) == want(text)
    assert len(a._memo) <= 5 + len(set(text.split()))
    for i in range(50):
        t = f"harvest number{i} word{i} markets"
        assert a.terms(t) == want(t)


def test_threads_sharing_one_analyzer_each_get_their_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search reads its terms while another thread prepares a batch's (an add_texts written ahead) with
    the same analyzer: a memo that one thread starts again must not lose the words another is reading
    (a full memo was cleared in place: the other thread's lookup raised KeyError)."""
    import threading

    a = Analyzer()
    monkeypatch.setattr(a, "MAX_MEMO", 20)
    want = Analyzer()
    # each text: two words new to the memo, four that every thread reads again and again
    texts = [[f"stories{t}x{i} running{t}y{i} harvests markets farmers rains" for i in range(3000)] for t in range(6)]
    errors: list[BaseException] = []

    def read(batch: list[str]) -> None:
        try:
            for text in batch:
                assert a.terms(text) == want.terms(text)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # (threads taking turns as often as the interpreter allows)
    try:
        threads = [threading.Thread(target=read, args=(batch,)) for batch in texts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(before)
    assert not errors, errors[:3]


@pytest.mark.parametrize("analyzer", [Analyzer(), Analyzer.named("plain"), Analyzer(stopwords=None),
                                      Analyzer(stopwords=["the", "a"]), Analyzer(cjk=None)],
                         ids=["english", "plain", "stemmer", "custom", "cjk-runs"])
def test_terms_flat_is_every_texts_terms_in_one_list(analyzer: Analyzer, monkeypatch: pytest.MonkeyPatch) -> None:
    # what a SQL store writes at ingest must be, text for text, what a query's terms are
    texts = ["The running Foxes ran", "", "  ", "长城在北京 Great Wall", "Straße ÉCOLE 2025-01-02", "a\x00b \ud800 c",
             "THE the The", "日本語のテキスト and words", "number 12345 numbers", "The running Foxes ran"]
    monkeypatch.setattr(analyzer, "MAX_MEMO", 4)  # the memo overflows on the way
    want = [Analyzer.from_config(analyzer.config()).terms(t) for t in texts]
    flat, counts = analyzer.terms_flat(texts)
    assert counts == [len(w) for w in want]
    assert flat == [t for w in want for t in w]
    assert analyzer.terms_flat([]) == ([], [])


@pytest.mark.parametrize("analyzer", [Analyzer(), Analyzer.named("plain"), Analyzer(stemmer="german", stopwords=None),
                                      Analyzer(stopwords=["the", "a"]), Analyzer(cjk=None)],
                         ids=["english", "plain", "german", "custom", "cjk-runs"])
def test_terms_flat_reads_a_batch_without_cjk_as_text_by_text(analyzer: Analyzer) -> None:
    # the batch is read in one pass over its texts joined: no word may run from one text into the next,
    # and each text keeps its own count (empty texts, texts of stopwords only, case folding that grows;
    # a text holding the separator the batch is joined with makes the batch read text by text; an ASCII
    # batch is read by a byte translation: every ASCII character once)
    texts = ["", "The running Foxes ran", "", "ﬁnal STRASSE Straße", "end-", "-start", "THE the The", "",
             "Ünïcödé naïve café 2025-01-02", "under_score x\u0301y", "ΣΊΣΥΦΟΣ Σίσυφος", "a\ud800b", "12345 0007", ""]
    one_by_one = Analyzer.from_config(analyzer.config()).terms
    ascii_texts = ["", "The RUNNING foxes_ran, 42 times!", "", "\tx\x1cy\x1fz\x0bq\rw-e'r\x7fT", "end.", "THE the The",
                   "".join(map(chr, range(1, 128))), "__init__ CamelCase 3.14 x86_64", ""]
    for batch in (texts, texts[1:-1], ascii_texts, ascii_texts[1:], ["one"], ["", ""],
                  ["left\x00right words", "more words"]):
        want = [one_by_one(t) for t in batch]
        flat, counts = analyzer.terms_flat(batch)
        assert counts == [len(w) for w in want]
        assert flat == [t for w in want for t in w]


def test_a_word_of_ascii_digits_is_its_own_stem_in_every_algorithm() -> None:
    # Analyzer._stems does not send such words to the stemmer: this must stay true of every algorithm
    import snowballstemmer

    words = ["0", "00", "007", "42", "1999", "2025", "31415926535", "1" * 40]
    for name in snowballstemmer.algorithms():
        assert snowballstemmer.stemmer(name).stemWords(words) == words, name
        assert Analyzer(stemmer=name, stopwords=None).terms(" ".join(words)) == words, name
    stemmer = pytest.importorskip("Stemmer")
    for name in stemmer.algorithms():
        assert stemmer.Stemmer(name).stemWords(words) == words, name
    # not ASCII: the stemmer decides (Arabic turns Arabic-Indic digits into ASCII ones)
    assert Analyzer(stemmer="arabic", stopwords=None).terms("٣٤") == ["34"]


def test_terms_flat_equals_terms_for_every_algorithm() -> None:
    import snowballstemmer

    texts = ["Running runners ran 42 times", "", "Häuser und Bäume, les maisons", "Дома и деревья", "γράφω", "evler"]
    for name in snowballstemmer.algorithms():
        a = Analyzer(stemmer=name, stopwords=None)
        want = [Analyzer(stemmer=name, stopwords=None).terms(t) for t in texts]
        assert a.terms_flat(texts) == ([t for w in want for t in w], [len(w) for w in want]), name
