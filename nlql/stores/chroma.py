"""Chroma store: one record per sentence, cosine HNSW, filters pushed as ``where``/``where_document``.

Record layout (a re-attached store serves everything without re-ingest):

- ``document``: the sentence *casefolded*, so ``where_document`` ``$contains`` (case-sensitive
  substring) decides NLQL's case-insensitive CONTAINS exactly;
- metadata: ``doc_id``, ``uid`` (``"<doc_id>#<position>"``), ``position``, ``content`` (the sentence as
  written), ``seq``, ``start``, ``end``, ``tail``, ``meta`` (the document metadata as JSON, so lists,
  nested dicts and nulls round-trip), and flat typed views of every metadata path
  (:mod:`nlql.stores._typed`): ``s.<path>`` strings, ``n.<path>`` numbers and numeric strings (float),
  ``f.<path>`` real numbers, ``b.<path>`` bools, ``d.<path>`` ISO instants (integer microseconds since
  the epoch), and ``t.<path>`` a type tag (``s`` string, ``n`` number, ``b`` bool, ``x`` other non-null)
  that makes presence testable. ``<path>`` is the key path, each key through
  :func:`~nlql.stores._typed.encode_key`, joined by ``.``.

Pushdown keeps SPEC §6: ``$ne``/``$nin`` (which match records lacking the key) always come with a
presence test; numbers compare on the float views; Chroma has no string ordering and no substring test
on metadata, so those leaves push a superset (the string view exists) and are re-checked in the adapter,
as is CONTAINS anywhere but directly under the top-level AND on ``content``. LIKE and MATCH stay residual.

Chroma's HNSW under-fills selective filters; :meth:`ChromaStore.knn` counts the rows passing the
filter (when it returned fewer rows than asked) and searches them exactly when few, else widens
``n_results`` and falls back to the exact path, so it returns ``min(k, matches)``. ``last_stats``
records the path, rounds and matches.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from nlql import deadline
from nlql import values as V
from nlql.errors import BackendError, MissingDependencyError
from nlql.kernels import block_products
from nlql.pushdown import Capabilities, Cond, Filter, NativeFilter
from nlql.stores import _typed as T
from nlql.stores import pyfilter
from nlql.stores.base import DocRecord, Row, backend_errors, unit_id

try:
    import chromadb
except ImportError:  # pragma: no cover - exercised only without the extra
    chromadb = None  # type: ignore[assignment]

_NAMESPACE = uuid.UUID("5b7f3e0a-6c1d-4c55-8f0e-2a9d4b1e7c63")
_PAGE = 4096
_EXACT_LIMIT = 4096  # filtered knn searches at most this many matching rows exactly
_MAX_ROUNDS = 3
_MIN_FLOAT = -1.7976931348623157e308  # every finite float is >= this; Chroma rejects -inf
_MIN_MICROS = -(2**62)
_TAGS = ["s", "n", "b", "x"]
_SEQ_KEY = "nlql_max_seq"
_INFO_PREFIX = "nlql_info:"  # collection-metadata keys of the store's record (get_info/set_info)
# Chroma casts a float operand to an int field's type (position == 0.5 matches position 0), so number
# views are always stored as floats, the position included ("n:position").
_BUILTIN_KEYS = {
    ("s", "doc_id"): "doc_id",
    ("s", "content"): "content",
    ("s", "id"): "uid",
    ("f", "position"): "n:position",
}
_CMP = {"eq": "$eq", "lt": "$lt", "le": "$lte", "gt": "$gt", "ge": "$gte"}

_OPS = frozenset({
    "eq", "ne", "lt", "le", "gt", "ge", "in", "not_in",
    "is_null", "is_not_null", "contains", "not_contains",
})


def _fts_unsafe(ch: str) -> bool:
    """Characters Chroma's full-text index does not keep as written (NUL ends the indexed text; U+FFFD
    and noncharacters are folded together)."""
    o = ord(ch)
    return o == 0 or o == 0xFFFD or 0xFDD0 <= o <= 0xFDEF or (o & 0xFFFE) == 0xFFFE or 0xD800 <= o <= 0xDFFF


def fts_document(content: str) -> str:
    """The document Chroma indexes for a sentence: casefolded, unsafe characters as U+FFFD.

    A needle free of unsafe characters is a substring of this iff its casefold is one of the content's
    casefold: it cannot span a replaced character.
    """
    text = content.casefold()
    if any(_fts_unsafe(ch) for ch in text):
        text = "".join("\ufffd" if _fts_unsafe(ch) else ch for ch in text)
    return text


def record_id(doc_id: str, position: int) -> str:
    """The deterministic Chroma id of a sentence."""
    return uuid.uuid5(_NAMESPACE, json.dumps([doc_id, position], ensure_ascii=True)).hex


class ChromaStore:
    """A :class:`~nlql.stores.base.Store` on an embedded (or given) Chroma client.

    Args:
        client: An existing Chroma client; the store never closes a client it did not create.
        path: A directory for ``chromadb.PersistentClient``; without it (and without ``client``) an
            in-memory client is used. In-memory Chroma clients share one state per process, so an
            in-memory store gets a collection of its own (``<collection>-<random>``), dropped on close.
        collection: The collection name (3–512 characters of ``[A-Za-z0-9._-]``).
        hnsw_ef: HNSW ``ef_search`` (re-applied when attaching); a new collection is built with
            ``ef_construction = max(200, hnsw_ef)``.

    Raises:
        MissingDependencyError: ``chromadb`` is not installed.
    """

    def __init__(
        self,
        client: Any = None,
        *,
        path: str | None = None,
        collection: str = "nlql",
        hnsw_ef: int = 200,
    ) -> None:
        if chromadb is None:
            raise MissingDependencyError("chroma", "chromadb")
        self.hnsw_ef = hnsw_ef
        self.capabilities = Capabilities(
            NAME="chroma",
            OPS=_OPS,
            FIELDS=frozenset({"meta", "doc_id", "id", "position", "content"}),
            OR=True,
            NESTED_KEYS=True,
            NUMERIC_STRINGS=True,
            FLOAT_EQUALITY=True,
            DATETIMES=True,
            EXACT=False,
            SCORE_THRESHOLD=False,
            DEADLINE=True,
            ENTITY_LINKS=True,  # each record's entity names in its metadata (``ents``, a JSON list)
        )
        self.last_stats: dict[str, Any] = {}
        # filtered knn searches up to this many matching rows exactly (0: always HNSW first)
        self.exact_limit = _EXACT_LIMIT
        self._owns_client = client is None
        self._temporary = client is None and path is None
        self.collection_name = f"{collection}-{uuid.uuid4().hex[:12]}" if self._temporary else collection
        self._col: Any = None
        self._max_seq = 0
        with self._backend("connect"):
            if client is not None:
                self.client = client
            elif path is not None:
                self.client = chromadb.PersistentClient(path=str(path))
            else:
                self.client = chromadb.EphemeralClient()

    # ------------------------------------------------------------------ lifecycle

    @contextmanager
    def _backend(self, what: str) -> Iterator[None]:
        """Turn driver failures into :class:`BackendError` naming the store and the operation.

        The embedded client has no per-call timeout: a call made after the search's deadline is an
        :class:`NLQLTimeoutError` instead (checked before each call, so widening rounds stop there).
        """
        deadline.check("chroma", what)
        with backend_errors("chroma", what):
            yield

    def open(self, dim: int) -> None:
        """Create the collection (cosine HNSW) or attach to an existing one.

        Raises:
            BackendError: The collection exists with another space or vector size.
        """
        with self._backend("open"):
            self._col = self.client.get_or_create_collection(
                self.collection_name,
                embedding_function=None,
                configuration={
                    "hnsw": {"space": "cosine", "ef_search": self.hnsw_ef, "ef_construction": max(200, self.hnsw_ef)}
                },
            )
            hnsw = (self._col.configuration or {}).get("hnsw") or {}
            if hnsw.get("space", "cosine") != "cosine":
                raise BackendError("chroma", f"collection {self.collection_name!r} uses space {hnsw.get('space')!r}, "
                                   "NLQL needs 'cosine'")
            if hnsw.get("ef_search", self.hnsw_ef) != self.hnsw_ef:  # a query-time setting: adopt ours
                self._col.modify(configuration={"hnsw": {"ef_search": self.hnsw_ef}})
            if self._col.count() > 0:
                peek = self._col.get(limit=1, include=["embeddings"])
                size = len(peek["embeddings"][0])
                if size != dim:
                    raise BackendError("chroma", f"collection {self.collection_name!r} has vectors of size {size}; "
                                       f"the embedder needs size {dim}")
            meta = self._col.metadata or {}
            if _SEQ_KEY in meta:
                self._max_seq = int(meta[_SEQ_KEY])
            else:
                self._max_seq = max((int(m["seq"]) for m in self._metadatas(None, None)), default=0)

    def _info_collection(self) -> Any:
        if self._col is not None:
            return self._col
        try:  # before open: the collection may already exist (a persistent store reopened)
            return self.client.get_collection(self.collection_name, embedding_function=None)
        except Exception:  # noqa: BLE001 - chromadb raises NotFoundError/ValueError by version: not created yet
            return None

    def get_info(self, key: str) -> str | None:
        """A value of the store's record, kept in the collection's metadata."""
        with self._backend("get_info"):
            col = self._info_collection()
            value = (col.metadata or {}).get(_INFO_PREFIX + key) if col is not None else None
            return None if value is None else str(value)

    def set_info(self, key: str, value: str) -> None:
        """Set a value of the store's record (after ``open``)."""
        with self._backend("set_info"):
            if self._col is None:
                raise RuntimeError("store not opened")
            self._col.modify(metadata={**(self._col.metadata or {}), _INFO_PREFIX + key: str(value)})

    def close(self) -> None:
        """Drop an in-memory store's collection and release a client this store created."""
        if self.client is None:
            return
        with self._backend("close"):
            if self._temporary and self._col is not None:
                self.client.delete_collection(self.collection_name)
            if self._owns_client:
                self.client.close()
        self.client = None
        self._col = None

    # ------------------------------------------------------------------ writes

    def upsert(self, docs: Sequence[DocRecord]) -> None:
        """Write documents, replacing every stored document with the same ``doc_id``.

        New records overwrite old ones at the same position (same id), then positions past the new
        length are deleted, so a reader never sees a document vanish mid-call. Chroma merges an
        overwriting record's metadata into the old one's, so each key the new record lacks is written
        as None, which removes it (else a filter would still match a replaced document's old values). Chroma has no
        multi-record transactions: a failure raises :class:`BackendError`; repeating the call repairs.
        """
        latest: dict[str, DocRecord] = {}
        for doc in docs:
            latest[doc.doc_id] = doc
        if not latest:
            return
        ids: list[str] = []
        embeddings: list[np.ndarray] = []
        metadatas: list[dict[str, Any]] = []
        documents: list[str] = []
        for doc in latest.values():
            meta = V.normalize_metadata(doc.metadata or {})
            base = {"seq": doc.seq, "meta": json.dumps(meta), **_meta_views(meta)}
            vectors = np.asarray(doc.vectors, dtype=np.float32)
            names = doc.entities if doc.entities is not None else [None] * len(doc.units)
            for unit, vec, ents in zip(doc.units, vectors, names, strict=True):
                record = dict(base)
                if ents is not None:  # metadata values are scalars: the list as JSON text
                    record["ents"] = json.dumps(list(ents), ensure_ascii=False)
                record.update(
                    doc_id=doc.doc_id,
                    uid=unit_id(doc.doc_id, unit.position),
                    position=unit.position,
                    content=unit.content,
                    start=unit.start,
                    end=unit.end,
                    tail=unit.tail,
                )
                for field in ("doc_id", "id", "content", "position"):
                    value = T.builtin_value(field, doc.doc_id, unit.position, unit.content)
                    views = T.scalar_views(value)
                    if "n" in views:
                        record[f"n:{field}"] = views["n"]
                    if "d" in views and (micros := T.datetime_micros(views["d"])) is not None:
                        record[f"d:{field}"] = micros
                ids.append(record_id(doc.doc_id, unit.position))
                embeddings.append(vec)
                metadatas.append(record)
                documents.append(fts_document(unit.content))
        with self._backend("upsert"):
            # what is stored of these documents first: Chroma's upsert merges a record's new metadata into
            # its old, so a key the new one lacks is given as None (which removes it); positions past the
            # new length go after the write
            fresh = {rid: j for j, rid in enumerate(ids)}
            doc_ids = list(latest)
            stale: list[str] = []
            for i in range(0, len(doc_ids), 256):
                old = self._col.get(where=_in_where("doc_id", doc_ids[i : i + 256]), include=["metadatas"])
                for rid, meta in zip(old["ids"], old["metadatas"] or [None] * len(old["ids"]), strict=True):
                    at = fresh.get(rid)
                    if at is None:
                        stale.append(rid)
                    elif meta:
                        record = metadatas[at]
                        record.update((k, None) for k in meta if k not in record)
            batch = max(1, min(self.client.get_max_batch_size(), 1024))
            for i in range(0, len(ids), batch):
                self._col.upsert(
                    ids=ids[i : i + batch],
                    embeddings=np.stack(embeddings[i : i + batch]),
                    metadatas=metadatas[i : i + batch],
                    documents=documents[i : i + batch],
                )
            for i in range(0, len(stale), 256):
                self._col.delete(ids=stale[i : i + 256])
            new_max = max(self._max_seq, *(doc.seq for doc in latest.values()))
            if new_max != self._max_seq or _SEQ_KEY not in (self._col.metadata or {}):
                self._col.modify(metadata={**(self._col.metadata or {}), _SEQ_KEY: new_max})
            self._max_seq = new_max

    def delete(self, doc_ids: Sequence[str]) -> int:
        """Delete documents by id; returns how many of them existed."""
        ids = list(dict.fromkeys(doc_ids))
        found: set[str] = set()
        with self._backend("delete"):
            for i in range(0, len(ids), 256):
                where = _in_where("doc_id", ids[i : i + 256])
                res = self._col.get(where=where, include=["metadatas"])
                found.update(m["doc_id"] for m in res["metadatas"])
                if res["ids"]:
                    self._col.delete(ids=res["ids"])
        return len(found)

    # ------------------------------------------------------------------ reads

    def count(self) -> int:
        """The number of stored sentences."""
        with self._backend("count"):
            return int(self._col.count())

    def max_seq(self) -> int:
        """The largest ``seq`` written (kept in the collection metadata); 0 when empty."""
        return self._max_seq

    def _metadatas(self, where: Any, where_document: Any) -> Iterator[dict[str, Any]]:
        for _, meta in self._records(where, where_document):
            yield meta

    def _records(self, where: Any, where_document: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        offset = 0
        while True:
            res = self._col.get(where=where, where_document=where_document, limit=_PAGE, offset=offset,
                                include=["metadatas"])
            yield from zip(res["ids"], res["metadatas"], strict=True)
            if len(res["ids"]) < _PAGE:
                return
            offset += _PAGE

    def compile_filter(self, flt: Filter) -> NativeFilter:
        """Translate a pushed filter to Chroma ``where`` / ``where_document``.

        ``NativeFilter.native`` is ``{"where": …, "where_document": …}`` (either may be None);
        ``text`` is that as JSON, followed by ``then adapter check: …`` when leaves are re-checked here;
        ``extra`` holds ``check`` (the filter to re-check, or None) and ``empty``.
        """
        node = T.lower_filter(flt)
        items = list(node.items) if isinstance(node, T.VAnd) else [node]
        doc_items: list[dict[str, Any]] = []
        rest: list[T.VNode] = []
        for item in items:
            if (isinstance(item, (T.Substr, T.NotSubstr)) and item.path == ("content",)
                    and not any(_fts_unsafe(ch) for ch in item.needle)):
                op = "$contains" if isinstance(item, T.Substr) else "$not_contains"
                doc_items.append({op: item.needle})
            else:
                rest.append(item)
        rest_node = _strip_substr(T.simplify(T.VAnd(tuple(rest))))
        check = flt if T.needs_check(rest_node) else None
        leaves = sorted({_leaf_text(c) for c in T.opaque_leaves(rest_node)})
        native_node = T.native_part(rest_node)
        if native_node == T.FALSE:
            return NativeFilter(None, "FALSE (no row can pass)", {"check": None, "empty": True})
        where = None if native_node == T.TRUE else _render(native_node)
        where_document = None
        if doc_items:
            where_document = doc_items[0] if len(doc_items) == 1 else {"$and": doc_items}
        native = {"where": where, "where_document": where_document}
        text = json.dumps(native)
        if check is not None:
            text += " then adapter check: " + "; ".join(leaves)
        return NativeFilter(native, text, {"check": check, "empty": False})

    def _candidates(self, flt: NativeFilter | None) -> list[tuple[int, int, str]]:
        """``(seq, position, id)`` of every row passing ``flt``."""
        where = flt.native["where"] if flt is not None and flt.native else None
        where_document = flt.native["where_document"] if flt is not None and flt.native else None
        check = flt.extra.get("check") if flt is not None else None
        out = []
        for rid, meta in self._records(where, where_document):
            if check is not None and not pyfilter.row_passes(check, _row(rid, meta)):
                continue
            out.append((int(meta["seq"]), int(meta["position"]), rid))
        return out

    def entity_rows(self) -> list[tuple[str, int, int, str]] | None:
        """Every record's entity names as ``(doc_id, seq, position, name)``; None when some record was
        written without them (by an older version)."""
        out: list[tuple[str, int, int, str]] = []
        with self._backend("entity_rows"):
            for _, meta in self._records(None, None):
                raw = meta.get("ents")
                if not isinstance(raw, str):
                    return None
                names = json.loads(raw)
                d, s, p = str(meta["doc_id"]), int(meta["seq"]), int(meta["position"])
                out.extend((d, s, p, n) for n in names if isinstance(n, str))
        return out

    def adopt_entities(self, rows: Sequence[tuple[str, int, int, str]]) -> None:
        """Records written without names keep none (the engine extracts them again when it rebuilds)."""

    def scan(self, flt: NativeFilter | None = None) -> list[Any]:
        """Every key passing ``flt``, in insertion order (seq, position)."""
        if flt is not None and flt.extra.get("empty"):
            return []
        with self._backend("scan"):
            rows = self._candidates(flt)
        rows.sort()
        return [rid for _, _, rid in rows]

    def knn(
        self,
        vectors: np.ndarray,
        k: int,
        flt: NativeFilter | None = None,
        min_score: float | None = None,
    ) -> list[list[tuple[Any, float]]]:
        """Top-``k`` (key, cosine) per query among rows passing ``flt``, best first; min(k, matches) rows.

        HNSW first (with the ``where`` filter). When Chroma returns fewer rows than asked, the matching
        rows are counted; if HNSW gave fewer than ``min(k, matches)`` the search widens ``n_results``
        (when matches exceed ``exact_limit``) and else, or after ``_MAX_ROUNDS``, goes exact: numpy over
        the matching rows' stored vectors. A filter that needs the adapter's re-check lists the passing
        ids first and searches them (exactly when few). Scores are cosine (1 - Chroma's cosine distance
        on the HNSW path); ties are broken by (seq, position). ``min_score`` drops rows below it.
        """
        queries = V.normalize_rows(np.atleast_2d(np.asarray(vectors, dtype=np.float32)))
        nq = len(queries)
        if k <= 0 or (flt is not None and flt.extra.get("empty")):
            self.last_stats = {"path": "empty", "rounds": 0}
            return [[] for _ in range(nq)]
        native = flt.native if flt is not None and flt.native is not None else {}
        where, where_document = native.get("where"), native.get("where_document")
        check = flt.extra.get("check") if flt is not None else None
        with self._backend("knn"):
            if check is not None and flt is not None:
                out = self._knn_checked(queries, k, flt)
            else:
                out = self._knn_native(queries, k, where, where_document)
        if min_score is not None:
            out = [[(key, sc) for key, sc in hits if sc >= min_score] for hits in out]
        return out

    def _small(self, matches: int, k: int) -> bool:
        return self.exact_limit > 0 and matches <= max(self.exact_limit, 4 * k)

    def _knn_native(self, queries: np.ndarray, k: int, where: Any, where_document: Any) -> list[list[tuple[Any, float]]]:
        total = int(self._col.count())
        if total == 0:
            self.last_stats = {"path": "empty", "rounds": 0, "matches": 0}
            return [[] for _ in range(len(queries))]
        n_results = min(total, k + max(8, k // 4))
        kwargs = {"where": where, "where_document": where_document}
        res = self._query(queries, n_results, kwargs)
        rounds = 1
        if all(len(r) >= n_results for r in res):
            self.last_stats = {"path": "hnsw", "rounds": rounds, "matches": None}
            return [self._ranked(r, k) for r in res]
        filtered = where is not None or where_document is not None
        ids = self._ids(where, where_document) if filtered else None
        matches = len(ids) if ids is not None else total
        need = min(k, matches)
        if all(len(r) >= need for r in res):
            self.last_stats = {"path": "hnsw", "rounds": rounds, "matches": matches}
            return [self._ranked(r, k) for r in res]
        if not self._small(matches, k):
            while rounds < _MAX_ROUNDS and n_results < matches:
                rounds += 1
                n_results = min(matches, n_results * 4)
                res = self._query(queries, n_results, kwargs)
                if all(len(r) >= need for r in res):
                    self.last_stats = {"path": "hnsw", "rounds": rounds, "matches": matches}
                    return [self._ranked(r, k) for r in res]
        self.last_stats = {"path": "hnsw+exact", "rounds": rounds + 1, "matches": matches}
        return self._exact(queries, k, where, where_document, None)

    def _knn_checked(self, queries: np.ndarray, k: int, flt: NativeFilter) -> list[list[tuple[Any, float]]]:
        ids = [rid for _, _, rid in self._candidates(flt)]
        matches = len(ids)
        if matches == 0:
            self.last_stats = {"path": "empty", "rounds": 0, "matches": 0}
            return [[] for _ in range(len(queries))]
        need = min(k, matches)
        rounds = 0
        if not self._small(matches, k):
            n_results = min(matches, k + max(8, k // 4))
            while rounds < _MAX_ROUNDS:
                rounds += 1
                res = self._query(queries, n_results, {"ids": ids})
                if all(len(r) >= need for r in res):
                    self.last_stats = {"path": "hnsw", "rounds": rounds, "matches": matches}
                    return [self._ranked(r, k) for r in res]
                if n_results >= matches:
                    break
                n_results = min(matches, n_results * 4)
        self.last_stats = {"path": "exact" if rounds == 0 else "hnsw+exact", "rounds": rounds + 1, "matches": matches}
        return self._exact(queries, k, None, None, ids)

    def _query(self, queries: np.ndarray, n_results: int, kwargs: dict[str, Any]) -> list[list[tuple[str, float]]]:
        """Chroma HNSW: per query, ``(id, 1 - cosine distance)`` best first."""
        deadline.check("chroma", "a knn round")  # each widening round, so a deadline stops the loop
        res = self._col.query(query_embeddings=queries, n_results=n_results, include=["distances"], **kwargs)
        return [
            [(rid, 1.0 - float(d)) for rid, d in zip(ids, dists, strict=True)]
            for ids, dists in zip(res["ids"], res["distances"], strict=True)
        ]

    def _ids(self, where: Any, where_document: Any) -> list[str]:
        out: list[str] = []
        offset = 0
        while True:
            res = self._col.get(where=where, where_document=where_document, limit=_PAGE, offset=offset, include=[])
            out += res["ids"]
            if len(res["ids"]) < _PAGE:
                return out
            offset += _PAGE

    def _ranked(self, hits: list[tuple[str, float]], k: int) -> list[tuple[Any, float]]:
        """The best ``k`` of score-sorted hits, equal scores ordered by (seq, position)."""
        counts = Counter(sc for _, sc in hits[: k + 1])
        tied = {sc for sc, n in counts.items() if n > 1}
        if tied:
            ids = [rid for rid, sc in hits if sc in tied]
            # (by the ids Chroma gives back: get() lists records in its own order, not the order asked)
            got = self._col.get(ids=ids, include=["metadatas"])
            metas = dict(zip(got["ids"], got["metadatas"], strict=True))
            hits = sorted(hits, key=lambda h: (-h[1], *((int(metas[h[0]]["seq"]), int(metas[h[0]]["position"]))
                                                      if h[0] in metas else (0, 0))))
        return list(hits[:k])

    def _exact(
        self, queries: np.ndarray, k: int, where: Any, where_document: Any, ids: list[str] | None
    ) -> list[list[tuple[Any, float]]]:
        """Brute force over the rows passing ``where``/``where_document`` (or over ``ids``)."""
        keys: list[str] = []
        chunks: list[np.ndarray] = []
        if ids is None:
            offset = 0
            while True:
                res = self._col.get(where=where, where_document=where_document, limit=_PAGE, offset=offset,
                                    include=["embeddings"])
                keys += res["ids"]
                if len(res["ids"]):
                    chunks.append(np.asarray(res["embeddings"], dtype=np.float32))
                if len(res["ids"]) < _PAGE:
                    break
                offset += _PAGE
        else:
            for i in range(0, len(ids), _PAGE):
                res = self._col.get(ids=ids[i : i + _PAGE], include=["embeddings"])
                keys += res["ids"]
                if len(res["ids"]):
                    chunks.append(np.asarray(res["embeddings"], dtype=np.float32))
        if not keys:
            return [[] for _ in range(len(queries))]
        scores = queries @ V.normalize_rows(np.concatenate(chunks)).T
        out = []
        for row in scores:
            top = np.argsort(-row, kind="stable")[: k + 1]
            cut = row[top[min(k, len(top)) - 1]]
            pick = np.flatnonzero(row >= cut)  # the whole tie group at the cut
            out.append(self._ranked([(keys[i], float(row[i])) for i in pick[np.argsort(-row[pick], kind="stable")]], k))
        return out

    def fetch(self, keys: Sequence[Any]) -> list[Row]:
        """Rows for keys, in the order given; unknown keys are skipped."""
        by_id: dict[str, Row] = {}
        wanted = [str(k) for k in keys]
        with self._backend("fetch"):
            for i in range(0, len(wanted), _PAGE):
                res = self._col.get(ids=wanted[i : i + _PAGE], include=["metadatas"])
                for rid, meta in zip(res["ids"], res["metadatas"], strict=True):
                    by_id[rid] = _row(rid, meta)
        return [by_id[k] for k in wanted if k in by_id]

    def document_rows(self, doc_ids: Sequence[str]) -> dict[str, list[Row]]:
        """Every row of each document, by position; documents not stored are absent from the result."""
        ids = list(dict.fromkeys(doc_ids))
        out: dict[str, list[Row]] = {}
        with self._backend("document_rows"):
            for i in range(0, len(ids), 256):
                for rid, meta in self._records(_in_where("doc_id", ids[i : i + 256]), None):
                    row = _row(rid, meta)
                    out.setdefault(row.doc_id, []).append(row)
        for rows in out.values():
            rows.sort(key=lambda r: r.position)
        return {d: out[d] for d in ids if d in out}

    def similarities(self, vectors: np.ndarray, keys: Sequence[Any]) -> np.ndarray:
        """A ``(len(vectors), len(keys))`` cosine matrix; NaN for keys not stored."""
        queries = V.normalize_rows(np.atleast_2d(np.asarray(vectors, dtype=np.float32)))
        mat = np.full((len(keys), queries.shape[1]), np.nan, dtype=np.float32)
        index = {str(k): i for i, k in enumerate(keys)}
        wanted = list(index)
        with self._backend("similarities"):
            for i in range(0, len(wanted), _PAGE):
                res = self._col.get(ids=wanted[i : i + _PAGE], include=["embeddings"])
                for rid, emb in zip(res["ids"], res["embeddings"], strict=True):
                    mat[index[rid]] = np.asarray(emb, dtype=np.float32)
        return block_products(queries, V.normalize_rows(mat))  # (every row in a whole BLAS block)

    def vectors(self, keys: Sequence[Any]) -> np.ndarray:
        """The rows' own unit vectors, ``(len(keys), dim)`` float32; NaN for keys not stored.

        One ``get(ids=…, include=["embeddings"])`` per 4096 keys (in process for embedded Chroma, a
        round trip for a Chroma server)."""
        index: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            index.setdefault(str(k), []).append(i)
        wanted = list(index)
        found: dict[str, np.ndarray] = {}
        with self._backend("vectors"):
            for i in range(0, len(wanted), _PAGE):
                res = self._col.get(ids=wanted[i : i + _PAGE], include=["embeddings"])
                for rid, emb in zip(res["ids"], res["embeddings"], strict=True):
                    found[rid] = np.asarray(emb, dtype=np.float32)
        dim = len(next(iter(found.values()))) if found else 0
        out = np.full((len(keys), dim), np.nan, dtype=np.float32)
        for rid, vec in found.items():
            out[index[rid]] = vec
        return V.normalize_rows(out) if len(keys) else out


# ---------------------------------------------------------------------- record helpers


def _meta_views(meta: dict[str, Any]) -> dict[str, Any]:
    """The flat ``s.``/``n.``/``f.``/``b.``/``d.``/``t.`` keys for one document's metadata."""
    out: dict[str, Any] = {}
    for path, value in T.walk_metadata(meta):
        views = T.scalar_views(value)
        if not views:
            continue
        enc = ".".join(T.encode_path(path))
        for kind in ("s", "n", "f", "b"):
            if kind in views:
                out[f"{kind}.{enc}"] = views[kind]
        if "d" in views and (micros := T.datetime_micros(views["d"])) is not None:
            out[f"d.{enc}"] = micros
        out[f"t.{enc}"] = "b" if "b" in views else "n" if "f" in views else "s" if "s" in views else "x"
    return out


def _row(rid: str, meta: dict[str, Any]) -> Row:
    return Row(
        key=rid,
        doc_id=meta["doc_id"],
        position=int(meta["position"]),
        content=meta["content"],
        metadata=json.loads(meta["meta"]),
        seq=int(meta["seq"]),
        start=int(meta.get("start", 0)),
        end=int(meta.get("end", 0)),
        tail=meta.get("tail", ""),
    )


def _in_where(key: str, values: list[str]) -> dict[str, Any]:
    return {key: {"$eq": values[0]}} if len(values) == 1 else {key: {"$in": values}}


# ---------------------------------------------------------------------- filter rendering


def _key(kind: str, path: tuple[str, ...]) -> str:
    """The metadata key of a view."""
    if path[0] != "meta":
        return _BUILTIN_KEYS.get((kind, path[0]), f"{kind}:{path[0]}")
    return f"{kind}.{'.'.join(T.encode_path(path[1:]))}"


def _tag(path: tuple[str, ...]) -> str:
    return f"t.{'.'.join(T.encode_path(path[1:]))}"


def _value(kind: str, value: Any) -> Any:
    """A literal in the stored type of its view."""
    if kind == "d":
        return T.datetime_micros(value)
    if kind in ("n", "f"):
        return float(value)
    return value


def _present(kind: str, path: tuple[str, ...]) -> dict[str, Any] | None:
    """A ``where`` that the view exists, or None when it always does."""
    if T.always_present(kind, path):
        return None
    if path[0] == "meta":
        if kind == "p":
            return {_tag(path): {"$in": _TAGS}}
        if kind in ("s", "c"):
            return {_tag(path): {"$eq": "s"}}
        if kind in ("f", "b"):
            return {_tag(path): {"$eq": "n" if kind == "f" else "b"}}
    if kind == "d":
        return {_key(kind, path): {"$gte": _MIN_MICROS}}
    return {_key(kind, path): {"$gte": _MIN_FLOAT}}  # n views (and f of built-ins: never stored)


def _and(items: list[dict[str, Any]]) -> dict[str, Any]:
    return items[0] if len(items) == 1 else {"$and": items}


def _render(node: T.VNode) -> dict[str, Any]:
    """A view-level node as a Chroma ``where`` (constants and Opaque are gone before this)."""
    if isinstance(node, T.Present):
        cond = _present(node.kind, node.path)
        assert cond is not None  # always-present views are folded to TRUE by lowering
        return cond
    if isinstance(node, T.Absent):
        return {_tag(node.path): {"$nin": _TAGS}}
    if isinstance(node, T.Cmp):
        return {_key(node.kind, node.path): {_CMP[node.op]: _value(node.kind, node.value)}}
    if isinstance(node, T.InSet):
        return {_key(node.kind, node.path): {"$in": [_value(node.kind, v) for v in node.values]}}
    if isinstance(node, T.NotIn):
        vals = [_value(node.kind, v) for v in node.values]
        cond = {_key(node.kind, node.path): {"$ne": vals[0]} if len(vals) == 1 else {"$nin": vals}}
        present = _present(node.kind, node.path)
        return cond if present is None else {"$and": [present, cond]}
    if isinstance(node, T.VAnd):
        return _and([_render(i) for i in node.items])
    if isinstance(node, T.VOr):
        return {"$or": [_render(i) for i in node.items]}
    raise TypeError(f"cannot render {node!r}")


def _strip_substr(node: T.VNode) -> T.VNode:
    """CONTAINS tests Chroma cannot place (not directly under the top AND on content) as checked supersets."""
    if isinstance(node, (T.Substr, T.NotSubstr)):
        op = "contains" if isinstance(node, T.Substr) else "not_contains"
        return T.Opaque(Cond(op, node.path, node.needle), T.present("s", node.path))
    if isinstance(node, T.VAnd):
        return T.VAnd(tuple(_strip_substr(i) for i in node.items))
    if isinstance(node, T.VOr):
        return T.VOr(tuple(_strip_substr(i) for i in node.items))
    return node


def _leaf_text(cond: Any) -> str:
    value = cond.value.isoformat() if hasattr(cond.value, "isoformat") else cond.value
    return f"{'.'.join(cond.path)} {cond.op} {json.dumps(value, default=str)}"


__all__ = ["ChromaStore", "record_id"]
