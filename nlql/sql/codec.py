"""How text and metadata are stored in SQL tables so that SQL compares them exactly as NLQL does.

Shared by every dialect whose store writes the rows itself (PostgreSQL, DuckDB).

**The text escape.** PostgreSQL text cannot hold ``\\x00`` and no UTF-8 text can hold a lone surrogate.
Every stored text value (doc ids, content, tails, document text, metadata strings) is escaped: the
characters U+0000–U+0008 and U+D800–U+DFFF become ``\\x01`` followed by four base-7 digits written as
U+0002–U+0008 (their rank: the code point for U+0000–U+0008, 9 + offset for the surrogates); everything
else is stored as is. The code is prefix-free, its lead byte never appears elsewhere and its digits
never appear unescaped, so it is reversible, equality- and substring-preserving (a needle can only match
at code-word boundaries), ``LIKE``-preserving (``_`` is translated, see
:func:`nlql.sql.filters.like_sql`), and order-preserving under byte order for every string without lone
surrogates (those sort as if below U+0009 — the one documented difference from Python's code-point order).

**Typed flattened metadata.** At ingestion every non-null metadata value reachable through dicts is
recorded under its path (the key is ``json.dumps(list(path))``) with the types NLQL compares by,
computed in Python by :mod:`nlql.values` itself::

    {"s": <escaped string>, "f": <escaped casefold, only if different>,
     "n": <as_number: numbers and numeric strings>, "t": <ISO string as µs since the epoch>,
     "b": <bool>}            -- a dict/list/huge int is recorded as {} (present, never comparable)

so ``"2025" == 2025``, ISO strings against DATE/TIMESTAMP, ``CONTAINS`` with Python's ``casefold`` and
float equality all mean in SQL exactly what they mean in Python.
"""

from __future__ import annotations

import functools
import json
import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from nlql import values as V

