"""Value semantics (SPEC §6): three-valued comparisons, numeric strings, ISO dates.

This module is the single definition of what a comparison means. The residual evaluator uses it row by
row; the built-in store's vectorised masks and every store that evaluates pushed filters in Python are
tested against it.

A result is ``True``, ``False`` or ``None`` (UNKNOWN).
"""

from __future__ import annotations

import math
import re
import sys
from datetime import date, datetime, timezone
from functools import lru_cache
from typing import Any

from nlql.patterns import Regex, compile_like, compile_regex

MISSING: Any = None  # a missing key behaves exactly like null

_NUMERIC = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_ISO_DATE = re.compile(r"\d{4}-\d{2}(?:-\d{2})?(?:[T ].*)?")


SCORE_DECIMALS = 6


def round_scores(scores: Any) -> Any:
    """Round cosine scores to ``SCORE_DECIMALS`` places (in place for float arrays; returns the array).

    float32 dot products carry ~1e-7 noise that depends on the BLAS kernel, the row's position and the
    store (pgvector computes in float4): rounding makes equal texts tie exactly, so ties break on
    insertion order, and every store reports the same score.
    """
    import numpy as np

    return np.round(scores, SCORE_DECIMALS, out=scores) if isinstance(scores, np.ndarray) else round(
        float(scores), SCORE_DECIMALS)


def is_null(v: Any) -> bool:
    """Null for NLQL: None, a missing key, or a float NaN."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@lru_cache(maxsize=65536)
def numeric_string(s: str) -> float | None:
    """The number a numeric string spells (``"2025"`` → 2025.0), else None. Whitespace is not allowed."""
    if len(s) > 400 or not _NUMERIC.fullmatch(s):
        return None
    try:
        f = float(s)
    except (ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def as_number(v: Any) -> float | None:
    """A number or numeric string as float; anything else None. (Comparisons use :func:`exact_number`.)"""
    if is_number(v):
        try:
            f = float(v)
        except OverflowError:
            return None
        return f if math.isfinite(f) else None
    if isinstance(v, str):
        return numeric_string(v)
    return None


#: Magnitude from which a float no longer holds every integer: a comparison there needs exact values.
EXACT_FLOAT_LIMIT = 2**53


def exact_number(v: Any) -> int | float | None:
    """A number or numeric string as an exact value: an int for integers (and for numeric strings
    written as integers, ``"9007199254740993"``), else a float; None when it is not a number or lies
    beyond the float range (about 1.8e308, where no store can compare it).

    Python compares ints with ints and with floats exactly, so ``2**53 + 1 != 2**53`` (SPEC §6).
    """
    t = type(v)
    if t is int:
        return v if -_FLOAT_MAX <= v <= _FLOAT_MAX else None  # an exact int-float comparison
    if t is float:
        return v if math.isfinite(v) else None
    if t is str:
        return _numeric_exact(v)
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    if isinstance(v, str):
        return _numeric_exact(str(v))
    if isinstance(v, int):
        return int(v) if -_FLOAT_MAX <= v <= _FLOAT_MAX else None
    f = float(v)
    return f if math.isfinite(f) else None


_FLOAT_MAX = sys.float_info.max


_INTEGER = re.compile(r"[+-]?\d+")


@lru_cache(maxsize=65536)
def _numeric_exact(s: str) -> int | float | None:
    f = numeric_string(s)
    if f is None:
        return None
    return int(s) if _INTEGER.fullmatch(s) else f


def needs_exact(v: Any) -> bool:
    """Whether ``v`` (a literal of a pushed leaf) is a number, or numeric string, at or beyond 2^53 in
    magnitude: a store comparing float64 views could answer it wrongly (see ``Capabilities.EXACT_INTS``)."""
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float)) or isinstance(v, str):
        num = exact_number(v)
        return num is not None and abs(num) >= EXACT_FLOAT_LIMIT
    return False


@lru_cache(maxsize=65536)
def iso_datetime(s: str) -> datetime | None:
    """Parse an ISO-8601 date/datetime string to an aware datetime (naive → UTC), else None."""
    if len(s) > 64 or not _ISO_DATE.fullmatch(s):
        return None
    text = s.replace("Z", "+00:00").replace("z", "+00:00")
    try:
        if len(text) == 7:  # YYYY-MM
            dt = datetime.strptime(text, "%Y-%m")
        else:
            dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt


def as_datetime(v: Any) -> datetime | None:
    """A datetime, date or ISO string as an aware datetime; anything else None."""
    if isinstance(v, datetime):
        return v if v.tzinfo else v.replace(tzinfo=timezone.utc)
    if isinstance(v, date):
        return datetime(v.year, v.month, v.day, tzinfo=timezone.utc)
    if isinstance(v, str):
        return iso_datetime(v)
    return None


def comparable(a: Any, b: Any) -> tuple[Any, Any] | None:
    """Bring two non-null values to one comparable type, or None when the comparison is UNKNOWN.

    Rules: bool only with bool; numbers with numbers and numeric strings (numerically); datetimes with
    datetimes and ISO strings; strings with strings (a numeric string against a number is numeric).
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return (a, b) if isinstance(a, bool) and isinstance(b, bool) else None
    if isinstance(a, (datetime, date)) or isinstance(b, (datetime, date)):
        da, db = as_datetime(a), as_datetime(b)
        return (da, db) if da is not None and db is not None else None
    if is_number(a) or is_number(b):
        na, nb = exact_number(a), exact_number(b)
        return (na, nb) if na is not None and nb is not None else None
    if isinstance(a, str) and isinstance(b, str):
        return a, b
    return None


