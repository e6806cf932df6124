"""Training speed of each recipe and encoding speed, on the real Quora data; prints one JSON line.

train_pairs_per_s: {recipe: pairs/s}: optimizer steps on random batches of 256 pairs (forward of
every question of the batch, the recipe's objective, backward, fused Adam), after 10 warm-up
steps, from one full process; the median of ``--repeats`` windows of ``--steps`` steps, each
window's rate in ``train_pairs_per_s_windows``:

* ``seed``: the seed recipe (duplicates only, triplet loss), `dupq train` with no options;
* ``labelled``: the labelled recipe (every labelled pool pair; ``dupq train --preset labelled``);
* ``labelled_bf16``: the same encoding under bfloat16 autocast (``dupq train --bf16``).

keras_seed_pairs_per_s (with ``--keras``; the ``keras`` extra): the seeds' Keras model trained on the
seed recipe's own pairs (dupq-lab keras-seed, in a child process with as many threads, timed the
same way) right after the seed recipe, and ``seed_vs_keras``, the ratio of the two rates.

encode_questions_per_s: Model.encode on distinct questions, tokenising included, with the
labelled recipe's encoder (the bundled model's shape; ``--dim`` changes it for every recipe, as
``dupq train --dim`` does).
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
import typer

from dupq.data.pairs import SplitConfig, read_pairs, split_pairs
from dupq.modeling.judge import Judge
from dupq.modeling.lstm import LSTMEncoder
from dupq.modeling.model import Model
from dupq.training.config import ModelOptions, TrainConfig
from dupq.training.distributed import World
from dupq.training.loop import Update
from dupq.training.presets import KEYS, read_preset
from dupq.training.setup import batch_sources, build_model, build_vocabulary
from dupq_lab.options import DATA, Data, child, clocked, last_json, report


def _preset(name: str, **changes) -> tuple[dict, dict]:
    """A packaged preset (with ``changes``) as (TrainConfig, ModelOptions) keyword arguments."""
    values = {**read_preset(name), **changes}
    return tuple({k: v for k, v in values.items() if KEYS[k] is config} for config in (TrainConfig, ModelOptions))


# The recipes measured, from the package's presets: "seed" is `dupq train`'s, "labelled" the bundled model's
# without its teacher.
RECIPES = {"seed": _preset("seed"), "labelled_bf16": _preset("labelled", bf16=True), "labelled": _preset("labelled")}


def training_parts(splits, train_kw: dict, model_kw: dict):
    """What a training run builds before its first step: ``(config, vocab, model, batch source, objective, optimizer)``."""
    split = SplitConfig().__dict__
    config, options = TrainConfig(**train_kw), ModelOptions(**model_kw)
    vocab = build_vocabulary(splits, config, options, split)
    model = build_model(vocab, config, options)
    source, _, _ = batch_sources(splits, config, vocab, split)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, fused=True)
    return config, vocab, model, source, config.objective(), optimizer


def pairs_per_second(splits, train_kw: dict, model_kw: dict, steps: int, dim: int, repeats: int):
    """Pairs per second over ``steps`` optimizer steps after 10 warm-up steps, the median of ``repeats``
    such windows (one after another, on the next batches: a shared 2-core VM varies by ~10 % run to
    run); returns (median rate, every window's rate, built model, vocab)."""
    config, vocab, model, source, objective, optimizer = training_parts(splits, train_kw, {**model_kw, "dim": dim})
    rng = np.random.default_rng(0)
    model.train()
    update = Update(optimizer, model.encoder.embedding)
    batches = []
    while len(batches) < 10 + steps * repeats:  # the seed recipe's epoch is ~340 batches: take the next epoch's
        batches += list(source.epoch(rng))
    batches = batches[: 10 + steps * repeats]
    rates, done, started = [], 0, None
    for step, index in enumerate(batches):
        if step >= 10 and (step - 10) % steps == 0:
            if started is not None:
                rates.append(done / (time.perf_counter() - started))
            done, started = 0, time.perf_counter()
        update(model(source.batch(index, rng), objective, config.chunks, World(), config.bf16)[0])
        done += len(index)
    rates.append(done / (time.perf_counter() - started))
    return float(np.median(rates)), rates, model, vocab


def keras_rate(train, steps: int, repeats: int) -> dict:
    """dupq-lab keras-seed on ``train``'s pairs (the seed recipe's duplicates), in a child process: its JSON line."""
    with tempfile.TemporaryDirectory() as tmp:
        pairs = Path(tmp) / "pairs.tsv"
        # whitespace runs become one space: a tab or newline inside a question would split its line
        lines = (f"{' '.join(a.split())}\t{' '.join(b.split())}\n" for a, b in zip(train.q1, train.q2))
        pairs.write_text("".join(lines), encoding="utf-8")
        command = [sys.executable, "-m", "dupq_lab", "keras-seed", pairs, "--steps", steps, "--repeats", repeats]
        return last_json(child([*command, "--threads", torch.get_num_threads()], "dupq-lab keras-seed", tail=800))


def main(
    data: Data = DATA,
    steps: Annotated[int, typer.Option(min=1, help="Optimizer steps per timed window.")] = 200,
    repeats: Annotated[int, typer.Option(min=1, help="Timed windows per recipe; the median is reported.")] = 3,
    dim: Annotated[int, typer.Option(min=1, help="The LSTM's width.")] = 128,
    encode: Annotated[int, typer.Option(min=1, help="Distinct questions encoded for the encoding rate.")] = 200_000,
    keras: Annotated[bool, typer.Option(help="Also time the seeds' Keras model (the keras extra).")] = False,
) -> None:

    pairs, _ = read_pairs(data)
    splits = split_pairs(pairs)
    rates, windows, seeds = {}, {}, {}
    for name, (train_kw, model_kw) in RECIPES.items():
        rates[name], windows[name], built, vocab = pairs_per_second(splits, train_kw, model_kw, steps, dim, repeats)
        if name == "seed" and keras:  # next to the seed recipe's windows, so a change in load hits both
            seeds = keras_rate(splits.train, steps, repeats)
            seeds["seed_vs_keras"] = round(rates["seed"] / seeds["keras_seed_pairs_per_s"], 2)

    model = Model(LSTMEncoder(vocab, built.encoder), Judge(built.head))  # the last recipe's: the bundled model's shape
    questions = list(dict.fromkeys(pairs.q1 + pairs.q2))[:encode]
    tokenize_rate = len(questions) / clocked(vocab.encode, questions)[1]
    model.encode(questions[:5000])  # warm-up
    encode_rate = len(questions) / clocked(model.encode, questions)[1]

    report(
        {
            "train_pairs_per_s": {k: round(v) for k, v in rates.items()},
            "train_pairs_per_s_windows": {k: [round(r) for r in v] for k, v in windows.items()},
            **seeds,
            "encode_questions_per_s": round(encode_rate),
            "tokenize_questions_per_s": round(tokenize_rate),
            "vocab_size": len(vocab),
            "dim": dim,
            "batch_size": TrainConfig().batch_size,
            "train_steps": steps,
            "repeats": repeats,
            "encoded_questions": len(questions),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "machine": platform.processor() or platform.machine(),
        }
    )
