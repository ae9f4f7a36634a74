"""Intent routing (SPEC §9 "Routing"): rules, templates, rewrites, routes, ask and explain of a route."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

import pytest

import nlql
from nlql import Engine, NLQLError, Route, RouteError, Router, TemplateError
from nlql.embedders import HashEmbedder
from nlql.route import DEFAULT_RULES, DEFAULT_TEMPLATES, INTENTS, default_router, keywords

CLOCK = datetime(2025, 6, 11, 12, 0, tzinfo=timezone.utc)

DOCS = {
    "witt": "Wittgenstein wrote about language games. The meaning of a word is its use in the language.",
    "agents": "Agents call tools to act in the world. A planner decides which tool comes next.",
    "cats": "Cats sleep most of the day. They hunt at night.",
    "budget": "Alice said the budget for the solar project doubles next year. Bob disagreed with Alice.",
    "rrf": "Reciprocal rank fusion adds one over k plus rank for every ranking a document appears in.",
}

# (question, intent): several phrasings per default rule, and questions that must fall through to general
PHRASINGS: list[tuple[str, str]] = [
    ("Who mentioned Wittgenstein?", "entity"),
    ("who talked about agents", "entity"),
    ("WHO CITED the 2019 paper?", "entity"),
    ("Who wrote about language games", "entity"),
    ("who has ever mentioned solar power?", "entity"),
    ("Can you tell me who quoted Bob?", "entity"),
    ("What did Alice say about the budget?", "entity"),
    ("what does Bob Smith think about planning", "entity"),
    ("what has the committee said about taxes?", "entity"),
    ("mentions of Alice", "entity"),
    ("According to Bob, what matters?", "entity"),
    ("Who is Alice?", "entity"),
    ("  and who decided that?", "entity"),
    ("When did we ship the release?", "temporal"),
    ("when was the budget approved", "temporal"),
    ("So when is the next review?", "temporal"),
    ("What did we decide last week?", "temporal"),
    ("notes from last month", "temporal"),
    ("anything new in the past 3 days?", "temporal"),
    ("What happened yesterday?", "temporal"),
    ("Meetings earlier today", "temporal"),
    ("what did Bob mention earlier?", "temporal"),
    ("the plan we made two weeks ago", "temporal"),
    ("reports since 2021", "temporal"),
    ("What changed on 2024-03-05?", "temporal"),
    ("How long ago was the launch?", "temporal"),
    ("what year did Wittgenstein die", "temporal"),
    ("invoices from March 2024", "temporal"),
    ("what is due next week?", "temporal"),
    ("What is a language game?", "conceptual"),
    ("what are embeddings", "conceptual"),
    ("What\u2019s reciprocal rank fusion?", "conceptual"),
    ("Definition of entropy", "conceptual"),
    ("the meaning of life", "conceptual"),
    ("Explain RRF to me", "conceptual"),
    ("please define recall", "conceptual"),
    ("what does BM25 mean?", "conceptual"),
    ("difference between recall and precision", "conceptual"),
    ("How do I install the package?", "general"),
    ("tax rules", "general"),
    ("cats and dogs", "general"),
    ("list every note on planning", "general"),
    ("later binding in Python", "general"),
    ("a May release of the report", "general"),
    ("the Wittgenstein archive", "general"),
    ("whoever wins", "general"),
    # issue 30: other languages, contrast (wittsrc rule 5), evolution (rule 6), passages
    ("上周谁提到了罗素？", "entity"),
    ("¿Quién mencionó a Russell?", "entity"),
    ("Wer hat Russell erwähnt?", "entity"),
    ("Does the second report contradict the first?", "contrast"),
    ("这两份报告有什么矛盾？", "contrast"),
    ("How did his view of logic evolve?", "evolution"),
    ("土地政策的演变", "evolution"),
    ("去年三月的会议记录", "temporal"),
    ("¿Qué decidimos la semana pasada?", "temporal"),
    ("Was haben wir letzte Woche beschlossen?", "temporal"),
    ("quote the sentence about the budget", "passage"),
    ("先週誰がラッセルについて話しましたか", "entity"),
    ("先月の会議で何を決めましたか", "temporal"),
]


@pytest.fixture(scope="module")
def engine() -> Engine:
    e = Engine(embedder=HashEmbedder(dim=256), clock=lambda: CLOCK, warm_up=False)
    e.add_texts(list(DOCS.values()), ids=list(DOCS))
    return e


# ------------------------------------------------------------------------------------------- rules


@pytest.mark.parametrize(("question", "intent"), PHRASINGS)
def test_default_rules_route_each_phrasing(question: str, intent: str) -> None:
    assert default_router().route(question).intent == intent


def test_every_default_rule_is_exercised_by_a_phrasing() -> None:
    router = default_router()
    hit = {router.classify(q)[1] for q, _ in PHRASINGS}
    assert set(router.rules) <= hit, [r.pattern for r in router.rules if r not in hit]
    assert {i for _, i in PHRASINGS} == set(INTENTS)


def test_the_route_names_the_rule_that_matched() -> None:
    router = default_router()
    route = router.route("Who mentioned Wittgenstein?")
    assert route.rule == DEFAULT_RULES[0][0]
    assert re.search(route.rule, "who mentioned x", re.IGNORECASE)
    assert router.route("tax rules").rule is None


def test_keywords_leave_out_cue_words_and_keep_names() -> None:
    router = default_router()
    assert router.route("Who mentioned Wittgenstein?").params["keywords"] == "Wittgenstein"
    assert router.route("What did Alice say about the budget?").params["keywords"] == "Alice budget"
    assert router.route("What did we decide last week?").params["keywords"] == "decide"
    assert router.route("what does BM25 mean?").params["keywords"] == "BM25"
    assert keywords("How do I install the package?") == "install package"


def test_the_default_templates_bind_the_question() -> None:
    route = default_router().route("What is a language game?")
    assert isinstance(route, Route)
    assert route.query == DEFAULT_TEMPLATES["conceptual"]
    assert route.params["rewrites"] == ["What is a language game?"]
    assert route.question == "What is a language game?"
    assert route.warnings == ()


# -------------------------------------------------------------------------------------- custom router


def test_a_custom_router_first_matching_rule_wins_and_general_otherwise() -> None:
    router = Router(rules=[(r"\bhow\s+(?:do|can)\s+i\b", "howto"), (r"install", "entity")],
                    templates={"howto": "SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 2",
                               "general": "SELECT DOCUMENT LET k = BM25(content, $q) LIMIT 1"})
    howto = router.route("How can I install it?")
    assert (howto.intent, howto.params, howto.rule) == ("howto", {"q": "How can I install it?"},
                                                          r"\bhow\s+(?:do|can)\s+i\b")
    assert router.route("install it").intent == "entity"  # the second rule; its template is the default
    assert router.route("Who mentioned X?").intent == "general"  # custom rules replace the default ones
    assert router.route("cats").query == "SELECT DOCUMENT LET k = BM25(content, $q) LIMIT 1"


def test_string_rules_are_case_insensitive_and_compiled_patterns_are_used_as_given() -> None:
    router = Router(rules=[(re.compile("ExactCase"), "entity"), ("shout", "temporal")])
    assert router.route("SHOUT it").intent == "temporal"
    assert router.route("ExactCase here").intent == "entity"
    assert router.route("exactcase here").intent == "general"


def test_engine_uses_its_own_router_and_a_router_argument_wins(engine: Engine) -> None:
    mine = Router(rules=[("cats", "pets")], templates={
        "pets": 'SELECT DOCUMENT LET k = BM25(content, $q) WHERE content CONTAINS "cats" LIMIT 5'})
    e = Engine(embedder=HashEmbedder(dim=64), router=mine, warm_up=False)
    e.add_texts(list(DOCS.values()), ids=list(DOCS))
    assert e.route("tell me about cats").intent == "pets"
    assert [h.doc_id for h in e.ask("tell me about cats")] == ["cats"]
    assert e.route("tell me about cats", router=default_router()).intent == "general"
    assert engine.route("tell me about cats").intent == "general"  # no router: the default one
    with pytest.raises(TypeError):
        Engine(embedder=HashEmbedder(dim=8), router="default", warm_up=False)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------- mistakes


def test_a_template_with_a_mistake_is_an_error_naming_it_with_a_caret() -> None:
    bad = "SELECT SENTENCE\nLET rel = SIMILARITY(content, $q)\nWHERE rell >= 0.3\nLIMIT 5"
    with pytest.raises(TemplateError) as info:
        Router(templates={"conceptual": bad})
    exc = info.value
    assert isinstance(exc, NLQLError)
    assert exc.template == "conceptual"
    assert (exc.line, exc.column) == (3, 7)
    assert "conceptual" in exc.message and "unknown name 'rell'" in exc.message
    text = str(exc)
    assert "template 'conceptual'" in text
    assert "  3 | WHERE rell >= 0.3\n    |       ^^^^" in text


def test_a_template_syntax_error_and_every_problem_at_once() -> None:
    with pytest.raises(TemplateError) as info:
        Router(templates={"entity": "SELECT SENTENCE LET s = SIMILARITY(content, $q) WHERE"})
    assert info.value.template == "entity" and info.value.column == 54
    with pytest.raises(TemplateError) as info:
        Router(templates={"general": "SELECT SENTENCE LET s = SIMILARITY(content, $q) WHERE a > 1 AND b > 2"})
    assert len(info.value.diagnostics) == 2


def test_template_parameters_are_type_checked_and_the_question_must_be_used() -> None:
    with pytest.raises(TemplateError, match=r"\$rewrites must be a string for BM25"):
        Router(templates={"general": "SELECT SENTENCE LET k = BM25(content, $rewrites)"})
    with pytest.raises(TemplateError, match="never uses the question"):
        Router(templates={"general": "SELECT SENTENCE LIMIT 3"})
    # a parameter of the caller's own is fine: it is bound at ask time
    Router(templates={"general": "SELECT SENTENCE LET s = SIMILARITY(content, $q) WHERE meta.year >= $year"})


def test_bad_rules_are_route_errors() -> None:
    with pytest.raises(RouteError, match="not a valid regex"):
        Router(rules=[("who(", "entity")])
    with pytest.raises(RouteError, match="'entiti', which has no template") as info:
        Router(rules=[("who", "entiti")])
    assert "did you mean 'entity'" in (info.value.hint or "")
    with pytest.raises(TypeError):
        Router(rules=["who"])  # type: ignore[list-item]


def test_an_empty_question_is_an_error(engine: Engine) -> None:
    with pytest.raises(RouteError, match="empty"):
        engine.ask("   ")
    with pytest.raises(TypeError):
        engine.ask(42)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------- rewriters


def test_a_rewriters_output_is_bound_as_rewrites(engine: Engine) -> None:
    seen: list[str] = []

    def rewriter(question: str) -> list[str]:
        seen.append(question)
        return ["language games", "Wittgenstein on the use of words"]

    router = Router(rewriter=rewriter)
    hits = engine.ask("what is meaning?", router=router)
    assert seen == ["what is meaning?"]
    assert hits.route.params["rewrites"] == ["language games", "Wittgenstein on the use of words"]
    assert not hits.warnings
    assert hits and hits[0].doc_id == "witt"


def _broken(question: str) -> list[str]:
    raise ConnectionError("the LLM is down")


@pytest.mark.parametrize(("rewriter", "said"), [
    (_broken, "ConnectionError: the LLM is down"),
    (lambda q: "one string, not a list", "returned str"),
    (lambda q: [], "an empty list"),
    (lambda q: ["fine", ""], "not a list of non-empty strings"),
    (lambda q: ["fine", None], "not a list of non-empty strings"),
    (lambda q: None, "returned NoneType"),
])
def test_a_rewriter_that_fails_leaves_the_question_alone(engine: Engine, rewriter: Any, said: str) -> None:
    hits = engine.ask("Who mentioned Wittgenstein?", router=Router(rewriter=rewriter))
    assert hits.route.params["rewrites"] == ["Who mentioned Wittgenstein?"]
    assert any(said in w and "the question is used as it is" in w for w in hits.warnings), hits.warnings
    plain = engine.ask("Who mentioned Wittgenstein?")
    assert [h.id for h in hits] == [h.id for h in plain] and plain


def test_too_many_rewrites_are_cut_with_a_warning() -> None:
    route = Router(rewriter=lambda q: [f"text {i}" for i in range(100)]).route("cats")
    assert len(route.params["rewrites"]) == nlql.route.MAX_REWRITES
    assert any("returned 100 rewrites" in w for w in route.warnings)


# --------------------------------------------------------------------------------------------- ask


def test_ask_runs_exactly_the_routed_query(engine: Engine) -> None:
    for question in ("Who mentioned Wittgenstein?", "What did Alice say about the budget?",
                     "what is reciprocal rank fusion", "tools for agents"):
        hits = engine.ask(question)
        route = engine.route(question)
        assert hits.route == route
        assert [(h.id, h.scores) for h in hits] == [(h.id, h.scores) for h in engine.search(route.query,
                                                                                            params=route.params)]
        assert hits, question


def test_ask_finds_the_answer(engine: Engine) -> None:
    assert engine.ask("Who mentioned Wittgenstein?")[0].doc_id == "witt"
    assert engine.ask("What did Alice say about the budget?")[0].doc_id == "budget"
    assert engine.ask("what is reciprocal rank fusion")[0].doc_id == "rrf"
    hits = engine.ask("who talked about tools")
    assert hits.route.intent == "entity" and hits[0].doc_id == "agents"


def test_an_honest_empty_has_no_rows_and_says_so(engine: Engine) -> None:
    hits = engine.ask("What is quantum chromodynamics?")
    assert len(hits) == 0
    assert any("the store holds nothing about 'What is quantum chromodynamics?'" in w for w in hits.warnings)
    assert hits.route.intent == "conceptual"
    empty = Engine(embedder=HashEmbedder(dim=16), warm_up=False)
    assert len(empty.ask("who mentioned anything?")) == 0


def test_ask_binds_the_callers_own_parameters(engine: Engine) -> None:
    router = Router(templates={
        "general": "SELECT DOCUMENT LET k = BM25(content, $q) WHERE doc_id IN $ids ORDER BY k DESC LIMIT 5"})
    hits = engine.ask("cats and agents", router=router, params={"ids": ["cats"]})
    assert [h.doc_id for h in hits] == ["cats"] and hits.route.params["ids"] == ["cats"]
    with pytest.raises(NLQLError, match=r"missing parameter \$ids"):
        engine.ask("cats and agents", router=router)
    # a parameter the routed template does not use is left out, with a warning
    other = engine.ask("Who mentioned Wittgenstein?", router=router, params={"ids": ["cats"]})
    assert "ids" not in other.route.params
    assert any("$ids is not used by the 'entity' template" in w for w in other.warnings)
    with pytest.raises(RouteError, match=r"\$q is bound by the router"):
        engine.ask("cats", params={"q": "dogs"})


def test_ask_timeout_and_max_tokens_reach_the_search(engine: Engine) -> None:
    hits = engine.ask("Who mentioned Wittgenstein?", timeout=30.0, max_tokens=4)
    assert len(hits) == 1 and hits[0].truncated
    with pytest.raises(TypeError):
        engine.ask("cats", timeout="soon")  # type: ignore[arg-type]


def test_hits_to_dict_carries_the_route(engine: Engine) -> None:
    data = engine.ask("Who mentioned Wittgenstein?").to_dict()
    assert data["route"]["intent"] == "entity"
    assert data["route"]["params"]["keywords"] == "Wittgenstein"
    assert "route" not in engine.search("SELECT SENTENCE LIMIT 1").to_dict()


# ----------------------------------------------------------------------------------------- explain


def test_explain_of_a_route_shows_intent_rule_and_plan(engine: Engine) -> None:
    route = engine.route("Who mentioned Wittgenstein?")
    plan = engine.explain(route)
    text = str(plan)
    assert text.startswith("intent: entity\nrule: " + route.rule + "\n")
    assert 'param $keywords = "Wittgenstein"' in text
    assert "kw = BM25(content, \"Wittgenstein\")" in text
    assert "fusion: RRF" in text and "residual filter (engine): (none)" in text  # no WHERE (issue 30)
    d = plan.to_dict()
    assert d["route"]["intent"] == "entity" and d["route"]["rule"] == route.rule
    assert d["query"].startswith("SELECT DOCUMENT")
    assert str(engine.explain(route)) == text  # deterministic
    general = str(engine.explain(engine.route("tax rules")))
    assert "rule: (no rule matched: the general intent)" in general


def test_default_templates_are_data_in_one_place() -> None:
    assert set(DEFAULT_TEMPLATES) == set(INTENTS)
    for intent, text in DEFAULT_TEMPLATES.items():
        assert nlql.check(text) == [], intent
        assert default_router().templates[intent] == text


@pytest.mark.model
def test_with_the_real_model_ask_finds_paraphrases_and_admits_ignorance() -> None:
    from nlql.embedders import SentenceTransformerEmbedder

    e = Engine(embedder=SentenceTransformerEmbedder(), warm_up=False)
    e.add_texts([DOCS["witt"], DOCS["cats"], "Solar panels produce less energy in winter. The budget covers "
                 "new panels.", "Tax rules change every year. File your return before April."],
                ids=["witt", "cats", "solar", "tax"])
    assert e.ask("Who mentioned Wittgenstein?")[0].doc_id == "witt"
    # no keyword in common: found by meaning alone (cosine above the floor)
    solar = e.ask("photovoltaic output during the cold season")
    assert solar[0].doc_id == "solar" and solar[0].scores["kw"] == 0
    for question in ("What is quantum chromodynamics?", "how do I bake sourdough bread?"):
        hits = e.ask(question)
        assert len(hits) == 0 and any("holds nothing" in w for w in hits.warnings), question


def test_ask_of_a_route_runs_it_without_rewriting_again(engine: Engine) -> None:
    calls: list[str] = []

    def rewriter(question: str) -> list[str]:
        calls.append(question)
        return [question, "language games"]

    router = Router(rewriter=rewriter)
    route = engine.route("what is meaning?", router=router)
    hits = engine.ask(route)
    assert calls == ["what is meaning?"]
    assert hits.route == route and hits[0].doc_id == "witt"
    assert str(engine.explain(route)).startswith("intent: conceptual\n") and calls == ["what is meaning?"]
    with pytest.raises(TypeError):
        engine.route("cats", router="mine")  # type: ignore[arg-type]


@pytest.mark.parametrize(("question", "period"), [
    ("o que decidimos na semana passada?", "semana passada"),
    ("wat gebeurde er in maart vorig jaar?", "maart vorig jaar"),
    ("qu'avons-nous décidé la semaine dernière ?", "la semaine dernière"),
    ("geçen hafta ne konuştuk", "geçen hafta"),
])
def test_a_period_in_any_language_routes_to_temporal_when_no_rule_matches(question: str, period: str) -> None:
    route = default_router().route(question)
    assert route.intent == "temporal" and route.rule is not None and period in route.rule
    assert period.split()[-1] not in route.params["keywords"].split()  # the period's words are not keywords
    assert "TEMPORAL(meta.date, $q)" in route.query


@pytest.mark.parametrize("question", ["how much disk space a directory uses", "compute a SHA-512 hash",
                                      "python 3.11 release notes", "tax rules"])
def test_questions_naming_no_period_stay_general(question: str) -> None:
    assert default_router().route(question).intent == "general"


def test_the_period_fallback_is_off_for_a_router_with_rules_of_its_own() -> None:
    question = "o que decidimos na semana passada?"
    assert Router(rules=[(r"\bcats?\b", "conceptual")]).route(question).intent == "general"
    assert Router(rules=[(r"\bcats?\b", "conceptual")], periods=True).route(question).intent == "temporal"
    assert Router(periods=False).route(question).intent == "general"
