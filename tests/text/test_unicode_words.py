"""Text in any language (SPEC §11, issue 30): the analyzer's words are Unicode's word characters, combining
marks included, so the scripts that write vowels as marks (Devanagari, Tamil, Bengali, Burmese, Arabic
with its short vowels) keep whole words; Thai, Lao and Khmer runs become bigrams of grapheme clusters;
stores written with Python's ``re`` words keep being read with them. Mechanisms, not scores."""

from __future__ import annotations

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.errors import StoreMismatchError
from nlql.stores.record import resolve_analyzer
from nlql.text.analyzer import Analyzer
from nlql.text.highlight import highlight

BM25_DOC = "SELECT DOCUMENT LET k = BM25(content, $q) ORDER BY k DESC LIMIT 3"


@pytest.mark.parametrize(("text", "words"), [
    ("नमस्ते दुनिया", ["नमस्ते", "दुनिया"]),  # Hindi: the virama and the vowel signs are marks
    ("தமிழ் மொழி", ["தமிழ்", "மொழி"]),  # Tamil
    ("বাংলা ভাষা", ["বাংলা", "ভাষা"]),  # Bengali
    ("مَرْحَبًا بِكُمْ", ["مَرْحَبًا", "بِكُمْ"]),  # Arabic with its short vowels (harakat)
])
def test_words_keep_their_combining_marks(text: str, words: list[str]) -> None:
    assert Analyzer.named("plain").terms(text) == words
    # the words of earlier versions (Python's re, which leaves marks out of \w) cut them into pieces
    assert Analyzer(stemmer=None, stopwords=None, words="python").terms(text) != words


def test_an_accent_typed_as_a_combining_mark_is_the_precomposed_letter() -> None:
    a = Analyzer()
    assert a.terms("cafe\u0301") == a.terms("café") == ["café"]
    assert a.terms("CAFE\u0301S") == a.terms("cafés")
    assert Analyzer(words="python").terms("cafe\u0301") == ["cafe"]  # the mark was dropped


def test_spaceless_scripts_become_bigrams_of_grapheme_clusters() -> None:
    a = Analyzer()
    assert a.terms("ภาษาไทย") == ["ภา", "าษ", "ษา", "าไ", "ไท", "ทย"]  # Thai
    assert a.terms("ไม่") == ["ไม่"]  # two clusters (ไ, ม่): one bigram, the tone mark kept on its letter
    assert a.terms("ก") == ["ก"]  # a lone cluster stays a unigram
    assert set(a.terms("ภาษา")) <= set(a.terms("ภาษาไทยเป็นภาษาที่สวยงาม"))
    assert a.terms("ລາວ") == ["ລາ", "າວ"]  # Lao
    assert a.terms("ខ្មែរ") == ["ខ្មែរ"]  # Khmer: two clusters (ខ្មែ, រ)
    assert a.terms("ကျွန်တော်") == ["ကျွန်", "န်တေ", "တော်"]  # Burmese
    # Latin and CJK beside them are analysed as before
    assert a.terms("Bangkok กรุงเทพ 北京") == ["bangkok", "กรุ", "รุง", "งเ", "เท", "ทพ", "北京"]
    assert Analyzer(cjk=None).terms("ภาษาไทย") == ["ภาษาไทย"]  # cjk=None: one term per run, as for CJK


@pytest.mark.parametrize(("docs", "question", "want"), [
    (["भारत की राजधानी नई दिल्ली है।", "गंगा नदी हिमालय से निकलती है।", "मुंबई से पुणे की दूरी कम है।",
      "दिवाली से पहले घर साफ़ किए जाते हैं।"], "राजधानी कौन सी है?", "d0"),
    (["กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทย", "แม่น้ำเจ้าพระยาไหลผ่านกรุงเทพ"], "เมืองหลวง", "d0"),
    (["மதுரை ஒரு பழமையான நகரம்", "சென்னை கடற்கரை நீளமானது"], "கடற்கரை", "d1"),
])
def test_bm25_finds_a_word_of_a_script_with_marks(docs: list[str], question: str, want: str) -> None:
    e = Engine(embedder=HashEmbedder(dim=16), warm_up=False)
    e.add_texts(docs, ids=[f"d{i}" for i in range(len(docs))])
    hits = e.search(BM25_DOC, params={"q": question})
    assert hits[0].doc_id == want and hits[0].scores["k"] > 2 * (hits[1].scores["k"] or 0)
    e.close()


def test_highlight_marks_whole_words_with_their_marks() -> None:
    content = "भारत की राजधानी नई दिल्ली है।"
    [[start, end]] = highlight(content, "राजधानी")
    assert content[start:end] == "राजधानी"
    assert highlight("a cafe\u0301 here", "café") == [[2, 7]]


