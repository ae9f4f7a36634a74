"""Degrading (SPEC §9): with ``Engine(on_arm_error="degrade")`` an arm whose scores cannot be had — the
embedder failed or missed the deadline, the store's similarity call failed or timed out — is dropped,
and fusion runs over the arms that are left; ``hits.warnings`` names each lost arm and why.

A plan degrades only when every use of the lost scores is inside fusion arms and each fusion keeps at
least one arm; anything else (the order key is the lost score itself, WHERE reads it) re-raises the
original error, as ``"raise"`` does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from nlql import ir
from nlql.deadline import Deadline
from nlql.errors import NLQLTimeoutError
from nlql.execute.candidates import Search
from nlql.plan.nodes import FUSION_FUNCTIONS, Plan

__all__ = ["cause_of", "drop_arms", "embed_within"]


def cause_of(exc: BaseException) -> str:
    """An error in a few words, for a warning."""
    if isinstance(exc, NLQLTimeoutError):
        return f"timeout ({exc.message})"
    text = str(getattr(exc, "message", None) or exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def embed_within(embed: Callable[[Sequence[str]], np.ndarray], texts: Sequence[str],
                 deadline: Deadline) -> np.ndarray:
    """``embed(texts)``, waiting no longer than the deadline (then :class:`NLQLTimeoutError`).

    With a deadline the embedder runs in a daemon thread, so a hung embedder costs the search its
    budget, not forever; the late answer is discarded.
    """
    if deadline.end is None:
        return embed(texts)
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = embed(texts)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting search
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="nlql-embed", daemon=True).start()
    if not done.wait(deadline.remaining()):
        raise NLQLTimeoutError(f"the search ran out of time ({deadline.timeout} s) while embedding the query",
                               hint="raise timeout= or use a faster embedder")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _reads(expr: ir.Expr, plan: Plan, lost: set[str], seen: set[str]) -> bool:
    """Whether ``expr`` reads a lost score other than through the arms of a fusion."""
    stack: list[ir.Node] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, ir.Call):
            if plan.slots.get(node) in lost:
                return True
            if node.name in FUSION_FUNCTIONS:
                continue  # its arms are dropped one by one; the fused score itself stays
        if isinstance(node, ir.Ref):
            if node.name not in seen:
                seen.add(node.name)
                b = plan.query.binding(node.name)
                if b is not None:
                    stack.append(b.expr)
            continue
        stack.extend(node.children())
    return False


def drop_arms(run: Search, slots: Iterable[str], cause: str) -> bool:
    """Drop the arms reading ``slots``; False (nothing changed) when the plan cannot go on without them."""
    plan = run.plan
    lost = set(slots) | set(run.failed)
    uses = [*plan.residual, *plan.fusion_residual, *(o.expr for o in plan.order)]
    if not plan.fusions or any(_reads(e, plan, lost, set()) for e in uses):
        return False
    dropped: dict[str, set[int]] = {}
    for spec in plan.fusions:
        gone = {i for i, e in enumerate(spec.arm_exprs) if _reads(e, plan, lost, set())}
        if len(gone) == len(spec.arm_exprs):
            return False  # no arm left: the query raises (SPEC §9)
        dropped[spec.slot] = gone
    for spec in plan.fusions:
        for i in sorted(dropped[spec.slot] - run.dropped_arms.get(spec.slot, set())):
            run.warnings.append(f"arm {spec.arms[i]} of {spec.slot} dropped: {cause}")
        run.dropped_arms[spec.slot] = dropped[spec.slot]
    for s in slots:
        run.failed[s] = cause
    if plan.lowered is not None:  # the statement needs every arm's input: run the rest arm by arm
        run.plan = replace(plan, lowered=None, fast_path=None,
                           lowering={"strategy": "engine", "reason": f"degraded: {cause}"})
    return True
