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
does not depend on scanning order, so SQL computes the same set (:func:`postgres_activation`).
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
:func:`sqlite_save`, :func:`sqlite_load`. On PostgreSQL the graph lives in two tables
(:func:`postgres_schema`) kept in step by :func:`postgres_add` / :func:`postgres_remove`, and
:func:`postgres_activation` computes the same activation in one statement.

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
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nlql.text.bm25 import _ranges
from nlql.text.entities import MAX_NAME_TOKENS, entity_tokens, token_spans

__all__ = [
    "Activation",
    "EntityGraph",
    "FoundEntity",
    "HopDetail",
    "SQLITE_SCHEMA",
    "SqlStatement",
    "SqlValue",
    "check_spread",
    "postgres_activation",
    "postgres_add",
    "postgres_hop_detail",
    "postgres_remove",
    "postgres_schema",
    "sentence_entities",
    "sqlite_load",
    "sqlite_save",
]

_END = None  # trie key of "a name ends here" (no token is None)
_DETAIL = 10  # entities listed per hop in explain


def sentence_entities(names: Iterable[str]) -> list[tuple[str, str]]:
    """The (key, name) pairs one sentence contributes: each key once (first spelling kept), in order.

    Names that normalise to nothing or to more than ``MAX_NAME_TOKENS`` words are left out. Every
    store uses this, so they agree on what a sentence names.

    >>> sentence_entities(["Russell", "RUSSELL", "  ", "G. E. Moore"])
    [('russell', 'Russell'), ('g e moore', 'G. E. Moore')]
    """
    out: dict[str, str] = {}
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"an entity name must be a string, not {type(name).__name__}")
        toks = entity_tokens(name)
        if not toks or len(toks) > MAX_NAME_TOKENS:
            continue
        out.setdefault(" ".join(toks), name.strip())
    return list(out.items())


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


