"""Milvus store: Milvus Lite (``milvus:///path/file.db``) or a Milvus server/cluster (``milvus+http://…``).

One code path, pymilvus' ``MilvusClient``, serves both: a ``.db`` path makes pymilvus start Milvus Lite
(2.5, Milvus's C++ engine) in process, a URL talks to a server. The engine's version, read at open
(``server_version``), decides what the store uses: sparse vectors and infix LIKE from 2.4 on. Neither
engine has ``exists`` or ``not`` over JSON, so expressions are monotone (see ``_PRESENT``).

Collections (``<c>`` is ``collection``)::

    <c>        one row per sentence
               key     VARCHAR pk   sha1 of [doc_id, position]
               dkey    VARCHAR      sha1 of doc_id (delete / replace / document rows by it)
               position, seq, nterms  INT64   (nterms: the sentence's BM25 length)
               terms   ARRAY<VARCHAR>, tfs ARRAY<INT64>   distinct analysed terms and their counts
               vec     FLOAT_VECTOR(dim), COSINE, FLAT (exact) or HNSW
               v       JSON          typed views of metadata and built-in fields, for filters
               rec     VARCHAR       the row as ASCII JSON (doc_id, content, offsets, tail, metadata)
    <c>_info   k VARCHAR pk, kind VARCHAR, val VARCHAR   (+ a 2-d placeholder vector Milvus requires)
               kind "info": get_info/set_info records (dim, analyzer, embedder, …)
               kind "stats": one record per writer: sentences, total length, largest seq

Both collections are created with ``consistency_level="Strong"``, so on a Milvus server or cluster
every read sees every write acknowledged before it, from any client (SPEC §10; Milvus' default,
"Bounded", may serve reads a few seconds stale).

Strings are stored so that any Python string survives: ``rec`` is ASCII JSON (lone surrogates and NUL
included); the views in ``v`` hold strings through :func:`escape`, an equality- and substring-preserving
code that keeps them valid UTF-8 and free of NUL (its code words use U+0001–U+0008).

**Filters.** Every leaf is lowered onto the typed views (:mod:`nlql.stores._typed`) and rendered as a
Milvus boolean expression. Values are written by a strict literal encoder (:func:`literal`): strings
in double quotes with ``\\\\ \\" \\n \\r \\t`` escaped and everything else as itself (Milvus Lite has no
expression templates and no ``\\u`` escapes), numbers as ``repr(float)``, datetimes as integer
microseconds. IN and NOT IN are one ``in`` / ``not in`` list (Milvus folds a long ``or`` chain into a
node its C++ engine cannot run).
What the expression cannot decide exactly is pushed as a superset and re-checked in the adapter with
``pyfilter`` (explain shows ``then adapter check``): string ordering, CONTAINS needles with LIKE
wildcards (``%``, ``_``, ``\\``: Milvus LIKE has no escape), numbers of magnitude ≥ 2^53 (views are
doubles), LIKE and MATCH.

**knn.** ``index="flat"`` searches exactly (ties broken by (seq, position), widened while the k-th
score ties the next). ``index="hnsw"`` searches the graph with ``ef ≥ k``; a filtered search that
returns fewer than ``k`` rows counts the filter's matches and, when short, searches exactly over the
matching rows (streamed, bounded memory), so it returns ``min(k, matches)`` (SPEC §6).

**BM25** is scored with the built-in store's formula and results (:mod:`nlql.stores._terms`): the
stored ``terms`` select the rows holding a query term and count document frequencies (``count(*)`` per
term, sent at once, memoised per state of the writer records); a row's term frequencies and length are
its content analysed by the recorded analyzer (Milvus Lite returns an ARRAY field at ~0.1 ms a row, the
``rec`` string at a few µs). The engine keeps no index for this store (``Capabilities.KEYWORD_STATS``).

**Within a search** the rows its knn and BM25 reads returned are kept (by the search's deadline object,
gone with it; a write drops them), so the search's fetch, similarities and BM25 rescoring of those rows
make no further round trip.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import date, datetime
from functools import partial
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

from nlql import deadline
from nlql import values as V
from nlql.errors import BackendError, MissingDependencyError, NLQLError
from nlql.kernels import block_products
from nlql.pushdown import Capabilities, Filter, NativeFilter
from nlql.schema import DataSummary
from nlql.stores import _terms, pyfilter
from nlql.stores import _typed as T
from nlql.stores.base import DocRecord, Row, backend_errors, keyword_reads_sent, knn_vectors_wanted
from nlql.stores.interrupt import timed_out

try:
    from pymilvus import DataType, MilvusClient
except ImportError:  # pragma: no cover - exercised only without the extra
    MilvusClient = None  # type: ignore[assignment,misc]
    DataType = None  # type: ignore[assignment,misc]

_OPS = frozenset({
    "eq", "ne", "lt", "le", "gt", "ge", "in", "not_in",
    "is_null", "is_not_null", "contains", "not_contains",
})
_MAX_VARCHAR = 65_535
_MAX_TERMS = 4096          # Milvus ARRAY max_capacity
_MAX_TOPK = 16_384         # Milvus topk / query window
_WRITE_BATCH = 512
_READ_BATCH = 1000         # keys per `key in [...]` expression
_ITER_BATCH = 4096
_EXACT_INT = 2**53         # |x| below this: double comparisons are exact
_ROW_FIELDS = ["key", "rec", "position", "seq"]
# what a search reads of each hit to keep for the rest of the search: the row (scalars and strings cost
# Milvus Lite a few µs a row to return, a vector ~30 µs, an ARRAY field ~0.1 ms)
_KEPT_FIELDS = ["rec", "position", "seq"]
_RANGE = {"eq": "==", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_INFO_DIM = 2


# ---------------------------------------------------------------------- strings and literals


def escape(s: str) -> str:
    """A string as valid UTF-8 without NUL: equality-, substring- and LIKE-preserving.

    U+0000–U+001F and the surrogates U+D800–U+DFFF become ``\\x01`` followed by four base-7 digits
    written as U+0002–U+0008; every other character is kept. The code is prefix-free and its
    digits never occur unescaped, so a needle matches an escaped text only at code-word boundaries.

    >>> escape("a\\x00b") == "a\\x01\\x02\\x02\\x02\\x02b"
    True
    >>> escape("plain ü") == "plain ü"
    True
    """
    if not any(ord(c) <= 0x1F or 0xD800 <= ord(c) <= 0xDFFF for c in s):
        return s
    out = []
    for c in s:
        o = ord(c)
        if o <= 0x1F or 0xD800 <= o <= 0xDFFF:  # Milvus 2.5 compares no string holding a control character
            rank = o if o <= 0x1F else 0x20 + (o - 0xD800)
            digits = []
            for _ in range(4):
                rank, d = divmod(rank, 7)
                digits.append(chr(2 + d))
            out.append("\x01" + "".join(reversed(digits)))
        else:
            out.append(c)
    return "".join(out)


def literal(value: Any) -> str:
    """A value as a Milvus expression literal (strings must already be :func:`escape`\\ d).

    >>> literal('say "hi"\\n'), literal(True), literal(2.5), literal(3)
    ('"say \\\\"hi\\\\"\\\\n"', 'true', '2.5', '3')

    Raises:
        ValueError: a string with a character no literal can hold, or a non-finite number.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"no Milvus literal for {value!r}")
        return repr(value)
    if isinstance(value, str):
        if value.isascii() and value.isalnum():  # (keys and most terms: nothing to escape)
            return '"' + value + '"'
        out = ['"']
        for c in value:
            o = ord(c)
            if c == "\\" or c == '"':
                out.append("\\" + c)
            elif c == "\n":
                out.append("\\n")
            elif c == "\r":
                out.append("\\r")
            elif c == "\t":
                out.append("\\t")
            elif o == 0 or 0xD800 <= o <= 0xDFFF:
                raise ValueError("unescaped NUL or surrogate in a Milvus string literal")
            else:
                out.append(c)
        out.append('"')
        return "".join(out)
    raise ValueError(f"no Milvus literal for {type(value).__name__}")


