"""Write a BERT-family sentence encoder as an ONNX graph straight from its safetensors weights: no torch.

The graph is the encoder of Hugging Face's ``BertModel`` (absolute positions, post-layer-norm, exact
erf GELU) with sentence-transformers' pooling (mean over the attention mask, or the CLS token) inside,
built node by node with ``onnx.helper``; the weights are read from ``model.safetensors`` with numpy
(the format is an 8-byte little-endian header length, a JSON header, then raw little-endian tensors).
It takes ``input_ids``, ``attention_mask`` and ``token_type_ids`` (int64, ``[batch, tokens]``) and
returns ``sentence_embedding`` (float32, ``[batch, hidden]``, not yet normalised): the same contract
as the torch export in :func:`nlql.embedders.export_onnx`, the same vectors (cosine ≥ 0.99999, checked
by ``tests/test_onnx_embedder.py``), and it takes a second or two instead of a minute.

Only what the models NLQL ships or documents need is supported (``model_type`` ``bert``, absolute
position embeddings, ``gelu`` activation, float32 or float16/bfloat16 weights); anything else raises
:class:`UnsupportedModel` and the caller falls back to the torch exporter.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["UnsupportedModel", "read_safetensors", "write_bert_onnx"]

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32,
           "BF16": np.uint16}


class UnsupportedModel(ValueError):
    """The model is not one this writer knows; use the torch exporter."""


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of a ``.safetensors`` file as a float32 (or integer) numpy array."""
    raw = Path(path).read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    base = 8 + size
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise UnsupportedModel(f"tensor {name}: dtype {info['dtype']} is not supported")
        lo, hi = info["data_offsets"]
        arr = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"), count=(hi - lo) // np.dtype(dtype).itemsize,
                            offset=base + lo).reshape(info["shape"])
        if info["dtype"] == "BF16":  # bfloat16 is the top half of a float32
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        elif arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
        out[name.removeprefix("bert.")] = arr
    return out