@dataclass(frozen=True)
class Activation:
    """The result of :meth:`EntityGraph.activate`.

    Attributes:
        text: The text entities were looked for in.
        hops: Steps spread.
        decay: Factor per step.
        max_weight: The largest edge weight ``W`` (0 in a graph without edges).
        found: The entities found in the text (activation 1.0), in text order.
        per_hop: Hop 0 (the found entities) and every later hop: what it raised.
        entities: Every activated entity's key → activation.
        doc_ids: The activated sentences' documents (object array), in insertion order.
        positions: Their positions (int64).
        seqs: Their documents' ``seq`` (int64): the insertion order the rows are sorted by.
        values: Their activation (float64, in (0, 1]).
    """

    text: str
    hops: int
    decay: float
    max_weight: int
    found: tuple[FoundEntity, ...]
    per_hop: tuple[HopDetail, ...]
    entities: dict[str, float]
    doc_ids: np.ndarray
    positions: np.ndarray
    seqs: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def pairs(self) -> list[tuple[str, int]]:
        """The activated sentences as ``(doc_id, position)``, in insertion order."""
        return list(zip(self.doc_ids.tolist(), self.positions.tolist()))

    def as_dict(self) -> dict[tuple[str, int], float]:
        """``{(doc_id, position): activation}``."""
        return dict(zip(self.pairs(), self.values.tolist()))

    def top(self, k: int) -> np.ndarray:
        """Indices (into the row arrays) of the ``k`` best rows: value descending, then insertion order."""
        if k <= 0 or not len(self):
            return np.zeros(0, dtype=np.int64)
        if k >= len(self):
            return np.lexsort((self.positions, self.seqs, -self.values))
        kth = np.partition(-self.values, k - 1)[k - 1]
        cand = np.flatnonzero(-self.values <= kth)  # every row tied with the k-th stays in the race
        order = np.lexsort((self.positions[cand], self.seqs[cand], -self.values[cand]))
        return cand[order[:k]]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary for explain: entities found, activation per hop, rows reached."""
        return {
            "text": self.text,
            "hops": self.hops,
            "decay": self.decay,
            "max_weight": self.max_weight,
            "found": [e.name for e in self.found],
            "per_hop": [h.to_dict() for h in self.per_hop],
            "entities": len(self.entities),
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


@dataclass(frozen=True)
class _Compiled:
    """An immutable snapshot of the graph as arrays (what queries read)."""

    live: np.ndarray  # entity id → live (named by some live sentence)
    adj_ptr: np.ndarray  # CSR entity → neighbours
    adj_idx: np.ndarray
    adj_w: np.ndarray  # float64 weights
    max_weight: int
    ent_ptr: np.ndarray  # CSR entity → sentence slots
    ent_slots: np.ndarray
    slot_doc: np.ndarray  # object
    slot_pos: np.ndarray
    slot_seq: np.ndarray


def check_spread(hops: Any, decay: Any) -> tuple[int, float]:
    """Validate ``hops`` (an int ≥ 0) and ``decay`` (a number in [0, 1]); raise ValueError otherwise."""
    if isinstance(hops, bool) or not isinstance(hops, (int, np.integer)) or hops < 0:
        raise ValueError(f"hops must be a whole number >= 0, not {hops!r}")
    if isinstance(decay, bool) or not isinstance(decay, (int, float, np.floating, np.integer)):
        raise ValueError(f"decay must be a number between 0 and 1, not {decay!r}")
    d = float(decay)
    if not (0.0 <= d <= 1.0) or math.isnan(d):
        raise ValueError(f"decay must be between 0 and 1, not {decay!r}")
    return int(hops), d


class EntityGraph:
    """Entities, the sentences that name them and their co-occurrence, per document (see the module doc).

    Thread-safe: writes and compilation hold an internal lock; a query works on an immutable snapshot.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._reset()

    def _reset(self) -> None:
        self._key_eid: dict[str, int] = {}
        self._eid_key: list[str] = []
        self._df: list[int] = []  # live sentences naming each entity
        self._spell: list[Counter[str]] = []  # live spellings of each entity
        self._trie: dict[Any, Any] = {}
        # per sentence slot (insertion order)
        self._slot_doc: list[str] = []
        self._slot_pos = array("q")
        self._slot_seq = array("q")
        self._slot_alive = bytearray()
        self._slot_eids: list[tuple[int, ...]] = []
        self._slot_names: list[tuple[str, ...]] = []
        # append-only link buffers: (slot, entity) and (slot, a, b) with a < b
        self._link_slot = array("q")
        self._link_eid = array("q")
        self._pair_slot = array("q")
        self._pair_a = array("q")
        self._pair_b = array("q")
        self._doc_slots: dict[str, list[int]] = {}
        self._doc_seq: dict[str, int] = {}
        self._next_seq = 1
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
        """
        items = [(int(p), sentence_entities(names)) for p, names in sentences]
        with self._lock:
            self._remove_locked(doc_id)
            if seq is None:
                seq = self._next_seq
            seq = int(seq)
            self._next_seq = max(self._next_seq, seq + 1)
            slots: list[int] = []
            for position, pairs in items:
                if not pairs:
                    continue
                slot = len(self._slot_doc)
                eids = tuple(self._intern(k) for k, _ in pairs)
                names = tuple(n for _, n in pairs)
                self._slot_doc.append(doc_id)
                self._slot_pos.append(position)
                self._slot_seq.append(seq)
                self._slot_alive.append(1)
                self._slot_eids.append(eids)
                self._slot_names.append(names)
                for e, n in zip(eids, names):
                    self._df[e] += 1
                    self._spell[e][n] += 1
                    self._link_slot.append(slot)
                    self._link_eid.append(e)
                ordered = sorted(eids)
                for i, a in enumerate(ordered):
                    for b in ordered[i + 1:]:
                        self._pair_slot.append(slot)
                        self._pair_a.append(a)
                        self._pair_b.append(b)
                slots.append(slot)
            self._doc_slots[doc_id] = slots
            self._doc_seq[doc_id] = seq
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
        slots = self._doc_slots.pop(doc_id, None)
        if slots is None:
            return False
        del self._doc_seq[doc_id]
        for slot in slots:
            self._slot_alive[slot] = 0
            for e, n in zip(self._slot_eids[slot], self._slot_names[slot]):
                self._df[e] -= 1
                spell = self._spell[e]
                spell[n] -= 1
                if not spell[n]:
                    del spell[n]
        self._dead += len(slots)
        return True

    def _intern(self, key: str) -> int:
        e = self._key_eid.get(key)
        if e is None:
            e = len(self._eid_key)
            self._key_eid[key] = e
            self._eid_key.append(key)
            self._df.append(0)
            self._spell.append(Counter())
            node = self._trie
            for tok in key.split(" "):
                node = node.setdefault(tok, {})
            node[_END] = e
        return e

    def _compact(self) -> None:
        """Rebuild from the live sentences only (renumbers slots and entities, order kept)."""
        rows = list(self._iter_rows())
        seqs = dict(self._doc_seq)
        docs = list(self._doc_slots)
        next_seq = self._next_seq
        self._reset()
        self._load(rows, seqs, docs)
        self._next_seq = max(self._next_seq, next_seq)

    # ---------------------------------------------------------------------------- persistence

    def _iter_rows(self) -> Iterator[tuple[str, int, int, str]]:
        alive = self._slot_alive
        for slot, doc in enumerate(self._slot_doc):
            if alive[slot]:
                pos, seq = self._slot_pos[slot], self._slot_seq[slot]
                for name in self._slot_names[slot]:
                    yield doc, seq, pos, name

    def to_rows(self) -> list[tuple[str, int, int, str]]:
        """The whole graph as ``(doc_id, seq, position, name)`` rows, one per (sentence, entity).

        Everything else (keys, weights, known names) is derived, so this is all a store must keep.
        """
        with self._lock:
            return list(self._iter_rows())

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, int, int, str]]) -> EntityGraph:
        """Rebuild a graph from :meth:`to_rows` output (in any order)."""
        g = cls()
        with g._lock:
            g._load(list(rows), None, None)
        return g

    def _load(self, rows: list[tuple[str, int, int, str]], seqs: dict[str, int] | None,
              docs: list[str] | None) -> None:
        by_doc: dict[str, tuple[int, dict[int, list[str]]]] = {}
        for doc, seq, pos, name in rows:
            entry = by_doc.get(doc)
            if entry is None:
                entry = by_doc[doc] = (int(seq), {})
            entry[1].setdefault(int(pos), []).append(name)
        if docs is not None:  # documents that name no entity are remembered too
            for d in docs:
                by_doc.setdefault(d, ((seqs or {}).get(d, 0), {}))
        for doc in sorted(by_doc, key=lambda d: by_doc[d][0]):
            seq, sentences = by_doc[doc]
            self.add(doc, sorted(sentences.items()), seq=seq)

    # -------------------------------------------------------------------------------- reading

    def __len__(self) -> int:
        """The number of known entities (named by at least one live sentence)."""
        with self._lock:
            return sum(1 for d in self._df if d > 0)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        with self._lock:
            e = self._key_eid.get(" ".join(entity_tokens(name)))
            return e is not None and self._df[e] > 0

    @property
    def documents(self) -> int:
        """The number of documents added and not removed."""
        return len(self._doc_slots)

    def display_name(self, key: str) -> str:
        """The spelling shown for an entity: its commonest live spelling (ties: the smallest string)."""
        with self._lock:
            e = self._key_eid.get(key)
            if e is None or not self._spell[e]:
                return key
            return self._display(e)

    def _display(self, e: int) -> str:
        spell = self._spell[e]
        best = max(spell.values())
        return min(n for n, c in spell.items() if c == best)

    def weight(self, a: str, b: str) -> int:
        """The co-occurrence weight of two entity names (0 when not linked)."""
        snap = self._snapshot()
        with self._lock:
            ea = self._key_eid.get(" ".join(entity_tokens(a)))
            eb = self._key_eid.get(" ".join(entity_tokens(b)))
        if ea is None or eb is None or ea == eb or ea >= snap.live.shape[0]:
            return 0
        lo, hi = snap.adj_ptr[ea], snap.adj_ptr[ea + 1]
        hit = np.flatnonzero(snap.adj_idx[lo:hi] == eb)
        return int(snap.adj_w[lo + hit[0]]) if hit.size else 0

    def edges(self) -> dict[tuple[str, str], int]:
        """Every edge once, ``{(key_a, key_b): weight}`` with ``key_a < key_b`` (for tests and tools)."""
        snap = self._snapshot()
        with self._lock:
            keys = list(self._eid_key)
        out: dict[tuple[str, str], int] = {}
        src = np.repeat(np.arange(snap.adj_ptr.shape[0] - 1), np.diff(snap.adj_ptr))
        for a, b, w in zip(src.tolist(), snap.adj_idx.tolist(), snap.adj_w.tolist()):
            ka, kb = keys[a], keys[b]
            if ka < kb:
                out[(ka, kb)] = int(w)
        return out

    def entity_sentences(self) -> dict[str, set[tuple[str, int]]]:
        """``{key: {(doc_id, position), …}}`` for every known entity (for tests and tools)."""
        with self._lock:
            out: dict[str, set[tuple[str, int]]] = {}
            for slot, doc in enumerate(self._slot_doc):
                if self._slot_alive[slot]:
                    for e in self._slot_eids[slot]:
                        out.setdefault(self._eid_key[e], set()).add((doc, self._slot_pos[slot]))
            return out

    def _snapshot(self) -> _Compiled:
        snap = self._compiled
        if snap is not None:
            return snap
        with self._lock:
            if self._compiled is None:
                self._compiled = self._compile()
            return self._compiled

    def _compile(self) -> _Compiled:
        from scipy.sparse import csr_matrix

        n_ent = len(self._eid_key)
        alive = np.frombuffer(bytes(self._slot_alive), dtype=np.uint8).astype(bool)
        live = np.asarray(self._df, dtype=np.int64) > 0 if n_ent else np.zeros(0, dtype=bool)
        link_slot = np.array(self._link_slot, dtype=np.int64)
        link_eid = np.array(self._link_eid, dtype=np.int64)
        keep = alive[link_slot] if link_slot.size else np.zeros(0, dtype=bool)
        link_slot, link_eid = link_slot[keep], link_eid[keep]
        order = np.argsort(link_eid, kind="stable")  # slots stay ascending within an entity
        ent_slots = link_slot[order]
        ent_ptr = np.zeros(n_ent + 1, dtype=np.int64)
        if n_ent:
            np.cumsum(np.bincount(link_eid, minlength=n_ent), out=ent_ptr[1:])
        pair_slot = np.array(self._pair_slot, dtype=np.int64)
        keep = alive[pair_slot] if pair_slot.size else np.zeros(0, dtype=bool)
        a = np.array(self._pair_a, dtype=np.int64)[keep]
        b = np.array(self._pair_b, dtype=np.int64)[keep]
        adj = csr_matrix((np.ones(2 * a.size, dtype=np.float64), (np.concatenate((a, b)), np.concatenate((b, a)))),
                         shape=(n_ent, n_ent))
        adj.sum_duplicates()
        max_weight = int(adj.data.max()) if adj.nnz else 0
        return _Compiled(
            live=live,
            adj_ptr=adj.indptr.astype(np.int64), adj_idx=adj.indices.astype(np.int64), adj_w=adj.data,
            max_weight=max_weight, ent_ptr=ent_ptr, ent_slots=ent_slots,
            slot_doc=np.array(self._slot_doc, dtype=object),
            slot_pos=np.array(self._slot_pos, dtype=np.int64),
            slot_seq=np.array(self._slot_seq, dtype=np.int64),
        )

    # -------------------------------------------------------------------------------- queries

    def find(self, text: str) -> list[FoundEntity]:
        """The known entities named in ``text`` (casefolded, whole words, longest matches), in text order."""
        if not isinstance(text, str):
            raise TypeError(f"GRAPH looks for entities in text, not {type(text).__name__}")
        toks = token_spans(text)
        with self._lock:
            df = self._df
            matches: list[tuple[int, int, int]] = []
            trie = self._trie
            n = len(toks)
            for i in range(n):
                node = trie.get(toks[i][0])
                j = i + 1
                while node is not None:
                    e = node.get(_END)
                    if e is not None and df[e] > 0:
                        matches.append((i, j, e))
                    if j >= n or j - i >= MAX_NAME_TOKENS:
                        break
                    node = node.get(toks[j][0])
                    j += 1
            # Keep an occurrence unless a longer one contains it: sorted by start, longest first, it
            # is contained exactly when an earlier one in this order reaches as far.
            matches.sort(key=lambda m: (m[0], -m[1]))
            reach = -1
            kept: dict[int, tuple[int, int]] = {}
            for i, j, e in matches:
                if reach < j:
                    kept.setdefault(e, (i, j))
                reach = max(reach, j)
            return [FoundEntity(self._eid_key[e], self._display(e), toks[i][1], toks[j - 1][2])
                    for e, (i, j) in sorted(kept.items(), key=lambda kv: kv[1])]

    def activate(self, text: str, hops: int = 1, decay: float = 0.5) -> Activation:
        """Spreading activation from the entities found in ``text`` (see the module docstring).

        Raises:
            ValueError: ``hops`` is not a whole number >= 0 or ``decay`` not a number in [0, 1].
            TypeError: ``text`` is not a string.
        """
        hops, decay = check_spread(hops, decay)
        with self._lock:  # the snapshot and the entities found come from the same state
            snap = self._snapshot()
            found = self.find(text)
            seeds = np.array([self._key_eid[f.key] for f in found], dtype=np.int64)
        n_ent = snap.live.shape[0]
        act = np.zeros(n_ent, dtype=np.float64)
        act[seeds] = 1.0
        raised_at: list[np.ndarray] = [seeds]
        raised_val: list[np.ndarray] = [np.ones(seeds.size)]
        frontier = seeds
        W = float(snap.max_weight)
        for _ in range(hops):
            if frontier.size == 0 or W == 0.0:
                raised_at.append(frontier[:0])
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
            raised_val.append(act[frontier].copy())
        active = np.flatnonzero(act > 0)
        starts, ends = snap.ent_ptr[active], snap.ent_ptr[active + 1]
        idx = _ranges(starts, ends)
        slots = snap.ent_slots[idx]
        row_best = np.zeros(snap.slot_pos.shape[0], dtype=np.float64)
        if slots.size:
            np.maximum.at(row_best, slots, np.repeat(act[active], ends - starts))
        hit = np.flatnonzero(row_best > 0)
        # slots are in write order; a replaced document is written anew with a later seq
        order = np.lexsort((snap.slot_pos[hit], snap.slot_seq[hit]))
        hit = hit[order]
        with self._lock:
            keys = self._eid_key
            entities = {keys[e]: float(act[e]) for e in active.tolist()}
            per_hop = []
            for h, (ids, vals) in enumerate(zip(raised_at, raised_val)):
                if ids.size > _DETAIL:  # only rows tied with the tenth best can make the list
                    cut = np.partition(-vals, _DETAIL - 1)[_DETAIL - 1]
                    keep = -vals <= cut
                    ids, vals = ids[keep], vals[keep]
                # ties break on the key in code-point order, as PostgreSQL's COLLATE "C" does
                best = sorted(zip((-vals).tolist(), (keys[e] for e in ids.tolist()), ids.tolist()))[:_DETAIL]
                top = tuple((self._display(e), -v) for v, _, e in best)
                per_hop.append(HopDetail(h, int(raised_at[h].size), top))
        return Activation(
            text=text, hops=hops, decay=decay, max_weight=snap.max_weight, found=tuple(found),
            per_hop=tuple(per_hop), entities=entities,
            doc_ids=snap.slot_doc[hit], positions=snap.slot_pos[hit], seqs=snap.slot_seq[hit],
            values=row_best[hit],
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


# -------------------------------------------------------------------------------------- PostgreSQL


@dataclass(frozen=True, slots=True)
class SqlValue:
    """A bound value inside a :class:`SqlStatement` (never formatted into the text)."""

    value: Any
    cast: str | None = None
    label: str | None = None


@dataclass(frozen=True)
class SqlStatement:
    """SQL as literal text interleaved with :class:`SqlValue` parts.

    The SQL layer maps each part to its own ``Param`` (``nlql.sql.binder``) one to one, so the binder
    numbers placeholders itself; :meth:`pyformat` renders it for psycopg directly.
    """

    parts: tuple[str | SqlValue, ...] = field(default_factory=tuple)

    def pyformat(self) -> tuple[str, list[Any]]:
        """``(text with %s placeholders, values)`` for ``psycopg``'s ``cursor.execute``."""
        text, values = [], []
        for p in self.parts:
            if isinstance(p, SqlValue):
                text.append("%s" + (f"::{p.cast}" if p.cast else ""))
                values.append(p.value)
            else:
                text.append(p.replace("%", "%%"))
        return "".join(text), values

    def text_only(self) -> str:
        """The text with every value shown as ``?`` (for goldens and messages)."""
        return "".join("?" if isinstance(p, SqlValue) else p for p in self.parts)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _tables(prefix: str) -> tuple[str, str]:
    if not isinstance(prefix, str) or not prefix:
        raise ValueError("the table prefix must be a non-empty string")
    return _q(f"{prefix}_entity_links"), _q(f"{prefix}_entity_edges")


