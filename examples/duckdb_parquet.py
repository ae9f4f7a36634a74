"""NLQL over a Parquet file where it lies: DuckDB reads it in place, hybrid plans run as one statement.

    python examples/duckdb_parquet.py                 # all-MiniLM-L6-v2 (offline model)
    NLQL_EXAMPLE_EMBEDDER=hash python examples/duckdb_parquet.py   # no model at all

Writes a Parquet file of passages (the Python standard library docs that ship with nlql: one row per
paragraph, with an ``embedding`` column and metadata columns), then opens it with
``DuckDBStore.from_table`` — read-only, nothing copied — prints the plan of a hybrid query (each arm's
SQL, the RRF formula, the whole DuckDB statement with numbered placeholders), runs it, shows that the
file is unchanged and cannot be written, and that the built-in store gives the same rows.
Needs ``pip install 'nlql-engine[duckdb]'``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from nlql import Engine, NLQLError
from nlql.data import load_demo

QUERY = """
SELECT SENTENCE
LET sem = SIMILARITY(content, $q),
    kw  = BM25(content, $q),
    score = RRF(sem, kw, k => 60)
WHERE meta.kind == "module" AND meta.section IN ("Text Processing", "Data Types", "Generic Operating System")
ORDER BY score DESC
LIMIT 5
"""


def make_embedder(name: str) -> Any:
    if name == "hash":
        from nlql.embedders import HashEmbedder

        return HashEmbedder()
    from nlql.embedders import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


def passages(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per paragraph: what a data pipeline would have written to Parquet."""
    out = []
    for d in docs:
        for i, para in enumerate(p for p in d["text"].split("\n\n") if p.strip()):
            out.append({"id": f"{d['id']}/{i}", "text": " ".join(para.split()), **d["metadata"]})
    return out


def write_parquet(path: Path, rows: list[dict[str, Any]], embedder: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    vectors = embedder.embed([r["text"] for r in rows])
    columns = {k: [r.get(k) for r in rows] for k in ("id", "text", "kind", "module", "section")}
    columns["embedding"] = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), vectors.shape[1])
    pq.write_table(pa.table(columns), path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--embedder", choices=["minilm", "hash"],
                    default=os.environ.get("NLQL_EXAMPLE_EMBEDDER", "minilm"))
    ap.add_argument("--docs", type=int, default=200, help="how many demo documents to turn into passages")
    ap.add_argument("--question", default="split a string with a regular expression")
    args = ap.parse_args(argv)

    from nlql.stores import DuckDBStore

    embedder = make_embedder(args.embedder)
    rows = passages(load_demo()[: args.docs])
    with tempfile.TemporaryDirectory(prefix="nlql-example-duckdb-") as tmp:
        path = Path(tmp) / "passages.parquet"
        write_parquet(path, rows, embedder)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        print(f"wrote {len(rows)} passages to {path.name} ({path.stat().st_size // 1024} KiB)\n")

        store = DuckDBStore.from_table(None, str(path), text="text", vector="embedding", id="id",
                                       metadata=["kind", "module", "section"])
        engine = Engine(embedder=embedder, store=store)
        params = {"q": args.question}
        print(engine.explain(QUERY, params=params))
        hits = engine.search(QUERY, params=params)
        print(f"\nsearch: {len(hits)} hits ({hits.stats['store']['path']}, rows per arm "
              f"{hits.stats['store']['arm_rows']})")
        for i, h in enumerate(hits, start=1):
            print(f"{i}. [{h.id}] score={h.scores['score']:.5f} sem={h.scores['sem']:.3f} "
                  f"kw={h.scores['kw']:.3f}  {h.content[:80]!r}")
        try:
            engine.add_text("A new passage.", id="new")
        except NLQLError as exc:
            print(f"\nwriting is refused: {str(exc).splitlines()[0]}")
        engine.close()
        print(f"the file is unchanged: {hashlib.sha256(path.read_bytes()).hexdigest() == digest}")

        # the same through a store URL
        url = f"duckdb:///{path}?text=text&vector=embedding&id=id&metadata=kind,module,section"
        again = Engine(embedder=embedder, store=url)
        same_url = [h.id for h in again.search(QUERY, params=params)] == [h.id for h in hits]
        again.close()
        print(f"store={url.split('?')[0]}?…: same rows: {same_url}")

        builtin = Engine(embedder=embedder)
        builtin.add_texts([r["text"] for r in rows], ids=[r["id"] for r in rows],
                          metadatas=[{k: r[k] for k in ("kind", "module", "section")} for r in rows])
        # a passage can hold several sentences (the built-in store splits them): compare a filter query
        filtered = 'SELECT DOCUMENT WHERE meta.section == "Text Processing" AND content CONTAINS "string"'
        want = [h.id for h in builtin.search(filtered)]
        got = [h.id for h in Engine(embedder=embedder, store=url).search(filtered)]
        print(f"built-in store: same documents for a filter query: {got == want} ({len(got)} documents)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
