"""Helpers shared by the measurement scripts: timing, the machine description, a lookup embedder, JSON out."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CACHE = ROOT / "bench" / ".cache"


def steady(engine: Any) -> Any:
    """Build the built-in store's int8 copy now, and let its first filtered searches build their filters'
    own copies on their own thread (the store otherwise builds both in the background, scanning float32
    or the whole copy meanwhile: ``bench/first_search.py`` measures that), so that timings after the
    warm-up rounds are of the steady state; returns ``engine``."""
    build = getattr(engine.store, "build_int8", None)
    if build is not None:
        build()
        engine.store.INT8_BACKGROUND = False
    return engine


@contextlib.contextmanager
def row_by_row(engine: Any) -> Iterator[Any]:
    """Inside: ``engine``'s store declares no fast path and every plan is planned again, so a search runs
    row by row (the reference the fast pages are checked against); restored after."""
    caps = engine.store.capabilities
    engine._plans.clear()  # noqa: SLF001 - the plans cached before hold the fast path
    engine.store.capabilities = dataclasses.replace(caps, FAST_PATH=False)
    try:
        yield engine
    finally:
        engine.store.capabilities = caps
        engine._plans.clear()  # noqa: SLF001


def median_ms(fn: Callable[[], Any], repeat: int, warmup: int = 1) -> float:
    """Median wall time of ``fn`` in ms over ``repeat`` runs, after ``warmup`` unmeasured runs."""
    return timed_runs(fn, repeat, warmup)[0]


def timed_runs(fn: Callable[[], Any], repeat: int, warmup: int = 1) -> tuple[float, list[float]]:
    """(median ms, every run in ms) of ``fn`` after ``warmup`` unmeasured runs."""
    for _ in range(warmup):
        fn()
    runs = []
    for _ in range(max(1, repeat)):
        t = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t) * 1000)
    return statistics.median(runs), runs


def _read_first(path: str, key: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def machine_info() -> dict[str, Any]:
    """Cores, RAM, CPU model, Python, numpy and its BLAS, and the load when the run started."""
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "cpu_model": _read_first("/proc/cpuinfo", "model name") or platform.processor() or "unknown",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
    }
    mem = _read_first("/proc/meminfo", "MemTotal")
    if mem:
        info["ram_gb"] = round(int(mem.split()[0]) / 1024 / 1024, 1)
    try:
        info["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = [f"{p.get('internal_api')} {p.get('version')} ({p.get('num_threads')} threads)"
                        for p in threadpool_info() if p.get("user_api") == "blas"]
    except Exception:  # noqa: BLE001 - decoration only
        pass
    return info


def stamp_end(results: dict[str, Any], started: float) -> None:
    """Record the load average at the end and the wall time of the script (``started``: perf_counter)."""
    machine = results.setdefault("machine", {})
    try:
        machine["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    results["wall_s"] = round(time.perf_counter() - started, 1)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as indented JSON, creating the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def log(msg: str) -> None:
    """Progress on stderr, flushed (the tables go to stdout and JSON)."""
    print(msg, file=sys.stderr, flush=True)


class LookupEmbedder:
    """An embedder over precomputed vectors: both engines get identical vectors and neither pays for
    embedding during ingest, so ingest time is the engine's own work. An unknown text is an error."""

    def __init__(self, texts: Sequence[str], vectors: np.ndarray, name: str = "hash-384-lookup") -> None:
        self._row = {t: i for i, t in enumerate(texts)}
        self._vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.name = name

    @property
    def dim(self) -> int:
        return int(self._vectors.shape[1])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        try:
            return self._vectors[[self._row[t] for t in texts]]
        except KeyError as exc:
            raise KeyError(f"no precomputed vector for {exc.args[0]!r}") from None


class QueryMemo:
    """Wraps an embedder and remembers short calls (query texts), so query timings exclude embedding.

    Batches of more than ``small`` texts (ingest) always go to the inner embedder and are not kept.
    """

    def __init__(self, inner: Any, small: int = 4) -> None:
        self.inner = inner
        self.small = small
        self.name = str(getattr(inner, "name", type(inner).__name__))
        self._memo: dict[str, np.ndarray] = {}

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = list(texts)
        if len(items) > self.small:
            return np.asarray(self.inner.embed(items), dtype=np.float32)
        missing = [t for t in items if t not in self._memo]
        if missing:
            for t, v in zip(missing, np.asarray(self.inner.embed(missing), dtype=np.float32), strict=True):
                self._memo[t] = v
        return np.stack([self._memo[t] for t in items]) if items else np.zeros((0, self.dim), np.float32)


