"""Pass: decide how many candidates the first recall round asks for."""

from __future__ import annotations

from nlql import ir
from nlql.plan.nodes import Recall

RESIDUAL_FACTOR = 4.0
GROUP_FACTOR = 4.0
#: DISTINCT BY: the first round asks for this many rows per row the page needs. Each further knn round
#: scores the whole store again, so one generous round is cheaper than several tight ones.
DISTINCT_FACTOR = 10.0


def decide_overfetch(recall: Recall, limit: int | None, offset: int, unit: ir.Unit, has_residual: bool,
                     rerank_factor: int | None, distinct: bool = False) -> Recall:
    """Over-fetch for residual filters, for units that group sentences, for reranking and for DISTINCT BY.

    The executor widens further (×4 per round) until LIMIT rows survive or the store is exhausted, so
    this only sets the first round; the top-k guarantee does not depend on it.
    """
    if recall.kind != "knn" or limit is None:
        return recall
    need = limit + offset
    if rerank_factor:
        need = max(need, rerank_factor * need)
    factor = 1.0
    if has_residual:
        factor *= RESIDUAL_FACTOR
    if not unit.rows_are_sentences:  # DOCUMENT, CHUNK, SPAN over CHUNK
        factor *= GROUP_FACTOR
    if distinct:
        factor *= DISTINCT_FACTOR
    recall.k = max(1, int(need * factor))
    recall.overfetch = factor
    return recall
