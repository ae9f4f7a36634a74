"""Pass: choose the page a table store may pick with numpy before any row is fetched.

Only for stores that declare ``Capabilities.FAST_PATH`` (row numbers in an in-process table), only
when the engine runs the plan arm by arm over every candidate (recall ``full`` or ``scan``, nothing
lowered to SQL) and there is a LIMIT. For sentence rows, two families:

- *top* (``insertion``, ``score``): no residual filter, no BM25 or fusion, no reranker, and ORDER BY
  is nothing or one SIMILARITY: the store returns exactly the page's rows.
- *prune* (``bm25``, ``formula``, ``fusion``): WHERE left nothing but similarity thresholds (already
  applied inside recall) and the first sort key is, descending, one BM25 score, arithmetic over
  SIMILARITY/BM25 scores, or a fusion of bare SIMILARITY/BM25 arms: the store keeps every row that
  can still reach the page and the engine finishes (fusion, order, limit). A fusion arm may also be
  GRAPH, TEMPORAL or RECENCY of a metadata date (a ``VALUE`` arm: the engine computes it as one vector,
  :mod:`nlql.stores.memory.arm_values`). ``MMR`` of one bare
  SIMILARITY (no ``min =>``) prunes to its window when LIMIT + OFFSET fits in it.

A condition after fusion keeps the *fusion* path only when it fails for a row no arm ranks
(``score > 0``: such a row's fused value is 0, so pruning it away changes nothing). A lower bound on
the first sort key when that key is one BM25 score (``WHERE kw > 0 ORDER BY kw DESC``) keeps the *bm25*
path: the rows passing it are a prefix of that order.

A lower bound on any BM25 score (no ``min =>``) that fails at 0 (``kw > 0``, ``kw >= 2.5``: a row
matching no term cannot pass) keeps every *prune* path as a *floor* (``FastPath.floors``): the store
first keeps the rows passing every floor (from the BM25 matches, no row built), then selects among
them, so each arm ranks the rows passing WHERE (SPEC §9). A bound that holds at 0 (``kw >= 0``,
``kw > -1``) or an upper bound is no floor: the query runs row by row as before.

DOCUMENT rows (``FastPath.unit``, :func:`_documents`) take the *prune* kinds over documents when WHERE
leaves nothing to the engine (or, for the *bm25* kind, nothing but lower bounds on its own score,
:func:`_key_bound`): a document's SIMILARITY/BM25 is its best sentence's, so the store takes a
maximum per document and the documents are ranked and fused with numpy
(:mod:`nlql.stores.memory.document_page`). CHUNK rows (cut from the sentences' lengths) run row by row.

Every choice is exact. ``plan.fast_path_reason`` says why a table store got no fast path.
"""

from __future__ import annotations

from dataclasses import replace

from nlql import ir
from nlql.functions import BUILTINS, RANK_FUSIONS, parse_duration
from nlql.plan.nodes import FUSION_FUNCTIONS, TEXT_SCORES, Plan, ScoreCondition, ScoreSpec
from nlql.pushdown import Capabilities, FastArm, FastPath, Formula

__all__ = ["VALUE_ARMS", "choose_fastpath", "score_formula", "value_arm"]

_MAX_DEPTH = 32
_HALF_LIFE: str = BUILTINS["RECENCY"].default("half_life")
#: GRAPH / TEMPORAL / RECENCY fusion arms as vectors (:func:`value_arm`); False sends such queries to
#: the row-by-row path (the tests compare the two).
VALUE_ARMS = True


def _none(plan: Plan, why: str) -> Plan:
    return replace(plan, fast_path=None, fast_path_reason=why)


