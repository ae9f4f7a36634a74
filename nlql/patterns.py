"""LIKE and MATCH matchers whose running time is bounded (SPEC §6 semantics, docs/reliability.md).

``LIKE`` patterns compile to :class:`LikeMatcher`: the pattern is cut at each ``%`` into fixed-length
segments, the first must match at the start, the last at the end and the ones between are found
leftmost, in order. A fixed-length segment never backtracks, so one match costs at most
O(len(text) × len(pattern)) — ``"%a%a%a%a%a%a%c"`` on 3,000 ``a`` is a few microseconds, not minutes.
``\\`` escapes the next character (``\\%``, ``\\_``, ``\\\\``); a trailing lone ``\\`` is a literal
backslash (as pgvector's LIKE translation reads it).

``MATCH`` patterns keep Python's ``re`` semantics (SPEC §6) but run on RE2, a linear-time engine (the
maintained ``google-re2`` bindings, the ``re2`` extra), whenever the pattern can be written in RE2 with
exactly the same meaning. :func:`compile_regex` parses the pattern with Python's own parser and writes
an equivalent RE2 pattern from the parse tree: every character class (``\\w``, ``\\d``, ``\\s``,
``[…]`` under ``(?i)``, …) is spelled out as the exact code-point ranges Python's ``re`` matches, ``$``
at the end of the pattern becomes ``\\n?\\z``, ``^`` is ``\\A``. What RE2 cannot express with Python's
meaning — backreferences, lookaround, atomic groups and possessive repeats, Unicode ``\\b``/``\\B``,
``$`` before more pattern, repeat counts over 1,000 — runs on a backtracking engine instead (the
``regex`` module, which can be interrupted), bounded by :data:`BACKTRACK_LIMIT` seconds per value and
by the search's deadline: past the limit it is a :class:`~nlql.errors.LimitError`, past the deadline a
:class:`~nlql.errors.NLQLTimeoutError`. Without ``google-re2`` installed every pattern takes that
bounded path. A value holding lone surrogates (which RE2's UTF-8 input cannot carry) takes it too.
"""

from __future__ import annotations

import contextvars
import re
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from nlql.errors import LimitError, NLQLTimeoutError

try:  # Python 3.11+
    from re import _constants as _C  # type: ignore[attr-defined]
    from re import _parser as _P  # type: ignore[attr-defined]
    from re._casefix import _EXTRA_CASES  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_compile as _SC
    import sre_constants as _C  # type: ignore[no-redef]
    import sre_parse as _P  # type: ignore[no-redef]

    _EXTRA_CASES = getattr(_SC, "_ignorecase_fixes", {})

import _sre

try:
    import re2 as _re2
except ImportError:  # pragma: no cover - exercised only without the re2 extra
    _re2 = None

try:
    import regex as _regex
except ImportError:  # pragma: no cover - regex comes with dateparser
    _regex = None

__all__ = [
    "BACKTRACK_LIMIT",
    "LikeMatcher",
    "Regex",
    "compile_like",
    "compile_regex",
    "deadline_scope",
    "in_deadline_scope",
]

#: Seconds a pattern that needs backtracking may spend on one value before the search is refused.
BACKTRACK_LIMIT = 1.0

_MAX_CP = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)
_SURROGATE_RX = re.compile("[\ud800-\udfff]")
_RE2_MAX_REPEAT = 1000
_RE2_MAX_MEM = 64 << 20

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("nlql_deadline", default=None)


class _DeadlineScope:
    """The context :func:`deadline_scope` returns (a class, not a generator: every search enters one)."""

    __slots__ = ("_end", "_token")

    def __init__(self, end: float | None) -> None:
        self._end = end
        self._token: Any = None

    def __enter__(self) -> None:
        self._token = _deadline.set(self._end)

    def __exit__(self, *exc: object) -> None:
        _deadline.reset(self._token)


def deadline_scope(timeout: float | None) -> _DeadlineScope:
    """Run the body with a search deadline ``timeout`` seconds from now (None: no deadline).

    Filter evaluation that can be slow (a backtracking MATCH) reads it and stops in time.
    """
    return _DeadlineScope(None if timeout is None else time.perf_counter() + timeout)


