"""The corpus, queries and reference computations the hybrid-SQL tests share across dialects.

Every query runs on the built-in store (the engine's arm-by-arm path) and on a SQL store, where hybrid
plans are lowered to one statement: both must give the same rows in the same order with the same
scores. ``how`` says which path the SQL store takes (``sql`` or ``engine``).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

from nlql import Engine
from nlql.embedders import HashEmbedder

CLOCK = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)  # a Monday: "last week" is Nov 23–29
VOCAB = ["solar", "energy", "grid", "battery", "wind", "policy", "agents", "tools", "memory", "cats",
         "dogs", "river", "music", "language", "games", "search", "vectors", "planning", "storage", "the",
         "a", "of", "and", "new", "report"]
STATUSES = ["published", "draft", "archived"]


def corpus() -> tuple[list[str], list[str], list[dict[str, Any]]]:
    rng = random.Random(5)
    texts, ids, metas = [], [], []
    for i in range(90):
        sentences = []
        for _ in range(1 + i % 3):
            n = rng.randint(3, 12)
            words = [rng.choice(VOCAB) for _ in range(n)]
            if rng.random() < 0.3:
                words += [words[0]] * rng.randint(1, 3)  # repeated terms: tf > 1
            sentences.append(" ".join(words).capitalize() + ".")
        if i % 17 == 0:
            sentences.append(sentences[0])  # an exact duplicate sentence: ties break on position
        texts.append(" ".join(sentences))
        ids.append(f"d{i:03d}")
        meta: dict[str, Any] = {"status": STATUSES[i % 3], "n": i, "lang": ["en", "de", "fr"][i % 3],
                                "year": [2019, 2021, "2022", 2024.0, None][i % 5],
                                "date": (CLOCK - timedelta(days=(i * 7) % 70, hours=i % 5)).isoformat()}
        if i % 4:
            meta["author"] = f"author{i % 6}"
        when = _when(i)
        if when is not _MISSING:
            meta["when"] = when
        texts_meta = meta
        metas.append(texts_meta)
    return texts, ids, metas


_MISSING = object()
_IST = timezone(timedelta(hours=5, minutes=30))


def _when(i: int) -> Any:
    """TEMPORAL's dates in every form metadata holds them: date-only strings (many documents on one
    day: ties), ISO with offsets or Z, naive datetimes (read as UTC), year-month, the far ends of the
    calendar; and values that are no date (a number, words, null, a list) or no key at all."""
    moment = CLOCK - timedelta(days=(i * 3) % 40, hours=i % 7, minutes=(i * 17) % 60)
    return [
        moment.date().isoformat(),
        moment.astimezone(_IST).isoformat(),
        moment.replace(tzinfo=None).isoformat(),
        20261120,
        "last tuesday",
        _MISSING,
        moment.strftime("%Y-%m"),
        moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
        None if i % 20 == 8 else [moment.date().isoformat()],
        ["0001-01-01", "9999-12-31T23:59:59", "2026-11-24T00:00:00-08:00"][i // 10 % 3],
    ][i % 10]


def load(store: Any) -> Engine:
    e = Engine(embedder=HashEmbedder(dim=64), store=store, clock=lambda: CLOCK, warm_up=False)
    texts, ids, metas = corpus()
    e.add_texts(texts[:50], ids=ids[:50], metadatas=metas[:50])
    e.add_texts(texts[50:], ids=ids[50:], metadatas=metas[50:])
    e.add_text(texts[3] + " Solar solar revised.", id=ids[3], metadata=metas[3])  # replace one
    e.delete(ids[10])  # and delete one: the BM25 statistics follow both
    return e


def _q(sem: str, kw: str, fuse: str = "RRF(sem, kw)", where: str = "", tail: str = "LIMIT 10") -> str:
    w = f" WHERE {where}" if where else ""
    return (f'SELECT SENTENCE LET sem = SIMILARITY(content, "{sem}"), kw = BM25(content, "{kw}"), '
            f"f = {fuse}{w} ORDER BY f DESC {tail}")


# (query, how pgvector runs it)
QUERIES: list[tuple[str, str]] = [
    (_q("solar energy", "solar energy"), "sql"),
    (_q("solar energy", "solar energy", tail="LIMIT 5 OFFSET 5"), "sql"),
    (_q("battery storage", "battery storage", "RRF(sem, kw, k => 10)"), "sql"),
    (_q("battery storage", "battery storage", "RRF(sem, kw, k => 1, weights => [0.3, 0.7])"), "sql"),
    (_q("wind policy", "wind policy", "RRF(sem, kw, weights => [2, 1])", tail="LIMIT 3 OFFSET 7"), "sql"),
    (_q("cats dogs", "cats", "RRF(kw, sem, k => 60)"), "sql"),
    (_q("music river", "music river", "INTERLEAVE(sem, kw)"), "sql"),
    (_q("music river", "music river", "INTERLEAVE(kw, sem)", tail="LIMIT 6 OFFSET 4"), "sql"),
    (_q("agents tools", "agents tools memory", where='meta.status == "published"'), "sql"),
    (_q("agents tools", "agents tools", where='meta.status IN ("draft", "archived") AND meta.n < 60'), "sql"),
    (_q("language games", "language games", where='meta.date WITHIN "last week"'), "sql"),
    (_q("language games", "language games", where='meta.date WITHIN "the past 30 days" AND meta.author IS NOT NULL'),
     "sql"),
    (_q("search vectors", "search vectors",
        where="meta.date WITHIN (DATE '2026-10-01', DATE '2026-11-15') AND meta.year >= 2021"), "sql"),
    (_q("search vectors", "search", where='meta.year == "2022" OR meta.lang == "fr"'), "sql"),
    (_q("planning", "planning grid", where="sem >= 0.1"), "sql"),
    (_q("planning", "planning grid", where="sem > 0.05 AND sem < 0.6"), "sql"),
    (_q("solar", "solar grid", where="kw > 1.5"), "sql"),
    (_q("solar", "solar grid", where="f > 0.02"), "sql"),
    (_q("the report", "the report", where='content CONTAINS "new" AND meta.lang != "de"'), "sql"),
    (_q("energy", "energy", where='content LIKE "The %"'), "sql"),
    (_q("energy", "nothingmatches"), "sql"),
    (_q("!!!", "solar", where="sem >= 0"), "sql"),  # a zero query vector: cosine 0 everywhere
    (_q("energy", "energy", where='meta.status == "no such status"'), "sql"),
    ('SELECT SENTENCE LET a = SIMILARITY(content, "cats"), b = SIMILARITY(content, ["dogs", "river"]), '
     'kw = BM25(content, "cats river"), f = RRF(a, b, kw, weights => [1, 0.5, 2]) ORDER BY f DESC LIMIT 12', "sql"),
    ('SELECT SPAN(SENTENCE, window => 1) LET sem = SIMILARITY(content, "memory"), kw = BM25(content, "memory"), '
     "f = RRF(sem, kw) ORDER BY f DESC LIMIT 4", "sql"),
    ('SELECT SENTENCE LET kw = BM25(content, "solar energy grid") ORDER BY kw DESC LIMIT 10', "sql"),
    ('SELECT SENTENCE LET kw = BM25(content, "solar energy grid") WHERE kw > 0 ORDER BY kw DESC LIMIT 8 OFFSET 2',
     "sql"),
    ('SELECT SENTENCE LET kw = BM25(content, "storage") ORDER BY kw DESC LIMIT 40', "sql"),  # fills with 0
    ('SELECT SENTENCE LET kw = BM25(content, "storage"), sem = SIMILARITY(content, "storage") '
     'WHERE meta.status != "draft" AND sem >= 0 LIMIT 25', "sql"),
    ('SELECT SENTENCE LET kw = BM25(content, "Cats cats CATS dogs") WHERE kw >= 1 ORDER BY kw DESC LIMIT 10', "sql"),
    ('SELECT SENTENCE LET a = SIMILARITY(content, "wind"), b = SIMILARITY(content, "river music"), '
     "f = RRF(a, b, k => 5) ORDER BY f DESC LIMIT 10", "sql"),
    ('SELECT SENTENCE LET kw = BM25(content, "grid"), kw2 = BM25(content, "battery wind"), f = RRF(kw, kw2) '
     "WHERE meta.n >= 20 AND kw2 < 3 ORDER BY f DESC LIMIT 7", "sql"),
    (_q("dogs", "dogs", "INTERLEAVE(sem, kw)", where="sem >= 0.05 AND kw >= 0.5", tail="LIMIT 9 OFFSET 1"), "sql"),
    ('SELECT SPAN(SENTENCE, window => 2) LET sem = SIMILARITY(content, "grid"), kw = BM25(content, "grid"), '
     'f = INTERLEAVE(sem, kw) WHERE meta.lang IN ("en", "fr") ORDER BY f DESC LIMIT 5', "sql"),
    ('SELECT SENTENCE LET s = 0.7 * SIMILARITY(content, "solar energy") + 0.3 * BM25(content, "solar energy") '
     "ORDER BY s DESC LIMIT 10", "engine"),
    ('SELECT SENTENCE LET s = SIMILARITY(content, "solar") + BM25(content, "solar") WHERE s > 0.5 '
     "ORDER BY s DESC LIMIT 5 OFFSET 1", "engine"),
    ('SELECT DOCUMENT LET sem = SIMILARITY(content, "language games"), kw = BM25(content, "language games"), '
     "f = RRF(sem, kw) ORDER BY f DESC LIMIT 5", "engine"),
    # SPEC §9 TEMPORAL arms in the statement: the period from the text, the dates from the metadata
    ('SELECT SENTENCE LET sem = SIMILARITY(content, "solar energy"), kw = BM25(content, "solar energy"), '
     't = TEMPORAL(meta.when, "what happened last week?"), f = RRF(sem, kw, t) ORDER BY f DESC LIMIT 10', "sql"),
    ('SELECT SENTENCE LET kw = BM25(content, "grid battery"), t = TEMPORAL(meta.when, "in November 2026"), '
     "f = INTERLEAVE(t, kw) ORDER BY f DESC LIMIT 12", "sql"),
    ('SELECT SENTENCE LET sem = SIMILARITY(content, "music"), t = TEMPORAL(meta.when, "the past 30 days"), '
     'f = RRF(t, sem, k => 5, window => 7) WHERE meta.status != "draft" ORDER BY f DESC LIMIT 15', "sql"),
    ('SELECT SENTENCE LET sem = SIMILARITY(content, "river"), t = TEMPORAL(meta.when, "after October 2026"), '
     "kw = BM25(content, \"river\"), f = RRF(sem, t, kw) WHERE t IS NOT NULL OR meta.n > 80 ORDER BY f DESC LIMIT 9",
     "engine"),
    ('SELECT SENTENCE LET kw = BM25(content, "the report"), t = TEMPORAL(meta.when, "before November 2026"), '
     "f = RRF(kw, t, weights => [1, 3]) ORDER BY f DESC LIMIT 10", "sql"),  # an open period: 1.0 inside
    ('SELECT SENTENCE LET kw = BM25(content, "agents"), t = TEMPORAL(meta.date, "the past 10 days"), '
     "u = TEMPORAL(meta.when, \"the past 3 days\"), f = RRF(kw, t, u) WHERE kw < 4 ORDER BY f DESC LIMIT 10", "sql"),
    ('SELECT SENTENCE LET sem = SIMILARITY(content, "wind"), kw = BM25(content, "wind"), '
     't = TEMPORAL(meta.when, "no period in here"), f = RRF(sem, kw, t) ORDER BY f DESC LIMIT 8', "sql"),
    ('SELECT SENTENCE LET sem = SIMILARITY(content, "wind"), t = TEMPORAL(meta.nested.when, "last week"), '
     "f = RRF(sem, t) ORDER BY f DESC LIMIT 6", "sql"),  # no such key: an empty arm
    # SPEC §9 arm-local min => in the statement: out of that arm only, the score NULL
    ('SELECT SENTENCE LET sem = SIMILARITY(content, "grid storage", min => 0.2), '
     'kw = BM25(content, "grid battery", min => 1.5), f = RRF(sem, kw) ORDER BY f DESC LIMIT 15', "sql"),
    ('SELECT SENTENCE LET sem = SIMILARITY(content, "cats", min => 0.3), kw = BM25(content, "cats dogs"), '
     'f = INTERLEAVE(kw, sem) WHERE kw >= 0.5 AND meta.lang != "de" ORDER BY f DESC LIMIT 10', "sql"),
    ('SELECT SENTENCE LET kw = BM25(content, "storage grid", min => 2) ORDER BY kw DESC LIMIT 40', "sql"),
    ('SELECT SENTENCE LET kw = BM25(content, "storage grid", min => 2.5) ORDER BY kw DESC LIMIT 5', "sql"),
    ('SELECT SENTENCE LET kw = BM25(content, "storage grid", min => 0) ORDER BY kw DESC LIMIT 30', "sql"),
    ('SELECT SENTENCE LET sem = SIMILARITY(content, "energy", min => 0.9), kw = BM25(content, "energy"), '
     "f = RRF(sem, kw) ORDER BY f DESC LIMIT 5", "sql"),  # nothing reaches min: one arm left
    # four arms, TEMPORAL and min => together: one statement
    ('SELECT SENTENCE LET sem = SIMILARITY(content, "solar policy", min => 0.15), '
     'kw = BM25(content, "solar policy", min => 1), t = TEMPORAL(meta.when, "the past 3 weeks"), '
     'sem2 = SIMILARITY(content, ["wind", "battery"]), f = RRF(sem, kw, t, sem2, weights => [1, 1, 0.5, 2]) '
     'WHERE meta.author IS NOT NULL ORDER BY f DESC LIMIT 10', "sql"),
    ('SELECT SENTENCE LET sem = SIMILARITY(content, "solar", min => 0.2), kw = BM25(content, "solar"), '
     "f = RRF(sem, kw) WHERE sem > 0.1 ORDER BY f DESC LIMIT 5", "engine"),  # WHERE on a min => score
    ('SELECT DOCUMENT LET kw = BM25(content, "grid"), t = TEMPORAL(meta.when, "last week"), f = RRF(kw, t) '
     "ORDER BY f DESC LIMIT 5", "engine"),
    (_q("solar energy", "solar energy", where='content MATCH "^So"'), "engine"),
    (_q("solar energy", "solar energy", tail="LIMIT 10").replace("ORDER BY f DESC", "ORDER BY f DESC, meta.n ASC"),
     "engine"),
]


def reference_bm25(docs: list[str], query: str, k1: float = 1.2, b: float = 0.75) -> list[float]:
    """SPEC §5's formula, written out independently over the engine's default analyzer's terms
    (distinct query terms, OR semantics)."""
    from nlql.text.analyzer import Analyzer

    terms = Analyzer().terms

    rows = [Counter(terms(d)) for d in docs]
    lengths = [sum(c.values()) for c in rows]
    n_rows = len(rows)
    avglen = sum(lengths) / n_rows
    out = []
    for tf_row, length in zip(rows, lengths, strict=True):
        score = 0.0
        for t in dict.fromkeys(terms(query)):
            n_t = sum(1 for r in rows if t in r)
            if t not in tf_row:
                continue
            idf = math.log(1 + (n_rows - n_t + 0.5) / (n_t + 0.5))
            tf = tf_row[t]
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avglen))
        out.append(score)
    return out


LITERAL_QUERIES = [
    ('SELECT SENTENCE LET sem = SIMILARITY(content, "zebrafish quokka"), kw = BM25(content, "zebrafish quokka"), '
     'f = RRF(sem, kw, k => 137, weights => [0.123, 0.877]) '
     'WHERE meta.status == "xylophone" AND meta.n BETWEEN 4711 AND 8128 AND meta.lang IN ("tlh", "qya") '
     'AND content CONTAINS "wombat" AND content NOT LIKE "%narwhal%" AND meta.date WITHIN "last week" '
     "AND sem >= 0.0333 AND kw > 0.0444 AND f > 0.00555 ORDER BY f DESC LIMIT 113 OFFSET 229",
     ["zebrafish", "quokka", "137", "0.123", "0.877", "xylophone", "4711", "8128", "tlh", "qya", "wombat",
      "narwhal", "last week", "0.0333", "0.0444", "0.00555", "113", "229", "2026"]),
    ('SELECT SENTENCE LET kw = BM25(content, $q) WHERE kw >= 0.987 AND meta.author == $who '
     "ORDER BY kw DESC LIMIT 177",
     ["sasquatch", "yeti", "0.987", "177", "o'brien"]),
    ('SELECT SENTENCE LET sem = SIMILARITY(content, ["ocelot", "tapir"]), kw = BM25(content, "ocelot"), '
     "f = INTERLEAVE(sem, kw) WHERE meta.`we\"ird` == 31337 ORDER BY f DESC LIMIT 119",
     ["ocelot", "tapir", "31337", "119", 'we"ird']),
    ('SELECT SENTENCE LET kw = BM25(content, "quagga"), t = TEMPORAL(meta.okapi_day, "what happened in March 2019?"), '
     'sem = SIMILARITY(content, "quagga", min => 0.4321), f = RRF(kw, t, sem) ORDER BY f DESC LIMIT 131',
     ["quagga", "okapi_day", "march", "2019", "0.4321", "131", "1551398400", "1554076800"]),
]


FILTERS = ["", 'meta.status == "published"', 'meta.lang IN ("de", "fr")', "meta.n < 45",
           'meta.date WITHIN "the past 3 weeks"', "meta.year >= 2021 OR meta.author IS NULL",
           'content CONTAINS "the"', "NOT meta.n BETWEEN 20 AND 70"]


def random_query(rng: random.Random) -> str:
    words = rng.sample(VOCAB, 4)
    sem_text, kw_text = " ".join(words[:2]), " ".join(words[rng.randint(0, 2):rng.randint(3, 4)])
    conds = [c for c in rng.sample(FILTERS, 2) if c]
    kind = rng.choice(["rrf", "rrf_w", "interleave", "single"])
    if rng.random() < 0.3:
        conds.append(f"sem >= {rng.choice([0.0, 0.1, 0.2])}")
    if rng.random() < 0.2:
        conds.append(f"kw > {rng.choice([0, 0.5, 2])}")
    where = " AND ".join(f"({c})" for c in conds)
    tail = f"LIMIT {rng.randint(1, 15)}" + (f" OFFSET {rng.randint(1, 10)}" if rng.random() < 0.4 else "")
    if kind == "single":
        w = f" WHERE {where}" if where else ""
        return (f'SELECT SENTENCE LET kw = BM25(content, "{kw_text}"), sem = SIMILARITY(content, "{sem_text}")'
                f"{w} ORDER BY kw DESC {tail}")
    fuse = {"rrf": f"RRF(sem, kw, k => {rng.choice([1, 10, 60])})",
            "rrf_w": f"RRF(kw, sem, weights => [{rng.choice([0.5, 1, 3])}, {rng.choice([0.2, 1])}])",
            "interleave": rng.choice(["INTERLEAVE(sem, kw)", "INTERLEAVE(kw, sem)"])}[kind]
    return _q(sem_text, kw_text, fuse, where, tail)
