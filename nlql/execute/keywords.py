"""Keyword scoring beside any store: one engine-owned BM25 index, so BM25 ranks the same on every backend
(the index and formula themselves are :mod:`nlql.text.bm25`).

Rows are identified by their unit id (``doc_id#position``), which every store can give back, so the
index is independent of store-internal keys. It is built lazily from the store on first use (this is
also how a re-attached store gets it) and then kept in step by the engine's writes.

For a table store (``Capabilities.FAST_PATH``: keys are row numbers of a
:class:`~nlql.stores.memory.table.RowTable`) the sidecar also keeps an int array from its own row ids to the
table's row numbers, so a fast path reads a query's BM25 as one dense vector over the table
(:meth:`BM25Sidecar.table_scores`) without a Python loop over the matching rows. The array follows the
engine's writes row by row; when the table renumbered its rows (compaction) or changed behind the
sidecar's back (its ``version`` moved without a write hook), it is rebuilt from the table once.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from nlql.stores.base import DocRecord, KeepsKeywords, Row, Store, TablePaths, unit_id
from nlql.stores.batch import latest_per_id


class _FastMatches:
    """What the engine hands a table fast path: callable like ``matches`` (the generic protocol
    :data:`nlql.stores.base.Bm25Matches`), and ``rows(text, table)`` for the dense vectorised form."""

    def __init__(self, sidecar: BM25Sidecar) -> None:
        self._sidecar = sidecar

    def __call__(self, text: str) -> tuple[list[tuple[str, int]], np.ndarray]:
        return self._sidecar.matches(text)

    def rows(self, text: str, table: Any) -> np.ndarray | None:
        return self._sidecar.table_scores(text, table)

    def sparse(self, text: str, table: Any) -> tuple[np.ndarray, np.ndarray]:
        return self._sidecar.table_matches(text, table)


class BM25Sidecar:
    """The engine's BM25 index over a store's sentences (a :class:`nlql.stores.base.KeywordSource`)."""

    in_store = False  # (beside the store: recall does not narrow with the store's BM25)

    def _table(self) -> Any:
        """The store's row table (``FAST_PATH``: keys are its row numbers), else None."""
        return cast(TablePaths, self.store).table if self.store.capabilities.FAST_PATH else None

    def __init__(self, store: Store, analyzer: Any = None) -> None:
        self.store = store
        self.analyzer = analyzer
        self._index: Any = None
        self._ids: dict[str, int] = {}
        self._doc_ids: dict[str, list[tuple[str, int]]] = {}
        self._rev: dict[int, tuple[str, int]] = {}
        self._next = 0
        self._lock = threading.Lock()
        # id -> table row number (-1: none), valid for (table, version, size) in _row_state
        self._row_of = np.full(0, -1, dtype=np.int64)
        self._row_state: tuple[int, int, int] | None = None
        self._ids_are_rows = False  # _row_of[:_next] == arange(_next) (no row renumbered or removed)
        # the query texts' scores of the current search over table rows (valid for _row_state; cleared by
        # every write and every search): a page's rows are scored again after the fast path picked them.
        # _matches: (matching table rows ascending, their scores); _by_row: the dense vector, built from it
        self._matches: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._by_row: dict[str, np.ndarray] = {}
        self.fast_matches = _FastMatches(self)

    @property
    def built(self) -> bool:
        return self._index is not None

    def _build(self, keep: bool = True) -> None:
        from nlql import deadline
        from nlql.text.bm25 import BM25Index

        if self._load_kept():
            return
        index = BM25Index(self.analyzer)
        name = self.store.capabilities.NAME
        deadline.check(name, "building the keyword index")  # a search past its deadline calls no store
        keys = self.store.scan(None)
        deadline.check(name, "building the keyword index")  # (nothing is kept: the next search builds it)
        rows = self.store.fetch(keys)
        self._index = index
        self._add_rows([(r.doc_id, r.position, r.content) for r in rows])
        index.seal()
        if keep:
            self._keep()

    # ------------------------------------------------------------------ kept by the store

    def _kept_key(self) -> str:
        """The configuration a kept index must have been built with (its analyzer and formula)."""
        import json

        from nlql.text.bm25 import BM25Index

        probe = BM25Index(self.analyzer)
        return json.dumps({"analyzer": probe.analyzer.config(), "k1": probe.k1, "b": probe.b}, sort_keys=True)

    def _keep(self) -> None:
        """Hand the index to a store that keeps it beside its data (a directory store), so that a fresh
        process loads it instead of building it (issue 34). The caller holds the lock; the index is in
        step with the store's rows."""
        if not self.store.capabilities.KEEPS_KEYWORDS or self._index is None:
            return
        keep = cast(KeepsKeywords, self.store).keep_keyword_state
        try:
            self._keep_in(keep)
        except Exception:  # noqa: BLE001 - a cache: the next process builds the index instead
            pass

    def _keep_in(self, keep: Any) -> None:
        arrays = self._index.state()
        keys = arrays["keys"]
        names = [self._rev[k] for k in keys.tolist()]
        table = self._table()
        if table is not None and self._row_state == (id(table), table.version, table.size) and keys.size:
            rows = self._row_of[keys]
            if bool((rows >= 0).all()):  # kept as the table's row numbers: a fresh load's, unless rows died
                arrays["keys"] = rows
        docs = [d for d, _ in names]
        text = "".join(docs)
        arrays["unit_doc_text"] = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        arrays["unit_doc_ends"] = np.cumsum([len(d) for d in docs], dtype=np.int64)
        arrays["unit_position"] = np.fromiter((p for _, p in names), dtype=np.int64, count=len(names))
        keep(self._kept_key(), arrays)

    def keep(self) -> None:
        """:meth:`_keep` when the index is built (the engine calls it at the end of an ``add_texts``)."""
        with self._lock:
            if self._index is not None:
                self._keep()

    def _load_kept(self) -> bool:
        """The index the store kept, with what was committed since applied; False when there is none."""
        from nlql.text.bm25 import BM25Index

        got = (cast(KeepsKeywords, self.store).kept_keyword_state(self._kept_key())
               if self.store.capabilities.KEEPS_KEYWORDS else None)
        if got is None:
            return False
        arrays, since = got
        try:
            ends = np.asarray(arrays.pop("unit_doc_ends"), dtype=np.int64).tolist()
            text = np.asarray(arrays.pop("unit_doc_text"), dtype=np.uint32).tobytes().decode("utf-32-le",
                                                                                            "surrogatepass")
            positions = np.asarray(arrays.pop("unit_position"), dtype=np.int64).tolist()
            index = BM25Index.from_state(arrays, self.analyzer)
        except (KeyError, ValueError, UnicodeDecodeError):
            return False
        key_arr = np.asarray(arrays["keys"], dtype=np.int64)
        keys = key_arr.tolist()
        if not (len(keys) == len(positions) == len(ends)) or (ends and ends[-1] != len(text)):
            return False
        starts = [0, *ends[:-1]]
        docs = [text[lo:hi] for lo, hi in zip(starts, ends, strict=True)]
        uids = [f"{d}#{p}" for d, p in zip(docs, positions, strict=True)]  # (unit_id's form)
        self._index = index
        self._ids = dict(zip(uids, keys, strict=True))
        self._rev = dict(zip(keys, zip(docs, positions, strict=True), strict=True))
        by_doc = self._doc_ids
        for d, uid, k in zip(docs, uids, keys, strict=True):
            got_list = by_doc.get(d)
            if got_list is None:
                by_doc[d] = [(uid, k)]
            else:
                got_list.append((uid, k))
        self._next = max(keys) + 1 if keys else 0
        table = self._table()
        if table is not None and not since and (not keys or key_arr.max() < table.size):
            # kept as this table's row numbers: checked row by row, vectorised, then taken as the mapping
            names = table.doc_ids
            if (bool((table.pos[key_arr] == np.asarray(positions, dtype=np.int64)).all())
                    and bool(table.alive[key_arr].all()) and [names[k] for k in keys] == docs):
                self._grow(self._next)
                self._row_of[:] = -1
                self._row_of[key_arr] = key_arr
                self._ids_are_rows = bool((key_arr == np.arange(len(keys))).all())
                self._row_state = (id(table), table.version, table.size)
        if since.deleted:
            self._remove(since.deleted)
        if since.docs:
            self._remove([d.doc_id for d in since.docs])
            self._add_rows([(d.doc_id, u.position, u.content) for d in since.docs for u in d.units])
        index.seal()
        return True

    def _add_rows(self, items: Sequence[tuple[str, int, str]]) -> None:
        ids, texts = [], []
        for doc_id, position, content in items:
            i = self._next
            self._next += 1
            uid = unit_id(doc_id, position)
            self._ids[uid] = i
            self._rev[i] = (doc_id, position)
            self._doc_ids.setdefault(doc_id, []).append((uid, i))
            ids.append(i)
            texts.append(content)
        if ids:
            self._index.add(ids, texts)

    def _ensure_built(self) -> bool:
        """At a write (lock held): build the index now if the store is a table in this process, so the
        first BM25 query after an ingest costs what the next one does (the index then follows every
        write). The store holds the write already. True when it was built here."""
        if self._index is not None or self._table() is None:
            return False
        self._build(keep=False)  # (kept at the end of the ingest: Engine.add_texts calls keep())
        table = self._table()
        if self._row_state != (id(table), table.version, table.size):
            self._map_table(table)
        return True

    def on_upsert(self, docs: Sequence[DocRecord]) -> None:
        with self._lock:
            self._forget()
            if self._ensure_built() or self._index is None:
                return
            docs = latest_per_id(docs)  # the same id twice in one write: the last one wins (as in the store)
            first = self._next
            self._remove([d.doc_id for d in docs])
            self._add_rows([(d.doc_id, u.position, u.content) for d in docs for u in d.units])
            self._follow_table(first, [d.doc_id for d in docs])
            self._index.seal()

    def on_delete(self, doc_ids: Sequence[str]) -> None:
        with self._lock:
            self._forget()
            if not self._ensure_built() and self._index is not None:
                self._remove(doc_ids)
                self._follow_table(self._next, [])

    def _remove(self, doc_ids: Sequence[str]) -> None:
        gone: list[int] = []
        for d in doc_ids:
            for uid, i in self._doc_ids.pop(d, ()):
                del self._ids[uid]
                del self._rev[i]
                gone.append(i)
        if gone:
            self._index.remove(gone)
            if self._row_of.size:
                arr = np.asarray(gone, dtype=np.int64)
                self._row_of[arr[arr < self._row_of.size]] = -1
            self._ids_are_rows = False

    # ------------------------------------------------------------------ the table mapping

    def _follow_table(self, first: int, doc_ids: Sequence[str]) -> None:
        """After a write: map the ids added since ``first`` to table rows, if the mapping was valid before
        and the table kept its row numbers; otherwise drop it (rebuilt on the next fast-path query)."""
        state = self._row_state
        table = self._table()
        if state is None or table is None or state[0] != id(table):
            self._row_state = None
            return
        new_ids = [i for d in dict.fromkeys(doc_ids) for _, i in self._doc_ids.get(d, ()) if i >= first]
        # Rows are only appended unless the table compacted (which renumbers every row and shrinks it).
        if table.size != state[2] + len(new_ids):
            self._row_state = None
            return
        self._grow(self._next)
        doc_rows = table.doc_rows
        for i in new_ids:
            doc_id, position = self._rev[i]
            rows = doc_rows.get(doc_id)
            if rows is None or position >= len(rows):
                self._row_state = None
                return
            self._row_of[i] = rows[position]
            self._ids_are_rows = self._ids_are_rows and int(self._row_of[i]) == i
        self._ids_are_rows = self._ids_are_rows and len(new_ids) == self._next - first
        self._row_state = (id(table), table.version, table.size)

    def _grow(self, n: int) -> None:
        if self._row_of.size < n:
            grown = np.full(max(n, 2 * self._row_of.size, 1024), -1, dtype=np.int64)
            grown[: self._row_of.size] = self._row_of
            self._row_of = grown

    def _map_table(self, table: Any) -> None:
        """Rebuild the id -> row mapping from the table (one pass over the live documents)."""
        self._grow(self._next)
        self._row_of[:] = -1
        doc_rows = table.doc_rows
        for doc_id, pairs in self._doc_ids.items():
            rows = doc_rows.get(doc_id)
            if rows is None:
                continue
            for _, i in pairs:
                position = self._rev[i][1]
                if position < len(rows):
                    self._row_of[i] = rows[position]
        n = self._next
        self._ids_are_rows = bool((self._row_of[:n] == np.arange(n)).all())
        self._row_state = (id(table), table.version, table.size)

    def _forget(self) -> None:
        self._matches.clear()
        self._by_row.clear()

    def _table_matches(self, text: str, table: Any) -> tuple[np.ndarray, np.ndarray]:
        """(rows, scores) of :meth:`table_matches` (lock held)."""
        if self._index is None:
            self._build()
        if self._row_state != (id(table), table.version, table.size):
            self._map_table(table)
            self._forget()
        hit = self._matches.get(text)
        if hit is not None:
            return hit
        ids, values = self._index.score(text, ordered=False)
        if self._ids_are_rows:  # an id is its row number (ids ascending: the index's insertion order)
            rows = ids
        else:
            rows = self._row_of[ids] if ids.size else ids
            ok = rows >= 0
            if not ok.all():
                rows, values = rows[ok], values[ok]
        if rows.size > 1 and not bool((rows[1:] > rows[:-1]).all()):  # (renumbered rows, or re-added ids)
            order = np.argsort(rows, kind="stable")
            rows, values = rows[order], values[order]
        rows.setflags(write=False)  # shared by the callers of this query text until the next write
        values.setflags(write=False)
        if len(self._matches) >= 4:
            self._matches.pop(next(iter(self._matches)))
            self._by_row.clear()
        self._matches[text] = (rows, values)
        return rows, values

    def table_matches(self, text: str, table: Any) -> tuple[np.ndarray, np.ndarray]:
        """The rows of ``table`` holding a term of ``text`` (row numbers ascending) and their BM25 scores
        (all > 0): a query's BM25 without a vector over the whole table."""
        with self._lock:
            return self._table_matches(text, table)

    def table_scores(self, text: str, table: Any) -> np.ndarray:
        """BM25 of ``text`` for every row number of ``table`` (0.0 where no query term occurs)."""
        with self._lock:
            rows, values = self._table_matches(text, table)
            hit = self._by_row.get(text)
            if hit is not None:
                return hit
            out = np.zeros(table.size, dtype=np.float64)
            out[rows] = values
            out.setflags(write=False)  # shared by the callers of this query text until the next write
            self._by_row[text] = out
            return out

    def begin_search(self) -> None:
        """Forget the scores kept for the last search (they serve the stages of one search only, so a
        repeated query is scored again, as a benchmark expects)."""
        with self._lock:
            self._forget()

    # ------------------------------------------------------------------ generic answers

    def matches(self, text: str) -> tuple[list[tuple[str, int]], np.ndarray]:
        """Every row that contains a term of ``text``: its (doc_id, position) and BM25 score."""
        with self._lock:
            if self._index is None:
                self._build()
            ids, values = self._index.score(text)
            rev = self._rev
            return [rev[i] for i in ids.tolist()], np.asarray(values, dtype=np.float64)

    def scores(self, text: str, keys: Sequence[Any], rows: Sequence[Row]) -> np.ndarray:
        """BM25 of ``text`` for each row (0.0 where no query term occurs)."""
        with self._lock:
            if self._index is None:
                self._build()
            table = self._table()
            found = self._matches.get(text) if table is not None else None
            if found is not None and self._row_state == (id(table), table.version, table.size) and len(keys):
                # this search's fast path scored the text over the table (0.0 for a row the index does
                # not hold), and the keys are the table's row numbers
                want = np.asarray(keys, dtype=np.int64)
                by_row = self._by_row.get(text)
                if by_row is not None:
                    return by_row[want]
                held, values = found
                out = np.zeros(want.size, dtype=np.float64)
                if held.size:
                    pos = np.minimum(np.searchsorted(held, want), held.size - 1)
                    hit = held[pos] == want
                    out[hit] = values[pos[hit]]
                return out
            ids = np.fromiter((self._ids.get(r.id, -1) for r in rows), dtype=np.int64, count=len(rows))
            out = np.zeros(len(rows), dtype=np.float64)
            valid = ids >= 0
            if not valid.any():
                return out
            got_keys, got_scores = self._index.score(text, ids[valid])
            if len(got_keys) == 0:
                return out
            # got_keys is ascending: place each valid id's score by binary search
            want = ids[valid]
            pos = np.searchsorted(got_keys, want)
            pos[pos >= got_keys.size] = 0
            hit = got_keys[pos] == want
            vals = np.zeros(want.size, dtype=np.float64)
            vals[hit] = got_scores[pos[hit]]
            out[valid] = vals
            return out
