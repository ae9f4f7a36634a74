"""Search results: new objects every time, never the stored ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Hit:
    """One result row of the selected unit."""

    id: str
    doc_id: str
    unit: str
    position: int
    content: str
    metadata: dict[str, Any]
    scores: dict[str, float | None]
    truncated: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "doc_id": self.doc_id, "unit": self.unit, "position": self.position,
            "content": self.content, "metadata": self.metadata, "scores": self.scores,
            **({"truncated": True} if self.truncated else {}),
        }


class Hits(list[Hit]):
    """A list of :class:`Hit` with ``stats`` (timings per stage, candidate counts, rounds) and ``warnings``;
    ``route`` is the :class:`~nlql.route.Route` that ``engine.ask`` ran (None for ``search``)."""

    def __init__(self, hits: list[Hit] | None = None, stats: dict[str, Any] | None = None,
                 warnings: list[str] | None = None) -> None:
        super().__init__(hits or [])
        self.stats: dict[str, Any] = stats or {}
        self.warnings: list[str] = warnings or []
        self.route: Any = None

    def to_dict(self) -> dict[str, Any]:
        out = {"hits": [h.to_dict() for h in self], "stats": self.stats, "warnings": self.warnings}
        if self.route is not None:
            out["route"] = self.route.to_dict()
        return out


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
