"""The ``nlql`` command: ingest files, query, explain and check NLQL, a REPL, a demo and an MCP server.

    nlql ingest notes/ papers.jsonl --store ./store     # txt, md (one document per file) and jsonl
    nlql query 'SELECT SENTENCE LET rel = SIMILARITY(content, "agents") LIMIT 5' --store ./store
    nlql explain '…' --store ./store                    # the plan, before anything runs
    nlql ask "who mentioned Wittgenstein?" --store ./store   # a question, routed to an NLQL template
    nlql check '…'                                      # exit 0 valid, 1 invalid, 2 usage error
    nlql repl --store ./store                           # end a query with ';' or an empty line
    nlql demo                                           # the bundled corpus with the real model
    nlql mcp --store ./store                            # an MCP server over stdio
    nlql serve --store ./store                          # HTTP API + web playground on 127.0.0.1:8000

Output for people goes through rich; ``--json`` prints plain JSON for machines. Errors never show a
Python traceback unless ``--debug`` (or ``NLQL_DEBUG=1``): an NLQL error prints its message, the query
line with a caret and a hint on stderr and exits with 1.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.rule import Rule
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from nlql import __version__
from nlql.errors import NLQLError
from nlql.values import json_default

if TYPE_CHECKING:
    from nlql.engine import Engine
    from nlql.execute.results import Hits

#: The file an NLQL directory store keeps its documents in (written by the built-in store).
STORE_FILE = "nlql.sqlite"
#: Beside it, CLI versions before 0.2 recorded the embedder here; it is still read for such stores (the
#: store now keeps its own record, nlql.stores.record).
CLI_FILE = "nlql-cli.json"
FILE_TYPES = {".txt": "txt", ".text": "txt", ".md": "md", ".markdown": "md", ".jsonl": "jsonl"}
SNIPPET_CHARS = 240
NO_RESULTS = "no matching content"


class EmbedderName(str, Enum):
    """Embedders selectable on the command line (see :func:`make_embedder`)."""

    minilm = "minilm"
    minilm_int8 = "minilm-int8"
    minilm_torch = "minilm-torch"
    hash = "hash"


class Split(str, Enum):
    """How a txt/md file becomes documents."""

    file = "file"
    paragraph = "paragraph"


class CLIError(Exception):
    """A mistake in how the command was used (a missing store, a bad file): message and hint, exit 1."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclasses.dataclass
class _State:
    debug: bool = False


STATE = _State(debug=os.environ.get("NLQL_DEBUG", "") not in ("", "0"))


def _console(stderr: bool = False) -> Console:
    # Piped output is not a terminal: rich would fall back to 80 columns and wrap every table cell.
    # Messages on stderr are never wrapped: a long path would split the line (and an error's caret
    # would no longer stand under its column).
    isatty = (sys.stderr if stderr else sys.stdout).isatty()
    width = None if isatty or os.environ.get("COLUMNS") else 120
    return Console(stderr=stderr, width=width, highlight=False, soft_wrap=stderr)


def out() -> Console:
    return _console()


def err() -> Console:
    return _console(stderr=True)


