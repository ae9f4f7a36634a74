"""The NLQLError hierarchy: every mistake a user can make, rendered with a caret under it.

``str(error)`` is the message with its location, the source line, a caret under the span and a hint::

    unknown name 'rell' at line 3, column 7
      3 | WHERE rell >= 0.3
        |       ^^^^
    hint: did you mean 'rel'?
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nlql.span import Span


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem found in a query. ``line``/``column`` are 1-based; 0 when there is no position."""

    line: int
    column: int
    message: str
    hint: str | None = None
    span: Span | None = field(default=None, compare=False)
    code: str = "error"
    severity: str = "error"  # "error" (the query cannot run) or "warning" (it runs; see the message)

    def render(self, source: str | None) -> str:
        """The diagnostic as text: message, location, source line with caret, hint."""
        return render_message(self.message, self.span, source, self.hint)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready view (for agents and ``--json`` output)."""
        out: dict[str, object] = {
            "line": self.line,
            "column": self.column,
            "message": self.message,
            "hint": self.hint,
            "code": self.code,
        }
        if self.severity != "error":  # errors keep the shape they always had
            out["severity"] = self.severity
        if self.span is not None:
            out["start"] = self.span.start
            out["end"] = self.span.end
        return out


def render_message(message: str, span: Span | None, source: str | None, hint: str | None) -> str:
    """Message + ``at line L, column C`` + the source line + caret + hint (SPEC §8)."""
    if span is None:
        lines = [message]
    else:
        lines = [f"{message} at line {span.line}, column {span.column}"]
        if source is not None:
            src_lines = source.split("\n")
            if 1 <= span.line <= len(src_lines):
                text = src_lines[span.line - 1].replace("\t", " ")
                if len(text) > 200:  # keep the caret near the error on very long lines
                    lo = max(0, span.column - 80)
                    shown = text[lo : lo + 160]
                    col = span.column - lo
                else:
                    shown = text
                    col = span.column
                gutter = f"{span.line:>3} | "
                width = 1
                if span.end_line == span.line:
                    width = max(1, span.end_column - span.column)
                else:
                    width = max(1, len(text) - span.column + 1)
                width = min(width, max(1, len(shown) - col + 2))
                lines.append(gutter + shown)
                lines.append(" " * (len(gutter) - 2) + "| " + " " * (col - 1) + "^" * width)
    if hint:
        lines.append(f"hint: {hint}")
    return "\n".join(lines)


class NLQLError(Exception):
    """Base of every error a user can cause. Has ``line``, ``column``, ``hint`` and a caret rendering."""

    kind = "error"

    def __init__(
        self,
        message: str,
        span: Span | None = None,
        source: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.span = span
        self.source = source
        self.hint = hint

    @property
    def line(self) -> int:
        return self.span.line if self.span else 0

    @property
    def column(self) -> int:
        return self.span.column if self.span else 0

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return [Diagnostic(self.line, self.column, self.message, self.hint, self.span, self.kind)]

    def with_source(self, source: str) -> NLQLError:
        """Attach the query text (for caret rendering) if not already known; returns self."""
        if self.source is None:
            self.source = source
        return self

    def __str__(self) -> str:
        return render_message(self.message, self.span, self.source, self.hint)


class NLQLSyntaxError(NLQLError):
    """The text is not NLQL: an unexpected character or token, an unterminated string, …"""

    kind = "syntax"


class CheckError(NLQLError):
    """Semantic problems (names, types, arity, cycles, params). Carries every diagnostic at once."""

    kind = "check"

    def __init__(self, diagnostics: list[Diagnostic], source: str | None = None) -> None:
        first = diagnostics[0]
        more = len(diagnostics) - 1
        super().__init__(first.message, first.span, source, first.hint)
        self._diagnostics = list(diagnostics)
        self.more = more

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return list(self._diagnostics)

    def __str__(self) -> str:
        parts = [d.render(self.source) for d in self._diagnostics]
        return "\n\n".join(parts)


class IRValidationError(NLQLError):
    """A JSON/dict IR given to ``Query.from_dict`` is malformed; ``path`` is the JSON path of the bad field."""

    kind = "ir"

    def __init__(self, message: str, path: str) -> None:
        super().__init__(f"{message} at {path}")
        self.path = path


class PlanError(NLQLError):
    """The query is valid but cannot be planned (e.g. an unresolvable WITHIN period)."""

    kind = "plan"


class UnsupportedError(NLQLError):
    """A backend or dialect cannot run a feature the query needs."""

    kind = "unsupported"

    def __init__(self, backend: str, feature: str, span: Span | None = None, hint: str | None = None) -> None:
        super().__init__(f"{backend} does not support {feature}", span, None, hint)
        self.backend = backend
        self.feature = feature


class ParamError(NLQLError):
    """A ``$param`` is missing, unused or of the wrong type."""

    kind = "param"


class BackendError(NLQLError):
    """The store failed (connection lost, server error). Names the store."""

    kind = "backend"

    def __init__(self, store: str, message: str, hint: str | None = None) -> None:
        super().__init__(f"{store}: {message}", None, None, hint)
        self.store = store


class NLQLTimeoutError(NLQLError):
    """A search ran out of time before it had any result."""

    kind = "timeout"


class EvaluationError(NLQLError):
    """A user function raised while a query ran."""

    kind = "evaluation"


class LimitError(NLQLError):
    """The query exceeds a configured limit (length, depth, list length, LIMIT ceiling)."""

    kind = "limit"


#: The distribution name on the package index (the import name stays ``nlql``).
DISTRIBUTION = "nlql-engine"

#: What a missing model needs, said once: CPU torch first (the default wheel on Linux pulls CUDA).
TORCH_CPU_HINT = ("install the CPU build of torch first (pip install torch --index-url "
                  "https://download.pytorch.org/whl/cpu), then pip install '{dist}[{extra}]'; "
                  "--embedder hash (HashEmbedder) works without any model")
class CursorError(NLQLError):
    """A ``search(…, cursor=…)`` cursor that cannot continue this query: not a cursor, made by another
    query text or store, or made before the store's data was dropped; or OFFSET given with it."""

    kind = "cursor"