def write_bert_onnx(model_dir: str | Path, out: str | Path, pooling: str = "mean", *, fused: bool = True) -> Path:
    """Write ``model_dir``'s BERT encoder plus pooling to ``out`` (one self-contained ONNX file).

    ``fused`` (the default) writes ONNX Runtime's own fused operators (``com.microsoft`` ``Attention``,
    ``SkipLayerNormalization``, ``BiasGelu``), the graph its transformer optimizer would make from the
    plain one, in a second and without running the optimizer; ``fused=False`` writes standard ONNX
    operators only (any ONNX runtime; the optimizer fuses it to the same graph).

    Raises:
        UnsupportedModel: not a plain BERT (``config.json``), or its weights are missing or named otherwise.
        ImportError: the ``onnx`` package is not installed.
    """
    from onnx import TensorProto, helper, numpy_helper, save_model

    src = Path(model_dir)
    try:
        config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnsupportedModel(f"{src}: no readable config.json ({exc})") from None
    if config.get("model_type") != "bert" or config.get("hidden_act", "gelu") != "gelu" \
            or config.get("position_embedding_type", "absolute") != "absolute":
        raise UnsupportedModel(f"{src}: only plain BERT (absolute positions, gelu) is written without torch")
    if pooling not in ("mean", "cls"):
        raise UnsupportedModel(f"pooling {pooling!r}")
    weights_file = src / "model.safetensors"
    if not weights_file.is_file():
        raise UnsupportedModel(f"{src}: no model.safetensors")
    w = read_safetensors(weights_file)
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    layers = int(config["num_hidden_layers"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    if hidden % heads:
        raise UnsupportedModel(f"hidden size {hidden} is not a multiple of {heads} heads")
    head = hidden // heads

    inits: list[Any] = []
    nodes: list[Any] = []
    counter = [0]

    def tensor(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def weight(key: str) -> np.ndarray:
        try:
            return w[key]
        except KeyError:
            raise UnsupportedModel(f"{src}: weight {key!r} is missing") from None

    def node(op: str, inputs: list[str], **attrs: Any) -> str:
        counter[0] += 1
        name = f"{op.lower()}_{counter[0]}"
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def linear(x: str, prefix: str) -> str:
        mat = tensor(prefix + ".weight_t", weight(prefix + ".weight").T)
        return node("Add", [node("MatMul", [x, mat]), tensor(prefix + ".bias", weight(prefix + ".bias"))])

    def layer_norm(x: str, prefix: str) -> str:
        return node("LayerNormalization", [x, tensor(prefix + ".weight", weight(prefix + ".weight")),
                                           tensor(prefix + ".bias", weight(prefix + ".bias"))],
                    axis=-1, epsilon=eps)

    one = tensor("one_f", np.array(1.0, dtype=np.float32))
    ints = {v: tensor(f"i64_{v}", np.array([v], dtype=np.int64)) for v in (0, 1)}

    # embeddings: word + position + token type, then a layer norm
    tokens = node("Shape", ["input_ids"], start=1, end=2)  # [tokens], 1-D
    positions = node("Slice", [tensor("pos", weight("embeddings.position_embeddings.weight")), ints[0], tokens,
                               ints[0]])
    x = node("Add", [node("Gather", [tensor("word", weight("embeddings.word_embeddings.weight")), "input_ids"]),
                     positions])
    x = node("Add", [x, node("Gather", [tensor("type", weight("embeddings.token_type_embeddings.weight")),
                                        "token_type_ids"])])
    x = layer_norm(x, "embeddings.LayerNorm")

    mask_f = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    ms = "com.microsoft"

    def fused_layer(x: str, p: str, mask_i32: str) -> str:
        a = p + ".attention.self."
        qkv = np.concatenate([weight(a + n + ".weight").T for n in ("query", "key", "value")], axis=1)
        qkv_b = np.concatenate([weight(a + n + ".bias") for n in ("query", "key", "value")])
        att = node("Attention", [x, tensor(a + "qkv_t", qkv), tensor(a + "qkv_bias", qkv_b), mask_i32],
                   domain=ms, num_heads=heads)
        x = skip_norm(att, x, p + ".attention.output.")
        m = p + ".intermediate.dense."
        h = node("BiasGelu", [node("MatMul", [x, tensor(m + "weight_t", weight(m + "weight").T)]),
                              tensor(m + "bias", weight(m + "bias"))], domain=ms)
        return skip_norm(h, x, p + ".output.")

    def skip_norm(h: str, x: str, o: str) -> str:  # LayerNorm(h @ W + b + x)
        return node("SkipLayerNormalization",
                    [node("MatMul", [h, tensor(o + "dense.weight_t", weight(o + "dense.weight").T)]), x,
                     tensor(o + "LayerNorm.weight", weight(o + "LayerNorm.weight")),
                     tensor(o + "LayerNorm.bias", weight(o + "LayerNorm.bias")),
                     tensor(o + "dense.bias", weight(o + "dense.bias"))], domain=ms, epsilon=eps)

    if fused:
        mask_i32 = node("Cast", ["attention_mask"], to=TensorProto.INT32)
        for i in range(layers):
            x = fused_layer(x, f"encoder.layer.{i}", mask_i32)
    else:
        # An additive mask [batch, 1, 1, tokens], 0 where attended and float32's minimum where padded,
        # and exact GELU x * 0.5 * (1 + erf(x / sqrt 2)): the node order ONNX Runtime's optimizer fuses.
        mask4 = node("Unsqueeze", [node("Unsqueeze", ["attention_mask", ints[1]]),
                                    tensor("i64_2", np.array([2], dtype=np.int64))])
        neg = tensor("mask_min", np.array(np.finfo(np.float32).min, dtype=np.float32))
        bias = node("Mul", [node("Sub", [one, node("Cast", [mask4], to=TensorProto.FLOAT)]), neg])
        split_shape = tensor("split_shape", np.array([0, 0, heads, head], dtype=np.int64))
        merge_shape = tensor("merge_shape", np.array([0, 0, hidden], dtype=np.int64))
        scale = tensor("scale", np.array(math.sqrt(head), dtype=np.float32))
        half = tensor("half", np.array(0.5, dtype=np.float32))
        sqrt2 = tensor("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))

        def heads_of(x: str, name: str, perm: list[int]) -> str:
            return node("Transpose", [node("Reshape", [linear(x, name), split_shape])], perm=perm)

        for i in range(layers):
            p = f"encoder.layer.{i}"
            q = heads_of(x, p + ".attention.self.query", [0, 2, 1, 3])
            k = heads_of(x, p + ".attention.self.key", [0, 2, 3, 1])
            v = heads_of(x, p + ".attention.self.value", [0, 2, 1, 3])
            scores = node("Add", [node("Div", [node("MatMul", [q, k]), scale]), bias])
            ctx = node("MatMul", [node("Softmax", [scores], axis=-1), v])
            ctx = node("Reshape", [node("Transpose", [ctx], perm=[0, 2, 1, 3]), merge_shape])
            x = layer_norm(node("Add", [linear(ctx, p + ".attention.output.dense"), x]),
                           p + ".attention.output.LayerNorm")
            h = linear(x, p + ".intermediate.dense")
            h = node("Mul", [node("Mul", [h, node("Add", [node("Erf", [node("Div", [h, sqrt2])]), one])]), half])
            x = layer_norm(node("Add", [linear(h, p + ".output.dense"), x]), p + ".output.LayerNorm")

    if pooling == "cls":
        pooled = node("Squeeze", [node("Slice", [x, ints[0], ints[1], ints[1]]), ints[1]])
    else:
        m = node("Unsqueeze", [mask_f, tensor("axes_2", np.array([2], dtype=np.int64))])
        total = node("ReduceSum", [node("Mul", [x, m]), ints[1]], keepdims=0)
        count = node("Max", [node("ReduceSum", [m, ints[1]], keepdims=0),
                             tensor("tiny", np.array(1e-9, dtype=np.float32))])
        pooled = node("Div", [total, count])
    nodes.append(helper.make_node("Identity", [pooled], ["sentence_embedding"], name="output"))

    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "tokens"])
           for n in ("input_ids", "attention_mask", "token_type_ids")]
    result = helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])
    graph = helper.make_graph(nodes, "sentence_encoder", ids, [result], initializer=inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)] if fused else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="nlql")
    model.ir_version = 8  # readable by every ONNX Runtime that runs opset 17
    dst = Path(out)
    save_model(model, str(dst))
    return dst