def test_the_words_are_recorded_and_old_records_keep_pythons_words() -> None:
    a = Analyzer()
    assert a.words == "unicode" and a.config()["words"] == "unicode" and Analyzer.from_config(a.config()) == a
    old = {"kind": "standard", "lowercase": "casefold", "token_pattern": r"\w+", "stemmer": "english",
           "stopwords": "english", "cjk": "bigram"}
    legacy = Analyzer.from_config(old)
    assert legacy.words == "python" and not legacy.scripts and legacy != a and legacy.config() == old
    assert legacy.terms("नमस्ते") == ["नमस", "त"]  # what such a store's term tables hold
    assert "python words" in legacy.describe() and "words='python'" in repr(legacy)
    with pytest.raises(ValueError, match="unknown words mode"):
        Analyzer(words="icu")


def test_a_store_written_with_pythons_words_is_read_with_them(tmp_path: pytest.TempPathFactory) -> None:
    path = str(tmp_path / "store")
    legacy = Analyzer(words="python", scripts={})  # what a store written before both changes records
    e = Engine(embedder=HashEmbedder(dim=16), store=path, warm_up=False, analyzer=legacy)
    e.add_texts(["भारत की राजधानी नई दिल्ली है।", "गंगा नदी हिमालय से निकलती है।"], ids=["capital", "river"])
    e.close()
    # reopened with no analyzer, or with the default one named: the store's own words, so its terms match
    for given in (None, "english", Analyzer()):
        e = Engine(embedder=HashEmbedder(dim=16), store=path, warm_up=False, analyzer=given)
        assert e._bm25.analyzer == legacy
        hits = e.search(BM25_DOC, params={"q": "गंगा नदी"})
        assert hits[0].doc_id == "river" and hits[0].scores["k"] > 0
        e.close()
    # another analyzer than the recorded one is still a mismatch
    e = Engine(embedder=HashEmbedder(dim=16), store=path, warm_up=False)
    with pytest.raises(StoreMismatchError):
        resolve_analyzer(e.store, Analyzer.named("plain"))
    e.close()


@pytest.mark.parametrize(("forms", "stem"), [
    (["книги", "книга", "книгу"], "книг"),  # Russian
    (["त्योहारों", "त्योहार"], "त्योहार"),  # Hindi
    (["நகரங்கள்", "நகரம்"], "நகரம்"),  # Tamil
])
def test_words_of_other_scripts_are_stemmed_by_their_scripts_stemmer(forms: list[str], stem: str) -> None:
    a = Analyzer()
    assert [t for f in forms for t in a.terms(f)] == [stem] * len(forms)
    assert a.terms("running books") == ["run", "book"]  # Latin words still go to the English stemmer
    # without script stemmers the English stemmer leaves them as they are: the forms stay apart
    assert len({t for f in forms for t in Analyzer(scripts={}).terms(f)}) == len(forms)


def test_script_stemmers_are_recorded_and_checked() -> None:
    a = Analyzer()
    assert a.config()["scripts"]["cyrillic"] == "russian" and Analyzer.from_config(a.config()) == a
    assert Analyzer(scripts={}) != a and "scripts" not in Analyzer(scripts={}).config()
    assert "scripts" not in Analyzer.named("plain").config()  # no stemming at all
    custom = Analyzer(scripts={"cyrillic": "serbian"})
    assert Analyzer.from_config(custom.config()) == custom and custom != a
    assert Analyzer.named("russian").terms("книги books") == ["книг", "books"]  # its own language first
    with pytest.raises(ValueError, match="unknown script"):
        Analyzer(scripts={"klingon": "english"})
    with pytest.raises(ValueError, match="unknown stemmer"):
        Analyzer(scripts={"cyrillic": "klingon"})


@pytest.mark.parametrize("words", ["unicode", "python"])
def test_a_batch_of_mixed_scripts_reads_as_its_texts_one_by_one(words: str) -> None:
    """``terms_flat`` (what a SQL store writes for a batch) reads a batch in one pass: the same terms as
    text by text, with marks, NFC, spaceless scripts and script stemmers in it."""
    import random

    rng = random.Random(7)
    pool = ["नमस्ते दुनिया", "cafe\u0301 CAFÉ", "книги и книга", "ภาษาไทย", "長城 北京", "The Cats ran",
            "x² ½ snake_case", "مَرْحَبًا", "Straße ﬁne", "", "don't stop", "Ελληνικά", "ລາວ ខ្មែរ"]
    a = Analyzer(words=words)
    for _ in range(200):
        texts = [" ".join(rng.choice(pool) for _ in range(rng.randint(0, 3))) for _ in range(rng.randint(1, 6))]
        flat, counts = a.terms_flat(texts)
        one_by_one = [a.terms(t) for t in texts]
        assert flat == [t for terms in one_by_one for t in terms] and counts == list(map(len, one_by_one)), texts
