"""PostgreSQL + pgvector store: rows, vectors and pushed filters in a database.

``PgVectorStore("postgresql://user@host/db")`` keeps every sentence in a table with a ``vector(dim)``
column and an HNSW index (``vector_cosine_ops``, built lazily, see below); the engine's pushed filter becomes a parameterised SQL
``WHERE`` fragment with exactly NLQL's semantics (:mod:`nlql.values`). Several engines may share one
database: the schema is created under an advisory lock and a second store on the same DSN re-attaches.

Schema (``<p>`` is ``table_prefix``, default ``nlql``)::

    <p>_meta   (key text PRIMARY KEY, value text)                 -- 'dim', 'schema', 'max_seq', 'analyzer'
    <p>_docs   (doc_id text PRIMARY KEY, seq bigint, text text,
                metadata json,          -- the metadata exactly as given (JSON text, see below)
                mflat jsonb,            -- typed, flattened view of the metadata used by filters
                fold text, num numeric, ts bigint,               -- doc_id casefolded / as number / as date
                created timestamptz)
    <p>_units  (key bigint identity PRIMARY KEY, doc_id text REFERENCES <p>_docs ON DELETE CASCADE,
                position int, content text, start int, "end" int, tail text, seq bigint,
                fold text, num numeric, ts bigint,               -- content casefolded / as number / as date
                embedding vector(dim), nterms int)                -- nterms: the sentence's BM25 length
    index <p>_units_doc (doc_id, position)
    index <p>_units_hnsw USING hnsw (embedding vector_cosine_ops)   -- once the table is large enough
    <p>_terms  (term text, key bigint, tf int, PRIMARY KEY (term, key)) + index (key)   -- bm25=True
    <p>_bm25   (n bigint, total_len bigint)                         -- one row: N and the total length

The BM25 tables are written in the same transaction as the rows (terms from the store's ``analyzer``,
computed in Python), so a hybrid plan can run as one statement (:mod:`nlql.sql.postgres`,
:meth:`PgVectorStore.run_lowered`).

Why ``metadata`` is ``json`` and not ``jsonb``: ``jsonb`` rejects ``\\u0000`` and rewrites numbers
(``1e16`` comes back as the integer ``10000000000000000``), so a float would return as an int. ``json``
keeps the text verbatim, so metadata round-trips exactly (NUL bytes, lone surrogates, float vs int).

**Typed flattened metadata (``mflat``).** At ingestion every non-null metadata value reachable through
dicts is recorded under its path (the key is ``json.dumps(list(path))``) with the types NLQL compares by,
computed in Python by :mod:`nlql.values` itself::

    {"s": <escaped string>, "f": <escaped casefold, only if different>,
     "n": <as_number: numbers and numeric strings>, "t": <ISO string as µs since the epoch>,
     "b": <bool>}            -- a dict/list/huge int is recorded as {} (present, never comparable)

so ``"2025" == 2025``, ISO strings against DATE/TIMESTAMP, ``CONTAINS`` with Python's ``casefold`` and
float equality all mean in SQL exactly what they mean in Python. Numbers are compared as ``numeric``
built from ``repr(float)`` on both sides, which orders exactly like the floats themselves.

**NUL bytes and the escape.** PostgreSQL text cannot hold ``\\x00`` (nor lone surrogates, which are not
UTF-8). Every text value (doc ids, content, tails, document text, metadata strings in ``mflat``) is
stored escaped: the characters U+0000–U+0008 and U+D800–U+DFFF become ``\\x01`` followed by four base-7
digits written as U+0002–U+0008 (their rank: the code point for U+0000–U+0008, 9 + offset for the
surrogates); everything else is stored as is. The code is prefix-free, its lead byte never appears
elsewhere and its digits never appear unescaped, so it is reversible, equality- and substring-preserving
(a needle can only match at code-word boundaries), ``LIKE``-preserving (``_`` is translated, see
:func:`like_sql`), and order-preserving under ``COLLATE "C"`` for every string without lone surrogates
(those sort as if below U+0009 — the one documented difference from Python's code-point order).

**knn strategy** (pgvector 0.6.2 has no iterative scan, so HNSW + WHERE under-fills):

- ``exact=True``, ``hnsw=False``, ``k`` over 1000, fewer than ``index_threshold`` rows in the table, or
  a filter matching at most ``max(10·k, exact_threshold)`` rows (counted with a bounded ``count``):
  exact scan ordered by ``(distance, seq, position)``; the distance is written as an expression the
  index cannot serve, so the planner scans (using other indexes for the filter), and ties break on
  insertion order.
- otherwise HNSW with ``hnsw.ef_search = max(ef_search, k)`` (``SET LOCAL``) inside a MATERIALIZED CTE;
  when fewer than ``k`` rows come back and more rows match, ``ef_search`` doubles (up to 1000) and the
  query repeats, then falls back to the exact scan. ``last_stats`` records the path and rounds.

The HNSW index is not created with the tables: it is built once the table holds ``index_threshold``
rows, by the first knn that would use it (or :meth:`PgVectorStore.build_index`). Measured here (dim 384,
2 cores): COPY into the table runs at ~39k sentences/s without the index and ~1.1k/s with it, and a
build after loading is ~3.5× faster than maintaining the index row by row; below the threshold an
exact scan is a few milliseconds anyway.

Score thresholds (``1 − distance >= min_score``) are applied outside the CTE, after the top-k cut.
Values are always bound as parameters; identifiers go through :class:`psycopg.sql.Identifier`.
"""

from __future__ import annotations

import json
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, TypeVar

import numpy as np

from nlql import values as V
from nlql.errors import BackendError, MissingDependencyError, NLQLTimeoutError, UnsupportedError
from nlql.pushdown import OPS, Capabilities, Cond, FAnd, Filter, FOr, NativeFilter
from nlql.sql.binder import Binder, Fragment, Param, join, sql, template
from nlql.stores.base import DocRecord, Row

__all__ = [
    "PGVECTOR_OPS",
    "PgVectorStore",
    "escape_text",
    "flatten_metadata",
    "like_sql",
    "unescape_text",
]

# MATCH is a Python regex; PostgreSQL's POSIX regex means something else, so it is never pushed.
PGVECTOR_OPS = frozenset(OPS - {"match", "not_match"})
_FIELDS = frozenset({"meta", "doc_id", "id", "position", "content"})
_EF_MAX = 1000  # pgvector's upper bound for hnsw.ef_search
_LOCK_NS = 0x6E6C716C  # advisory-lock namespace ("nlql")
_SCHEMA_VERSION = "1"

# --------------------------------------------------------------------------------------- escaping

_LEAD = "\x01"
_NEEDS_ESCAPE = re.compile("[\x00-\x08\ud800-\udfff]")
_CODEWORD = re.compile("\x01([\x02-\x08]{4})")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _build_codes() -> tuple[dict[str, str], dict[str, str]]:
    encode: dict[str, str] = {}
    decode: dict[str, str] = {}
    specials = [chr(c) for c in range(9)] + [chr(c) for c in range(0xD800, 0xE000)]
    for rank, ch in enumerate(specials):
        digits = []
        r = rank
        for _ in range(4):
            digits.append(chr(2 + r % 7))
            r //= 7
        word = "".join(reversed(digits))
        encode[ch] = _LEAD + word
        decode[word] = ch
    return encode, decode


_ENCODE, _DECODE = _build_codes()


def escape_text(s: str) -> str:
    """Make a Python string storable in PostgreSQL text (no NUL, no lone surrogate), reversibly.

    >>> escape_text("plain text")
    'plain text'
    >>> unescape_text(escape_text("a\\x00b\\x01c\\ud800")) == "a\\x00b\\x01c\\ud800"
    True
    """
    if _NEEDS_ESCAPE.search(s) is None:
        return s
    return _NEEDS_ESCAPE.sub(lambda m: _ENCODE[m.group()], s)


def unescape_text(s: str) -> str:
    """Invert :func:`escape_text`."""
    if _LEAD not in s:
        return s
    return _CODEWORD.sub(lambda m: _DECODE[m.group(1)], s)


