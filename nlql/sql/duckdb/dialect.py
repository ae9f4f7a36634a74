"""DuckDB dialect: the same statement skeleton as PostgreSQL, in flags, a TRANSFORMS table and overrides.

DuckDB runs the whole hybrid skeleton (MATERIALIZED CTEs, window functions, ordered aggregates,
``unnest … WITH ORDINALITY``, ``$n`` placeholders) as PostgreSQL does; what differs is spelled here:

- cosine: ``array_inner_product`` of the stored L2-normalised ``FLOAT[dim]`` vectors (built into DuckDB,
  no extension), or ``array_cosine_distance`` over a table NLQL did not write (``normalized=False``);
  DuckDB has no vector index without the ``vss`` extension, which NLQL never downloads: semantic arms
  are exact scans;
- types: ``DOUBLE`` for numbers (the typed metadata stores Python floats), ``VARCHAR``, ``FLOAT[dim]``;
- LIKE takes ``ESCAPE '\\'`` (DuckDB has no default escape character); regular expressions are RE2
  (``regexp_matches(s, p, 's')``: ``.`` matches a newline, as in PostgreSQL);
- strings compare in byte order (code-point order for UTF-8) without a collation;
- metadata views read a ``MAP(VARCHAR, STRUCT(…))`` (:mod:`nlql.sql.duckdb.filters`);
- writes: bulk loads from an Arrow relation, no advisory lock (a DuckDB file has one writing process);
- GRAPH's entity tables keep no index but the edges' key, and parallel arrays become rows through
  several ``unnest`` calls in one SELECT list (``unnest`` as a table function takes one list).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any, ClassVar

from nlql.pushdown import Cond
from nlql.sql import graph as graph_sql
from nlql.sql.binder import Fragment, Param, Slot, join, sql
from nlql.sql.codec import TextCodec, compact_json, path_key, string_key
from nlql.sql.dialect import Dialect, quote_ident
from nlql.sql.duckdb.filters import subject
from nlql.sql.filters import SQL_FILTER_OPS, SQL_LIST_OPS, ListMembers, Subject, equality_record

__all__ = ["DuckDBDialect"]

_PUNCT = frozenset(string.punctuation)


class DuckDBDialect(Dialect):
    """DuckDB 1.1+ over :class:`~nlql.stores.duckdb.DuckDBStore`'s schema.

    Args:
        table_prefix: The store's tables (``<p>_units``, ``<p>_docs``, ``<p>_terms``, ``<p>_bm25``).
        dim: The vectors' dimension (the type of a query vector, ``FLOAT[dim]``).
        normalized: The stored vectors are L2-normalised (cosine is their inner product); else the
            cosine is computed (a zero vector has none: NaN, read as distance 1).
        analyzer, codec: see :class:`~nlql.sql.dialect.Dialect`.
    """

    NAME = "duckdb"
    STORE_NAME = "duckdb"
    PLACEHOLDER_STYLE = "numbered"
    CAST_OPERATOR = True
    VECTOR_ORDER = False
    MATERIALIZED_CTE = True
    WINDOW_FUNCTIONS = True
    ORDERED_AGGREGATES = True
    BM25_NATIVE = True
    MULTI_VECTOR_SIMILARITY = True
    ADVISORY_LOCKS = False
    TEMPORAL_CTE = True
    FUSIONS = frozenset({"RRF", "INTERLEAVE", "SINGLE"})
    UNITS = frozenset({"SENTENCE", "SPAN"})
    TYPES: ClassVar[dict[str, str]] = {
        "text": "VARCHAR", "text[]": "VARCHAR[]", "numeric": "DOUBLE", "numeric[]": "DOUBLE[]",
        "float8": "DOUBLE", "bigint": "BIGINT", "bigint[]": "BIGINT[]", "boolean": "BOOLEAN",
        "boolean[]": "BOOLEAN[]",
    }
    TRANSFORMS: ClassVar[dict[str, str]] = {
        **Dialect.TRANSFORMS,
        "cosine_distance": "(1 - array_inner_product({a}, {b})::DOUBLE)",
        "first_place": "min(ARRAY[rank, arm])",  # lists compare element by element
        "any": "({x} = ANY({items}))",
        "contains": "(strpos({s}, {needle}) > 0)",
        "regex": "regexp_matches({s}, {pattern}, 's')",
        # the members of the JSON value at a path, as rows (a list's items, else the value; NULL if missing)
        "json_members": "unnest(CASE WHEN json_type(json_extract({doc}, {path})) = 'ARRAY' "
                        "THEN CAST(json_extract({doc}, {path}) AS JSON[]) ELSE [json_extract({doc}, {path})] END)",
    }

    def __init__(self, table_prefix: str = "nlql", *, dim: int | None = None, normalized: bool = True,
                 analyzer: Any = None, codec: TextCodec | None = None) -> None:
        super().__init__(table_prefix, analyzer=analyzer, semantic_mode="exact", codec=codec)
        self.dim = dim
        self.normalized = normalized
        self.flat_index = False  # the store keeps <p>_flat (one row per document and metadata path)
        self.unit_metadata = False  # <p>_units keeps its document's metadata text (no join for it)
        self.unit_packed = False  # <p>_units keeps each row's fields packed in one text (packed_fields)
        self.members_index = False  # the store keeps <p>_members (the members of every list value)
        self.graph_tables = True  # the store's entity tables hold every document's links (GRAPH_CTE)
        # <p>_units, <p>_flat and <p>_members carry each document's integer key (dkey): a metadata
        # semi-join matches integers, not document id strings (a file written before: doc_id)
        self.doc_keys = False
        # <p>_flat carries hkey, the checksum of each row's path and string (codec.string_key): string
        # equality compares integers first (a file written before: the path and string only)
        self.flat_keys = False

    @property
    def SELECT(self) -> str:  # type: ignore[override]  # noqa: N802 - the Dialect template
        """The hybrid statement's rows; their metadata from ``<p>_units`` where it is kept there: the
        documents table is not read at all (a lookup of ten ids in it costs a scan of every id)."""
        if not self.unit_metadata:
            return Dialect.SELECT
        out = Dialect.SELECT.replace("{metadata} AS metadata", "u.metadata AS metadata")
        return out.replace(" JOIN {docs} d ON d.doc_id = u.doc_id", "")

    @property
    def GRAPH_CTE(self) -> bool:  # type: ignore[override]  # noqa: N802 - the Dialect flag
        """GRAPH from ``<p>_entity_links``/``<p>_entity_edges``, where the store keeps them for every
        document (not over a table read in place, nor in a file written before them opened read-only)."""
        return self.graph_tables

    @property
    def FILTER_OPS(self) -> frozenset[str]:  # type: ignore[override]  # noqa: N802 - the Dialect flag
        """The SQL operators, and HAS where the store keeps list members (``<p>_members``)."""
        return SQL_LIST_OPS if self.members_index else SQL_FILTER_OPS

    PIVOT_TERMS = 16  # up to this many query terms, BM25's ordered sum is spelled as a pivot

    # up to PIVOT_TERMS query terms, each term's postings come from a scan of its own (``term = $i``), df
    # from their count per term (a grouped join: DuckDB runs it alongside the scans); each posting's score is
    # computed once, in the inner SELECT, and the sentence's terms added in query order outside it
    KEYWORD_SCORES_BY_TERM = (
        "{name}_hits AS (\n"
        "  {scans}\n"
        "),\n"
        "{name}_post AS (\n"
        "  SELECT h.key, h.tf, h.qi, d.df FROM {name}_hits h\n"
        "  JOIN (SELECT qi, {count(*):float8} AS df FROM {name}_hits GROUP BY qi) d ON d.qi = h.qi\n"
        "),\n"
        "{name} AS{mat} (\n"
        "  SELECT key, seq, position, {score} AS score FROM (\n"
        "    SELECT u.key, u.seq, u.position, p.qi, {term} AS s\n"
        "    FROM {name}_post p JOIN {units} u ON u.key = p.key{docs_join}\n"
        "    CROSS JOIN (SELECT {n:float8} AS n, {total_len:float8} / nullif(n, 0) AS avglen FROM {stats}) c\n"
        "    WHERE {where}\n"
        "  ) p\n"
        "  GROUP BY key, seq, position\n"
        ")"
    )

    def visit_KeywordScore(self, k: Any, st: Any) -> Fragment:  # noqa: N802 - the visitor's name
        """BM25's arm with each query term's postings read by an equality scan of its own, so that DuckDB's
        zone maps skip to that term's rows of the term-sorted table, where a join with the list of query
        terms filters by the range between the smallest and largest term (100k sentences, 3-term
        queries: the statement 16.8 -> 15.3 ms, DuckDB's own join over sorted postings 14.4 ms). The same
        postings, numbered by query order (``p.qi``), summed as before.

        Each posting's score is one expression computed once (the sum takes its ``max`` per term), and df
        comes from a grouped join, not a window: DuckDB binds, optimizes and evaluates one copy of the BM25
        formula instead of one per query term. At 100k sentences (the ten query texts of
        bench/duckdb_floor.py, statements timed interleaved, load 1.8) the statement took 25.2 ms of CPU
        before, 22.4 ms so, 19.6 ms also parsed once (the store's ``_statement``), DuckDB's own 19.7 ms;
        the same scores, added in the same order."""
        n = len(k.terms)
        if not 0 < n <= self.PIVOT_TERMS:
            return super().visit_KeywordScore(k, st)
        lw = st.lowered
        term = self.template(self.BM25_TERM, k1=Param(float(lw.k1), "float8", "BM25 k1"),
                             b=Param(float(lw.b), "float8", "BM25 b"))
        scans = [sql(f"SELECT key, tf, {i} AS qi FROM ", self.terms, " WHERE term = ",
                     Param(t, "text", f"term {i} of {k.slot}")) for i, t in enumerate(k.terms, 1)]
        return self.template(
            self.KEYWORD_SCORES_BY_TERM, name=st.name[k.slot], mat=self._mat(),
            scans=join("\n  UNION ALL ", scans), units=self.units, stats=self.stats, term=term,
            score=self.keyword_sum(sql("p.s"), n), docs_join=self._docs_join(st), where=self._shared(st, k.slot),
        )

    def keyword_sum(self, term: Fragment, n_terms: int) -> Fragment:
        """The query terms' scores added in query order without an ordered aggregate: a sentence has one
        row per query term it holds, so each term's score is ``max(…) FILTER (WHERE p.qi = i)``, and
        the sum is written out in query order (a missing term adds 0, which changes no float: the
        same additions as the built-in index). DuckDB sorts each group for ``sum(… ORDER BY qi)``:
        at 100k sentences that sort was about half of a 3-term BM25 statement."""
        if not 0 < n_terms <= self.PIVOT_TERMS:
            return super().keyword_sum(term, n_terms)
        zero = self.cast("0", "float8")
        parts = [sql("coalesce(max(", term, f") FILTER (WHERE p.qi = {i}), {zero})") for i in range(1, n_terms + 1)]
        return sql("(", join("\n             + ", parts), ")")

    def json_path(self, keys: Sequence[str]) -> Param:
        """A JSON path (``$."a"."b"``; the planner passes plain keys only, letters, digits, ``_``, ``-``)."""
        return Param("$" + "".join(f'."{k}"' for k in keys), "text", "metadata path")

    def type_name(self, type_name: str) -> str:
        if type_name == "vector":
            return f"FLOAT[{self.dim}]" if self.dim else "FLOAT[]"
        return self.TYPES.get(type_name, type_name)

    def fn(self, name: str, **holes: Any) -> Any:
        if name == "cosine_distance" and not self.normalized:
            from nlql.sql.binder import template

            return template("array_cosine_distance({a}, {b})::DOUBLE", **holes)
        return super().fn(name, **holes)

    def number_value(self, f: float) -> Any:
        return float(f)

    def stamp_value(self, us: int) -> Any:
        return int(us)

    @staticmethod
    def regex_escape(c: str) -> str:
        """RE2: a backslash before ASCII punctuation makes it literal (and is refused before letters)."""
        return "\\" + c if c in _PUNCT else c

    def array_rows(self, arrays: Sequence[Param | Slot]) -> Fragment:
        """Parallel arrays zipped: DuckDB's ``unnest`` table function takes one list, while several
        ``unnest`` calls in one SELECT list advance together (row i of each)."""
        return sql("SELECT ", join(", ", [sql("unnest(", a, ")") for a in arrays]))

    def subject(self, path: tuple[str, ...]) -> Subject:
        return subject(path)

    def list_members(self, path: tuple[str, ...]) -> ListMembers | None:
        """The members of list values at ``path`` from ``<p>_members`` (one row per list with no typed
        value, the list's marker, and one per distinct member record): semi-joins on plain columns."""
        if not self.members_index or path[0] != "meta" or len(path) < 2:
            return None
        table = self.table("members")
        doc = self.doc_column

        def key() -> Param:
            return Param(path_key(path[1:]), "text", "metadata path")

        member = Subject(sql("m"), s="m.s", fold="coalesce(m.f, m.s)", n="m.n", t="m.t", b="m.b",
                         exists="TRUE", is_str="(m.s IS NOT NULL)")
        scalar = None
        if self.flat_index:  # the scalar's record from <p>_flat: a semi-join too, no MAP lookup
            flat = self.table("flat")
            scalar = (Subject(sql("f"), s="f.s", fold="coalesce(f.f, f.s)", n="f.n", t="f.t", b="f.b",
                              exists="TRUE", is_str="(f.s IS NOT NULL)"),
                      lambda test: sql(f"(u.{doc} IN (SELECT f.{doc} FROM ", flat, " f WHERE f.path = ", key(),
                                       " AND ", test, "))"))
        return ListMembers(
            sql(f"(u.{doc} IN (SELECT {doc} FROM ", table, " WHERE path = ", key(), "))"), member,
            lambda test: sql(f"(u.{doc} IN (SELECT m.{doc} FROM ", table, " m WHERE m.path = ", key(),
                             " AND ", test, "))"), scalar=scalar)

    @property
    def doc_column(self) -> str:
        """The column a metadata semi-join matches documents on: the integer ``dkey`` where the tables
        keep it (a semi-join of 100k units on integers instead of id strings: the 0.1% filter at 100k
        7 ms against 18 ms), else ``doc_id``."""
        return "dkey" if self.doc_keys else "doc_id"

    def indexed_leaf(self, cond: Cond) -> tuple[Fragment, bool] | None:
        """``meta.x == v`` / ``meta.x IN (…)`` as a semi-join on ``<p>_flat`` (one row per document and
        metadata path, the typed record's fields as columns), where the store keeps it: DuckDB scans
        plain columns instead of looking a path up in every document's MAP (50k documents: 4 ms
        against 84 ms), and the statement needs no join with the documents table. TRUE on exactly
        the rows where the typed views are TRUE (:func:`~nlql.sql.filters.equality_record`).

        Strings are also tested on ``hkey`` (:func:`~nlql.sql.codec.string_key` of the path and the
        string) where the table keeps it: DuckDB compares one integer column before any string (the
        0.1% tag filter's scan of a 400k-row table at 100k documents: 1.4 ms against 0.4 ms); the
        string test after it decides, so two values sharing a checksum never match each other."""
        if not self.flat_index or cond.path[0] != "meta" or len(cond.path) < 2 or cond.op not in ("eq", "in"):
            return None
        values = [cond.value] if cond.op == "eq" else list(cond.value)
        records = [equality_record(v, self.codec.escape) for v in values]
        if not records or any(r is None for r in records):
            return None
        tests: dict[str, Fragment] = {}
        for r in records:
            assert r is not None
            ((field, value),) = r.items()
            kind = {"s": "text", "n": "float8", "t": "bigint", "b": "boolean"}[field]
            tests.setdefault(compact_json(r), sql(f"({field} = ", Param(value, kind, "metadata value"), ")"))
        cond_sql = join(" OR ", tests.values())
        doc = self.doc_column
        key = path_key(cond.path[1:])
        strings = [r["s"] for r in records if r is not None and "s" in r]
        if self.flat_keys and len(strings) == len(records):  # every value a string: their checksums first
            hashes = [Param(string_key(key, v), "bigint", "checksum of the metadata path and value")
                      for v in dict.fromkeys(strings)]
            narrow = sql("hkey = ", hashes[0]) if len(hashes) == 1 else sql("hkey IN (", join(", ", hashes), ")")
            cond_sql = sql(narrow, " AND (", cond_sql, ")")
        return sql(f"u.{doc} IN (SELECT {doc} FROM ", self.table("flat"), " WHERE path = ",
                   Param(key, "text", "metadata path"), " AND (", cond_sql, "))"), False

    # -------------------------------------------------------------------------------------- writes

    def schema(self, dim: int) -> list[str]:
        """The tables (created if missing). ``mflat`` is a MAP of typed records; ``metadata`` the exact
        JSON text; keys come from a sequence."""
        t = self.table
        record = "STRUCT(s VARCHAR, f VARCHAR, n DOUBLE, t BIGINT, b BOOLEAN)"
        return [
            f"CREATE SEQUENCE IF NOT EXISTS {t('keys')}",
            f"CREATE TABLE IF NOT EXISTS {t('docs')} ("
            " doc_id VARCHAR NOT NULL, seq BIGINT NOT NULL, text VARCHAR NOT NULL,"
            f" metadata VARCHAR NOT NULL, mflat MAP(VARCHAR, {record}) NOT NULL,"
            " fold VARCHAR, num DOUBLE, ts BIGINT)",
            f"CREATE TABLE IF NOT EXISTS {t('units')} ("
            " key BIGINT NOT NULL, doc_id VARCHAR NOT NULL, position INTEGER NOT NULL, content VARCHAR NOT NULL,"
            " start INTEGER NOT NULL, \"end\" INTEGER NOT NULL, tail VARCHAR NOT NULL, seq BIGINT NOT NULL,"
            f" fold VARCHAR, num DOUBLE, ts BIGINT, embedding FLOAT[{int(dim)}] NOT NULL,"
            " nterms INTEGER NOT NULL, metadata VARCHAR, dkey BIGINT, packed VARCHAR)",
            self.COLUMNS["terms"].replace("TABLE", "TABLE IF NOT EXISTS", 1).format(name=t("terms")),
            f"CREATE TABLE IF NOT EXISTS {t('bm25')} (n BIGINT NOT NULL, total_len BIGINT NOT NULL)",
        ]

    def graph_schema(self) -> list[str]:
        """The entity tables with no index but the edges' key (which ``ON CONFLICT`` names): DuckDB
        joins by hashing and reads max() from each block's statistics, so more ART indexes would only
        slow the writes (200k links: 1.3 s to insert with them, 0.3 s without)."""
        return graph_sql.schema(self, indexes=False)

    def unit_metadata_column(self) -> str:
        """Add ``<p>_units.metadata`` (its document's metadata text) to a store written before it
        (:meth:`fill_unit_metadata` fills it)."""
        return f"ALTER TABLE {self.table('units')} ADD COLUMN metadata VARCHAR"

    def fill_unit_metadata(self) -> str:
        units, docs = self.table("units"), self.table("docs")
        return f"UPDATE {units} SET metadata = d.metadata FROM {docs} d WHERE d.doc_id = {units}.doc_id"

    #: Between the fields of ``<p>_units.packed``: text the store wrote never holds it (codec.escape_text
    #: leaves no raw control character but ``\x01`` as the lead of a code word, which four characters in
    #: ``\x02``-``\x08`` follow; the metadata is JSON, whose control characters are escaped).
    PACK_SEPARATOR = "\x01\x01"
    #: The fields of ``<p>_units.packed``, in order (``start`` and ``end`` as decimal text).
    PACKED = ("doc_id", "content", "start", "end", "tail", "metadata")

    def unit_packed_column(self) -> str:
        """Add ``<p>_units.packed`` (:attr:`PACKED`) to a store written before it (:meth:`fill_unit_packed`
        fills it)."""
        return f"ALTER TABLE {self.table('units')} ADD COLUMN packed VARCHAR"

    def fill_unit_packed(self) -> str:
        """Each row's :attr:`PACKED` fields from its columns (NULL where its metadata text is)."""
        fields = ", ".join(f"{quote_ident(c)}::VARCHAR" for c in self.PACKED)
        separator = " || ".join(f"chr({ord(c)})" for c in self.PACK_SEPARATOR)
        return (f"UPDATE {self.table('units')} SET packed = CASE WHEN metadata IS NULL THEN NULL ELSE "
                f"concat_ws({separator}, {fields}) END")

    def flat_table(self) -> list[str]:
        """``<p>_flat``: the typed metadata of every document, one row per path (for :meth:`indexed_leaf`)."""
        return [self.COLUMNS["flat"].replace("TABLE", "TABLE IF NOT EXISTS", 1).format(name=self.table("flat"))]

    def members_table(self) -> list[str]:
        """``<p>_members``: per list value, a marker row (no typed value) and one row per distinct member
        record (:func:`~nlql.sql.codec.list_members`), for pushed HAS (:meth:`list_members`)."""
        return [self.COLUMNS["members"].replace("TABLE", "TABLE IF NOT EXISTS", 1).format(name=self.table("members"))]

    def fill_flat(self) -> str:
        """Rebuild ``<p>_flat`` from the documents' MAPs (a store written before it existed)."""
        return (f"INSERT INTO {self.table('flat')} (doc_id, path, s, f, n, t, b) SELECT doc_id, e.key, e.value.s, "
                f"e.value.f, e.value.n, e.value.t, e.value.b FROM (SELECT doc_id, unnest(map_entries(mflat)) AS e "
                f"FROM {self.table('docs')})")

    def flat_key_column(self) -> str:
        """Add ``<p>_flat.hkey`` to a store written before it (filled by the store)."""
        return f"ALTER TABLE {self.table('flat')} ADD COLUMN hkey BIGINT"

    DOC_KEY_TABLES = ("units", "flat", "members")  # the tables that carry the documents' dkey

    def doc_key_columns(self, missing: Sequence[str]) -> list[str]:
        """Add ``dkey`` to the tables of a store written before it (filled by the store)."""
        return [f"ALTER TABLE {self.table(t)} ADD COLUMN dkey BIGINT" for t in missing]

    # the tables a statement reads by a leading value (a term; a metadata path and typed value), and the
    # order that keeps equal values together, so that DuckDB's zone maps skip the rest of the table
    _RECORD_COLUMNS = ("(doc_id VARCHAR NOT NULL, path VARCHAR NOT NULL, s VARCHAR, f VARCHAR, n DOUBLE, t BIGINT, b BOOLEAN, "
                       "dkey BIGINT)")
    COLUMNS: ClassVar[dict[str, str]] = {  # the definitions of the tables kept sorted
        "terms": "CREATE TABLE {name} (term VARCHAR NOT NULL, key BIGINT NOT NULL, tf INTEGER NOT NULL)",
        "flat": "CREATE TABLE {name} " + _RECORD_COLUMNS[:-1] + ", hkey BIGINT)",
        "members": "CREATE TABLE {name} " + _RECORD_COLUMNS}
    CLUSTERED: ClassVar[dict[str, str]] = {"terms": "term", "flat": "path, s, n, t",
                                           "members": "path, s, n, t"}

    def cluster(self, suffix: str) -> list[str]:
        """Rewrite ``<p>_<suffix>`` in :attr:`CLUSTERED` order: the same rows into a new table of the same
        definition, which then takes the old one's name (a new table: no deleted rows left behind)."""
        table, new = self.table(suffix), self.table("sorting")
        return [self.COLUMNS[suffix].format(name=new), f"INSERT INTO {new} SELECT * FROM {table} ORDER BY "
                f"{self.CLUSTERED[suffix]}", f"DROP TABLE {table}",
                f"ALTER TABLE {new} RENAME TO {quote_ident(f'{self.table_prefix}_{suffix}')}"]

    def key_value_table(self, suffix: str) -> str:
        return f"CREATE TABLE IF NOT EXISTS {self.table(suffix)} (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)"
