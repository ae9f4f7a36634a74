"""The LangChain and LlamaIndex retrievers, driven through each framework's own retrieval calls."""

from __future__ import annotations

import asyncio

import pytest

from nlql.data import load_demo
from nlql.embedders import HashEmbedder
from nlql.engine import Engine
from nlql.errors import CheckError, NLQLError, ParamError
from nlql.integrations import DEFAULT_TEMPLATE, RESERVED_METADATA

lc_retrievers = pytest.importorskip("langchain_core.retrievers")
li_retrievers = pytest.importorskip("llama_index.core.retrievers")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402
from llama_index.core.schema import NodeRelationship, NodeWithScore, TextNode  # noqa: E402

from nlql.integrations.langchain import NLQLRetriever as LCRetriever  # noqa: E402
from nlql.integrations.llamaindex import NLQLRetriever as LIRetriever  # noqa: E402

DOCS = [
    ("agents", "Agents call tools to act in the world. A planner decides the next step.",
     {"topic": "ai", "year": 2024}),
    ("cats", "Cats sleep most of the day. They hunt at night.", {"topic": "pets", "year": 2019}),
    ("tools", "A tool is a function an agent may call. Tools return observations.",
     {"topic": "ai", "year": 2023}),
    ("bread", "Bread needs flour, water, salt and time.", {"topic": "food"}),
]


@pytest.fixture(scope="module")
def engine() -> Engine:
    e = Engine(embedder=HashEmbedder(dim=128), warm_up=False)
    for doc_id, text, meta in DOCS:
        e.add_text(text, id=doc_id, metadata=meta)
    return e


def test_langchain_invoke_returns_documents_with_scores_and_metadata(engine: Engine) -> None:
    retriever = LCRetriever(engine, k=2)
    assert isinstance(retriever, lc_retrievers.BaseRetriever)
    docs = retriever.invoke("agents call tools")
    assert 1 <= len(docs) <= 2 and all(isinstance(d, Document) for d in docs)
    expected = engine.search(DEFAULT_TEMPLATE, params={"q": "agents call tools", "k": 2})
    assert [d.id for d in docs] == [h.id for h in expected]
    assert [d.page_content for d in docs] == [h.content for h in expected]
    top = docs[0]
    assert top.metadata["doc_id"] in ("agents", "tools") and top.metadata["topic"] == "ai"
    assert top.metadata["unit"] == "CHUNK"
    assert set(top.metadata["scores"]) == {"sem", "kw", "score"}
    assert top.metadata["score"] == pytest.approx(expected[0].scores["score"])
    assert [d.metadata["score"] for d in docs] == sorted((d.metadata["score"] for d in docs), reverse=True)
    assert retriever.last_hits is not None and "timings_ms" in retriever.last_hits.stats
    # a CHUNK hit says which of its sentences scored it, as hit.best does
    best = top.metadata["best"]
    assert best == expected[0].best.to_dict() and best["content"] in top.page_content
    assert set(best["scores"]) == {"sem", "kw"}  # the sentence's own arms (fusion ranks whole hits)


def test_langchain_in_a_chain_and_async(engine: Engine) -> None:
    template = ('SELECT SENTENCE LET rel = SIMILARITY(content, $q) WHERE meta.topic == $topic '
                'ORDER BY rel DESC LIMIT $k')
    retriever = LCRetriever(engine, template, params={"topic": "ai"}, k=3)
    chain = retriever | RunnableLambda(lambda docs: [d.metadata["doc_id"] for d in docs])
    ids = chain.invoke("what does an agent call?")
    assert len(ids) == 3 and set(ids) <= {"agents", "tools"}
    batch = retriever.batch(["agents", "cats"])  # the Runnable interface: two questions
    assert len(batch) == 2 and all(d.metadata["topic"] == "ai" for docs in batch for d in docs)
    docs = asyncio.run(retriever.ainvoke("tools return observations"))
    assert docs and all(d.metadata["unit"] == "SENTENCE" and "rel" in d.metadata["scores"] for d in docs)
    assert docs[0].metadata["score"] == docs[0].metadata["scores"]["rel"]
    assert all(d.metadata["best"] is None for d in docs)  # a sentence is its own best