# ------------------------------------------------------------------------------ typed metadata

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_US = timedelta(microseconds=1)


def _micros(dt: datetime) -> int:
    return (dt - _EPOCH) // _ONE_US


def _decimal(f: float) -> Decimal:
    # repr is the shortest string that reads back as f, so comparing these decimals orders like floats
    return Decimal(repr(f))


def _typed(v: Any) -> dict[str, Any]:
    """The typed record of one non-null value (see the module docstring)."""
    if isinstance(v, bool):
        return {"b": v}
    if isinstance(v, (int, float)):
        f = V.as_number(v)
        return {"n": f} if f is not None else {}
    if isinstance(v, str):
        rec: dict[str, Any] = {"s": escape_text(v)}
        folded = v.casefold()
        if folded != v:
            rec["f"] = escape_text(folded)
        num = V.numeric_string(v)
        if num is not None:
            rec["n"] = num
        dt = V.iso_datetime(v)
        if dt is not None:
            rec["t"] = _micros(dt)
        return rec
    return {}


def path_key(keys: Sequence[str]) -> str:
    """The ``mflat`` key of a metadata path: its JSON list, ASCII only (NUL-free, injective)."""
    return json.dumps(list(keys), ensure_ascii=True)


def flatten_metadata(metadata: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every non-null value reachable through dicts, by path key, as a typed record.

    >>> flatten_metadata({"year": "2025", "a": {"b": True}})
    {'["year"]': {'s': '2025', 'n': 2025.0}, '["a"]': {}, '["a", "b"]': {'b': True}}
    """
    out: dict[str, dict[str, Any]] = {}
    stack: list[tuple[tuple[str, ...], dict[str, Any]]] = [((), metadata)]
    while stack:
        prefix, node = stack.pop()
        for k, v in node.items():
            if V.is_null(v):
                continue
            path = (*prefix, str(k))
            out[path_key(path)] = _typed(v)
            if isinstance(v, dict):
                stack.append((path, v))
    return out


def _compact_json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _exact_json(obj: Any) -> str:
    """JSON text for the ``json`` column: NUL and lone surrogates become ``\\u`` escapes."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if _SURROGATE.search(text) is not None:
        text = json.dumps(obj, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text


def _shadow(s: str) -> tuple[str | None, Decimal | None, int | None]:
    """(escaped casefold if different, number, µs) of a built-in string field (doc_id, content)."""
    folded = s.casefold()
    num = V.numeric_string(s)
    dt = V.iso_datetime(s)
    return (
        escape_text(folded) if folded != s else None,
        _decimal(num) if num is not None else None,
        _micros(dt) if dt is not None else None,
    )


# ------------------------------------------------------------------------------- filter compiler
# Fragments carry their values as Param parts (nlql.sql.binder): the text never holds a value, and
# the placeholders are numbered only when the whole statement is rendered.

_Frag = Fragment
_NULL: _Frag = sql("NULL::boolean")
_SQL_OP = {"eq": "=", "ne": "<>", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
# one LIKE '_' over escaped text: a whole code word, or one character that is not part of one
_ONE_CHAR = "(?:\x01[\x02-\x08]{4}|[^\x01-\x08])"
_READS_DOCS = re.compile(r"\bd\.")


class _Subject:
    """SQL views of one filter path: each is an expression that is NULL where the value lacks that type."""

    def __init__(self, base: _Frag, *, s: str | None, fold: str | None, n: str | None, t: str | None,
                 b: str | None, exists: str, is_str: str | None) -> None:
        self.base = base
        self._views = {"s": s, "fold": fold, "n": n, "t": t, "b": b, "exists": exists, "is_str": is_str}
        self.reads_docs = False  # set once a view over the documents table (alias d) is used

    def has(self, view: str) -> bool:
        return self._views[view] is not None

    def view(self, name: str) -> _Frag:
        """A view as SQL; ``{r}`` in its template is the base expression (with its own values)."""
        text = self._views[name]
        if text is None:
            return _NULL
        frag = template(text, r=self.base)
        if _READS_DOCS.search(frag.text_only()):
            self.reads_docs = True
        return frag

    @property
    def always_str(self) -> bool:
        return self._views["is_str"] == "TRUE"

    @property
    def never_str(self) -> bool:
        return self._views["s"] is None


def _subject(path: tuple[str, ...]) -> _Subject:
    root = path[0]
    if root == "meta":
        if len(path) < 2:
            raise ValueError(f"metadata path needs a key: {path!r}")
        return _Subject(
            sql("(d.mflat -> ", Param(path_key(path[1:]), "text", "metadata path"), ")"),
            s="({r} ->> 's')", fold="coalesce({r} ->> 'f', {r} ->> 's')",
            n="({r} -> 'n')::numeric", t="({r} -> 't')::numeric", b="({r} -> 'b')::boolean",
            exists="({r} IS NOT NULL)", is_str="(({r} ->> 's') IS NOT NULL)",
        )
    if root == "doc_id":
        return _Subject(sql("u.doc_id"), s="u.doc_id", fold="coalesce(d.fold, u.doc_id)",
                        n="d.num", t="d.ts::numeric", b=None, exists="TRUE", is_str="TRUE")
    if root == "id":
        # "<doc_id>#<position>" is never a number nor an ISO date ('#' cannot occur in either)
        return _Subject(sql("u.doc_id"), s="(u.doc_id || '#' || u.position)",
                        fold="(coalesce(d.fold, u.doc_id) || '#' || u.position)",
                        n=None, t=None, b=None, exists="TRUE", is_str="TRUE")
    if root == "content":
        return _Subject(sql("u.content"), s="u.content", fold="coalesce(u.fold, u.content)",
                        n="u.num", t="u.ts::numeric", b=None, exists="TRUE", is_str="TRUE")
    if root == "position":
        return _Subject(sql("u.position"), s=None, fold=None, n="u.position::numeric", t=None, b=None,
                        exists="TRUE", is_str=None)
    raise ValueError(f"unknown filter path {path!r}")


def _binop(left: _Frag, op: str, cast: str, value: Any) -> _Frag:
    return sql("(", left, f" {op} ", Param(value, cast), ")")


def _compare(subj: _Subject, op: str, v: Any) -> _Frag:
    """``value op v`` with :func:`nlql.values.compare`'s semantics (NULL = UNKNOWN)."""
    sql_op = _SQL_OP[op]
    if V.is_null(v):
        return _NULL
    if isinstance(v, bool):
        return _binop(subj.view("b"), sql_op, "boolean", v) if subj.has("b") else _NULL
    if isinstance(v, (datetime, date)):
        dt = V.as_datetime(v)
        if dt is None or not subj.has("t"):
            return _NULL
        return _binop(subj.view("t"), sql_op, "numeric", Decimal(_micros(dt)))
    if V.is_number(v):
        f = V.as_number(v)
        if f is None or not subj.has("n"):
            return _NULL
        return _binop(subj.view("n"), sql_op, "numeric", _decimal(f))
    if isinstance(v, str):
        num = V.numeric_string(v)
        str_part = None
        if subj.has("s"):
            # code-point order for <, >; equality needs no collation (and keeps indexes usable)
            collate = "" if op in ("eq", "ne") else ' COLLATE "C"'
            str_part = sql("(", subj.view("s"), f"{collate} {sql_op} ", Param(escape_text(v), "text"), ")")
        num_part = None
        if num is not None and subj.has("n") and not subj.always_str:
            num_part = _binop(subj.view("n"), sql_op, "numeric", _decimal(num))
        if str_part is not None and subj.always_str:
            return str_part
        if str_part is None:
            return num_part or _NULL
        if num_part is None:
            return str_part  # NULL for a non-string value: a non-numeric string never compares with it
        return sql("(CASE WHEN ", subj.view("is_str"), " THEN ", str_part, " ELSE ", num_part, " END)")
    return _NULL


def _in_list(subj: _Subject, options: Sequence[Any]) -> _Frag:
    """SQL IN as an OR of equalities, grouped by literal type into ``= ANY(array)`` tests."""
    bools: list[bool] = []
    stamps: list[Decimal] = []
    nums: list[Decimal] = []
    strs: list[str] = []
    str_nums: list[Decimal] = []
    plain_strs = False
    unknown = False
    for o in options:
        if V.is_null(o):
            unknown = True
        elif isinstance(o, bool):
            bools.append(o)
        elif isinstance(o, (datetime, date)):
            dt = V.as_datetime(o)
            if dt is None:
                unknown = True
            else:
                stamps.append(Decimal(_micros(dt)))
        elif V.is_number(o):
            f = V.as_number(o)
            if f is None:
                unknown = True
            else:
                nums.append(_decimal(f))
        elif isinstance(o, str):
            strs.append(escape_text(o))
            num = V.numeric_string(o)
            if num is None:
                plain_strs = True
            else:
                str_nums.append(_decimal(num))
        else:
            unknown = True
    parts: list[_Frag] = []

    def any_of(view: str, cast: str, values: list[Any]) -> _Frag:
        if not subj.has(view):
            return _NULL
        return sql("(", subj.view(view), " = ANY(", Param(values, f"{cast}[]"), "))")

    if bools:
        parts.append(any_of("b", "boolean", bools))
    if stamps:
        parts.append(any_of("t", "numeric", stamps))
    if nums:
        parts.append(any_of("n", "numeric", nums))
    if strs:
        str_any = any_of("s", "text", strs)
        non_str: _Frag = _NULL
        if str_nums and subj.has("n"):
            non_str = any_of("n", "numeric", str_nums)
            if plain_strs:
                non_str = sql("(", non_str, " OR NULL)")
        if subj.always_str:
            parts.append(str_any)
        elif subj.never_str:
            parts.append(non_str)
        else:
            parts.append(sql("(CASE WHEN ", subj.view("is_str"), " THEN ", str_any, " ELSE ", non_str, " END)"))
    if unknown:
        parts.append(_NULL)
    if not parts:
        return sql("(CASE WHEN ", subj.view("exists"), " THEN FALSE END)")
    return sql("(", join(" OR ", parts), ")")


def _like_tokens(pattern: str) -> list[tuple[str, str]]:
    """Tokens of an NLQL LIKE pattern exactly as :func:`nlql.values.like_regex` reads it."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(("lit", pattern[i + 1]))
            i += 2
            continue
        if ch == "%":
            out.append(("any", ""))
        elif ch == "_":
            out.append(("one", ""))
        else:
            out.append(("lit", ch))
        i += 1
    return out


def like_sql(pattern: str) -> tuple[str, str]:
    """Translate an NLQL LIKE pattern to ``(operator, pattern)`` over escaped text.

    Without ``_`` this is a PostgreSQL LIKE pattern (escape ``\\``); with ``_`` it is an anchored
    regular expression in which ``_`` matches one whole escape code word or one ordinary character.

    >>> like_sql("50\\\\%_off%")
    ('~', '^50\\\\%(?:\\x01[\\x02-\\x08]{4}|[^\\x01-\\x08])off.*$')
    >>> like_sql("a%b")
    ('LIKE', 'a%b')
    """
    tokens = _like_tokens(pattern)
    if not any(kind == "one" for kind, _ in tokens):
        out = []
        for kind, ch in tokens:
            if kind == "any":
                out.append("%")
                continue
            for c in escape_text(ch):
                out.append("\\" + c if c in "%_\\" else c)
        return "LIKE", "".join(out)
    rx = ["^"]
    for kind, ch in tokens:
        if kind == "any":
            rx.append(".*")
        elif kind == "one":
            rx.append(_ONE_CHAR)
        else:
            for c in escape_text(ch):
                # in an ARE, a backslash before a non-alphanumeric character makes it literal
                rx.append("\\" + c if c.isascii() and not c.isalnum() and c >= "\x09" else c)
    rx.append("$")
    return "~", "".join(rx)


def _string_test(subj: _Subject, op: str, v: Any) -> _Frag:
    if not isinstance(v, str):
        return _NULL
    if op == "contains":
        if not subj.has("fold"):
            return _NULL
        return sql("(strpos(", subj.view("fold"), ", ", Param(escape_text(v.casefold()), "text"), ") > 0)")
    if not subj.has("s"):
        return _NULL
    operator, pattern = like_sql(v)
    return sql("(", subj.view("s"), f" {operator} ", Param(pattern, "text"), ")")


def _leaf(cond: Cond, docs: list[bool]) -> _Frag:
    op = cond.op
    if op not in PGVECTOR_OPS:
        raise UnsupportedError("pgvector", f"pushing the filter operator '{op}'",
                               hint="keep it in the residual filter")
    subj = _subject(cond.path)
    frag = _leaf_sql(subj, op, cond.value)
    if subj.reads_docs:
        docs[0] = True
    return frag


def _leaf_sql(subj: _Subject, op: str, value: Any) -> _Frag:
    if op == "is_null":
        return sql("(NOT ", subj.view("exists"), ")")
    if op == "is_not_null":
        return subj.view("exists")
    if op in _SQL_OP:
        return _compare(subj, op, value)
    if op in ("in", "not_in"):
        frag = _in_list(subj, tuple(value))
    else:
        frag = _string_test(subj, op.removeprefix("not_"), value)
    if op.startswith("not_"):
        return sql("(NOT ", frag, ")")
    return frag


def _tree(flt: Filter, docs: list[bool]) -> _Frag:
    if isinstance(flt, Cond):
        return _leaf(flt, docs)
    if isinstance(flt, (FAnd, FOr)):
        if not flt.items:
            return sql("TRUE") if isinstance(flt, FAnd) else sql("FALSE")
        joiner = " AND " if isinstance(flt, FAnd) else " OR "
        return sql("(", join(joiner, [_tree(item, docs) for item in flt.items]), ")")
    raise TypeError(f"not a filter: {flt!r}")


def filter_sql(flt: Filter) -> tuple[Fragment, bool]:
    """A filter tree as a SQL boolean fragment over ``u`` (units) and ``d`` (docs), and whether it
    reads the documents table. Values are :class:`~nlql.sql.binder.Param` parts, never text."""
    docs = [False]
    frag = _tree(flt, docs)
    labelled = tuple(Param(p.value, p.cast, p.label or "filter value") if isinstance(p, Param) else p
                     for p in frag.parts)
    return Fragment(labelled), docs[0]


def compile_where(flt: Filter) -> NativeFilter:
    """A filter tree as a parameterised SQL boolean over ``u`` (units) and ``d`` (docs).

    ``native`` and ``text`` are the fragment with psycopg ``%s`` placeholders; ``extra["params"]`` the
    values in order; ``extra["docs"]`` whether the fragment reads the documents table;
    ``extra["fragment"]`` the unrendered fragment (for statements numbered by a dialect's binder).
    """
    frag, docs = filter_sql(flt)
    binder = Binder(style="pyformat")
    text = binder.render(frag)
    return NativeFilter(native=text, text=text,
                        extra={"params": binder.values, "docs": docs, "fragment": frag})


# ------------------------------------------------------------------------------ psycopg glue


class _Vector:
    """A vector already in pgvector's binary wire format (bound as a query parameter)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def _vector_bytes(vec: np.ndarray) -> bytes:
    a = np.ascontiguousarray(vec, dtype=">f4").ravel()
    return struct.pack(">HH", a.shape[0], 0) + a.tobytes()


def _import_psycopg() -> Any:
    try:
        import psycopg
        import psycopg.sql  # noqa: F401 - make the submodule an attribute
    except ImportError as exc:
        raise MissingDependencyError("pgvector", "psycopg") from exc
    return psycopg


def _register_vector(conn: Any, oid: int) -> None:
    """Binary dumper/loader for pgvector's ``vector`` on this connection only (no global state)."""
    from psycopg.adapt import Dumper, Loader
    from psycopg.pq import Format

    class VectorDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            if isinstance(obj, _Vector):
                return obj.data
            if isinstance(obj, (bytes, bytearray, memoryview)):
                return bytes(obj)
            return _vector_bytes(np.asarray(obj))

    class VectorLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> np.ndarray:
            return np.frombuffer(bytes(data), dtype=">f4", offset=4).astype(np.float32)

    VectorDumper.oid = oid
    conn.adapters.register_dumper(_Vector, VectorDumper)
    conn.adapters.register_loader(oid, VectorLoader)


T = TypeVar("T")
_Terms = dict[tuple[str, int], list[tuple[str, int]]]  # (escaped doc id, position) -> [(term, tf)]


# ------------------------------------------------------------------------------------- the store


class PgVectorStore:
    """The Store protocol on PostgreSQL + pgvector.

    Args:
        dsn: A libpq connection string or URI (``"postgresql://user@host/db"``, pgserver's URI). Kept
            so that a lost connection is re-opened on the next call.
        connection: An open psycopg 3 connection in autocommit mode to use instead of ``dsn`` (the
            store opens its own transactions; it is re-opened after a loss only if ``dsn`` is given).
        table_prefix: Prefix of the tables (``<prefix>_docs``, ``_units``, ``_meta``, and with ``bm25``
            ``_terms`` and ``_bm25``).
        hnsw: Use an HNSW index (``vector_cosine_ops``); without it every knn is exact.
        ef_search: ``hnsw.ef_search`` for HNSW queries (raised to ``k`` when ``k`` is larger).
        exact: Always answer knn with an exact scan (declares ``Capabilities.EXACT``).
        m: HNSW ``m`` (index build parameter).
        ef_construction: HNSW ``ef_construction`` (index build parameter).
        statement_timeout_ms: Per-statement timeout (``SET LOCAL statement_timeout``); exceeding it
            raises :class:`~nlql.errors.NLQLTimeoutError`.
        exact_threshold: A filtered knn whose filter matches at most ``max(10·k, exact_threshold)``
            rows is answered by an exact scan over those rows.
        index_threshold: The HNSW index is built (once, by the first knn that needs it, or by
            :meth:`build_index`) when the table holds at least this many sentences; below it every knn
            is an exact scan. Building after loading is ~3.5× faster than maintaining the index row
            by row, and ingestion without the index runs at ~39k sentences/s instead of ~1.1k.
        bm25: Keep BM25 term statistics at ingest (``<prefix>_terms``: unit key, term, tf; each unit's
            term count; ``<prefix>_bm25``: N and the total length), so hybrid plans run as one SQL
            statement (``Capabilities.SQL_ARMS``, :attr:`dialect`).
        analyzer: The :class:`~nlql.text.analyzer.Analyzer` whose terms are stored (default
            ``Analyzer()``, the engine's default). It must equal the engine's analyzer for hybrid plans
            to run in SQL; opening a table built with another analyzer rebuilds the term table.

    Raises:
        MissingDependencyError: psycopg 3 is not installed (``pip install 'nlql-engine[pgvector]'``).
    """

    def __init__(self, dsn: str | None = None, *, connection: Any = None, table_prefix: str = "nlql",
                 hnsw: bool = True, ef_search: int = 100, exact: bool = False, m: int = 16,
                 ef_construction: int = 64, statement_timeout_ms: int | None = None,
                 exact_threshold: int = 20_000, index_threshold: int = 20_000, bm25: bool = True,
                 analyzer: Any = None) -> None:
        self._pg = _import_psycopg()
        if dsn is None and connection is None:
            raise ValueError("PgVectorStore needs a dsn or a connection")
        if not table_prefix or len(table_prefix.encode()) > 40:
            raise ValueError("table_prefix must be 1 to 40 bytes long")
        self.dsn = dsn
        self.table_prefix = table_prefix
        self.hnsw = bool(hnsw)
        self.ef_search = max(1, min(int(ef_search), _EF_MAX))
        self.exact = bool(exact)
        self.m = int(m)
        self.ef_construction = int(ef_construction)
        self.statement_timeout_ms = statement_timeout_ms
        self.exact_threshold = int(exact_threshold)
        self.index_threshold = int(index_threshold)
        self._index_ready = False
        self._small_until = 0.0  # until then the table is known to be below index_threshold
        self.dim: int | None = None
        self.last_stats: dict[str, Any] = {}
        self.capabilities = Capabilities(
            NAME="pgvector",
            OPS=PGVECTOR_OPS,
            FIELDS=_FIELDS,
            OR=True,
            NESTED_KEYS=True,
            NUMERIC_STRINGS=True,
            FLOAT_EQUALITY=True,
            DATETIMES=True,
            EXACT=self.exact or not self.hnsw,
            SCORE_THRESHOLD=True,
            BM25=bool(bm25),
            SQL_ARMS=bool(bm25),
        )
        from nlql.text.analyzer import Analyzer

        self.bm25 = bool(bm25)
        self.analyzer = analyzer if analyzer is not None else Analyzer()
        from nlql.sql.postgres import PostgresDialect

        self.dialect: PostgresDialect | None = PostgresDialect(table_prefix) if self.bm25 else None
        if connection is not None and not connection.autocommit:
            raise ValueError("PgVectorStore needs a connection in autocommit mode "
                             "(it opens its own transactions)")
        self._conn: Any = connection
        self._own_conn = connection is None
        self._vector_oid: int | None = None
        self._lock = threading.RLock()
        sql = self._pg.sql
        self._t_docs = sql.Identifier(f"{table_prefix}_docs")
        self._t_units = sql.Identifier(f"{table_prefix}_units")
        self._t_meta = sql.Identifier(f"{table_prefix}_meta")
        self._t_terms = sql.Identifier(f"{table_prefix}_terms")
        self._t_bm25 = sql.Identifier(f"{table_prefix}_bm25")

    # ------------------------------------------------------------------------------ connections

    def _connection(self) -> Any:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        if self.dsn is None:
            raise BackendError("pgvector", "the connection is closed and there is no dsn to reopen it",
                               hint="pass dsn=… to PgVectorStore so it can reconnect")
        try:
            conn = self._pg.connect(self.dsn, autocommit=True)
        except self._pg.Error as exc:
            raise BackendError("pgvector", f"cannot connect: {_first_line(exc)}",
                               hint="check the dsn and that the server is running") from exc
        self._conn = conn
        self._own_conn = True
        self._vector_oid = None
        if self.dim is not None:
            self._attach_types(conn)
        return conn

    def _attach_types(self, conn: Any) -> None:
        row = conn.execute("SELECT to_regtype('vector')::oid").fetchone()
        if row is None or row[0] is None:
            raise BackendError("pgvector", "the 'vector' extension is not installed in this database",
                               hint="CREATE EXTENSION vector (needs pgvector on the server)")
        self._vector_oid = int(row[0])
        _register_vector(conn, self._vector_oid)

    def _guard(self, fn: Callable[[], T]) -> T:
        """Run one operation under the lock, translating driver errors to NLQL errors."""
        with self._lock:
            try:
                return fn()
            except self._pg.errors.QueryCanceled as exc:
                raise NLQLTimeoutError(
                    f"pgvector: statement timed out after {self.statement_timeout_ms} ms"
                    if self.statement_timeout_ms else f"pgvector: query cancelled: {_first_line(exc)}"
                ) from exc
            except self._pg.Error as exc:
                conn = self._conn
                if conn is not None and (conn.broken or conn.closed):
                    self._drop_connection()
                    raise BackendError("pgvector", f"connection lost: {_first_line(exc)}",
                                       hint="the next call reconnects") from exc
                raise BackendError("pgvector", _first_line(exc)) from exc

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - already broken
                pass

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        """A transaction on the (re)opened connection, with the statement timeout set locally."""
        conn = self._connection()
        with conn.transaction():
            if self.statement_timeout_ms:
                conn.execute("SELECT set_config('statement_timeout', %s, true)",
                             [str(int(self.statement_timeout_ms))])
            yield conn

    def _need_open(self) -> None:
        if self.dim is None:
            raise RuntimeError("PgVectorStore.open(dim) must be called first")

    # ----------------------------------------------------------------------------------- schema

    def open(self, dim: int) -> None:
        """Create the schema if missing (under an advisory lock) or re-attach to it.

        Raises:
            BackendError: the tables hold vectors of another dimension, or pgvector is missing.
        """
        dim = int(dim)
        if self.dim == dim:
            return
        if self.dim is not None:
            raise BackendError("pgvector", f"store is open with {self.dim}-dimensional vectors, not {dim}")
        self._guard(lambda: self._open(dim))

    def _open(self, dim: int) -> None:
        sql = self._pg.sql
        with self._tx() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext('schema'))", [_LOCK_NS])
            # then the writers' lock, before any table lock: writers take it first too, so no cycle
            conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_LOCK_NS, self.table_prefix])
            if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, value text NOT NULL)")
                         .format(self._t_meta))
            conn.execute(sql.SQL("INSERT INTO {} (key, value) VALUES ('dim', %s), ('schema', %s) "
                                 "ON CONFLICT (key) DO NOTHING").format(self._t_meta),
                         [str(dim), _SCHEMA_VERSION])
            row = conn.execute(sql.SQL("SELECT value FROM {} WHERE key = 'dim'").format(self._t_meta)).fetchone()
            stored = int(row[0])
            if stored != dim:
                raise BackendError(
                    "pgvector",
                    f"table {self.table_prefix}_units holds {stored}-dimensional vectors, "
                    f"the embedder gives {dim}",
                    hint="use the embedder the data was built with, or another table_prefix",
                )
            conn.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {docs} ("
                " doc_id text PRIMARY KEY, seq bigint NOT NULL, text text NOT NULL,"
                " metadata json NOT NULL, mflat jsonb NOT NULL,"
                " fold text, num numeric, ts bigint,"
                " created timestamptz NOT NULL DEFAULT now())"
            ).format(docs=self._t_docs))
            conn.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {units} ("
                " key bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
                " doc_id text NOT NULL REFERENCES {docs} (doc_id) ON DELETE CASCADE,"
                " position int NOT NULL, content text NOT NULL,"
                " start int NOT NULL, \"end\" int NOT NULL, tail text NOT NULL, seq bigint NOT NULL,"
                " fold text, num numeric, ts bigint,"
                " embedding vector({dim}) NOT NULL, nterms int NOT NULL DEFAULT 0)"
            ).format(units=self._t_units, docs=self._t_docs, dim=sql.SQL(str(dim))))
            conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (doc_id, position)").format(
                sql.Identifier(f"{self.table_prefix}_units_doc"), self._t_units))
            if self.bm25:
                # tables of a schema written before BM25 statistics existed gain them here
                has = conn.execute("SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                                   "AND attname = 'nterms' AND NOT attisdropped",
                                   [self._t_units.as_string(conn)]).fetchone()
                if has is None:
                    conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN nterms int NOT NULL DEFAULT 0")
                                 .format(self._t_units))
                conn.execute(sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (term text NOT NULL, key bigint NOT NULL,"
                    " tf int NOT NULL, PRIMARY KEY (term, key))").format(self._t_terms))
                conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (key)").format(
                    sql.Identifier(f"{self.table_prefix}_terms_key"), self._t_terms))
                conn.execute(sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (one boolean PRIMARY KEY DEFAULT true CHECK (one),"
                    " n bigint NOT NULL, total_len bigint NOT NULL)").format(self._t_bm25))
                self._sync_terms(conn)
        self._attach_types(self._connection())
        self.dim = dim

    # ------------------------------------------------------------------------------ BM25 terms

    def _analyzer_config(self) -> str:
        return json.dumps(self.analyzer.config(), sort_keys=True)

    def _terms_of(self, content: str) -> tuple[int, list[tuple[str, int]]]:
        """(number of terms, [(escaped term, tf)]) of one sentence, by the store's analyzer."""
        terms = self.analyzer.terms(content)
        counts: dict[str, int] = {}
        for t in terms:
            counts[t] = counts.get(t, 0) + 1
        return len(terms), [(escape_text(t), c) for t, c in counts.items()]

    def _sync_terms(self, conn: Any) -> None:
        """Rebuild the term table when it was written by another analyzer (or never written).

        Runs inside :meth:`open`'s transaction, which holds the schema and the writers' locks.
        """
        sql = self._pg.sql
        config = self._analyzer_config()
        row = conn.execute(sql.SQL("SELECT value FROM {} WHERE key = 'analyzer'").format(self._t_meta)).fetchone()
        if row is not None and row[0] == config:
            return
        conn.execute("SELECT set_config('statement_timeout', '0', true)")  # a rebuild takes a while, once
        self._reindex_terms(conn)
        conn.execute(sql.SQL("INSERT INTO {} (key, value) VALUES ('analyzer', %s) ON CONFLICT (key) "
                             "DO UPDATE SET value = excluded.value").format(self._t_meta), [config])
        if self.statement_timeout_ms:
            conn.execute("SELECT set_config('statement_timeout', %s, true)", [str(int(self.statement_timeout_ms))])

    def _reindex_terms(self, conn: Any) -> None:
        sql = self._pg.sql
        conn.execute(sql.SQL("DELETE FROM {}").format(self._t_terms))
        conn.execute("CREATE TEMP TABLE nlql_tmp_nterms (key bigint, n int) ON COMMIT DROP")
        total_n = total_len = 0
        with conn.cursor(name="nlql_reindex") as src, conn.cursor() as dst:
            src.execute(sql.SQL("SELECT key, content FROM {}").format(self._t_units))
            while True:
                batch = src.fetchmany(5000)
                if not batch:
                    break
                with dst.copy(sql.SQL("COPY {} (term, key, tf) FROM STDIN (FORMAT BINARY)")
                              .format(self._t_terms)) as copy:
                    copy.set_types(["text", "int8", "int4"])
                    lens = []
                    for key, content in batch:
                        n, terms = self._terms_of(unescape_text(content))
                        lens.append((key, n))
                        total_len += n
                        for term, tf in terms:
                            copy.write_row((term, key, tf))
                with dst.copy("COPY nlql_tmp_nterms (key, n) FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(["int8", "int4"])
                    for r in lens:
                        copy.write_row(r)
                total_n += len(batch)
        conn.execute(sql.SQL("UPDATE {} u SET nterms = t.n FROM nlql_tmp_nterms t WHERE u.key = t.key")
                     .format(self._t_units))
        conn.execute(sql.SQL("DELETE FROM {}").format(self._t_bm25))
        conn.execute(sql.SQL("INSERT INTO {} (one, n, total_len) VALUES (true, %s, %s)").format(self._t_bm25),
                     [total_n, total_len])

    def _stale_terms(self, conn: Any) -> None:
        """A write without BM25 statistics: the next store opened with ``bm25=True`` rebuilds them."""
        conn.execute(self._pg.sql.SQL("DELETE FROM {} WHERE key = 'analyzer'").format(self._t_meta))

    def _forget_terms(self, conn: Any, ids: list[str]) -> None:
        """Remove the term rows and statistics of these documents' sentences (before deleting them)."""
        sql = self._pg.sql
        conn.execute(sql.SQL(
            "UPDATE {bm} b SET n = b.n - o.c, total_len = b.total_len - o.s FROM "
            "(SELECT count(*) AS c, coalesce(sum(nterms), 0) AS s FROM {units} WHERE doc_id = ANY(%s::text[])) o"
        ).format(bm=self._t_bm25, units=self._t_units), [ids])
        conn.execute(sql.SQL("DELETE FROM {terms} t USING {units} u WHERE t.key = u.key "
                             "AND u.doc_id = ANY(%s::text[])").format(terms=self._t_terms, units=self._t_units),
                     [ids])

    def _write_terms(self, conn: Any, ids: list[str], term_rows: _Terms, added_n: int, added_len: int) -> None:
        """Insert the term rows of freshly copied sentences (keys come from the identity column)."""
        sql = self._pg.sql
        cur = conn.cursor()
        if term_rows:
            keys = cur.execute(sql.SQL("SELECT doc_id, position, key FROM {} WHERE doc_id = ANY(%s::text[])")
                               .format(self._t_units), [ids]).fetchall()
            with cur.copy(sql.SQL("COPY {} (term, key, tf) FROM STDIN (FORMAT BINARY)")
                          .format(self._t_terms)) as copy:
                copy.set_types(["text", "int8", "int4"])
                for doc_id, position, key in keys:
                    for term, tf in term_rows.get((doc_id, position), ()):
                        copy.write_row((term, key, tf))
        conn.execute(sql.SQL("UPDATE {} SET n = n + %s, total_len = total_len + %s").format(self._t_bm25),
                     [added_n, added_len])

    # ---------------------------------------------------------------------------------- writing

    def upsert(self, docs: Sequence[DocRecord]) -> None:
        """Replace (or insert) whole documents in one transaction; the last of duplicate ids wins."""
        self._need_open()
        latest: dict[str, DocRecord] = {}
        for d in docs:
            latest.pop(d.doc_id, None)
            latest[d.doc_id] = d
        if not latest:
            return
        doc_rows, unit_rows, terms = self._prepare(list(latest.values()))
        ids = [r[0] for r in doc_rows]
        self._guard(lambda: self._write(ids, doc_rows, unit_rows, terms))
        self._small_until = 0.0

    def _prepare(self, docs: list[DocRecord]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], _Terms]:
        """(document rows, unit rows, term rows by (escaped doc id, position)) ready to COPY."""
        from psycopg.types.json import Jsonb

        terms_of: _Terms = {}

        assert self.dim is not None
        header = struct.pack(">HH", self.dim, 0)
        doc_rows: list[tuple[Any, ...]] = []
        unit_rows: list[tuple[Any, ...]] = []
        for d in docs:
            meta = V.normalize_metadata(d.metadata or {})
            if not isinstance(meta, dict):
                raise ValueError(f"metadata of {d.doc_id!r} must be a dict")
            doc_id = escape_text(d.doc_id)
            fold, num, ts = _shadow(d.doc_id)
            doc_rows.append((doc_id, int(d.seq), escape_text(d.text), _exact_json(meta),
                             Jsonb(flatten_metadata(meta), dumps=_compact_json), fold, num, ts))
            if not d.units:
                continue
            vecs = np.asarray(d.vectors, dtype=np.float32)
            if vecs.ndim != 2 or vecs.shape != (len(d.units), self.dim):
                raise ValueError(f"document {d.doc_id!r}: expected {len(d.units)}×{self.dim} vectors, "
                                 f"got {vecs.shape}")
            if not np.isfinite(vecs).all():
                raise ValueError(f"document {d.doc_id!r}: vectors contain NaN or infinity")
            big = vecs.astype(">f4")
            for i, u in enumerate(d.units):
                cfold, cnum, cts = _shadow(u.content)
                nterms = 0
                if self.bm25:
                    nterms, terms_of[(doc_id, int(u.position))] = self._terms_of(u.content)
                unit_rows.append((doc_id, int(u.position), escape_text(u.content), int(u.start), int(u.end),
                                  escape_text(u.tail), int(d.seq), cfold, cnum, cts,
                                  header + big[i].tobytes(), nterms))
        return doc_rows, unit_rows, terms_of

    def _write(self, ids: list[str], doc_rows: list[tuple[Any, ...]], unit_rows: list[tuple[Any, ...]],
               terms: _Terms) -> None:
        sql = self._pg.sql
        with self._tx() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_LOCK_NS, self.table_prefix])
            if self.bm25:
                self._forget_terms(conn, ids)
            else:
                self._stale_terms(conn)
            conn.execute(sql.SQL("DELETE FROM {} WHERE doc_id = ANY(%s::text[])").format(self._t_docs), [ids])
            conn.execute(sql.SQL(
                "INSERT INTO {meta} AS m (key, value) VALUES ('max_seq', %s) ON CONFLICT (key) DO UPDATE "
                "SET value = greatest(m.value::bigint, excluded.value::bigint)::text"
            ).format(meta=self._t_meta), [str(max(r[1] for r in doc_rows))])
            cur = conn.cursor()
            with cur.copy(sql.SQL(
                "COPY {} (doc_id, seq, text, metadata, mflat, fold, num, ts) FROM STDIN (FORMAT BINARY)"
            ).format(self._t_docs)) as copy:
                copy.set_types(["text", "int8", "text", "text", "jsonb", "text", "numeric", "int8"])
                for r in doc_rows:
                    copy.write_row(r)
            if unit_rows:
                with cur.copy(sql.SQL(
                    "COPY {} (doc_id, position, content, start, \"end\", tail, seq, fold, num, ts, embedding,"
                    " nterms) FROM STDIN (FORMAT BINARY)"
                ).format(self._t_units)) as copy:
                    copy.set_types(["text", "int4", "text", "int4", "int4", "text", "int8", "text", "numeric",
                                    "int8", self._vector_oid, "int4"])
                    for r in unit_rows:
                        copy.write_row(r)
            if self.bm25:
                self._write_terms(conn, ids, terms, len(unit_rows), sum(r[-1] for r in unit_rows))

    def delete(self, doc_ids: Sequence[str]) -> int:
        """Delete documents (and their sentences); returns how many documents existed."""
        self._need_open()
        ids = [escape_text(d) for d in dict.fromkeys(doc_ids)]
        if not ids:
            return 0

        def run() -> int:
            with self._tx() as conn:
                conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_LOCK_NS, self.table_prefix])
                if self.bm25:
                    self._forget_terms(conn, ids)
                else:
                    self._stale_terms(conn)
                cur = conn.execute(self._pg.sql.SQL("DELETE FROM {} WHERE doc_id = ANY(%s::text[])")
                                   .format(self._t_docs), [ids])
                return int(cur.rowcount)

        return self._guard(run)

    def count(self) -> int:
        """Number of stored sentences."""
        self._need_open()
        return self._guard(lambda: self._scalar(
            self._pg.sql.SQL("SELECT count(*) FROM {}").format(self._t_units)))

    def max_seq(self) -> int:
        """Largest ``seq`` ever written (0 when nothing was); deleting a document does not lower it."""
        self._need_open()
        return self._guard(lambda: self._scalar(self._pg.sql.SQL(
            "SELECT greatest((SELECT max(seq) FROM {docs}), "
            "(SELECT value::bigint FROM {meta} WHERE key = 'max_seq'), 0)"
        ).format(docs=self._t_docs, meta=self._t_meta)))

    def _scalar(self, query: Any, params: Sequence[Any] = ()) -> int:
        with self._tx() as conn:
            row = conn.execute(query, params).fetchone()
            return int(row[0])

    # ---------------------------------------------------------------------------------- reading

    def compile_filter(self, flt: Filter) -> NativeFilter:
        """The pushed filter tree as a parameterised SQL fragment (see :func:`compile_where`)."""
        return compile_where(flt)

    def _from(self, flt: NativeFilter | None) -> tuple[Any, list[Any]]:
        """``FROM … WHERE …`` for a filter (joining the documents table only when it is read)."""
        sql = self._pg.sql
        if flt is None:
            return sql.SQL("FROM {} u WHERE TRUE").format(self._t_units), []
        where = sql.SQL(flt.native)
        if flt.extra.get("docs", True):
            return (sql.SQL("FROM {} u JOIN {} d ON d.doc_id = u.doc_id WHERE {}")
                    .format(self._t_units, self._t_docs, where), list(flt.extra["params"]))
        return sql.SQL("FROM {} u WHERE {}").format(self._t_units, where), list(flt.extra["params"])

    def scan(self, flt: NativeFilter | None = None) -> list[Any]:
        """Keys of every sentence passing ``flt``, in insertion order (seq, position)."""
        self._need_open()
        from_sql, params = self._from(flt)
        query = self._pg.sql.SQL("SELECT u.key {} ORDER BY u.seq, u.position, u.key").format(from_sql)

        def run() -> list[Any]:
            with self._tx() as conn:
                return [r[0] for r in conn.execute(query, params).fetchall()]

        return self._guard(run)

    def _matching(self, conn: Any, flt: NativeFilter | None, cap: int) -> int:
        """How many rows pass ``flt``, counted up to ``cap + 1``."""
        from_sql, params = self._from(flt)
        query = self._pg.sql.SQL("SELECT count(*) FROM (SELECT 1 {} LIMIT %s) s").format(from_sql)
        return int(conn.execute(query, [*params, cap + 1]).fetchone()[0])

    def knn(self, vectors: np.ndarray, k: int, flt: NativeFilter | None = None,
            min_score: float | None = None) -> list[list[tuple[Any, float]]]:
        """Per query vector, up to ``k`` (key, cosine similarity) pairs, best first.

        Ties break on (seq, position) on the exact path. ``last_stats`` says which path ran.
        """
        self._need_open()
        q = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if k <= 0 or len(q) == 0:
            self.last_stats = {"path": "none", "rounds": 0, "queries": len(q)}
            return [[] for _ in range(len(q))]
        if q.shape[1] != self.dim:
            raise ValueError(f"query vectors have dimension {q.shape[1]}, the store {self.dim}")
        return self._guard(lambda: self._knn(q, int(k), flt, min_score))

    def _knn(self, q: np.ndarray, k: int, flt: NativeFilter | None,
             min_score: float | None) -> list[list[tuple[Any, float]]]:
        stats: dict[str, Any] = {"queries": len(q), "k": k, "matches": None}
        exact, reason = self._index_or_exact(k, stats)
        results: list[list[tuple[Any, float]]] = []
        paths: list[str] = []
        rounds_max = 0
        with self._tx() as conn:
            matching: int | None = None
            if not exact and flt is not None:
                cap = max(10 * k, self.exact_threshold)
                matching = self._matching(conn, flt, cap)
                stats["matches"] = matching if matching <= cap else None  # None: more than the cap
                if matching <= cap:
                    exact, reason = True, f"filter matches {matching} rows (≤ {cap})"
            for vec in q:
                param = _Vector(_vector_bytes(vec))
                if exact:
                    results.append(self._knn_query(conn, param, k, flt, min_score, ef=None)[0])
                    paths.append("exact")
                    rounds_max = max(rounds_max, 1)
                    continue
                ef = max(self.ef_search, k)
                rounds = 0
                path = "hnsw"
                while True:
                    rounds += 1
                    rows, fetched = self._knn_query(conn, param, k, flt, min_score, ef=ef)
                    if fetched >= k:
                        break
                    if min_score is not None and fetched > len(rows):
                        break  # the nearest ones already fall below the threshold
                    if matching is None:
                        matching = self._matching(conn, flt, 1 << 62)
                    if fetched >= matching:  # (a capped count exceeds k, so this never stops early)
                        break  # every matching row came back
                    if ef >= _EF_MAX:
                        rows = self._knn_query(conn, param, k, flt, min_score, ef=None)[0]
                        path = "hnsw+exact"
                        rounds += 1
                        break
                    ef = min(2 * ef, _EF_MAX)
                results.append(rows)
                paths.append(path)
                rounds_max = max(rounds_max, rounds)
                stats["ef_search"] = max(stats.get("ef_search", 0), ef)
        stats["path"] = paths[0] if len(set(paths)) == 1 else "mixed"
        stats["fallback"] = paths.count("hnsw+exact")
        stats["paths"] = paths
        stats["rounds"] = rounds_max
        if reason:
            stats["reason"] = reason
        self.last_stats = stats
        return results

    def _index_or_exact(self, k: int, stats: dict[str, Any]) -> tuple[bool, str]:
        """(exact?, why) for a top-``k`` search, building the HNSW index once the table is large enough."""
        exact, reason = self._exact_reason(k)
        if not exact and not self._index_ready:
            if time.monotonic() >= self._small_until:
                with self._tx() as conn:
                    size = self._matching(conn, None, self.index_threshold)
                if size >= self.index_threshold:
                    try:
                        stats["index_built"] = self._build_index()
                    except self._pg.errors.InsufficientPrivilege as exc:  # a read-only role: stay exact
                        stats["index_error"] = _first_line(exc)
                        self._small_until = time.monotonic() + 300.0
                else:  # re-counted after our next write, or in a while (other engines may write)
                    self._small_until = time.monotonic() + 30.0
            if not self._index_ready:
                exact, reason = True, (f"no HNSW index ({stats['index_error']})" if "index_error" in stats
                                       else f"fewer than {self.index_threshold} rows: no HNSW index yet")
        return exact, reason

    # ------------------------------------------------------------------------------ hybrid SQL

    def run_lowered(self, lowered: Any, vectors: Mapping[str, np.ndarray]) -> list[tuple[Row, dict[str, float]]]:
        """Run a lowered hybrid plan (:class:`~nlql.sql.nodes.Lowered`) as one statement.

        Args:
            lowered: What :mod:`nlql.plan.lower_hybrid` built.
            vectors: Per SIMILARITY slot, its normalised query vectors (one row per text).

        Returns:
            The surviving rows, best first, each with its scores: every SIMILARITY/BM25 slot and the
            fusion slot. ``last_stats`` says which semantic path ran (``exact``/``index``), the rows
            per arm and the rounds.

        Raises:
            UnsupportedError: the store was opened with ``bm25=False``.
        """
        self._need_open()
        if self.dialect is None:
            raise UnsupportedError("pgvector", "hybrid SQL without BM25 statistics",
                                   hint="open PgVectorStore with bm25=True")
        from nlql.sql.nodes import SimilarityScore

        slots: dict[str, Any] = {}
        for s in lowered.scores:
            if isinstance(s, SimilarityScore):
                mat = np.atleast_2d(np.asarray(vectors[s.slot], dtype=np.float32))
                if mat.shape[0] < s.n_vectors or mat.shape[1] != self.dim:
                    raise ValueError(f"{s.slot}: expected {s.n_vectors}×{self.dim} query vectors, got {mat.shape}")
                for i in range(s.n_vectors):
                    slots[s.vector_key(i)] = _Vector(_vector_bytes(mat[i]))
        return self._guard(lambda: self._run_lowered(lowered, slots))

    def _run_lowered(self, lowered: Any, slots: dict[str, Any]) -> list[tuple[Row, dict[str, float]]]:
        assert self.dialect is not None
        sem = lowered.semantic_arms
        stats: dict[str, Any] = {"path": "sql", "depth": lowered.depth, "rounds": 0}
        exact, reason = True, "no semantic arm"
        if sem:
            exact, reason = self._index_or_exact(lowered.depth, stats)
            sem_slots = {a.slot for a in sem}
            if not exact and any(t.slot not in sem_slots or not t.lower_bound for t in lowered.thresholds):
                exact, reason = True, "score conditions inside the semantic arm: an index scan would under-fill"
            if not exact and lowered.filter is not None:
                cap = max(10 * lowered.depth, self.exact_threshold)
                with self._tx() as conn:
                    matching = self._matching(conn, self.compile_filter(lowered.filter), cap)
                stats["matches"] = matching if matching <= cap else None
                if matching <= cap:
                    exact, reason = True, f"filter matches {matching} rows (≤ {cap})"
        ef = max(self.ef_search, lowered.depth)
        while True:
            stats["rounds"] += 1
            mode = "exact" if exact else "index"
            compiled = self.dialect.compile(lowered, mode)
            with self._tx() as conn:
                if mode == "index":
                    conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(ef)])
                    stats["ef_search"] = ef
                cur = self._pg.RawCursor(conn)
                raw = cur.execute(compiled.text, compiled.params(slots), prepare=False).fetchall()
                underfilled = False
                if mode == "index":
                    underfilled = self._underfilled(conn, lowered, raw)
            if not underfilled:
                break
            if ef >= _EF_MAX or not raw:
                exact, reason = True, "the index scan under-filled an arm: exact fallback"
            else:
                ef = min(2 * ef, _EF_MAX)
        stats["mode"] = mode
        stats["reason"] = reason
        n_scores = len(compiled.columns)
        arm_rows = list(raw[0][10 + n_scores + 1]) if raw else []
        stats["arm_rows"] = {a.binding: int(n) for a, n in zip(lowered.fusion.arms, arm_rows, strict=False)}
        self.last_stats = stats
        built = self._build_rows([r[:10] for r in raw])
        single = lowered.fusion.method == "SINGLE"
        out: list[tuple[Row, dict[str, float]]] = []
        for (_, row), r in zip(built, raw, strict=True):
            assert row is not None
            scores = {slot: float(v) for slot, v in zip(compiled.columns, r[10:10 + n_scores], strict=True)}
            if not single:
                scores[lowered.fusion.slot] = float(r[10 + n_scores])
            out.append((row, scores))
        return out

    def _underfilled(self, conn: Any, lowered: Any, raw: list[tuple[Any, ...]]) -> bool:
        """Whether an index-served semantic arm returned fewer rows than its depth while more match."""
        if not raw:
            return True  # nothing came back at all: let the exact scan confirm it
        n_scores = len(lowered.scores)
        counts = list(raw[0][10 + n_scores + 1])
        short = [n for a, n in zip(lowered.fusion.arms, counts, strict=False)
                 if a.kind == "semantic" and n < lowered.depth]
        if not short:
            return False
        flt = self.compile_filter(lowered.filter) if lowered.filter is not None else None
        return self._matching(conn, flt, lowered.depth) > min(short)

    def _exact_reason(self, k: int) -> tuple[bool, str]:
        if self.exact:
            return True, "exact=True"
        if not self.hnsw:
            return True, "hnsw=False"
        if k > _EF_MAX:
            return True, f"k > {_EF_MAX} (the largest hnsw.ef_search)"
        return False, ""

    def build_index(self) -> bool:
        """Build the HNSW index now if it does not exist (e.g. after a bulk load).

        Returns:
            Whether this call built it.
        """
        self._need_open()
        if not self.hnsw:
            return False
        return self._guard(self._build_index)

    def _build_index(self) -> bool:
        sql = self._pg.sql
        name = sql.Identifier(f"{self.table_prefix}_units_hnsw")
        conn = self._connection()
        with conn.transaction():
            # no statement timeout here: a build over a large table takes a while, once
            conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_LOCK_NS, self.table_prefix])
            exists = conn.execute("SELECT to_regclass(%s)", [name.as_string(conn)]).fetchone()[0]
            if exists is None:
                conn.execute(sql.SQL(
                    "CREATE INDEX {} ON {} USING hnsw (embedding vector_cosine_ops) "
                    "WITH (m = {}, ef_construction = {})"
                ).format(name, self._t_units, sql.Literal(self.m), sql.Literal(self.ef_construction)))
        self._index_ready = True
        return exists is None

    def _knn_query(self, conn: Any, vec: _Vector, k: int, flt: NativeFilter | None,
                   min_score: float | None, *, ef: int | None) -> tuple[list[tuple[Any, float]], int]:
        """One top-k query: exact when ``ef`` is None, else HNSW with that ``ef_search``.

        Returns the rows passing ``min_score`` and how many rows the top-k cut produced.
        """
        sql = self._pg.sql
        from_sql, params = self._from(flt)
        if ef is None:
            # "+ 0" keeps the HNSW index from serving this ORDER BY: the scan is exact
            inner = sql.SQL("SELECT u.key, u.seq, u.position, (u.embedding <=> %s) + 0 AS dist {} "
                            "ORDER BY dist, u.seq, u.position, u.key LIMIT %s").format(from_sql)
        else:
            conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(ef)])
            inner = sql.SQL("SELECT u.key, u.seq, u.position, u.embedding <=> %s AS dist {} "
                            "ORDER BY dist LIMIT %s").format(from_sql)
        cond = sql.SQL("1 - c.dist >= %s") if min_score is not None else sql.SQL("TRUE")
        query = sql.SQL("WITH c AS MATERIALIZED ({inner}) "
                        "SELECT n.total, c.key, 1 - c.dist FROM (SELECT count(*) AS total FROM c) n "
                        "LEFT JOIN c ON {cond} ORDER BY c.dist, c.seq, c.position, c.key").format(
                            inner=inner, cond=cond)
        args: list[Any] = [vec, *params, k]
        if min_score is not None:
            args.append(float(min_score))
        rows = conn.execute(query, args, prepare=False).fetchall()
        fetched = int(rows[0][0]) if rows else 0
        return [(r[1], float(r[2])) for r in rows if r[1] is not None], fetched

    def _rows(self, where: str, params: list[Any], order: str) -> list[tuple[Any, ...]]:
        sql = self._pg.sql
        query = sql.SQL(
            "SELECT u.key, u.doc_id, u.position, u.content, u.seq, u.start, u.\"end\", u.tail, "
            "d.metadata::text, d.doc_id FROM {docs} d LEFT JOIN {units} u ON u.doc_id = d.doc_id "
            "WHERE {where} ORDER BY {order}"
        ).format(docs=self._t_docs, units=self._t_units, where=sql.SQL(where), order=sql.SQL(order))
        with self._tx() as conn:
            return conn.execute(query, params, prepare=True).fetchall()

    @staticmethod
    def _build_rows(raw: list[tuple[Any, ...]]) -> list[tuple[str, Row | None]]:
        metas: dict[str, dict[str, Any]] = {}
        out: list[tuple[str, Row | None]] = []
        for key, _, position, content, seq, start, end, tail, meta_text, doc in raw:
            doc_id = unescape_text(doc)
            if key is None:
                out.append((doc_id, None))
                continue
            meta = metas.get(doc_id)
            if meta is None:
                meta = metas[doc_id] = json.loads(meta_text)
            out.append((doc_id, Row(key=key, doc_id=doc_id, position=position, content=unescape_text(content),
                                    metadata=meta, seq=seq, start=start, end=end, tail=unescape_text(tail))))
        return out

    def fetch(self, keys: Sequence[Any]) -> list[Row]:
        """Rows for keys, in the order of ``keys`` (a key deleted meanwhile is skipped)."""
        self._need_open()
        wanted = [int(k) for k in keys]
        if not wanted:
            return []
        raw = self._guard(lambda: self._rows("u.key = ANY(%s::bigint[])", [wanted], "u.key"))
        by_key = {row.key: row for _, row in self._build_rows(raw) if row is not None}
        return [by_key[k] for k in wanted if k in by_key]

    def document_rows(self, doc_ids: Sequence[str]) -> dict[str, list[Row]]:
        """Every sentence of each stored document, by position (unknown ids are left out)."""
        self._need_open()
        ids = [escape_text(d) for d in dict.fromkeys(doc_ids)]
        if not ids:
            return {}
        raw = self._guard(lambda: self._rows("d.doc_id = ANY(%s::text[])", [ids], "d.doc_id, u.position"))
        out: dict[str, list[Row]] = {}
        for doc_id, row in self._build_rows(raw):
            rows = out.setdefault(doc_id, [])
            if row is not None:
                rows.append(row)
        return {d: out[d] for d in dict.fromkeys(doc_ids) if d in out}

    def similarities(self, vectors: np.ndarray, keys: Sequence[Any]) -> np.ndarray:
        """(len(vectors), len(keys)) cosine matrix in float32 (NaN for a key deleted meanwhile)."""
        self._need_open()
        q = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        wanted = [int(k) for k in keys]
        if not wanted:
            return np.zeros((len(q), 0), dtype=np.float32)
        query = self._pg.sql.SQL("SELECT key, embedding FROM {} WHERE key = ANY(%s::bigint[])").format(
            self._t_units)

        def run() -> dict[int, np.ndarray]:
            with self._tx() as conn:
                cur = conn.cursor(binary=True)
                return {int(k): v for k, v in cur.execute(query, [wanted], prepare=True).fetchall()}

        found = self._guard(run)
        assert self.dim is not None
        mat = np.full((len(wanted), self.dim), np.nan, dtype=np.float32)
        for i, k in enumerate(wanted):
            vec = found.get(k)
            if vec is not None:
                mat[i] = vec
        return np.atleast_2d(q @ mat.T)

    def close(self) -> None:
        """Close the connection this store opened (a connection passed in is left open)."""
        with self._lock:
            if self._own_conn:
                self._drop_connection()
            else:
                self._conn = None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
