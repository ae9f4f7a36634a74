"""The Store protocol and the records the engine and the stores exchange.

Every backend sits behind this one small interface. The engine owns splitting, embedding, BM25,
grouping into units, ordering and the residual filter; a store owns rows, vectors and whatever part of
WHERE its ``Capabilities`` (in :mod:`nlql.pushdown`) say it can evaluate with exactly NLQL's semantics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from nlql.errors import BackendError, NLQLError
from nlql.pushdown import Capabilities, FastPath, Filter, NativeFilter


@dataclass(slots=True)
class UnitRecord:
    """One sentence of a document, as the engine hands it to a store."""

    position: int
    content: str
    start: int  # character offsets into the document text
    end: int
    tail: str = ""  # the text between this sentence and the next (whitespace), so units rebuild exactly


@dataclass(slots=True)
class DocRecord:
    """A whole document, split and embedded, ready to store. ``vectors`` are L2-normalised float32."""

    doc_id: str
    text: str
    metadata: dict[str, Any]
    units: list[UnitRecord]
    vectors: np.ndarray
    seq: int  # insertion order: ties break on it (document, then position)
    # per unit, the entity names its sentence names (``metadata["entities"]`` and the engine's extractor),
    # filled by the engine for stores that keep entity links (``Capabilities.ENTITY_LINKS``); None: not given
    entities: list[list[str]] | None = None


@dataclass(slots=True)
class Row:
    """One stored sentence as a store returns it. ``metadata`` is the document's metadata.

    Stores may return shared objects; the engine copies before handing anything to a user.
    """

    key: Any  # store-internal key, stable while the row exists
    doc_id: str
    position: int
    content: str
    metadata: dict[str, Any]
    seq: int
    start: int = 0
    end: int = 0
    tail: str = ""
    # the id, made on first read (a store's cached row is read by many searches); not an argument, so
    # ``dataclasses.replace`` of a row makes its own
    _id: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def id(self) -> str:
        got = self._id
        if got is None:
            got = self._id = unit_id(self.doc_id, self.position)
        return got


def unit_id(doc_id: str, position: int) -> str:
    """The id of a sentence: ``"<doc_id>#<position>"``."""
    return f"{doc_id}#{position}"


@runtime_checkable
class Store(Protocol):
    """The one interface every backend implements. Keys are store-internal; rows carry doc_id/position.

    Contract:
    - ``upsert`` is atomic per call and replaces every existing document with the same ``doc_id``
      (no stale sentences). A crash mid-call leaves either the old or the new version. The engine
      passes a list of records; a store that declares ``Capabilities.DOC_BATCHES`` gets the write as one
      :class:`~nlql.stores.batch.DocBatch` (columns, and a ``Sequence[DocRecord]`` too) instead.
    - ``knn`` returns, per query vector, up to ``k`` (key, cosine similarity) pairs, best first, among rows
      passing ``flt``; with ``min_score`` (only if ``SCORE_THRESHOLD``) rows below it are excluded.
      Ties are broken by (seq, position) ascending when ``EXACT``.
    - ``scan`` returns every key passing ``flt`` in insertion order (seq, position).
    - ``similarities(vectors, keys)`` returns a (len(vectors), len(keys)) cosine matrix.
    - ``vectors(keys)`` returns the rows' own stored vectors, (len(keys), dim) float32, L2-normalised,
      in the order of ``keys``; a key no longer stored gives a row of NaN. MMR reads it for its window
      (one call per search): in process for the table stores, one round trip (batched) for the others.
    - ``get_info(key)`` / ``set_info(key, value)``: a small persistent key/value record beside the data,
      kept where the data is (a file, a server) so every process sees it. The engine keeps there what
      built the store (:mod:`nlql.stores.record`: the embedder and the BM25 analyzer). ``get_info`` may
      be called before ``open`` and returns None for a key never set (or a store not created yet);
      ``set_info`` is called after ``open``, before the first ``upsert``.
    - ``last_stats`` says what the last ``knn`` / ``run_lowered`` call did (path, rounds, …), for
      ``hits.stats["store"]``; it may stay empty.

    Optional protocols, each declared by a ``Capabilities`` flag and called only when declared:
    :class:`ScoresAll` (``FULL_SCORES``), :class:`RunsLowered` (``SQL_ARMS``), :class:`TablePaths`
    (``FAST_PATH``), :class:`DescribesData` (``DESCRIBES_DATA``), :class:`CountsGroups` (``COUNTS``),
    :class:`WritesAhead` (``WRITES_AHEAD``).
    """

    capabilities: Capabilities
    last_stats: dict[str, Any]

    def open(self, dim: int) -> None: ...
    def upsert(self, docs: Sequence[DocRecord]) -> None: ...
    def delete(self, doc_ids: Sequence[str]) -> int: ...
    def count(self) -> int: ...
    def max_seq(self) -> int: ...
    def compile_filter(self, flt: Filter) -> NativeFilter: ...
    def knn(self, vectors: np.ndarray, k: int, flt: NativeFilter | None = None,
            min_score: float | None = None) -> list[list[tuple[Any, float]]]: ...
    def scan(self, flt: NativeFilter | None = None) -> list[Any]: ...
    def fetch(self, keys: Sequence[Any]) -> list[Row]: ...
    def document_rows(self, doc_ids: Sequence[str]) -> dict[str, list[Row]]: ...
    def similarities(self, vectors: np.ndarray, keys: Sequence[Any]) -> np.ndarray: ...
    def vectors(self, keys: Sequence[Any]) -> np.ndarray: ...
    def get_info(self, key: str) -> str | None: ...
    def set_info(self, key: str, value: str) -> None: ...
    def close(self) -> None: ...


class ScoresAll(Protocol):
    """``Capabilities.FULL_SCORES``: every row passing a filter scored in one pass (an exact matrix)."""

    def score_all(self, vectors: np.ndarray, flt: NativeFilter | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(keys, scores of shape (len(vectors), len(keys))) over every live row passing ``flt``."""
        ...


