"""Search results: new objects every time, never the stored ones."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from nlql.ir import GROUPED_UNITS

#: How much of a hit's content a repr shows, and how many hits a ``Hits`` repr lists.
REPR_CONTENT_CHARS = 80
REPR_ROWS = 10


@dataclass
class Best:
    """The sentence that scored a DOCUMENT or CHUNK hit: its position in the document, its text, and
    the score bindings evaluated on that sentence alone."""

    position: int
    content: str
    scores: dict[str, float | None]

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position, "content": self.content, "scores": dict(self.scores)}

    def __repr__(self) -> str:
        scores = ", ".join(f"{k}={_fmt(v)}" for k, v in self.scores.items())
        return f"Best(position={self.position}, {'scores ' + scores + ', ' if scores else ''}" \
               f"content={_short(self.content, REPR_CONTENT_CHARS)!r})"


#: Units whose hits group sentences and so carry ``best`` (None when nothing scored them).


@dataclass
class Hit:
    """One result row of the selected unit. ``best``: for DOCUMENT and CHUNK hits, the sentence that
    scored the row (:class:`Best`), None when nothing scored it (no SIMILARITY/BM25 in the query, or
    no sentence has a score); None for SENTENCE and SPAN hits."""

    id: str
    doc_id: str
    unit: str
    position: int
    content: str
    metadata: dict[str, Any]
    scores: dict[str, float | None]
    truncated: bool = False
    best: Best | None = None
    group: dict[str, Any] | None = None  # SELECT COUNT(unit) BY …: {key text: value} of this group
    count: int | None = None             # SELECT COUNT(unit) …: rows in this group (or in all, without BY)
    # HIGHLIGHT bindings: name -> [start, end) ranges of the unit's content (None: the query has none)
    highlights: dict[str, list[list[int]]] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "id": self.id, "doc_id": self.doc_id, "unit": self.unit, "position": self.position,
            "content": self.content, "metadata": self.metadata, "scores": self.scores,
            **({"truncated": True} if self.truncated else {}),
            **({"highlights": self.highlights} if self.highlights is not None else {}),
        }
        if self.best is not None or (self.unit in GROUPED_UNITS and self.count is None):
            out["best"] = self.best.to_dict() if self.best is not None else None
        if self.count is not None:
            out["group"] = self.group if self.group is not None else {}
            out["count"] = self.count
        return out

    def __repr__(self) -> str:
        if self.count is not None:
            return f"Hit(COUNT({self.unit}), group={self.group!r}, count={self.count})"
        scores = ", ".join(f"{k}={_fmt(v)}" for k, v in self.scores.items())
        return (f"Hit({self.id!r}, {self.unit}, {'scores ' + scores + ', ' if scores else ''}"
                f"content={_short(self.content, REPR_CONTENT_CHARS)!r})")


class Hits(list[Hit]):
    """A list of :class:`Hit` with ``stats`` (timings per stage, candidate counts, rounds) and ``warnings``;
    ``route`` is the :class:`~nlql.route.Route` that ``engine.ask`` ran (None for ``search``)."""

    def __init__(self, hits: list[Hit] | None = None, stats: dict[str, Any] | None = None,
                 warnings: list[str] | None = None) -> None:
        super().__init__(hits or [])
        self.stats: dict[str, Any] = stats or {}
        self.warnings: list[str] = warnings or []
        self.route: Any = None
        # the table layout of the query (nlql.execute.frames.Layout, or a function making one): the
        # columns and types of to_pandas/to_arrow/to_polars, from the query and the store's schema
        self.frame: Any = None
        self.page_end: Any = None  # where the page ended (nlql.execute.cursor.PageEnd), for the cursor
        self.query_vectors: Any = None  # the search's query vectors, kept only while a cursor probe may read them
        self._cursor: str | None = None
        self._cursor_probe: Any = None  # () -> str | None, run once when the cursor is first read

    @property
    def cursor(self) -> str | None:
        """An opaque string that continues this query after the last row of this page
        (``engine.search(query, params, cursor=hits.cursor)``); None on the last page (SPEC §11)."""
        probe = self._cursor_probe
        if probe is not None:
            self._cursor_probe = None
            self._cursor = probe()
        return self._cursor

    @cursor.setter
    def cursor(self, value: str | None) -> None:
        self._cursor_probe = None
        self._cursor = value

    def to_dict(self) -> dict[str, Any]:
        out = {"hits": [h.to_dict() for h in self], "stats": self.stats, "warnings": self.warnings}
        if self.route is not None:
            out["route"] = self.route.to_dict()
        return out

    # ------------------------------------------------------------------------------ tables

    def to_pandas(self) -> Any:
        """A ``pandas.DataFrame``, one row per hit (columns: :mod:`nlql.execute.frames`).

        Raises:
            MissingDependencyError: pandas is not installed (``pip install 'nlql-engine[frames]'``).
        """
        from nlql.execute.frames import to_pandas

        return to_pandas(self)

    def to_arrow(self) -> Any:
        """A ``pyarrow.Table``, one row per hit (columns: :mod:`nlql.execute.frames`).

        Raises:
            MissingDependencyError: pyarrow is not installed (``pip install 'nlql-engine[frames]'``).
        """
        from nlql.execute.frames import to_arrow

        return to_arrow(self)

    def to_polars(self) -> Any:
        """A ``polars.DataFrame``, one row per hit (columns: :mod:`nlql.execute.frames`).

        Raises:
            MissingDependencyError: polars is not installed (``pip install 'nlql-engine[frames]'``).
        """
        from nlql.execute.frames import to_polars

        return to_polars(self)

    def __repr__(self) -> str:
        n = len(self)
        head = f"<Hits: {n} row{'s' if n != 1 else ''}{_timing(self.stats)}>"
        if not n:
            return head + (f"\nwarnings: {'; '.join(self.warnings)}" if self.warnings else "")
        shown = list(self[:REPR_ROWS])
        keys = _score_keys(shown)
        if any(h.count is not None for h in shown):  # SELECT COUNT(unit) BY …: the count, then the group
            table = [["#", "count", "group"]]
            table += [[str(i), str(h.count), _short(h.content, REPR_CONTENT_CHARS)]
                      for i, h in enumerate(shown, start=1)]
        else:
            table = [["#", "id", *keys, "content"]]
            table += [[str(i), h.id, *(_fmt(h.scores.get(k)) for k in keys), _short(h.content, REPR_CONTENT_CHARS)]
                      for i, h in enumerate(shown, start=1)]
        widths = [max(len(r[c]) for r in table) for c in range(len(table[0]) - 1)]
        lines = [head]
        for r in table:
            # rank and scores right-aligned (numbers), id left-aligned; content last, unpadded
            cells = [cell.ljust(w) if c == 1 else cell.rjust(w) for c, (cell, w) in enumerate(zip(r, widths))]
            lines.append("  ".join([*cells, r[-1]]))
        if n > REPR_ROWS:
            lines.append(f"… {n - REPR_ROWS} more")
        lines.extend(f"warning: {w}" for w in self.warnings)
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """An HTML table for notebooks: rank, id, doc_id, unit, scores, content, metadata."""
        keys = _score_keys(self)
        n = len(self)
        esc = html.escape
        parts = [f"<div><p><b>Hits</b>: {n} row{'s' if n != 1 else ''}{esc(_timing(self.stats))}</p>"]
        for w in self.warnings:
            parts.append(f"<p><b>warning</b>: {esc(w)}</p>")
        if n:
            head = "".join(f"<th>{esc(c)}</th>" for c in ["#", "id", "doc_id", "unit", *keys, "content",
                                                           "metadata"])
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>")
            for i, h in enumerate(self, start=1):
                cells = [str(i), h.id, h.doc_id, h.unit, *(_fmt(h.scores.get(k)) for k in keys)]
                row = "".join(f"<td>{esc(c)}</td>" for c in cells)
                content = esc(_short(h.content, 500)) + (" <i>[truncated]</i>" if h.truncated else "")
                meta = esc(", ".join(f"{k}={_fmt(v)}" for k, v in h.metadata.items()))
                parts.append(f"<tr>{row}<td style=\"text-align:left\">{content}</td>"
                             f"<td style=\"text-align:left\">{meta}</td></tr>")
            parts.append("</tbody></table>")
        parts.append("</div>")
        return "".join(parts)


@dataclass
class Stats:
    """Accumulates per-stage timings (ms) and counts during one search."""

    timings: dict[str, float] = field(default_factory=dict)
    counts: dict[str, Any] = field(default_factory=dict)

    def add(self, stage: str, ms: float) -> None:
        self.timings[stage] = self.timings.get(stage, 0.0) + ms

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"timings_ms": {k: round(v, 3) for k, v in self.timings.items()}}
        out.update(self.counts)
        return out


# ------------------------------------------------------------------------------ repr helpers


def _fmt(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 1e4 else f"{value:.4g}"
    return str(value)


def _short(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _timing(stats: dict[str, Any]) -> str:
    timings = stats.get("timings_ms") if isinstance(stats, dict) else None
    if not isinstance(timings, dict) or not timings:
        return ""
    try:
        return f" in {sum(float(v) for v in timings.values()):.1f} ms"
    except (TypeError, ValueError):
        return ""


def _score_keys(hits: list[Hit]) -> list[str]:
    keys: dict[str, None] = {}
    for h in hits:
        keys.update(dict.fromkeys(h.scores))
    return list(keys)