app = typer.Typer(
    name="nlql",
    help="NLQL: a declarative query language for semantic and hybrid retrieval over text.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"nlql {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show Python tracebacks (also NLQL_DEBUG=1).")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """NLQL: a declarative query language for semantic and hybrid retrieval over text."""
    if debug:
        STATE.debug = True


# ------------------------------------------------------------------------------------ errors


def _print_error(message: str, hint: str | None = None) -> None:
    console = err()
    console.print(Text("error: ", style="bold red") + Text(message))
    if hint:
        console.print(Text("hint: ", style="bold") + Text(hint))


@contextmanager
def guard(source: str | None = None) -> Iterator[None]:
    """Turn every failure into a message and an exit code; re-raise with ``--debug``."""
    try:
        yield
    except (typer.Exit, typer.Abort, SystemExit):
        raise
    except NLQLError as exc:
        if STATE.debug:
            raise
        if source is not None:
            exc.with_source(source)
        err().print(Text(str(exc)))
        raise typer.Exit(1) from None
    except CLIError as exc:
        if STATE.debug:
            raise
        _print_error(exc.message, exc.hint)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        if STATE.debug:
            raise
        err().print("interrupted")
        raise typer.Exit(130) from None
    except BrokenPipeError:  # `nlql query … | head`
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keep Python from failing at exit
        except OSError:
            pass
        raise typer.Exit(0) from None
    except Exception as exc:  # a bug or an environment problem: one line, traceback only with --debug
        if STATE.debug:
            raise
        _print_error(f"{type(exc).__name__}: {exc}", "run again with --debug for the Python traceback")
        raise typer.Exit(1) from None


# ----------------------------------------------------------------------------------- engines


def make_embedder(name: str) -> Any:
    """The embedder a CLI name stands for.

    ``minilm``: all-MiniLM-L6-v2, offline, on ONNX Runtime when installed (else torch); ``minilm-int8``:
    the same model int8-quantised on ONNX Runtime (about 1.5× faster, cosine 0.98-0.99: a store of its own);
    ``minilm-torch``: the same model on sentence-transformers/torch (the same vectors as ``minilm``);
    ``hash``: :class:`~nlql.embedders.HashEmbedder` (384 dims, no model).
    """
    from nlql import embedders

    if name == "hash":
        return embedders.HashEmbedder(dim=384)
    if name == "minilm":
        return embedders.default_embedder()
    if name == "minilm-int8":
        return embedders.OnnxEmbedder(quantize="int8")
    if name == "minilm-torch":
        return embedders.SentenceTransformerEmbedder()
    raise CLIError(f"unknown embedder {name!r}", "use --embedder " + ", ".join(e.value for e in EmbedderName))


#: The model id each CLI embedder records in a store (``minilm`` and ``minilm-torch`` share one).
CLI_MODELS = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2",
    "minilm-int8": "sentence-transformers/all-MiniLM-L6-v2@int8",
    "minilm-torch": "sentence-transformers/all-MiniLM-L6-v2",
    "hash": "hash-384",
}


def _is_directory_store(store: str) -> bool:
    from nlql.stores import store_names

    return store not in store_names() and "://" not in store


def _bare_directory(store: str) -> bool:
    """A bare word (no path separator, no scheme) that is no store name, nor close to one (a typo such as
    ``qdrnt`` keeps the registry's did-you-mean error): a directory in the working directory."""
    import difflib

    from nlql.stores import store_names

    return (_is_directory_store(store) and not os.path.dirname(store) and not store.startswith(".")
            and not difflib.get_close_matches(store, store_names(), n=1, cutoff=0.75))


def _cli_name(model: str) -> str | None:
    """The CLI embedder name of a recorded model id (the first one that records it)."""
    return next((name for name, m in CLI_MODELS.items() if m == model), None)


def _legacy_record(store: str) -> str | None:
    """The embedder named by ``nlql-cli.json``, the record of CLI versions before the store kept its own."""
    if not _is_directory_store(store):
        return None
    path = Path(store) / CLI_FILE
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("embedder")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value in CLI_MODELS else None


def _recorded_embedder(store: Any, spec: str) -> tuple[str | None, str | None]:
    """(CLI name, recorded model id) of the embedder that built a store, from its record (else the old
    ``nlql-cli.json``); (None, None) when nothing is recorded."""
    from nlql.stores import record

    got = record.read(store, record.EMBEDDER)
    if got is not None:
        model = str(got.get("model"))
        return _cli_name(model), model
    legacy = _legacy_record(spec)
    return (legacy, CLI_MODELS[legacy]) if legacy else (None, None)


def _reembed_hint(spec: str, flag: str) -> str:
    target = "NEW_DIR" if _is_directory_store(spec) else "NEW_STORE"
    return (f"omit --embedder (the store's own is used), or re-embed into a new store: "
            f"nlql ingest FILES --store {target} --embedder {flag}")


def choose_embedder(store: Any, spec: str, flag: EmbedderName | None) -> str:
    """The flag, else what built the store, else ``NLQL_EMBEDDER``, else ``minilm``; a mismatch is an error."""
    name, model = _recorded_embedder(store, spec)
    if model is not None and name is None:
        raise CLIError(f"the store at {spec} was built with the embedder {model!r}, which the CLI cannot load",
                       "open it from Python with that embedder: Engine(embedder=…, store=…)")
    if flag is not None:
        if model is not None and CLI_MODELS[flag.value] != model:
            raise CLIError(
                f"the store at {spec} was built with the '{name}' embedder ({model}), not '{flag.value}' "
                f"({CLI_MODELS[flag.value]}): similarities between vectors of two embedders mean nothing",
                _reembed_hint(spec, flag.value))
        return flag.value
    if name is not None:
        return name
    env = os.environ.get("NLQL_EMBEDDER", "").strip().lower()
    if env:
        if env not in CLI_MODELS:
            raise CLIError(f"NLQL_EMBEDDER={env!r} is not an embedder", "use " + ", ".join(CLI_MODELS))
        return env
    return EmbedderName.minilm.value


def require_store(store: str) -> None:
    """A directory store must exist: querying never creates one."""
    if not _is_directory_store(store):
        return
    if not (Path(store) / STORE_FILE).is_file():
        raise CLIError(f"no NLQL store at {store}: run `nlql ingest … --store {store}` first",
                       "nlql ingest notes/ --store DIR   (txt, md and jsonl files)")


def open_engine(store: str, embedder: EmbedderName | None, *, create: bool = False, analyzer: str | None = None,
                warm_up: bool = True) -> tuple[Engine, str]:
    """An engine over ``store`` and the name of its embedder; unless ``create``, a directory store must
    already exist. The embedder and the analyzer are the ones the store records, unless given (a
    different one is an error: one store, one vector space)."""
    if _is_directory_store(store) and Path(store).is_file():
        raise CLIError(f"{store} is a file, not an NLQL store directory")
    if not create:
        require_store(store)
    from nlql.engine import Engine
    from nlql.errors import StoreMismatchError
    from nlql.stores import open_store

    # a bare word that names no store is a directory here, for every command alike (the registry asks
    # for ./name so that a typo of a store name is not silently a new directory; the CLI has said which
    # it is already: `nlql query` recommends `--store NAME`, so `nlql ingest --store NAME` must take it)
    target = open_store(os.path.join(".", store) if _bare_directory(store) else store)
    try:
        name = choose_embedder(target, store, embedder)
        chosen = None
        if analyzer is not None:
            from nlql.stores.record import as_analyzer

            try:
                chosen = as_analyzer(analyzer)
            except ValueError as exc:
                raise CLIError(str(exc), "use --analyzer english (the default), plain, or a Snowball "
                                         "language such as german") from None
        try:
            engine = Engine(embedder=make_embedder(name), store=target, analyzer=chosen, warm_up=warm_up)
        except StoreMismatchError as exc:
            raise CLIError(str(exc.message), _reembed_hint(store, name) if exc.what == "embedder" else
                           "omit --analyzer (the store's own is used), or ingest into a new store") from None
    except BaseException:
        target.close()
        raise
    return engine, name


# -------------------------------------------------------------------------------- parameters


def parse_param(text: str) -> tuple[str, Any]:
    """``name=value``: the value is read as JSON when it is JSON (``5``, ``true``, ``["a","b"]``,
    ``"2020"``), else taken as a string (``q=AI agents``)."""
    name, sep, raw = text.partition("=")
    name = name.strip().lstrip("$")
    if not sep or not name:
        raise typer.BadParameter(f"expected name=value, got {text!r}", param_hint="'--param'")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return name, value


def parse_params(items: Sequence[str] | None) -> dict[str, Any] | None:
    if not items:
        return None
    return dict(parse_param(i) for i in items)


def read_query(query: str) -> str:
    """``-`` reads the query from stdin."""
    if query == "-":
        return sys.stdin.read()
    return query


# ------------------------------------------------------------------------------------ output


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=json_default) + "\n")
    sys.stdout.flush()


def _fmt(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 1e4 else f"{value:.4g}"
    return str(value)


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """One line of at most ``limit`` characters."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat.rfind(" ", 0, limit - 1)
    return flat[: cut if cut > limit // 2 else limit - 1] + "…"


def _meta_text(meta: dict[str, Any], doc_id: str = "", keys: int = 5) -> str:
    """Up to ``keys`` metadata entries, one per line; a value equal to the document id is left out."""
    items = [(k, v) for k, v in meta.items() if v != doc_id]
    parts = []
    for k, v in items[:keys]:
        s = _fmt(v) if not isinstance(v, (dict, list)) else json.dumps(v, default=json_default)
        parts.append(f"{k}={s if len(s) <= 32 else s[:31] + '…'}")
    if len(items) > keys:
        parts.append(f"(+{len(items) - keys} more)")
    return "\n".join(parts)


def marked_snippet(text: str, ranges: list[list[int]], limit: int = SNIPPET_CHARS) -> Text:
    """:func:`snippet` as a rich Text with the ``[start, end)`` ranges of ``text`` in bold (HIGHLIGHT)."""
    flat: list[str] = []
    where: list[int] = []  # flat index -> index in text
    gap = -1  # the last whitespace character before the next word, -1: none
    for i, ch in enumerate(text):
        if ch.isspace():
            gap = i
            continue
        if gap >= 0 and flat:
            flat.append(" ")  # a run of whitespace is one space, as snippet() makes it
            where.append(gap)
        gap = -1
        flat.append(ch)
        where.append(i)
    out = Text(snippet(text, limit))
    bold = [False] * (max(where) + 1 if where else 0)
    for start, end in ranges:
        for j in range(max(0, start), min(end, len(bold))):
            bold[j] = True
    run = None
    for k in range(min(len(out.plain), len(where)) + 1):
        on = k < min(len(out.plain), len(where)) and out.plain[k] == flat[k] and bold[where[k]]
        if on and run is None:
            run = k
        elif not on and run is not None:
            out.stylize("bold", run, k)
            run = None
    return out


def hits_table(hits: Hits, title: str | None = None) -> Table:
    """A rich table: rank, id, scores, content snippet, key metadata."""
    table = Table(title=title, title_justify="left", show_lines=True, expand=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("id", no_wrap=True, max_width=28, overflow="ellipsis")
    table.add_column("scores", no_wrap=True)
    table.add_column("content", overflow="fold", ratio=1, min_width=30)
    table.add_column("metadata", no_wrap=True, max_width=34, overflow="ellipsis")
    for rank, h in enumerate(hits, start=1):
        scores = "\n".join(f"{k} {_fmt(v)}" for k, v in h.scores.items())
        if h.count is not None:  # SELECT COUNT(unit) BY …: the group's count (its group is the content)
            scores = f"count {h.count}" + (f"\n{scores}" if scores else "")
        # a span's hit sentence sits in the middle of its window: show the whole window
        limit = SNIPPET_CHARS * 3 if h.unit in ("SENTENCE", "SPAN") else SNIPPET_CHARS
        ranges = [r for v in (h.highlights or {}).values() for r in v] if h.unit != "SPAN" else []
        shown = marked_snippet(h.content, ranges, limit) if ranges else Text(snippet(h.content, limit))
        content = shown + Text(" [truncated]" if h.truncated else "")
        if h.best is not None:  # the sentence that scored a DOCUMENT / CHUNK row
            content += Text(f"\nbest (sentence {h.best.position}): {snippet(h.best.content, SNIPPET_CHARS)}")
        table.add_row(str(rank), Text(h.id), Text(scores), content, Text(_meta_text(h.metadata, h.doc_id)))
    return table


def _stats_line(hits: Hits) -> str:
    ms = sum(float(v) for v in hits.stats.get("timings_ms", {}).values())
    parts = [f"{len(hits)} row{'s' if len(hits) != 1 else ''}", f"{ms:.1f} ms"]
    if "candidates" in hits.stats:
        parts.append(f"{hits.stats['candidates']} candidates")
    if hits.stats.get("rounds", 1) > 1:
        parts.append(f"{hits.stats['rounds']} recall rounds")
    return " · ".join(parts)


def print_hits(hits: Hits, console: Console | None = None, title: str | None = None) -> None:
    console = console or out()
    for w in hits.warnings:
        err().print(Text("warning: ", style="yellow") + Text(w))
    if not hits:
        console.print(NO_RESULTS)
        return
    console.print(hits_table(hits, title))
    console.print(Text(_stats_line(hits), style="dim"))


def print_query(console: Console, query: str) -> None:
    console.print(Syntax(query.strip(), "sql", theme="ansi_dark", background_color="default", word_wrap=True))


# ------------------------------------------------------------------------------------ ingest


@dataclasses.dataclass
class Doc:
    id: str
    text: str
    metadata: dict[str, Any]


def expand_paths(paths: Sequence[Path]) -> list[Path]:
    """Files as given, and every txt/md/jsonl file under a directory (hidden ones skipped), sorted."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in FILE_TYPES
                           and not any(part.startswith(".") for part in f.relative_to(p).parts))
            files.extend(found)
        elif p.is_file():
            if p.suffix.lower() not in FILE_TYPES:
                raise CLIError(f"{p}: unsupported file type '{p.suffix or '(none)'}'",
                               "nlql ingest reads .txt, .md and .jsonl files")
            files.append(p)
        else:
            raise CLIError(f"{p}: no such file or directory")
    return files


def _posix(path: Path) -> str:
    return path.as_posix()


def _modified(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc).replace(microsecond=0).isoformat()


def _title(text: str, kind: str) -> str | None:
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if kind == "md":
            if s.startswith("#"):
                return s.lstrip("#").strip() or None
            continue
        return s[:120]
    return None


def read_text_file(path: Path, kind: str, split: Split) -> list[Doc]:
    """A txt/md file as one document (``--split file``) or one per blank-line paragraph."""
    text = path.read_text(encoding="utf-8-sig", errors="replace")
    source = _posix(path)
    meta: dict[str, Any] = {"source": source, "format": kind, "modified": _modified(path)}
    title = _title(text, kind)
    if title:
        meta["title"] = title
    if split is Split.file:
        return [Doc(source, text, meta)] if text.strip() else []
    docs = []
    paragraphs = [p.strip() for p in text.replace("\r\n", "\n").split("\n\n")]
    for n, para in enumerate((p for p in paragraphs if p), start=1):
        docs.append(Doc(f"{source}:{n}", para, {**meta, "paragraph": n}))
    return docs


def read_jsonl_file(path: Path) -> list[Doc]:
    """One document per line: ``text`` (or ``content``), optional ``id`` and ``metadata``; any other
    top-level field is metadata too. A line without an id gets ``<path>:<line>``."""
    source = _posix(path)
    docs = []
    with path.open(encoding="utf-8-sig", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise CLIError(f"{source}:{lineno}: not valid JSON ({exc})") from None
            if not isinstance(obj, dict):
                raise CLIError(f"{source}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            key = "text" if "text" in obj else "content" if "content" in obj else None
            if key is None or not isinstance(obj[key], str):
                raise CLIError(f"{source}:{lineno}: needs a \"text\" string field",
                               'each line looks like {"id": "a", "text": "…", "metadata": {…}}')
            meta = obj.get("metadata") or {}
            if not isinstance(meta, dict):
                raise CLIError(f"{source}:{lineno}: \"metadata\" must be a JSON object")
            meta = dict(meta)
            for k, v in obj.items():
                if k not in (key, "id", "metadata"):
                    meta.setdefault(k, v)
            doc_id = obj.get("id")
            if doc_id is None:
                doc_id = f"{source}:{lineno}"
            elif not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool):
                raise CLIError(f"{source}:{lineno}: \"id\" must be a string or an integer")
            if obj[key].strip():
                docs.append(Doc(str(doc_id), obj[key], meta))
    return docs


def read_documents(paths: Sequence[Path], split: Split) -> list[Doc]:
    docs: list[Doc] = []
    for f in expand_paths(paths):
        kind = FILE_TYPES[f.suffix.lower()]
        docs.extend(read_jsonl_file(f) if kind == "jsonl" else read_text_file(f, kind, split))
    return docs


def ingest_documents(engine: Engine, docs: Sequence[Doc], batch_size: int = 64,
                     progress: bool = True, label: str = "ingest") -> tuple[int, int, float]:
    """Add ``docs`` with progress on stderr (:mod:`nlql.progress`: sentences embedded, rate, ETA; a bar
    on a terminal, plain lines when piped); (documents, sentences, seconds)."""
    from nlql.progress import counting_progress

    start = time.perf_counter()
    report = counting_progress(label=label, stream=sys.stderr) if progress else _Count()
    engine.add_texts([d.text for d in docs], ids=[d.id for d in docs], metadatas=[d.metadata for d in docs],
                     batch_size=batch_size, progress=report)
    return len(docs), int(report.total), time.perf_counter() - start


class _Count:
    """A silent progress reporter: only counts (for ``--quiet``)."""

    total = 0
    done = 0

    def start(self, total: int, documents: int = 0) -> None:
        self.total = int(total)

    def advance(self, sentences: int, documents: int = 0) -> None:
        self.done += int(sentences)

    def close(self) -> None:
        pass


AnalyzerOption = Annotated[str | None, typer.Option(
    "--analyzer", help="BM25 analyzer of a new store: english (stopwords + Snowball stemming), plain "
                       "(lowercase \\w+ words, the analyzer of NLQL before 0.2), or a Snowball language "
                       "(stemming only) [default: the store's, else english].")]


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="txt, md or jsonl files, or directories of them.")],
    store: Annotated[str, typer.Option("--store", "-s", help="Store directory (created if missing).")],
    embedder: Annotated[EmbedderName | None, typer.Option(help="Embedding model [default: the store's, "
                                                          "else NLQL_EMBEDDER, else minilm].")] = None,
    split: Annotated[Split, typer.Option(help="txt/md: one document per file, or one per paragraph "
                                              "(blank-line separated).")] = Split.file,
    batch_size: Annotated[int, typer.Option(min=1, help="Documents embedded per batch.")] = 64,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress report.")] = False,
    analyzer: AnalyzerOption = None,
) -> None:
    """Add documents to a store. txt/md: one document per file (id = its path; metadata source, format,
    modified, title). jsonl: one per line with "text", optional "id" and "metadata"; other top-level
    fields become metadata. The same id again replaces the document. Progress (sentences embedded, rate,
    ETA) goes to stderr: a bar on a terminal, a line every 10 s otherwise."""
    with guard():
        docs = read_documents(paths, split)
        if not docs:
            raise CLIError("nothing to ingest: no non-empty documents in " + ", ".join(map(str, paths)))
        engine, _ = open_engine(store, embedder, create=True, analyzer=analyzer, warm_up=False)
        try:
            replaced = _replaced(engine, [d.id for d in docs])
            n_docs, n_sent, secs = ingest_documents(engine, docs, batch_size, progress=not quiet)
            total = len(engine)
        finally:
            engine.close()
        rate = n_sent / secs if secs > 0 else float("inf")
        again = (f" ({replaced} of them replaced a document with the same id)" if replaced else "")
        out().print(f"ingested {n_docs} documents{again}, {n_sent} sentences in {secs:.1f} s "
                    f"({rate:,.0f} sentences/s); {escape(store)} now holds {total} sentences", soft_wrap=True)