class RunsLowered(Protocol):
    """``Capabilities.SQL_ARMS``: a hybrid plan lowered to one statement (:mod:`nlql.plan.lower_hybrid`)."""

    dialect: Any

    def run_lowered(self, lowered: Any, vectors: Mapping[str, np.ndarray]) -> list[tuple[Row, dict[str, float]]]:
        """The statement's rows, best first, each with its score per slot."""
        ...


#: What a BM25 index answers for a query text: every (doc_id, position) matching a term, and its score.
Bm25Matches = Callable[[str], tuple[list[tuple[str, int]], np.ndarray]]


class RowNumbers(Protocol):
    """The row table of a ``FAST_PATH`` store as the engine reads it: arrays indexed by row number."""

    size: int
    version: int
    seq: np.ndarray          # insertion order of each row's document
    pos: np.ndarray          # each row's sentence position
    row_doc: np.ndarray      # each row's document slot
    doc_rows: Mapping[str, Sequence[int]]  # doc_id -> its rows, in position order


class TableMatches(Protocol):
    """The engine's BM25 over a table's row numbers (``KeywordSource.fast_matches``)."""

    def sparse(self, text: str, table: Any) -> tuple[np.ndarray, np.ndarray]:
        """(rows holding a term of ``text``, ascending; their BM25 scores > 0)."""
        ...

    def rows(self, text: str, table: Any) -> np.ndarray | None:
        """``text``'s BM25 for every table row (0.0: no term), or None."""
        ...


class KeywordSource(Protocol):
    """What the engine's BM25 source answers (its own index beside the store, or a ``KEYWORD_STATS``
    store's ``keyword_index``): ``matches`` (:data:`Bm25Matches`); ``in_store`` (BM25 kept in the store:
    recall may narrow with ``bm25_candidates``); ``analyzer`` (the terms' analyzer: HIGHLIGHT reads it); ``fast_matches`` (a :class:`TableMatches` for table
    stores, else None); ``begin_search()`` (what it kept for the last search is dropped)."""

    analyzer: Any
    in_store: bool
    fast_matches: TableMatches | None

    def matches(self, text: str) -> tuple[list[tuple[str, int]], np.ndarray]: ...
    def begin_search(self) -> None: ...


