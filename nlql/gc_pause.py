"""The cyclic garbage collector paused for one bulk step (an ingest call, a graph build).

A bulk step allocates millions of small objects that all survive (rows, records, metadata, graph
entries); every full collection it triggers walks all of them again, which made ingest superlinear
(issue 21) and doubled a 100k-sentence graph build. Nothing such a step builds is a reference cycle that
needs collecting during it; the collector runs again as usual afterwards (and is left off if it was off).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
