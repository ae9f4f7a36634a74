"""GRAPH's SQL over a store's two entity tables, in any dialect's spelling, on the shared binder.

The algorithm (finding entities, spreading activation) and its exact semantics are
:mod:`nlql.text.graph`; this module states the same computation as SQL, so a store whose dialect sets
``GRAPH_CTE`` answers GRAPH in the database with the same values bit for bit (the same float operations
in the same order). Every statement is a :class:`~nlql.sql.binder.Fragment` whose values are
:class:`~nlql.sql.binder.Param` parts; casts, array membership and the rows of parallel arrays are the
dialect's hooks (``cast``, ``in_array``, ``array_rows``, ``TRANSFORMS["text_order"]``), never spelled here.

Tables (:func:`schema`): ``<p>_entity_links(doc_id, position, entity, name)``, one row per (sentence,
entity key), ``name`` the spelling; ``<p>_entity_edges(a, b, weight)``, every edge in both directions.
Writes: :func:`remove` then :func:`add` for documents being replaced, in the write's transaction (a
store that bulk-loads the links runs :func:`add_edges`, or :func:`edges_from` over its staged rows, after).
Reads: :func:`activation` (rows ``doc_id, position, activation``), :func:`ctes` (the same as CTEs of a
hybrid statement, the last one ``graph_rows``) and :func:`hop_detail` (what each hop raised, for explain).

The dialect is any object with the spelling hooks of :class:`~nlql.sql.dialect.Dialect` (this module
does not import it: the dialect imports this one).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from nlql.sql.binder import Fragment, Param, sql
from nlql.text.entities import MAX_NAME_TOKENS, token_spans
from nlql.text.graph import check_spread, sentence_entities

__all__ = ["activation", "add", "add_edges", "add_rows", "candidates", "ctes", "edges_from", "hop_detail", "link_rows",
           "remove", "schema", "words"]


def _tables(d: Any) -> tuple[str, str]:
    return d.table("entity_links"), d.table("entity_edges")


def schema(d: Any, indexes: bool = True) -> list[str]:
    """DDL for the graph's two tables and their indexes (idempotent). Without ``indexes``, the edges'
    key is the one index (``ON CONFLICT`` names it): for a database that joins by hashing and keeps
    each block's min and max, where more indexes would only slow the writes."""
    links, edges = _tables(d)
    key = ", PRIMARY KEY (doc_id, position, entity)" if indexes else ""
    out = [f"CREATE TABLE IF NOT EXISTS {links} (doc_id text NOT NULL, position integer NOT NULL, "
           f"entity text NOT NULL, name text NOT NULL{key})",
           f"CREATE TABLE IF NOT EXISTS {edges} (a text NOT NULL, b text NOT NULL, weight bigint NOT NULL, "
           "PRIMARY KEY (a, b))"]
    if indexes:
        out += [f"CREATE INDEX IF NOT EXISTS {d.table('entity_links_entity')} ON {links} (entity)",
                # max(weight) is read by every activation: an index makes it one descent instead of a scan
                f"CREATE INDEX IF NOT EXISTS {d.table('entity_edges_weight')} ON {edges} (weight)"]
    return out


def _pairs(d: Any, links: str, doc_ids: Param | None = None) -> Fragment:
    """(a, b, n): how many sentences name both a and b, among the links in ``links`` (a table or a
    relation), of these documents when ``doc_ids`` is given."""
    where: Fragment = sql("") if doc_ids is None else sql(" WHERE ", d.in_array("l1.doc_id", doc_ids))
    return sql(f"SELECT l1.entity AS a, l2.entity AS b, count(*) AS n FROM {links} l1 JOIN {links} l2 "
               "ON l2.doc_id = l1.doc_id AND l2.position = l1.position AND l2.entity <> l1.entity",
               where, " GROUP BY l1.entity, l2.entity")


def words(d: Any) -> str:
    """How the store's entity keys cut names into words (:data:`~nlql.text.entities.ENTITY_WORDS`): the
    dialect's ``entity_words``, set by the store from its tables' record (``"unicode"`` unless the keys
    were written before Unicode words)."""
    return getattr(d, "entity_words", "unicode")


