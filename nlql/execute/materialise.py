"""Rows into candidates of the selected unit (scored), and a page of candidates into hits.

``candidates`` fetches the rows of some keys, scores them and groups them into SENTENCE, SPAN, CHUNK or
DOCUMENT candidates (a grouped unit takes each score's best sentence); ``hits`` turns the page into
new :class:`~nlql.execute.results.Hit` objects (SPAN windows read here), and ``pack_tokens`` fits them
into a token budget.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, cast

import numpy as np

from nlql import ir
from nlql import values as V
from nlql.errors import BackendError, NLQLTimeoutError
from nlql.evaluate import RowContext
from nlql.execute.candidates import Candidate, Search
from nlql.execute.degrade import cause_of, drop_arms
from nlql.execute.results import Best, Hit
from nlql.execute.units import chunk_rows, join_rows
from nlql.stores.base import Row, Store, TablePaths

SIM_BATCH = 8192

# one score per row: an array, or Python floats (knn's own scores, as float32 values)
ScoreColumn: TypeAlias = np.ndarray | list[float]

__all__ = ["candidates", "estimate_tokens", "hits", "pack_tokens", "read_unread", "similarities", "unit_text"]


def similarities(store: Store, vectors: np.ndarray, keys: Sequence[Any]) -> np.ndarray:
    """The best cosine over ``vectors`` for each key (batched store calls), rounded as every store rounds."""
    out = np.empty(len(keys), dtype=np.float32)
    for i in range(0, len(keys), SIM_BATCH):
        part = keys[i:i + SIM_BATCH]
        out[i:i + len(part)] = np.asarray(store.similarities(vectors, part)).max(axis=0)
    return V.round_scores(out)


def read_unread(run: Search, page: list[Candidate]) -> None:
    """The SIMILARITY values recall left unread (rows outside the arm's window, which rank nowhere in it:
    :func:`nlql.execute.recall._window_similarities`), read for the page's rows, which show them."""
    unread = run.extra.pop("unread", None)
    if not unread:
        return
    for slot, (vectors, keys) in unread.items():
        todo = [u for u in page if u.rows and u.rows[0].key in keys]
        if not todo:
            continue
        try:
            values: list[Any] = similarities(run.store, vectors, [u.rows[0].key for u in todo]).tolist()
        except NLQLTimeoutError:  # (the search's time is up: the hits keep what recall read)
            values = [None] * len(todo)
            run.warnings.append(f"timeout: {len(todo)} hit(s) outside the {slot!r} arm's window show no "
                                "SIMILARITY value (NULL)")
        for u, v in zip(todo, values):
            u.ctx.scores[slot] = v
            u.ctx.bindings.clear()  # (a binding over the score is evaluated again)


def candidates(run: Search, keys: Sequence[Any], qv: dict[str, np.ndarray],
               sentence_scores: Mapping[str, ScoreColumn] | None, restrict: set[Any] | None = None) -> list[Candidate]:
    """Fetch rows, score them, and group them into candidates of the selected unit.

    ``sentence_scores`` are SIMILARITY scores already known per key; ``restrict`` keeps grouped units
    that contain at least one of those keys (a knn round's hits).
    """
    plan, store = run.plan, run.store
    if not keys:
        return []
    if not plan.unit.rows_are_sentences:
        if store.capabilities.FAST_PATH:  # a table store knows each key's document without building rows
            doc_ids = cast(TablePaths, store).key_documents(keys)
        else:
            doc_ids = list(dict.fromkeys(r.doc_id for r in store.fetch(keys)))
        by_doc = store.document_rows(doc_ids)
        rows = [r for d in doc_ids for r in by_doc.get(d, [])]
        scores = _score_rows(run, [r.key for r in rows], rows, qv, None)
        cols = list(scores.items())
        if run.mins:
            score_of = {id(r): _row_scores(cols, i, run.mins) for i, r in enumerate(rows)}
        else:
            score_of = {id(r): {n: float(c[i]) for n, c in cols} for i, r in enumerate(rows)}
        return _group(run, doc_ids, by_doc, score_of, restrict)
    rows = store.fetch(keys)
    scores = _score_rows(run, keys, rows, qv, sentence_scores)
    out = []
    mins = run.mins
    if mins:
        cols = list(scores.items())
        for i, r in enumerate(rows):
            ctx = RowContext(r.content, r.id, r.doc_id, r.position, r.metadata, _row_scores(cols, i, mins), {}, r.seq)
            out.append(Candidate(ctx, [r]))
        return out
    # each column as Python floats once (what float() of each element gives), then one dict per row
    names = list(scores)
    values = [_floats(c) for c in scores.values()]
    if len(names) == 1:
        name = names[0]
        for r, v in zip(rows, values[0]):
            out.append(Candidate(RowContext(r.content, r.id, r.doc_id, r.position, r.metadata, {name: v}, {}, r.seq),
                                 [r]))
        return out
    for i, r in enumerate(rows):
        ctx = RowContext(r.content, r.id, r.doc_id, r.position, r.metadata,
                         {n: col[i] for n, col in zip(names, values)}, {}, r.seq)
        out.append(Candidate(ctx, [r]))
    return out


