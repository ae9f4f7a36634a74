"""Many parameter sets of one query at once (``engine.search_many``, SPEC §11).

Each set is planned as :meth:`~nlql.engine.Engine.search` plans it (the plan cache serves repeats).
Then, once for the whole batch:

1. every distinct SIMILARITY text of every plan is embedded in one embedder call (an embedder batches
   far better than one text at a time); each search reads its own texts' rows of that matrix, so it
   normalises and uses exactly what it would have embedded alone (up to the embedder's own batch
   arithmetic, which for a transformer differs in the last float32 bits);
2. the plans whose recall is a knn round over one query vector are grouped by what the store call
   reads besides the vector (k, the pushed filter, the score threshold), and each group asks the store
   once with all its vectors (``Store.knn`` takes a matrix; the built-in store scores it with one
   matrix product): recall's first round reads its lists from there, later widening rounds ask alone.

Then every search runs as ``search`` runs it (fusion, order, rerank, DISTINCT BY, page, cursor). An
embedder failure in the batch call falls back to each search embedding alone, so ``on_arm_error``
degrades or raises per search exactly as ``search`` would.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nlql import values as V
from nlql.deadline import Deadline, active
from nlql.errors import NLQLError
from nlql.execute.degrade import embed_within
from nlql.execute.recall import knn_ask
from nlql.execute.results import Hits

__all__ = ["run_many"]


def _texts(plans: Sequence[Any]) -> list[str]:
    seen: dict[str, None] = {}
    for plan in plans:
        for s in plan.scores:
            if s.kind == "SIMILARITY":
                seen.update(dict.fromkeys(s.texts))
    return list(seen)


def _need(plan: Any, reranker: Any, factor: int) -> int | None:
    if plan.limit is None:
        return None
    need = plan.limit + plan.offset
    return max(need, factor * need) if reranker is not None else need


def run_many(engine: Any, plans: Sequence[tuple[Any, str]], reranker: Any, rerank_query: str | None,
             timeout: float | None, max_tokens: int | None) -> list[Hits]:
    """The hits of each plan, in order (``engine``: the :class:`~nlql.engine.Engine`, its lock held)."""
    started = time.monotonic()
    deadline = Deadline(timeout)
    only = [p for p, _ in plans]
    texts = _texts(only)
    raw: np.ndarray | None = None
    index = {tx: i for i, tx in enumerate(texts)}
    embed_ms = 0.0
    if texts:
        t = time.perf_counter()
        try:
            raw = embed_within(engine._embed_queries, texts, deadline)  # noqa: SLF001 - the engine's own
        except NLQLError:
            raw = None  # each search embeds alone: it raises or degrades as search would
        embed_ms = (time.perf_counter() - t) * 1000
    first = _first_rounds(engine, only, raw, index, reranker, deadline) if raw is not None else {}

    out = []
    for n, (plan, cached) in enumerate(plans):
        embed: Callable[[Sequence[str]], np.ndarray] | None = None
        if raw is not None:
            rows = raw

            def embed(ts: Sequence[str], _rows: np.ndarray = rows) -> np.ndarray:
                return _rows[[index[tx] for tx in ts]]
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        hits = engine._executor.run(  # noqa: SLF001
            plan, reranker=reranker, rerank_query=rerank_query, rerank_factor=engine.rerank_factor,
            timeout=left, max_tokens=max_tokens, embed=embed, knn_first=first.get(n),
            page=engine._paging(plan) if reranker is None else None)  # noqa: SLF001
        hits.stats["plan_cache"] = cached
        hits.stats["batch"] = {"queries": len(plans), "texts": len(texts), "embed_ms": round(embed_ms, 3),
                               "knn_batched": n in first}
        out.append(hits)
    return out


def _first_rounds(engine: Any, plans: Sequence[Any], raw: np.ndarray, index: dict[str, int], reranker: Any,
                  deadline: Deadline) -> dict[int, tuple[int, list[Any]]]:
    """Recall's first knn round of each plan that has one over one query vector, asked per group."""
    store = engine.store
    groups: dict[Any, list[tuple[int, np.ndarray]]] = {}
    natives: dict[Any, Any] = {}
    for n, plan in enumerate(plans):
        if plan.lowered is not None or plan.recall.kind != "knn" or plan.recall.slot is None:
            continue
        need = _need(plan, reranker, engine.rerank_factor)
        if need is None:
            continue
        spec = next((s for s in plan.scores if s.slot == plan.recall.slot), None)
        if spec is None or spec.kind != "SIMILARITY" or len(spec.texts) != 1:
            continue
        k = knn_ask(store, max(1, plan.recall.k or need))  # (as recall's first round asks)
        min_score = plan.recall.min_score.get(plan.recall.slot) if store.capabilities.SCORE_THRESHOLD else None
        native = plan.native
        key = (k, min_score, repr(plan.pushed), None if native is None else native.text)
        natives[key] = native
        vec = V.normalize_rows(raw[[index[spec.texts[0]]]], zero_invalid=True)
        groups.setdefault(key, []).append((n, vec))
    out: dict[int, tuple[int, list[Any]]] = {}
    with active(deadline):
        for key, members in groups.items():
            if len(members) < 2:
                continue
            k, min_score = key[0], key[1]
            try:
                lists = store.knn(np.concatenate([v for _, v in members]), k, natives[key], min_score=min_score)
            except NLQLError:
                continue  # each search asks alone (and fails or degrades as search would)
            for (n, _), lst in zip(members, lists, strict=True):
                out[n] = (k, [lst])
    return out
