"""The SQL dialect base: capability flags as data, a TRANSFORMS table, and one statement per plan.

A dialect declares what it can do with UPPERCASE class attributes; the lowering pass
(:mod:`nlql.plan.lower_hybrid`) reads them and never probes by trying. A subclass overrides only what
differs: its flags and the entries of ``TRANSFORMS`` (node type → method name) it implements. Asking
for a node the dialect has no transform for raises :class:`~nlql.errors.UnsupportedError` naming the
dialect and the feature, never SQL that silently means something else.

>>> d = Dialect()
>>> d.missing_feature(Lowered(scores=(), fusion=Fusion("RRF", "f", ()), filter=None, thresholds=(),
...                           fused_thresholds=(), depth=100, fetch=10))
'the generic dialect cannot run RRF in SQL'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from nlql.errors import UnsupportedError
from nlql.sql.binder import Binder, Fragment
from nlql.sql.nodes import Arm, Fusion, KeywordScore, Lowered, SimilarityScore, Threshold

__all__ = ["Compiled", "Dialect"]


@dataclass
class Compiled:
    """One rendered statement: ``text`` with numbered placeholders, the ``binder`` holding the values,
    ``parts`` (name → rendered SQL of each arm and of the fusion, same numbering, for explain),
    ``columns`` (the score columns after the row columns, in order) and the ``mode`` it was built for."""

    text: str
    binder: Binder
    parts: dict[str, str] = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)
    mode: str = "exact"

    def params(self, slots: Mapping[str, Any]) -> list[Any]:
        """The values to execute with, execution-time slots (query vectors) filled from ``slots``."""
        return self.binder.resolve(slots)


class Dialect:
    """Base dialect: supports nothing, so every feature is an explicit opt-in of a subclass."""

    NAME: ClassVar[str] = "generic"
    PLACEHOLDER_STYLE: ClassVar[str] = "numbered"   # "$1" (server-side) or "pyformat" ("%s")
    VECTOR_ORDER: ClassVar[bool] = False             # ORDER BY vector distance LIMIT k (index-served)
    MATERIALIZED_CTE: ClassVar[bool] = False         # WITH x AS MATERIALIZED: an optimisation fence
    WINDOW_FUNCTIONS: ClassVar[bool] = False         # row_number() OVER (ORDER BY …) for arm ranks
    ORDERED_AGGREGATES: ClassVar[bool] = False       # sum(x ORDER BY y): float sums in a fixed order
    BM25_NATIVE: ClassVar[bool] = False              # BM25 from term statistics kept at ingest
    MULTI_VECTOR_SIMILARITY: ClassVar[bool] = False  # SIMILARITY over several texts (max)
    FUSIONS: ClassVar[frozenset[str]] = frozenset()  # RRF, INTERLEAVE, SINGLE
    UNITS: ClassVar[frozenset[str]] = frozenset()    # result units a statement can return
    TRANSFORMS: ClassVar[dict[type, str]] = {}       # node type → method generating its SQL

    # -------------------------------------------------------------------------------- capability

    def missing_feature(self, lowered: Lowered) -> str | None:
        """Why this dialect cannot run ``lowered`` (a sentence for explain), or None when it can."""
        if not (self.WINDOW_FUNCTIONS and self.ORDERED_AGGREGATES):
            return f"the {self.NAME} dialect cannot run {lowered.fusion.method} in SQL"
        if lowered.fusion.method not in self.FUSIONS:
            return f"the {self.NAME} dialect has no {lowered.fusion.method} fusion"
        for s in lowered.scores:
            if isinstance(s, KeywordScore) and not self.BM25_NATIVE:
                return f"the {self.NAME} dialect has no native BM25"
            if isinstance(s, SimilarityScore) and s.n_vectors > 1 and not self.MULTI_VECTOR_SIMILARITY:
                return f"the {self.NAME} dialect has no SIMILARITY over several texts"
        return None

    # -------------------------------------------------------------------------------- generation

    def transform(self, node: Any, *args: Any) -> Fragment:
        """The SQL of one node, through ``TRANSFORMS``.

        Raises:
            UnsupportedError: the dialect has no transform for this node.
        """
        name = type(self).TRANSFORMS.get(type(node))
        if name is None:
            raise UnsupportedError(self.NAME, _feature(node))
        out: Fragment = getattr(self, name)(node, *args)
        return out

    def compile(self, lowered: Lowered, mode: str = "exact") -> Compiled:
        """One statement for ``lowered``; ``mode`` is ``exact`` or ``index`` for semantic arms.

        Raises:
            UnsupportedError: the dialect cannot run it (see :meth:`missing_feature`).
        """
        why = self.missing_feature(lowered)
        if why is not None:
            raise UnsupportedError(self.NAME, f"this hybrid plan ({why})")
        raise UnsupportedError(self.NAME, "hybrid statements")


def _feature(node: Any) -> str:
    if isinstance(node, Fusion):
        return f"{node.method} fusion in SQL"
    if isinstance(node, Arm):
        return f"a {node.kind} arm in SQL"
    if isinstance(node, Threshold):
        return f"the score condition {node.label} in SQL"
    if isinstance(node, KeywordScore):
        return "BM25 in SQL"
    if isinstance(node, SimilarityScore):
        return "SIMILARITY in SQL"
    return f"{type(node).__name__} in SQL"
