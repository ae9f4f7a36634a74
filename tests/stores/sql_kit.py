"""What the SQL stores' tests share: documents, a corpus of awkward metadata, random filters, hostile text.

Used by ``test_pgvector.py`` and ``test_duckdb.py``: both compile the same filters and must agree with
:func:`nlql.stores.pyfilter.row_passes` (nlql.values) row for row.
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from typing import Any

import numpy as np
from hypothesis import strategies as st

from nlql.pushdown import Cond, FAnd, FOr
from nlql.sql.filters import SQL_LIST_OPS
from nlql.stores.base import DocRecord, UnitRecord

DIM = 16
UTC = timezone.utc


def unit_vectors(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_doc(doc_id: str, sentences: list[str], metadata: dict[str, Any], seq: int,
             vectors: np.ndarray) -> DocRecord:
    units, offset = [], 0
    for p, s in enumerate(sentences):
        units.append(UnitRecord(position=p, content=s, start=offset, end=offset + len(s), tail=" "))
        offset += len(s) + 1
    return DocRecord(doc_id=doc_id, text=" ".join(sentences), metadata=metadata, units=units,
                     vectors=vectors, seq=seq)


META_VALUES: list[Any] = [
    0, 1, -3, 7, 2025, 2.5, 0.1, -0.0, 1e16, 10**20, 10**400, 2**53 + 1,
    "2025", "0.10", "1e3", "-7", "٣", " 7", "abc", "ABC", "Abc", "Straße", "STRASSE", "", "a%b", "a_b",
    "x\\y", "ǅ", "İstanbul", "2024-06-01", "2024-06-01T10:00:00Z", "2024-06-01 12:00:00+02:00",
    "2024-06", "2024-13-01", "2023-12-31T23:59:59.999999", True, False, None, [1, 2], {"x": 1},
    # lists (SPEC §11 HAS): numeric strings, mixed types, null and nested members, empty, big integers
    ["abc", "2025", None], [], [2025, 2.5, True, "2024-06-01"], ["ABC", [1], {"x": 1}, "a%b"],
    [10**20, 2**53 + 1, 10**400, "0.10"], [None], ["Straße", "7", 0.1, False],
]
LITERALS: list[Any] = [
    0, 1, 7, 2025, 2.5, 0.1, 1e16, 2**53, -3, float("inf"), 10**400, "2025", "7", "0.1", "abc", "ABC",
    "a", "b", "straße", "", "٣", "x", True, False, None,
    datetime(2024, 6, 1, tzinfo=UTC), datetime(2024, 6, 1, 10, 0), date(2024, 6, 1),
    datetime(2023, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
]
PATTERNS = ["a%", "%b", "a_b", "A%", "%", "_", "%\\%%", "x\\\\y", "%ss%", "Str%", "2024-%", "%1", "", "\\",
            "a\\_b", "__", "%2_"]
NEEDLES = ["a", "A", "ss", "STRASSE", "%", "_", "\\", "", "20", "İ", "i̇", "ǆ", "x\\y", "TAN"]
META_KEYS = ["i", "s", "m", "n", ("nest", "x"), ("nest",), "missing"]


def build_filter_corpus(rng: np.random.Generator) -> list[DocRecord]:
    docs = []
    for i in range(60):
        def pick() -> Any:
            return META_VALUES[int(rng.integers(len(META_VALUES)))]
        meta: dict[str, Any] = {}
        for key in ("i", "s", "m"):
            if rng.random() < 0.85:
                meta[key] = pick()
        meta["n"] = None
        if rng.random() < 0.7:
            meta["nest"] = {"x": pick()} if rng.random() < 0.8 else pick()
        doc_id = ["2025", "doc-7", "Ábc", "2024-06-01", "x_y"][i % 5] + f"{i}" if i % 3 else str(i)
        sentences = [str(pick()) if rng.random() < 0.3 else f"Sentence {j} of {doc_id} ß" for j in range(2)]
        docs.append(make_doc(doc_id, sentences, meta, i + 1, unit_vectors(rng, 2)))
    return docs


def _path(p: Any) -> tuple[str, ...]:
    if isinstance(p, tuple):
        return ("meta", *p)
    if p in ("doc_id", "id", "position", "content"):
        return (p,)
    return ("meta", p)


paths = st.sampled_from([*META_KEYS, "doc_id", "id", "position", "content"]).map(_path)
literal = st.sampled_from(LITERALS)


@st.composite
def leaves(draw: st.DrawFn) -> Cond:
    op = draw(st.sampled_from(sorted(SQL_LIST_OPS)))  # HAS too: the SQL stores keep list members
    path = draw(paths)
    if op in ("in", "not_in", "has_any", "not_has_any", "has_all", "not_has_all"):
        value: Any = tuple(draw(st.lists(literal, max_size=4)))
    elif op in ("is_null", "is_not_null"):
        value = None
    elif op in ("like", "not_like"):
        value = draw(st.sampled_from(PATTERNS))
    elif op in ("contains", "not_contains"):
        value = draw(st.sampled_from(NEEDLES))
    else:
        value = draw(literal)
    return Cond(op, path, value)


filters = st.recursive(
    leaves(),
    lambda inner: st.one_of(st.lists(inner, max_size=3).map(lambda xs: FAnd(tuple(xs))),
                            st.lists(inner, max_size=3).map(lambda xs: FOr(tuple(xs)))),
    max_leaves=5,
)


HOSTILE = [
    "'; DROP TABLE nlql_docs; --", "Robert'); DROP TABLE students;--", "nul\x00byte", "\x00", "\x01\x02\x08",
    "$$dollar$$", "$tag$ quoted $tag$", "back\\slash\\", "\\x00", "%_%", "tab\tnew\nline\r", "😀 𝄞 ☃",
    "ﬁ İ ß Σς", "x" * 10_000, "lone \ud800 surrogate", "\"double\"", "{}[]", "E'\\047'",
]
