"""Intent routing: a natural-language question becomes a checked NLQL query (SPEC §9 "Routing").

A :class:`Router` holds ordered rules ``(regex, intent)`` and one NLQL template per intent. The first rule
whose regex is found in the question names the intent (``"general"`` when none matches); the intent's
template is run with the question bound as parameters:

* ``$q``: the question, as asked;
* ``$rewrites``: a list of texts, ``rewriter(question)`` when the router has a rewriter (an LLM, say),
  else ``[question]``; made for ``SIMILARITY(content, $rewrites)`` (the best cosine over the texts);
* ``$keywords``: the question's content words: the words the matching rule matched (``who mentioned``,
  ``last week``) and English function words (``what``, ``is``, ``the``) left out; made for ``BM25``.

A template binds only the parameters it uses, and may use others that the caller passes to
``engine.ask(..., params=...)``. Every template is parsed and checked when the router is built.

>>> router = Router(rules=[(r"\\bhow\\s+(?:do|can)\\s+i\\b", "howto")],
...                 templates={"howto": 'SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 3'})
>>> route = router.route("How do I install it?")
>>> route.intent, route.params
('howto', {'q': 'How do I install it?'})
>>> router.route("cats").intent
'general'
>>> default_router().route("Who mentioned Wittgenstein?").params["keywords"]
'Wittgenstein'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from nlql import ir
from nlql.check import check
from nlql.errors import Diagnostic, NLQLError, RouteError, TemplateError
from nlql.explain import Explain
from nlql.parser import parse
from nlql.text.analyzer import SPACELESS_CHARS, UNICODE_WORDS

__all__ = [
    "DEFAULT_RULES",
    "DEFAULT_TEMPLATES",
    "GENERAL",
    "INTENTS",
    "MAX_REWRITES",
    "RESERVED_PARAMS",
    "SIMILARITY_FLOOR",
    "STOPWORDS",
    "answers",
    "route_notes",
    "fusion_weights",
    "language_class",
    "Route",
    "RouteExplain",
    "Router",
    "Rule",
    "default_router",
    "keywords",
    "nothing_about",
    "render_default_router",
]

GENERAL = "general"
#: The intents of the default router, in rule order (``general`` is the fallback).
INTENTS: tuple[str, ...] = ("entity", "contrast", "evolution", "temporal", "passage", "conceptual", GENERAL)
#: Parameters a router binds itself; a caller's ``params`` may not use these names.
RESERVED_PARAMS: tuple[str, ...] = ("q", "rewrites", "keywords", "weights", "arm_weights", "arm2_weights")
#: At most this many rewrites are bound (the rest are dropped, with a warning).
MAX_REWRITES = 32
#: A row with none of the question's keywords must be at least this similar to be an answer (the cosine
#: of all-MiniLM-L6-v2, where unrelated sentences score about 0–0.2; see docs/routing.md).
SIMILARITY_FLOOR = 0.5

# ------------------------------------------------------------------------------------- default rules

_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|december|"
           "jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec")
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_UNITS = rf"(?:days?|nights?|weeks?|weekends?|months?|quarters?|years?|decades?|{_DAYS}|{_MONTHS})"
_NUMBER = r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|few|several|couple\s+of)"
_LEAD = r"^\W*(?:(?:and|but|so|ok|okay|hey|please|now|then)\W+)?"  # a question's start, past filler words
# a short name between cue words ("what did <Alice Smith> say"); bounded, and kept in $keywords
_SUBJECT = r"(?P<subject>(?:[\w.'-]+\s+){1,5}?)"

#: The default rules: ``(regex, intent)``, tried in order, case-insensitive; the first found wins. Rules
#: that read a question's first words come before the cue words found anywhere, entity before temporal
#: before conceptual, so "who mentioned X last week" is entity and "what is due next week" temporal.
DEFAULT_RULES: tuple[tuple[str, str], ...] = (
    # entity: who mentioned / talked about / cited / wrote about …, what did X say, mentions of X
    (r"\bwho(?:\s+(?:has|have|had|else|ever|first|all|actually))*\s+(?:mention(?:s|ed)?|talk(?:s|ed)?\s+about|"
     r"sp(?:oke|eaks?)\s+(?:about|of)|cit(?:es|ed|e)|quot(?:es|ed|e)|wr(?:ote|ites?|itten)\s+(?:about|on)|"
     r"refer(?:s|red)?\s+to|referenc(?:es|ed|e)|discuss(?:es|ed)?|brought\s+up|br(?:ings|ing)\s+up|said|says)\b",
     "entity"),
    (rf"\bwhat\s+(?:did|does|do|has|have|had)\s+{_SUBJECT}(?:say|said|think|thought|write|written|wrote|"
     r"claim(?:ed)?|argue[sd]?|propose[sd]?|tell|told|suggest(?:ed)?)\b", "entity"),
    (r"\b(?:mentions?|references?|citations?|quotes?|quotations?)\s+(?:of|to|by|from)\b", "entity"),
    (r"\baccording\s+to\b", "entity"),
    (rf"{_LEAD}(?:who|whom|whose)\b", "entity"),
    # entity in other languages: 谁提到了 X, quién mencionó a X, wer hat X erwähnt
    (r"(?:谁|誰|哪些人|什么人)(?:曾|也|都|还)?(?:提到|提及|说过|谈到|谈论|讲到|写到|引用|说|讲|写)", "entity"),
    (r"\bqui[eé]n(?:es)?\s+(?:ha(?:n)?\s+)?(?:mencion[oóa]|mencionaron|habl[oóa]|hablaron|cit[oóa]|dijo|escribi[oó])\b",
     "entity"),
    (r"\bwer\s+(?:hat|hatte|erw[aä]hnt|sprach|schrieb|zitiert)\b", "entity"),
    # Japanese 誰が (who, as the subject: 誰がラッセルについて話しましたか), Korean 누가 / 누구
    (r"(?:誰|だれ)(?:が|か|の)|누가|누구", "entity"),
    # contrast (wittsrc's rule 5): contradictions and disagreements, answered from several documents
    (r"\bcontradict(?:s|ed|ing|ions?|ory)?\b|\bdisagree(?:s|d|ment|ments)?\b|\binconsisten(?:t|cy|cies)\b|"
     r"\bconflict(?:s|ing)?\s+(?:with|between|about|over)\b|\bat\s+odds\b|\bdiffer(?:s|ed)?\s+(?:from|with|on)\b|"
     r"矛盾|相反|不一致|\bcontradic(?:e|en|ci[oó]n|torio)\b|\bwiderspr(?:ich|echen|uch)\w*", "contrast"),
    # evolution (wittsrc's rule 6): how something changed, answered in date order
    (r"\bevol(?:ve|ves|ved|ving|ution)\b|\bchang(?:e|es|ed|ing)\s+over\s+(?:time|the\s+years)\b|"
     r"\bover\s+the\s+(?:years|decades|months)\b|\bhow\s+(?:has|have|did)\s+.{1,60}?\s+change[ds]?\b|"
     r"\b(?:earlier|later)\s+(?:and|or|vs\.?|versus)\s+(?:earlier|later)\b|\bhistory\s+of\b|\btimeline\b|"
     r"演变|变迁|发展历程|\bevoluci[oó]n\b|\bevolucion(?:ó|aron)\b|\bEntwicklung\b", "evolution"),
    # temporal: when did/was …, last week/month/year, yesterday, earlier/later, N days ago, dates
    (rf"{_LEAD}when\b|\bwhen\s+(?:did|was|were|is|are|will|do|does|has|have|had)\b", "temporal"),
    (r"\b(?:since|until|till)\s+when\b|\bhow\s+long\s+ago\b|\bwhat\s+(?:time|date|day|year)\s+"
     r"(?:did|was|is|were|will)\b", "temporal"),
    (rf"\b(?:last|past|previous|this|next|coming)\s+(?:\d+\s+|few\s+|couple\s+of\s+)?{_UNITS}\b", "temporal"),
    (r"\b(?:yesterday|today|tonight|tomorrow|recently|lately)\b", "temporal"),
    (rf"\b{_NUMBER}\s+(?:days?|weeks?|months?|years?)\s+ago\b", "temporal"),
    (r"\b(?:earlier|later)\s+(?:today|tonight|this|that|on|in|than)\b|\b(?:earlier|later)\W*$", "temporal"),
    (r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b", "temporal"),
    (r"\b(?:in|since|before|after|during|until|from|by)\s+(?:(?:early|late|mid)[-\s]+)?(?:19|20)\d{2}s?\b",
     "temporal"),
    (rf"\b(?:in|since|before|after|during|until|from|by|on)\s+(?:(?:early|late|mid)[-\s]+)?(?:{_MONTHS})\b|"
     rf"\b(?:{_MONTHS})\.?\s+(?:\d{{1,2}}(?:st|nd|rd|th)?|(?:19|20)\d{{2}})\b|"
     rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})\b", "temporal"),
    # temporal in other languages (the TEMPORAL arm reads every language dateparser knows)
    (r"上周|上星期|上个?月|去年|前年|昨天|前天|今天|今年|本周|这周|最近|近来|明天|下周|下个?月|明年|"
     r"[一二三四五六七八九十\d]+(?:天|周|个月|年)前|\d{4}年|[一二三四五六七八九十\d]+月", "temporal"),
    # Japanese (先週 last week, 先月, 昨年, いつ when, 3日前) and Korean (지난주, 작년, 어제, 언제)
    (r"先々週|先週|今週|来週|先月|今月|来月|昨年|来年|一昨日|いつ|[一二三四五六七八九十\d]+(?:日|週間|[ヶカか]月)前|"
     r"지난\s?주|지난\s?달|작년|어제|오늘|언제", "temporal"),
    (r"\b(?:la\s+semana|el\s+mes|el\s+año)\s+pasad[oa]\b|\bayer\b|\bhoy\b|\bhace\s+\w+\s+(?:d[ií]as|semanas|meses|años)\b|"
     r"\bcu[aá]ndo\b", "temporal"),
    (r"\b(?:letzte[nmr]?|vorige[nmr]?|n[aä]chste[nmr]?)\s+(?:Woche|Monat|Jahr)\b|\bgestern\b|\bheute\b|\bvor\s+\w+\s+"
     r"(?:Tagen|Wochen|Monaten|Jahren)\b|\bwann\b", "temporal"),
    # passage: the question asks for the words themselves, not a page
    (r"\b(?:quote|quotation|passage|sentence|paragraph|excerpt|exact\s+words|verbatim|where\s+does\s+it\s+say|"
     r"which\s+line)\b", "passage"),
    # conceptual: what is/are, definition of, meaning of, explain …, define
    (r"\bwhat(?:'s|\s+is|\s+are)\b", "conceptual"),
    (rf"\bwhat\s+(?:does|do|did)\s+{_SUBJECT}mean\b|\bwhat\s+is\s+meant\s+by\b", "conceptual"),
    (r"\b(?:definitions?|meanings?|concept|notion)\s+of\b", "conceptual"),
    (r"\bdefin(?:e|es|ed|ing)\b|\bexplain(?:s|ed|ing)?\b|\bexplanation\s+of\b|\bdifference\s+between\b",
     "conceptual"),
)


#: The rank constant of the default templates' RRF (sharper than RRF's default 60: the first ranks of
#: the stronger arm count for more; measured in docs/routing.md).
RRF_K = 10
#: ``fusion_weights`` for English questions, other Latin-script languages, and mostly-CJK questions.
DEFAULT_WEIGHTS: tuple[float, float] = (2.5, 1.0)
OTHER_WEIGHTS: tuple[float, float] = (1.0, 2.0)
CJK_WEIGHTS: tuple[float, float] = (1.0, 4.0)
#: ``fusion_weights`` for Japanese questions (CJK with kana): the default embedder ranks Japanese pages
#: about as well as English ones (multilingual tune half: SIMILARITY nDCG@10 0.79, BM25's bigrams 0.71),
#: so they take the English weights (docs/routing.md).
JAPANESE_WEIGHTS: tuple[float, float] = DEFAULT_WEIGHTS

# ---------------------------------------------------------------------------------- default templates


def _hybrid(arm: str | None = None, name: str = "arm", unit: str = "DOCUMENT", distinct: str | None = None,
            order: str = "score DESC", window: int | None = None, period: bool = False) -> str:
    """A default template: semantic + BM25 (plus ``arm`` first, when given) fused with RRF.

    No WHERE: a residual condition would make every row be scored one by one (explain's "fast path:
    none"). Honest empties are kept by :func:`answers` instead: ``ask`` returns no rows when none of the
    rows found holds a keyword of the question, is very similar to it or is ranked by ``arm``.
    ``$weights`` are the arms' RRF weights, chosen per question by :func:`fusion_weights`.
    """
    lets = ["sem = SIMILARITY(content, $rewrites)", "kw = BM25(content, $keywords)"]
    arms = ["sem", "kw"]
    weights = "$weights"
    if arm is not None:
        lets.insert(0, f"{name} = {arm}")
        arms.insert(0, name)
        weights = "$arm_weights"
    if period:  # "who mentioned X last week": the TEMPORAL arm too (empty when the question names no period)
        lets.insert(1, "period = TEMPORAL(meta.date, $q)")
        arms.insert(1, "period")
        weights = "$arm2_weights"
    extra = f", window => {window}" if window is not None else ""
    lets.append(f"score = RRF({', '.join(arms)}, k => {RRF_K}, weights => {weights}{extra})")
    return (f"SELECT {unit}\n"
            "LET " + ",\n    ".join(lets) + "\n"
            + (f"DISTINCT BY {distinct}\n" if distinct else "")
            + f"ORDER BY {order}\n"
            "LIMIT 10")


#: One template per default intent (SPEC §9 "Routing"): entity questions put the GRAPH arm first and
#: answer with whole documents (the entity's own page before fragments); contrast questions with
#: passages from different documents; evolution questions with the relevant documents in date order;
#: temporal ones with the TEMPORAL arm; passage questions with sentences (two per document at most);
#: conceptual and general ones with documents.
DEFAULT_TEMPLATES: dict[str, str] = {
    "entity": _hybrid("GRAPH($q, hops => 1, decay => 0.5)", "graph"),
    "contrast": _hybrid(unit="SPAN(SENTENCE, window => 1)", distinct="doc_id"),
    "evolution": _hybrid(window=20, order="meta.date ASC NULLS LAST, score DESC"),
    "temporal": _hybrid("TEMPORAL(meta.date, $q)", "period"),
    "passage": _hybrid(unit="SENTENCE", distinct="doc_id KEEP 2"),
    "conceptual": _hybrid(),
    GENERAL: _hybrid(),
}

#: Score names of the default templates that make a row an answer (see :func:`answers`).
_ANSWER_ARMS = ("graph", "period")

# ------------------------------------------------------------------------------------------ keywords

#: English function words and question words left out of ``$keywords``.
STOPWORDS: frozenset[str] = frozenset("""
a about above after again against all also am an and any anyone anything are as at be because been before
being below between both but by can could d did do does doing done don down during each either else ever
every everything few for from further get got had has have having he her here hers herself him himself his
how i if in into is it its itself just know let ll m me more most much my myself no nor not now of off on
once only or other our ours ourselves out over own please re s same say she should show so some someone
something such t tell than that the their theirs them themselves then there these they thing things this
those through to too under until up us ve very was we were what whats when where whether which while who
whom whose why will with would you your yours yourself yourselves
""".split())

#: Question and function words of other Latin-script languages (Spanish, German, French, Italian,
#: Portuguese, Dutch, Swedish/Danish/Norwegian, Polish), left out of ``$keywords`` when the question is not
#: in English (:func:`language_class`) and counted by it as the question's non-English words. Words that
#: are English too ("die", "was", "man", "son", "den") are here only where English questions never reach.
OTHER_STOPWORDS: frozenset[str] = frozenset("""
qué que quién quiénes cómo cuándo dónde cuál cuáles cuánto cuántos cuánta cuántas por para el la los las lo de
del en un una unos unas es son se y o a al con su sus hay
was wer wie wann wo welche welcher welches warum wieso der die das den dem des ist sind ein eine einen im am
zum zur und oder man auf aus mit von zu bei nach für über nicht ich du er sie wir ihr kann gibt
quoi qui quand où pourquoi comment quel quelle quels quelles combien le les du des une est sont et ou au aux
dans sur pour avec ce cette ces qu
che chi cosa dove quando quale quali perché quanto quanta quanti quante il lo gli della dello dei delle
nel nella sono è di da per con una uno
quem onde qual quais porquê quanto quantos quantas os um uma umas uns é são do da dos das no na nos nas em
foi foram ser está estão tem têm há
hoe wat wie waar wanneer welk welke waarom het een van zijn naar voor met niet ook
vad vem hur när var varför vilken vilket vilka och att det som är en ett hvad hvem hvor hvornår hvorfor og er
hva hvordan når
co kto jak gdzie kiedy dlaczego który która które jest są się nie na w z i czy
""".split())
#: Words of English and of other languages ("in", "was", "die"): a sign of neither.
_SHARED_WORDS: frozenset[str] = frozenset("a am an as at be de die do i in is man no o on or so son the to was we".split())
#: Chinese question and function words dropped from ``$keywords`` (so BM25's bigrams are the content's).
_CJK_QUESTION_WORDS = re.compile("为什么|怎么样|怎么|怎样|什么|哪里|哪儿|哪些|哪个|哪|谁|多少|几|吗|呢|吧|是否|如何|请问|"
                                 # Japanese: who, what, when, where, how, and the question endings
                                 "誰が|誰|だれ|何が|何を|何|いつ|どこ|どう|どれ|どの|ましたか|ですか|ますか|でしょうか")
#: Hiragana and katakana: a CJK question holding them is Japanese.
_KANA = re.compile("[\u3040-\u30ff]")
_CJK_RANGES = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_CHAR = re.compile(f"[{_CJK_RANGES}]")
#: Letters the default analyzer reads as bigrams: CJK, and the scripts written without spaces (Thai, Lao,
#: Khmer, Burmese, the Tai scripts), which the default embedder reads no better than Chinese.
_BIGRAM_CHAR = re.compile(f"[{_CJK_RANGES}{SPACELESS_CHARS}]")
#: Unicode words (UTS #18, combining marks included: "नमस्ते" is one word), as the default analyzer reads them.
_WORD_RE = UNICODE_WORDS
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201b": "'", "\u2032": "'",
                         "\u201c": '"', "\u201d": '"', "\u201f": '"'})


def _normalize(question: str) -> str:
    """Typographic quotes as ASCII ones, runs of whitespace as one space (what rules are matched on)."""
    return " ".join(question.translate(_QUOTES).split())


def keywords(question: str, match: re.Match[str] | None = None) -> str:
    """The content words of ``question``, in order, without :data:`STOPWORDS` and without what a rule's
    ``match`` matched, except its ``subject`` group (the name in "what did <Alice> say").

    >>> keywords("What did we decide about the budget?")
    'decide budget'
    """
    text = question
    if match is not None:
        keep = match.group("subject") if "subject" in match.re.groupindex else None
        text = question[:match.start()] + " " + (keep or "") + " " + question[match.end():]
    text = _CJK_QUESTION_WORDS.sub(" ", text) if _CJK_CHAR.search(text) else text
    other = OTHER_STOPWORDS if language_class(question) != "english" else frozenset()
    return " ".join(w for w in _WORD_RE.findall(text) if w.casefold() not in STOPWORDS
                    and w.casefold() not in other and not (len(w) == 1 and w.isascii() and w.isalpha()))  # "I/O": no "o"


#: The weight of a template's own arm (GRAPH, TEMPORAL) beside the semantic and keyword arms.
ARM_WEIGHT = 1.0


@lru_cache(maxsize=1024)  # (a routed question asks it for its keywords, its weights and its answers)
def language_class(question: str) -> str:
    """``"cjk"``, ``"other"`` or ``"english"``: what the default embedder can read of a question.

    ``"cjk"`` when at least half its letters are Chinese, Japanese or Korean, or of a script written
    without spaces (Thai, Lao, Khmer, Burmese: read as bigrams too); ``"other"`` when at least
    half are of another non-Latin script (Cyrillic, Greek, Arabic, Hebrew, Devanagari, …) or when, in
    Latin script, its words of other languages (:data:`OTHER_STOPWORDS`, and words with letters such as
    ``ñ``, ``ß``, ``ø``, ``ł``) outnumber its English function words; else ``"english"``.

    >>> [language_class(q) for q in ("how much disk space a directory uses", "Wie schnell darf man fahren?",
    ...                              "Hoe laat vertrekt de trein?", "Сколько стоит билет?", "熊猫吃什么？")]
    ['english', 'other', 'other', 'other', 'cjk']
    """
    letters = [c for c in question if c.isalpha()]
    if not letters:
        return "english"
    cjk = sum(1 for c in letters if _BIGRAM_CHAR.match(c))
    if cjk * 2 >= len(letters):
        return "cjk"
    non_latin = sum(1 for c in letters if c > "\u024f" and not _BIGRAM_CHAR.match(c) and not _is_latin(c))
    if non_latin * 2 >= len(letters):
        return "other"
    english, foreign = 0, question.count("¿") + question.count("¡")
    for word in _WORD_RE.findall(question.casefold()):
        if word in _SHARED_WORDS:
            continue
        if word in STOPWORDS:
            english += 1
        elif word in OTHER_STOPWORDS or not word.isascii():
            foreign += 1
    return "other" if foreign > english else "english"


@lru_cache(maxsize=4096)
def _is_latin(c: str) -> bool:
    import unicodedata

    return unicodedata.name(c, "").startswith("LATIN")


def fusion_weights(question: str) -> tuple[float, float]:
    """RRF weights ``(semantic, keyword)`` for a question: what the arms' evidence supports.

    The default embedder (all-MiniLM-L6-v2) was trained on English text. On English questions its
    arm is the stronger one (man pages: SIMILARITY nDCG@10 0.78 vs BM25 0.59), so it weighs 2.5; on
    questions in another language (:func:`language_class`: Spanish, German, Dutch, Russian, …) BM25
    weighs 2 (Spanish: BM25 0.89, SIMILARITY 0.82); on mostly-CJK questions, where the embedder's
    cosines carry little and BM25's bigrams carry the answer, BM25 weighs 4, except on Japanese ones (CJK
    with hiragana or katakana), where the embedder's arm is the stronger one again and the English weights
    apply. Chosen on the tune halves of bench/quality.py's three sets (see docs/routing.md for the figures).

    >>> fusion_weights("how much disk space a directory uses")
    (2.5, 1.0)
    >>> fusion_weights("¿Qué sopa se come fría en verano?"), fusion_weights("熊猫吃什么？")
    ((1.0, 2.0), (1.0, 4.0))
    >>> fusion_weights("日本で一番高い山の高さは？")
    (2.5, 1.0)
    """
    cls = language_class(question)
    if cls == "cjk":
        return JAPANESE_WEIGHTS if _KANA.search(question) else CJK_WEIGHTS
    return OTHER_WEIGHTS if cls == "other" else DEFAULT_WEIGHTS


def route_notes(route: Route, hits: Any) -> list[str]:
    """Suggestions ``ask`` adds to its warnings: an entity question whose GRAPH arm found no known
    entity (the answer then comes from the semantic and keyword arms only)."""
    if route.intent != "entity" or route.query != DEFAULT_TEMPLATES.get("entity") or not hits:
        return []
    if any(h.scores.get("graph") is not None for h in hits):
        return []
    return ["the graph arm found no known entity in the question, so the answer comes from the semantic and "
            "keyword arms only: name the person or thing as the documents write it (e.g. 'Russell'), or see "
            "which names the store knows with GRAPH in explain"]


def answers(route: Route, hit: Any) -> bool:
    """Whether one row a default template found answers the question: it holds a keyword of the question
    (``kw > 0``), is very similar to it (``sem >=`` :data:`SIMILARITY_FLOOR`) or is ranked by the
    template's own arm (GRAPH, TEMPORAL). When no row of the page does, ``ask`` returns no rows: a
    question the store knows nothing about gets an honest empty; otherwise the page is the routed
    query's, as it is. A router's own templates are taken as they are (True).

    This replaces the ``WHERE kw > 0 OR sem >= 0.5`` of earlier templates: a WHERE made every row be
    scored one by one (no fast path), and dropping rows from a page lost relevant ones (measured in
    docs/routing.md).
    """
    if route.query not in DEFAULT_TEMPLATES.values():
        return True
    s = hit.scores
    if (s.get("kw") or 0) > 0 or (s.get("sem") is not None and s["sem"] >= SIMILARITY_FLOOR):
        return True
    if _shares_a_compound_part(route, getattr(hit, "content", "")):
        return True
    if "graph" in s:  # an entity question: a row of the period alone is not about the entity
        return s["graph"] is not None
    return any(s.get(a) is not None for a in _ANSWER_ARMS)


def _shares_a_compound_part(route: Route, content: str) -> bool:
    """Whether, for a question not in English, a keyword of it is a compound whose head or modifier is
    a word of ``content`` ("Altpapier" and "Papier", "Bahnhofsuhr" and "Bahnhof"): BM25 matches whole
    words only, and the English embedder's cosine is no sign of meaning there, so without this a page
    that holds the answer would be taken for an honest empty."""
    question = route.question or route.params.get("q") or ""
    keys = [k.casefold() for k in str(route.params.get("keywords") or "").split() if len(k) >= 6]
    if not keys or not content or language_class(question) == "english":
        return False
    words = {w for w in _WORD_RE.findall(content.casefold()) if len(w) >= 4}
    return any(k != w and (k.startswith(w) or k.endswith(w)) and len(k) - len(w) >= 2 for k in keys for w in words)


# ---------------------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Rule:
    """One routing rule: ``pattern`` (the regex as written) and the ``intent`` it names."""

    pattern: str
    intent: str
    regex: re.Pattern[str] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Route:
    """A routed question: the ``intent``, the NLQL ``query`` (the intent's template) and the ``params``
    to run it with; ``rule`` is the pattern that matched (None: no rule did, so ``general``);
    ``warnings`` says what went wrong with the rewriter, if anything.

    ``engine.search(route.query, params=route.params)`` runs exactly what ``engine.ask`` runs; ``ask``
    returns no rows when none of them answers (:func:`answers`).
    """

    intent: str
    query: str
    params: dict[str, Any]
    rule: str | None = None
    warnings: tuple[str, ...] = ()
    question: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (for ``--json`` output and agents)."""
        return {"intent": self.intent, "rule": self.rule, "question": self.question, "query": self.query,
                "params": dict(self.params), "warnings": list(self.warnings)}


class RouteExplain(Explain):
    """``engine.explain(route)``: the intent, the rule that matched, the parameters and the query plan."""

    def __init__(self, route: Route, plan: Explain) -> None:
        super().__init__(plan.plan, plan.store_notes, plan.sql)
        self.route = route

    def to_dict(self) -> dict[str, Any]:
        return {"route": self.route.to_dict(), **super().to_dict()}

    def __str__(self) -> str:
        r = self.route
        lines = [f"intent: {r.intent}",
                 f"rule: {r.rule if r.rule is not None else '(no rule matched: the general intent)'}"]
        for name in sorted(r.params):
            lines.append(f"param ${name} = {_show(r.params[name])}")
        lines.extend(f"warning: {w}" for w in r.warnings)
        return "\n".join(lines) + "\n" + super().__str__()

    def __repr__(self) -> str:
        return f"<RouteExplain {self.route.intent} {self.plan.canonical!r}>"


def nothing_about(question: str) -> str:
    """The honest empty: what ``ask`` says (in ``hits.warnings``) when no row answers ``question``."""
    return f"the store holds nothing about {question.strip()!r}"


def _show(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, default=str)


# --------------------------------------------------------------------------------------------- router

Rewriter = Callable[[str], Sequence[str]]


class Router:
    """Routes a question to an intent by the first matching rule and binds the intent's NLQL template.

    Args:
        rules: ``(regex, intent)`` pairs, tried in order (default :data:`DEFAULT_RULES`). A regex given
            as text is compiled case-insensitive; a compiled pattern is used as it is. It is searched
            for anywhere in the question (typographic quotes made ASCII, whitespace collapsed).
        templates: ``{intent: NLQL text}``, merged over :data:`DEFAULT_TEMPLATES` (so a router may
            override or add one intent and keep the others).
        rewriter: Any callable ``question -> list[str]``; its output is bound as ``$rewrites``.
        functions: User functions the templates call, as registered on the engine (name → arity).
        periods: When no rule matches, a question naming a period in any language dateparser knows
            (the rules of :func:`nlql.text.temporal.extract_period`, not its date search) is
            ``temporal``. ``None`` (default): on with the default rules, off with rules of one's own.

    Raises:
        TemplateError: A template is not valid NLQL (names the template; the caret is in its text).
        RouteError: A rule is not a valid regex, or names an intent that has no template.
        TypeError: Arguments of the wrong shape (a programming error).
    """

    def __init__(self, rules: Iterable[tuple[str | re.Pattern[str], str]] | None = None,
                 templates: Mapping[str, str] | None = None, rewriter: Rewriter | None = None, *,
                 functions: Mapping[str, int | None] | None = None, periods: bool | None = None) -> None:
        if rewriter is not None and not callable(rewriter):
            raise TypeError(f"rewriter must be a callable question -> list[str], not {type(rewriter).__name__}")
        if templates is not None and not isinstance(templates, Mapping):
            raise TypeError(f"templates must be a mapping of intent to NLQL text, not {type(templates).__name__}")
        merged = dict(DEFAULT_TEMPLATES)
        merged.update(templates or {})
        self.templates: dict[str, str] = {}
        self._uses: dict[str, frozenset[str]] = {}
        for intent, text in merged.items():
            if not isinstance(intent, str) or not isinstance(text, str):
                raise TypeError("templates must map intent names (str) to NLQL text (str)")
            self._uses[intent] = _check_template(intent, text, functions)
            self.templates[intent] = text
        if GENERAL not in self.templates:  # pragma: no cover - the defaults always provide it
            raise RouteError(f"the router needs a {GENERAL!r} template")
        self.rules: tuple[Rule, ...] = tuple(_rule(i, r, self.templates)
                                             for i, r in enumerate(DEFAULT_RULES if rules is None else rules, 1))
        self.rewriter = rewriter
        self.periods = (rules is None if periods is None else bool(periods)) and TEMPORAL in self.templates

    def __repr__(self) -> str:
        return f"Router({len(self.rules)} rules, intents {sorted(self.templates)})"

    def classify(self, question: str) -> tuple[str, Rule | None, re.Match[str] | None]:
        """(intent, the matching rule or None, its match in the normalised question)."""
        text = _normalize(question)
        for rule in self.rules:
            m = rule.regex.search(text)
            if m is not None:
                return rule.intent, rule, m
        if self.periods:
            period = _period_in(text)
            if period is not None:  # "o que decidimos na semana passada?", "maart vorig jaar"
                regex = re.compile(re.escape(period))
                rule = Rule(f"{PERIOD_RULE}: {period!r}", TEMPORAL, regex)
                return TEMPORAL, rule, regex.search(text)
        return GENERAL, None, None

    def route(self, question: str) -> Route:
        """The intent of ``question`` and its template with ``$q``/``$rewrites``/``$keywords`` bound.

        Raises:
            RouteError: The question is empty.
            TypeError: The question is not a string.
        """
        if not isinstance(question, str):
            raise TypeError(f"the question must be a string, not {type(question).__name__}")
        if not question.strip():
            raise RouteError("the question is empty", hint="ask something, e.g. engine.ask('who mentioned X?')")
        intent, rule, match = self.classify(question)
        uses = self._uses[intent]
        params: dict[str, Any] = {}
        warnings: list[str] = []
        if "q" in uses:
            params["q"] = question
        if "rewrites" in uses:
            params["rewrites"] = self._rewrites(question, warnings)
        if "keywords" in uses:
            params["keywords"] = keywords(_normalize(question), match) or question
        if uses & {"weights", "arm_weights", "arm2_weights"}:
            sem, kw = fusion_weights(question)
            if "weights" in uses:
                params["weights"] = [sem, kw]
            if "arm_weights" in uses:
                params["arm_weights"] = [ARM_WEIGHT, sem, kw]
            if "arm2_weights" in uses:
                params["arm2_weights"] = [ARM_WEIGHT, ARM_WEIGHT, sem, kw]
        return Route(intent, self.templates[intent], params, rule.pattern if rule else None, tuple(warnings),
                     question)

    def uses(self, intent: str) -> frozenset[str]:
        """The parameter names the template of ``intent`` uses."""
        return self._uses[intent]

    def _rewrites(self, question: str, warnings: list[str]) -> list[str]:
        if self.rewriter is None:
            return [question]
        name = getattr(self.rewriter, "__name__", type(self.rewriter).__name__)
        try:
            out = self.rewriter(question)
        except Exception as exc:  # noqa: BLE001 - any failure of user code leaves the question alone
            warnings.append(f"the rewriter {name} failed ({type(exc).__name__}: {exc}); "
                            "the question is used as it is")
            return [question]
        if (not isinstance(out, (list, tuple)) or not out
                or not all(isinstance(t, str) and t.strip() for t in out)):
            warnings.append(f"the rewriter {name} returned {_describe(out)}, not a list of non-empty strings; "
                            "the question is used as it is")
            return [question]
        texts = [t.strip() for t in out]
        if len(texts) > MAX_REWRITES:
            warnings.append(f"the rewriter {name} returned {len(texts)} rewrites; the first {MAX_REWRITES} "
                            "are used")
            texts = texts[:MAX_REWRITES]
        return texts

    def describe(self) -> str:
        """The rules and templates as markdown (what docs/routing.md prints for the default router)."""
        width = max([len(r.intent) for r in self.rules] + [len(GENERAL)])
        lines = ["```text", f"{'#':<3} {'intent':<{width}}  regex (case-insensitive, searched anywhere in the question)"]
        for i, r in enumerate(self.rules, 1):
            lines.append(f"{i:<3} {r.intent:<{width}}  {r.pattern}")
        if self.periods:
            lines.append(f"{'-':<3} {TEMPORAL:<{width}}  ({PERIOD_RULE})")
        lines += [f"{'-':<3} {GENERAL:<{width}}  (no rule matched)", "```"]
        for intent in sorted(self.templates, key=lambda i: (INTENTS.index(i) if i in INTENTS else len(INTENTS), i)):
            lines += ["", f"Template `{intent}`:", "", "```sql", self.templates[intent], "```"]
        return "\n".join(lines)


def _describe(value: Any) -> str:
    """What a rewriter returned, in a few words, for a warning."""
    if isinstance(value, (list, tuple)) and not value:
        return "an empty list"
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '…' if len(text) > 60 else text}"