def in_deadline_scope() -> bool:
    """Whether a :func:`deadline_scope` with a deadline is in force (a search without one need not enter any)."""
    return _deadline.get() is not None


def _remaining() -> float | None:
    end = _deadline.get()
    return None if end is None else end - time.perf_counter()


# ------------------------------------------------------------------------------------------- LIKE


class LikeMatcher:
    """An SQL LIKE pattern (``%``, ``_``, ``\\`` escapes), matched in time linear in the text."""

    __slots__ = ("_first", "_last", "_middle", "_min_len", "_single", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        segments: list[list[str | None]] = [[]]  # None is `_` (any one character)
        i = 0
        while i < len(pattern):
            ch = pattern[i]
            if ch == "\\" and i + 1 < len(pattern):
                segments[-1].append(pattern[i + 1])
                i += 2
                continue
            if ch == "%":
                segments.append([])
            elif ch == "_":
                segments[-1].append(None)
            else:
                segments[-1].append(ch)
            i += 1
        compiled = [_Segment(s) for s in segments]
        self._single = compiled[0] if len(compiled) == 1 else None
        self._first = compiled[0]
        self._last = compiled[-1]
        self._middle = [s for s in compiled[1:-1] if s.length]
        self._min_len = sum(s.length for s in compiled)

    def __call__(self, text: str) -> bool:
        """Whether the whole of ``text`` matches the pattern."""
        if self._single is not None:
            return len(text) == self._single.length and self._single.at(text, 0)
        n = len(text)
        if n < self._min_len:
            return False
        first, last = self._first, self._last
        if not first.at(text, 0):
            return False
        end = n - last.length
        if not last.at(text, end):
            return False
        pos = first.length
        for seg in self._middle:
            found = seg.find(text, pos, end)
            if found < 0:
                return False
            pos = found + seg.length
        return True


class _Segment:
    """A fixed-length run of literal characters and ``_``."""

    __slots__ = ("_literal", "length")

    def __init__(self, items: list[str | None]) -> None:
        self.length = len(items)
        # the plain text when every item is a literal character, else a regex with ``.`` for each ``_``
        self._literal: str | re.Pattern[str]
        if any(c is None for c in items):
            self._literal = re.compile("".join("." if c is None else re.escape(c) for c in items), re.DOTALL)
        else:
            self._literal = "".join(c for c in items if c is not None)

    def at(self, text: str, pos: int) -> bool:
        if isinstance(self._literal, str):
            return text.startswith(self._literal, pos)
        return self._literal.match(text, pos) is not None

    def find(self, text: str, start: int, end: int) -> int:
        """Leftmost start ≥ ``start`` of this segment ending at or before ``end``; -1 if none."""
        if isinstance(self._literal, str):
            return text.find(self._literal, start, end)
        m = self._literal.search(text, start, end)
        return -1 if m is None else m.start()


@lru_cache(maxsize=4096)
def compile_like(pattern: str) -> LikeMatcher:
    """The matcher of one LIKE pattern (cached)."""
    return LikeMatcher(pattern)


# ------------------------------------------------------------------------------------------ MATCH


class Regex:
    """A compiled MATCH pattern; :meth:`search` is Python's ``re.search(...) is not None``.

    ``engine`` is ``"re2"`` when the pattern runs in linear time on RE2, else ``"backtracking"``
    (bounded by :data:`BACKTRACK_LIMIT` and the search deadline); ``why`` says why not RE2.
    """

    __slots__ = ("_fallback", "_re2", "engine", "pattern", "python", "why")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.python = re.compile(pattern)  # raises re.error for a bad pattern, as SPEC §6 requires
        self._fallback: Any = None
        self._re2: Any = None
        self.why: str | None = None
        translated = None
        if _re2 is None:
            self.why = "google-re2 is not installed"
        else:
            try:
                translated = _to_re2(pattern, self.python.flags)
            except _NotRE2 as exc:
                self.why = str(exc)
        if translated is not None:
            try:
                options = _re2.Options()
                options.max_mem = _RE2_MAX_MEM
                self._re2 = _re2.compile(translated, options)
            except Exception as exc:  # noqa: BLE001 - too large for RE2 and the like: take the bounded path
                self.why = f"RE2 refused the translated pattern ({exc})"
        self.engine = "re2" if self._re2 is not None else "backtracking"

    def search(self, text: str) -> bool:
        """Whether the pattern matches anywhere in ``text``."""
        if self._re2 is not None:
            try:
                return self._re2.search(text) is not None
            except UnicodeEncodeError:  # a lone surrogate: RE2 reads UTF-8 only
                pass
        return self._bounded(text)

    def _bounded(self, text: str) -> bool:
        remaining = _remaining()
        if remaining is not None and remaining <= 0:
            raise NLQLTimeoutError(f"the search ran out of time while evaluating MATCH {self.pattern!r}",
                                   hint="raise timeout= or simplify the pattern")
        limit = BACKTRACK_LIMIT if remaining is None else min(BACKTRACK_LIMIT, remaining)
        if _regex is None:  # pragma: no cover - regex comes with dateparser
            return self.python.search(text) is not None
        if self._fallback is None:
            try:
                self._fallback = _regex.compile(self.pattern, _regex.VERSION0)
            except Exception:  # noqa: BLE001 - a pattern only Python's re reads: unbounded, but exact
                self._fallback = False
        if self._fallback is False:
            return self.python.search(text) is not None
        try:
            return self._fallback.search(text, timeout=limit, concurrent=True) is not None
        except TimeoutError:
            if remaining is not None and limit >= remaining:
                raise NLQLTimeoutError(
                    f"the search ran out of time while evaluating MATCH {self.pattern!r}",
                    hint="raise timeout= or simplify the pattern") from None
            raise LimitError(
                f"MATCH {self.pattern!r} took more than {BACKTRACK_LIMIT:g} s on one value",
                hint=f"this pattern needs a backtracking engine ({self.why}); "
                     "rewrite it without backreferences, lookaround or nested repeats") from None


@lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> Regex:
    """The matcher of one MATCH pattern (cached). Raises ``re.error`` for a pattern Python rejects."""
    return Regex(pattern)


# ------------------------------------------------------------------- Python regex -> RE2 translation


class _NotRE2(Exception):
    """The pattern has no RE2 spelling with exactly Python's meaning (the message says why)."""


_I = _C.SRE_FLAG_IGNORECASE
_M = _C.SRE_FLAG_MULTILINE
_S = _C.SRE_FLAG_DOTALL
_A = _C.SRE_FLAG_ASCII
_TYPE_FLAGS = _A | _C.SRE_FLAG_LOCALE | _C.SRE_FLAG_UNICODE


def _to_re2(pattern: str, flags: int) -> str:
    tree = _P.parse(pattern, flags & ~_C.SRE_FLAG_UNICODE)
    return _seq(tree, flags, tail=True)


Ranges = list[tuple[int, int]]


def _seq(items: Any, flags: int, tail: bool) -> str:
    items = list(items)
    out = []
    for i, (op, av) in enumerate(items):
        out.append(_node(op, av, flags, tail and i == len(items) - 1))
    return "".join(out)


def _node(op: Any, av: Any, flags: int, tail: bool) -> str:  # noqa: C901 - one case per opcode
    if op is _C.LITERAL:
        return _emit(_literal_set(av, flags))
    if op is _C.NOT_LITERAL:
        return _emit(_complement(_literal_set(av, flags)))
    if op is _C.ANY:
        return "(?s:.)" if flags & _S else "[^\\n]"
    if op is _C.IN:
        return _emit(_class_set(av, flags))
    if op is _C.BRANCH:
        return "(?:" + "|".join(_seq(alt, flags, tail) for alt in av[1]) + ")"
    if op is _C.SUBPATTERN:
        _group, add, remove, sub = av
        if add & _TYPE_FLAGS:
            flags &= ~_TYPE_FLAGS
        inner = (flags | add) & ~remove
        return "(?:" + _seq(sub, inner, tail) + ")"
    if op in (_C.MAX_REPEAT, _C.MIN_REPEAT):
        lo, hi, sub = av
        if lo > _RE2_MAX_REPEAT or (hi != _C.MAXREPEAT and hi > _RE2_MAX_REPEAT):
            raise _NotRE2("a repeat count over 1000")
        body = "(?:" + _seq(sub, flags, False) + ")"
        if hi == _C.MAXREPEAT:
            return body + ("*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}")
        return body + (f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}")
    if op is _C.AT:
        return _anchor(av, flags, tail)
    if op is _C.CATEGORY:  # pragma: no cover - the parser wraps categories in IN
        return _emit(_class_set([(op, av)], flags))
    name = str(op).lower()
    if "groupref" in name:
        raise _NotRE2("a backreference")
    if "assert" in name:
        raise _NotRE2("a lookaround")
    raise _NotRE2(f"{name.replace('_', ' ')}")


def _anchor(av: Any, flags: int, tail: bool) -> str:
    if av is _C.AT_BEGINNING:
        return "(?m:^)" if flags & _M else "\\A"
    if av is _C.AT_BEGINNING_STRING:
        return "\\A"
    if av is _C.AT_END_STRING:
        return "\\z"
    if av is _C.AT_END:
        if flags & _M:
            return "(?m:$)"
        if tail:  # a search only asks whether a match exists: `$` may consume the final newline
            return "(?:\\n?\\z)"
        raise _NotRE2("$ followed by more pattern")
    if av in (_C.AT_BOUNDARY, _C.AT_NON_BOUNDARY):
        if flags & _A:  # RE2's \b is the ASCII word boundary
            return "\\b" if av is _C.AT_BOUNDARY else "\\B"
        raise _NotRE2("a Unicode word boundary (\\b, \\B)")
    raise _NotRE2(f"the anchor {av}")  # pragma: no cover


# --------------------------------------------------------------------------- character sets


def _merge(ranges: Ranges) -> Ranges:
    out: Ranges = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def _complement(ranges: Ranges) -> Ranges:
    out: Ranges = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= _MAX_CP:
        out.append((nxt, _MAX_CP))
    return out


def _emit(ranges: Ranges) -> str:
    """A set of code points as an RE2 class (surrogates dropped: RE2's UTF-8 input never holds them)."""
    parts = []
    for lo, hi in ranges:
        if lo <= _SURROGATES[1] and hi >= _SURROGATES[0]:
            if lo < _SURROGATES[0]:
                parts.append((lo, _SURROGATES[0] - 1))
            if hi > _SURROGATES[1]:
                parts.append((_SURROGATES[1] + 1, hi))
        else:
            parts.append((lo, hi))
    if not parts:
        return "[^\\x00-\\x{10FFFF}]"  # matches nothing
    if len(parts) == 1 and parts[0][0] == parts[0][1]:
        return f"\\x{{{parts[0][0]:X}}}"
    text = "".join(f"\\x{{{lo:X}}}" if lo == hi else f"\\x{{{lo:X}}}-\\x{{{hi:X}}}" for lo, hi in parts)
    return f"[{text}]"


@lru_cache(maxsize=1)
def _case_maps() -> tuple[dict[int, list[int]], frozenset[int]]:
    """(lowercase code point -> the other code points that lower to it, every code point that changes)."""
    inverse: dict[int, list[int]] = {}
    tolower = _sre.unicode_tolower
    for cp in range(_MAX_CP + 1):
        lo = tolower(cp)
        if lo != cp:
            inverse.setdefault(lo, []).append(cp)
    changing = frozenset(cp for others in inverse.values() for cp in others)
    return inverse, changing


def _literal_set(cp: int, flags: int) -> Ranges:
    """The code points one literal matches, as Python's ``re`` decides (``(?i)`` included)."""
    if not flags & _I:
        return [(cp, cp)]
    if flags & _A:
        if _sre.ascii_iscased(cp):
            lo = _sre.ascii_tolower(cp)
            return _merge([(lo, lo), (lo - 32, lo - 32)])
        return [(cp, cp)]
    if not _sre.unicode_iscased(cp):
        return [(cp, cp)]
    lo = _sre.unicode_tolower(cp)
    targets = (lo, *_EXTRA_CASES.get(lo, ()))
    inverse, _ = _case_maps()
    members: list[int] = []
    for t in targets:
        if _sre.unicode_tolower(t) == t:
            members.append(t)
        members.extend(inverse.get(t, ()))
    return _merge([(m, m) for m in members])


def _class_set(items: Any, flags: int) -> Ranges:
    """The code points a ``[…]`` class (or ``\\w``, ``\\d``, ``\\s`` …) matches, exactly as Python's ``re``.

    A class of literals and ranges without ``(?i)`` is computed directly; anything else (categories,
    case folding) is measured by running Python's own ``re`` over every code point once (cached).
    """
    items = list(items)
    simple = not flags & _I and all(op in (_C.LITERAL, _C.RANGE, _C.NEGATE) for op, _ in items)
    if simple:
        ranges: Ranges = []
        negate = False
        for op, av in items:
            if op is _C.NEGATE:
                negate = True
            elif op is _C.LITERAL:
                ranges.append((av, av))
            else:
                ranges.append((av[0], av[1]))
        merged = _merge(ranges)
        return _complement(merged) if negate else merged
    return _measured(_class_source(items), flags & (_I | _A))


def _class_source(items: list[tuple[Any, Any]]) -> str:
    """Python source of a class, rebuilt from its parse tree (every character escaped)."""
    parts = []
    negate = ""
    for op, av in items:
        if op is _C.NEGATE:
            negate = "^"
        elif op is _C.LITERAL:
            parts.append(_py_char(av))
        elif op is _C.RANGE:
            parts.append(_py_char(av[0]) + "-" + _py_char(av[1]))
        elif op is _C.CATEGORY:
            parts.append(_CATEGORY_SOURCE[av])
        else:  # pragma: no cover - the parser emits nothing else inside a class
            raise _NotRE2(f"{op} in a character class")
    return "[" + negate + "".join(parts) + "]"


def _py_char(cp: int) -> str:
    return f"\\U{cp:08x}"


_CATEGORY_SOURCE = {
    _C.CATEGORY_DIGIT: "\\d", _C.CATEGORY_NOT_DIGIT: "\\D",
    _C.CATEGORY_SPACE: "\\s", _C.CATEGORY_NOT_SPACE: "\\S",
    _C.CATEGORY_WORD: "\\w", _C.CATEGORY_NOT_WORD: "\\W",
}


@lru_cache(maxsize=1)
def _every_code_point() -> str:
    """One string of every code point but the surrogates, in order."""
    import numpy as np

    cps = np.concatenate([np.arange(0, _SURROGATES[0]), np.arange(_SURROGATES[1] + 1, _MAX_CP + 1)])
    return cps.astype("<u4").tobytes().decode("utf-32-le")


@lru_cache(maxsize=512)
def _measured(source: str, flags: int) -> Ranges:
    """The code points ``source`` (one character class) matches under ``flags``, by Python's ``re``."""
    text = _every_code_point()
    rx = re.compile(f"(?:{source})+", flags)
    gap = _SURROGATES[1] - _SURROGATES[0] + 1
    out: Ranges = []
    for m in rx.finditer(text):
        a, b = m.span()
        lo, hi = _code_point(a, gap), _code_point(b - 1, gap)
        if lo < _SURROGATES[0] <= hi:  # a run cannot cross the hole; split defensively
            out.append((lo, _SURROGATES[0] - 1))
            out.append((_SURROGATES[1] + 1, hi))
        else:
            out.append((lo, hi))
    return _merge(out)


def _code_point(index: int, gap: int) -> int:
    return index if index < _SURROGATES[0] else index + gap


def matcher_for(op: str, pattern: str) -> Callable[[str], bool]:
    """``fn(text) -> bool`` for ``like`` or ``match`` (the pushed-filter op names)."""
    if op == "like":
        return compile_like(pattern)
    return compile_regex(pattern).search
