"""What the ANN-index stores (Faiss, hnswlib) share: labels, filtered recall with a guarantee, persistence.

An ANN store is the built-in store plus an index. Rows, content and metadata live in the
:class:`~nlql.stores.memory.table.RowTable`, vectors in the float32 matrix and whole documents in the
:class:`~nlql.stores.doclog.DocLog`, exactly as in :class:`~nlql.stores.memory.MemoryStore`; the index
holds the same vectors under its own integer *labels*. Labels are kept apart from row keys so that the
table may compact (renumbering keys) and a reopened store may load an index saved under other keys
without touching the index: two arrays map key → label and label → key (-1 when dead).

A pushed filter is the table's exact boolean mask (:meth:`MatrixStore.mask`), handed to the index as an
id selector. Filtered HNSW search under-fills when the filter is selective (the graph walk meets too few
matching nodes), so recall guarantees ``min(k, matches)`` rows:

- the exact path — one product with the matching rows of the matrix (a sub-matrix cached per filter) —
  when it is also the cheaper one. It reads ``matches`` rows; a graph walk under a filter admitting a
  fraction ``f = matches / live`` of the rows costs about ``EXACT_ROWS / f`` row reads (non-matching
  nodes are walked too, and hnswlib calls Python for each). So: exact when ``matches ≤ EXACT_PER_K·k``
  or ``matches² ≤ EXACT_ROWS·live`` — every filter up to ~45% selectivity at 100k rows, ~14% at 1M,
  and no filter at all below ``EXACT_ROWS`` rows. (Measured at 100k × 384 on 2 busy cores, see
  ``bench/ann_stores.py``: a 10% filter took 0.3–0.6 ms exact — 2–10 ms the first time, while the
  sub-matrix is gathered — against 11 ms through Faiss HNSW and 18 ms through hnswlib; 1%: 0.1 ms
  against 23 ms and 95 ms.)
- otherwise the index is asked for ``k'`` rows under the selector, and while a query comes back short
  ``k'`` and ``ef`` double; a query still short when ``k'`` covers every match (or after
  ``MAX_ROUNDS``) is answered on the exact path.

Scores are recomputed from the matrix for the rows the index returns (as :meth:`similarities` does), so
a row has the same cosine whichever path found it, and ties break on (seq, position). The exact path is
the built-in store's own product, so there the answer is bit-identical to
:class:`~nlql.stores.memory.MemoryStore` (the same float arithmetic decides near-ties).
``last_stats`` records ``{"path": "exact" | "ann", "rounds": n, "matches": m, "fallback": f}`` for the
last ``knn`` call (``fallback``: query vectors the index left short, answered exactly).

With a directory the index is written beside the document log (``flush()``, ``close()``, or after every
write with ``autosave=True``), atomically (temporary file, fsync, ``os.replace``). A random token saved
both in the index's sidecar file and in the log's info table says the two agree; the token is cleared
before any write reaches the log, so after a crash (or a process that never closed the store) the index
is rebuilt from the vectors in the log on open — never re-embedded.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from nlql.pushdown import NativeFilter
from nlql.stores.base import DocRecord
from nlql.stores.memory.store import MatrixStore, MemoryStore, _filter_key


class AnnStore(MemoryStore):
    """Base of the stores that keep an ANN index beside the built-in store's matrix.

    Subclasses implement the ``_index_*`` hooks for one library; everything else (labels, filtered
    recall, widening, persistence) is here.

    Args:
        path: A directory to persist to, or None for a store in RAM.
        ef_search: The index's search breadth for a first round (HNSW ``efSearch`` / ``ef``).
        autosave: Write the index after every upsert/delete, not only on ``flush()``/``close()``.
    """

    INDEX_FILE: ClassVar[str] = "index.bin"
    SNAPSHOT = False  # (the built-in store's vector snapshot: an ANN store reads the log and keeps its index)
    KIND: ClassVar[str] = "ann"
    EXACT_PER_K: ClassVar[int] = 20        # exact path when matches ≤ EXACT_PER_K·k …
    EXACT_ROWS: ClassVar[int] = 20_000     # … or matches² ≤ EXACT_ROWS·live (cost model above)
    MAX_ROUNDS: ClassVar[int] = 8
    REBUILD_MIN: ClassVar[int] = 1024      # rebuild when dead labels exceed max(live rows, this)

    #: the index itself keeps removed labels out of results (no selector needed without a filter)
    hides_dead: bool = True

    def __init__(self, path: str | Path | None = None, *, ef_search: int = 128, autosave: bool = False) -> None:
        if ef_search < 1:
            raise ValueError("ef_search must be ≥ 1")
        self.ef_search = ef_search
        self.autosave = autosave
        self.last_stats: dict[str, Any] = {}
        self._index: Any = None
        self._key_label = np.zeros(0, dtype=np.int64)  # row key -> label, -1 when not indexed
        self._label_key = np.zeros(0, dtype=np.int64)  # label -> row key, -1 when dead
        self._dead = 0       # dead labels still physically in the index
        self._epoch = 0      # bumped on every index change (keys the selector cache)
        self._dirty = False  # the index on disk (if any) is behind the log
        self._sel_cache: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
        super().__init__(path)  # loads documents from the log without indexing them
        #: "file" when a saved index was reused on open, "built" when built (from the log's vectors, or
        #: empty), "none" for a store that keeps no index (every search exact)
        self.index_origin = "built" if self._wants_index() else "none"
        if self.dim is not None and self._wants_index():
            if self._restore_index():
                self.index_origin = "file"
            else:
                self._rebuild_index()

    # ------------------------------------------------------------------------------ library hooks

    def _wants_index(self) -> bool:
        """False for a configuration answered by the exact product alone (no index kept)."""
        return True

    def _new_index(self, dim: int, capacity: int) -> Any:
        """An empty index for ``dim``-dimensional vectors, room for ``capacity`` to start with."""
        raise NotImplementedError

    def _index_add(self, labels: np.ndarray, vectors: np.ndarray) -> int:
        """Add vectors under labels; returns how many dead slots the index reused for them."""
        raise NotImplementedError

    def _index_remove(self, labels: np.ndarray) -> int:
        """Remove labels; returns how many of them stay physically in the index (dead)."""
        raise NotImplementedError

    def _index_count(self, index: Any) -> int:
        """Entries physically in ``index`` (dead ones included)."""
        raise NotImplementedError

    def _selector(self, allowed: np.ndarray) -> Any:
        """The library's selector for a boolean array over labels."""
        raise NotImplementedError

    def _search(self, queries: np.ndarray, k: int, selector: Any, ef: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(labels, cosines), each (len(queries), k), best first, label -1 where nothing was found;
        None when the library refuses because it found fewer than ``k``."""
        raise NotImplementedError

    def _index_params(self) -> dict[str, Any]:
        """What an index file must have been built with to be reused (compared on open)."""
        raise NotImplementedError

    def _write_index(self, path: Path) -> None:
        raise NotImplementedError

    def _read_index(self, path: Path) -> Any:
        raise NotImplementedError

    def _same_vectors(self, index: Any, labels: np.ndarray, expected: np.ndarray) -> bool:
        """Whether ``index`` holds ``expected`` under ``labels`` (checked on open)."""
        raise NotImplementedError

    # ---------------------------------------------------------------------------------- writing

    def open(self, dim: int) -> None:
        with self._lock:
            super().open(dim)
            if self._index is None and self._wants_index():
                if len(self.table):  # rows another process wrote before this store first opened
                    self._rebuild_index()
                else:
                    self._index = self._new_index(dim, 0)

    def upsert(self, docs: Sequence[DocRecord]) -> None:
        with self._lock:
            self._mark_dirty()  # before the log changes: a crash from here on means "rebuild"
            super().upsert(docs)
            if self.autosave:
                self.flush()

    def delete(self, doc_ids: Sequence[str]) -> int:
        with self._lock:
            self._mark_dirty()
            n = super().delete(doc_ids)
            if self.autosave:
                self.flush()
            return n

    def _maybe_compact(self) -> None:
        # MatrixStore calls this after every table change: the one place the index follows the table
        if self._index is None:
            super()._maybe_compact()
            return
        self._sync_index()
        size = self.table.size
        alive = self.table.alive.copy()
        super()._maybe_compact()
        if self.table.size != size:  # compacted: keys are now the ranks of the rows that were alive
            self._key_label = self._key_label[np.flatnonzero(alive)]
            self._label_key = np.full(len(self._label_key), -1, dtype=np.int64)
            has = self._key_label >= 0
            self._label_key[self._key_label[has]] = np.flatnonzero(has)
            self._changed()

    def _sync_index(self) -> None:
        """Make the index hold exactly the live rows: retire labels of dead rows, add new rows."""
        if self._index is None:
            return
        size = self.table.size
        if len(self._key_label) < size:
            pad = np.full(size - len(self._key_label), -1, dtype=np.int64)
            self._key_label = np.concatenate([self._key_label, pad])
        alive = self.table.alive
        has = self._key_label >= 0
        gone = np.flatnonzero(has & ~alive)
        new = np.flatnonzero(alive & ~has)
        if len(gone):
            labels = self._key_label[gone]
            self._label_key[labels] = -1
            self._key_label[gone] = -1
            self._dead += self._index_remove(labels)
        if len(new):
            labels = np.arange(len(self._label_key), len(self._label_key) + len(new), dtype=np.int64)
            self._label_key = np.concatenate([self._label_key, new])
            self._key_label[new] = labels
            self._dead -= self._index_add(labels, np.ascontiguousarray(self.matrix[new]))
        if len(gone) or len(new):
            self._changed()
        if self._dead > max(len(self.table), self.REBUILD_MIN):
            self._rebuild_index()

    def _rebuild_index(self) -> None:
        """A fresh index over the live rows (on open without a usable file, or when too many are dead)."""
        if self.dim is None or not self._wants_index():
            return
        self._mark_dirty()
        self._index = self._new_index(self.dim, len(self.table))
        self._key_label = np.full(self.table.size, -1, dtype=np.int64)
        self._label_key = np.zeros(0, dtype=np.int64)
        self._dead = 0
        self._changed()
        self._sync_index()

    def _changed(self) -> None:
        self._epoch += 1
        self._sel_cache.clear()

    # ---------------------------------------------------------------------------------- reading

    def knn(self, vectors: np.ndarray, k: int, flt: NativeFilter | None = None,
            min_score: float | None = None) -> list[list[tuple[Any, float]]]:
        with self._lock:
            q = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
            if k <= 0 or self.dim is None or len(self.table) == 0:
                self.last_stats = {"path": "exact", "rounds": 0, "matches": 0, "fallback": 0}
                return [[] for _ in range(len(q))]
            if self._index is None:  # exact by configuration: the built-in product, nothing else
                out = MatrixStore.knn(self, q, k, flt, min_score)
                self.last_stats = {"path": "exact", "rounds": 1, "matches": self.last_stats.get("rows", 0),
                                   "fallback": 0}
                return out
            entry = self._selection(flt)
            matches = entry["matches"]
            if matches == 0:
                self.last_stats = {"path": "exact", "rounds": 0, "matches": 0, "fallback": 0}
                return [[] for _ in range(len(q))]
            if self._prefer_exact(matches, k):
                out = MatrixStore.knn(self, q, k, flt, min_score)
                self.last_stats = {"path": "exact", "rounds": 1, "matches": matches, "fallback": 0}
                return out
            return self._index_knn(q, k, flt, min_score, entry)

    def _prefer_exact(self, matches: int, k: int) -> bool:
        """Whether scanning the matching rows of the matrix is cheaper (and exact) than the index."""
        return matches <= self.EXACT_PER_K * k or matches * matches <= self.EXACT_ROWS * len(self.table)

    def _first_ef(self, fraction: float, filtered: bool) -> int:
        """Search breadth of the first round, given the fraction of live rows the selector admits."""
        return self.ef_search

    def _selection(self, flt: NativeFilter | None) -> dict[str, Any]:
        """The rows a search may return: their count, mask, and (lazily) the library's selector."""
        if flt is None and (self.hides_dead or self._dead == 0):
            return {"matches": len(self.table), "selector": None, "mask": None}
        key = (self.table.version, self._epoch, _filter_key(flt))  # `== true` is not `== 1`
        entry = self._sel_cache.get(key)
        if entry is None:
            mask = self.mask(flt)  # live rows passing the filter, exactly values.py's semantics
            entry = {"matches": int(np.count_nonzero(mask)), "mask": mask}
            self._sel_cache[key] = entry
            while len(self._sel_cache) > 8:
                self._sel_cache.popitem(last=False)
        else:
            self._sel_cache.move_to_end(key)
        return entry

    def _native_selector(self, entry: dict[str, Any]) -> Any:
        if "selector" not in entry:
            mask = entry["mask"]
            lk = self._label_key
            allowed = np.zeros(len(lk), dtype=bool)
            has = lk >= 0
            allowed[has] = mask[lk[has]]
            entry["selector"] = self._selector(allowed)
        return entry["selector"]

    def _index_knn(self, q: np.ndarray, k: int, flt: NativeFilter | None, min_score: float | None,
                   entry: dict[str, Any]) -> list[list[tuple[Any, float]]]:
        matches = entry["matches"]
        selector = self._native_selector(entry)
        need = kk = min(k, matches)
        ef = max(self._first_ef(matches / max(1, len(self.table)), selector is not None), kk)
        found: dict[int, np.ndarray] = {}
        pending = list(range(len(q)))
        fallback: list[int] = []
        rounds = 0
        while pending:
            rounds += 1
            result = self._search(np.ascontiguousarray(q[pending]), kk, selector, ef)
            retry: list[int] = []
            if result is None:
                retry = pending
            else:
                labels, sims = result
                for j, r in enumerate(pending):
                    ok = labels[j] >= 0
                    lab, sim = labels[j][ok], sims[j][ok]
                    if self._complete(lab, sim, need, matches, min_score):
                        keys = self._label_key[lab]
                        found[r] = keys[keys >= 0]
                    else:
                        retry.append(r)
            if retry and (kk >= matches or rounds >= self.MAX_ROUNDS):
                fallback = retry
                break
            if retry:
                kk, ef = min(2 * kk, matches), max(2 * ef, 2 * kk)
            pending = retry
        out: list[list[tuple[Any, float]]] = []
        exact = (MatrixStore.knn(self, q[fallback], k, flt, min_score) if fallback else [])
        exact_by_row = dict(zip(fallback, exact, strict=True))
        for r in range(len(q)):
            if r in exact_by_row:
                out.append(exact_by_row[r])
            else:
                out.append(self._rank(q[r], found[r], k, min_score))
        self.last_stats = {"path": "ann", "rounds": rounds,
                           "matches": matches, "fallback": len(fallback)}
        return out

    @staticmethod
    def _complete(lab: np.ndarray, sim: np.ndarray, need: int, matches: int, min_score: float | None) -> bool:
        """Whether one query's answer needs no wider search."""
        got = len(lab)
        if got >= need or got >= matches:
            return True
        # short: fine only when the rows found already reach below the score threshold
        return min_score is not None and got > 0 and float(sim[got - 1]) < min_score

    def _rank(self, q: np.ndarray, keys: np.ndarray, k: int, min_score: float | None) -> list[tuple[Any, float]]:
        """Rescore candidates from the matrix, apply the threshold, order by (score desc, seq, position)."""
        keys = np.unique(keys)
        if len(keys) == 0:
            return []
        scores = self.exact_scores(np.asarray(q, dtype=np.float32).reshape(-1), keys)  # the exact scan's bits
        if min_score is not None:
            keep = scores >= np.float64(min_score)  # (as doubles: float32 would round the bound)
            keys, scores = keys[keep], scores[keep]
        order = np.lexsort((self.table.pos[keys], self.table.seq[keys], -scores))[:k]
        return [(int(keys[i]), float(scores[i])) for i in order]

    # ------------------------------------------------------------------------------ persistence

    @property
    def _token_key(self) -> str:
        return f"{self.KIND}_index_token"

    def _mark_dirty(self) -> None:
        if not self._dirty and self._wants_index():
            self._dirty = True
            if self._log is not None and not self._log.read_only:  # (read-only: the index stays in RAM)
                self._log.set_info(self._token_key, "")

    def flush(self) -> None:
        """Write the index beside the document log, so that reopening needs no rebuild.

        Atomic: each file is written to a temporary name, fsynced and renamed; the token that makes the
        pair valid is stored in the log last. A no-op for a store in RAM or when nothing changed.
        """
        with self._lock:
            if (self._log is None or self._log.read_only or self.path is None or self._index is None
                    or not self._dirty):
                return
            target = self.path / self.INDEX_FILE
            tmp = target.with_name(target.name + ".tmp")
            self._write_index(tmp)
            _fsync(tmp)
            os.replace(tmp, target)
            token = uuid.uuid4().hex
            kl, seq = self._key_label, self.table.seq
            meta = {
                "token": token,
                "params": self._index_params(),
                "n_labels": len(self._label_key),
                # doc_id -> [seq, labels of its sentences]: the version of each document indexed
                "docs": {d: [int(seq[keys[0]]) if keys else -1, kl[keys].tolist()]
                         for d, keys in self.table.doc_rows.items()},
            }
            side = self.path / (self.INDEX_FILE + ".json")
            side_tmp = side.with_name(side.name + ".tmp")
            side_tmp.write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
            _fsync(side_tmp)
            os.replace(side_tmp, side)
            self._log.set_info(self._token_key, token)
            self._dirty = False

    def _restore_index(self) -> bool:
        """Load the saved index if it matches the log exactly; False means "rebuild"."""
        if self._log is None or self.path is None or self.dim is None:
            return False
        target = self.path / self.INDEX_FILE
        side = self.path / (self.INDEX_FILE + ".json")
        token = self._log.get_info(self._token_key)
        if not token or not target.exists() or not side.exists():
            return False
        try:
            meta = json.loads(side.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        if meta.get("token") != token or meta.get("params") != self._index_params():
            return False
        try:
            index = self._read_index(target)
        except Exception:  # a damaged file is rebuilt, whatever the library raises
            return False
        try:
            n_labels, key_label = self._saved_labels(meta)
        except (AttributeError, KeyError, TypeError, ValueError):  # a sidecar of another shape: rebuild
            return False
        if key_label is None:
            return False
        alive = self.table.alive
        key_label[~alive] = -1
        live = np.flatnonzero(alive)
        labels_live = key_label[live]
        if len(live) and (labels_live.min() < 0 or labels_live.max() >= n_labels
                          or len(np.unique(labels_live)) != len(live)):
            return False
        dead = self._index_count(index) - len(live)
        if dead < 0:
            return False
        if len(live):
            sample = live[np.unique(np.linspace(0, len(live) - 1, min(len(live), 16)).astype(np.int64))]
            try:
                if not self._same_vectors(index, key_label[sample], self.matrix[sample]):
                    return False
            except Exception:  # a label the index does not hold
                return False
        label_key = np.full(n_labels, -1, dtype=np.int64)
        label_key[labels_live] = live
        self._index, self._key_label, self._label_key, self._dead = index, key_label, label_key, dead
        self._dirty = False
        self._changed()
        return True

    def _saved_labels(self, meta: dict[str, Any]) -> tuple[int, np.ndarray | None]:
        """(label count, key → label) from a sidecar; None when a document differs from the log's."""
        n_labels = int(meta["n_labels"])
        docs: dict[str, list[Any]] = meta["docs"]
        rows = self.table.doc_rows
        if len(docs) != len(rows):
            return n_labels, None
        key_label = np.full(self.table.size, -1, dtype=np.int64)
        seq = self.table.seq
        for doc_id, (doc_seq, labels) in docs.items():
            keys = rows.get(doc_id)
            if keys is None or len(keys) != len(labels) or (keys and int(seq[keys[0]]) != int(doc_seq)):
                return n_labels, None
            if keys:
                key_label[keys] = labels
        return n_labels, key_label

    def close(self) -> None:
        with self._lock:
            if self._log is not None:
                self.flush()
            super().close()


def _fsync(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


__all__ = ["AnnStore"]