def _rule(index: int, rule: Any, templates: Mapping[str, str]) -> Rule:
    if not isinstance(rule, (tuple, list)) or len(rule) != 2:
        raise TypeError(f"rule {index} must be a (regex, intent) pair, not {rule!r}")
    pattern, intent = rule
    if not isinstance(intent, str):
        raise TypeError(f"the intent of rule {index} must be a string, not {type(intent).__name__}")
    if isinstance(pattern, re.Pattern):
        regex = pattern
        text = pattern.pattern
    elif isinstance(pattern, str):
        try:
            regex = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise RouteError(f"rule {index} ({intent}) is not a valid regex: {exc.msg} at position {exc.pos}",
                             hint=f"the pattern is {pattern!r}") from None
        text = pattern
    else:
        raise TypeError(f"the regex of rule {index} must be a string or re.Pattern, not {type(pattern).__name__}")
    if intent not in templates:
        import difflib

        close = difflib.get_close_matches(intent, list(templates), n=1)
        raise RouteError(f"rule {index} names the intent {intent!r}, which has no template",
                         hint=(f"did you mean {close[0]!r}? " if close else "")
                         + f"add templates={{{intent!r}: '…'}}; intents with templates: {sorted(templates)}")
    return Rule(text, intent, regex)


_SAMPLE = {"q": "a question", "rewrites": ["a question", "a rewrite"], "keywords": "question",
           "weights": [1.0, 1.0], "arm_weights": [1.0, 1.0, 1.0], "arm2_weights": [1.0, 1.0, 1.0, 1.0]}


