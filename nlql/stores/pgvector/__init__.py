"""PostgreSQL + pgvector store: rows, vectors, BM25 statistics and pushed filters in a database.

``PgVectorStore("postgresql://user@host/db")`` keeps every sentence in a table with a ``vector(dim)``
column and an HNSW index (``vector_cosine_ops``, built lazily); the engine's pushed filter becomes a
parameterised SQL ``WHERE`` with exactly NLQL's semantics, compiled by the SQL layer
(:mod:`nlql.sql.postgres`). Several engines, in several processes, may share one database: the schema
is created under an advisory lock, a second store on the same DSN re-attaches, writers serialise on
an advisory lock per table prefix, and every read (BM25 included) is answered from the tables, so a
write is seen by every engine at once.

The package, one concern per file:

- :mod:`~nlql.stores.pgvector.store` — :class:`PgVectorStore`: connections, reads, writes, the info record;
- :mod:`~nlql.stores.pgvector.schema` — tables and the HNSW index (DDL from the dialect);
- :mod:`~nlql.stores.pgvector.terms` — the BM25 term tables and BM25 read from them per query;
- :mod:`~nlql.stores.pgvector.knn` — the knn strategy (exact vs HNSW, widening) and hybrid statements;
- :mod:`~nlql.stores.pgvector.driver` — psycopg glue (pgvector's wire format, statement rendering).

Schema (``<p>`` is ``table_prefix``, default ``nlql``)::

    <p>_meta   (key text PRIMARY KEY, value text)                 -- 'dim', 'schema', 'max_seq', 'analyzer'
    <p>_info   (key text PRIMARY KEY, value text)                 -- get_info / set_info
    <p>_docs   (doc_id text PRIMARY KEY, seq bigint, text text,
                metadata json,          -- the metadata exactly as given (JSON text)
                mflat jsonb,            -- typed, flattened view of the metadata used by filters
                fold text, num numeric, ts bigint,               -- doc_id casefolded / as number / as date
                created timestamptz)
    <p>_units  (key bigint identity PRIMARY KEY, doc_id text REFERENCES <p>_docs ON DELETE CASCADE,
                position int, content text, start int, "end" int, tail text, seq bigint,
                fold text, num numeric, ts bigint,               -- content casefolded / as number / as date
                embedding vector(dim), nterms int)                -- nterms: the sentence's BM25 length
    index <p>_units_doc (doc_id, position)
    index <p>_units_hnsw USING hnsw (embedding vector_cosine_ops)   -- once the table is large enough
    <p>_terms  (term text, key bigint, tf int, PRIMARY KEY (term, key)) + index (key)   -- bm25=True
    <p>_bm25   (n bigint, total_len bigint)                         -- one row: N and the total length

Text is stored escaped and metadata typed as :mod:`nlql.sql.codec` describes (NUL bytes and lone
surrogates round-trip; ``"2025" == 2025``, ISO dates, casefold CONTAINS mean in SQL what they mean in
Python).
"""

from __future__ import annotations

from nlql.sql.codec import escape_text, flatten_metadata, unescape_text
from nlql.sql.postgres import PGVECTOR_OPS, compile_where, filter_sql, like_sql
from nlql.stores.pgvector.store import PgVectorStore

__all__ = [
    "PGVECTOR_OPS",
    "PgVectorStore",
    "compile_where",
    "escape_text",
    "filter_sql",
    "flatten_metadata",
    "like_sql",
    "unescape_text",
]
