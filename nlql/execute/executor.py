"""Runs a plan: embed → recall → units → filter → fuse → order/limit → rerank → hits.

The top-k guarantee lives here: a ``knn`` recall is widened (×4 per round) until LIMIT + OFFSET units
survive the residual filter or the store has nothing more to give.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from nlql import ir
from nlql import values as V
from nlql.errors import NLQLTimeoutError
from nlql.evaluate import Env, RowContext, RowFn, compile_expr, truth
from nlql.execute import keyword_recall
from nlql.execute.results import Hit, Hits, Stats
from nlql.execute.units import chunk_rows, join_rows
from nlql.plan.nodes import Plan, ScoreSpec
from nlql.stores.base import Row, Store, unit_id

WIDEN_FACTOR = 4
SIM_BATCH = 8192


@dataclass
class Unit:
    """One candidate result row while the query runs."""

    ctx: RowContext
    rows: list[Row]                 # the sentences of this unit (one for SENTENCE/SPAN)
    chunk_index: int = -1           # for CHUNK units: index of the chunk in its document
    doc_chunks: list[list[Row]] | None = None
    fused: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class _Deadline:
    def __init__(self, timeout: float | None) -> None:
        self.end = None if timeout is None else time.perf_counter() + timeout

    def expired(self) -> bool:
        return self.end is not None and time.perf_counter() > self.end


class Executor:
    """Executes plans against one store. Stateless between searches; safe to share across threads."""

    def __init__(self, store: Store, embed: Callable[[Sequence[str]], np.ndarray],
                 bm25: Any, functions: dict[str, Callable[..., Any]], chunk_chars: int) -> None:
        self.store = store
        self.embed = embed
        self.bm25 = bm25
        self.functions = functions
        self.chunk_chars = chunk_chars

    # ------------------------------------------------------------------------------------- entry

    def run(self, plan: Plan, *, reranker: Any = None, rerank_query: str | None = None,
            rerank_factor: int = 5, timeout: float | None = None, max_tokens: int | None = None) -> Hits:
        stats = Stats()
        warnings = list(plan.warnings)
        deadline = _Deadline(timeout)
        env = Env(now=plan.now, score_names=plan.slots,
                  binding_exprs={b.name: b.expr for b in plan.query.bindings},
                  functions=self.functions, periods=plan.periods)
        residual = [compile_expr(c, env) for c in plan.residual]
        late = [compile_expr(c, env) for c in plan.fusion_residual]

        t = time.perf_counter()
        qv = self._embed(plan)
        stats.add("embed", (time.perf_counter() - t) * 1000)
        if qv and deadline.expired():  # the embedding used the budget up: nothing recalled, nothing to return
            raise NLQLTimeoutError(f"the search ran out of time ({timeout} s) while embedding the query",
                                   hint="raise timeout= or use a faster embedder")

        need = None
        if plan.limit is not None:
            need = plan.limit + plan.offset
            if reranker is not None:
                need = max(need, rerank_factor * need)

        units: list[Unit]
        if plan.lowered is not None:  # one SQL statement ran the arms and the fusion (lower_hybrid)
            units = self._lowered(plan, qv, stats)
        elif plan.recall.kind == "knn":
            units = self._knn(plan, qv, residual, need, stats, deadline, warnings)
        else:
            units = self._full(plan, qv, residual, need, stats, deadline, warnings, fast_ok=reranker is None)

        t = time.perf_counter()
        fusion = [s for s in plan.scores if s.kind in ("RRF", "INTERLEAVE")]
        if fusion and plan.lowered is None:
            units = self._fuse(plan, fusion, units, env)
            stats.add("fuse", (time.perf_counter() - t) * 1000)
        if late:
            t = time.perf_counter()
            units = self._filter(units, late, deadline, warnings)
            stats.add("filter", (time.perf_counter() - t) * 1000)

        t = time.perf_counter()
        units = self._order(plan, units, env)
        stats.add("order", (time.perf_counter() - t) * 1000)
        stats.counts["matches_seen"] = len(units)

        if reranker is not None and units and deadline.expired():
            warnings.append("rerank skipped: the search ran out of time before it; results are in recall order")
        elif reranker is not None and units:
            t = time.perf_counter()
            units = self._rerank(plan, units, reranker, rerank_query, need, warnings)
            stats.add("rerank", (time.perf_counter() - t) * 1000)

        page = units[plan.offset:]
        if plan.limit is not None:
            page = page[: plan.limit]
        t = time.perf_counter()
        hits = self._hits(plan, page, env, warnings)
        stats.add("materialize", (time.perf_counter() - t) * 1000)
        if max_tokens is not None:
            hits = pack_tokens(hits, max_tokens, warnings)
        if deadline.expired():
            if not hits:
                raise NLQLTimeoutError(f"the search ran out of time ({timeout} s) before finding any row",
                                       hint="raise timeout= or narrow the query")
            if not any(w.startswith("timeout") for w in warnings):
                warnings.append(f"timeout after {timeout} s: results may be incomplete")
        stats.counts["returned"] = len(hits)
        return Hits(hits, stats.to_dict(), warnings)

    # ------------------------------------------------------------------------------------- embed

    def _embed(self, plan: Plan) -> dict[str, np.ndarray]:
        specs = [s for s in plan.scores if s.kind == "SIMILARITY"]
        texts: list[str] = []
        index: dict[str, int] = {}
        for s in specs:
            for tx in s.texts:
                if tx not in index:
                    index[tx] = len(texts)
                    texts.append(tx)
        if not texts:
            return {}
        mat = np.asarray(self.embed(texts), dtype=np.float32)
        norms = np.linalg.norm(mat, axis=1, keepdims=True)
        mat = np.divide(mat, norms, out=np.zeros_like(mat), where=norms > 0)
        return {s.slot: mat[[index[tx] for tx in s.texts]] for s in specs}

    # ------------------------------------------------------------------------------------ recall

    def _knn(self, plan: Plan, qv: dict[str, np.ndarray], residual: list[RowFn], need: int | None,
             stats: Stats, deadline: _Deadline, warnings: list[str]) -> list[Unit]:
        slot = plan.recall.slot
        assert slot is not None and need is not None
        caps = self.store.capabilities
        min_score = plan.recall.min_score.get(slot) if caps.SCORE_THRESHOLD else None
        k = max(1, plan.recall.k or need)
        total = self.store.count()
        rounds = 0
        units: list[Unit] = []
        candidates = 0
        while True:
            rounds += 1
            t = time.perf_counter()
            try:
                lists = self.store.knn(qv[slot], k, plan.native, min_score=min_score)
            except NLQLTimeoutError:
                if rounds == 1:
                    raise
                # a wider round hit the store's own statement timeout: keep what the last round found
                warnings.append("timeout while widening recall: the store timed out; "
                                "fewer rows than LIMIT may be returned")
                break
            stats.add("recall", (time.perf_counter() - t) * 1000)
            seen: dict[Any, float] = {}
            for lst in lists:
                for key, score in lst:
                    if key not in seen or score > seen[key]:
                        seen[key] = score
            keys = sorted(seen, key=lambda x: -seen[x])
            candidates = len(keys)
            exhausted = all(len(lst) < k for lst in lists) or k >= total
            t = time.perf_counter()
            units = self._units(plan, keys, qv, None, restrict=set(keys))
            units = self._filter(units, residual, deadline, warnings)
            stats.add("filter", (time.perf_counter() - t) * 1000)
            if len(units) >= need or exhausted:
                break
            if deadline.expired():
                if not any(w.startswith("timeout") for w in warnings):
                    warnings.append("timeout while widening recall: fewer rows than LIMIT may be returned")
                break
            k *= WIDEN_FACTOR
        stats.counts.update({"rounds": rounds, "candidates": candidates, "recall_k": k})
        last = getattr(self.store, "last_stats", None)
        if isinstance(last, dict) and last:
            stats.counts["store"] = dict(last)
        return units

    def _lowered(self, plan: Plan, qv: dict[str, np.ndarray], stats: Stats) -> list[Unit]:
        """Rows of a lowered plan, scored by the store's statement (ORDER BY/LIMIT/hits stay shared)."""
        t = time.perf_counter()
        got = self.store.run_lowered(plan.lowered, qv)  # type: ignore[attr-defined]
        stats.add("recall", (time.perf_counter() - t) * 1000)
        stats.counts.update({"rounds": 1, "candidates": len(got)})
        last = getattr(self.store, "last_stats", None)
        if isinstance(last, dict) and last:
            stats.counts["store"] = dict(last)
        return [Unit(RowContext(r.content, r.id, r.doc_id, r.position, r.metadata, dict(scores), {}, r.seq), [r])
                for r, scores in got]

    def _full(self, plan: Plan, qv: dict[str, np.ndarray], residual: list[RowFn], need: int | None,
              stats: Stats, deadline: _Deadline, warnings: list[str], fast_ok: bool) -> list[Unit]:
        t = time.perf_counter()
        sim_slots = [s.slot for s in plan.scores if s.kind == "SIMILARITY"]
        score_all = getattr(self.store, "score_all", None)
        sentence_scores: dict[str, np.ndarray] = {}
        if score_all is not None and self.store.capabilities.FULL_SCORES:
            if sim_slots:
                stacked = np.concatenate([qv[s] for s in sim_slots])
                keys_arr, mat = score_all(stacked, plan.native)
                row = 0
                for s in sim_slots:
                    n = len(qv[s])
                    sentence_scores[s] = mat[row:row + n].max(axis=0)
                    row += n
                keys_arr = np.asarray(keys_arr)
            else:
                keys_arr = np.asarray(self.store.scan(plan.native))
        else:
            narrowed = None
            if self.store.capabilities.KEYWORD_STATS and getattr(self.bm25, "in_store", False):
                narrowed = keyword_recall.narrow(plan, self.store, qv, need)  # BM25 kept in the store
                if narrowed is not None:
                    stats.counts["keyword_recall"] = len(narrowed)
            keys_arr = np.asarray(narrowed if narrowed is not None else self.store.scan(plan.native), dtype=object)
            for s in sim_slots:
                sentence_scores[s] = self._similarities(qv[s], list(keys_arr))
        stats.add("recall", (time.perf_counter() - t) * 1000)
        stats.counts.update({"rounds": 1, "candidates": int(len(keys_arr))})
        if deadline.expired():
            warnings.append("timeout during recall")
        # thresholds inside recall
        for s, m in plan.recall.min_score.items():
            if s in sentence_scores and plan.unit.kind in ("SENTENCE", "SPAN") and plan.unit.base != "CHUNK":
                keep = sentence_scores[s] >= m
                keys_arr = keys_arr[keep]
                sentence_scores = {k: v[keep] for k, v in sentence_scores.items()}
        t = time.perf_counter()
        pruned = self._prune_arms(plan, keys_arr, sentence_scores, need)
        if pruned is not None:
            keys_arr, sentence_scores = pruned
            stats.counts["pruned_to"] = int(len(keys_arr))
        fast = self._fast_top(plan, keys_arr, sentence_scores, residual, need) if fast_ok else None
        if fast is not None:
            keys_list, scores = fast
            units = self._units(plan, keys_list, qv, scores)
        else:
            units = self._units(plan, list(keys_arr), qv,
                                {s: v for s, v in sentence_scores.items()})
            units = self._filter(units, residual, deadline, warnings)
        stats.add("filter", (time.perf_counter() - t) * 1000)
        return units

    def _prune_arms(self, plan: Plan, keys: np.ndarray, scores: dict[str, np.ndarray],
                    need: int | None) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """Keep only the rows that can reach the page, before any row is fetched (table stores).

        Applies when the rows are sentences, WHERE left nothing but similarity thresholds (already
        applied above) and the first sort key is, descending, either a fusion of bare SIMILARITY/BM25
        arms — then only each arm's top ``arm_depth`` rows can be ranked at all — or one BM25 score or
        arithmetic over scores — then only its top ``need`` rows (and ties) can be on the page. All
        are exact: the rows dropped could not have been returned.
        """
        table = getattr(self.store, "table", None)
        if (table is None or need is None or not plan.residual_is_thresholds or plan.fusion_residual
                or plan.unit.kind not in ("SENTENCE", "SPAN") or plan.unit.base == "CHUNK"
                or not plan.order or not plan.order[0].descending or len(keys) == 0):
            return None
        first = plan.order[0].expr
        slot = plan.binding_slots.get(first.name) if isinstance(first, ir.Ref) else None
        spec = next((s for s in plan.scores if s.slot == slot), None)
        keys = keys.astype(np.int64)
        by_slot = {s.slot: s for s in plan.scores}
        if spec is None:  # arithmetic over scores, e.g. 0.7 * SIMILARITY(…) + 0.3 * BM25(…)
            values = self._score_arithmetic(plan, first, keys, scores, by_slot, 0)
            if values is None or bool(np.isnan(values).any()):
                return None
            keep = _top_rows(values, table.seq[keys], table.pos[keys], need, ties=True)
            return keys[keep], {k: v[keep] for k, v in scores.items()}
        if spec.kind == "BM25":
            bm = self._bm25_over(spec, keys)
            if bm is None or int(np.count_nonzero(bm > 0)) < need:
                return None
            keep = _top_rows(bm, table.seq[keys], table.pos[keys], need, ties=True)
        elif spec.kind in ("RRF", "INTERLEAVE") and plan.arm_depth is not None:
            parts = []
            for arm in spec.arms:
                arm_spec = by_slot.get(plan.binding_slots.get(arm, ""))
                if arm_spec is None or arm_spec.kind not in ("SIMILARITY", "BM25"):
                    return None
                if arm_spec.kind == "SIMILARITY":
                    arm_scores = scores.get(arm_spec.slot)
                    eligible = None
                else:
                    arm_scores = self._bm25_over(arm_spec, keys)
                    eligible = arm_scores > 0 if arm_scores is not None else None
                if arm_scores is None:
                    return None
                parts.append(_top_rows(arm_scores, table.seq[keys], table.pos[keys], plan.arm_depth,
                                       ties=False, eligible=eligible))
            keep = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        else:
            return None
        return keys[keep], {k: v[keep] for k, v in scores.items()}

    def _score_arithmetic(self, plan: Plan, expr: ir.Expr, keys: np.ndarray, scores: dict[str, np.ndarray],
                          by_slot: dict[str, ScoreSpec], depth: int) -> np.ndarray | None:
        """An expression of numbers, ``+ - * /`` and SIMILARITY/BM25 scores, as a float64 vector over
        ``keys`` — the same double arithmetic the row evaluator does — or None if it is anything else."""
        if depth > 32:
            return None
        if isinstance(expr, ir.Literal):
            v = expr.value
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return None
            return np.full(len(keys), float(v))
        slot = None
        if isinstance(expr, ir.Ref):
            slot = plan.binding_slots.get(expr.name)
            if slot is None:
                b = plan.query.binding(expr.name)
                return None if b is None else self._score_arithmetic(plan, b.expr, keys, scores, by_slot, depth + 1)
        elif isinstance(expr, ir.Call):
            slot = plan.slots.get(expr)
        if slot is not None:
            spec = by_slot.get(slot)
            if spec is None:
                return None
            if spec.kind == "SIMILARITY":
                arr = scores.get(slot)
                return None if arr is None else arr.astype(np.float64)
            if spec.kind == "BM25":
                return self._bm25_over(spec, keys)
            return None
        if isinstance(expr, ir.Unary) and expr.op == "-":
            inner = self._score_arithmetic(plan, expr.operand, keys, scores, by_slot, depth + 1)
            return None if inner is None else 0.0 - inner
        if isinstance(expr, ir.Binary) and expr.op in ("+", "-", "*", "/"):
            a = self._score_arithmetic(plan, expr.left, keys, scores, by_slot, depth + 1)
            b = self._score_arithmetic(plan, expr.right, keys, scores, by_slot, depth + 1)
            if a is None or b is None or (expr.op == "/" and bool((b == 0).any())):
                return None
            with np.errstate(all="ignore"):
                out = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}[expr.op](a, b)
            return out if bool(np.isfinite(out).all()) else None
        return None

    def _bm25_over(self, spec: ScoreSpec, keys: np.ndarray) -> np.ndarray | None:
        """BM25 of ``spec`` for each key of a table store, without fetching rows (0.0 = no term)."""
        table = getattr(self.store, "table", None)
        matches = getattr(self.bm25, "matches", None)
        if table is None or matches is None:
            return None
        found, values = matches(" ".join(spec.texts))
        full = np.zeros(table.size, dtype=np.float64)
        doc_rows = table.doc_rows
        for (doc_id, position), v in zip(found, values):
            rows = doc_rows.get(doc_id)
            if rows is not None and position < len(rows):
                full[rows[position]] = v
        return full[keys]

    def _fast_top(self, plan: Plan, keys: np.ndarray, scores: dict[str, np.ndarray],
                  residual: list[RowFn], need: int | None) -> tuple[list[Any], dict[str, np.ndarray]] | None:
        """Sentence units, no residual, ordered by one sentence score or insertion: select with numpy."""
        table = getattr(self.store, "table", None)
        if (table is None or residual or plan.fusion_residual or need is None
                or plan.unit.kind not in ("SENTENCE", "SPAN") or plan.unit.base == "CHUNK"
                or any(s.kind in ("RRF", "INTERLEAVE", "BM25") for s in plan.scores)):
            return None
        keys = keys.astype(np.int64)
        seq, pos = table.seq[keys], table.pos[keys]
        if not plan.order:
            idx = np.lexsort((pos, seq))[:need]
        elif len(plan.order) == 1:
            key = plan.order[0]
            slot = None
            if isinstance(key.expr, ir.Ref):
                slot = plan.binding_slots.get(key.expr.name)
            elif isinstance(key.expr, ir.Call):
                slot = plan.slots.get(key.expr)
            if slot is None or slot not in scores:
                return None
            s = scores[slot]
            idx = np.lexsort((pos, seq, -s if key.descending else s))[:need]
        else:
            return None
        return [int(k) for k in keys[idx]], {k: v[idx] for k, v in scores.items()}

    def _similarities(self, vectors: np.ndarray, keys: list[Any]) -> np.ndarray:
        out = np.empty(len(keys), dtype=np.float32)
        for i in range(0, len(keys), SIM_BATCH):
            part = keys[i:i + SIM_BATCH]
            out[i:i + len(part)] = np.asarray(self.store.similarities(vectors, part)).max(axis=0)
        return V.round_scores(out)

    # ------------------------------------------------------------------------------------- units

    def _units(self, plan: Plan, keys: list[Any], qv: dict[str, np.ndarray],
               sentence_scores: dict[str, np.ndarray] | None, restrict: set[Any] | None = None) -> list[Unit]:
        """Fetch rows, score them, and group them into units of the selected kind."""
        kind = plan.unit.kind
        grouped = kind in ("DOCUMENT", "CHUNK") or (kind == "SPAN" and plan.unit.base == "CHUNK")
        if not keys:
            return []
        if grouped:
            table = getattr(self.store, "table", None)
            if table is not None:  # a table store knows each key's document without building rows
                names = table.doc_ids
                doc_ids = list(dict.fromkeys(names[int(k)] for k in keys))
            else:
                doc_ids = list(dict.fromkeys(r.doc_id for r in self.store.fetch(keys)))
            by_doc = self.store.document_rows(doc_ids)
            rows = [r for d in doc_ids for r in by_doc.get(d, [])]
            scores = self._score_rows(plan, [r.key for r in rows], rows, qv, None)
            score_of = {id(r): {s: float(v[i]) for s, v in scores.items()} for i, r in enumerate(rows)}
            return self._group(plan, doc_ids, by_doc, score_of, restrict)
        rows = self.store.fetch(keys)
        scores = self._score_rows(plan, keys, rows, qv, sentence_scores)
        out = []
        names = list(scores)
        cols = [scores[n] for n in names]
        for i, r in enumerate(rows):
            ctx = RowContext(r.content, r.id, r.doc_id, r.position, r.metadata,
                             {n: float(c[i]) for n, c in zip(names, cols)}, {}, r.seq)
            out.append(Unit(ctx, [r]))
        return out

    def _score_rows(self, plan: Plan, keys: list[Any], rows: list[Row], qv: dict[str, np.ndarray],
                    known: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for s in plan.scores:
            if s.kind == "SIMILARITY":
                if known is not None and s.slot in known:
                    out[s.slot] = known[s.slot]
                else:
                    out[s.slot] = self._similarities(qv[s.slot], keys) if keys else np.zeros(0)
            elif s.kind == "BM25":
                out[s.slot] = self.bm25.scores(" ".join(s.texts), keys, rows)
        return out

    def _group(self, plan: Plan, doc_ids: list[str], by_doc: dict[str, list[Row]],
               score_of: dict[int, dict[str, float]], restrict: set[Any] | None) -> list[Unit]:
        kind = plan.unit.kind
        out: list[Unit] = []
        for d in doc_ids:
            rows = by_doc.get(d)
            if not rows:
                continue
            if kind == "DOCUMENT":
                groups = [rows]
            else:
                groups = chunk_rows(rows, self.chunk_chars)
            for ci, grp in enumerate(groups):
                if restrict is not None and not any(r.key in restrict for r in grp):
                    continue
                scores: dict[str, float | None] = {}
                for r in grp:
                    for s, v in score_of[id(r)].items():
                        cur = scores.get(s)
                        if cur is None or v > cur:
                            scores[s] = v
                first = grp[0]
                if kind == "DOCUMENT":
                    ctx = RowContext(join_rows(grp), d, d, 0, first.metadata, scores, {}, first.seq)
                else:
                    ctx = RowContext(join_rows(grp), f"{d}#chunk{ci}", d, ci, first.metadata, scores, {},
                                     first.seq)
                out.append(Unit(ctx, grp, ci, groups))
        return out

    @staticmethod
    def _filter(units: list[Unit], residual: list[RowFn], deadline: _Deadline | None = None,
                warnings: list[str] | None = None) -> list[Unit]:
        """Units passing every residual predicate; stops (with a warning) when the deadline passes."""
        if not residual:
            return units
        if deadline is None or deadline.end is None:
            return [u for u in units if all(truth(f(u.ctx)) is True for f in residual)]
        out = []
        for i, u in enumerate(units):
            # checked per row: a slow user function in WHERE is where a search spends its time
            if deadline.expired():
                if warnings is not None:
                    warnings.append(f"timeout while filtering: {len(units) - i} of {len(units)} candidate rows "
                                    "were not checked; results may be incomplete")
                break
            if all(truth(f(u.ctx)) is True for f in residual):
                out.append(u)
        return out

    # ------------------------------------------------------------------------------------ fusion

    def _fuse(self, plan: Plan, specs: list[ScoreSpec], units: list[Unit], env: Env) -> list[Unit]:
        """RRF / INTERLEAVE over arms ranked among the units that passed WHERE (arm depth applied)."""
        in_any: set[int] = set()
        for spec in specs:
            ranked: list[list[int]] = []
            for arm in spec.arms:
                fn = env.binding_fn(arm)
                bm25_only = self._is_bm25_arm(plan, arm)
                vals = []
                for i, u in enumerate(units):
                    v = fn(u.ctx)
                    if v is None or not V.is_number(v) or (isinstance(v, float) and math.isnan(v)):
                        continue
                    if bm25_only and v <= 0:
                        continue
                    vals.append((-float(v), u.ctx.seq, u.ctx.position, i))
                vals.sort()
                order = [i for *_, i in vals]
                if plan.arm_depth is not None:
                    order = order[: plan.arm_depth]
                ranked.append(order)
            fused: dict[int, float] = {}
            if spec.kind == "RRF":
                for w, order in zip(spec.weights or [1.0] * len(ranked), ranked):
                    for r, i in enumerate(order, start=1):
                        fused[i] = fused.get(i, 0.0) + w / (spec.k + r)
            else:
                position = 0
                for depth in range(max((len(o) for o in ranked), default=0)):
                    for order in ranked:
                        if depth < len(order) and order[depth] not in fused:
                            position += 1
                            fused[order[depth]] = 1.0 / position
            for i, u in enumerate(units):
                u.ctx.scores[spec.slot] = fused.get(i, 0.0)
                u.ctx.bindings.clear()
            in_any.update(fused)
        return [u for i, u in enumerate(units) if i in in_any]

    @staticmethod
    def _is_bm25_arm(plan: Plan, arm: str) -> bool:
        b = plan.query.binding(arm)
        if b is None:
            return False
        calls = [n for n in b.expr.walk() if isinstance(n, ir.Call) and n.name in ("SIMILARITY", "BM25")]
        return bool(calls) and all(c.name == "BM25" for c in calls)

    # ------------------------------------------------------------------------------------- order

    def _order(self, plan: Plan, units: list[Unit], env: Env) -> list[Unit]:
        units = sorted(units, key=lambda u: (u.ctx.seq, u.ctx.position))
        for spec in reversed(plan.order):
            fn = compile_expr(spec.expr, env)
            keyed = [(fn(u.ctx), u) for u in units]
            if spec.descending:
                null_rank = 2 if spec.nulls_first else 0
            else:
                null_rank = 0 if spec.nulls_first else 2

            def key(item: tuple[Any, Unit], _nr: int = null_rank) -> tuple[int, Any]:
                v = item[0]
                if V.is_null(v):
                    return (_nr, (0, 0))
                return (1, V.sort_key(v))
            keyed.sort(key=key, reverse=spec.descending)
            units = [u for _, u in keyed]
        return units

    # ------------------------------------------------------------------------------------ rerank

    def _rerank(self, plan: Plan, units: list[Unit], reranker: Any, rerank_query: str | None,
                need: int | None, warnings: list[str]) -> list[Unit]:
        query = rerank_query
        if query is None:
            for s in plan.scores:
                if s.texts:
                    query = s.texts[0]
                    break
        if query is None:
            warnings.append("rerank skipped: no rerank_query and no SIMILARITY/BM25 text in the query")
            return units
        head = units if need is None else units[:need]
        tail = [] if need is None else units[need:]
        texts = [self._unit_text(plan, u) for u in head]
        scores = list(reranker.score(query, texts))
        for u, sc in zip(head, scores):
            u.ctx.scores["rerank"] = float(sc)
            u.extra["rerank"] = float(sc)
        if not any(not k.implicit for k in plan.order):
            head = sorted(head, key=lambda u: -u.extra["rerank"])
        return head + tail

    # -------------------------------------------------------------------------------------- hits

    def _unit_text(self, plan: Plan, u: Unit) -> str:
        if plan.unit.kind != "SPAN":
            return u.ctx.content
        w = plan.window
        if plan.unit.base == "CHUNK" and u.doc_chunks is not None:
            lo, hi = max(0, u.chunk_index - w), u.chunk_index + w + 1
            return join_rows([r for grp in u.doc_chunks[lo:hi] for r in grp])
        doc = u.extra.get("doc_rows")
        if doc is None:
            return u.ctx.content
        p = u.ctx.position
        return join_rows([r for r in doc if p - w <= r.position <= p + w])

    def _hits(self, plan: Plan, page: list[Unit], env: Env, warnings: list[str]) -> list[Hit]:
        if plan.unit.kind == "SPAN" and plan.unit.base != "CHUNK" and page:
            docs = self.store.document_rows(list(dict.fromkeys(u.ctx.doc_id for u in page)))
            changed = 0
            for u in page:
                rows = docs.get(u.ctx.doc_id, u.rows)
                # Another process may have replaced the document since recall (a shared database has no
                # engine lock): a window from the new version around a sentence of the old one would be
                # a torn hit, so the hit keeps its own sentence only.
                if any(r.seq != u.ctx.seq for r in rows):
                    rows = u.rows
                    changed += 1
                u.extra["doc_rows"] = rows
            if changed:
                warnings.append(f"{changed} document(s) changed while the query ran: "
                                      "their SPAN hits show the hit sentence without its window")
        names = [b.name for b in plan.query.bindings]
        out = []
        for u in page:
            scores: dict[str, Any] = {}
            for n in names:
                scores[n] = _jsonable(env.binding_fn(n)(u.ctx))
            if "rerank" in u.extra:
                scores["rerank"] = u.extra["rerank"]
            unit_name = plan.unit.kind
            out.append(Hit(
                id=u.ctx.id if plan.unit.kind != "DOCUMENT" else u.ctx.doc_id,
                doc_id=u.ctx.doc_id, unit=unit_name, position=u.ctx.position,
                content=self._unit_text(plan, u), metadata=copy.deepcopy(u.ctx.metadata), scores=scores,
            ))
        return out


def _top_rows(scores: np.ndarray, seq: np.ndarray, pos: np.ndarray, n: int, *, ties: bool,
              eligible: np.ndarray | None = None) -> np.ndarray:
    """Indices of the ``n`` best rows by (score desc, seq, position); with ``ties``, every row tied
    with the n-th score too."""
    idx = np.arange(len(scores)) if eligible is None else np.flatnonzero(eligible)
    if len(idx) > n:
        sub = scores[idx]
        kth = np.partition(-sub, n - 1)[n - 1]
        idx = idx[-sub <= kth]  # all rows at least as good as the n-th (ties included)
    order = np.lexsort((pos[idx], seq[idx], -scores[idx]))
    return idx[order] if ties else idx[order[:n]]


def _jsonable(v: Any) -> Any:
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, np.generic):
        return v.item()
    return v


def estimate_tokens(text: str) -> int:
    """A model-free token estimate: about 4 characters per token, at least one per word."""
    return max(len(text.split()), math.ceil(len(text) / 4))


def pack_tokens(hits: list[Hit], max_tokens: int, warnings: list[str]) -> list[Hit]:
    """Keep hits in order while they fit the budget, skipping (not stopping at) one that does not.

    Never returns empty when there is a hit: the top one is then truncated and flagged.
    """
    out: list[Hit] = []
    used = 0
    for h in hits:
        n = estimate_tokens(h.content)
        if used + n <= max_tokens:
            out.append(h)
            used += n
    if not out and hits:
        top = hits[0]
        chars = max(1, max_tokens) * 4
        words = top.content[:chars]
        while words and estimate_tokens(words) > max(1, max_tokens):
            words = words[: max(1, int(len(words) * 0.9))]
        top.content = words
        top.truncated = True
        out = [top]
        warnings.append(f"the top result was truncated to fit max_tokens={max_tokens}")
    elif len(out) < len(hits):
        warnings.append(f"{len(hits) - len(out)} result(s) skipped to fit max_tokens={max_tokens}")
    return out


__all__ = ["Executor", "Unit", "pack_tokens", "unit_id"]
