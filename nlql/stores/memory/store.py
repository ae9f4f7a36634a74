"""The built-in store: one float32 matrix, columnar metadata, exact recall at or below the bandwidth limit.

Recall is one matrix-vector product per query text plus a partial sort (``argpartition``); from
``QUANT_MIN_ROWS`` rows (and Faiss installed) an int8 copy is scanned first and its best candidates are
rescored exactly, with a certificate that nothing left out could enter the top k (:mod:`nlql.stores.memory.quant`;
otherwise the float32 scan runs, and ``last_stats`` says which; the copy is built on a background
thread from the first search that wants it, float32 scans meanwhile). Every score has the bits of one
single-threaded scan over the whole matrix, whatever rows are scored: a few rows are scored in whole
aligned BLAS blocks, or alone where the BLAS allows (:func:`block_rows`), so a filtered, a rescored and a full answer never differ in
the last bit. A pushed filter is a set of rows from :class:`~nlql.stores.memory.table.RowTable` (equality and
IN looked up in a value index, anything else a vectorised mask), cached per filter with its gathered
rows (or its int8 copy), so a selective query reads its own rows only. Score thresholds are applied
inside recall.

Memory per vector: 4·dim bytes of float32 (1,536 at dim 384), plus dim bytes of int8 (384) once the
int8 copy is built, plus about dim/2 bytes (192) for the split scan code of a copy of 65,536 rows or
more, plus the copies of cached filters (at most 8). ``MemoryStore(path)`` persists every write to a SQLite file (see
:mod:`nlql.stores.doclog`) and reloads vectors on reopen without re-embedding.

A directory store also keeps a snapshot of its rows, matrix and int8 copy beside the log
(:mod:`nlql.stores.memory.snapshot`, ``vectors.snap``): written at the end of an ``add_texts`` call (or a
delete) once ``SNAPSHOT_STALE_SHARE`` of the rows is not in it, the int8 copy made first (so it is
ready when the write returns); mapped at open, then brought up to date with what the log committed
since, exactly as :meth:`MemoryStore.sync` applies another process's writes. Its int8 copy is then
restored rather than encoded (the kernel's load remains: from the second search or an engine's
warm-up, on the build's thread). A snapshot that is damaged, another store's or does not fit the log is
ignored and the log read (``opened_from`` says which).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from nlql.errors import BackendError
from nlql.kernels import blas_one_thread, block_rows, full_scan, matmul_t
from nlql.pushdown import OPS, Capabilities, FastPath, Filter, NativeFilter
from nlql.schema import DataSummary
from nlql.stores.base import Bm25Matches, DocRecord, Row
from nlql.stores.batch import DocBatch, is_columnar, latest_per_id
from nlql.stores.doclog import FILE_NAME, Changes, DocLog
from nlql.stores.memory import (
    _pages,
    document_page,
    fastpath,
    fused_page,
    kept,
    quant,
    snapshot,
    table_recall,
)
from nlql.stores.memory.table import RowTable
from nlql.values import SCORE_DECIMALS

MEMORY_CAPABILITIES = Capabilities(
    NAME="memory",
    OPS=OPS,  # every leaf operator of the pushed-filter language
    FIELDS=frozenset({"meta", "doc_id", "id", "position", "content"}),
    OR=True,
    NESTED_KEYS=True,
    NUMERIC_STRINGS=True,
    FLOAT_EQUALITY=True,
    DATETIMES=True,
    EXACT=True,
    SCORE_THRESHOLD=True,
    FULL_SCORES=True,
    FAST_PATH=True,
    DESCRIBES_DATA=True,
    KNN_SCORES=True,  # knn and similarities score a row with the same aligned blocks (block_rows)
    KNN_ORDERED=True,  # knn's ties in insertion order (seq, position): ORDER BY the score DESC's own order
    KNN_TIES=True,  # and its cut at k is in that order over every row's rounded score (_top, _small_top)
    WARM_UP=True,
    DOC_BATCHES=True,
    SYNCS=True,  # (a directory store: other processes may write it; in RAM stale() is always False)
    KEEPS_KEYWORDS=True,  # (a directory store writes the BM25 index's arrays; in RAM it keeps none)
)


@dataclass
class _Rows:
    """The rows a filter selects: ``keys`` ascending (None: every row slot 0..size, all live)."""

    keys: np.ndarray | None
    size: int
    how: str
    # the gathered blocks of the keys' rows and where each key's row lands in them (see block_rows)
    gathered: tuple[np.ndarray, np.ndarray] | None = None
    selectors: Any = None                # the keys as a row mask for the int8 copy's scan
    int8: Any = None                     # or the keys' own int8 copy (quant.Int8Copy.subset)
    int8_build: Any = None               # that copy's build in the background (quant.Build), once started
    own_copy: bool = True                # whether the keys may get their own int8 copy (not for one query)
    # a few rows (at most SMALL_ROWS): (where each key's score lands in a product with ``sub``, the keys),
    # both in insertion order, so one stable sort of the scores ranks them (``MatrixStore._small_top``)
    ins: tuple[np.ndarray, np.ndarray] | None = None


def describe_filter(flt: Filter) -> str:
    """A compact, deterministic text form of a pushed filter (used by Python-evaluated stores)."""
    from nlql.pushdown import Cond, FAnd

    if isinstance(flt, Cond):
        path = ".".join(flt.path)
        if flt.op in ("is_null", "is_not_null"):
            return f"{flt.op}({path})"
        return f"{flt.op}({path}, {flt.value!r})"
    joiner = " and " if isinstance(flt, FAnd) else " or "
    return "(" + joiner.join(describe_filter(i) for i in flt.items) + ")"


def _filter_key(flt: NativeFilter | None) -> Any:
    """A cache key for a compiled filter: its tree and its text, which shows each value's type (the
    tree alone would take ``== true`` for ``== 1``, as ``True == 1`` in Python)."""
    return None if flt is None else (flt.native, flt.text)


class MatrixStore:
    """Rows + a growable float32 matrix. Shared by the built-in store and the ANN stores' exact path."""

    # (the matrix alone keeps no files: KeepsKeywords is MemoryStore's, which a directory backs)
    capabilities = replace(MEMORY_CAPABILITIES, KEEPS_KEYWORDS=False)

    def __init__(self) -> None:
        self.table = RowTable()
        self.dim: int | None = None
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._sub_cache: OrderedDict[tuple[int, Any], _Rows] = OrderedDict()
        self._quant: quant.Int8Copy | None = None
        self._build: quant.Build | None = None  # the int8 copy's first build, running in the background
        self._scanned = False  # whether a search of this store has asked for the int8 copy yet
        self._int8_why: str | None = None  # why there is no int8 copy (it could not be built)
        self._prefault: _pages.Prefault | None = None  # the pages of rows announced, faulted in ahead
        # an int8 copy kept on disk (a directory store's snapshot): restored, not encoded, when first wanted
        self._kept_int8: Callable[[np.ndarray, int, threading.Event | None], quant.Int8Copy] | None = None
        self._lock = threading.RLock()
        self._info: dict[str, str] = {}
        self.last_stats: dict[str, Any] = {}

    # -------------------------------------------------------------------------------------- writing

    def open(self, dim: int) -> None:
        if self.dim is not None and self.dim != dim:
            raise ValueError(f"store holds {self.dim}-dimensional vectors, embedder gives {dim}")
        if self.dim is None:
            self.dim = dim
            self._matrix = np.zeros((1024, dim), dtype=np.float32)

    @property
    def matrix(self) -> np.ndarray:
        """The live part of the matrix (rows 0..size)."""
        return self._matrix[: self.table.size]

    def _append(self, docs: Sequence[DocRecord], rows_ahead: int = 0) -> np.ndarray:
        """Append ``docs`` (vectors, then rows); ``rows_ahead``: the rows these and the ones to follow
        bring, room a caller knows of (an engine's batch says it itself)."""
        if self.dim is None:
            raise RuntimeError("store not opened")
        docs = latest_per_id(docs)  # the same id twice in one call: the last one wins
        before = self.table.size
        if is_columnar(docs):  # the engine's batch: its vectors are one matrix already
            vecs: Any = docs.vectors  # type: ignore[attr-defined]
            need = before + len(vecs)
        else:
            vecs = [d.vectors for d in docs if d.units]
            need = before + sum(len(d.units) for d in docs)
        # the vectors first, past the live rows (invisible until the table has them): a failure here
        # (memory, a record whose vectors do not match its sentences) leaves the store as it was
        if need > len(self._matrix):
            cap = max(need, 2 * len(self._matrix), 1024)
            grown = None
            # room for the rest of the engine's add_texts call at once (one copy, no doubling: the
            # pages of np.zeros are taken only when written)
            ahead = before + (int(getattr(docs, "rows_ahead", 0)) or rows_ahead)
            if ahead > cap:
                with contextlib.suppress(MemoryError):
                    grown = np.zeros((ahead, self.dim), dtype=np.float32)
            if grown is None:
                grown = np.zeros((cap, self.dim), dtype=np.float32)
            grown[:before] = self._matrix[:before]
            self._stop_prefault()
            self._matrix = grown
            if ahead > need:  # the rows the rest of the call brings: their pages faulted in meanwhile
                self._prefault = _pages.prefault(grown[need:ahead])
        if isinstance(vecs, np.ndarray):
            self._matrix[before:need] = vecs
        elif vecs:
            np.concatenate(vecs, out=self._matrix[before:need])
        return self.table.add(docs, unique=True)

    def upsert(self, docs: Sequence[DocRecord]) -> None:
        with self._lock:
            self._append(docs)
            self._maybe_compact()
            self._sub_cache.clear()

    def delete(self, doc_ids: Sequence[str]) -> int:
        with self._lock:
            n = self.table.remove(doc_ids)
            self._maybe_compact()
            self._sub_cache.clear()
            return n

    def _maybe_compact(self) -> None:
        size = self.table.size
        if size > 4096 and len(self.table) < size // 2:
            keep = self.table.compact()
            self._matrix[: len(keep)] = self._matrix[keep]
            self._drop_quant()

    def _drop_quant(self) -> None:
        self._kept_int8 = None  # (its row numbers are those of the rows before the change)
        if self._build is not None:  # it reads rows about to change: what it hands back is ignored
            self._build.cancel()
            self._build = None
        if self._quant is not None:
            self._quant.close()
            self._quant = None

    def count(self) -> int:
        return len(self.table)

    def max_seq(self) -> int:
        return self.table.max_seq

    # -------------------------------------------------------------------------------------- reading

    def compile_filter(self, flt: Filter) -> NativeFilter:
        return NativeFilter(native=flt, text=describe_filter(flt))

    def mask(self, flt: NativeFilter | None) -> np.ndarray:
        return self.table.mask(None if flt is None else flt.native)

    def _rows(self, flt: NativeFilter | None) -> _Rows:
        """The rows a filter selects (cached per table version and filter, at most 8 filters)."""
        t = self.table
        if flt is None and len(t) == t.size:
            return _Rows(None, t.size, "all rows")
        key = (t.version, _filter_key(flt))
        hit = self._sub_cache.get(key)
        if hit is not None:
            self._sub_cache.move_to_end(key)
            return hit
        if flt is None:
            entry = _Rows(np.flatnonzero(t.alive), t.size, "live rows")
        else:
            keys, how = t.matching(flt.native)
            entry = _Rows(keys, t.size, how)
        self._sub_cache[key] = entry
        while len(self._sub_cache) > 8:
            self._sub_cache.popitem(last=False)
        return entry

    def _scores(self, v: np.ndarray, rows: _Rows) -> np.ndarray:
        """Exact scores of ``rows`` (rounded), bit for bit those of one scan over the whole matrix."""
        if rows.keys is None or len(rows.keys) * 2 > rows.size:
            full = full_scan(self.matrix, v)
            return full if rows.keys is None else full[rows.keys]
        if rows.gathered is None:
            gather, pos = block_rows(rows.keys, rows.size, self.dim)
            sub = self.matrix[gather]
            if sub.nbytes <= 512 * 2**20:
                rows.gathered = (sub, pos)
        else:
            sub, pos = rows.gathered
        return matmul_t(v[None, :], sub)[0][pos]

    #: Above this share of the table in gathered rows (:func:`block_rows`), scoring some rows scans the
    #: whole matrix instead: copying the rows' blocks out costs more than the scan (100k × 384: the
    #: blocks of 13% of the rows, 43% of the table, took 39 ms to gather and score, the scan 21 ms).
    GATHER_MAX_SHARE = 0.25

    def exact_scores(self, v: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Exact scores of some row keys (ascending), with the bits of a scan over the whole matrix."""
        size = self.table.size
        gather, pos = block_rows(keys, size, self.dim)
        if len(gather) > size * self.GATHER_MAX_SHARE:  # the scan itself is cheaper
            return full_scan(self.matrix, np.asarray(v, dtype=np.float32))[np.asarray(keys, dtype=np.int64)]
        return matmul_t(v[None, :], self.matrix[gather])[0][pos]

    def _top(self, row: np.ndarray, keys: np.ndarray | None, k: int,
             min_score: float | None) -> list[tuple[int, float]]:
        """The k best of scored rows by (score desc, seq, position); ``keys`` None: row i is key i."""
        kk = min(k, len(row))
        if kk < len(row):
            idx = np.argpartition(-row, kk - 1)[:kk]
            # include every row tied with the k-th score so ties break on insertion order
            kth = row[idx].min()
            idx = np.flatnonzero(row >= kth)
        else:
            idx = np.arange(len(row))
        if min_score is not None:
            idx = idx[row[idx] >= np.float64(min_score)]  # (compared as doubles, as WHERE compares)
        real = idx if keys is None else keys[idx]
        seq, pos = self.table.seq, self.table.pos
        order = np.lexsort((pos[real], seq[real], -row[idx]))[:kk]
        return [(int(real[i]), float(row[idx[i]])) for i in order]

    #: Up to this many rows passing a filter, :meth:`knn` ranks them with :meth:`_small_top`.
    SMALL_ROWS = 1024

    def _small_top(self, v: np.ndarray, k: int, rows: _Rows,
                   min_score: float | None) -> list[tuple[int, float]]:
        """:meth:`_top` of :meth:`_scores` for a few rows (a selective filter), in fewer numpy calls:
        the product with the rows' cached blocks read straight into insertion order (``rows.ins``,
        made once per cached row set), then one stable sort of the scores, best first, which keeps
        equal scores in insertion order: the same rows, order and scores as the general path."""
        ins, gathered = rows.ins, rows.gathered
        if ins is None or gathered is None:
            keys = cast(np.ndarray, rows.keys)
            if gathered is None:
                gather, pos = block_rows(keys, rows.size, self.dim)
                gathered = rows.gathered = (self.matrix[gather], pos)
            by_insertion = np.lexsort((self.table.pos[keys], self.table.seq[keys]))
            ins = rows.ins = (gathered[1][by_insertion], keys[by_insertion])
        with blas_one_thread():
            full = v[None, :] @ gathered[0].T
        row = full[0][ins[0]]
        row.round(SCORE_DECIMALS, out=row)  # (as round_scores rounds every score; the method: no wrapper)
        best = (-row).argsort(kind="stable")[:k]
        if min_score is not None:
            best = best[row[best] >= np.float64(min_score)]  # (compared as doubles, as WHERE compares)
        return list(zip(ins[1][best].tolist(), row[best].tolist()))

    def knn(self, vectors: np.ndarray, k: int, flt: NativeFilter | None = None,
            min_score: float | None = None) -> list[list[tuple[Any, float]]]:
        with self._lock:
            rows = self._rows(flt)
            n = rows.size if rows.keys is None else len(rows.keys)
            if n == 0 or k <= 0:
                self.last_stats = {"filter": rows.how, "rows": n, "scan": "none"}
                return [[] for _ in range(len(vectors))]
            out = []
            stats: dict[str, Any] = {"filter": rows.how, "rows": n}
            vectors = np.asarray(vectors, dtype=np.float32)
            if len(vectors) > 1 and not self._use_quant(n, k) and np.isfinite(vectors).all():
                self.last_stats = {**stats, "scan": "fp32 batch", "batch": len(vectors)}
                return self._batch_top(vectors, k, rows, min_score)
            for v in vectors:
                if rows.keys is not None and n <= self.SMALL_ROWS and 2 * n <= rows.size:  # a few rows
                    out.append(self._small_top(v, k, rows, min_score))
                    stats.setdefault("scan", "fp32")
                    continue
                got = self._quantised_top(v, k, rows, min_score, stats) if self._use_quant(n, k) else None
                if got is None:
                    got = self._top(self._scores(v, rows), rows.keys, k, min_score)
                    stats.setdefault("scan", "fp32")
                out.append(got)
            self.last_stats = stats
            return out

    #: Score margin of the batched scan (:meth:`_batch_top`): one matrix product's float32 scores of unit
    #: vectors differ from the one-vector scan's by a few units in the 7th decimal; every row within this
    #: margin of a query's k-th batched score is scored again exactly.
    BATCH_MARGIN = 1e-4

    def _batch_top(self, vectors: np.ndarray, k: int, rows: _Rows,
                   min_score: float | None) -> list[list[tuple[int, float]]]:
        """:meth:`knn`'s lists for several query vectors from one matrix product: each query's candidates
        (its top k by the batched scores, and every row within :data:`BATCH_MARGIN` of the k-th) scored
        again with the one-vector scan's bits (:meth:`exact_scores`), so each list is exactly what
        ``knn`` gives that vector alone."""
        sub = self.matrix if rows.keys is None else self.matrix[rows.keys]
        approx = matmul_t(vectors, sub)  # (batch, n): the layout that keeps a big batch fast
        kk = min(k, approx.shape[1])
        out = []
        for v, row in zip(vectors, approx):
            if kk < len(row):
                kth = row[np.argpartition(-row, kk - 1)[kk - 1]]
                idx = np.flatnonzero(row >= kth - self.BATCH_MARGIN)
            else:
                idx = np.arange(len(row))
            keys = idx if rows.keys is None else rows.keys[idx]
            exact = self.exact_scores(v, keys)
            out.append(self._top(exact, keys, k, min_score))
        return out

    def top_window(self, v: np.ndarray, depth: int, flt: NativeFilter | None = None,
                   min_score: float | None = None, keys: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """The exact top ``depth`` rows by one query vector among the rows passing ``flt`` (at or above
        ``min_score``): (keys, float32 scores), best first, ties in insertion order — the rows and bits
        of the fp32 scan, found through the int8 copy. None when the copy does not apply here or did
        not certify the answer (the caller then scans fp32). A fusion arm's window (issue 21).

        ``keys``: among these live rows instead (ascending; ``flt`` is then not read), e.g. the rows
        passing a query's BM25 floors: the whole int8 copy with the other rows deselected (scattered
        rows: their blocks of the fp32 matrix cost more to gather than the int8 scan)."""
        with self._lock:
            if keys is not None:
                rows = _Rows(np.asarray(keys, dtype=np.int64), self.table.size, "the rows given", own_copy=False)
                n = len(rows.keys)  # type: ignore[arg-type]
                if n == 0 or depth <= 0 or not self._use_quant(rows.size, depth) or 32 * depth > n:
                    return None
            else:
                rows = self._rows(flt)
                n = rows.size if rows.keys is None else len(rows.keys)
                if n == 0 or depth <= 0 or not self._use_quant(n, depth):
                    return None
            stats: dict[str, Any] = {"filter": rows.how, "rows": n}
            got = self._quantised_top(np.asarray(v, dtype=np.float32), depth, rows, min_score, stats)
            self.last_stats = stats
            if got is None:
                return None
            return (np.fromiter((k for k, _ in got), dtype=np.int64, count=len(got)),
                    np.fromiter((s for _, s in got), dtype=np.float32, count=len(got)))

    # ----------------------------------------------------------------------------- quantised scan

    #: Whether this store keeps an int8 copy (the built-in store does; the ANN stores' exact path not).
    QUANTISE = False
    #: Fewest rows (passing the filter) for which the int8 scan is tried first.
    QUANT_MIN_ROWS = 16_384
    #: Build the int8 copy on a thread of its own (:class:`quant.Build`) while searches scan float32
    #: (the same answers): the first search of a process over 100k rows took 2.3 s waiting for the
    #: kernel and the copy, against 20 ms for the float32 scan. The build starts at the second search
    #: of the store (or when an engine warms up, :meth:`build_int8` ``wait=False``): a process that runs
    #: one query (``nlql query``) never pays for a copy it would not use (0.6 of its 1.55 CPU-s on a
    #: 20k-row store, ``bench/fresh_process.py``). False: the first search builds it, inline.
    INT8_BACKGROUND = True

    def _use_quant(self, n: int, k: int) -> bool:
        return (self.QUANTISE and n >= self.QUANT_MIN_ROWS and 32 * k <= n and self._int8_why is None
                and quant.installed())

    def _int8(self, inline: bool = False, start: bool = True) -> quant.Int8Copy | None:
        """The int8 copy, synced with the matrix; None while its first build runs in the background, or
        when it cannot be built (``_int8_why`` says why). ``inline``: a first build runs here; ``start``
        False: a search's call, which starts the background build only if one came before it."""
        if self._quant is None:
            assert self.dim is not None
            if self.INT8_BACKGROUND and not inline:
                scanned, self._scanned = self._scanned, True
                if self._build is None and (start or scanned):
                    matrix, dim, make = self.matrix, self.dim, self._new_copy()
                    self._build = quant.Build(lambda stop: make(matrix, dim, stop), self._built)
                return None
            if not quant.available():
                self._int8_why = "Faiss or Numba could not be imported"
                return None
            self._quant = self._new_copy()(self.matrix, self.dim, None)
        self._quant.sync(self.matrix)  # rows written since: encoded here, a few at a time
        return self._quant

    def _new_copy(self) -> Callable[[np.ndarray, int, threading.Event | None], quant.Int8Copy]:
        """How the first int8 copy is made: restored from the one kept on disk (the rows written since
        encoded), else encoded from every row (:func:`quant.new_copy`). A kept copy that cannot be
        restored (damaged) is encoded instead."""
        kept, self._kept_int8 = self._kept_int8, None
        if kept is None:
            return quant.new_copy

        def make(matrix: np.ndarray, dim: int, stop: threading.Event | None) -> quant.Int8Copy:
            try:
                copy = kept(matrix, dim, stop)
            except (ValueError, KeyError, IndexError, RuntimeError, TypeError):
                return quant.new_copy(matrix, dim, stop)
            if copy.size > len(matrix):
                copy.close()
                return quant.new_copy(matrix, dim, stop)
            copy.sync(matrix)  # the rows written since it was kept
            return copy

        return make

    def _built(self, build: quant.Build, copy: quant.Int8Copy | None, why: str | None) -> None:
        """The background build's end (on its thread): keep the copy unless the store dropped the build."""
        with self._lock:
            if build is self._build:
                self._build = None
                self._quant, self._int8_why = copy, why
                return
        if copy is not None:
            copy.close()

    def _subset_built(self, rows: _Rows, build: quant.Build, copy: quant.Int8Copy | None, why: str | None) -> None:
        """A filter's own copy, built in the background: kept on its cache entry (an entry a write has
        dropped since is no longer reached); after a failure the filter keeps the whole copy."""
        with self._lock:
            if rows.int8_build is build and copy is not None:
                rows.int8 = copy

    def build_int8(self, wait: bool = True) -> bool:
        """Build the int8 copy now, on this thread, or wait for the background build (a benchmark calls
        this so that its first searches scan int8); ``wait=False``: start the background build if the
        store holds ``QUANT_MIN_ROWS`` rows, and return at once (an engine warming up). True when the
        store has a copy (or, not waiting, one is being built)."""
        with self._lock:
            if (not self.QUANTISE or self.dim is None or not quant.installed() or self._int8_why is not None
                    or self.table.size == 0):
                return False
            if not wait:
                if self._quant is None and self._build is None and self.table.size >= self.QUANT_MIN_ROWS:
                    self._int8()
                return self._quant is not None or self._build is not None
            build = self._build
        if build is not None:
            build.join()  # (not under the lock: the build's end takes it)
        with self._lock:
            if self._build is not None:  # a build started after (another thread's search): wait for it too
                return self.build_int8()
            return self._int8(inline=True) is not None

    def _quantised_top(self, v: np.ndarray, k: int, rows: _Rows, min_score: float | None,
                       stats: dict[str, Any]) -> list[tuple[int, float]] | None:
        """The exact top k through the int8 copy, or None when no depth certified it (see quant)."""
        # one BLAS thread for the small products around the scan: a woken BLAS thread spins for a while
        # and takes a core from the scan's two threads (1M: 63 ms a search instead of 40)
        with blas_one_thread():
            return self._quantised_top_one_blas_thread(v, k, rows, min_score, stats)

    def _quantised_top_one_blas_thread(self, v: np.ndarray, k: int, rows: _Rows, min_score: float | None,
                                       stats: dict[str, Any]) -> list[tuple[int, float]] | None:
        copy = self._int8(start=False)
        if copy is None:
            stats["int8"] = self._int8_why or ("building (float32 until it is ready)" if self._build is not None
                                               else "not built: the store's next search starts its build")
            return None
        local = None  # a filter's own int8 copy: ids are positions in rows.keys
        if rows.keys is not None:
            if rows.int8 is None and rows.own_copy and rows.int8_build is None \
                    and self._own_copy_fits(len(rows.keys), rows.size, copy):
                if self.INT8_BACKGROUND:  # built on a thread of its own; the whole copy meanwhile
                    parent, matrix, keys = copy, self.matrix, rows.keys
                    rows.int8_build = quant.Build(lambda stop: parent.subset(matrix, keys, stop),
                                                  functools.partial(self._subset_built, rows))
                else:
                    rows.int8 = copy.subset(self.matrix, rows.keys)
            stats["copy"] = "the filter's own" if rows.int8 is not None else "the whole, other rows deselected"
            if rows.int8 is not None:
                copy, local = rows.int8, rows.keys
            else:
                # most rows, no room for another copy, or it is being built: the whole copy, the others
                # deselected
                if rows.selectors is None:
                    mask = np.zeros(rows.size, dtype=bool)
                    mask[rows.keys] = True
                    rows.selectors = copy.selectors(mask)
        n = rows.size if rows.keys is None else len(rows.keys)
        depth = quant.depth_for(k, n)
        # rows the tight bounds do not cover: estimated from their own float32 copy (scores within
        # 2·MARGIN of the exact ones), so only those that could enter the top k are rescored
        extra, extra_rows = copy.outlier_rows(self.matrix, local)
        if local is None and rows.keys is not None and len(extra):
            keep = np.isin(extra, rows.keys, assume_unique=True)
            extra, extra_rows = extra[keep], extra_rows[keep]
        extra_upper = extra_rows @ v + 2 * quant.MARGIN if len(extra) else np.zeros(0, dtype=np.float32)
        keys, scores = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        selectors = None if local is not None else rows.selectors
        rounds, split, widened = 0, True, False
        while True:  # the split scan (when the copy has one), then the full scan, then once deeper
            rounds += 1
            cand = copy.split_candidates(v, depth, selectors, k) if split else None
            split, scan = False, "split int8" if cand is not None else "int8"
            if cand is None:
                cand = copy.candidates(v, depth, selectors)
            # one stream of rows by an upper bound of their score, best first: the candidates and outliers
            ids = np.concatenate([cand.keys if local is None else local[cand.keys], extra])
            stream = quant.BestFirst(np.concatenate([cand.estimate + cand.slack, extra_upper]))
            done = 0  # rows of the stream rescored
            while True:
                upto = min(len(ids), max(4 * k, 64) if done == 0 else 4 * done)
                new = np.setdiff1d(ids[stream.take(upto - done)], keys)
                if len(new):
                    keys = np.concatenate([keys, new])
                    scores = np.concatenate([scores, self.exact_scores(v, new)])
                done = upto
                top = self._top(scores, keys, k, min_score)
                inside = stream.rest_max
                bound = max(inside, cand.outside)
                # the k-th score (or the threshold when fewer pass) that no row left out may reach
                need = top[-1][1] if len(top) == k else (-math.inf if min_score is None else min_score)
                if bound == -math.inf or bound < need:
                    stats.update({"scan": f"{scan} + fp32 rescore", "depth": depth, "rounds": rounds,
                                  "rescored": len(keys), "bound": round(bound, 6)})
                    return top
                if inside < need or done == len(ids):
                    break  # the candidates are settled: the rows outside them are not
            if scan == "split int8":
                copy.missed(depth)  # the full int8 scan at the same depth next
                continue
            if widened or depth * 8 > n // 4 or cand.outside == -math.inf:
                break
            depth, widened = depth * 8, True
        stats.update({"scan": "fp32", "fallback": f"int8 scan not certified at depth {depth}"})
        return None

    #: A filter keeps its own int8 copy when it selects at most this share of the rows (scanning its
    #: rows only: at 1M a 50% filter's own copy scans in about half the time of the whole copy with
    #: the other rows deselected) and the filters' copies stay within the size of the whole copy.
    OWN_COPY_SHARE = 0.75

    def _own_copy_fits(self, rows: int, size: int, copy: quant.Int8Copy) -> bool:
        if rows > size * self.OWN_COPY_SHARE:
            return False
        per_row = copy.nbytes / max(1, copy.size)
        held = 0.0
        for r in self._sub_cache.values():
            if r.int8 is not None:
                held += r.int8.nbytes
            elif r.int8_build is not None and r.keys is not None:  # (a build is always of a filter's keys)
                held += len(r.keys) * per_row
        return held + rows * per_row <= max(copy.nbytes, 1 << 20)

    def memory_stats(self) -> dict[str, Any]:
        """Bytes held per vector: the float32 matrix, the int8 copy when one is built (with its split
        scan code), and the cached filters' own int8 copies."""
        with self._lock:
            n = max(1, self.table.size)
            out: dict[str, float] = {"rows": self.table.size, "fp32_bytes_per_vector": 4 * (self.dim or 0)}
            if self._quant is not None:
                out["int8_bytes_per_vector"] = round(self._quant.nbytes / n, 1)
                out["int8_err_max"] = round(self._quant.err_max, 6)
                held = sum(r.int8.nbytes for r in self._sub_cache.values() if r.int8 is not None)
                out["filter_copies_bytes_per_vector"] = round(held / n, 1)
            return out

    def score_all(self, vectors: np.ndarray, flt: NativeFilter | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(keys, scores (batch × len(keys))) over every live row passing the filter."""
        with self._lock:
            rows = self._rows(flt)
            keys = np.arange(self.table.size) if rows.keys is None else rows.keys
            vecs = np.asarray(vectors, dtype=np.float32)
            if not len(keys):
                return keys, np.zeros((len(vecs), 0), dtype=np.float32)
            return keys, np.stack([self._scores(v, rows) for v in vecs]) if len(vecs) else np.zeros(
                (0, len(keys)), dtype=np.float32)

    def scan(self, flt: NativeFilter | None = None) -> list[Any]:
        with self._lock:
            keys = np.flatnonzero(self.mask(flt))
            return [int(k) for k in self.table.order(keys)]

    def scan_array(self, flt: NativeFilter | None = None) -> np.ndarray:
        """Like :meth:`scan`, as an array in insertion order."""
        with self._lock:
            return self.table.order(np.flatnonzero(self.mask(flt)))

    def fetch(self, keys: Sequence[Any]) -> list[Row]:
        with self._lock:
            return self.table.rows(keys)

    def document_rows(self, doc_ids: Sequence[str]) -> dict[str, list[Row]]:
        with self._lock:
            return self.table.document_rows(doc_ids)

    def live_sentences(self) -> list[tuple[str, int, int, str, dict[str, Any]]]:
        """``(doc_id, position, seq, content, metadata)`` of every stored sentence (the entity graph's
        first build reads this instead of fetching every row)."""
        with self._lock:
            return self.table.live_sentences()

    def similarities(self, vectors: np.ndarray, keys: Sequence[Any] | np.ndarray) -> np.ndarray:
        with self._lock:
            idx = np.asarray(keys, dtype=np.int64)
            vecs = np.asarray(vectors, dtype=np.float32)
            if not len(idx) or not len(vecs):
                return np.zeros((len(vecs), len(idx)), dtype=np.float32)
            order = np.argsort(idx, kind="stable")
            out = np.empty((len(vecs), len(idx)), dtype=np.float32)
            for b, v in enumerate(vecs):
                out[b, order] = self.exact_scores(v, idx[order])
            return out

    def vectors(self, keys: Sequence[Any]) -> np.ndarray:
        """The rows' own unit vectors, ``(len(keys), dim)`` float32 (a copy; in process, no round trip)."""
        with self._lock:
            return self.matrix[np.asarray(keys, dtype=np.int64)]

    def get_info(self, key: str) -> str | None:
        return self._info.get(key)

    def set_info(self, key: str, value: str) -> None:
        self._info[key] = str(value)
    def fast_select(self, path: FastPath, keys: np.ndarray, scores: Any, need: int,
                    bm25: Bm25Matches) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """The table fast paths (:mod:`nlql.stores.memory.fastpath`)."""
        with self._lock:
            return fastpath.select(self.table, path, keys, scores, need, bm25)

    # the recall fast paths (TablePaths; nlql.stores.memory.table_recall): the engine's recall calls them

    def document_page(self, run: Any, qv: Any) -> list[Any] | None:
        return document_page.document_page(run, qv)

    def window_page(self, run: Any, qv: Any) -> list[Any] | None:
        return fused_page.window_page(run, qv)

    def floored(self, run: Any, qv: Any, sim_slots: list[str], fast_ok: bool) -> Any:
        return table_recall.floored(run, qv, sim_slots, fast_ok)

    def windows(self, run: Any, qv: Any, sim_slots: list[str], fast_ok: bool) -> Any:
        return table_recall.windows(run, qv, sim_slots, fast_ok)

    def fast_page(self, run: Any, fast: FastPath, keys: np.ndarray, scores: dict[str, np.ndarray], qv: Any, *,
                  fast_ok: bool, unordered: bool, fill: Sequence[str] = ()) -> list[Any] | None:
        return table_recall.fast_page(run, fast, keys, scores, qv, fast_ok=fast_ok, unordered=unordered, fill=fill)

    def insertion_order(self, keys: np.ndarray) -> np.ndarray:
        table = self.table
        return np.lexsort((table.pos[keys], table.seq[keys]))

    def stale(self) -> bool:
        """Syncing: nothing but this process writes a store in RAM."""
        return False

    def sync(self) -> Changes | None:
        return None

    def key_documents(self, keys: Sequence[Any]) -> list[str]:
        """The distinct documents of ``keys`` in the order first met, without building rows."""
        names = self.table.doc_ids
        return list(dict.fromkeys(names[int(k)] for k in keys))

    def describe_data(self, sample: int) -> DataSummary:
        """Sizes and metadata keys, kept by the table at write time (exact; ``sample`` is not needed)."""
        with self._lock:
            t = self.table
            return DataSummary(len(t.doc_slot), len(t), t.summary.keys())

    def _stop_prefault(self) -> None:
        if self._prefault is not None:
            self._prefault.stop()
            self._prefault = None

    def close(self) -> None:
        self._drop_quant()
        self._stop_prefault()


_NO_VECTORS = np.zeros((0, 0), dtype=np.float32)


def _json_bytes(values: list[Any]) -> np.ndarray:
    """A list as ASCII JSON (lone surrogates escaped, as the log's JSON keeps them), in a byte array."""
    return np.frombuffer(json.dumps(values, ensure_ascii=True, allow_nan=False).encode("ascii"), dtype=np.uint8)


def _snapshot_columns(t: RowTable) -> tuple[dict[str, tuple[np.ndarray, np.ndarray | None]], np.ndarray | None]:
    """The live documents of ``t`` as a snapshot keeps them, in the log's order (by seq; each one's rows
    in position order): the arrays (as ``(array, rows to take)``) and the rows' order (None: the rows
    as they are, every one live and in that order already)."""
    ids = list(t.doc_rows)
    slots = np.fromiter(map(t.slot_of, ids), dtype=np.int64, count=len(ids))
    by_seq = np.argsort(t.doc_seq[slots], kind="stable")
    ids = [ids[i] for i in by_seq.tolist()]
    slots = slots[by_seq]
    ranges = [t.doc_rows[d] for d in ids]
    counts = np.fromiter(map(len, ranges), dtype=np.int64, count=len(ranges))
    firsts = np.fromiter((r.start for r in ranges), dtype=np.int64, count=len(ranges))
    total = int(counts.sum())
    order: np.ndarray | None = (np.repeat(firsts - (np.cumsum(counts) - counts), counts)
                                + np.arange(total, dtype=np.int64))
    assert order is not None
    rows = order.tolist()
    arrays: dict[str, tuple[np.ndarray, np.ndarray | None]] = {
        "doc.ids": (_json_bytes(ids), None),
        "doc.seq": (t.doc_seq[slots], None),
        "doc.counts": (counts, None),
        "doc.meta": (_json_bytes([t.doc_meta[s] for s in slots.tolist()]), None),
        "row.contents": (_json_bytes([t.contents[k] for k in rows]), None),
        "row.tails": (_json_bytes([t.tails[k] for k in rows]), None),
        "row.spans": (np.asarray([[t.positions[k], t.starts[k], t.ends[k]] for k in rows], dtype=np.int64)
                      .reshape(-1, 3), None),
    }
    if total == t.size and bool((order == np.arange(total)).all()):
        order = None
    return arrays, order


def _snapshot_batch(snap: snapshot.Snapshot) -> DocBatch:
    """The documents a snapshot kept, as a batch a table appends (its vectors: the snapshot's matrix)."""
    a = snap.arrays
    ids = json.loads(a["doc.ids"].tobytes())
    metas = json.loads(a["doc.meta"].tobytes())
    counts = a["doc.counts"].tolist()
    contents = json.loads(a["row.contents"].tobytes())
    tails = json.loads(a["row.tails"].tobytes())
    spans = a["row.spans"]
    seq = np.array(a["doc.seq"], dtype=np.int64)
    if not (len(ids) == len(metas) == len(counts) == len(seq) and len(contents) == len(tails) == len(spans) == snap.rows
            and sum(counts) == snap.rows and spans.shape[1:] == (3,) and len(set(ids)) == len(ids)
            and all(type(d) is str for d in ids) and all(type(m) is dict for m in metas)
            and all(type(c) is str for c in contents) and all(type(c) is str for c in tails)):
        raise ValueError("the snapshot's columns do not fit together")
    positions, starts, ends = (spans[:, i].tolist() for i in range(3))
    batch = DocBatch(ids, [""] * len(ids), metas, counts, positions, starts, ends, contents, tails,
                     snap.arrays["matrix"], unique=True)
    batch.seq = seq
    return batch


class MemoryStore(MatrixStore):
    """The built-in store: ``MemoryStore()`` in RAM, ``MemoryStore(path)`` persisted to a directory.

    A directory store may be shared by several processes (and several engines): the SQLite file is the
    truth and RAM a copy that :meth:`sync` brings up to date incrementally (see
    :mod:`nlql.stores.doclog`). ``damaged`` maps the ids of rows that could not be read to the reason;
    ``read_only`` is True for a store opened from a read-only file or medium.

    From :attr:`QUANT_MIN_ROWS` rows a top-k is first answered from an int8 copy of the vectors and
    rescored exactly (:mod:`nlql.stores.memory.quant`), when Faiss is installed; ``last_stats["scan"]`` says
    which scan ran.
    """

    QUANTISE = True
    capabilities = MEMORY_CAPABILITIES
    #: Whether a directory store keeps its vectors (and int8 copy) in a snapshot file beside the log
    #: (:mod:`nlql.stores.memory.snapshot`), mapped at open instead of read from SQLite.
    SNAPSHOT = True
    #: Fewest rows for which a snapshot is written (below, reading the log costs a few ms).
    SNAPSHOT_MIN_ROWS = 4096
    #: A new snapshot is written at the end of a write (an add_texts call, a delete) once more than this
    #: share of the live rows is not in the one on disk (written or deleted since): an open reads those
    #: rows' vectors from the log, and many small writes do not rewrite the whole matrix each time (the
    #: bytes written over a growing store stay within 1 / share times its final size).
    SNAPSHOT_STALE_SHARE = 0.25
    #: Documents of a snapshot compared with the log's at open (their ``seq`` and vector bytes): this
    #: many of the last written, and as many drawn at random.
    SNAPSHOT_PROBES = 256

    def __init__(self, path: str | Path | None = None) -> None:
        super().__init__()
        self.path = Path(path) if path is not None else None
        self._log: DocLog | None = None
        self._clock = 0
        self._snap_clock: int | None = None  # the clock of the snapshot on disk this process knows of
        #: how the last open read the vectors: "snapshot", "snapshot + log" (rows written since read from
        #: the log), "log" (no snapshot) or "log: <why the snapshot was not used>"
        self.opened_from = ""
        self._pending = Changes()
        self.damaged: dict[str, str] = {}
        if self.path is not None:
            # a directory keeps the entity graph's links with the documents (nlql.stores.doclog)
            self.capabilities = replace(self.capabilities, ENTITY_LINKS=True)
            self._log = DocLog.attach(self.path / FILE_NAME)  # None until open() creates the file
            if self._log is not None:
                dim = self._log.dim()
                if dim is not None:
                    MatrixStore.open(self, dim)
                    self._load()

    @property
    def read_only(self) -> bool:
        return self._log is not None and self._log.read_only

    def _load(self) -> None:
        assert self._log is not None
        if self._load_snapshot():
            return
        if self.table.size:  # (a snapshot that did not fit the log once it was loaded)
            self._reset()
        everything = self._log.load()
        docs = [d for d in everything.docs if self._fits(d, everything.damaged)]
        rows = sum(len(d.units) for d in docs)  # room for them all at once (no doubling, one copy)
        for lo in range(0, len(docs), 4096):
            self._append(docs[lo : lo + 4096], rows_ahead=rows if lo == 0 else 0)
        self._clock = everything.clock
        self._note_damaged(everything.damaged)

    # ------------------------------------------------------------------------------ the snapshot

    def _snapshot_path(self) -> Path | None:
        if not self.SNAPSHOT or self.path is None or self._log is None:
            return None
        return self.path / snapshot.FILE_NAME

    def _load_snapshot(self) -> bool:
        """Load the rows as the snapshot kept them, then what the log committed since (as :meth:`sync`
        applies another process's writes); False when there is none that fits (then nothing was
        loaded, and ``opened_from`` says why)."""
        assert self._log is not None and self.dim is not None
        where = self._snapshot_path()
        if where is None or not where.exists():
            self.opened_from = "log"
            return False
        snap = snapshot.read(where, ident=kept.identity(self, False), dim=self.dim)
        if snap is None:
            self.opened_from = "log: the snapshot is damaged or not this store's"
            return False
        try:
            batch = _snapshot_batch(snap)
        except (ValueError, TypeError, KeyError):
            self.opened_from = "log: the snapshot's rows cannot be read"
            return False
        # documents compared with the log's, vector bytes and all: the last ones written (where a log
        # put back from a copy and written again differs first) and some drawn at random
        n_docs = len(batch.doc_ids)
        picks = np.union1d(np.arange(max(0, n_docs - self.SNAPSHOT_PROBES), n_docs),
                           np.random.default_rng().choice(n_docs, min(n_docs, self.SNAPSHOT_PROBES), replace=False))
        changes, count, probed = self._log.catch_up(snap.clock, [batch.doc_ids[i] for i in picks.tolist()])
        if snap.clock > changes.clock:
            self.opened_from = "log: the snapshot is newer than the log"
            return False
        # the snapshot's documents the log no longer holds at the same seq (rewritten or deleted since);
        # the others must be the log's documents up to the snapshot's clock
        gone = {d.doc_id for d in changes.docs}.union(changes.deleted)
        held = sum(d not in gone for d in batch.doc_ids)
        firsts = np.cumsum(batch.counts) - np.asarray(batch.counts, dtype=np.int64)
        matrix = snap.arrays["matrix"]
        for i in picks.tolist():
            doc_id = batch.doc_ids[i]
            if doc_id in gone:
                continue
            lo, hi = int(firsts[i]), int(firsts[i]) + batch.counts[i]
            if probed.get(doc_id) != (int(batch.seq[i]), matrix[lo:hi].tobytes()):
                held = -1
                break
        if held != count:
            self.opened_from = "log: the snapshot's documents do not match the log's"
            return False
        self._matrix = snap.arrays["matrix"]  # mapped: its pages are read as they are first touched
        self.table.add(batch, unique=True)
        self._clock = snap.clock
        if self.QUANTISE and "int8.codes" in snap.arrays:
            arrays, meta = snap.arrays, snap.meta.get("int8") or {}
            self._kept_int8 = lambda _m, dim, stop: quant.restore(dim, arrays, meta, None, stop)
        self._snap_clock = snap.clock
        try:
            self._apply(changes)  # (a compaction here drops the kept int8 copy: its rows moved)
        except BaseException:
            self._reset()
            raise
        self._pending = Changes()  # (a fresh load: nothing to report to the engine's sync)
        self.opened_from = "snapshot" if not (changes or changes.damaged) else "snapshot + log"
        return True

    def _reset(self) -> None:
        """Empty RAM (before loading again)."""
        dim = self.dim
        self.table = RowTable()
        self.dim = None
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._sub_cache.clear()
        self._drop_quant()
        self._stop_prefault()
        self._snap_clock = None
        if dim is not None:
            MatrixStore.open(self, dim)

    def _snapshot_due(self) -> bool:
        """Whether the snapshot on disk (if any) leaves out more than ``SNAPSHOT_STALE_SHARE`` of the rows."""
        live = len(self.table)
        if live < self.SNAPSHOT_MIN_ROWS:
            return False
        if self._snap_clock is None:
            return True
        t = self.table
        served = int(np.count_nonzero(t.alive & (t.seq <= self._snap_clock)))
        return served < live * (1 - self.SNAPSHOT_STALE_SHARE)

    def keep_snapshot(self, force: bool = False) -> bool:
        """Write the snapshot now when it is due (``force``: whenever the store has rows), after making
        the int8 copy (when the store keeps one) so that it is kept too; True when one was written.
        A write of the engine calls this at the end of each ``add_texts`` call and after a delete."""
        where = self._snapshot_path()
        if where is None or self._log is None or self._log.read_only:
            return False
        with self._lock:
            if not (force and len(self.table)) and not self._snapshot_due():
                return False
        if self.QUANTISE and len(self.table) >= self.QUANT_MIN_ROWS:
            self.build_int8()  # ready when the write returns (encoded here, or the kept one restored)
        with self._lock:
            ident = kept.identity(self, True)
            if ident is None or self.dim is None or self._log is None:
                return False
            on_disk = snapshot.stamp(where)
            if on_disk is not None and on_disk.get("identity") == ident and int(on_disk.get("clock", -1)) > self._clock:
                return False  # another process kept a newer one
            t = self.table
            arrays, order = _snapshot_columns(t)
            arrays["matrix"] = (self.matrix, order)
            meta: dict[str, Any] = {}
            copy = self._quant
            if copy is not None and copy.size == t.size:
                got, meta["int8"] = copy.state(order)
                arrays.update(got)
            ok = snapshot.write(where, arrays, ident=ident, clock=self._clock, rows=len(t), dim=self.dim, meta=meta)
            if ok:
                self._snap_clock = self._clock
            return ok

    def _fits(self, doc: DocRecord, damaged: dict[str, str]) -> bool:
        """A row whose vectors have the store's width (else it is reported as damaged)."""
        if not doc.units or doc.vectors.shape[1] == self.dim:
            return True
        damaged[doc.doc_id] = f"vectors of width {doc.vectors.shape[1]}, the store's is {self.dim}"
        return False

    def _note_damaged(self, damaged: dict[str, str]) -> None:
        if not damaged:
            return
        self.damaged.update(damaged)
        import warnings

        shown = ", ".join(repr(d) for d in list(damaged)[:10]) + (" …" if len(damaged) > 10 else "")
        first = next(iter(damaged.values()))
        warnings.warn(f"nlql store at {self.path}: {len(damaged)} damaged document(s) could not be read "
                      f"and are left out: {shown} ({first})", RuntimeWarning, stacklevel=3)

    def open(self, dim: int) -> None:
        with self._lock:
            if self.path is not None:
                if self._log is None:
                    self._log = DocLog.create(self.path / FILE_NAME, dim)
                recorded = self._log.ensure_dim(dim)
                if recorded != dim:
                    raise BackendError("memory", f"the store at {self.path} holds {recorded}-dimensional "
                                       f"vectors; the embedder gives {dim}",
                                       hint="open it with the embedder that built it, or use a new directory")
                if self.dim is None:
                    MatrixStore.open(self, dim)
                    self._load()  # another process may have written since we looked
                    return
            super().open(dim)

    # ------------------------------------------------------------------------------ several processes

    def stale(self) -> bool:
        """Whether :meth:`sync` has anything to do (a commit elsewhere, or changes not yet reported)."""
        if self._log is None:
            return False
        return bool(self._pending) or self._log.changed()

    def sync(self) -> Changes | None:
        """Catch up with what other processes (or engines) committed; returns what changed, or None.

        Cheap when nothing changed: one ``PRAGMA data_version``. The changes returned include those a
        write of ours found and applied (so the engine can update what it derives from rows, BM25).
        """
        if self._log is None:
            return None
        with self._lock:
            if self._log.changed():
                changes = self._log.changes_since(self._clock)
                if changes.clock != self._clock or changes:
                    self._apply(changes)
            pending, self._pending = self._pending, Changes()
        return pending if pending else None

    def _apply(self, changes: Changes) -> None:
        """Bring RAM to ``changes`` (others' writes), remembering them for :meth:`sync`."""
        docs = [d for d in changes.docs if self._fits(d, changes.damaged)]
        gone = [d for d in changes.deleted if d in self.table.doc_slot]
        if gone:
            self.table.remove(gone)
        if docs:
            self._append(docs)
        if gone or docs:
            self._maybe_compact()
            self._sub_cache.clear()
        self._clock = max(self._clock, changes.clock)
        # for the engine's BM25: ids and sentences are enough (no text, metadata or vectors kept)
        self._pending.docs.extend(DocRecord(d.doc_id, "", {}, d.units, _NO_VECTORS, d.seq, d.entities)
                                  for d in docs)
        self._pending.deleted.extend(changes.deleted)
        self._note_damaged(changes.damaged)

    # ------------------------------------------------------------------------------ writing

    def get_info(self, key: str) -> str | None:
        if self._log is not None:
            value = self._log.get_info(key)
            if value is not None:
                return value
        return super().get_info(key)

    def set_info(self, key: str, value: str) -> None:
        if self._log is not None and not self._log.read_only:
            self._log.set_info(key, str(value))  # committed at once: on disk before any vector
        else:  # in RAM, or a read-only file: kept for this process only
            super().set_info(key, value)

    def upsert(self, docs: Sequence[DocRecord]) -> None:
        # the end of a write: an engine's batch says whether more of its add_texts call follows
        last = not isinstance(docs, DocBatch) or docs.rows_ahead <= len(docs.contents)
        with self._lock:
            if self._log is None:
                super().upsert(docs)
                return
            docs = list(latest_per_id(docs))  # records (a DocBatch builds its own): the log numbers them
            # durable first (seq numbers allocated in the transaction): RAM follows what is on disk
            _, others = self._log.write(docs, dim=self.dim, since=self._clock)
            self._after_write(others, lambda: MatrixStore.upsert(self, docs))
        if last:
            self._after_commit()

    def delete(self, doc_ids: Sequence[str]) -> int:
        with self._lock:
            if self._log is None:
                return super().delete(doc_ids)
            removed, others = self._log.write(delete=list(doc_ids), dim=self.dim, since=self._clock)
            self._after_write(others, lambda: MatrixStore.delete(self, doc_ids))
        if removed:
            self._after_commit()
        return removed

    def _after_commit(self) -> None:
        """After a committed write: the snapshot when due (a cache: a failure to write it is ignored,
        the documents are committed already)."""
        try:
            self.keep_snapshot()
        except Exception:  # noqa: BLE001 - the next open reads the log instead
            pass

    def _after_write(self, others: Changes, ours: Any) -> None:
        clock = others.clock
        others.clock = self._clock
        try:
            self._apply(others)
            ours()
        except BaseException:
            self._reload()  # RAM must never disagree with the committed file
            raise
        self._clock = clock

    def _reload(self) -> None:
        """Rebuild RAM from the file (after a failure that may have left RAM half-changed)."""
        self._reset()
        self._load()
        rebuild = getattr(self, "_rebuild_index", None)  # an ANN store's index follows the rows
        if rebuild is not None:
            rebuild()

    # ------------------------------------------------------------------------------ kept files

    def kept_keyword_state(self, key: str) -> tuple[dict[str, np.ndarray], Changes] | None:
        """The engine's BM25 index as it kept it in the directory (:meth:`keep_keyword_state`) for the
        configuration ``key``, and what the log committed after it was written (to be applied by the
        caller); None in RAM, or when there is no such file or it is not this store's."""
        with self._lock:
            if self._log is None or self.path is None:
                return None
            got = kept.read(self.path / kept.file_name("bm25", key), ident=kept.identity(self, False), key=key)
            if got is None:
                return None
            arrays, clock = got
            if clock == self._clock and not self._log.changed():
                return arrays, Changes(clock=clock)
            # a look that does not count as this store catching up (its own sync still will)
            return arrays, self._log.changes_since(clock, entities=False, mark=False)

    def keep_keyword_state(self, key: str, arrays: dict[str, np.ndarray]) -> bool:
        """Keep ``arrays`` (the engine's BM25 index, in step with this store's rows now) in the
        directory, stamped with the log's clock of those rows, written atomically
        (:mod:`nlql.stores.memory.kept`). False in RAM, read-only, or when it could not be written."""
        with self._lock:
            if self._log is None or self.path is None or self._log.read_only:
                return False
            ident = kept.identity(self, True)
            if ident is None:
                return False
            return kept.write(self.path / kept.file_name("bm25", key), arrays, ident=ident, key=key, clock=self._clock)

    # ------------------------------------------------------------------------------ entity links

    def entity_rows(self) -> list[tuple[str, int, int, str]] | None:
        """The entity links kept in the directory (see :class:`nlql.stores.base.KeepsEntities`)."""
        with self._lock:
            return None if self._log is None else self._log.entity_rows()

    def adopt_entities(self, rows: Sequence[tuple[str, int, int, str]]) -> None:
        with self._lock:
            if self._log is not None:
                self._log.adopt_entities(rows)

    def close(self) -> None:
        super().close()
        if self._log is not None:
            self._log.close()
            self._log = None
