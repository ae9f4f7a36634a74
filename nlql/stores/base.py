"""The Store protocol, its Capabilities, and the normalised filter language pushed down to stores.

Every backend sits behind this one small interface. The engine owns splitting, embedding, BM25,
grouping into units, ordering and the residual filter; a store owns rows, vectors and whatever part of
WHERE its ``Capabilities`` say it can evaluate with exactly NLQL's semantics.

Pushed filters arrive as a small normalised tree (:class:`Cond`, :class:`FAnd`, :class:`FOr`) with
parameters bound and NOT pushed into the leaves, so a store translates leaves and never sees NOT.
Leaf semantics are SPEC §6's (SQL three-valued logic): a leaf on a missing or null key is UNKNOWN, and
UNKNOWN rows never pass; ``ne``/``not_in``/``not_contains`` therefore exclude rows that lack the key.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, Union, runtime_checkable

import numpy as np

from nlql.errors import BackendError, NLQLError

# Leaf operators of the pushed-filter language.
OPS = frozenset({
    "eq", "ne", "lt", "le", "gt", "ge",        # value: scalar (str | int | float | bool | datetime)
    "in", "not_in",                             # value: tuple of scalars
    "is_null", "is_not_null",                   # value: None
    "contains", "not_contains",                 # value: str (case-insensitive substring)
    "like", "not_like",                         # value: str (SQL LIKE, case-sensitive, whole string)
    "match", "not_match",                       # value: str (Python regex search)
})


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
    FULL_SCORES: bool = False                 # score_all(): one pass over every row (exact matrix)
    BM25: bool = False                        # native BM25 with the engine's analyzer/formula
    SQL_ARMS: bool = False                    # runs a lowered hybrid plan as one statement (store.dialect)

    def can_push(self, cond: Cond) -> bool:
        """Whether this leaf can be pushed with identical semantics."""
        from nlql.plan.pushdown import leaf_pushable  # local: the planner owns the rules

        return leaf_pushable(self, cond)


@dataclass(slots=True)
class UnitRecord:
    """One sentence of a document, as the engine hands it to a store."""

    position: int
    content: str
    start: int  # character offsets into the document text
    end: int
    tail: str = ""  # the text between this sentence and the next (whitespace), so units rebuild exactly


@dataclass(slots=True)
class DocRecord:
    """A whole document, split and embedded, ready to store. ``vectors`` are L2-normalised float32."""

    doc_id: str
    text: str
    metadata: dict[str, Any]
    units: list[UnitRecord]
    vectors: np.ndarray
    seq: int  # insertion order: ties break on it (document, then position)


@dataclass(slots=True)
class Row:
    """One stored sentence as a store returns it. ``metadata`` is the document's metadata.

    Stores may return shared objects; the engine copies before handing anything to a user.
    """

    key: Any  # store-internal key, stable while the row exists
    doc_id: str
    position: int
    content: str
    metadata: dict[str, Any]
    seq: int
    start: int = 0
    end: int = 0
    tail: str = ""

    @property
    def id(self) -> str:
        return unit_id(self.doc_id, self.position)


def unit_id(doc_id: str, position: int) -> str:
    """The id of a sentence: ``"<doc_id>#<position>"``."""
    return f"{doc_id}#{position}"


@dataclass(slots=True)
class NativeFilter:
    """A filter compiled into a store's own language; ``text`` is what explain shows."""

    native: Any
    text: str
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Store(Protocol):
    """The one interface every backend implements. Keys are store-internal; rows carry doc_id/position.

    Contract:
    - ``upsert`` is atomic per call and replaces every existing document with the same ``doc_id``
      (no stale sentences). A crash mid-call leaves either the old or the new version.
    - ``knn`` returns, per query vector, up to ``k`` (key, cosine similarity) pairs, best first, among rows
      passing ``flt``; with ``min_score`` (only if ``SCORE_THRESHOLD``) rows below it are excluded.
      Ties are broken by (seq, position) ascending when ``EXACT``.
    - ``scan`` returns every key passing ``flt`` in insertion order (seq, position).
    - ``similarities(vectors, keys)`` returns a (len(vectors), len(keys)) cosine matrix.
    """

    capabilities: Capabilities

    def open(self, dim: int) -> None: ...
    def upsert(self, docs: Sequence[DocRecord]) -> None: ...
    def delete(self, doc_ids: Sequence[str]) -> int: ...
    def count(self) -> int: ...
    def max_seq(self) -> int: ...
    def compile_filter(self, flt: Filter) -> NativeFilter: ...
    def knn(self, vectors: np.ndarray, k: int, flt: NativeFilter | None = None,
            min_score: float | None = None) -> list[list[tuple[Any, float]]]: ...
    def scan(self, flt: NativeFilter | None = None) -> list[Any]: ...
    def fetch(self, keys: Sequence[Any]) -> list[Row]: ...
    def document_rows(self, doc_ids: Sequence[str]) -> dict[str, list[Row]]: ...
    def similarities(self, vectors: np.ndarray, keys: Sequence[Any]) -> np.ndarray: ...
    def close(self) -> None: ...


@contextmanager
def backend_errors(store: str, what: str) -> Iterator[None]:
    """Turn a driver's failure into a :class:`BackendError` naming the store and the operation.

    NLQL errors pass through unchanged.
    """
    try:
        yield
    except NLQLError:
        raise
    except Exception as exc:  # noqa: BLE001 - any driver failure is a backend error
        raise BackendError(store, f"{what} failed: {type(exc).__name__}: {exc}") from exc
