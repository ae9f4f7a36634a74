"""An int8 copy of the built-in store's vectors, scanned before the exact float32 rescore (issue 21).

The copy holds Faiss ``ScalarQuantizer`` codes (``QT_8bit``: one byte per dimension, a per-dimension
range: every row's when the copy is built; Faiss encodes), one quarter of the
float32 matrix, scanned by :mod:`nlql.stores.memory.int8_scan` (uint8 codes times the query's weights
rounded to int16, summed exactly in int32; the rounding adds a known bound to every estimate) into
at least the ``depth`` best rows by approximate score. Every row is encoded with a known
reconstruction error ``‖x − x̃‖``, so a row scores at most its approximate score + ‖q‖ · ‖x − x̃‖ +
``MARGIN`` (Cauchy–Schwarz; ``MARGIN`` covers float32 rounding of both dot products and the 6-place
rounding of scores). The largest error is set by a few rows outside the ranges (rows written after the
copy was built, or outside the split code's sampled ranges), so the copy keeps the rows whose error
exceeds the ``OUTLIER_QUANTILE`` of rows held out of the training sample (``tau``) as *outliers*,
estimated from their own float32 rows instead; every other row is bounded with ``tau``, a tighter
bound.

The caller (the store) rescores the candidates and outliers exactly (its float32 arithmetic), highest
bound first and only as deep as needed, and the answer is **certified** when the k-th exact score is
above the bound of every row not rescored: the next candidate's, and (the scan's final threshold) +
‖q‖ · tau + ``MARGIN`` + the query rounding bound for the rows it did not return. Then no row left
out could be in the top k, so the answer, rows *and* scores, is the exact scan's. Otherwise the caller
widens the depth or falls back to the exact scan (and says so in its stats).

**The split scan** (from ``SPLIT_MIN_ROWS`` rows): a copy of that many rows also keeps a second, half-wide
code per row, ``x' = (x_A, ‖x_B‖)``: the coordinates of ``x`` on the stronger half ``A`` of an orthonormal
basis learnt from the sample (the eigenvectors of its second moment), plus the norm of the rest. A query scans it with ``q' = (q_A, ‖q_B‖)``; by Cauchy–Schwarz
``q·x = q_A·x_A + q_B·x_B ≤ q'·x'``, so the scan ranks every row by an *upper bound* of its score while
reading half the bytes. The best rows by that bound are then estimated with their full int8 code and
rescored exactly, best estimate first and only as deep as the certificate needs: a row outside the
candidates scores at most (the lowest bound kept) + ‖q‖·τ' + ``MARGIN`` (τ' the scan code's own error
quantile). The bound ``‖q_B‖·‖x_B‖`` is as loose as ``‖x_B‖`` is large: on MiniLM sentence vectors the basis leaves
``‖x_B‖`` at 0.27 on average, and on vectors whose energy is spread over every direction about 0.7. So it
certifies a top k that stands clear of the bulk of the rows (a focused query's top 10) and not always a
wide window among near-equal scores (a fusion arm's 100 on spread vectors): when it does not certify,
the full int8 scan runs as before, and after a miss the copy skips the split scan for the next
``SPLIT_SKIP`` searches of that width. It costs ``dim/2`` bytes per vector more.

Faiss and Numba are the optional ``faiss`` extra (``pip install nlql-engine[faiss]``); without them the
store scans float32 only. Measured on this machine (1M × 384, one query): float16 (``QT_fp16``) scans
no faster than numpy's float32 product (the conversion costs what the smaller read saves), Faiss's
int8 scan 2–2.7× faster, and the integer kernel about 1.7× faster again than Faiss's (float decoding);
hence int8 and the kernel. The first int8 search in a process loads the kernel (Numba's import and
cached machine code: 1–3 s; compiling it on a fresh install ~15 s, once).

**Built in the background.** The first search that wants the copy starts :class:`Build` on a thread of
its own and scans float32 meanwhile (the same answers): the build imports Faiss and Numba, loads the
kernel (1–3 s) and encodes every row (100k × 384: about 1 s), none of which a query waits for. A build
stops between chunks when its store changes under it (compaction, reload) or closes, and at exit.
A directory store keeps its copy in its snapshot (:meth:`Int8Copy.state`; :mod:`nlql.stores.memory.snapshot`):
a later process's build then restores it (:func:`restore`: the codes read through the map, the quantisers'
ranges given back to Faiss) and encodes only the rows written since, so it costs the kernel's load alone.

The codes are one array in row order, encoded ``SHARD_ROWS`` rows at a time and scanned on two threads
from twice that many rows (the kernel releases the GIL), which take chunks of rows in turn, each with
its own threshold. The copy is
append-only, like the matrix; the owner drops it when the matrix compacts.
"""

