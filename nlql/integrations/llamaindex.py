"""LlamaIndex over an NLQL engine: a retriever and a vector store (``pip install 'nlql-engine[llamaindex]'``).

>>> from nlql.embedders import HashEmbedder
>>> from nlql.engine import Engine
>>> engine = Engine(embedder=HashEmbedder(dim=64))
>>> engine.add_text("Agents call tools. Cats sleep all day.", id="a", metadata={"lang": "en"})
'a'
>>> retriever = NLQLRetriever(engine, k=2)
>>> [(n.node.node_id, n.node.source_node.node_id, round(n.score, 4)) for n in retriever.retrieve("tools")]
[('a#chunk0', 'a', 0.0328)]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nlql.errors import MissingDependencyError, NLQLError
from nlql.integrations import DEFAULT_TEMPLATE, RESERVED_METADATA, Template, check_k, hit_metadata, meta_path

try:
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import (
        NodeRelationship,
        NodeWithScore,
        QueryBundle,
        RelatedNodeInfo,
        TextNode,
    )
    from llama_index.core.vector_stores.types import (
        BasePydanticVectorStore,
        FilterCondition,
        FilterOperator,
        MetadataFilter,
        MetadataFilters,
        VectorStoreQuery,
        VectorStoreQueryResult,
    )
except ImportError:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("llamaindex", "llama-index-core") from None

if TYPE_CHECKING:
    from nlql.engine import Engine
    from nlql.execute.results import Hits

__all__ = ["DEFAULT_TEMPLATE", "NLQLRetriever", "NLQLVectorStore", "filters_to_nlql"]


class NLQLRetriever(BaseRetriever):
    """Retrieve LlamaIndex ``NodeWithScore`` objects with one NLQL template per question.

    ``retriever.retrieve(question)`` binds the question to ``$q`` (and ``k`` to ``$k``), runs the template
    and returns one ``NodeWithScore`` per hit: a ``TextNode`` whose ``id_`` is the hit's id, ``text`` its
    content, ``metadata`` the document's metadata plus ``doc_id``, ``unit``, ``position``, ``score`` and
    ``scores`` (those five are kept out of the text LlamaIndex shows an LLM or an embedder), and a SOURCE
    relationship to the document id; ``score`` is the ordering score (see ``score_key``). ``aretrieve``
    runs the search in a worker thread.

    Args:
        engine: The :class:`~nlql.engine.Engine` to search.
        template: NLQL text with ``$q``; default :data:`~nlql.integrations.DEFAULT_TEMPLATE`.
        params: Fixed values for the template's other ``$parameters``.
        k: Bound to ``$k`` when the template uses it (default 4).
        score_key: The binding reported as the node's score; default: the first ORDER BY binding.
        search_kwargs: Extra arguments of :meth:`Engine.search` (``timeout``, ``max_tokens``, ``reranker``).
        callback_manager: LlamaIndex's callback manager (default: the global settings' one).

    Raises:
        NLQLError: The template does not parse or check, or does not use ``$q`` (when built).
    """

    def __init__(self, engine: Engine, template: str = DEFAULT_TEMPLATE, *,
                 params: Mapping[str, Any] | None = None, k: int = 4, score_key: str | None = None,
                 search_kwargs: Mapping[str, Any] | None = None,
                 callback_manager: CallbackManager | None = None, verbose: bool = False) -> None:
        self.engine = engine
        self.template = Template(engine, template, params=params, k=k, score_key=score_key,
                                 search_kwargs=search_kwargs)
        self.last_hits: Hits | None = None
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _nodes(self, hits: Hits) -> list[NodeWithScore]:
        self.last_hits = hits
        out = []
        for h in hits:
            score = self.template.score_of(h)
            node = TextNode(
                id_=h.id, text=h.content, metadata=hit_metadata(h, score),
                excluded_llm_metadata_keys=list(RESERVED_METADATA),
                excluded_embed_metadata_keys=list(RESERVED_METADATA),
                relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=h.doc_id)},
            )
            out.append(NodeWithScore(node=node, score=score))
        return out

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(self.template.search(query_bundle.query_str))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(await self.template.asearch(query_bundle.query_str))


# --------------------------------------------------------------------------------------------------
# the vector store

#: The metadata key under which a node's source document id (``ref_doc_id``) is stored.
REF_DOC_KEY = "nlql_ref_doc_id"

_LI_OPS = {FilterOperator.EQ: "==", FilterOperator.NE: "!=", FilterOperator.GT: ">", FilterOperator.GTE: ">=",
           FilterOperator.LT: "<", FilterOperator.LTE: "<=", FilterOperator.IN: "IN", FilterOperator.NIN: "NOT IN",
           FilterOperator.TEXT_MATCH_INSENSITIVE: "CONTAINS"}


def filters_to_nlql(filters: MetadataFilters, params: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """Translate LlamaIndex ``MetadataFilters`` to an NLQL condition; every value is bound.

    Operators ``== != > >= < <= in nin`` and ``text_match_insensitive`` (NLQL's CONTAINS, a
    case-insensitive substring) and ``is_empty`` (IS NULL); conditions ``and``, ``or`` and ``not``,
    nested. ``text_match`` (case-sensitive), ``any``, ``all`` and ``contains`` (array tests) are refused
    with an :class:`~nlql.errors.NLQLError`: NLQL has no operator that means exactly that.
    """
    bound: dict[str, Any] = {} if params is None else params

    def bind(value: Any) -> str:
        name = f"f{len(bound)}"
        bound[name] = list(value) if isinstance(value, (list, tuple)) else value
        return "$" + name

    def leaf(f: MetadataFilter) -> str:
        try:
            path = meta_path(f.key)
        except ValueError as exc:
            raise NLQLError(f"LlamaIndex filter: {exc}") from None
        op = FilterOperator(f.operator)
        if op == FilterOperator.IS_EMPTY:
            return f"{path} IS NULL"
        if op not in _LI_OPS:
            raise NLQLError(f"LlamaIndex filter operator {op.value!r} has no exact NLQL equivalent",
                            hint="use == != > >= < <= in nin text_match_insensitive is_empty, "
                                 "or an NLQL template with NLQLRetriever")
        return f"{path} {_LI_OPS[op]} {bind(f.value)}"

    def group(fs: MetadataFilters) -> str:
        parts = [group(f) if isinstance(f, MetadataFilters) else leaf(f) for f in fs.filters]
        if not parts:
            raise NLQLError("LlamaIndex filter: an empty MetadataFilters")
        cond = FilterCondition(fs.condition or FilterCondition.AND)
        if cond == FilterCondition.NOT:
            return "NOT (" + " AND ".join(parts) + ")"
        joined = (" OR " if cond == FilterCondition.OR else " AND ").join(parts)
        return joined if len(parts) == 1 else "(" + joined + ")"

    return group(filters), bound


class NLQLVectorStore(BasePydanticVectorStore):
    """A LlamaIndex vector store over an NLQL engine: ``VectorStoreIndex(..., storage_context=…)``.

    Each node is one NLQL document (id = the node id, text = the node's text, metadata = the node's
    metadata plus :data:`REF_DOC_KEY`); NLQL embeds the text with the engine's own embedder and scores a
    node by its best sentence's cosine, so the query's text is used, not LlamaIndex's query embedding
    (``is_embedding_query`` is False; the index still embeds nodes with its ``embed_model`` before
    ``add``, which this store ignores: give it a cheap one, e.g. ``MockEmbedding``). ``query`` honours
    ``similarity_top_k``, ``filters`` (:func:`filters_to_nlql`), ``doc_ids`` and ``node_ids``.

    Args:
        engine: The :class:`~nlql.engine.Engine` that stores and searches the nodes.
    """

    stores_text: bool = True
    is_embedding_query: bool = False
    flat_metadata: bool = False

    _engine: Any = PrivateAttr()

    def __init__(self, engine: Engine, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._engine = engine

    @classmethod
    def class_name(cls) -> str:
        return "NLQLVectorStore"

    @property
    def client(self) -> Any:
        """The engine."""
        return self._engine

    def add(self, nodes: Any, **add_kwargs: Any) -> list[str]:
        """Add (or replace, by node id) the nodes; returns their ids."""
        items = list(nodes)
        if not items:
            return []
        metas = []
        for n in items:
            meta = dict(n.metadata or {})
            if n.ref_doc_id is not None:
                meta[REF_DOC_KEY] = n.ref_doc_id
            metas.append(meta)
        return self._engine.add_texts([n.get_content() for n in items], ids=[n.node_id for n in items],
                                      metadatas=metas)

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node of the source document ``ref_doc_id``."""
        hits = self._engine.search(f"SELECT DOCUMENT WHERE {meta_path(REF_DOC_KEY)} == $r",
                                   params={"r": str(ref_doc_id)})
        for h in hits:
            self._engine.delete(h.doc_id)

    def delete_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None,
                     **delete_kwargs: Any) -> None:
        for n in self.get_nodes(node_ids, filters):
            self._engine.delete(n.node_id)

    def get_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None) -> list[Any]:
        where, params = self._where(filters, node_ids, None)
        return [self._node(h) for h in self._engine.search("SELECT DOCUMENT " + where, params=params)]

    def clear(self) -> None:
        for h in self._engine.search("SELECT DOCUMENT"):
            self._engine.delete(h.doc_id)

    @staticmethod
    def _where(filters: MetadataFilters | None, node_ids: list[str] | None,
               doc_ids: list[str] | None) -> tuple[str, dict[str, Any]]:
        params: dict[str, Any] = {}
        parts = []
        if filters is not None and filters.filters:
            cond, params = filters_to_nlql(filters, params)
            parts.append(cond)
        if node_ids:
            params["nodes"] = [str(i) for i in node_ids]
            parts.append("doc_id IN $nodes")
        if doc_ids:
            params["refs"] = [str(i) for i in doc_ids]
            parts.append(f"{meta_path(REF_DOC_KEY)} IN $refs")
        return ("WHERE " + " AND ".join(parts) + " ") if parts else "", params

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The ``similarity_top_k`` nodes most similar to ``query.query_str`` that pass its filters."""
        if not query.query_str:
            raise NLQLError("NLQLVectorStore needs the query text (query_str): NLQL embeds it itself",
                            hint="query through a VectorStoreIndex retriever or query engine, which pass it")
        where, params = self._where(query.filters, query.node_ids, query.doc_ids)
        params.update(q=query.query_str, k=check_k(int(query.similarity_top_k)))
        text = ("SELECT DOCUMENT LET score = SIMILARITY(content, $q) " + where
                + "ORDER BY score DESC LIMIT $k")
        hits = self._engine.search(text, params=params)
        nodes = [self._node(h) for h in hits]
        return VectorStoreQueryResult(nodes=nodes, similarities=[float(h.scores["score"]) for h in hits],
                                      ids=[n.node_id for n in nodes])

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        import asyncio

        return await asyncio.to_thread(self.query, query, **kwargs)

    @staticmethod
    def _node(hit: Any) -> Any:
        meta = dict(hit.metadata)
        ref = meta.pop(REF_DOC_KEY, None)
        rel = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=str(ref))} if ref is not None else {}
        return TextNode(id_=hit.doc_id, text=hit.content, metadata=meta, relationships=rel)