class EngineSide(Protocol):
    """The engine's stages a store's own fast paths call back (``run.side``), so that the rows they
    return are built, scored and filtered exactly as the general path builds them."""

    DISTINCT_FACTOR: float

    def candidates(self, run: Any, keys: Sequence[Any], qv: Mapping[str, np.ndarray],
                   known: Mapping[str, Any] | None = None) -> list[Any]: ...
    def passing(self, run: Any, units: list[Any]) -> list[Any]: ...
    def enough(self, run: Any, units: list[Any], need: int) -> bool: ...
    def wider(self, run: Any, units: list[Any], k: int, need: int) -> int: ...
    def distinct_rounds(self, run: Any, rounds: int) -> None: ...
    def store_stats(self, run: Any) -> None: ...


class TablePaths(Protocol):
    """``Capabilities.FAST_PATH``: keys are row numbers of an in-process table, so pages and documents
    can be picked with numpy before any row is built. The paths are the store's own business
    (:mod:`nlql.stores.memory`); the engine's recall stage calls them here and runs its general path
    when one returns None. ``run`` is the engine's per-search state; ``run.side`` is an
    :class:`EngineSide`, ``run.bm25`` a :class:`KeywordSource`."""

    table: RowNumbers

    def mask(self, flt: NativeFilter | None) -> np.ndarray:
        """A boolean vector over the table's rows: live and passing ``flt``."""
        ...

    def top_window(self, v: np.ndarray, depth: int, flt: NativeFilter | None = None,
                   min_score: float | None = None, keys: np.ndarray | None = None) -> Any:
        """The exact top ``depth`` rows by one query vector (keys, float32 scores), or None."""
        ...

    def insertion_order(self, keys: np.ndarray) -> np.ndarray:
        """The permutation of ``keys`` (row numbers) into insertion order (seq, position)."""
        ...

    def similarities(self, vectors: np.ndarray, keys: Sequence[Any] | np.ndarray) -> np.ndarray:
        """:meth:`Store.similarities`, the keys (row numbers) given as an array too."""
        ...

    def live_sentences(self) -> list[tuple[str, int, int, str, dict[str, Any]]]:
        """(doc_id, position, seq, content, metadata) of every live row, without building rows."""
        ...

    def document_page(self, run: Any, qv: Mapping[str, np.ndarray]) -> list[Any] | None:
        """A DOCUMENT fast path's candidates, or None."""
        ...

    def window_page(self, run: Any, qv: Mapping[str, np.ndarray]) -> list[Any] | None:
        """A fusion's (or BM25's) page from the arms' windows only, or None."""
        ...

    def floored(self, run: Any, qv: Mapping[str, np.ndarray], sim_slots: list[str],
                fast_ok: bool) -> tuple[np.ndarray, dict[str, np.ndarray], bool] | None:
        """(rows passing WHERE's BM25 floors, their SIMILARITY scores, NaN outside windows?), or None."""
        ...

    def windows(self, run: Any, qv: Mapping[str, np.ndarray], sim_slots: list[str],
                fast_ok: bool) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """(live keys in row order, SIMILARITY scores NaN outside each arm's window), or None."""
        ...

    def fast_page(self, run: Any, fast: FastPath, keys: np.ndarray, scores: dict[str, np.ndarray],
                  qv: Mapping[str, np.ndarray], *, fast_ok: bool, unordered: bool,
                  fill: Sequence[str] = ()) -> list[Any] | None:
        """The planner's fast path over ``keys``: the page's candidates, or None (the general path)."""
        ...

    def fast_select(self, path: FastPath, keys: np.ndarray, scores: Mapping[str, np.ndarray], need: int,
                    bm25: Bm25Matches) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """The keys (and their slice of ``scores``) that ``path`` selects among ``keys``, or None to decline.

        Args:
            path: The planner's choice (:class:`~nlql.pushdown.FastPath`).
            keys: Candidate keys (pushed filter and in-recall thresholds already applied).
            scores: Sentence scores per SIMILARITY slot, aligned with ``keys``.
            need: Rows the page needs (LIMIT + OFFSET, times the rerank factor).
            bm25: The engine's BM25 matches, for the BM25 slots the path reads.
        """
        ...

    def key_documents(self, keys: Sequence[Any]) -> list[str]:
        """The distinct documents of ``keys``, in the order first met, without building rows."""
        ...