def _check_template(intent: str, text: str, functions: Mapping[str, int | None] | None) -> frozenset[str]:
    """Parse and check one template; the parameter names it uses."""
    try:
        q = parse(text)
    except NLQLError as exc:
        raise TemplateError(intent, exc.with_source(text).diagnostics, text) from None
    uses = frozenset(n.name for n in q.walk() if isinstance(n, ir.Param))
    # reserved parameters are checked with sample values of their real types; a caller's own ones
    # (bound at ask time) only for being there
    sample = {k: v for k, v in _SAMPLE.items() if k in uses}
    diags = [d for d in check(q, params=sample, functions=functions)
             if not _missing_caller_param(d, uses)]
    if not uses & {"q", "rewrites", "keywords"}:
        diags.append(Diagnostic(0, 0, "the template never uses the question",
                                "use $q, $rewrites or $keywords, e.g. SIMILARITY(content, $q)", None, "template"))
    if diags:
        raise TemplateError(intent, diags, text)
    return uses


def _missing_caller_param(d: Diagnostic, uses: frozenset[str]) -> bool:
    return d.message.startswith("missing parameter $") and d.message[len("missing parameter $"):] in uses \
        and d.message[len("missing parameter $"):] not in RESERVED_PARAMS


TEMPORAL = "temporal"
#: What a route says of the period fallback (no rule matched, a period was found: ``temporal``).
PERIOD_RULE = "no rule matched; a period in any language dateparser knows"


