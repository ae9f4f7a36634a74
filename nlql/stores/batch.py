"""One write's documents as columns (:class:`DocBatch`): ingest without an object per document (issue 21).

The engine splits and embeds a batch of documents into columns — ids, texts, metadata, sentences per
document, and per sentence its position, span, content, tail and vector (one matrix) — and hands a
store that declares ``Capabilities.DOC_BATCHES`` (the built-in store and the stores built on it) the batch
itself: it appends the columns to its own, a handful of list extends and numpy copies per batch.

A :class:`DocBatch` is also a ``Sequence[DocRecord]``: indexing or iterating it builds the records
once (and keeps them, so what a reader sets on them, ``entities`` or ``seq``, stays set), which is how
every other store, the BM25 and entity-graph sidecars and a persisted store's log read it. Once its
records exist they are the batch's truth: the columnar path is for a batch nobody has read as records
(:attr:`DocBatch.columnar`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from nlql.stores.base import DocRecord, UnitRecord

__all__ = ["DocBatch", "is_columnar", "latest_per_id"]


class DocBatch(Sequence[DocRecord]):
    """Documents ``doc_ids[i]`` (text, metadata) with ``counts[i]`` sentences each; the sentence columns
    (``positions`` … ``tails``, ``vectors`` rows) hold every document's sentences in order.

    ``seq`` is per document (see :meth:`assign_seq`). The lists are the engine's own (not copied): a
    store may keep them, and must not change them.
    """

    __slots__ = ("doc_ids", "texts", "metadatas", "counts", "positions", "starts", "ends", "contents", "tails",
                 "vectors", "seq", "rows_ahead", "entities", "_unique", "_records")

    def __init__(self, doc_ids: list[str], texts: list[str], metadatas: list[dict[str, Any]], counts: list[int],
                 positions: list[int], starts: list[int], ends: list[int], contents: list[str], tails: list[str],
                 vectors: np.ndarray, unique: bool | None = None) -> None:
        n, rows = len(doc_ids), len(contents)
        if not (len(texts) == len(metadatas) == len(counts) == n
                and len(positions) == len(starts) == len(ends) == len(tails) == len(vectors) == rows
                and sum(counts) == rows):
            raise ValueError("a DocBatch needs one text, metadata and count per id, and one position, span, "
                             "content, tail and vector per sentence")
        self.doc_ids = doc_ids
        self.texts = texts
        self.metadatas = metadatas
        self.counts = counts
        self.positions = positions
        self.starts = starts
        self.ends = ends
        self.contents = contents
        self.tails = tails
        self.vectors = vectors
        self.seq = np.zeros(n, dtype=np.int64)
        #: an estimate of the sentences this batch and the rest of its write (one add_texts call) bring:
        #: a store may make room for them at once (0: not known)
        self.rows_ahead = 0
        #: per sentence, the entity names the engine found for a store that keeps entity links (as
        #: ``DocRecord.entities``, which the records take from it); None: not given
        self.entities: list[list[str]] | None = None
        self._unique = unique  # whether every id is in the batch once (None: not known yet)
        self._records: list[DocRecord] | None = None

    def __len__(self) -> int:
        return len(self.doc_ids)

    @overload
    def __getitem__(self, i: int) -> DocRecord: ...
    @overload
    def __getitem__(self, i: slice) -> list[DocRecord]: ...

    def __getitem__(self, i: int | slice) -> DocRecord | list[DocRecord]:
        return self.records()[i]

    def __iter__(self) -> Iterator[DocRecord]:
        return iter(self.records())

    def __repr__(self) -> str:
        return f"DocBatch({len(self)} documents, {len(self.contents)} sentences)"

    @property
    def columnar(self) -> bool:
        """Whether the columns are the truth (no record has been built, so none was changed)."""
        return self._records is None

    @property
    def unique(self) -> bool:
        """Whether every id is in the batch once (as the engine, which removed repeats, says when it makes one)."""
        if self._unique is None:
            self._unique = len(set(self.doc_ids)) == len(self.doc_ids)
        return self._unique

    @property
    def one_sentence_each(self) -> bool:
        """Whether every document has exactly one sentence (then a sentence's index is its document's)."""
        return len(self.contents) == len(self.doc_ids) and self.counts.count(1) == len(self.counts)

    def assign_seq(self, first: int) -> None:
        """Number the documents ``first, first + 1, …`` in order (the records too, if built)."""
        self.seq = np.arange(first, first + len(self), dtype=np.int64)
        if self._records is not None:
            for r, s in zip(self._records, self.seq.tolist()):
                r.seq = s

    def records(self) -> list[DocRecord]:
        """One :class:`DocRecord` per document (built once; ``vectors`` are views of the batch matrix)."""
        if self._records is None:
            out = []
            row = 0
            pos, starts, ends, contents, tails, vecs = (self.positions, self.starts, self.ends, self.contents,
                                                        self.tails, self.vectors)
            names = self.entities
            for doc_id, text, meta, n, seq in zip(self.doc_ids, self.texts, self.metadatas, self.counts,
                                                  self.seq.tolist()):
                units = [UnitRecord(pos[j], contents[j], starts[j], ends[j], tails[j]) for j in range(row, row + n)]
                out.append(DocRecord(doc_id, text, meta, units, vecs[row : row + n], seq,
                                     None if names is None else names[row : row + n]))
                row += n
            self._records = out
        return self._records


def is_columnar(docs: Sequence[DocRecord]) -> bool:
    """Whether ``docs`` is a :class:`DocBatch` whose columns a store may append as they are."""
    return isinstance(docs, DocBatch) and docs.columnar


def latest_per_id(docs: Sequence[DocRecord]) -> Sequence[DocRecord]:
    """``docs`` with one record per id, the last one, in the order of those last records (a list, or
    the :class:`DocBatch` itself when its ids are distinct)."""
    if isinstance(docs, DocBatch):  # kept as a batch when it can be (its columns are appended as they are)
        if docs.unique:
            return docs  # type: ignore[return-value]
        docs = docs.records()
    if len({d.doc_id for d in docs}) == len(docs):
        return list(docs)
    last = {d.doc_id: i for i, d in enumerate(docs)}
    return [d for i, d in enumerate(docs) if last[d.doc_id] == i]