from __future__ import annotations

import atexit
import importlib.util
import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from nlql.kernels import blas_one_thread
from nlql.stores.memory import int8_scan

#: Slack added to the bound: float32 accumulation error of both dot products over 384–1024 dimensions
#: (≤ d·2⁻²⁴·‖q‖‖x‖ each, 2.3e-5 at d = 384) plus half a unit of the 6th decimal.
MARGIN = 1e-4
#: Rows encoded at a time; from twice as many rows a search scans chunks on two threads.
SHARD_ROWS = 1 << 14
#: The error quantile of the training sample above which a row is an outlier (bounded on its own).
OUTLIER_QUANTILE = 0.999
#: More outliers than this share of the rows (data drifted from the sample): the bound uses err_max.
OUTLIER_SHARE = 1 / 128
_TRAIN_ROWS = 1 << 16
#: Share of a dimension's sampled range added on each side for the split code (learnt from a sample: its
#: rows are a product away): at 1M rows the ranges of a 65,536-row sample widened by 5% left the error
#: quantile at 0.009 (0.016 unwidened, 0.0086 with the full data's ranges).
RANGE_WIDEN = 0.05
#: Fewest rows for which a copy also keeps the split scan code.
SPLIT_MIN_ROWS = 1 << 16
#: Candidates of the split scan estimated first (then twice as many each round, until no other can reach
#: the k-th best estimate less its slack).
ESTIMATE_FIRST = 1024
#: Searches of one width that skip the split scan after it failed to certify one.
SPLIT_SKIP = 16

_faiss: Any = None


def available() -> bool:
    """Whether Faiss (the quantiser) and Numba (the scan kernel) can be imported."""
    global _faiss
    if _faiss is None:
        try:
            import faiss

            _faiss = faiss if int8_scan.available() else False
        except ImportError:
            _faiss = False
    return _faiss is not False


def installed() -> bool:
    """Whether Faiss and Numba are installed, without importing them (that takes 1–3 s with the kernel's
    load, which :class:`Build` pays on its own thread)."""
    global _installed
    if _installed is None:
        _installed = all(importlib.util.find_spec(m) is not None for m in ("faiss", "numba"))
    return _installed


_installed: bool | None = None


class Cancelled(Exception):
    """A copy's build was stopped (see :class:`Build`)."""


class Build:
    """An int8 copy built on a background thread by ``make(stop)`` (:func:`new_copy`, or a copy's
    :meth:`Int8Copy.subset`); ``done(build, copy, why)`` runs on that thread at the end with the copy,
    or None and why not (None as well when cancelled). The matrix must keep its rows while the build
    reads them (the store's rows are append-only; a store that rewrites them in place cancels the
    build first, or no longer reaches what it hands back)."""

    _running: ClassVar[set[Build]] = set()

    def __init__(self, make: Callable[[threading.Event], Int8Copy],
                 done: Callable[[Build, Int8Copy | None, str | None], None]) -> None:
        self.stop = threading.Event()
        self._done = done
        self.thread = threading.Thread(target=self._run, args=(make,), name="nlql-int8-build", daemon=True)
        Build._running.add(self)
        self.thread.start()

    def _run(self, make: Callable[[threading.Event], Int8Copy]) -> None:
        copy, why = None, None
        try:
            if not available():
                why = "Faiss or Numba could not be imported"
            elif not self.stop.is_set():
                copy = make(self.stop)
        except Cancelled:
            copy = None
        except Exception as exc:  # noqa: BLE001 - the store scans float32 instead and says why
            copy, why = None, f"{type(exc).__name__}: {exc}"
        finally:
            Build._running.discard(self)
        self._done(self, copy, why)

    def cancel(self) -> None:
        self.stop.set()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)


def new_copy(matrix: np.ndarray, dim: int, stop: threading.Event | None = None) -> Int8Copy:
    """An int8 copy of rows ``0..len(matrix)`` (``stop`` set: it raises :class:`Cancelled`)."""
    copy = Int8Copy(dim, stop=stop)
    copy.sync(matrix)
    return copy


@atexit.register
def _stop_builds() -> None:
    """Stop every build at exit (between two chunks: a few ms), so that no thread is still inside Faiss
    when the interpreter finalises."""
    running = list(Build._running)
    for b in running:
        b.cancel()
    for b in running:
        b.join(10.0)


@dataclass
class Candidates:
    """The best rows of a scan, in no particular order: ``keys`` (row ids of the copy), their int8
    ``estimate`` of the score, ``outside`` the highest score a row not among them can have (−inf when
    every passing row is one), ``slack`` what a candidate can score above its estimate."""

    keys: np.ndarray
    estimate: np.ndarray
    outside: float
    slack: float


