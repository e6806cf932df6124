"""The one training loop: ``dupq train`` and ``dupq adapt`` are configurations of it.

Per epoch: draw the batches from ``(seed, epoch)``, then per step set the learning rate from the
schedule, compute the batch's loss, update; after the epoch, ``after_epoch`` validates, checkpoints
and logs, and may stop the run. What a batch is and how its loss is computed are the caller's
(``loss_of``): a batch of pairs through the Siamese LSTM, or a batch of a help desk's questions.
Everything random is derived from ``(seed, epoch)``, so an epoch run after a resume draws the same batches and dropout masks as in a run never interrupted.

>>> fit(Loop(epochs=5, lr=0.01, seed=0), model, source, loss_of, Update(optimizer), after_epoch)   # doctest: +SKIP
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from torch import nn


def constant(step: int, total: int) -> float:
    return 1.0


def cosine(step: int, total: int) -> float:
    """Cosine decay from the full learning rate to 0 over the run."""
    return 0.5 * (1 + math.cos(math.pi * step / max(1, total)))


SCHEDULES = {"constant": constant, "cosine": cosine}  # TrainConfig.lr_schedule -> share of lr at a step


@dataclass
class Loop:
    """How the loop runs: its passes, its learning rate and schedule, its randomness."""

    epochs: int  # passes over the batch source
    lr: float  # the optimiser's learning rate at the schedule's full share
    seed: int  # batches from (seed, epoch); dropout masks from (seed, epoch, rank)
    schedule: Callable[[int, int], float] = constant  # (step, steps of the run) -> share of lr
    first_epoch: int = 0  # a resumed run starts after its checkpoint's epoch
    rank: int = 0  # this process among several (dupq.training.distributed): its own dropout masks
    progress: bool = True  # a progress bar (on a terminal only)


@dataclass
class Epoch:
    """What one epoch did: its loss summed over its rows, the rows, the seconds."""

    loss_sum: float
    rows: int
    seconds: float

    @property
    def loss(self) -> float:
        return self.loss_sum / max(1, self.rows)


class Update:
    """One optimiser update from a batch's loss: clear the gradients, backward, the optimiser's step.

    Given the model's word ``embedding``, its gradient stays sparse: the table is most of the parameters but a batch
    touches a few thousand rows, so the lookup gives those rows only (``nn.Embedding(sparse=True)``), they are added
    into one buffer of the table's shape kept across steps, the optimiser reads it as the table's gradient (Adam moves
    every row, as with the dense gradient), and only the rows added are zeroed again: the dense gradient's sums without
    a fresh table-sized tensor per step (dupq-lab train-step measures the time saved). A gradient that arrives dense is
    used as it is; among several processes DDP sums the sparse rows of every rank before the buffer sees them.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, embedding: nn.Embedding | None = None):
        self.optimizer = optimizer
        self.table = self.buffer = None
        if embedding is not None:
            embedding.sparse = True
            self.table = embedding.weight
            self.buffer = torch.zeros_like(self.table)

    def __call__(self, loss: torch.Tensor) -> None:
        self.backward(loss)
        self.step()

    def backward(self, loss: torch.Tensor) -> None:
        """Clear the gradients, then ``loss.backward()``: the table's gradient holds the batch's rows."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()

    def step(self) -> None:
        """The optimiser's step, the table's rows added into the buffer for it and zeroed after it."""
        grad = None if self.table is None else self.table.grad
        rows = None
        if grad is not None and grad.is_sparse:
            rows = grad._indices()[0]
            self.buffer.index_add_(0, rows, grad._values())
            self.table.grad = self.buffer
        self.optimizer.step()
        if rows is not None:
            self.buffer.index_fill_(0, rows, 0.0)
            self.table.grad = None


def fit(
    loop: Loop,
    model: nn.Module,
    source: Any,
    loss_of: Callable[[Any], tuple[torch.Tensor, torch.Tensor]],
    update: Update,
    after_epoch: Callable[[int, Epoch], bool | None] = lambda epoch, done: None,
) -> None:
    """Train ``model``. ``source.epoch(rng)`` gives an epoch's batches (row indices, each row once) and
    ``source.batch(index, rng)`` one batch, which ``loss_of`` turns into ``(the loss optimised, the loss per row
    logged)``; ``after_epoch(epoch, what it did)`` validates, checkpoints and logs, and returns True to stop the run."""
    steps = len(source.epoch(np.random.default_rng(0)))  # per epoch: the same count whatever the draw
    for epoch in range(loop.first_epoch, loop.epochs):
        rng = np.random.default_rng([loop.seed, epoch])  # the same batches on every rank
        torch.manual_seed(loop.seed * 100_003 + epoch + 1_000_003 * loop.rank)  # dropout masks, resume or not
        batches = source.epoch(rng)
        model.train()
        done, started = Epoch(0.0, 0, 0.0), time.perf_counter()
        with Progress(
            TextColumn(f"epoch {epoch + 1}/{loop.epochs}"),
            BarColumn(),
            TextColumn(
                "{task.completed}/{task.total} batches | loss {task.fields[loss]:.4f} | {task.fields[speed]:,.0f}/s"
            ),
            TimeRemainingColumn(),
            disable=not (loop.progress and sys.stdout.isatty()),  # no bar (nor its blank line) in logs
            transient=True,
        ) as bar:
            task = bar.add_task("train", total=len(batches), loss=float("nan"), speed=0.0)
            for step, index in enumerate(batches):
                share = loop.schedule(epoch * steps + step, steps * loop.epochs)
                for group in update.optimizer.param_groups:
                    group["lr"] = loop.lr * share
                loss, per_row = loss_of(source.batch(index, rng))
                update(loss)
                done.loss_sum += per_row.item() * len(index)
                done.rows += len(index)
                done.seconds = time.perf_counter() - started
                bar.update(task, advance=1, loss=done.loss, speed=done.rows / done.seconds)
        if after_epoch(epoch, done):
            break
