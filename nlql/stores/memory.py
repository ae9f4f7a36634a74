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

from nlql.pushdown import Capabilities, Filter, NativeFilter
from nlql.stores.base import DocRecord, Row
from nlql.stores.doclog import DocLog
from nlql.stores.table import RowTable
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

    def get_info(self, key: str) -> str | None:
        return self._info.get(key)

    def set_info(self, key: str, value: str) -> None:
        self._info[key] = str(value)

    def close(self) -> None:
        pass


class MemoryStore(MatrixStore):
    """The built-in store: ``MemoryStore()`` in RAM, ``MemoryStore(path)`` persisted to a directory."""

    def __init__(self, path: str | Path | None = None) -> None:
        super().__init__()
        self.path = Path(path) if path is not None else None
        self._log: DocLog | None = None
        if self.path is not None:
            self.path.mkdir(parents=True, exist_ok=True)
            self._log = DocLog(self.path / "nlql.sqlite")
            dim = self._log.get_info("dim")
            if dim is not None:
                self.open(int(dim))
                batch: list[DocRecord] = []
                for doc in self._log:
                    batch.append(doc)
                    if len(batch) >= 4096:
                        self._append(batch)
                        batch = []
                if batch:
                    self._append(batch)

    def open(self, dim: int) -> None:
        super().open(dim)
        if self._log is not None and self._log.get_info("dim") is None:
            self._log.set_info("dim", str(dim))

    def get_info(self, key: str) -> str | None:
        if self._log is not None:
            return self._log.get_info(key)
        return super().get_info(key)

    def set_info(self, key: str, value: str) -> None:
        if self._log is not None:
            self._log.set_info(key, str(value))  # committed at once: on disk before any vector
        else:
            super().set_info(key, value)

    def upsert(self, docs: Sequence[DocRecord]) -> None:
        with self._lock:
            if self._log is not None:
                self._log.write(docs)  # durable first: RAM follows what is on disk
            super().upsert(docs)

    def delete(self, doc_ids: Sequence[str]) -> int:
        with self._lock:
            if self._log is not None:
                self._log.write(delete=list(doc_ids))
            return super().delete(doc_ids)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