class Syncing(Protocol):
    """``Capabilities.SYNCS``: a store other processes may write (a directory store): ``stale()`` says
    cheaply whether another writer committed since this process last looked; ``sync()`` catches up."""

    def stale(self) -> bool: ...
    def sync(self) -> Any: ...


class WritesAhead(Protocol):
    """``Capabilities.WRITES_AHEAD``: ``upsert(docs)`` in two halves, ``write_prepared(prepare_write(docs))``.

    ``prepare_write`` makes the write's rows without touching the backend (it may run while an earlier
    ``write_prepared`` is under way in another thread); ``write_prepared`` writes them, atomically as
    ``upsert`` does, and raises what ``upsert`` would. The engine then writes an ``add_texts`` call a
    batch behind: it splits, embeds and prepares batch b+1 while a thread of its own writes batch b, and
    numbers batch b+1's documents after batch b's without asking ``max_seq``. A store declares it only
    when nothing but its engine writes it (an in-memory database of its own)."""

    def prepare_write(self, docs: Sequence[DocRecord]) -> Any: ...
    def write_prepared(self, prepared: Any) -> None: ...


class WarmsUp(Protocol):
    """``Capabilities.WARM_UP``: work a reopened store may start in the background when the engine
    opens it (the built-in store's int8 copy); ``build_int8(wait=False)`` returns at once."""

    def build_int8(self, wait: bool = True) -> bool: ...


class KeepsAnalyzer(Protocol):
    """``Capabilities.ANALYZER``: a store that writes BM25 terms with its own ``analyzer``; the engine
    sets it to the engine's before ``open`` so BM25 is the same on every store."""

    analyzer: Any


class KeepsKeywords(Protocol):
    """``Capabilities.KEEPS_KEYWORDS``: a store that keeps the engine's BM25 index (its arrays) beside
    its data (a directory store), so that a fresh process loads it instead of building it.

    ``kept_keyword_state(key)`` gives the arrays kept for the configuration ``key`` and the changes the
    store committed since (to apply), or None; ``keep_keyword_state(key, arrays)`` keeps arrays in step
    with the store's rows now, False when it could not."""

    def kept_keyword_state(self, key: str) -> tuple[dict[str, Any], Any] | None: ...
    def keep_keyword_state(self, key: str, arrays: dict[str, Any]) -> bool: ...


class CountsGroups(Protocol):
    """``Capabilities.COUNTS``: ``SELECT COUNT(unit) BY …`` (SPEC §11) as the store's own grouping (SQL
    ``GROUP BY``), for SENTENCE and DOCUMENT units and BY keys that are metadata paths or ``doc_id``.

    ``count_groups(flt, unit, paths)`` counts the sentences passing ``flt`` (``unit`` ``"SENTENCE"``), or the
    documents with at least one (``"DOCUMENT"``), per distinct tuple of the values at ``paths`` (each
    ``("doc_id",)`` or ``("meta", key, …)``): a list value counts once under each member, an empty list
    in no group, a missing key as null. It returns ``(values, count)`` pairs, each value decoded from
    the stored JSON, grouped by the stored form: the engine merges values that NLQL holds equal, and
    counts itself when one row could have held two forms of one value (``[1, 1.0]``), or when the store
    returns None (it cannot read some stored value, e.g. PostgreSQL's JSON functions and ``\\u0000``, or
    its grouping cannot hold one, e.g. Qdrant's facet and a number). ``Capabilities.COUNT_KEYS`` bounds
    how many paths a call takes (0: any) and ``COUNT_CALLS`` names the calls for explain."""

    def count_groups(self, flt: NativeFilter | None, unit: str,
                     paths: Sequence[tuple[str, ...]]) -> list[tuple[tuple[Any, ...], int]] | None: ...


class DescribesData(Protocol):
    """``Capabilities.DESCRIBES_DATA``: the store's sizes and metadata keys without a full scan per call
    (kept at write time, or read from a bounded sample it names), for ``engine.schema()``."""

    def describe_data(self, sample: int) -> Any:
        """A :class:`nlql.schema.DataSummary`; a sampled one reads at most ``sample`` documents."""
        ...


#: Set by the executor while a fusion's keyword arm runs on a store that declares
#: ``Capabilities.SERIAL_CALLS`` (Milvus Lite): the arms after it start when :func:`keyword_reads_sent` is called.
KEYWORD_READS_SENT: ContextVar[Callable[[], None] | None] = ContextVar("nlql_keyword_reads_sent", default=None)


