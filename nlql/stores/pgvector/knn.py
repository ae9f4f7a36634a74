"""The knn strategy of the pgvector store, and hybrid plans as one statement.

pgvector 0.6.2 has no iterative scan, so HNSW + WHERE under-fills:

- ``exact=True``, ``hnsw=False``, ``k`` over 1000, fewer than ``index_threshold`` rows in the table, or
  a filter matching at most ``max(10·k, exact_threshold)`` rows (counted with a bounded ``count``):
  exact scan ordered by ``(distance, seq, position)``; the distance is written as an expression the
  index cannot serve, so the planner scans (using other indexes for the filter), and ties break on
  insertion order.
- otherwise HNSW with ``hnsw.ef_search = max(ef_search, k)`` (``SET LOCAL``) inside a MATERIALIZED CTE;
  when fewer than ``k`` rows come back and more rows match, ``ef_search`` doubles (up to 1000) and the
  query repeats, then falls back to the exact scan. ``last_stats`` records the path and rounds.

Score thresholds (``1 − distance >= min_score``) are applied outside the CTE, after the top-k cut.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from nlql.errors import UnsupportedError
from nlql.pushdown import NativeFilter
from nlql.sql.binder import Fragment, Param, sql
from nlql.sql.dialect import Compiled
from nlql.stores.base import Row
from nlql.stores.pgvector.driver import Vector, first_line, render, vector_bytes

EF_MAX = 1000  # pgvector's upper bound for hnsw.ef_search


class KnnMixin:
    """Top-k search and lowered hybrid plans (part of :class:`PgVectorStore`)."""

    dialect: Any
    exact: bool
    hnsw: bool
    ef_search: int
    exact_threshold: int
    index_threshold: int
    dim: int | None
    last_stats: dict[str, Any]
    _index_ready: bool
    _small_until: float

    def _from(self, flt: NativeFilter | None) -> Fragment:
        """``FROM … WHERE …`` for a filter (joining the documents table only when it is read)."""
        d = self.dialect
        if flt is None:
            return sql("FROM ", d.units, " u WHERE TRUE")
        where = flt.extra["fragment"]
        if flt.extra.get("docs", True):
            return sql("FROM ", d.units, " u JOIN ", d.docs, " d ON d.doc_id = u.doc_id WHERE ", where)
        return sql("FROM ", d.units, " u WHERE ", where)

    def _matching(self, conn: Any, flt: NativeFilter | None, cap: int) -> int:
        """How many rows pass ``flt``, counted up to ``cap + 1``."""
        query = sql("SELECT count(*) FROM (SELECT 1 ", self._from(flt), " LIMIT ", Param(cap + 1, None), ") s")
        return int(conn.execute(*render(self.dialect, query)).fetchone()[0])

    def knn(self, vectors: np.ndarray, k: int, flt: NativeFilter | None = None,
            min_score: float | None = None) -> list[list[tuple[Any, float]]]:
        """Per query vector, up to ``k`` (key, cosine similarity) pairs, best first.

        Ties break on (seq, position) on the exact path. ``last_stats`` says which path ran.
        """
        self._need_open()  # type: ignore[attr-defined]
        q = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if k <= 0 or len(q) == 0:
            self.last_stats = {"path": "none", "rounds": 0, "queries": len(q)}
            return [[] for _ in range(len(q))]
        if q.shape[1] != self.dim:
            raise ValueError(f"query vectors have dimension {q.shape[1]}, the store {self.dim}")
        out: list[list[tuple[Any, float]]] = self._guard(  # type: ignore[attr-defined]
            lambda: self._knn(q, int(k), flt, min_score))
        return out

    def _knn(self, q: np.ndarray, k: int, flt: NativeFilter | None,
             min_score: float | None) -> list[list[tuple[Any, float]]]:
        stats: dict[str, Any] = {"queries": len(q), "k": k, "matches": None}
        exact, reason = self._index_or_exact(k, stats)
        results: list[list[tuple[Any, float]]] = []
        paths: list[str] = []
        rounds_max = 0
        with self._tx() as conn:  # type: ignore[attr-defined]
            matching: int | None = None
            if not exact and flt is not None:
                cap = max(10 * k, self.exact_threshold)
                matching = self._matching(conn, flt, cap)
                stats["matches"] = matching if matching <= cap else None  # None: more than the cap
                if matching <= cap:
                    exact, reason = True, f"filter matches {matching} rows (≤ {cap})"
            for vec in q:
                param = Vector(vector_bytes(vec))
                if exact:
                    results.append(self._knn_query(conn, param, k, flt, min_score, ef=None)[0])
                    paths.append("exact")
                    rounds_max = max(rounds_max, 1)
                    continue
                ef = max(self.ef_search, k)
                rounds = 0
                path = "hnsw"
                while True:
                    rounds += 1
                    rows, fetched = self._knn_query(conn, param, k, flt, min_score, ef=ef)
                    if fetched >= k:
                        break
                    if min_score is not None and fetched > len(rows):
                        break  # the nearest ones already fall below the threshold
                    if matching is None:
                        matching = self._matching(conn, flt, 1 << 62)
                    if fetched >= matching:  # (a capped count exceeds k, so this never stops early)
                        break  # every matching row came back
                    if ef >= EF_MAX:
                        rows = self._knn_query(conn, param, k, flt, min_score, ef=None)[0]
                        path = "hnsw+exact"
                        rounds += 1
                        break
                    ef = min(2 * ef, EF_MAX)
                results.append(rows)
                paths.append(path)
                rounds_max = max(rounds_max, rounds)
                stats["ef_search"] = max(stats.get("ef_search", 0), ef)
        stats["path"] = paths[0] if len(set(paths)) == 1 else "mixed"
        stats["fallback"] = paths.count("hnsw+exact")
        stats["paths"] = paths
        stats["rounds"] = rounds_max
        if reason:
            stats["reason"] = reason
        self.last_stats = stats
        return results

    def _index_or_exact(self, k: int, stats: dict[str, Any]) -> tuple[bool, str]:
        """(exact?, why) for a top-``k`` search, building the HNSW index once the table is large enough."""
        exact, reason = self._exact_reason(k)
        if not exact and not self._index_ready:
            if time.monotonic() >= self._small_until:
                with self._tx() as conn:  # type: ignore[attr-defined]
                    size = self._matching(conn, None, self.index_threshold)
                if size >= self.index_threshold:
                    try:
                        stats["index_built"] = self._build_index()  # type: ignore[attr-defined]
                    except self._pg.errors.InsufficientPrivilege as exc:  # type: ignore[attr-defined]
                        stats["index_error"] = first_line(exc)  # a read-only role: stay exact
                        self._small_until = time.monotonic() + 300.0
                else:  # re-counted after our next write, or in a while (other engines may write)
                    self._small_until = time.monotonic() + 30.0
            if not self._index_ready:
                exact, reason = True, (f"no HNSW index ({stats['index_error']})" if "index_error" in stats
                                       else f"fewer than {self.index_threshold} rows: no HNSW index yet")
        return exact, reason

    def _exact_reason(self, k: int) -> tuple[bool, str]:
        if self.exact:
            return True, "exact=True"
        if not self.hnsw:
            return True, "hnsw=False"
        if k > EF_MAX:
            return True, f"k > {EF_MAX} (the largest hnsw.ef_search)"
        return False, ""

    def _knn_query(self, conn: Any, vec: Vector, k: int, flt: NativeFilter | None,
                   min_score: float | None, *, ef: int | None) -> tuple[list[tuple[Any, float]], int]:
        """One top-k query: exact when ``ef`` is None, else HNSW with that ``ef_search``.

        Returns the rows passing ``min_score`` and how many rows the top-k cut produced.
        """
        v = Param(vec, None)
        if ef is None:
            # "+ 0" keeps the HNSW index from serving this ORDER BY: the scan is exact
            inner = sql("SELECT u.key, u.seq, u.position, (u.embedding <=> ", v, ") + 0 AS dist ", self._from(flt),
                        " ORDER BY dist, u.seq, u.position, u.key LIMIT ", Param(k, None))
        else:
            conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(ef)])
            inner = sql("SELECT u.key, u.seq, u.position, u.embedding <=> ", v, " AS dist ", self._from(flt),
                        " ORDER BY dist LIMIT ", Param(k, None))
        cond = sql("1 - c.dist >= ", Param(float(min_score), None)) if min_score is not None else sql("TRUE")
        query = sql("WITH c AS MATERIALIZED (", inner, ") "
                    "SELECT n.total, c.key, 1 - c.dist FROM (SELECT count(*) AS total FROM c) n "
                    "LEFT JOIN c ON ", cond, " ORDER BY c.dist, c.seq, c.position, c.key")
        rows = conn.execute(*render(self.dialect, query), prepare=False).fetchall()
        fetched = int(rows[0][0]) if rows else 0
        return [(r[1], float(r[2])) for r in rows if r[1] is not None], fetched

    # ------------------------------------------------------------------------------ hybrid SQL

    def run_lowered(self, lowered: Any, vectors: Mapping[str, np.ndarray]) -> list[tuple[Row, dict[str, float]]]:
        """Run a lowered hybrid plan (:class:`~nlql.sql.nodes.Lowered`) as one statement.

        Args:
            lowered: What :mod:`nlql.plan.lower_hybrid` built.
            vectors: Per SIMILARITY slot, its normalised query vectors (one row per text).

        Returns:
            The surviving rows, best first, each with its scores: every SIMILARITY/BM25 slot and the
            fusion slot. ``last_stats`` says which semantic path ran (``exact``/``index``), the rows
            per arm and the rounds.

        Raises:
            UnsupportedError: the store was opened with ``bm25=False``.
        """
        self._need_open()  # type: ignore[attr-defined]
        if not self.bm25:  # type: ignore[attr-defined]
            raise UnsupportedError("pgvector", "hybrid SQL without BM25 statistics",
                                   hint="open PgVectorStore with bm25=True")
        from nlql.sql.nodes import SimilarityScore

        slots: dict[str, Any] = {}
        for s in lowered.scores:
            if isinstance(s, SimilarityScore):
                mat = np.atleast_2d(np.asarray(vectors[s.slot], dtype=np.float32))
                if mat.shape[0] < s.n_vectors or mat.shape[1] != self.dim:
                    raise ValueError(f"{s.slot}: expected {s.n_vectors}×{self.dim} query vectors, got {mat.shape}")
                for i in range(s.n_vectors):
                    slots[s.vector_key(i)] = Vector(vector_bytes(mat[i]))
        out: list[tuple[Row, dict[str, float]]] = self._guard(  # type: ignore[attr-defined]
            lambda: self._run_lowered(lowered, slots))
        return out

    def _run_lowered(self, lowered: Any, slots: dict[str, Any]) -> list[tuple[Row, dict[str, float]]]:
        sem = lowered.semantic_arms
        stats: dict[str, Any] = {"path": "sql", "depth": lowered.depth, "rounds": 0}
        exact, reason = True, "no semantic arm"
        if sem:
            exact, reason = self._index_or_exact(lowered.depth, stats)
            sem_slots = {a.slot for a in sem}
            if not exact and any(t.slot not in sem_slots or not t.lower_bound for t in lowered.thresholds):
                exact, reason = True, "score conditions inside the semantic arm: an index scan would under-fill"
            if not exact and lowered.filter is not None:
                cap = max(10 * lowered.depth, self.exact_threshold)
                with self._tx() as conn:  # type: ignore[attr-defined]
                    matching = self._matching(conn, self.compile_filter(lowered.filter), cap)  # type: ignore[attr-defined]
                stats["matches"] = matching if matching <= cap else None
                if matching <= cap:
                    exact, reason = True, f"filter matches {matching} rows (≤ {cap})"
        ef = max(self.ef_search, lowered.depth)
        while True:
            stats["rounds"] += 1
            mode = "exact" if exact else "index"
            compiled = self.dialect.compile(lowered, mode)
            with self._tx() as conn:  # type: ignore[attr-defined]
                if mode == "index":
                    conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(ef)])
                    stats["ef_search"] = ef
                cur = self._pg.RawCursor(conn)  # type: ignore[attr-defined]
                raw = cur.execute(compiled.text, compiled.params(slots), prepare=False).fetchall()
                col = Compiled.reader([c.name for c in cur.description])
                underfilled = False
                if mode == "index":
                    underfilled = self._underfilled(conn, lowered, compiled, col, raw)
            if not underfilled:
                break
            if ef >= EF_MAX or not raw:
                exact, reason = True, "the index scan under-filled an arm: exact fallback"
            else:
                ef = min(2 * ef, EF_MAX)
        stats["mode"] = mode
        stats["reason"] = reason
        stats["arm_rows"] = {a.binding: int(raw[0][col[compiled.names[f"arm_rows:{a.binding}"]]])
                             for a in lowered.fusion.arms} if raw else {}
        self.last_stats = stats
        single = lowered.fusion.method == "SINGLE"
        out: list[tuple[Row, dict[str, float]]] = []
        metas: dict[str, dict[str, Any]] = {}
        for r in raw:
            row = self._row_from(r, col, metas)  # type: ignore[attr-defined]
            scores = {slot: float(r[col[compiled.names[slot]]]) for slot in compiled.columns}
            if not single:
                scores[lowered.fusion.slot] = float(r[col["fused"]])
            out.append((row, scores))
        return out

    def _underfilled(self, conn: Any, lowered: Any, compiled: Compiled, col: dict[str, int],
                     raw: list[tuple[Any, ...]]) -> bool:
        """Whether an index-served semantic arm returned fewer rows than its depth while more match."""
        if not raw:
            return True  # nothing came back at all: let the exact scan confirm it
        short = [int(raw[0][col[compiled.names[f"arm_rows:{a.binding}"]]]) for a in lowered.fusion.arms
                 if a.kind == "semantic"]
        short = [n for n in short if n < lowered.depth]
        if not short:
            return False
        flt = self.compile_filter(lowered.filter) if lowered.filter is not None else None  # type: ignore[attr-defined]
        return self._matching(conn, flt, lowered.depth) > min(short)
