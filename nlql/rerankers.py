"""Rerankers: score (query, passage) pairs after recall (SPEC §6 "Rerank").

A reranker is any object with ``score(query, passages) -> Sequence[float]``, one score per passage,
higher meaning more relevant (SPEC §7). The engine stores the scores in ``hit.scores["rerank"]``.

* :class:`CrossEncoderReranker` — a sentence-transformers ``CrossEncoder``, loaded lazily.
* :class:`FakeReranker` — deterministic word overlap (or any function), for tests.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from nlql.embedders import _quiet_loading, _require_sentence_transformers, _use_offline_hub
from nlql.errors import MissingDependencyError

__all__ = ["CrossEncoderReranker", "FakeReranker", "Reranker"]

_WORD_RE = re.compile(r"\w+")


@runtime_checkable
class Reranker(Protocol):
    """What the engine needs from a reranker: one float per passage, higher is better."""

    def score(self, query: str, passages: Sequence[str]) -> Sequence[float]:
        """Score each passage against ``query``."""
        ...


def _check_passages(passages: Sequence[str]) -> list[str]:
    if isinstance(passages, str):
        raise TypeError("score() takes a sequence of passages, not a single str")
    return list(passages)


class CrossEncoderReranker:
    """A sentence-transformers cross-encoder (e.g. a local copy of ``ms-marco-MiniLM-L-6-v2``).

    The model is loaded on the first ``score()`` (thread-safe); a local path loads offline. Scores
    are whatever the model outputs with its own default activation (raw logits for most rerankers,
    a sigmoid for some): only their order matters to the engine. No cross-encoder ships with NLQL's
    dependencies, so ``model`` has no default.

    Args:
        model: A local path or hub name, or an already built ``sentence_transformers.CrossEncoder``.
        batch_size: Pairs per forward pass.
        device: Torch device, ``"cpu"`` by default.
        max_length: Truncate each (query, passage) pair to this many tokens (model default if None).
        name: Overrides ``name`` (shown in explain).

    Raises:
        MissingDependencyError: sentence-transformers is not installed.
    """

    def __init__(
        self,
        model: Any,
        batch_size: int = 32,
        device: str = "cpu",
        *,
        max_length: int | None = None,
        name: str | None = None,
    ) -> None:
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)
        self.device = device
        self.max_length = max_length
        self._lock = threading.Lock()
        self._predict_lock = threading.Lock()  # HF fast tokenizers must not be shared across threads
        if isinstance(model, (str, os.PathLike)):
            _require_sentence_transformers()
            self._source: str | None = os.fspath(model)
            self._model: Any = None
            self.name = name or self._source
        else:
            self._source = None
            self._model = model
            self.name = name or type(model).__name__

    def __repr__(self) -> str:
        return f"CrossEncoderReranker(name={self.name!r}, device={self.device!r})"

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded."""
        return self._model is not None

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        with self._lock:
            if self._model is None:
                assert self._source is not None
                local = _use_offline_hub(self._source)
                try:
                    from sentence_transformers import CrossEncoder
                except ImportError:
                    raise MissingDependencyError("st", "sentence-transformers") from None
                with _quiet_loading():
                    self._model = CrossEncoder(
                        self._source, device=self.device, max_length=self.max_length, local_files_only=local
                    )
        return self._model

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """One relevance score per passage, in the order given.

        Raises:
            ValueError: The model has more than one output label (it is a classifier, not a reranker).
        """
        items = _check_passages(passages)
        if not items:
            return []
        model = self._load()
        with self._predict_lock:
            scores = model.predict(
                [(query, p) for p in items],
                batch_size=self.batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
            )
        if getattr(scores, "ndim", 1) != 1:
            raise ValueError(f"cross-encoder returned shape {scores.shape}; a reranker needs one label")
        return [float(s) for s in scores]


class FakeReranker:
    """A deterministic reranker for tests and examples.

    By default a passage scores the number of *distinct* query words (lowercased unicode ``\\w+``)
    that occur as words in it, as a float: ``score("red kite", ["a red kite", "red"]) == [2.0, 1.0]``.
    It breaks no ties: equal scores keep the engine's order (the sort is stable). With ``fn``, each
    passage scores ``float(fn(query, passage))`` instead.

    Every call is recorded in ``calls`` as ``(query, number of passages)``.

    >>> FakeReranker().score("Red kite", ["a red kite flies", "red", "nothing here"])
    [2.0, 1.0, 0.0]
    >>> FakeReranker(lambda q, p: -len(p)).score("q", ["ab", "a"])
    [-2.0, -1.0]
    """

    name = "fake"

    def __init__(self, fn: Callable[[str, str], float] | None = None) -> None:
        self.fn = fn
        self.calls: list[tuple[str, int]] = []

    def __repr__(self) -> str:
        return "FakeReranker()" if self.fn is None else f"FakeReranker({self.fn!r})"

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """One score per passage, in the order given."""
        items = _check_passages(passages)
        self.calls.append((query, len(items)))
        if self.fn is not None:
            fn = self.fn
            return [float(fn(query, p)) for p in items]
        terms = set(_WORD_RE.findall(query.lower()))
        return [float(len(terms.intersection(_WORD_RE.findall(p.lower())))) for p in items]
