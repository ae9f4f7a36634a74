"""The shadow columns of a built-in string field (``fold``, ``num``, ``ts`` of ``doc_id`` and of
``content``) computed in Arrow for a column of plain ASCII strings, with no Python object per row.

:func:`nlql.sql.ingest.prepare` computes them string by string (:func:`~nlql.sql.codec.shadow`: the
casefold when it differs, the number a numeric string reads as, the instant an ISO string names). For
ASCII strings none of which holds a character the store escapes, the same values come from:

- ``fold``: Arrow's ASCII lowering (casefolding an ASCII string lowers A-Z), NULL where it changes nothing;
- ``num`` of a string of 1 to 300 ASCII digits (an id such as ``"12345"``): Arrow's cast to float64,
  correctly rounded as Python's ``float`` is;
- every other string that starts with a digit, a sign or a point (the only ones that can be a number or
  a date): :func:`~nlql.sql.ingest.shadows` on those strings alone.

:func:`ascii_shadows` returns None for any other column (the caller takes the general path).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nlql.sql.ingest import escaper, shadows, verbatim
from nlql.stores.duckdb.driver import import_arrow

__all__ = ["ascii_shadows"]


def ascii_shadows(strings: Sequence[str], arr: Any, escape: Any) -> tuple[Any, Any, Any] | None:
    """``(fold, num, ts)`` Arrow arrays of ``strings`` (``arr``: the same strings as an Arrow string
    array, or None to build it), or None unless every string is ASCII and none needs ``escape``."""
    pa = import_arrow()
    import pyarrow.compute as pc

    if not "".join(strings).isascii() or (escape is not None and escaper(escape, strings) is not verbatim):
        return None
    if arr is None:
        arr = pa.array(strings, type=pa.string())
    n = len(arr)
    low = pc.ascii_lower(arr)
    fold = pc.if_else(pc.equal(low, arr), pa.scalar(None, pa.string()), low)
    num = np.full(n, np.nan)
    has_num = np.zeros(n, dtype=bool)
    ts = np.zeros(n, dtype=np.int64)
    has_ts = np.zeros(n, dtype=bool)
    digits = pc.match_substring_regex(arr, r"^[0-9]{1,300}$").to_numpy(zero_copy_only=False)
    if digits.any():
        at = np.flatnonzero(digits)
        num[at] = pc.cast(arr.filter(pa.array(digits)), pa.float64()).to_numpy(zero_copy_only=False)
        has_num[at] = True
    maybe = pc.match_substring_regex(arr, r"^[0-9+\-.]").to_numpy(zero_copy_only=False) & ~digits
    if maybe.any():
        at = np.flatnonzero(maybe)
        _, nums, stamps = shadows([strings[i] for i in at.tolist()], verbatim)
        for i, v, t in zip(at.tolist(), nums, stamps, strict=True):
            if v is not None:
                num[i], has_num[i] = v, True
            if t is not None:
                ts[i], has_ts[i] = t, True
    return (fold, pa.array(num, type=pa.float64(), mask=~has_num), pa.array(ts, type=pa.int64(), mask=~has_ts))
