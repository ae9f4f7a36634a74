"""LangChain's own standard tests (``langchain-tests``) against NLQL's retriever and vector store."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain_tests")

from langchain_core.embeddings import DeterministicFakeEmbedding  # noqa: E402
from langchain_core.vectorstores import VectorStore  # noqa: E402
from langchain_tests.integration_tests import (  # noqa: E402
    RetrieversIntegrationTests,
    VectorStoreIntegrationTests,
)

from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.engine import Engine  # noqa: E402
from nlql.integrations.langchain import NLQLRetriever, NLQLVectorStore, filter_to_nlql  # noqa: E402

TEXTS = [
    "Agents call tools to act in the world.", "Cats sleep most of the day.",
    "A tool is a function an agent may call.", "Bread needs flour, water, salt and time.",
    "The planner of an agent decides the next step.", "Tools return observations to the agent.",
]


def _engine() -> Engine:
    e = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    e.add_texts(TEXTS, ids=[f"d{i}" for i in range(len(TEXTS))])
    return e


_ENGINE = _engine()

#: The suites' coroutine tests run under pytest-asyncio (strict mode); the mark on their sync tests is a no-op.
ASYNC = [pytest.mark.asyncio,
         pytest.mark.filterwarnings("ignore:.*marked with '@pytest.mark.asyncio' but it is not an async")]


class TestNLQLRetrieverStandard(RetrieversIntegrationTests):
    pytestmark = ASYNC
    @property
    def retriever_constructor(self) -> type[NLQLRetriever]:
        return NLQLRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"engine": _ENGINE, "k": 4}

    @property
    def retriever_query_example(self) -> str:
        return "which tools does an agent call"


class TestNLQLVectorStoreStandard(VectorStoreIntegrationTests):
    pytestmark = ASYNC
    @pytest.fixture()
    def vectorstore(self) -> VectorStore:  # type: ignore[override]
        return NLQLVectorStore(embedding=self.get_embeddings(), warm_up=False)


def test_model_copy_k_and_per_call_k_are_honoured() -> None:
    r = NLQLRetriever(_ENGINE, k=4)
    assert len(r.invoke("agent tools")) == 4
    assert len(r.invoke("agent tools", k=1)) == 1
    assert len(r.model_copy(update={"k": 2}).invoke("agent tools")) == 2
    with pytest.raises(ValueError, match="k must be"):
        r.invoke("agent tools", k=-1)


@pytest.fixture()
def store() -> NLQLVectorStore:
    vs = NLQLVectorStore(embedding=DeterministicFakeEmbedding(size=16), warm_up=False)
    vs.add_texts(["alpha text", "beta text", "gamma text", "delta text"], ids=["a", "b", "c", "d"],
                 metadatas=[{"year": 2019, "lang": "en", "tags": "x"}, {"year": 2021, "lang": "de"},
                            {"year": 2023, "lang": "en", "select": 1}, {"lang": "fr"}])
    return vs


@pytest.mark.parametrize(("flt", "ids"), [
    ({"lang": "en"}, {"a", "c"}),
    ({"year": {"$gte": 2021}}, {"b", "c"}),
    ({"year": {"$gt": 2019, "$lt": 2023}}, {"b"}),
    ({"lang": {"$in": ["de", "fr"]}}, {"b", "d"}),
    ({"lang": {"$nin": ["de", "fr"]}}, {"a", "c"}),
    ({"year": {"$ne": 2019}}, {"b", "c"}),  # three-valued: d has no year
    ({"year": {"$exists": False}}, {"d"}),
    ({"$or": [{"lang": "fr"}, {"year": 2019}]}, {"a", "d"}),
    ({"$and": [{"lang": "en"}, {"year": {"$lte": 2020}}]}, {"a"}),
    ({"$not": {"lang": "en"}}, {"b", "d"}),
    ({"select": 1}, {"c"}),  # a keyword as a key is quoted
    ("meta.year >= 2021 AND meta.lang == 'en'", {"c"}),  # NLQL WHERE text
])
def test_filters_dict_and_nlql_text(store: NLQLVectorStore, flt: object, ids: set[str]) -> None:
    got = store.similarity_search("alpha text", k=10, filter=flt)
    assert {d.id for d in got} == ids


def test_filter_values_are_bound_and_bad_filters_are_nlql_errors(store: NLQLVectorStore) -> None:
    from nlql.errors import NLQLError

    text, params = filter_to_nlql({"lang": "en' OR 1 == 1 --"})
    assert "OR 1" not in text and params == {"f0": "en' OR 1 == 1 --"}
    assert store.similarity_search("alpha", k=10, filter={"lang": "en' OR 1 == 1 --"}) == []
    with pytest.raises(NLQLError, match="unknown operator"):
        store.similarity_search("alpha", filter={"year": {"$regex": "x"}})
    with pytest.raises(NLQLError):
        store.similarity_search("alpha", filter="meta.year >>= 3")
    params_text = store.similarity_search("alpha", k=10, filter="meta.year > $y", params={"y": 2020})
    assert {d.id for d in params_text} == {"b", "c"}


def test_scores_relevance_and_as_retriever(store: NLQLVectorStore) -> None:
    scored = store.similarity_search_with_score("beta text", k=2)
    assert scored[0][0].id == "b" and scored[0][1] == pytest.approx(1.0, abs=1e-5)
    rel = store.similarity_search_with_relevance_scores("beta text", k=2)
    assert rel[0][1] == pytest.approx(1.0, abs=1e-5) and all(0 <= s <= 1 for _, s in rel)
    retriever = store.as_retriever(search_kwargs={"k": 1, "filter": {"lang": "en"}})
    assert [d.id for d in retriever.invoke("gamma text")] == ["c"]
