"""The `nlql` command: in process through its entry point (`nlql.cli.main`), and in a subprocess where
the process itself is what is tested (`python -m nlql`, `python -m nlql.cli`, an interrupted ingest).

In process, each call sees what a fresh `nlql` process would see (tests/cli_inprocess.py says how).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_inprocess import ROOT, nlql, nlql_process

SIM = 'SELECT SENTENCE LET rel = SIMILARITY(content, "{}") LIMIT {}'


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    docs = root / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "cats.md").write_text("# Cats\n\nCats sleep most of the day. They hunt at night.\n", encoding="utf-8")
    (docs / "sub" / "agents.txt").write_text("Agents call tools to act in the world.\nThey plan first.\n",
                                             encoding="utf-8")
    (docs / "more.jsonl").write_text(
        json.dumps({"id": "tax", "text": "Tax rules change every year.", "metadata": {"year": 2024},
                    "lang": "en"}) + "\n\n"
        + json.dumps({"text": "Le chat dort au soleil.", "lang": "fr"}) + "\n",
        encoding="utf-8")
    (docs / ".hidden.txt").write_text("never ingested", encoding="utf-8")
    (docs / "notes.pdf").write_bytes(b"%PDF")  # not a supported type: skipped inside a directory
    return root


@pytest.fixture(scope="module")
def store(corpus: Path) -> Path:
    store = corpus / "store"
    r = nlql_process("ingest", "docs", "--store", str(store), "--embedder", "hash", cwd=corpus)
    assert r.returncode == 0, r.stderr
    assert "ingested 4 documents" in r.stdout
    assert "sentences" in r.stdout and " s " in r.stdout.replace("s (", "s  (")
    # piped, so plain progress lines: sentences embedded and their rate
    assert "ingest: done, 7 sentences of 4 documents" in r.stderr and "sentences/s" in r.stderr
    return store


def query_json(store: Path, q: str, *extra: str) -> dict[str, Any]:
    r = nlql("query", q, "--store", str(store), "--json", *extra, cwd=store.parent)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# ----------------------------------------------------------------------------------------- ingest


def _record(store: Path, key: str) -> dict[str, Any]:
    import sqlite3

    with sqlite3.connect(store / "nlql.sqlite") as db:
        (value,) = db.execute("SELECT value FROM info WHERE key = ?", (key,)).fetchone()
    return json.loads(value)


def test_ingest_writes_a_store_that_remembers_its_embedder(store: Path) -> None:
    assert (store / "nlql.sqlite").is_file()
    assert _record(store, "embedder") == {"model": "hash-384", "dim": 384, "normalization": "l2"}
    assert _record(store, "analyzer")["name"] == "english"
    assert not (store / "nlql-cli.json").exists()  # the store keeps its own record now


def test_ingested_documents_have_ids_and_metadata_by_file_type(store: Path) -> None:
    data = query_json(store, "SELECT DOCUMENT")
    by_id = {h["id"]: h for h in data["hits"]}
    assert set(by_id) == {"docs/cats.md", "docs/sub/agents.txt", "tax", "docs/more.jsonl:3"}
    md = by_id["docs/cats.md"]["metadata"]
    assert md["format"] == "md" and md["title"] == "Cats" and md["source"] == "docs/cats.md"
    assert "modified" in md
    assert by_id["tax"]["metadata"] == {"year": 2024, "lang": "en"}  # extra top-level field → metadata
    assert by_id["docs/more.jsonl:3"]["metadata"] == {"lang": "fr"}


def test_ingest_split_paragraph_makes_one_document_per_paragraph(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\nFirst paragraph.\n\nSecond one here.\n", encoding="utf-8")
    store = tmp_path / "s"
    r = nlql("ingest", "a.md", "--store", str(store), "--embedder", "hash", "--split", "paragraph", "-q",
             cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ingested 3 documents" in r.stdout
    data = query_json(store, "SELECT DOCUMENT")
    assert [h["id"] for h in data["hits"]] == ["a.md:1", "a.md:2", "a.md:3"]
    assert data["hits"][2]["metadata"]["paragraph"] == 3


def test_ingest_reports_bad_input_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"id": 1}\n', encoding="utf-8")
    (tmp_path / "x.pdf").write_bytes(b"%PDF")
    cases = [
        (["bad.jsonl"], 'bad.jsonl:2: needs a "text" string field'),
        (["x.pdf"], "unsupported file type '.pdf'"),
        (["missing.txt"], "missing.txt: no such file or directory"),
    ]
    for paths, message in cases:
        r = nlql("ingest", *paths, "--store", str(tmp_path / "s"), "--embedder", "hash", cwd=tmp_path)
        assert r.returncode == 1, (paths, r.stderr)
        assert message in r.stderr
        assert "Traceback" not in r.stderr


def test_an_embedder_other_than_the_stores_is_refused(store: Path) -> None:
    for command in (["query", "SELECT SENTENCE"], ["ingest", "docs"]):
        r = nlql(*command, "--store", str(store), "--embedder", "minilm", cwd=store.parent)
        assert r.returncode == 1
        assert "built with the 'hash' embedder (hash-384), not 'minilm'" in r.stderr
        assert "re-embed into a new store: nlql ingest FILES --store NEW_DIR --embedder minilm" in r.stderr
        assert "Traceback" not in r.stderr
    assert _record(store, "embedder")["model"] == "hash-384"  # nothing was changed


def test_an_interrupted_first_ingest_still_recorded_its_embedder(tmp_path: Path) -> None:
    """The record is written when the store is opened, before any vector: a crash cannot lose it."""
    (tmp_path / "bad.jsonl").write_text('{"text": "one sentence."}\n', encoding="utf-8")
    store = tmp_path / "s"
    # an analyzer name that fails after the store exists would be a usage error; a real crash is simulated
    # by opening the store and stopping before any write
    code = ("import sys; from nlql.cli import open_engine, EmbedderName; "
            "e, _ = open_engine(sys.argv[1], EmbedderName.hash, create=True); import os; os._exit(3)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code, str(store)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 3, r.stderr
    assert _record(store, "embedder")["model"] == "hash-384"
    r = nlql("ingest", "bad.jsonl", "--store", str(store), "--embedder", "minilm", cwd=tmp_path)
    assert r.returncode == 1 and "built with the 'hash' embedder" in r.stderr


def test_a_store_recorded_by_an_old_cli_is_read_and_adopted(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Cats sleep all day.", encoding="utf-8")
    store = tmp_path / "s"
    r = nlql("ingest", "a.txt", "--store", str(store), "--embedder", "hash", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    import sqlite3

    with sqlite3.connect(store / "nlql.sqlite") as db:  # as an older version left it: no record
        db.execute("DELETE FROM info WHERE key IN ('embedder', 'analyzer')")
    (store / "nlql-cli.json").write_text(json.dumps({"embedder": "hash", "dim": 384}) + "\n", encoding="utf-8")
    r = nlql("query", SIM.format("cats", 1), "--store", str(store), "--json", cwd=tmp_path)  # no --embedder
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["hits"][0]["content"] == "Cats sleep all day."
    assert _record(store, "embedder")["model"] == "hash-384"  # adopted on first open


def test_piped_ingest_prints_periodic_progress_lines(tmp_path: Path) -> None:
    lines = [json.dumps({"id": f"d{i}", "text": f"Sentence {i} of the doc. Another {i} here. A third one."})
             for i in range(200)]
    (tmp_path / "many.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = nlql("ingest", "many.jsonl", "--store", str(tmp_path / "s"), "--embedder", "hash", "--batch-size", "50",
             cwd=tmp_path, env={"NLQL_PROGRESS_INTERVAL": "0"})
    assert r.returncode == 0, r.stderr
    progress = [line for line in r.stderr.splitlines() if line.startswith("ingest: ")]
    assert progress[0].startswith("ingest: 64/600 sentences (10%), 0/200 documents")  # after the first chunk
    assert "sentences/s, eta " in progress[0]
    counts = [int(line.split()[1].split("/")[0].replace(",", "")) for line in progress[:-1]]
    assert counts == sorted(counts) and len(counts) >= 4  # it moves within and across batches
    assert progress[-1].startswith("ingest: done, 600 sentences of 200 documents in ")
    assert "ingested 200 documents, 600 sentences" in r.stdout


def test_analyzer_is_chosen_at_ingest_and_recorded(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("The running cats sat.", encoding="utf-8")
    store = tmp_path / "s"
    r = nlql("ingest", "a.txt", "--store", str(store), "--embedder", "hash", "--analyzer", "plain", "-q",
             cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert _record(store, "analyzer")["name"] == "plain"
    bm25 = 'SELECT SENTENCE LET k = BM25(content, "{}") WHERE k > 0 LIMIT 1'
    assert query_json(store, bm25.format("the"))["hits"]  # 'the' is a term for the plain analyzer
    assert not query_json(store, bm25.format("cat"))["hits"]  # and 'cats' is not stemmed
    r = nlql("ingest", "a.txt", "--store", str(store), "--analyzer", "english", "-q", cwd=tmp_path)
    assert r.returncode == 1 and "BM25 analyzer 'plain'" in r.stderr and "Traceback" not in r.stderr
    r = nlql("ingest", "a.txt", "--store", str(tmp_path / "t"), "--embedder", "hash", "--analyzer", "klingon",
             cwd=tmp_path)
    assert r.returncode == 1 and "unknown analyzer 'klingon'" in r.stderr


# ------------------------------------------------------------------------------------------ query


def test_query_json_output_parses_and_ranks(store: Path) -> None:
    data = query_json(store, SIM.format("agents using tools", 2))
    assert set(data) == {"hits", "stats", "warnings"}
    top = data["hits"][0]
    assert top["content"] == "Agents call tools to act in the world."
    assert top["doc_id"] == "docs/sub/agents.txt" and top["unit"] == "SENTENCE"
    assert isinstance(top["scores"]["rel"], float)
    assert len(data["hits"]) == 2


def test_query_table_shows_rank_id_scores_content_and_metadata(store: Path) -> None:
    r = nlql("query", SIM.format("cats sleeping", 1), "--store", str(store), cwd=store.parent)
    assert r.returncode == 0, r.stderr
    assert "docs/cats.md#" in r.stdout
    assert "rel 0." in r.stdout
    assert "format=md" in r.stdout
    assert "1 row" in r.stdout


def test_query_params_limit_and_explain(store: Path) -> None:
    q = "SELECT SENTENCE LET rel = SIMILARITY(content, $q) WHERE meta.year >= $y LIMIT 10"
    data = query_json(store, q, "-p", "q=tax rules", "--param", "y=2020")
    assert [h["doc_id"] for h in data["hits"]] == ["tax"]
    data = query_json(store, "SELECT SENTENCE", "--limit", "2", "--explain")
    assert len(data["hits"]) == 2
    assert data["explain"]["limit"] == 2
    r = nlql("query", "SELECT SENTENCE LIMIT 1", "--store", str(store), "--explain", cwd=store.parent)
    assert r.returncode == 0
    assert r.stdout.index("recall: scan") < r.stdout.index("#")


def test_query_from_stdin(store: Path) -> None:
    r = nlql("query", "-", "--store", str(store), "--json", cwd=store.parent,
             stdin="SELECT DOCUMENT\nWHERE meta.lang == 'fr';\n")
    assert r.returncode == 0, r.stderr
    assert [h["content"] for h in json.loads(r.stdout)["hits"]] == ["Le chat dort au soleil."]


def test_empty_results_say_so_plainly(store: Path) -> None:
    r = nlql("query", 'SELECT SENTENCE WHERE content CONTAINS "zebra"', "--store", str(store), cwd=store.parent)
    assert r.returncode == 0
    assert r.stdout.strip() == "no matching content"
    assert query_json(store, 'SELECT SENTENCE WHERE content CONTAINS "zebra"')["hits"] == []


def test_a_bad_query_exits_1_with_a_caret_and_no_traceback(store: Path) -> None:
    r = nlql("query", "SELECT SENTENCE\nWHERE rell >= 0.3", "--store", str(store), cwd=store.parent)
    assert r.returncode == 1
    assert "unknown name 'rell' at line 2, column 7" in r.stderr
    assert "  2 | WHERE rell >= 0.3" in r.stderr
    assert "    |       ^^^^" in r.stderr
    assert "hint: did you mean" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_debug_shows_the_traceback(store: Path) -> None:
    for args in (["--debug", "query", "SELECT SENTENCE WHERE x", "--store", str(store)],
                 ["query", "SELECT SENTENCE WHERE x", "--store", str(store), "--debug"]):
        r = nlql(*args, cwd=store.parent)
        assert r.returncode == 1
        assert "Traceback" in r.stderr and "CheckError" in r.stderr


def test_a_missing_store_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / ("a-folder-name-long-enough-that-the-message-passes-120-columns-" * 2) / "nowhere"
    r = nlql("query", "SELECT SENTENCE", "--store", str(missing), cwd=tmp_path)
    assert r.returncode == 1
    # one line however long (piped stderr is not wrapped: a script greps it whole)
    assert f"error: no NLQL store at {missing}: run `nlql ingest … --store {missing}` first\n" in r.stderr
    assert "Traceback" not in r.stderr
    assert not missing.exists()
    (tmp_path / "empty").mkdir()
    r = nlql("explain", "SELECT SENTENCE", "--store", str(tmp_path / "empty"), cwd=tmp_path)
    assert r.returncode == 1 and "no NLQL store at" in r.stderr


def test_module_entry_point_nlql_cli_works_too(store: Path) -> None:
    r = nlql("query", "SELECT SENTENCE LIMIT 1", "--store", str(store), "--json", cwd=store.parent,
             module="nlql.cli")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["hits"]) == 1


# ---------------------------------------------------------------------------------------- explain


def test_explain_text_and_json(store: Path) -> None:
    q = 'SELECT SENTENCE LET rel = SIMILARITY(content, "x") WHERE meta.lang == "en" LIMIT 3'
    r = nlql("explain", q, "--store", str(store), cwd=store.parent)
    assert r.returncode == 0, r.stderr
    assert "recall: knn on rel" in r.stdout and "pushed filter (memory)" in r.stdout
    r = nlql("explain", q, "--json", cwd=store.parent)  # no store: an empty in-memory one
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["limit"] == 3 and plan["recall"]["strategy"] == "knn"


# ------------------------------------------------------------------------------------------ check


def test_check_exit_codes(tmp_path: Path) -> None:
    ok = nlql("check", 'SELECT SENTENCE LET rel = SIMILARITY(content, "x") WHERE rel > 0.2 LIMIT 3', cwd=tmp_path)
    assert ok.returncode == 0 and "valid" in ok.stdout
    bad = nlql("check", "SELECT SENTENCE WHERE rell >= 0.3 AND topic == 1", cwd=tmp_path)
    assert bad.returncode == 1
    assert bad.stdout.count("^") >= 2 and "2 problems" in bad.stdout
    assert "Traceback" not in bad.stdout + bad.stderr
    syntax = nlql("check", "SELECT SENTENCE LIMIT", cwd=tmp_path)
    assert syntax.returncode == 1 and "^" in syntax.stdout
    assert nlql("check", cwd=tmp_path).returncode == 2                       # missing query
    assert nlql("check", "SELECT SENTENCE", "--nope", cwd=tmp_path).returncode == 2
    assert nlql("check", "SELECT SENTENCE", "-p", "novalue", cwd=tmp_path).returncode == 2


def test_check_json_and_params(tmp_path: Path) -> None:
    r = nlql("check", "SELECT SENTENCE WHERE meta.d WITHIN 'blorp'", "--json", cwd=tmp_path)
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert data["valid"] is False and data["diagnostics"][0]["column"] == 37
    q = "SELECT SENTENCE LET r = SIMILARITY(content, $q) LIMIT 1"
    assert nlql("check", q, cwd=tmp_path).returncode == 0                    # params not known: fine
    assert nlql("check", q, "-p", "q=hello", cwd=tmp_path).returncode == 0
    r = nlql("check", q, "-p", "z=1", "--json", cwd=tmp_path)
    assert r.returncode == 1
    messages = [d["message"] for d in json.loads(r.stdout)["diagnostics"]]
    assert any("$q" in m for m in messages) and any("$z" in m for m in messages)
    r = nlql("check", "-", "--json", cwd=tmp_path, stdin="SELECT DOCUMENT;")
    assert r.returncode == 0 and json.loads(r.stdout) == {"valid": True, "diagnostics": []}


# ------------------------------------------------------------------------------------------- repl


def test_repl_reads_multi_line_queries_and_commands(store: Path) -> None:
    script = "\n".join([
        "SELECT SENTENCE",
        "WHERE content CONTAINS 'tools';",          # ends with ;
        ":explain SELECT SENTENCE LIMIT 1;",
        "SELECT SENTENCE WHERE rell > 1",
        "",                                          # an empty line ends a query too
        ":param q=tax",
        ":json",
        "SELECT SENTENCE LET rel = SIMILARITY(content, $q) LIMIT 1;",
        ":bogus",
        ":quit",
        "SELECT SENTENCE;",                          # never read
    ]) + "\n"
    r = nlql("repl", "--store", str(store), cwd=store.parent, stdin=script)
    assert r.returncode == 0, r.stderr
    assert "Agents call tools to act in the world." in r.stdout
    assert "recall: scan" in r.stdout
    assert "unknown name 'rell'" in r.stderr and "^^^^" in r.stderr
    assert '"content": "Tax rules change every year."' in r.stdout
    assert "unknown command :bogus" in r.stderr
    assert "Traceback" not in r.stderr


def test_ingest_says_how_many_documents_replaced_and_delete_removes(tmp_path: Path) -> None:
    rows = [{"id": "a", "text": "Alpha one."}, {"id": "b", "text": "Beta two."}, {"id": "a", "text": "Alpha again."}]
    (tmp_path / "one.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    store = tmp_path / "s"
    r = nlql("ingest", "one.jsonl", "--store", str(store), "--embedder", "hash", "-q", cwd=tmp_path)
    assert r.returncode == 0 and "ingested 3 documents (1 of them replaced" in r.stdout, r.stdout + r.stderr
    (tmp_path / "two.jsonl").write_text(json.dumps({"id": "b", "text": "Beta new."}) + "\n"
                                        + json.dumps({"id": "c", "text": "Gamma."}) + "\n", encoding="utf-8")
    r = nlql("ingest", "two.jsonl", "--store", str(store), "-q", cwd=tmp_path)
    assert "ingested 2 documents (1 of them replaced" in r.stdout and "holds 3 sentences" in r.stdout, r.stdout
    r = nlql("delete", "a", "c", "--store", str(store), cwd=tmp_path)
    assert r.returncode == 0 and "deleted 2 documents" in r.stdout and "holds 1 sentences" in r.stdout, r.stdout
    r = nlql("delete", "b", "zzz", "--store", str(store), cwd=tmp_path)
    assert r.returncode == 1 and "deleted 1 document;" in r.stdout and "not in the store: zzz" in r.stderr
    assert nlql("delete", "b", "--store", str(tmp_path / "nope"), cwd=tmp_path).returncode == 1


def test_a_bare_store_name_is_the_same_directory_for_ingest_and_query(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Hello world.\n", encoding="utf-8")
    missing = nlql("query", "SELECT SENTENCE", "--store", "s-dup", cwd=tmp_path)
    assert missing.returncode == 1 and "--store s-dup" in missing.stderr  # what query recommends …
    r = nlql("ingest", "a.txt", "--store", "s-dup", "--embedder", "hash", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr                                     # … ingest accepts
    assert (tmp_path / "s-dup").is_dir()
    q = nlql("query", "SELECT SENTENCE", "--store", "s-dup", "--format", "jsonl", cwd=tmp_path)
    assert q.returncode == 0 and "Hello world." in q.stdout
    typo = nlql("ingest", "a.txt", "--store", "qdrnt", "--embedder", "hash", "-q", cwd=tmp_path)
    assert typo.returncode == 1 and not (tmp_path / "qdrnt").exists()     # a typo of a store name is refused


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")
def test_progress_on_a_pty_with_no_size_is_plain_lines() -> None:
    import fcntl
    import pty
    import struct
    import termios

    from nlql.progress import PlainProgress, TerminalProgress, make_progress

    master, slave = pty.openpty()
    try:
        with open(slave, "w", closefd=False) as stream:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 0, 0, 0, 0))  # a pty nobody sized
            report = make_progress(True, stream=stream)
            assert isinstance(report, PlainProgress)
            report.start(10, documents=2)
            report.advance(10, documents=2)
            report.close()
            stream.flush()
            assert "10 sentences" in os.read(master, 4096).decode()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
            assert isinstance(make_progress(True, stream=stream), TerminalProgress)
    finally:
        os.close(master)
        os.close(slave)
