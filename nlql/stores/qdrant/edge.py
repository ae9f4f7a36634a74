"""Qdrant Edge (Qdrant's Rust shard, in process) behind the few client calls :class:`QdrantStore` makes.

:class:`EdgeClient` answers ``collection_exists``, ``create_collection``, ``upsert``, ``scroll``,
``count``, ``facet``, ``query_batch_points``, ``retrieve``, ``delete``, … with the arguments and the return shapes
of ``qdrant_client.QdrantClient``, so the store has one code path for Qdrant Edge and a Qdrant server:
the same filters (qdrant-client's models, translated here one to one into Qdrant Edge's), the same
payloads, the same searches. Only what the store uses is translated; anything else is a ``TypeError``.

A client owns one directory; each collection is a shard in ``<directory>/<collection>`` and its record
(what a server keeps as collection metadata) is ``<directory>/<collection>.info.json``. A shard is one
process's: two stores in one process share it by sharing the client. Nothing here can be interrupted,
so every call first checks the search's deadline (:func:`nlql.deadline.check`): no call starts after it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import threading
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from nlql import deadline

try:
    import qdrant_edge as qe
except ImportError:  # pragma: no cover - exercised only without the extra
    qe = None  # type: ignore[assignment]

_SHARD_MARK = "edge_config.json"  # written by Qdrant Edge into every shard directory


def available() -> bool:
    return qe is not None


class EdgeClient:
    """The collections of one directory as Qdrant Edge shards (a temporary directory when None)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self._temp = path is None
        self.path = Path(tempfile.mkdtemp(prefix="nlql-qdrant-") if path is None else path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._shards: dict[str, Any] = {}
        self._marks: dict[str, bool] = {}
        self._lock = threading.Lock()
        #: Bumped before and after every write: rows a store kept from a search are good while it has
        #: not moved (the shard is this process's alone, so no other writer exists).
        self.writes = 0

    # ------------------------------------------------------------------ collections

    def _dir(self, name: str) -> Path:
        return self.path / name

    def _shard(self, name: str) -> Any:
        shard = self._shards.get(name)
        if shard is None:
            with self._lock:
                shard = self._shards.get(name)
                if shard is None:
                    if not self.collection_exists(name):
                        raise KeyError(f"collection {name!r} does not exist in {self.path}")
                    shard = self._shards[name] = qe.EdgeShard.load(str(self._dir(name)))
        return shard

    def collection_exists(self, name: str) -> bool:
        return name in self._shards or (self._dir(name) / _SHARD_MARK).exists() or (
            self._dir(name).is_dir() and any(self._dir(name).iterdir()))

    def create_collection(self, name: str, vectors_config: Any, sparse_vectors_config: Any = None) -> None:
        distance = getattr(qe.Distance, str(vectors_config.distance.value).capitalize())
        sparse = {n: qe.EdgeSparseVectorParams() for n in sparse_vectors_config or {}} or None
        # a temporary directory is removed at close and never loaded again: its shards keep no write-ahead
        # log (what only a reload after a crash reads; ~30 % of an update's time)
        config = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=int(vectors_config.size), distance=distance),
                               sparse_vectors=sparse, wal_enabled=False if self._temp else None)
        with self._lock:
            self._shards[name] = qe.EdgeShard.create(str(self._dir(name)), config)

    def get_collection(self, name: str) -> Any:
        from qdrant_client import models as qm

        vectors = self._config(name)
        distance = qm.Distance(str(vectors["distance"]).capitalize()) if vectors else None
        vec = SimpleNamespace(size=vectors.get("size") if vectors else None, distance=distance)
        schema = dict(self._shard(name).info().payload_schema)
        params = SimpleNamespace(vectors=vec, sparse_vectors=vectors["sparse"])
        return SimpleNamespace(config=SimpleNamespace(params=params,
                                                      metadata=self._read_info(name)),
                               payload_schema=schema)

    def _config(self, name: str) -> dict[str, Any]:
        """The default dense vector's size and distance and the sparse vectors' names and settings, from
        the shard's own configuration file."""
        self._shard(name)
        raw = json.loads((self._dir(name) / _SHARD_MARK).read_text())
        vectors = raw.get("vectors") or {}
        vec = vectors.get("", vectors) if isinstance(vectors, dict) else {}
        return {"size": vec.get("size"), "distance": vec.get("distance"), "sparse": dict(raw.get("sparse_vectors") or {})}

    def _info_file(self, name: str) -> Path:
        return self.path / f"{name}.info.json"

    def _read_info(self, name: str) -> dict[str, Any]:
        try:
            return dict(json.loads(self._info_file(name).read_text()))
        except FileNotFoundError:
            return {}

    def update_collection(self, name: str, metadata: dict[str, Any]) -> None:
        with self._lock:
            info = self._read_info(name)
            info.update(metadata)
            self._marks.pop(name, None)
            tmp = self._info_file(name).with_suffix(".tmp")
            tmp.write_text(json.dumps(info, sort_keys=True))
            os.replace(tmp, self._info_file(name))

    def create_payload_index(self, name: str, field: str, field_schema: Any) -> None:
        kind = getattr(qe.PayloadSchemaType, str(field_schema.value).capitalize())
        self._shard(name).update(qe.UpdateOperation.create_field_index(code(field), kind))

    # ------------------------------------------------------------------ points

    def upsert(self, name: str, points: list[Any], wait: bool = True, plain: bool = False, **_: Any) -> None:
        """Write ``points`` in one update of the shard (which holds the GIL while it runs: a worker thread
        would overlap nothing). Converting the payloads (``qe.Point``) is most of a write's time.

        ``plain``: the caller checked that no string of the payloads needs the code (:func:`any_needs_code`
        on the texts they are made of); else the payloads are checked here."""
        deadline.check("qdrant", "upsert")
        if not points:
            return
        # a lone surrogate or U+0000-U+0008 anywhere in the batch: the payloads are coded (see code())
        coding = not plain and any_needs_code([p.payload for p in points])
        if coding and not self._coded(name):
            self.update_collection(name, {_CODED: True})
        pts = [qe.Point(id=str(p.id), vector=_vector(p.vector), payload=_payload(code(p.payload) if coding else p.payload))
               for p in points]
        self.writes += 1
        self._shard(name).update(qe.UpdateOperation.upsert_points(pts))
        self.writes += 1  # (before and after: a search that overlapped the write keeps no rows)

    def _coded(self, name: str) -> bool:
        """Whether a coded string was ever written to this collection (then reads decode)."""
        mark = self._marks.get(name)
        if mark is None:
            mark = self._marks[name] = bool(self._read_info(name).get(_CODED))
        return mark

    def _out(self, name: str, points: list[Any]) -> list[Any]:
        return [_Decoded(p) for p in points] if self._coded(name) else list(points)

    def delete(self, name: str, points_selector: Any, wait: bool = True, **_: Any) -> None:
        deadline.check("qdrant", "delete")
        self.writes += 1
        self._shard(name).update(qe.UpdateOperation.delete_points_by_filter(_filter(points_selector.filter)))
        self.writes += 1

    def retrieve(self, name: str, ids: list[Any], with_payload: Any = True, with_vectors: bool = False,
                 **_: Any) -> list[Any]:
        deadline.check("qdrant", "retrieve")
        if not ids:
            return []
        return self._out(name, self._shard(name).retrieve([str(i) for i in ids], with_payload=with_payload,
                                                          with_vector=with_vectors))

    def count(self, name: str, count_filter: Any = None, exact: bool = True, **_: Any) -> Any:
        deadline.check("qdrant", "count")
        n = self._shard(name).count(qe.CountRequest(filter=_filter(count_filter), exact=True))
        return SimpleNamespace(count=int(n))

    def facet(self, name: str, key: str, facet_filter: Any = None, limit: int = 10, exact: bool = False,
              **_: Any) -> Any:
        """Points per distinct value of an indexed keyword ``key`` (values decoded, as payloads are)."""
        deadline.check("qdrant", "facet")
        got = self._shard(name).facet(qe.FacetRequest(code(key), limit=limit, exact=exact,
                                                      filter=_filter(facet_filter)))
        return SimpleNamespace(hits=[SimpleNamespace(value=decode(h.value), count=int(h.count)) for h in got.hits])

    def scroll(self, name: str, scroll_filter: Any = None, limit: int = 10, offset: Any = None,
               with_payload: Any = True, with_vectors: bool = False, order_by: Any = None,
               **_: Any) -> tuple[list[Any], Any]:
        deadline.check("qdrant", "scroll")
        order = None
        if order_by is not None:
            direction = qe.Direction.Desc if str(order_by.direction.value) == "desc" else qe.Direction.Asc
            order = qe.OrderBy(order_by.key, direction=direction)
        points, after = self._shard(name).scroll(qe.ScrollRequest(
            offset=None if offset is None else str(offset), limit=limit, filter=_filter(scroll_filter),
            with_payload=with_payload, with_vector=with_vectors, order_by=order))
        return self._out(name, points), after

    def _request(self, query: Any, flt: Any, params: Any, limit: int, with_payload: Any,
                 score_threshold: float | None, using: str | None = None) -> Any:
        nearest = (qe.Query.Nearest(_sparse(query), using=using) if using is not None
                   else qe.Query.Nearest([float(x) for x in query]))
        return qe.QueryRequest(limit=limit, query=nearest, filter=_filter(flt), params=_params(params),
                               with_payload=with_payload, score_threshold=score_threshold)

    def query_batch_points(self, name: str, requests: list[Any], **_: Any) -> list[Any]:
        deadline.check("qdrant", "query")
        batch = qe.QueryBatchRequest([self._request(r.query, r.filter, r.params, r.limit, r.with_payload,
                                                    r.score_threshold) for r in requests])
        return [SimpleNamespace(points=self._out(name, res)) for res in self._shard(name).query_batch(batch)]

    def query_points(self, name: str, query: Any, query_filter: Any = None, search_params: Any = None,
                     limit: int = 10, with_payload: Any = True, score_threshold: float | None = None,
                     using: str | None = None, **_: Any) -> Any:
        """A nearest-neighbour query; with ``using``, over that named sparse vector (``query`` a
        ``SparseVector``)."""
        deadline.check("qdrant", "query")
        req = self._request(query, query_filter, search_params, limit, with_payload, score_threshold, using)
        return SimpleNamespace(points=self._out(name, self._shard(name).query(req)))

    def optimize(self, name: str) -> bool:
        """Run the shard's segment optimizers (HNSW, payload indexes) until none is planned."""
        return bool(self._shard(name).optimize())

    def close(self) -> None:
        with self._lock:
            shards, self._shards = self._shards, {}
            for shard in shards.values():
                shard.flush()
                shard.close()
        if self._temp:
            shutil.rmtree(self.path, ignore_errors=True)