def choose_fastpath(plan: Plan, caps: Capabilities) -> Plan:
    """Set ``plan.fast_path`` (or ``plan.fast_path_reason``) for a table store."""
    if not caps.FAST_PATH:
        return _none(plan, "")
    if plan.lowered is not None or plan.recall.kind == "knn":
        return _none(plan, f"recall is {'one SQL statement' if plan.lowered is not None else 'knn'}")
    if plan.limit is None:
        return _none(plan, "there is no LIMIT (every row is returned)")
    if not plan.unit.rows_are_sentences:
        if plan.unit.kind != "DOCUMENT":
            return _none(plan, f"rows group sentences ({plan.unit.kind} rows are cut from the sentences' lengths, "
                               "row by row)")
        return _documents(plan)
    if (plan.graphs or plan.temporals) and not _value_fusion(plan):
        return _none(plan, "GRAPH / TEMPORAL values come from the engine, row by row")
    if plan.fusion_residual and not _zero_fails_all(plan):
        return _none(plan, "a condition applies after fusion")
    bm25_texts = tuple((s.slot, " ".join(s.texts)) for s in plan.scores if s.kind == "BM25")
    kinds = {s.kind for s in plan.scores}
    # a score with min => x is NULL below x: it orders NULLS LAST in insertion order, not by its value
    with_min = {s.slot for s in plan.scores if s.min is not None}
    if not plan.residual and plan.rerank is None and not kinds & {"BM25", *FUSION_FUNCTIONS}:
        if not plan.order:
            return _set(plan, FastPath("insertion"))
        if len(plan.order) == 1:
            key = plan.order[0]
            slot = plan.slot_of(key.expr)
            if slot is not None and slot not in with_min:
                return _set(plan, FastPath("score", slot=slot, descending=key.descending))
    floors = _floors(plan)
    if floors is None:
        return _none(plan, "WHERE has conditions the engine evaluates row by row")
    floor_slots = [f[0] for f in floors]
    if not plan.order or not plan.order[0].descending:
        return _none(plan, "the first sort key is not a score DESC")
    first = plan.order[0]
    spec = plan.spec(plan.slot_of(first.expr))
    others = [f for f in plan.fusions if spec is None or f.slot != spec.slot]
    if others:  # a fusion ranks its arms over every candidate: pruning would change its values
        return _none(plan, f"the fusion {others[0].slot} ranks every candidate")
    if spec is None:
        formula = score_formula(plan, first.expr)
        if formula is not None and set(formula.slots()) & with_min:
            return _none(plan, f"{first.label} reads a score with min =>")
        if formula is None:
            return _none(plan, f"{first.label} is not arithmetic over SIMILARITY/BM25 scores")
        return _set(plan, FastPath("formula", formula=formula, floors=floors,
                                   bm25_texts=_used(bm25_texts, [*formula.slots(), *floor_slots])))
    if spec.slot in with_min:
        return _none(plan, f"{first.label} has min =>")
    if spec.kind == "BM25":
        return _set(plan, FastPath("bm25", slot=spec.slot, floors=floors,
                                   bm25_texts=_used(bm25_texts, [spec.slot, *floor_slots])))
    if spec.kind == "MMR":
        # rows outside MMR's window stay candidates (NULL, sorted last): pruning to the window is exact
        # only when the page fits in it and every candidate is in the arm (a SIMILARITY without min =>)
        arm = plan.spec(plan.slot_of(spec.arm_exprs[0]))
        need = (plan.limit or 0) + plan.offset
        if plan.rerank:
            need *= max(1, int(plan.rerank.get("factor") or 1))
        if arm is None or arm.kind != "SIMILARITY" or arm.min is not None:
            return _none(plan, f"the arm of {spec.slot} is not exactly one SIMILARITY call without min =>")
        if spec.window is None or need > spec.window:
            return _none(plan, f"the page (LIMIT + OFFSET) is longer than {spec.slot}'s window")
        if plan.distinct is not None:  # DISTINCT BY may need rows from outside the window to fill the page
            return _none(plan, f"DISTINCT BY may keep rows outside {spec.slot}'s window")
        return _set(plan, FastPath("fusion", arms=(FastArm(arm.slot, arm.kind, None),), depth=spec.window,
                                   floors=floors, bm25_texts=_used(bm25_texts, floor_slots)))
    if spec.kind in FUSION_FUNCTIONS and spec.window is not None:
        if _weight_not_positive(spec):
            # a row ranked only by an arm of weight <= 0 is in the result with a value <= 0, and the
            # fused page keeps the rows with a positive value only
            return _none(plan, f"{spec.slot} has a weight that is not positive")
        arms = []
        for name, expr in zip(spec.arms, spec.arm_exprs):
            arm = plan.spec(plan.slot_of(expr))
            if arm is not None and arm.kind in TEXT_SCORES:
                arms.append(FastArm(arm.slot, arm.kind, arm.min))
                continue
            value = value_arm(plan, expr, name) if VALUE_ARMS else None
            if value is None:
                return _none(plan, f"arm {name} is not one SIMILARITY, BM25, GRAPH, TEMPORAL or RECENCY call")
            arms.append(value)
        return _set(plan, FastPath("fusion", arms=tuple(arms), depth=spec.window, floors=floors,
                                   bm25_texts=_used(bm25_texts, [*(a.slot for a in arms), *floor_slots])))
    return _none(plan, f"{first.label} is not a BM25, fusion or arithmetic score")


