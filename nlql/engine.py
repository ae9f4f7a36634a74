"""The Engine: ingest, check, explain and search over one store (SPEC §7)."""

from __future__ import annotations

import asyncio
import math
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from nlql import ir
from nlql import values as V
from nlql.errors import BackendError, Diagnostic, LimitError, NLQLError
from nlql.execute.bm25 import BM25Sidecar
from nlql.execute.executor import Executor
from nlql.execute.results import Hits
from nlql.execute.units import DEFAULT_CHUNK_CHARS
from nlql.explain import Explain
from nlql.plan.planner import build_plan
from nlql.stores import open_store
from nlql.stores.base import DocRecord, Store, UnitRecord

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


def _check_metadata(meta: Any) -> dict[str, Any]:
    """The metadata of one document, normalised, refusing what no store can write (docs/reliability.md).

    Raises:
        TypeError: ``meta`` is not a mapping.
        ValueError: it holds an integer (value or key) too large to write as text (over ~4,200 digits).
    """
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise TypeError(f"metadata must be a mapping (a dict), not {type(meta).__name__}")
    out = dict(meta)
    stack: list[Any] = [out]
    seen: set[int] = set()
    while stack:  # iterative, and a container that holds itself is walked once
        value = stack.pop()
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _MAX_INT_BITS:
            raise ValueError("metadata holds an integer too large to store (over 4,200 digits)")
        if isinstance(value, (Mapping, list, tuple, set, frozenset)):
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, Mapping):
                stack.extend(value.keys())
                stack.extend(value.values())
            else:
                stack.extend(value)
    return V.normalize_metadata(out)