# ---------------------------------------------------------------------- model translation


def _sparse(vector: Any) -> Any:
    return qe.SparseVector(indices=[int(i) for i in vector.indices], values=[float(v) for v in vector.values])


def _vector(vector: Any) -> Any:
    """A point's vector for Qdrant Edge: the dense list, or named vectors (the unnamed dense one and sparse
    ones) as a dict."""
    if isinstance(vector, dict):
        return {k: _sparse(v) if hasattr(v, "indices") else list(v) for k, v in vector.items()}
    return list(vector)


def _params(params: Any) -> Any:
    if params is None:
        return None
    return qe.SearchParams(hnsw_ef=params.hnsw_ef, exact=bool(params.exact))


def _iso(value: Any) -> str | None:
    if value is None:
        return None
    return value.isoformat() if isinstance(value, datetime) else str(value)


# Qdrant Edge holds strings as UTF-8, so a lone surrogate (valid in a Python str) cannot be stored. Every
# string written that holds one, or a character U+0000-U+0008, is coded: such a character becomes
# U+0001 and four base-7 digits written as U+0002-U+0008. The code is prefix-free and its digits never
# occur uncoded, so equality, MatchAny and substring matches keep their meaning on coded strings (the
# filter's values are coded the same way). Reads decode only shards that were ever written a coded
# string (the mark is kept in the collection's record), so the common case walks no payload.
_CODED = "nlql_edge_coded"
_NEEDS_CODE = re.compile("[\x00-\x08\ud800-\udfff]")
_CODE_WORD = re.compile("\x01[\x02-\x08]{4}")


