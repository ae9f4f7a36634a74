"""Issue 30's mechanisms (not its scores): the router's choice per rule, templates that keep the fast
paths (explain says which), per-question fusion weights, honest empties without a WHERE, compound
periods and periods in other languages, CJK names, and ask("上周谁提到了罗素？")."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.route import DEFAULT_TEMPLATES, answers, default_router, fusion_weights, keywords, language_class
from nlql.text.temporal import extract_period, resolve_period

NOW = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)  # a Monday


@pytest.fixture(scope="module")
def engine() -> Engine:
    e = Engine(embedder=HashEmbedder(dim=64), clock=lambda: NOW, warm_up=False)
    e.add_texts(["Russell wrote to Frege about the paradox. Frege replied within a week.",
                 "The disk is full. du shows how much space a directory uses.",
                 "上周三的讨论会上，张伟提到了罗素的悖论。", "今天天气很好，我们去公园散步。"],
                ids=["letter", "disk", "zh-russell", "zh-park"],
                metadatas=[{"date": "2024-03-02"}, {"date": "2025-05-01"}, {"date": "2026-11-25"},
                           {"date": "2026-11-26"}])
    return e


@pytest.mark.parametrize(("question", "intent"), [
    ("how much disk space a directory uses", "general"),
    ("what is a paradox?", "conceptual"),
    ("who mentioned Russell?", "entity"),
    ("上周谁提到了罗素？", "entity"),
    ("¿Quién mencionó a Russell?", "entity"),
    ("Does Frege's reply contradict Russell?", "contrast"),
    ("How did Russell's view of logic evolve?", "evolution"),
    ("what did we decide last week", "temporal"),
    ("去年三月的会议", "temporal"),
    ("quote the sentence about the paradox", "passage"),
    ("先週誰がラッセルについて話しましたか", "entity"),
    ("누가 러셀을 언급했나요", "entity"),
    ("先月の会議で何を決めましたか", "temporal"),
    ("지난주 회의 내용", "temporal"),
])
def test_the_router_picks_the_intent_of_each_rule(question: str, intent: str) -> None:
    assert default_router().route(question).intent == intent


@pytest.mark.parametrize("intent", ["general", "conceptual", "contrast", "passage"])
def test_templates_without_an_engine_arm_keep_the_fast_path(engine: Engine, intent: str) -> None:
    text = DEFAULT_TEMPLATES[intent]
    assert "WHERE" not in text  # a residual WHERE would score every row one by one
    params = {"rewrites": ["disk space"], "keywords": "disk space", "weights": [2.5, 1.0]}
    plan = str(engine.explain(text, params=params))
    assert "residual filter (engine): (none)" in plan
    fast = next(line for line in plan.splitlines() if line.startswith("fast path"))
    assert "none:" not in fast and "fusion" in fast, fast


def test_general_answers_with_documents_and_entity_with_the_entitys_document(engine: Engine) -> None:
    assert DEFAULT_TEMPLATES["general"].startswith("SELECT DOCUMENT")
    assert DEFAULT_TEMPLATES["entity"].startswith("SELECT DOCUMENT") and "GRAPH($q" in DEFAULT_TEMPLATES["entity"]
    assert "DISTINCT BY doc_id" in DEFAULT_TEMPLATES["contrast"] and "DISTINCT BY doc_id KEEP 2" in DEFAULT_TEMPLATES["passage"]
    assert "ORDER BY meta.date ASC" in DEFAULT_TEMPLATES["evolution"]
    hits = engine.ask("who mentioned Frege?")
    assert [h.doc_id for h in hits][:1] == ["letter"] and len({h.doc_id for h in hits}) == len(hits)


def test_fusion_weights_follow_the_questions_script() -> None:
    assert fusion_weights("how much disk space a directory uses") == (2.5, 1.0)
    assert fusion_weights("¿Qué sopa se come fría en verano?") == (1.0, 2.0)
    assert fusion_weights("Wie schnell darf man fahren?") == (1.0, 2.0)
    assert fusion_weights("when was the man page written and what does die do?") == (2.5, 1.0)  # English words
    assert fusion_weights("熊猫一天吃多少竹子？") == (1.0, 4.0)
    route = default_router().route("熊猫一天吃多少竹子？")
    assert route.params["weights"] == [1.0, 4.0]
    assert "多少" not in route.params["keywords"]  # question words left out of BM25's text
    assert keywords("¿Qué sopa se come fría en verano?") == "sopa come fría verano"


@pytest.mark.parametrize(("question", "expected"), [
    ("how much disk space a directory uses", "english"),
    ("where is the binary and man page of a program", "english"),  # "man" is an English word too
    ("A file object providing transparent bzip2 (de)compression.", "english"),
    ("what does café mean", "english"),
    ("Was trinkt man im Advent auf dem Markt?", "other"),  # no accent, German words outnumber English ones
    ("In welcher Stadt war Bach Thomaskantor?", "other"),
    ("¿Qué animales inspiraron a Darwin?", "other"),
    ("Hoe laat vertrekt de trein naar Utrecht?", "other"),
    ("Quanto costa il biglietto del treno?", "other"),
    ("Onde fica a estação de comboios?", "other"),
    ("Vad kostar en biljett till Stockholm?", "other"),
    ("Когда был основан Санкт-Петербург?", "other"),
    ("Πότε χτίστηκε ο Παρθενώνας;", "other"),
    ("熊猫一天吃多少竹子？", "cjk"),
    ("誰が東京で講演しましたか", "cjk"),
    ("러셀은 누구인가요", "cjk"),
])
def test_the_language_class_of_a_question(question: str, expected: str) -> None:
    assert language_class(question) == expected
    japanese = any("\u3040" <= c <= "\u30ff" for c in question)
    assert fusion_weights(question) == {"english": (2.5, 1.0), "other": (1.0, 2.0),
                                        "cjk": (2.5, 1.0) if japanese else (1.0, 4.0)}[expected]


def test_japanese_questions_weigh_the_semantic_arm_as_english_ones_do() -> None:
    # CJK by script, but with kana: the default embedder reads Japanese, so its arm leads (as in English);
    # Chinese and Korean questions keep BM25's bigrams in front
    assert language_class("日本で一番高い山の高さは？") == "cjk"
    assert fusion_weights("日本で一番高い山の高さは？") == (2.5, 1.0)
    assert fusion_weights("ペットボトルはどうやって捨てればいいですか") == (2.5, 1.0)
    assert fusion_weights("中国最长的河在哪里入海？") == (1.0, 4.0)
    assert fusion_weights("러셀은 누구인가요") == (1.0, 4.0)
    route = default_router().route("誰が東京で平和について講演しましたか")
    assert route.intent == "entity" and route.params["arm_weights"] == [1.0, 2.5, 1.0]


def test_other_languages_function_words_leave_english_keywords_alone() -> None:
    assert keywords("where is the binary and man page of a program") == "binary man page program"
    assert keywords("Hoe laat vertrekt de trein naar Utrecht?") == "laat vertrekt trein Utrecht"
    assert keywords("Was trinkt man im Advent auf dem Markt?") == "trinkt Advent Markt"
    assert keywords("The abstract base class for all I/O classes, in [0, 1]") == "abstract base class classes 0 1"


def test_a_compound_of_a_stored_word_is_not_an_honest_empty() -> None:
    """German writes "Altpapier" where the page says "Papier": BM25 matches whole words and the English
    embedder's cosine says nothing, so the compound's part decides that the page answers."""
    e = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    e.add_texts(["Papier kommt in die blaue Tonne, Verpackungen in den gelben Sack.",
                 "Am Sonntag sind die meisten Geschäfte geschlossen."], ids=["muell", "sonntag"])
    hits = e.ask("Wohin gehört Altpapier?")
    assert [h.doc_id for h in hits][:1] == ["muell"] and not hits.warnings
    assert len(e.ask("Wohin gehört Sperrmüll?")) == 0  # no part of it is stored: still an honest empty
    assert len(e.ask("where does waste paper go?")) == 0  # English questions: the cosine floor, as before


def test_an_honest_empty_needs_no_where(engine: Engine) -> None:
    hits = engine.ask("quantum chromodynamics of gluons")
    assert len(hits) == 0 and any("holds nothing" in w for w in hits.warnings)
    route = engine.route("how much disk space a directory uses")
    routed = engine.search(route.query, params=route.params)
    assert any(answers(route, h) for h in routed) and not all(answers(route, h) for h in routed)
    assert [h.id for h in engine.ask(route)] == [h.id for h in routed]  # a page that answers is kept whole


def test_an_entity_question_whose_graph_finds_nothing_gets_a_suggestion(engine: Engine) -> None:
    hits = engine.ask("who talked about directory space?")
    assert hits.route.intent == "entity"
    assert any("the graph arm found no known entity" in w for w in hits.warnings)
    assert not any("graph arm" in w for w in engine.ask("who mentioned Frege?").warnings)


def test_ask_finds_who_mentioned_russell_last_week_in_chinese(engine: Engine) -> None:
    pytest.importorskip("rjieba")
    hits = engine.ask("上周谁提到了罗素？")
    assert hits.route.intent == "entity" and hits[0].doc_id == "zh-russell"
    assert hits[0].scores["graph"] == 1.0  # 罗素 is a known entity (jieba's name tags)


@pytest.mark.parametrize(("text", "start", "end"), [
    ("March of last year", "2025-03-01", "2025-04-01"),
    ("what happened in March of last year?", "2025-03-01", "2025-04-01"),
    ("last year's March", "2025-03-01", "2025-04-01"),
    ("去年三月", "2025-03-01", "2025-04-01"),
    ("去年3月的会议", "2025-03-01", "2025-04-01"),
    ("前年五月", "2024-05-01", "2024-06-01"),
    ("marzo del año pasado", "2025-03-01", "2025-04-01"),
    ("¿qué pasó en marzo de este año?", "2026-03-01", "2026-04-01"),
    ("im März letzten Jahres", "2025-03-01", "2025-04-01"),
    ("mars de l'année dernière", "2025-03-01", "2025-04-01"),
    ("marzo dell'anno scorso", "2025-03-01", "2025-04-01"),
    ("昨年の3月に開館した", "2025-03-01", "2025-04-01"),
    ("去年の三月", "2025-03-01", "2025-04-01"),
    ("来年の1月", "2027-01-01", "2027-02-01"),
])
def test_compound_periods_resolve_to_the_month(text: str, start: str, end: str) -> None:
    p = extract_period(text, NOW)
    assert p is not None and p.start.date().isoformat() == start and p.end.date().isoformat() == end, text


@pytest.mark.parametrize(("text", "start", "end", "whole"), [
    # languages without rules of their own: a month's name beside a relative year, from dateparser's tables
    ("março do ano passado", "2025-03-01", "2025-04-01", True),
    ("o que aconteceu em março do ano passado?", "2025-03-01", "2025-04-01", False),
    ("maart vorig jaar", "2025-03-01", "2025-04-01", True),
    ("작년 3월에 무슨 일이 있었나요?", "2025-03-01", "2025-04-01", False),
    ("작년 3월", "2025-03-01", "2025-04-01", True),
    ("geçen yıl mart ayında", "2025-03-01", "2025-04-01", False),
    ("październik w zeszłym roku", "2025-10-01", "2025-11-01", True),
    # forms dateparser's tables lack (nlql.text.temporal._MORE_FORMS): Russian's cases, Arabic's "العام"
    ("что мы решили в марте прошлого года?", "2025-03-01", "2025-04-01", False),
    ("октябре прошлого года", "2025-10-01", "2025-11-01", True),
    ("في مارس من العام الماضي", "2025-03-01", "2025-04-01", False),
])
def test_compound_periods_in_any_language_dateparser_knows(text: str, start: str, end: str, whole: bool) -> None:
    p = extract_period(text, NOW)
    assert p is not None and (p.start.date().isoformat(), p.end.date().isoformat()) == (start, end), text
    if whole:
        r = resolve_period(text, NOW)  # WITHIN reads them too
        assert (r.start, r.end) == (p.start, p.end)


def test_a_month_far_from_a_relative_year_is_no_compound() -> None:
    # more than two short words between them: the month and the year are two things, and the longest
    # period wins ("el año pasado" alone), as in English
    p = extract_period("marzo fue bueno, pero en general el año pasado fue malo", NOW)
    assert p is not None and p.text.endswith("año pasado") and p.start.date().isoformat() == "2025-01-01"
    q = extract_period("we met in march and last year we met again", NOW)
    assert q is not None and q.text == "last year"


@pytest.mark.parametrize("text", ["на прошлой неделе", "지난주", "geçen hafta", "vorige week", "w zeszłym tygodniu",
                                  "पिछला सप्ताह", "पिछले हफ्ते", "прошлой недели", "الأسبوع الماضي"])
def test_periods_in_languages_without_rules_of_their_own(text: str) -> None:
    p = extract_period(f"… {text} …", NOW)
    assert p is not None and p.start.date().isoformat() == "2026-11-23" and p.end.date().isoformat() == "2026-11-30"
    assert resolve_period(text, NOW).start == p.start  # WITHIN reads them too


@pytest.mark.parametrize(("text", "start", "end"), [
    ("先週の会議", "2026-11-23", "2026-11-30"),  # Japanese: last week, as 上周
    ("先々週", "2026-11-16", "2026-11-23"),
    ("先月の売上", "2026-10-01", "2026-11-01"),
    ("来週の予定", "2026-12-07", "2026-12-14"),
    ("3日前のメモ", "2026-11-27", "2026-11-28"),
    ("2週間前", "2026-11-16", "2026-11-23"),
    ("一昨日", "2026-11-28", "2026-11-29"),
    ("어제 회의", "2026-11-29", "2026-11-30"),  # Korean: a two-character phrase of dateparser's table
])
def test_japanese_and_korean_periods(text: str, start: str, end: str) -> None:
    p = extract_period(text, NOW)
    assert p is not None and (p.start.date().isoformat(), p.end.date().isoformat()) == (start, end), text


def test_katakana_names_are_entities_and_ask_finds_them() -> None:
    from nlql.text.entities import RuleEntityExtractor

    assert "ラッセル" in RuleEntityExtractor()("先週、田中さんがラッセルについて話した。")
    e = Engine(embedder=HashEmbedder(dim=64), clock=lambda: NOW, warm_up=False)
    e.add_texts(["先週の会議で、田中さんはラッセルのパラドックスについて話した。", "富士山は日本で一番高い山です。"],
                ids=["ja-russell", "ja-fuji"], metadatas=[{"date": "2026-11-25"}, {"date": "2020-01-01"}])
    hits = e.ask("先週誰がラッセルについて話しましたか")
    assert hits.route.intent == "entity" and hits[0].doc_id == "ja-russell" and hits[0].scores["graph"] == 1.0


def test_single_words_of_other_languages_are_not_periods() -> None:
    for text in ("guten Morgen", "por la mañana", "Was ist hier passiert?", "I may do it now"):
        assert extract_period(text, NOW) is None, text


def test_cjk_names_are_entities() -> None:
    pytest.importorskip("rjieba")
    from nlql.text.entities import RuleEntityExtractor

    assert RuleEntityExtractor()("上周张伟提到了罗素的悖论。") == ["张伟", "罗素"]
    assert RuleEntityExtractor()("Russell met 维特根斯坦.")[:1] == ["Russell"]


def test_the_engine_warms_every_languages_periods_when_it_starts() -> None:
    import threading

    from nlql.text.temporal import warm_up_languages

    e = Engine(embedder=HashEmbedder(dim=8), warm_up=True)
    for t in threading.enumerate():
        if t.name == "nlql-periods":
            t.join(timeout=60)
    assert warm_up_languages() == 0.0  # built already: the first TEMPORAL query pays nothing for it
    e.close()


@pytest.mark.parametrize(("text", "start", "end"), [
    ("पिछले महीने क्या हुआ?", "2026-10-01", "2026-11-01"),  # Hindi's oblique case and everyday "महीना"
    ("في العام الماضي", "2025-01-01", "2026-01-01"),
    ("с начала прошлого года", "2025-01-01", "2026-01-01"),
])
def test_everyday_forms_dateparser_lacks(text: str, start: str, end: str) -> None:
    p = extract_period(text, NOW)
    assert p is not None and (p.start.date().isoformat(), p.end.date().isoformat()) == (start, end), text
