"""`engine.ask` gives the same rows, in the same order, with the same scores on every store of the registry."""

from __future__ import annotations

import inspect
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest

from nlql import Engine, Router
from nlql.embedders import HashEmbedder
from nlql.stores import REGISTRY, entry

CLOCK = datetime(2025, 6, 11, 12, 0, tzinfo=timezone.utc)

TEXTS = [
    "Wittgenstein wrote about language games. The meaning of a word is its use in the language.",
    "Agents call tools to act in the world. A planner decides which tool comes next.",
    "Cats sleep most of the day. They hunt at night.",
    "Alice said the budget for the solar project doubles next year. Bob disagreed with Alice.",
    "Reciprocal rank fusion adds one over k plus rank for every ranking a document appears in.",
    "The release shipped on a Tuesday. Alice wrote the release notes about the planner.",
    "Language models call tools when an agent plans. Wittgenstein would have had views on that.",
    "Solar panels produce less energy in winter. The budget covers new panels.",
]
METAS = [{"date": f"2025-06-{d:02d}", "n": i} for i, d in enumerate((2, 3, 4, 5, 6, 9, 10, 11))]
QUESTIONS = [
    "Who mentioned Wittgenstein?",
    "What did Alice say about the budget?",
    "When did the release ship?",
    "what did we decide last week about solar?",
    "What is reciprocal rank fusion?",
    "explain language games",
    "tools for agents",
    "What is quantum chromodynamics?",  # an honest empty, on every store
]


def _store(name: str, request: pytest.FixtureRequest) -> Any:
    """A fresh store with the registry's exact options (the contract suite's recipe)."""
    if name == "memory":
        return "memory"
    e = entry(name)
    options = dict(e.exact)
    if "collection" in inspect.signature(e.load()).parameters:
        options["collection"] = "r" + uuid.uuid4().hex[:8]
    if e.schemes:  # a server store: a fresh database of the test server
        return e.create(request.getfixturevalue(f"{name}_module_url"), **options)
    return e.create(**options)


def _load(store: Any) -> Engine:
    e = Engine(embedder=HashEmbedder(dim=128), store=store, clock=lambda: CLOCK, warm_up=False)
    e.add_texts(TEXTS, ids=[f"d{i}" for i in range(len(TEXTS))], metadatas=METAS)
    return e


@pytest.fixture(scope="module")
def reference() -> Engine:
    return _load("memory")


@pytest.fixture(scope="module", params=[e.name for e in REGISTRY if e.name != "memory"])
def engine(request: pytest.FixtureRequest) -> Any:
    e = _load(_store(request.param, request))
    yield e
    e.close()


def _rows(hits: Any) -> list[tuple[Any, ...]]:
    return [(h.id, h.doc_id, h.position, h.content) for h in hits]


def test_the_reference_answers_are_not_trivial(reference: Engine) -> None:
    answered = {q: [h.doc_id for h in reference.ask(q)] for q in QUESTIONS}
    assert answered["Who mentioned Wittgenstein?"][:2] == ["d0", "d6"]
    assert answered["What did Alice say about the budget?"][0] == "d3"
    assert answered["What is quantum chromodynamics?"] == []
    assert sum(1 for v in answered.values() if v) == len(QUESTIONS) - 1


@pytest.mark.parametrize("question", QUESTIONS)
def test_ask_gives_the_same_rows_on_every_store(engine: Engine, reference: Engine, question: str) -> None:
    want = reference.ask(question)
    got = engine.ask(question)
    assert got.route == want.route
    assert _rows(got) == _rows(want), engine.explain(got.route)
    for g, w in zip(got, want, strict=True):
        assert g.scores.keys() == w.scores.keys()
        for k, v in w.scores.items():
            assert g.scores[k] == pytest.approx(v, abs=1e-5)
    assert bool(got.warnings) == bool(want.warnings)


def test_a_custom_router_with_a_metadata_filter_on_every_store(engine: Engine, reference: Engine) -> None:
    router = Router(templates={"general": "SELECT SENTENCE LET k = BM25(content, $keywords) "
                                          "WHERE k > 0 AND meta.date >= $since ORDER BY k DESC LIMIT 5"})
    want = reference.ask("solar budget", router=router, params={"since": "2025-06-05"})
    assert [h.doc_id for h in want] == ["d3", "d7", "d7"]  # d3 is dated 2025-06-05: ">=" keeps it
    assert _rows(engine.ask("solar budget", router=router, params={"since": "2025-06-05"})) == _rows(want)
