"""What a store records about what built it: its embedder and its BM25 analyzer (issue 17).

One store holds one vector space: vectors of two embedders have unrelated coordinates, and their
similarities mean nothing. So the engine writes, through the store's small key/value record
(:meth:`~nlql.stores.base.Store.get_info` / ``set_info``), which embedder (model id, dimension,
normalisation) and which analyzer fill a store, right when the store is opened — before the first
vector is written. Opening it again with another embedder is a :class:`~nlql.errors.StoreMismatchError`
naming both; a store with no record (made by an older version) adopts the first engine that opens
it. A store object without ``get_info``/``set_info`` (a user's own) is used as before, unchecked.

Values are JSON objects: ``{"model": …, "dim": …, "normalization": "l2"}`` under ``"embedder"`` and
the analyzer's ``config()`` under ``"analyzer"``.
"""

from __future__ import annotations

import json
from typing import Any

from nlql.errors import NLQLError, StoreMismatchError
from nlql.text.analyzer import Analyzer

__all__ = ["ANALYZER", "EMBEDDER", "adopt", "check_embedder", "describe_embedder", "read", "resolve_analyzer",
           "supports_record"]

EMBEDDER = "embedder"
ANALYZER = "analyzer"

REEMBED_HINT = ("open it with the embedder that built it, or re-embed: ingest the same documents into a "
                "new store with the new embedder")


def supports_record(store: Any) -> bool:
    """Whether the store keeps a record (has callable ``get_info`` and ``set_info``)."""
    return callable(getattr(store, "get_info", None)) and callable(getattr(store, "set_info", None))


def read(store: Any, key: str) -> dict[str, Any] | None:
    """The JSON object recorded under ``key``, or None (nothing recorded, or no record kept)."""
    if not supports_record(store):
        return None
    raw = store.get_info(key)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        raise NLQLError(f"the store's record of its {key} is not JSON: {raw[:80]!r}") from None
    return value if isinstance(value, dict) else None


def _write(store: Any, key: str, value: dict[str, Any]) -> None:
    store.set_info(key, json.dumps(value, sort_keys=True, ensure_ascii=False))


def describe_embedder(record: dict[str, Any]) -> str:
    """``'hash-384' (384 dims)``."""
    return f"{str(record.get('model'))!r} ({record.get('dim')} dims)"


def check_embedder(store: Any, wanted: dict[str, Any], hint: str | None = None) -> bool:
    """Raise :class:`StoreMismatchError` when the store records another embedder; True if it records one."""
    got = read(store, EMBEDDER)
    if got is None:
        return False
    try:
        same_dim = int(got.get("dim", -1)) == int(wanted["dim"])
    except (TypeError, ValueError):
        same_dim = False
    if got.get("model") != wanted["model"] or not same_dim:
        raise StoreMismatchError("embedder", describe_embedder(got), describe_embedder(wanted),
                                 hint=hint or REEMBED_HINT)
    return True


def as_analyzer(value: Any) -> Analyzer:
    """An :class:`Analyzer` from an analyzer, a preset name (``"english"``, ``"plain"``, a Snowball
    language) or a ``config()`` dict."""
    if isinstance(value, Analyzer):
        return value
    if isinstance(value, str):
        return Analyzer.named(value)
    if isinstance(value, dict):
        return Analyzer.from_config(value)
    raise TypeError(f"analyzer must be an Analyzer, a preset name or a config dict, not {type(value).__name__}")


def resolve_analyzer(store: Any, given: Any = None) -> Analyzer:
    """The engine's analyzer: ``given``, else the one the store records, else the store's own
    (a native-BM25 store's ``analyzer``), else the default English one.

    Raises:
        StoreMismatchError: ``given`` differs from the analyzer the store records.
    """
    got = read(store, ANALYZER)
    recorded: Analyzer | None = None
    if got is not None:
        try:
            recorded = Analyzer.from_config(got)
        except (ValueError, ImportError) as exc:
            raise NLQLError(f"the store's BM25 analyzer cannot be rebuilt here: {exc}",
                            hint="pip install snowballstemmer (or 'nlql-engine[stem]' for PyStemmer)") from None
    if given is None:
        if recorded is not None:
            return recorded
        own = getattr(store, "analyzer", None)
        return own if isinstance(own, Analyzer) else Analyzer()
    analyzer = as_analyzer(given)
    if recorded is not None and recorded != analyzer and recorded == analyzer.generation_of(recorded):
        # a store written before Unicode words or script stemmers: the same analyzer otherwise, and its
        # terms were made with what it records, so its questions must be read the same way
        return recorded
    if recorded is not None and recorded != analyzer:
        raise StoreMismatchError("BM25 analyzer", recorded.describe(), analyzer.describe(),
                                 hint="omit the analyzer to use the store's own, or ingest into a new store")
    return analyzer


def adopt(store: Any, embedder: dict[str, Any], analyzer: Analyzer) -> None:
    """Record the embedder and the analyzer where nothing is recorded yet (checking the embedder again:
    some stores only answer once opened)."""
    if not supports_record(store):
        return
    if not check_embedder(store, embedder):
        _write(store, EMBEDDER, embedder)
    if read(store, ANALYZER) is None:
        _write(store, ANALYZER, analyzer.record())
