"""A LangChain retriever over an NLQL engine (``pip install 'nlql-engine[langchain]'``).

>>> from nlql.embedders import HashEmbedder
>>> from nlql.engine import Engine
>>> engine = Engine(embedder=HashEmbedder(dim=64))
>>> engine.add_text("Agents call tools. Cats sleep all day.", id="a", metadata={"lang": "en"})
'a'
>>> retriever = NLQLRetriever(engine, k=2)
>>> [(d.id, d.metadata["lang"], d.metadata["unit"]) for d in retriever.invoke("tools")]
[('a#chunk0', 'en', 'CHUNK')]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nlql.errors import MissingDependencyError
from nlql.integrations import DEFAULT_TEMPLATE, Template, hit_metadata

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import ConfigDict, PrivateAttr
except ImportError:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("langchain", "langchain-core") from None

if TYPE_CHECKING:
    from nlql.engine import Engine
    from nlql.execute.results import Hits

__all__ = ["DEFAULT_TEMPLATE", "NLQLRetriever"]


class NLQLRetriever(BaseRetriever):
    """Retrieve LangChain ``Document`` objects with one NLQL template per question.

    ``retriever.invoke(question)`` binds the question to ``$q`` (and ``k`` to ``$k``), runs the template
    on the engine and returns one ``Document`` per hit: ``page_content`` is the hit's text, ``id`` the
    hit's id, and ``metadata`` the document's metadata plus ``doc_id``, ``unit``, ``position``, ``score``
    (the ordering score, see ``score_key``) and ``scores`` (every binding). ``ainvoke`` runs the search in
    a worker thread. Hits' ``stats`` and ``warnings`` of the last call are on :attr:`last_hits`.

    Args:
        engine: The :class:`~nlql.engine.Engine` to search.
        template: NLQL text with ``$q``; default :data:`~nlql.integrations.DEFAULT_TEMPLATE` (semantic +
            BM25 fused by RRF, ``LIMIT $k``).
        params: Fixed values for the template's other ``$parameters``.
        k: Bound to ``$k`` when the template uses it (default 4, LangChain's usual).
        score_key: The binding reported as ``metadata["score"]``; default: the first ORDER BY binding.
        search_kwargs: Extra arguments of :meth:`Engine.search` (``timeout``, ``max_tokens``, ``reranker``).

    Raises:
        NLQLError: The template does not parse or check, or does not use ``$q`` (when built).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    engine: Any
    template: str = DEFAULT_TEMPLATE
    params: dict[str, Any] | None = None
    k: int = 4
    score_key: str | None = None
    search_kwargs: dict[str, Any] | None = None

    _template: Template = PrivateAttr()
    _last: Any = PrivateAttr(default=None)

    def __init__(self, engine: Engine | None = None, template: str = DEFAULT_TEMPLATE, *,
                 params: Mapping[str, Any] | None = None, k: int = 4, score_key: str | None = None,
                 search_kwargs: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        if engine is None:
            engine = kwargs.pop("engine", None)
        if engine is None:
            raise TypeError("NLQLRetriever needs an engine: NLQLRetriever(engine, template)")
        super().__init__(engine=engine, template=template, params=dict(params) if params else None, k=k,
                         score_key=score_key, search_kwargs=dict(search_kwargs) if search_kwargs else None,
                         **kwargs)
        self._template = Template(engine, template, params=params, k=k, score_key=score_key,
                                  search_kwargs=search_kwargs)

    @property
    def last_hits(self) -> Hits | None:
        """The :class:`~nlql.execute.results.Hits` of the most recent call (stats, warnings), or None."""
        return self._last

    def _documents(self, hits: Hits) -> list[Document]:
        self._last = hits
        t = self._template
        return [Document(page_content=h.content, id=h.id, metadata=hit_metadata(h, t.score_of(h)))
                for h in hits]

    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self._documents(self._template.search(query))

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        return self._documents(await self._template.asearch(query))