def _documents(plan: Plan) -> Plan:
    """The *prune* paths over DOCUMENT rows (``FastPath.unit``): the first sort key is, descending, one
    BM25 score, arithmetic over SIMILARITY/BM25 scores, or an RRF / INTERLEAVE / FUSE of bare
    SIMILARITY/BM25 arms (RRF / INTERLEAVE: GRAPH and TEMPORAL arms too, as ``VALUE`` vectors). A
    document's score is its best sentence's, so the store takes a maximum per document and
    ranks documents; nothing else may read a document's rows: no condition left to the engine (the
    pushed filter is on document metadata and ids, so it keeps or drops whole documents), no ``min =>``
    (NULL below it), no DISTINCT BY, no reranker clause, no GRAPH / TEMPORAL outside the fusion's arms,
    no other fusion."""
    bound = _key_bound(plan) if plan.residual and not plan.fusion_residual else None
    if (plan.residual and bound is None) or plan.fusion_residual:
        return _none(plan, "WHERE has conditions the engine evaluates on each document")
    if (plan.graphs or plan.temporals) and not _value_fusion(plan):
        return _none(plan, "GRAPH / TEMPORAL values come from the engine, row by row")
    if plan.distinct is not None:
        return _none(plan, "DISTINCT BY over documents runs row by row")
    if plan.rerank is not None:
        return _none(plan, "a reranker reads the documents row by row")
    if any(s.min is not None for s in plan.scores):
        return _none(plan, "a score has min => (NULL below it): documents row by row")
    if not plan.order or not plan.order[0].descending:
        return _none(plan, "the first sort key is not a score DESC")
    first = plan.order[0]
    spec = plan.spec(plan.slot_of(first.expr))
    others = [f for f in plan.fusions if spec is None or f.slot != spec.slot]
    if others:
        return _none(plan, f"the fusion {others[0].slot} ranks every candidate")
    bm25_texts = tuple((s.slot, " ".join(s.texts)) for s in plan.scores if s.kind == "BM25")
    unit = plan.unit.kind
    if spec is None:
        formula = score_formula(plan, first.expr)
        if formula is None:
            return _none(plan, f"{first.label} is not arithmetic over SIMILARITY/BM25 scores")
        return _set(plan, FastPath("formula", formula=formula, unit=unit,
                                   bm25_texts=_used(bm25_texts, formula.slots())))
    if spec.kind == "BM25":
        return _set(plan, FastPath("bm25", slot=spec.slot, unit=unit, bm25_texts=_used(bm25_texts, [spec.slot]),
                                   floors=bound or ()))
    if bound is not None:
        return _none(plan, "WHERE has conditions the engine evaluates on each document")
    if spec.kind not in (*RANK_FUSIONS, "FUSE") or spec.window is None:
        return _none(plan, f"{first.label} is not a BM25, RRF / INTERLEAVE / FUSE or arithmetic score")
    if _weight_not_positive(spec):  # (as for sentences)
        return _none(plan, f"{spec.slot} has a weight that is not positive")
    arms = []
    for name, expr in zip(spec.arms, spec.arm_exprs):
        arm = plan.spec(plan.slot_of(expr))
        if arm is not None and arm.kind in TEXT_SCORES:
            arms.append(FastArm(arm.slot, arm.kind, None))
            continue
        # GRAPH and TEMPORAL as vectors over the rows, each document taking its best row's value (GRAPH:
        # its best sentence's activation; TEMPORAL: the document's date, the same on every row). RECENCY's
        # vector is exact only down to a depth counted in rows, not documents: row by row.
        value = value_arm(plan, expr, name) if VALUE_ARMS else None
        if value is None or value.value is None or value.value[0] not in ("GRAPH", "TEMPORAL"):
            return _none(plan, f"arm {name} is not one SIMILARITY, BM25, GRAPH or TEMPORAL call")
        arms.append(value)
    return _set(plan, FastPath("fusion", arms=tuple(arms), depth=spec.window, unit=unit,
                               bm25_texts=_used(bm25_texts, [a.slot for a in arms])))


def _weight_not_positive(spec: ScoreSpec) -> bool:
    return spec.kind == "RRF" and any(not w > 0 for w in spec.weights or ())


