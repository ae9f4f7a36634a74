"""The built-in store: one float32 matrix, columnar metadata, exact recall near the bandwidth limit.

Recall is one matrix-vector product per query text plus a partial sort (``argpartition``). A pushed
filter is a boolean mask from :class:`~nlql.stores.table.RowTable`; for a repeated filter the store keeps
the filtered sub-matrix, so a 10%-selective query reads 10% of the memory. Score thresholds are applied
inside recall. ``MemoryStore(path)`` persists every write to a SQLite file (see
:mod:`nlql.stores.doclog`) and reloads vectors on reopen without re-embedding.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nlql.errors import BackendError
from nlql.pushdown import Capabilities, FastPath, Filter, NativeFilter
from nlql.schema import DataSummary
from nlql.stores import fastpath
from nlql.stores.base import Bm25Matches, DocRecord, Row
from nlql.stores.doclog import FILE_NAME, Changes, DocLog
from nlql.stores.table import RowTable, latest_per_id
from nlql.values import round_scores

_ALL_OPS = frozenset({
    "eq", "ne", "lt", "le", "gt", "ge", "in", "not_in", "is_null", "is_not_null",
    "contains", "not_contains", "like", "not_like", "match", "not_match",
})

MEMORY_CAPABILITIES = Capabilities(
    NAME="memory",
    OPS=_ALL_OPS,
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
)


_controller: Any = None


def _blas_one_thread() -> Any:
    """A context limiting BLAS to one thread: a matrix-vector product is memory-bound, and on a busy
    2-core machine a second BLAS thread waits for a time slice (8 ms instead of 0.2 ms at 10k rows)."""
    global _controller
    if _controller is None:
        try:
            from threadpoolctl import ThreadpoolController

            _controller = ThreadpoolController()
        except Exception:  # noqa: BLE001 - optional optimisation
            _controller = False
    if _controller is False:
        return contextlib.nullcontext()
    return _controller.limit(limits=1, user_api="blas")


def matmul_t(vectors: np.ndarray, sub: np.ndarray) -> np.ndarray:
    """``vectors @ sub.T`` laid out (batch, N), computed with single-threaded BLAS."""
    with _blas_one_thread():
        out = np.atleast_2d(vectors.astype(np.float32, copy=False) @ sub.T)
    return round_scores(out)


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


class MatrixStore:
    """Rows + a growable float32 matrix. Shared by the built-in store and the ANN stores' exact path."""

    capabilities = MEMORY_CAPABILITIES

    def __init__(self) -> None:
        self.table = RowTable()
        self.dim: int | None = None
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._sub_cache: OrderedDict[tuple[int, Any], tuple[np.ndarray, np.ndarray]] = OrderedDict()
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

    def _append(self, docs: Sequence[DocRecord]) -> np.ndarray:
        if self.dim is None:
            raise RuntimeError("store not opened")
        docs = latest_per_id(docs)  # the same id twice in one call: the last one wins
        before = self.table.size
        keys = self.table.add(docs)
        need = self.table.size
        if need > len(self._matrix):
            cap = max(need, 2 * len(self._matrix), 1024)
            grown = np.zeros((cap, self.dim), dtype=np.float32)
            grown[:before] = self._matrix[:before]
            self._matrix = grown
        if len(keys):
            vecs = [d.vectors for d in docs if len(d.units)]
            self._matrix[keys[0] : keys[0] + len(keys)] = np.concatenate(vecs) if vecs else 0
        return keys

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

    def count(self) -> int:
        return len(self.table)

    def max_seq(self) -> int:
        return self.table.max_seq

    # -------------------------------------------------------------------------------------- reading

    def compile_filter(self, flt: Filter) -> NativeFilter:
        return NativeFilter(native=flt, text=describe_filter(flt))

    def mask(self, flt: NativeFilter | None) -> np.ndarray:
        return self.table.mask(None if flt is None else flt.native)

    def _candidates(self, flt: NativeFilter | None) -> tuple[np.ndarray | None, np.ndarray]:
        """(keys or None for all rows, the matrix rows to score)."""
        if flt is None and bool(self.table.alive.all()):
            return None, self.matrix
        key = (self.table.version, flt.native if flt is not None else None)
        hit = self._sub_cache.get(key)
        if hit is not None:
            self._sub_cache.move_to_end(key)
            return hit
        keys = np.flatnonzero(self.mask(flt))
        sub = self.matrix[keys]
        entry = (keys, sub)
        if sub.nbytes <= 512 * 2**20:
            self._sub_cache[key] = entry
            while len(self._sub_cache) > 8:
                self._sub_cache.popitem(last=False)
        return entry

    def knn(self, vectors: np.ndarray, k: int, flt: NativeFilter | None = None,
            min_score: float | None = None) -> list[list[tuple[Any, float]]]:
        with self._lock:
            keys, sub = self._candidates(flt)
            if len(sub) == 0 or k <= 0:
                return [[] for _ in range(len(vectors))]
            scores = matmul_t(vectors, sub)  # (batch, N)
            out = []
            seq, pos = self.table.seq, self.table.pos
            for row in scores:
                kk = min(k, len(row))
                if kk < len(row):
                    idx = np.argpartition(-row, kk - 1)[:kk]
                    # include every row tied with the k-th score so ties break on insertion order
                    kth = row[idx].min()
                    idx = np.flatnonzero(row >= kth)
                else:
                    idx = np.arange(len(row))
                if min_score is not None:
                    idx = idx[row[idx] >= min_score]
                real = idx if keys is None else keys[idx]
                order = np.lexsort((pos[real], seq[real], -row[idx]))[:kk]
                out.append([(int(real[i]), float(row[idx[i]])) for i in order])
            return out

    def score_all(self, vectors: np.ndarray, flt: NativeFilter | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(keys, scores (batch × len(keys))) over every live row passing the filter."""
        with self._lock:
            keys, sub = self._candidates(flt)
            if keys is None:
                keys = np.arange(self.table.size)
            return keys, matmul_t(vectors, sub)

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

    def similarities(self, vectors: np.ndarray, keys: Sequence[Any]) -> np.ndarray:
        with self._lock:
            idx = np.asarray(keys, dtype=np.int64)
            return matmul_t(vectors, self.matrix[idx])

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
        """The table fast paths (:mod:`nlql.stores.fastpath`)."""
        with self._lock:
            return fastpath.select(self.table, path, keys, scores, need, bm25)

    def key_documents(self, keys: Sequence[Any]) -> list[str]:
        """The distinct documents of ``keys`` in the order first met, without building rows."""
        names = self.table.doc_ids
        return list(dict.fromkeys(names[int(k)] for k in keys))

    def describe_data(self, sample: int) -> DataSummary:
        """Sizes and metadata keys, kept by the table at write time (exact; ``sample`` is not needed)."""
        with self._lock:
            t = self.table
            return DataSummary(len(t.doc_slot), len(t), t.summary.keys())

    def close(self) -> None:
        pass


_NO_VECTORS = np.zeros((0, 0), dtype=np.float32)


class MemoryStore(MatrixStore):
    """The built-in store: ``MemoryStore()`` in RAM, ``MemoryStore(path)`` persisted to a directory.

    A directory store may be shared by several processes (and several engines): the SQLite file is the
    truth and RAM a copy that :meth:`sync` brings up to date incrementally (see
    :mod:`nlql.stores.doclog`). ``damaged`` maps the ids of rows that could not be read to the reason;
    ``read_only`` is True for a store opened from a read-only file or medium.
    """

    def __init__(self, path: str | Path | None = None) -> None:
        super().__init__()
        self.path = Path(path) if path is not None else None
        self._log: DocLog | None = None
        self._clock = 0
        self._pending = Changes()
        self.damaged: dict[str, str] = {}
        if self.path is not None:
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
        everything = self._log.load()
        docs = [d for d in everything.docs if self._fits(d, everything.damaged)]
        for lo in range(0, len(docs), 4096):
            self._append(docs[lo : lo + 4096])
        self._clock = everything.clock
        self._note_damaged(everything.damaged)

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
        self._pending.docs.extend(DocRecord(d.doc_id, "", {}, d.units, _NO_VECTORS, d.seq) for d in docs)
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
        with self._lock:
            if self._log is None:
                super().upsert(docs)
                return
            docs = latest_per_id(docs)
            # durable first (seq numbers allocated in the transaction): RAM follows what is on disk
            _, others = self._log.write(docs, dim=self.dim, since=self._clock)
            self._after_write(others, lambda: MatrixStore.upsert(self, docs))

    def delete(self, doc_ids: Sequence[str]) -> int:
        with self._lock:
            if self._log is None:
                return super().delete(doc_ids)
            removed, others = self._log.write(delete=list(doc_ids), dim=self.dim, since=self._clock)
            self._after_write(others, lambda: MatrixStore.delete(self, doc_ids))
            return removed

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
        dim = self.dim
        self.table = RowTable()
        self.dim = None
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._sub_cache.clear()
        if dim is not None:
            MatrixStore.open(self, dim)
        self._load()
        rebuild = getattr(self, "_rebuild_index", None)  # an ANN store's index follows the rows
        if rebuild is not None:
            rebuild()

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
