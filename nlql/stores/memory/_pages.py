"""Fault in the pages of a large, freshly allocated array on a thread of its own (issue 21's ingest).

A new matrix from ``np.zeros`` is mapped lazily: each page is faulted in when first written. On a
virtual machine whose memory the host backs on first touch that costs ~2 µs a page (measured here: a
numpy copy of 1M × 384 float32 rows into a fresh matrix took 2.3 s, 2.1 of them in the kernel, against
0.04 s for 100k rows, whose pages the process had just freed). The engine's ingest knows the rows an
``add_texts`` call brings, so the store can have the kernel fault in the pages ahead of the writer with
``madvise(MADV_POPULATE_WRITE)`` (Linux 5.14+) while the calling thread does its Python work: the
call runs in the kernel without the GIL (ctypes releases it), one chunk at a time so that a stop (the
matrix replaced, the store closed) takes effect within a chunk. Populating a page changes none of its
bytes (a present page is left alone, a missing one is faulted in zeroed as a write would), so a race
with the writer is harmless. Elsewhere (another OS, an older kernel) it does nothing.

Hand-written: the standard library's ``mmap.madvise`` works on ``mmap`` objects only, and Python 3.11
has no ``MADV_POPULATE_WRITE`` constant.
"""

from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np

MADV_POPULATE_WRITE = 23  # <linux/mman.h>
PAGE = 4096
CHUNK = 2 << 20  # bytes per madvise call (the mmap lock is held for one: a malloc in the writer waits at most that long)
#: Regions smaller than this are left to the writer's own faults (a thread costs more than it hides).
MIN_BYTES = 64 << 20

_madvise: ctypes._CFuncPtr | None = None  # type: ignore[name-defined]
_supported = sys.platform.startswith("linux")


def _libc_madvise() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    global _madvise, _supported
    if _madvise is None and _supported:
        try:
            fn = ctypes.CDLL(None, use_errno=True).madvise
        except (OSError, AttributeError):
            _supported = False
            return None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        fn.restype = ctypes.c_int
        _madvise = fn
    return _madvise


class Prefault:
    """Pages of ``region`` (a C-contiguous slice of a larger array) faulted in on a daemon thread, in
    order; :meth:`stop` ends it after the chunk in hand."""

    def __init__(self, region: np.ndarray) -> None:
        self._stop = threading.Event()
        self.done = threading.Event()
        self.populated = 0  # bytes the kernel has faulted in so far
        start = region.ctypes.data
        self._lo = -(-start // PAGE) * PAGE  # whole pages inside the region only
        self._hi = (start + region.nbytes) // PAGE * PAGE
        self._region: np.ndarray | None = region  # keeps the memory alive while the thread reads its address
        threading.Thread(target=self._run, name="nlql-prefault", daemon=True).start()

    def _run(self) -> None:
        global _supported
        try:
            fn = _libc_madvise()
            at = self._lo
            while fn is not None and at < self._hi and not self._stop.is_set():
                n = min(CHUNK, self._hi - at)
                if fn(at, n, MADV_POPULATE_WRITE) != 0:
                    if ctypes.get_errno() == 22:  # EINVAL: a kernel without MADV_POPULATE_WRITE
                        _supported = False
                    break  # anything else (ENOMEM, …): the writer's own faults take over
                at += n
                self.populated = at - self._lo
        finally:
            self._region = None
            self.done.set()

    def stop(self) -> None:
        self._stop.set()


def prefault(region: np.ndarray) -> Prefault | None:
    """Start faulting in ``region``'s pages, or None when it is small, not contiguous or not supported."""
    if not _supported or region.nbytes < MIN_BYTES or not region.flags.c_contiguous:
        return None
    return Prefault(region)
