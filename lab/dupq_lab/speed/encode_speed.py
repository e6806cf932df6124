"""How fast model folders encode questions, side by side on the same questions; prints one JSON line.

    dupq-lab encode-speed [MODEL ...] [--bundled] [--questions 200000] [--rounds 3]

For each MODEL (a model folder) and the bundled model (``--bundled``, or no MODEL), ``Model.encode`` on the first
``--questions`` distinct questions of the Quora file, tokenising included, and its vocabulary's
``encode`` alone. The models take turns, round after round, so that a change in the machine's
load reaches every model alike; each figure is the median of the rounds. It is the rate that
`dupq-lab train-speed`'s ``encode_questions_per_s`` measures for a freshly built encoder, here
for saved models, so that two vocabularies (words and the teacher's WordPiece tokens) compare.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

from dupq.data.pairs import read_pairs
from dupq.modeling.model import Model
from dupq_lab.options import add_shared


def per_second(encode, questions: list[str]) -> float:
    """Questions per second of one ``encode(questions)`` call."""
    start = time.perf_counter()
    encode(questions)
    return len(questions) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model folders")
    parser.add_argument("--bundled", action="store_true", help="also the bundled model (the default without MODEL)")
    add_shared(parser, "data")
    parser.add_argument("--questions", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    pairs, _ = read_pairs(args.data)
    questions = list(dict.fromkeys(pairs.q1 + pairs.q2))[: args.questions]
    names = ([None] if args.bundled or not args.models else []) + args.models
    models = {name or "bundled": Model.load(name) for name in names}
    for model in models.values():
        model.encode(questions[:5000])  # warm-up
    encode = {name: [] for name in models}
    tokenize = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, model in models.items():
            tokenize[name].append(per_second(model.vocab.encode, questions))
            encode[name].append(per_second(model.encode, questions))
    print(
        json.dumps(
            {
                "encode_questions_per_s": {k: round(statistics.median(v)) for k, v in encode.items()},
                "tokenize_questions_per_s": {k: round(statistics.median(v)) for k, v in tokenize.items()},
                "tokens_per_question": {
                    k: round(float(m.vocab.encode(questions).lengths.mean()), 2) for k, m in models.items()
                },
                "encode_rounds": {k: [round(r) for r in v] for k, v in encode.items()},
                "questions": len(questions),
                "rounds": args.rounds,
                "threads": torch.get_num_threads(),
                "torch": torch.__version__,
                "cpus": os.cpu_count(),
                "machine": platform.processor() or platform.machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
