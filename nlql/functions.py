"""The built-in functions: their signatures, for the checker now and the executor later (SPEC §5).

>>> BUILTINS["RRF"].default("k")
60
>>> BUILTINS["SIMILARITY"].score, BUILTINS["LOWER"].returns
(True, 'string')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

__all__ = ["BUILTINS", "FUSE_METHODS", "FUSION_FUNCTIONS", "QUERY_BY_EXAMPLE", "SCORE_FUNCTIONS", "TEXT_ARMS", "TEXT_SCORES", "TYPES", "FunctionSig",
           "parse_duration"]

#: Value types the checker reasons about. ``score`` is a number produced by a score function.
TYPES = ("number", "string", "datetime", "bool", "score", "list", "any")


@dataclass(frozen=True, slots=True)
class FunctionSig:
    """What a built-in function accepts and returns.

    Attributes:
        name: Upper-case name, as stored in :class:`nlql.ir.Call`.
        min_args: Fewest positional arguments.
        max_args: Most positional arguments; None for variadic.
        returns: Result type, one of :data:`TYPES` (``any`` when it depends on the arguments, as for IF).
        score: True for the score functions (SIMILARITY, BM25, RRF, FUSE, INTERLEAVE, MMR).
        fuses: True for the functions whose arguments are arms (RRF, FUSE, INTERLEAVE, MMR).
        named: Allowed named arguments and their defaults, in documentation order.
        arg_types: Expected type of each positional argument; the last one repeats for variadic functions.
        doc: One line for docs and ``explain``.
    """

    name: str
    min_args: int
    max_args: int | None
    returns: str
    score: bool = False
    fuses: bool = False
    named: tuple[tuple[str, Any], ...] = ()
    arg_types: tuple[str, ...] = ()
    doc: str = ""

    @property
    def named_args(self) -> tuple[str, ...]:
        """Names of the allowed named arguments."""
        return tuple(name for name, _ in self.named)

    def default(self, name: str) -> Any:
        """Default of a named argument.

        Raises:
            KeyError: ``name`` is not a named argument of this function.
        """
        for key, value in self.named:
            if key == name:
                return value
        raise KeyError(name)

    def arg_type(self, index: int) -> str:
        """Expected type of the positional argument at ``index`` (``any`` if unconstrained)."""
        if not self.arg_types:
            return "any"
        return self.arg_types[min(index, len(self.arg_types) - 1)]

    def arity(self) -> str:
        """The accepted argument count in words: ``"2 arguments"``, ``"at least 2 arguments"``, …"""
        lo, hi = self.min_args, self.max_args
        if hi is None:
            return f"at least {lo} argument{'s' * (lo != 1)}"
        if lo == hi:
            return "no arguments" if lo == 0 else f"{lo} argument{'s' * (lo != 1)}"
        return f"{lo} to {hi} arguments"


def _sig(*args: Any, **kwargs: Any) -> tuple[str, FunctionSig]:
    sig = FunctionSig(*args, **kwargs)
    return sig.name, sig


#: Every built-in function by upper-case name.
BUILTINS: dict[str, FunctionSig] = dict([
    _sig("SIMILARITY", 2, 2, "score", True, named=(("min", None),), arg_types=("string", "string"),
         doc="cosine similarity in [-1, 1] between content and a text (or the best of a list of texts); "
             "min => x leaves rows below x out of this arm (NULL)"),
    _sig("BM25", 2, 2, "score", True, named=(("min", None),), arg_types=("string", "string"),
         doc="BM25 keyword score >= 0 of content for a text (k1=1.2, b=0.75); min => x as for SIMILARITY"),
    _sig("RRF", 2, None, "score", True, True, named=(("k", 60), ("weights", None), ("window", None)),
         arg_types=("number",),
         doc="reciprocal rank fusion: sum of w_i / (k + rank_i) over arms (any numeric expressions), "
             "each ranked down to window => n rows"),
    _sig("FUSE", 2, None, "score", True, True, named=(("method", "minmax"), ("weights", None), ("window", None)),
         arg_types=("number",),
         doc="normalised fusion: sum of w_i * norm_i(arm_i) over arms, each normalised over its window => n "
             'rows (method => "minmax" maps to [0, 1], "dbsf" maps mean +- 3 sigma to [0, 1], clipped)'),
    _sig("INTERLEAVE", 2, None, "score", True, True, named=(("window", None),), arg_types=("number",),
         doc="round-robin fusion of arms (any numeric expressions); the value is 1/position"),
    _sig("MMR", 1, 1, "score", True, True, named=(("lambda", 0.5), ("window", 100)), arg_types=("number",),
         doc="maximal marginal relevance: 1/position in the greedy MMR order of the top window => n rows "
             "by the arm (lambda => 0.5 trades relevance against similarity to the rows already taken)"),
    _sig("IF", 3, 3, "any", arg_types=("bool", "any", "any"),
         doc="the second argument when the condition is TRUE, else the third"),
    _sig("RECENCY", 1, 1, "number", named=(("half_life", "90d"),), arg_types=("datetime",),
         doc="exponential decay in (0, 1] of a date's age, from the engine clock"),
    _sig("GRAPH", 1, 1, "number", named=(("hops", 1), ("decay", 0.5)), arg_types=("string",),
         doc="entity-graph activation in (0, 1] of a row's entities from the entities named in a text; "
             "NULL for rows with no activated entity"),
    _sig("TEMPORAL", 2, 2, "number", arg_types=("datetime", "string"),
         doc="in (0.5, 1] for a date inside the period a free text names, rising to 1 at its midpoint; "
             "NULL outside it or when the text names no period"),
    _sig("HIGHLIGHT", 2, 2, "list", arg_types=("string", "string"),
         doc="the [start, end) character ranges of content whose analysed terms match those of a text"),
    _sig("LENGTH", 1, 1, "number", arg_types=("any",), doc="length of a string (characters) or a list"),
    _sig("LOWER", 1, 1, "string", arg_types=("string",), doc="lower-case text"),
    _sig("UPPER", 1, 1, "string", arg_types=("string",), doc="upper-case text"),
    _sig("COUNT", 2, 2, "number", arg_types=("string", "string"),
         doc="number of case-insensitive occurrences of a needle in a text"),
    _sig("NOW", 0, 0, "datetime", doc="the engine clock, fixed for the whole query"),
    _sig("DATE", 1, 1, "datetime", arg_types=("string",), doc="a date from an ISO-8601 string"),
    _sig("TIMESTAMP", 1, 1, "datetime", arg_types=("string",), doc="a timestamp from an ISO-8601 string"),
])

#: Names of the score functions (SIMILARITY, BM25, RRF, FUSE, INTERLEAVE, MMR).
SCORE_FUNCTIONS = frozenset(name for name, sig in BUILTINS.items() if sig.score)
#: Names of the functions whose arguments are arms (RRF, FUSE, INTERLEAVE, MMR): each ranks rows among the
#: candidates that passed WHERE, so conditions on them apply after fusion.
FUSION_FUNCTIONS = frozenset(name for name, sig in BUILTINS.items() if sig.fuses)
#: The normalisations FUSE knows (``method => …``), the default first.
FUSE_METHODS = ("minmax", "dbsf")
#: ``DOC("id")``: not a function of a row but a query vector; allowed only as SIMILARITY's second argument.
QUERY_BY_EXAMPLE = "DOC"
#: The score functions that score a row's content against a query text (SIMILARITY, BM25).
TEXT_SCORES = SCORE_FUNCTIONS - FUSION_FUNCTIONS
#: The arms whose text is bound at plan time and evaluated by the engine (GRAPH, TEMPORAL).
TEXT_ARMS = frozenset({"GRAPH", "TEMPORAL"})

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*\Z")
_UNITS = {
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
    "w": 604800.0, "wk": 604800.0, "week": 604800.0, "weeks": 604800.0,
    "y": 31536000.0, "yr": 31536000.0, "year": 31536000.0, "years": 31536000.0,
}


def parse_duration(text: str) -> timedelta | None:
    """A duration such as ``"90d"``, ``"12h"``, ``"2 weeks"``; None if it is not one, or is zero.

    Units: s, m (minutes), h, d, w, y (365 days), also spelled out.

    >>> parse_duration("90d")
    datetime.timedelta(days=90)
    >>> parse_duration("soon") is None
    True
    """
    match = _DURATION.match(text)
    if not match:
        return None
    unit = _UNITS.get(match.group(2).lower())
    if unit is None:
        return None
    seconds = float(match.group(1)) * unit
    if not 0 < seconds < 1e12:
        return None
    return timedelta(seconds=seconds)
