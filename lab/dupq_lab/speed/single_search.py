"""One search at a time in process: the NumPy forward passes against torch's, alternating in one run.

``Collection.search([q], k=10)`` one query at a time on one thread (torch's, FAISS's and NumPy's
BLAS's), over the collection of every Quora question (HNSW, the bundled model; built as
``dupq-lab service-load`` builds it when missing). Windows of ``--seconds`` alternate between the model's NumPy kernels
(:mod:`dupq.modeling.kernels`, the default) and torch for every pass (the encoder's and the judge's ``kernels`` None),
``--rounds`` times each, so both meet the same machine; each variant reports the median of its
windows' p50 and searches/s. ``same_hits`` is the share of ``--check`` queries whose ten hits (ids,
in order) and verdicts agree between the two. ``encode_ms``: ``Model.encode`` of batches of 1 to 16
questions under each variant (the median of ``--repeats`` calls), where
:data:`~dupq.modeling.kernels.FEW_QUESTIONS` comes from.

Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
from types import SimpleNamespace
from typing import Annotated

import numpy as np
import typer

from dupq.collection.collection import Collection
from dupq.data.questions import read_questions
from dupq.modeling.kernels import Kernels
from dupq_lab.options import DATA, WORK, CollectionFolder, Data, Index, ModelFolder, Rounds, Seconds, Seed, Work, timed
from dupq_lab.service.service_load import built, one_thread, timed_searches


def encode_ms(model, queries: list[str], size: int, repeats: int) -> float:
    """The median milliseconds of ``model.encode`` on ``size`` questions at a time."""
    batches = [queries[i * size % len(queries) :][:size] for i in range(repeats)]
    return round(statistics.median(timed(model.encode, batches)[1]) * 1000, 3)


def hits(coll: Collection, query: str) -> list[tuple[int, bool]]:
    return [(h.id, h.duplicate) for h in coll.search([query], k=10)[0]]


def main(
    collection: CollectionFolder = None,
    model: ModelFolder = None,
    data: Data = DATA,
    index: Index = "hnsw",
    work: Work = WORK,
    seconds: Seconds = 5.0,
    rounds: Rounds = 3,
    check: Annotated[int, typer.Option(help="Queries whose hits are compared between the variants.")] = 1000,
    repeats: Annotated[int, typer.Option(min=1, help="Encode calls per batch size.")] = 300,
    seed: Seed = 0,
) -> None:
    args = SimpleNamespace(**locals(), code=None)  # built() runs `dupq index build` with this code

    one_thread()
    queries = random.Random(args.seed).sample(read_questions(args.data).texts, 20_000)
    variants = {"kernels": (Kernels(), Kernels()), "torch": (None, None)}
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    with Collection.open(built(args)) as coll:
        for q in queries[:200]:  # warm-up: the index's pages, both paths
            coll.search([q], k=10)
        timed, check = queries[200 : len(queries) - args.check], queries[len(queries) - args.check :]
        found = {}
        for name, kernels in variants.items():
            coll.model.encoder.kernels, coll.model.judge.kernels = kernels
            found[name] = [hits(coll, q) for q in check]
        for _ in range(args.rounds):
            for name, kernels in variants.items():
                coll.model.encoder.kernels, coll.model.judge.kernels = kernels
                runs[name].append(timed_searches(coll, timed, args.seconds))
        questions = len(coll)
        batches = {}
        for name, kernels in variants.items():
            coll.model.encoder.kernels, coll.model.judge.kernels = kernels
            batches[name] = {size: encode_ms(coll.model, timed, size, args.repeats) for size in (1, 2, 4, 8, 16)}
    result = {
        "machine": {"cpus": os.cpu_count(), "arch": platform.machine()},
        "questions": questions,
        "seconds": args.seconds,
        "rounds": args.rounds,
    }
    for name, windows in runs.items():
        result[name] = {
            key: round(statistics.median(w[key] for w in windows), 3) for key in ("per_s", "p50_ms", "p99_ms")
        } | {"p50_ms_windows": [round(w["p50_ms"], 3) for w in windows]}
    result["speedup_p50"] = round(result["torch"]["p50_ms"] / result["kernels"]["p50_ms"], 2)
    result["same_hits"] = round(float(np.mean([a == b for a, b in zip(found["kernels"], found["torch"])])), 4)
    result["encode_ms"] = batches
    print(json.dumps(result))
