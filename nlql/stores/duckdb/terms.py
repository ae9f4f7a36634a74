"""A batch's ``<prefix>_terms`` rows counted in Arrow and numpy, with no Python string per word.

The analyzer's terms of a sentence are its ``\\w+`` words, casefolded, without stopwords, stemmed
(:meth:`~nlql.text.analyzer.Analyzer.terms`). For a batch whose sentences are all ASCII, every step but
the stemming is a byte operation on the whole batch: one ``bytes.translate`` lowers A-Z (ASCII
casefolding) and makes every byte other than ``[a-z0-9_]`` (ASCII ``\\w``) a space, an Arrow string
per sentence over those bytes is split on the spaces by Arrow (each sentence's words in order), and
stopwords and empty strings are dropped by Arrow. The words are then
dictionary-encoded, so that only each distinct word (tens of thousands in a batch of a million words)
is stemmed in Python (:meth:`~nlql.text.analyzer.Analyzer.stems`, which remembers them), and the
(term, sentence) pairs are counted by one sort of integer codes, as the table keeps them: by term, in
the byte order DuckDB compares text in, then by sentence.

:func:`ascii_term_rows` gives the same rows and counts as counting ``Analyzer.terms_flat`` of the same
sentences (``tests/stores/test_duckdb_ingest.py`` checks it on awkward text); any other batch
(non-ASCII text) returns None and takes that path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nlql.stores.duckdb.driver import import_arrow

__all__ = ["ascii_term_rows"]

# ASCII \w is [A-Za-z0-9_] and casefolding lowers A-Z: each byte lowered, or a space if no word byte
WORD_BYTES = bytes(c + 32 if 65 <= c <= 90 else c if (48 <= c <= 57 or 97 <= c <= 122 or c == 95) else 32
                   for c in range(256))


def ascii_term_rows(analyzer: Any, contents: Sequence[str]) -> tuple[Any, np.ndarray] | None:
    """``(rows, nterms)`` for sentences ``contents``: the Arrow table ``(term, unit, tf)`` — per sentence
    (``unit``, its index) and distinct term, how often the term occurs, ordered by term then sentence —
    and each sentence's number of terms (repeats counted), as int64; None unless every sentence is ASCII."""
    pa = import_arrow()
    import pyarrow.compute as pc

    joined = "".join(contents)
    if not joined.isascii():
        return None
    n = len(contents)
    # the batch's bytes with A-Z lowered and every other non-word byte a space, one Arrow string per
    # sentence over them (ASCII: a character is a byte), split on the spaces
    ends = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, contents), dtype=np.int64, count=n), out=ends[1:])
    offsets = pa.array(ends, type=pa.int64())
    spaced = pa.LargeStringArray.from_buffers(n, offsets.buffers()[1], pa.py_buffer(joined.encode("ascii").translate(WORD_BYTES)))
    lists = pc.ascii_split_whitespace(spaced)
    words = pc.list_flatten(lists)
    owner = pc.list_parent_indices(lists)
    keep = pc.greater(pc.binary_length(words), 0)
    if analyzer.stopwords:
        keep = pc.and_(keep, pc.invert(pc.is_in(words, value_set=pa.array(sorted(analyzer.stopwords), pa.large_string()))))
    words = words.filter(keep)
    unit = owner.filter(keep).to_numpy().astype(np.int64, copy=False)
    nterms = np.bincount(unit, minlength=n).astype(np.int64, copy=False)
    if not len(words):
        return pa.table({"term": pa.array([], pa.string()), "unit": pa.array([], pa.int64()),
                         "tf": pa.array([], pa.int32())}), nterms
    coded = words.dictionary_encode()
    stems = pa.array(analyzer.stems(coded.dictionary.to_pylist()), type=pa.string()).dictionary_encode()
    # each distinct stem's rank in byte order (two words may share a stem: codes of the stems, not words)
    distinct = stems.dictionary
    order = pc.sort_indices(distinct).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    word_rank = rank[stems.indices.to_numpy()]
    width = max(n, 1)
    codes, tf = np.unique(word_rank[coded.indices.to_numpy()] * width + unit, return_counts=True)
    term_rank, unit_of = np.divmod(codes, width)
    terms = distinct.take(pa.array(order)).take(pa.array(term_rank))
    return pa.table({"term": terms, "unit": pa.array(unit_of), "tf": pa.array(tf.astype(np.int32))}), nterms
