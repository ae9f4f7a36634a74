"""Plan → deterministic text tree and dict (SPEC §7). Same query and data → byte-identical text."""

from __future__ import annotations

import json
from typing import Any

from nlql.ir import Literal
from nlql.plan.nodes import Plan
from nlql.render import render_expr


def _fusion(plan: Plan) -> list[dict[str, Any]]:
    out = []
    for s in plan.scores:
        if s.kind == "RRF":
            terms = " + ".join(f"{w:g}/({s.k:g} + rank_{a})" for a, w in zip(s.arms, s.weights, strict=False))
            out.append({"binding": s.slot, "method": "RRF", "k": s.k, "weights": list(s.weights),
                        "arms": list(s.arms), "window": s.window, "arm_depth": s.window,
                        "formula": f"{s.slot} = {terms}; a row absent from an arm adds 0"})
        elif s.kind == "FUSE":
            norm = ("(v − min) / (max − min) over the arm's window, all equal → 1" if s.method != "dbsf" else
                    "(v − (μ − 3σ)) / 6σ clipped to [0, 1], μ, σ over the arm's window, σ = 0 → 1")
            terms = " + ".join(f"{w:g}·norm({a})" for a, w in zip(s.arms, s.weights, strict=False))
            out.append({"binding": s.slot, "method": "FUSE", "normalisation": s.method, "weights": list(s.weights),
                        "arms": list(s.arms), "window": s.window, "arm_depth": s.window,
                        "formula": f"{s.slot} = {terms}; {s.method} norm = {norm}; a row absent from an arm "
                                   "adds 0"})
        elif s.kind == "INTERLEAVE":
            out.append({"binding": s.slot, "method": "INTERLEAVE", "arms": list(s.arms),
                        "window": s.window, "arm_depth": s.window,
                        "formula": f"{s.slot} = 1/position in round-robin over {', '.join(s.arms)}"})
        elif s.kind == "MMR":
            arm = plan.spec(plan.slot_of(s.arm_exprs[0])) if s.arm_exprs else None
            rel = ("the arm as it is (a cosine)" if arm is not None and arm.kind == "SIMILARITY"
                   else "the arm min-max normalised over the window")
            out.append({"binding": s.slot, "method": "MMR", "arms": list(s.arms), "lambda": s.mmr_lambda,
                        "window": s.window, "arm_depth": s.window, "relevance": rel,
                        "formula": f"{s.slot} = 1/position in the greedy order of the top {s.window} rows by "
                                   f"{', '.join(s.arms)}, each step taking the row maximising "
                                   f"{s.mmr_lambda:g}·rel − {1 - s.mmr_lambda:g}·max cos(row, taken); "
                                   "NULL outside the window"})
    return out


def _label(plan: Plan, slot: str) -> str:
    """A score slot as the user wrote it: its binding name, or the call for an unbound one."""
    spec = plan.spec(slot)
    return spec.label if spec is not None and slot not in plan.binding_slots.values() else slot


def _block(text: str, indent: str) -> list[str]:
    return [indent + line for line in text.split("\n")]


def _sql_lines(sql: dict[str, Any]) -> list[str]:
    """The ``sql`` section of a lowered plan (see :func:`nlql.sql.explain_sql`)."""
    lines = [f"sql ({sql['dialect']}):"]
    if sql.get("semantic_arms"):
        lines.append(f"  semantic arms: {sql['semantic_arms']}")
    for arm in sql["arms"]:
        lines.append(f"  arm {arm['binding']} ({arm['kind']}, k={arm['k']}):")
        lines.extend(_block(arm["sql"], "    "))
    f = sql["fusion"]
    lines.append(f"  fusion: {f['formula']}")
    lines.extend(_block(f["sql"], "    "))
    if sql.get("bm25"):
        b = sql["bm25"]
        lines.append(f"  bm25: {b['formula']}, k1={b['k1']:g}, b={b['b']:g}")
    lines.append(f"  statement ({sql['rows']} rows, late materialisation):")
    lines.extend(_block(sql["statement"], "    "))
    lines.append("  parameters (values redacted):")
    lines.extend("    " + p for p in sql["params"])
    return lines


