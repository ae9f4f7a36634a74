"""Qdrant store: one point per sentence, cosine distance, filters pushed as a Qdrant ``Filter``.

The same code serves Qdrant Edge (Qdrant's Rust engine in process: ``"qdrant"`` in a temporary
directory, ``qdrant:///path`` or ``path=`` persistent; :mod:`nlql.stores.qdrant.edge`) and a Qdrant
server (``qdrant+http://host:6333``, ``url=`` or ``client=``, through qdrant-client): the store speaks
qdrant-client's calls and models, and the Edge client answers them with the Edge shard's.

Payload of a point (everything a re-attached store needs, no re-ingest)::

    doc_id, position, content, uid ("<doc_id>#<position>"), start, end, tail, seq,
    meta          the document metadata as given (returned to users)
    _s _n _f _b _d _c _p   typed views of every metadata path (see nlql.stores._typed), nested by
                  encoded key with the value under "_", e.g. meta.year -> _n.year._,
                  meta["a.b"]["c"] -> _s.-a_2e_b.c._ (so a dict-valued key never passes for a view)
    _n_doc_id, _c_content, ...   typed views of the built-in fields, where they differ from the field

Point ids are UUIDv5 of ``(doc_id, position)``; ``doc_id`` has a keyword index (delete/replace by doc)
and ``seq`` an integer index (``max_seq`` by ``order_by``).

BM25 in the server (:mod:`nlql.stores._terms`): each point also carries ``terms`` (its distinct analysed
terms, keyword-indexed), ``tfs`` and ``nterms``; the collection ``<c>_stats`` holds one totals record per
writer (sentences, total length, largest seq) and the analyzer. ``bm25_matches`` reads only the points
that hold a query term, so every engine on one server ranks BM25 the same, at once after a write
(``Capabilities.KEYWORD_STATS``). A collection written before these statistics existed keeps BM25 in the
engine.

Pushdown. Qdrant's own comparisons differ from SPEC §6 (type-strict ``match``, ``Range`` blind to
numeric strings, ``must_not`` matching missing keys, any-element matching on arrays, token-based
``text``), so filters never touch ``meta`` directly: each leaf becomes comparisons on the typed views,
which hold scalars only, with explicit presence tests for negations (SQL: ``ne`` excludes nulls).
Float equality is ``Range(gte=v, lte=v)``; datetimes use ``DatetimeRange`` on canonical RFC 3339
strings; CONTAINS is ``MatchSubstring`` on the casefolded view. Qdrant has no string range, so an
ordering comparison against a string (``meta.name < "m"``) is pushed as a superset (the string view
exists) and re-checked in the adapter with ``pyfilter``; explain shows it. LIKE and MATCH stay residual.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import numpy as np

from nlql import deadline
from nlql import values as V
from nlql.errors import BackendError, MissingDependencyError, NLQLTimeoutError
from nlql.kernels import block_products
from nlql.pushdown import Capabilities, Filter, NativeFilter, filter_leaves
from nlql.schema import DataSummary
from nlql.stores import _terms, pyfilter
from nlql.stores import _typed as T
from nlql.stores.base import DocRecord, Row, backend_errors, unit_id

try:
    from qdrant_client import QdrantClient
    from qdrant_client import models as qm
except ImportError:  # pragma: no cover - exercised only without the extra
    QdrantClient = None  # type: ignore[assignment,misc]
    qm = None  # type: ignore[assignment]

from nlql.stores.qdrant import edge
from nlql.stores.qdrant.edge import EdgeClient

_NAMESPACE = uuid.UUID("8d0c6a53-2b9e-4d8e-9a57-6f1b0f3c1a77")
_ANALYZER_ID = "00000000-0000-0000-0000-00000000a7a1"
_UPSERT_BATCH = 512
_SCROLL_PAGE = 1024
#: The named sparse vector of each point: its BM25 term weights (:func:`nlql.stores._terms.sparse_weights`),
#: so a BM25 arm's top rows come from Qdrant's sparse search (collections created before it have none).
_SPARSE = "bm25"
_INT64 = (-(2**63), 2**63 - 1)
_ROW_FIELDS = ["doc_id", "position", "content", "seq", "start", "end", "tail", "meta", "_mj"]

# built-in views that are the stored field itself (always present)
_BUILTIN_KEYS = {
    ("s", "doc_id"): "doc_id",
    ("s", "content"): "content",
    ("s", "id"): "uid",
    ("n", "position"): "position",
    ("f", "position"): "position",
}

_RANGE_OP = {"lt": "lt", "le": "lte", "gt": "gt", "ge": "gte"}

_OPS = frozenset({
    "eq", "ne", "lt", "le", "gt", "ge", "in", "not_in",
    "is_null", "is_not_null", "contains", "not_contains",
    # HAS (SPEC §11): MatchAny / MatchValue on the stored metadata where exact, else checked in the adapter
    "has", "has_any", "has_all", "not_has", "not_has_any", "not_has_all",
})


#: Collection-metadata keys of the store's record (``get_info``/``set_info``) start with this.
_INFO_PREFIX = "nlql_info:"


def point_id(doc_id: str, position: int) -> str:
    """The deterministic point id (a UUID string) of a sentence."""
    return str(uuid.uuid5(_NAMESPACE, json.dumps([doc_id, position], ensure_ascii=True)))


class QdrantStore:
    """A :class:`~nlql.stores.base.Store` on Qdrant (Qdrant Edge in process, or a server).

    Args:
        client: An existing ``QdrantClient`` (a server, or qdrant-client's local mode) or
            :class:`~nlql.stores.qdrant.edge.EdgeClient` (two stores sharing one Edge directory);
            the store never closes a client it did not create.
        location: ``":memory:"`` (the default when nothing else is given): Qdrant Edge in a temporary
            directory, removed at ``close()``.
        path: A directory for a persistent Qdrant Edge store (one process at a time).
        url: A Qdrant server URL; ``api_key`` authenticates.
        collection: The collection name.
        exact: Search exactly (brute force, ``search_params.exact``); else HNSW with ``hnsw_ef``.
        hnsw_ef: The HNSW beam width when not exact.

    Raises:
        MissingDependencyError: ``qdrant-client`` is not installed.
    """

    def __init__(
        self,
        client: Any = None,
        *,
        location: str | None = None,
        path: str | None = None,
        url: str | None = None,
        api_key: str | None = None,
        collection: str = "nlql",
        exact: bool = True,
        hnsw_ef: int = 128,
        analyzer: Any = None,
    ) -> None:
        if QdrantClient is None or (client is None and url is None and not edge.available()):
            raise MissingDependencyError("qdrant", "qdrant-client" if QdrantClient is None else "qdrant-edge-py")
        from nlql.text.analyzer import Analyzer

        self.analyzer = analyzer if analyzer is not None else Analyzer()
        self.stats_collection = f"{collection}_stats"
        self._writer = str(uuid.uuid4())
        self._mine = {"n": 0, "len": 0, "seq": 0}
        self.collection = collection
        self.exact = exact
        self.hnsw_ef = hnsw_ef
        self.capabilities = Capabilities(
            NAME="qdrant",
            OPS=_OPS,
            FIELDS=frozenset({"meta", "doc_id", "id", "position", "content"}),
            OR=True,
            NESTED_KEYS=True,
            NUMERIC_STRINGS=True,
            FLOAT_EQUALITY=True,
            DATETIMES=True,
            EXACT=exact,
            SCORE_THRESHOLD=True,
            DEADLINE=True,
            BM25=True,
            KEYWORD_STATS=True,
            ANALYZER=True,
            ENTITY_LINKS=True,  # each point's entity names in its payload (_ent): the graph rebuilds from them
            # knn's scores rounded as similarities() rounds them (Qdrant's float32 cosine, as numpy's
            # within the noise the rounding absorbs): the engine keeps them instead of asking again
            KNN_SCORES=True,
            COUNTS=True,
            COUNT_KEYS=1,
            COUNT_CALLS="exact count and facet calls (a key whose values are strings, or doc_id)",
            DESCRIBES_DATA=True,
        )
        self.last_stats: dict[str, Any] = {}
        self._owns_client = client is None
        self._dim: int | None = None
        self._max_seq = 0
        self._sparse = False  # the collection has the BM25 sparse vector (created since it was added)
        self._indexed: set[str] | None = None  # payload keys with an index (read at the first write)
        # the rows of this thread's last knn (its query read them with the scores), for the fetch that
        # follows in the same search (used once); on Qdrant Edge a write in between drops them
        self._kept = threading.local()
        with self._backend("connect"):
            if client is not None:
                self.client = client
            elif url is not None:
                self.client = QdrantClient(url=url, api_key=api_key)
            elif path is not None:
                self.client = EdgeClient(path)
            elif location in (None, ":memory:"):
                self.client = EdgeClient(None)
            else:
                raise BackendError("qdrant", f"unknown location {location!r}: use path= or url=")
        self.edge = isinstance(self.client, EdgeClient)
        # qdrant-client's local mode (a client passed in) is always brute force and warns about search params
        self._local = type(getattr(self.client, "_client", None)).__name__ == "QdrantLocal"

    # ------------------------------------------------------------------ lifecycle

    @contextmanager
    def _backend(self, what: str) -> Iterator[None]:
        """Turn driver failures into :class:`BackendError` naming the store and the operation; a call
        made after the search's deadline, or failing because it passed, is :class:`NLQLTimeoutError`."""
        deadline.check("qdrant", what)
        try:
            with backend_errors("qdrant", what):
                yield
        except BackendError as exc:
            current = deadline.current()
            if current is not None and current.expired():
                raise NLQLTimeoutError(f"qdrant: {what} ran out of time ({current.timeout} s)",
                                       hint="raise timeout= or narrow the query") from exc
            raise

    @staticmethod
    def _timeout() -> dict[str, Any]:
        """The request ``timeout`` (whole seconds, the API's unit) from the search's time left."""
        left = deadline.remaining()
        return {} if left is None else {"timeout": max(1, math.ceil(left))}

    def open(self, dim: int) -> None:
        """Create the collection (cosine, ``dim``) and its payload indexes, or attach to an existing one.

        Raises:
            BackendError: The collection exists with another vector size or distance.
        """
        with self._backend("open"):
            if self.client.collection_exists(self.collection):
                info = self.client.get_collection(self.collection)
                params = info.config.params.vectors
                size = getattr(params, "size", None)
                distance = getattr(params, "distance", None)
                if size != dim or distance != qm.Distance.COSINE:
                    raise BackendError(
                        "qdrant",
                        f"collection {self.collection!r} has vectors of size {size} ({distance}); "
                        f"the embedder needs size {dim} (Cosine)",
                    )
                self._sparse = _SPARSE in (getattr(info.config.params, "sparse_vectors", None) or {})
            else:
                self.client.create_collection(
                    self.collection,
                    vectors_config=qm.VectorParams(size=dim, distance=qm.Distance.COSINE),
                    sparse_vectors_config={_SPARSE: qm.SparseVectorParams()},
                )
                self._sparse = True
                self._create_indexes()
            self._dim = dim
            self._max_seq = self._read_max_seq()
            self._open_stats()

    def get_info(self, key: str) -> str | None:
        """A value of the store's record, kept in the collection's metadata (so a server shares it)."""
        with self._backend("get_info"):
            if not self.client.collection_exists(self.collection):
                return None
            meta = self.client.get_collection(self.collection).config.metadata or {}
            value = meta.get(_INFO_PREFIX + key)
            return None if value is None else str(value)

    def set_info(self, key: str, value: str) -> None:
        """Set a value of the store's record (Qdrant merges it into the collection's metadata)."""
        with self._backend("set_info"):
            self.client.update_collection(self.collection, metadata={_INFO_PREFIX + key: str(value)})

    def _create_indexes(self) -> None:
        import warnings

        with warnings.catch_warnings():  # local mode warns that payload indexes have no effect there
            warnings.simplefilter("ignore")
            self.client.create_payload_index(self.collection, "doc_id", field_schema=qm.PayloadSchemaType.KEYWORD)
            self.client.create_payload_index(self.collection, "seq", field_schema=qm.PayloadSchemaType.INTEGER)
            self.client.create_payload_index(self.collection, "position", field_schema=qm.PayloadSchemaType.INTEGER)
            self.client.create_payload_index(self.collection, "terms", field_schema=qm.PayloadSchemaType.KEYWORD)

    def _open_stats(self) -> None:
        """Create or attach the per-writer totals; keep BM25 in the engine for a pre-statistics collection."""
        if not self.client.collection_exists(self.stats_collection):
            self.client.create_collection(self.stats_collection,
                                          vectors_config=qm.VectorParams(size=1, distance=qm.Distance.DOT))
        config = json.dumps(self.analyzer.config(), sort_keys=True)
        got = self.client.retrieve(self.stats_collection, ids=[_ANALYZER_ID], with_payload=True)
        stored = got[0].payload.get("config") if got else None
        if stored is None:
            if self._count(None) == 0:
                self.client.upsert(self.stats_collection, points=[qm.PointStruct(
                    id=_ANALYZER_ID, vector=[1.0], payload={"kind": "analyzer", "config": config})], wait=True)
                stored = config
        if stored != config:
            self.capabilities = dataclasses.replace(self.capabilities, BM25=False, KEYWORD_STATS=False)

    def _totals(self) -> _terms.Totals:
        flt = qm.Filter(must=[qm.FieldCondition(key="kind", match=qm.MatchValue(value="stats"))])
        points, _ = self.client.scroll(self.stats_collection, scroll_filter=flt, limit=100_000, with_payload=True)
        return _terms.Totals.sum(p.payload for p in points)

    def _bump(self, dn: int, dlen: int, seq: int) -> None:
        self._mine["n"] += dn
        self._mine["len"] += dlen
        self._mine["seq"] = max(self._mine["seq"], seq)
        self.client.upsert(self.stats_collection, points=[qm.PointStruct(
            id=self._writer, vector=[1.0], payload={"kind": "stats", **self._mine})], wait=True)

    def keyword_index(self, analyzer: Any = None) -> _terms.StoreKeywordIndex | None:
        """The engine's BM25 source when this store keeps terms for the engine's analyzer, else None."""
        return _terms.keyword_index(self, analyzer)

    def bm25_matches(self, text: str) -> tuple[list[tuple[str, int]], np.ndarray]:
        """Every point holding a term of ``text``: its (doc_id, position) and BM25 score (> 0)."""
        qkeys = _terms.query_keys(self.analyzer.terms(text))
        if not qkeys:
            return [], np.zeros(0, dtype=np.float64)
        with self._backend("bm25"):
            totals = self._totals()
            flt = qm.Filter(must=[qm.FieldCondition(key="terms", match=qm.MatchAny(any=qkeys))])
            points = list(self._scroll(flt, ["doc_id", "position", "terms", "tfs", "nterms"]))
        rows = [(p.payload["terms"], p.payload["tfs"], int(p.payload["nterms"])) for p in points]
        df = _terms.document_frequencies(qkeys, (r[0] for r in rows))
        scores = _terms.bm25_scores(qkeys, rows, df, totals)
        return [(p.payload["doc_id"], int(p.payload["position"])) for p in points], scores

    def bm25_candidates(self, text: str, flt: NativeFilter | None = None,
                        n: int | None = None) -> tuple[list[str], np.ndarray]:
        """Point ids and BM25 scores (> 0) of the points passing ``flt`` that hold a term of ``text``.

        Every such point is read; with ``n``, only the ``n`` best are returned, ties at the cut broken
        by insertion order (seq, position) as the engine ranks an arm, so a corpus of short texts whose
        scores tie by the hundred does not hand the engine hundreds of rows to fetch and score.
        """
        qkeys = _terms.query_keys(self.analyzer.terms(text))
        if not qkeys or n == 0 or (flt is not None and flt.extra.get("empty")):  # n == 0: LIMIT 0 needs none
            return [], np.zeros(0, dtype=np.float64)
        if n is not None and self._sparse:
            with self._backend("bm25"):
                top = self._bm25_top(qkeys, flt, n)
            if top is not None:
                return top
        check = flt.extra.get("check") if flt is not None else None
        native = flt.native if flt is not None else None
        terms = qm.FieldCondition(key="terms", match=qm.MatchAny(any=qkeys))
        order = ["seq", "position"] if n is not None else []  # (to cut ties at n in insertion order)
        fields = ["terms", "tfs", "nterms"] + (_ROW_FIELDS if check is not None else order)
        with self._backend("bm25"):
            totals = self._totals()
            cond = qm.Filter(must=[terms] + ([native] if native is not None else []))
            points = list(self._scroll(cond, fields))
            if check is not None:
                points = [p for p in points if pyfilter.row_passes(check, _row(p))]
            if native is not None or check is not None:
                df = {t: self._count(_term_filter(t)) for t in qkeys}
            else:
                df = _terms.document_frequencies(qkeys, (p.payload["terms"] for p in points))
        rows = [(p.payload["terms"], p.payload["tfs"], int(p.payload["nterms"])) for p in points]
        scores = _terms.bm25_scores(qkeys, rows, df, totals)
        if n is not None and len(points) > n:
            return _terms.first_n([str(p.id) for p in points], scores, [int(p.payload["seq"]) for p in points],
                                  [int(p.payload["position"]) for p in points], n)
        return [str(p.id) for p in points], scores

    def _bm25_top(self, qkeys: list[str], flt: NativeFilter | None,
                  n: int) -> tuple[list[str], np.ndarray] | None:
        """The proven top ``n`` by BM25 (ties kept, then cut in insertion order) among the points passing
        ``flt``, read best-first by Qdrant's sparse search over the points' BM25 weights and widened until
        the bound of :func:`nlql.stores._terms.sparse_weights` closes; None when it does not close within
        :data:`~nlql.stores._terms.SPARSE_MAX_LIMIT` points (the caller reads every point holding a term)."""
        check = flt.extra.get("check") if flt is not None else None
        native = flt.native if flt is not None else None
        totals = self._totals()
        df = {t: self._count(_term_filter(t)) for t in qkeys}
        query, ratio = _terms.sparse_query(qkeys, df, totals)
        if not query:
            return [], np.zeros(0, dtype=np.float64)
        vector = qm.SparseVector(indices=list(query), values=list(query.values()))
        fields = ["terms", "tfs", "nterms", "seq", "position"] + (_ROW_FIELDS if check is not None else [])

        def read(limit: int) -> tuple[list[Any], float, bool]:
            points = self.client.query_points(self.collection, query=vector, using=_SPARSE, query_filter=native,
                                              limit=limit, with_payload=fields, **self._timeout()).points
            smallest = float(points[-1].score) if points else 0.0
            exhausted = len(points) < limit
            if check is not None:
                points = [p for p in points if pyfilter.row_passes(check, _row(p))]
            return points, smallest, exhausted

        def score(points: list[Any]) -> np.ndarray:
            return _terms.bm25_scores(qkeys, [(p.payload["terms"], p.payload["tfs"], int(p.payload["nterms"]))
                                              for p in points], df, totals)

        got = _terms.sparse_top(n, read, score, ratio)
        if got is None:
            return None
        kept, scores, rounds, limit = got
        self.last_stats = {"path": "bm25-sparse", "rounds": rounds, "read": limit}
        return _terms.first_n([str(p.id) for p in kept], scores, [int(p.payload["seq"]) for p in kept],
                              [int(p.payload["position"]) for p in kept], n)

    def bm25_scores(self, text: str, rows: Sequence[Row]) -> np.ndarray:
        """BM25 of ``text`` for each row (0.0 where no query term occurs); statistics over all points."""
        qkeys = _terms.query_keys(self.analyzer.terms(text))
        out = np.zeros(len(rows), dtype=np.float64)
        if not qkeys or not rows:
            return out
        with self._backend("bm25"):
            totals = self._totals()
            df = {t: self._count(_term_filter(t)) for t in qkeys}
            # a row of this store is keyed by its point id (_row): no id to compute again
            keys = [str(r.key) for r in rows]
            got = {str(p.id): p.payload for p in self.client.retrieve(
                self.collection, ids=list(dict.fromkeys(keys)), with_payload=["terms", "tfs", "nterms"])}
        hit = [i for i, k in enumerate(keys) if "terms" in got.get(k, {})]
        if hit:
            out[hit] = _terms.bm25_scores(
                qkeys, [(got[keys[i]]["terms"], got[keys[i]]["tfs"], int(got[keys[i]]["nterms"])) for i in hit],
                df, totals)
        return out

    def _read_max_seq(self) -> int:
        points, _ = self.client.scroll(
            self.collection,
            limit=1,
            order_by=qm.OrderBy(key="seq", direction=qm.Direction.DESC),
            with_payload=["seq"],
        )
        return int(points[0].payload["seq"]) if points else 0

    def close(self) -> None:
        """Release the client if this store created it (local mode unlocks its folder)."""
        if self._owns_client and self.client is not None:
            with self._backend("close"):
                self.client.close()
        self.client = None

    # ------------------------------------------------------------------ writes

    def upsert(self, docs: Sequence[DocRecord]) -> None:
        """Write documents, replacing every stored document with the same ``doc_id``.

        New points overwrite old ones at the same position (same point id); positions past the new
        length are deleted afterwards (found by probing the point at position ``len(units)``: units are
        numbered 0..n-1), so a reader never sees a document vanish mid-call. Qdrant has no
        multi-point transactions: a failure mid-call raises :class:`BackendError`, and repeating the
        call repairs the document.
        """
        latest: dict[str, DocRecord] = {}
        for doc in docs:
            latest[doc.doc_id] = doc
        if not latest:
            return
        points: list[Any] = []
        views: set[tuple[str, str]] = set()
        for doc in latest.values():
            points.extend(self._points(doc, views))
        with self._backend("upsert"):
            self._index_views(views)
            old = self._old_lengths(list(latest))
            step, extra = _UPSERT_BATCH, {}
            if self.edge:  # one update; the texts the payloads are made of checked for the string code
                step, extra = max(1, len(points)), {"plain": not _edge_code_needed(latest.values())}
            for i in range(0, len(points), step):
                self.client.upsert(self.collection, points=points[i : i + step], wait=True, **extra)
            # positions are 0..n-1, so an older, longer version shows as a point at position n
            probes = {point_id(d, len(doc.units)): d for d, doc in latest.items()}
            found = self.client.retrieve(self.collection, ids=list(probes), with_payload=False)
            longer = [probes[str(p.id)] for p in found]
            for i in range(0, len(longer), 256):
                stale: list[Any] = [
                    qm.Filter(
                        must=[qm.FieldCondition(key="doc_id", match=qm.MatchValue(value=d))],
                        must_not=[qm.HasIdCondition(has_id=[point_id(d, u.position) for u in latest[d].units])],
                    )
                    for d in longer[i : i + 256]
                ]
                self.client.delete(
                    self.collection, points_selector=qm.FilterSelector(filter=qm.Filter(should=stale)), wait=True
                )
            new_len = sum(int(p.payload["nterms"]) for p in points)
            self._bump(len(points) - len(old), new_len - sum(old), max(d.seq for d in latest.values()))
        self._max_seq = max(self._max_seq, *(doc.seq for doc in latest.values()))

    def _index_views(self, views: set[tuple[str, str]]) -> None:
        """A payload index on every typed view the points hold that has none yet (keyword for strings,
        float for numbers, datetime, bool), so a pushed filter reads an index instead of every payload
        (on Qdrant Edge at 20k points a 10 % equality filter: 160 ms unindexed, 0.5-5 ms indexed), and a
        keyword index on each raw metadata list of strings that HAS matches (:func:`_list_keys`).

        ``views``: ``(payload key, view kind)`` of what the points hold (kind ``"list"`` for such a list),
        gathered by :meth:`_points` once per document."""
        if self._indexed is None:
            self._indexed = self._payload_schema()
        for key, kind in sorted(views):
            if key not in self._indexed:
                schema = qm.PayloadSchemaType.KEYWORD if kind == "list" else _VIEW_SCHEMA[kind](self.edge)
                self.client.create_payload_index(self.collection, key, field_schema=schema)
                self._indexed.add(key)

    def _payload_schema(self) -> set[str]:
        info = self.client.get_collection(self.collection)
        return set((getattr(info, "payload_schema", None) or {}).keys())

    def _old_lengths(self, doc_ids: list[str]) -> list[int]:
        """``nterms`` of every stored point of these documents (for the BM25 totals)."""
        flt = qm.Filter(must=[qm.FieldCondition(key="doc_id", match=qm.MatchAny(any=doc_ids))])
        return [int((p.payload or {}).get("nterms", 0)) for p in self._scroll(flt, ["nterms"])]

    def _points(self, doc: DocRecord, views: set[tuple[str, str]] | None = None) -> list[Any]:
        """The document's points; into ``views``, the ``(payload key, kind)`` of the typed views and raw
        metadata lists they hold (what :meth:`_index_views` indexes)."""
        meta = V.normalize_metadata(doc.metadata or {})
        base: dict[str, Any] = {"seq": doc.seq, "meta": meta}
        if _needs_json(meta):  # ints outside int64 would not survive the server's JSON
            base["_mj"] = json.dumps(meta)
        base.update(_meta_views(meta))
        if views is not None:  # (the document's views are its points' views, bar the built-in fields')
            views.update(_view_keys(base))
            views.update((key, "list") for key in _list_keys(meta))
        vectors = np.asarray(doc.vectors, dtype=np.float32)
        names = doc.entities if doc.entities is not None else [None] * len(doc.units)
        out = []
        for unit, vec, ents in zip(doc.units, vectors, names, strict=True):
            payload = dict(base)
            if ents is not None:
                payload["_ent"] = list(ents)
            terms, tfs, length = _terms.sentence_terms(self.analyzer.terms(unit.content))
            payload.update(
                terms=terms,
                tfs=tfs,
                nterms=length,
                doc_id=doc.doc_id,
                position=unit.position,
                content=unit.content,
                uid=unit_id(doc.doc_id, unit.position),
                start=unit.start,
                end=unit.end,
                tail=unit.tail,
            )
            for field in ("doc_id", "id", "content"):
                value = T.builtin_value(field, doc.doc_id, unit.position, unit.content)
                for kind, view in T.scalar_views(value).items():
                    if kind in ("n", "d", "c"):
                        payload[f"_{kind}_{field}"] = _view_json(kind, view)
                        if views is not None:
                            views.add((f"_{kind}_{field}", kind))
            vector: Any = vec.tolist()
            if self._sparse and terms:
                weights = _terms.sparse_weights(terms, tfs, length)
                vector = {"": vector, _SPARSE: qm.SparseVector(indices=list(weights), values=list(weights.values()))}
            out.append(qm.PointStruct(id=point_id(doc.doc_id, unit.position), vector=vector, payload=payload))
        return out

    def delete(self, doc_ids: Sequence[str]) -> int:
        """Delete documents by id; returns how many of them existed."""
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return 0
        with self._backend("delete"):
            flt = qm.Filter(must=[qm.FieldCondition(key="doc_id", match=qm.MatchAny(any=ids))])
            old = list(self._scroll(flt, ["doc_id", "nterms"]))
            found = {p.payload["doc_id"] for p in old}
            if found:
                self.client.delete(self.collection, points_selector=qm.FilterSelector(filter=flt), wait=True)
                self._bump(-len(old), -sum(int(p.payload.get("nterms", 0)) for p in old), 0)
        return len(found)

    # ------------------------------------------------------------------ counts

    def count_groups(self, flt: NativeFilter | None, unit: str,
                     paths: Sequence[tuple[str, ...]]) -> list[tuple[tuple[Any, ...], int]] | None:
        """``COUNT(unit) BY`` at most one key (``Capabilities.COUNT_KEYS``) from Qdrant's own exact ``count``
        and ``facet`` calls (:class:`~nlql.stores.base.CountsGroups`): ``doc_id`` from its keyword index, a
        metadata key from the keyword index of its string view, with the null group (a missing or null
        value) counted apart. DOCUMENT counts each passing document's first sentence (position 0) under a
        filter of document-level values. None (the engine counts) when the filter needs the adapter's
        re-check or reads sentence values under DOCUMENT, or when a passing row holds a value at the key
        that is not a string (a number, a boolean, a list, an object: no one view holds them all)."""
        if flt is not None and flt.extra.get("check") is not None:
            return None
        native = flt.native if flt is not None else None
        with self._backend("count"):
            if unit == "DOCUMENT":
                if flt is not None and not flt.extra.get("document_level"):
                    return None  # (the planner keeps sentence-level conditions of a DOCUMENT query residual)
                # every sentence of a document passes or none does: count each one's first
                native = _all_of(native, qm.FieldCondition(key="position", match=qm.MatchValue(value=0)))
            total = self._count(native)
            if not paths or not total:
                return [((), total)] if total and not paths else []
            path = tuple(paths[0])
            if path == ("doc_id",):
                return self._facet("doc_id", native, total)
            present = _present("p", path)
            assert present is not None  # (a metadata path is never always present)
            if self._count(_all_of(native, present, _is_empty(_key("s", path)))):
                return None
            nulls = self._count(_all_of(native, qm.Filter(must_not=[present])))
            if nulls < total and not self._has_index(_key("s", path)):
                return None  # (strings written by a writer that made no index: the facet cannot read them)
            groups = self._facet(_key("s", path), native, total) if nulls < total else []
        return groups + ([((None,), nulls)] if nulls else [])

    def _has_index(self, key: str) -> bool:
        """Whether ``key`` has a payload index (read again from the collection when not known here)."""
        if self._indexed is None or key not in self._indexed:
            self._indexed = self._payload_schema()
        return key in self._indexed

    def _count(self, native: Any) -> int:
        """The exact number of points passing ``native`` (None: every point)."""
        return int(self.client.count(self.collection, count_filter=native, exact=True, **self._timeout()).count)

    def describe_data(self, sample: int) -> DataSummary:
        """Sizes from two exact counts (every point; the points at position 0, one per document) and the
        metadata keys of at most ``sample`` documents: one scroll page of first sentences, not a read of
        the collection (the engine's fallback enumerates every key: minutes at a million points)."""
        first = qm.Filter(must=[qm.FieldCondition(key="position", match=qm.MatchValue(value=0))])
        n = max(1, int(sample))
        with self._backend("describe_data"):
            sentences = self._count(None)
            documents = self._count(first)
            points, _ = self.client.scroll(self.collection, **self._timeout(), scroll_filter=first, limit=n,
                                           with_payload=["meta", "_mj"], with_vectors=False)
        metas = [json.loads(p.payload["_mj"]) if "_mj" in p.payload else p.payload.get("meta") or {} for p in points]
        return DataSummary.from_sample(documents, sentences, metas, f"{len(metas)} documents (one scroll page)")

    def _facet(self, key: str, native: Any, most: int) -> list[tuple[tuple[Any, ...], int]]:
        """``((value,), points)`` per value of the indexed keyword ``key`` among the points passing ``native``
        (``most``: how many pass, so no value is left out)."""
        got = self.client.facet(self.collection, key, facet_filter=native, limit=max(1, most), exact=True,
                                **self._timeout())
        return [((h.value,), int(h.count)) for h in got.hits if h.count]

    # ------------------------------------------------------------------ entity links

    def entity_rows(self) -> list[tuple[str, int, int, str]] | None:
        """Every point's entity names as ``(doc_id, seq, position, name)`` rows (one scroll of four
        payload fields); None when some point was written without them (by an older version)."""
        rows: list[tuple[str, int, int, str]] = []
        with self._backend("entity_rows"):
            for p in self._scroll(None, ["doc_id", "seq", "position", "_ent"]):
                payload = p.payload or {}
                names = payload.get("_ent")
                if not isinstance(names, list):
                    return None
                d, s, pos = payload["doc_id"], int(payload["seq"]), int(payload["position"])
                rows.extend((d, s, pos, n) for n in names if isinstance(n, str))
        return rows

    def adopt_entities(self, rows: Sequence[tuple[str, int, int, str]]) -> None:
        """Points written without names keep none (the engine extracts them again when it rebuilds)."""

    # ------------------------------------------------------------------ reads

    def count(self) -> int:
        """The number of stored sentences."""
        with self._backend("count"):
            return self._count(None)

    def max_seq(self) -> int:
        """The largest ``seq`` any writer stored (or this store wrote); 0 when empty, as the built-in store."""
        with self._backend("max_seq"):
            return max(self._max_seq, self._totals().max_seq)

    def _scroll(self, flt: Any, payload: Any, with_vectors: bool = False) -> Iterator[Any]:
        offset = None
        while True:
            points, offset = self.client.scroll(
                self.collection,
                **self._timeout(),
                scroll_filter=flt,
                limit=_SCROLL_PAGE,
                offset=offset,
                with_payload=payload,
                with_vectors=with_vectors,
            )
            yield from points
            if offset is None:
                return

    def compile_filter(self, flt: Filter) -> NativeFilter:
        """Translate a pushed filter to a Qdrant ``Filter`` over the typed views.

        ``NativeFilter.text`` is the filter as compact JSON; when a leaf needs the adapter's re-check it
        is followed by ``then adapter check: …``. ``extra`` holds ``check`` (the filter to re-check, or
        None) and ``empty`` (True when no row can pass).
        """
        node = T.lower_filter(flt)
        check = flt if T.needs_check(node) else None
        # every sentence of a document passes or none does (COUNT(DOCUMENT) reads first sentences only)
        level = all(c.path[0] in ("meta", "doc_id") for c in filter_leaves(flt))
        native_node = T.native_part(node)
        if native_node == T.FALSE:
            return NativeFilter(None, "FALSE (no row can pass)", {"check": None, "empty": True,
                                                                   "document_level": level})
        native = None
        if native_node != T.TRUE:
            cond = _render(native_node)
            native = cond if isinstance(cond, qm.Filter) else qm.Filter(must=[cond])
        text = _filter_json(native) if native is not None else "{}"
        if check is not None:
            text += " then adapter check: " + "; ".join(sorted({_leaf_text(c) for c in T.opaque_leaves(node)}))
        return NativeFilter(native, text, {"check": check, "empty": False, "document_level": level})

    def _candidates(self, flt: NativeFilter) -> list[tuple[int, int, str]]:
        """``(seq, position, key)`` of every row passing ``flt`` (with the adapter re-check if needed)."""
        check = flt.extra.get("check")
        fields = _ROW_FIELDS if check is not None else ["seq", "position"]
        out = []
        for p in self._scroll(flt.native, fields):
            if check is not None and not pyfilter.row_passes(check, _row(p)):
                continue
            out.append((int(p.payload["seq"]), int(p.payload["position"]), str(p.id)))
        return out

    def scan(self, flt: NativeFilter | None = None) -> list[Any]:
        """Every key passing ``flt``, in insertion order (seq, position)."""
        if flt is not None and flt.extra.get("empty"):
            return []
        with self._backend("scan"):
            rows = self._candidates(flt if flt is not None else NativeFilter(None, "{}", {}))
        rows.sort()
        return [key for _, _, key in rows]

    def knn(
        self,
        vectors: np.ndarray,
        k: int,
        flt: NativeFilter | None = None,
        min_score: float | None = None,
    ) -> list[list[tuple[Any, float]]]:
        """Top-``k`` (key, cosine) per query among rows passing ``flt``, best first.

        Ties on the score are broken by (seq, position). With a filter that needs the adapter re-check,
        the passing keys are collected first and searched with a ``has_id`` condition. When not
        ``exact`` (HNSW on a server), a filtered query that returns fewer than ``k`` rows is checked
        against ``count`` and searched exactly if it under-filled, so it returns ``min(k, matches)``.
        ``min_score`` is sent as ``score_threshold`` (nudged down one ulp, so a score equal to it is
        never dropped) and applied again here as ``score >= min_score``.
        """
        queries = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if k <= 0 or (flt is not None and flt.extra.get("empty")):
            return [[] for _ in range(len(queries))]
        native = flt.native if flt is not None else None
        path = "native"
        with self._backend("knn"):
            if flt is not None and flt.extra.get("check") is not None:
                path = "checked"
                keys: list[Any] = [key for _, _, key in self._candidates(flt)]
                if not keys:
                    self.last_stats = {"path": path, "rounds": 0, "candidates": 0}
                    return [[] for _ in range(len(queries))]
                native = qm.Filter(must=[qm.HasIdCondition(has_id=keys)])
            if self._local:
                params = None
            elif self.exact or path == "checked":
                params = qm.SearchParams(exact=True)
            else:
                params = qm.SearchParams(hnsw_ef=max(self.hnsw_ef, k))
            # a raw score just under min_score may round up to it (scores are rounded below)
            threshold = None if min_score is None else float(min_score) - 1e-6
            # inside a search the query reads the rows with the scores, kept for the fetch that follows
            scope = deadline.current()
            fields = _ROW_FIELDS if scope is not None else ["seq", "position"]
            writes = getattr(self.client, "writes", None)
            self._kept.rows = None
            # one batched round trip; only a query whose k-th score ties the next one is widened alone
            limit = k + 1
            responses = self.client.query_batch_points(
                self.collection, **self._timeout(),
                requests=[
                    qm.QueryRequest(query=q.tolist(), filter=native, params=params, limit=limit,
                                    with_payload=fields, score_threshold=threshold)
                    for q in queries
                ],
            )
            out: list[list[tuple[Any, float]]] = []
            kept: dict[str, Any] = {}
            rounds = 1
            points = [resp.points for resp in responses]
            if native is not None and not (self.exact or self._local) and any(len(res) < k for res in points):
                # HNSW with a filter on unindexed views may under-fill: count, and search short ones exactly
                matches = self._count(native)
                short = [i for i, res in enumerate(points) if len(res) < min(k, matches)]
                if short:
                    path, params, rounds = "native+exact", qm.SearchParams(exact=True), 2
                    for i in short:
                        points[i] = self.client.query_points(
                            self.collection, **self._timeout(), query=queries[i].tolist(), query_filter=native,
                            search_params=params, limit=limit, with_payload=fields, score_threshold=threshold,
                        ).points
            for q, res in zip(queries, points, strict=True):
                lim = limit
                scores = _rounded(res)
                while len(res) == lim and scores[-1] == scores[k - 1]:  # a tie across the cut: widen
                    lim *= 2
                    rounds += 1
                    res = self.client.query_points(
                        self.collection, **self._timeout(), query=q.tolist(), query_filter=native,
                        search_params=params, limit=lim, with_payload=fields, score_threshold=threshold,
                    ).points
                    scores = _rounded(res)
                order = sorted(range(len(res)), key=lambda i: (-scores[i], int(res[i].payload["seq"]),
                                                               int(res[i].payload["position"])))[:k]
                hits = [(str(res[i].id), scores[i]) for i in order]
                if min_score is not None:
                    keep = [j for j, h in enumerate(hits) if h[1] >= min_score]
                    hits, order = [hits[j] for j in keep], [order[j] for j in keep]
                if scope is not None:
                    for i in order:
                        kept[str(res[i].id)] = res[i]
                out.append(hits)
        if scope is not None:
            self._kept.rows, self._kept.scope, self._kept.writes = kept, scope, writes
        self.last_stats = {"path": path, "rounds": rounds}
        return out

    def fetch(self, keys: Sequence[Any]) -> list[Row]:
        """Rows for keys, in the order given; unknown keys are skipped."""
        if not keys:
            return []
        by_id: dict[str, Row] = {}
        ids = [str(k) for k in keys]
        kept = getattr(self._kept, "rows", None)
        if kept is not None:  # the rows this search's last knn read, if this process wrote nothing since
            self._kept.rows = None
            if self._kept.scope is deadline.current() and self._kept.writes == getattr(self.client, "writes", None):
                by_id = {i: _row(kept[i]) for i in ids if i in kept}
                ids = [i for i in ids if i not in by_id]
        if ids:
            with self._backend("fetch"):
                points = self.client.retrieve(self.collection, ids=ids, with_payload=_ROW_FIELDS, **self._timeout())
            by_id.update((str(p.id), _row(p)) for p in points)
        return [by_id[str(k)] for k in keys if str(k) in by_id]

    def document_rows(self, doc_ids: Sequence[str]) -> dict[str, list[Row]]:
        """Every row of each document, by position; documents not stored are absent from the result."""
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return {}
        out: dict[str, list[Row]] = {}
        with self._backend("document_rows"):
            flt = qm.Filter(must=[qm.FieldCondition(key="doc_id", match=qm.MatchAny(any=ids))])
            for p in self._scroll(flt, _ROW_FIELDS):
                row = _row(p)
                out.setdefault(row.doc_id, []).append(row)
        for rows in out.values():
            rows.sort(key=lambda r: r.position)
        return {d: out[d] for d in ids if d in out}

    def similarities(self, vectors: np.ndarray, keys: Sequence[Any]) -> np.ndarray:
        """A ``(len(vectors), len(keys))`` cosine matrix; NaN for keys not stored."""
        queries = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        mat = np.full((len(keys), queries.shape[1]), np.nan, dtype=np.float32)
        if keys:
            with self._backend("similarities"):
                points = self.client.retrieve(
                    self.collection, ids=[str(k) for k in keys], with_payload=False, with_vectors=True,
                    **self._timeout(),
                )
            index = {str(k): i for i, k in enumerate(keys)}
            for p in points:
                mat[index[str(p.id)]] = np.asarray(_dense(p.vector), dtype=np.float32)
        mat = V.normalize_rows(mat)
        return block_products(V.normalize_rows(queries), mat)

    def vectors(self, keys: Sequence[Any]) -> np.ndarray:
        """The rows' own unit vectors, ``(len(keys), dim)`` float32; NaN for keys not stored.

        One ``retrieve(with_vectors=True)`` call: a round trip to a Qdrant server (in process in local mode)."""
        out = np.full((len(keys), self._dim or 0), np.nan, dtype=np.float32)
        if len(keys):
            with self._backend("vectors"):
                points = self.client.retrieve(self.collection, ids=list(dict.fromkeys(str(k) for k in keys)),
                                              with_payload=False, with_vectors=True, **self._timeout())
            index: dict[str, list[int]] = {}
            for i, k in enumerate(keys):
                index.setdefault(str(k), []).append(i)
            for p in points:
                out[index[str(p.id)]] = np.asarray(_dense(p.vector), dtype=np.float32)
            out = V.normalize_rows(out)
        return out


def from_url(url: str) -> dict[str, Any]:
    """Constructor arguments for ``qdrant:///path`` (Qdrant Edge) or ``qdrant+http(s)://host:port``.

    Query parameters ``collection``, ``exact``, ``hnsw_ef`` and ``api_key`` pass through.

    >>> from_url("qdrant:///tmp/q")
    {'path': '/tmp/q'}
    >>> from_url("qdrant+http://h:6333?collection=docs&exact=false")
    {'url': 'http://h:6333', 'collection': 'docs', 'exact': False}
    """
    from urllib.parse import parse_qs, unquote, urlsplit

    from nlql.errors import NLQLError

    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    parts = urlsplit("x://" + rest)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    allowed = {"collection", "exact", "hnsw_ef", "api_key"}
    unknown = sorted(set(query) - allowed)
    if unknown:
        raise NLQLError(f"unknown option {unknown[0]!r} in store URL {url!r}",
                        hint="known options: " + ", ".join(sorted(allowed)))
    out: dict[str, Any] = {}
    if scheme == "qdrant":
        path = unquote(rest.split("?", 1)[0])
        out.update({"path": path} if path not in ("", ":memory:", "/:memory:") else {})
    else:
        out["url"] = scheme.partition("+")[2] + "://" + parts.netloc + parts.path.rstrip("/")
    for key, value in query.items():
        if key == "exact":
            out[key] = value.lower() in ("1", "true", "yes")
        elif key == "hnsw_ef":
            out[key] = int(value)
        else:
            out[key] = value
    return out


# ---------------------------------------------------------------------- payload helpers


def _rounded(points: list[Any]) -> list[float]:
    """The points' scores rounded as ``similarities()`` rounds cosines (float32, ``SCORE_DECIMALS``)."""
    return list(V.round_scores(np.array([p.score for p in points], dtype=np.float32)).tolist())


def _filter_json(native: Any) -> str:
    """A Qdrant filter as compact JSON for explain; a lone surrogate (not UTF-8, so pydantic refuses
    it) is written as its ``\\udXXX`` escape."""
    try:
        return str(native.model_dump_json(exclude_none=True))
    except Exception:  # noqa: BLE001 - pydantic's serialisation error on a surrogate
        return json.dumps(native.model_dump(mode="python", exclude_none=True), ensure_ascii=True,
                          separators=(",", ":"), default=str)


def _needs_json(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not (_INT64[0] <= value <= _INT64[1])
    if isinstance(value, dict):
        return any(_needs_json(v) for v in value.values())
    if isinstance(value, list):
        return any(_needs_json(v) for v in value)
    return False


def _edge_code_needed(docs: Iterable[DocRecord]) -> bool:
    """Whether a string of these documents' points may need Qdrant Edge's code (:func:`edge.code`): the
    texts every payload string is made of (ids, metadata keys and values, sentences, their tails, entity
    names) hold something that looks like a lone surrogate or U+0000-U+0008 (then the Edge client checks
    the payloads exactly); the strings derived from them (views, encoded keys, analysed terms, ``_mj``)
    add none. One scan of these texts instead of the points' whole payloads."""
    return edge.any_needs_code([[d.doc_id, d.metadata, [[u.content, u.tail] for u in d.units], d.entities]
                                for d in docs], exact=False)


def _view_json(kind: str, view: Any) -> Any:
    """A view value as stored: datetimes as RFC 3339 with microseconds and offset."""
    if kind == "d":
        return view.isoformat(timespec="microseconds")
    return view


def _meta_views(meta: dict[str, Any]) -> dict[str, Any]:
    """The nested ``_s``/``_n``/… payload objects for one document's metadata."""
    views: dict[str, dict[str, Any]] = {}
    for path, value in T.walk_metadata(meta):
        enc = T.encode_path(path)
        for kind, view in T.scalar_views(value).items():
            root = views.setdefault(f"_{kind}", {})
            node = root
            for part in enc[:-1]:
                node = node.setdefault(part, {})
            # every view sits under the mark, so a dict-valued path never looks like a present view
            node.setdefault(enc[-1], {})[T.PRESENCE_MARK] = _view_json(kind, view)
    return views


_VIEW_KINDS = ("s", "n", "f", "b", "d", "c", "p")
# the index of each view kind; booleans are text on Qdrant Edge (see nlql.stores.qdrant.edge)
_VIEW_SCHEMA = {
    "s": lambda edge: qm.PayloadSchemaType.KEYWORD, "c": lambda edge: qm.PayloadSchemaType.KEYWORD,
    "n": lambda edge: qm.PayloadSchemaType.FLOAT, "f": lambda edge: qm.PayloadSchemaType.FLOAT,
    "d": lambda edge: qm.PayloadSchemaType.DATETIME,
    "b": lambda edge: qm.PayloadSchemaType.KEYWORD if edge else qm.PayloadSchemaType.BOOL,
    "p": lambda edge: qm.PayloadSchemaType.KEYWORD if edge else qm.PayloadSchemaType.BOOL,
}


def _view_keys(payload: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(payload key, view kind)`` of every typed view in a point's payload."""
    for kind in _VIEW_KINDS:
        root = payload.get(f"_{kind}")
        if isinstance(root, dict):
            stack: list[tuple[str, dict[str, Any]]] = [(f"_{kind}", root)]
            while stack:
                prefix, node = stack.pop()
                for k, v in node.items():
                    if k == T.PRESENCE_MARK and not isinstance(v, dict):
                        yield f"{prefix}.{k}", kind
                    elif isinstance(v, dict):
                        stack.append((f"{prefix}.{k}", v))
    for field in ("doc_id", "id", "content"):
        for kind in ("n", "d", "c"):
            if f"_{kind}_{field}" in payload:
                yield f"_{kind}_{field}", kind


def _list_keys(meta: Any, prefix: str = "meta") -> Iterator[str]:
    """The payload key of every metadata path (plain keys, as HAS pushes them) holding a list with a string:
    ``HAS`` matches the raw list (a ``MatchAny`` on ``meta.tags``), which reads every payload without an
    index (Qdrant Edge, 40k points: a HAS top-10 628 ms unindexed)."""
    if not isinstance(meta, dict):
        return
    for key, value in meta.items():
        if not T.member_key(key):
            continue
        if isinstance(value, list) and any(isinstance(v, str) for v in value):
            yield f"{prefix}.{key}"
        elif isinstance(value, dict):
            yield from _list_keys(value, f"{prefix}.{key}")


def _row(point: Any) -> Row:
    p = point.payload
    meta = json.loads(p["_mj"]) if "_mj" in p else p.get("meta") or {}
    return Row(
        key=str(point.id),
        doc_id=p["doc_id"],
        position=int(p["position"]),
        content=p["content"],
        metadata=meta,
        seq=int(p["seq"]),
        start=int(p.get("start", 0)),
        end=int(p.get("end", 0)),
        tail=p.get("tail", ""),
    )


# ---------------------------------------------------------------------- filter rendering


def _key(kind: str, path: tuple[str, ...]) -> str:
    """The payload key of a view."""
    if path[0] != "meta":
        return _BUILTIN_KEYS.get((kind, path[0]), f"_{kind}_{path[0]}")
    return f"_{kind}.{'.'.join(T.encode_path(path[1:]))}.{T.PRESENCE_MARK}"


def _is_empty(key: str) -> Any:
    return qm.IsEmptyCondition(is_empty=qm.PayloadField(key=key))


def _dense(vector: Any) -> Any:
    """A point's dense vector (the unnamed one beside the BM25 sparse vector, when it has that)."""
    return vector[""] if isinstance(vector, dict) else vector


def _term_filter(term: str) -> Any:
    """The points holding the analysed term ``term`` (its document frequency counts them)."""
    return qm.Filter(must=[qm.FieldCondition(key="terms", match=qm.MatchValue(value=term))])


def _all_of(*conds: Any) -> Any:
    """A filter that every condition given (None: none) holds; None when none is given."""
    items = [c for c in conds if c is not None]
    return qm.Filter(must=items) if items else None


def _present(kind: str, path: tuple[str, ...]) -> Any | None:
    """A condition that the view exists, or None when it always does."""
    if T.always_present(kind, path):
        return None
    if kind == "p":
        return qm.FieldCondition(key=_key(kind, path), match=qm.MatchValue(value=True))
    return qm.Filter(must_not=[_is_empty(_key(kind, path))])


def _eq_cond(kind: str, path: tuple[str, ...], value: Any) -> Any:
    key = _key(kind, path)
    if kind in ("s", "b"):
        return qm.FieldCondition(key=key, match=qm.MatchValue(value=value))
    if kind == "d":
        return qm.FieldCondition(key=key, range=qm.DatetimeRange(gte=value, lte=value))
    return qm.FieldCondition(key=key, range=qm.Range(gte=value, lte=value))


def _in_conds(kind: str, path: tuple[str, ...], values: tuple[Any, ...]) -> list[Any]:
    """Conditions, one of which holds iff the view equals one of ``values``."""
    if kind == "s" and len(values) > 1:
        return [qm.FieldCondition(key=_key(kind, path), match=qm.MatchAny(any=list(values)))]
    return [_eq_cond(kind, path, v) for v in values]


def _render(node: T.VNode) -> Any:
    """A view-level node as a Qdrant condition (constants are folded away before this)."""
    if isinstance(node, T.Present):  # never an always-present view: lowering folds those to TRUE
        return _present(node.kind, node.path)
    if isinstance(node, T.Absent):
        return _is_empty(_key(node.kind, node.path))
    if isinstance(node, T.Cmp):
        if node.op == "eq":
            return _eq_cond(node.kind, node.path, node.value)
        bound = {_RANGE_OP[node.op]: node.value}
        rng = qm.DatetimeRange(**bound) if node.kind == "d" else qm.Range(**bound)
        return qm.FieldCondition(key=_key(node.kind, node.path), range=rng)
    if isinstance(node, T.InSet):
        conds = _in_conds(node.kind, node.path, node.values)
        return conds[0] if len(conds) == 1 else qm.Filter(should=conds)
    if isinstance(node, T.NotIn):
        present = [] if T.always_present(node.kind, node.path) else [_is_empty(_key(node.kind, node.path))]
        return qm.Filter(must_not=present + _in_conds(node.kind, node.path, node.values))
    if isinstance(node, T.Substr):
        return qm.FieldCondition(key=_key("c", node.path), match=qm.MatchSubstring(substring=node.needle))
    if isinstance(node, T.NotSubstr):
        sub = qm.FieldCondition(key=_key("c", node.path), match=qm.MatchSubstring(substring=node.needle))
        present = [] if T.always_present("c", node.path) else [_is_empty(_key("c", node.path))]
        return qm.Filter(must_not=[*present, sub])
    if isinstance(node, T.Member):  # the raw metadata: a list matches when a member does, a scalar when equal
        key = "meta." + ".".join(node.path[1:])
        if len(node.values) == 1:
            return qm.FieldCondition(key=key, match=qm.MatchValue(value=node.values[0]))
        return qm.FieldCondition(key=key, match=qm.MatchAny(any=list(node.values)))
    if isinstance(node, T.VAnd):
        return qm.Filter(must=[_render(i) for i in node.items])
    if isinstance(node, T.VOr):
        return qm.Filter(should=[_render(i) for i in node.items])
    raise TypeError(f"cannot render {node!r}")


def _leaf_text(cond: Any) -> str:
    value = cond.value.isoformat() if isinstance(cond.value, datetime) else cond.value
    return f"{'.'.join(cond.path)} {cond.op} {json.dumps(value, ensure_ascii=False, default=str)}"


__all__ = ["EdgeClient", "QdrantStore", "from_url", "point_id"]
