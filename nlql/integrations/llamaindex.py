"""A LlamaIndex retriever over an NLQL engine (``pip install 'nlql-engine[llamaindex]'``).

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

from nlql.errors import MissingDependencyError
from nlql.integrations import DEFAULT_TEMPLATE, RESERVED_METADATA, Template, hit_metadata

try:
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import (
        NodeRelationship,
        NodeWithScore,
        QueryBundle,
        RelatedNodeInfo,
        TextNode,
    )
except ImportError:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("llamaindex", "llama-index-core") from None

if TYPE_CHECKING:
    from nlql.engine import Engine
    from nlql.execute.results import Hits

__all__ = ["DEFAULT_TEMPLATE", "NLQLRetriever"]


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
