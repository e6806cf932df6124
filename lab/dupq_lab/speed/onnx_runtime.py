"""A sentence-transformers model run by ONNX Runtime, in float32 or int8, for ``dupq-lab int8`` to measure.

The way sentence-transformers' ``backend="onnx"`` and Hugging Face Optimum do it: the transformer (token ids
to hidden states) is exported to an ONNX graph once (torch's TorchScript exporter, dynamic batch and length),
optionally quantised with ``onnxruntime.quantization.quantize_dynamic`` (weights int8 per output channel,
activations quantised per batch as they come, the graph's MatMuls becoming MatMulInteger), and run by an
``InferenceSession`` with every graph optimisation on. Pooling (mean over real tokens) and the unit length are
done here in NumPy, as the model's own pooling module does. Needs ``onnx`` and ``onnxruntime``.

>>> encode = onnx_encoder(transformer, Path("/tmp/x"), int8=True, threads=2)   # doctest: +SKIP
>>> encode(["How do I learn Python?"]).shape                                   # doctest: +SKIP
(1, 384)
"""

from __future__ import annotations

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
    with torch.inference_mode(False), torch.no_grad():
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


def quantized(graph: Path, keep_float: Callable[[str], bool] = lambda node: False) -> Path:
    """``graph`` with its MatMuls in int8 (per-channel weights), except the nodes ``keep_float`` names."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    exclude = [n.name for n in onnx.load(str(graph)).graph.node if n.op_type == "MatMul" and keep_float(n.name)]
    out = graph.with_name(f"{graph.stem}-int8{len(exclude) or ''}.onnx")
    quantize_dynamic(graph, out, per_channel=True, weight_type=QuantType.QInt8, nodes_to_exclude=exclude)
    return out


def onnx_encoder(transformer, graph: Path, threads: int) -> Callable[[list[str]], np.ndarray]:
    """``encode(texts) -> (N, d)`` unit vectors from the ONNX ``graph`` of ``transformer``: batches of 128 sorted
    by length (as ``SentenceTransformer.encode``), mean pooling over real tokens."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
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