__all__ = [
    "Shadow",
    "TextCodec",
    "compact_json",
    "escape_text",
    "exact_json",
    "flatten_metadata",
    "list_members",
    "micros",
    "path_key",
    "shadow",
    "string_key",
    "to_decimal",
    "unescape_text",
]

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
    """Make a Python string storable in SQL text (no NUL, no lone surrogate), reversibly.

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


class TextCodec:
    """How a store's text columns are written: :func:`escape_text` (``escaped=True``, the stores that
    write their own rows) or verbatim (a table NLQL only reads, such as a user's Parquet file).

    ``one_char`` is the regular expression that matches one stored character, for LIKE's ``_``.
    """

    def __init__(self, escaped: bool = True) -> None:
        self.escaped = escaped
        self.one_char = "(?:\x01[\x02-\x08]{4}|[^\x01-\x08])" if escaped else "."

    def escape(self, s: str) -> str:
        return escape_text(s) if self.escaped else s

    def unescape(self, s: str) -> str:
        return unescape_text(s) if self.escaped else s

    def __repr__(self) -> str:
        return f"TextCodec(escaped={self.escaped})"


# ------------------------------------------------------------------------------ typed metadata

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_US = timedelta(microseconds=1)


def micros(dt: datetime) -> int:
    """An aware datetime as microseconds since the epoch."""
    return (dt - _EPOCH) // _ONE_US


def to_decimal(f: float) -> Decimal:
    """``repr`` is the shortest string that reads back as ``f``, so these decimals order like floats."""
    return Decimal(repr(f))


def _typed(v: Any, escape: Callable[[str], str] = escape_text) -> dict[str, Any]:
    """The typed record of one non-null value (see the module docstring)."""
    if isinstance(v, bool):
        return {"b": v}
    if isinstance(v, (int, float)):
        f = V.as_number(v)
        return {"n": f} if f is not None else {}
    if isinstance(v, str):
        rec: dict[str, Any] = {"s": escape(v)}
        folded = v.casefold()
        if folded != v:
            rec["f"] = escape(folded)
        num = V.numeric_string(v)
        if num is not None:
            rec["n"] = num
        dt = V.iso_datetime(v)
        if dt is not None:
            rec["t"] = micros(dt)
        return rec
    return {}


def path_key(keys: Sequence[str]) -> str:
    """The key of a metadata path in the flattened record: its JSON list, ASCII only (NUL-free, injective)."""
    return _path_key(tuple(keys))


@functools.lru_cache(maxsize=8192)
def _path_key(keys: tuple[str, ...]) -> str:  # the same few keys come back for every document
    return json.dumps(list(keys), ensure_ascii=True)


def string_key(path: str, s: str) -> int:
    """An integer checksum (CRC-32) of a path key and a stored (escaped) string value: a store may keep it
    beside the pair so that an equality test first compares integers, then the strings of the few rows
    left (two pairs may share a checksum: it narrows, the strings decide). Computed the same in every
    process and version (``zlib.crc32`` of the UTF-8 bytes of ``path + "\\x00" + s``; neither holds NUL).

    >>> string_key('["tag"]', "t7") == string_key('["tag"]', "t7") != string_key('["tag"]', "t8")
    True
    """
    return zlib.crc32(f"{path}\x00{s}".encode("utf-8", "surrogatepass"))


def flatten_metadata(metadata: dict[str, Any], escape: Callable[[str], str] = escape_text
                     ) -> dict[str, dict[str, Any]]:
    """Every non-null value reachable through dicts, by path key, as a typed record (strings written
    with ``escape``: :func:`escape_text` by default).

    >>> flatten_metadata({"year": "2025", "a": {"b": True}})
    {'["year"]': {'s': '2025', 'n': 2025.0}, '["a"]': {}, '["a", "b"]': {'b': True}}
    """
    return {path_key(path): _typed(v, escape) for path, v in _values(metadata)}


def _values(metadata: dict[str, Any]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, value) of every non-null value reachable through dicts (dicts themselves included), in the
    order :func:`flatten_metadata` has always written them."""
    stack: list[tuple[tuple[str, ...], dict[str, Any]]] = [((), metadata)]
    while stack:
        prefix, node = stack.pop()
        for k, v in node.items():
            if V.is_null(v):
                continue
            path = (*prefix, str(k))
            yield path, v
            if isinstance(v, dict):
                stack.append((path, v))


def list_members(metadata: dict[str, Any], escape: Callable[[str], str] = escape_text
                 ) -> dict[str, list[dict[str, Any]]]:
    """Every list value reachable through dicts, by path key (as :func:`flatten_metadata`), as the
    distinct typed records of its members, for list membership (SPEC §11 ``HAS``): a member compares
    as ``==`` compares a scalar. Members no comparison can match (null, a list, a dict, an int beyond
    the float range) are left out; an empty list (or one of such members only) is still recorded, with
    no record, so that a list is told from a missing key.

    >>> list_members({"tags": ["rag", "2025", None, "rag"], "a": {"b": []}, "x": 1})
    {'["a", "b"]': [], '["tags"]': [{'s': 'rag'}, {'s': '2025', 'n': 2025.0}]}
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for path, v in _values(metadata):
        if isinstance(v, (list, tuple)):
            seen: dict[str, dict[str, Any]] = {}
            for item in v:
                if V.is_null(item) or isinstance(item, (dict, list, tuple)):
                    continue
                rec = _typed(item, escape)
                if rec:
                    seen.setdefault(compact_json(rec), rec)
            out[path_key(path)] = list(seen.values())
    return dict(sorted(out.items()))


def compact_json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def exact_json(obj: Any) -> str:
    """JSON text that keeps the metadata exactly: NUL and lone surrogates become ``\\u`` escapes."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if _SURROGATE.search(text) is not None:
        text = json.dumps(obj, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text


Shadow = tuple[str | None, float | None, int | None]


def shadow(s: str, escape: Callable[[str], str] = escape_text) -> Shadow:
    """(escaped casefold if different, number, µs) of a built-in string field (doc_id, content)."""
    folded = s.casefold()
    num = V.numeric_string(s)
    dt = V.iso_datetime(s)
    return (
        escape(folded) if folded != s else None,
        num,
        micros(dt) if dt is not None else None,
    )
