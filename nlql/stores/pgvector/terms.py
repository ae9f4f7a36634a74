"""BM25 term tables of the pgvector store, and BM25 read from them per query.

``<p>_terms`` (term, unit key, tf), each unit's term count (``<p>_units.nterms``) and ``<p>_bm25`` (N
and the total length) are written in the same transaction as the rows (terms from the store's
``analyzer``, computed in Python), so:

- a hybrid plan runs as one statement (:mod:`nlql.sql.postgres`, :meth:`PgVectorStore.run_lowered`);
- every other BM25 score the engine needs is read from the tables per query
  (:class:`~nlql.sql.keyword.KeywordIndex`, the engine's BM25 source for this store): only the postings of the query's
  terms are read, nothing in the engine process grows with the corpus, and an engine in another
  process sees every committed write at once with identical scores (SPEC §10).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from nlql.sql.codec import unescape_text
from nlql.stores.pgvector.driver import render
from nlql.stores.sqlstore import SqlStore

Terms = list[tuple[str, int, list[str]]]  # (escaped doc id, position, its escaped terms, repeats kept)

# Between a sentence's terms when they are sent as one text: a code word of the text escape that it
# never writes (:mod:`nlql.sql.codec` uses ranks 0–2056 of the 2401 four-digit words, this is 2400), so
# no escaped term holds it and splitting on it gives the terms back exactly
TERM_SEP = "\x01\x08\x08\x08\x08"
WRITE_WORK_MEM = "64MB"  # for the count of one batch's term rows (the default 4 MB spills it to disk)


class TermsMixin(SqlStore):
    """Keeping the BM25 term tables in step with the rows (part of :class:`PgVectorStore`)."""

    analyzer: Any
    bm25: bool
    dialect: Any
    statement_timeout_ms: int | None

    def _sync_terms(self, conn: Any) -> None:
        """Rebuild the term table when it was written by another analyzer (or never written).

        Runs inside :meth:`open`'s transaction, which holds the schema and the writers' locks.
        """
        d = self.dialect
        config = self._analyzer_config()
        row = conn.execute(*render(d, d.get_meta("meta", "analyzer"))).fetchone()
        if row is not None and row[0] == config:
            return
        conn.execute("SELECT set_config('statement_timeout', '0', true)")  # a rebuild takes a while, once
        self._reindex_terms(conn)
        conn.execute(*render(d, d.put_meta("meta", "analyzer", config)))
        if self.statement_timeout_ms:
            conn.execute("SELECT set_config('statement_timeout', %s, true)", [str(int(self.statement_timeout_ms))])

    def _reindex_terms(self, conn: Any) -> None:
        d = self.dialect
        conn.execute(*render(d, f"DELETE FROM {d.table('terms')}"))
        conn.execute("CREATE TEMP TABLE nlql_tmp_nterms (key bigint, n int) ON COMMIT DROP")
        total_n = total_len = 0
        with conn.cursor(name="nlql_reindex") as src, conn.cursor() as dst:
            src.execute(*render(d, f"SELECT key, content FROM {d.table('units')}"))
            while True:
                batch = src.fetchmany(5000)
                if not batch:
                    break
                with dst.copy(d.bulk_load("terms", ["term", "key", "tf"])) as copy:
                    copy.set_types(["text", "int8", "int4"])
                    lens = []
                    for key, content in batch:
                        n, terms = self._terms_of(unescape_text(content))
                        lens.append((key, n))
                        total_len += n
                        for term, tf in terms:
                            copy.write_row((term, key, tf))
                with dst.copy("COPY nlql_tmp_nterms (key, n) FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(["int8", "int4"])
                    for r in lens:
                        copy.write_row(r)
                total_n += len(batch)
        conn.execute(*render(d, f"UPDATE {d.table('units')} u SET nterms = t.n FROM nlql_tmp_nterms t "
                                "WHERE u.key = t.key"))
        conn.execute(*render(d, f"DELETE FROM {d.table('bm25')}"))
        from nlql.sql.binder import Param, sql

        conn.execute(*render(d, sql("INSERT INTO ", d.table("bm25"), " (one, n, total_len) VALUES (true, ",
                                    Param(total_n, None), ", ", Param(total_len, None), ")")))

    def _stale_terms(self, conn: Any) -> None:
        """A write without BM25 statistics: the next store opened with ``bm25=True`` rebuilds them."""
        d = self.dialect
        from nlql.sql.binder import Param, sql

        conn.execute(*render(d, sql("DELETE FROM ", d.table("meta"), " WHERE key = ", Param("analyzer", None))))

    def _forget_terms(self, conn: Any, ids: list[str]) -> None:
        """Remove the term rows and statistics of these documents' sentences (before deleting them)."""
        for statement in self.dialect.forget_terms(ids):
            conn.execute(*render(self.dialect, statement))

    def _write_terms(self, conn: Any, before: int, term_rows: Terms, added_n: int, added_len: int) -> None:
        """Insert the term rows of freshly copied sentences (their keys are above ``before``) by binary
        COPY: the keys the identity column gave them are read back (the writers' lock is held, so the
        keys above ``before`` are this write's), and each sentence's terms are counted here.

        Should those keys not be exactly this write's sentences (a row written without the lock), the
        terms are counted in SQL instead: copied as one text per sentence (joined by ``TERM_SEP``,
        split back in SQL) into a transaction's temporary table and counted against the sentences'
        keys in one statement."""
        d = self.dialect
        cur = conn.cursor()
        if any(t for _, _, t in term_rows):
            written = self._written_keys(conn, before, term_rows)
            if written is not None:
                rows: list[tuple[str, int, int]] = []
                for doc, pos, terms in term_rows:
                    if terms:
                        key = written[(doc, pos)]
                        counts: dict[str, int] = {}
                        for t in terms:
                            counts[t] = counts.get(t, 0) + 1
                        rows.extend([(t, key, n) for t, n in counts.items()])
                # by term (code points: the primary key's order under a C collation), so a term's postings
                # of the batch lie together in the table and a BM25 query reads fewer pages (at 100k, one
                # interleaved run: 407 ms a query against 512 ms copied in key order and 441 ms as the
                # earlier hash aggregate left them), and the index fills leaf by leaf
                rows.sort(key=itemgetter(0))  # (stable: the keys, increasing in this order, stay sorted)
                with cur.copy(d.bulk_load("terms", ["term", "key", "tf"])) as copy:
                    copy.set_types(["text", "int8", "int4"])
                    write = copy.write_row
                    for r in rows:
                        write(r)
            else:
                self._count_terms_in_sql(cur, term_rows)
        conn.execute(*render(d, d.add_term_stats(added_n, added_len)))

    def _written_keys(self, conn: Any, before: int, term_rows: Terms) -> dict[tuple[str, int], int] | None:
        """(escaped doc id, position) → key of the sentences with keys above ``before``, if they are
        exactly the sentences of ``term_rows``; else None."""
        from nlql.sql.binder import Param, sql

        written = {(doc, pos): key for key, doc, pos in self._run(conn, sql(
            "SELECT key, doc_id, position FROM ", self.dialect.units, " WHERE key > ", Param(int(before), "bigint")))}
        if len(written) == len(term_rows) and all((doc, pos) in written for doc, pos, _ in term_rows):
            return written
        return None

    def _count_terms_in_sql(self, cur: Any, term_rows: Terms) -> None:
        from nlql.sql.binder import Param, sql

        d = self.dialect
        # one table per transaction (dropped at commit), emptied after each batch of the transaction
        cur.execute("CREATE TEMP TABLE IF NOT EXISTS nlql_stage_terms (doc_id text, position int, "
                    "terms text) ON COMMIT DROP")
        sep = TERM_SEP
        with cur.copy("COPY nlql_stage_terms (doc_id, position, terms) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["text", "int4", "text"])
            for doc_id, position, terms in term_rows:
                if terms:  # (led by the separator: [""] is sent as sep, not as the empty text)
                    copy.write_row((doc_id, position, sep + sep.join(terms)))
        cur.execute("SELECT set_config('work_mem', %s, true)", [WRITE_WORK_MEM])
        cur.execute(*render(d, sql(
            "INSERT INTO ", d.terms, " (term, key, tf) SELECT t.term, u.key, count(*) "
            "FROM nlql_stage_terms s JOIN ", d.units, " u ON u.doc_id = s.doc_id AND u.position = s.position "
            "CROSS JOIN LATERAL unnest((string_to_array(s.terms, ", Param(sep, "text"), "))[2:]) AS t(term) "
            "GROUP BY t.term, u.key ORDER BY t.term, u.key")))
        cur.execute("TRUNCATE nlql_stage_terms")
