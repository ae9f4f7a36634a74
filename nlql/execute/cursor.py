"""Cursors (SPEC §11): ``hits.cursor`` continues a query after the last row of a page, in the same order.

A cursor is an opaque string holding what the next page needs and nothing of the data:

- the query's identity: a hash of its canonical text without LIMIT and OFFSET, the parameter values it
  reads and the store's identity (a random id the store keeps in its info table, made on first use:
  a store whose data was dropped and made again has a new one), so a cursor of another query text or
  store, or of data since dropped, is a :class:`~nlql.errors.CursorError`, never a wrong page;
- the last row's position: the comparison key of each ORDER BY value (as :func:`nlql.execute.order.order`
  sorts: nulls ranked, :func:`nlql.values.sort_key`) and its tie-break (insertion order: ``seq``,
  ``position``);
- the rows passed: a 64-bit digest of each unit id up to and including the last row (in the order of
  that page), and the store's highest ``seq`` then;
- the fusions' default window depth of the first page (``max(100, 10 × (LIMIT + OFFSET))``), which every
  later page keeps, so a fusion ranks the same arms the same way on every page.

The next page is the first LIMIT rows of the query (the same ORDER BY and tie-break) that were not
passed and either lie strictly after the last row by its keys and tie-break, or already existed when
the cursor was made (``seq`` at most the store's highest then). Without writes in between this is
exactly "strictly after the last row"; with writes, a row that did not change is never repeated (its
digest is in the cursor) and never skipped, even when a write moved it across the last row (BM25's
statistics and fusion ranks read the whole corpus): it comes on the next page. A row written since
(a new ``seq``) comes only when it sorts after the last row.

The engine runs a cursor page as the query with LIMIT = rows passed + LIMIT + 1 (OFFSET left out, the
fusion windows pinned); when the rows after the cursor do not fill the page and the result was cut at
that LIMIT, it widens ×4 (the top-k guarantee of SPEC §6 holds for every LIMIT, so the rows read are
always the true first ones).
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from nlql import ir
from nlql import values as V
from nlql.errors import CursorError
from nlql.evaluate import compile_expr
from nlql.execute.candidates import Candidate, Search
from nlql.plan.nodes import ARM_DEPTH_FACTOR, ARM_DEPTH_MIN, FUSION_FUNCTIONS
from nlql.plan.rewrite import rewrite
from nlql.render import render

__all__ = ["PREFIX", "PageEnd", "Paging", "Position", "cursor_page", "decode", "encode", "first_cursor",
           "pinned_query", "query_identity", "store_identity"]

#: What every cursor string starts with (and its format version).
PREFIX = "nlqlc1."
#: The store info key holding the store's identity.
STORE_ID_KEY = "cursor_store_id"
#: Bytes per passed-row digest.
DIGEST = 8

_HINT = "pass the cursor to the same query text (LIMIT may change) on the same store, or start again without one"


@dataclass(frozen=True)
class Position:
    """Where a page ended (see the module docstring)."""

    ident: str                      # the query's identity (query_identity)
    store: str                      # the store's identity (store_identity)
    keys: tuple[Any, ...]
    tie: tuple[int, int]
    passed: frozenset[bytes]
    max_seq: int
    depth: int | None


# ------------------------------------------------------------------------------------------ identity


def store_identity(store: Any) -> str:
    """The store's identity for cursors: a random id kept in the store's info table (made on first use).

    A store that cannot keep one (read-only, or its info table fails) is named by its class and kind.
    """
    try:
        got = store.get_info(STORE_ID_KEY)
        if got:
            return str(got)
        made = uuid.uuid4().hex
        store.set_info(STORE_ID_KEY, made)
        again = store.get_info(STORE_ID_KEY)  # another process may have set it first
        return str(again or made)
    except Exception:  # noqa: BLE001 - an identity of last resort; cursors then only check the query
        return f"{type(store).__name__}:{store.capabilities.NAME}"


def _without_page(query: ir.Query) -> ir.Query:
    return replace(query, limit=None, offset=None)


def query_identity(query: ir.Query, params: Mapping[str, Any] | None = None) -> str:
    """A hash of the query without LIMIT/OFFSET and the parameter values it then reads."""
    body = _without_page(query)
    used = {n.name for n in body.walk() if isinstance(n, ir.Param)}
    values = {k.lstrip("$"): v for k, v in (params or {}).items() if k.lstrip("$") in used}
    text = json.dumps([render(body), sorted((k, repr(v)) for k, v in values.items())],
                      ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def default_depth(limit: int | None, offset: int) -> int | None:
    """The fusions' default window depth for a page of ``limit`` after ``offset`` (as the planner)."""
    return None if limit is None else max(ARM_DEPTH_MIN, ARM_DEPTH_FACTOR * (limit + offset))