def _sha(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, ensure_ascii=True).encode("ascii")).hexdigest()


def row_key(doc_id: str, position: int) -> str:
    """The primary key of a sentence (hex sha1 of ``[doc_id, position]``)."""
    return _sha([doc_id, position])


def doc_key(doc_id: str) -> str:
    """The key every sentence of a document shares (hex sha1 of the doc id)."""
    return _sha(doc_id)


def _keys_in(field: str, keys: Sequence[str]) -> str:
    return f"{field} in [{', '.join(literal(k) for k in keys)}]"


# ---------------------------------------------------------------------- views


def _view_value(kind: str, view: Any) -> Any:
    """A typed view as stored in ``v``: strings escaped, numbers as doubles, instants as µs."""
    if kind in ("s", "c"):
        return escape(view)
    if kind in ("n", "f"):
        try:
            return float(view)
        except OverflowError:
            return 1.7976931348623157e308 if view > 0 else -1.7976931348623157e308
    if kind == "d":
        micros = T.datetime_micros(view)
        return micros if micros is not None else None
    return view


def _views(meta: dict[str, Any], doc_id: str, position: int, content: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in T.walk_metadata(meta):
        enc = T.encode_path(path)
        for kind, view in T.scalar_views(value).items():
            stored = _view_value(kind, view)
            if stored is None:
                continue
            node = out.setdefault(kind, {})
            for part in enc:
                node = node.setdefault(part, {})
            node[T.PRESENCE_MARK] = stored
    for field in T.BUILTINS:
        value = T.builtin_value(field, doc_id, position, content)
        for kind, view in T.scalar_views(value).items():
            if kind != "p":
                stored = _view_value(kind, view)
                if stored is not None:
                    out[f"_{kind}_{field}"] = stored
    return out


def _path(kind: str, path: tuple[str, ...]) -> str:
    """The JSON path expression of a view."""
    if path[0] != "meta":
        return f'v["_{kind}_{path[0]}"]'
    parts = "".join(f'["{p}"]' for p in (kind, *T.encode_path(path[1:]), T.PRESENCE_MARK))
    return "v" + parts


# ---------------------------------------------------------------------- the store


class MilvusStore:
    """A :class:`~nlql.stores.base.Store` on Milvus Lite or a Milvus server, through ``MilvusClient``.

    Args:
        uri: A ``.db`` file path (Milvus Lite) or a server URL (``http://host:19530``).
        client: An existing ``MilvusClient`` (the store never closes a client it did not create).
        token: Server credentials (``"user:password"`` or an API key).
        db_name: The Milvus database.
        collection: The collection name (``<collection>_info`` holds records and BM25 totals).
        index: ``"flat"`` (exact) or ``"hnsw"`` (approximate, with the top-k guarantee, see module doc).
        hnsw_m: HNSW graph degree; hnsw_ef_construction: its build beam.
        hnsw_ef: The HNSW search beam (at least ``k``).
        analyzer: The :class:`~nlql.text.analyzer.Analyzer` whose terms are stored for BM25 (default
            ``Analyzer()``, the engine's default).
        timeout: Seconds per client call (None: the client's default).

    Raises:
        MissingDependencyError: ``pymilvus`` (and for a ``.db`` path ``milvus-lite``) is not installed.
    """

    def __init__(
        self,
        uri: str | None = None,
        *,
        client: Any = None,
        token: str | None = None,
        db_name: str | None = None,
        collection: str = "nlql",
        index: str = "flat",
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 200,
        hnsw_ef: int = 128,
        analyzer: Any = None,
        timeout: float | None = None,
    ) -> None:
        if MilvusClient is None:
            raise MissingDependencyError("milvus", "pymilvus")
        if index not in ("flat", "hnsw"):
            raise NLQLError(f"unknown Milvus index {index!r}", hint="use index='flat' (exact) or 'hnsw'")
        if not collection or not all(c.isascii() and (c.isalnum() or c == "_") for c in collection) \
                or not (collection[0].isalpha() or collection[0] == "_"):
            raise NLQLError(f"invalid Milvus collection name {collection!r}",
                            hint="letters, digits and '_', starting with a letter or '_'")
        from nlql.text.analyzer import Analyzer

        self.uri = uri or "nlql_milvus.db"
        self.collection = collection
        self.info_collection = f"{collection}_info"
        self.index = index
        self.hnsw_m = int(hnsw_m)
        self.hnsw_ef_construction = int(hnsw_ef_construction)
        self.hnsw_ef = int(hnsw_ef)
        self.analyzer = analyzer if analyzer is not None else Analyzer()
        self.timeout = timeout
        self._writer = uuid.uuid4().hex
        self._mine = {"n": 0, "len": 0, "seq": 0}
        self._write_lock = threading.Lock()
        self._dim: int | None = None
        self._sparse = False
        self._df_memo: dict[tuple[str, Any], int] = {}
        self._totals_memo: tuple[Any, _terms.Totals] | None = None
        self.last_stats: dict[str, Any] = {}
        # the rows this search's knn and BM25 reads returned (by key, with their vectors), so that its
        # fetch and its similarity and BM25 scoring read nothing again: one dict per search (the search's
        # deadline object is its identity, shared by the arms' threads), gone with the search
        self._reads: weakref.WeakKeyDictionary[Any, dict[str, dict[str, Any]]] = weakref.WeakKeyDictionary()
        self._reads_lock = threading.Lock()
        self.capabilities = self._caps(keyword_stats=True)
        self._owns_client = client is None
        logging.getLogger("pymilvus").setLevel(logging.CRITICAL)  # driver errors become BackendError
        with self._backend("connect"):
            if client is not None:
                self.client = client
            else:
                kwargs: dict[str, Any] = {"uri": self.uri}
                if token:
                    kwargs["token"] = token
                if db_name:
                    kwargs["db_name"] = db_name
                if timeout is not None:
                    kwargs["timeout"] = timeout
                try:
                    self.client = _Timed(self._connect(kwargs), timeout)
                    if _is_local(self.uri):  # Milvus Lite 2.5 connects even when the file is another process's
                        self.client.has_collection(self.info_collection)
                except ImportError as exc:  # a .db path without milvus-lite
                    raise MissingDependencyError("milvus", "milvus-lite") from exc
                except Exception as exc:
                    if _is_local(self.uri):
                        raise BackendError(
                            "milvus", f"cannot open Milvus Lite file {self.uri!r}: {exc}",
                            hint="Milvus Lite allows one process per file; to share data between "
                                 "processes, run a Milvus server (`milvus-server --data DIR`, from the "
                                 "`milvus` package) and open milvus+http://127.0.0.1:19530") from exc
                    raise

    def _connect(self, kwargs: dict[str, Any]) -> Any:
        """A client; a Milvus Lite file's in-process server is asked again when its first handshake
        times out (its gRPC threads share this process's GIL, so a busy process can miss the driver's
        10 s wait). A server URL is asked once: retrying is the caller's policy there."""
        tries = 3 if _is_local(self.uri) else 1
        for attempt in range(tries):
            try:
                return MilvusClient(**kwargs)
            except ImportError:
                raise
            except Exception as exc:
                if attempt == tries - 1 or "connect" not in str(exc).lower():
                    raise
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def _caps(self, keyword_stats: bool) -> Capabilities:
        return Capabilities(
            NAME="milvus",
            OPS=_OPS,
            FIELDS=frozenset({"meta", "doc_id", "id", "position", "content"}),
            OR=True,
            NESTED_KEYS=True,
            NUMERIC_STRINGS=True,
            FLOAT_EQUALITY=True,
            DATETIMES=True,
            EXACT=self.index == "flat",
            SCORE_THRESHOLD=True,
            DEADLINE=True,  # every call gets the search's time left as its gRPC timeout
            BM25=keyword_stats,
            KEYWORD_STATS=keyword_stats,
            ANALYZER=True,
            ENTITY_LINKS=True,  # each row's entity names inside its record (rec["n"])
            # knn's scores rounded as similarities() rounds them (Milvus's float32 cosine, as numpy's
            # within the noise the rounding absorbs): the engine keeps them instead of asking again
            KNN_SCORES=True,
            DESCRIBES_DATA=True,
            # Milvus Lite answers one call at a time (a call waits for the one before it): a fusion asks
            # its short keyword reads before its knn (nlql.stores.base.keyword_reads_sent)
            SERIAL_CALLS=_is_local(self.uri),
        )

    @contextmanager
    def _backend(self, what: str) -> Iterator[None]:
        """Driver failures as :class:`BackendError`; no call starts after the search's deadline, and a
        call that failed because the deadline passed (the client's ``timeout``) is :class:`NLQLTimeoutError`."""
        deadline.check("milvus", what)
        try:
            with backend_errors("milvus", what):
                yield
        except BackendError as exc:
            late = timed_out("milvus")
            if late is not None:
                raise late from exc
            raise

    # ------------------------------------------------------------------ lifecycle

    def open(self, dim: int) -> None:
        """Create the collections (or attach to existing ones) for vectors of ``dim``.

        Raises:
            BackendError: the collection exists with another vector size.
        """
        with self._backend("open"):
            c = self.client
            self.server_version = self._read_version()
            if not c.has_collection(self.info_collection):
                self._create_info()
            c.load_collection(self.info_collection)
            if c.has_collection(self.collection):
                fields = {f["name"]: f for f in c.describe_collection(self.collection)["fields"]}
                size = int(fields.get("vec", {}).get("params", {}).get("dim", -1))
                if size != dim:
                    raise BackendError("milvus", f"collection {self.collection!r} has vectors of size {size}; "
                                                 f"the embedder needs size {dim}")
            else:
                self._create_units(dim)
            c.load_collection(self.collection)
            names = {f["name"] for f in c.describe_collection(self.collection)["fields"]}
            self._sparse = "sp" in names
            self._dim = dim
            config = json.dumps(self.analyzer.config(), sort_keys=True)
            stored = self.get_info("analyzer")
            if stored is None:
                if self.count() == 0:
                    self.set_info("analyzer", config)
                else:  # rows written before term statistics existed: BM25 stays in the engine
                    stored = "unknown"
            if stored is not None and stored != config:
                self.capabilities = self._caps(keyword_stats=False)
            mine = self._info_row(f"stats:{self._writer}")
            if mine is not None:
                self._mine = json.loads(mine)

    def _read_version(self) -> tuple[int, ...]:
        """The engine's version: the server's answer, else (Milvus Lite, which has no such call) the
        installed ``milvus_lite`` package's; features follow it (sparse vectors from 2.4 on)."""
        raw = ""
        try:
            raw = str(self.client.get_server_version())
        except Exception:  # noqa: BLE001 - Milvus Lite 2.5 answers UNIMPLEMENTED
            if _is_local(self.uri):
                from importlib.metadata import version

                raw = version("milvus-lite")
        digits = []
        for part in raw.lstrip("vV").replace("-", ".").split(".")[:3]:
            if not part.isdigit():
                break
            digits.append(int(part))
        return tuple(digits) or (0,)

    @property
    def sparse_vectors(self) -> bool:
        """Whether the engine has sparse float vectors (Milvus 2.4 on): new collections get a BM25 one."""
        return getattr(self, "server_version", (0,)) >= (2, 4)

    def _create_info(self) -> None:
        s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        s.add_field("k", DataType.VARCHAR, is_primary=True, max_length=512)
        s.add_field("kind", DataType.VARCHAR, max_length=16)
        s.add_field("val", DataType.VARCHAR, max_length=_MAX_VARCHAR)
        s.add_field("_v", DataType.FLOAT_VECTOR, dim=_INFO_DIM)
        ip = self.client.prepare_index_params()
        ip.add_index("_v", index_type="FLAT", metric_type="L2")
        self.client.create_collection(self.info_collection, schema=s, index_params=ip, consistency_level="Strong")

    def _create_units(self, dim: int) -> None:
        s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        s.add_field("key", DataType.VARCHAR, is_primary=True, max_length=40)
        s.add_field("dkey", DataType.VARCHAR, max_length=40)
        s.add_field("position", DataType.INT64)
        s.add_field("seq", DataType.INT64)
        s.add_field("nterms", DataType.INT64)
        s.add_field("terms", DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=_MAX_TERMS,
                    max_length=_terms.MAX_TERM_BYTES + 1)
        s.add_field("tfs", DataType.ARRAY, element_type=DataType.INT64, max_capacity=_MAX_TERMS)
        s.add_field("vec", DataType.FLOAT_VECTOR, dim=dim)
        if self.sparse_vectors:
            s.add_field("sp", DataType.SPARSE_FLOAT_VECTOR)
        s.add_field("v", DataType.JSON)
        s.add_field("rec", DataType.VARCHAR, max_length=_MAX_VARCHAR)
        ip = self.client.prepare_index_params()
        if self.index == "flat":
            ip.add_index("vec", index_type="FLAT", metric_type="COSINE")
        else:
            if _is_local(self.uri):  # Milvus Lite builds FLAT, IVF_FLAT and AUTOINDEX only
                ip.add_index("vec", index_type="IVF_FLAT", metric_type="COSINE", params={"nlist": 64})
            else:
                ip.add_index("vec", index_type="HNSW", metric_type="COSINE",
                             params={"M": self.hnsw_m, "efConstruction": self.hnsw_ef_construction})
        if self.sparse_vectors:
            ip.add_index("sp", index_type="SPARSE_INVERTED_INDEX", metric_type="IP")
        self.client.create_collection(self.collection, schema=s, index_params=ip, consistency_level="Strong")
        for field in ("dkey", "terms"):  # scalar indexes where the server has them (Milvus Lite: none on ARRAY)
            sp = self.client.prepare_index_params()
            sp.add_index(field, index_type="INVERTED")
            try:
                self.client.create_index(self.collection, sp, sync=False)
            except Exception:  # noqa: BLE001 - an optimisation only; filters work without it
                pass

    def close(self) -> None:
        """Release the client if this store created it (Milvus Lite unlocks its file)."""
        if self._owns_client and getattr(self, "client", None) is not None:
            with self._backend("close"):
                self.client.close()
        self.client = None

    # ------------------------------------------------------------------ info records

    def _info_row(self, k: str) -> str | None:
        rows = self.client.query(self.info_collection, filter=f"k == {literal(k)}", output_fields=["val"])
        return rows[0]["val"] if rows else None

    def _put_info(self, k: str, kind: str, val: str) -> None:
        if len(val.encode("utf-8")) > _MAX_VARCHAR:
            raise BackendError("milvus", f"info value for {k!r} exceeds {_MAX_VARCHAR} bytes")
        self.client.upsert(self.info_collection, [{"k": k, "kind": kind, "val": val, "_v": [0.0] * _INFO_DIM}])

    def get_info(self, key: str) -> str | None:
        """A small persistent record (``set_info``), or None; before :meth:`open` too (None when no store is
        there yet: the engine reads which embedder built a store before it chooses the default one)."""
        with self._backend("get_info"):
            if self._dim is None and not self.client.has_collection(self.info_collection):
                return None
            raw = self._info_row("info:" + _sha(key))
        return None if raw is None else json.loads(raw)[1]

    def set_info(self, key: str, value: str) -> None:
        """Store a small persistent record (visible at once to every client of the store)."""
        with self._backend("set_info"):
            self._put_info("info:" + _sha(key), "info", json.dumps([key, value], ensure_ascii=True))

    def _totals(self) -> _terms.Totals:
        """The writers' BM25 totals, read once per search (the search's deadline object is its identity:
        a BM25 arm's candidates and its rescoring share one read) and on every call outside a search."""
        current = deadline.current()
        memo = self._totals_memo
        if current is not None and memo is not None and memo[0] is current:
            return memo[1]
        rows = self.client.query(self.info_collection, filter='kind == "stats"', output_fields=["val"])
        totals = _terms.Totals.sum((json.loads(r["val"]) for r in rows),
                                   signature=tuple(sorted(r["val"] for r in rows)))
        self._totals_memo = None if current is None else (current, totals)
        return totals

    def _df(self, qkeys: Sequence[str], totals: _terms.Totals) -> dict[str, int]:
        """Rows holding each term: one ``count(*)`` per term not yet memoised, all sent at once (from a
        small pool: a server answers them side by side), memoised per state of the writer records.

        Every write changes some writer's record (its ``seq`` at least), so a count taken under the
        same records is still exact; the memo is bounded (no growth with the corpus). Counting reads
        no row: reading the rows' ``terms`` instead costs Milvus Lite ~0.1 ms a row (seconds for a
        common term at 100k rows).
        """
        missing = [t for t in qkeys if (t, totals.signature) not in self._df_memo]
        if missing:
            counts = _at_once([partial(self._count, f"array_contains(terms, {literal(t)})") for t in missing])
            if len(self._df_memo) + len(missing) > 1024:
                self._df_memo.clear()
            for t, c in zip(missing, counts):
                self._df_memo[(t, totals.signature)] = int(c)
        return {t: self._df_memo[(t, totals.signature)] for t in qkeys}

    def _bump(self, dn: int, dlen: int, seq: int) -> None:
        self._mine["n"] += dn
        self._mine["len"] += dlen
        self._mine["seq"] = max(self._mine["seq"], seq)
        self._put_info(f"stats:{self._writer}", "stats", json.dumps(self._mine))
        self._totals_memo = None
        with self._reads_lock:  # (a search running meanwhile reads its rows again)
            self._reads.clear()

    # ------------------------------------------------------------------ writes

    def _rows_for(self, doc: DocRecord) -> tuple[list[dict[str, Any]], int]:
        meta = V.normalize_metadata(doc.metadata or {})
        dkey = doc_key(doc.doc_id)
        vectors = np.asarray(doc.vectors, dtype=np.float32)
        names = doc.entities if doc.entities is not None else [None] * len(doc.units)
        rows, total = [], 0
        for unit, vec, ents in zip(doc.units, vectors, names, strict=True):
            terms, tfs, length = _terms.sentence_terms(self.analyzer.terms(unit.content))
            if len(terms) > _MAX_TERMS:
                raise BackendError("milvus", f"a sentence of document {doc.doc_id!r} has {len(terms)} distinct "
                                             f"terms; Milvus arrays hold at most {_MAX_TERMS}")
            fields = {"d": doc.doc_id, "c": unit.content, "s": unit.start, "e": unit.end, "t": unit.tail, "m": meta}
            if ents is not None:
                fields["n"] = list(ents)
            rec = json.dumps(fields, ensure_ascii=True)
            if len(rec) > _MAX_VARCHAR:
                raise BackendError("milvus", f"a sentence of document {doc.doc_id!r} with its metadata is "
                                             f"{len(rec)} bytes as JSON; Milvus VARCHAR holds {_MAX_VARCHAR}")
            rows.append({
                "key": row_key(doc.doc_id, unit.position), "dkey": dkey, "position": unit.position,
                "seq": doc.seq, "nterms": length, "terms": terms, "tfs": tfs, "vec": vec.tolist(),
                "v": _views(meta, doc.doc_id, unit.position, unit.content), "rec": rec,
            })
            if self._sparse:
                rows[-1]["sp"] = _sparse(terms, tfs, length)
            total += length
        return rows, total

    def _existing(self, dkeys: Sequence[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i in range(0, len(dkeys), _READ_BATCH):
            out.extend(self._query_all(_keys_in("dkey", dkeys[i : i + _READ_BATCH]), ["key", "nterms"]))
        return out

    def upsert(self, docs: Sequence[DocRecord]) -> None:
        """Write documents, replacing every stored document with the same ``doc_id``.

        New rows overwrite old ones at the same position (same key); positions past the new length are
        deleted afterwards, so a reader never sees a document vanish mid-call. Milvus has no
        multi-row transactions: a failure mid-call raises :class:`BackendError`; repeating the call
        repairs the document, and the BM25 totals are written last.
        """
        latest: dict[str, DocRecord] = {}
        for doc in docs:
            latest[doc.doc_id] = doc
        if not latest:
            return
        rows: list[dict[str, Any]] = []
        new_len = 0
        for doc in latest.values():
            r, total = self._rows_for(doc)
            rows.extend(r)
            new_len += total
        with self._write_lock, self._backend("upsert"):
            old = self._existing([doc_key(d) for d in latest])
            for i in range(0, len(rows), _WRITE_BATCH):
                self.client.upsert(self.collection, rows[i : i + _WRITE_BATCH])
            new_keys = {r["key"] for r in rows}
            stale = [o["key"] for o in old if o["key"] not in new_keys]
            for i in range(0, len(stale), _READ_BATCH):
                self.client.delete(self.collection, ids=stale[i : i + _READ_BATCH])
            old_len = sum(int(o["nterms"]) for o in old)
            self._bump(len(rows) - len(old), new_len - old_len, max(d.seq for d in latest.values()))

    def delete(self, doc_ids: Sequence[str]) -> int:
        """Delete documents by id; returns how many of them existed."""
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return 0
        with self._write_lock, self._backend("delete"):
            dkeys = [doc_key(d) for d in ids]
            old: list[dict[str, Any]] = []
            for i in range(0, len(dkeys), _READ_BATCH):
                old.extend(self._query_all(_keys_in("dkey", dkeys[i : i + _READ_BATCH]), ["key", "dkey", "nterms"]))
            if not old:
                return 0
            keys = [o["key"] for o in old]
            for i in range(0, len(keys), _READ_BATCH):
                self.client.delete(self.collection, ids=keys[i : i + _READ_BATCH])
            self._bump(-len(old), -sum(int(o["nterms"]) for o in old), 0)
            return len({o["dkey"] for o in old})

    # ------------------------------------------------------------------ reads

    def count(self) -> int:
        """The number of stored sentences."""
        with self._backend("count"):
            res = self.client.query(self.collection, filter="", output_fields=["count(*)"])
            return int(res[0]["count(*)"])

    def max_seq(self) -> int:
        """The largest ``seq`` any writer has stored; 0 when empty, as the built-in store."""
        with self._backend("max_seq"):
            return max(self._totals().max_seq, self._mine["seq"])

    def describe_data(self, sample: int) -> DataSummary:
        """Sizes from two ``count(*)`` queries (every row; the rows at position 0, one per document) and
        the metadata keys of at most ``sample`` documents from one query of first sentences, not a read
        of the collection (the engine's fallback enumerates every key)."""
        n = max(1, int(sample))
        with self._backend("describe_data"):
            sentences = self._count("")
            documents = self._count("position == 0")
            rows = self.client.query(self.collection, filter="position == 0", output_fields=["rec"], limit=n)
        metas = [json.loads(r["rec"])["m"] for r in rows]
        return DataSummary.from_sample(documents, sentences, metas, f"{len(metas)} documents (one query)")

    def _query_all(self, expr: str, fields: list[str]) -> list[dict[str, Any]]:
        """Every row matching ``expr``: one query when they fit in one page (what a write's look-up of
        the ids it replaces usually finds: none or a few), else paged by the iterator (no topk window)."""
        first = self.client.query(self.collection, filter=expr, output_fields=fields, limit=_ITER_BATCH)
        if len(first) < _ITER_BATCH:
            return list(first)
        out: list[dict[str, Any]] = []
        for batch in self._iterate(expr, fields):
            out.extend(batch)
        return out

    def _iterate(self, expr: str, fields: list[str]) -> Iterator[list[dict[str, Any]]]:
        it = self.client.query_iterator(self.collection, batch_size=_ITER_BATCH, filter=expr,
                                        output_fields=fields)
        try:
            while True:
                batch = it.next()
                if not batch:
                    return
                yield list(batch)
        finally:
            it.close()

    def compile_filter(self, flt: Filter) -> NativeFilter:
        """Translate a pushed filter to a Milvus boolean expression over the typed views.

        ``NativeFilter.text`` is the expression; when a leaf needs the adapter's re-check it is followed
        by ``then adapter check: …``. ``extra`` holds ``check`` (the filter to re-check, or None) and
        ``empty`` (True when no row can pass).
        """
        node = T.lower_filter(flt)
        native_node = T.native_part(node)
        if native_node == T.FALSE:
            return NativeFilter(None, "FALSE (no row can pass)", {"check": None, "empty": True})
        loose: list[str] = []
        token = _INFIX_LIKE.set(getattr(self, "server_version", (2, 5)) >= (2, 4))
        try:
            expr = "" if native_node == T.TRUE else _render(native_node, loose)
        finally:
            _INFIX_LIKE.reset(token)
        if expr == "true":  # every row (a superset of what the adapter re-checks)
            expr = ""
        notes = sorted({_leaf_text(c) for c in T.opaque_leaves(node)} | set(loose))
        check = flt if (T.needs_check(node) or loose) else None
        text = expr or "(all rows)"
        if check is not None:
            text += " then adapter check: " + "; ".join(notes)
        return NativeFilter(expr, text, {"check": check, "empty": False})

    def _candidates(self, flt: NativeFilter | None) -> list[tuple[int, int, str]]:
        """``(seq, position, key)`` of every row passing ``flt`` (with the adapter re-check if needed)."""
        check = flt.extra.get("check") if flt is not None else None
        expr = flt.native if flt is not None else ""
        fields = _ROW_FIELDS if check is not None else ["key", "seq", "position"]
        out = []
        for batch in self._iterate(expr or "", fields):
            for r in batch:
                if check is not None and not pyfilter.row_passes(check, _row(r)):
                    continue
                out.append((int(r["seq"]), int(r["position"]), r["key"]))
        return out

    def entity_rows(self) -> list[tuple[str, int, int, str]] | None:
        """Every row's entity names as ``(doc_id, seq, position, name)``; None when some row was written
        without them (by an older version)."""
        out: list[tuple[str, int, int, str]] = []
        with self._backend("entity_rows"):
            for batch in self._iterate("", ["rec", "seq", "position"]):
                for r in batch:
                    rec = json.loads(r["rec"])
                    names = rec.get("n")
                    if not isinstance(names, list):
                        return None
                    d, s, p = rec["d"], int(r["seq"]), int(r["position"])
                    out.extend((d, s, p, n) for n in names if isinstance(n, str))
        return out

    def adopt_entities(self, rows: Sequence[tuple[str, int, int, str]]) -> None:
        """Rows written without names keep none (the engine extracts them again when it rebuilds)."""

    def scan(self, flt: NativeFilter | None = None) -> list[Any]:
        """Every key passing ``flt``, in insertion order (seq, position)."""
        if flt is not None and flt.extra.get("empty"):
            return []
        with self._backend("scan"):
            rows = self._candidates(flt)
        rows.sort()
        return [key for _, _, key in rows]

    def knn(self, vectors: np.ndarray, k: int, flt: NativeFilter | None = None,
            min_score: float | None = None) -> list[list[tuple[Any, float]]]:
        """Top-``k`` (key, cosine) per query among rows passing ``flt``, best first.

        Ties on the score are broken by (seq, position). See the module docstring for the exact and
        the HNSW paths; ``last_stats`` records ``path`` and ``rounds``.
        """
        queries = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if k <= 0 or (flt is not None and flt.extra.get("empty")):
            return [[] for _ in range(len(queries))]
        expr = (flt.native or "") if flt is not None else ""
        path = "flat" if self.index == "flat" else "hnsw"
        keep = deadline.current() is not None  # (in a search: its rows are kept for its fetch and scoring)
        with self._backend("knn"):
            if flt is not None and flt.extra.get("check") is not None:
                keys = [key for _, _, key in self._candidates(flt)]
                if not keys:
                    self.last_stats = {"path": "checked", "rounds": 0, "candidates": 0}
                    return [[] for _ in range(len(queries))]
                if len(keys) <= _READ_BATCH * 4:
                    expr, path = _keys_in("key", keys), "checked"
                else:
                    streamed = self._exact_over(queries, k, None, keys)
                    self.last_stats = {"path": "checked+stream", "rounds": 1, "candidates": len(keys)}
                    return _threshold(_pairs(streamed), min_score)
            if k + 1 > _MAX_TOPK:
                streamed = self._exact_over(queries, k, expr, None)
                self.last_stats = {"path": "stream", "rounds": 1}
                return _threshold(_pairs(streamed), min_score)
            results = self._search(queries, k + 1, expr, keep)
            rounds = 1
            if self.index == "hnsw" and any(len(r) < k for r in results):
                matches = self._count(expr)
                short = [i for i, r in enumerate(results) if len(r) < min(k, matches)]
                if short:
                    path, rounds = "hnsw+exact", 2
                    exact = self._exact_over(queries[short], k + 1, expr, None)
                    for i, hits in zip(short, exact):
                        results[i] = [(key, s, seq, pos) for key, s, seq, pos in hits]
            out: list[list[tuple[Any, float]]] = []
            for qi, res in enumerate(results):
                lim = k + 1
                while len(res) == lim and res[-1][1] == res[k - 1][1] and lim < _MAX_TOPK:
                    lim = min(lim * 2, _MAX_TOPK)
                    rounds += 1
                    res = self._search(queries[qi : qi + 1], lim, expr, keep)[0]
                res = sorted(res, key=lambda h: (-h[1], h[2], h[3]))
                out.append([(key, s) for key, s, _, _ in res[:k]])
        self.last_stats = {"path": path, "rounds": rounds}
        return _threshold(out, min_score)

    def _search(self, queries: np.ndarray, limit: int, expr: str,
                keep: bool = False) -> list[list[tuple[str, float, int, int]]]:
        """Hits ``(key, score, seq, position)`` per query, scores rounded as ``similarities()``' (so
        ties are ties); with ``keep``, the hits' rows are read too and kept for the search (:meth:`_keep`:
        its fetch reads none of them again), with their vectors unless the search reads none after the
        knn (:func:`~nlql.stores.base.knn_vectors_wanted`: a fusion that takes the knn's scores as its
        window's values; decoding 100 vectors costs ~3 ms)."""
        params: dict[str, Any] = {"metric_type": "COSINE"}
        if self.index == "hnsw":
            params["params"] = ({"nprobe": 16} if _is_local(self.uri)  # IVF_FLAT on Milvus Lite
                                else {"ef": max(self.hnsw_ef, limit)})
        res = self.client.search(self.collection, data=[q.tolist() for q in queries], limit=limit,
                                 filter=expr, output_fields=(([*_KEPT_FIELDS, "vec"] if knn_vectors_wanted() else _KEPT_FIELDS)
                                                             if keep else ["seq", "position"]),
                                 search_params=params, anns_field="vec")
        out = []
        for hits in res:
            keys = [h["key"] if "key" in h else h["id"] for h in hits]
            scores = V.round_scores(np.array([h["distance"] for h in hits], dtype=np.float32)).tolist()
            out.append([(key, s, int(h["entity"]["seq"]), int(h["entity"]["position"]))
                        for key, s, h in zip(keys, scores, hits)])
            if keep:
                self._keep({key: {**h["entity"], "key": key} for key, h in zip(keys, hits)})
        return out

    def _count(self, expr: str) -> int:
        res = self.client.query(self.collection, filter=expr, output_fields=["count(*)"])
        return int(res[0]["count(*)"])

    def _exact_over(self, queries: np.ndarray, k: int, expr: str | None,
                    keys: Sequence[str] | None) -> list[list[tuple[str, float, int, int]]]:
        """Exact top-``k`` over rows matching ``expr`` (or the given keys), streamed in batches."""
        q = _normalise(queries)
        best: list[list[tuple[float, int, int, str]]] = [[] for _ in range(len(q))]
        if keys is not None:
            batches: Iterator[list[dict[str, Any]]] = (
                self.client.query(self.collection, filter=_keys_in("key", keys[i : i + _READ_BATCH]),
                                  output_fields=["key", "seq", "position", "vec"])
                for i in range(0, len(keys), _READ_BATCH))
        else:
            batches = self._iterate(expr or "", ["key", "seq", "position", "vec"])
        for batch in batches:
            if not batch:
                continue
            mat = _normalise(np.asarray([r["vec"] for r in batch], dtype=np.float32))
            sims = V.round_scores(block_products(q, mat))  # (as similarities() rounds)
            for qi in range(len(q)):
                cand = best[qi] + [(-float(s), int(r["seq"]), int(r["position"]), r["key"])
                                   for s, r in zip(sims[qi], batch)]
                cand.sort()
                best[qi] = cand[:k]
        return [[(key, -neg, seq, pos) for neg, seq, pos, key in b] for b in best]

    def _keep(self, rows: dict[str, dict[str, Any]]) -> None:
        """Keep rows a search read (by key: ``rec``, ``position``, ``seq``, maybe ``vec``) for its later
        calls; outside a search nothing is kept. A write drops what every search kept."""
        scope = deadline.current()
        if scope is None or not rows:
            return
        with self._reads_lock:
            mine = self._reads.get(scope)
            if mine is None:
                self._reads[scope] = mine = {}
            for key, row in rows.items():  # (what two reads of a row returned: a knn's vector, a BM25 read's terms)
                got = mine.get(key)
                if got is None:
                    mine[key] = row
                else:
                    got.update(row)

    def _kept(self) -> dict[str, dict[str, Any]] | None:
        """The rows this search read so far (None outside a search or before any read)."""
        scope = deadline.current()
        if scope is None:
            return None
        with self._reads_lock:
            return self._reads.get(scope)

    def fetch(self, keys: Sequence[Any]) -> list[Row]:
        """Rows for keys, in the order given; unknown keys are skipped."""
        if not keys:
            return []
        got: dict[str, Row] = {}
        uniq = list(dict.fromkeys(str(k) for k in keys))
        kept = self._kept()
        if kept:  # the rows this search's knn and BM25 reads returned
            got = {k: _row(kept[k]) for k in uniq if k in kept}
            uniq = [k for k in uniq if k not in got]
        with self._backend("fetch"):
            for i in range(0, len(uniq), _READ_BATCH):
                for r in self.client.query(self.collection, filter=_keys_in("key", uniq[i : i + _READ_BATCH]),
                                           output_fields=_ROW_FIELDS):
                    got[r["key"]] = _row(r)
        return [got[str(k)] for k in keys if str(k) in got]

    def document_rows(self, doc_ids: Sequence[str]) -> dict[str, list[Row]]:
        """Every row of each document, by position; documents not stored are absent from the result."""
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return {}
        out: dict[str, list[Row]] = {}
        with self._backend("document_rows"):
            rows = self._existing_rows([doc_key(d) for d in ids])
        for r in rows:
            row = _row(r)
            out.setdefault(row.doc_id, []).append(row)
        for lst in out.values():
            lst.sort(key=lambda r: r.position)
        return {d: out[d] for d in ids if d in out}

    def _existing_rows(self, dkeys: Sequence[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i in range(0, len(dkeys), _READ_BATCH):
            out.extend(self._query_all(_keys_in("dkey", dkeys[i : i + _READ_BATCH]), _ROW_FIELDS))
        return out

    def similarities(self, vectors: np.ndarray, keys: Sequence[Any]) -> np.ndarray:
        """A ``(len(vectors), len(keys))`` cosine matrix; NaN for keys not stored."""
        queries = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        mat = np.full((len(keys), queries.shape[1]), np.nan, dtype=np.float32)
        if len(keys):
            with self._backend("similarities"):
                self._fill_vectors(mat, keys)
        return block_products(_normalise(queries), _normalise(mat))

    def vectors(self, keys: Sequence[Any]) -> np.ndarray:
        """The rows' own unit vectors, ``(len(keys), dim)`` float32; NaN for keys not stored.

        A round trip per batch of keys to a Milvus server (in process for Milvus Lite)."""
        out = np.full((len(keys), self._dim or 0), np.nan, dtype=np.float32)
        if len(keys):
            with self._backend("vectors"):
                self._fill_vectors(out, keys)
            out = _normalise(out).astype(np.float32, copy=False)
        return out

    def _fill_vectors(self, out: np.ndarray, keys: Sequence[Any]) -> None:
        """Each key's stored vector into its rows of ``out`` (keys not stored are left as they are).

        The vectors this search's knn read are kept (:meth:`_keep`); the others are read on the exact
        (FLAT) index by a vector search filtered to the keys, with ``limit`` their number, so every
        stored one is a hit: Milvus Lite answers it several times faster than the same filter as a
        query (~9 ms against 20-60 ms for 100 keys at 100k rows). A key the search did not return is
        asked for by a query."""
        index: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            index.setdefault(str(key), []).append(i)
        kept = self._kept()
        if kept:
            for key in list(index):
                r = kept.get(key)
                if r is not None and "vec" in r:
                    out[index.pop(key)] = np.asarray(r["vec"], dtype=np.float32)
        missing = list(index)
        if self.index == "flat" and out.shape[1] and missing:
            probe = [[1.0] + [0.0] * (out.shape[1] - 1)]
            for i in range(0, len(missing), _READ_BATCH):
                part = missing[i : i + _READ_BATCH]
                hits = self.client.search(self.collection, data=probe, limit=len(part), filter=_keys_in("key", part),
                                          anns_field="vec", output_fields=["vec"],
                                          search_params={"metric_type": "COSINE"})[0]
                for h in hits:
                    key = h["key"] if "key" in h else h["id"]
                    if key in index:
                        out[index.pop(key)] = np.asarray(h["entity"]["vec"], dtype=np.float32)
            missing = list(index)
        for i in range(0, len(missing), _READ_BATCH):
            for r in self.client.query(self.collection, filter=_keys_in("key", missing[i : i + _READ_BATCH]),
                                       output_fields=["key", "vec"]):
                out[index[r["key"]]] = np.asarray(r["vec"], dtype=np.float32)

    # ------------------------------------------------------------------ BM25 from stored terms

    def keyword_index(self, analyzer: Any = None) -> _terms.StoreKeywordIndex | None:
        """The engine's BM25 source when this store keeps terms for the engine's analyzer, else None."""
        return _terms.keyword_index(self, analyzer)

    def _row_terms(self, content: str) -> tuple[list[str], list[int], int]:
        """A row's ``(term keys, frequencies, length)`` from its content: what was written with the row
        (the store's analyzer is the recorded one, see :meth:`open`). Computed here rather than read: Milvus
        Lite returns an ARRAY field at ~0.1 ms a row, the ``rec`` string it is analysed from at a few µs."""
        return _terms.sentence_terms(self.analyzer.terms(content))

    def bm25_matches(self, text: str) -> tuple[list[tuple[str, int]], np.ndarray]:
        """Every row containing a term of ``text``: its (doc_id, position) and BM25 score (> 0)."""
        qkeys = _terms.query_keys(self.analyzer.terms(text))
        if not qkeys:
            return [], np.zeros(0, dtype=np.float64)
        with self._backend("bm25"):
            totals = self._totals()
            rows = self._query_all(f"array_contains_any(terms, [{', '.join(literal(t) for t in qkeys)}])",
                                   ["key", "rec", "position"])
        recs = [json.loads(r["rec"]) for r in rows]
        terms = [self._row_terms(rec["c"]) for rec in recs]
        df = _terms.document_frequencies(qkeys, (t[0] for t in terms))
        scores = _terms.bm25_scores(qkeys, terms, df, totals)
        ids = [(rec["d"], int(r["position"])) for rec, r in zip(recs, rows)]
        return ids, scores

    def bm25_candidates(self, text: str, flt: NativeFilter | None = None,
                        n: int | None = None) -> tuple[list[str], np.ndarray]:
        """Keys and BM25 scores (> 0) of the rows passing ``flt`` that hold a term of ``text``.

        With ``n``: a set of such rows that provably contains the ``n`` best (ties kept), read by the
        sparse-vector search and widened until the bound closes (see :func:`_sparse`); else every row.
        Document frequencies are over all rows (counted per term when fewer rows are read). The rows
        read are kept for the rest of the search (its fetch and scoring read none of them again).
        """
        qkeys = _terms.query_keys(self.analyzer.terms(text))
        if not qkeys or n == 0 or (flt is not None and flt.extra.get("empty")):  # n == 0: LIMIT 0 needs none
            return [], np.zeros(0, dtype=np.float64)
        if n is not None and self._sparse:
            with self._backend("bm25"):
                return self._bm25_top(qkeys, flt, n)
        return self._bm25_all(qkeys, flt)

    def _bm25_all(self, qkeys: list[str], flt: NativeFilter | None) -> tuple[list[str], np.ndarray]:
        """Every row passing ``flt`` that holds a query term, with its BM25 score."""
        check = flt.extra.get("check") if flt is not None else None
        native = flt.native if flt is not None else None
        expr = f"array_contains_any(terms, [{', '.join(literal(t) for t in qkeys)}])"
        if native:
            expr += f" and ({native})"
        with self._backend("bm25"):
            totals = self._totals()
            rows = self._query_all(expr, _ROW_FIELDS)
            if check is not None:
                rows = [r for r in rows if pyfilter.row_passes(check, _row(r))]
            terms = [self._row_terms(json.loads(r["rec"])["c"]) for r in rows]
            if native or check is not None:
                df = self._df(qkeys, totals)
            else:
                df = _terms.document_frequencies(qkeys, (t[0] for t in terms))
        self._keep({r["key"]: r for r in rows})
        return [r["key"] for r in rows], _terms.bm25_scores(qkeys, terms, df, totals)

    def _bm25_top(self, qkeys: list[str], flt: NativeFilter | None, n: int) -> tuple[list[str], np.ndarray]:
        """The proven top ``n`` by BM25 (ties kept) among rows passing ``flt``: the sparse-vector search
        widened until the bound of :func:`nlql.stores._terms.sparse_weights` closes
        (:func:`nlql.stores._terms.sparse_top`), else every row holding a term."""
        totals = self._totals()
        df = self._df(qkeys, totals)
        query, ratio = _terms.sparse_query(qkeys, df, totals)
        if not query:
            return [], np.zeros(0, dtype=np.float64)
        live = [t for t in qkeys if df[t] > 0]
        check = flt.extra.get("check") if flt is not None else None
        expr = (flt.native or "") if flt is not None else ""
        analysed: dict[str, tuple[list[str], list[int], int]] = {}  # (a wider round reads the first again)
        first = [True]

        def read(limit: int) -> tuple[list[dict[str, Any]], float, bool]:
            hits = self.client.search(self.collection, data=[query], anns_field="sp", limit=limit, filter=expr,
                                      output_fields=_KEPT_FIELDS, search_params={"metric_type": "IP"})[0]
            if first[0]:
                first[0] = False
                keyword_reads_sent()  # (Milvus Lite: a fusion's knn starts now, not before these reads)
            rows = [{**h["entity"], "key": h["key"] if "key" in h else h["id"]} for h in hits]
            smallest = float(hits[-1]["distance"]) if hits else 0.0  # hits are best first
            exhausted = len(rows) < limit
            if check is not None:
                rows = [r for r in rows if pyfilter.row_passes(check, _row(r))]
            for r in rows:
                if r["key"] not in analysed:
                    analysed[r["key"]] = self._row_terms(json.loads(r["rec"])["c"])
                r["_terms"] = analysed[r["key"]]  # (kept with the row: the search's rescoring analyses none again)
            self._keep({r["key"]: r for r in rows})
            return rows, smallest, exhausted

        got = _terms.sparse_top(n, read, lambda rows: _terms.bm25_scores(
            live, [analysed[r["key"]] for r in rows], df, totals), ratio, _MAX_TOPK)
        if got is None:
            return self._bm25_all(qkeys, flt)  # the bound did not close within the top-k window
        kept, scores, rounds, limit = got
        self.last_stats = {"path": "bm25-sparse", "rounds": rounds, "read": limit}
        # every row tied with the n-th score was read (it scores above the bound): the first n of them
        # in insertion order are the arm's window, as the engine ranks it
        return _terms.first_n([r["key"] for r in kept], scores, [int(r["seq"]) for r in kept],
                              [int(r["position"]) for r in kept], n)

    def bm25_scores(self, text: str, rows: Sequence[Row]) -> np.ndarray:
        """BM25 of ``text`` for each row (0.0 where no query term occurs); statistics over all rows.

        The rows' terms come from their content (:meth:`_row_terms`); only the statistics are read."""
        qkeys = _terms.query_keys(self.analyzer.terms(text))
        if not qkeys or not rows:
            return np.zeros(len(rows), dtype=np.float64)
        with self._backend("bm25"):
            totals = self._totals()
            df = self._df(qkeys, totals)
        kept = self._kept() or {}  # (the rows this search's BM25 read were analysed there: fetch returned them)
        terms = []
        for r in rows:
            got = kept.get(r.key)
            terms.append(got["_terms"] if got is not None and "_terms" in got else self._row_terms(r.content))
        return _terms.bm25_scores(qkeys, terms, df, totals)


# ---------------------------------------------------------------------- helpers


def _sparse(terms: Sequence[str], tfs: Sequence[int], length: int) -> dict[int, float]:
    """A row's BM25 weights as a sparse vector (:func:`nlql.stores._terms.sparse_weights`); Milvus takes no
    empty one, so a row without terms gets a dimension no term has."""
    return _terms.sparse_weights(terms, tfs, length) or {_terms.SPARSE_DIMS: 1.0}


class _Timed:
    """A ``MilvusClient`` whose data calls get the search's time left as their ``timeout`` (gRPC's
    deadline, so a call returns at the deadline however long the server works); ``default`` bounds a
    call without a search deadline."""

    _CALLS = frozenset({"search", "query", "query_iterator", "upsert", "insert", "delete", "get",
                        "has_collection", "describe_collection", "load_collection", "get_server_version"})

    def __init__(self, client: Any, default: float | None) -> None:
        self._client = client
        self._default = default

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name not in self._CALLS:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            left = deadline.remaining()
            if left is not None:
                if left <= 0:
                    deadline.check("milvus", name)
                kwargs["timeout"] = max(0.001, left if self._default is None else min(left, self._default))
            elif self._default is not None:
                kwargs.setdefault("timeout", self._default)
            return attr(*args, **kwargs)

        return call


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _at_once(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """The results of ``calls``, made concurrently (the first in this thread, the others on a small
    pool, each in a copy of the caller's context: the search's deadline); the first failure is raised."""
    global _pool
    if len(calls) < 2:
        return [c() for c in calls]
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="nlql-milvus")
    futures = [_pool.submit(contextvars.copy_context().run, c) for c in calls[1:]]
    first = calls[0]()
    return [first] + [f.result() for f in futures]


def _is_local(uri: str) -> bool:
    return "://" not in uri


def _row(r: dict[str, Any]) -> Row:
    rec = json.loads(r["rec"])
    return Row(key=r["key"], doc_id=rec["d"], position=int(r["position"]), content=rec["c"], metadata=rec["m"],
               seq=int(r["seq"]), start=int(rec["s"]), end=int(rec["e"]), tail=rec["t"])


def _normalise(mat: np.ndarray) -> np.ndarray:
    return V.normalize_rows(mat)  # (the one normaliser: zero rows stay zero)


def _pairs(hits: list[list[tuple[str, float, int, int]]]) -> list[list[tuple[Any, float]]]:
    """``(key, score)`` of each ``(key, score, seq, position)`` hit: what knn returns."""
    return [[(key, s) for key, s, _, _ in row] for row in hits]


def _threshold(out: list[list[tuple[Any, float]]], min_score: float | None) -> list[list[tuple[Any, float]]]:
    if min_score is None:
        return out
    return [[h for h in hits if h[1] >= min_score] for hits in out]


def _exact_number(value: Any) -> bool:
    return abs(value) < _EXACT_INT


def _cmp(kind: str, path: tuple[str, ...], op: str, value: Any, loose: list[str]) -> str:
    p = _path(kind, path)
    if kind in ("n", "f"):
        if not _exact_number(value):
            loose.append(f"{p} {_RANGE[op]} {value!r} (beyond 2^53: re-checked)")
            return _present(kind, path)
        return f"{p} {_RANGE[op]} {literal(float(value))}"
    if kind == "d":
        micros = T.datetime_micros(value)
        if micros is None:
            loose.append(f"{p} {_RANGE[op]} {value!r} (out of range: re-checked)")
            return _present(kind, path)
        return f"{p} {_RANGE[op]} {micros}"
    if kind in ("s", "c"):
        return f"{p} {_RANGE[op]} {literal(escape(value))}"
    return f"{p} {_RANGE[op]} {literal(value)}"


# Milvus before 2.4 has LIKE for prefixes only ("ab%"): CONTAINS is then re-checked in the adapter.
_INFIX_LIKE: ContextVar[bool] = ContextVar("nlql_milvus_infix_like", default=True)

# Milvus's C++ engine (2.3 and 2.5 alike) has no `exists` on a JSON path and no `not` over a JSON
# comparison, so expressions are monotone: a view is present when a comparison of its own type holds
# for every value it can have, a negation is `!=` (which a missing key also passes) beside that presence
# test, and what has no positive form (IS NULL, NOT CONTAINS) is pushed as a superset and re-checked.
_PRESENT = {
    "s": '{p} >= ""', "c": '{p} >= ""',
    "n": "{p} >= -1.7976931348623157e308", "f": "{p} >= -1.7976931348623157e308",
    "d": "{p} >= -9223372036854775807", "b": "{p} in [true, false]", "p": "{p} == true",
}


def _present(kind: str, path: tuple[str, ...]) -> str:
    if T.always_present(kind, path):
        return "true"
    return _PRESENT[kind].format(p=_path(kind, path))


def _fold(parts: list[str], conj: bool) -> str:
    """``parts`` joined by ``and`` (``conj``) or ``or`` with the constants folded: Milvus 2.5 cannot
    filter by a bare ``true`` or ``false`` inside a larger expression (``(x == 0.0 or true)`` is an
    invalid expression there)."""
    if ("false" if conj else "true") in parts:
        return "false" if conj else "true"
    parts = [x for x in parts if x != ("true" if conj else "false")]
    if not parts:
        return "true" if conj else "false"
    return parts[0] if len(parts) == 1 else "(" + f" {'and' if conj else 'or'} ".join(parts) + ")"


def _render(node: T.VNode, loose: list[str]) -> str:
    """A view-level node as a Milvus expression; superset leaves are noted in ``loose``."""
    if isinstance(node, T.Present):
        return _present(node.kind, node.path)
    if isinstance(node, T.Absent):
        loose.append(f"{_path(node.kind, node.path)} is missing (no negation in Milvus: re-checked)")
        return "true"
    if isinstance(node, T.Cmp):
        return _cmp(node.kind, node.path, node.op, node.value, loose)
    if isinstance(node, T.InSet):
        sub_in: list[str] = []
        parts = [_cmp(node.kind, node.path, "eq", v, sub_in) for v in node.values]
        loose.extend(sub_in)
        p = _path(node.kind, node.path)
        if not sub_in and len(parts) > 1 and all(x.startswith(f"{p} == ") for x in parts):
            # one `in` list: a long `or` chain is folded by Milvus into a node its engine cannot run
            return f"{p} in [{', '.join(x[len(p) + 4:] for x in parts)}]"
        return _fold(parts, conj=False)
    if isinstance(node, T.NotIn):
        sub: list[str] = []
        parts = [_cmp(node.kind, node.path, "eq", v, sub) for v in node.values]
        if sub:  # a negated superset is not a superset: check the whole leaf in the adapter
            loose.extend(sub)
            return _present(node.kind, node.path)
        p = _path(node.kind, node.path)
        # `not in` (which a missing key also passes) beside the presence test: one node however many
        # values (Milvus folds a long `!=` chain into a NOT IN node its engine cannot run)
        ne = [f"{p} not in [{', '.join(x[len(p) + 4:] for x in parts)}]"]
        present = _present(node.kind, node.path)
        items = ([] if present == "true" else [present]) + ne
        return items[0] if len(items) == 1 else "(" + " and ".join(items) + ")"
    if isinstance(node, (T.Substr, T.NotSubstr)):
        p = _path("c", node.path)
        needle = escape(node.needle)
        if not _INFIX_LIKE.get() or any(ch in needle for ch in "%_\\"):
            why = "LIKE wildcard in the needle" if _INFIX_LIKE.get() else "no infix LIKE before Milvus 2.4"
            loose.append(f"{p} {'not ' if isinstance(node, T.NotSubstr) else ''}contains {node.needle!r} "
                         f"({why}: re-checked)")
            return _present("c", node.path)
        like = f"{p} like {literal('%' + needle + '%')}"
        if isinstance(node, T.Substr):
            return like
        loose.append(f"{p} not contains {node.needle!r} (no negation in Milvus: re-checked)")
        return _present("c", node.path)
    if isinstance(node, (T.VAnd, T.VOr)):  # constants folded: Milvus 2.5 cannot filter by a bare `true`
        return _fold([_render(i, loose) for i in node.items], conj=isinstance(node, T.VAnd))
    if isinstance(node, T.VConst):
        return "true" if node.value else "false"
    raise TypeError(f"cannot render {node!r}")


def _leaf_text(cond: Any) -> str:
    value = cond.value.isoformat() if isinstance(cond.value, (datetime, date)) else cond.value
    return f"{'.'.join(cond.path)} {cond.op} {json.dumps(value, ensure_ascii=True, default=str)}"


def from_url(url: str) -> dict[str, Any]:
    """Constructor arguments for ``milvus:///path/file.db`` or ``milvus+http(s)://host:port[/db]``.

    Query parameters ``collection``, ``index``, ``token``, ``hnsw_ef`` and ``db_name`` pass through,
    e.g. ``milvus+http://localhost:19530?collection=docs&index=hnsw``.

    >>> from_url("milvus:///tmp/x.db")
    {'uri': '/tmp/x.db'}
    >>> from_url("milvus+http://h:19530?index=hnsw")
    {'uri': 'http://h:19530', 'index': 'hnsw'}
    """
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    parts = urlsplit("x://" + rest)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    allowed = {"collection", "index", "token", "hnsw_ef", "db_name"}
    unknown = sorted(set(query) - allowed)
    if unknown:
        raise NLQLError(f"unknown option {unknown[0]!r} in store URL {url!r}",
                        hint="known options: " + ", ".join(sorted(allowed)))
    out: dict[str, Any] = {}
    if scheme == "milvus":
        path = rest.split("?", 1)[0]
        if not path:
            raise NLQLError(f"store URL {url!r} names no file", hint="write milvus:///path/to/file.db")
        out["uri"] = path
    elif scheme in ("milvus+http", "milvus+https"):
        if not parts.netloc:
            raise NLQLError(f"store URL {url!r} names no host", hint="write milvus+http://host:19530")
        out["uri"] = f"{scheme.split('+', 1)[1]}://{parts.netloc}"
        db = parts.path.strip("/")
        if db:
            out["db_name"] = db
    else:
        raise NLQLError(f"not a Milvus URL: {url!r}")
    for k, v in query.items():
        out[k] = int(v) if k == "hnsw_ef" else v
    return out


__all__ = ["MilvusStore", "doc_key", "escape", "from_url", "literal", "row_key"]