def compare(op: str, a: Any, b: Any) -> bool | None:
    """``a op b`` under SQL three-valued logic; op in ``== != < <= > >=``."""
    if is_null(a) or is_null(b):
        return None
    pair = comparable(a, b)
    if pair is None:
        return None
    x, y = pair
    if op == "==":
        return bool(x == y)
    if op == "!=":
        return bool(x != y)
    if op == "<":
        return bool(x < y)
    if op == "<=":
        return bool(x <= y)
    if op == ">":
        return bool(x > y)
    if op == ">=":
        return bool(x >= y)
    raise ValueError(f"unknown comparison {op!r}")


def in_list(value: Any, options: tuple[Any, ...] | list[Any]) -> bool | None:
    """SQL IN, i.e. ``value == o1 OR value == o2 …``: TRUE on a match, else UNKNOWN if any comparison was."""
    if is_null(value):
        return None
    saw_unknown = False
    for opt in options:
        r = compare("==", value, opt)
        if r:
            return True
        if r is None:
            saw_unknown = True
    return None if saw_unknown else False


def _member(items: list[Any] | tuple[Any, ...], needle: Any) -> bool:
    """Whether some item of a list equals ``needle`` as ``==`` compares (numeric strings, exact integers);
    an item ``==`` cannot compare with it (null, another type) is simply not a match."""
    return any(compare("==", item, needle) is True for item in items)


def has(value: Any, needle: Any) -> bool | None:
    """``value HAS needle`` (SPEC §11): membership on a list, ``==`` on a scalar, UNKNOWN on null.

    On a list the answer is TRUE or FALSE (never UNKNOWN): a list either holds the value or does not;
    an empty list holds nothing. A null needle is UNKNOWN, as every comparison with null is.
    """
    if is_null(value) or is_null(needle):
        return None
    if isinstance(value, (list, tuple)):
        return _member(value, needle)
    return compare("==", value, needle)


def has_any(value: Any, needles: list[Any] | tuple[Any, ...]) -> bool | None:
    """``value HAS ANY (n1, n2, …)``: on a list, TRUE when it holds at least one of them (FALSE for an
    empty list or no needles); on a scalar ``value IN (…)``; UNKNOWN on null."""
    if is_null(value):
        return None
    if isinstance(value, (list, tuple)):
        return any(not is_null(n) and _member(value, n) for n in needles)
    return in_list(value, needles)


def has_all(value: Any, needles: list[Any] | tuple[Any, ...]) -> bool | None:
    """``value HAS ALL (n1, n2, …)``: on a list, TRUE when it holds every one of them (``HAS ALL ()``
    is TRUE for any list); on a scalar ``value == n1 AND value == n2 …``; UNKNOWN on null."""
    if is_null(value):
        return None
    if isinstance(value, (list, tuple)):
        return all(not is_null(n) and _member(value, n) for n in needles)
    acc: bool | None = True
    for n in needles:
        acc = and3(acc, compare("==", value, n))
        if acc is False:
            return False
    return acc


