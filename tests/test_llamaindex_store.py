"""nlql.integrations.llamaindex.NLQLVectorStore inside LlamaIndex's own VectorStoreIndex and query engine."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import Document, MockEmbedding, StorageContext, VectorStoreIndex  # noqa: E402
from llama_index.core.llms import MockLLM  # noqa: E402
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: E402
from llama_index.core.vector_stores.types import (  # noqa: E402
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.engine import Engine  # noqa: E402
from nlql.errors import NLQLError  # noqa: E402
from nlql.integrations.llamaindex import NLQLVectorStore, filters_to_nlql  # noqa: E402

DOCS = [
    Document(text="Agents call tools to act in the world.", doc_id="agents", metadata={"topic": "ai", "year": 2024}),
    Document(text="Cats sleep most of the day.", doc_id="cats", metadata={"topic": "pets", "year": 2019}),
    Document(text="A tool is a function an agent may call.", doc_id="tools", metadata={"topic": "ai", "year": 2021}),
    Document(text="Bread needs flour, water, salt and time.", doc_id="bread", metadata={"topic": "food"}),
]


@pytest.fixture()
def index() -> tuple[NLQLVectorStore, VectorStoreIndex]:
    store = NLQLVectorStore(Engine(embedder=HashEmbedder(dim=64), warm_up=False))
    ctx = StorageContext.from_defaults(vector_store=store)
    idx = VectorStoreIndex.from_documents(DOCS, storage_context=ctx, embed_model=MockEmbedding(embed_dim=8))
    return store, idx


def _refs(nodes: list) -> list[str]:
    return [n.node.ref_doc_id for n in nodes]


def test_index_retriever_honours_top_k_and_filters(index: tuple[NLQLVectorStore, VectorStoreIndex]) -> None:
    store, idx = index
    assert len(store.client) == 4  # four sentences: one node per short document
    top = idx.as_retriever(similarity_top_k=2).retrieve("which tool does an agent call")
    assert len(top) == 2 and set(_refs(top)) <= {"agents", "tools"}
    assert top[0].score >= top[1].score
    ai_recent = MetadataFilters(filters=[MetadataFilter(key="topic", value="ai"),
                                         MetadataFilter(key="year", value=2022, operator=FilterOperator.GTE)])
    assert _refs(idx.as_retriever(similarity_top_k=5, filters=ai_recent).retrieve("agent")) == ["agents"]
    either = MetadataFilters(filters=[MetadataFilter(key="topic", value="food"),
                                      MetadataFilter(key="year", value=[2019], operator=FilterOperator.IN)],
                             condition=FilterCondition.OR)
    assert set(_refs(idx.as_retriever(similarity_top_k=5, filters=either).retrieve("x"))) == {"cats", "bread"}
    missing = MetadataFilters(filters=[MetadataFilter(key="year", value=None, operator=FilterOperator.IS_EMPTY)])
    assert _refs(idx.as_retriever(similarity_top_k=5, filters=missing).retrieve("x")) == ["bread"]


def test_query_engine_with_mock_llm(index: tuple[NLQLVectorStore, VectorStoreIndex]) -> None:
    _, idx = index
    engine = RetrieverQueryEngine.from_args(idx.as_retriever(similarity_top_k=1), llm=MockLLM())
    response = engine.query("cats sleeping")
    assert len(response.source_nodes) == 1 and response.source_nodes[0].node.ref_doc_id == "cats"
    assert idx.as_query_engine(llm=MockLLM(), similarity_top_k=3).query("tools").source_nodes


def test_delete_by_ref_doc_get_nodes_and_node_ids(index: tuple[NLQLVectorStore, VectorStoreIndex]) -> None:
    store, idx = index
    idx.delete_ref_doc("cats")
    assert "cats" not in _refs(idx.as_retriever(similarity_top_k=10).retrieve("cats"))
    nodes = store.get_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="topic", value="ai")]))
    assert {n.ref_doc_id for n in nodes} == {"agents", "tools"}
    res = store.query(VectorStoreQuery(query_str="agent", similarity_top_k=5, doc_ids=["tools"]))
    assert [n.ref_doc_id for n in res.nodes] == ["tools"] and len(res.similarities) == 1
    assert store.query(VectorStoreQuery(query_str="agent", similarity_top_k=5,
                                        node_ids=[nodes[0].node_id])).ids == [nodes[0].node_id]


def test_filters_are_bound_and_unsupported_operators_refused() -> None:
    text, params = filters_to_nlql(MetadataFilters(filters=[MetadataFilter(key="a b", value="x' OR 1")]))
    assert text == "meta.`a b` == $f0" and params == {"f0": "x' OR 1"}
    with pytest.raises(NLQLError, match="no exact NLQL equivalent"):
        filters_to_nlql(MetadataFilters(filters=[MetadataFilter(key="t", value=["a"], operator=FilterOperator.ANY)]))
    store = NLQLVectorStore(Engine(embedder=HashEmbedder(dim=16), warm_up=False))
    with pytest.raises(NLQLError, match="query text"):
        store.query(VectorStoreQuery(query_embedding=[0.0] * 16, similarity_top_k=1))