def pinned_query(query: ir.Query, limit: int | None, depth: int | None) -> ir.Query:
    """``query`` with LIMIT ``limit``, no OFFSET, and every fusion without ``window =>`` given ``depth``."""
    def pin(node: ir.Node) -> ir.Node | None:
        if (isinstance(node, ir.Call) and node.name in FUSION_FUNCTIONS and node.name != "MMR"
                and depth is not None and all(k != "window" for k, _ in node.kwargs)):
            return replace(node, kwargs=(*node.kwargs, ("window", ir.Literal(depth))))
        return None

    out = replace(query, limit=None if limit is None else ir.Literal(limit), offset=None)
    return replace(out, bindings=rewrite(out.bindings, pin), where=rewrite(out.where, pin),
                   order_by=rewrite(out.order_by, pin))


def used_params(query: ir.Query, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parameters ``query`` still reads (a LIMIT/OFFSET parameter is gone from a pinned query)."""
    used = {n.name for n in query.walk() if isinstance(n, ir.Param)}
    return {k: v for k, v in (params or {}).items() if k.lstrip("$") in used}


# ------------------------------------------------------------------------------------------ encoding


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def encode(pos: Position) -> str:
    """The cursor string of a position."""
    data = {"q": pos.ident, "s": pos.store, "k": pos.keys, "t": list(pos.tie), "m": pos.max_seq, "d": pos.depth,
            "p": base64.b64encode(b"".join(sorted(pos.passed))).decode("ascii")}
    raw = zlib.compress(json.dumps(data, separators=(",", ":")).encode("utf-8"))
    return PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode(text: Any) -> Position:
    """The position a cursor string holds (:class:`CursorError` for anything else)."""
    if not isinstance(text, str) or not text.startswith(PREFIX):
        raise CursorError("not a cursor of this engine: pass the hits.cursor string of an earlier page "
                          "unchanged", hint=_HINT)
    body = text[len(PREFIX):]
    try:
        data = json.loads(zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))
        packed = base64.b64decode(data["p"])
        passed = frozenset(packed[i:i + DIGEST] for i in range(0, len(packed), DIGEST))
        tie = tuple(int(x) for x in data["t"])
        return Position(str(data["q"]), str(data["s"]), _tuples(list(data["k"])), (tie[0], tie[1]), passed, int(data["m"]),
                        None if data["d"] is None else int(data["d"]))
    except Exception as exc:  # noqa: BLE001 - any damage to the string
        raise CursorError("the cursor is damaged (not a cursor this engine made)", hint=_HINT) from exc


# ------------------------------------------------------------------------------------------ rows


def _unit_id(run: Search, u: Candidate) -> str:
    return u.ctx.doc_id if run.plan.unit.kind == "DOCUMENT" else u.ctx.id


def digest(unit_id: str) -> bytes:
    return hashlib.blake2b(unit_id.encode("utf-8"), digest_size=DIGEST).digest()


def _key_fns(run: Search) -> list[Any]:
    fns = run.order_fns
    if fns is None:
        fns = run.extra.get("cursor_order_fns")
        if fns is None:
            fns = run.extra["cursor_order_fns"] = [compile_expr(o.expr, run.env) for o in run.plan.order]
    return fns


def keys_of(run: Search, u: Candidate) -> tuple[Any, ...]:
    """The row's comparison key per ORDER BY key (what :func:`nlql.execute.order.order` sorts by)."""
    out = []
    for spec, fn in zip(run.plan.order, _key_fns(run), strict=True):
        v = fn(u.ctx)
        if V.is_null(v):
            nr = (2 if spec.nulls_first else 0) if spec.descending else (0 if spec.nulls_first else 2)
            out.append((nr, (0, 0)))
        else:
            out.append((1, V.sort_key(v)))
    return tuple(out)


def _later(run: Search, keys: tuple[Any, ...], tie: tuple[int, int], pos: Position) -> bool:
    """Whether a row with ``keys``/``tie`` sorts strictly after the cursor's row."""
    for spec, a, b in zip(run.plan.order, keys, pos.keys, strict=True):
        if a == b:
            continue
        try:
            return (a > b) != spec.descending
        except TypeError:  # (values of kinds that never meet in one sort; kept apart by their tags)
            return (repr(a) > repr(b)) != spec.descending
    return tie > pos.tie


def after(run: Search, units: Sequence[Candidate], pos: Position) -> list[Candidate]:
    """The rows a cursor page may return, in order (see the module docstring)."""
    if len(pos.keys) != len(run.plan.order):
        raise CursorError("the cursor was made for another ORDER BY", hint=_HINT)
    out = []
    for u in units:
        if digest(_unit_id(run, u)) in pos.passed:
            continue
        if u.ctx.seq <= pos.max_seq or _later(run, keys_of(run, u), (u.ctx.seq, u.ctx.position), pos):
            out.append(u)
    return out


def position(run: Search, passed: Sequence[Candidate], paging: Paging,
             before: frozenset[bytes] = frozenset()) -> Position:
    """The position after the last of ``passed`` (every row up to it in this page's order)."""
    last = passed[-1]
    digests = set(before)
    digests.update(digest(_unit_id(run, u)) for u in passed)
    return Position(paging.ident, paging.store, keys_of(run, last), (last.ctx.seq, last.ctx.position),
                    frozenset(digests), paging.max_seq, paging.depth)


# ------------------------------------------------------------------------------------------ pages


@dataclass(frozen=True)
class Paging:
    """What the executor needs to cut a page and say where it ended: the query's identity, the store's
    highest ``seq`` before the search, the fusions' pinned depth, the page size, and the cursor given
    (None: a first page, cut by OFFSET/LIMIT as usual)."""

    ident: str
    store: str
    max_seq: int
    depth: int | None
    limit: int | None
    cursor: Position | None = None


class PageEnd:
    """Where a page ended: the position after its last row (None: no row), and whether rows follow
    (None: not known without reading further: a first page cut exactly at the rows recall read, or a
    cursor page whose rows after the cursor were cut short, which the engine widens).

    ``position`` may be given as a function making it, called when it is first read: a first page's
    position (a digest per row passed, the last row's ORDER BY keys) is needed only when its
    ``hits.cursor`` is read, and most searches never read it."""

    __slots__ = ("_make", "_position", "more")

    def __init__(self, position: Position | None | Callable[[], Position], more: bool | None) -> None:
        self._make = position if callable(position) else None
        self._position = None if callable(position) else position
        self.more = more

    @property
    def position(self) -> Position | None:
        make = self._make
        if make is not None:  # (two threads reading at once both make it: the same value)
            self._position = make()
            self._make = None
        return self._position

    @property
    def placed(self) -> bool:
        """Whether there is a position (``position is not None``), without making it."""
        return self._make is not None or self._position is not None

    def __repr__(self) -> str:
        return f"PageEnd(position={self.position!r}, more={self.more!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PageEnd):
            return NotImplemented
        return (self.position, self.more) == (other.position, other.more)

    __hash__ = None  # type: ignore[assignment]  # (mutable: the position is made when first read)


def first_cursor(run: Search, units: list[Candidate], page: list[Candidate], paging: Paging) -> PageEnd:
    """The end of a first page (OFFSET/LIMIT applied as usual to ``units``, every row in order)."""
    plan = run.plan
    if plan.limit is None or not page:
        return PageEnd(None, False)
    upto = plan.offset + len(page)
    if len(page) < plan.limit:
        more: bool | None = False
    elif len(units) > upto:
        more = True
    else:
        more = None  # exactly the rows recall was asked for: the engine looks further only if asked
    passed = units[:upto]
    return PageEnd(lambda: position(run, passed, paging), more)


def cursor_page(run: Search, units: list[Candidate], paging: Paging) -> tuple[list[Candidate], PageEnd]:
    """The page after a cursor among ``units`` (the query's first LIMIT rows, LIMIT = the plan's)."""
    pos = paging.cursor
    assert pos is not None
    need = run.plan.limit
    complete = need is None or len(units) < need
    valid = units if complete else units[:need]
    later = after(run, valid, pos)
    size = paging.limit
    page = later if size is None else later[:size]
    if size is not None and len(later) > size:
        more: bool | None = True
    elif complete:
        more = False
    else:
        more = None  # cut short by LIMIT: the engine widens
    if not page:
        return page, PageEnd(None, more)
    last = page[-1]
    at = next(i for i in range(len(valid) - 1, -1, -1) if valid[i] is last)
    return page, PageEnd(position(run, valid[:at + 1], paging, before=pos.passed), more)
