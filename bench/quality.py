#!/usr/bin/env python3
"""Retrieval quality of NLQL's scoring arms: SIMILARITY alone, BM25 alone, and their RRF (issue 7),
and ``engine.ask`` with the default router (issue 14).

Every run goes through NLQL on an :class:`~nlql.Engine` with ``SELECT DOCUMENT`` (each passage is one
document; a document scores as its best sentence, SPEC §6):

    SELECT DOCUMENT LET s = SIMILARITY(content, $q) ORDER BY s DESC LIMIT 100
    SELECT DOCUMENT LET k = BM25(content, $q) ORDER BY k DESC LIMIT 100
    SELECT DOCUMENT LET s = SIMILARITY(content, $q), k = BM25(content, $q), f = RRF(s, k, k => 60)
        ORDER BY f DESC LIMIT 100

Data sets:

* ``--beir DIR``: any data set in the standard BEIR layout (``corpus.jsonl``, ``queries.jsonl``,
  ``qrels/test.tsv``); reports nDCG@10 (linear gain, as trec_eval) and recall@100.
* the default, ``bench/data/stdlib-known-item``: a known-item set made from the Python standard library's
  docstrings (PSF licence; see its README). Query = a function's or class's one-line summary; the one
  relevant passage = the rest of its docstring, among every other such passage. Reports MRR@10 and
  recall@10 (plus nDCG@10 and recall@100). ``--build`` regenerates it deterministically.
* ``man-pages`` (``--set man``): this machine's manual pages (sections 1 and 8 of everyday packages: the
  NAME line and the start of DESCRIPTION), built at bench time (not shipped: their licences vary), with
  60 task questions written and labelled by hand in ``bench/data/man-queries`` ("how much disk space a
  directory uses" → ``du``). ``--set both`` (the default) runs both sets.

Every set runs with the default English analyzer (stopwords + stemming), then BM25 and RRF again with the
``plain`` analyzer of earlier versions, and a small fusion sweep (``k => 10``, weights ``[2, 1]`` and
``[1, 2]``, and ``k => 10, weights => [3, 1]``) beside the default ``RRF(s, k, k => 60)``. Headline:
nDCG@10 and recall@10; ``verdict`` says for each fusion setting whether it reaches the best single arm.

The embedder is the real all-MiniLM-L6-v2 (offline) behind an on-disk cache (``bench/.cache``), so a
rerun does not re-embed; ``--embedder hash`` uses the hash embedder (fast, for smoke tests). No
cross-encoder ships offline here, so the rerank row is reported as not available.

    python bench/quality.py [--set stdlib|man|both] [--beir DIR] [--embedder minilm|hash] [--limit N] [--build]

Writes bench/results/quality.json (stdlib) and quality_man.json (man pages).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import json
import math
import os
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


def build_man_set(max_chars: int = 700) -> BeirSet:
    """The man-page set, built from this machine: one passage per section 1/8 page of :data:`MAN_PACKAGES`
    (its NAME line and the start of its DESCRIPTION), queries and labels from ``bench/data/man-queries``.

    The pages are not shipped (their licences vary by package); the queries and their labels are ours.
    A label naming a page this machine does not have is dropped, and a query left without one too.
    """
    import gzip

    files: list[Path] = []
    info_dir = Path("/var/lib/dpkg/info")
    for pkg in MAN_PACKAGES:
        for lst in (info_dir / f"{pkg}.list", info_dir / f"{pkg}:amd64.list"):
            if lst.is_file():
                files += [Path(line.strip()) for line in lst.read_text(encoding="utf-8", errors="replace").splitlines()
                          if re.match(r"^/usr/share/man/man[18]/[^/]+\.[18]\w*\.gz$", line.strip())]
    corpus: dict[str, dict[str, str]] = {}
    for f in sorted(set(files), key=lambda x: (x.parent.name, x.name)):
        name = re.sub(r"\.[18]\w*\.gz$", "", f.name)
        if name in corpus or not f.exists():
            continue
        try:
            raw = gzip.decompress(f.read_bytes()).decode("utf-8", "replace")
        except (OSError, EOFError):
            continue
        if raw.lstrip().startswith(".so "):  # a page that includes another one
            target = f.parent.parent / raw.split()[1]
            try:
                raw = gzip.decompress(Path(str(target) + ".gz").read_bytes()).decode("utf-8", "replace")
            except OSError:
                continue
        sections = _man_sections(raw)
        title = " ".join(sections.get("NAME", "").split())
        body = " ".join(sections.get("DESCRIPTION", "").split())
        if not title:
            continue
        if len(body) > max_chars:
            cut = body.rfind(". ", 0, max_chars)
            body = body[: cut + 1 if cut > max_chars // 3 else max_chars]
        corpus[name] = {"title": title, "text": body}
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
            "pages": len(corpus), "queries": len(queries)}
    return BeirSet("man-pages", corpus, queries, qrels, info)


# --------------------------------------------------------------------------------------- evaluation


def make_embedder(kind: str) -> Any:
    """``minilm``: all-MiniLM-L6-v2 behind an on-disk cache in bench/.cache; ``hash``: HashEmbedder(384)."""
    from nlql.embedders import CachedEmbedder, HashEmbedder, SentenceTransformerEmbedder

    if kind == "hash":
        return HashEmbedder(dim=384)
    if kind == "minilm":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from nlql.embedders import default_embedder

        # the default (ONNX) path; torch and ONNX vectors agree to cosine 0.9999 and share a cache name
        inner = default_embedder() if os.environ.get("NLQL_BENCH_TORCH") != "1" else SentenceTransformerEmbedder()
        return CachedEmbedder(inner, CACHE / "embeddings.sqlite")
    raise ValueError(f"unknown embedder {kind!r} (minilm or hash)")


def evaluate(ds: BeirSet, embedder: Any, methods: Sequence[str] = tuple(QUERIES),
             limit: int = LIMIT, analyzer: Any = None) -> dict[str, Any]:
    """Index ``ds`` (one document per passage) and score every judged query with each method.

    Returns:
        ``{"n_queries", "n_passages", "index_s", "methods": {method: {"query", metric: mean, "ms_per_query"}}}``
    """
    from nlql import Engine

    engine = Engine(embedder=embedder, store="memory", warm_up=False, analyzer=analyzer)
    doc_ids = list(ds.corpus)
    t = time.perf_counter()
    engine.add_texts([ds.passage(d) for d in doc_ids], ids=doc_ids)
    index_s = time.perf_counter() - t
    qids = ds.judged_queries()
    texts = [ds.queries[q] for q in qids]
    if any(m in ("similarity", "rrf") for m in methods) and texts:
        embedder.embed(texts)  # one batch: fills a cache, so per-query timings below are the engine's
    out: dict[str, Any] = {"n_queries": len(qids), "n_passages": len(doc_ids), "index_s": round(index_s, 2),
                           "methods": {}}
    ranked_by: dict[str, list[list[str]]] = {}
    for method in (m for m in methods if m in QUERIES):
        query = QUERIES[method].format(limit=limit)
        t = time.perf_counter()
        ranked_by[method] = [[h.doc_id for h in engine.search(query, params={"q": text})] for text in texts]
        elapsed = time.perf_counter() - t
        row: dict[str, Any] = {"query": query}
        for name, fn, k in METRICS:
            total = sum(fn(r, ds.qrels[q], k) for q, r in zip(qids, ranked_by[method], strict=True))
            row[name] = round(total / max(1, len(qids)), 4)
        row["ms_per_query"] = round(elapsed * 1000 / max(1, len(qids)), 2)
        out["methods"][method] = row
    if "similarity" in ranked_by and "bm25" in ranked_by:
        out["arms_top10"] = arms_overlap(qids, ds.qrels, ranked_by["similarity"], ranked_by["bm25"], 10)
    out["analyzer"] = engine._bm25.analyzer.name
    if "routed" in methods:
        out["methods"]["routed"] = routed_row(engine, ds, qids, texts)
    out["methods"]["rerank"] = {"query": "RRF as above + CrossEncoderReranker", "available": False,
                                "note": "not available offline: no cross-encoder model ships in this "
                                        "environment and the network is closed"}
    engine.close()
    return out


def routed_row(engine: Any, ds: BeirSet, qids: Sequence[str], texts: Sequence[str]) -> dict[str, Any]:
    """``engine.ask(question)`` with the default router (issue 14), scored like the other rows.

    The routed templates return passages (``SPAN(SENTENCE, window => 1)``, LIMIT 10), so the ranking is
    the distinct documents in the order their first passage comes: at most 10, and recall@100 and
    nDCG@10 are over those. ``floor`` says how the honest-empty floor (``sem >= SIMILARITY_FLOOR``) cuts
    this set: the share of relevant passages whose best sentence reaches it, and of (query, passage)
    pairs that are not relevant that do.
    """
    from collections import Counter

    from nlql.route import SIMILARITY_FLOOR, default_router

    ranked: list[list[str]] = []
    intents: Counter[str] = Counter()
    t = time.perf_counter()
    for text in texts:
        hits = engine.ask(text)
        intents[hits.route.intent] += 1
        ranked.append(list(dict.fromkeys(h.doc_id for h in hits)))
    elapsed = time.perf_counter() - t
    row: dict[str, Any] = {"query": "engine.ask(question): " + " | ".join(
        f"{i}: {default_router().templates[i]}" for i in sorted(intents)).replace("\n", " ")}
    for name, fn, k in METRICS:
        total = sum(fn(r, ds.qrels[q], k) for q, r in zip(qids, ranked, strict=True))
        row[name] = round(total / max(1, len(qids)), 4)
    row["ms_per_query"] = round(elapsed * 1000 / max(1, len(qids)), 2)
    row["intents"] = dict(sorted(intents.items()))
    row["empty_answers"] = sum(1 for r in ranked if not r)
    row["without_where"] = _routed_without_where(engine, ds, qids, texts)
    best = "SELECT DOCUMENT LET s = SIMILARITY(content, $q)"
    rel_hit = non_hit = non_total = 0
    for q, text in zip(qids, texts, strict=True):
        rels = {d for d, g in ds.qrels[q].items() if g > 0}
        for h in engine.search(best, params={"q": text}):
            above = (h.scores["s"] or 0.0) >= SIMILARITY_FLOOR
            if h.doc_id in rels:
                rel_hit += above
            else:
                non_total += 1
                non_hit += above
    n_rel = sum(1 for q in qids for g in ds.qrels[q].values() if g > 0)
    row["floor"] = {"similarity_floor": SIMILARITY_FLOOR,
                    "relevant_at_or_above": round(rel_hit / max(1, n_rel), 4),
                    "non_relevant_pairs_at_or_above": round(non_hit / max(1, non_total), 5)}
    return row


def _routed_without_where(engine: Any, ds: BeirSet, qids: Sequence[str], texts: Sequence[str]) -> dict[str, Any]:
    """The routed queries with their WHERE (the honest-empty condition) removed: what that condition costs
    in quality and time."""
    import dataclasses

    from nlql.parser import parse

    plain = []
    for text in texts:
        route = engine.route(text)
        plain.append((dataclasses.replace(parse(route.query), where=None), route.params))
    t = time.perf_counter()
    ranked = [list(dict.fromkeys(h.doc_id for h in engine.search(q, params=p))) for q, p in plain]
    elapsed = time.perf_counter() - t
    out: dict[str, Any] = {}
    for name, fn, k in METRICS:
        if k == 10:
            out[name] = round(sum(fn(r, ds.qrels[q], k) for q, r in zip(qids, ranked, strict=True))
                              / max(1, len(qids)), 4)
    out["ms_per_query"] = round(elapsed * 1000 / max(1, len(qids)), 2)
    return out


def arms_overlap(qids: Sequence[str], qrels: Mapping[str, Mapping[str, int]], sim: Sequence[Sequence[str]],
                 bm25: Sequence[Sequence[str]], k: int) -> dict[str, Any]:
    """How often each arm finds a relevant passage in its top k: both, only one, neither; and the
    union (an oracle choosing the better arm per query), the ceiling a fusion could reach at k."""
    counts = {"both": 0, "only_similarity": 0, "only_bm25": 0, "neither": 0}
    for q, a, b in zip(qids, sim, bm25, strict=True):
        rel = {d for d, g in qrels[q].items() if g > 0}
        ia, ib = bool(rel.intersection(a[:k])), bool(rel.intersection(b[:k]))
        key = "both" if ia and ib else "only_similarity" if ia else "only_bm25" if ib else "neither"
        counts[key] += 1
    n = max(1, len(qids))
    return {"k": k, **counts, "union_hit_rate": round((n - counts["neither"]) / n, 4)}


def verdict(result: Mapping[str, Any], metric: str) -> dict[str, Any]:
    """Does the hybrid beat each arm alone on ``metric``?"""
    m = result["methods"]
    rrf, sim, bm = m["rrf"][metric], m["similarity"][metric], m["bm25"][metric]
    return {"metric": metric, "rrf": rrf, "similarity": sim, "bm25": bm,
            "beats_similarity": rrf > sim, "beats_bm25": rrf > bm, "beats_both": rrf > sim and rrf > bm,
            "rrf_at_least_best": rrf >= max(sim, bm)}


def load_stdlib_set(build: bool = False) -> BeirSet:
    """The committed known-item set (built first if missing or ``build``)."""
    if build or not (STDLIB_SET / "corpus.jsonl").exists():
        log(f"[quality] building {STDLIB_SET}")
        write_beir(build_stdlib_known_item(), STDLIB_SET)
    return load_beir(STDLIB_SET)


def run_set(ds: BeirSet, kind: str, embedder_kind: str, out_path: Path) -> dict[str, Any]:
    """Every method with the default (English) analyzer, BM25 and RRF again with the plain one."""
    started = time.perf_counter()
    log(f"[quality] {ds.name}: {len(ds.judged_queries())} queries, {len(ds.corpus)} passages, {embedder_kind}")
    embedder = make_embedder(embedder_kind)
    result = evaluate(ds, embedder, methods=(*QUERIES, "routed"))
    plain = evaluate(ds, embedder, methods=("bm25", "rrf"), analyzer="plain")
    headline = ("ndcg@10", "recall@100") if kind == "BEIR" else HEADLINE
    out: dict[str, Any] = {
        "title": f"Retrieval quality on {ds.name} ({kind})",
        "machine": machine_info(),
        "dataset": {"name": ds.name, "kind": kind, **{k: v for k, v in ds.info.items() if k != "modules"}},
        "embedder": embedder_kind if embedder_kind == "hash" else "all-MiniLM-L6-v2 (fp32, cached on disk)",
        "headline_metrics": list(headline),
        **result,
        "plain_analyzer": {m: {k: v for k, v in row.items() if k != "query"}
                           for m, row in plain["methods"].items() if row.get("available") is not False},
        "verdict": [verdict(result, m) for m in headline],
        "fusion_at_least_best_arm": {
            f: all(result["methods"][f][m] >= max(result["methods"]["similarity"][m], result["methods"]["bm25"][m])
                   for m in headline)
            for f in ("rrf", *SWEEP)},
        "total_s": round(time.perf_counter() - started, 1),
    }
    stamp_end(out, started)
    write_json(out_path, out)
    print(f"{ds.name}: {result['n_queries']} queries over {result['n_passages']} passages ({embedder_kind}, "
          f"analyzer {result['analyzer']})")
    for method, row in result["methods"].items():
        if row.get("available") is False:
            print(f"  {LABELS[method]:<34} not available offline")
            continue
        cells = "  ".join(f"{m} {row[m]:.4f}" for m in ("ndcg@10", "recall@10", "mrr@10", "recall@100"))
        print(f"  {LABELS[method]:<34} {cells}  ({row['ms_per_query']} ms/query)")
    for method, row in out["plain_analyzer"].items():
        cells = "  ".join(f"{m} {row[m]:.4f}" for m in ("ndcg@10", "recall@10", "mrr@10", "recall@100"))
        print(f"  {LABELS[method] + ' [plain analyzer]':<34} {cells}")
    for v in out["verdict"]:
        print(f"  RRF >= the best single arm on {v['metric']}: {v['rrf_at_least_best']}")
    log(f"wrote {out_path}")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--beir", type=Path, default=None, help="a BEIR-layout directory (instead of --set)")
    ap.add_argument("--set", dest="sets", choices=("stdlib", "man", "both"), default="both",
                    help="the stdlib known-item set, the man-page set built from this machine, or both")
    ap.add_argument("--split", default="test")
    ap.add_argument("--embedder", choices=("minilm", "hash"), default="minilm")
    ap.add_argument("--limit", type=int, default=None, help="evaluate only the first N queries (a slice)")
    ap.add_argument("--build", action="store_true", help="rebuild bench/data/stdlib-known-item first")
    ap.add_argument("--out", type=Path, default=None, help="output file (default: bench/results/quality*.json)")
    args = ap.parse_args(argv)

    runs: list[tuple[BeirSet, str, Path]] = []
    if args.beir:
        runs.append((load_beir(args.beir, args.split), "BEIR", args.out or RESULTS / "quality_beir.json"))
    else:
        if args.sets in ("stdlib", "both"):
            runs.append((load_stdlib_set(args.build), "known-item", args.out or RESULTS / "quality.json"))
        if args.sets in ("man", "both"):
            runs.append((build_man_set(), "labelled", args.out or RESULTS / "quality_man.json"))
    outs = {}
    for ds, kind, path in runs:
        if args.limit:
            ds = ds.subset(args.limit)
        outs[ds.name] = run_set(ds, kind, args.embedder, path)
    return outs


if __name__ == "__main__":
    main()
