"""The knn strategy of the pgvector store, and hybrid plans as one statement.

pgvector 0.6.2 has no iterative scan, so HNSW + WHERE under-fills:

- ``exact=True``, ``hnsw=False``, ``k`` over 1000, fewer than ``index_threshold`` rows in the table, or
  a filter matching at most ``max(10·k, exact_threshold)`` rows (counted with a bounded ``count``):
  exact scan ordered by ``(distance, seq, position)``; the distance is written as an expression the
  index cannot serve, so the planner scans (using other indexes for the filter), and ties break on
  insertion order.
- otherwise HNSW with ``hnsw.ef_search = max(ef_search, k)`` (``SET LOCAL``; under a filter the index's
  ``ef`` candidates are read in a MATERIALIZED CTE and filtered after); the nearest ``k + RESCORE_EXTRA``
  rows are rescored as the exact path scores them and the best ``k`` kept, so HNSW mode reports exact
  mode's scores and order for the rows it found; when fewer than ``k`` rows come back and more rows
  match, ``ef_search`` doubles (up to 1000) and the query repeats, then falls back to the exact scan.
  ``last_stats`` records the path and rounds.

Score thresholds (``score >= min_score``) are applied to the rescored scores, after the top-k cut.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from nlql.errors import UnsupportedError
from nlql.kernels import block_products, score_rows
from nlql.pushdown import NativeFilter
from nlql.sql.binder import Param, sql
from nlql.sql.dialect import Compiled
from nlql.stores.base import Row
from nlql.stores.pgvector.driver import Vector, first_line, render, vector_bytes
from nlql.stores.sqlstore import SqlStore
from nlql.values import SCORE_DECIMALS, round_scores

EF_MAX = 1000  # pgvector's upper bound for hnsw.ef_search
OVERFETCH = 2.0  # an HNSW round under a filter aims at this many times k matching candidates
EXACT_ROW_COST = 1.0  # relative cost of one matching row on the exact path (measured: bench/pg_speed.py)
HNSW_EF_COST = 20.0  # relative cost of one unit of ef_search on the HNSW path (measured: ~15–25× a row)
ESTIMATE_TTL = 10.0  # seconds a filter's estimated selectivity is reused
SELECTIVE = 0.05  # an indexed filter estimated to keep at most this share of rows is read through its index
FORCE_INDEX_FROM = 0.002  # (below this share the planner picks the index on its own: no setting to send)
RESCORE_EXTRA = 16  # rows fetched beyond k for the exact rescoring (widened when near-ties need more)
# pgvector's float4 cosine and numpy's float32 product of unit vectors differ by less than this (a
# float4 sum over 2,000 dimensions errs by at most ~1.2e-4 in theory and ~1e-6 in practice), plus
# one rounding step of SCORE_DECIMALS
COSINE_SLACK = 1e-4 + 10.0 ** -SCORE_DECIMALS


def query_vector(vec: Vector) -> np.ndarray:
    """The float32 query vector back from its wire format."""
    return np.frombuffer(vec.data, dtype=">f4", offset=4).astype(np.float32)


def rescore(qv: np.ndarray, rows: list[tuple[Any, ...]]) -> list[tuple[Any, float]]:
    """(key, score) of rows ``(key, seq, position, dist, embedding, …)``, scored as the built-in store
    scores (float32 product, rounded) and ranked by (score desc, seq, position, key)."""
    if not rows:
        return []
    scores = score_rows(qv, np.stack([np.asarray(r[4], dtype=np.float32) for r in rows]))
    order = sorted(range(len(rows)), key=lambda i: (-float(scores[i]), rows[i][1], rows[i][2], rows[i][0]))
    return [(rows[i][0], float(scores[i])) for i in order]


class KnnMixin(SqlStore):
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
    _estimates: dict[tuple[str, str], tuple[float, tuple[float, float] | None]]

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
            ef0 = max(self.ef_search, k)
            if not exact and flt is not None:
                exact, reason, ef0 = self._plan_filtered(conn, flt, k, stats)
            for vec in q:
                param = Vector(vector_bytes(vec))
                if exact:
                    results.append(self._knn_query(conn, param, k, flt, min_score, ef=None)[0])
                    paths.append("exact")
                    rounds_max = max(rounds_max, 1)
                    continue
                ef = ef0
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

    # ---------------------------------------------------------------------- exact or HNSW, by cost

    def _estimate(self, conn: Any, flt: NativeFilter) -> tuple[float, float] | None:
        """(rows passing ``flt``, rows in the table) as PostgreSQL's planner estimates them from its
        statistics (the GIN index on the typed metadata gives containment tests real estimates), or
        None when the table was never analysed. Remembered per filter for ``ESTIMATE_TTL`` seconds
        (forgotten at this store's next write): two catalogue round trips saved per query."""
        key = (flt.native, repr(flt.extra.get("params")))
        now = time.monotonic()
        hit = self._estimates.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        d = self.dialect
        # the planner's own table size: reltuples scaled to the table's current number of pages
        row = conn.execute("SELECT reltuples, relpages, pg_relation_size(oid) / current_setting('block_size')::int "
                           "FROM pg_class WHERE oid = to_regclass(%s)", [d.table("units")]).fetchone()
        if row is None or row[0] is None or float(row[0]) < 0:
            return None
        tuples, pages, now_pages = float(row[0]), float(row[1]), float(row[2])
        total = tuples * now_pages / pages if pages > 0 else tuples
        plan = conn.execute(*render(d, sql("EXPLAIN (FORMAT JSON) SELECT 1 ", self._from(flt)))).fetchone()[0]
        if isinstance(plan, str):
            plan = json.loads(plan)
        out = (float(plan[0]["Plan"]["Plan Rows"]), max(1.0, total))
        if len(self._estimates) > 256:
            self._estimates.clear()
        self._estimates[key] = (now + ESTIMATE_TTL, out)
        return out

    def _plan_filtered(self, conn: Any, flt: NativeFilter, k: int,
                       stats: dict[str, Any]) -> tuple[bool, str, int]:
        """(exact?, why, first ef_search) for a filtered top-``k``, from the filter's estimated selectivity.

        pgvector 0.6's HNSW scan yields ``ef_search`` candidates and the filter keeps a share ``s`` of
        them, so an index scan expecting ``k`` rows needs ``ef ≈ OVERFETCH·k / s``; the exact scan reads
        the ``m`` matching rows (through the filter's own index where it has one). The cheaper of
        ``m·EXACT_ROW_COST`` and ``ef·HNSW_EF_COST`` wins; an ``ef`` above pgvector's 1000 means the
        index would under-fill: exact. A filter estimated to match at most ``exact_threshold`` rows is
        exact outright. ``plan="index"`` skips the choice (HNSW whenever the index exists).
        """
        if getattr(self, "plan", "auto") == "index":
            return False, "plan='index'", max(self.ef_search, k)
        est = self._estimate(conn, flt)
        if est is None:  # never analysed: count (bounded) instead of estimating
            cap = max(10 * k, self.exact_threshold)
            counted = self._matching(conn, flt, cap)
            stats["matches"] = counted if counted <= cap else None
            if counted <= cap:
                return True, f"filter matches {counted} rows (≤ {cap}; no statistics yet)", 0
            return False, f"filter matches more than {cap} rows (no statistics yet)", max(self.ef_search, k)
        m, n = est
        s = min(1.0, max(m, 1.0) / n)
        ef = max(self.ef_search, k, int(np.ceil(OVERFETCH * k / s)))
        stats["estimated_rows"] = int(round(m))
        stats["selectivity"] = round(s, 6)
        if m <= self.exact_threshold:
            return True, f"filter estimated to match {m:.0f} rows (≤ exact_threshold {self.exact_threshold})", 0
        if ef > EF_MAX:
            return True, (f"filter estimated to keep {s:.2%} of the rows: an index scan would need "
                          f"ef_search {ef} > {EF_MAX}"), 0
        if m * EXACT_ROW_COST <= ef * HNSW_EF_COST:
            return True, (f"filter estimated to match {m:.0f} rows ({s:.2%}): an exact scan is cheaper "
                          f"than HNSW at ef_search {ef}"), 0
        return False, f"filter estimated to keep {s:.2%} of the rows: HNSW at ef_search {ef}", ef

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
            return self._exact_query(conn, vec, k, flt, min_score)
        # the index's nearest ``w`` rows, rescored as the exact path scores (numpy's float32 product,
        # rounded) and ranked on (score, seq, position): the same scores as exact mode, and the same
        # rows in the same order whenever the index found them (pgvector's float4 distances order near
        # ties differently)
        w = max(k, min(k + RESCORE_EXTRA, EF_MAX))
        conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(max(ef, w))])
        if flt is None:
            query = sql("SELECT u.key, u.seq, u.position, u.embedding <=> ", v, " AS dist, u.embedding ",
                        self._from(flt), " ORDER BY dist LIMIT ", Param(w, None))
        else:
            # the index's ef candidates first (what pgvector's filtered index scan would read anyway),
            # then the filter on those rows only: the planner cannot trade the index scan for a plan
            # built on a misestimated filter
            d = self.dialect
            cand = sql("SELECT key, embedding <=> ", v, " AS dist FROM ", d.units, " ORDER BY dist LIMIT ",
                       Param(max(ef, w), None))
            join_docs = sql(" JOIN ", d.docs, " d ON d.doc_id = u.doc_id") if flt.extra.get("docs", True) else sql()
            query = sql("WITH h AS MATERIALIZED (", cand, ") SELECT u.key, u.seq, u.position, h.dist, u.embedding "
                        "FROM h JOIN ", d.units, " u ON u.key = h.key", join_docs, " WHERE ", flt.extra["fragment"],
                        " ORDER BY h.dist, u.seq, u.position LIMIT ", Param(w, None))
        rows = conn.cursor(binary=True).execute(*render(self.dialect, query), prepare=False).fetchall()
        out = rescore(query_vector(vec), rows)[:k]
        if min_score is not None:
            out = [r for r in out if r[1] >= min_score]
        return out, min(k, len(rows))

    def _exact_query(self, conn: Any, vec: Vector, k: int, flt: NativeFilter | None,
                     min_score: float | None, restore: bool = False) -> tuple[list[tuple[Any, float]], int]:
        """The exact top-``k``, scored exactly as the built-in store scores (SPEC: every store reports
        the same score and breaks the same ties).

        pgvector computes the cosine in float4 with its own summation order, a few 1e-7 away from
        numpy's float32 product; scores are rounded to ``SCORE_DECIMALS`` places so that near-equal
        ones tie and break on insertion order, and a pgvector score on one side of a rounding step
        with numpy's on the other reorders near-ties. So the scan fetches a few more rows than ``k``
        (with their vectors), numpy rescores them (float32 product, then :func:`nlql.values.round_scores`)
        and they are ranked by (score, seq, position); the fetch widens until no row left out could
        reach the ``k``-th score (pgvector and numpy differ by less than ``COSINE_SLACK``).
        ``restore``: put back the planner setting this changes for the rest of the transaction.
        """
        qv = query_vector(vec)
        limit = k + RESCORE_EXTRA
        est = self._estimate(conn, flt) if flt is not None and flt.extra.get("indexed") else None
        if est is not None and FORCE_INDEX_FROM * est[1] < est[0] <= SELECTIVE * est[1]:
            # few rows match and the GIN index can find them, but the planner's estimate of a rare
            # value is coarse (a 0.1% value caught in the statistics sample reads as 1%), and on such
            # an estimate it may prefer a (parallel) sequential scan of every document: for this
            # statement only, the index is used
            before = conn.execute("SELECT current_setting('enable_seqscan'), "
                                  "set_config('enable_seqscan', 'off', true)").fetchone()[0]
            if not restore:  # (knn: the transaction runs exact scans only from here on)
                return self._exact_rows(conn, vec, qv, k, flt, min_score, limit)
            try:
                return self._exact_rows(conn, vec, qv, k, flt, min_score, limit)
            finally:
                conn.execute("SELECT set_config('enable_seqscan', %s, true)", [before])
        return self._exact_rows(conn, vec, qv, k, flt, min_score, limit)

    def _exact_rows(self, conn: Any, vec: Vector, qv: np.ndarray, k: int, flt: NativeFilter | None,
                    min_score: float | None, limit: int) -> tuple[list[tuple[Any, float]], int]:
        while True:
            # "+ 0" keeps the HNSW index from serving this ORDER BY: the scan is exact
            query = sql("SELECT u.key, u.seq, u.position, (u.embedding <=> ", Param(vec, None), ") + 0 AS dist, "
                        "u.embedding ", self._from(flt), " ORDER BY dist, u.seq, u.position, u.key LIMIT ",
                        Param(limit, None))
            cur = conn.cursor(binary=True)
            rows = cur.execute(*render(self.dialect, query), prepare=False).fetchall()
            ranked = rescore(qv, rows)
            if len(rows) < limit or len(ranked) < k:
                break  # every matching row was fetched
            last = rows[-1][3]
            kth = ranked[k - 1][1]
            if last == last and 1 - float(last) + COSINE_SLACK < kth:  # (NaN: a zero vector, widen)
                break
            limit *= 4
        out = ranked[:k]
        if min_score is not None:
            out = [r for r in out if r[1] >= min_score]
        return out, min(k, len(rows))

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
        slots = self._query_slots(lowered, vectors, lambda v: Vector(vector_bytes(v)))
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
        ef = max(self.ef_search, lowered.depth)
        if sem and not exact and lowered.filter is not None:
            with self._tx() as conn:  # type: ignore[attr-defined]
                exact, reason, ef = self._plan_filtered(
                    conn, self.compile_filter(lowered.filter), lowered.depth, stats)  # type: ignore[attr-defined]
        rescored = False
        while True:
            stats["rounds"] += 1
            mode = "exact" if exact else "index"
            if exact and sem and self._rescorable(lowered):
                mode = "rescored"
            compiled = self.dialect.compile(lowered, mode)
            with self._tx() as conn:  # type: ignore[attr-defined]
                if mode == "index":
                    conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", [str(ef)])
                    stats["ef_search"] = ef
                values = dict(slots)
                if mode == "rescored":
                    values.update(self._rescored_arms(conn, lowered, slots))
                cur = self._pg.RawCursor(conn)  # type: ignore[attr-defined]
                raw = cur.execute(compiled.text, compiled.params(values), prepare=False).fetchall()
                col = Compiled.reader([c.name for c in cur.description])
                underfilled = False
                if mode == "index":
                    underfilled = self._underfilled(conn, lowered, compiled, col, raw)
                rescored = mode == "rescored"
                sims = self._rescored_similarities(conn, lowered, slots, [r[col["key"]] for r in raw]) if rescored else {}
            if not underfilled:
                break
            if ef >= EF_MAX or not raw:
                exact, reason = True, "the index scan under-filled an arm: exact fallback"
            else:
                ef = min(2 * ef, EF_MAX)
        stats["mode"] = mode
        stats["reason"] = reason
        stats["arm_rows"] = self._arm_rows(lowered, compiled, raw, col)
        self.last_stats = stats
        out: list[tuple[Row, dict[str, float]]] = self._lowered_rows(
            lowered, compiled, raw, col, sims)
        return out

    @staticmethod
    def _rescorable(lowered: Any) -> bool:
        """Whether an exact plan's semantic arms can be ranked beforehand by :meth:`_exact_query`:
        no score condition (each would be evaluated in SQL, on pgvector's own cosine) and one query
        vector per SIMILARITY slot."""
        from nlql.sql.nodes import SimilarityScore

        return not lowered.thresholds and all(
            s.n_vectors == 1 for s in lowered.scores if isinstance(s, SimilarityScore))

    def _rescored_arms(self, conn: Any, lowered: Any, slots: dict[str, Any]) -> dict[str, Any]:
        """Per semantic arm, its ``depth`` rows ranked exactly as the built-in store ranks them (keys and
        distances, the execution-time values of :attr:`PostgresDialect.RESCORED_ARM`)."""
        flt = self.compile_filter(lowered.filter) if lowered.filter is not None else None  # type: ignore[attr-defined]
        out: dict[str, Any] = {}
        for arm in lowered.semantic_arms:
            s = lowered.score(arm.slot)
            ranked = self._exact_query(conn, slots[s.vector_key(0)], lowered.depth, flt, None, restore=True)[0]
            out[f"{arm.slot}:keys"] = [int(k) for k, _ in ranked]
            out[f"{arm.slot}:dists"] = [1.0 - float(v) for _, v in ranked]
        return out

    def _rescored_similarities(self, conn: Any, lowered: Any, slots: dict[str, Any],
                               keys: list[Any]) -> dict[str, dict[Any, float]]:
        """Every SIMILARITY slot of the returned rows, scored as the built-in store scores."""
        from nlql.sql.nodes import SimilarityScore

        wanted = [int(k) for k in keys if k is not None]
        if not wanted:
            return {}
        query = sql("SELECT key, embedding FROM ", self.dialect.units, " WHERE key = ANY(",
                    Param(wanted, "bigint[]"), ")")
        found = conn.cursor(binary=True).execute(*render(self.dialect, query)).fetchall()
        if not found:
            return {}
        mat = np.stack([np.asarray(v, dtype=np.float32) for _, v in found])
        out: dict[str, dict[Any, float]] = {}
        for s in lowered.scores:
            if isinstance(s, SimilarityScore):
                if s.n_vectors == 1:
                    best = score_rows(query_vector(slots[s.vector_key(0)]), mat)
                else:
                    q = np.stack([query_vector(slots[s.vector_key(i)]) for i in range(s.n_vectors)])
                    best = round_scores(block_products(q, mat).max(axis=0))
                out[s.slot] = {int(k): float(v) for (k, _), v in zip(found, best, strict=True)}
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