def _code_char(m: re.Match[str]) -> str:
    o = ord(m.group())
    rank = o if o <= 8 else 9 + (o - 0xD800)
    digits = []
    for _ in range(4):
        rank, d = divmod(rank, 7)
        digits.append(chr(2 + d))
    return "\x01" + "".join(reversed(digits))


def _decode_word(m: re.Match[str]) -> str:
    rank = 0
    for c in m.group()[1:]:
        rank = rank * 7 + ord(c) - 2
    return chr(rank if rank <= 8 else 0xD800 + rank - 9)


def code(value: Any) -> Any:
    """Strings in ``value`` (a payload or a filter value) as Qdrant Edge can hold them (see above).

    >>> s = "a" + chr(0xD800) + "b"
    >>> code(s) != s and decode(code(s)) == s
    True
    >>> code({"k": ["plain"]})
    {'k': ['plain']}
    >>> decode(code({chr(0xD800): 1})) == {chr(0xD800): 1}
    True
    """
    if isinstance(value, str):
        return _NEEDS_CODE.sub(_code_char, value) if _NEEDS_CODE.search(value) else value
    if isinstance(value, dict):  # keys too: a metadata key may hold any character
        return {code(k): code(v) for k, v in value.items()}
    if isinstance(value, list):
        return [code(v) for v in value]
    return value