def link_rows(docs: Sequence[tuple[str, Iterable[tuple[int, Iterable[str]]]]],
              words: str = "unicode") -> list[tuple[str, int, str, str]]:
    """The ``(doc_id, position, entity, name)`` rows of documents' entities (``docs`` as :func:`add` takes
    them), in order: what :func:`add` inserts into the links table (keys cut into ``words``)."""
    return [(doc_id, int(position), key, name) for doc_id, sentences in docs for position, names in sentences
            for key, name in sentence_entities(names, words)]


def _insert_edges(d: Any, pairs: Fragment) -> Fragment:
    _, edges = _tables(d)
    return sql(f"INSERT INTO {edges} (a, b, weight) ", pairs,
               f" ON CONFLICT (a, b) DO UPDATE SET weight = {edges}.weight + EXCLUDED.weight")


def add_edges(d: Any, doc_ids: Sequence[str]) -> Fragment:
    """The statement that adds the edge weights of these documents' links (already inserted)."""
    links, _ = _tables(d)
    return _insert_edges(d, _pairs(d, links, Param(sorted(set(doc_ids)), "text[]", "documents")))


def edges_from(d: Any, relation: str) -> Fragment:
    """The statement that adds the edge weights of the links in ``relation`` (a quoted name whose rows
    are the ``(doc_id, position, entity, name)`` just inserted, and no others: a bulk load's source)."""
    return _insert_edges(d, _pairs(d, relation))


def add(d: Any, docs: Sequence[tuple[str, Iterable[tuple[int, Iterable[str]]]]]) -> list[Fragment]:
    """Statements that add documents' entities: ``docs`` are ``(doc_id, [(position, names), …])``.

    Run :func:`remove` for the same ids first (in the same transaction) when they may exist. (A store
    that bulk-loads :func:`link_rows` itself runs :func:`add_edges` or :func:`edges_from` after.)
    """
    return add_rows(d, link_rows(docs, words(d)))


def add_rows(d: Any, rows: Sequence[tuple[str, int, str, str]]) -> list[Fragment]:
    """Statements that insert :func:`link_rows` rows and add their edge weights."""
    links, _ = _tables(d)
    if not rows:
        return []
    ds, ps, ks, ns = (list(c) for c in zip(*rows, strict=True))
    arrays = d.array_rows([Param(ds, "text[]"), Param(ps, "integer[]"), Param(ks, "text[]"), Param(ns, "text[]")])
    return [sql(f"INSERT INTO {links} (doc_id, position, entity, name) ", arrays), add_edges(d, ds)]


def remove(d: Any, doc_ids: Sequence[str]) -> list[Fragment]:
    """Statements that take documents' sentences off the edge weights (an edge that reaches 0 goes)
    and remove their links."""
    links, edges = _tables(d)
    ids = Param(list(doc_ids), "text[]", "documents")
    return [
        sql(f"UPDATE {edges} SET weight = {edges}.weight - g.n FROM (", _pairs(d, links, ids), ") g "
            f"WHERE {edges}.a = g.a AND {edges}.b = g.b"),
        sql(f"DELETE FROM {edges} WHERE weight <= 0"),
        sql(f"DELETE FROM {links} WHERE ", d.in_array("doc_id", ids)),
    ]


def candidates(text: str, words: str = "unicode") -> tuple[list[str], list[int], list[int]]:
    """Every run of up to ``MAX_NAME_TOKENS`` words of ``text`` as (key, first word, end word)."""
    toks = [t for t, _, _ in token_spans(text, words)]
    keys, starts, ends = [], [], []
    for i in range(len(toks)):
        for j in range(i + 1, min(len(toks), i + MAX_NAME_TOKENS) + 1):
            keys.append(" ".join(toks[i:j]))
            starts.append(i)
            ends.append(j)
    return keys, starts, ends


