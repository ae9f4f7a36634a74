"""What a store holds: its size, its embedder and analyzer, and every metadata key with the types seen.

:class:`MetaSummary` counts metadata as documents come and go (the built-in store keeps one in its
:class:`~nlql.stores.memory.table.RowTable`, updated on every upsert and delete, so reading it costs nothing
per call). A store that keeps one declares ``Capabilities.DESCRIBES_DATA`` and answers
``describe_data(sample)`` (:class:`~nlql.stores.base.DescribesData`); a server store answers from a
bounded sample of its documents and says so. For any other store the engine samples through the
generic Store API (:func:`sample_summary`).

:func:`data_warnings` reads a :class:`Schema` to warn about a query that names a metadata key no
document has (with did-you-mean over the real keys) or compares a key with a value of a type it never
holds. Warnings never change a result.

Neutral ground: imported by the stores, the checker and the engine; imports none of them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nlql.errors import Diagnostic

#: Distinct values counted per key; past it new values are not counted (``values_complete`` False).
MAX_DISTINCT = 256
#: Common values reported per key.
TOP_VALUES = 5
#: Documents a sampled schema reads by default.
DEFAULT_SAMPLE = 1000
_MAX_VALUE_CHARS = 80
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$")
_NUMBER = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$")


_SCALARS = frozenset({str, int, float, bool, type(None)})
_DICTS_ONLY = frozenset({dict})


def _is_date(text: str) -> bool:
    """Whether an ISO-looking string is a real date or timestamp (``2024-02-30`` is not: it is a string)."""
    try:
        datetime.fromisoformat(text[:-1] + "+00:00" if text[-1] in "zZ" else text)
    except ValueError:
        return False
    return True


_OFFSET = re.compile(r"(Z|z|[+-]\d{2}:?\d{2})$")


def naive_stamp(value: Any) -> bool:
    """Whether a date-typed string is a timestamp without an offset (``2024-06-01T10:00``): a time of
    day in no stated zone, counted as ``kinds["naive"]`` so that a table keeps such a key as text."""
    return isinstance(value, str) and len(value) > 10 and not _OFFSET.search(value)


def value_type(value: Any) -> str:
    """The schema type of one metadata value: string, number, bool, date (an ISO string), list, object, null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "date" if _ISO_DATE.match(value) and _is_date(value) else "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "list"
    return "string"


_INT64 = (-(2**63), 2**63 - 1)


def _number_kind(value: int | float) -> str:
    """``int`` (fits int64), ``bigint`` (an integer beyond int64) or ``float``."""
    if isinstance(value, float):
        return "float"
    return "int" if _INT64[0] <= value <= _INT64[1] else "bigint"


def _item_kinds(items: Sequence[Any]) -> set[str]:
    """The kinds of a list's non-null items, as counted in :attr:`KeyInfo.kinds` (``item:<kind>``)."""
    out = set()
    for v in items:
        if v is None:
            continue
        if isinstance(v, bool):
            out.add("item:bool")
        elif isinstance(v, (int, float)):
            out.add("item:" + _number_kind(v))
        elif isinstance(v, str):
            out.add("item:string")
        else:
            out.add("item:other")
    return out