#: English function words; a question in ASCII with two of them is English, whose periods the rules
#: above already read (so the every-language table, 0.3 CPU-s to build, is not built for it)
_ENGLISH_FUNCTION_WORDS = frozenset("the a an how what which who whom is are was were do does did my i me to of "
                                    "for with and on from that this it can should when where why".split())


def _period_in(text: str) -> str | None:
    """The words of ``text`` that name a period (any language, rules only), or None."""
    if text.isascii() and sum(w in _ENGLISH_FUNCTION_WORDS for w in re.findall(r"[a-z]+", text.lower())) >= 2:
        return None
    from datetime import datetime, timezone

    from nlql.text.temporal import extract_period

    try:  # (which period does not matter here, only that one is named: any clock will do)
        # French and Italian have phrase rules there and none here; the languages of the rules above, and
        # every other one through dateparser's tables, are read anyway
        p = extract_period(text, datetime.now(timezone.utc), languages=("fr", "it"), fallback=False)
    except Exception:  # noqa: BLE001 - routing never fails on odd text
        return None
    return p.text if p is not None and p.text.strip() else None


@lru_cache(maxsize=1)
def default_router() -> Router:
    """The router used when neither ``ask`` nor the engine names one: :data:`DEFAULT_RULES` and
    :data:`DEFAULT_TEMPLATES`, no rewriter (built once)."""
    return Router()


def render_default_router() -> str:
    """The default router's rules, templates and stopwords as markdown (the block docs/routing.md holds)."""
    import textwrap

    words = textwrap.fill(" ".join(sorted(STOPWORDS)), width=100)
    return (default_router().describe() + f"\n\nWords left out of `$keywords` (besides what the rule matched; "
            f"{len(STOPWORDS)}):\n\n```text\n{words}\n```")