def _replaced(engine: Engine, ids: Sequence[str]) -> int:
    """How many of ``ids`` will replace a document: already in the store, or given again later in ``ids``."""
    unique = list(dict.fromkeys(str(i) for i in ids))
    again = len(ids) - len(unique)
    if len(engine) == 0:
        return again
    stored = 0
    for lo in range(0, len(unique), 1000):
        hits = engine.search("SELECT DOCUMENT WHERE doc_id IN $ids", params={"ids": unique[lo:lo + 1000]})
        stored += len(hits)
    return again + stored


@app.command()
def delete(
    ids: Annotated[list[str], typer.Argument(metavar="ID...", help="Ids of the documents to delete.")],
    store: Annotated[str, typer.Option("--store", "-s", help="Store directory (or URL).")],
) -> None:
    """Delete documents (and all their sentences) by id. Exit 1 when an id was not in the store (the
    others are deleted), as rm does for a missing file."""
    with guard():
        engine, _ = open_engine(store, None, warm_up=False)
        try:
            missing = [i for i in ids if not engine.delete(i)]
            total = len(engine)
        finally:
            engine.close()
        n = len(ids) - len(missing)
        out().print(f"deleted {n} document{'s' if n != 1 else ''}; {escape(store)} now holds {total} sentences",
                    soft_wrap=True)
        if missing:
            _print_error("not in the store: " + ", ".join(escape(m) for m in missing))
            raise typer.Exit(1)


