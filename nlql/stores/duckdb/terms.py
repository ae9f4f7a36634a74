"""A batch's ``<prefix>_terms`` rows counted in Arrow and numpy, with no Python string per word.

The analyzer's terms of a sentence are its ``\\w+`` words, casefolded, without stopwords, stemmed
(:meth:`~nlql.text.analyzer.Analyzer.terms`). For a batch whose sentences are all ASCII, every step but
the stemming is a byte operation Arrow's compute functions do on the whole column: A-Z lowered (ASCII
casefolding), every run of bytes other than ``[a-z0-9_]`` made one space (ASCII ``\\w``), the words split
on spaces (a sentence's words listed in order), stopwords and empty strings dropped. The words are then
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

NOT_WORD = "[^a-z0-9_]+"  # ASCII \w is [A-Za-z0-9_]; the text is lowered first


def ascii_term_rows(analyzer: Any, contents: Sequence[str] | Any) -> tuple[Any, np.ndarray] | None:
    """``(rows, nterms)`` for sentences ``contents`` (a list of strings or an Arrow string array): the
    Arrow table ``(term, unit, tf)`` — per sentence (``unit``, its index) and distinct term, how often
    the term occurs, ordered by term then sentence — and each sentence's number of terms (repeats
    counted), as int64; None unless every sentence is ASCII."""
    pa = import_arrow()
    import pyarrow.compute as pc

    if isinstance(contents, (pa.Array, pa.ChunkedArray)):
        arr = contents.combine_chunks() if isinstance(contents, pa.ChunkedArray) else contents
        if len(arr) and not pc.all(pc.string_is_ascii(arr)).as_py():
            return None
    elif not "".join(contents).isascii():
        return None
    else:
        arr = pa.array(contents, type=pa.string())
    n = len(arr)
    spaced = pc.replace_substring_regex(pc.ascii_lower(arr), NOT_WORD, " ")
    lists = pc.ascii_split_whitespace(spaced)
    words = pc.list_flatten(lists)
    owner = pc.list_parent_indices(lists)
    keep = pc.greater(pc.binary_length(words), 0)
    if analyzer.stopwords:
        keep = pc.and_(keep, pc.invert(pc.is_in(words, value_set=pa.array(sorted(analyzer.stopwords), pa.string()))))
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
