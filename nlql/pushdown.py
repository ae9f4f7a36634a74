"""The pushdown contract between the planner and the stores: the pushed-filter language, what a store
declares it can do (:class:`Capabilities`), a compiled filter (:class:`NativeFilter`), the rules
that decide which leaves a store can evaluate with exactly NLQL's semantics, and the page selections
a table store may make with numpy before any row is fetched (:class:`FastPath`).

Neutral ground: the planner and every store import this module; it imports neither.

Pushed filters arrive as a small normalised tree (:class:`Cond`, :class:`FAnd`, :class:`FOr`) with
parameters bound and NOT pushed into the leaves, so a store translates leaves and never sees NOT.
Leaf semantics are SPEC §6's (SQL three-valued logic): a leaf on a missing or null key is UNKNOWN, and
UNKNOWN rows never pass; ``ne``/``not_in``/``not_contains`` therefore exclude rows that lack the key.
The rules read a store's :class:`Capabilities` as data; nothing is probed at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Union

from nlql import values as V

# Leaf operators of the pushed-filter language.
OPS = frozenset({
    "eq", "ne", "lt", "le", "gt", "ge",        # value: scalar (str | int | float | bool | datetime)
    "in", "not_in",                             # value: tuple of scalars
    "is_null", "is_not_null",                   # value: None
    "contains", "not_contains",                 # value: str (case-insensitive substring)
    "like", "not_like",                         # value: str (SQL LIKE, case-sensitive, whole string)
    "match", "not_match",                       # value: str (Python regex search)
    "has", "not_has",                           # value: scalar (list membership; == on a scalar)
    "has_any", "not_has_any",                   # value: tuple of scalars
    "has_all", "not_has_all",                   # value: tuple of scalars
})
#: The list-membership leaves (SPEC §11 HAS): on a list TRUE/FALSE, on a scalar as ==/IN/AND of ==, null UNKNOWN.
HAS_OPS = frozenset({"has", "not_has", "has_any", "not_has_any", "has_all", "not_has_all"})


@dataclass(frozen=True, slots=True)
class Cond:
    """A leaf predicate: ``path op value``.

    ``path`` is ``("meta", key, subkey, …)`` for metadata, or ``("doc_id",)``, ``("id",)``,
    ``("position",)``, ``("content",)`` for built-in fields.
    """

    op: str
    path: tuple[str, ...]
    value: Any = None

    @property
    def is_meta(self) -> bool:
        return self.path[0] == "meta"

    @property
    def meta_keys(self) -> tuple[str, ...]:
        return self.path[1:]


@dataclass(frozen=True, slots=True)
class FAnd:
    items: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class FOr:
    items: tuple[Filter, ...]


Filter = Union[Cond, FAnd, FOr]


def filter_leaves(f: Filter) -> list[Cond]:
    """Every leaf of a filter tree."""
    out: list[Cond] = []
    stack: list[Filter] = [f]
    while stack:
        node = stack.pop()
        if isinstance(node, Cond):
            out.append(node)
        else:
            stack.extend(node.items)
    return out


@dataclass(frozen=True)
class Capabilities:
    """What a store can evaluate natively, with exactly NLQL's semantics. Read by the planner.

    Anything a store cannot push with identical semantics stays residual (evaluated by the engine)
    and explain says so.
    """

    NAME: str
    OPS: frozenset[str] = frozenset()        # leaf ops it pushes
    FIELDS: frozenset[str] = frozenset({"meta"})  # path roots it pushes: meta, doc_id, id, position, content
    OR: bool = False                          # can push FOr
    NESTED_KEYS: bool = False                 # meta.a.b (len(meta_keys) > 1)
    NUMERIC_STRINGS: bool = False             # "2025" compares numerically with 2025 in pushed leaves
    FLOAT_EQUALITY: bool = False              # eq/ne/in with non-integral floats
    DATETIMES: bool = False                   # leaves whose value is a datetime (ISO strings compared as dates)
    EXACT: bool = True                        # knn returns the exact top-k for the pushed filter
    SCORE_THRESHOLD: bool = False             # knn(min_score=…) applied inside recall
    BM25: bool = False                        # native BM25 with the engine's analyzer/formula
    # Optional protocols (nlql.stores.base): the executor calls these methods only when declared.
    FULL_SCORES: bool = False                 # ScoresAll: score_all(), one pass over every row (exact matrix)
    SQL_ARMS: bool = False                    # RunsLowered: run_lowered(), a hybrid plan as one statement
    FAST_PATH: bool = False                   # TablePaths: the store's fast paths over row numbers
    DEADLINE: bool = False                    # bounds its backend calls by nlql.deadline.remaining()
    DESCRIBES_DATA: bool = False              # DescribesData: describe_data(), sizes and metadata keys (schema)
    EXACT_INTS: bool = False                  # compares numbers at or beyond 2^53 exactly (not as float64)
    KEYWORD_STATS: bool = False               # KeywordStats: bm25_candidates(), BM25 kept in the store (SPEC §10)
    ENTITY_LINKS: bool = False                # KeepsEntities: entity_rows(), the graph's links kept with the data
    GRAPH_ARM: bool = False                   # GraphInStore: graph_activation(), GRAPH computed by the store
    KNN_SCORES: bool = False                  # knn's scores are bit for bit similarities()' (the engine keeps them)
    KNN_ORDERED: bool = False                 # knn lists its rows by (score desc, insertion order), each key once
    KNN_TIES: bool = False                    # knn's k rows are the first k in that order over every row (its cut
    #                                           never splits equal scores but as insertion order does): recall asks
    #                                           for k, not k + 1 (nlql.execute.recall.past_ties)
    SERIAL_CALLS: bool = False                # its engine answers one call at a time: a fusion's keyword reads go first
    SYNCS: bool = False                       # Syncing: stale(), sync(): other processes may write it
    WARM_UP: bool = False                     # WarmsUp: build_int8(wait=False) when the engine opens it
    DOC_BATCHES: bool = False                 # upsert() takes the engine's DocBatch whole (nlql.stores.batch)
    WRITES_AHEAD: bool = False                # WritesAhead: an add_texts call's next batch prepared while one is written
    ANALYZER: bool = False                    # KeepsAnalyzer: writes BM25 terms with its own .analyzer
    KEEPS_KEYWORDS: bool = False              # KeepsKeywords: keeps the engine's BM25 index beside its data
    COUNTS: bool = False                      # CountsGroups: count_groups(), COUNT … BY metadata in the store
    COUNT_KEYS: int = 0                       # the most BY keys count_groups() takes (0: any number)
    COUNT_CALLS: str = "one GROUP BY"         # what count_groups() asks the store (explain shows it)


@dataclass(slots=True)
class NativeFilter:
    """A filter compiled into a store's own language; ``text`` is what explain shows."""

    native: Any
    text: str
    extra: dict[str, Any] = field(default_factory=dict)


