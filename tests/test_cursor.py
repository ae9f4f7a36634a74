"""Cursors (SPEC §11): ``hits.cursor`` and ``search(…, cursor=…)``.

Every check pages a query to its end and compares with an independent reference: the rows of the same
query without LIMIT (which the contract suite checks against brute force), and for writes in between,
the set of rows that did not change.
"""

from __future__ import annotations

import random

import pytest

from nlql import Engine, NLQLError
from nlql.embedders import HashEmbedder
from nlql.errors import CursorError

WORDS = "agents tools memory graphs vectors search ranking fusion cursor pages data query".split()


def _corpus(n: int = 40, seed: int = 7) -> list[tuple[str, str, dict]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7))).capitalize() + "."
                     for _ in range(rng.randint(1, 4))]
        meta = {"n": rng.choice([1, 2, 3, None]), "tag": rng.choice(["a", "b", "c"]), "year": str(2020 + i % 5)}
        if i % 9 == 0:
            del meta["n"]
        out.append((f"d{i:02d}", " ".join(sentences), meta))
    return out


def _engine(store: str = "memory", docs: list | None = None) -> Engine:
    e = Engine(embedder=HashEmbedder(dim=64), store=store)
    for doc_id, text, meta in docs or _corpus():
        e.add_text(text, id=doc_id, metadata=meta)
    return e


def _key(h) -> tuple:  # type: ignore[no-untyped-def]
    return (h.id, h.doc_id, h.unit, h.position)


def _pages(e: Engine, query: str, params: dict | None = None, limit_note: int | None = None) -> list[list]:
    pages = []
    hits = e.search(query, params)
    pages.append(list(hits))
    cursor = hits.cursor
    while cursor is not None:
        hits = e.search(query, params, cursor=cursor)
        assert hits, "a cursor was offered but the next page is empty"
        pages.append(list(hits))
        cursor = hits.cursor
        assert len(pages) < 200
    return pages


QUERIES = [
    'SELECT SENTENCE LET s = SIMILARITY(content, "agents and tools") LIMIT {n}',
    'SELECT SENTENCE LET s = SIMILARITY(content, "agents and tools") WHERE meta.tag != "c" LIMIT {n}',
    'SELECT SENTENCE WHERE content CONTAINS "a" LIMIT {n}',
    'SELECT SENTENCE LET k = BM25(content, "memory graphs") LIMIT {n}',
    'SELECT SENTENCE LET s = SIMILARITY(content, "search") ORDER BY meta.n DESC, s DESC LIMIT {n}',
    'SELECT SENTENCE ORDER BY meta.n ASC NULLS FIRST, meta.tag DESC LIMIT {n}',
    'SELECT SENTENCE ORDER BY meta.year DESC, LENGTH(content) LIMIT {n}',
    'SELECT DOCUMENT LET s = SIMILARITY(content, "vectors ranking") LIMIT {n}',
    'SELECT DOCUMENT ORDER BY meta.tag, doc_id DESC LIMIT {n}',
    'SELECT CHUNK LET s = SIMILARITY(content, "fusion pages") LIMIT {n}',
    'SELECT SPAN(SENTENCE, window => 1) LET s = SIMILARITY(content, "cursor data") LIMIT {n}',
    'SELECT SENTENCE LET s = SIMILARITY(content, "query fusion"), k = BM25(content, "query fusion"), '
    'r = RRF(s, k, k => 60) ORDER BY r DESC LIMIT {n}',
    'SELECT SENTENCE LET s = SIMILARITY(content, "memory"), r = INTERLEAVE(s, RECENCY(meta.year)) '
    'ORDER BY r DESC LIMIT {n}',
    'SELECT SENTENCE LET s = SIMILARITY(content, "tools") DISTINCT BY doc_id KEEP 2 LIMIT {n}',
]


@pytest.fixture(scope="module")
def engine() -> Engine:
    return _engine()


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("n", [1, 4, 7])
def test_pages_tile_the_whole_result(engine: Engine, query: str, n: int) -> None:
    """The pages, joined, are the query's rows in its order: none repeated, none skipped."""
    pinned_window = "" if "RRF" not in query and "INTERLEAVE" not in query else None
    q = query.format(n=n)
    pages = _pages(engine, q)
    got = [_key(h) for page in pages for h in page]
    # the reference: the same query with one page big enough for every row; fusions keep the first
    # page's window (max(100, 10 × LIMIT)), so the reference names it
    whole = q.replace(f"LIMIT {n}", "LIMIT 100000")
    if pinned_window is None:
        whole = whole.replace("k => 60)", "k => 60, window => 100)").replace(
            "RECENCY(meta.year))", "RECENCY(meta.year), window => 100)")
    want = [_key(h) for h in engine.search(whole)]
    assert got == want
    assert all(len(p) == n for p in pages[:-1]) and 0 < len(pages[-1]) <= n
    assert len(set(got)) == len(got)