class RouteError(NLQLError):
    """A router cannot be built or cannot route: a rule that is not a valid regex, a rule whose intent
    has no template, an empty question, a caller parameter that the router binds itself."""

    kind = "route"


class TemplateError(CheckError):
    """A router's query template is not valid NLQL. ``template`` names it (its intent); the diagnostics,
    line, column and caret are those of the template text."""

    kind = "template"

    def __init__(self, template: str, diagnostics: list[Diagnostic], source: str) -> None:
        super().__init__(diagnostics, source)
        self.template = template
        self.message = f"template {template!r}: {self.message}"

    def __str__(self) -> str:
        return f"template {self.template!r} is not valid NLQL:\n" + super().__str__()


class MissingDependencyError(NLQLError, ImportError):
    """An optional dependency is not installed; the message names the ``pip install`` that fixes it.

    >>> print(MissingDependencyError("qdrant", "qdrant-client").hint)
    pip install 'nlql-engine[qdrant]'
    """

    kind = "dependency"

    def __init__(self, extra: str, module: str) -> None:
        if extra in ("st", "onnx"):
            hint = TORCH_CPU_HINT.format(dist=DISTRIBUTION, extra=extra)
        else:
            hint = f"pip install '{DISTRIBUTION}[{extra}]'"
        NLQLError.__init__(
            self,
            f"the '{module}' package is not installed (needed by {DISTRIBUTION}[{extra}])",
            hint=hint,
        )
        self.extra = extra
        self.module = module


class StoreMismatchError(NLQLError):
    """A store was opened with another embedder (or BM25 analyzer) than the one that built it.

    Vectors of two embedders live in unrelated spaces, so their similarities mean nothing; the message
    names both, the hint how to re-embed into a new store.
    """

    kind = "store"

    def __init__(self, what: str, recorded: str, given: str, hint: str | None = None) -> None:
        super().__init__(f"this store was built with the {what} {recorded}, not {given}", hint=hint)
        self.what = what
        self.recorded = recorded
        self.given = given


class EmbedderError(BackendError):
    """The embedder failed or returned something that is not one finite vector per text. Names it.

    A :class:`BackendError` too: the embedder is a service the engine depends on, like the store.
    """

    kind = "embedder"

    def __init__(self, embedder: str, message: str, hint: str | None = None) -> None:
        NLQLError.__init__(self, f"embedder {embedder}: {message}", None, None, hint)
        self.store = f"embedder {embedder}"
        self.embedder = embedder
