"""A batch's ``<prefix>_terms`` rows counted in Arrow and numpy, with no Python string per word of an
ASCII sentence.

The analyzer's terms of a sentence are its ``\\w+`` words, casefolded, without stopwords, stemmed
(:meth:`~nlql.text.analyzer.Analyzer.terms`). For the ASCII sentences of a batch every step but the
stemming is a byte operation on all of them at once: one ``bytes.translate`` lowers A-Z (ASCII
casefolding) and makes every byte other than ``[a-z0-9_]`` (ASCII ``\\w``) a space, an Arrow string
per sentence over those bytes is split on the spaces by Arrow (each sentence's words in order), and
Arrow drops stopwords and empty strings. The words are then dictionary-encoded, so that only each
distinct word (tens of thousands in a batch of a million words) is stemmed in Python
(:meth:`~nlql.text.analyzer.Analyzer.stems`, which remembers them). The other sentences (a curly quote
or a dash is enough) get the analyzer's own terms (``terms_flat``). The (term, sentence) pairs of both
are counted by one sort of integer codes, as the table keeps them: by term, in the byte order DuckDB
compares text in, then by sentence.

:func:`term_rows` gives the same rows and counts as counting ``Analyzer.terms`` sentence by sentence
(``tests/stores/test_duckdb_ingest.py`` checks it on awkward ASCII, mixed and random batches).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nlql.sql.ingest import escaper, verbatim
from nlql.stores.duckdb.driver import import_arrow
from nlql.text.analyzer import ASCII_WORD_BYTES

__all__ = ["count_rows", "term_rows"]



def term_rows(analyzer: Any, contents: Sequence[str], escape: Callable[[str], str] | None = None) -> tuple[Any, np.ndarray]:
    """``(rows, nterms)`` for sentences ``contents``: the Arrow table ``(term, unit, tf)`` — per sentence
    (``unit``, its index) and distinct term, how often the term occurs, ordered by term then sentence —
    and each sentence's number of terms (repeats counted), as int64. The ASCII sentences' words are
    found in Arrow; the others' terms are the analyzer's (:meth:`~nlql.text.analyzer.Analyzer.terms_flat`),
    written with ``escape`` (None: verbatim) when one of them needs it."""
    pa = import_arrow()
    n = len(contents)
    nterms = np.zeros(n, dtype=np.int64)
    if "".join(contents).isascii():
        plain, others = np.arange(n, dtype=np.int64), np.zeros(0, dtype=np.int64)
    else:
        flags = np.fromiter(map(str.isascii, contents), dtype=bool, count=n)
        plain, others = np.flatnonzero(flags), np.flatnonzero(~flags)
    # per term occurrence: its sentence, and its code in a dictionary of the part's distinct terms
    units: list[np.ndarray] = []
    codes: list[np.ndarray] = []
    dictionaries: list[Any] = []
    if len(plain):
        words, owner = _ascii_words(contents if len(plain) == n else [contents[i] for i in plain.tolist()],
                                    analyzer.stopwords)
        if len(words):
            coded = words.dictionary_encode()
            # each distinct word stemmed once; two words may share a stem (codes of the stems, not words)
            stems = _stems(analyzer, coded.dictionary).dictionary_encode()
            codes.append(stems.indices.to_numpy()[coded.indices.to_numpy()].astype(np.int64, copy=False))
            dictionaries.append(stems.dictionary)
            units.append(plain[owner])
            nterms[plain] = np.bincount(owner, minlength=len(plain))
    if len(others):
        terms, counts = analyzer.terms_flat([contents[i] for i in others.tolist()])
        if escape is not None and terms:
            esc = escaper(escape, terms)
            if esc is not verbatim:
                terms = [esc(t) for t in terms]
        if terms:
            coded = pa.array(terms, type=pa.string()).dictionary_encode()
            codes.append(coded.indices.to_numpy().astype(np.int64, copy=False))
            dictionaries.append(coded.dictionary)
            units.append(np.repeat(others, np.asarray(counts, dtype=np.int64)))
        nterms[others] = counts
    if not codes:
        return pa.table({"term": pa.array([], pa.string()), "unit": pa.array([], pa.int64()),
                         "tf": pa.array([], pa.int32())}), nterms
    if len(dictionaries) == 1:
        distinct, code = dictionaries[0], codes[0]
    else:  # the parts' dictionaries made one: each part's codes mapped into it
        both = pa.concat_arrays(dictionaries).dictionary_encode()
        distinct, into = both.dictionary, both.indices.to_numpy()
        code = np.concatenate([into[c] for c in (codes[0], codes[1] + len(dictionaries[0]))])
    unit = np.concatenate(units) if len(units) > 1 else units[0]
    return count_rows(distinct, code, unit, n), nterms


def count_rows(distinct: Any, code: np.ndarray, unit: np.ndarray, n: int) -> Any:
    """The ``(term, unit, tf)`` table of term occurrences: ``distinct`` the terms (an Arrow string
    array), ``code`` each occurrence's index into it, ``unit`` its sentence (of ``n``); per sentence and
    distinct term, how often it occurs, ordered by term (byte order, what DuckDB compares text in) then
    sentence, from one sort of integers (each term's rank times the sentences, plus the sentence)."""
    pa = import_arrow()
    import pyarrow.compute as pc

    order = pc.sort_indices(distinct).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    width = max(n, 1)
    pairs, tf = np.unique(rank[code] * width + unit, return_counts=True)
    term_rank, unit_of = np.divmod(pairs, width)
    terms_col = distinct.take(pa.array(order)).take(pa.array(term_rank))
    return pa.table({"term": terms_col, "unit": pa.array(unit_of), "tf": pa.array(tf.astype(np.int32))})


def _stems(analyzer: Any, words: Any) -> Any:
    """The stems of distinct ASCII ``words`` (an Arrow string array), as an Arrow string array. A word of
    digits is its own stem (:meth:`~nlql.text.analyzer.Analyzer.stems` says so for every stemmer), so only
    the others go to the analyzer: a batch's numbers are mostly new words, and at 100k sentences of
    bench/duckdb_ingest.py's corpus, 0.06-0.09 s of stemming became 0.002-0.004 s."""
    pa = import_arrow()
    import pyarrow.compute as pc

    words = words.cast(pa.string())
    digits = pc.ascii_is_decimal(words)
    if not pc.any(digits).as_py():
        return pa.array(analyzer.stems(words.to_pylist()), type=pa.string())
    others = pc.invert(digits)
    stemmed = pa.array(analyzer.stems(words.filter(others).to_pylist()), type=pa.string())
    return pc.replace_with_mask(words, others, stemmed)


def _ascii_words(contents: Sequence[str], stopwords: frozenset[str]) -> tuple[Any, np.ndarray]:
    """The words of ASCII sentences (an Arrow string array, stopwords left out) and each one's sentence."""
    pa = import_arrow()
    import pyarrow.compute as pc

    n = len(contents)
    # the sentences' bytes with A-Z lowered and every other non-word byte a space, one Arrow string per
    # sentence over them (ASCII: a character is a byte), split on the spaces
    ends = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, contents), dtype=np.int64, count=n), out=ends[1:])
    data = "".join(contents).encode("ascii").translate(ASCII_WORD_BYTES)
    spaced = pa.LargeStringArray.from_buffers(n, pa.array(ends, type=pa.int64()).buffers()[1], pa.py_buffer(data))
    lists = pc.ascii_split_whitespace(spaced)
    words = pc.list_flatten(lists)
    owner = pc.list_parent_indices(lists)
    keep = pc.greater(pc.binary_length(words), 0)
    if stopwords:
        keep = pc.and_(keep, pc.invert(pc.is_in(words, value_set=pa.array(sorted(stopwords), pa.large_string()))))
    return words.filter(keep), owner.filter(keep).to_numpy().astype(np.int64, copy=False)