def _entries(meta: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterable[tuple[tuple[str, ...], Any]]:
    """Every (key path, value) of a metadata dict; objects yield themselves and then their children."""
    stack: list[tuple[tuple[str, ...], Mapping[str, Any]]] = [(prefix, meta)]
    while stack:
        base, obj = stack.pop()
        for k, v in obj.items():
            path = (*base, str(k))
            yield path, v
            if isinstance(v, Mapping) and len(path) < 8:
                stack.append((path, v))


def _countable(value: Any) -> Any:
    """The value as counted among a key's common values, or None when it is not counted."""
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and len(value) <= _MAX_VALUE_CHARS:
        return value
    return None


@dataclass
class _Key:
    types: Counter[str] = field(default_factory=Counter)
    documents: int = 0
    numeric_strings: int = 0  # string values that read as numbers ("2025" == 2025 in NLQL)
    values: Counter[Any] = field(default_factory=Counter)
    values_complete: bool = True
    # numbers by kind (int, bigint, float) and lists by item kind (item:int, item:string, …), in documents
    kinds: Counter[str] = field(default_factory=Counter)


class MetaSummary:
    """Counts of metadata key paths, types and values over a set of documents, kept as they change.

    ``add(meta)`` when a document arrives, ``remove(meta)`` (the same dict) when it is deleted or
    replaced. Work per call is proportional to the document's metadata, never to the store.
    """

    def __init__(self) -> None:
        self.documents = 0
        self._keys: dict[tuple[str, ...], _Key] = {}
        self._paths: dict[Any, tuple[str, ...]] = {}  # a top-level key -> its path tuple, made once

    def add(self, meta: Mapping[str, Any]) -> None:
        self.documents += 1
        self._count(meta, 1)

    def remove(self, meta: Mapping[str, Any]) -> None:
        self.documents -= 1
        self._count(meta, -1)

    def add_many(self, metas: Iterable[Mapping[str, Any]]) -> None:
        """``add`` of each, in order, with the same result: flat metadata (every value a scalar) is
        counted a key at a time over its distinct values, not a document at a time (ingest, issue 21)."""
        metas = metas if isinstance(metas, list) else list(metas)
        cols = None
        # plain dicts with as many keys each: one set of keys if every one has the first's
        if metas and len(set(map(len, metas))) == 1 and _DICTS_ONLY.issuperset(map(type, metas)):
            try:
                cols = {k: [m[k] for m in metas] for k in metas[0]}
            except KeyError:
                cols = None
        if cols is not None:  # one set of keys (the common case): by column
            if all(_SCALARS.issuperset(map(type, c)) for c in cols.values()):
                self._add_columns(cols, len(metas))
                return
        columns: dict[Any, list[Any]] = {}
        flat = 0
        for meta in metas:
            if not _SCALARS.issuperset(map(type, meta.values())):
                self._add_columns(columns, flat)  # what came before first, so the order is kept
                columns, flat = {}, 0
                self.add(meta)
                continue
            flat += 1
            for k, v in meta.items():
                col = columns.get(k)
                if col is None:
                    columns[k] = col = []
                col.append(v)
        self._add_columns(columns, flat)

    def _add_columns(self, columns: Mapping[Any, Sequence[Any]], documents: int) -> None:
        """Count ``documents`` flat documents given as their values per top-level key."""
        self.documents += documents
        paths = self._paths
        for k, col in columns.items():
            path = paths.get(k) or paths.setdefault(k, (str(k),))
            key = self._keys.get(path)
            if key is None:
                key = self._keys[path] = _Key()
            key.documents += len(col)
            # each distinct (type, value) once, in order of first appearance (1, 1.0 and True differ);
            # a column of one type is counted by value alone (no pair per document)
            types = set(map(type, col))
            one = types.pop() if len(types) == 1 else None
            counted: Iterable[tuple[Any, int]] = (Counter(col) if one is not None
                                                  else Counter(zip(map(type, col), col))).items()
            full = len(key.values) >= MAX_DISTINCT
            tv: type
            for value, m in counted:
                if one is None:
                    tv, value = value
                else:
                    tv = one
                if full and tv is int:  # the common tail of a many-valued number key: counted, not listed
                    key.types["number"] += m
                    key.kinds[_number_kind(value)] += m
                    if ("n", value) in key.values:
                        key.values[("n", value)] += m
                    else:
                        key.values_complete = False
                    continue
                t = value_type(value)
                key.types[t] += m
                if t == "number":
                    key.kinds[_number_kind(value)] += m
                elif t == "date" and naive_stamp(value):
                    key.kinds["naive"] += m
                if t == "string" and _NUMBER.match(value):
                    key.numeric_strings += m
                v = _countable(value)
                if v is not None:
                    hashable = (tv.__name__ if tv is not int and tv is not float else "n", v)
                    if hashable in key.values:
                        key.values[hashable] += m
                    elif len(key.values) < MAX_DISTINCT:
                        key.values[hashable] = m
                    else:
                        key.values_complete = False

    def _count(self, meta: Mapping[str, Any], sign: int) -> None:
        paths = self._paths
        if all(type(v) in _SCALARS for v in meta.values()):  # flat: each key is its own path
            entries: Iterable[tuple[tuple[str, ...], Any]] = [
                (paths.get(k) or paths.setdefault(k, (str(k),)), v) for k, v in meta.items()]
        else:
            entries = _entries(meta)
        for path, value in entries:
            key = self._keys.get(path)
            if key is None:
                if sign < 0:
                    continue
                key = self._keys[path] = _Key()
            t = value_type(value)
            key.types[t] += sign
            key.documents += sign
            if t == "number":
                fine = "float" if type(value) is float else _number_kind(value)
                n = key.kinds[fine] = key.kinds.get(fine, 0) + sign
                if n <= 0:
                    del key.kinds[fine]
            elif t == "date" and naive_stamp(value):
                n = key.kinds["naive"] = key.kinds.get("naive", 0) + sign
                if n <= 0:
                    del key.kinds["naive"]
            elif t == "list":
                kinds = key.kinds
                for fine in _item_kinds(value):
                    kinds[fine] += sign
                    if kinds[fine] <= 0:
                        del kinds[fine]
            if t == "string" and _NUMBER.match(value):
                key.numeric_strings += sign
            v = _countable(value)
            if v is not None:
                hashable = (type(v).__name__ if not isinstance(v, (int, float)) or isinstance(v, bool) else "n", v)
                if hashable in key.values or sign < 0:
                    key.values[hashable] += sign
                    if key.values[hashable] <= 0:
                        del key.values[hashable]
                elif len(key.values) < MAX_DISTINCT:
                    key.values[hashable] = 1
                else:
                    key.values_complete = False
            if key.types[t] <= 0:
                del key.types[t]
            if key.documents <= 0:
                del self._keys[path]

    def keys(self) -> list[KeyInfo]:
        """Every key path, sorted, with its types, document count and common values."""
        out = []
        for path in sorted(self._keys):
            k = self._keys[path]
            top = sorted(k.values.items(), key=lambda kv: (-kv[1], repr(kv[0][1])))[:TOP_VALUES]
            out.append(KeyInfo(path=path, types=dict(sorted(k.types.items(), key=lambda kv: (-kv[1], kv[0]))),
                               documents=k.documents, values=[(v[1], n) for v, n in top],
                               numeric_strings=k.numeric_strings,
                               values_complete=k.values_complete and len(k.values) < MAX_DISTINCT,
                               distinct=len(k.values), kinds=dict(sorted(k.kinds.items()))))
        return out

    @classmethod
    def of(cls, metas: Iterable[Mapping[str, Any]]) -> MetaSummary:
        s = cls()
        for m in metas:
            s.add(m)
        return s


@dataclass(frozen=True)
class KeyInfo:
    """One metadata key path: the types seen (type → documents), how many documents have it, common values."""

    path: tuple[str, ...]
    types: dict[str, int]
    documents: int
    values: list[tuple[Any, int]]
    numeric_strings: int = 0
    values_complete: bool = True
    distinct: int = 0
    #: Finer than ``types``, in documents: numbers by kind (``int`` within int64, ``bigint`` beyond it,
    #: ``float``) and lists by the kinds of their items (``item:int``, ``item:float``, ``item:bigint``,
    #: ``item:bool``, ``item:string``, ``item:other`` for a list or object inside a list) and dates by
    #: ``naive`` (timestamps with a time of day and no offset, :func:`naive_stamp`). Table
    #: conversions read it (:mod:`nlql.execute.frames`); empty from a store that does not count it.
    kinds: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The key as written in a query after ``meta.``."""
        from nlql.render import quote_key

        return ".".join(quote_key(k) for k in self.path)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.name, "path": list(self.path), "types": dict(self.types),
                "documents": self.documents,
                "values": [{"value": v, "documents": n} for v, n in self.values]}


@dataclass(frozen=True)
class DataSummary:
    """What a store answers for ``describe_data``: sizes and metadata keys, exact or from a sample."""

    documents: int
    sentences: int
    keys: list[KeyInfo]
    sampled: int | None = None       # documents read, when the keys come from a sample
    method: str = "maintained"       # "maintained" (kept at write time) or how the sample was taken

    @classmethod
    def from_sample(cls, documents: int, sentences: int, metas: Sequence[Mapping[str, Any]],
                    how: str) -> DataSummary:
        """Counted sizes and the keys of the ``metas`` a store read (a document's metadata each): exact
        when they are every document, else sampled, ``how`` saying how they were read."""
        keys = MetaSummary.of(metas).keys()
        if len(metas) >= documents:
            return cls(documents, sentences, keys)
        return cls(documents, sentences, keys, len(metas), how)


@dataclass(frozen=True)
class Schema:
    """``engine.schema()``: the store's size, embedder, analyzer and metadata keys."""

    store: str
    documents: int
    sentences: int
    embedder: dict[str, Any] | None
    analyzer: dict[str, Any] | None
    keys: list[KeyInfo]
    sampled: int | None = None
    method: str = "maintained"

    def key(self, path: Sequence[str]) -> KeyInfo | None:
        t = tuple(path)
        for k in self.keys:
            if k.path == t:
                return k
        return None

    @property
    def exact(self) -> bool:
        """Whether the key counts cover every document (not a sample)."""
        return self.sampled is None

    def to_dict(self) -> dict[str, Any]:
        return {"store": self.store, "documents": self.documents, "sentences": self.sentences,
                "embedder": self.embedder, "analyzer": self.analyzer,
                "keys": [k.to_dict() for k in self.keys],
                "sampled": self.sampled, "method": self.method}

    def to_text(self) -> str:
        """A plain-text form (for agents and pipes): one line per key."""
        lines = [f"store: {self.store}, {self.documents} documents, {self.sentences} sentences"]
        if self.embedder:
            lines.append("embedder: " + ", ".join(f"{k}={v}" for k, v in self.embedder.items()))
        if self.analyzer:
            lines.append("analyzer: " + ", ".join(f"{k}={v}" for k, v in sorted(self.analyzer.items())))
        if self.sampled is not None:
            lines.append(f"metadata keys from a sample of {self.sampled} documents ({self.method})")
        if not self.keys:
            lines.append("no metadata keys")
        else:
            lines.append("metadata keys (write meta.<key> in a query):")
            for k in self.keys:
                types = ", ".join(k.types)
                vals = ", ".join(f"{_show(v)} ({n})" for v, n in k.values)
                lines.append(f"  meta.{k.name}: {types}; {k.documents} documents"
                             + (f"; common values: {vals}" if vals else ""))
        return "\n".join(lines)


def _show(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def summary_of_rows(rows: Iterable[Any], sentences: int, sample: int, method: str) -> DataSummary:
    """A :class:`DataSummary` from rows (one per sentence, any order): each document counted once."""
    seen: dict[str, Mapping[str, Any]] = {}
    for r in rows:
        if r.doc_id not in seen:
            seen[r.doc_id] = r.metadata
    s = MetaSummary.of(seen.values())
    return DataSummary(documents=len(seen), sentences=sentences, keys=s.keys(), sampled=None, method=method)


def sample_summary(store: Any, sample: int = DEFAULT_SAMPLE) -> DataSummary:
    """The engine's fallback for a store without ``describe_data``: rows fetched through the Store API.

    Reads the rows of at most ``sample`` documents (in insertion order); when that is every document
    the counts are exact, else the document count is estimated from the sentences per document seen.
    """
    keys = store.scan(None)
    sentences = len(keys)
    seen: dict[str, Mapping[str, Any]] = {}
    rows_read = 0
    step = 512
    for lo in range(0, sentences, step):
        for r in store.fetch(keys[lo:lo + step]):
            if r.doc_id not in seen:
                if len(seen) >= sample:
                    break
                seen[r.doc_id] = r.metadata
            rows_read += 1
        else:
            continue
        break
    complete = rows_read >= sentences
    s = MetaSummary.of(seen.values())
    if complete:
        return DataSummary(len(seen), sentences, s.keys(), None, "read every document (Store API)")
    estimate = round(sentences * len(seen) / max(rows_read, 1))
    return DataSummary(estimate, sentences, s.keys(), len(seen), f"first {len(seen)} documents (Store API)")


# ------------------------------------------------------------------------------------------ warnings


def edit_distance(a: str, b: str) -> int:
    """Edits (insert, delete, substitute, swap two neighbours) turning ``a`` into ``b``."""
    before: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            d = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                d = min(d, before[j - 2] + 1)
            cur.append(d)
        before, prev = prev, cur
    return prev[-1]


def closest(name: str, candidates: Iterable[str], max_ratio: float = 0.4) -> str | None:
    """The candidate nearest ``name`` by edit distance (case-insensitive), first one on ties; None if none
    is within ``max_ratio`` of the longer length (at least 1 edit, at most 3 for short names)."""
    best: tuple[int, int] | None = None
    pick = None
    low = name.lower()
    for i, c in enumerate(candidates):
        d = edit_distance(low, c.lower())
        limit = max(1, min(3, int(max_ratio * max(len(name), len(c)))))
        if d <= limit and (best is None or (d, i) < best):
            best, pick = (d, i), c
    return pick


def _literal_side(node: Any) -> Any:
    from nlql import ir

    if isinstance(node, ir.Literal):
        return node.value
    return _NO


_NO = object()


def _never_matches(info: KeyInfo, value: Any) -> str | None:
    """Why a comparison of the key with ``value`` can never be TRUE on the data seen, or None."""
    types = {t for t in info.types if t != "null"}
    if not types or value is None:
        return None
    if isinstance(value, bool):
        return None if "bool" in types else "a boolean"
    if isinstance(value, (int, float)):
        if types & {"number"} or ("string" in types and info.numeric_strings):
            return None
        return "a number"
    if isinstance(value, str):
        if types & {"string", "date", "list"}:
            return None
        if "number" in types and _NUMBER.match(value):
            return None
        return "a string"
    return None


def data_warnings(query: Any, schema: Schema) -> list[Diagnostic]:
    """Warnings from the data: unknown metadata keys (did-you-mean over the real keys) and comparisons
    whose literal type no document's value has. Each is a ``Diagnostic`` with ``severity="warning"``."""
    from nlql import ir

    known = {k.path: k for k in schema.keys}
    prefixes = {k.path[:i] for k in schema.keys for i in range(1, len(k.path) + 1)}
    names = [k.name for k in schema.keys]
    out: list[Diagnostic] = []
    if schema.documents <= 0:
        return out  # an empty store: every key is unknown, and saying so helps no one
    seen: set[tuple[str, ...]] = set()
    where = "" if schema.exact else f" (in a sample of {schema.sampled} documents)"
    for node in query.walk():
        if isinstance(node, ir.Meta) and node.keys not in prefixes and node.keys not in seen:
            seen.add(node.keys)
            shown = ".".join(node.keys)
            guess = closest(shown, names)
            hint = (f"did you mean meta.{guess}?" if guess
                    else ("known keys: " + ", ".join(f"meta.{n}" for n in names[:12])) if names
                    else "no document has metadata")
            out.append(_warn(node, f"no document has metadata key meta.{shown}{where}", hint))
        elif isinstance(node, ir.Has) and isinstance(node.expr, ir.Meta) and node.expr.keys in known:
            info = known[node.expr.keys]
            types = [t for t in info.types if t != "null"]
            if types and "list" not in types:
                word = "HAS" if node.quantifier is None else f"HAS {node.quantifier}"
                out.append(_warn(node.expr, f"meta.{info.name} is never a list in the data{where}: "
                                 f"{word} compares its single value with ==",
                                 f"meta.{info.name} holds {', '.join(types)}; "
                                 + ("write == for one value" if node.quantifier is None else "write IN (…)")))
        elif isinstance(node, (ir.Compare, ir.In, ir.Between)):
            if isinstance(node, ir.Compare):
                pairs = [(node.left, node.right), (node.right, node.left)]
            elif isinstance(node, ir.In):
                opts = node.options.items if isinstance(node.options, ir.ListExpr) else ()
                pairs = [(node.expr, o) for o in opts]
            else:
                pairs = [(node.expr, node.low), (node.expr, node.high)]
            for key_side, other in pairs:
                if not isinstance(key_side, ir.Meta) or key_side.keys not in known:
                    continue
                value = _literal_side(other)
                if value is _NO:
                    continue
                info = known[key_side.keys]
                what = _never_matches(info, value)
                if what is not None:
                    held = ", ".join(t for t in info.types if t != "null")
                    equality = (isinstance(node, ir.Compare) and node.op == "==") or (
                        isinstance(node, ir.In) and not node.negated)
                    tail = ": this comparison matches no document" if equality else ""
                    out.append(_warn(other, f"meta.{info.name} is never {what} in the data{where}{tail}",
                                     f"meta.{info.name} holds {held}"
                                     + (f", e.g. {_show(info.values[0][0])}" if info.values else "")))
                    break
    return sorted(out, key=lambda d: (d.line, d.column))


def _warn(node: Any, message: str, hint: str | None) -> Diagnostic:
    span = node.span
    line, column = (span.line, span.column) if span is not None else (0, 0)
    return Diagnostic(line, column, message, hint, span, code="data", severity="warning")


def warning_text(d: Diagnostic) -> str:
    """A diagnostic as one line for ``hits.warnings``."""
    at = f" at line {d.line}, column {d.column}" if d.line else ""
    return f"{d.message}{at}" + (f" ({d.hint})" if d.hint else "")


# ------------------------------------------------------------------------------------------ building


def _record(store: Any, key: str) -> dict[str, Any] | None:
    """The JSON object a store records under ``key`` (its embedder, its analyzer), or None."""
    import json

    get = getattr(store, "get_info", None)  # the store record is optional (a user's own store may lack it)
    if not callable(get):
        return None
    try:
        raw = get(key)
        value = json.loads(raw) if raw else None
    except Exception:  # noqa: BLE001 - a schema is a report: an unreadable record is reported as absent
        return None
    return value if isinstance(value, dict) else None


def build_schema(store: Any, embedder: Any, analyzer: Any, sample: int = DEFAULT_SAMPLE) -> Schema:
    """The schema of ``store``: ``describe_data`` when the store declares ``DESCRIBES_DATA``, else a
    sample through the Store API (:func:`sample_summary`). Embedder and analyzer come from the store's
    record when it keeps one, else from what the engine uses."""
    caps = store.capabilities
    summary = store.describe_data(sample) if caps.DESCRIBES_DATA else sample_summary(store, sample)
    emb = _record(store, "embedder")
    if emb is None and embedder is not None:
        model = getattr(embedder, "model_id", None) or getattr(embedder, "name", None) or type(embedder).__name__
        emb = {"model": str(model), "dim": int(embedder.dim)}
    ana = _record(store, "analyzer")
    if ana is None and analyzer is not None:
        config = getattr(analyzer, "config", None)
        ana = dict(config()) if callable(config) else {"analyzer": type(analyzer).__name__}
    return Schema(store=caps.NAME, documents=summary.documents, sentences=summary.sentences, embedder=emb,
                  analyzer=ana, keys=summary.keys, sampled=summary.sampled, method=summary.method)