def decode(value: Any) -> Any:
    """The inverse of :func:`code`."""
    if isinstance(value, str):
        return _CODE_WORD.sub(_decode_word, value) if "\x01" in value else value
    if isinstance(value, dict):
        return {decode(k): decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def any_needs_code(payloads: list[Any], exact: bool = True) -> bool:
    """Whether some value holds a string that :func:`code` changes (in a key or a value).

    The batch as JSON (``ensure_ascii=False``) at C speed: a lone surrogate stays itself there (so
    encoding the text as UTF-8 fails) and U+0000-U+0008 are escaped as ``\\u000N`` or ``\\b``; only when
    one of those shows (or a string merely looks like it: a backslash before a ``b``) are the payloads
    walked exactly (``exact=False``: True then, without the walk). Walking and coding every payload cost
    about as much as the shard's update."""
    try:
        text = json.dumps(payloads, ensure_ascii=False, default=str, check_circular=False)
    except (TypeError, ValueError, RecursionError):  # (not JSON: walk it)
        return any(_needs_code(p) for p in payloads) if exact else True
    try:
        text.encode("utf-8")
        candidate = "\\u000" in text or "\\b" in text
    except UnicodeEncodeError:  # (a lone surrogate)
        candidate = True
    return candidate and (not exact or any(_needs_code(p) for p in payloads))


def _needs_code(value: Any) -> bool:
    if isinstance(value, str):
        return _NEEDS_CODE.search(value) is not None
    if isinstance(value, dict):
        return any(_needs_code(k) or _needs_code(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_needs_code(v) for v in value)
    return False


class _Decoded:
    """A point whose payload is decoded (ids, scores and vectors as Qdrant Edge gave them)."""

    __slots__ = ("id", "payload", "score", "vector")

    def __init__(self, point: Any) -> None:
        self.id = point.id
        self.payload = decode(point.payload)
        self.score = getattr(point, "score", None)
        self.vector = point.vector


# Qdrant Edge 0.9's MatchValue reads a Python bool as an integer (MatchValue(True).value == 1), which
# never matches a stored JSON true; so the boolean views the filters test (presence marks under _p,
# boolean views under _b) are stored as the strings "true"/"false" and matched as those.
_BOOL_VIEWS = ("_p", "_b")


def _bools_as_text(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return {k: _bools_as_text(v) for k, v in value.items()}
    return value


def _payload(payload: dict[str, Any] | None) -> dict[str, Any] | None:
    if payload is None:
        return None
    return {k: _bools_as_text(v) if k.startswith(_BOOL_VIEWS) else v for k, v in payload.items()}


def _match(m: Any) -> Any:
    kind = type(m).__name__
    if kind == "MatchValue":
        return qe.MatchValue(code(_bools_as_text(m.value)))
    if kind == "MatchAny":
        return qe.MatchAny(code(list(m.any)))
    if kind == "MatchSubstring":
        return qe.MatchSubstring(code(m.substring))
    raise TypeError(f"Qdrant Edge: no translation for {kind}")


def _range(r: Any) -> Any:
    if type(r).__name__ == "DatetimeRange":
        return qe.RangeDateTime(gte=_iso(r.gte), gt=_iso(r.gt), lte=_iso(r.lte), lt=_iso(r.lt))
    return qe.RangeFloat(gte=r.gte, gt=r.gt, lte=r.lte, lt=r.lt)


def _condition(c: Any) -> Any:
    kind = type(c).__name__
    if kind == "Filter":
        return _filter(c)
    if kind == "FieldCondition":
        return qe.FieldCondition(key=code(c.key), match=None if c.match is None else _match(c.match),
                                 range=None if c.range is None else _range(c.range))
    if kind == "IsEmptyCondition":
        return qe.IsEmptyCondition(code(c.is_empty.key))
    if kind == "IsNullCondition":
        return qe.IsNullCondition(code(c.is_null.key))
    if kind == "HasIdCondition":
        return qe.HasIdCondition({str(i) for i in c.has_id})
    raise TypeError(f"Qdrant Edge: no translation for {kind}")


def _filter(f: Any) -> Any:
    """A qdrant-client ``Filter`` as Qdrant Edge's (None stays None)."""
    if f is None:
        return None

    def each(items: Any) -> list[Any] | None:
        if items is None:
            return None
        return [_condition(i) for i in (items if isinstance(items, list) else [items])]

    return qe.Filter(must=each(f.must), should=each(f.should), must_not=each(f.must_not))


__all__ = ["EdgeClient", "any_needs_code", "available"]