def _floats(col: Any) -> list[float]:
    """``[float(x) for x in col]``, in one call for a float array (``tolist`` gives the same values)."""
    if isinstance(col, np.ndarray) and col.dtype.kind == "f" and col.ndim == 1:
        return col.tolist()
    return [float(x) for x in col]


def _row_scores(cols: list[tuple[str, ScoreColumn]], i: int, mins: dict[str, float]) -> dict[str, float | None]:
    """One row's scores; below an arm-local ``min => x`` a score is NULL (the row is out of that arm)."""
    out: dict[str, float | None] = {n: float(c[i]) for n, c in cols}
    for slot, m in mins.items():
        v = out.get(slot)
        if v is not None and not v >= m:
            out[slot] = None
    return out


def _score_rows(run: Search, keys: Sequence[Any], rows: list[Row], qv: dict[str, np.ndarray],
                known: Mapping[str, ScoreColumn] | None) -> dict[str, ScoreColumn]:
    out: dict[str, ScoreColumn] = {}
    for s in run.plan.scores:
        if s.slot in run.failed:
            continue  # a dropped arm (on_arm_error="degrade"): its score is NULL
        if s.kind == "SIMILARITY":
            if known is not None and s.slot in known:
                out[s.slot] = known[s.slot]
            elif not keys:
                out[s.slot] = np.zeros(0)
            else:
                try:
                    out[s.slot] = similarities(run.store, qv[s.slot], keys)
                except (NLQLTimeoutError, BackendError) as exc:
                    if not (run.degrade and drop_arms(run, [s.slot], "the store's similarity call failed "
                                                                    f"({cause_of(exc)})")):
                        raise
        elif s.kind == "BM25":
            out[s.slot] = run.bm25.scores(" ".join(s.texts), keys, rows)
    return out


def _group(run: Search, doc_ids: list[str], by_doc: dict[str, list[Row]],
           score_of: dict[int, dict[str, float | None]], restrict: set[Any] | None) -> list[Candidate]:
    kind = run.plan.unit.kind
    out: list[Candidate] = []
    for d in doc_ids:
        rows = by_doc.get(d)
        if not rows:
            continue
        groups = [rows] if kind == "DOCUMENT" else chunk_rows(rows, run.chunk_chars)
        for ci, grp in enumerate(groups):
            if restrict is not None and not any(r.key in restrict for r in grp):
                continue
            scores: dict[str, float | None] = {}
            for r in grp:
                for s, v in score_of[id(r)].items():
                    cur = scores.get(s)
                    if cur is None or (v is not None and v > cur):
                        scores[s] = v
            first = grp[0]
            positions = tuple(r.position for r in grp)
            if kind == "DOCUMENT":
                ctx = RowContext(join_rows(grp), d, d, 0, first.metadata, scores, {}, first.seq, positions)
            else:
                ctx = RowContext(join_rows(grp), f"{d}#chunk{ci}", d, ci, first.metadata, scores, {}, first.seq,
                                 positions)
            cand = Candidate(ctx, grp, ci, groups)
            cand.extra["row_scores"] = [score_of[id(r)] for r in grp]  # for hit.best
            out.append(cand)
    return out


# ------------------------------------------------------------------------------------------- hits


def unit_text(run: Search, u: Candidate) -> str:
    """The text a hit shows: the unit's content, widened by the SPAN window."""
    plan = run.plan
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