def contains(value: Any, needle: Any) -> bool | None:
    """Case-insensitive substring test; UNKNOWN unless both are strings."""
    if not isinstance(value, str) or not isinstance(needle, str):
        return None
    return needle.casefold() in value.casefold()


def like(value: Any, pattern: Any) -> bool | None:
    """SQL LIKE: case-sensitive, whole string; ``%`` any run, ``_`` one character, ``\\`` escapes the
    next character (a trailing lone ``\\`` is itself). Linear time (:mod:`nlql.patterns`)."""
    if not isinstance(value, str) or not isinstance(pattern, str):
        return None
    return compile_like(pattern)(value)


def match(value: Any, regex: Regex | re.Pattern[str] | str) -> bool | None:
    """Python regex search, run on RE2 where the pattern allows (:mod:`nlql.patterns`)."""
    if not isinstance(value, str):
        return None
    if isinstance(regex, re.Pattern):
        regex = regex.pattern
    if isinstance(regex, str):
        regex = compile_regex(regex)
    return regex.search(value)


def not3(v: bool | None) -> bool | None:
    return None if v is None else not v


def and3(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def or3(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def lookup(metadata: Any, keys: tuple[str, ...]) -> Any:
    """``meta.a.b`` on a metadata dict; a missing key (or a non-dict on the way) is null."""
    cur = metadata
    for k in keys:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(k)
        if cur is None:
            return None
    return cur


def sort_key(v: Any) -> tuple[int, Any]:
    """A total order for ORDER BY over mixed values: numbers < strings < datetimes < bools < others.

    Numeric strings sort as the numbers they spell, among the numbers (``2025`` and ``"2025"`` tie).

    Nulls are handled by the caller (NULLS FIRST/LAST).
    """
    if is_number(v):
        num = exact_number(v)  # exact: 2**53 + 1 sorts after 2**53
        return (0, num if num is not None else (math.inf if v > 0 else -math.inf))
    if isinstance(v, str):
        num = _numeric_exact(v)  # "2025" sorts with 2025 (SPEC §6: they tie)
        return (0, num) if num is not None else (1, v)
    if isinstance(v, (datetime, date)):
        dt = as_datetime(v)
        return (2, dt.timestamp() if dt else 0.0)
    if isinstance(v, bool):
        return (3, int(v))
    return (4, repr(v))


def distinct_key(v: Any, _depth: int = 0) -> Any:
    """A hashable key under which equal values fall together (DISTINCT BY, as SQL DISTINCT).

    NULL (and a missing key) is one value; numbers are one value when they are equal exactly (``1`` and
    ``1.0`` together, ``2**53 + 1`` apart from ``2**53``; NaN is null); booleans, strings, dates and
    numbers never share a group (``"1"`` is not ``1``: numeric-string equality is a comparison rule, not
    an equivalence, since ``"1.0" == 1 == "1"`` while ``"1.0" != "1"``). Lists and maps compare item by
    item.
    """
    if is_null(v):
        return ("null",)
    if isinstance(v, bool):
        return ("bool", v)
    if is_number(v):
        num = exact_number(v)
        return ("num", num if num is not None else v)
    if isinstance(v, str):
        return ("str", v)
    if isinstance(v, datetime):
        return ("time", v)
    if isinstance(v, date):
        return ("date", v)
    if _depth > 32:
        return ("other", repr(v))
    if isinstance(v, (list, tuple)):
        return ("list", tuple(distinct_key(x, _depth + 1) for x in v))
    if isinstance(v, dict):
        return ("map", tuple(sorted((str(k), distinct_key(x, _depth + 1)) for k, x in v.items())))
    try:
        hash(v)
    except TypeError:
        return ("other", repr(v))
    return ("other", v)


def normalize_metadata(value: Any, _depth: int = 0) -> Any:
    """Make user metadata JSON-safe for every store: dates → ISO strings, tuples → lists, keys → str.

    NaN/inf floats become None (null); bytes are decoded as UTF-8 with replacement. Nesting deeper than
    32 levels is cut (the deeper value becomes its string form).
    """
    if _depth > 32:
        return deep_str(value)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(k): normalize_metadata(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [normalize_metadata(v, _depth + 1) for v in items]
    if hasattr(value, "item"):  # numpy scalars
        try:
            return normalize_metadata(value.item(), _depth + 1)
        except Exception:  # noqa: BLE001 - fall through to str
            pass
    return str(value)


def deep_str(value: Any) -> str:
    """``str(value)``, computed without recursion, so a value nested thousands deep has a string form.

    Containers (dicts, lists, tuples, sets) are written as ``repr`` writes them, a container inside
    itself as ``{...}``/``[...]``; anything else is ``str`` at the top and ``repr`` inside a container.
    """
    if not isinstance(value, (dict, list, tuple, set, frozenset)):
        return str(value)
    out: list[str] = []
    # work items: a value to write, or a literal piece of text (str in a 1-tuple)
    stack: list[Any] = [(value, False)]
    active: set[int] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        if item[0] is _LEAVE:
            active.discard(item[1])
            continue
        v, _ = item
        if isinstance(v, (dict, list, tuple, set, frozenset)):
            if id(v) in active:
                out.append("{...}" if isinstance(v, dict) else "[...]" if isinstance(v, list) else "(...)")
                continue
            if isinstance(v, dict):
                opening, closing = "{", "}"
                parts: list[Any] = []
                for k, x in v.items():
                    parts.append((k, True))
                    parts.append(": ")
                    parts.append((x, True))
                    parts.append(", ")
            else:
                if isinstance(v, list):
                    opening, closing = "[", "]"
                elif isinstance(v, tuple):
                    opening, closing = "(", ",)" if len(v) == 1 else ")"
                elif not v:
                    out.append("set()" if isinstance(v, set) else "frozenset()")
                    continue
                elif isinstance(v, set):
                    opening, closing = "{", "}"
                else:
                    opening, closing = "frozenset({", "})"
                parts = []
                for x in v:
                    parts.append((x, True))
                    parts.append(", ")
            if parts:
                parts.pop()  # the last separator
            active.add(id(v))
            out.append(opening)
            stack.append((_LEAVE, id(v)))
            stack.append(closing)
            stack.extend(reversed(parts))
        else:
            out.append(repr(v))
    return "".join(out)


_LEAVE = object()


def json_default(value: Any) -> Any:
    """``json.dumps(..., default=json_default)``: numpy scalars become numbers, dates ISO text, the rest str.

    The one JSON fallback for results, explain output and tool answers.

    >>> import json, datetime
    >>> json.dumps({"d": datetime.date(2024, 6, 1)}, default=json_default)
    '{"d": "2024-06-01"}'
    """
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return item()
    iso = getattr(value, "isoformat", None)
    if callable(iso):
        return iso()
    return str(value)


def jsonable_scalar(value: Any) -> Any:
    """A score or binding value as plain data: datetimes as ISO text, numpy scalars as Python numbers."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":
        return item()
    return value


def normalize_rows(mat: Any, *, zero_invalid: bool = False) -> Any:
    """The rows of ``mat`` scaled to unit L2 length, as float32: the one normaliser of engine and stores.

    Zero rows stay zero. A row holding NaN stays NaN (stores mark missing vectors that way), unless
    ``zero_invalid``: then it becomes zero (the engine's reading of an embedder's bad output).

    >>> [[round(float(x), 3) for x in row] for row in normalize_rows([[3.0, 4.0], [0.0, 0.0]])]
    [[0.6, 0.8], [0.0, 0.0]]
    """
    import numpy as np

    arr = np.asarray(mat, dtype=np.float32)
    if arr.ndim < 2:
        arr = np.atleast_2d(arr)
    # numpy.linalg.norm(arr, axis=1, keepdims=True) for real input, without its argument handling
    # (~15 us a call, most of a one-row query's normalisation): the same ufuncs, the same bits
    squares = np.add.reduce(arr * arr, axis=1, keepdims=True)
    if squares.size == 1 and arr.ndim == 2:  # one row (a query): its length as a Python float
        ss = squares.item()
        if 0.0 < ss < math.inf:
            # float32(sqrt(x)) through a double is np.sqrt's float32 result: sqrt rounded twice (to 53,
            # then 24 bits) is sqrt rounded once, as 53 >= 2 * 24 + 2; one ufunc call fewer
            return arr / np.float32(math.sqrt(ss))
    norms = np.sqrt(squares)
    if zero_invalid:
        if norms.size and norms.min() > 0:  # every row has a length (a NaN one is not > 0): a plain divide
            return arr / norms
        return np.divide(arr, norms, out=np.zeros(arr.shape, dtype=np.float32), where=norms > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.ascontiguousarray(arr / np.where(norms == 0, np.float32(1), norms))
