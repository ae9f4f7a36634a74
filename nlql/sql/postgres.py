"""PostgreSQL (+ pgvector) dialect: a hybrid plan as one statement over the pgvector store's tables.

The statement is a chain of CTEs, each arm filtered by the same WHERE before its LIMIT:

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
  per-slot scores.

Every value is a bound parameter numbered by :class:`~nlql.sql.binder.Binder` (``$1``, ``$2``, …).
"""

from __future__ import annotations

from typing import ClassVar

from nlql.errors import UnsupportedError
from nlql.sql.binder import Binder, Fragment, Param, Slot, join, sql, template
from nlql.sql.dialect import Compiled, Dialect
from nlql.sql.nodes import Arm, Fusion, KeywordScore, Lowered, SimilarityScore, Threshold

__all__ = ["PostgresDialect", "quote_ident"]

_CMP = {">": ">", ">=": ">=", "<": "<", "<=": "<="}


def quote_ident(name: str) -> str:
    """A PostgreSQL identifier, double-quoted.

    >>> quote_ident('nlql_units'), quote_ident('we"ird')
    ('"nlql_units"', '"we""ird"')
    """
    if "\x00" in name:
        raise ValueError("an identifier cannot contain NUL")
    return '"' + name.replace('"', '""') + '"'


class _Build:
    """The state of one compilation: names of CTEs, the shared filter, the mode."""

    def __init__(self, lowered: Lowered, mode: str, flt: Fragment | None, flt_docs: bool) -> None:
        self.lowered = lowered
        self.mode = mode
        self.flt = flt
        self.flt_docs = flt_docs
        self.sims = [s for s in lowered.scores if isinstance(s, SimilarityScore)]
        self.kws = [s for s in lowered.scores if isinstance(s, KeywordScore)]
        # a thresholded BM25 slot is computed first: other CTEs test their rows against it
        bm_th = {t.slot for t in lowered.thresholds if t.kind == "BM25"}
        self.kws.sort(key=lambda s: s.slot not in bm_th)
        self.name: dict[str, str] = {}
        for i, s in enumerate(self.sims, start=1):
            self.name[s.slot] = f"sem{i}"
        for i, k in enumerate(self.kws, start=1):
            self.name[k.slot] = f"bm{i}"


