"""The entity graph behind ``GRAPH(text, hops => h, decay => d)`` (SPEC §9), kept beside the data.

Two kinds of links, both derived from one canonical fact per sentence — *which entities it names*:

- **entity ↔ sentence**: a sentence (``doc_id``, ``position``) names an entity;
- **entity ↔ entity**: two entities are linked when one sentence names both; the edge's *weight* is
  the number of such sentences.

Entities are compared by :func:`~nlql.text.entities.entity_key` (casefolded whole words); a name
repeated in one sentence counts once there. Names longer than
:data:`~nlql.text.entities.MAX_NAME_TOKENS` words are ignored (everywhere, so every store agrees).

**Finding entities in a question.** :meth:`EntityGraph.find` returns every *known* entity (one that
some live sentence names) whose words occur in the text as whole words, casefolded, keeping only
*longest matches*: an occurrence is dropped when it lies inside a longer occurrence of another known
name (``"Bertrand Russell"`` in the text finds ``bertrand russell``, not also ``russell``). This rule
does not depend on scanning order, so SQL computes the same set (:func:`nlql.sql.graph.activation`).
The matcher is a token trie walked from every word of the text: O(words × longest name).

**Spreading activation** (exactly SPEC §9). Found entities get 1.0. Then ``hops`` times, every
entity ``v`` takes ``max(a(v), max over neighbours u of a(u) × ((decay × w(u, v)) / W))``, where ``W`` is
the largest edge weight in the whole graph: activation is the best product over paths of at most
``hops`` edges, so it stays in (0, 1] and never grows with ``hops`` beyond what a path gives. An
entity whose activation would be 0 (``decay = 0``, or underflow) is not activated. A sentence's value is
the maximum activation over the entities it names; sentences that name no activated entity have no
value (NULL). Activation is monotone: non-decreasing in ``decay`` and in ``hops``.

**Incremental and exact.** :meth:`EntityGraph.add` (which replaces a document already present) and
:meth:`EntityGraph.remove` work per document; after any sequence of them the graph equals the one
built from scratch from the documents still present (weights, known names, display names). Writes
append to flat integer buffers; a query compiles them once into CSR arrays (entity → neighbours with
weights, entity → sentences) and stays array-only: no Python loop over rows or edges.

**Persistence.** The canonical form is one row per (sentence, entity): :meth:`EntityGraph.to_rows`
and :meth:`EntityGraph.from_rows`, or the SQLite helpers :data:`SQLITE_SCHEMA`,
:func:`sqlite_save`, :func:`sqlite_load`. A SQL store whose dialect reads entity tables (PostgreSQL)
keeps the graph in two tables and computes the same activation in one statement: that SQL is the
SQL layer's (:mod:`nlql.sql.graph`, spelled by each dialect), not this module's.

>>> g = EntityGraph()
>>> g.add("d1", [(0, ["Bertrand Russell", "Whitehead"]), (1, ["Whitehead", "Cambridge"])])
>>> a = g.activate("Who wrote with Bertrand Russell?", hops=1, decay=0.5)
>>> [e.name for e in a.found]
['Bertrand Russell']
>>> sorted(a.entities.items())
[('bertrand russell', 1.0), ('whitehead', 0.5)]
>>> a.pairs(), a.values.tolist()
([('d1', 0), ('d1', 1)], [1.0, 0.5])
"""

from __future__ import annotations

import math
import threading
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nlql.deadline import current as current_deadline
from nlql.errors import NLQLTimeoutError
from nlql.functions import MAX_GRAPH_HOPS as MAX_HOPS
from nlql.gc_pause import gc_paused
from nlql.text.bm25 import _ranges
from nlql.text.entities import MAX_NAME_TOKENS, entity_tokens, token_spans

__all__ = [
    "Activation",
    "EntityGraph",
    "FoundEntity",
    "HopDetail",
    "SQLITE_SCHEMA",
    "check_spread",
    "sentence_entities",
    "sqlite_load",
    "sqlite_save",
]

_END = None  # trie key of "a name ends here" (no token is None)
_DETAIL = 10  # entities listed per hop in explain
_FULL_PASS = 4  # one pass over all links once activated entities hold more than 1/4 of them


def _not_a_name(n: Any) -> str:
    raise TypeError(f"an entity name must be a string, not {type(n).__name__}")


def _first(item: tuple[int, list[str]]) -> int:
    return item[0]


