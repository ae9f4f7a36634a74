#!/usr/bin/env python3
"""The tables NLQL writes on DuckDB, an earlier revision against this tree, compared row for row (issue 35).

An ingest change must write the same tables. Each tree (``--before``: a revision checked out with
``bench.common.earlier_tree``; and this checkout) runs, in a child process of its own, the same writes
into an in-memory ``DuckDBStore`` through ``Engine.add_texts`` (a hash embedder of dimension 16, so no
model is loaded), then reads every table back in its stored order:

- ``synthetic``: 6,000 generated documents of one to three sentences in batches of 700 and 1,024 —
  whole ASCII batches and batches mixing CJK, katakana, accents, NUL and BEL; repeated ids within and
  across calls; nested and list metadata, numeric strings, NUL, BEL and lone surrogates in metadata,
  metadata entity names needing escapes; then small calls with control characters and a lone surrogate
  in the text;
- ``real``: the corpora in ``bench/data`` (the standard-library and multilingual sets) and this
  machine's man pages (``bench/quality.py``'s set, when there are any), with every tenth id repeated,
  typed, nested and odd metadata added, control characters in some texts, written in batches of 256 and
  500, then 300 of them written again (replacements).

Every table must hold the same rows in the same order, except ``<prefix>_entity_edges``, compared as a
set (its rows come from a ``GROUP BY``, whose order DuckDB does not fix from one run to the next, in
either tree). Prints the tables and their row counts and exits 1 on any difference.

    python bench/duckdb_ingest_tables.py --before 18b12ed
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import earlier_tree, log, tree_env  # noqa: E402

# run in a child whose sys.path starts with the tree: writes both corpora, dumps every table as JSON
CHILD = r"""
import hashlib, json, os, sys
tree, data_root, out = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, tree)
import numpy as np
from nlql import Engine
from nlql.stores.duckdb import DuckDBStore


class Emb:
    name = "hash16"
    dim = 16

    def embed(self, texts):
        m = np.array([np.frombuffer(hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest()[:16], dtype=np.uint8)
                      for t in texts], dtype=np.float32) - 127.5
        return m / np.linalg.norm(m, axis=1, keepdims=True)


def dump(eng):
    conn = eng.store._conn
    res = {}
    for (t,) in conn.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall():
        cols = [r[0] for r in conn.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = $1 "
                                           "ORDER BY column_index", [t]).fetchall()]
        res[t] = {"cols": cols, "rows": [repr(r) for r in conn.execute(f'SELECT * FROM "{t}"').fetchall()]}
    return res


