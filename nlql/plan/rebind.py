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
from nlql.plan.rewrite import rewrite
from nlql.render import quote_string

__all__ = ["PLACEHOLDER", "NotRebindable", "Rebinder", "placeholder", "text_params"]

#: The prefix of every placeholder (lower-case letters only: lowering, quoting or tokenizing a text leaves it
#: findable). A query or parameter value containing it is never rebound.
PLACEHOLDER = "nlqlrebindplaceholder"

_ATOMS = (int, float, bool, type(None), bytes, datetime, date, time, timedelta, Enum)


class NotRebindable(Exception):
    """The template holds a placeholder where :class:`Rebinder` cannot replace it."""


def placeholder(name: str) -> str:
    """The placeholder text of parameter ``name`` (lower-case letters only)."""
    return PLACEHOLDER + "".join(chr(ord("a") + b % 26) for b in name.encode("utf-8")) + "z" + str(len(name)).translate(
        str.maketrans("0123456789", "abcdefghij"))


def text_params(query: ir.Query) -> frozenset[str]:
    """The parameters written only as SIMILARITY's text (its second argument, a bare ``$name``); empty
    when the query itself holds :data:`PLACEHOLDER` anywhere (then nothing is rebound)."""
    at_text: set[int] = set()
    for node in query.walk():
        if isinstance(node, ir.Call) and node.name == "SIMILARITY" and len(node.args) > 1 \
                and isinstance(node.args[1], ir.Param):
            at_text.add(id(node.args[1]))
    texts: set[str] = set()
    other: set[str] = set()
    for node in query.walk():
        if isinstance(node, ir.Param):
            (texts if id(node) in at_text else other).add(node.name)
        elif isinstance(node, (ir.Literal, ir.TypedLiteral)) and PLACEHOLDER in str(node.value).lower():
            return frozenset()
    return frozenset(texts - other)


def _holds(obj: Any, needle: str) -> bool:
    """Whether ``obj`` holds ``needle`` in any string; raises :class:`NotRebindable` for an object it
    cannot look into whose ``repr`` shows it."""
    if isinstance(obj, str):
        return needle in obj
    if isinstance(obj, _ATOMS):
        return False
    if isinstance(obj, ir.Node):
        return any(isinstance(n, (ir.Literal, ir.TypedLiteral)) and isinstance(n.value, str) and needle in n.value
                   for n in obj.walk())
    if isinstance(obj, Mapping):
        return any(_holds(k, needle) or _holds(v, needle) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return any(_holds(x, needle) for x in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return any(_holds(getattr(obj, f.name), needle) for f in dataclasses.fields(obj))
    if needle in repr(obj):
        raise NotRebindable(f"a {type(obj).__name__} holds the text")
    return False


class Rebinder:
    """The template plan of one query (each text parameter bound to its :func:`placeholder`) and how to
    bind it to other strings.

    Raises:
        NotRebindable: A placeholder is somewhere :meth:`bind` could not replace it (in a string other
            than as itself or quoted, or in an object it cannot look into).
    """

    def __init__(self, template: Plan, names: frozenset[str]) -> None:
        self.template = template
        self.names = tuple(sorted(names))
        self.marks = {name: placeholder(name) for name in self.names}
        fields = []
        for f in dataclasses.fields(template):
            if f.name in ("identity", "now"):
                continue
            value = getattr(template, f.name)
            if any(_holds(value, mark) for mark in self.marks.values()):
                self._check(value)
                fields.append(f.name)
        self.fields = tuple(fields)
        #: whether the engine found the template bound to a real set equal to that set's own plan
        self.verified: bool | None = None

    def _check(self, obj: Any) -> None:
        """Every string holding a placeholder holds it only as itself or quoted."""
        if isinstance(obj, str):
            rest = obj
            for mark in self.marks.values():
                rest = rest.replace(quote_string(mark), "") if rest != mark else ""
            if PLACEHOLDER in rest:
                raise NotRebindable(f"the text appears transformed in {obj[:80]!r}")
        elif isinstance(obj, ir.Node):
            for n in obj.walk():
                if isinstance(n, ir.Literal) and isinstance(n.value, str):
                    self._check(n.value)
        elif isinstance(obj, Mapping):
            for k, v in obj.items():
                self._check(k)
                self._check(v)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for x in obj:
                self._check(x)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            for f in dataclasses.fields(obj):
                self._check(getattr(obj, f.name))

    def bind(self, texts: Mapping[str, str], now: datetime | None = None) -> Plan:
        """The template with each parameter's placeholder replaced by ``texts[name]`` (a string); the
        copy shares the template's identity, so the executor prepares it once for all of them."""
        subs = {self.marks[name]: texts[name] for name in self.names}
        quoted = {quote_string(mark): quote_string(value) for mark, value in subs.items()}
        lits: dict[str, ir.Node] = {}

        def lit(node: ir.Node) -> ir.Node | None:
            if isinstance(node, ir.Literal) and isinstance(node.value, str) and node.value in subs:
                return dataclasses.replace(node, value=subs[node.value])
            return None

        def swap(obj: Any) -> Any:
            if isinstance(obj, str):
                got = subs.get(obj)
                if got is not None:
                    return got
                if PLACEHOLDER not in obj:
                    return obj
                for old, new in quoted.items():
                    obj = obj.replace(old, new)
                return obj
            if isinstance(obj, ir.Node):
                key = id(obj)
                done = lits.get(key)
                if done is None:  # (the same node object, e.g. a call in the query and as a slot key)
                    done = lits[key] = rewrite(obj, lit)
                return done
            if isinstance(obj, _ATOMS):
                return obj
            if isinstance(obj, dict):
                return {swap(k): swap(v) for k, v in obj.items()}
            if isinstance(obj, (list, tuple)):
                return type(obj)(swap(x) for x in obj)
            if isinstance(obj, (set, frozenset)):
                return type(obj)(swap(x) for x in obj)
            if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
                changes = {}
                for f in dataclasses.fields(obj):
                    old = getattr(obj, f.name)
                    new = swap(old)
                    if new is not old:
                        changes[f.name] = new
                return dataclasses.replace(obj, **changes) if changes else obj
            return obj

        plan = object.__new__(Plan)  # a copy of the template (its identity shared), as the plan cache copies
        plan.__dict__.update(self.template.__dict__)
        for name in self.fields:
            object.__setattr__(plan, name, swap(getattr(self.template, name)))
        if now is not None:
            object.__setattr__(plan, "now", now)
        return plan