def postgres_schema(prefix: str = "nlql") -> list[str]:
    """DDL for the graph's two tables (idempotent).

    ``<prefix>_entity_links(doc_id, position, entity, name)``: one row per (sentence, entity key),
    ``name`` the spelling; ``<prefix>_entity_edges(a, b, weight)``: every edge in both directions.
    """
    links, edges = _tables(prefix)
    return [
        f"CREATE TABLE IF NOT EXISTS {links} (doc_id text NOT NULL, position integer NOT NULL, "
        "entity text NOT NULL, name text NOT NULL, PRIMARY KEY (doc_id, position, entity))",
        f"CREATE INDEX IF NOT EXISTS {_q(prefix + '_entity_links_entity')} ON {links} (entity)",
        f"CREATE TABLE IF NOT EXISTS {edges} (a text NOT NULL, b text NOT NULL, weight bigint NOT NULL, "
        "PRIMARY KEY (a, b))",
    ]


def _pairs_sql(links: str, doc_ids: SqlValue) -> tuple[str | SqlValue, ...]:
    return (f"SELECT l1.entity AS a, l2.entity AS b, count(*) AS n FROM {links} l1 JOIN {links} l2 "
            "ON l2.doc_id = l1.doc_id AND l2.position = l1.position AND l2.entity <> l1.entity "
            "WHERE l1.doc_id = ANY(", doc_ids, ") GROUP BY l1.entity, l2.entity")


