"""Where a training step's time goes, per recipe and batching variant; prints one JSON line.

    python bench/train_step.py [--recipe labelled] [--steps 40] [--threads 1] [--variants 4 8 16 32 8,bf16 16,bf16 8,dense]

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

import argparse
import json
import os
import platform
import time

import numpy as np
import torch

from dupq.data.pairs import default_data_path, read_pairs, split_pairs
from dupq.training.loop import Update
from dupq.training.step import encode_in_chunks
from train_speed import RECIPES, training_parts

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
    return {
        "chunks": chunks,
        "bf16": bf16,
        "dense": dense,
        "ms_per_step": {k: round(v / steps * 1000, 1) for k, v in spent.items()},
        "pairs_per_s": round(pairs / total),
        "tokens_per_step": {"real": real // steps, "padded": padded // steps},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(default_data_path()))
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="labelled")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["4", "8", "16", "32", "8,bf16", "16,bf16"],
        help="CHUNKS[,bf16][,dense]",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    pairs, _ = read_pairs(args.data)
    splits = split_pairs(pairs)
    rows = []
    for variant in args.variants:
        chunks, *rest = variant.split(",")
        unknown = set(rest) - {"bf16", "dense"}
        if unknown:
            parser.error(f"a variant is CHUNKS[,bf16][,dense], not {variant!r}")
        rows.append(profile(splits, args.recipe, int(chunks), args.steps, "bf16" in rest, "dense" in rest))
    print(
        json.dumps(
            {
                "recipe": args.recipe,
                "variants": rows,
                "steps": args.steps,
                "torch": torch.__version__,
                "mkldnn": torch.backends.mkldnn.is_available(),
                "threads": torch.get_num_threads(),
                "cpus": os.cpu_count(),
                "machine": platform.processor() or platform.machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