def sentence_entities(names: Iterable[str], words: str = "unicode") -> list[tuple[str, str]]:
    """The (key, name) pairs one sentence contributes: each key once (first spelling kept), in order.

    Names that normalise to nothing or to more than ``MAX_NAME_TOKENS`` words are left out. Every
    store uses this, so they agree on what a sentence names. ``words``: how names are cut into words
    (:data:`~nlql.text.entities.ENTITY_WORDS`; a SQL store written before Unicode words keeps ``"python"``).

    >>> sentence_entities(["Russell", "RUSSELL", "  ", "G. E. Moore"])
    [('russell', 'Russell'), ('g e moore', 'G. E. Moore')]
    """
    out: dict[str, str] = {}
    cache = _KEYS if words == "unicode" else _LEGACY_KEYS
    for name in names:
        key = cache.get(name)
        if key is None:
            if not isinstance(name, str):
                raise TypeError(f"an entity name must be a string, not {type(name).__name__}")
            toks = entity_tokens(name, words)
            key = " ".join(toks) if 0 < len(toks) <= MAX_NAME_TOKENS else ""
            if len(cache) >= _KEY_CACHE:
                cache.clear()
            cache[name] = key
        if key and key not in out:
            out[key] = name.strip()
    return list(out.items())


_KEY_CACHE = 65536
_KEYS: dict[str, str] = {}  # name → key ("" when not a usable name); names repeat across a corpus
_LEGACY_KEYS: dict[str, str] = {}  # the same with words="python"


@dataclass(frozen=True, slots=True)
class FoundEntity:
    """A known entity found in a text: its key, display name and first character span in the text."""

    key: str
    name: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class HopDetail:
    """The entities one hop raised: how many, and the best few ``(name, activation)``, best first."""

    hop: int
    count: int
    top: tuple[tuple[str, float], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"hop": self.hop, "count": self.count, "top": [[n, v] for n, v in self.top]}