def postgres_add(prefix: str, docs: Sequence[tuple[str, Iterable[tuple[int, Iterable[str]]]]]) -> list[SqlStatement]:
    """Statements that add documents' entities: ``docs`` are ``(doc_id, [(position, names), …])``.

    Run :func:`postgres_remove` for the same ids first (in the same transaction) when they may exist.
    """
    links, edges = _tables(prefix)
    d, p, k, n = [], [], [], []
    for doc_id, sentences in docs:
        for position, names in sentences:
            for key, name in sentence_entities(names):
                d.append(doc_id)
                p.append(int(position))
                k.append(key)
                n.append(name)
    if not d:
        return []
    ids = SqlValue(sorted(set(d)), "text[]", "documents")
    return [
        SqlStatement((f"INSERT INTO {links} (doc_id, position, entity, name) SELECT * FROM unnest(",
                      SqlValue(d, "text[]"), ", ", SqlValue(p, "integer[]"), ", ", SqlValue(k, "text[]"), ", ",
                      SqlValue(n, "text[]"), ")")),
        SqlStatement((f"INSERT INTO {edges} (a, b, weight) ", *_pairs_sql(links, ids),
                      f" ON CONFLICT (a, b) DO UPDATE SET weight = {edges}.weight + EXCLUDED.weight")),
    ]


