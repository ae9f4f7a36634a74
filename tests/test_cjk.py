"""Text in any language (SPEC §11, issue 30): CJK bigrams in the default analyzer, a segmenting
"chinese" analyzer, and BM25 finding Chinese text through them. Mechanisms, not scores."""

from __future__ import annotations

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.text.analyzer import Analyzer


def test_the_default_analyzer_splits_cjk_runs_into_overlapping_bigrams() -> None:
    a = Analyzer()
    assert a.terms("长城在北京") == ["长城", "城在", "在北", "北京"]
    assert a.terms("猫") == ["猫"]  # a lone character stays a unigram
    assert a.terms("東京タワー") == ["東京", "京タ", "タワ", "ワー"]
    assert a.terms("서울특별시") == ["서울", "울특", "특별", "별시"]
    # Latin words beside CJK are analysed as before (stopwords, stemming)
    assert a.terms("The trains 高铁 run") == ["train", "高铁", "run"]
    assert a.terms("iPhone手机") == ["iphon", "手机"]
    assert Analyzer.named("plain").terms("北京Cats") == ["北京", "cats"]


def test_the_cjk_mode_is_recorded_and_old_records_keep_one_term_per_run() -> None:
    a = Analyzer()
    assert a.config()["cjk"] == "bigram" and Analyzer.from_config(a.config()) == a
    old = {"kind": "standard", "lowercase": "casefold", "token_pattern": r"\w+", "stemmer": "english",
           "stopwords": "english"}
    legacy = Analyzer.from_config(old)
    assert legacy.cjk is None and legacy.terms("长城在北京") == ["长城在北京"] and legacy != a
    assert legacy.config() == old  # a store written before reopens with the same terms
    with pytest.raises(ValueError, match="unknown cjk mode"):
        Analyzer(cjk="trigram")


def test_the_chinese_analyzer_segments_words_and_drops_question_words() -> None:
    pytest.importorskip("rjieba")
    a = Analyzer.named("chinese")
    assert a.name == "chinese" and a.cjk == "jieba"
    terms = a.terms("上周谁提到了罗素？")
    assert "罗素" in terms and "上周" in terms and "谁" not in terms and "了" not in terms
    assert a.terms("中国的高速铁路网")[:2] == ["中国", "高速"]  # 的 is a stopword
    assert Analyzer.from_config(a.config()) == a


@pytest.mark.parametrize("analyzer", ["english", "chinese"])
def test_bm25_finds_chinese_text_by_a_question_in_other_words(analyzer: str) -> None:
    if analyzer == "chinese":
        pytest.importorskip("rjieba")
    e = Engine(embedder=HashEmbedder(dim=16), warm_up=False, analyzer=analyzer)
    e.add_texts(["大熊猫主要生活在四川的竹林里，每天要吃十几公斤竹子。", "长城是古代修建的军事防御工程。"],
                ids=["panda", "wall"])
    hits = e.search("SELECT DOCUMENT LET k = BM25(content, $q) ORDER BY k DESC LIMIT 2", params={"q": "熊猫吃什么？"})
    assert hits[0].doc_id == "panda" and hits[0].scores["k"] > 0 and not hits[1].scores["k"]
    e.close()
