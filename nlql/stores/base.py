"""The Store protocol and the records the engine and the stores exchange.

Every backend sits behind this one small interface. The engine owns splitting, embedding, BM25,
grouping into units, ordering and the residual filter; a store owns rows, vectors and whatever part of
WHERE its ``Capabilities`` (in :mod:`nlql.pushdown`) say it can evaluate with exactly NLQL's semantics.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from nlql.errors import BackendError, NLQLError
from nlql.pushdown import Capabilities, Filter, NativeFilter


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
    - ``get_info(key)`` / ``set_info(key, value)``: a small persistent key/value record beside the data,
      kept where the data is (a file, a server) so every process sees it. The engine keeps there what
      built the store (:mod:`nlql.stores.record`: the embedder and the BM25 analyzer). ``get_info`` may
      be called before ``open`` and returns None for a key never set (or a store not created yet);
      ``set_info`` is called after ``open``, before the first ``upsert``.
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
    def get_info(self, key: str) -> str | None: ...
    def set_info(self, key: str, value: str) -> None: ...
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
