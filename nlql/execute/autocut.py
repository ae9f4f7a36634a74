"""``LIMIT n AUTOCUT k`` (SPEC §11, as Weaviate's autocut): of the page's rows, in ORDER BY order, keep
those before the k-th jump of the first sort key.

A jump is a gap between consecutive values larger than twice the mean gap over the page's rows. Fewer
than 3 rows, no k-th jump, no sort key, or a first key that is not a number on every row: all rows stay.
"""

from __future__ import annotations

from typing import Any

from nlql import values as V
from nlql.evaluate import compile_expr
from nlql.execute.candidates import Candidate, Search

__all__ = ["autocut", "cut_at"]


def cut_at(values: list[Any], k: int) -> int:
    """How many leading values to keep: the count before the k-th jump (``len(values)`` when none)."""
    n = len(values)
    if n < 3 or k < 1:
        return n
    nums = [V.as_number(v) for v in values]
    if any(x is None for x in nums):
        return n
    gaps = [abs(nums[i + 1] - nums[i]) for i in range(n - 1)]  # type: ignore[operator]
    mean = sum(gaps) / len(gaps)
    jumps = 0
    for i, g in enumerate(gaps):
        if g > 2 * mean:
            jumps += 1
            if jumps == k:
                return i + 1
    return n


def autocut(run: Search, page: list[Candidate]) -> list[Candidate]:
    """The page cut before the k-th jump of its first ORDER BY key (SPEC §11)."""
    plan = run.plan
    if plan.autocut is None or not plan.order or len(page) < 3:
        return page
    spec = plan.order[0]
    fn = run.order_fns[0] if run.order_fns is not None else compile_expr(spec.expr, run.env)
    return page[: cut_at([fn(u.ctx) for u in page], plan.autocut)]