def value_arm(plan: Plan, expr: ir.Expr, name: str) -> FastArm | None:
    """A fusion arm the engine can compute as one vector over the candidates (a ``VALUE`` arm), or None.

    ``GRAPH(text …)`` (the activation, mapped to table rows), ``TEMPORAL(meta.path, text)`` and
    ``RECENCY(meta.path [, half_life => "…"])`` (from the table's date column), directly or through
    bindings. The values are exactly the row evaluator's (:mod:`nlql.stores.memory.arm_values`).
    """
    for _ in range(_MAX_DEPTH):
        if not isinstance(expr, ir.Ref):
            break
        b = plan.query.binding(expr.name)
        if b is None:
            return None
        expr = b.expr
    if not isinstance(expr, ir.Call):
        return None
    slot = f"~{name}"
    if expr.name == "GRAPH" and expr in plan.graphs:
        return FastArm(slot, "VALUE", None, ("GRAPH", plan.graphs[expr]))
    if expr.name == "TEMPORAL" and expr in plan.temporals and isinstance(expr.args[0], ir.Meta):
        return FastArm(slot, "VALUE", None, ("TEMPORAL", expr.args[0].keys, plan.temporals[expr]))
    if expr.name == "RECENCY" and len(expr.args) == 1 and isinstance(expr.args[0], ir.Meta):
        hl = expr.kwarg("half_life")
        text = _HALF_LIFE if hl is None else hl.value if isinstance(hl, ir.Literal) else None
        half_life = parse_duration(text) if isinstance(text, str) else None
        if half_life is None:  # (the row evaluator falls back to the default: left to it)
            return None
        return FastArm(slot, "VALUE", None, ("RECENCY", expr.args[0].keys, half_life.total_seconds(), plan.now))
    return None


def _value_fusion(plan: Plan) -> bool:
    """GRAPH / TEMPORAL may be fusion arms the fast path computes as vectors: the first sort key is an
    RRF / INTERLEAVE (its arms are checked one by one below; a GRAPH / TEMPORAL read anywhere else is
    a residual condition, which keeps the fast path out, or a value computed on the page's rows)."""
    if not VALUE_ARMS or not plan.order:
        return False
    spec = plan.spec(plan.slot_of(plan.order[0].expr))
    return spec is not None and spec.kind in RANK_FUSIONS


_HOLDS_AT_ZERO = {">": lambda v: 0.0 > v, ">=": lambda v: 0.0 >= v, "<": lambda v: 0.0 < v,
                  "<=": lambda v: 0.0 <= v}


def _key_bound(plan: Plan) -> tuple[tuple[str, str, float], ...] | None:
    """For DOCUMENT rows ordered by one BM25 score descending: WHERE's conditions when each is a lower
    bound on that score (``kw > 0``, ``kw >= 2.5``; a document's score is its best sentence's), as the
    floors among them (those failing at 0: a document holding no term cannot pass), else None. The
    documents passing such bounds come first in the score's order, so the page is among the best
    documents the *bm25* path keeps, and the engine applies the bounds to the documents it builds."""
    if not plan.order or not plan.order[0].descending:
        return None
    slot = plan.slot_of(plan.order[0].expr)
    spec = plan.spec(slot) if slot is not None else None
    if spec is None or spec.kind != "BM25" or spec.min is not None:
        return None
    floors: list[tuple[str, str, float]] = []
    for c in _conditions(plan, plan.residual):
        cond = c if isinstance(c, ScoreCondition) else None
        if cond is None or cond.op not in (">", ">=") or cond.slot != spec.slot:
            return None
        if not _HOLDS_AT_ZERO[cond.op](cond.value) and (cond.slot, cond.op, cond.value) not in floors:
            floors.append((cond.slot, cond.op, cond.value))
    return tuple(floors)


def _zero_fails_all(plan: Plan) -> bool:
    """Every condition after fusion compares the first sort key's fusion score with a number and fails
    at 0, the value of a row no arm ranks (``score > 0``): such rows are never on the page, so pruning
    to the rows the arms rank stays exact, and the engine applies the conditions after fusion."""
    if not plan.order:
        return False
    slot = plan.slot_of(plan.order[0].expr)
    spec = plan.spec(slot) if slot is not None else None
    if spec is None or spec.kind not in FUSION_FUNCTIONS:
        return False
    for c in plan.fusion_residual:
        cond = plan.score_condition(c)
        if cond is None or cond.slot != slot or _HOLDS_AT_ZERO[cond.op](cond.value):
            return False
    return True


