"""Hits as a table: typed columns, then pandas, Arrow or polars (``Hits.to_pandas()`` and friends).

One row per hit. Columns, in order: ``id``, ``doc_id``, ``unit``, ``position``, ``content``; one column per
score binding (named like the binding, in the order the query binds them); when any hit is a DOCUMENT or
CHUNK, the sentence that scored it (``hit.best``): ``best.position``, ``best.content`` and one
``best.<binding>`` per score of that sentence (null where a hit has no ``best``); then one column per
metadata key path, flattened and named as a query would write it (``meta.year``, ``meta.author.name``,
``meta.`content-type```). A hit without a key has null in that column.

Every column has one type, decided from all of its non-null values:

==========================  ===================================================================
values seen                 column type
==========================  ===================================================================
only booleans               bool
only integers (int64)       int64
integers and floats         float64
only strings                string
only lists of one kind      list of that kind (string, int64, float64 or bool)
nothing but nulls           float64 for a score, string for metadata
anything else (mixed)       string: strings as they are, other values as JSON text
==========================  ===================================================================

The table is built in plain Python (:func:`columns`); pandas, pyarrow and polars are imported only by
the conversion that needs them, and a missing one names ``pip install 'nlql-engine[frames]'``.

>>> from nlql.execute.results import Hit, Hits
>>> hits = Hits([Hit("a#0", "a", "SENTENCE", 0, "Agents call tools.", {"year": 2024}, {"rel": 0.8}),
...              Hit("b#0", "b", "SENTENCE", 0, "Cats sleep.", {"lang": "en"}, {"rel": 0.2})])
>>> [(c.name, c.kind) for c in columns(hits)]  # doctest: +NORMALIZE_WHITESPACE
[('id', 'string'), ('doc_id', 'string'), ('unit', 'string'), ('position', 'int'), ('content', 'string'),
 ('rel', 'float'), ('meta.year', 'int'), ('meta.lang', 'string')]
>>> columns(hits)[-1].values
[None, 'en']
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nlql import ir
from nlql.errors import MissingDependencyError
from nlql.render import quote_key

#: A result row (:class:`nlql.execute.results.Hit`, which imports this module: not imported here).
Hit = Any

__all__ = ["BASE_COLUMNS", "Column", "columns", "to_arrow", "to_pandas", "to_polars", "to_records"]

#: The columns every table starts with, and their types.
BASE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "string"), ("doc_id", "string"), ("unit", "string"), ("position", "int"), ("content", "string"),
)
_INT64 = (-(2**63), 2**63 - 1)
_SCALAR_KINDS = ("bool", "int", "float", "string")


@dataclass
class Column:
    """One column: its name, its kind (``bool``, ``int``, ``float``, ``string`` or ``list<kind>``), its
    values (Python objects already of that kind, None for null) and where it came from."""

    name: str
    kind: str
    values: list[Any]
    source: str  # "base", "score", "best" or "meta"


def _flatten(meta: Mapping[str, Any], prefix: str, out: dict[str, Any]) -> None:
    for key, value in meta.items():
        name = f"{prefix}.{quote_key(str(key))}"
        if isinstance(value, Mapping):
            _flatten(value, name, out)
        else:
            out[name] = value


def _scalar_kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if _INT64[0] <= value <= _INT64[1] else None  # too big for int64: mixed
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return None


def _merge(kinds: set[str]) -> str | None:
    """One kind for a set of scalar kinds, or None when they do not share one."""
    if len(kinds) == 1:
        return next(iter(kinds))
    if kinds == {"int", "float"}:
        return "float"
    return None


def _infer(values: Sequence[Any], empty: str) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return empty
    if all(isinstance(v, list) for v in present):
        inner: set[str] = set()
        for v in present:
            for item in v:
                if item is None:
                    continue
                k = _scalar_kind(item)
                if k is None:
                    return "string"
                inner.add(k)
        merged = _merge(inner) if inner else "string"
        return f"list<{merged}>" if merged else "string"
    kinds: set[str] = set()
    for v in present:
        k = _scalar_kind(v)
        if k is None:
            return "string"
        kinds.add(k)
    return _merge(kinds) or "string"


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _coerce(values: Sequence[Any], kind: str) -> list[Any]:
    if kind == "float":
        return [None if v is None else float(v) for v in values]
    if kind == "list<float>":
        return [None if v is None else [None if x is None else float(x) for x in v] for v in values]
    if kind == "string":
        return [None if v is None else _as_text(v) for v in values]
    return list(values)


def columns(hits: Iterable[Hit]) -> list[Column]:
    """The typed columns of a table of ``hits`` (see the module docstring for names and types)."""
    rows = list(hits)
    out = [Column(name, kind, [getattr(h, name) for h in rows], "base") for name, kind in BASE_COLUMNS]
    taken = {name for name, _ in BASE_COLUMNS}

    score_names: dict[str, None] = {}
    for h in rows:
        score_names.update(dict.fromkeys(h.scores))
    for key in score_names:
        values = [h.scores.get(key) for h in rows]
        kind = _infer(values, "float")
        # bindings cannot be named like a built-in field; `unit` is the one base column they can clash with
        name = key if key not in taken else f"scores.{key}"
        out.append(Column(name, kind, _coerce(values, kind), "score"))
        taken.add(name)
    out.extend(_best_columns(rows))

    flat_rows: list[dict[str, Any]] = []
    meta_names: dict[str, None] = {}
    for h in rows:
        flat: dict[str, Any] = {}
        _flatten(h.metadata, "meta", flat)
        flat_rows.append(flat)
        meta_names.update(dict.fromkeys(flat))
    for name in meta_names:
        values = [f.get(name) for f in flat_rows]
        kind = _infer(values, "string")
        out.append(Column(name, kind, _coerce(values, kind), "meta"))
    return out


def _best_columns(rows: Sequence[Hit]) -> list[Column]:
    """``best.position``, ``best.content`` and ``best.<binding>`` when any row is a grouped unit."""
    if not any(h.best is not None or h.unit in ir.GROUPED_UNITS for h in rows):
        return []
    bests = [h.best for h in rows]
    out = [Column("best.position", "int", [b.position if b else None for b in bests], "best"),
           Column("best.content", "string", [b.content if b else None for b in bests], "best")]
    names: dict[str, None] = {}
    for b in bests:
        if b is not None:
            names.update(dict.fromkeys(b.scores))
    for key in names:
        values = [b.scores.get(key) if b else None for b in bests]
        kind = _infer(values, "float")
        out.append(Column(f"best.{key}", kind, _coerce(values, kind), "best"))
    return out


def to_records(hits: Iterable[Hit]) -> list[dict[str, Any]]:
    """One flat dict per hit, keyed by column name (for CSV and similar row-oriented writers)."""
    cols = columns(hits)
    n = len(cols[0].values) if cols else 0
    return [{c.name: c.values[i] for c in cols} for i in range(n)]


# --------------------------------------------------------------------------------------- libraries


def _require(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError("frames", module) from None


def to_arrow(hits: Iterable[Hit]) -> Any:
    """A ``pyarrow.Table`` (``pip install 'nlql-engine[frames]'``)."""
    pa = _require("pyarrow")
    scalar = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "string": pa.string()}

    def arrow_type(kind: str) -> Any:
        if kind.startswith("list<"):
            return pa.list_(scalar[kind[5:-1]])
        return scalar[kind]

    cols = columns(hits)
    fields = [pa.field(c.name, arrow_type(c.kind), nullable=c.source != "base") for c in cols]
    arrays = [pa.array(c.values, type=arrow_type(c.kind)) for c in cols]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def to_pandas(hits: Iterable[Hit]) -> Any:
    """A ``pandas.DataFrame`` with nullable dtypes (``string``, ``Int64``, ``Float64``, ``boolean``; lists
    as ``object``), so a missing value is ``pd.NA`` in every column (``pip install 'nlql-engine[frames]'``)."""
    pd = _require("pandas")
    dtypes = {"bool": "boolean", "int": "Int64", "float": "Float64", "string": "string"}
    data = {}
    for c in columns(hits):
        if c.kind.startswith("list<"):  # lists stay Python lists; a missing one is pd.NA, as in every column
            data[c.name] = pd.Series([pd.NA if v is None else v for v in c.values], dtype="object")
        else:
            data[c.name] = pd.Series(c.values, dtype=dtypes[c.kind])
    return pd.DataFrame(data)


def to_polars(hits: Iterable[Hit]) -> Any:
    """A ``polars.DataFrame`` (``pip install 'nlql-engine[frames]'``)."""
    pl = _require("polars")
    scalar = {"bool": pl.Boolean, "int": pl.Int64, "float": pl.Float64, "string": pl.String}

    def polars_type(kind: str) -> Any:
        if kind.startswith("list<"):
            return pl.List(scalar[kind[5:-1]])
        return scalar[kind]

    cols = columns(hits)
    return pl.DataFrame([pl.Series(c.name, c.values, dtype=polars_type(c.kind)) for c in cols])