def test_last_page_has_no_cursor_and_exact_fit(engine: Engine) -> None:
    total = len(engine.search('SELECT SENTENCE WHERE meta.tag == "a"'))
    q = f'SELECT SENTENCE WHERE meta.tag == "a" LIMIT {total}'
    assert engine.search(q).cursor is None  # exactly every row: nothing follows
    half = total // 2
    h = engine.search(f'SELECT SENTENCE WHERE meta.tag == "a" LIMIT {half}')
    assert h.cursor is not None
    # knn recall that read exactly LIMIT rows: whether rows follow is looked up when the cursor is read
    n = len(engine.search("SELECT SENTENCE"))
    assert engine.search(f'SELECT SENTENCE LET s = SIMILARITY(content, "x") LIMIT {n}').cursor is None
    assert engine.search(f'SELECT SENTENCE LET s = SIMILARITY(content, "x") LIMIT {n - 1}').cursor is not None
    assert engine.search('SELECT SENTENCE LET s = SIMILARITY(content, "x")').cursor is None  # no LIMIT


def test_limit_may_change_between_pages(engine: Engine) -> None:
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, "graphs") LIMIT {n}'
    first = engine.search(q.format(n=3))
    second = engine.search(q.format(n=5), cursor=first.cursor)
    want = [_key(h) for h in engine.search(q.format(n=8))]
    assert [_key(h) for h in [*first, *second]] == want


def test_params_and_first_page_offset() -> None:
    e = _engine()
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT $n'
    first = e.search(q, {"q": "agents", "n": 3})
    nxt = e.search(q, {"q": "agents", "n": 3}, cursor=first.cursor)
    want = [_key(h) for h in e.search(q, {"q": "agents", "n": 6})]
    assert [_key(h) for h in [*first, *nxt]] == want
    # a first page with OFFSET continues with the query written without it
    off = e.search('SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 3 OFFSET 2', {"q": "agents"})
    cont = e.search('SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 3', {"q": "agents"}, cursor=off.cursor)
    assert [_key(h) for h in cont] == want[5:] + [_key(h) for h in e.search(q, {"q": "agents", "n": 8})][6:8]


@pytest.mark.parametrize("query", [
    'SELECT SENTENCE LET s = SIMILARITY(content, "agents memory") LIMIT 4',
    'SELECT SENTENCE LET k = BM25(content, "agents memory") LIMIT 4',
    'SELECT SENTENCE LET s = SIMILARITY(content, "agents memory"), k = BM25(content, "agents memory"), '
    'r = RRF(s, k) ORDER BY r DESC LIMIT 4',
    'SELECT DOCUMENT LET s = SIMILARITY(content, "agents memory") LIMIT 3',
    'SELECT SENTENCE ORDER BY meta.tag LIMIT 4',
])
def test_writes_in_between_never_repeat_or_skip_unchanged_rows(query: str) -> None:
    """Between pages, documents are added, deleted and replaced: every row that did not change (its
    document neither deleted nor replaced) comes exactly once, and none comes twice."""
    docs = _corpus(30, seed=3)
    e = _engine(docs=docs)
    rng = random.Random(11)
    before = {_key(h) for h in e.search(query.split(" LIMIT")[0] + " LIMIT 100000")}
    hits = e.search(query)
    seen = [_key(h) for h in hits]
    changed_docs: set[str] = set()
    extra = 0
    while hits.cursor is not None:
        # a write between every two pages: a new document, a deletion, a replacement
        e.add_text("Agents memory tools. Fresh memory agents.", id=f"new{extra}", metadata={"tag": "a"})
        changed_docs.add(f"new{extra}")
        extra += 1
        victim = rng.choice([d for d, _, _ in docs if d not in changed_docs])
        if extra % 2:
            e.delete(victim)
        else:
            e.add_text("Replaced agents memory text.", id=victim, metadata={"tag": "b"})
        changed_docs.add(victim)
        hits = e.search(query, cursor=hits.cursor)
        seen += [_key(h) for h in hits]
    assert len(seen) == len(set(seen)), "a row came twice"
    unchanged = {k for k in before if k[1] not in changed_docs}
    missing = unchanged - set(seen)
    assert not missing, f"rows that did not change were skipped: {sorted(missing)[:5]}"


