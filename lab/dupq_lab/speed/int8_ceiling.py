"""The most int8 can speed a named transformer on this CPU: its weight products timed, its encoder profiled; prints one JSON line.

``kernel``: for each named model, one of its own weight matrices, the first block's feed-forward input (H x 4H:
384 x 1536 for MiniLM, 768 x 3072 for mpnet), multiplies ``--rows`` token rows (32 questions of 128 tokens
by default, a batch as the encoder sees it) every way, the ways taking turns (:func:`timed`):
``torch float32`` (``F.linear``), ``torch int8`` (torch's dynamic quantised linear, weights per output channel,
as :func:`dupq.modeling.pretrained.quantize`), ``onnx float32`` (one MatMul and its bias in ONNX Runtime) and
``onnx int8`` (that graph through :func:`~dupq_lab.speed.onnx_runtime.quantized`: the activations quantised per
batch and the int8 product, as the encoder's int8 graph runs it). Each reports milliseconds and GFLOP/s, and
``int8_speedup``: int8 over float32 in the same library.

``profile``: ONNX Runtime's profiler over the model's float32 graph encoding ``--questions`` Quora dev
questions (length-sorted batches of 128, as the encoder runs them): the share of its operator time spent in
products with a weight matrix (``weight_matmul_share``, p), the rest being attention's products of activations,
softmax, layer norms, GELU and reshapes; the same for the int8 graph, with the time its activations take to
be quantised. ``weight_matmul_speedup_in_encoder``: how much faster the int8 graph's weight products ran than
float32's inside the encoder (each graph's share of its own encoding time). Amdahl: when only the weight
products get faster, by s (the larger of the two factors measured, alone and in the encoder), the encoder
gets ``amdahl_ceiling`` = 1 / ((1 - p) + p / s) faster at most, and 1 / (1 - p) (``no_matmul_ceiling``) were
they free. ``encoder_questions_per_s``: torch float32, ONNX Runtime float32 and int8 encoding those questions, taking
turns, so that ``ceiling_over_torch_float32`` (the Amdahl ceiling times ONNX Runtime float32's gain over torch
float32) is the most int8 by ONNX Runtime can give against the product's float32 path here.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import torch
import typer

from dupq.data.pairs import read_pairs
from dupq.evaluation.tasks import quora_distractors
from dupq.modeling.pretrained import load_sentence_transformer, quantize
from dupq.modeling.sentence_model import ENCODE_BATCH
from dupq_lab.options import DATA, Data, Threads, report
from dupq_lab.speed.int8 import context

MATMULS = {"MatMul", "FusedMatMul", "Gemm", "MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"}
QUANTISING = {"DynamicQuantizeLinear"}


def timed(ways: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of each way's call; the ways take turns, ``repeats`` rounds after a warm-up round, so that
    a shared machine's load drifts across all of them alike."""
    for call in ways.values():
        call()
    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(repeats):
        for way, call in ways.items():
            started = time.perf_counter()
            call()
            times[way].append(time.perf_counter() - started)
    return {way: statistics.median(t) for way, t in times.items()}


def kernel(transformer, rows: int, repeats: int, threads: int, scratch: Path) -> dict:
    """The first block's feed-forward input product, float32 and int8, in torch and ONNX Runtime."""
    from dupq_lab.speed.onnx_runtime import dense_graph, quantized, session

    dense = transformer[0].auto_model.encoder.layer[0].intermediate.dense
    weight, bias = dense.weight.detach(), dense.bias.detach()  # (4H, H), (4H,)
    x = torch.randn(rows, weight.shape[1])  # (rows, H)
    int8_dense = torch.nn.Sequential(torch.nn.Linear(weight.shape[1], weight.shape[0]))
    int8_dense[0].load_state_dict(dense.state_dict())
    quantize(int8_dense)
    graph = dense_graph(weight.numpy(), bias.numpy(), scratch / "dense.onnx")
    float_session, int8_session = session(graph, threads), session(quantized(graph), threads)
    feed = {"x": x.numpy()}
    ways = {
        "torch float32": lambda: torch.nn.functional.linear(x, weight, bias),
        "torch int8": lambda: int8_dense(x),
        "onnx float32": lambda: float_session.run(None, feed),
        "onnx int8": lambda: int8_session.run(None, feed),
    }
    with torch.inference_mode():
        seconds = timed(ways, repeats)
    flops = 2 * rows * weight.shape[0] * weight.shape[1]
    return {
        "shape": f"{rows} x {weight.shape[1]} x {weight.shape[0]}",
        **{w: {"ms": round(1000 * s, 2), "gflops": round(flops / s / 1e9, 1)} for w, s in seconds.items()},
        "int8_speedup": {
            "torch": round(seconds["torch float32"] / seconds["torch int8"], 2),
            "onnx": round(seconds["onnx float32"] / seconds["onnx int8"], 2),
        },
    }