# ------------------------------------------------------------------------------------- query


def _with_limit(query: str, limit: int) -> Any:
    """The parsed query with its LIMIT replaced by ``limit``."""
    from nlql import ir
    from nlql.parser import parse

    q = parse(query)
    return dataclasses.replace(q, limit=ir.Literal(value=limit))


def _store_help() -> str:
    from nlql.stores import REGISTRY

    names = ", ".join(e.name for e in REGISTRY if e.by_name)
    urls = ", ".join(f"{s}://…" for e in REGISTRY for s in e.schemes[:1])
    return f"Store directory (or {names}, {urls})."


StoreOption = Annotated[str, typer.Option("--store", "-s", help=_store_help())]
EmbedderOption = Annotated[EmbedderName | None, typer.Option(
    help="Embedding model [default: the one that built the store (it records it), else NLQL_EMBEDDER, "
         "else minilm].")]
ParamOption = Annotated[list[str] | None, typer.Option(
    "--param", "-p", help="name=value for $name (value read as JSON if it is JSON). Repeatable.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for machines.")]
QueryArgument = Annotated[str, typer.Argument(metavar="QUERY",
                                              help="An NLQL query ('-' reads it from stdin).")]


class OutputFormat(str, Enum):
    """What ``nlql query --format`` prints."""

    table = "table"
    csv = "csv"
    jsonl = "jsonl"


