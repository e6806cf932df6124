"""How fast model folders encode questions, side by side on the same questions; prints one JSON line.

    dupq-lab encode-speed [MODEL ...] [--bundled] [--questions 200000] [--rounds 3] [--threads 0]

For each MODEL (a model folder) and the bundled model (``--bundled``, or no MODEL), ``Model.encode`` on the first
``--questions`` distinct questions of the Quora file, tokenising included, and its vocabulary's
``encode`` alone. The models take turns, round after round, so that a change in the machine's
load reaches every model alike; each figure is the median of the rounds. It is the rate that
`dupq-lab train-speed`'s ``encode_questions_per_s`` measures for a freshly built encoder, here
for saved models.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Annotated, Optional

import torch
import typer

from dupq.data.pairs import read_pairs
from dupq.modeling.model import Model
from dupq_lab.options import DATA, Data, Rounds


def per_second(encode, questions: list[str]) -> float:
    """Questions per second of one ``encode(questions)`` call."""
    start = time.perf_counter()
    encode(questions)
    return len(questions) / (time.perf_counter() - start)


def main(
    models: Annotated[Optional[list[Path]], typer.Argument(help="Model folders.")] = None,
    bundled: Annotated[bool, typer.Option(help="Also the bundled model (the default without MODEL).")] = False,
    data: Data = DATA,
    questions: Annotated[int, typer.Option(min=1, help="Distinct questions encoded.")] = 200_000,
    rounds: Rounds = 3,
    threads: Annotated[int, typer.Option(min=0, help="torch's CPU threads (0: its default, one per core).")] = 0,
) -> None:
    if threads:
        torch.set_num_threads(threads)
    pairs, models = read_pairs(data)[0], models or []
    texts = list(dict.fromkeys(pairs.q1 + pairs.q2))[:questions]
    names = ([None] if bundled or not models else []) + models
    models = {str(name or "bundled"): Model.load(name) for name in names}
    for model in models.values():
        model.encode(texts[:5000])  # warm-up
    encode = {name: [] for name in models}
    tokenize = {name: [] for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            tokenize[name].append(per_second(model.encoder.lstm().vocab.encode, texts))
            encode[name].append(per_second(model.encode, texts))
    print(
        json.dumps(
            {
                "encode_questions_per_s": {k: round(statistics.median(v)) for k, v in encode.items()},
                "tokenize_questions_per_s": {k: round(statistics.median(v)) for k, v in tokenize.items()},
                "tokens_per_question": {
                    k: round(float(m.encoder.lstm().vocab.encode(texts).lengths.mean()), 2) for k, m in models.items()
                },
                "encode_rounds": {k: [round(r) for r in v] for k, v in encode.items()},
                "questions": len(texts),
                "rounds": rounds,
                "threads": torch.get_num_threads(),
                "torch": torch.__version__,
                "cpus": os.cpu_count(),
                "machine": platform.processor() or platform.machine(),
            }
        )
    )


if __name__ == "__main__":
    typer.run(main)
