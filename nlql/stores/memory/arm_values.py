"""Fusion arms that are not scores, as one vector over a table store's candidates (``VALUE`` arms).

The fusion fast path (:mod:`nlql.stores.memory.fastpath`, :mod:`nlql.stores.memory.fused_page`) ranks each arm by
a vector aligned with the candidates' row numbers. For the arms the planner marks ``VALUE``
(:func:`nlql.plan.choose_fastpath.value_arm`) the engine computes that vector here, with exactly the
values the row evaluator (:mod:`nlql.evaluate`) would give each row, NaN where it gives NULL:

- ``GRAPH``: the search's activation (one per (text, hops, decay)), its sentences mapped to table rows
  through an array built once per graph snapshot and table version;
- ``TEMPORAL(meta.path, text)``: the table's date column (ISO strings parsed once per distinct string,
  datetime values read per row) and the period's formula in integer microseconds, then the same float
  operations as :func:`nlql.text.temporal.temporal_value`;
- ``RECENCY(meta.path)``: exact only where it matters. The value falls with the age, so the rows are
  ordered by age and ``math.exp`` (the row evaluator's function) is evaluated for the youngest distinct
  ages until the arm's window is full, ties with its last value included; the rows below are left out
  of the vector (NaN), which changes nothing: a row below an arm's window contributes nothing to it.

None: an arm cannot be computed this way (no table, no graph); the engine then runs its general path.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

import numpy as np

from nlql import values as V
from nlql.pushdown import FastPath
from nlql.stores.memory.table import K_OTHER

__all__ = ["value_arms"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc) - _EPOCH
_NO_DATE = np.iinfo(np.int64).min


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // _US


def value_arms(run: Any, fast: FastPath, keys: np.ndarray) -> dict[str, np.ndarray] | None:
    """Each VALUE arm's vector (float64, aligned with ``keys``, NaN: absent), or None to decline."""
    table = run.store.table
    keys = np.asarray(keys, dtype=np.int64)
    out: dict[str, np.ndarray] = {}
    for arm in fast.arms:
        if arm.kind != "VALUE" or arm.slot in out:
            continue
        assert arm.value is not None
        what = arm.value[0]
        if what == "GRAPH":
            got = _graph(run, table, arm.value[1], keys)
        elif what == "TEMPORAL":
            got = _temporal(table, arm.value[1], arm.value[2], keys)
        elif what == "RECENCY":
            got = _recency(table, arm.value[1], arm.value[2], arm.value[3], keys, fast.depth or 0)
        else:
            got = None
        if got is None:
            return None
        out[arm.slot] = got
    return out


def _graph(run: Any, table: Any, key: tuple[str, int, float], keys: np.ndarray) -> np.ndarray | None:
    source = run.env.graph_values
    if source is None:
        return None
    act = source(key)
    doc_rows = table.doc_rows

    def build(docs: np.ndarray, positions: np.ndarray) -> np.ndarray:
        ranges = [doc_rows.get(d) for d in docs.tolist()]
        start = np.fromiter((-1 if r is None else r.start for r in ranges), dtype=np.int64, count=len(ranges))
        size = np.fromiter((0 if r is None else len(r) for r in ranges), dtype=np.int64, count=len(ranges))
        pos = np.asarray(positions, dtype=np.int64)
        return np.where((start >= 0) & (pos < size), start + pos, -1)

    rows = act.mapped((id(table), table.version, table.size), build)
    dense = np.full(table.size, np.nan)
    ok = rows >= 0
    dense[rows[ok]] = act.values[ok]
    return dense[keys]


def _dates(table: Any, path: tuple[str, ...], keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(microseconds since the epoch, has a date) of ``meta.<path>`` for each key, as ``V.as_datetime``
    reads it: an ISO string (the column's parsed view) or a date / datetime value (read per row)."""
    col = table.meta_column(tuple(path))
    micros = col.dates[keys].copy()
    others = np.flatnonzero(col.kind[keys] == K_OTHER)
    for i in others.tolist():
        r = int(keys[i])
        dt = V.as_datetime(V.lookup(table.doc_meta[int(table.row_doc[r])], tuple(path)))
        if dt is not None:
            micros[i] = _micros(dt)
    return micros, micros != _NO_DATE


def _temporal(table: Any, path: tuple[str, ...], period: Any, keys: np.ndarray) -> np.ndarray:
    out = np.full(keys.shape[0], np.nan)
    if period is None:  # no period in the text: the arm is empty
        return out
    x, has = _dates(table, path, keys)
    a, b = _micros(period.start), _micros(period.end)
    inside = np.flatnonzero(has & (x >= a) & (x < b))
    if period.open_start or period.open_end:
        out[inside] = 1.0
    else:  # temporal_value: 1 − (0.5 × |2X − A − B|) / (B − A + 2), the same float operations
        dev = np.abs(2 * x[inside] - (a + b)).astype(np.float64)
        out[inside] = 1.0 - (0.5 * dev) / float(b - a + 2)
    return out


def _recency(table: Any, path: tuple[str, ...], hl_seconds: float, now: datetime, keys: np.ndarray,
             depth: int) -> np.ndarray:
    out = np.full(keys.shape[0], np.nan)
    x, has = _dates(table, path, keys)
    idx = np.flatnonzero(has)
    if not idx.size or depth <= 0:
        return out
    age = np.maximum(_micros(now) - x[idx], 0)  # RECENCY clamps a future date to age 0
    ages, first, counts = np.unique(age, return_inverse=True, return_counts=True)
    ln2 = math.log(2)
    exact: list[float] = []
    taken = 0
    last = None
    for a, c in zip(ages.tolist(), counts.tolist()):
        v = math.exp(-ln2 * (a / 10**6) / hl_seconds)  # f_recency: age in seconds, as total_seconds()
        if taken >= depth and v != last:
            break
        exact.append(v)
        taken += c
        last = v
    keep = first < len(exact)
    out[idx[keep]] = np.asarray(exact, dtype=np.float64)[first[keep]]
    return out