def postgres_remove(prefix: str, doc_ids: Sequence[str]) -> list[SqlStatement]:
    """Statements that remove documents' entities and take their sentences off the edge weights."""
    links, edges = _tables(prefix)
    ids = SqlValue(list(doc_ids), "text[]", "documents")
    return [
        SqlStatement(("WITH gone AS (", *_pairs_sql(links, ids), "), "
                      f"dropped AS (DELETE FROM {edges} e USING gone g WHERE e.a = g.a AND e.b = g.b "
                      "AND e.weight <= g.n RETURNING e.a) "
                      f"UPDATE {edges} e SET weight = e.weight - g.n FROM gone g "
                      "WHERE e.a = g.a AND e.b = g.b AND e.weight > g.n")),
        SqlStatement((f"DELETE FROM {links} WHERE doc_id = ANY(", ids, ")")),
    ]


def _candidates(text: str) -> tuple[list[str], list[int], list[int]]:
    """Every run of up to ``MAX_NAME_TOKENS`` words of ``text`` as (key, first word, end word)."""
    toks = [t for t, _, _ in token_spans(text)]
    keys, starts, ends = [], [], []
    for i in range(len(toks)):
        for j in range(i + 1, min(len(toks), i + MAX_NAME_TOKENS) + 1):
            keys.append(" ".join(toks[i:j]))
            starts.append(i)
            ends.append(j)
    return keys, starts, ends


