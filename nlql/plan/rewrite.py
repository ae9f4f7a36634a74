"""A bottom-up rewriter shared by the passes: rebuild a tree, replacing nodes via a callback."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from nlql import ir


def rewrite(node: Any, fn: Callable[[ir.Node], ir.Node | None]) -> Any:
    """Return ``node`` with every descendant rewritten first, then ``fn(node)`` (None keeps it)."""
    if isinstance(node, tuple):
        return tuple(rewrite(x, fn) for x in node)
    if not isinstance(node, ir.Node):
        return node
    changes = {}
    for f in dataclasses.fields(node):
        if f.name == "span":
            continue
        old = getattr(node, f.name)
        new = rewrite(old, fn)
        if new is not old:
            changes[f.name] = new
    if changes:
        node = dataclasses.replace(node, **changes)
    out = fn(node)
    return node if out is None else out
