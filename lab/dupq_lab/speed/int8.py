"""The named transformers in int8 against float32, every way side by side: speed and agreement; prints one JSON line.

For each named model (``dupq.modeling.pretrained.NAMES``) each variant of :data:`VARIANTS` encodes the same
questions, after a warm-up batch, the variants taking turns
(:func:`measured`): the help-desk yardstick's dev half (its 210 new questions, every old question
of the file) and the first ``--distractors`` distinct Quora dev questions in place of the yardstick's 19,862 (a
smaller collection: its Recall@1 is higher than the yardstick's, and the same collection for every variant);
``--no-recall``: the Quora questions alone (speed and agreement, no Recall@1).
The variants, the field's ways of running a transformer on a CPU:

- ``torch float32``: ``SentenceTransformer.encode`` as ``TransformerEncoder.encode`` calls it (the reference);
- ``torch int8``: dupq's :func:`~dupq.modeling.pretrained.quantize` (torch's dynamic quantisation, weights per
  output channel, each block's feed-forward output kept in float32), as ``config.json``'s ``encoder.int8`` asks;
- ``torch int8 all``: the same with every linear layer quantised;
- ``onnx float32``: ONNX Runtime on the exported graph, every graph optimisation on
  (:mod:`dupq_lab.speed.onnx_runtime`);
- ``onnx int8``: that graph's weight MatMuls through ``onnxruntime.quantization.quantize_dynamic`` (per-channel
  7-bit weights, :func:`~dupq_lab.speed.onnx_runtime.quantized`), as sentence-transformers'
  ``export_dynamic_quantized_onnx_model`` does but for the 7 bits;
- ``onnx int8 ffn float``: the same with each block's feed-forward output MatMul left in float32;
- ``onnx int8 full range``: 8-bit weights, which overflow the 16-bit sums of a CPU without VNNI (the fault);
- ``onnx float32 fused`` and ``onnx int8 fused``: the graph through ONNX Runtime's transformer optimiser first
  (attention, layer norm and GELU fused, :func:`~dupq_lab.speed.onnx_runtime.fused`).

Each reports questions per second and its ratio to ``torch float32``'s, the cosine between each Quora question's
vector and float32's (min, 1st percentile, mean), Recall@1 / MRR@10 of the help-desk dev half and the Recall@1
lost, and ``one_query_ms``: the median time to encode one new question alone (as a search does), over the
first 50. Needs the ``quality`` extra, and ``onnx`` and ``onnxruntime`` for the ONNX variants.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
import typer

from dupq.data.pairs import read_pairs
from dupq.evaluation.retrieval import retrieval_measures
from dupq.evaluation.tasks import help_desk_task, quora_distractors, read_help_desk_pairs
from dupq.modeling.pretrained import load_sentence_transformer
from dupq.modeling.sentence_model import ENCODE_BATCH
from dupq_lab.options import DATA, Data, Threads, report

WARMUP = 128
ONE_QUERY = 50  # new questions encoded one at a time for one_query_ms
VARIANTS = (  # --variants' default: every variant, the first the reference
    "torch float32,torch int8,torch int8 all,onnx float32,onnx int8,onnx int8 ffn float,onnx int8 full range,"
    "onnx float32 fused,onnx int8 fused"
)
Encode = Callable[[list[str]], np.ndarray]


def _ffn_output(node: str) -> bool:
    """Whether an exported MatMul is a block's feed-forward output (``.../output/dense/MatMul``, not attention's)."""
    return "/output/dense/" in node and "/attention/" not in node


def encoder(name: str, variant: str, threads: int, scratch: Path) -> Encode:
    """``encode(texts) -> (N, d)`` unit vectors of the named model run as ``variant``."""
    transformer, _ = load_sentence_transformer(name, int8=variant == "torch int8")
    if variant == "torch int8 all":
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        with warnings.catch_warnings():  # torch.ao.quantization is deprecated in favour of torchao
            warnings.simplefilter("ignore")
            quantize_dynamic(
                transformer, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True
            )
    if variant.startswith("onnx"):
        from dupq_lab.speed.onnx_runtime import export, fused, onnx_encoder, quantized, session

        folder = scratch / name
        graph = folder / "model.onnx"
        if not graph.exists():
            folder.mkdir(parents=True)
            export(transformer, folder)
        if "fused" in variant:
            graph = fused(graph, transformer)
        if "int8" in variant:
            keep = _ffn_output if "ffn float" in variant else lambda node: False
            graph = quantized(graph, keep, full_range="full range" in variant)
        return onnx_encoder(transformer, session(graph, threads))

    def encode(texts: list[str]) -> np.ndarray:
        return transformer.encode(
            texts, batch_size=ENCODE_BATCH, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )  # (N, d)

    return encode


def measured(
    encoders: dict[str, Encode], texts: list[str], task, recall: bool, chunk: int
) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """Every variant's vectors of ``texts`` and its figures. The load of a shared machine drifts, so the
    variants take turns: each encodes a chunk of ``chunk`` questions, then the next variant the same chunk;
    and each new question alone, variant after variant."""
    seconds = dict.fromkeys(encoders, 0.0)
    alone: dict[str, list[float]] = {v: [] for v in encoders}
    parts: dict[str, list[np.ndarray]] = {v: [] for v in encoders}
    for encode in encoders.values():
        encode(texts[:WARMUP])
    for lo in range(0, len(texts), chunk):
        for variant, encode in encoders.items():
            started = time.perf_counter()
            parts[variant].append(encode(texts[lo : lo + chunk]))  # (n, d)
            seconds[variant] += time.perf_counter() - started
    for query in task.queries[:ONE_QUERY]:
        for variant, encode in encoders.items():
            started = time.perf_counter()
            encode([query])
            alone[variant].append(time.perf_counter() - started)
    row = {t: i for i, t in enumerate(texts)}
    vectors, figures = {}, {}
    for variant in encoders:
        vectors[variant] = np.concatenate(parts[variant])  # (N, d)
        figures[variant] = {
            "questions_per_s": round(len(texts) / seconds[variant], 1),
            "seconds": round(seconds[variant], 1),
            "one_query_ms": round(1000 * statistics.median(alone[variant]), 1),
        }
        if recall:
            measures = retrieval_measures(lambda batch, v=vectors[variant]: v[[row[t] for t in batch]], task)
            figures[variant].update({"recall@1": measures["recall@1"], "mrr@10": measures["mrr@10"]})
    return vectors, figures


def main(
    models: Annotated[str, typer.Option(help="Named models, comma-separated.")] = "minilm,mpnet",
    variants: Annotated[str, typer.Option(help="Variants, comma-separated; the first is the reference.")] = VARIANTS,
    distractors: Annotated[int, typer.Option(min=1, help="Quora dev questions in the help-desk collection.")] = 2000,
    recall: Annotated[
        bool,
        typer.Option(help="Encode the help-desk dev half too and report its Recall@1 (else Quora questions only)."),
    ] = True,
    chunk: Annotated[int, typer.Option(min=1, help="Questions each variant encodes in its turn.")] = 256,
    threads: Threads = 2,
    data: Data = DATA,
) -> None:
    torch.set_num_threads(threads)
    quora = quora_distractors(read_pairs(data)[0], distractors)
    task = help_desk_task(read_help_desk_pairs(), "dev", quora)
    texts = list(dict.fromkeys([*task.corpus, *task.queries])) if recall else quora
    on_quora = np.array([i for i, t in enumerate(texts) if t in set(quora)])
    result = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in models.split(","):
            encoders = {v: encoder(name, v, threads, Path(scratch)) for v in variants.split(",")}
            vectors, figures = measured(encoders, texts, task, recall, chunk)
            first = variants.split(",")[0]  # the reference
            reference, base = vectors[first], figures[first]
            for variant, row in figures.items():
                cosines = (reference[on_quora] * vectors[variant][on_quora]).sum(1)  # (Q,)
                row["speedup"] = round(row["questions_per_s"] / base["questions_per_s"], 2)
                row["cosine_to_float32"] = {
                    "min": round(float(cosines.min()), 4),
                    "p1": round(float(np.percentile(cosines, 1)), 4),
                    "mean": round(float(cosines.mean()), 4),
                }
                if recall:
                    row["recall@1_lost"] = round(base["recall@1"] - row["recall@1"], 4)
                result[f"{name} / {variant}"] = row
            print(json.dumps({k: v for k, v in result.items() if k.startswith(f"{name} / ")}), flush=True)  # so far
    made_of = {"questions": len(texts), "quora_questions": len(on_quora)}
    report({"variants": result, **made_of, "help_desk_queries": len(task.queries) if recall else 0, **context(threads)})


def context(threads: int, **more) -> dict:
    """The threads, the load average at the end (a shared machine's: the ratios of one run are what count), ``more``,
    the versions of torch and ONNX Runtime (where installed) and the machine."""
    versions = {"torch": torch.__version__}
    if importlib.util.find_spec("onnxruntime"):
        import onnxruntime

        versions["onnxruntime"] = onnxruntime.__version__
    load = [round(x, 2) for x in os.getloadavg()]
    return {"threads": threads, "load_average_at_end": load, **more, **versions, "machine": platform.machine()}
