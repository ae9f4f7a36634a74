"""LangChain over an NLQL engine: a retriever and a vector store (``pip install 'nlql-engine[langchain]'``).

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

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nlql.errors import MissingDependencyError, NLQLError
from nlql.integrations import DEFAULT_TEMPLATE, Template, check_k, hit_metadata, meta_path

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.vectorstores import VectorStore
    from pydantic import ConfigDict, PrivateAttr
except ImportError:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("langchain", "langchain-core") from None

if TYPE_CHECKING:
    from nlql.engine import Engine
    from nlql.execute.results import Hits

__all__ = ["DEFAULT_TEMPLATE", "LangChainEmbedder", "NLQLRetriever", "NLQLVectorStore", "filter_to_nlql"]


class NLQLRetriever(BaseRetriever):
    """Retrieve LangChain ``Document`` objects with one NLQL template per question.

    ``retriever.invoke(question)`` binds the question to ``$q`` (and ``k`` to ``$k``; ``invoke(q, k=1)``
    sets it for one call), runs the template
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

    def _k(self, k: int | None) -> int:
        # a per-call k wins; else the field (model_copy(update={"k": 1}) sets the field, not the template)
        return check_k(k) if k is not None else self.k

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None) -> list[Document]:
        return self._documents(self._template.search(query, k=self._k(k)))

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k: int | None = None) -> list[Document]:
        return self._documents(await self._template.asearch(query, k=self._k(k)))


# --------------------------------------------------------------------------------------------------
# the vector store