def _activation_ctes(d: Any, text: str, hops: int, decay: float) -> Fragment:
    """``cand``, ``known``, ``seeds``, ``mx``, ``act0`` … ``act<hops>`` (without ``WITH``)."""
    links, edges = _tables(d)
    keys, starts, ends = candidates(text, words(d))
    dv = Param(decay, "float8", "decay")
    where = "word positions of the text"
    cand = d.array_rows([Param(keys, "text[]", "words of the text"), Param(starts, "integer[]", where),
                         Param(ends, "integer[]", where)])
    parts: list[Any] = [
        "cand(entity, i, j) AS (", cand, "), ",
        f"known AS (SELECT c.entity, c.i, c.j FROM cand c WHERE EXISTS (SELECT 1 FROM {links} l "
        "WHERE l.entity = c.entity)), ",
        "seeds AS (SELECT DISTINCT k.entity FROM known k WHERE NOT EXISTS (SELECT 1 FROM known o "
        "WHERE o.i <= k.i AND o.j >= k.j AND o.j - o.i > k.j - k.i)), ",
        f"mx AS (SELECT {d.cast('max(weight)', 'float8')} AS w FROM {edges}), ",
        f"act0 AS (SELECT entity, {d.cast('1.0', 'float8')} AS act FROM seeds)",
    ]
    # One CTE per hop (hops is a plan-time constant): a recursive CTE would walk every path, and
    # PostgreSQL forbids the per-step max() in a recursive term.
    for h in range(1, hops + 1):
        parts += [
            f", act{h} AS (SELECT entity, max(act) AS act FROM (SELECT entity, act FROM act{h - 1} UNION ALL "
            "SELECT e.b, p.act * ((", dv, f" * e.weight) / mx.w) FROM act{h - 1} p JOIN {edges} e ON e.a = p.entity "
            "CROSS JOIN mx) s GROUP BY entity HAVING max(act) > 0)",
        ]
    return sql(*parts)


def ctes(d: Any, text: str, hops: int = 1, decay: float = 0.5) -> Fragment:
    """The CTEs of :func:`activation` without ``WITH`` and the final ``SELECT``, for a hybrid statement
    that takes the GRAPH arm as one of its CTEs; the last is ``graph_rows(doc_id, position, activation)``."""
    hops, decay = check_spread(hops, decay)
    links, _ = _tables(d)
    return sql(_activation_ctes(d, text, hops, decay),
               f", graph_rows AS (SELECT l.doc_id, l.position, max(a.act) AS activation FROM {links} l "
               f"JOIN act{hops} a ON a.entity = l.entity GROUP BY l.doc_id, l.position)")


def activation(d: Any, text: str, hops: int = 1, decay: float = 0.5, seq: bool = False) -> Fragment:
    """One statement computing GRAPH(text, hops, decay) per sentence: rows ``(doc_id, position,
    activation)`` (and each row's ``seq`` from the units table when ``seq``) in no particular order
    (sorting 100k activated rows would cost more than computing them).

    The same activation as :meth:`nlql.text.graph.EntityGraph.activate`, bit for bit."""
    if seq:
        return sql("WITH ", ctes(d, text, hops, decay),
                   " SELECT g.doc_id, g.position, g.activation, u.seq FROM graph_rows g JOIN ", d.units,
                   " u ON u.doc_id = g.doc_id AND u.position = g.position")
    return sql("WITH ", ctes(d, text, hops, decay), " SELECT doc_id, position, activation FROM graph_rows")


def hop_detail(d: Any, text: str, hops: int = 1, decay: float = 0.5) -> Fragment:
    """For explain: rows ``(hop, entity, name, activation)`` of what each hop raised.

    Hop 0 is the entities found in the text. ``name`` is the commonest spelling (ties: the smallest
    in code-point order), as :meth:`nlql.text.graph.EntityGraph.display_name`.
    """
    hops, decay = check_spread(hops, decay)
    links, _ = _tables(d)
    order = d.TRANSFORMS["text_order"]
    raised = ["SELECT 0 AS hop, entity, act FROM act0"]
    for h in range(1, hops + 1):
        raised.append(f"SELECT {h}, c.entity, c.act FROM act{h} c LEFT JOIN act{h - 1} p ON p.entity = c.entity "
                      "WHERE p.act IS NULL OR c.act > p.act")
    return sql(
        "WITH ", _activation_ctes(d, text, hops, decay),
        ", raised AS (" + " UNION ALL ".join(raised) + "), "
        "spell AS (SELECT entity, name, row_number() OVER (PARTITION BY entity ORDER BY count(*) DESC, "
        f"name{order}) AS rn FROM {links} WHERE entity IN (SELECT entity FROM raised) GROUP BY entity, name) "
        "SELECT r.hop, r.entity, s.name, r.act FROM raised r JOIN spell s ON s.entity = r.entity AND s.rn = 1 "
        f"ORDER BY r.hop, r.act DESC, r.entity{order}",
    )