def _activation_ctes(prefix: str, text: str, hops: int, decay: float) -> tuple[str | SqlValue, ...]:
    hops, decay = check_spread(hops, decay)
    links, edges = _tables(prefix)
    keys, starts, ends = _candidates(text)
    d = SqlValue(decay, "float8", "decay")
    parts: list[str | SqlValue] = [
        "WITH cand(entity, i, j) AS (SELECT * FROM unnest(", SqlValue(keys, "text[]", "words of the text"), ", ",
        SqlValue(starts, "integer[]"), ", ", SqlValue(ends, "integer[]"), ")), ",
        f"known AS (SELECT c.entity, c.i, c.j FROM cand c WHERE EXISTS (SELECT 1 FROM {links} l "
        "WHERE l.entity = c.entity)), ",
        "seeds AS (SELECT DISTINCT k.entity FROM known k WHERE NOT EXISTS (SELECT 1 FROM known o "
        "WHERE o.i <= k.i AND o.j >= k.j AND o.j - o.i > k.j - k.i)), ",
        f"mx AS (SELECT max(weight)::float8 AS w FROM {edges}), ",
        "act0 AS (SELECT entity, 1.0::float8 AS act FROM seeds)",
    ]
    # One CTE per hop (hops is a plan-time constant): a recursive CTE would walk every path, and
    # PostgreSQL forbids the per-step max() in a recursive term.
    for h in range(1, hops + 1):
        parts += [
            f", act{h} AS (SELECT entity, max(act) AS act FROM (SELECT entity, act FROM act{h - 1} UNION ALL "
            f"SELECT e.b, p.act * ((", d, f" * e.weight) / mx.w) FROM act{h - 1} p JOIN {edges} e ON e.a = p.entity "
            "CROSS JOIN mx) s GROUP BY entity HAVING max(act) > 0)",
        ]
    return tuple(parts)