def hits(run: Search, page: list[Candidate]) -> list[Hit]:
    """New hit objects for a page (never the stored ones): content, metadata copy, every binding's value."""
    plan, env = run.plan, run.env
    if plan.unit.kind == "SPAN" and plan.unit.rows_are_sentences and page:
        docs = run.store.document_rows(list(dict.fromkeys(u.ctx.doc_id for u in page)))
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
            run.warnings.append(f"{changed} document(s) changed while the query ran: "
                                "their SPAN hits show the hit sentence without its window")
    fns = run.binding_fns
    if fns is None:
        fns = [(b.name, env.binding_fn(b.name)) for b in plan.query.bindings]
    grouped = not plan.unit.rows_are_sentences
    best_slot, best_names = _best_basis(plan) if grouped else (None, [])
    kind = plan.unit.kind
    jsonable = V.jsonable_scalar
    marked = [b.name for b in plan.query.bindings if isinstance(b.expr, ir.Call) and b.expr.name == "HIGHLIGHT"]
    out = []
    for u in page:
        ctx = u.ctx
        scores: dict[str, Any] = {}
        for n, fn in fns:
            v = fn(ctx)
            scores[n] = v if type(v) is float else jsonable(v)
        if "rerank" in u.extra:
            scores["rerank"] = u.extra["rerank"]
        # (positional: Hit's fields in order id, doc_id, unit, position, content, metadata, scores,
        # truncated, best, group, count, highlights; keywords cost more per hit)
        out.append(Hit(
            ctx.id if kind != "DOCUMENT" else ctx.doc_id, ctx.doc_id, kind, ctx.position,
            ctx.content if kind != "SPAN" else unit_text(run, u), _copy_metadata(ctx.metadata), scores,
            False, _best(run, u, best_slot, best_names) if best_slot is not None else None, None, None,
            {n: scores[n] for n in marked if isinstance(scores.get(n), list)} if marked else None,
        ))
    return out


_FLAT = (str, int, float, bool, type(None))


def _copy_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    """A copy the caller may change without changing the store: a plain copy when every value is a
    scalar (the common case, ~10x cheaper than ``deepcopy``), else a deep one."""
    for v in meta.values():
        if type(v) not in _FLAT:
            return copy.deepcopy(meta)
    return dict(meta)


def _best_basis(plan: Any) -> tuple[str | None, list[str]]:
    """(the sentence score that decides a grouped row's best sentence, the bindings shown for it).

    The score is the first SIMILARITY/BM25 the ranking reads: in the first ORDER BY key (through
    bindings and fusion arms), else the first SIMILARITY/BM25 of the query. The bindings shown are the
    score bindings that read no fusion (a fused value belongs to the row, not to one sentence).
    """
    text_slots = {s.slot for s in plan.scores if s.kind in ("SIMILARITY", "BM25")}
    fusion_slots = {s.slot for s in plan.fusions}
    exprs = {b.name: b.expr for b in plan.query.bindings}

    def reads(expr: ir.Node) -> list[str]:
        """Score slots an expression reads, in source order, bindings and fusion arms followed."""
        found: list[str] = []
        stack: list[ir.Node] = [expr]
        seen: set[str] = set()
        while stack:
            node = stack.pop()
            slot = plan.slot_of(node) if isinstance(node, (ir.Ref, ir.Call)) else None
            if slot is not None and slot not in found:
                found.append(slot)
                spec = plan.spec(slot)
                if spec is not None and spec.arm_exprs:
                    stack.extend(reversed(spec.arm_exprs))
                    continue
            if isinstance(node, ir.Ref) and node.name in exprs and node.name not in seen:
                seen.add(node.name)
                stack.append(exprs[node.name])
                continue
            stack.extend(reversed(list(node.children())))
        return found

    slot = None
    if plan.order:
        slot = next((s for s in reads(plan.order[0].expr) if s in text_slots), None)
    if slot is None:
        slot = next((s.slot for s in plan.scores if s.slot in text_slots), None)
    if slot is None:
        return None, []
    names = []
    for name in exprs:
        slots = reads(ir.Ref(name))
        if any(s in text_slots for s in slots) and not any(s in fusion_slots for s in slots):
            names.append(name)
    return slot, names


def _best(run: Search, u: Candidate, slot: str, names: list[str]) -> Best | None:
    """The sentence of a grouped candidate with the highest ``slot`` (first on ties); None if none has one."""
    row_scores = u.extra.get("row_scores")
    if not row_scores:
        return None
    spec = run.plan.spec(slot)
    bm25 = spec is not None and spec.kind == "BM25"
    best_i, best_v = -1, None
    for i, sc in enumerate(row_scores):
        v = sc.get(slot)
        if v is None or (isinstance(v, float) and math.isnan(v)) or (bm25 and v <= 0):
            continue
        if best_v is None or v > best_v:
            best_i, best_v = i, v
    if best_i < 0:
        return None
    r = u.rows[best_i]
    ctx = RowContext(r.content, r.id, r.doc_id, r.position, r.metadata, dict(row_scores[best_i]), {}, r.seq)
    env = run.env
    return Best(position=r.position, content=r.content,
                scores={n: V.jsonable_scalar(env.binding_fn(n)(ctx)) for n in names})


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