@app.command()
def query(
    text: QueryArgument,
    store: StoreOption,
    embedder: EmbedderOption = None,
    param: ParamOption = None,
    as_json: JsonOption = False,
    explain: Annotated[bool, typer.Option("--explain", help="Print the plan before the results.")] = False,
    limit: Annotated[int | None, typer.Option("--limit", "-n", min=0,
                                              help="Override the query's LIMIT.")] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Keep results within a token budget.")] = None,
    fmt: Annotated[OutputFormat | None, typer.Option(
        "--format", "-f", help="table (for people), csv (one row per hit, flat metadata columns) or jsonl "
                               "(one JSON object per hit) [default: table].")] = None,
    timeout: Annotated[float | None, typer.Option(min=0.001, help="Deadline in seconds for the whole search "
                                                  "(what is complete by then, with a warning).")] = None,
) -> None:
    """Run a query and print the results as a table, CSV, JSON lines (or JSON)."""
    source = read_query(text)
    params = parse_params(param)
    if as_json and fmt is not None:
        raise typer.BadParameter("use --json or --format, not both", param_hint="'--format'")
    rows = fmt in (OutputFormat.csv, OutputFormat.jsonl)
    with guard(source):
        engine, _ = open_engine(store, embedder, warm_up=False)  # one query: warming up costs more than it saves
        try:
            q: Any = source if limit is None else _with_limit(source, limit)
            plan = engine.explain(q, params=params) if explain else None
            if plan is not None and not as_json:
                console = err() if rows else out()  # keep stdout parseable for csv and jsonl
                console.print(Text(str(plan)))
                console.print(Rule())
            hits = engine.search(q, params=params, max_tokens=max_tokens, timeout=timeout)
        finally:
            engine.close()
        if as_json:
            data = hits.to_dict()
            print_json({"explain": plan.to_dict(), **data} if plan is not None else data)
        elif rows:
            for w in hits.warnings:
                err().print(Text("warning: ", style="yellow") + Text(w))
            write_rows(hits, fmt, sys.stdout)  # type: ignore[arg-type]
        else:
            print_hits(hits)


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, default=json_default)
    if hasattr(value, "isoformat"):  # a datetime column (UTC): ISO-8601, as the JSON output writes it
        return value.isoformat()
    return value


def write_rows(hits: Hits, fmt: OutputFormat, stream: Any) -> None:
    """``csv``: a header and one row per hit, the columns of ``hits.to_pandas()`` (null is an empty cell,
    lists are JSON); ``jsonl``: one ``hit.to_dict()`` per line."""
    if fmt is OutputFormat.jsonl:
        for h in hits:
            stream.write(json.dumps(h.to_dict(), ensure_ascii=False, default=json_default) + "\n")
    else:
        import csv

        from nlql.execute.frames import columns

        cols = columns(hits)
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow([c.name for c in cols])
        for i in range(len(hits)):
            writer.writerow([_csv_cell(c.values[i]) for c in cols])
    stream.flush()


@app.command()
def ask(
    question: Annotated[str, typer.Argument(metavar="QUESTION",
                                            help="A question in plain words ('-' reads it from stdin).")],
    store: StoreOption,
    embedder: EmbedderOption = None,
    param: ParamOption = None,
    as_json: JsonOption = False,
    explain: Annotated[bool, typer.Option("--explain", help="Print the route (intent, rule, parameters) "
                                          "and the plan before the results.")] = False,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Keep results within a token budget.")] = None,
) -> None:
    """Answer a question: route it to an intent (entity, temporal, conceptual, general), run that intent's
    NLQL template with the question bound, and print the results (or that the store holds nothing about it)."""
    text = read_query(question)
    params = parse_params(param)
    with guard():
        engine, _ = open_engine(store, embedder, warm_up=False)  # one question: warming up costs more than it saves
        try:
            route = engine.route(text)  # once: a rewriter (an LLM) is not called twice for --explain
            plan = engine.explain(route, params=params) if explain else None
            hits = engine.ask(route, params=params, max_tokens=max_tokens)
        finally:
            engine.close()
        if as_json:
            data = hits.to_dict()
            print_json({"explain": plan.to_dict(), **data} if plan is not None else data)
            return
        console = out()
        if plan is not None:
            console.print(Text(str(plan)))
            console.print(Rule())
        route = hits.route
        console.print(Text(f"intent: {route.intent}", style="bold"))
        if not explain:
            for name in sorted(route.params):
                console.print(Text(f"${name} = " + json.dumps(route.params[name], ensure_ascii=False,
                                                               default=json_default), style="dim"))
            print_query(console, route.query)
        from nlql.route import nothing_about

        empty = nothing_about(text)
        for w in hits.warnings:
            if not w.startswith(empty):  # that one is the answer itself, printed below
                err().print(Text("warning: ", style="yellow") + Text(w))
        if not hits:
            console.print(Text(empty))
            return
        console.print(hits_table(hits))
        console.print(Text(_stats_line(hits), style="dim"))


