"""nlql.sql.ingest.prepare gives, value for value, what the per-document codec functions give."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from nlql import values as V
from nlql.sql.codec import escape_text, exact_json, flatten_metadata, list_members, shadow
from nlql.sql.ingest import prepare
from nlql.stores.base import DocRecord, UnitRecord
from nlql.text.analyzer import Analyzer

METAS = [
    {"status": "published", "tag": "t7", "year": 2023, "ok": True, "score": 0.5},
    {"status": "Published", "year": "2024", "when": "2025-01-02", "neg": -0.0, "big": 2**70, "none": None},
    {"a": {"b": [1, "x", None, "x"]}, "tags": ["rag", "2025"], "t": (1, 2)},
    {"nan": float("nan"), "inf": float("inf"), 3: "int key", "nul": "a\x00b", "sur": "\ud800"},
    {},
    {"one": 1, "true": True, "zero": 0.0, "flt": 1.0},
    {3: "an int key only"}, {"sur": "x\udc00"}, {"l": [1, 2]}, {"d": {}}, {"\ud800": 1}, {"b": False, "i": 1},
]
TEXTS = ["Solar energy grows", "2025-01-02 report", "-3.5", "a\x00 b \ud800c", "", "ÉCOLE Straße",
         "+1", ".5 of it", "١٢ digits", "x", "y", "z"]


def docs() -> list[DocRecord]:
    out = []
    for i, (meta, text) in enumerate(zip(METAS, TEXTS, strict=True)):
        units = [UnitRecord(0, text, 0, len(text), " "), UnitRecord(1, text.upper(), 0, len(text))] if text else []
        vecs = np.full((len(units), 3), 0.5, dtype=np.float32)
        out.append(DocRecord(f"d{i}" if i % 2 else str(i), text, meta, units, vecs, i + 1))
    return out


def test_prepare_matches_the_codec_per_document() -> None:
    a = Analyzer()
    ds = docs()
    p = prepare(ds, 3, escape_text, a)
    for i, d in enumerate(ds):
        meta = V.normalize_metadata(d.metadata)
        assert p.doc_ids[i] == escape_text(d.doc_id) and p.texts[i] == escape_text(d.text)
        assert p.metadata[i] == exact_json(meta)
        assert p.flat[i] == list(flatten_metadata(meta).items())
        assert p.members[i] == list_members(meta)
        assert (p.folds[i], p.nums[i], p.stamps[i]) == shadow(d.doc_id)
    assert math.copysign(1, dict(p.flat[1])['["neg"]']["n"]) == -1  # -0.0 is not shared with 0.0
    units = [(d, u) for d in ds for u in d.units]
    assert len(p.contents) == len(units) == len(p.vectors)
    for j, (d, u) in enumerate(units):
        assert p.unit_ids[j] == escape_text(d.doc_id) and p.positions[j] == u.position
        assert p.contents[j] == escape_text(u.content) and p.tails[j] == escape_text(u.tail)
        assert (p.unit_folds[j], p.unit_nums[j], p.unit_stamps[j]) == shadow(u.content)
        assert p.terms is not None and p.terms[j] == [escape_text(t) for t in a.terms(u.content)]
        assert p.nterms[j] == len(a.terms(u.content))


def test_prepare_refuses_bad_vectors_and_metadata() -> None:
    d = docs()[0]
    bad = DocRecord(d.doc_id, d.text, d.metadata, d.units, np.full((2, 3), np.nan, dtype=np.float32), 1)
    with pytest.raises(ValueError, match="NaN"):
        prepare([bad], 3, escape_text)
    with pytest.raises(ValueError, match="expected 2×4"):
        prepare([d], 4, escape_text)
    with pytest.raises(ValueError, match="must be a dict"):
        prepare([DocRecord("x", "t", [1], [], np.zeros((0, 3), dtype=np.float32), 1)], 3, escape_text)


def test_a_batch_read_as_columns_gives_what_its_records_give() -> None:
    # a store that takes the engine's DocBatch passes its columns; the rows must not change
    from nlql.stores.batch import DocBatch

    ds = docs()
    units = [u for d in ds for u in d.units]
    batch = DocBatch([d.doc_id for d in ds], [d.text for d in ds], [d.metadata for d in ds], [len(d.units) for d in ds],
                     [u.position for u in units], [u.start for u in units], [u.end for u in units],
                     [u.content for u in units], [u.tail for u in units], np.concatenate([d.vectors for d in ds]))
    batch.assign_seq(1)
    a = Analyzer()
    by_columns = prepare([], 3, escape_text, a, columns=batch)
    assert batch.columnar  # read as columns: no record was built
    by_records = prepare(ds, 3, escape_text, a)
    for name in ("doc_ids", "seqs", "texts", "metadata", "flat", "members", "folds", "nums", "stamps", "unit_ids",
                 "positions", "contents", "starts", "ends", "tails", "unit_folds", "unit_nums", "unit_stamps", "nterms",
                 "terms"):
        assert getattr(by_columns, name) == getattr(by_records, name), name
    assert np.array_equal(by_columns.vectors, by_records.vectors)
    bad = DocBatch(["x"], ["t"], [{}], [1], [0], [0], [1], ["t"], [""], np.full((1, 3), np.inf, dtype=np.float32))
    with pytest.raises(ValueError, match="'x': vectors contain NaN or infinity"):
        prepare([], 3, escape_text, columns=bad)


UNIFORM = [  # batches whose metadata share their keys (read a key at a time), and some that cannot be
    [{"status": "published", "year": 2023, "ok": True, "score": 0.5, "when": "2025-01-02", "n": None},
     {"status": "Draft", "year": 2024, "ok": False, "score": -0.0, "when": "x", "n": "12"},
     {"status": "published", "year": 2023, "ok": True, "score": 0.0, "when": "2025-01-02", "n": 1},
     {"status": "a\x00b", "year": True, "ok": 1, "score": 2, "when": None, "n": 1.0}],
    [{}, {}, {}],
    [{"k": "v"}],
    [{"a": 1, "b": 2}, {"b": 2, "a": 1}],  # the same keys in another order
    [{"s": "fine"}, {"s": "lone \ud800"}],  # a lone surrogate
    [{"f": 1.0}, {"f": float("nan")}],
    [{"l": [1]}, {"l": [2, 3]}],
    [{"x": 1}, None, {"x": 2}],
]


@pytest.mark.parametrize("metas", UNIFORM, ids=[f"batch{i}" for i in range(len(UNIFORM))])
def test_a_batch_of_one_shape_gives_what_the_codec_gives_per_document(metas: list[Any]) -> None:
    ds = [DocRecord(f"d{i}", f"text {i}", m, [UnitRecord(0, f"text {i}", 0, 6)], np.full((1, 3), 0.5, dtype=np.float32),
                    i + 1) for i, m in enumerate(metas)]
    p = prepare(ds, 3, escape_text)
    for i, d in enumerate(ds):
        meta = V.normalize_metadata(d.metadata or {})
        assert p.metadata[i] == exact_json(meta)
        assert p.flat[i] == list(flatten_metadata(meta).items())
        for (_, got), (_, want) in zip(p.flat[i], flatten_metadata(meta).items(), strict=True):
            assert {k: (v, math.copysign(1, v) if type(v) is float else None) for k, v in got.items()} == \
                   {k: (v, math.copysign(1, v) if type(v) is float else None) for k, v in want.items()}
        assert p.members[i] == list_members(meta)
    assert sum(p.flat_counts) == len(p.flat_index) and all(0 <= j < len(p.pairs) for j in p.flat_index)


def test_the_shadow_columns_are_the_codecs_for_numbers_dates_and_ids() -> None:
    strings = ["0", "007", "12345", "1" * 300, "1" * 301, "9" * 400, "9" * 401, "٣٤", "+1", "-2", ".5", "1e5",
               "2025-01-02", "2025-01-02T10:00:00Z", "12-3", "1.5", "x", "ÉCOLE", "a\x00b", "\ud800x"]
    ds = [DocRecord(s, s, {}, [UnitRecord(0, s, 0, len(s))] if s else [], np.full((1, 3), 0.5, dtype=np.float32), i + 1)
          for i, s in enumerate(strings)]
    p = prepare(ds, 3, escape_text)
    assert list(zip(p.folds, p.nums, p.stamps, strict=True)) == [shadow(s) for s in strings]
    assert list(zip(p.unit_folds, p.unit_nums, p.unit_stamps, strict=True)) == [shadow(s) for s in strings]
