"""PostgreSQL (+ pgvector) dialect: a hybrid plan as one statement over the pgvector store's tables.

The statement is the base skeleton (:class:`~nlql.sql.dialect.Dialect`): a chain of CTEs, each arm
filtered by the same WHERE before its LIMIT:

- **BM25** (``bmN``): the query terms (analysed in Python by the engine's analyzer) are unnested with
  their order; their postings come from ``<p>_terms`` (unit key, term, tf), the document frequency of
  each term is ``count(*)`` over its postings, ``N`` and the total length from ``<p>_bm25``, and each
  row's length from ``<p>_units.nterms``. The score is SPEC §5's formula summed in query-term order
  (``sum(… ORDER BY qi)``), the same additions in the same order as the built-in index.
- **semantic** (``semN``): ``ORDER BY distance LIMIT depth`` inside a MATERIALIZED CTE (exact: a
  distance expression the index cannot serve, ties on insertion order; ``index``: the HNSW index), a
  lower-bound threshold on the arm's own similarity applied outside it.
- **ranks**: ``row_number() OVER (ORDER BY score DESC, seq, position)``, cut at the arm depth.
- **fusion**: ``UNION ALL`` of the ranked arms, ``GROUP BY key``; RRF ``sum(wᵢ / (k + rankᵢ) ORDER BY
  arm)``, INTERLEAVE ``1 / row_number() OVER (ORDER BY min((rank, arm)))``.
- **late materialisation**: only the ``fetch`` surviving keys are joined to content, metadata and the
  per-slot scores, every result column named.

What is PostgreSQL's own: pgvector's ``<=>`` (cosine distance) and HNSW, ``jsonb`` views of the typed
metadata, ``COLLATE "C"``, ARE regular expressions, binary ``COPY`` for bulk loads and advisory locks
for writers in several processes. Every value is a bound parameter (``$1``, ``$2``, …).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from nlql.pushdown import Filter, NativeFilter
from nlql.sql.binder import Fragment, Param, Slot, sql
from nlql.sql.dialect import Compiled, Dialect, quote_ident
from nlql.sql.filters import Subject
from nlql.sql.nodes import Arm
from nlql.sql.postgres.filters import PGVECTOR_OPS, containment, indexable, list_members, subject

__all__ = ["LOCK_NAMESPACE", "PostgresDialect", "compile_where", "describe_params", "filter_sql"]

LOCK_NAMESPACE = 0x6E6C716C  # advisory-lock namespace ("nlql")


class PostgresDialect(Dialect):
    """PostgreSQL 13+ with pgvector, over :class:`~nlql.stores.pgvector.PgVectorStore`'s schema.

    Args:
        table_prefix: The store's ``table_prefix`` (tables ``<p>_units``, ``<p>_docs``, ``<p>_terms``,
            ``<p>_bm25``).
        analyzer, semantic_mode, codec: see :class:`~nlql.sql.dialect.Dialect`.
    """

    NAME = "postgres"
    STORE_NAME = "pgvector"
    PLACEHOLDER_STYLE = "numbered"
    CAST_OPERATOR = True
    VECTOR_ORDER = True
    MATERIALIZED_CTE = True
    WINDOW_FUNCTIONS = True
    ORDERED_AGGREGATES = True
    BM25_NATIVE = True
    MULTI_VECTOR_SIMILARITY = True
    ADVISORY_LOCKS = True
    GRAPH_CTE = True
    TEMPORAL_CTE = True
    FUSIONS = frozenset({"RRF", "INTERLEAVE", "SINGLE"})
    UNITS = frozenset({"SENTENCE", "SPAN"})
    FILTER_OPS = PGVECTOR_OPS
    TRANSFORMS: ClassVar[dict[str, str]] = {
        **Dialect.TRANSFORMS,
        "cosine_distance": "{a} <=> {b}",             # pgvector
        "first_place": "min(ARRAY[rank, arm])",       # arrays compare element by element
        "any": "({x} = ANY({items}))",
        "contains": "(strpos({s}, {needle}) > 0)",
        "like": "({s} LIKE {pattern})",               # backslash is LIKE's default escape
        "regex": "({s} ~ {pattern})",                 # an ARE (Dialect.regex_escape)
        "text_order": ' COLLATE "C"',
        # the members of the JSON value at a path, as rows (a list's items, else the value; [null] if missing)
        "json_members": "LATERAL json_array_elements(CASE WHEN json_typeof(json_extract_path({doc}, VARIADIC {path})) "
                        "= 'array' THEN json_extract_path({doc}, VARIADIC {path}) "
                        "ELSE json_build_array(json_extract_path({doc}, VARIADIC {path})) END)",
    }

    MODES = ("exact", "index", "rescored")
    RESCORED_ARM = (
        "{name} AS{mat} (\n"
        "  SELECT u.key, u.seq, u.position, g.dist\n"
        "  FROM unnest({keys}, {dists}) AS g(key, dist) JOIN {units} u ON u.key = g.key\n"
        "),\n"
        "{name}_ranked AS (\n"
        "  SELECT key, seq, position, row_number() OVER (ORDER BY dist, seq, position) AS rank\n"
        "  FROM {name} WHERE {own}\n"
        ")"
    )

    def visit_Arm(self, arm: Arm, st: Any) -> Fragment:  # noqa: N802
        """In ``rescored`` mode a semantic arm's rows come in as two arrays (keys, distances): the
        store ranked them beforehand, scored exactly as the built-in store scores
        (:meth:`~nlql.stores.pgvector.PgVectorStore.run_lowered`); otherwise the shared arm."""
        if st.mode != "rescored" or arm.kind != "semantic":
            return super().visit_Arm(arm, st)
        own = self.arm_thresholds(arm, st)
        return self.template(self.RESCORED_ARM, name=st.name[arm.slot], mat=self._mat(), units=self.units,
                        keys=sql(Slot(f"{arm.slot}:keys", "bigint[]", f"ranked keys of {arm.slot}")),
                        dists=sql(Slot(f"{arm.slot}:dists", "float8[]", f"distances of {arm.slot}")),
                        own=self._conds([self.visit(t, st, "dist") for t in own]))

    def describe_semantic(self, mode: str) -> str:
        if mode == "rescored":
            return ("exact scan, the arm rescored as the built-in store scores (float32, rounded) and "
                    "ranked on (score, seq, position) before the statement")
        if mode == "exact":
            return super().describe_semantic(mode)
        return ("HNSW index (ef_search = max(ef_search, k), doubled while an arm under-fills, then exact); "
                "exact when the filter matches few rows or the table has no index yet")

    def subject(self, path: tuple[str, ...]) -> Subject:
        return subject(path)

    def list_members(self, path: tuple[str, ...]) -> Any:
        return list_members(path)

    def compile_filter(self, flt: Any, style: str | None = None) -> Any:
        """The shared compiled filter, plus ``extra["indexed"]``: whether the GIN index on the typed
        metadata can serve it (a containment leaf in every branch of an OR, or in a conjunction)."""
        out = super().compile_filter(flt, style)
        out.extra["indexed"] = indexable(flt)
        return out

    def indexed_leaf(self, cond: Any) -> tuple[Fragment, bool] | None:
        """Metadata equality and IN as jsonb containment (:func:`~nlql.sql.postgres.filters.containment`)."""
        return containment(cond)

    # -------------------------------------------------------------------------------------- writes

    def lock_writers(self) -> Fragment:
        """A transaction-scoped advisory lock per table prefix: writers in every process serialise."""
        return sql("SELECT pg_advisory_xact_lock(", Param(LOCK_NAMESPACE, None), ", hashtext(",
                   Param(self.table_prefix, None), "))")

    def lock_schema(self) -> Fragment:
        """The lock under which any store of the database creates or migrates its tables."""
        return sql("SELECT pg_advisory_xact_lock(", Param(LOCK_NAMESPACE, None), ", hashtext('schema'))")

    def delete_documents(self, ids: list[str]) -> list[Fragment]:
        """Delete whole documents: their sentences go with them (``ON DELETE CASCADE``)."""
        return [sql("DELETE FROM ", self.docs, " WHERE ", self.in_array("doc_id", Param(ids, "text[]")))]

    def bulk_load(self, table: str, columns: Sequence[str], source: str | None = None) -> str:
        """Binary ``COPY … FROM STDIN`` (sent raw: it takes no parameters)."""
        cols = ", ".join(quote_ident(c) for c in columns)
        return f"COPY {self.table(table)} ({cols}) FROM STDIN (FORMAT BINARY)"

    def schema(self, dim: int) -> list[str]:
        """The tables (created if missing). ``metadata`` is ``json``, not ``jsonb``: ``jsonb`` rejects
        ``\\u0000`` and rewrites numbers, ``json`` keeps the text verbatim."""
        t = self.table
        return [
            f"CREATE TABLE IF NOT EXISTS {t('docs')} ("
            " doc_id text PRIMARY KEY, seq bigint NOT NULL, text text NOT NULL,"
            " metadata json NOT NULL, mflat jsonb NOT NULL,"
            " fold text, num numeric, ts bigint,"
            " created timestamptz NOT NULL DEFAULT now(), mlists jsonb NOT NULL DEFAULT '{}')",
            f"CREATE TABLE IF NOT EXISTS {t('units')} ("
            " key bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
            f" doc_id text NOT NULL REFERENCES {t('docs')} (doc_id) ON DELETE CASCADE,"
            " position int NOT NULL, content text NOT NULL,"
            " start int NOT NULL, \"end\" int NOT NULL, tail text NOT NULL, seq bigint NOT NULL,"
            " fold text, num numeric, ts bigint,"
            f" embedding vector({int(dim)}) NOT NULL, nterms int NOT NULL DEFAULT 0)",
            f"CREATE INDEX IF NOT EXISTS {t('units_doc')} ON {t('units')} (doc_id, position)",
            # metadata equality / IN compile to containment tests on mflat (filters.containment):
            # this index serves them, and its operator class gives the planner real estimates
            f"CREATE INDEX IF NOT EXISTS {t('docs_mflat')} ON {t('docs')} USING gin (mflat jsonb_path_ops)",
        ]

    def lists_schema(self) -> list[str]:
        """``mlists`` (each list value's member records, for HAS) on a table written before it, and the
        GIN index its containment tests use (idempotent)."""
        t = self.table
        return [f"ALTER TABLE {t('docs')} ADD COLUMN IF NOT EXISTS mlists jsonb NOT NULL DEFAULT '{{}}'",
                f"CREATE INDEX IF NOT EXISTS {t('docs_mlists')} ON {t('docs')} USING gin (mlists jsonb_path_ops)"]

    def key_value_table(self, suffix: str) -> str:
        return f"CREATE TABLE IF NOT EXISTS {self.table(suffix)} (key text PRIMARY KEY, value text NOT NULL)"

    def term_tables(self) -> list[str]:
        t = self.table
        return [
            f"CREATE TABLE IF NOT EXISTS {t('terms')} (term text NOT NULL, key bigint NOT NULL,"
            " tf int NOT NULL, PRIMARY KEY (term, key))",
            f"CREATE INDEX IF NOT EXISTS {t('terms_key')} ON {t('terms')} (key)",
            f"CREATE TABLE IF NOT EXISTS {t('bm25')} (one boolean PRIMARY KEY DEFAULT true CHECK (one),"
            " n bigint NOT NULL, total_len bigint NOT NULL)",
        ]

    def hnsw_index(self, m: int, ef_construction: int) -> str:
        return (f"CREATE INDEX {self.table('units_hnsw')} ON {self.table('units')} USING hnsw "
                f"(embedding vector_cosine_ops) WITH (m = {int(m)}, ef_construction = {int(ef_construction)})")


def describe_params(compiled: Compiled, redact: bool = True) -> list[str]:
    """The parameter list of a compiled statement for explain (values redacted) or goldens."""
    return compiled.binder.describe(None if redact else (lambda p: True))


def filter_sql(flt: Filter) -> tuple[Fragment, bool]:
    """A filter tree as a SQL boolean fragment over ``u`` (units) and ``d`` (docs), and whether it
    reads the documents table. Values are :class:`~nlql.sql.binder.Param` parts, never text."""
    return PostgresDialect().filter_sql(flt)


def compile_where(flt: Filter) -> NativeFilter:
    """A filter tree as a parameterised SQL boolean over ``u`` (units) and ``d`` (docs).

    ``native`` and ``text`` are the fragment with psycopg ``%s`` placeholders; ``extra["params"]`` the
    values in order; ``extra["docs"]`` whether the fragment reads the documents table;
    ``extra["fragment"]`` the unrendered fragment (for statements numbered by a dialect's binder).
    """
    out: NativeFilter = PostgresDialect().compile_filter(flt, style="pyformat")
    return out
