"""A sentence-transformers model run by ONNX Runtime, in float32 or int8, for ``dupq-lab int8`` to measure.

The way sentence-transformers' ``backend="onnx"`` and Hugging Face Optimum do it: the transformer (token ids
to hidden states) is exported to an ONNX graph once (torch's TorchScript exporter, dynamic batch and length),
optionally quantised with ``onnxruntime.quantization.quantize_dynamic`` (weights int8 per output channel, in 7
bits on a CPU without VNNI, activations quantised per batch as they come, the graph's MatMuls becoming
MatMulInteger), optionally fused first by ONNX Runtime's transformer optimiser, and run by an
``InferenceSession`` with every graph optimisation on. Pooling (mean over real tokens) and the unit length are
done here in NumPy, as the model's own pooling module does. Needs ``onnx`` and ``onnxruntime``.

>>> graph = quantized(export(transformer, Path("/tmp/x")))                     # doctest: +SKIP
>>> encode = onnx_encoder(transformer, session(graph, threads=2))              # doctest: +SKIP
>>> encode(["How do I learn Python?"]).shape                                   # doctest: +SKIP
(1, 384)
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

INPUTS = ("input_ids", "attention_mask", "token_type_ids")  # what a BERT-like model takes; MPNet takes the first two


class _Hidden(torch.nn.Module):
    """The Hugging Face model inside a sentence-transformers model, as positional inputs to hidden states."""

    def __init__(self, model: torch.nn.Module, names: list[str]):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, inputs))).last_hidden_state  # (B, T, H)


def export(transformer, folder: Path) -> Path:
    """``folder/model.onnx``: the float32 graph of ``transformer``'s Hugging Face model."""
    example = transformer.tokenizer(["How do I learn Python?", "Why?"], padding=True, return_tensors="pt")
    names = [k for k in INPUTS if k in example]
    path = folder / "model.onnx"
    axes = {k: {0: "batch", 1: "tokens"} for k in [*names, "hidden"]}
    with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python branches it records as constants
        torch.onnx.export(
            _Hidden(transformer[0].auto_model.eval(), names),
            tuple(example[k] for k in names),
            str(path),
            input_names=names,
            output_names=["hidden"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    return path


def dense_graph(weight: np.ndarray, bias: np.ndarray, path: Path) -> Path:
    """``path``: an ONNX graph of one linear layer, ``y = x @ weight.T + bias``, ``x`` of any number of rows."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    n_out, n_in = weight.shape
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"], name="dense/MatMul"),
        helper.make_node("Add", ["xw", "b"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", n_in])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", n_out])
    weights = [numpy_helper.from_array(np.ascontiguousarray(weight.T), "w"), numpy_helper.from_array(bias, "b")]
    graph = helper.make_graph(nodes, "dense", [x], [y], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def quantized(graph: Path, keep_float: Callable[[str], bool] = lambda node: False, *, full_range: bool = False) -> Path:
    """``graph`` with its weight MatMuls in int8 (weights per output channel, activations per batch), except the
    nodes ``keep_float`` names; only MatMuls and fused attention (an embedding table's Gather stays float32: a lookup).

    Weights use 7 bits (``reduce_range``) unless ``full_range``: on an x86 CPU without VNNI ONNX Runtime
    multiplies uint8 activations by int8 weights with an instruction that adds each pair of products into
    16 bits, and 255 x 127 x 2 overflows them (it saturates at 32,767); 7-bit weights keep every pair in range
    (OpenVINO's documented workaround). With full 8-bit weights all-mpnet-base-v2's vectors had nothing to do
    with float32's from its first block on (``dupq-lab int8 --variants "onnx int8 full range"``)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    exclude = [n.name for n in onnx.load(str(graph)).graph.node if n.op_type == "MatMul" and keep_float(n.name)]
    out = graph.with_name(f"{graph.stem}-int8{'-full' if full_range else ''}{len(exclude) or ''}.onnx")
    logging.disable(logging.WARNING)  # its advice to run its pre-processing first, once a graph
    try:
        quantize_dynamic(
            graph,
            out,
            per_channel=True,
            reduce_range=not full_range,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul", "Attention"],
            nodes_to_exclude=exclude,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},  # a fused graph's own operators: float32
        )
    finally:
        logging.disable(logging.NOTSET)
    return out


def fused(graph: Path, transformer) -> Path:
    """``graph`` through ONNX Runtime's transformer optimiser (as Optimum's ``ORTOptimizer`` does): a BERT-like
    block's attention fused into one ``Attention`` node (its int8 form is ``QAttention``), layer norms with their
    residual added and GELU with its bias fused, as far as it recognises the model's graph."""
    from onnxruntime.transformers.optimizer import optimize_model

    config = transformer[0].auto_model.config
    model = optimize_model(
        str(graph), model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size
    )
    out = graph.with_name(f"{graph.stem}-fused.onnx")
    model.save_model_to_file(str(out))
    return out


def session(graph: Path, threads: int, profile: str | None = None):
    """An ONNX Runtime session of ``graph`` on ``threads`` threads (one operator at a time), every graph
    optimisation on; ``profile``: a file prefix, to record each operator's time (``session.end_profiling()``)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if profile:
        options.enable_profiling, options.profile_file_prefix = True, profile
    return ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])


def onnx_encoder(transformer, session) -> Callable[[list[str]], np.ndarray]:
    """``encode(texts) -> (N, d)`` unit vectors from ``session`` (:func:`session`) of ``transformer``'s graph:
    batches of 128 sorted by length (as ``SentenceTransformer.encode``), mean pooling over real tokens."""
    names = [i.name for i in session.get_inputs()]
    tokenizer, length = transformer.tokenizer, transformer.max_seq_length

    def encode(texts: list[str], batch_size: int = 128) -> np.ndarray:
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.zeros((len(texts), transformer[0].auto_model.config.hidden_size), np.float32)
        for lo in range(0, len(texts), batch_size):
            rows = order[lo : lo + batch_size]
            batch = tokenizer(
                [texts[i] for i in rows], padding=True, truncation=True, max_length=length, return_tensors="np"
            )
            hidden = session.run(None, {k: batch[k].astype(np.int64) for k in names})[0]  # (B, T, H)
            mask = batch["attention_mask"][..., None].astype(np.float32)  # (B, T, 1)
            pooled = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)  # (B, H)
            out[rows] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return out

    return encode