class PostgresDialect(Dialect):
    """PostgreSQL 13+ with pgvector, over :class:`~nlql.stores.pgvector.PgVectorStore`'s schema.

    Args:
        table_prefix: The store's ``table_prefix`` (tables ``<p>_units``, ``<p>_docs``, ``<p>_terms``,
            ``<p>_bm25``).
    """

    NAME = "postgres"
    PLACEHOLDER_STYLE = "numbered"
    VECTOR_ORDER = True
    MATERIALIZED_CTE = True
    WINDOW_FUNCTIONS = True
    ORDERED_AGGREGATES = True
    BM25_NATIVE = True
    MULTI_VECTOR_SIMILARITY = True
    FUSIONS = frozenset({"RRF", "INTERLEAVE", "SINGLE"})
    UNITS = frozenset({"SENTENCE", "SPAN"})
    TRANSFORMS: ClassVar[dict[type, str]] = {
        **Dialect.TRANSFORMS,
        SimilarityScore: "similarity_expr",
        KeywordScore: "keyword_scores",
        Threshold: "threshold",
        Arm: "arm",
        Fusion: "fusion",
    }

    # ------------------------------------------------------------------------------- templates

    KEYWORD_SCORES = (
        "{name}_q (term, qi) AS (\n"
        "  SELECT term, qi FROM unnest({terms}) WITH ORDINALITY AS q (term, qi)\n"
        "),\n"
        "{name}_post AS MATERIALIZED (\n"
        "  SELECT t.key, t.tf, q.qi, (count(*) OVER (PARTITION BY q.qi))::float8 AS df\n"
        "  FROM {terms_table} t JOIN {name}_q q ON q.term = t.term\n"
        "),\n"
        "{name} AS MATERIALIZED (\n"
        "  SELECT u.key, u.seq, u.position,\n"
        "         sum(ln(1 + (c.n - p.df + 0.5::float8) / (p.df + 0.5::float8)) * p.tf * ({k1} + 1)\n"
        "             / (p.tf + {k1} * (1 - {b} + {b} * u.nterms / c.avglen)) ORDER BY p.qi) AS score\n"
        "  FROM {name}_post p JOIN {units} u ON u.key = p.key{docs_join}\n"
        "  CROSS JOIN (SELECT n::float8 AS n, total_len::float8 / nullif(n, 0) AS avglen FROM {stats}) c\n"
        "  WHERE {where}\n"
        "  GROUP BY u.key, u.seq, u.position\n"
        ")"
    )
    KEYWORD_RANKS = (
        "{name}_ranked AS (\n"
        "  SELECT key, seq, position, rank FROM (\n"
        "    SELECT key, seq, position, row_number() OVER (ORDER BY score DESC, seq, position) AS rank\n"
        "    FROM {name} WHERE {own}\n"
        "  ) r WHERE rank <= {depth}\n"
        ")"
    )
    SEMANTIC_ARM = (
        "{name} AS MATERIALIZED (\n"
        "  SELECT u.key, u.seq, u.position, {distance} AS dist\n"
        "  FROM {units} u{docs_join}\n"
        "  WHERE {where}\n"
        "  ORDER BY {order}\n"
        "  LIMIT {depth}\n"
        "),\n"
        "{name}_ranked AS (\n"
        "  SELECT key, seq, position, row_number() OVER (ORDER BY dist, seq, position) AS rank\n"
        "  FROM {name} WHERE {own}\n"
        ")"
    )
    ARMS = "arms AS (\n  {union}\n)"
    RRF = (
        "fused AS (\n"
        "  SELECT key, min(seq) AS seq, min(position) AS position,\n"
        "         sum(CASE arm {weights} END / ({k} + rank) ORDER BY arm) AS score\n"
        "  FROM arms GROUP BY key\n"
        ")"
    )
    INTERLEAVE = (
        "fused AS (\n"
        "  SELECT key, seq, position, 1::float8 / row_number() OVER (ORDER BY first) AS score FROM (\n"
        "    SELECT key, min(seq) AS seq, min(position) AS position, min(ARRAY[rank, arm]) AS first\n"
        "    FROM arms GROUP BY key\n"
        "  ) g\n"
        ")"
    )
    SINGLE = (
        "fused AS (\n"
        "  SELECT key, seq, position, score FROM {name} WHERE {own}{fill}\n"
        ")"
    )
    SINGLE_FILL = (
        "\n  UNION ALL\n"
        "  (SELECT u.key, u.seq, u.position, 0::float8 AS score\n"
        "   FROM {units} u{docs_join}\n"
        "   WHERE {where} AND NOT EXISTS (SELECT 1 FROM {name} x WHERE x.key = u.key)\n"
        "     AND (SELECT count(*) FROM {name} WHERE {own}) < {fetch}\n"
        "   ORDER BY u.seq, u.position LIMIT {fetch})"
    )
    TOP = (
        "top AS (\n"
        "  SELECT key, seq, position, score FROM fused WHERE {where}\n"
        "  ORDER BY score DESC, seq, position\n"
        "  LIMIT {fetch}\n"
        ")"
    )
    SELECT = (
        "SELECT u.key, u.doc_id, u.position, u.content, u.seq, u.start, u.\"end\", u.tail, "
        "d.metadata::text, d.doc_id,\n"
        "       {scores}, top.score,\n"
        "       ARRAY[{arm_rows}]::bigint[] AS arm_rows\n"
        "FROM top JOIN {units} u ON u.key = top.key JOIN {docs} d ON d.doc_id = u.doc_id{score_joins}\n"
        "ORDER BY top.score DESC, top.seq, top.position"
    )

    def __init__(self, table_prefix: str = "nlql") -> None:
        self.table_prefix = table_prefix
        self.units = sql(quote_ident(f"{table_prefix}_units"))
        self.docs = sql(quote_ident(f"{table_prefix}_docs"))
        self.terms = sql(quote_ident(f"{table_prefix}_terms"))
        self.stats = sql(quote_ident(f"{table_prefix}_bm25"))

    def __repr__(self) -> str:
        return f"PostgresDialect(table_prefix={self.table_prefix!r})"

    # -------------------------------------------------------------------------------- capability

    def missing_feature(self, lowered: Lowered) -> str | None:
        why = super().missing_feature(lowered)
        if why is not None:
            return why
        bm_th = {t.slot for t in lowered.thresholds if t.kind == "BM25"}
        if len(bm_th) > 1:
            return "score conditions on more than one BM25 score"
        return None

    # ------------------------------------------------------------------------------- statement

    def compile(self, lowered: Lowered, mode: str = "exact") -> Compiled:
        """One statement; ``mode`` ``exact`` scans semantic arms exactly, ``index`` lets HNSW serve them."""
        why = self.missing_feature(lowered)
        if why is not None:
            raise UnsupportedError(self.NAME, f"this hybrid plan ({why})")
        if mode not in ("exact", "index"):
            raise ValueError(f"unknown mode {mode!r}")
        flt, flt_docs = None, False
        if lowered.filter is not None:
            from nlql.stores.pgvector import filter_sql

            flt, flt_docs = filter_sql(lowered.filter)
        st = _Build(lowered, mode, flt, flt_docs)
        ctes: list[tuple[str, Fragment]] = []
        for k in st.kws:
            ctes.append((f"score {st.name[k.slot]}", self.transform(k, st)))
        arm_ctes: dict[str, Fragment] = {}
        seen: set[str] = set()
        for arm in lowered.fusion.arms:
            if arm.slot in seen or lowered.fusion.method == "SINGLE":
                continue
            seen.add(arm.slot)
            arm_ctes[arm.slot] = self.transform(arm, st)
            ctes.append((f"arm {st.name[arm.slot]}", arm_ctes[arm.slot]))
        ctes.append(("fusion", self.transform(lowered.fusion, st)))
        ctes.append(("top", template(self.TOP, where=self._conds(
            [self.transform(t, st, "score") for t in lowered.fused_thresholds]),
            fetch=self._int(lowered.fetch, "rows returned"))))
        body = sql("WITH ", join(",\n", [c for _, c in ctes]), "\n", self._select(st))
        binder = Binder(self.PLACEHOLDER_STYLE)
        text = binder.render(body)
        parts: dict[str, str] = {}
        for arm in lowered.fusion.arms:
            frags = []
            score = lowered.score(arm.slot)
            if isinstance(score, KeywordScore):
                frags.append(self.transform(score, st))
            if arm.slot in arm_ctes:
                frags.append(arm_ctes[arm.slot])
            parts[f"arm {arm.binding}"] = binder.render(join(",\n", frags))
        parts["fusion"] = binder.render(join(",\n", [c for n, c in ctes if n in ("fusion", "top")]))
        columns = [s.slot for s in lowered.scores]
        return Compiled(text=text, binder=binder, parts=parts, columns=columns, mode=mode)

    # ------------------------------------------------------------------------------ transforms

    def similarity_expr(self, s: SimilarityScore, st: _Build) -> Fragment:
        """Cosine similarity of ``u.embedding`` (the max over several query vectors)."""
        return sql("1 - ", self.distance_expr(s))

    def distance_expr(self, s: SimilarityScore, raw: bool = False) -> Fragment:
        """Cosine distance (the min over several query vectors). pgvector gives NaN for a zero vector,
        where SPEC's cosine (and numpy) gives 0: so NaN reads as distance 1, unless ``raw`` (the
        bare operator an HNSW index can serve)."""
        items = [sql("u.embedding <=> ", self._vector(s, i)) for i in range(s.n_vectors)]
        if not raw:
            items = [sql("coalesce(nullif(", d, ", 'NaN'::float8), 1::float8)") for d in items]
        return items[0] if len(items) == 1 else sql("least(", join(", ", items), ")")

    def keyword_scores(self, k: KeywordScore, st: _Build) -> Fragment:
        lw = st.lowered
        return template(
            self.KEYWORD_SCORES, name=st.name[k.slot],
            terms=Param(list(k.terms), "text[]", f"terms of {k.slot}"),
            terms_table=self.terms, units=self.units, stats=self.stats,
            k1=Param(float(lw.k1), "float8", "BM25 k1"), b=Param(float(lw.b), "float8", "BM25 b"),
            docs_join=self._docs_join(st), where=self._shared(st, k.slot),
        )

    def threshold(self, t: Threshold, st: _Build, subject: str = "row") -> Fragment:
        """``subject op value``: on a row (``u``) for shared filters, or on a CTE's ``score``/``dist``."""
        op = _CMP[t.op]
        value = Param(float(t.value), "float8", f"threshold {t.label}")
        if subject == "score":
            return sql("(score ", op, " ", value, ")")
        if subject == "dist":
            return sql("(1 - dist ", op, " ", value, ")")
        if t.kind == "SIMILARITY":
            s = st.lowered.score(t.slot)
            assert isinstance(s, SimilarityScore)
            return sql("(", self.similarity_expr(s, st), " ", op, " ", value, ")")
        if t.kind == "BM25":
            name = st.name[t.slot]
            return sql(f"(coalesce((SELECT x.score FROM {name} x WHERE x.key = u.key), 0) ", op, " ", value, ")")
        raise UnsupportedError(self.NAME, f"the score condition {t.label} in SQL")

    def arm(self, arm: Arm, st: _Build) -> Fragment:
        lw = st.lowered
        name = st.name[arm.slot]
        depth = self._int(lw.depth, "arm depth")
        own = [t for t in lw.thresholds if t.slot == arm.slot]
        if arm.kind == "bm25":
            return template(self.KEYWORD_RANKS, name=name, depth=depth,
                            own=self._conds([self.transform(t, st, "score") for t in own]))
        s = lw.score(arm.slot)
        assert isinstance(s, SimilarityScore)
        outside = [t for t in own if t.lower_bound]
        inside = [t for t in own if not t.lower_bound]
        distance = self.distance_expr(s)
        if st.mode == "index" and s.n_vectors == 1:
            order = self.distance_expr(s, raw=True)  # the bare operator, served by the HNSW index
        else:  # an expression the index cannot serve: exact, ties on insertion order
            order = sql("dist, u.seq, u.position, u.key")
        where = self._shared(st, arm.slot, extra=[self.transform(t, st) for t in inside])
        return template(self.SEMANTIC_ARM, name=name, distance=distance, units=self.units,
                        docs_join=self._docs_join(st), where=where, order=order, depth=depth,
                        own=self._conds([self.transform(t, st, "dist") for t in outside]))

    def fusion(self, f: Fusion, st: _Build) -> Fragment:
        if f.method == "SINGLE":
            (arm,) = f.arms
            name = st.name[arm.slot]
            own = self._conds([self.transform(t, st, "score") for t in st.lowered.thresholds
                               if t.slot == arm.slot])
            fill = sql()
            if f.fill:
                fill = template(self.SINGLE_FILL, units=self.units, docs_join=self._docs_join(st),
                                where=self._shared(st, arm.slot), name=sql(name), own=own,
                                fetch=self._int(st.lowered.fetch, "rows returned"))
            return template(self.SINGLE, name=name, own=own, fill=fill)
        union = join("\n  UNION ALL\n  ", [
            sql(f"SELECT key, seq, position, {i}::bigint AS arm, rank FROM {st.name[a.slot]}_ranked")
            for i, a in enumerate(f.arms, start=1)])
        arms = template(self.ARMS, union=union)
        if f.method == "RRF":
            weights = join(" ", [sql(f"WHEN {i} THEN ", Param(float(w), "float8", f"weight of {a.binding}"))
                                 for i, (a, w) in enumerate(zip(f.arms, f.weights, strict=True), start=1)])
            return sql(arms, ",\n", template(self.RRF, weights=weights,
                                             k=Param(float(f.k), "float8", "RRF k")))
        if f.method == "INTERLEAVE":
            return sql(arms, ",\n", template(self.INTERLEAVE))
        raise UnsupportedError(self.NAME, f"{f.method} fusion in SQL")

    # --------------------------------------------------------------------------------- helpers

    def _select(self, st: _Build) -> Fragment:
        cols: list[Fragment] = []
        joins: list[Fragment] = []
        for s in st.lowered.scores:
            if isinstance(s, SimilarityScore):
                cols.append(self.similarity_expr(s, st))
            else:
                name = st.name[s.slot]
                cols.append(sql(f"coalesce({name}.score, 0::float8)"))
                joins.append(sql(f"\nLEFT JOIN {name} ON {name}.key = top.key"))
        counts = []  # rows per arm (a semantic arm before its threshold: under-fill detection)
        for a in st.lowered.fusion.arms:
            name = st.name[a.slot]
            single = st.lowered.fusion.method == "SINGLE"
            counts.append(sql(f"(SELECT count(*) FROM {name if a.kind == 'semantic' or single else name + '_ranked'})"))
        return template(self.SELECT, scores=join(", ", cols) if cols else sql("NULL"), units=self.units,
                        docs=self.docs, score_joins=sql(*joins), arm_rows=join(", ", counts))

    def _shared(self, st: _Build, owner: str, extra: list[Fragment] | None = None) -> Fragment:
        """The WHERE every arm shares: the pushed filter and every score condition not on ``owner``."""
        conds: list[Fragment] = []
        if st.flt is not None:
            conds.append(st.flt)
        for t in st.lowered.thresholds:
            if t.slot != owner:
                conds.append(self.transform(t, st))
        conds.extend(extra or [])
        return self._conds(conds)

    @staticmethod
    def _conds(conds: list[Fragment]) -> Fragment:
        return join(" AND ", conds) if conds else sql("TRUE")

    def _docs_join(self, st: _Build) -> Fragment:
        return sql(" JOIN ", self.docs, " d ON d.doc_id = u.doc_id") if st.flt_docs else sql()

    @staticmethod
    def _vector(s: SimilarityScore, i: int) -> Slot:
        return Slot(s.vector_key(i), "vector", f"query vector of {s.slot}")

    @staticmethod
    def _int(n: int, label: str) -> Param:
        return Param(int(n), "bigint", label)


def describe_params(compiled: Compiled, redact: bool = True) -> list[str]:
    """The parameter list of a compiled statement for explain (values redacted) or goldens."""
    return compiled.binder.describe(None if redact else (lambda p: True))
