#!/usr/bin/env python3
"""Build nlql/data/demo.jsonl: docstrings of the Python standard library, one document per line.

    python scripts/make_demo_corpus.py              # writes nlql/data/demo.jsonl
    python scripts/make_demo_corpus.py -o out.jsonl --max-per-module 20

The text is the docstrings of the interpreter running this script (the bundled file was made with
CPython 3.11), under the PSF licence (see nlql/data/LICENSE-PSF.txt). Docstrings are cleaned for prose:
doctest examples, indented code and signature lines are dropped, reST roles are unwrapped and
hard-wrapped lines are joined, so each paragraph is one line and paragraphs are separated by a blank line.

Each line is ``{"id": "json.dumps", "text": "...", "metadata": {...}}`` with metadata ``module``,
``kind`` (module | class | function | method), ``name``, ``section`` (the chapter of the Library
Reference) and, where the module's first release is well known, ``added`` (the Python version) and
``year`` (the year of that release). Modules older than Python 2.1 have no ``added``/``year``: a demo
of NULL handling. The output is deterministic for a given interpreter.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "nlql" / "data" / "demo.jsonl"

# module -> (section of the Library Reference, version it was added in or None, year of that release)
MODULES: dict[str, tuple[str, str | None, int | None]] = {
    "re": ("Text Processing", None, None),
    "string": ("Text Processing", None, None),
    "textwrap": ("Text Processing", "2.3", 2003),
    "difflib": ("Text Processing", "2.1", 2001),
    "datetime": ("Data Types", "2.3", 2003),
    "calendar": ("Data Types", None, None),
    "collections": ("Data Types", "2.4", 2004),
    "heapq": ("Data Types", "2.3", 2003),
    "bisect": ("Data Types", None, None),
    "enum": ("Data Types", "3.4", 2014),
    "graphlib": ("Data Types", "3.9", 2020),
    "copy": ("Data Types", None, None),
    "pprint": ("Data Types", None, None),
    "zoneinfo": ("Data Types", "3.9", 2020),
    "math": ("Numeric and Mathematical", None, None),
    "statistics": ("Numeric and Mathematical", "3.4", 2014),
    "random": ("Numeric and Mathematical", None, None),
    "fractions": ("Numeric and Mathematical", "2.6", 2008),
    "decimal": ("Numeric and Mathematical", "2.4", 2004),
    "itertools": ("Functional Programming", "2.3", 2003),
    "functools": ("Functional Programming", "2.5", 2006),
    "operator": ("Functional Programming", None, None),
    "pathlib": ("File and Directory Access", "3.4", 2014),
    "os.path": ("File and Directory Access", None, None),
    "tempfile": ("File and Directory Access", None, None),
    "shutil": ("File and Directory Access", None, None),
    "glob": ("File and Directory Access", None, None),
    "fnmatch": ("File and Directory Access", None, None),
    "pickle": ("Data Persistence", None, None),
    "sqlite3": ("Data Persistence", "2.5", 2006),
    "zipfile": ("Data Compression and Archiving", None, None),
    "gzip": ("Data Compression and Archiving", None, None),
    "csv": ("File Formats", "2.3", 2003),
    "tomllib": ("File Formats", "3.11", 2022),
    "hashlib": ("Cryptographic Services", "2.5", 2006),
    "hmac": ("Cryptographic Services", None, None),
    "secrets": ("Cryptographic Services", "3.6", 2016),
    "time": ("Generic Operating System Services", None, None),
    "argparse": ("Generic Operating System Services", "2.7", 2010),
    "logging": ("Generic Operating System Services", "2.3", 2003),
    "threading": ("Concurrent Execution", None, None),
    "subprocess": ("Concurrent Execution", "2.4", 2004),
    "concurrent.futures": ("Concurrent Execution", "3.2", 2011),
    "queue": ("Concurrent Execution", None, None),
    "sched": ("Concurrent Execution", None, None),
    "contextvars": ("Concurrent Execution", "3.7", 2018),
    "json": ("Internet Data Handling", "2.6", 2008),
    "base64": ("Internet Data Handling", None, None),
    "urllib.parse": ("Internet Protocols", None, None),
    "ipaddress": ("Internet Protocols", "3.3", 2012),
    "uuid": ("Internet Protocols", "2.5", 2006),
    "typing": ("Development Tools", "3.5", 2015),
    "dataclasses": ("Python Runtime Services", "3.7", 2018),
    "contextlib": ("Python Runtime Services", "2.5", 2006),
    "abc": ("Python Runtime Services", "2.6", 2008),
    "inspect": ("Python Runtime Services", "2.1", 2001),
    "warnings": ("Python Runtime Services", "2.1", 2001),
}

MAX_CHARS = 1500      # per document: whole paragraphs up to this, else the first one cut at a sentence
MIN_CHARS = 60        # shorter docstrings say too little to be worth a document

_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`<]+?)(?:\s*<[^>]+>)?`")
_SIGNATURE = re.compile(r"^[A-Za-z_][\w.]*\(.*\)(\s*-+>\s*.+)?$")
_WS = re.compile(r"\s+")
_EMPHASIS = re.compile(r"\*{1,2}([A-Za-z_][^*\n]*?)\*{1,2}")


def _is_code(lines: list[str]) -> bool:
    first = lines[0]
    return (first.startswith((">>>", "...", "$ ", "    ", "\t"))
            or first.rstrip().endswith("::") and len(lines) == 1
            or all(_SIGNATURE.match(s.strip()) for s in lines))


def clean_doc(doc: str | None) -> str:
    """A docstring as prose paragraphs (blank-line separated), or "" if nothing usable is left."""
    if not doc or not doc.strip():
        return ""
    text = inspect.cleandoc(doc)
    paragraphs: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln for ln in block.split("\n") if ln.strip()]
        if not lines or _is_code(lines):
            continue
        # an indented tail inside a paragraph is an example or a table: keep the prose head only
        head: list[str] = []
        for ln in lines:
            if ln.startswith(("    ", "\t", ">>>")) and head:
                break
            head.append(ln)
        para = _WS.sub(" ", " ".join(s.strip() for s in head)).strip()
        para = _EMPHASIS.sub(r"\1", _ROLE.sub(r"\1", para)).replace("``", "").replace("::", ":")
        # a lead-in such as "The special characters are:" introduces a list or code dropped above
        if len(para) < 3 or set(para) <= set("-=~*^ ") or para.endswith(":"):
            continue
        paragraphs.append(para)
    out: list[str] = []
    size = 0
    for para in paragraphs:
        if out and size + len(para) + 2 > MAX_CHARS:
            break
        if not out and len(para) > MAX_CHARS:
            cut = para.rfind(". ", 0, MAX_CHARS)
            para = para[: cut + 1] if cut > 0 else para[:MAX_CHARS]
        out.append(para)
        size += len(para) + 2
    return "\n\n".join(out)


def _own(module: Any, modname: str, obj: Any) -> bool:
    """Whether ``obj`` belongs to this module (not a re-export from another one)."""
    owner = getattr(obj, "__module__", None)
    if owner is None:
        return False
    base = modname.split(".")[0]
    return owner == modname or owner.lstrip("_") == modname or owner.startswith(base) \
        or owner.lstrip("_").startswith(base) or (modname == "os.path" and owner in ("posixpath", "genericpath"))


def _public_names(module: Any) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return [n for n in names if not n.startswith("_")]


def module_docs(modname: str, max_docs: int) -> list[dict[str, Any]]:
    """The documents of one module: its docstring, then its public functions and classes, then methods."""
    module = importlib.import_module(modname)
    section, added, year = MODULES[modname]
    base_meta: dict[str, Any] = {"module": modname, "section": section}
    if added is not None:
        base_meta["added"] = added
        base_meta["year"] = year
    docs: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(name: str, kind: str, doc: str | None) -> None:
        text = clean_doc(doc)
        if len(text) < MIN_CHARS or text in seen or len(docs) >= max_docs:
            return
        seen.add(text)
        docs.append({"id": name, "text": text,
                     "metadata": {**base_meta, "kind": kind, "name": name}})

    add(modname, "module", module.__doc__)
    classes: list[tuple[str, type]] = []
    for name in _public_names(module):
        obj = getattr(module, name, None)
        if obj is None or inspect.ismodule(obj) or not _own(module, modname, obj):
            continue
        if inspect.isclass(obj):
            add(f"{modname}.{name}", "class", obj.__doc__)
            classes.append((name, obj))
        elif callable(obj):
            add(f"{modname}.{name}", "function", getattr(obj, "__doc__", None))
    for cname, cls in classes:
        for mname, member in sorted(vars(cls).items()):
            if mname.startswith("_") or not callable(member):
                continue
            add(f"{modname}.{cname}.{mname}", "method", getattr(member, "__doc__", None))
    return docs


def build(max_per_module: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    ids: set[str] = set()
    for modname in MODULES:
        for doc in module_docs(modname, max_per_module):
            if doc["id"] not in ids:
                ids.add(doc["id"])
                out.append(doc)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--max-per-module", type=int, default=12)
    args = ap.parse_args(argv)
    docs = build(args.max_per_module)
    lines = [json.dumps({"id": d["id"], "text": d["text"], "metadata": dict(sorted(d["metadata"].items()))},
                        ensure_ascii=False) for d in docs]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    size = args.output.stat().st_size
    print(f"wrote {len(docs)} documents ({size / 1024:.0f} KiB) from Python "
          f"{sys.version.split()[0]} docstrings to {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