def postgres_activation(prefix: str, text: str, hops: int = 1, decay: float = 0.5) -> SqlStatement:
    """One statement computing GRAPH(text, hops, decay) per sentence: rows ``(doc_id, position, activation)``.

    The same activation as :meth:`EntityGraph.activate`, bit for bit (the same float operations in the
    same order). The SQL layer can take everything before the final ``SELECT`` as CTEs of a hybrid
    statement (the last CTE, ``graph_rows``, is the arm) and join it to the units on (doc_id, position).
    """
    hops, decay = check_spread(hops, decay)
    links, _ = _tables(prefix)
    return SqlStatement((
        *_activation_ctes(prefix, text, hops, decay),
        f", graph_rows AS (SELECT l.doc_id, l.position, max(a.act) AS activation FROM {links} l "
        f"JOIN act{hops} a ON a.entity = l.entity GROUP BY l.doc_id, l.position) "
        "SELECT doc_id, position, activation FROM graph_rows ORDER BY doc_id, position",
    ))


def postgres_hop_detail(prefix: str, text: str, hops: int = 1, decay: float = 0.5) -> SqlStatement:
    """For explain on PostgreSQL: rows ``(hop, entity, name, activation)`` of what each hop raised.

    Hop 0 is the entities found in the text. ``name`` is the commonest spelling (ties: the smallest
    in code-point order), as :meth:`EntityGraph.display_name`.
    """
    hops, decay = check_spread(hops, decay)
    links, _ = _tables(prefix)
    raised = ["SELECT 0 AS hop, entity, act FROM act0"]
    for h in range(1, hops + 1):
        raised.append(f"SELECT {h}, c.entity, c.act FROM act{h} c LEFT JOIN act{h - 1} p ON p.entity = c.entity "
                      "WHERE p.act IS NULL OR c.act > p.act")
    return SqlStatement((
        *_activation_ctes(prefix, text, hops, decay),
        ", raised AS (" + " UNION ALL ".join(raised) + "), "
        "spell AS (SELECT entity, name, row_number() OVER (PARTITION BY entity ORDER BY count(*) DESC, "
        f'name COLLATE "C") AS rn FROM {links} WHERE entity IN (SELECT entity FROM raised) GROUP BY entity, name) '
        "SELECT r.hop, r.entity, s.name, r.act FROM raised r JOIN spell s ON s.entity = r.entity AND s.rn = 1 "
        'ORDER BY r.hop, r.act DESC, r.entity COLLATE "C"',
    ))