def test_cursor_errors() -> None:
    e = _engine()
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, "agents") LIMIT 3'
    c = e.search(q).cursor
    assert c is not None
    with pytest.raises(CursorError, match="OFFSET") as info:
        e.search(q + " OFFSET 3", cursor=c)
    assert info.value.line == 1 and info.value.column > 1 and "^" in str(info.value.with_source(q + " OFFSET 3"))
    with pytest.raises(CursorError, match="another query"):
        e.search('SELECT SENTENCE LET s = SIMILARITY(content, "tools") LIMIT 3', cursor=c)
    with pytest.raises(CursorError, match="another query"):
        e.search('SELECT SENTENCE LET s = SIMILARITY(content, $q) LIMIT 3', {"q": "tools"}, cursor=c)
    other = _engine()
    with pytest.raises(CursorError, match="another store"):
        other.search(q, cursor=c)
    with pytest.raises(CursorError, match="not a cursor"):
        e.search(q, cursor="abc")
    with pytest.raises(CursorError, match="damaged"):
        e.search(q, cursor=c[:-6] + "AAAAAA")
    with pytest.raises(NLQLError):
        e.search(q, cursor=c, reranker=_Reranker())


class _Reranker:
    def score(self, query: str, passages: list[str]) -> list[float]:
        return [float(len(p)) for p in passages]


def test_cursor_after_the_data_was_dropped(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    path = tmp_path / "store"
    e = _engine(str(path))
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, "agents") LIMIT 3'
    c = e.search(q).cursor
    again = e.search(q, cursor=c)  # the same store, reopened by the same engine: it continues
    assert again
    e.close()
    reopened = Engine(embedder=HashEmbedder(dim=64), store=str(path))
    assert [_key(h) for h in reopened.search(q, cursor=c)] == [_key(h) for h in again]
    reopened.close()
    shutil.rmtree(path)
    fresh = _engine(str(path))  # the data dropped and written again
    with pytest.raises(CursorError, match="dropped"):
        fresh.search(q, cursor=c)


def test_agent_tool_pages_with_a_cursor() -> None:
    from nlql.agent import search_query, tool_schema

    e = _engine()
    q = 'SELECT SENTENCE LET s = SIMILARITY(content, "agents") LIMIT 3'
    first = search_query(e, q)
    assert isinstance(first["cursor"], str) and len(first["hits"]) == 3
    second = search_query(e, q, cursor=first["cursor"])
    want = [h.id for h in e.search(q.replace("LIMIT 3", "LIMIT 6"))]
    assert [h["id"] for h in first["hits"] + second["hits"]] == want
    assert "error" in search_query(e, q + " OFFSET 1", cursor=first["cursor"])
    assert tool_schema()["input_schema"]["properties"]["cursor"]["type"] == "string"


def test_no_cursor_for_count_and_autocut() -> None:
    e = _engine()
    assert e.search("SELECT COUNT(SENTENCE) BY meta.tag").cursor is None
    c = e.search('SELECT SENTENCE LET s = SIMILARITY(content, "agents") LIMIT 3').cursor
    with pytest.raises(CursorError, match="COUNT"):
        e.search("SELECT COUNT(SENTENCE) BY meta.tag", cursor=c)
    assert e.search('SELECT SENTENCE LET s = SIMILARITY(content, "agents") LIMIT 5 AUTOCUT 1').cursor is None


class _CountingEmbedder(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(dim=64)
        self.texts: list[str] = []

    def embed(self, texts):  # type: ignore[no-untyped-def]
        self.texts.extend(texts)
        return super().embed(texts)


@pytest.mark.parametrize("where", ["", 'WHERE meta.tag == "a"'])
def test_reading_the_cursor_does_not_embed_the_query_again(where: str) -> None:
    e = Engine(embedder=_CountingEmbedder(), store="memory")
    for doc_id, text, meta in _corpus():
        e.add_text(text, id=doc_id, metadata=meta)
    emb = e.embedder
    rows = len(e.search(f'SELECT SENTENCE LET s = SIMILARITY(content, "agents") {where}'))
    for n in (3, rows - 1, rows):  # a page in the middle, one row before the end, exactly at the end
        emb.texts.clear()
        hits = e.search(f'SELECT SENTENCE LET s = SIMILARITY(content, "agents") {where} LIMIT {n}')
        cursor = hits.cursor
        assert emb.texts.count("agents") <= 1, (n, emb.texts)
        assert (cursor is None) == (n >= rows)
