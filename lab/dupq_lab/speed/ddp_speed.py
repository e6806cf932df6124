"""Training speed on 1 and 2 processes (gloo, one thread each) and the share of a step spent communicating.

One JSON line per (recipe, processes): ``pairs_per_s`` over ``--steps`` optimizer steps of 256
pairs after 5 warm-up steps (every rank encodes its half of each global batch, the vectors are
gathered with gradients, DDP averages the gradients: the step `dupq train` takes under torchrun),
and ``comm_share``: the time rank 0 spends in gloo collectives (the gather, its backward, DDP's
all-reduce, as torch.profiler records them) over the steps' wall time. DDP's all-reduce runs in
gloo's own thread, overlapping the backward, so the share is an upper bound on the time lost.
Recipes as dupq-lab train-speed (the seed's and the bundled model's); real Quora data.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
import torch.multiprocessing as mp
import typer

from dupq.data.pairs import SplitConfig, read_pairs, split_pairs
from dupq.training.distributed import World, join
from dupq.training.loop import Update
from dupq.training.step import distributed_loss
from dupq_lab.launch import free_port
from dupq_lab.options import DATA, Data
from dupq_lab.speed.train_speed import RECIPES, training_parts


def _steps(splits, recipe: str, steps: int, world: World) -> dict:
    config, _, model, source, objective, optimizer = training_parts(splits, *RECIPES[recipe])
    update = Update(optimizer, model.encoder.embedding)  # before DDP wraps the model
    loss_of = distributed_loss(model, config, world)
    rng = np.random.default_rng(0)
    batches = source.epoch(rng)[: steps + 5]
    model.train()

    def step(index):
        update(loss_of(source.batch(index, rng), objective, config.chunks, world)[0])

    for index in batches[:5]:
        step(index)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        for index in batches[5:]:
            step(index)
        seconds = time.perf_counter() - started
    comm = sum(e.cpu_time_total for e in prof.key_averages() if e.key.startswith("gloo:")) / 1e6  # s
    pairs = sum(len(b) for b in batches[5:])
    share = round(comm / seconds, 3) if world.size > 1 else 0.0
    return {
        "recipe": recipe,
        "processes": world.size,
        "pairs_per_s": round(pairs / seconds),
        "steps": steps,
        "comm_share": share,
    }


def _worker(rank: int, size: int, port: int, splits, recipe: str, steps: int, out: str) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    world = World.from_env()
    join(world, "cpu")
    result = _steps(splits, recipe, steps, world)
    if world.master:
        Path(out).write_text(json.dumps(result))
    torch.distributed.destroy_process_group()


def main(data: Data = DATA, steps: Annotated[int, typer.Option(min=1, help="Optimizer steps timed.")] = 40) -> None:
    pairs, _ = read_pairs(data)
    splits = split_pairs(pairs, SplitConfig())
    torch.set_num_threads(1)
    out = Path(f"/tmp/ddp_speed.{os.getpid()}.json")
    for recipe in RECIPES:
        print(json.dumps({**_steps(splits, recipe, steps, World()), "cpus": os.cpu_count()}), flush=True)
        mp.spawn(_worker, args=(2, free_port(), splits, recipe, steps, str(out)), nprocs=2, join=True)
        print(json.dumps({**json.loads(out.read_text()), "cpus": os.cpu_count()}), flush=True)
        out.unlink()
