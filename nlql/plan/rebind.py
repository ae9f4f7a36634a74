"""Plan one query once for many parameter sets that differ only in SIMILARITY's texts (``search_many``).

A parameter written only as SIMILARITY's text (``SIMILARITY(content, $q)``, a bare ``$q``) changes
nothing the passes decide when its value is another string: the slots, recall, filters and order are the
same; only the text itself (the bound literal, the score's ``texts`` and label) differs. So the plan is
built once with a placeholder string for each such parameter (a *template*), and each parameter set gets
the template with the placeholders replaced by its strings (:meth:`Rebinder.bind`): a few dictionary and
tuple rebuilds instead of checking and planning again.

Only what is shown to be safe is rebound: the template's strings may hold a placeholder only as itself
or quoted (as :func:`~nlql.render.quote_string` renders it); any other object holding one (a store's
native filter, a lowered statement) makes the query not rebindable. The engine also compares the
template bound to the first set with the plan :func:`~nlql.plan.planner.build_plan` makes for that set,
field by field, and plans every set alone when they differ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import date, datetime, time, timedelta
from enum import Enum
from typing import Any

from nlql import ir
from nlql.plan.nodes import Plan
from nlql.render import quote_string

__all__ = ["PLACEHOLDER", "NotRebindable", "Rebinder", "placeholder", "text_params"]

#: The prefix of every placeholder (lower-case letters only: lowering, quoting or tokenizing a text leaves it
#: findable). A query or parameter value containing it is never rebound.
PLACEHOLDER = "nlqlrebindplaceholder"

_ATOMS = (int, float, bool, type(None), bytes, datetime, date, time, timedelta, Enum)


class NotRebindable(Exception):
    """The template holds a placeholder where :class:`Rebinder` cannot replace it."""


def placeholder(name: str) -> str:
    """The placeholder text of parameter ``name``: :data:`PLACEHOLDER`, the name's UTF-8 bytes in hex
    written with the letters a–p, then ``z`` (lower-case letters only, one per name).

    >>> placeholder("q")
    'nlqlrebindplaceholderhbz'
    """
    return PLACEHOLDER + "".join("abcdefghijklmnop"[b >> 4] + "abcdefghijklmnop"[b & 15]
                                 for b in name.encode("utf-8")) + "z"


def text_params(query: ir.Query) -> tuple[frozenset[str], frozenset[str]]:
    """(the parameters written only as SIMILARITY's text, its second argument as a bare ``$name``; the
    string literals the query writes). No parameters when the query holds :data:`PLACEHOLDER` anywhere.

    A set whose text equals one of those literals is planned alone: there its SIMILARITY call equals a
    call written with the literal, and the two share one score slot (the template has two).
    """
    at_text: set[int] = set()
    for node in query.walk():
        if isinstance(node, ir.Call) and node.name == "SIMILARITY" and len(node.args) > 1 \
                and isinstance(node.args[1], ir.Param):
            at_text.add(id(node.args[1]))
    texts: set[str] = set()
    other: set[str] = set()
    literals: set[str] = set()
    for node in query.walk():
        if isinstance(node, ir.Param):
            (texts if id(node) in at_text else other).add(node.name)
        elif isinstance(node, (ir.Literal, ir.TypedLiteral)) and isinstance(node.value, str):
            if PLACEHOLDER in node.value.lower():
                return frozenset(), frozenset()
            literals.add(node.value)
    return frozenset(texts - other), frozenset(literals)


_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    """The dataclass fields of ``cls`` a rebinding reads (an IR node's span is not one)."""
    got = _NAMES.get(cls)
    if got is None:
        got = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.name != "span")
    return got


class Rebinder:
    """The template plan of one query (each text parameter bound to its :func:`placeholder`) and how to
    bind it to other strings.

    The objects of the template holding a placeholder are found once (by identity: the template keeps
    them alive); :meth:`bind` rebuilds only those, and shares every other object with the template.

    Raises:
        NotRebindable: A placeholder is somewhere :meth:`bind` could not replace it (in a string other
            than as itself or quoted, or in an object it cannot look into).
    """

    def __init__(self, template: Plan, names: frozenset[str]) -> None:
        self.template = template
        self.names = tuple(sorted(names))
        self.marks = {name: placeholder(name) for name in self.names}
        self._quoted = [quote_string(mark) for mark in self.marks.values()]
        self._dirty: set[int] = set()
        self._seen: dict[int, bool] = {}
        self.fields = tuple(f.name for f in dataclasses.fields(template)
                            if f.name not in ("identity", "now") and self._mark(getattr(template, f.name)))
        del self._seen
        #: whether the engine found the template bound to a real set equal to that set's own plan
        self.verified: bool | None = None

    def _mark(self, obj: Any) -> bool:
        """Whether ``obj`` holds a placeholder (and so is rebuilt by :meth:`bind`); records it."""
        if isinstance(obj, _ATOMS):
            return False
        key = id(obj)
        done = self._seen.get(key)
        if done is not None:
            return done
        if isinstance(obj, str):
            held = PLACEHOLDER in obj
            if (held or PLACEHOLDER in obj.lower()) and obj not in self.marks.values():
                rest = obj
                for quoted in self._quoted:
                    rest = rest.replace(quoted, "")
                if PLACEHOLDER in rest.lower():
                    raise NotRebindable(f"the text appears transformed in {obj[:80]!r}")
        elif isinstance(obj, Mapping):
            held = any([self._mark(k) | self._mark(v) for k, v in obj.items()])
        elif isinstance(obj, (list, tuple, set, frozenset)):
            held = any([self._mark(x) for x in obj])
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            held = any([self._mark(getattr(obj, name)) for name in _names(type(obj))])
        else:
            if PLACEHOLDER in repr(obj).lower():
                raise NotRebindable(f"a {type(obj).__name__} holds the text")
            held = False
        self._seen[key] = held
        if held:
            self._dirty.add(key)
        return held

    def bind(self, texts: Mapping[str, str], now: datetime | None = None) -> Plan:
        """The template with each parameter's placeholder replaced by ``texts[name]`` (a string); the
        copy shares the template's identity, so the executor prepares it once for all of them."""
        subs = {self.marks[name]: texts[name] for name in self.names}
        quoted = [(quote_string(mark), quote_string(value)) for mark, value in subs.items()]
        dirty = self._dirty
        done: dict[int, Any] = {}  # (one object met twice, e.g. a call in the query and as a slot key)

        def swap(obj: Any) -> Any:
            key = id(obj)
            if key not in dirty:
                return obj
            got = done.get(key)
            if got is not None:
                return got
            if isinstance(obj, str):
                got = subs.get(obj)
                if got is None:
                    got = obj
                    for old, new in quoted:
                        got = got.replace(old, new)
            elif isinstance(obj, dict):
                got = {swap(k): swap(v) for k, v in obj.items()}
            elif isinstance(obj, (list, tuple, set, frozenset)):
                got = type(obj)(swap(x) for x in obj)
            else:  # a dataclass (an IR node, a score spec, recall, …)
                got = dataclasses.replace(obj, **{name: swap(getattr(obj, name)) for name in _names(type(obj))
                                                  if id(getattr(obj, name)) in dirty})
            done[key] = got
            return got

        plan = object.__new__(Plan)  # a copy of the template (its identity shared), as the plan cache copies
        plan.__dict__.update(self.template.__dict__)
        for name in self.fields:
            object.__setattr__(plan, name, swap(getattr(self.template, name)))
        if now is not None:
            object.__setattr__(plan, "now", now)
        return plan
