"""Where a training step's time goes, per recipe and batching variant; prints one JSON line.

For each variant ``CHUNKS[,bf16][,dense]`` (``TrainConfig.chunks``: length-sorted LSTM calls per batch;
``bf16``: forward under
``torch.autocast("cpu", torch.bfloat16)``, as `dupq train --bf16`; ``dense``: the plain update, ``zero_grad``,
``backward``, Adam's ``step`` on a dense gradient of the whole word table, instead of
:class:`dupq.training.loop.Update`, the loop's), the milliseconds per step spent making
the batch, encoding it (embedding + LSTM + pooling), in the objective, in backward and in Adam's
step, the pairs per second they add up to, and the tokens the LSTM ran over: ``real`` (the
questions' own) against ``padded`` (what the length-sorted chunks were padded to). It answers
"what would make the labelled recipe faster" with figures instead of guesses: if ``backward``
grows with the number of chunks while ``padded`` shrinks, each LSTM call has a fixed cost.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Annotated

import numpy as np
import torch
import typer

from dupq.data.pairs import read_pairs, split_pairs
from dupq.training.loop import Update
from dupq.training.step import encode_in_chunks
from dupq_lab.options import DATA, Data, Threads, report
from dupq_lab.speed.train_speed import RECIPES, training_parts

PHASES = ("batch", "encode", "objective", "backward", "optimizer")


class PlainUpdate:
    """The update before :class:`~dupq.training.loop.Update` (the ``dense`` variant): autograd's dense
    gradient of the whole word table, built afresh every step; the same two calls as ``Update``'s."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer

    def backward(self, loss: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()

    def step(self) -> None:
        self.optimizer.step()


def profile(splits, recipe: str, chunks: int, steps: int, bf16: bool = False, dense: bool = False) -> dict:
    """Mean milliseconds per phase over ``steps`` steps after 5 warm-up steps, and token counts."""
    train_kw, model_kw = RECIPES[recipe]
    config, _, model, source, objective, optimizer = training_parts(splits, {**train_kw, "chunks": chunks}, model_kw)
    rng = np.random.default_rng(0)
    model.train()
    update = PlainUpdate(optimizer) if dense else Update(optimizer, model.encoder.embedding)
    spent = dict.fromkeys(PHASES, 0.0)
    real = padded = pairs = 0
    for step, index in enumerate(source.epoch(rng)[: steps + 5]):
        marks = [time.perf_counter()]
        batch = source.batch(index, rng)
        marks.append(time.perf_counter())
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            v = encode_in_chunks(model.encoder, batch.ids, batch.lengths, config.chunks)
            marks.append(time.perf_counter())
            loss = objective(v.float(), batch, model.head)
            marks.append(time.perf_counter())
        update.backward(loss)
        marks.append(time.perf_counter())
        update.step()
        marks.append(time.perf_counter())
        if step < 5:
            continue
        for phase, start, end in zip(PHASES, marks, marks[1:]):
            spent[phase] += end - start
        order = torch.argsort(batch.lengths)
        real += int(batch.lengths.sum())
        padded += sum(int(batch.lengths[c].max()) * len(c) for c in torch.tensor_split(order, max(1, chunks)) if len(c))
        pairs += len(index)
    total = sum(spent.values())
    ms = {k: round(v / steps * 1000, 1) for k, v in spent.items()}
    tokens = {"real": real // steps, "padded": padded // steps}
    variant = {"chunks": chunks, "bf16": bf16, "dense": dense}
    return {**variant, "ms_per_step": ms, "pairs_per_s": round(pairs / total), "tokens_per_step": tokens}


def main(
    data: Data = DATA,
    recipe: Annotated[str, typer.Option(help="seed or labelled.")] = "labelled",
    steps: Annotated[int, typer.Option(min=1, help="Optimizer steps profiled per variant.")] = 40,
    threads: Threads = 1,
    variants: Annotated[str, typer.Option(help="Space-separated CHUNKS[,bf16][,dense].")] = "4 8 16 32 8,bf16 16,bf16",
) -> None:
    torch.set_num_threads(threads)

    pairs, _ = read_pairs(data)
    splits = split_pairs(pairs)
    rows = []
    for variant in variants.split():
        chunks, *rest = variant.split(",")
        if set(rest) - {"bf16", "dense"}:
            raise typer.BadParameter(f"a variant is CHUNKS[,bf16][,dense], not {variant!r}")
        rows.append(profile(splits, recipe, int(chunks), steps, "bf16" in rest, "dense" in rest))
    report(
        {
            "recipe": recipe,
            "variants": rows,
            "steps": steps,
            "torch": torch.__version__,
            "mkldnn": torch.backends.mkldnn.is_available(),
            "threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "machine": platform.processor() or platform.machine(),
        }
    )