def test_llamaindex_retrieve_returns_nodes_with_scores(engine: Engine) -> None:
    retriever = LIRetriever(engine, k=3)
    assert isinstance(retriever, li_retrievers.BaseRetriever)
    nodes = retriever.retrieve("agents call tools")
    expected = engine.search(DEFAULT_TEMPLATE, params={"q": "agents call tools", "k": 3})
    assert [n.node.node_id for n in nodes] == [h.id for h in expected]
    assert all(isinstance(n, NodeWithScore) and isinstance(n.node, TextNode) for n in nodes)
    top = nodes[0]
    assert top.score == pytest.approx(expected[0].scores["score"])
    assert top.node.get_content() == expected[0].content
    assert top.node.relationships[NodeRelationship.SOURCE].node_id == expected[0].doc_id
    assert top.node.metadata["topic"] == expected[0].metadata["topic"]
    # NLQL's own keys stay out of what LlamaIndex shows an LLM, the document's metadata does not
    from llama_index.core.schema import MetadataMode

    llm_text = top.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "topic: " in llm_text and "scores" not in llm_text
    assert set(RESERVED_METADATA) <= set(top.node.metadata)


def test_llamaindex_aretrieve_and_a_query_engine(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    retriever = LIRetriever(engine, 'SELECT DOCUMENT LET rel = SIMILARITY(content, $q) LIMIT 2')
    nodes = asyncio.run(retriever.aretrieve("cats at night"))
    assert len(nodes) == 2 and nodes[0].score >= nodes[1].score
    assert all(n.node.metadata["unit"] == "DOCUMENT" for n in nodes)
    from llama_index.core import Settings
    from llama_index.core.llms.mock import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine

    # LlamaIndex's own query engine calls retrieve(); an offline mock LLM (its default is OpenAI's)
    monkeypatch.setattr(Settings, "_llm", MockLLM(max_tokens=8))
    qe = RetrieverQueryEngine.from_args(retriever, response_mode="no_text")
    response = qe.query("cats at night")
    assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in nodes]


def test_a_template_without_q_or_with_a_typo_fails_when_built(engine: Engine) -> None:
    with pytest.raises(ParamError, match=r"\$q"):
        LCRetriever(engine, 'SELECT SENTENCE LET rel = SIMILARITY(content, "fixed") LIMIT 3')
    with pytest.raises(CheckError) as info:
        LIRetriever(engine, "SELECT SENTENCE LET rel = SIMILARITY(content, $q) WHERE rell > 0 LIMIT 3")
    assert "unknown name 'rell'" in str(info.value) and "^^^^" in str(info.value)
    with pytest.raises(NLQLError):  # a missing fixed parameter is reported by the check
        LCRetriever(engine, "SELECT SENTENCE LET rel = SIMILARITY(content, $q) WHERE meta.year > $y")
    with pytest.raises(NLQLError, match="line 1"):  # a syntax error, with its position
        LIRetriever(engine, "SELECT SENTENCE LET rel = SIMILARITY(content, $q) LIMT 3")


def test_no_limit_in_the_template_returns_every_match(engine: Engine) -> None:
    retriever = LCRetriever(engine, 'SELECT DOCUMENT LET rel = SIMILARITY(content, $q) WHERE meta.topic == "ai"')
    assert sorted(d.id for d in retriever.invoke("anything")) == ["agents", "tools"]


@pytest.mark.model
def test_both_retrievers_with_minilm_find_the_right_docstring() -> None:
    from nlql.embedders import SentenceTransformerEmbedder

    e = Engine(embedder=SentenceTransformerEmbedder(), warm_up=False)
    docs = load_demo()
    e.add_texts([d["text"] for d in docs], ids=[d["id"] for d in docs], metadatas=[d["metadata"] for d in docs])
    question = "turn a Python object into a JSON formatted string"
    lc = LCRetriever(e, k=4).invoke(question)
    li = LIRetriever(e, k=4).retrieve(question)
    assert "json.dumps" in [d.metadata["doc_id"] for d in lc]
    assert [d.id for d in lc] == [n.node.node_id for n in li]
    assert [d.metadata["score"] for d in lc] == pytest.approx([n.score for n in li])
