"""What a lowered hybrid plan asks a SQL dialect to compute: score sources, ranked arms, one fusion.

These nodes are dialect-neutral and immutable; :mod:`nlql.plan.lower_hybrid` builds them from a plan
and a :class:`~nlql.sql.dialect.Dialect` turns them into one statement. Values the user wrote (filter
values, thresholds, query terms, LIMIT) live here as data and reach SQL only as bound parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from nlql.pushdown import Filter


@dataclass(frozen=True)
class SimilarityScore:
    """A SIMILARITY slot: cosine between the row's vector and ``n_vectors`` query vectors (max)."""

    slot: str
    n_vectors: int
    label: str

    def vector_key(self, i: int) -> str:
        """The execution-time parameter name of the ``i``-th query vector."""
        return f"vector:{self.slot}:{i}"


@dataclass(frozen=True)
class KeywordScore:
    """A BM25 slot: SPEC §5 BM25 of the distinct analysed query ``terms`` (in first-occurrence order)."""

    slot: str
    terms: tuple[str, ...]
    label: str


@dataclass(frozen=True)
class GraphScore:
    """A GRAPH slot: SPEC §9 spreading activation from the entities named in ``text`` over the store's
    entity tables (``hops`` steps, ``decay`` per step); NULL for a sentence with no activated entity."""

    slot: str
    text: str
    hops: int
    decay: float
    label: str


@dataclass(frozen=True)
class TemporalScore:
    """A TEMPORAL slot: SPEC §9's value of the date at the metadata path ``keys`` (its ``t`` view, µs
    since the epoch) in the period ``[start, end)`` (µs), the same float operations as
    :func:`nlql.text.temporal.temporal_value`; NULL (no row) for a row with no date or a date outside
    the period. ``start`` None: the text named no period, the arm is empty. ``open``: a side is
    unbounded, every date inside is 1.0."""

    slot: str
    keys: tuple[str, ...]
    start: int | None
    end: int | None
    open: bool
    label: str


Score = SimilarityScore | KeywordScore | GraphScore | TemporalScore


@dataclass(frozen=True)
class Threshold:
    """``score op value`` on one slot (``kind`` SIMILARITY, BM25 or FUSED), from a WHERE conjunct."""

    slot: str
    kind: str
    op: str            # > >= < <=
    value: float
    label: str         # the NLQL conjunct, for explain

    @property
    def lower_bound(self) -> bool:
        return self.op in (">", ">=")

    def holds(self, score: float) -> bool:
        """Whether a row with this score passes (used to decide if BM25 non-matches fill up)."""
        return {">": score > self.value, ">=": score >= self.value,
                "<": score < self.value, "<=": score <= self.value}[self.op]


@dataclass(frozen=True)
class Arm:
    """One ranked input of the fusion: the binding ``binding`` over score ``slot``.

    ``kind`` is ``semantic`` (top ``depth`` by similarity), ``bm25`` (top ``depth`` rows that match a
    query term, by BM25), ``graph`` (top ``depth`` activated rows, by activation) or ``temporal`` (top
    ``depth`` dated rows in the period, by TEMPORAL's value). ``min``: the arm-local threshold
    (``min => x``, SPEC §9): rows whose score is below it are out of this arm only.
    """

    binding: str
    slot: str
    kind: str
    min: float | None = None


@dataclass(frozen=True)
class Fusion:
    """How arms combine: ``RRF`` (Σ wᵢ/(k + rankᵢ)), ``INTERLEAVE`` (1/position) or ``SINGLE``
    (one BM25 ranking, rows matching no term filling up with score 0 when ``fill``)."""

    method: str
    slot: str
    arms: tuple[Arm, ...]
    k: float = 60.0
    weights: tuple[float, ...] = ()
    fill: bool = False


@dataclass(frozen=True)
class Lowered:
    """A whole hybrid plan as one statement.

    Attributes:
        scores: Every SIMILARITY/BM25 slot the query reads (each computed for the returned rows), and
            the GRAPH and TEMPORAL arms' slots.
        fusion: The ranking and its arms.
        filter: The pushed WHERE (shared by every arm, applied before each arm's LIMIT).
        thresholds: Score conjuncts of WHERE on SIMILARITY/BM25 slots (also shared by every arm).
        fused_thresholds: Conjuncts on the fusion score (applied after fusion, before the cut).
        depth: Rows per arm (``plan.arm_depth``).
        fetch: Rows returned (LIMIT + OFFSET, times the rerank factor when reranking).
        k1, b: The BM25 constants.
    """

    scores: tuple[Score, ...]
    fusion: Fusion
    filter: Filter | None
    thresholds: tuple[Threshold, ...]
    fused_thresholds: tuple[Threshold, ...]
    depth: int
    fetch: int
    k1: float = 1.2
    b: float = 0.75

    def score(self, slot: str) -> Score:
        for s in self.scores:
            if s.slot == slot:
                return s
        raise KeyError(slot)

    @property
    def semantic_arms(self) -> tuple[Arm, ...]:
        return tuple(a for a in self.fusion.arms if a.kind == "semantic")


__all__ = ["Arm", "Fusion", "GraphScore", "KeywordScore", "Lowered", "Score", "SimilarityScore", "TemporalScore",
           "Threshold"]