class Explain:
    """What ``engine.explain()`` returns: ``str(plan)`` is a text tree, ``to_dict()`` a JSON-ready dict."""

    def __init__(self, plan: Plan, store_notes: list[str] | None = None, sql: dict[str, Any] | None = None,
                 graphs: dict[tuple[str, int, float], Any] | None = None):
        self.plan = plan
        self.store_notes = store_notes or []
        self.sql = sql
        self.graphs = graphs or {}  # (text, hops, decay) -> Activation (nlql.text.graph), from the engine

    def to_dict(self) -> dict[str, Any]:
        p = self.plan
        r = p.recall
        recall: dict[str, Any] = {"strategy": r.kind, "reason": r.reason}
        if r.kind == "knn":
            recall.update({"score": r.slot, "k": r.k, "overfetch": r.overfetch, "exact": r.exact,
                           "widening": "×4 per round until LIMIT+OFFSET rows pass WHERE"})
        if r.min_score:
            recall["min_score"] = dict(sorted(r.min_score.items()))
        out: dict[str, Any] = {
            "query": p.canonical,
            "ir": p.query.to_dict(),
            "store": p.store,
            "unit": {"kind": p.unit.kind, "base": p.unit.base,
                     "window": p.window if p.unit.kind == "SPAN" else None},
            "scores": [
                {"slot": s.slot, "function": s.kind, "call": s.label,
                 **({"texts": list(s.texts)} if s.texts else {}),
                 **({"min": s.min} if s.min is not None else {}),
                 **({"arms": list(s.arms)} if s.arms else {})}
                for s in p.scores
            ],
            "recall": recall,
            "pushed_filter": p.native.text if p.native is not None else None,
            "residual_filter": [render_expr(c) for c in p.residual],
            "after_fusion_filter": [render_expr(c) for c in p.fusion_residual],
            "periods": {render_expr(n): [a.isoformat(), b.isoformat()] for n, (a, b) in p.periods.items()},
            "order_by": [{"key": o.label, "direction": "DESC" if o.descending else "ASC",
                          "nulls": "FIRST" if o.nulls_first else "LAST", "implicit": o.implicit}
                         for o in p.order] or [{"key": "insertion order (document, position)"}],
            "distinct": None if p.distinct is None else {
                "keys": list(p.distinct.labels), "keep": p.distinct.keep,
                "widening": "a bounded recall asks for 10× the rows the page needs, then widens (×4 or more "
                            "per round) until LIMIT+OFFSET rows are kept; rounds in hits.stats['distinct']"},
            "limit": p.limit,
            "offset": p.offset,
            "autocut": None if p.autocut is None else {
                "k": p.autocut, "key": p.order[0].label if p.order else None,
                "rule": f"of the first {p.limit} rows, keep those before jump {p.autocut} of the first sort key "
                        "(a gap > 2 × the mean gap); fewer than 3 rows or no such jump: keep all"},
            "count": None if p.count is None else {
                "by": list(p.count.labels),
                "order": [{"key": "count" if i < 0 else p.count.labels[i], "direction": "DESC" if desc else "ASC",
                           "nulls": "FIRST" if nf else "LAST"} for i, desc, nf in p.count.order]
                or [{"key": "count", "direction": "DESC", "nulls": "LAST"},
                    *({"key": label, "direction": "ASC", "nulls": "LAST"} for label in p.count.labels)],
                "limit": p.count.limit, "offset": p.count.offset,
                "how": (f"store: {p.count.calls} over the rows passing the pushed filter (NULL one value, a list "
                        "once per member; the engine counts instead if the store holds one value in two forms, "
                        "such as 1 and 1.0, or cannot group a value)") if p.count.paths is not None else
                       ("engine: every row passing WHERE, counted per distinct BY value (NULL one value, a list "
                        "once per member)")},
            "rerank": p.rerank,
            "fusion": _fusion(p),
        }
        if p.graphs:
            out["graph"] = [self._graph(call, key) for call, key in p.graphs.items()]
        if p.temporals:
            from nlql.evaluate import temporal_slot
            from nlql.text.temporal import describe_extraction

            # where the value is computed: an arm of the plan's SQL statement, or the engine
            in_sql = {s.slot for s in getattr(p.lowered, "scores", ()) if type(s).__name__ == "TemporalScore"}
            out["temporal"] = [
                {"call": render_expr(call), "text": call.args[1].value if isinstance(call.args[1], Literal) else None,
                 "computed": "sql" if temporal_slot(call) in in_sql else "engine",
                 "period": None if period is None else {
                     "text": period.text, "method": period.method, "start": period.start.isoformat(),
                     "end": period.end.isoformat(), "open_start": period.open_start, "open_end": period.open_end},
                 "description": describe_extraction(period)}
                for call, period in p.temporals.items()]
        if p.fast_path is not None:
            out["fast_path"] = {"kind": p.fast_path.kind, "description": p.fast_path.describe()}
            if p.fast_path.floors:
                out["fast_path"]["floors"] = [
                    {"slot": slot, "score": _label(p, slot), "op": op, "value": value}
                    for slot, op, value in p.fast_path.floors]
        elif p.fast_path_reason:
            out["fast_path"] = {"kind": None, "description": f"none: {p.fast_path_reason}"}
        if p.lowering is not None:
            out["lowering"] = dict(p.lowering)
        if self.sql is not None:
            out["sql"] = self.sql
        if self.store_notes:
            out["notes"] = list(self.store_notes)
        return out

    def _graph(self, call: Any, key: tuple[str, int, float]) -> dict[str, Any]:
        text, hops, decay = key
        out: dict[str, Any] = {"call": render_expr(call), "text": text, "hops": hops, "decay": decay}
        act = self.graphs.get(key)
        # where the walk runs: an arm of the plan's SQL statement (PostgreSQL: CTEs over the store's
        # entity tables), the store's own statement, or the engine's entity graph
        low = self.plan.lowered
        if low is not None and any((getattr(s, "text", None), getattr(s, "hops", None), getattr(s, "decay", None))
                                   == key for s in getattr(low, "scores", ())):
            out["computed"] = "sql"
        elif getattr(act, "in_store", False):
            out["computed"] = "store"
        else:
            out["computed"] = "engine"
        if act is not None:
            d = act.to_dict()
            out.update({"found": d["found"], "per_hop": d["per_hop"], "entities": d["entities"],
                        "rows": d["rows"], "max_weight": d["max_weight"], "lines": act.describe()})
        return out

    def __str__(self) -> str:
        d = self.to_dict()
        lines = [f"query: {d['query']}", f"store: {d['store']}"]
        u = d["unit"]
        unit = u["kind"] + (f"({u['base']}, window => {u['window']})" if u["kind"] == "SPAN" else "")
        lines.append(f"unit: {unit}")
        if d["scores"]:
            lines.append("scores (deduplicated):")
            for s in d["scores"]:
                lines.append(f"  {s['slot']} = {s['call']}")
                if "min" in s:
                    lines.append(f"    min {s['min']:g}: a row below it has no {s['slot']} (out of that arm only)")
        r = d["recall"]
        head = f"recall: {r['strategy']}"
        if r["strategy"] == "knn":
            head += f" on {r['score']} k={r['k']} overfetch={r['overfetch']:g} exact={r['exact']}"
        lines.append(head)
        lines.append(f"  why: {r['reason']}")
        if "min_score" in r:
            lines.append("  min score inside recall: " + ", ".join(f"{k} >= {v:g}" for k, v in r["min_score"].items()))
        if r["strategy"] == "knn":
            lines.append(f"  widening: {r['widening']}")
        lines.append(f"pushed filter ({d['store']}): {d['pushed_filter'] if d['pushed_filter'] else '(none)'}")
        lines.append("residual filter (engine): " + (" AND ".join(d["residual_filter"]) or "(none)"))
        if d["after_fusion_filter"]:
            lines.append("after fusion: " + " AND ".join(d["after_fusion_filter"]))
        for k, (a, b) in d["periods"].items():
            lines.append(f"period: {k} -> [{a}, {b})")
        for g in d.get("graph", ()):
            where = {"sql": "computed in the SQL statement over the store's entity tables",
                     "store": f"computed by the {d['store']} store"}.get(g.get("computed", ""),
                                                                         "entity graph in the engine")
            lines.append(f"graph: {g['call']} (hops {g['hops']}, decay {g['decay']:g}; {where})")
            for line in g.get("lines", ()):
                lines.append(f"  {line}")
            if "rows" in g:
                lines.append(f"  rows activated: {g['rows']} (via {g['entities']} entities)")
        for t in d.get("temporal", ()):
            lines.append(f"temporal: {t['call']}: {t['description']}")
        for f in d["fusion"]:
            window = "every row" if f["window"] is None else f"{f['window']} rows"
            if f["method"] == "MMR":
                lines.append(f"fusion: MMR {f['formula']} (lambda {f['lambda']:g}, window {window}; "
                             f"rel: {f['relevance']}; cos between the rows' own vectors)")
                continue
            lines.append(f"fusion: {f['method']} {f['formula']} (window: each arm ranks {window})")
        order = ", ".join(
            o["key"] if "direction" not in o else f"{o['key']} {o['direction']} NULLS {o['nulls']}"
            + (" (default)" if o.get("implicit") else "")
            for o in d["order_by"])
        dist = d["distinct"]
        if dist is not None:
            lines.append(f"distinct by: {', '.join(dist['keys'])} keep {dist['keep']} (engine, after WHERE in "
                         "ORDER BY order; NULL is one value)")
            lines.append(f"  widening: {dist['widening']}")
        lines.append(f"order by: {order}; ties by insertion order")
        if d["count"] is not None:
            c = d["count"]
            lines.append(f"count by: {', '.join(c['by']) or '(total)'} ({c['how']})")
            lines.append("  groups ordered by: " + ", ".join(f"{o['key']} {o['direction']}" for o in c["order"])
                         + f"; limit: {c['limit'] if c['limit'] is not None else 'all'} offset: {c['offset']}")
        lines.append(f"limit: {d['limit'] if d['limit'] is not None else 'all'} offset: {d['offset']}")
        if d["autocut"] is not None:
            a = d["autocut"]
            lines.append(f"autocut: {a['k']} on {a['key'] or '(no sort key: keeps all)'}: {a['rule']}")
        if d["rerank"]:
            lines.append("rerank: " + json.dumps(d["rerank"], sort_keys=True))
        if "fast_path" in d:
            lines.append(f"fast path ({d['store']} table): {d['fast_path']['description']}")
            floors = d["fast_path"].get("floors")
            if floors:
                lines.append("  floors: " + ", ".join(f"{f['score']} {f['op']} {f['value']:g}" for f in floors)
                             + " (only the rows passing them are ranked and kept; from the BM25 matches)")
        low = d.get("lowering")
        if low is not None:
            if low["strategy"] == "sql":
                lines.append(f"lowering: sql ({low['reason']})")
            else:
                lines.append(f"lowering: engine (arm by arm) because {low['reason']}")
        if self.sql and "statement" in self.sql:
            lines.extend(_sql_lines(self.sql))
        elif self.sql:
            lines.append("sql:")
            for name, text in self.sql.items():
                lines.append(f"  {name}: {text}")
        for n in self.store_notes:
            lines.append(f"note: {n}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Explain {self.plan.canonical!r}>"