def synthetic():
    rng = np.random.default_rng(7)
    words = ["Alice", "Bob", "Paris", "London", "the", "quick", "brown", "fox", "running", "stories", "NASA",
             "ÉCOLE", "café", "naïve", "東京", "タワー", "über", "2025-01-02", "42", "3.5", "x_y", "a\x00b", "c\x07d",
             "Straße", "İstanbul", "ﬁle", "O'Brien"]
    plain = [w for w in words if w.isascii() and "\x00" not in w and "\x07" not in w]
    texts, ids, metas = [], [], []
    for i in range(6000):
        pool = plain if (i // 1500) % 2 == 0 else words
        k = rng.integers(3, 25)
        texts.append(" ".join(" ".join(rng.choice(pool, k)) + rng.choice([".", "!", "?"])
                              for _ in range(rng.integers(1, 4))))
        ids.append(str(i % 4500) if i % 7 else f"id-{i % 300}")
        m = {"status": ["draft", "pub", "Pub"][i % 3], "year": 2000 + i % 30, "score": float(i % 11) / 3, "tag": f"t{i % 50}"}
        if i % 5 == 0:
            m["nested"] = {"a": {"b": [1, "2", None, True]}, "d": "2024-03-0%d" % (1 + i % 9)}
        if i % 9 == 0:
            m["odd"] = "a\x00b\ud800" if i % 2 else "x\x07y"
        if i % 13 == 0:
            m["entities"] = ["Zed Corp", "Alice"]
        if i % 17 == 0:
            m["list"] = ["x", 2, 2.0, None]
        if i % 4 == 1:
            m = {"tag": f"t{i % 50}", "year": str(2000 + i % 30)}
        metas.append(m)
    eng = Engine(embedder=Emb(), store=DuckDBStore(), warm_up=False)
    eng.add_texts(texts[:3000], ids=ids[:3000], metadatas=metas[:3000], batch_size=700)
    eng.add_texts(texts[3000:], ids=ids[3000:], metadatas=metas[3000:], batch_size=1024)
    eng.add_texts(["Plain ASCII only. Bob met Alice in Paris."] * 3, ids=["p1", "p2", "p1"],
                  metadatas=[{"a": 1}, {"a": 2}, {"a": 3}])
    eng.add_text("Ünïcödé text here", id="u1", metadata={"k": "v"})
    eng.add_texts(["Names given here.", "And here too."], ids=["e1", "e2"],
                  metadatas=[{"entities": ["Bad\x01Name", "Sur\ud800gate", "Plain"]}, {"entities": ["Bad\x01Name"]}])
    eng.add_texts(["Ctrl \x07 bell c\x07d and a\x00b nul, Bob.", "Bob again in Paris.", "x\x01y\x08z"],
                  ids=["c1", "c2", "c3"], metadatas=[{"k": "a\x00"}, {}, {"k": 1}])
    eng.add_texts(["Lone \ud800 surrogate Bob.", "Another ASCII one with Carol."], ids=["s1", "s2"])
    return dump(eng)


def real():
    docs = []
    for name in ("stdlib-known-item", "multilingual"):
        with open(os.path.join(data_root, name, "corpus.jsonl"), encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                docs.append((d["_id"], d["text"], {k: v for k, v in d.items() if k not in ("_id", "text")}))
    try:
        from bench.quality import build_man_set
        docs += [(f"man:{i}", p["text"], {"set": "man", "title": p.get("title", "")})
                 for i, p in list(build_man_set().corpus.items())[:3000]]
    except Exception as exc:  # noqa: BLE001 - a machine without man pages: the two sets alone
        print(f"no man pages: {type(exc).__name__}: {exc}", file=sys.stderr)
    texts, ids, metas = [], [], []
    for i, (doc_id, text, meta) in enumerate(docs):
        m = dict(meta, n=i % 17, ratio=(i % 9) / 4, when=f"2023-0{1 + i % 9}-1{i % 10}")
        if i % 6 == 0:
            m["nested"] = {"a": {"b": [i % 3, str(i % 3), None]}, "flag": bool(i % 2)}
        if i % 11 == 0:
            m["odd"] = "x\x00y\ud800z" if i % 2 else "bell\x07"
        if i % 23 == 0:
            m["entities"] = ["Guido van Rossum", "ACME\x01Corp"]
        if i % 29 == 0:
            text = text + " \x07 ctrl \x00 nul"
        texts.append(text)
        ids.append(doc_id if i % 10 or not ids else ids[i // 2])
        metas.append(m)
    eng = Engine(embedder=Emb(), store=DuckDBStore(), warm_up=False)
    half = len(texts) // 2
    eng.add_texts(texts[:half], ids=ids[:half], metadatas=metas[:half], batch_size=256)
    eng.add_texts(texts[half:], ids=ids[half:], metadatas=metas[half:], batch_size=500)
    eng.add_texts(texts[:300], ids=ids[:300], metadatas=metas[:300], batch_size=128)  # replacements
    return dump(eng) | {"_documents": {"cols": [], "rows": [str(len(docs))]}}


with open(out, "w", encoding="utf-8") as f:
    json.dump({"synthetic": synthetic(), "real": real()}, f)
"""

UNORDERED = ("_entity_edges",)  # tables whose row order DuckDB does not fix (a GROUP BY's)


def run_child(tree: Path, out: Path) -> dict:
    subprocess.run([sys.executable, "-c", CHILD, str(tree), str(ROOT / "bench" / "data"), str(out)], cwd=tree,
                   env=tree_env(tree), check=True)
    return json.loads(out.read_text(encoding="utf-8"))


def compare(old: dict, new: dict) -> list[str]:
    """The differences between two dumps (empty: the same tables)."""
    problems = []
    for corpus in ("synthetic", "real"):
        a, b = old[corpus], new[corpus]
        if set(a) != set(b):
            problems.append(f"{corpus}: tables {sorted(set(a) ^ set(b))} in one tree only")
        for table in sorted(set(a) & set(b)):
            if a[table]["cols"] != b[table]["cols"]:
                problems.append(f"{corpus}: {table} has other columns")
            ra, rb = a[table]["rows"], b[table]["rows"]
            if table.endswith(UNORDERED):
                ra, rb = sorted(ra), sorted(rb)
            if ra != rb:
                first = next((i for i, (x, y) in enumerate(zip(ra, rb)) if x != y), min(len(ra), len(rb)))
                problems.append(f"{corpus}: {table} differs ({len(ra)} against {len(rb)} rows; first at row {first})")
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="18b12ed", help="the earlier revision (checked out for the run)")
    args = ap.parse_args()
    with earlier_tree(args.before) as (short, tree, scratch), tempfile.TemporaryDirectory() as tmp:
        old = run_child(tree, Path(tmp) / "old.json")
        new = run_child(ROOT, Path(tmp) / "new.json")
    for corpus in ("synthetic", "real"):
        counts = {t.removeprefix("nlql_"): len(v["rows"]) for t, v in new[corpus].items() if not t.startswith("_")}
        log(f"[duckdb_ingest_tables] {corpus}: {counts}")
    problems = compare(old, new)
    for p in problems:
        print(p)
    print(f"{short} against this tree: " + ("the same tables" if not problems else f"{len(problems)} differences"))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