def _scalars(cond: Cond) -> list[Any]:
    if cond.op in ("in", "not_in", "has_any", "not_has_any", "has_all", "not_has_all"):
        return list(cond.value)
    if cond.op in ("is_null", "is_not_null"):
        return []
    return [cond.value]


def leaf_pushable(caps: Capabilities, cond: Cond) -> bool:
    """Whether ``caps`` declares everything this leaf needs.

    A leaf needs: its op in ``OPS``; its path root in ``FIELDS``; ``NESTED_KEYS`` for ``meta.a.b``;
    ``NUMERIC_STRINGS`` when a value is a number or a numeric string (stored strings like "2025" must
    compare numerically); ``FLOAT_EQUALITY`` for equality on non-integral floats; ``DATETIMES`` for
    datetime values; ``EXACT_INTS`` for a number (or numeric string) at or beyond 2^53 in magnitude,
    where float64 views cannot tell ``2**53`` from ``2**53 + 1`` (SPEC §6: integers compare exactly).
    """
    if cond.op not in caps.OPS:
        return False
    if cond.path[0] not in caps.FIELDS:
        return False
    if cond.path[0] == "meta" and len(cond.path) > 2 and not caps.NESTED_KEYS:
        return False
    for v in _scalars(cond):
        if isinstance(v, (datetime, date)):
            if not caps.DATETIMES:
                return False
        elif isinstance(v, bool) or v is None:
            continue
        elif V.is_number(v) or (isinstance(v, str) and V.numeric_string(v) is not None):
            if cond.path[0] == "meta" and not caps.NUMERIC_STRINGS:
                return False
            if not caps.EXACT_INTS and V.needs_exact(v):
                return False
            if (
                cond.op in ("eq", "ne", "in", "not_in")
                and isinstance(v, float)
                and not float(v).is_integer()
                and not caps.FLOAT_EQUALITY
            ):
                return False
    return True


def filter_pushable(caps: Capabilities, flt: Filter) -> bool:
    """A whole tree: every leaf pushable, and ``OR`` declared if the tree has a disjunction."""
    if isinstance(flt, Cond):
        return leaf_pushable(caps, flt)
    if isinstance(flt, FOr) and not caps.OR:
        return False
    return all(filter_pushable(caps, item) for item in flt.items)


# ------------------------------------------------------------------------------------- fast paths


@dataclass(frozen=True, slots=True)
class Formula:
    """Arithmetic over score slots that a store may compute as one vector per slot.

    ``op`` is ``"num"`` (``value`` a number), ``"slot"`` (``value`` a slot name), ``"neg"`` (one arg)
    or one of ``+ - * /`` (two args). Evaluated in float64, as the row evaluator does.
    """

    op: str
    value: float | str = 0.0
    args: tuple[Formula, ...] = ()

    def slots(self) -> list[str]:
        """Every slot the formula reads."""
        out: list[str] = []
        stack: list[Formula] = [self]
        while stack:
            f = stack.pop()
            if f.op == "slot":
                out.append(str(f.value))
            stack.extend(f.args)
        return out