class _RWLock:
    """Many readers or one writer; writers are not starved (new readers wait for a waiting writer)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting = 0

    @contextmanager
    def read(self) -> Any:
        with self._cond:
            while self._writer or self._waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
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
    ) -> None:
        if embedder is None:
            from nlql.embedders import default_embedder

            embedder = default_embedder()
        self.embedder = embedder
        self.store: Store = open_store(store)
        self.reranker = reranker
        self.rerank_factor = int(rerank_factor)
        self.clock = clock or _system_clock
        self.chunk_chars = chunk_chars
        self.limit_ceiling = limit_ceiling
        self._functions: dict[str, Callable[..., Any]] = {}
        self._arity: dict[str, int | None] = {}
        self._lock = _RWLock()
        self._write_mutex = threading.Lock()
        analyzer = self._open_store(embedder, analyzer)
        self._bm25 = BM25Sidecar(self.store, analyzer)
        self._executor = Executor(self.store, self._embed_queries, self._bm25, self._functions, chunk_chars)
        if warm_up:
            try:
                from nlql.text.temporal import warm_up as _warm

                _warm()
            except Exception:  # noqa: BLE001 - warming is an optimisation only
                pass

    def _open_store(self, embedder: Any, analyzer: Any) -> Any:
        """Open the store after checking its record (embedder, analyzer); record them if it has none.

        The check comes before ``open`` (so a mismatch changes nothing) and again after it (some
        stores answer only once open); the record is written before the first vector (issue 17).
        Returns the engine's analyzer (see :func:`nlql.stores.record.resolve_analyzer`).
        """
        from nlql.embedders import embedder_record
        from nlql.stores import record

        wanted = embedder_record(embedder)
        try:
            record.check_embedder(self.store, wanted)
            resolved = record.resolve_analyzer(self.store, analyzer)
            if hasattr(self.store, "analyzer"):  # a store with native BM25 takes the engine's analyzer
                self.store.analyzer = resolved
            self.store.open(int(embedder.dim))
            record.adopt(self.store, wanted, resolved)
        except NLQLError:
            raise
        except Exception as exc:  # a driver error while opening: name the store
            raise BackendError(self.store.capabilities.NAME, f"cannot open the store: {exc}") from exc
        return resolved

    # ------------------------------------------------------------------------------------- ingest

    def add_text(self, text: str, id: str | None = None, metadata: Mapping[str, Any] | None = None) -> str:
        """Add one document (split into sentences and embedded); the same id again replaces it."""
        return self.add_texts([text], ids=[id] if id is not None else None,
                              metadatas=[metadata] if metadata is not None else None)[0]

    def add_texts(
        self,
        texts: Sequence[str],
        ids: Sequence[str | None] | None = None,
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        batch_size: int = 256,
        progress: Any = False,
    ) -> list[str]:
        """Add many documents, embedding in batches. Returns their ids (new ids are UUID4 hex).

        ``progress=True`` reports sentences embedded, their rate and an ETA on stderr (a bar on a
        terminal, plain lines otherwise); a :class:`nlql.progress.Progress` object receives them instead.
        """
        texts = list(texts)
        n = len(texts)
        if ids is not None and len(ids) != n:
            raise ValueError("ids must have one entry per text")
        if metadatas is not None and len(metadatas) != n:
            raise ValueError("metadatas must have one entry per text")
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"texts must be strings, not {type(t).__name__}")
        # validated and normalised in full before the first write, so a bad entry leaves nothing half-added
        checked = [_check_metadata(m) for m in metadatas] if metadatas is not None else None
        out_ids = [str(i) if i is not None else uuid.uuid4().hex
                   for i in (ids if ids is not None else [None] * n)]
        from nlql.progress import make_progress
        from nlql.text.split import split_sentences

        report = make_progress(progress)
        if report is not None:  # counted first, so the bar has a true total and an ETA from the start
            report.start(sum(len(split_sentences(t)) for t in texts), documents=n)

        batch_size = max(1, int(batch_size))
        for lo in range(0, n, batch_size):
            hi = min(n, lo + batch_size)
            docs = []
            sentences: list[str] = []
            for i in range(lo, hi):
                text = texts[i]
                spans = split_sentences(text)
                units = []
                for p, (s, e) in enumerate(spans):
                    nxt = spans[p + 1][0] if p + 1 < len(spans) else e
                    units.append(UnitRecord(p, text[s:e], s, e, text[e:nxt]))
                    sentences.append(text[s:e])
                meta = checked[i] if checked is not None else {}
                docs.append((out_ids[i], text, meta, units))
            vecs = self._embed_documents(sentences, report)
            records = []
            row = 0
            for doc_id, text, meta, units in docs:
                records.append(DocRecord(doc_id, text, meta, units, vecs[row:row + len(units)], 0))
                row += len(units)
            self._write(records)
            if report is not None:
                report.advance(0, documents=hi - lo)
        if report is not None:
            report.close()
        return out_ids

    def _write(self, records: list[DocRecord]) -> None:
        with self._write_mutex:
            seq = self.store.max_seq()
            for r in records:
                seq += 1
                r.seq = seq
            with self._lock.write():
                self._call_store("upsert", records)
                self._bm25.on_upsert(records)

    def delete(self, doc_id: str) -> bool:
        """Delete a document and all its sentences; True if it existed."""
        with self._write_mutex, self._lock.write():
            n = self._call_store("delete", [doc_id])
            self._bm25.on_delete([doc_id])
            return bool(n)

    def _call_store(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.store, method)(*args)
        except NLQLError:
            raise
        except (TypeError, ValueError):
            raise
        except Exception as exc:
            raise BackendError(self.store.capabilities.NAME, f"{method} failed: {exc}") from exc

    def _embed_documents(self, sentences: list[str], report: Any = None) -> np.ndarray:
        if not sentences:
            return np.zeros((0, int(self.embedder.dim)), dtype=np.float32)
        if report is None:
            mat = np.asarray(self.embedder.embed(sentences), dtype=np.float32)
        else:  # in chunks, each reported as it is done (nlql.progress)
            from nlql.progress import chunks

            parts = []
            for lo, hi in chunks(len(sentences)):
                parts.append(np.asarray(self.embedder.embed(sentences[lo:hi]), dtype=np.float32))
                report.advance(hi - lo)
            mat = np.concatenate(parts)
        norms = np.linalg.norm(mat, axis=1, keepdims=True)
        return np.ascontiguousarray(np.divide(mat, norms, out=np.zeros_like(mat), where=norms > 0))

    def _embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.embedder.embed(list(texts)), dtype=np.float32)

    def __len__(self) -> int:
        return int(self.store.count())

    # ------------------------------------------------------------------------------------- query

    def register_function(self, name: str, fn: Callable[..., Any], arity: int | None = None) -> None:
        """Make ``NAME(args…)`` callable in queries (always evaluated by the engine, never pushed)."""
        key = name.upper()
        self._functions[key] = fn
        self._arity[key] = arity

    def check(self, query: str | ir.Query, params: Mapping[str, Any] | None = None,
              schema: Mapping[str, str] | None = None) -> list[Diagnostic]:
        """Every problem in a query at once; [] when it is valid."""
        from nlql.check import check as _check

        try:
            return _check(query, params=_params(params), schema=schema, functions=self._arity)
        except RecursionError as exc:
            return _too_deep(exc).diagnostics

    def _prepare(self, query: str | ir.Query, params: Mapping[str, Any] | None) -> tuple[ir.Query, str | None]:
        from nlql.check import validate

        source = query if isinstance(query, str) else None
        q = validate(query, params=params or {}, functions=self._arity)
        return q, source

    def _plan(self, query: str | ir.Query, params: Mapping[str, Any] | None, reranker: Any = None) -> Any:
        try:
            return self._plan_unguarded(query, _params(params), reranker)
        except RecursionError as exc:  # a hand-built IR, a long LET chain or a caller deep in its stack
            raise _too_deep(exc) from None

    def _plan_unguarded(self, query: str | ir.Query, params: Mapping[str, Any] | None, reranker: Any) -> Any:
        q, source = self._prepare(query, params)
        rr = reranker if reranker is not None else self.reranker
        rerank = None
        if rr is not None:
            rerank = {"reranker": type(rr).__name__, "factor": self.rerank_factor,
                      "score": "scores['rerank']"}
        try:
            return build_plan(q, params=params, store=self.store, now=self._now(),
                              functions=self._functions, rerank=rerank, rerank_factor=self.rerank_factor,
                              limit_ceiling=self.limit_ceiling, analyzer=self._bm25.analyzer)
        except NLQLError as exc:
            if source is not None:
                exc.with_source(source)
            raise

    def _now(self) -> datetime:
        now = self.clock()
        return now if now.tzinfo else now.replace(tzinfo=timezone.utc)

    def explain(self, query: str | ir.Query, params: Mapping[str, Any] | None = None) -> Explain:
        """The plan, before anything runs: ``str()`` is a text tree, ``to_dict()`` the fields of SPEC §7."""
        plan = self._plan(query, params)
        from nlql.sql import explain_sql

        return Explain(plan, sql=explain_sql(plan, self.store))

    def search(
        self,
        query: str | ir.Query,
        params: Mapping[str, Any] | None = None,
        reranker: Any = None,
        rerank_query: str | None = None,
        timeout: float | None = None,
        max_tokens: int | None = None,
    ) -> Hits:
        """Run a query. Returns :class:`~nlql.execute.results.Hits` (a list of hits with stats, warnings).

        Raises:
            NLQLError: Anything wrong with the query or its parameter values, a store failure
                (:class:`~nlql.errors.BackendError`) or a timeout with no result yet.
            TypeError, ValueError: A programming error in the arguments themselves (a query that is not a
                string or Query, params that are not a mapping, a non-numeric ``timeout``, …).
        """
        _check_run_args(timeout, max_tokens)
        source = query if isinstance(query, str) else None
        rr = reranker if reranker is not None else self.reranker
        with self._lock.read():
            plan = self._plan(query, params, rr)
            try:
                return self._executor.run(plan, reranker=rr, rerank_query=rerank_query,
                                          rerank_factor=self.rerank_factor, timeout=timeout,
                                          max_tokens=max_tokens)
            except NLQLError as exc:
                if source is not None:
                    exc.with_source(source)
                raise
            except (RecursionError, MemoryError) as exc:
                raise _too_deep(exc) from None
            except Exception as exc:
                raise BackendError(self.store.capabilities.NAME, f"search failed: {exc}") from exc

    async def asearch(self, query: str | ir.Query, params: Mapping[str, Any] | None = None,
                      **kwargs: Any) -> Hits:
        """:meth:`search` in a worker thread, so the event loop keeps running."""
        return await asyncio.to_thread(self.search, query, params, **kwargs)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _check_run_args(timeout: Any, max_tokens: Any) -> None:
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(f"timeout must be a number of seconds or None, not {type(timeout).__name__}")
        if math.isnan(timeout):
            raise ValueError("timeout must be a number of seconds, not NaN")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)):
        raise TypeError(f"max_tokens must be an int or None, not {type(max_tokens).__name__}")