def _quantile_error(rows: np.ndarray, index: Any) -> float:
    """The ``OUTLIER_QUANTILE`` of a trained quantiser's reconstruction errors over ``rows`` (rows it was
    not trained on: its ranges are the training sample's extremes, which other rows pass more often)."""
    return float(np.quantile(_norms(rows - index.sa_decode(index.sa_encode(rows))), OUTLIER_QUANTILE))


def _samples(matrix: np.ndarray, keys: np.ndarray | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(a training sample, rows held out of it) of rows ``0..n`` of ``matrix`` (or of ``matrix[keys]``):
    distinct rows drawn at random (a fixed seed, so a copy is the same each time), in row order; the
    same rows twice when there are too few to hold any out. Random, not strided: rows written in a
    repeating pattern (a corpus of templates) alias with a stride, and ranges learnt from such a sample
    clamped most rows of the others (1M hashed sentences: median error 0.126 against 0.007)."""
    pick = np.random.default_rng(0).permutation(n)
    ids = np.sort(pick[:_TRAIN_ROWS])
    held = np.sort(pick[_TRAIN_ROWS:2 * _TRAIN_ROWS]) if n > _TRAIN_ROWS else ids

    def rows(i: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(matrix[i] if keys is None else matrix[keys[i]], dtype=np.float32)

    return rows(ids), rows(held)


def _quantiser(dim: int, sample: np.ndarray, widen: float = 0.0) -> Any:
    """A ``QT_8bit`` quantiser trained on ``sample``: its per-dimension ranges, widened by ``widen`` of
    their width on each side."""
    index = _faiss.IndexScalarQuantizer(dim, _faiss.ScalarQuantizer.QT_8bit, _faiss.METRIC_INNER_PRODUCT)
    index.sq.rangestat_arg = widen
    index.train(sample)
    return index


def _extremes(matrix: np.ndarray, keys: np.ndarray | None, n: int) -> np.ndarray:
    """The per-dimension minimum and maximum (two rows) of rows ``0..n`` of ``matrix`` (or of
    ``matrix[keys]``), read ``SHARD_ROWS`` rows at a time."""
    lo = np.full(matrix.shape[1], np.inf, dtype=np.float32)
    hi = np.full(matrix.shape[1], -np.inf, dtype=np.float32)
    for a in range(0, n, SHARD_ROWS):
        x = matrix[a:min(n, a + SHARD_ROWS)] if keys is None else matrix[keys[a:min(n, a + SHARD_ROWS)]]
        np.minimum(lo, x.min(axis=0), out=lo)
        np.maximum(hi, x.max(axis=0), out=hi)
    return np.stack([lo, hi])


def _norms(x: np.ndarray) -> np.ndarray:
    """Row norms (``np.linalg.norm(x, axis=1)``, a few times faster)."""
    return np.sqrt(np.einsum("ij,ij->i", x, x))


class BestFirst:
    """Positions of ``values`` handed out in batches, the largest first (ties in any order): each batch
    is found by a partition of the positions left, not by sorting them all (2,865 float32: 17 µs against
    140 µs for a stable argsort here); :attr:`rest_max` is the largest value left."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values
        self.rest = np.arange(len(values))

    def take(self, n: int) -> np.ndarray:
        """The positions of the ``n`` largest values left (all of them when fewer are left)."""
        rest = self.rest
        if n <= 0:
            return rest[:0]
        if n >= len(rest):
            self.rest = rest[:0]
            return rest
        part = np.argpartition(-self.values[rest], n - 1)
        self.rest = rest[part[n:]]
        return rest[part[:n]]

    @property
    def rest_max(self) -> float:
        return float(self.values[self.rest].max()) if len(self.rest) else -math.inf


class _Codes:
    """Scalar-quantiser codes of row ids ``0..filled`` in one array, scanned by :mod:`int8_scan` on up
    to two threads. A subclass names its Faiss quantiser (``_quantiser``), which learns the ranges and
    encodes; a code ``c`` decodes as ``vmin + (c + 0.5) · vdiff / 255`` per dimension (``QT_8bit``)."""

    def __init__(self) -> None:
        self._codes = np.zeros((0, 0), dtype=np.uint8)  # rows 0..filled hold codes; grown by half again
        self._filled = 0
        self._pool: ThreadPoolExecutor | None = None
        self._decode: tuple[np.ndarray, np.ndarray] | None = None  # (vmin, vdiff / 255)
        self.stop: threading.Event | None = None  # set: the next chunk to encode raises Cancelled

    def _quantiser(self) -> Any:
        raise NotImplementedError

    def _decoding(self) -> tuple[np.ndarray, np.ndarray]:
        if self._decode is None:
            index = self._quantiser()
            trained = _faiss.vector_to_array(index.sq.trained).astype(np.float32)
            self._decode = (trained[: index.d], trained[index.d:] / np.float32(255.0))
        return self._decode

    def _weights(self, q: np.ndarray) -> tuple[np.ndarray, float]:
        """``(w, c0)``: a code ``c`` estimates ``q · x̃ = c0 + c · w``."""
        vmin, step = self._decoding()
        return (q * step).astype(np.float32), float(q @ (vmin + np.float32(0.5) * step))

    def _chunks(self) -> list[tuple[int, int]]:
        """Row ranges the scan takes one at a time: one for fewer than ``2 · SHARD_ROWS`` rows (or one
        core), else about 32 of at least ``SHARD_ROWS / 2`` rows, shared by two threads."""
        n = self._filled
        if n < 2 * SHARD_ROWS or (os.cpu_count() or 1) < 2:
            return [(0, n)]
        size = max(SHARD_ROWS // 2, -(-n // 32))
        return [(lo, min(n, lo + size)) for lo in range(0, n, size)]

    def _scan_codes(self, q: np.ndarray, depth: int,
                       mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(row ids, estimates, the highest estimate of a passing row not returned or −inf, the
        estimates' error against the float decoding).

        The calling thread and, with several chunks, one pool thread take the chunks in turn from a
        shared counter, each keeping its own threshold across its chunks: at least its ``depth`` best
        rows, at most twice that, and a row it left out estimates below its final threshold. (A
        thread keeping only its share of the depth certified 1 in 60 windows of 100 on 100k hashed
        vectors where this certified 9 in 60; the rows are estimated lazily anyway.) Taking chunks
        instead of a half each: a core that was idle takes a while to start on this VM (two halves
        after 20 ms idle: 3.6 ms at 100k × 192, against 1.6 ms back to back and 2.9 ms on one
        thread), so the thread that starts first takes what the other has not."""
        w, c0 = self._weights(np.asarray(q, dtype=np.float32).reshape(-1))
        u, s, err = int8_scan.query_weights(w)
        chunks = self._chunks()
        cap = max(1, depth)
        taken = iter(range(len(chunks)))  # next() on it is atomic under the GIL

        def take() -> tuple[np.ndarray, np.ndarray, int]:
            ids = np.empty(2 * cap, dtype=np.int64)
            vals = np.empty(2 * cap, dtype=np.int32)
            count, threshold = 0, int8_scan.INT_FLOOR
            for c in taken:
                lo, hi = chunks[c]
                count, threshold = int8_scan.scan(self._codes[lo:hi], hi - lo, u,
                                                  None if mask is None else mask[lo:hi],
                                                  lo, threshold, ids, vals, count, cap)
            return ids[:count], vals[:count], threshold

        if len(chunks) > 1:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nlql-int8")
            other = self._pool.submit(take)
            parts = [take(), other.result()]
        else:
            parts = [take()]
        ids = np.concatenate([p[0] for p in parts])
        est = (c0 + s * np.concatenate([p[1] for p in parts]).astype(np.float64)).astype(np.float32)
        top = max(p[2] for p in parts)
        outside = c0 + s * (top - 1) if top > int8_scan.INT_FLOOR else -math.inf
        return ids, est, outside, err

    def _encode(self, matrix: np.ndarray, lo: int, n: int, keys: np.ndarray | None, trained: Any,
                tau: float, vectors: Any = None) -> tuple[float, list[np.ndarray]]:
        """Encode rows ``lo..n`` of ``matrix`` (or of ``matrix[keys]``, through ``vectors`` when given),
        ``SHARD_ROWS`` at a time: (their largest error, the ids of those with an error above ``tau``)."""
        if len(self._codes) < n:  # room for n rows (a first build gets exactly n; growth half again)
            grown = np.empty((max(n, len(self._codes) * 3 // 2), trained.code_size), dtype=np.uint8)
            if self._filled:
                grown[: self._filled] = self._codes[: self._filled]
            self._codes = grown
        err_max, odd = 0.0, []
        while lo < n:
            if self.stop is not None and self.stop.is_set():
                raise Cancelled
            hi = min(n, lo + SHARD_ROWS)
            x = np.ascontiguousarray(matrix[lo:hi] if keys is None else matrix[keys[lo:hi]], dtype=np.float32)
            if vectors is not None:
                x = vectors(x)
            codes = trained.sa_encode(x)
            err = _norms(x - trained.sa_decode(codes))
            err_max = max(err_max, float(err.max()) if len(err) else 0.0)
            odd.append(np.flatnonzero(err > tau).astype(np.int64) + lo)
            self._codes[lo:hi] = codes
            self._filled = lo = hi
        return err_max, odd

    def selectors(self, mask: np.ndarray | None) -> np.ndarray | None:
        """A mask over rows ``0..size`` as the scan reads it (None: every row)."""
        return None if mask is None else np.ascontiguousarray(mask, dtype=np.bool_)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


class Int8Copy(_Codes):
    """int8 codes of matrix rows ``0..size`` (or of chosen rows) with their errors and outliers, and
    from ``SPLIT_MIN_ROWS`` rows the split scan code (:class:`_SplitScan`)."""

    def __init__(self, dim: int, stop: threading.Event | None = None) -> None:
        assert available()
        super().__init__()
        self.stop = stop
        self.dim = dim
        self.size = 0
        self.err_max = 0.0
        self._trained: Any = None  # a trained, empty index: the quantiser that encodes the rows
        self.tau: float | None = None  # the outlier threshold (the sample's error quantile)
        self._outliers: list[np.ndarray] = []  # ids of rows whose error exceeds tau
        self.split: _SplitScan | None = None
        self._skip: dict[int, int] = {}  # width bucket -> searches left that skip the split scan
        self._outlier_rows: tuple[np.ndarray, np.ndarray] | None = None
        self._union: tuple[tuple[int, int], np.ndarray] | None = None

    @property
    def nbytes(self) -> int:
        """Bytes held: the codes' array (room for growth included) and the split code's."""
        return self._codes.nbytes + (self.split.nbytes if self.split is not None else 0)

    def subset(self, matrix: np.ndarray, keys: np.ndarray, stop: threading.Event | None = None) -> Int8Copy:
        """A copy over the rows ``keys`` only (local ids 0..len(keys)), with this copy's quantisers: a
        filter's rows scanned without reading the others (the codes are the same, so the bound too)."""
        sub = Int8Copy(self.dim, stop=stop)
        sub._trained = self._trained
        sub.err_max = self.err_max
        sub.tau = self.tau
        if self.split is not None and len(keys) >= SPLIT_MIN_ROWS:
            sub.split = _SplitScan(self.split.codec)
            sub.split.stop = stop
        sub.sync(matrix, keys)
        return sub

    def sync(self, matrix: np.ndarray, keys: np.ndarray | None = None) -> None:
        """Encode the rows of ``matrix`` (or of ``matrix[keys]``) not yet encoded (only ever appended)."""
        n = len(matrix) if keys is None else len(keys)
        if n <= self.size:
            return
        samples = None
        if self._trained is None:
            sample, held = samples = _samples(matrix, keys, n)
            # the full code's ranges are every row's (one pass; a sample's clamp the rows beyond it:
            # at 1M hashed sentences the error quantile was 0.040 with a sample's widened ranges, 0.015
            # with these); rows written later outside them are outliers
            self._trained = _quantiser(self.dim, _extremes(matrix, keys, n))
            self.tau = _quantile_error(held, self._trained)
        if self.split is None and n >= SPLIT_MIN_ROWS and self.dim >= 32:  # (new, or grown into it)
            self.split = _SplitScan(_SplitCodec(*(samples or _samples(matrix, keys, n))))
            self.split.stop = self.stop
        if self.split is not None and self.split.size < self.size:  # built on a copy that grew into it
            self.split.add(matrix, 0, self.size, keys)
        assert self.tau is not None
        err_max, odd = self._encode(matrix, self.size, n, keys, self._trained, self.tau)
        self.err_max = max(self.err_max, err_max)
        self._outliers += odd
        if self.split is not None:
            self.split.add(matrix, self.split.size, n, keys)
        self.size = n

    def _quantiser(self) -> Any:
        return self._trained

    # ------------------------------------------------------------------ kept on disk (snapshot.py)

    def state(self, order: np.ndarray | None) -> tuple[dict[str, tuple[np.ndarray, np.ndarray | None]],
                                                          dict[str, Any]]:
        """What :func:`restore` needs, for the rows ``order`` (the copy's row ids, in the order they
        are kept; None: every row as it is): ``(arrays as (array, rows to take), scalars)``. The
        codes are taken row by row (the same bytes); the outliers are renumbered and those of rows
        left out dropped; the ranges, errors and thresholds stay (bounds of any subset of the rows)."""
        n = self.size if order is None else len(order)

        def renumber(ids: np.ndarray) -> np.ndarray:
            if order is None:
                return np.sort(ids).astype(np.int64)
            new = np.full(self.size, -1, dtype=np.int64)
            new[order] = np.arange(len(order), dtype=np.int64)
            got = new[ids]
            return np.sort(got[got >= 0])

        arrays: dict[str, tuple[np.ndarray, np.ndarray | None]] = {
            "int8.codes": (self._codes[: self.size], order),
            "int8.trained": (_faiss.vector_to_array(self._trained.sq.trained).astype(np.float32), None),
            "int8.outliers": (renumber(np.concatenate([np.zeros(0, dtype=np.int64), *self._outliers])), None),
        }
        meta: dict[str, Any] = {"rows": n, "err_max": self.err_max, "tau": self.tau, "split": self.split is not None}
        if self.split is not None:
            codec = self.split.codec
            arrays.update({
                "int8.split.codes": (self.split._codes[: self.size], order),
                "int8.split.basis": (codec.basis, None),
                "int8.split.trained": (_faiss.vector_to_array(codec.scan.sq.trained).astype(np.float32), None),
                "int8.split.outliers": (renumber(np.concatenate([np.zeros(0, dtype=np.int64),
                                                                 *self.split._outliers])), None),
            })
            meta.update({"split_err_max": self.split.err_max, "split_tau": codec.tau})
        return arrays, meta

    def estimate(self, ids: np.ndarray, q: np.ndarray) -> np.ndarray:
        """The int8 estimates ``q·x̃`` of rows ``ids``, from their codes read in place (summed in
        float64: they differ from Faiss's float32 decoding by its rounding, ~1e-5 at most over 384
        dimensions, inside ``MARGIN``)."""
        w, c0 = self._weights(q)
        out = np.full(len(ids), c0, dtype=np.float64)
        ids = np.asarray(ids, dtype=np.int64)
        int8_scan.gather_dot(self._codes, ids, w, out, np.arange(len(ids), dtype=np.int64))
        return out.astype(np.float32)

    def candidates(self, q: np.ndarray, depth: int, selectors: np.ndarray | None) -> Candidates:
        """At least the ``depth`` best rows by the full int8 scan; a row not returned
        scores at most ``outside`` (the scan's threshold plus the slack)."""
        labels, approx, last, err = self._scan_codes(q, depth, selectors)
        slack = float(np.linalg.norm(q)) * self._err() + MARGIN + err
        return Candidates(labels, approx, last + slack if last != -math.inf else last, slack)

    def split_candidates(self, q: np.ndarray, depth: int, selectors: np.ndarray | None,
                         k: int | None = None) -> Candidates | None:
        """The split scan's candidates, or None when this copy has no split scan or skips it at this
        width after a miss (see :meth:`missed`). With ``k``, only as many are estimated (best bound
        first, with the full codes) as can reach the k-th best estimate less its slack, a lower bound of
        the k-th exact score: the others are left out and bound the rows outside with their best bound."""
        if self.split is None:
            return None
        width = depth.bit_length()
        left = self._skip.get(width, 0)
        if left:
            self._skip[width] = left - 1
            return None
        # the split code's rows are the full code's: the same mask serves
        keys, upper, outside, err = self.split.search(q, depth, selectors)
        qn = float(np.linalg.norm(q))
        # twice the margin: the basis is orthonormal to float32 rounding, so q·x and q'·x' differ by
        # ~1e-6 beside the rounding of the products themselves
        slack_scan = qn * (self.split.codec.tau if self._tight() and self.split.codec.tau is not None
                           else self.split.err_max) + 2 * MARGIN + err
        slack = qn * self._err() + MARGIN
        if outside != -math.inf:
            outside += slack_scan
        by_bound = BestFirst(upper)
        done, taken, estimates = 0, [], []
        while True:
            upto = len(keys) if k is None else min(len(keys), max(ESTIMATE_FIRST, 4 * k) if done == 0 else 2 * done)
            batch = by_bound.take(upto - done)
            taken.append(batch)
            estimates.append(self.estimate(keys[batch], q))
            done = upto
            if done >= len(keys):
                break
            if k is not None and done >= k:
                estimate = np.concatenate(estimates)
                floor = float(np.partition(estimate, len(estimate) - k)[len(estimate) - k]) - slack
                best_left = by_bound.rest_max
                if best_left + slack_scan < floor:
                    outside = max(outside, best_left + slack_scan)
                    break
        return Candidates(keys[np.concatenate(taken)], np.concatenate(estimates), outside, slack)

    def missed(self, depth: int) -> None:
        """The split scan did not certify a search of this width: skip it for the next few."""
        self._skip[depth.bit_length()] = SPLIT_SKIP

    def _tight(self) -> bool:
        """Whether the outliers are few enough to rescore with every search (then the bounds use the
        error quantiles, else the largest errors)."""
        return len(self._all_outliers()) <= max(64, self.size * OUTLIER_SHARE)

    def _err(self) -> float:
        return self.tau if self.tau is not None and self._tight() else self.err_max

    def _all_outliers(self) -> np.ndarray:
        """Every outlier id, of the full code and of the split code (kept until either grows)."""
        if len(self._outliers) > 1:
            self._outliers = [np.concatenate(self._outliers)]
        out = self._outliers[0] if self._outliers else np.zeros(0, dtype=np.int64)
        key = (len(out), self.split.outlier_count() if self.split is not None else 0)
        if self._union is None or self._union[0] != key:
            self._union = (key, self.split.with_outliers(out) if self.split is not None else out)
        return self._union[1]

    def outliers(self) -> np.ndarray:
        """The ids of the rows the tight bounds do not cover (the caller rescores them with the
        candidates); none when they are too many, and the bounds then use the largest error."""
        out = self._all_outliers()
        return out if len(out) <= max(64, self.size * OUTLIER_SHARE) else np.zeros(0, dtype=np.int64)

    def outlier_rows(self, matrix: np.ndarray, local: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(the ids of :meth:`outliers` as row keys of ``matrix``, their float32 rows, contiguous): kept
        until more outliers come (``local``: a subset copy's row keys)."""
        ids = self.outliers()
        if self._outlier_rows is None or len(self._outlier_rows[0]) != len(ids):
            keys = ids if local is None else local[ids]
            self._outlier_rows = (keys, np.ascontiguousarray(matrix[keys], dtype=np.float32))
        return self._outlier_rows

    def close(self) -> None:
        super().close()
        if self.split is not None:
            self.split.close()


class _SplitCodec:
    """The split scan code's basis and quantiser, learnt from a sample and shared with subsets.

    The basis is the eigenbasis of the sample's second moment ``XᵀX``, strongest first: the
    half ``A`` then holds as much of the rows' energy as any half can, so ``‖x_B‖`` is small (on MiniLM
    sentence vectors 0.27 on average, against 0.65 for the half of the raw dimensions with the larger
    variance; ``bench/int8_real.py``). ``‖x_B‖`` is computed as ``√(‖x‖² − ‖x_A‖² + EPS)``: never below
    the exact value, as the float32 rounding of the two squared norms (≤ d·2⁻²⁴ each for unit rows,
    2.3e-5 at d = 384) stays under ``EPS``.
    """

    EPS = 1e-4

    def __init__(self, sample: np.ndarray, held: np.ndarray) -> None:
        dim = sample.shape[1]
        _, vecs = np.linalg.eigh((sample.T @ sample).astype(np.float64))  # ascending; orthonormal in float64
        width = max(16, (dim // 2 + 1) // 16 * 16)  # with the norm column: Faiss's SIMD kernel wants 16s
        self.basis = np.ascontiguousarray(vecs[:, ::-1][:, : width - 1].T, dtype=np.float32)  # rows: A
        self.scan = _quantiser(width, self.vectors(sample), RANGE_WIDEN)
        self.tau: float | None = _quantile_error(self.vectors(held), self.scan)

    def vectors(self, x: np.ndarray) -> np.ndarray:
        """``(x_A, ‖x_B‖)`` of rows ``x``."""

        out = np.empty((len(x), len(self.basis) + 1), dtype=np.float32)
        with blas_one_thread():  # the copy is built on the caller's thread; a second one only spins here
            xa = x @ self.basis.T
        out[:, :-1] = xa
        rest = np.einsum("ij,ij->i", x, x) - np.einsum("ij,ij->i", xa, xa)
        out[:, -1] = np.sqrt(np.maximum(rest, 0.0) + self.EPS)
        return out

    def query(self, q: np.ndarray) -> np.ndarray:
        return self.vectors(np.asarray(q, dtype=np.float32).reshape(1, -1))


class _SplitScan(_Codes):
    """The split scan codes ``(x_A, ‖x_B‖)`` of a copy's rows (see the module)."""

    def __init__(self, codec: _SplitCodec) -> None:
        super().__init__()
        self.codec = codec
        self.size = 0
        self.err_max = 0.0
        self._outliers: list[np.ndarray] = []

    @property
    def nbytes(self) -> int:
        return self._codes.nbytes

    def add(self, matrix: np.ndarray, lo: int, n: int, keys: np.ndarray | None) -> None:
        codec = self.codec
        assert codec.tau is not None
        err_max, odd = self._encode(matrix, lo, n, keys, codec.scan, codec.tau, codec.vectors)
        self.err_max = max(self.err_max, err_max)
        self._outliers += odd
        self.size = max(self.size, n)

    def outlier_count(self) -> int:
        return sum(len(o) for o in self._outliers)

    def with_outliers(self, ids: np.ndarray) -> np.ndarray:
        """``ids`` together with this code's own outliers (ascending)."""
        if len(self._outliers) > 1:
            self._outliers = [np.concatenate(self._outliers)]
        return np.union1d(ids, self._outliers[0]) if self._outliers and len(self._outliers[0]) else ids

    def _quantiser(self) -> Any:
        return self.codec.scan

    def search(self, q: np.ndarray, depth: int,
               selectors: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(row ids, upper bounds less their error, the highest of a row not returned or −inf, that
        error) of about ``depth`` rows (see :meth:`_Codes._scan_codes`)."""
        return self._scan_codes(self.codec.query(q), depth, selectors)


def _restored_quantiser(dim: int, trained: np.ndarray) -> Any:
    """A ``QT_8bit`` quantiser with the given trained ranges (``vmin`` then ``vdiff``, as Faiss keeps them)."""
    index = _faiss.IndexScalarQuantizer(dim, _faiss.ScalarQuantizer.QT_8bit, _faiss.METRIC_INNER_PRODUCT)
    if trained.shape != (2 * dim,):
        raise ValueError(f"trained ranges of shape {trained.shape}, not ({2 * dim},)")
    _faiss.copy_array_to_vector(np.ascontiguousarray(trained, dtype=np.float32), index.sq.trained)
    index.is_trained = True
    return index


def restore(dim: int, arrays: dict[str, np.ndarray], meta: dict[str, Any], keep: np.ndarray | None = None,
            stop: threading.Event | None = None) -> Int8Copy:
    """The copy :meth:`Int8Copy.state` kept (its codes used in place: a map's pages are read when the
    scan first touches them), over its rows ``keep`` only when given (taken, renumbered). Needs Faiss
    (:func:`available`): rows added later are encoded with the kept quantisers. Raises ``ValueError``
    or ``KeyError`` when the arrays do not fit together."""
    assert available()
    rows = int(meta["rows"])
    codes = arrays["int8.codes"]
    if codes.shape != (rows, dim):
        raise ValueError(f"int8 codes of shape {codes.shape}, not ({rows}, {dim})")
    split_codes = arrays.get("int8.split.codes") if meta.get("split") else None
    if meta.get("split") and (split_codes is None or len(split_codes) != rows):
        raise ValueError("the split scan's codes do not fit")

    def take(ids: np.ndarray, keep: np.ndarray | None) -> list[np.ndarray]:
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) and (ids.min() < 0 or ids.max() >= rows):
            raise ValueError("an outlier id out of range")
        if keep is None:
            return [ids]
        new = np.full(rows, -1, dtype=np.int64)
        new[keep] = np.arange(len(keep), dtype=np.int64)
        got = new[ids]
        return [np.sort(got[got >= 0])]

    copy = Int8Copy(dim, stop=stop)
    copy._trained = _restored_quantiser(dim, arrays["int8.trained"])
    copy.err_max = float(meta["err_max"])
    copy.tau = None if meta["tau"] is None else float(meta["tau"])
    copy._codes = codes if keep is None else codes[keep]
    copy._filled = copy.size = len(copy._codes)
    copy._outliers = take(arrays["int8.outliers"], keep)
    if split_codes is not None:
        basis = np.ascontiguousarray(arrays["int8.split.basis"], dtype=np.float32)
        codec = _SplitCodec.__new__(_SplitCodec)
        codec.basis = basis
        codec.scan = _restored_quantiser(len(basis) + 1, arrays["int8.split.trained"])
        codec.tau = None if meta["split_tau"] is None else float(meta["split_tau"])
        if split_codes.shape != (rows, codec.scan.sa_code_size()) or basis.shape[1] != dim:
            raise ValueError("the split scan's codes or basis do not fit")
        split = _SplitScan(codec)
        split.stop = stop
        split._codes = split_codes if keep is None else split_codes[keep]
        split._filled = split.size = copy.size
        split.err_max = float(meta["split_err_max"])
        split._outliers = take(arrays["int8.split.outliers"], keep)
        copy.split = split
    return copy


def depth_for(k: int, rows: int) -> int:
    """The first candidate depth for a top-k over ``rows`` rows: a second round costs a second scan, so
    the first one keeps enough (Faiss's heap of a few thousand costs little beside the scan); one in
    256 rows certified every query of bench/builtin_speed.py at 1M in one round. A wide top-k (MMR's
    window of 100) grows by 4k + 512, not 16k: each candidate is rescored exactly, and the 1,600 rows
    16k gave cost MMR 2.4 ms more at 100k (bench/mmr.py) with the same answers."""
    return int(min(rows, max(min(16 * k, 4 * k + 512), 512, rows // 256)))


__all__ = ["MARGIN", "SHARD_ROWS", "SPLIT_MIN_ROWS", "BestFirst", "Build", "Cancelled", "Candidates", "Int8Copy",
           "available", "depth_for", "installed", "new_copy", "restore"]