def operator_shares(profile: Path) -> dict[str, float]:
    """Shares of the operator time in ONNX Runtime's ``profile``: products with a weight matrix (the profile lists
    a node's inputs that are not stored in the graph: a weight product has one such of three or more dimensions,
    attention's products of activations two), activations being quantised, the rest."""
    spent: dict[str, float] = defaultdict(float)
    for event in json.loads(profile.read_text()):
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
            continue
        op, shapes = event["args"].get("op_name", ""), event["args"].get("input_type_shape", [])
        activations = sum(len(next(iter(s.values()))) >= 3 for s in shapes)
        if op in MATMULS and activations <= 1:
            spent["weight_matmul"] += event["dur"]
        elif op in QUANTISING:
            spent["quantising"] += event["dur"]
        elif op in MATMULS or op in {"Attention", "QAttention"}:
            spent["attention_matmul"] += event["dur"]
        else:
            spent["other"] += event["dur"]
    total = sum(spent.values())
    return {f"{k}_share": round(v / total, 3) for k, v in sorted(spent.items())}


def encoder_profile(transformer, texts: list[str], threads: int, repeats: int, scratch: Path) -> dict:
    """The encoder's time split (float32 and int8 graphs) and its questions/s (torch float32, ONNX Runtime float32
    and int8, taking turns)."""
    from dupq_lab.speed.onnx_runtime import export, onnx_encoder, quantized, session

    graph = export(transformer, scratch)
    graphs = {"onnx float32": graph, "onnx int8": quantized(graph)}
    shares = {}
    for way, path in graphs.items():
        profiled = session(path, threads, profile=str(scratch / way.replace(" ", "-")))
        onnx_encoder(transformer, profiled)(texts)
        shares[way] = operator_shares(Path(profiled.end_profiling()))
    encoders = {way: onnx_encoder(transformer, session(path, threads)) for way, path in graphs.items()}
    ways = {"torch float32": lambda: transformer.encode(texts, batch_size=ENCODE_BATCH, show_progress_bar=False)}
    ways |= {way: lambda e=encode: e(texts) for way, encode in encoders.items()}
    with torch.inference_mode():
        seconds = timed(ways, repeats)
    return {"profile": shares, "encoder_questions_per_s": {w: round(len(texts) / s, 1) for w, s in seconds.items()}}


def main(
    models: Annotated[str, typer.Option(help="Named models, comma-separated.")] = "minilm,mpnet",
    rows: Annotated[
        int, typer.Option(min=1, help="Token rows the weight product multiplies (questions x tokens).")
    ] = 4096,
    repeats: Annotated[int, typer.Option(min=1, help="Timed rounds of the weight product (median).")] = 15,
    questions: Annotated[
        int, typer.Option(min=1, help="Quora dev questions the encoder is profiled and timed on.")
    ] = 128,
    rounds: Annotated[int, typer.Option(min=1, help="Timed rounds of the whole encoder (median).")] = 3,
    threads: Threads = 2,
    data: Data = DATA,
) -> None:
    torch.set_num_threads(threads)
    texts = quora_distractors(read_pairs(data)[0], questions)
    result = {}
    for name in models.split(","):
        transformer, _ = load_sentence_transformer(name, int8=False)
        with tempfile.TemporaryDirectory() as scratch:
            weights = kernel(transformer, rows, repeats, threads, Path(scratch))
            encoder = encoder_profile(transformer, texts, threads, rounds, Path(scratch))
        shares, qps = encoder["profile"], encoder["encoder_questions_per_s"]
        p = shares["onnx float32"]["weight_matmul_share"]
        in_encoder = (p / qps["onnx float32"]) / (shares["onnx int8"]["weight_matmul_share"] / qps["onnx int8"])
        ceiling = 1 / ((1 - p) + p / max(weights["int8_speedup"]["onnx"], in_encoder))
        result[name] = {
            "kernel": weights,
            **encoder,
            "weight_matmul_speedup_in_encoder": round(in_encoder, 2),
            "amdahl_ceiling": round(ceiling, 2),
            "no_matmul_ceiling": round(1 / (1 - p), 2),
            "measured_int8_speedup": round(qps["onnx int8"] / qps["onnx float32"], 2),
            "onnx_float32_over_torch": round(qps["onnx float32"] / qps["torch float32"], 2),
            "ceiling_over_torch_float32": round(ceiling * qps["onnx float32"] / qps["torch float32"], 2),
        }
        print(json.dumps({name: result[name]}), flush=True)  # so far
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    vnni = "avx512_vnni" in flags or "avx_vnni" in flags
    report({"models": result, "questions": len(texts), **context(threads, avx2="avx2" in flags, avx512_vnni=vnni)})