@dataclass(frozen=True, slots=True)
class FastArm:
    """One arm of a fusion fast path: a bare SIMILARITY or BM25 score slot (rows below ``min`` rank nothing),
    or a ``VALUE`` arm: a per-row value the engine computes as one vector over the candidates (GRAPH,
    TEMPORAL, RECENCY of a metadata date) and hands to the store under ``slot`` (NaN: absent from the arm).

    ``value`` says what a VALUE arm is, for the engine: ``("GRAPH", (text, hops, decay))``,
    ``("TEMPORAL", meta keys, period or None)``, ``("RECENCY", meta keys, half-life seconds)``.
    """

    slot: str
    kind: str  # SIMILARITY | BM25 | VALUE
    min: float | None = None
    value: tuple[Any, ...] | None = None


#: Fast-path kinds that pick the exact page (the engine fetches only those rows and skips its filter).
TOP_KINDS = frozenset({"insertion", "score"})
#: Fast-path kinds that prune: every row that can still reach the page is kept, the engine finishes.
PRUNE_KINDS = frozenset({"bm25", "formula", "fusion"})


@dataclass(frozen=True, slots=True)
class FastPath:
    """A page selection a table store (``Capabilities.FAST_PATH``) makes with numpy before any row is fetched.

    The planner chooses it (explain shows it); the store may still decline at run time (returns None)
    and the engine then runs its general path. Every kind is exact: the rows left out could not have
    been returned.

    Kinds:
        insertion: the first ``need`` rows in insertion order (no score, no ORDER BY).
        score: the first ``need`` rows by one SIMILARITY ``slot`` (``descending`` or not).
        bm25: the rows tied with or above the ``need``-th best BM25 score of ``slot`` (declined when
            fewer than ``need`` rows match a term).
        formula: the same for an arithmetic ``formula`` over SIMILARITY/BM25 slots.
        fusion: the union of each arm's top ``depth`` rows (an arm ranks nothing below its depth).

    ``floors``: lower bounds on BM25 scores from WHERE, ``(slot, op, value)`` with ``op`` ``>`` or ``>=``,
    each failing at 0 (a row matching no term of the slot's text cannot pass). A prune path first keeps
    only the rows passing every floor, then selects among them: each arm ranks the rows passing WHERE
    (SPEC §9), not the whole table.

    ``unit``: ``"SENTENCE"`` (the rows are the result rows), or ``"DOCUMENT"``: a ``bm25``, ``formula``
    or ``fusion`` path over documents (:mod:`nlql.stores.memory.document_page`). Each SIMILARITY/BM25 slot is
    a document's best sentence score (a maximum over the document's rows), the documents are ranked
    and fused with numpy, and rows are built for the page's documents only.
    """

    kind: str
    slot: str | None = None
    descending: bool = True
    formula: Formula | None = None
    arms: tuple[FastArm, ...] = ()
    depth: int | None = None
    bm25_texts: tuple[tuple[str, str], ...] = ()  # (BM25 slot, query text) for the slots it reads
    floors: tuple[tuple[str, str, float], ...] = ()  # (BM25 slot, > or >=, value): WHERE's lower bounds
    unit: str = "SENTENCE"  # or "DOCUMENT": the path ranks documents by their best sentence

    @property
    def prunes(self) -> bool:
        """True when the store keeps candidates and the engine still filters, fuses and orders them."""
        return self.kind in PRUNE_KINDS

    def bm25_text(self, slot: str) -> str | None:
        """The query text of a BM25 slot this path reads (None for a SIMILARITY slot)."""
        return dict(self.bm25_texts).get(slot)

    def describe_floors(self) -> str:
        """The floors for explain (``kw > 0, kw2 >= 1.5``), empty when there are none."""
        return ", ".join(f"{slot} {op} {value:g}" for slot, op, value in self.floors)

    def describe(self) -> str:
        """One line for explain."""
        if self.unit != "SENTENCE":
            return self._describe_grouped()
        if self.kind == "insertion":
            return "insertion: the first LIMIT+OFFSET rows in insertion order, picked before any row is fetched"
        if self.kind == "score":
            way = "DESC" if self.descending else "ASC"
            return f"score: the first LIMIT+OFFSET rows by {self.slot} {way}, picked before any row is fetched"
        if self.kind == "bm25":
            return f"bm25: rows at or above the LIMIT+OFFSET-th {self.slot}, kept before any row is fetched"
        if self.kind == "formula":
            return "formula: rows at or above the LIMIT+OFFSET-th value of the score arithmetic, kept before any row is fetched"
        arms = ", ".join(a.slot.lstrip("~") for a in self.arms)
        return f"fusion: each arm's top {self.depth} rows ({arms}), kept before any row is fetched"

    def _describe_grouped(self) -> str:
        unit = self.unit.lower()
        each = f"each {unit} scored by its best sentence with numpy; rows built for the page's {unit}s only"
        if self.kind == "bm25":
            return f"bm25 over {unit}s: the {unit}s at or above the LIMIT+OFFSET-th {self.slot}, {each}"
        if self.kind == "formula":
            return f"formula over {unit}s: the {unit}s at or above the LIMIT+OFFSET-th value of the score arithmetic, {each}"
        arms = ", ".join(a.slot.lstrip("~") for a in self.arms)
        return f"fusion over {unit}s: each arm's top {self.depth} {unit}s ({arms}), fused with numpy, {each}"
