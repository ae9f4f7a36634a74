"""NLQL inside other frameworks: LangChain and LlamaIndex retrievers.

Both retrievers run one NLQL *template* per question: the question is bound to ``$q``, the number of
results to ``$k`` (when the template uses it), and any fixed ``params`` you give. The template is parsed
and checked once, when the retriever is built, so a mistake in it is an :class:`~nlql.errors.NLQLError`
at construction, not at the first question.

- :class:`nlql.integrations.langchain.NLQLRetriever`: a ``langchain_core`` ``BaseRetriever`` returning
  ``Document`` objects (``pip install 'nlql-engine[langchain]'``).
- :class:`nlql.integrations.llamaindex.NLQLRetriever`: a ``llama_index.core`` ``BaseRetriever``
  returning ``NodeWithScore`` objects (``pip install 'nlql-engine[llamaindex]'``).

This module imports neither framework; :class:`Template` holds what both share.

>>> from nlql.embedders import HashEmbedder
>>> from nlql.engine import Engine
>>> engine = Engine(embedder=HashEmbedder(dim=64))
>>> engine.add_text("Agents call tools. Cats sleep all day.", id="a")
'a'
>>> t = Template(engine, k=1)
>>> t.score_key
'score'
>>> [(h.content, round(t.score_of(h), 4)) for h in t.search("tools")]
[('Agents call tools. Cats sleep all day.', 0.0328)]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nlql import ir
from nlql.errors import CheckError, NLQLError, ParamError

if TYPE_CHECKING:
    from nlql.engine import Engine
    from nlql.execute.results import Hit, Hits

__all__ = ["DEFAULT_TEMPLATE", "RESERVED_METADATA", "Template", "check_k", "hit_metadata", "meta_path"]

#: The default template: semantic similarity and BM25 over the same question, fused by reciprocal rank
#: (k = 60), best chunks first. ``$q`` is the question, ``$k`` the number of results.
DEFAULT_TEMPLATE = """\
SELECT CHUNK
LET sem = SIMILARITY(content, $q),
    kw = BM25(content, $q),
    score = RRF(sem, kw, k => 60)
ORDER BY score DESC
LIMIT $k"""

#: Metadata keys a retriever sets on every result (a document's own key of the same name is replaced).
RESERVED_METADATA = ("doc_id", "unit", "position", "score", "scores", "best")


class Template:
    """One checked NLQL template, run per question.

    Args:
        engine: The :class:`~nlql.engine.Engine` to search.
        template: NLQL text that uses ``$q`` for the question (and optionally ``$k`` for the number of
            results); default :data:`DEFAULT_TEMPLATE`.
        params: Fixed values for the template's other parameters.
        k: Bound to ``$k`` when the template uses it.
        score_key: The score binding reported as *the* score of a result; default: the first ORDER BY key
            when it is a binding, else ``rerank`` when a reranker scored the hits, else the first binding.
        search_kwargs: Passed to :meth:`Engine.search` (``timeout``, ``max_tokens``, ``reranker``, …).

    Raises:
        NLQLError: The template does not parse or check (every problem is listed), or does not use ``$q``.
    """

    def __init__(self, engine: Engine, template: str = DEFAULT_TEMPLATE, params: Mapping[str, Any] | None = None,
                 k: int = 4, score_key: str | None = None, search_kwargs: Mapping[str, Any] | None = None):
        from nlql.parser import parse

        if not isinstance(template, str):
            raise TypeError(f"template must be NLQL text, not {type(template).__name__}")
        check_k(k)
        self.engine = engine
        self.text = template
        self.params = {str(n): v for n, v in (params or {}).items()}
        self.k = k
        self.search_kwargs = dict(search_kwargs or {})
        try:
            parsed = parse(template)
        except NLQLError as exc:  # attach the text so the caret shows
            raise exc.with_source(template) from None
        names = {n.name for n in parsed.walk() if isinstance(n, ir.Param)}
        if "q" not in names:
            raise ParamError("the retriever's template does not use $q, the question",
                             hint='put $q where the question goes, e.g. LET rel = SIMILARITY(content, $q)')
        self.uses_k = "k" in names
        for reserved in ("q", "k"):
            if reserved in self.params and (reserved == "q" or self.uses_k):
                raise ValueError(f"params must not bind ${reserved}: the retriever binds it")
        diags = engine.check(template, params=self._bind("a question"))
        if diags:
            raise CheckError(diags, source=template)
        self.score_key = score_key or _default_score_key(parsed)

    def _bind(self, question: str, k: int | None = None) -> dict[str, Any]:
        bound = dict(self.params)
        bound["q"] = question
        if self.uses_k:
            bound["k"] = self.k if k is None else check_k(k)
        return bound

    def search(self, question: str, k: int | None = None) -> Hits:
        """The hits of the template for ``question``; ``k`` (when given) replaces :attr:`k` for this call."""
        return self.engine.search(self.text, params=self._bind(question, k), **self.search_kwargs)

    async def asearch(self, question: str, k: int | None = None) -> Hits:
        """:meth:`search` in a worker thread (the engine's own ``asearch``)."""
        return await self.engine.asearch(self.text, self._bind(question, k), **self.search_kwargs)

    def score_of(self, hit: Hit) -> float | None:
        """The hit's score under :attr:`score_key` (``rerank`` when present and no ORDER BY was named)."""
        key = self.score_key
        if key is None or key not in hit.scores:
            key = "rerank" if "rerank" in hit.scores else next(iter(hit.scores), None)
        value = hit.scores.get(key) if key is not None else None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def check_k(k: Any) -> int:
    """``k`` itself when it is a non-negative int (the number of results); ValueError otherwise."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be a non-negative int, not {k!r}")
    return k


def _default_score_key(q: ir.Query) -> str | None:
    """The first ORDER BY key when it is a binding; otherwise None, and :meth:`Template.score_of` falls
    back per hit (``rerank``, else the first binding, which is also the default order)."""
    if q.order_by and isinstance(q.order_by[0].expr, ir.Ref):
        return q.order_by[0].expr.name
    return None


def hit_metadata(hit: Hit, score: float | None) -> dict[str, Any]:
    """The metadata a retriever attaches: the hit's own metadata plus :data:`RESERVED_METADATA`
    (``best``: the sentence that scored a DOCUMENT or CHUNK hit as ``{"position", "content", "scores"}``,
    None when nothing scored it and on SENTENCE and SPAN hits)."""
    out = dict(hit.metadata)
    out.update({"doc_id": hit.doc_id, "unit": hit.unit, "position": hit.position, "score": score,
                "scores": dict(hit.scores)})
    out["best"] = hit.best.to_dict() if hit.best is not None else None
    if hit.highlights is not None:  # HIGHLIGHT bindings: name -> [start, end) ranges of the content
        out["highlights"] = {k: [list(r) for r in v] for k, v in hit.highlights.items()}
    return out


def meta_path(key: str) -> str:
    """The NLQL path of a metadata key, each part in backticks (so keywords and any characters are
    fine): ``year`` is ``meta.`year```; dots split nested keys (``author.name``)."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"a metadata filter key must be a non-empty string, not {key!r}")
    parts = key.split(".")
    if any(not p or "`" in p for p in parts):
        raise ValueError(f"the metadata filter key {key!r} has an empty part or a backtick")
    return "meta." + ".".join(f"`{p}`" for p in parts)
