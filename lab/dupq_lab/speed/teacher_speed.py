"""The teacher under bfloat16 autocast against float32: speed and agreement; prints one JSON line.

Encodes the first ``--questions`` distinct questions of the training pool with ``dupq.training.distil.teacher``'s
``load_teacher`` twice, as `dupq distil teach` does (batch 128, unit vectors), once with
``bf16=False`` and once with ``bf16=True``, after a warm-up batch each; reports questions per
second of each, their ratio, and the cosine between each question's two vectors (min and mean:
how far the bfloat16 vectors stray; they are stored as float16 in the teacher cache). Needs the
``distil`` extra. Whether bfloat16 pays depends on the CPU's instructions (AVX512-BF16, AMX),
listed under ``cpu_flags``.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import torch
import typer

from dupq.data.pairs import read_pairs, split_pairs
from dupq.training.distil.teacher import load_teacher
from dupq_lab.options import DATA, Data, Threads, clocked, report

WARMUP = 128


def cpu_flags() -> list[str]:
    """The bfloat16-related instruction sets this CPU reports (Linux), e.g. ["amx_bf16", "avx512_bf16"]."""
    try:
        flags = next(
            line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")
        ).split()
    except (OSError, StopIteration):
        return []
    return sorted(f for f in set(flags) if "bf16" in f)


def timed(encode, texts: list[str]) -> tuple[np.ndarray, float]:
    encode(texts[:WARMUP])
    return clocked(encode, texts)


def main(
    teacher: Annotated[
        Optional[str],
        typer.Option(help="A sentence-transformers model folder (default: the packaged all-MiniLM-L6-v2)."),
    ] = None,
    questions: Annotated[int, typer.Option(min=1, help="Distinct training-pool questions to encode.")] = 3000,
    threads: Threads = 2,
    data: Data = DATA,
) -> None:

    torch.set_num_threads(threads)
    pool = split_pairs(read_pairs(data)[0]).pool
    texts = list(dict.fromkeys(q for pair in zip(pool.q1, pool.q2) for q in pair))[:questions]
    rates, vectors = {}, {}
    for precision, bf16 in (("float32", False), ("bfloat16", True)):
        encode, name = load_teacher(teacher, bf16=bf16)
        vectors[precision], seconds = timed(encode, texts)
        rates[precision] = round(len(texts) / seconds, 1)
    cosines = (vectors["float32"] * vectors["bfloat16"]).sum(1)
    report(
        {
            "teacher": name.removesuffix(" (bf16)"),
            "questions_per_s": rates,
            "bf16_speedup": round(rates["bfloat16"] / rates["float32"], 2),
            "cosine_bf16_vs_float32": {"min": round(float(cosines.min()), 6), "mean": round(float(cosines.mean()), 6)},
            "questions": len(texts),
            "threads": threads,
            "cpu_flags": cpu_flags(),
            "torch": torch.__version__,
            "machine": platform.machine(),
        }
    )