class Activation:
    """The result of :meth:`EntityGraph.activate`.

    Attributes:
        text: The text entities were looked for in.
        hops: Steps spread.
        decay: Factor per step.
        max_weight: The largest edge weight ``W`` (0 in a graph without edges).
        found: The entities found in the text (activation 1.0), in text order.
        per_hop: Hop 0 (the found entities) and every later hop: what it raised.
        values: The activated sentences' activation (float64, in (0, 1]), in insertion order (document
            ``seq``, then position); ``doc_ids``, ``positions`` and ``seqs`` say which sentences they are.
    """

    __slots__ = ("text", "hops", "decay", "max_weight", "found", "per_hop", "values", "_slots", "_snap",
                 "_entity_ids", "_entity_values", "_entities", "_row_best")

    def __init__(self, text: str, hops: int, decay: float, max_weight: int, found: tuple[FoundEntity, ...],
                 per_hop: tuple[HopDetail, ...], slots: np.ndarray, values: np.ndarray, entity_ids: np.ndarray,
                 entity_values: np.ndarray, snapshot: _Compiled, row_best: np.ndarray | None = None) -> None:
        self.text, self.hops, self.decay, self.max_weight = text, hops, decay, max_weight
        self.found, self.per_hop = found, per_hop
        self.values = values
        self._slots, self._snap = slots, snapshot
        self._row_best = row_best
        self._entity_ids, self._entity_values = entity_ids, entity_values
        self._entities: dict[str, float] | None = None

    @property
    def doc_ids(self) -> np.ndarray:
        """The activated sentences' documents (an object array)."""
        return self._snap.slot_doc[self._slots]

    @property
    def positions(self) -> np.ndarray:
        """The activated sentences' positions (int64)."""
        return self._snap.slot_pos[self._slots]

    @property
    def seqs(self) -> np.ndarray:
        """The activated sentences' documents' ``seq`` (int64)."""
        return self._snap.slot_seq[self._slots]

    def rows(self, indices: np.ndarray | Sequence[int]) -> list[tuple[str, int]]:
        """``(doc_id, position)`` of some rows (e.g. ``top(k)``), without touching the others."""
        slots = self._slots[np.asarray(indices, dtype=np.int64)]
        return list(zip(self._snap.slot_doc[slots].tolist(), self._snap.slot_pos[slots].tolist()))

    @property
    def entities(self) -> dict[str, float]:
        """Every activated entity's key → activation (built on first use)."""
        if self._entities is None:
            keys = self._snap.keys
            self._entities = {keys[e]: v for e, v in zip(self._entity_ids.tolist(), self._entity_values.tolist())}
        return self._entities

    @property
    def entity_count(self) -> int:
        """How many entities are activated."""
        return int(self._entity_ids.shape[0])

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def pairs(self) -> list[tuple[str, int]]:
        """The activated sentences as ``(doc_id, position)``, in insertion order."""
        return list(zip(self.doc_ids.tolist(), self.positions.tolist()))

    def get(self, pair: tuple[str, int], default: Any = None) -> float | Any:
        """The activation of one sentence ``(doc_id, position)``, or ``default`` when it has none: a
        dictionary lookup and an array read, so a query that reads a few rows never builds
        :meth:`as_dict` over every activated one."""
        if self._row_best is None:
            return self.as_dict().get(pair, default)
        slot = self._snap.slot_of().get(pair)
        if slot is None:
            return default
        v = float(self._row_best[slot])
        return v if v > 0.0 else default

    def mapped(self, token: Any, build: Any) -> np.ndarray:
        """This activation's rows (aligned with ``values``) through a per-snapshot mapping: ``build(doc_ids,
        positions)`` over every sentence slot of the graph snapshot (e.g. a store's row numbers),
        computed once per snapshot and ``token`` and shared by every activation of that snapshot."""
        snap = self._snap
        got = snap.mapped
        if got is None or got[0] != token:
            got = snap.mapped = (token, np.asarray(build(snap.slot_doc, snap.slot_pos)))
        return got[1][self._slots]

    def as_dict(self) -> dict[tuple[str, int], float]:
        """``{(doc_id, position): activation}``."""
        return dict(zip(self.pairs(), self.values.tolist()))

    def top(self, k: int) -> np.ndarray:
        """Indices (into the row arrays) of the ``k`` best rows: value descending, then insertion order."""
        n = len(self)
        if k <= 0 or not n:
            return np.zeros(0, dtype=np.int64)
        values = self.values
        if k < n:
            kth = -np.partition(-values, k - 1)[k - 1]
            above = np.flatnonzero(values > kth)
            # rows are in insertion order, so the first rows tied with the k-th are the ones to keep
            tied = np.flatnonzero(values == kth)[: k - above.size]
            cand = np.concatenate((above, tied))
            cand.sort()
        else:
            cand = np.arange(n)
        # a stable sort on the value alone keeps insertion order among ties
        return cand[np.argsort(-values[cand], kind="stable")]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary for explain: entities found, activation per hop, rows reached."""
        return {
            "text": self.text,
            "hops": self.hops,
            "decay": self.decay,
            "max_weight": self.max_weight,
            "found": [e.name for e in self.found],
            "per_hop": [h.to_dict() for h in self.per_hop],
            "entities": self.entity_count,
            "rows": len(self),
        }

    def describe(self) -> list[str]:
        """Explain lines: ``entities found: …`` then one line per hop."""
        if not self.found:
            return ["entities found: none"]
        lines = ["entities found: " + ", ".join(e.name for e in self.found)]
        for h in self.per_hop[1:]:
            shown = ", ".join(f"{n} {v:.4g}" for n, v in h.top)
            more = f" (+{h.count - len(h.top)} more)" if h.count > len(h.top) else ""
            lines.append(f"hop {h.hop}: {h.count} entities raised" + (f": {shown}{more}" if h.count else ""))
        return lines


@dataclass
class _Compiled:
    """A snapshot of the graph as arrays (what queries read); never changed once built, except the
    display-name memo."""

    keys: list[str]  # entity id → key (a copy: later writes do not change it)
    live: np.ndarray  # entity id → named by some live sentence
    adj_ptr: np.ndarray  # CSR entity → neighbours
    adj_idx: np.ndarray
    adj_w: np.ndarray  # float64 weights
    max_weight: int
    ent_ptr: np.ndarray  # CSR entity → live links (sentence slot, spelling), slots ascending
    ent_slots: np.ndarray
    ent_names: np.ndarray  # name id of each link
    names: list[str]  # name id → spelling
    link_slot: np.ndarray  # every live link's sentence slot (ascending) …
    link_eid: np.ndarray  # … and entity
    slot_doc: np.ndarray  # object
    slot_pos: np.ndarray
    slot_seq: np.ndarray
    in_order: bool
    display: dict[int, str] = field(default_factory=dict)
    mapped: tuple[Any, np.ndarray] | None = None  # (token, array over slots): Activation.mapped's memo
    _slot_of: dict[tuple[str, int], int] | None = None

    def slot_of(self) -> dict[tuple[str, int], int]:
        """``(doc_id, position)`` → its newest sentence slot (built once per snapshot, on first use)."""
        got = self._slot_of
        if got is None:  # later slots of a replaced document overwrite its dead ones
            got = self._slot_of = dict(zip(zip(self.slot_doc.tolist(), self.slot_pos.tolist()),
                                           range(self.slot_pos.shape[0])))
        return got

    def display_name(self, e: int) -> str:
        """The commonest live spelling of entity ``e`` (ties: the smallest string)."""
        name = self.display.get(e)
        if name is None:
            lo, hi = self.ent_ptr[e], self.ent_ptr[e + 1]
            if lo == hi:
                return self.keys[e]
            ids, counts = np.unique(self.ent_names[lo:hi], return_counts=True)
            best = counts.max()
            name = min(self.names[i] for i in ids[counts == best].tolist())
            self.display[e] = name
        return name


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**12 else "a very large number"
    return text if len(text) <= 40 else text[:37] + "..."


def check_spread(hops: Any, decay: Any) -> tuple[int, float]:
    """Validate ``hops`` (an int from 0 to :data:`MAX_HOPS`) and ``decay`` (a number in [0, 1]); raise
    ValueError otherwise."""
    if isinstance(hops, bool) or not isinstance(hops, (int, np.integer)) or hops < 0:
        raise ValueError(f"hops must be a whole number >= 0, not {_short(hops)}")
    if hops > MAX_HOPS:
        raise ValueError(f"hops must be at most {MAX_HOPS}, not {_short(hops)}")
    if isinstance(decay, bool) or not isinstance(decay, (int, float, np.floating, np.integer)):
        raise ValueError(f"decay must be a number between 0 and 1, not {decay!r}")
    d = float(decay)
    if not (0.0 <= d <= 1.0) or math.isnan(d):
        raise ValueError(f"decay must be between 0 and 1, not {decay!r}")
    return int(hops), d


class EntityGraph:
    """Entities, the sentences that name them and their co-occurrence, per document (see the module doc).

    Writes only append to flat buffers (a sentence slot, and one ``(slot, spelling id)`` link per name)
    or mark slots dead; the first query after writes compiles the live links into CSR arrays with
    numpy (normalising each new spelling once). Thread-safe: writes and compilation hold an internal
    lock; a query works on an immutable snapshot.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._reset()

    def _reset(self) -> None:
        # spellings and entity keys, both interned; ids are never reused (until compaction)
        self._name_id: dict[str, int] = {}
        self._names: list[str] = []
        self._name_eid: list[int] = []  # name id → entity id (-1: not a usable name), filled at compile
        self._key_eid: dict[str, int] = {}
        self._eid_key: list[str] = []
        self._trie: dict[Any, Any] = {}
        # per sentence slot (insertion order)
        self._slot_doc: list[str] = []
        self._slot_pos = array("q")
        self._slot_seq = array("q")
        self._slot_alive = bytearray()
        self._link_slot = array("q")
        self._link_name = array("q")
        self._doc_slots: dict[str, tuple[int, int]] = {}  # doc → (first slot, slots): a document's are contiguous
        self._doc_seq: dict[str, int] = {}
        self._next_seq = 1
        self._in_order = True  # slot order is (seq, position) order
        self._dead = 0
        self._compiled: _Compiled | None = None

    # ------------------------------------------------------------------------------- mutation

    def add(self, doc_id: str, sentences: Iterable[tuple[int, Iterable[str]]], seq: int | None = None) -> None:
        """Add (or replace) a document: ``sentences`` are ``(position, entity names)`` pairs.

        Args:
            doc_id: The document; one already present is replaced whole.
            sentences: Its sentences' entity names (sentences without names may be left out).
            seq: The document's insertion order (ties among equal activations break on it, then on
                position); by default one more than any seen so far.

        Raises:
            TypeError: a name is not a string (nothing is added).
        """
        self.add_many([(doc_id, sentences, seq)])

    def add_many(self, docs: Iterable[tuple[str, Iterable[tuple[int, Iterable[str]]], int | None]]) -> None:
        """:meth:`add` for several ``(doc_id, sentences, seq)`` at once (one lock, one invalidation).

        The cyclic garbage collector is paused while the batch is read: it allocates a few small
        objects per sentence and none of them is garbage, yet on a large heap (the store's rows) every
        collection it triggers walks the heap (measured 2.3× the time of the batch at 100k sentences).
        """
        with gc_paused():
            self._add_many(docs)

    def _add_many(self, docs: Iterable[tuple[str, Iterable[tuple[int, Iterable[str]]], int | None]]) -> None:
        prepared = []
        for doc_id, sentences, seq in docs:
            items = []
            for p, names in sentences:
                clean = [n.strip() if isinstance(n, str) else _not_a_name(n) for n in names]
                items.append((int(p), clean))
            if len(items) > 1:
                items.sort(key=_first)
            prepared.append((doc_id, items, seq))
        with self._lock:
            name_id, names = self._name_id, self._names
            slot_doc, slot_pos, slot_seq, alive = self._slot_doc, self._slot_pos, self._slot_seq, self._slot_alive
            doc_slots, doc_seq = self._doc_slots, self._doc_seq
            link_slot: list[int] = []
            link_name: list[int] = []
            slot = len(slot_doc)
            for doc_id, items, seq in prepared:
                if doc_id in doc_slots:
                    self._remove_locked(doc_id)
                seq = self._next_seq if seq is None else int(seq)
                if seq < self._next_seq - 1 or (seq == self._next_seq - 1 and doc_seq):
                    self._in_order = False  # slots no longer follow (seq, position): queries sort
                if seq >= self._next_seq:
                    self._next_seq = seq + 1
                first = slot
                for position, sentence_names in items:
                    if not sentence_names:
                        continue
                    slot_doc.append(doc_id)
                    slot_pos.append(position)
                    slot_seq.append(seq)
                    alive.append(1)  # (per slot: a replace later in the batch marks these dead)
                    for n in sentence_names:
                        i = name_id.get(n)
                        if i is None:
                            i = name_id[n] = len(names)
                            names.append(n)
                        link_slot.append(slot)
                        link_name.append(i)
                    slot += 1
                doc_slots[doc_id] = (first, slot - first)
                doc_seq[doc_id] = seq
            self._link_slot.extend(link_slot)
            self._link_name.extend(link_name)
            self._compiled = None

    def remove(self, doc_id: str) -> bool:
        """Forget a document; True if it was there."""
        with self._lock:
            found = self._remove_locked(doc_id)
            if found:
                self._compiled = None
                live = len(self._slot_doc) - self._dead
                if self._dead > 4096 and self._dead > live:
                    self._compact()
            return found

    def _remove_locked(self, doc_id: str) -> bool:
        span = self._doc_slots.pop(doc_id, None)
        if span is None:
            return False
        del self._doc_seq[doc_id]
        first, n = span
        self._slot_alive[first:first + n] = bytes(n)
        self._dead += n
        return True

    def _compact(self) -> None:
        """Drop dead slots and their links (slot numbers change, their order does not)."""
        alive = np.frombuffer(bytes(self._slot_alive), dtype=np.uint8).astype(bool)
        new_slot = np.cumsum(alive) - 1
        link_slot = np.array(self._link_slot, dtype=np.int64)
        link_name = np.array(self._link_name, dtype=np.int64)
        keep = alive[link_slot] if link_slot.size else np.zeros(0, dtype=bool)
        self._link_slot = array("q", new_slot[link_slot[keep]].tolist())
        self._link_name = array("q", link_name[keep].tolist())
        live_slots = np.flatnonzero(alive)
        self._slot_doc = [self._slot_doc[i] for i in live_slots.tolist()]
        self._slot_pos = array("q", np.array(self._slot_pos, dtype=np.int64)[live_slots].tolist())
        self._slot_seq = array("q", np.array(self._slot_seq, dtype=np.int64)[live_slots].tolist())
        self._slot_alive = bytearray(b"\x01" * len(self._slot_doc))
        renumber = new_slot.tolist()
        self._doc_slots = {d: ((renumber[f] if n else 0), n) for d, (f, n) in self._doc_slots.items()}
        self._dead = 0

    # ---------------------------------------------------------------------------- persistence

    def to_rows(self) -> list[tuple[str, int, int, str]]:
        """The whole graph as ``(doc_id, seq, position, name)`` rows, one per (sentence, name given).

        Everything else (keys, weights, known names) is derived, so this is all a store must keep.
        """
        with self._lock:
            alive = self._slot_alive
            out = []
            docs, pos, seq, names = self._slot_doc, self._slot_pos, self._slot_seq, self._names
            for s, n in zip(self._link_slot, self._link_name):
                if alive[s]:
                    out.append((docs[s], seq[s], pos[s], names[n]))
            return out

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, int, int, str]]) -> EntityGraph:
        """Rebuild a graph from :meth:`to_rows` output (in any order)."""
        by_doc: dict[str, tuple[int, dict[int, list[str]]]] = {}
        for doc, seq, pos, name in rows:
            entry = by_doc.get(doc)
            if entry is None:
                entry = by_doc[doc] = (int(seq), {})
            entry[1].setdefault(int(pos), []).append(name)
        g = cls()
        docs = sorted(by_doc, key=lambda d: by_doc[d][0])
        for lo in range(0, len(docs), 4096):  # in slices: one huge batch of small lists taxes the GC
            g.add_many([(d, list(by_doc[d][1].items()), by_doc[d][0]) for d in docs[lo:lo + 4096]])
        return g

    # -------------------------------------------------------------------------------- reading

    def __len__(self) -> int:
        """The number of known entities (named by at least one live sentence)."""
        return int(self._snapshot().live.sum())

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        snap = self._snapshot()
        with self._lock:
            e = self._key_eid.get(" ".join(entity_tokens(name)))
        return e is not None and e < snap.live.shape[0] and bool(snap.live[e])

    @property
    def documents(self) -> int:
        """The number of documents added and not removed."""
        return len(self._doc_slots)

    def display_name(self, key: str) -> str:
        """The spelling shown for an entity: its commonest live spelling (ties: the smallest string)."""
        snap = self._snapshot()
        with self._lock:
            e = self._key_eid.get(key)
        if e is None or e >= snap.live.shape[0]:
            return key
        return snap.display_name(e)

    def weight(self, a: str, b: str) -> int:
        """The co-occurrence weight of two entity names (0 when not linked)."""
        snap = self._snapshot()
        with self._lock:
            ea = self._key_eid.get(" ".join(entity_tokens(a)))
            eb = self._key_eid.get(" ".join(entity_tokens(b)))
        if ea is None or eb is None or ea == eb or max(ea, eb) >= snap.live.shape[0]:
            return 0
        lo, hi = snap.adj_ptr[ea], snap.adj_ptr[ea + 1]
        hit = np.flatnonzero(snap.adj_idx[lo:hi] == eb)
        return int(snap.adj_w[lo + hit[0]]) if hit.size else 0

    def edges(self) -> dict[tuple[str, str], int]:
        """Every edge once, ``{(key_a, key_b): weight}`` with ``key_a < key_b`` (for tests and tools)."""
        snap = self._snapshot()
        keys = snap.keys
        src = np.repeat(np.arange(snap.adj_ptr.shape[0] - 1), np.diff(snap.adj_ptr))
        return {(keys[a], keys[b]): int(w) for a, b, w in zip(src.tolist(), snap.adj_idx.tolist(), snap.adj_w.tolist())
                if keys[a] < keys[b]}

    def entity_sentences(self) -> dict[str, set[tuple[str, int]]]:
        """``{key: {(doc_id, position), …}}`` for every known entity (for tests and tools)."""
        snap = self._snapshot()
        out: dict[str, set[tuple[str, int]]] = {}
        for e in np.flatnonzero(snap.live).tolist():
            slots = snap.ent_slots[snap.ent_ptr[e]:snap.ent_ptr[e + 1]]
            out[snap.keys[e]] = set(zip(snap.slot_doc[slots].tolist(), snap.slot_pos[slots].tolist()))
        return out

    def _snapshot(self) -> _Compiled:
        snap = self._compiled
        if snap is not None:
            return snap
        with self._lock:
            if self._compiled is None:
                self._compiled = self._compile()
            return self._compiled

    def _intern_names(self) -> np.ndarray:
        """Entity id of every spelling (normalising the new ones, once each)."""
        name_eid, key_eid = self._name_eid, self._key_eid
        for n in self._names[len(name_eid):]:
            toks = entity_tokens(n)
            if not toks or len(toks) > MAX_NAME_TOKENS:
                name_eid.append(-1)
                continue
            key = " ".join(toks)
            e = key_eid.get(key)
            if e is None:
                e = key_eid[key] = len(self._eid_key)
                self._eid_key.append(key)
                node = self._trie
                for tok in toks:
                    node = node.setdefault(tok, {})
                node[_END] = e
            name_eid.append(e)
        return np.array(name_eid, dtype=np.int64)

    def _compile(self) -> _Compiled:
        name_eid = self._intern_names()
        n_ent = len(self._eid_key)
        alive = np.frombuffer(bytes(self._slot_alive), dtype=np.uint8).astype(bool)
        link_slot = np.array(self._link_slot, dtype=np.int64)
        link_name = np.array(self._link_name, dtype=np.int64)
        link_eid = name_eid[link_name] if link_name.size else link_name
        keep = (alive[link_slot] & (link_eid >= 0)) if link_slot.size else np.zeros(0, dtype=bool)
        link_slot, link_name, link_eid = link_slot[keep], link_name[keep], link_eid[keep]
        # one link per (sentence, entity): the first spelling given wins; slots stay ascending
        pair_key = link_slot * max(1, n_ent) + link_eid
        _, first = np.unique(pair_key, return_index=True)
        first.sort()
        link_slot, link_name, link_eid = link_slot[first], link_name[first], link_eid[first]
        # entity → links (stable: slots ascending within an entity)
        order = np.argsort(link_eid, kind="stable")
        ent_ptr = np.zeros(n_ent + 1, dtype=np.int64)
        if n_ent:
            np.cumsum(np.bincount(link_eid, minlength=n_ent), out=ent_ptr[1:])
        live = np.diff(ent_ptr) > 0
        # co-occurrence: every pair of links of one sentence (links are grouped by slot, ascending)
        if link_slot.size:
            change = np.flatnonzero(np.diff(link_slot)) + 1
            group_end = np.repeat(np.concatenate((change, [link_slot.size])),
                                  np.diff(np.concatenate(([0], change, [link_slot.size]))))
            idx = np.arange(link_slot.size)
            partners = _ranges(idx + 1, group_end)
            sources = np.repeat(idx, group_end - idx - 1)
            a, b = link_eid[sources], link_eid[partners]
        else:
            a = b = np.zeros(0, dtype=np.int64)
        # CSR adjacency, both directions; a weight is how often the (sorted) pair key repeats
        pair_keys, weights = np.unique(np.concatenate((a * n_ent + b, b * n_ent + a)), return_counts=True)
        adj_ptr = np.zeros(n_ent + 1, dtype=np.int64)
        if n_ent:
            np.cumsum(np.bincount(pair_keys // n_ent, minlength=n_ent), out=adj_ptr[1:])
        return _Compiled(
            keys=list(self._eid_key), live=live,
            adj_ptr=adj_ptr, adj_idx=(pair_keys % max(1, n_ent)).astype(np.int64), adj_w=weights.astype(np.float64),
            max_weight=int(weights.max()) if weights.size else 0,
            ent_ptr=ent_ptr, ent_slots=link_slot[order], ent_names=link_name[order], names=list(self._names),
            link_slot=link_slot, link_eid=link_eid,
            slot_doc=np.array(self._slot_doc, dtype=object),
            slot_pos=np.array(self._slot_pos, dtype=np.int64),
            slot_seq=np.array(self._slot_seq, dtype=np.int64),
            in_order=self._in_order,
        )

    # -------------------------------------------------------------------------------- queries

    def find(self, text: str) -> list[FoundEntity]:
        """The known entities named in ``text`` (casefolded, whole words, longest matches), in text order."""
        if not isinstance(text, str):
            raise TypeError(f"GRAPH looks for entities in text, not {type(text).__name__}")
        with self._lock:
            snap = self._snapshot()
            return self._find(text, snap)

    def _find(self, text: str, snap: _Compiled) -> list[FoundEntity]:
        toks = token_spans(text)
        live = snap.live
        n_live = live.shape[0]
        matches: list[tuple[int, int, int]] = []
        trie = self._trie
        n = len(toks)
        for i in range(n):
            node = trie.get(toks[i][0])
            j = i + 1
            while node is not None:
                e = node.get(_END)
                if e is not None and e < n_live and live[e]:
                    matches.append((i, j, e))
                if j >= n or j - i >= MAX_NAME_TOKENS:
                    break
                node = node.get(toks[j][0])
                j += 1
        # Keep an occurrence unless a longer one contains it: sorted by start, longest first, it is
        # contained exactly when an earlier one in this order reaches as far.
        matches.sort(key=lambda m: (m[0], -m[1]))
        reach = -1
        kept: dict[int, tuple[int, int]] = {}
        for i, j, e in matches:
            if reach < j:
                kept.setdefault(e, (i, j))
            reach = max(reach, j)
        return [FoundEntity(snap.keys[e], snap.display_name(e), toks[i][1], toks[j - 1][2])
                for e, (i, j) in sorted(kept.items(), key=lambda kv: kv[1])]

    def activate(self, text: str, hops: int = 1, decay: float = 0.5) -> Activation:
        """Spreading activation from the entities found in ``text`` (see the module docstring).

        Raises:
            ValueError: ``hops`` is not a whole number from 0 to :data:`MAX_HOPS` or ``decay`` not a number in [0, 1].
            TypeError: ``text`` is not a string.
        """
        hops, decay = check_spread(hops, decay)
        if not isinstance(text, str):
            raise TypeError(f"GRAPH looks for entities in text, not {type(text).__name__}")
        with self._lock:  # the snapshot and the entities found come from the same state
            snap = self._snapshot()
            found = self._find(text, snap)
            seeds = np.array([self._key_eid[f.key] for f in found], dtype=np.int64)
        n_ent = snap.live.shape[0]
        act = np.zeros(n_ent, dtype=np.float64)
        act[seeds] = 1.0
        raised_at: list[np.ndarray] = [seeds]
        raised_val: list[np.ndarray] = [np.ones(seeds.size)]
        frontier = seeds
        W = float(snap.max_weight)
        deadline = current_deadline()  # the search's: a walk over a big graph stops at it
        for hop in range(hops):
            if deadline is not None and deadline.expired():
                raise NLQLTimeoutError(f"GRAPH ran out of time ({deadline.timeout} s) after {hop} of {hops} hops",
                                       hint="raise timeout= or ask for fewer hops")
            if frontier.size == 0 or W == 0.0:
                frontier = frontier[:0]
                raised_at.append(frontier)
                raised_val.append(np.zeros(0))
                continue
            starts, ends = snap.adj_ptr[frontier], snap.adj_ptr[frontier + 1]
            idx = _ranges(starts, ends)
            cols = snap.adj_idx[idx]
            # (decay × w) / W, then × a(u): the same operations, in the same order, as the SQL
            cand = np.repeat(act[frontier], ends - starts) * ((decay * snap.adj_w[idx]) / W)
            best = np.zeros(n_ent, dtype=np.float64)
            np.maximum.at(best, cols, cand)
            frontier = np.flatnonzero(best > act)
            act[frontier] = best[frontier]
            raised_at.append(frontier)
            raised_val.append(act[frontier])
        active = np.flatnonzero(act > 0)
        starts, ends = snap.ent_ptr[active], snap.ent_ptr[active + 1]
        reached = int((ends - starts).sum())
        row_best = np.zeros(snap.slot_pos.shape[0], dtype=np.float64)
        if reached * _FULL_PASS > snap.link_eid.shape[0]:
            # many sentences reached: one pass over every link is cheaper than gathering most of them
            np.maximum.at(row_best, snap.link_slot, act[snap.link_eid])
        elif reached:
            np.maximum.at(row_best, snap.ent_slots[_ranges(starts, ends)], np.repeat(act[active], ends - starts))
        hit = np.flatnonzero(row_best > 0)
        values = row_best[hit]
        if not snap.in_order:  # documents were written out of seq order: sort by (seq, position)
            order = np.lexsort((snap.slot_pos[hit], snap.slot_seq[hit]))
            hit, values = hit[order], values[order]
        keys = snap.keys
        per_hop = []
        for h, (ids, vals) in enumerate(zip(raised_at, raised_val)):
            count = int(ids.size)
            if count > _DETAIL:  # only rows tied with the tenth best can make the list
                cut = np.partition(-vals, _DETAIL - 1)[_DETAIL - 1]
                keep = -vals <= cut
                ids, vals = ids[keep], vals[keep]
            # ties break on the key in code-point order, as PostgreSQL's COLLATE "C" does
            best_few = sorted(zip((-vals).tolist(), (keys[e] for e in ids.tolist()), ids.tolist()))[:_DETAIL]
            per_hop.append(HopDetail(h, count, tuple((snap.display_name(e), -v) for v, _, e in best_few)))
        return Activation(
            text=text, hops=hops, decay=decay, max_weight=snap.max_weight, found=tuple(found),
            per_hop=tuple(per_hop), slots=hit, values=values, entity_ids=active, entity_values=act[active],
            snapshot=snap, row_best=row_best,
        )

    def values_for(self, activation: Activation, pairs: Sequence[tuple[str, int]]) -> np.ndarray:
        """The activation of each ``(doc_id, position)`` (NaN where it has none)."""
        lookup = activation.as_dict()
        return np.array([lookup.get((d, int(p)), np.nan) for d, p in pairs], dtype=np.float64)


# ------------------------------------------------------------------------------------------ SQLite

#: The directory store's table (in its SQLite file): the canonical rows of :meth:`EntityGraph.to_rows`.
SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS entity_links (
  doc_id   TEXT NOT NULL,
  seq      INTEGER NOT NULL,
  position INTEGER NOT NULL,
  name     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entity_links_doc ON entity_links(doc_id);
"""


def sqlite_save(conn: Any, doc_id: str, seq: int, sentences: Iterable[tuple[int, Iterable[str]]]) -> None:
    """Write one document's entity rows (replacing its old ones) on a ``sqlite3`` connection.

    Runs inside the caller's transaction, so the rows commit (or roll back) with the document.
    """
    conn.execute("DELETE FROM entity_links WHERE doc_id = ?", (doc_id,))
    conn.executemany(
        "INSERT INTO entity_links (doc_id, seq, position, name) VALUES (?, ?, ?, ?)",
        [(doc_id, int(seq), int(p), name) for p, names in sentences for _, name in sentence_entities(names)],
    )


def sqlite_load(conn: Any) -> EntityGraph:
    """The graph kept in a SQLite file by :func:`sqlite_save`."""
    return EntityGraph.from_rows(conn.execute("SELECT doc_id, seq, position, name FROM entity_links"))