def _floors(plan: Plan) -> tuple[tuple[str, str, float], ...] | None:
    """The BM25 floors of WHERE (see the module), or None when a residual conjunct is something else
    than a similarity threshold (applied inside recall), a floor, or a lower bound on the first sort key
    when that key is one BM25 score ordered descending (``kw > 0``, ``kw >= 2.5``: the rows passing a
    lower bound on the sort key come first in its order, so the page is among the rows the *bm25* prune
    keeps). The engine still applies every conjunct to the rows it builds (``min =>`` scores are NULL
    below their minimum: no floor)."""
    key = None
    if plan.order and plan.order[0].descending:
        slot = plan.slot_of(plan.order[0].expr)
        spec = plan.spec(slot) if slot is not None else None
        if spec is not None and spec.kind == "BM25" and spec.min is None:
            key = spec.slot
    floors: list[tuple[str, str, float]] = []
    for c in _conditions(plan, plan.residual):
        cond = c if isinstance(c, ScoreCondition) else None
        if cond is None or cond.op not in (">", ">="):
            return None
        arm = plan.spec(cond.slot)
        if arm is None:
            return None
        if arm.kind == "SIMILARITY":
            # a similarity threshold: the rows below it are left out inside recall (plan.recall.min_score,
            # the largest such bound), before any arm ranks; one found only through a binding is not
            least = plan.recall.min_score.get(cond.slot)
            if least is None or cond.value > least:
                return None
            continue
        if arm.kind != "BM25" or arm.min is not None:
            return None
        if not _HOLDS_AT_ZERO[cond.op](cond.value):
            if (cond.slot, cond.op, cond.value) not in floors:
                floors.append((cond.slot, cond.op, cond.value))
        elif cond.slot != key:
            # holds at 0, so for every row: no floor; on the sort key the bm25 path needs none (as
            # before), elsewhere the query runs row by row
            return None
    return tuple(floors)


def _conditions(plan: Plan, exprs: list[ir.Expr]) -> list[ScoreCondition | ir.Expr]:
    """Each conjunct as a :class:`ScoreCondition` where it is one, bindings followed (``WHERE ok`` with
    ``LET ok = kw > 0``; ``kw2 > t`` with ``LET kw2 = kw, t = 1.5``), else the conjunct itself."""
    out: list[ScoreCondition | ir.Expr] = []
    stack = list(reversed(exprs))
    depth = 0
    while stack:
        c = stack.pop()
        cond = plan.score_condition(c)
        if cond is None and isinstance(c, ir.Compare):
            left, right = _deref(plan, c.left), _deref(plan, c.right)
            if left is not c.left or right is not c.right:
                cond = plan.score_condition(replace(c, left=left, right=right))
                cond = None if cond is None else replace(cond, expr=c)
        if cond is not None:
            out.append(cond)
            continue
        if isinstance(c, ir.Ref) and depth < _MAX_DEPTH:
            b = plan.query.binding(c.name)
            if b is not None:
                depth += 1
                stack.extend(reversed(ir.conjuncts(b.expr)))
                continue
        if isinstance(c, ir.Binary) and c.op == "AND" and depth < _MAX_DEPTH:
            depth += 1
            stack.extend(reversed(ir.conjuncts(c)))
            continue
        out.append(c)
    return out


def _deref(plan: Plan, expr: ir.Expr) -> ir.Expr:
    """``expr`` with bindings followed until it is a score slot or no binding (the same object when
    nothing was followed)."""
    for _ in range(_MAX_DEPTH):
        if not isinstance(expr, ir.Ref) or plan.slot_of(expr) is not None:
            return expr
        b = plan.query.binding(expr.name)
        if b is None:
            return expr
        expr = b.expr
    return expr


def _set(plan: Plan, path: FastPath) -> Plan:
    return replace(plan, fast_path=path, fast_path_reason="")


def _used(bm25_texts: tuple[tuple[str, str], ...], slots: list[str]) -> tuple[tuple[str, str], ...]:
    return tuple((s, t) for s, t in bm25_texts if s in slots)


def score_formula(plan: Plan, expr: ir.Expr, depth: int = 0) -> Formula | None:
    """An expression of numbers, ``+ - * /`` and SIMILARITY/BM25 scores (bindings followed) as a
    :class:`~nlql.pushdown.Formula`, or None if it is anything else."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, ir.Literal):
        v = expr.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        return Formula("num", float(v))
    slot = plan.slot_of(expr)
    if slot is not None:
        spec: ScoreSpec | None = plan.spec(slot)
        return Formula("slot", slot) if spec is not None and spec.kind in TEXT_SCORES else None
    if isinstance(expr, ir.Ref):
        b = plan.query.binding(expr.name)
        return None if b is None else score_formula(plan, b.expr, depth + 1)
    if isinstance(expr, ir.Unary) and expr.op == "-":
        inner = score_formula(plan, expr.operand, depth + 1)
        return None if inner is None else Formula("neg", args=(inner,))
    if isinstance(expr, ir.Binary) and expr.op in ("+", "-", "*", "/"):
        a = score_formula(plan, expr.left, depth + 1)
        b2 = score_formula(plan, expr.right, depth + 1)
        return None if a is None or b2 is None else Formula(expr.op, args=(a, b2))
    return None
