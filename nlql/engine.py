"""The Engine: ingest, check, explain and search over one store (SPEC §7)."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import math
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from itertools import chain
from pathlib import Path
from typing import Any, cast

import numpy as np

from nlql import ir
from nlql import values as V
from nlql.deadline import Deadline
from nlql.errors import BackendError, Diagnostic, EmbedderError, LimitError, NLQLError, RouteError
from nlql.execute.executor import Executor
from nlql.execute.graph import GraphSidecar
from nlql.execute.keywords import BM25Sidecar
from nlql.execute.results import Hits
from nlql.execute.units import DEFAULT_CHUNK_CHARS
from nlql.explain import Explain
from nlql.gc_pause import gc_paused
from nlql.parser import parse as parse_query
from nlql.patterns import deadline_scope, in_deadline_scope
from nlql.plan.cache import PlanCache, Unkeyable, params_key
from nlql.plan.planner import build_plan
from nlql.route import (
    RESERVED_PARAMS,
    Route,
    RouteExplain,
    Router,
    answers,
    default_router,
    nothing_about,
    route_notes,
)
from nlql.stores import open_store
from nlql.stores.base import KeepsAnalyzer, KeywordStats, RunsLowered, Store, Syncing, WarmsUp, WritesAhead
from nlql.stores.batch import DocBatch

# An int needs this many bits before Python refuses to write it as text (4,300 digits): JSON and every
# store's serialiser fail on such a value, so ingest refuses it up front, before anything is written.
_MAX_INT_BITS = 14_000


def _params(params: Any) -> dict[str, Any] | None:
    """``params`` as a dict; anything but a mapping (or None) is a programming error."""
    if params is None:
        return None
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping of parameter names to values, not {type(params).__name__}")
    # names as check() reads them: a positional parameter may be given as 1 or "1"
    return {str(k): v for k, v in params.items()}


def _too_deep(exc: BaseException) -> LimitError:
    return LimitError(f"the query is too deeply nested to process here ({type(exc).__name__})",
                      hint="simplify the query, or split long chains of LET bindings")


_FLAT_TYPES = (str, bool, type(None))
_STR_ONLY = frozenset({str})


def _flat_metadata(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """The common case, checked and normalised in one loop: non-empty string keys and plain strings,
    booleans, None, finite floats and ints of a storable size. None for anything else (the general
    walk in :func:`_check_metadata` handles it, with its errors)."""
    out = {}
    for k, v in meta.items():
        if type(k) is not str or not k:
            return None
        tv = type(v)
        if tv is int:
            if v.bit_length() > _MAX_INT_BITS:
                return None
        elif tv is float:
            if not math.isfinite(v):
                return None
        elif tv not in _FLAT_TYPES:
            return None
        out[k] = v
    if "entities" in out:  # a string is not a list of names: the general walk says so
        return None
    return out


def _check_metadata(meta: Any) -> dict[str, Any]:
    """The metadata of one document, normalised, refusing what no store can write (docs/reliability.md).

    Raises:
        TypeError: ``meta`` is not a mapping.
        ValueError: it holds an integer (value or key) too large to write as text (over ~4,200 digits).
    """
    if type(meta) is dict:  # the common case first (an isinstance against the Mapping ABC is slow)
        flat = _flat_metadata(meta)
        if flat is not None:
            return flat
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise TypeError(f"metadata must be a mapping (a dict), not {type(meta).__name__}")
    flat = _flat_metadata(meta)
    if flat is not None:
        return flat
    out = dict(meta)
    # (value, whether it is reached through mappings only: its keys are paths a query can write)
    stack: list[tuple[Any, bool]] = [(out, True)]
    seen: set[int] = set()
    while stack:  # iterative, and a container that holds itself is walked once
        value, path = stack.pop()
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _MAX_INT_BITS:
            raise ValueError("metadata holds an integer too large to store (over 4,200 digits)")
        if isinstance(value, (Mapping, list, tuple, set, frozenset)):
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, Mapping):
                for k in value.keys():
                    if path and (k == "" or k == b""):
                        raise ValueError("metadata has an empty key (''), which no query can name; "
                                         "use a non-empty key")
                    stack.append((k, False))
                stack.extend((v, path) for v in value.values())
            else:
                stack.extend((v, False) for v in value)
    names = out.get("entities")
    if names is not None and (not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names)):
        raise ValueError('metadata["entities"] must be a list of entity names (strings)')
    return V.normalize_metadata(out)


_NONE = type(None)
_SCALAR_TYPES = frozenset({str, bool, _NONE, int, float})


def _check_metadatas(metas: list[Any]) -> list[dict[str, Any]]:
    """``[_check_metadata(m) for m in metas]``, checked a column at a time when every metadata is a
    plain dict of scalars under non-empty string keys (the common case: no loop per document; issue 21).
    Anything else goes through :func:`_check_metadata` one by one, which raises its own error."""
    kinds = set(map(type, metas))
    if kinds <= {dict, _NONE}:
        keys = set().union(*(filter(None, metas) if _NONE in kinds else metas))
        if _STR_ONLY.issuperset(map(type, keys)) and "" not in keys and "entities" not in keys:
            values = list(chain.from_iterable(map(dict.values, filter(None, metas) if _NONE in kinds else metas)))
            types = set(map(type, values))
            if _SCALAR_TYPES.issuperset(types):
                ok = True
                if int in types:
                    ints = [v for v in values if type(v) is int]
                    ok = max(max(ints), -min(ints)).bit_length() <= _MAX_INT_BITS
                if ok and float in types:
                    ok = all(map(math.isfinite, [v for v in values if type(v) is float]))
                if ok:  # each a copy: the store keeps it, the caller may change theirs
                    return list(map(dict.copy, metas)) if _NONE not in kinds else \
                        [{} if m is None else m.copy() for m in metas]
    return [_check_metadata(m) for m in metas]


def _open(store: Any) -> Store:
    """``open_store`` with every failure an NLQL error naming the store (a directory store: its path)."""
    try:
        return open_store(store)
    except NLQLError:
        raise
    except Exception as exc:  # noqa: BLE001 - OSError, sqlite3 and driver errors while opening
        where = f"the store at {store}" if isinstance(store, (str, Path)) else f"the store {store!r}"
        raise BackendError("memory" if isinstance(store, (str, Path)) else type(store).__name__,
                           f"cannot open {where}: {type(exc).__name__}: {exc}") from exc


class _RWLock:
    """Many readers or one writer; writers are not starved (new readers wait for a waiting writer)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()  # (entered directly: Condition's own __enter__ is a Python call)
        self._cond = threading.Condition(self._mutex)
        self._readers = 0
        self._writer = False
        self._waiting = 0
        self._reading = _Reading(self)

    def read(self) -> Any:
        """A context holding the lock for reading (one object, no state of its own: every search on
        every thread enters the same one)."""
        return self._reading

    def _enter_read(self) -> None:
        with self._mutex:
            while self._writer or self._waiting:
                self._cond.wait()
            self._readers += 1

    def _exit_read(self) -> None:
        with self._mutex:
            self._readers -= 1
            if not self._readers and self._waiting:  # (only a waiting writer waits for no readers)
                self._cond.notify_all()

    @contextmanager
    def write(self) -> Any:
        with self._cond:
            self._waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class _Reading:
    """``with lock.read():`` as a plain context manager (a search enters it once; a generator-based one
    costs a generator and two frames more)."""

    __slots__ = ("_lock",)

    def __init__(self, lock: _RWLock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        self._lock._enter_read()

    def __exit__(self, *exc: Any) -> None:
        self._lock._exit_read()


class _SearchErrors:
    """:meth:`Engine._search_errors` as a plain context manager (every search enters one; a
    generator-based one costs a generator and its frames more)."""

    __slots__ = ("_engine", "_source")

    def __init__(self, engine: Engine, source: str | None) -> None:
        self._engine = engine
        self._source = source

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:  # (returns None: never swallows exc)
        if exc is None:
            return
        if isinstance(exc, NLQLError):
            if self._source is not None:
                exc.with_source(self._source)
        elif isinstance(exc, (RecursionError, MemoryError)):
            raise _too_deep(exc) from None
        elif isinstance(exc, Exception):
            raise BackendError(self._engine.store.capabilities.NAME, f"search failed: {exc}") from exc
        # (KeyboardInterrupt and the like go on as they are)


class _Same:
    """An unhashable value in a dict key, by identity."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.value is self.value


#: A plan cache entry that says: this query reads the clock, look it up with the instant (nlql/plan/cache.py).
_CLOCKED: Any = object()

#: ``Engine(entity_extractor=…)`` not given: the built-in rule-based extractor.
_DEFAULT: Any = object()




@functools.lru_cache(maxsize=256)
def _first_paging(limit: int | None, offset: int) -> Any:
    """:meth:`Engine._paging` of a plan with this LIMIT and OFFSET (a frozen Paging)."""
    from nlql.execute.cursor import Paging, default_depth

    return Paging("", "", -1, default_depth(limit, offset), limit)


def _system_clock() -> datetime:
    return datetime.now(timezone.utc)


class Engine:
    """Ingest text, then check, explain and search it with NLQL.

    >>> from nlql.embedders import HashEmbedder
    >>> engine = Engine(embedder=HashEmbedder(dim=64))
    >>> engine.add_text("Agents call tools. Cats sleep all day.", id="a", metadata={"status": "published"})
    'a'
    >>> hits = engine.search('SELECT SENTENCE WHERE content CONTAINS "tool" LIMIT 1')
    >>> [h.content for h in hits]
    ['Agents call tools.']
    """

    def __init__(
        self,
        embedder: Any = None,
        store: str | Path | Store = "memory",
        reranker: Any = None,
        rerank_factor: int = 5,
        clock: Callable[[], datetime] | None = None,
        *,
        chunk_chars: int = DEFAULT_CHUNK_CHARS,
        analyzer: Any = None,
        limit_ceiling: int = 100_000,
        warm_up: bool = True,
        on_arm_error: str = "raise",
        default_timeout: float | None = None,
        router: Router | None = None,
        entity_extractor: Callable[[str], Sequence[str]] | None | Any = _DEFAULT,
        plan_cache_size: int = 256,
    ) -> None:
        if on_arm_error not in ("raise", "degrade"):
            raise ValueError(f"on_arm_error must be 'raise' or 'degrade', not {on_arm_error!r}")
        self.on_arm_error = on_arm_error
        self.default_timeout = _check_run_args(default_timeout, None)
        opened = None
        if embedder is None:
            from nlql.embedders import default_embedder
            from nlql.stores import record

            # the variant of the default model that filled this store, when installed (PACKAGED_INT8)
            opened = _open(store)
            embedder = default_embedder(recorded=(record.read(opened, record.EMBEDDER) or {}).get("model"))
        dim = _embedder_dim(embedder)
        _check_reranker(reranker)
        self.embedder = embedder
        self.store: Store = opened if opened is not None else _open(store)
        self.reranker = reranker
        self.rerank_factor = int(rerank_factor)
        self.clock = clock or _system_clock
        self.chunk_chars = chunk_chars
        self.limit_ceiling = limit_ceiling
        self._functions: dict[str, Callable[..., Any]] = {}
        self._arity: dict[str, int | None] = {}
        self._lock = _RWLock()
        self._write_mutex = threading.Lock()
        self._schema_cache: tuple[int, float, Any] | None = None  # (writes, when, Schema) for data warnings
        self._writes = 0
        self._functions_version = 0
        self._plans = PlanCache(plan_cache_size)  # nlql/plan/cache.py: what the key holds
        # (capabilities, analyzer, rerank_factor, limit_ceiling, the int the plan key holds for them)
        self._key_static: tuple[Any, ...] | None = None
        self._static_tokens: dict[tuple[Any, ...], int] = {}  # those values -> their int
        self._finite_queries = b""  # the bytes of the query vectors last checked finite (_embed_queries)
        self._rebinders: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()  # plan identity -> Rebinder
        self._warn_memo: dict[int, list[Any]] = {}  # id(query) -> [query, reads meta, (schema, warnings)]
        if router is not None and not callable(getattr(router, "route", None)):
            raise TypeError(f"router must be an nlql.Router, not {type(router).__name__}")
        self.router = router
        analyzer = self._open_store(embedder, dim, analyzer, store)
        # BM25 kept in the store itself (SPEC §10), else the engine's index beside the store
        own_bm25 = (cast(KeywordStats, self.store).keyword_index(analyzer) if self.store.capabilities.KEYWORD_STATS
                    else None)
        self._bm25 = own_bm25 or BM25Sidecar(self.store, analyzer)
        if entity_extractor is _DEFAULT:
            from nlql.text.entities import RuleEntityExtractor

            entity_extractor = RuleEntityExtractor()
        elif entity_extractor is not None and not callable(entity_extractor):
            raise TypeError("entity_extractor must be a callable text -> list[str], or None")
        self.entity_extractor = entity_extractor
        # the entity graph behind GRAPH: built from the store's rows the first time a query uses GRAPH
        self._graph = GraphSidecar(self.store, entity_extractor)
        self._executor = Executor(self.store, self._embed_queries, self._bm25, self._functions, chunk_chars,
                                  on_arm_error=on_arm_error, graph=self._graph, dim=dim)
        if warm_up:
            try:
                from nlql.text.temporal import warm_up as _warm
                from nlql.text.temporal import warm_up_languages

                _warm()
                # every language's period phrases (about a second): on a thread of their own, so the
                # engine starts at once and a TEMPORAL query that comes first waits only for what is left
                threading.Thread(target=warm_up_languages, name="nlql-periods", daemon=True).start()
            except Exception:  # noqa: BLE001 - warming is an optimisation only
                pass
            # a store that holds rows already (reopened) starts its int8 copy in the background
            if self.store.capabilities.WARM_UP:
                cast(WarmsUp, self.store).build_int8(wait=False)

    def _open_store(self, embedder: Any, dim: int, analyzer: Any, where_from: Any) -> Any:
        """Open the store after checking its record (embedder, analyzer); record them if it has none.

        The check comes before ``open`` (so a mismatch changes nothing) and again after it (some
        stores answer only once open); the record is written before the first vector (issue 17).
        Returns the engine's analyzer (see :func:`nlql.stores.record.resolve_analyzer`).
        """
        from nlql.embedders import embedder_record
        from nlql.stores import record

        wanted = {**embedder_record(embedder), "dim": dim}

        def read_record() -> Any:
            record.check_embedder(self.store, wanted)
            found = record.resolve_analyzer(self.store, analyzer)
            caps = self.store.capabilities
            if caps.ANALYZER and cast(KeepsAnalyzer, self.store).analyzer != found:
                # a store with BM25 of its own takes the engine's analyzer (its term table is rebuilt
                # for it on open), so BM25 is the same on every store
                cast(KeepsAnalyzer, self.store).analyzer = found
                if caps.SQL_ARMS:  # (its dialect writes the term statements)
                    cast(RunsLowered, self.store).dialect.analyzer = found
            return found

        try:
            try:
                resolved = read_record()
            except BackendError:  # the store answers only once open (SQL stores, Milvus): read it after
                resolved = None
            except NLQLError:
                raise
            except Exception:  # noqa: BLE001 - likewise, a driver error before open
                resolved = None
            self.store.open(dim)
            if resolved is None:
                resolved = read_record()
            record.adopt(self.store, wanted, resolved)
        except NLQLError:
            raise
        except Exception as exc:  # a driver error while opening: name the store (and its directory)
            where = f" at {where_from}" if isinstance(where_from, (str, Path)) else ""
            raise BackendError(self.store.capabilities.NAME,
                               f"cannot open the store{where}: {type(exc).__name__}: {exc}") from exc
        return resolved

    # ------------------------------------------------------------------------------------- ingest

    def add_text(self, text: str, id: str | int | None = None, metadata: Mapping[str, Any] | None = None) -> str:
        """Add one document (split into sentences and embedded); the same id again replaces it.

        ``id`` is a string or an int (``5`` is the id ``"5"``); None makes a new UUID4 hex id.
        """
        return self.add_texts([text], ids=[id] if id is not None else None,
                              metadatas=[metadata] if metadata is not None else None)[0]

    def add_texts(
        self,
        texts: Sequence[str],
        ids: Sequence[str | int | None] | None = None,
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        batch_size: int = 256,
        progress: Any = False,
    ) -> list[str]:
        """Add many documents, embedding in batches. Returns their ids (new ids are UUID4 hex).

        ``progress=True`` reports sentences embedded, their rate and an ETA on stderr (a bar on a
        terminal, plain lines otherwise); a :class:`nlql.progress.Progress` object receives them instead.

        The same id twice (in one call or across calls): the last text wins. Every text, id and
        metadata is checked before anything is written, and each batch is checked after embedding
        before it is written, so a refused call adds nothing. Each batch of ``batch_size`` documents is
        one atomic write: when a later batch fails, the error names the batches already committed
        (``error.committed`` holds their ids) and nothing of the failed batch is stored.

        Raises:
            TypeError: ``texts`` is a single string, a text is not a string, an id is neither a string
                nor an int, a metadata is not a mapping.
            ValueError: ``ids``/``metadatas`` do not have one entry per text, a metadata key is empty,
                a metadata integer is too large to store.
            EmbedderError: The embedder failed or returned anything but one finite vector per sentence.
            BackendError: The store failed.
        """
        with gc_paused():
            return self._add_texts(texts, ids, metadatas, batch_size, progress)

    def _add_texts(self, texts: Sequence[str], ids: Sequence[str | int | None] | None,
                   metadatas: Sequence[Mapping[str, Any] | None] | None, batch_size: int,
                   progress: Any) -> list[str]:
        texts = _check_texts(texts)
        n = len(texts)
        given_ids = _check_sequence(ids, "ids", n)
        given_metas = _check_sequence(metadatas, "metadatas", n)
        if given_ids is not None and _STR_ONLY.issuperset(map(type, given_ids)):
            out_ids = given_ids  # every id a str already (checked): the common case, without a call per id
        else:
            out_ids = [uuid.uuid4().hex if i is None else doc_id_of(i)
                       for i in (given_ids if given_ids is not None else [None] * n)]
        # validated and normalised in full before the first write, so a bad entry leaves nothing half-added
        checked = _check_metadatas(given_metas) if given_metas is not None else [{} for _ in range(n)]
        # the same id twice: only its last text is written (as if added one after the other)
        if _distinct(out_ids):
            order: list[int] | None = None  # every id once: documents in the order given
            kept = n
        else:
            last = {doc_id: i for i, doc_id in enumerate(out_ids)}
            order = [i for i in range(n) if last[out_ids[i]] == i]
            kept = len(order)
        from nlql.progress import make_progress

        report = make_progress(progress)
        if report is not None:  # counted first, so the report has a true total and an ETA from the start
            from nlql.text.split import split_sentences

            report.start(sum(len(split_sentences(texts[i])) for i in (order if order is not None else range(n))),
                         documents=kept)
        batch_size = max(1, int(batch_size))
        committed: list[str] = []
        n_batches = (kept + batch_size - 1) // batch_size
        caps = self.store.capabilities
        # a store that takes a write in two halves (WRITES_AHEAD) is written a batch behind: batch b+1 is
        # split, embedded and prepared while a thread of the call's own writes batch b
        ahead = _WriteAhead(self) if n_batches > 1 and caps.WRITES_AHEAD and not caps.SYNCS else None
        try:
            for b, lo in enumerate(range(0, kept, batch_size)):
                if order is None:
                    ids_b, texts_b, metas_b = out_ids[lo : lo + batch_size], texts[lo : lo + batch_size], \
                        checked[lo : lo + batch_size]
                else:
                    chunk = order[lo : lo + batch_size]
                    ids_b, texts_b, metas_b = [out_ids[i] for i in chunk], [texts[i] for i in chunk], \
                        [checked[i] for i in chunk]
                try:
                    batch = self._batch(ids_b, texts_b, metas_b, report)
                    # this batch's sentences per document, over what is left of the call: room a store may make
                    batch.rows_ahead = (len(batch.contents) * (kept - lo) + len(ids_b) - 1) // len(ids_b)
                    if ahead is None:
                        self._write(batch)
                        done = ids_b
                    else:  # (the ids of the batch before, now written)
                        done = ahead.write(batch, b, ids_b)
                        if b == n_batches - 1:
                            done = done + ahead.wait()
                except (NLQLError, _WriteFailed) as exc:
                    error = _batch_failed(exc, b, ahead, committed, n_batches)
                    if error is exc:
                        raise
                    error.__suppress_context__ = True  # (its own cause stays: a driver's error)
                    raise error  # noqa: B904 - the error of the write that failed, not its wrapper
                committed.extend(done)
                if report is not None and done:
                    report.advance(0, documents=len(done))
        finally:
            if ahead is not None:
                ahead.close()
        if isinstance(self._bm25, BM25Sidecar) and committed and self.store.capabilities.KEEPS_KEYWORDS:
            # a directory store keeps the engine's BM25 index for the next process
            with self._write_mutex, self._lock.write():
                self._catch_up()
                self._bm25.keep()
        if report is not None:
            report.close()
        return out_ids

    def _batch(self, doc_ids: list[str], texts: list[str], metas: list[dict[str, Any]],
               report: Any = None) -> DocBatch:
        """Split and embed one batch into columns (checked, not yet written; see nlql.stores.batch)."""
        from nlql.text.split import split_columns

        counts, positions, starts, ends, contents, tails = split_columns(texts)
        vecs = self._embed_documents(contents, report)
        # every id once: _add_texts kept the last text of each
        return DocBatch(doc_ids, texts, metas, counts, positions, starts, ends, contents, tails, vecs, unique=True)

    def _write(self, batch: DocBatch) -> None:
        with self._write_mutex, self._lock.write():
            self._catch_up()  # another process's writes first: seq numbers and BM25 follow the store
            # a store shared between processes allocates its own seq numbers inside its write
            batch.assign_seq(self.store.max_seq() + 1)
            self._graph.extract(batch)  # entity names with the write, for a store that keeps them
            # the batch whole to a store that takes one (the built-in store), its records to any other
            self._apply_write(batch, self.store.upsert, batch if self.store.capabilities.DOC_BATCHES else batch.records())
            self._catch_up()  # what the write itself found committed by others

    def _apply_write(self, batch: DocBatch, write: Callable[[Any], None], arg: Any) -> None:
        """A batch's store write (``write(arg)``) and what the engine derives from the data, kept in step
        with it; under the write lock (:meth:`_write`, and :class:`_WriteAhead`'s thread)."""
        self._writes += 1
        self._graph.forget_stale()  # a graph others' writes made stale is dropped, not taken for ours
        self._call_store("upsert", write, arg)
        self._bm25.on_upsert(batch)
        self._graph.on_upsert(batch)

    def delete(self, doc_id: str | int) -> bool:
        """Delete a document and all its sentences; True if it existed. ``5`` is the id ``"5"``."""
        key = doc_id_of(doc_id)
        with self._write_mutex, self._lock.write():
            self._catch_up()
            self._writes += 1
            self._graph.forget_stale()  # a graph others' writes made stale is dropped, not taken for ours
            n = self._call_store("delete", self.store.delete, [key])
            self._bm25.on_delete([key])
            self._graph.on_delete([key])
            self._catch_up()
            return bool(n)

    def _sync(self) -> None:
        """Every write another process committed before now is visible after this (cheap when none)."""
        if not self.store.capabilities.SYNCS:
            return
        try:
            if not cast(Syncing, self.store).stale():
                return
        except NLQLError:
            raise
        except Exception as exc:  # noqa: BLE001 - a driver error: name the store
            raise BackendError(self.store.capabilities.NAME, f"sync failed: {type(exc).__name__}: {exc}") from exc
        with self._lock.write():
            self._catch_up()

    def _catch_up(self) -> None:
        """Apply others' committed changes to what the engine derives from rows (hold the write lock)."""
        if not self.store.capabilities.SYNCS:
            return
        changes = self._call_store("sync", cast(Syncing, self.store).sync)
        if changes:
            self._writes += 1  # what is derived from the data (schema warnings) is stale too
            if changes.deleted:
                self._bm25.on_delete(changes.deleted)
                self._graph.on_delete(changes.deleted)
            if changes.docs:
                self._bm25.on_upsert(changes.docs)
                self._graph.on_upsert(changes.docs)

    def _call_store(self, method: str, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except NLQLError:
            raise
        except (TypeError, ValueError):
            raise
        except Exception as exc:
            raise BackendError(self.store.capabilities.NAME, f"{method} failed: {type(exc).__name__}: {exc}") from exc

    def _embed_documents(self, sentences: list[str], report: Any = None) -> np.ndarray:
        dim = int(self.embedder.dim)
        if not sentences:
            return np.zeros((0, dim), dtype=np.float32)
        if report is None:
            mat = _embed(self.embedder, sentences, dim, finite_checked=False)
            unit = _unit_rows(mat)  # its norms tell whether every number is finite (one pass fewer)
            if unit is not None:
                return unit
            _embed_check_finite(self.embedder, sentences, mat, dim)
            return V.normalize_rows(mat, zero_invalid=True)
        # in chunks, each reported as it is done (nlql.progress)
        from nlql.progress import chunks

        parts = []
        for lo, hi in chunks(len(sentences)):
            parts.append(_embed(self.embedder, sentences[lo:hi], dim))
            report.advance(hi - lo)
        return V.normalize_rows(np.concatenate(parts), zero_invalid=True)

    def _embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        mat = _embed(self.embedder, texts, int(self.embedder.dim), finite_checked=False)
        # the query vectors last found finite, by their bytes: the same bytes again need no check
        key = mat.tobytes() if mat.nbytes <= 65_536 else None
        if key is None or key != self._finite_queries:
            _embed_check_finite(self.embedder, texts, mat, mat.shape[1])
            if key is not None:
                self._finite_queries = key
        return mat

    def __len__(self) -> int:
        self._sync()
        return int(self._call_store("count", self.store.count))

    # ------------------------------------------------------------------------------------- query

    def register_function(self, name: str, fn: Callable[..., Any], arity: int | None = None) -> None:
        """Make ``NAME(args…)`` callable in queries (always evaluated by the engine, never pushed)."""
        key = name.upper()
        self._functions[key] = fn
        self._arity[key] = arity
        self._functions_version += 1  # plans checked against the old set are not reused

    def check(self, query: str | ir.Query, params: Mapping[str, Any] | None = None,
              schema: Mapping[str, str] | None = None) -> list[Diagnostic]:
        """Every problem in a query at once; [] when it is valid and reads only keys the data has.

        Besides errors (``severity="error"``), warnings from the data (``severity="warning"``, see
        :meth:`schema`): a metadata key no document has, a comparison whose type no value has.
        """
        from nlql.check import check as _check

        try:
            diags = _check(query, params=_params(params), schema=schema, functions=self._arity)
        except RecursionError as exc:
            return _too_deep(exc).diagnostics
        if any(d.severity == "error" for d in diags):
            return diags
        from nlql.parser import parse

        try:
            q = query if isinstance(query, ir.Query) else parse(query)
        except NLQLError:
            return diags
        return sorted([*diags, *self._data_warnings(q)], key=lambda d: (d.line == 0, d.line, d.column))

    def schema(self, sample: int = 1000) -> Any:
        """What the store holds: documents, sentences, embedder, analyzer and every metadata key with the
        types seen, how many documents have it and its common values (:class:`nlql.schema.Schema`).

        The built-in store keeps the counts at write time (exact, no scan); a store declaring
        ``DESCRIBES_DATA`` answers from at most ``sample`` documents and says so (``schema.sampled``);
        any other store is sampled through the Store API.
        """
        from nlql.schema import build_schema

        with self._lock.read():
            try:
                return build_schema(self.store, self.embedder, self._bm25.analyzer, int(sample))
            except NLQLError:
                raise
            except Exception as exc:
                raise BackendError(self.store.capabilities.NAME, f"schema failed: {exc}") from exc

    def _data_warnings(self, q: ir.Query, fresh_ok: bool = True) -> list[Diagnostic]:
        """Warnings from the data for a valid query; never raises (a schema that cannot be read warns nothing).

        ``fresh_ok=False`` (the search's deadline has passed): no store call to read a new schema; the
        warnings come from the cached one, or there are none.

        A cached plan brings the same query object back: whether it reads metadata, and its warnings
        against the schema they came from, are kept for it (``_warn_memo``, by identity) so a search
        with a cached plan does not walk its query again.
        """
        memo = self._warn_memo.get(id(q))
        if memo is None or memo[0] is not q:
            if len(self._warn_memo) >= 1024:
                self._warn_memo.clear()
            memo = [q, any(isinstance(n, ir.Meta) for n in q.walk()), None]
            self._warn_memo[id(q)] = memo
        if not memo[1]:
            return []
        now = time.monotonic()
        cached = self._schema_cache
        # kept until this engine writes, and at most 5 s (another process may write a shared store)
        if cached is None or cached[0] != self._writes or now - cached[1] > 5.0:
            if not fresh_ok:
                return []
            try:
                from nlql.schema import build_schema

                cached = (self._writes, now, build_schema(self.store, self.embedder, self._bm25.analyzer, 200))
            except Exception:  # noqa: BLE001 - warnings are advice: never fail a query over them
                return []
            self._schema_cache = cached
        got = memo[2]  # (the schema entry, its warnings): one object, so threads read a matching pair
        if got is not None and got[0] is cached:
            return list(got[1]) if got[1] else []
        from nlql.schema import data_warnings

        found = data_warnings(q, cached[2])
        memo[2] = (cached, found)
        return list(found)

    def _frame(self, plan: Any, rr: Any) -> Any:
        """What ``hits.frame`` holds: a function giving the table layout of ``plan``'s hits from the query and
        the store's schema (:func:`nlql.execute.frames.layout`), run when a table is first asked for."""
        def made() -> Any:
            from nlql.execute.frames import layout

            now = time.monotonic()
            cached = self._schema_cache  # the one the data warnings read (kept until a write, at most 5 s)
            schema = None
            if cached is not None and cached[0] == self._writes and now - cached[1] <= 5.0:
                schema = cached[2]
            else:
                try:
                    from nlql.schema import build_schema

                    with self._lock.read():
                        schema = build_schema(self.store, self.embedder, self._bm25.analyzer, 200)
                    self._schema_cache = (self._writes, now, schema)
                except Exception:  # noqa: BLE001 - without a schema the metadata columns come from the rows
                    schema = None
            return layout(plan, schema, self._functions, rerank=rr is not None)
        return made

    def _prepare(self, query: str | ir.Query, params: Mapping[str, Any] | None) -> tuple[Any, str | None]:
        from nlql.check import check_query

        source = query if isinstance(query, str) else None
        return check_query(query, params=params or {}, functions=self._arity), source

    def _plan(self, query: str | ir.Query, params: Mapping[str, Any] | None, reranker: Any = None) -> Any:
        return self._planned(query, params, reranker)[0]

    def _planned(self, query: str | ir.Query, params: Mapping[str, Any] | None,
                 reranker: Any = None, fresh: bool = True) -> tuple[Any, str]:
        """(the plan, whether the plan cache had it: ``hit``, ``miss`` or ``off``).

        ``fresh`` False (a search that runs the plan and hands it to nobody): a cached plan that reads
        neither the clock nor GRAPH is returned itself, its ``now`` the instant it was planned (nothing
        that runs it reads ``now``: its compiled expressions are shared), instead of a copy stamped now."""
        try:
            return self._plan_cached(query, _params(params), reranker, fresh)
        except RecursionError as exc:  # a hand-built IR, a long LET chain or a caller deep in its stack
            raise _too_deep(exc) from None

    def _plan_key(self, query: str | ir.Query, params: Mapping[str, Any] | None, rr: Any) -> Any:
        """Everything planning reads besides the clock (nlql/plan/cache.py), or None: not cacheable."""
        if not self._plans.size or not isinstance(query, (str, ir.Query)):
            return None
        try:
            pk = params_key(params) if params else ()
        except Unkeyable:
            return None
        static = self._key_static
        caps, analyzer = self.store.capabilities, self._bm25.analyzer
        if (static is None or static[0] is not caps or static[1] is not analyzer
                or static[2] != self.rerank_factor or static[3] != self.limit_ceiling):
            static = self._key_static = self._static_key(caps, analyzer)
        return (query, pk, static[4], self._writes, self._functions_version,
                type(rr).__name__ if rr is not None else None)

    def _static_key(self, caps: Any, analyzer: Any) -> tuple[Any, ...]:
        """What the plan key holds of what seldom changes (the store's capabilities, the BM25 analyzer,
        ``rerank_factor`` and ``limit_ceiling``) as one int, so a plan key is hashed and compared in C (a
        frozen dataclass and the analyzer hashed in Python at every lookup before): one int per distinct
        set of values, looked up by value only when one of them changes (set back, the old plans serve)."""
        try:
            hash(analyzer)
            held = analyzer
        except TypeError:
            held = _Same(analyzer)  # (by identity; the key holds the object, so its id stays its own)
        values = (caps, held, self.rerank_factor, self.limit_ceiling)
        token = self._static_tokens.setdefault(values, len(self._static_tokens))
        return (caps, analyzer, self.rerank_factor, self.limit_ceiling, token)

    def _plan_cached(self, query: str | ir.Query, params: Mapping[str, Any] | None,
                     reranker: Any, fresh: bool = True) -> tuple[Any, str]:
        rr = reranker if reranker is not None else self.reranker
        key = self._plan_key(query, params, rr)
        now = None
        if key is not None:
            entry = self._plans.get(key)
            if entry is not None and entry is not _CLOCKED and not fresh and not entry.graphs:
                return entry, "hit"  # (see _planned: no clock read, no copy)
            now = self._now()
            if entry is _CLOCKED:  # planned against the clock: reused only at the very same instant
                entry = self._plans.get((key, repr(now)))
                if entry is not None:
                    return entry, "hit"
            elif entry is not None:  # the plan reads no clock: only its record of the time changes
                # copy.copy's own steps for a plain dataclass (a new object, the same attribute dict
                # copied), without its protocol lookups: what the executor prepared from it is shared
                plan = object.__new__(type(entry))
                plan.__dict__.update(entry.__dict__)  # (the copy's construction: its identity is the entry's)
                object.__setattr__(plan, "now", now)
                return plan, "hit"
        if now is None:
            now = self._now()
        plan = self._plan_unguarded(query, params, rr, now)
        if key is None:
            return plan, "off"
        from nlql.plan.cache import reads_clock

        if reads_clock(plan.query):
            self._plans.put(key, _CLOCKED)
            self._plans.put((key, repr(now)), plan)
        else:
            self._plans.put(key, plan)
        return plan, "miss"

    def _plan_unguarded(self, query: str | ir.Query, params: Mapping[str, Any] | None, rr: Any,
                        now: datetime) -> Any:
        q, source = self._prepare(query, params)
        rerank = None
        if rr is not None:
            rerank = {"reranker": type(rr).__name__, "factor": self.rerank_factor,
                      "score": "scores['rerank']"}
        try:
            return build_plan(q, params=params, store=self.store, now=now,
                              functions=self._functions, rerank=rerank, rerank_factor=self.rerank_factor,
                              limit_ceiling=self.limit_ceiling, analyzer=self._bm25.analyzer)
        except NLQLError as exc:
            if source is not None:
                exc.with_source(source)
            raise

    def _now(self) -> datetime:
        now = self.clock()
        return now if now.tzinfo else now.replace(tzinfo=timezone.utc)

    def explain(self, query: str | ir.Query | Route, params: Mapping[str, Any] | None = None) -> Explain:
        """The plan, before anything runs: ``str()`` is a text tree, ``to_dict()`` the fields of SPEC §7.

        Of a :class:`~nlql.route.Route` (``engine.route(question)``): the intent, the rule that matched,
        the bound parameters, then the plan of the routed query (a :class:`~nlql.route.RouteExplain`).
        """
        if isinstance(query, Route):
            return self._explain_route(query, params)
        self._sync()
        from nlql.sql import explain_sql

        with self._lock.read():
            plan = self._plan(query, params)
            graphs = {key: self._graph.activate(*key) for key in dict.fromkeys(plan.graphs.values())}
        return Explain(plan, sql=explain_sql(plan, self.store), graphs=graphs)

    def search(
        self,
        query: str | ir.Query,
        params: Mapping[str, Any] | None = None,
        reranker: Any = None,
        rerank_query: str | None = None,
        timeout: float | None = None,
        max_tokens: int | None = None,
        cursor: str | None = None,
    ) -> Hits:
        """Run a query. Returns :class:`~nlql.execute.results.Hits` (a list of hits with stats, warnings).

        ``cursor``: a ``hits.cursor`` of an earlier page of the same query; the next LIMIT rows after
        that page's last row, in the same order (SPEC §11, :mod:`nlql.execute.cursor`).

        ``timeout`` (default ``Engine(default_timeout=…)``) is one deadline for the whole search; stores
        that declare ``Capabilities.DEADLINE`` bound their calls by the time left. At the deadline the
        search returns what is complete, with a warning, or raises :class:`~nlql.errors.NLQLTimeoutError`.

        Raises:
            NLQLError: Anything wrong with the query or its parameter values, a store failure
                (:class:`~nlql.errors.BackendError`) or a timeout with no result yet.
            TypeError, ValueError: A programming error in the arguments themselves (a query that is not a
                string or Query, params that are not a mapping, a non-numeric ``timeout``, …).
        """
        timeout = _check_run_args(timeout, max_tokens)
        _check_reranker(reranker)
        if timeout is None:
            timeout = self.default_timeout
        source = query if isinstance(query, str) else None
        rr = reranker if reranker is not None else self.reranker
        deadline = Deadline(timeout)  # from the call on: a slow sync with the store spends the budget too
        self._sync()
        with self._lock.read():
            t = time.perf_counter()
            plan, cached = self._planned(query, params, rr, fresh=False)
            plan_s = time.perf_counter() - t
            plan_ms = plan_s * 1000
            if deadline.end is not None:  # the engine's own parse and plan (a first query builds the
                deadline.end += plan_s    # grammar) is not the budget's: it bounds the store and embedder
            if deadline.end is None and not in_deadline_scope():  # (no scope to enter: none would be set)
                return self._search_planned(plan, cached, plan_ms, rr, rerank_query, deadline, max_tokens,
                                            source, cursor)
            with deadline_scope(deadline.remaining()):
                return self._search_planned(plan, cached, plan_ms, rr, rerank_query, deadline, max_tokens,
                                            source, cursor)

    def _search_planned(self, plan: Any, cached: str, plan_ms: float, rr: Any, rerank_query: str | None,
                        deadline: Deadline, max_tokens: int | None, source: str | None,
                        cursor: str | None = None) -> Hits:
        """The rest of :meth:`search`, under the read lock, once the plan is made; what it raises is
        :meth:`_search_errors`' (written out here: a context manager's calls and objects at every search)."""
        try:
            if cursor is not None:
                hits = self._cursor_page(plan, cursor, rr, deadline.remaining(), max_tokens)
            else:
                hits = self._executor.run(plan, reranker=rr, rerank_query=rerank_query,
                                          rerank_factor=self.rerank_factor, timeout=deadline.timeout,
                                          max_tokens=max_tokens, deadline=deadline, page=self._paging(plan))
                self._offer_cursor(hits, plan)
            hits.frame = self._frame(plan, rr)
            found = self._data_warnings(plan.query, fresh_ok=not deadline.expired())
            if found:
                from nlql.schema import warning_text

                hits.warnings[:0] = [warning_text(d) for d in found]
            hits.stats.setdefault("timings_ms", {})["plan"] = round(plan_ms, 3)
            hits.stats["plan_cache"] = cached
            return hits
        except NLQLError as exc:
            if source is not None:
                exc.with_source(source)
            raise
        except (RecursionError, MemoryError) as exc:
            raise _too_deep(exc) from None
        except Exception as exc:
            raise BackendError(self.store.capabilities.NAME, f"search failed: {exc}") from exc

    def _search_errors(self, source: str | None) -> _SearchErrors:
        """What a search raises: an NLQLError with the query text as its source; a query too deep to
        run as an NLQLError; anything else from the store as a BackendError."""
        return _SearchErrors(self, source)

    # ------------------------------------------------------------------------------------- cursors

    def _paging(self, plan: Any) -> Any:
        """A first page's paging (the identities are filled when the cursor is read); one frozen object
        per (LIMIT, OFFSET), made once."""
        return _first_paging(plan.limit, plan.offset)

    def _offer_cursor(self, hits: Hits, plan: Any) -> None:
        """Make ``hits.cursor`` readable: encoded when first read (no cost for a search that never reads it);
        where the page ended exactly at the rows recall read, one more row is looked for then."""
        end = hits.page_end
        if end is None or not end.placed or end.more is False:
            return
        vectors = hits.query_vectors  # (not ``hits`` itself: the probe held by hits would make a cycle,
        # and every search's hits, rows and plan would wait for the garbage collector instead of going)

        def made() -> str | None:
            from nlql.execute import cursor as C

            with self._lock.read():
                pos = dataclasses.replace(end.position, ident=C.query_identity(plan.query),
                                          store=C.store_identity(self.store), max_seq=int(self.store.max_seq()))
                if end.more is None and _every_row_matches(plan):  # the rows are the store's sentences
                    if int(self.store.count()) <= len(pos.passed):
                        return None
                elif end.more is None:  # is there a row after it? (a one-row cursor page, same vectors)
                    probe = self._cursor_rows(plan, pos, 1, None, None, None, vectors)
                    if not probe:
                        return None
            return C.encode(pos)
        hits._cursor_probe = made

    def _cursor_page(self, plan: Any, text: str, rr: Any, timeout: float | None, max_tokens: int | None) -> Hits:
        from nlql.errors import CursorError
        from nlql.execute import cursor as C

        pos = C.decode(text)
        if getattr(plan.query, "count", None) is not None:
            raise CursorError("a COUNT query has no pages to continue", hint="search the COUNT query without a cursor")
        if plan.query.offset is not None:
            raise CursorError("OFFSET cannot be used with a cursor", plan.query.offset.span,
                              hint="leave OFFSET out: the cursor says where the next page starts")
        if rr is not None:
            raise CursorError("a cursor cannot continue a reranked query (the reranker orders each page's "
                              "rows among themselves)", hint="search without a reranker to page with a cursor")
        if C.query_identity(plan.query) != pos.ident:
            raise CursorError("the cursor was made by another query (a cursor continues the query text and "
                              "parameters of its first page; only LIMIT may change)",
                              hint="pass it with the query that returned it")
        if C.store_identity(self.store) != pos.store:
            raise CursorError("the cursor was made on another store, or before this store's data was dropped",
                              hint="start again without a cursor")
        return self._cursor_rows(plan, pos, plan.limit, timeout, max_tokens, text)

    def _cursor_rows(self, plan: Any, pos: Any, size: int | None, timeout: float | None,
                     max_tokens: int | None, text: str | None, vectors: Any = None) -> Hits:
        """The page of ``size`` rows after ``pos``: the query with LIMIT = rows passed + size + 1, widened
        ×4 while the rows after the cursor were cut short by that LIMIT (``text``: None for a probe)."""
        from nlql.execute import cursor as C

        paging = C.Paging(pos.ident, pos.store, int(self.store.max_seq()), pos.depth, size, pos)
        want = None if size is None else len(pos.passed) + size + 1
        rounds = 0
        while True:
            rounds += 1
            if want is not None:
                want = min(want, self.limit_ceiling)
            pinned = C.pinned_query(plan.query, want, pos.depth)
            page_plan = self._planned(pinned, None, None)[0]
            hits = self._executor.run(page_plan, rerank_factor=self.rerank_factor, timeout=timeout,
                                      max_tokens=max_tokens, page=paging, vectors=vectors)
            end = hits.page_end
            if end is None:
                return hits
            if end.more is not None or want is None or want >= self.limit_ceiling:
                break
            want *= 4
        hits.stats["cursor"] = {"rows_read": want, "rounds": rounds}
        hits.cursor = C.encode(end.position) if end.position is not None and end.more is not False else None
        return hits

    def search_many(self, query: str | ir.Query, params_list: Sequence[Mapping[str, Any] | None],
                    reranker: Any = None, rerank_query: str | None = None, timeout: float | None = None,
                    max_tokens: int | None = None) -> list[Hits]:
        """One query text with many parameter sets: a list of :class:`~nlql.execute.results.Hits` in the
        order of ``params_list``, each what :meth:`search` gives for that set (SPEC §11).

        Sets that differ only in strings given as SIMILARITY's text (``SIMILARITY(content, $q)``) are
        planned once: the plan of the first is checked against a template planned with placeholders,
        and the others get the template with their text bound (``hits.stats["plan_cache"]`` says
        ``rebound``). Every SIMILARITY text of every set is embedded in one embedder call, and recall's
        first knn round of the sets that share a store call (the same filter and k) is one ``knn`` call
        with all their query vectors (the built-in store scores them with one matrix product).
        ``timeout`` is one deadline for the whole call.

        Raises:
            NLQLError: As :meth:`search`, for the first parameter set that fails (its index in the hint).
        """
        from nlql.execute.batch import run_many

        timeout = _check_run_args(timeout, max_tokens)
        _check_reranker(reranker)
        if isinstance(params_list, (str, bytes, Mapping)) or not isinstance(params_list, Sequence):
            raise TypeError("params_list must be a sequence of parameter mappings (or None)")
        if timeout is None:
            timeout = self.default_timeout
        source = query if isinstance(query, str) else None
        rr = reranker if reranker is not None else self.reranker
        self._sync()
        with self._lock.read(), deadline_scope(timeout):
            plans, warned = self._planned_many(query, params_list, rr)
            with self._search_errors(source):
                out = run_many(self, plans, rr, rerank_query, timeout, max_tokens)
            for (plan, _), hits, found in zip(plans, out, warned, strict=True):
                if found is None:
                    found = self._data_warnings(plan.query)
                if found:
                    from nlql.schema import warning_text

                    hits.warnings[:0] = [warning_text(d) for d in found]
                if rr is None:
                    self._offer_cursor(hits, plan)
                hits.frame = self._frame(plan, rr)
            return out

    def _planned_many(self, query: str | ir.Query, params_list: Sequence[Mapping[str, Any] | None],
                      rr: Any) -> tuple[list[tuple[Any, str]], list[list[Diagnostic] | None]]:
        """The plan of each parameter set (and whether the plan cache had it), and the data warnings of
        the sets planned from a template (None: the caller asks for them).

        The sets that differ only in strings given as SIMILARITY's text (``SIMILARITY(content, $q)``)
        share one plan, planned once with placeholders and bound per set (:mod:`nlql.plan.rebind`,
        ``plan_cache: "rebound"``); the first set of each such group is planned as :meth:`search` plans
        it and must equal the template bound to it, or every set is planned alone.
        """
        from nlql.plan.rebind import PLACEHOLDER

        plans: list[tuple[Any, str] | None] = [None] * len(params_list)
        warned: list[list[Diagnostic] | None] = [None] * len(params_list)
        names, literals = self._text_params(query) if len(params_list) > 1 else (frozenset(), frozenset())
        groups: dict[Any, list[tuple[int, dict[str, Any], dict[str, str]]]] = {}
        for i, params in enumerate(params_list):
            try:
                p = _params(params) or {}
            except TypeError:
                continue  # (planned alone: search's own error)
            texts: dict[str, str] = {}
            rest = dict(p)
            for name in names:
                key = name if name in p else f"${name}"
                value = p.get(key)
                if not isinstance(value, str) or value in literals or PLACEHOLDER in value.lower():
                    break
                texts[name] = value
                del rest[key]
            else:
                if texts:
                    try:
                        groups.setdefault(params_key(rest), []).append((i, rest, texts))
                    except Unkeyable:
                        pass
        now = self._now()
        for members in groups.values():
            if len(members) < 2:
                continue
            binder = self._rebinder(query, members[0][1], frozenset(members[0][2]), rr)
            if binder is None:
                continue
            first, _, texts = members[0]
            try:
                real = self._planned(query, params_list[first], rr)
            except NLQLError:
                continue  # raised below, in order
            if binder.verified is None:
                binder.verified = binder.bind(texts, now=real[0].now) == real[0]
            if not binder.verified:
                continue
            plans[first] = real
            found = warned[first] = self._data_warnings(real[0].query)
            for i, _, texts in members[1:]:
                plans[i] = (binder.bind(texts, now=now), "rebound")
                warned[i] = found
        out = []
        for i, params in enumerate(params_list):
            got = plans[i]
            if got is None:
                try:
                    got = self._planned(query, params, rr)
                except NLQLError as exc:
                    exc.hint = f"params_list[{i}]" + (f"; {exc.hint}" if exc.hint else "")
                    raise
            out.append(got)
        return out, warned

    def _text_params(self, query: str | ir.Query) -> tuple[frozenset[str], frozenset[str]]:
        """The parameters ``query`` takes only as SIMILARITY's text and its string literals
        (:func:`nlql.plan.rebind.text_params`; none when it does not parse)."""
        from nlql.plan.rebind import text_params

        try:
            q = query if isinstance(query, ir.Query) else parse_query(query)
            return text_params(q)
        except (NLQLError, RecursionError):
            return frozenset(), frozenset()

    def _rebinder(self, query: str | ir.Query, rest: Mapping[str, Any], names: frozenset[str], rr: Any) -> Any:
        """The :class:`~nlql.plan.rebind.Rebinder` of ``query`` with these other parameters, kept with its
        template plan (the plan cache holds the template); None when it cannot be made."""
        from nlql.plan.cache import reads_clock
        from nlql.plan.rebind import NotRebindable, Rebinder, placeholder

        params = {**rest, **{name: placeholder(name) for name in names}}
        try:
            template = self._planned(query, params, rr)[0]
        except NLQLError:
            return None
        got = self._rebinders.get(template.identity)
        if got is not None and got.names == tuple(sorted(names)):
            return got
        if template.lowered is not None or reads_clock(template.query):
            return None
        try:
            got = Rebinder(template, names)
        except NotRebindable:
            return None
        self._rebinders[template.identity] = got
        return got

    async def asearch(self, query: str | ir.Query, params: Mapping[str, Any] | None = None,
                      **kwargs: Any) -> Hits:
        """:meth:`search` in a worker thread, so the event loop keeps running."""
        return await asyncio.to_thread(self.search, query, params, **kwargs)

    # ------------------------------------------------------------------------------------- routing

    def route(self, question: str, router: Router | None = None) -> Route:
        """The intent of a natural-language question and the NLQL query that answers it (SPEC §9).

        ``router=None`` means the engine's own (``Engine(router=…)``), else the default router.
        Nothing runs: ``engine.search(route.query, params=route.params)`` is what :meth:`ask` runs.
        """
        chosen = router if router is not None else self.router if self.router is not None else default_router()
        if not callable(getattr(chosen, "route", None)):
            raise TypeError(f"router must be an nlql.Router, not {type(chosen).__name__}")
        return chosen.route(question)

    def ask(self, question: str | Route, router: Router | None = None, params: Mapping[str, Any] | None = None,
            timeout: float | None = None, *, max_tokens: int | None = None) -> Hits:
        """Answer a question: route it (:meth:`route`), then search with the routed query.

        ``params`` binds the template's own parameters beyond ``$q``/``$rewrites``/``$keywords``; one the
        routed template does not use is left out, with a warning. ``timeout`` covers the rewriter and the
        search. The hits carry ``hits.route``; ``hits.warnings`` says when the rewriter failed and when
        the store holds nothing about the question (no rows: an honest empty, never a guess). A
        :class:`~nlql.route.Route` already made by :meth:`route` runs as it is (no second rewrite).

        Raises:
            NLQLError: As :meth:`search`; a :class:`~nlql.errors.RouteError` for an empty question or a
                parameter the router binds itself.
        """
        _check_run_args(timeout, max_tokens)
        started = time.monotonic()
        routed = question if isinstance(question, Route) else self.route(question, router)
        question = routed.question
        route = self._bind_route(routed, params)
        if timeout is not None:
            timeout = max(0.0, timeout - (time.monotonic() - started))
        hits = self.search(route.query, params=route.params, timeout=timeout, max_tokens=max_tokens)
        hits.route = route
        hits.warnings[:0] = list(route.warnings)
        if hits and not any(answers(route, h) for h in hits):
            hits.clear()  # no row holds a keyword, is close enough or is ranked by the intent's arm
        hits.warnings.extend(route_notes(route, hits))
        if not hits:
            hits.warnings.append(f"{nothing_about(question)} (intent {route.intent}: the routed query "
                                 "returned no rows)")
        return hits

    def _bind_route(self, route: Route, params: Mapping[str, Any] | None) -> Route:
        """``route`` with the caller's ``params`` added (those its template uses)."""
        extra = _params(params)
        if not extra:
            return route
        clash = sorted(k.lstrip("$") for k in extra if k.lstrip("$") in RESERVED_PARAMS)
        if clash:
            raise RouteError(f"parameter ${clash[0]} is bound by the router from the question",
                             hint="pass only the template's own parameters in params")
        uses = {n.name for n in parse_query(route.query).walk() if isinstance(n, ir.Param)}
        bound = dict(route.params)
        warnings = list(route.warnings)
        for k, v in extra.items():
            name = k.lstrip("$")
            if name in uses:
                bound[name] = v
            else:
                warnings.append(f"parameter ${name} is not used by the {route.intent!r} template; left out")
        return dataclasses.replace(route, params=bound, warnings=tuple(warnings))

    def _explain_route(self, route: Route, params: Mapping[str, Any] | None) -> RouteExplain:
        route = self._bind_route(route, params)
        return RouteExplain(route, self.explain(route.query, route.params))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _every_row_matches(plan: Any) -> bool:
    """Whether every stored sentence is a row of ``plan`` (no filter, threshold or grouping): then the
    store's count says whether rows follow a page, without reading them."""
    return (plan.native is None and plan.pushed is None and not plan.residual and not plan.fusion_residual
            and not plan.recall.min_score and plan.distinct is None and not plan.fusions
            and plan.unit.kind in ("SENTENCE", "SPAN") and plan.unit.rows_are_sentences)


def _check_run_args(timeout: Any, max_tokens: Any) -> float | None:
    """The validated timeout (None: no deadline; beyond 10^9 s, or infinite, is no deadline)."""
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(f"timeout must be a number of seconds or None, not {type(timeout).__name__}")
        if isinstance(timeout, float) and math.isnan(timeout):
            raise ValueError("timeout must be a number of seconds, not NaN")
        if timeout < 0:
            raise ValueError(f"timeout must be 0 or more seconds, not {timeout}")
        timeout = None if timeout > _NO_DEADLINE else float(timeout)
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise TypeError(f"max_tokens must be an int or None, not {type(max_tokens).__name__}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be 1 or more, not {max_tokens}")
    return timeout


#: A timeout above this many seconds (about 31 years) is no deadline at all.
_NO_DEADLINE = 1e9


def _check_reranker(reranker: Any) -> None:
    if reranker is not None and not callable(getattr(reranker, "score", None)):
        raise TypeError(f"a reranker needs a score(query, passages) method; {type(reranker).__name__} has none")


def _embedder_dim(embedder: Any) -> int:
    dim = getattr(embedder, "dim", None)
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or int(dim) < 1:
        raise TypeError(f"an embedder needs a positive int dim; {type(embedder).__name__} has dim={dim!r}")
    if not callable(getattr(embedder, "embed", None)):
        raise TypeError(f"an embedder needs an embed(texts) method; {type(embedder).__name__} has none")
    return int(dim)


def _embed(embedder: Any, texts: list[str], dim: int, finite_checked: bool = True) -> np.ndarray:
    """``embedder.embed(texts)`` as a float32 matrix, checked: one finite vector of width ``dim`` per text.

    Raises:
        EmbedderError: It raised, or returned anything else (a wrong shape or width, one row for
            many texts, a 3-d array, non-numbers, NaN or infinity), named with what it returned.
    """
    name = type(embedder).__name__
    try:
        raw = embedder.embed(texts)
    except NLQLError:
        raise
    except Exception as exc:  # noqa: BLE001 - any embedder failure, named
        raise EmbedderError(name, f"embed() failed: {type(exc).__name__}: {exc}") from exc
    try:
        arr = np.asarray(raw)
    except Exception as exc:  # noqa: BLE001 - ragged lists and the like
        raise EmbedderError(name, f"embed() returned {type(raw).__name__} that is not an array ({exc}); "
                            f"expected {_wanted(texts, dim)}") from exc
    if arr.dtype.kind not in "fiu":
        raise EmbedderError(name, f"embed() returned an array of {arr.dtype} for {len(texts)} texts; "
                            f"expected {_wanted(texts, dim)}")
    if arr.ndim != 2 or arr.shape != (len(texts), dim):
        raise EmbedderError(name, f"embed() returned shape {arr.shape} for {len(texts)} texts; "
                            f"expected {_wanted(texts, dim)}",
                            hint=f"its dim says {dim}" if arr.ndim == 2 and arr.shape[0] == len(texts) else None)
    mat = arr.astype(np.float32, copy=False)
    if finite_checked:
        _embed_check_finite(embedder, texts, mat, dim)
    return mat


def _wanted(texts: list[str], dim: int) -> str:
    """What an embedder must return, as its errors say it (made only for an error)."""
    return f"a {len(texts)} × {dim} array of finite numbers (one vector per text)"


def _embed_check_finite(embedder: Any, texts: list[str], mat: np.ndarray, dim: int) -> None:
    if not _all_finite(mat):
        bad = np.flatnonzero(~np.isfinite(mat).all(axis=1))
        raise EmbedderError(type(embedder).__name__,
                            f"embed() returned NaN or infinity in {len(bad)} of {len(texts)} vectors "
                            f"(first for {texts[int(bad[0])][:60]!r}); expected a {len(texts)} × {dim} array "
                            "of finite numbers (one vector per text)")


def _unit_rows(mat: np.ndarray) -> np.ndarray | None:
    """``V.normalize_rows(mat, zero_invalid=True)`` bit for bit (the same squares, sums and division) in
    fewer passes and allocations, for a float32 matrix; None when a row's norm is not finite (a NaN or
    an infinity in it, or squares too large for float32), which the caller checks and handles."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # (then None: the caller's checks speak)
        sq = np.multiply(mat, mat)
        norms = np.sqrt(np.add.reduce(sq, axis=1, keepdims=True))
    if not np.isfinite(norms).all():
        return None
    zero = norms[:, 0] == 0
    if zero.any() and np.any(mat[zero] != 0):  # squares that underflow: normalize_rows widens them
        return None
    with np.errstate(invalid="ignore"):  # 0 / 0 in a zero row, set to 0 below
        out = np.divide(mat, norms, out=sq)
    if zero.any():  # a zero row is zero, as normalize_rows makes it
        out[zero] = 0
    return out


def _all_finite(mat: np.ndarray) -> bool:
    """``np.isfinite(mat).all()``; for one vector (a query) through its dot product with itself first:
    a NaN or an infinity makes it NaN or infinite, so a finite one proves every value finite (a huge
    finite vector can overflow it: the exact test then decides)."""
    if mat.shape[0] == 1:
        row = mat[0]
        with np.errstate(over="ignore", invalid="ignore"):
            finite = math.isfinite(float(row.dot(row)))
        if finite:
            return True
    return bool(np.isfinite(mat).all())


def doc_id_of(doc_id: Any) -> str:
    """A document id as stored: a string as is, an int as its decimal text (``5`` → ``"5"``).

    Raises:
        TypeError: Anything else (bytes, floats, None, objects): ``str()`` of those is no id.
    """
    if isinstance(doc_id, str):
        return doc_id
    if isinstance(doc_id, (int, np.integer)) and not isinstance(doc_id, bool):
        return str(int(doc_id))
    raise TypeError(f"a document id must be a str or an int, not {type(doc_id).__name__} ({doc_id!r:.40})")


def _check_texts(texts: Any) -> list[str]:
    if isinstance(texts, (str, bytes, bytearray)):
        raise TypeError("texts must be a sequence of strings, not a single "
                        f"{type(texts).__name__} (add_texts([text]) or add_text(text))")
    if isinstance(texts, Mapping) or not isinstance(texts, Iterable):
        raise TypeError(f"texts must be a sequence of strings, not {type(texts).__name__}")
    out = list(texts)
    if not _STR_ONLY.issuperset(map(type, out)):
        for t in out:
            if not isinstance(t, str):
                raise TypeError(f"texts must be strings, not {type(t).__name__}")
    return out


def _distinct(ids: list[str]) -> bool:
    """``len(set(ids)) == len(ids)``, from the ids' hashes sorted (a set of a million strings cost more
    per id than at 100k, cache misses; issue 21's ingest): distinct hashes are distinct ids, and
    equal ones (a repeated id, or a collision) are decided by the set."""
    hashes = np.fromiter(map(hash, ids), dtype=np.int64, count=len(ids))
    hashes.sort()
    if bool((hashes[1:] != hashes[:-1]).all()):
        return True
    return len(set(ids)) == len(ids)


def _check_sequence(values: Any, name: str, n: int) -> list[Any] | None:
    if values is None:
        return None
    if isinstance(values, (str, bytes, bytearray, Mapping)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence with one entry per text, not {type(values).__name__}")
    out = list(values)
    if len(out) != n:
        raise ValueError(f"{name} must have one entry per text ({len(out)} for {n} texts)")
    if name == "ids" and not _STR_ONLY.issuperset(map(type, out)):
        for i in out:
            if i is not None:
                doc_id_of(i)
    return out


class _WriteFailed(Exception):
    """A write that :class:`_WriteAhead` ran in its thread failed: ``error``, in batch ``index`` of the call."""

    def __init__(self, error: BaseException, index: int) -> None:
        super().__init__(error)
        self.error, self.index = error, index


class _WriteAhead:
    """An ``add_texts`` call written a batch behind, for a store that declares ``WRITES_AHEAD``
    (:class:`~nlql.stores.base.WritesAhead`): the caller's thread splits and embeds batch b+1, numbers its
    documents after batch b's, finds its entity names and has the store prepare its rows while a thread
    of the call's own writes batch b (a DuckDB statement runs without the GIL). Each batch is still one
    atomic write, written in order, and the next batch's write starts only after the last one ended;
    the call holds the engine's write mutex from its first batch to its last, so nothing else writes
    between them (the numbering needs no ``max_seq`` but the first). ``close`` waits for a write still
    under way: no write of the call runs after it returns or raises."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._store = cast(WritesAhead, engine.store)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="nlql-write")
        self._pending: tuple[Any, int, list[str]] | None = None
        self._next_seq: int | None = None
        engine._write_mutex.acquire()
        self._held = True
        _quick_switches(True)

    def write(self, batch: DocBatch, index: int, ids: list[str]) -> list[str]:
        """Prepare batch ``index`` (its documents ``ids``) here, wait for the write before it and start its
        own; the ids of the batch whose write ended (none for the first).

        Raises:
            _WriteFailed: the write before it failed (nothing of this batch is written).
        """
        e = self._engine
        if self._next_seq is None:
            with e._lock.write():
                self._next_seq = e.store.max_seq() + 1
        batch.assign_seq(self._next_seq)
        self._next_seq += len(batch)
        e._graph.extract(batch)
        prepared = e._call_store("upsert", self._store.prepare_write, batch)
        done = self.wait()
        future = self._pool.submit(contextvars.copy_context().run, self._commit, batch, prepared)
        self._pending = (future, index, ids)
        return done

    def _commit(self, batch: DocBatch, prepared: Any) -> None:
        """One batch's write, in the call's thread, under the engine's lock (searches see the batch whole
        or not at all)."""
        e = self._engine
        with e._lock.write():
            e._apply_write(batch, self._store.write_prepared, prepared)

    def wait(self) -> list[str]:
        """Wait for the write under way, if any: the ids it committed.

        Raises:
            _WriteFailed: it failed.
        """
        pending, self._pending = self._pending, None
        if pending is None:
            return []
        future, index, ids = pending
        try:
            future.result()
        except Exception as exc:  # noqa: BLE001 - handed to the caller with its batch
            raise _WriteFailed(exc, index) from exc
        return ids

    def close(self) -> None:
        """Wait for a write still under way (its outcome is the caller's already: an error it raised is
        being handled), then let the thread and the write mutex go."""
        try:
            if self._pending is not None:
                self._pending[0].exception()
        finally:
            self._pool.shutdown(wait=True)
            if self._held:
                self._held = False
                _quick_switches(False)
                self._engine._write_mutex.release()


# While a call writes ahead, the interpreter hands the GIL over after 0.5 ms instead of its default 5 ms:
# the writing thread needs the GIL back at the end of every statement (a dozen per batch) while the
# caller's thread runs Python, and waited up to the switch interval each time. At 100k sentences
# (bench/duckdb_ingest_before_after.py's corpus, batches of 8,192, four alternations, load 0.8-1.0) the
# call took 0.79x the time of writing batch after batch with 0.5 ms, 0.80x with 2 ms, 0.87x with 5 ms.
# (The setting is the process's: the first call writing ahead sets it, the last to end puts it back.)
_SWITCH_INTERVAL = 0.0005
_switch_lock = threading.Lock()
_switch_users = 0
_switch_before = 0.0


def _quick_switches(on: bool) -> None:
    """Count a call writing ahead in (``on``) or out; the interval is :data:`_SWITCH_INTERVAL` while any runs."""
    global _switch_users, _switch_before
    with _switch_lock:
        if on:
            if not _switch_users:
                _switch_before = sys.getswitchinterval()
                sys.setswitchinterval(min(_switch_before, _SWITCH_INTERVAL))
            _switch_users += 1
        else:
            _switch_users -= 1
            if not _switch_users:
                sys.setswitchinterval(_switch_before)


def _batch_failed(exc: NLQLError | _WriteFailed, index: int, ahead: _WriteAhead | None, committed: list[str],
                  n_batches: int) -> BaseException:
    """The error an ``add_texts`` call raises when batch ``index`` (or, written ahead, the batch before it)
    failed: the first failed batch's, naming the batches committed before it (``committed``, extended by
    a write still under way that succeeds)."""
    if isinstance(exc, _WriteFailed):
        error, index = exc.error, exc.index
    else:
        error = exc
        if ahead is not None:  # the batch before this one may still be being written: its outcome first
            try:
                committed.extend(ahead.wait())
            except _WriteFailed as earlier:
                error, index = earlier.error, earlier.index
    if committed and isinstance(error, NLQLError):
        _name_committed(error, committed, index, n_batches)
    return error


def _name_committed(exc: NLQLError, committed: list[str], batch: int, n_batches: int) -> None:
    """Say in ``exc`` which batches of an add_texts call were committed before it failed."""
    ids = ", ".join(repr(i) for i in committed[:3]) + (f", … {committed[-1]!r}" if len(committed) > 3 else "")
    exc.message = (f"{exc.message} (in batch {batch + 1} of {n_batches}; batches 1–{batch}, {len(committed)} "
                   f"documents ({ids}), were committed and stay; nothing of batch {batch + 1} or later was written)")
    exc.args = (exc.message,)
    exc.committed = list(committed)  # type: ignore[attr-defined]
