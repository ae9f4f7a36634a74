"""SQL fragments whose values are never formatted into the text, and the binder that numbers them.

A :class:`Fragment` is an immutable sequence of parts: literal SQL text, :class:`Param` (a value known
when the SQL is built) and :class:`Slot` (a value supplied at execution, such as a query embedding).
Fragments compose by concatenation and by :func:`template`; nothing ever rewrites SQL text to
renumber placeholders. Only :meth:`Binder.render` turns a fragment into text, asking the binder for a
placeholder each time it meets a value, so the numbers are always the binder's own.

The spelling of a placeholder and of a cast belongs to the dialect: the binder asks
``dialect.placeholder(n)`` and ``dialect.cast(expr, type)`` (any object with those two methods; the
default spells PostgreSQL's ``$n`` and ``expr::type``).

>>> f = sql("u.year >= ", Param(2020, "numeric"), " AND u.tag = ", Param("x", "text"))
>>> b = Binder()
>>> b.render(f + sql(" OR u.year >= ", Param(2020, "numeric")))
'u.year >= $1::numeric AND u.tag = $2::text OR u.year >= $1::numeric'
>>> b.values
[2020, 'x']
>>> Binder(style="pyformat").render(f + sql(" AND u.name LIKE 'a%'"))
"u.year >= %s::numeric AND u.tag = %s::text AND u.name LIKE 'a%%'"
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

__all__ = ["Binder", "Fragment", "Param", "Slot", "join", "sql", "template"]


@dataclass(frozen=True, eq=False)
class Param:
    """A value bound as a query parameter.

    Args:
        value: The Python value handed to the driver.
        cast: The SQL type the placeholder is cast to (``$3::numeric``); part of the identity, so one
            value used with two types gets two placeholders.
        label: What explain calls it (``"k1"``, ``"terms of kw"``); defaults to the type.
    """

    value: Any
    cast: str | None = None
    label: str | None = None

    def dedup_key(self) -> tuple[Any, ...] | None:
        """Equal values with the same cast and label share one placeholder (the same filter repeated in
        every arm binds once); unhashable values never do."""
        v = self.value
        if isinstance(v, (list, tuple)):
            try:
                hash(tuple(v))
            except TypeError:
                return None
            return ("seq", type(v).__name__, tuple((type(x).__name__, x) for x in v), self.cast, self.label)
        try:
            hash(v)
        except TypeError:
            return None
        return ("val", type(v).__name__, v, self.cast, self.label)


@dataclass(frozen=True)
class Slot:
    """A value known only at execution (a query vector): ``key`` names it, ``cast`` types it."""

    key: str
    cast: str | None = None
    label: str | None = None


Part = Union[str, Param, Slot]


@dataclass(frozen=True)
class Fragment:
    """Immutable SQL: literal text interleaved with values (see the module docstring)."""

    parts: tuple[Part, ...] = field(default_factory=tuple)

    def __add__(self, other: Fragment | str) -> Fragment:
        if isinstance(other, str):
            return Fragment(self.parts + (other,)) if other else self
        return Fragment(self.parts + other.parts)

    def __radd__(self, other: str) -> Fragment:
        return Fragment((other,) + self.parts) if other else self

    def __bool__(self) -> bool:
        return any(p for p in self.parts if not isinstance(p, str) or p)

    def values(self) -> list[Param | Slot]:
        """The values in text order."""
        return [p for p in self.parts if not isinstance(p, str)]

    def text_only(self) -> str:
        """The literal text with every value shown as ``?`` (for tests and messages, never executed)."""
        return "".join(p if isinstance(p, str) else "?" for p in self.parts)


Piece = Union[Fragment, str, Param, Slot]


def sql(*pieces: Piece) -> Fragment:
    """Concatenate text, values and fragments into one fragment."""
    parts: list[Part] = []
    for p in pieces:
        if isinstance(p, Fragment):
            parts.extend(p.parts)
        elif isinstance(p, (str, Param, Slot)):
            if p != "":
                parts.append(p)
        else:
            raise TypeError(f"not SQL: {p!r}")
    return Fragment(tuple(parts))


def join(separator: str, items: Iterable[Piece]) -> Fragment:
    """``items`` separated by literal ``separator``."""
    out: list[Piece] = []
    for i, item in enumerate(items):
        if i:
            out.append(separator)
        out.append(item)
    return sql(*out)


_FORMATTER = string.Formatter()


def template(text: str, casts: Callable[[str, str], str] | None = None, **holes: Piece) -> Fragment:
    """Fill ``{name}`` holes of a SQL template with fragments (``{{``/``}}`` are literal braces).

    The template is split into literal text and hole names once; each hole's fragment is inserted
    whole, so values inside it keep their identity and the binder numbers them at render time.
    With ``casts`` (a dialect's ``cast(expr, type)``), ``{expr:type}`` is the literal SQL ``expr``
    cast to ``type`` in the dialect's spelling, so a template never spells a cast itself.

    >>> Binder().render(template("LIMIT {n}", n=sql(Param(5, "bigint"))))
    'LIMIT $1::bigint'
    >>> template("{0.5:float8} + {n}", casts=lambda e, t: f"CAST({e} AS {t})", n=sql("x")).text_only()
    'CAST(0.5 AS float8) + x'
    """
    out: list[Piece] = []
    for literal, name, spec, conv in _FORMATTER.parse(text):
        if literal:
            out.append(literal)
        if name is None:
            continue
        if spec and casts is not None and not conv:
            out.append(casts(name, spec))
            continue
        if spec or conv:
            raise ValueError(f"template hole {{{name}}} cannot have a format spec")
        if name not in holes:
            raise KeyError(f"template hole {{{name}}} has no value")
        out.append(holes[name])
    return sql(*out)


class _DefaultSpelling:
    """PostgreSQL's spelling, for a binder built without a dialect."""

    REUSE_PLACEHOLDERS = True

    @staticmethod
    def placeholder(n: int) -> str:
        return f"${n}"

    @staticmethod
    def cast(expr: str, type_name: str) -> str:
        return f"{expr}::{type_name}"

    @staticmethod
    def type_name(type_name: str) -> str:
        return type_name

    @staticmethod
    def driver_value(value: Any) -> Any:
        return value


STYLES = ("numbered", "pyformat", "qmark")


class Binder:
    """Collects the values of a statement and numbers their placeholders itself.

    Args:
        dialect: Spells placeholders, casts and driver values (``placeholder(n)``, ``cast(expr, type)``,
            ``type_name(type)``, ``driver_value(v)``); by default PostgreSQL's ``$n`` and ``expr::type``.
        style: ``"numbered"`` asks the dialect for ``placeholder(n)`` (a value repeated with the same
            cast reuses its number); ``"pyformat"`` gives a driver's positional ``%s`` (one value per
            occurrence, in text order; a literal ``%`` of the SQL text is doubled, so the driver reads
            it back as one); ``"qmark"`` gives ``?`` (one value per occurrence). By default the
            dialect's ``PLACEHOLDER_STYLE``, else ``"numbered"``.
    """

    def __init__(self, dialect: Any = None, *, style: str | None = None) -> None:
        self.dialect = dialect if dialect is not None else _DefaultSpelling()
        style = style or getattr(self.dialect, "PLACEHOLDER_STYLE", "numbered")
        if style not in STYLES:
            raise ValueError(f"unknown placeholder style {style!r}")
        self.style = style
        self.params: list[Param | Slot] = []
        self._numbers: dict[Any, int] = {}

    @property
    def values(self) -> list[Any]:
        """The bound values in placeholder order (a :class:`Slot` appears as itself until resolved)."""
        return [p.value if isinstance(p, Param) else p for p in self.params]

    def placeholder(self, part: Param | Slot) -> str:
        """The placeholder text for one value, registering it."""
        if isinstance(part, Slot):
            key: Any = ("slot", part.key, part.cast)
        else:
            key = part.dedup_key()
        if self.style == "numbered" and key is not None and key in self._numbers:
            n = self._numbers[key]
        else:
            self.params.append(part)
            n = len(self.params)
            if key is not None:
                self._numbers.setdefault(key, n)
        text = {"numbered": self.dialect.placeholder(n) if self.style == "numbered" else "",
                "pyformat": "%s", "qmark": "?"}[self.style]
        return self.dialect.cast(text, part.cast) if part.cast else text

    def render(self, fragment: Fragment) -> str:
        """The fragment's text with placeholders; its values are appended to :attr:`params`."""
        pct = self.style == "pyformat"
        return "".join((p.replace("%", "%%") if pct else p) if isinstance(p, str) else self.placeholder(p)
                       for p in fragment.parts)

    def resolve(self, slots: Mapping[str, Any]) -> list[Any]:
        """The values to send: each :class:`Slot` replaced by ``slots[key]``.

        Raises:
            KeyError: a slot has no value.
        """
        out = []
        for p in self.params:
            if isinstance(p, Slot):
                if p.key not in slots:
                    raise KeyError(f"no value for the execution-time parameter {p.key!r}")
                out.append(slots[p.key])
            else:
                out.append(p.value)
        return out

    def describe(self, show: Callable[[Param], bool] | None = None) -> list[str]:
        """One line per placeholder for explain: number, type, label, and the value only if ``show``."""
        lines = []
        for i, p in enumerate(self.params, start=1):
            ph = self.dialect.placeholder(i) if self.style == "numbered" else f"#{i}"
            kind = self.dialect.type_name(p.cast) if p.cast else "unknown"
            label = p.label or ("execution-time value" if isinstance(p, Slot) else "")
            value = ""
            if isinstance(p, Param) and show is not None and show(p):
                value = f" = {_show(p.value)}"
            lines.append(f"{ph} {kind}" + (f" ({label})" if label else "") + value)
        return lines


def _show(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    return repr(v) if not isinstance(v, float) else f"{v!r}"


def bind_all(fragment: Fragment, dialect: Any = None, style: str | None = None) -> tuple[str, Binder]:
    """Render ``fragment`` with a fresh binder: (text, binder)."""
    b = Binder(dialect, style=style)
    return b.render(fragment), b


def values_of(params: Sequence[Param | Slot]) -> list[Any]:
    """The values of a parameter list (slots kept as they are)."""
    return [p.value if isinstance(p, Param) else p for p in params]