def interleaved_runs(fns: Mapping[str, Callable[[], Any]], repeat: int, warmup: int = 1) -> dict[str, list[float]]:
    """Time several functions round-robin (a, b, c, a, b, c, …): every function's samples are spread over
    the whole measurement window, so a burst of load from another process does not land on one of them
    only. ``warmup`` unmeasured rounds first. Returns every run in ms, per name."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    runs: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(max(1, repeat)):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            runs[name].append((time.perf_counter() - t) * 1000)
    return runs


def interleaved_cpu_runs(fns: Mapping[str, Callable[[], Any]], repeat: int,
                         warmup: int = 1) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """:func:`interleaved_runs`, also recording the process's CPU time per call (every thread of the
    process: the int8 scan runs on two): on a shared machine the wall time also holds the waits for a
    core, the CPU time does not. Returns (wall ms, CPU ms) per name."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(max(1, repeat)):
        for name, fn in fns.items():
            c, t = time.process_time(), time.perf_counter()
            fn()
            wall[name].append((time.perf_counter() - t) * 1000)
            cpu[name].append((time.process_time() - c) * 1000)
    return wall, cpu


class SparseBM25:
    """The BM25 floor: NLQL's analyzer and formula, weights precomputed in a scipy CSR (terms x documents);
    a query is one sparse row (idf weights) times the matrix (bench/side_by_side.py, bench/bm25_speed.py)."""

    def __init__(self, texts: list[str], analyzer: Any, k1: float = 1.2, b: float = 0.75) -> None:
        import scipy.sparse as sp

        self.analyzer, self.n = analyzer, len(texts)
        vocab: dict[str, int] = {}
        rows, cols, tfs, lens = [], [], [], []
        for i, text in enumerate(texts):
            terms = analyzer.terms(text)
            lens.append(len(terms))
            counts: dict[int, int] = {}
            for w in terms:
                j = vocab.setdefault(w, len(vocab))
                counts[j] = counts.get(j, 0) + 1
            rows.extend([i] * len(counts))
            cols.extend(counts)
            tfs.extend(counts.values())
        r, c = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
        tf = np.asarray(tfs, dtype=np.float64)
        length = np.asarray(lens, dtype=np.float64)
        weight = tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * length[r] / length.mean()))
        self.mat = sp.csr_array((weight, (c, r)), shape=(len(vocab), self.n))
        df = np.bincount(c, minlength=len(vocab)).astype(np.float64)
        self.idf = np.log1p((self.n - df + 0.5) / (df + 0.5))
        self.vocab = vocab
        self._sp = sp

    def scores(self, text: str, ordered: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(matching rows, their BM25 scores); ``ordered``: rows ascending, so that ties break on the
        row as NLQL's do (a timed floor leaves that out: its top-k is a set)."""
        q = [self.vocab[w] for w in dict.fromkeys(self.analyzer.terms(text)) if w in self.vocab]
        qrow = self._sp.csr_array((self.idf[q], (np.zeros(len(q), dtype=np.int64), q)), shape=(1, len(self.vocab)))
        res = (qrow @ self.mat).tocsr()
        if ordered:
            res.sort_indices()
        return res.indices, res.data

    def dense(self, text: str) -> np.ndarray:
        rows, scores = self.scores(text)
        out = np.full(self.n, -np.inf)
        out[rows] = scores
        return out


@contextlib.contextmanager
def earlier_tree(rev: str) -> Iterator[tuple[str, Path, Path]]:
    """``(short revision, its checkout, a scratch directory)``: ``rev`` checked out with ``git worktree``
    into a temporary directory for the block (a before/after bench runs the two trees side by side);
    removed after."""
    import subprocess
    import tempfile

    short = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="nlql-before-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), short], cwd=ROOT, check=True)
        try:
            yield short, tree, Path(tmp)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)


def close_children(procs: Any) -> None:
    """End the line-protocol children of a before/after bench: close each one's stdin (its signal to
    exit), then wait for it."""
    for proc in procs:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=60)


def tree_env(tree: Path) -> dict[str, str]:
    """The environment of a child process that imports ``nlql`` from ``tree``, offline, with bytecode
    written as an installed package has it."""
    env = dict(os.environ, PYTHONPATH=str(tree), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env