class LangChainEmbedder:
    """A LangChain ``Embeddings`` object as an NLQL embedder (rows L2-normalised, float32).

    ``name`` and ``model_id`` are ``langchain:<class name>`` (a store records them, so a store built with
    one embeddings class refuses another); ``dim`` is probed with one query when first read.
    """

    def __init__(self, embeddings: Embeddings, name: str | None = None) -> None:
        self.embeddings = embeddings
        self.name = self.model_id = name or f"langchain:{type(embeddings).__name__}"
        self._dim: int | None = None

    def __repr__(self) -> str:
        return f"LangChainEmbedder({self.name!r})"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = len(self.embeddings.embed_query("dimension probe"))
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from nlql.embedders import normalize

        items = list(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self.embeddings.embed_query(items[0]) if len(items) == 1 else None
        mat = np.asarray([vecs] if vecs is not None else self.embeddings.embed_documents(items), dtype=np.float32)
        return normalize(mat)


_OPS = {"$eq": "==", "$ne": "!=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<=", "$in": "IN",
        "$nin": "NOT IN", "$like": "LIKE"}


def filter_to_nlql(flt: Mapping[str, Any], params: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """Translate a LangChain dict filter to an NLQL condition; every value is bound as a parameter.

    ``{"year": 2020}`` and ``{"year": {"$eq": 2020}}`` mean equality; the operators are ``$eq $ne $gt
    $gte $lt $lte $in $nin $like $exists`` on a metadata key (dots for nested keys), and ``$and``,
    ``$or`` (lists of filters) and ``$not`` (one filter) combine them. Several keys in one mapping are
    ANDed. ``$ne`` and ``$nin`` follow NLQL's three-valued logic: a document without the key matches
    neither ``{"k": {"$ne": 1}}`` nor ``{"k": {"$eq": 1}}``.

    Returns:
        ``(condition text, params)``: the text uses ``$f0``, ``$f1``, … bound in ``params``.

    Raises:
        NLQLError: an unknown operator, a key that is not a string, an empty ``$and``/``$or``.

    >>> filter_to_nlql({"year": {"$gte": 2020}, "lang": {"$in": ["en", "de"]}})
    ('(meta.`year` >= $f0 AND meta.`lang` IN $f1)', {'f0': 2020, 'f1': ['en', 'de']})
    """
    bound: dict[str, Any] = {} if params is None else params

    def bind(value: Any) -> str:
        name = f"f{len(bound)}"
        bound[name] = list(value) if isinstance(value, (list, tuple, set)) else value
        return "$" + name

    def bad(what: str) -> NLQLError:
        return NLQLError(f"LangChain filter: {what}",
                         hint="operators: $eq $ne $gt $gte $lt $lte $in $nin $like $exists, combined with "
                              "$and, $or, $not; or pass the filter as NLQL WHERE text")

    def one(key: str, cond: Any) -> str:
        try:
            path = meta_path(key)
        except ValueError as exc:
            raise bad(str(exc)) from None
        if not isinstance(cond, Mapping):
            return f"{path} == {bind(cond)}"
        parts = []
        for op, value in cond.items():
            if op == "$exists":
                parts.append(f"{path} IS {'NOT ' if value else ''}NULL")
            elif op in _OPS:
                if op in ("$in", "$nin") and not isinstance(value, (list, tuple, set)):
                    raise bad(f"{op} needs a list, not {value!r}")
                parts.append(f"{path} {_OPS[op]} {bind(value)}")
            else:
                raise bad(f"unknown operator {op!r} on {key!r}")
        if not parts:
            raise bad(f"no condition for {key!r}")
        return parts[0] if len(parts) == 1 else "(" + " AND ".join(parts) + ")"

    def walk(f: Any) -> str:
        if not isinstance(f, Mapping) or not f:
            raise bad(f"a filter is a non-empty mapping, not {f!r}")
        parts = []
        for key, value in f.items():
            if key in ("$and", "$or"):
                if not isinstance(value, (list, tuple)) or not value:
                    raise bad(f"{key} needs a non-empty list of filters")
                inner = [walk(v) for v in value]
                parts.append(inner[0] if len(inner) == 1 else
                             "(" + (" AND " if key == "$and" else " OR ").join(inner) + ")")
            elif key == "$not":
                parts.append(f"NOT {walk(value)}")
            elif isinstance(key, str) and key.startswith("$"):
                raise bad(f"unknown operator {key!r}")
            else:
                parts.append(one(key, value))
        return parts[0] if len(parts) == 1 else "(" + " AND ".join(parts) + ")"

    return walk(flt), bound


class NLQLVectorStore(VectorStore):
    """A LangChain ``VectorStore`` over an NLQL engine (any NLQL store: memory, DuckDB, pgvector, …).

    Each LangChain document is one NLQL document (split into sentences; a document's score is its best
    sentence's cosine). ``similarity_search`` returns the documents themselves: ``page_content`` the
    whole text, ``metadata`` exactly what was added, ``id`` the document id.

    ``filter`` is either NLQL WHERE text (``"meta.year >= 2020 AND content CONTAINS 'tool'"``, with
    ``params=`` for its ``$parameters``) or a LangChain dict filter (``{"year": {"$gte": 2020}}``,
    translated by :func:`filter_to_nlql` with every value bound). Relevance scores are
    ``(1 + cosine) / 2``, in [0, 1].

    Args:
        engine: An :class:`~nlql.engine.Engine`; or ``None`` to make one from ``embedding`` and ``store``.
        embedding: A LangChain ``Embeddings``; with no engine, the engine embeds with it (through
            :class:`LangChainEmbedder`). ``None`` with no engine: NLQL's default embedder.
        store: The store of a new engine (``"memory"``, a directory, a URL).
        engine_kwargs: Other arguments of a new :class:`~nlql.engine.Engine`.
    """

    def __init__(self, engine: Engine | None = None, *, embedding: Embeddings | None = None,
                 store: Any = "memory", **engine_kwargs: Any) -> None:
        if engine is None:
            from nlql.engine import Engine

            embedder = LangChainEmbedder(embedding) if embedding is not None else None
            engine = Engine(embedder=embedder, store=store, **engine_kwargs)
        elif engine_kwargs or store != "memory":
            raise TypeError("pass either an engine or the arguments to build one, not both")
        self.engine = engine
        self._embedding = embedding

    @property
    def embeddings(self) -> Embeddings | None:
        return self._embedding

    # writing ------------------------------------------------------------------------------------

    def add_texts(self, texts: Iterable[str], metadatas: list[dict] | None = None, *,
                  ids: Sequence[str | None] | None = None, **kwargs: Any) -> list[str]:
        """Add texts (a given id replaces the document of that id); returns their ids."""
        items = list(texts)
        given = list(ids) if ids is not None else [None] * len(items)
        if len(given) != len(items):
            raise ValueError(f"{len(items)} texts but {len(given)} ids")
        keys = [str(i) if i is not None else uuid.uuid4().hex for i in given]
        if not items:
            return []
        return self.engine.add_texts(items, ids=keys, metadatas=metadatas)

    async def aadd_texts(self, texts: Iterable[str], metadatas: list[dict] | None = None, *,
                         ids: Sequence[str | None] | None = None, **kwargs: Any) -> list[str]:
        import asyncio

        return await asyncio.to_thread(self.add_texts, list(texts), metadatas, ids=ids, **kwargs)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete documents by id (missing ids are ignored); ``True``."""
        if ids is None:
            raise ValueError("delete needs the ids of the documents to delete")
        for i in ids:
            self.engine.delete(i)
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        import asyncio

        return await asyncio.to_thread(self.delete, ids, **kwargs)

    # reading ------------------------------------------------------------------------------------

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents of these ids that exist (in no particular order)."""
        if not ids:
            return []
        hits = self.engine.search("SELECT DOCUMENT WHERE doc_id IN $ids", params={"ids": [str(i) for i in ids]})
        return [self._document(h) for h in hits]

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        import asyncio

        return await asyncio.to_thread(self.get_by_ids, ids)

    def _query(self, query: str, k: int, filter: str | Mapping[str, Any] | None,
               params: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
        bound: dict[str, Any] = dict(params or {})
        if "q" in bound or "k" in bound:
            raise ValueError("params must not bind $q or $k: the vector store binds them")
        where = ""
        if isinstance(filter, str):
            where = f"WHERE {filter}\n"
        elif filter is not None:
            cond, bound = filter_to_nlql(filter, bound)
            where = f"WHERE {cond}\n"
        bound.update(q=query, k=check_k(k))
        return ("SELECT DOCUMENT\nLET score = SIMILARITY(content, $q)\n" + where
                + "ORDER BY score DESC\nLIMIT $k"), bound

    def similarity_search_with_score(self, query: str, k: int = 4, filter: str | Mapping[str, Any] | None = None,
                                     *, params: Mapping[str, Any] | None = None,
                                     **kwargs: Any) -> list[tuple[Document, float]]:
        """The ``k`` documents most similar to ``query`` with their cosine, best first."""
        text, bound = self._query(query, k, filter, params)
        try:
            hits = self.engine.search(text, params=bound, **kwargs)
        except NLQLError as exc:
            raise exc.with_source(text) from None
        return [(self._document(h), _similarity(h)) for h in hits]

    def similarity_search(self, query: str, k: int = 4, filter: str | Mapping[str, Any] | None = None,
                          **kwargs: Any) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        import asyncio

        return await asyncio.to_thread(self.similarity_search, query, k, **kwargs)

    def _select_relevance_score_fn(self) -> Any:
        return lambda score: (1.0 + score) / 2.0

    @staticmethod
    def _document(hit: Any) -> Document:
        return Document(page_content=hit.content, metadata=dict(hit.metadata), id=hit.doc_id)

    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings, metadatas: list[dict] | None = None, *,
                   ids: list[str] | None = None, **kwargs: Any) -> NLQLVectorStore:
        """A new in-memory (or ``store=``) vector store holding ``texts``."""
        store = cls(embedding=embedding, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store


def _similarity(hit: Any) -> float:
    """The row's ``score`` (a SIMILARITY with no fusion: never NULL, an arm cannot be dropped)."""
    score = hit.scores["score"]
    if score is None:
        raise RuntimeError(f"row {hit.id} has no similarity score")
    return float(score)
