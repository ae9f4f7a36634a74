"""Hits as a table: typed columns, then pandas, Arrow or polars (``Hits.to_pandas()`` and friends).

One row per hit. Columns, in order: ``id``, ``doc_id``, ``unit``, ``position``, ``content``; one column per
binding (named like the binding, in the order the query binds them, then ``rerank`` when a reranker ran);
for DOCUMENT and CHUNK hits, the sentence that scored it (``hit.best``): ``best.position``,
``best.content`` and one ``best.<binding>`` per score of that sentence (null where a hit has no
``best``); then one column per metadata key path of the store, flattened and named as a query would
write it (``meta.year``, ``meta.author.name``, ``meta.`content-type```). A hit without a key has null in
that column.

**The columns and their types come from the query and the store's schema, not from the rows**
(:class:`Layout`, which ``engine.search`` attaches to its hits): the same query text on the same store
gives the same columns and types whatever rows come back, none included. A metadata key's type is
decided from every value the store holds (:attr:`nlql.schema.KeyInfo.kinds`), a binding's from its
expression:

==========================================  =========================================================
the key's values in the store / the binding column type
==========================================  =========================================================
only booleans; a comparison, AND, NOT, …    bool
only integers within int64; LENGTH, COUNT   int64
integers and floats; any score; ``/``       float64 (``+ - *`` of integers stay int64)
only strings; LOWER, UPPER, content         string
ISO dates, timestamps with an offset; NOW()  datetime, UTC (a date without an offset is midnight UTC)
only lists of one kind                      list of that kind (string, int64, float64 or bool)
HIGHLIGHT                                   list of [start, end] int64 pairs
nothing but nulls                           float64 for a binding, string for metadata
anything else (mixed, beyond int64, a       string: strings as they are, other values as JSON text
timestamp without an offset)
==========================================  =========================================================

Two cases fall back on the rows, and only these: a binding whose type the query cannot tell (a user
function without a return annotation), and a value the schema did not
foresee (a server store's schema is a sample; a document written after it): its column widens
(int64 to float64, anything else to string) and a key no schema lists is added after the others.
Hits built by hand (no layout) are typed from their rows the same way.

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

import inspect
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any

from nlql import ir
from nlql.errors import MissingDependencyError
from nlql.render import quote_key
from nlql.schema import naive_stamp

#: A result row (:class:`nlql.execute.results.Hit`, which imports this module: not imported here).
Hit = Any

__all__ = ["BASE_COLUMNS", "Column", "Layout", "columns", "layout", "to_arrow", "to_pandas", "to_polars",
           "to_records"]

#: The columns every table starts with, and their types.
BASE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "string"), ("doc_id", "string"), ("unit", "string"), ("position", "int"), ("content", "string"),
)
#: The zone a date or timestamp without an offset is read in (the zone NLQL's own comparisons read it in).
NAIVE_ZONE = "UTC"
_INT64 = (-(2**63), 2**63 - 1)
_SCALAR_KINDS = ("bool", "int", "float", "string")
_FLOAT_CALLS = frozenset({"SIMILARITY", "BM25", "RRF", "FUSE", "INTERLEAVE", "MMR", "RECENCY", "GRAPH", "TEMPORAL"})
_INT_CALLS = frozenset({"LENGTH", "COUNT"})
_BOOL_NODES = (ir.Compare, ir.In, ir.Between, ir.IsNull, ir.TextMatch, ir.Within, ir.Has)
_ANNOTATED = {int: "int", float: "float", bool: "bool", str: "string", datetime: "datetime", date: "datetime",
              "int": "int", "float": "float", "bool": "bool", "str": "string", "datetime": "datetime",
              "date": "datetime"}


@dataclass
class Column:
    """One column: its name, its kind (``bool``, ``int``, ``float``, ``string``, ``datetime`` or
    ``list<kind>``), its values (Python objects already of that kind, None for null), where it came from,
    and how many of its datetimes had no offset (read as UTC)."""

    name: str
    kind: str
    values: list[Any]
    source: str  # "base", "score", "best", "meta", "count" or "group"
    naive: int = 0


@dataclass(frozen=True)
class Layout:
    """The columns of one query's table, decided before any row is read (:func:`layout`).

    ``scores``: (binding, kind) in LET order, ``rerank`` last when a reranker ran; ``best``: (binding,
    kind) of the ``best.`` columns, None when rows are sentences (no ``best``); ``meta``: (column name,
    kind) of every metadata key path of the store's schema, None when no schema could be read (the
    metadata columns then come from the rows); ``groups``: for ``SELECT COUNT(unit) BY …``, (BY key as
    written, kind), and the table is the base columns, ``count`` and one column per key. A kind ``any``
    is decided from the rows."""

    scores: tuple[tuple[str, str], ...]
    best: tuple[tuple[str, str], ...] | None
    meta: tuple[tuple[str, str], ...] | None
    groups: tuple[tuple[str, str], ...] | None = None


# ------------------------------------------------------------------------------------------ kinds


def key_kind(types: Mapping[str, int], kinds: Mapping[str, int]) -> str | None:
    """The column kind of a metadata key from its schema counts (:class:`nlql.schema.KeyInfo` ``types``
    and ``kinds``); None when it only ever holds objects (its children have the columns)."""
    seen = {t for t in types if t not in ("null", "object")}
    if not seen:
        return None if "object" in types and "null" not in types else "string"
    if len(seen) > 1:
        return "string"
    t = next(iter(seen))
    if t == "bool":
        return "bool"
    if t == "date":  # a timestamp without an offset keeps its key text: no time zone is made up for it
        return "string" if kinds.get("naive") else "datetime"
    if t == "number":
        if "bigint" in kinds:
            return "string"
        return "int" if "int" in kinds and "float" not in kinds else "float"
    if t == "list":
        items = {k[5:] for k in kinds if k.startswith("item:")}
        if not items or items == {"string"}:
            return "list<string>"
        if items <= {"int", "float"}:
            return "list<int>" if items == {"int"} else "list<float>"
        return "list<bool>" if items == {"bool"} else "string"
    return "string"


def _merge_kinds(kinds: Iterable[str]) -> str:
    ks = set(kinds) - {"null"}
    if not ks:
        return "null"
    if "any" in ks:
        return "any"
    if len(ks) == 1:
        return next(iter(ks))
    if ks == {"int", "float"}:
        return "float"
    lists = {k for k in ks if k.startswith("list<")}
    if lists == ks and {k[5:-1] for k in ks} == {"int", "float"}:
        return "list<float>"
    return "string"


def _annotated(fn: Any) -> str:
    try:
        ann = inspect.signature(fn).return_annotation
    except (TypeError, ValueError):
        return "any"
    return _ANNOTATED.get(ann, "any") if isinstance(ann, (type, str)) else "any"


def expr_kind(expr: ir.Expr, meta: Mapping[tuple[str, ...], str], bindings: Mapping[str, str],
              functions: Mapping[str, Any] | None = None) -> str:
    """The column kind of an expression's values, from the query alone (``null``: always null, ``any``:
    not known before the rows). ``meta``: key path -> kind (:func:`key_kind`)."""
    def k(e: ir.Expr) -> str:
        return expr_kind(e, meta, bindings, functions)

    if isinstance(expr, ir.Literal):
        v = expr.value
        if v is None:
            return "null"
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, int):
            return "int" if _INT64[0] <= v <= _INT64[1] else "string"
        return "float" if isinstance(v, float) else "string"
    if isinstance(expr, ir.TypedLiteral):
        return "datetime"
    if isinstance(expr, ir.Field):
        return "int" if expr.name == "position" else "string"
    if isinstance(expr, ir.Meta):
        if expr.keys in meta:
            return meta[expr.keys]
        # an object (its children are keys) as JSON text; a key no document has: null
        return "string" if any(p[:len(expr.keys)] == expr.keys for p in meta) else "null"
    if isinstance(expr, ir.Ref):
        return bindings.get(expr.name, "any")
    if isinstance(expr, ir.ListExpr):
        inner = _merge_kinds(k(i) for i in expr.items)
        return "list<string>" if inner == "null" else f"list<{inner}>" if inner in _SCALAR_KINDS else "string"
    if isinstance(expr, ir.Call):
        name = expr.name.upper()
        if name in _FLOAT_CALLS:
            return "float"
        if name in _INT_CALLS:
            return "int"
        if name in ("LOWER", "UPPER"):
            return "string"
        if name in ("NOW", "DATE", "TIMESTAMP"):
            return "datetime"
        if name == "HIGHLIGHT":
            return "list<list<int>>"
        if name == "IF" and len(expr.args) == 3:
            return _merge_kinds([k(expr.args[1]), k(expr.args[2])])
        fn = (functions or {}).get(name) or (functions or {}).get(expr.name)
        return _annotated(fn) if fn is not None else "any"
    if isinstance(expr, ir.Unary):
        if expr.op == "NOT":
            return "bool"
        return "int" if k(expr.operand) == "int" else "float"  # numeric strings are coerced to numbers
    if isinstance(expr, ir.Binary):
        if expr.op in ("AND", "OR"):
            return "bool"
        if expr.op == "/":
            return "float"
        return "int" if k(expr.left) == "int" and k(expr.right) == "int" else "float"
    if isinstance(expr, _BOOL_NODES):
        return "bool"
    return "any"


def layout(plan: Any, schema: Any = None, functions: Mapping[str, Any] | None = None,
           rerank: bool = False) -> Layout | None:
    """The :class:`Layout` of the table of ``plan``'s hits on a store with ``schema``
    (:class:`nlql.schema.Schema`, None when unknown)."""
    meta_kinds: dict[tuple[str, ...], str] = {}
    meta_cols: list[tuple[str, str]] | None = None
    if schema is not None:
        meta_cols = []
        for info in schema.keys:
            kind = key_kind(info.types, getattr(info, "kinds", {}) or {})
            if kind is None:
                continue
            meta_kinds[tuple(info.path)] = kind
            meta_cols.append(("meta." + ".".join(quote_key(p) for p in info.path), kind))
    kinds: dict[str, str] = {}
    count = getattr(plan, "count", None)
    if count is not None:  # a row per group: its count and its keys (a list key counts once per member)
        groups = []
        for label, expr in zip(count.labels, count.keys, strict=True):
            kind = expr_kind(expr, meta_kinds, kinds, functions)
            kind = kind[5:-1] if kind.startswith("list<") else kind
            groups.append((label, "string" if kind == "null" else kind))
        return Layout((), None, (), tuple(groups))
    for b in plan.query.bindings:
        kinds[b.name] = expr_kind(b.expr, meta_kinds, kinds, functions)
    scores = [(n, "float" if kd == "null" else kd) for n, kd in kinds.items()]
    if rerank and "rerank" not in kinds:
        scores.append(("rerank", "float"))
    best = None
    if not plan.unit.rows_are_sentences:
        from nlql.execute.materialise import _best_basis

        slot, names = _best_basis(plan)
        best = tuple((n, dict(scores)[n]) for n in names) if slot is not None else ()
    return Layout(tuple(scores), best, tuple(meta_cols) if meta_cols is not None else None)


def layout_of(hits: Any) -> Layout | None:
    """The layout attached to ``hits`` (``hits.frame``: a Layout, or a function making one), or None."""
    got = getattr(hits, "frame", None)
    if got is not None and not isinstance(got, Layout) and callable(got):
        got = got()
        try:
            hits.frame = got
        except AttributeError:
            pass
    return got if isinstance(got, Layout) else None


# ------------------------------------------------------------------------------------------ values


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


def _datetime(value: Any) -> tuple[datetime | None, bool]:
    """(an ISO-8601 string, date or datetime as an aware UTC datetime, whether it had no offset);
    (None, False) when it is not one."""
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, date):
        dt = datetime(value.year, value.month, value.day)
    elif isinstance(value, str) and 7 <= len(value) <= 64:
        text = value.strip()
        if text[-1:] in "zZ":
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.strptime(text, "%Y-%m") if len(text) == 7 else datetime.fromisoformat(text)
        except ValueError:
            return None, False
    else:
        return None, False
    naive = dt.tzinfo is None
    if naive:
        dt = dt.replace(tzinfo=timezone.utc)  # NAIVE_ZONE
    return dt.astimezone(timezone.utc), naive


def _fits(value: Any, kind: str) -> bool:
    if kind == "string":
        return True
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and _INT64[0] <= value <= _INT64[1]
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "datetime":
        return _datetime(value)[0] is not None and not naive_stamp(value)
    if kind.startswith("list<"):
        inner = kind[5:-1]
        return isinstance(value, list) and all(x is None or _fits(x, inner) for x in value)
    return False


def _fit(kind: str, values: Sequence[Any], empty: str) -> str:
    """``kind`` when every value fits it; else the kind widened to hold them (see the module docstring)."""
    if kind == "any":
        return _infer(values, empty)
    if all(v is None or _fits(v, kind) for v in values):
        return kind
    seen = _infer(values, empty)
    if kind.startswith("list<") or seen.startswith("list<") or kind == "datetime":
        return "string"
    return _merge({kind, seen}) or "string"


def _coerce(values: Sequence[Any], kind: str) -> tuple[list[Any], int]:
    """The values as Python objects of ``kind``, and how many datetimes had no offset."""
    if kind == "float":
        return [None if v is None else float(v) for v in values], 0
    if kind == "list<float>":
        return [None if v is None else [None if x is None else float(x) for x in v] for v in values], 0
    if kind == "string":
        return [None if v is None else _as_text(v) for v in values], 0
    if kind == "datetime":
        out, naive = [], 0
        for v in values:
            dt, was_naive = _datetime(v) if v is not None else (None, False)
            out.append(dt)
            naive += was_naive
        return out, naive
    return list(values), 0


def _column(name: str, kind: str, values: list[Any], source: str, empty: str) -> Column:
    kind = _fit(kind, values, empty)
    coerced, naive = _coerce(values, kind)
    return Column(name, kind, coerced, source, naive)


def columns(hits: Iterable[Hit]) -> list[Column]:
    """The typed columns of a table of ``hits`` (see the module docstring for names and types)."""
    lay = layout_of(hits)
    rows = list(hits)
    out = [Column(name, kind, [getattr(h, name) for h in rows], "base") for name, kind in BASE_COLUMNS]
    taken = {name for name, _ in BASE_COLUMNS}
    if lay is not None and lay.groups is not None:
        out.append(Column("count", "int", [h.count for h in rows], "count"))
        for label, kind in lay.groups:
            out.append(_column(label, kind, [(h.group or {}).get(label) for h in rows], "group", "string"))
        return out

    score_kinds: dict[str, str] = dict(lay.scores) if lay is not None else {}
    for h in rows:
        for key in h.scores:
            score_kinds.setdefault(key, "any")
    for key, kind in score_kinds.items():
        # bindings cannot be named like a built-in field; `unit` is the one base column they can clash with
        name = key if key not in taken else f"scores.{key}"
        out.append(_column(name, kind, [h.scores.get(key) for h in rows], "score", "float"))
        taken.add(name)
    out.extend(_best_columns(rows, lay))

    flat_rows: list[dict[str, Any]] = []
    meta_kinds: dict[str, str] = dict(lay.meta) if lay is not None and lay.meta is not None else {}
    for h in rows:
        flat: dict[str, Any] = {}
        _flatten(h.metadata, "meta", flat)
        flat_rows.append(flat)
        for name in flat:
            meta_kinds.setdefault(name, "any")
    for name, kind in meta_kinds.items():
        out.append(_column(name, kind, [f.get(name) for f in flat_rows], "meta", "string"))
    return out


def _best_columns(rows: Sequence[Hit], lay: Layout | None) -> list[Column]:
    """``best.position``, ``best.content`` and ``best.<binding>`` for grouped units."""
    if lay is not None:
        if lay.best is None:
            return []
    elif not any(h.best is not None or h.unit in ir.GROUPED_UNITS for h in rows):
        return []
    bests = [h.best for h in rows]
    out = [Column("best.position", "int", [b.position if b else None for b in bests], "best"),
           Column("best.content", "string", [b.content if b else None for b in bests], "best")]
    names: dict[str, str] = dict(lay.best) if lay is not None and lay.best is not None else {}
    for b in bests:
        if b is not None:
            for key in b.scores:
                names.setdefault(key, "any")
    for key, kind in names.items():
        values = [b.scores.get(key) if b else None for b in bests]
        out.append(_column(f"best.{key}", kind, values, "best", "float"))
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
    """A ``pyarrow.Table`` (``pip install 'nlql-engine[frames]'``). Datetimes are ``timestamp[us, UTC]``;
    a column that held values without an offset (read as UTC) says how many in its field metadata
    (``nlql.naive_as_utc``)."""
    pa = _require("pyarrow")
    scalar = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "string": pa.string(),
              "datetime": pa.timestamp("us", tz="UTC")}

    def arrow_type(kind: str) -> Any:
        if kind.startswith("list<"):
            return pa.list_(arrow_type(kind[5:-1]))
        return scalar[kind]

    cols = columns(hits)
    fields = [pa.field(c.name, arrow_type(c.kind), nullable=c.source != "base",
                       metadata={"nlql.naive_as_utc": str(c.naive)} if c.naive else None) for c in cols]
    arrays = [pa.array(c.values, type=arrow_type(c.kind)) for c in cols]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def to_pandas(hits: Iterable[Hit]) -> Any:
    """A ``pandas.DataFrame`` with nullable dtypes (``string``, ``Int64``, ``Float64``, ``boolean``,
    ``datetime64[us, UTC]``; lists as ``object``), so a missing value is ``pd.NA`` in every column (``NaT``
    in a datetime column) (``pip install 'nlql-engine[frames]'``)."""
    pd = _require("pandas")
    dtypes = {"bool": "boolean", "int": "Int64", "float": "Float64", "string": "string",
              "datetime": "datetime64[us, UTC]"}
    data = {}
    for c in columns(hits):
        if c.kind.startswith("list<"):  # lists stay Python lists; a missing one is pd.NA, as in every column
            data[c.name] = pd.Series([pd.NA if v is None else v for v in c.values], dtype="object")
        else:
            data[c.name] = pd.Series(c.values, dtype=dtypes[c.kind])
    return pd.DataFrame(data)


def to_polars(hits: Iterable[Hit]) -> Any:
    """A ``polars.DataFrame`` (``pip install 'nlql-engine[frames]'``); datetimes are ``Datetime("us", "UTC")``."""
    pl = _require("polars")
    scalar = {"bool": pl.Boolean, "int": pl.Int64, "float": pl.Float64, "string": pl.String,
              "datetime": pl.Datetime("us", "UTC")}

    def polars_type(kind: str) -> Any:
        if kind.startswith("list<"):
            return pl.List(polars_type(kind[5:-1]))
        return scalar[kind]

    cols = columns(hits)
    return pl.DataFrame([pl.Series(c.name, c.values, dtype=polars_type(c.kind)) for c in cols])
