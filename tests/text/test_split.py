"""Sentence splitting: boundaries, offsets, coverage, speed."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlql.text.split import sentences, split_columns, split_many, split_sentences

CASES: list[tuple[str, list[str]]] = [
    ("", []),
    ("   \n\t  ", []),
    ("no punctuation at all", ["no punctuation at all"]),
    ("  leading and trailing   ", ["leading and trailing"]),
    ("One sentence.", ["One sentence."]),
    ("First one. Second one.", ["First one.", "Second one."]),
    ("Is it? Yes! Fine.", ["Is it?", "Yes!", "Fine."]),
    # abbreviations, titles, initials
    ("Dr. Smith went to Washington. He arrived.", ["Dr. Smith went to Washington.", "He arrived."]),
    ("Mr. and Mrs. Jones went home. They slept.", ["Mr. and Mrs. Jones went home.", "They slept."]),
    ("I like e.g. apples and i.e. pears. Next.", ["I like e.g. apples and i.e. pears.", "Next."]),
    ("The U.S. Army is large. It moved.", ["The U.S. Army is large.", "It moved."]),
    ("I live in the U.S. The weather is fine.", ["I live in the U.S.", "The weather is fine."]),
    ("J. R. R. Tolkien wrote it. So did I. Then we left.", ["J. R. R. Tolkien wrote it.", "So did I.", "Then we left."]),
    ("Smith vs. Jones was decided. Appeal followed.", ["Smith vs. Jones was decided.", "Appeal followed."]),
    ("Apples, pears, etc. The list ends.", ["Apples, pears, etc.", "The list ends."]),
    ("Yan et al. (2004) measured it. Then they left.", ["Yan et al. (2004) measured it.", "Then they left."]),
    ("See p. 55 and Fig. 3 for details. Done.", ["See p. 55 and Fig. 3 for details.", "Done."]),
    ("It opened on Jan. 5 in Paris. Crowds came.", ["It opened on Jan. 5 in Paris.", "Crowds came."]),
    ("Meet at 5 p.m. The room is 3B.", ["Meet at 5 p.m.", "The room is 3B."]),
    ("He left at 5 p.m. tomorrow.", ["He left at 5 p.m. tomorrow."]),
    ("Acme Inc. Was founded late. Odd.", ["Acme Inc. Was founded late.", "Odd."]),
    # numbers, versions, URLs
    ("Pi is 3.14 roughly. Next.", ["Pi is 3.14 roughly.", "Next."]),
    ("Version 2.0.1 was released. It fixes bugs.", ["Version 2.0.1 was released.", "It fixes bugs."]),
    ("Visit www.example.com. Then call.", ["Visit www.example.com.", "Then call."]),
    ("It costs $5. 6 people paid.", ["It costs $5.", "6 people paid."]),
    ("It was 2019. 2020 was worse.", ["It was 2019.", "2020 was worse."]),
    # ellipses
    ("Wait... what? Go on.", ["Wait... what?", "Go on."]),
    ("I was… I don't know. Really?!", ["I was…", "I don't know.", "Really?!"]),
    ("Hello!!! Are you there??? Yes.", ["Hello!!!", "Are you there???", "Yes."]),
    # quotes and brackets after the terminator
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ('"Yes." she said. (Really.) Fine!', ['"Yes." she said.', "(Really.)", "Fine!"]),
    ('She asked, "Why?" and left.', ['She asked, "Why?" and left.']),
    ("He left. “Why?” she asked.", ["He left.", "“Why?” she asked."]),
    ("Stop (see Fig. 2). Then go.", ["Stop (see Fig. 2).", "Then go."]),
    # CJK
    ("第一句。第二句！第三句？", ["第一句。", "第二句！", "第三句？"]),
    ("他说：「好。」然后走了。", ["他说：「好。」", "然后走了。"]),
    ("日本語の文です。 次の文。", ["日本語の文です。", "次の文。"]),
    # line and paragraph breaks
    ("Line one\nLine two", ["Line one", "Line two"]),
    ("Para one\n\nPara two starts. Another.", ["Para one", "Para two starts.", "Another."]),
    ("This is hard-wrapped\ntext that continues. New one.", ["This is hard-wrapped\ntext that continues.", "New one."]),
    ("A\r\nB\r\n\r\nC", ["A", "B", "C"]),
    ("Title\n\n\n   Body text here", ["Title", "Body text here"]),
    ("one\u2029two", ["one", "two"]),
    ("- item one\n- item two", ["- item one", "- item two"]),
    # list markers
    ("1. First item\n2. Second item", ["1. First item", "2. Second item"]),
    ("Steps: 1. Open the file. 2. Save it.", ["Steps: 1. Open the file.", "2. Save it."]),
    ("Chapter 1. The beginning.", ["Chapter 1.", "The beginning."]),
    # other scripts
    ("¿Qué pasa? ¡Nada! Bien.", ["¿Qué pasa?", "¡Nada!", "Bien."]),
    ("Это первое предложение. Это второе.", ["Это первое предложение.", "Это второе."]),
    ("هل أنت هنا؟ نعم.", ["هل أنت هنا؟", "نعم."]),
    ("Hi!\n", ["Hi!"]),
    ("The end .", ["The end ."]),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_cases(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


def _check_invariants(text: str, spans: list[tuple[int, int]]) -> None:
    covered = [False] * len(text)
    prev_end = 0
    for start, end in spans:
        assert prev_end <= start < end <= len(text)
        assert not text[start].isspace() and not text[end - 1].isspace()
        for i in range(start, end):
            covered[i] = True
        prev_end = end
    for i, ch in enumerate(text):
        if not ch.isspace():
            assert covered[i], f"character {i} ({ch!r}) belongs to no sentence"


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_case_invariants(text: str, expected: list[str]) -> None:
    _check_invariants(text, split_sentences(text))


_ALPHABET = st.sampled_from(
    list("aAbB zZ.!?…。！？\"')]([«»“”\n\r\t\u2029,;:1 2.") + ["Dr.", "e.g.", "U.S.", " The", "...", "\r\n", "  "]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_ALPHABET, max_size=60).map("".join))
def test_spans_cover_all_text(text: str) -> None:
    _check_invariants(text, split_sentences(text))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_spans_cover_any_unicode(text: str) -> None:
    _check_invariants(text, split_sentences(text))


def test_fast_path_single_sentence() -> None:
    assert split_sentences("  A plain sentence, e.g. this one.  ") == [(2, 34)]
    assert split_sentences("x") == [(0, 1)]


def test_generated_paragraphs_split_exactly() -> None:
    """Plain sentences glued with spaces come back exactly (and pysbd agrees on them)."""
    rng = random.Random(7)
    words = "cat dog house river blue quickly runs over under light stone".split()
    for _ in range(200):
        sents = []
        for _ in range(rng.randint(1, 6)):
            body = " ".join(rng.choice(words) for _ in range(rng.randint(2, 9)))
            sents.append(body.capitalize() + rng.choice([".", "!", "?"]))
        text = " ".join(sents)
        assert sentences(text) == sents


def test_agrees_with_pysbd_on_clean_text() -> None:
    pysbd = pytest.importorskip("pysbd")
    seg = pysbd.Segmenter(language="en", clean=False)
    text = (
        "Dr. Smith went to Washington. He arrived at 3.14 p.m. on Monday. "
        "The U.S. is big. I like e.g. apples. Mr. and Mrs. Jones went home. "
        "Version 2.0.1 was released. It fixes bugs."
    )
    assert sentences(text) == [s.strip() for s in seg.segment(text)]


@pytest.mark.parametrize(
    "text",
    [
        "!" * 100_000,
        ")" * 50_000 + "." + ")" * 50_000,
        "a. " * 30_000,
        ". " * 50_000,
        "x" * 200_000,
        "\n" * 100_000 + "a",
        " " * 100_000 + "a",
        "Dr. " * 30_000,
        "。" * 100_000,
        ("!" * 1000 + "\"" * 1000) * 50,
    ],
)
def test_adversarial_input_is_linear(text: str) -> None:
    t0 = time.process_time()
    spans = split_sentences(text)
    assert time.process_time() - t0 < 2.0
    _check_invariants(text, spans)


_PIECES = ["a", "Bc", " ", "  ", ".", "!", "?", "...", "\u2026", "\n", "\r\n", "\u2029", "\u3002", "x\u3002y",
           '"', ")", "Dr.", " The", "e.g.", "\t", "\x00", "3.14", "U.S.", "\u00a0"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PIECES), max_size=10).map("".join), max_size=40))
def test_split_many_is_split_sentences_of_each(texts: list[str]) -> None:
    """The batch form (one scan of the joined texts for the fast path) splits every text as alone."""
    assert split_many(texts) == [split_sentences(t) for t in texts]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PIECES), max_size=10).map("".join), max_size=40))
def test_split_columns_are_the_spans_of_split_sentences(texts: list[str]) -> None:
    """The columnar form ingest uses: per text its count, per sentence its position, span, content and
    the whitespace up to the next sentence (none after a text's last), as split_sentences gives them."""
    spans = [split_sentences(t) for t in texts]
    counts, positions, starts, ends, contents, tails = split_columns(texts)
    assert counts == [len(s) for s in spans]
    flat = [(t, p, s, e, sp) for t, sp in zip(texts, spans) for p, (s, e) in enumerate(sp)]
    assert positions == [p for _, p, _, _, _ in flat]
    assert starts == [s for _, _, s, _, _ in flat] and ends == [e for _, _, _, e, _ in flat]
    assert contents == [t[s:e] for t, _, s, e, _ in flat]
    assert tails == [t[e:sp[p + 1][0]] if p + 1 < len(sp) else "" for t, p, _, e, sp in flat]


def test_split_columns_of_plain_one_sentence_texts_are_the_texts() -> None:
    texts = [f"Sentence {i} here" for i in range(20)] + ["Last one."]
    counts, positions, starts, ends, contents, tails = split_columns(texts)
    assert counts == [1] * 21 and positions == [0] * 21 and starts == [0] * 21
    assert ends == [len(t) for t in texts] and contents == texts and tails == [""] * 21
    padded = [" x ", "\ty"] + ["z"] * 8
    assert split_columns(padded)[2:5] == ([1, 1] + [0] * 8, [2, 2] + [1] * 8, ["x", "y"] + ["z"] * 8)