@app.command()
def explain(
    text: QueryArgument,
    store: Annotated[str, typer.Option("--store", "-s", help="Store to plan for (the plan depends on "
                                       "its capabilities) [default: an empty in-memory store].")] = "memory",
    embedder: EmbedderOption = None,
    param: ParamOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show how a query would run (recall, pushed and residual filters, order, limit) without running it."""
    source = read_query(text)
    params = parse_params(param)
    if store == "memory" and embedder is None:
        embedder = EmbedderName.hash  # an empty store: nothing is embedded, so no model is needed
    with guard(source):
        engine, _ = open_engine(store, embedder, warm_up=False)
        try:
            plan = engine.explain(source, params=params)
        finally:
            engine.close()
        if as_json:
            print_json(plan.to_dict())
        else:
            out().print(Text(str(plan)))


@app.command()
def check(
    text: QueryArgument,
    param: ParamOption = None,
    as_json: JsonOption = False,
) -> None:
    """Check a query without data: exit 0 when valid, 1 with every problem listed, 2 on a usage error."""
    source = read_query(text)
    params = parse_params(param)
    with guard(source):
        from nlql.agent import check_query
        from nlql.embedders import HashEmbedder
        from nlql.engine import Engine

        engine = Engine(embedder=HashEmbedder(dim=8), store="memory", warm_up=False)
        diags = check_query(engine, source, params)
    if as_json:
        print_json({"valid": not diags, "diagnostics": diags})
    else:
        console = out()
        if not diags:
            console.print("ok: the query is valid")
        for i, d in enumerate(diags):
            if i:
                console.print()
            console.print(Text(d["rendered"]))
        if diags:
            n = len(diags)
            console.print(Text(f"{n} problem{'s' if n != 1 else ''}", style="bold red"))
    raise typer.Exit(1 if diags else 0)


def schema_table(schema: Any) -> Table:
    """The store's metadata keys as a rich table (types, documents, common values)."""
    title = (f"{schema.store}: {schema.documents} documents, {schema.sentences} sentences"
             + (f" (keys from a sample of {schema.sampled})" if schema.sampled is not None else ""))
    table = Table(title=title, title_justify="left")
    table.add_column("key")
    table.add_column("types")
    table.add_column("documents", justify="right")
    table.add_column("common values")
    for k in schema.keys:
        types = ", ".join(k.types if len(k.types) == 1 else (f"{t} ({n})" for t, n in k.types.items()))
        values = ", ".join(f"{json.dumps(v, ensure_ascii=False)} ({n})" for v, n in k.values)
        table.add_row(escape(f"meta.{k.name}"), types, str(k.documents), escape(snippet(values, 60)))
    return table


def print_schema(schema: Any, console: Console | None = None) -> None:
    console = console or out()
    if schema.embedder:
        console.print(Text("embedder: " + ", ".join(f"{k}={v}" for k, v in schema.embedder.items())))
    if schema.analyzer:
        console.print(Text("analyzer: " + ", ".join(f"{k}={v}" for k, v in sorted(schema.analyzer.items()))))
    if schema.keys:
        console.print(schema_table(schema))
    else:
        console.print(Text(f"{schema.store}: {schema.documents} documents, {schema.sentences} sentences, "
                           "no metadata keys"))


@app.command()
def schema(
    store: StoreOption,
    embedder: EmbedderOption = None,
    sample: Annotated[int, typer.Option(min=1, help="Documents a large server store samples for the keys.")]
    = 1000,
    as_json: JsonOption = False,
) -> None:
    """What a store holds: documents, sentences, embedder, analyzer, and every metadata key with its
    types, how many documents have it and common values (read it before writing filters)."""
    with guard():
        require_store(store)
        engine, _ = open_engine(store, embedder, warm_up=False)  # one look: warming up costs more than it saves
        try:
            result = engine.schema(sample=sample)
        finally:
            engine.close()
    if as_json:
        print_json(result.to_dict())
    else:
        print_schema(result)


# -------------------------------------------------------------------------------------- repl

REPL_HELP = """\
End a query with ';' or an empty line. Commands:
  :explain QUERY   show the plan instead of running (QUERY may span lines, ending as usual)
  :json            toggle JSON output
  :param n=v       bind $n (value read as JSON if it is JSON); :params lists them; :clear drops them
  :schema          the store's documents, sentences and metadata keys (types, counts, common values)
  :help            this text
  :quit            leave (also :q, :exit, Ctrl-D)"""


def _setup_readline() -> Any:
    if not sys.stdin.isatty():
        return None
    try:
        import readline
    except ImportError:
        return None
    history = Path(os.environ.get("NLQL_HISTORY", Path.home() / ".nlql_history"))
    try:
        readline.read_history_file(history)
    except OSError:
        pass
    readline.set_history_length(1000)

    def save() -> None:
        try:
            readline.write_history_file(history)
        except OSError:
            pass

    return save


def _one_history_entry(lines: int, source: str) -> None:
    """Replace the last ``lines`` readline history entries (one per typed line) with one: the statement."""
    if lines < 2 or not sys.stdin.isatty():
        return
    try:
        import readline
    except ImportError:
        return
    n = readline.get_current_history_length()
    if n < lines:
        return
    for i in range(lines):
        readline.remove_history_item(n - 1 - i)
    readline.add_history(" ".join(part.strip() for part in source.splitlines() if part.strip()))


def params_text(params: dict[str, Any]) -> str:
    """What ``:params`` prints: each bound parameter, or that none is."""
    if not params:
        return "no parameters bound (:param name=value binds one)"
    lines = [f"${k} = {json.dumps(v, ensure_ascii=False, default=json_default)}" for k, v in params.items()]
    return "\n".join(lines) + "\n(:clear drops them)"


def run_repl_statement(engine: Engine, source: str, params: dict[str, Any], *, explain: bool,
                       as_json: bool) -> None:
    """Run (or explain) one statement, printing errors instead of raising."""
    bound = params or None
    try:
        if explain:
            plan = engine.explain(source, params=bound)
            if as_json:
                print_json(plan.to_dict())
            else:
                out().print(Text(str(plan)))
            return
        hits = engine.search(source, params=bound)
    except NLQLError as exc:
        err().print(Text(str(exc.with_source(source))))
        if any(d.message.startswith("unused parameter") for d in exc.diagnostics):
            err().print(Text("parameters bound with :param stay bound for every query: "
                             ":params lists them, :clear drops them"))
        return
    if as_json:
        print_json(hits.to_dict())
    else:
        print_hits(hits)


@app.command()
def repl(
    store: StoreOption,
    embedder: EmbedderOption = None,
    as_json: JsonOption = False,
) -> None:
    """An interactive prompt: type queries, see tables; ':help' lists the commands."""
    interactive = sys.stdin.isatty()
    with guard():
        engine, _ = open_engine(store, embedder)
    save_history = _setup_readline()
    params: dict[str, Any] = {}
    buffer: list[str] = []
    explain_next = False
    if interactive:
        out().print(f"NLQL {__version__} · store {escape(store)} ({len(engine)} sentences) · "
                    "end a query with ';' or an empty line · :help · :quit")
    try:
        while True:
            prompt = ("nlql> " if not buffer else "  ..> ") if interactive else ""
            try:
                line = input(prompt)
            except EOFError:
                if buffer:
                    run_repl_statement(engine, "\n".join(buffer), params, explain=explain_next, as_json=as_json)
                break
            except KeyboardInterrupt:
                out().print("^C")
                buffer, explain_next = [], False
                continue
            stripped = line.strip()
            if not buffer and stripped.startswith(":"):
                cmd, _, rest = stripped.partition(" ")
                cmd = cmd.lower()
                if cmd in (":quit", ":q", ":exit"):
                    break
                if cmd == ":help":
                    out().print(Text(REPL_HELP))
                elif cmd == ":json":
                    as_json = not as_json
                    out().print(f"json output {'on' if as_json else 'off'}")
                elif cmd == ":param":
                    try:
                        k, v = parse_param(rest)
                    except typer.BadParameter as exc:
                        err().print(Text(f"error: {exc.message}"))
                        continue
                    params[k] = v
                elif cmd == ":params":
                    out().print(Text(params_text(params)))
                elif cmd == ":schema":
                    try:
                        print_schema(engine.schema())
                    except NLQLError as exc:
                        err().print(Text(str(exc)))
                elif cmd == ":clear":
                    params.clear()
                elif cmd == ":explain":
                    explain_next = True
                    if rest.strip():
                        line, stripped = rest, rest.strip()
                    else:
                        continue
                else:
                    err().print(Text(f"error: unknown command {cmd} (:help lists them)"))
                    continue
                if cmd != ":explain":
                    continue
            if not stripped and not buffer:
                continue
            if stripped:
                buffer.append(line)
            if not stripped or stripped.endswith(";"):
                source = "\n".join(buffer)
                _one_history_entry(len(buffer), source)
                buffer = []
                try:
                    run_repl_statement(engine, source, params, explain=explain_next, as_json=as_json)
                except Exception as exc:  # noqa: BLE001 - keep the session alive on an internal error
                    if STATE.debug:
                        raise
                    _print_error(f"{type(exc).__name__}: {exc}", "run with --debug for the traceback")
                explain_next = False
    finally:
        if save_history is not None:
            save_history()
        engine.close()


# -------------------------------------------------------------------------------------- demo

DEMO_QUERIES: list[tuple[str, str, str]] = [
    (
        "Semantic search",
        "The sentences closest in meaning to a question (cosine similarity of sentence embeddings).",
        'SELECT SENTENCE\nLET rel = SIMILARITY(content, "turn a Python object into a JSON string")\nLIMIT 5',
    ),
    (
        "Filtered by metadata",
        "Functions of modules added in Python 3.4 or later. Old modules have no meta.year: the comparison "
        "is UNKNOWN for them, so they are left out, as in SQL.",
        'SELECT SENTENCE\nLET rel = SIMILARITY(content, "average of a list of numbers")\n'
        'WHERE meta.year >= 2014 AND meta.kind == "function"\nLIMIT 5',
    ),
    (
        "Hybrid: SIMILARITY + BM25 fused with RRF",
        "Meaning and exact keywords, ranked together by reciprocal rank fusion.",
        'SELECT SENTENCE\nLET sem = SIMILARITY(content, "create a temporary directory"),\n'
        '    kw  = BM25(content, "temporary directory"),\n    score = RRF(sem, kw, k => 60)\n'
        'ORDER BY score DESC\nLIMIT 5',
    ),
    (
        "Whole documents",
        "One row per docstring, scored by its best sentence; module docstrings only.",
        'SELECT DOCUMENT\nLET rel = SIMILARITY(content, "run several tasks at the same time")\n'
        'WHERE meta.kind == "module"\nLIMIT 3',
    ),
    (
        "CONTAINS: exact text inside the ranking",
        "Sentences that contain 'random' (a case-insensitive substring test), ranked by meaning.",
        'SELECT SENTENCE\nLET rel = SIMILARITY(content, "generate a secure token")\n'
        'WHERE content CONTAINS "random"\nLIMIT 5',
    ),
    (
        "A window of context",
        "The best sentences of two docstrings, each with one neighbour on either side.",
        'SELECT SPAN(SENTENCE, window => 1)\nLET rel = SIMILARITY(content, "pretty-print nested data with indentation")\n'
        'WHERE meta.name IN ("json.dumps", "pprint.pformat")\nLIMIT 2',
    ),
]
DEMO_EXPLAIN = 2  # index of the query whose plan is shown


@app.command()
def demo(
    store: Annotated[str | None, typer.Option("--store", "-s", help="Keep the demo store in this "
                                              "directory (reused when it exists) [default: in memory].")] = None,
    embedder: Annotated[EmbedderName | None, typer.Option(
        help="minilm: the real offline model; hash: fast, lexical only [default: the store's, else "
             "NLQL_EMBEDDER, else minilm].")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Ingest the bundled corpus (Python standard library docstrings) and run example queries."""
    from nlql.data import load_demo

    console = out()
    with guard():
        docs = [Doc(d["id"], d["text"], d["metadata"]) for d in load_demo()]
        target = store or "memory"
        reuse = store is not None and (Path(store) / STORE_FILE).is_file()
        engine, embedder_name = open_engine(target, embedder, create=True)
        try:
            console.print(Rule(f"NLQL {__version__} demo"))
            console.print(f"Corpus: {len(docs)} docstrings from the Python standard library (PSF licence), "
                          f"embedder: {embedder_name}, store: {escape(target)}.",
                          soft_wrap=True)
            if reuse and len(engine) > 0:
                console.print(f"Reusing {escape(target)} ({len(engine)} sentences).")
            else:
                n_docs, n_sent, secs = ingest_documents(engine, docs, 64, progress=not quiet, label="embedding")
                console.print(f"ingested {n_docs} documents, {n_sent} sentences in {secs:.1f} s", soft_wrap=True)
            for i, (title, why, q) in enumerate(DEMO_QUERIES, start=1):
                console.print()
                console.print(Rule(f"{i}. {title}", align="left"))
                console.print(Text(why, style="italic"))
                print_query(console, q)
                print_hits(engine.search(q), console)
                if i - 1 == DEMO_EXPLAIN:
                    console.print(Text("How it runs (explain):", style="bold"))
                    console.print(Text(str(engine.explain(q))))
            console.print()
            console.print(Rule("Next"))
            console.print(Text(
                "nlql ingest my-notes/ --store ./store          # txt, md, jsonl\n"
                "nlql query 'SELECT SENTENCE LET rel = SIMILARITY(content, \"…\") LIMIT 5' --store ./store\n"
                "nlql repl --store ./store                     # interactive\n"
                "nlql mcp --store ./store                      # for agents (MCP over stdio)"))
        finally:
            engine.close()


# --------------------------------------------------------------------------------------- mcp


@app.command()
def mcp(
    store: StoreOption,
    embedder: EmbedderOption = None,
) -> None:
    """Serve a store to agents over MCP (stdio): tools nlql_schema, nlql_check, nlql_explain,
    nlql_search, nlql_ask and the resources nlql://language and nlql://schema."""
    with guard():
        # the checks that cost nothing first (a missing store fails here, before serving); the store
        # itself is opened on the first tool call, so a client's initialize is answered at once
        if _is_directory_store(store) and Path(store).is_file():
            raise CLIError(f"{store} is a file, not an NLQL store directory")
        require_store(store)
        from nlql.agent import build_mcp_server

        def opened() -> Engine:
            started = time.perf_counter()
            engine, _ = open_engine(store, embedder)
            print(f"nlql mcp: opened {store} in {time.perf_counter() - started:.1f} s", file=sys.stderr,
                  flush=True)
            return engine

        server = build_mcp_server(opened)
        try:
            server.run("stdio")
        finally:
            if server.nlql_engine.opened is not None:
                server.nlql_engine.opened.close()


# ------------------------------------------------------------------------------------- serve


@app.command()
def serve(
    store: Annotated[str | None, typer.Option("--store", "-s", help=_store_help() + " Required unless --demo.")]
    = None,
    embedder: EmbedderOption = None,
    demo: Annotated[bool, typer.Option("--demo", help="Serve the bundled demo corpus (in memory unless --store "
                                                      "names a directory, which is filled once).")] = False,
    host: Annotated[str, typer.Option(help="Address to bind. Anything but a loopback address needs a token.")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port.")] = 8000,
    token: Annotated[str | None, typer.Option(envvar="NLQL_TOKEN", show_envvar=True,
                                              help="Bearer token every API request must send.")] = None,
    timeout: Annotated[float, typer.Option(min=0.001, help="Deadline of one request, in seconds.")] = 30.0,
    max_body_bytes: Annotated[int, typer.Option(min=1, help="Largest request body.")] = 256 * 1024,
    max_query_chars: Annotated[int, typer.Option(min=1, help="Longest query.")] = 10_000,
    max_rows: Annotated[int, typer.Option(min=1, help="Most hits in one response (more: an error asking "
                                                      "for LIMIT).")] = 10_000,
    workers: Annotated[int, typer.Option(min=1, help="Threads that run engine calls (a bound that holds).")] = 16,
    max_pending: Annotated[int, typer.Option(min=1, help="Requests queued or running at once (more: 503 "
                                                         "overload).")] = 1024,
    max_response_bytes: Annotated[int, typer.Option(min=1, help="Largest response body (more: 400 limit).")]
    = 8 * 1024 * 1024,
    max_span_window: Annotated[int, typer.Option(min=1, help="Largest SPAN window a query may ask for.")] = 50,
    header_timeout: Annotated[float, typer.Option(min=0.001, help="Seconds a client has to send its request "
                                                                  "headers (then 408).")] = 10.0,
    body_timeout: Annotated[float, typer.Option(min=0.001, help="Seconds a client has to send its request "
                                                                "body (then 408).")] = 30.0,
    max_connections: Annotated[int, typer.Option(min=1, help="Connections held at once (one more closes the "
                                                             "slowest waiting client).")] = 2048,
    cors_origin: Annotated[list[str] | None, typer.Option(
        "--cors-origin", help="An origin whose pages may call the API (CORS; off by default). Repeatable.")]
    = None,
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", help="A Host header name to accept besides the loopback names (e.g. the public name a "
                             "reverse proxy forwards); '*' accepts any. Repeatable.")] = None,
    no_playground: Annotated[bool, typer.Option("--no-playground", help="Do not serve the web playground.")]
    = False,
    processes: Annotated[int, typer.Option(min=1, max=64, help="Worker processes on one port, each with its own "
                                                               "--workers threads and limits; more than 1 needs "
                                                               "a server store (postgresql://, milvus+http://, "
                                                               "qdrant+http:// URL).")] = 1,
    log_level: Annotated[str, typer.Option(help="uvicorn's log level.")] = "info",
) -> None:
    """Serve a store over HTTP: POST /search, /explain, /check, GET /health, /openapi.json, and a web
    playground at /. Binds 127.0.0.1 unless --host says otherwise (then --token is required)."""
    with guard():
        try:
            from nlql.serve import ServeConfig, ServeConfigError
            from nlql.serve import serve as run_server
        except ImportError as exc:
            raise CLIError(str(exc), "pip install 'nlql-engine[serve]'") from None
        config = ServeConfig(host=host, port=port, token=token or None, max_body_bytes=max_body_bytes,
                             max_query_chars=max_query_chars, max_rows=max_rows, timeout=timeout,
                             workers=workers, playground=not no_playground, max_pending=max_pending,
                             max_response_bytes=max_response_bytes, max_span_window=max_span_window,
                             header_timeout=header_timeout, body_timeout=body_timeout,
                             max_connections=max_connections, cors_origins=tuple(cor for cor in cors_origin or ()),
                             allowed_hosts=None if not allow_host else
                             (*allow_host, "127.0.0.1", "localhost", "::1", "[::1]", host))
        try:
            config.validate()
        except ServeConfigError as exc:
            raise CLIError(str(exc), "nlql serve --host 0.0.0.0 --token \"$(openssl rand -hex 16)\"") from None
        if demo:
            target = store or "memory"
        elif store is not None:
            target = store
        else:
            raise CLIError("nlql serve needs --store DIR (or --demo for the bundled corpus)")
        if processes > 1:
            from nlql.serve.processes import check_processes

            try:
                check_processes(processes, target or "memory")
            except ServeConfigError as exc:
                raise CLIError(str(exc), "serve a PostgreSQL, Milvus or Qdrant server by URL, or drop "
                                         "--processes") from None
        if demo:
            from nlql.data import load_demo

            engine, name = open_engine(target, embedder, create=True)
            if len(engine) == 0:
                docs = [Doc(d["id"], d["text"], d["metadata"]) for d in load_demo()]
                ingest_documents(engine, docs, 64, progress=sys.stderr.isatty(), label="embedding")
        else:
            engine, name = open_engine(target, embedder)
        try:
            shown = f"[{host}]" if ":" in host else host
            err().print(f"NLQL {__version__} serving {escape(store or 'the demo corpus')} ({len(engine)} sentences, "
                        f"embedder {name}) on http://{shown}:{port}/"
                        + ("" if token else " (no token: loopback only)")
                        + (f", {processes} processes" if processes > 1 else ""), soft_wrap=True)
            if processes > 1:  # each worker opens the store itself (SPEC §10: it holds no state here)
                from functools import partial

                from nlql.serve.processes import serve_processes

                engine.close()
                serve_processes(partial(_served_engine, target, name), config, processes, log_level=log_level)
            else:
                run_server(engine, config, log_level=log_level)
        finally:
            engine.close()


def _served_engine(store: str, embedder: str) -> Any:
    """The engine one ``nlql serve --processes`` worker opens (module level: workers start by spawn)."""
    return open_engine(store, EmbedderName(embedder))[0]


# -------------------------------------------------------------------------------------- main


def _hoist_debug(args: list[str]) -> list[str]:
    """Accept ``--debug`` after the subcommand too (``nlql query … --debug``)."""
    head = args[: args.index("--")] if "--" in args else args
    if "--debug" in head[1:]:
        i = head.index("--debug")
        args = ["--debug", *args[:i], *args[i + 1:]]
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """The ``nlql`` entry point."""
    args = _hoist_debug(list(sys.argv[1:] if argv is None else argv))
    app(args=args, prog_name="nlql")


if __name__ == "__main__":
    main()