def keyword_reads_sent() -> None:
    """Called by a store's ``bm25_candidates`` once its backend reads are answered (the scoring left is
    the interpreter's): on an engine that answers one call at a time, the fusion's other arms (a knn's
    long search) start now, so the keyword reads do not queue behind them and the scoring overlaps them
    (:func:`nlql.execute.keyword_recall.narrow`). Nothing happens outside such an arm."""
    hook = KEYWORD_READS_SENT.get()
    if hook is not None:
        hook()


#: False while a fusion's SIMILARITY arm runs whose rows' values are the knn's own scores
#: (``Capabilities.KNN_SCORES``) and whose search reads no vector afterwards (no other SIMILARITY score, no
#: MMR): a store that can return its hits' vectors with a knn (to keep for the search) need not.
KNN_VECTORS: ContextVar[bool] = ContextVar("nlql_knn_vectors", default=True)


def knn_vectors_wanted() -> bool:
    """Whether the running search may read the vectors of the rows its knn returns (see :data:`KNN_VECTORS`)."""
    return KNN_VECTORS.get()


class KeywordStats(Protocol):
    """``Capabilities.KEYWORD_STATS``: BM25 kept in the store itself (SPEC §10), so the engine holds none.

    The store writes each sentence's terms (by its ``analyzer``) with the row and scores SPEC §5's BM25
    from what it keeps:
    - ``keyword_index(analyzer)``: the engine's BM25 source for this store (``matches``, ``scores``,
      no-op ``on_upsert``/``on_delete``), or None when ``analyzer`` is not the one the terms were
      written with (the engine then keeps its own index);
    - ``bm25_candidates(text, flt, n)``: store keys and scores of the rows passing a compiled filter that
      hold a term of ``text``, at least every row that can be among the ``n`` best (ties kept); recall
      narrows with it before any row is fetched (:mod:`nlql.execute.keyword_recall`).
    """

    analyzer: Any

    def keyword_index(self, analyzer: Any = None) -> Any: ...
    def bm25_candidates(self, text: str, flt: NativeFilter | None,
                        n: int | None = None) -> tuple[list[Any], np.ndarray]: ...


class KeepsEntities(Protocol):
    """``Capabilities.ENTITY_LINKS``: the entity graph's links kept with the data (SPEC §9).

    The engine fills ``DocRecord.entities`` before ``upsert``; the store writes them in the same
    transaction as the document and drops them with it (delete, replace). A reopened store gives the
    graph back without re-running the extractor:
    - ``entity_rows()``: every link as ``(doc_id, seq, position, name)`` (the canonical rows of
      :meth:`nlql.text.graph.EntityGraph.to_rows`), or None when the store cannot vouch that every
      document's links are there (a store written by a version that kept none);
    - ``adopt_entities(rows)``: store links the engine built once for such a store (documents that have
      links already keep theirs) and vouch for them from then on.
    """

    def entity_rows(self) -> list[tuple[str, int, int, str]] | None: ...
    def adopt_entities(self, rows: Sequence[tuple[str, int, int, str]]) -> None: ...


class GraphInStore(Protocol):
    """``Capabilities.GRAPH_ARM``: GRAPH computed by the store from the links it keeps (PostgreSQL, DuckDB), so
    the engine holds no graph for it. ``graph_activation(text, hops, decay)`` gives an object with the
    activated sentences as arrays ``doc_ids``, ``positions``, ``seqs``, ``values`` (insertion order) and
    ``hop_rows()`` → ``(max weight, [(hop, entity key, display name, activation), …])`` for explain; or
    None when the store cannot vouch for every document's links (the engine then adopts them once)."""

    def graph_activation(self, text: str, hops: int, decay: float) -> Any: ...


@contextmanager
def backend_errors(store: str, what: str) -> Iterator[None]:
    """Turn a driver's failure into a :class:`BackendError` naming the store and the operation.

    NLQL errors pass through unchanged.
    """
    try:
        yield
    except NLQLError:
        raise
    except Exception as exc:  # noqa: BLE001 - any driver failure is a backend error
        raise BackendError(store, f"{what} failed: {type(exc).__name__}: {exc}") from exc
