"""Training on several processes or machines: torchrun's environment, the process group, the shared batch.

DDP as nanoGPT does it: ``torchrun`` starts one process per CPU share or GPU and sets
``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``; with ``WORLD_SIZE`` > 1 a run joins a process group
(gloo on CPU, NCCL on GPU). Every rank builds the same global batch (the same seeded batch
source), encodes a contiguous share of its questions, and gathers every rank's vectors *with
their gradients* (``torch.distributed.nn.functional.all_gather``, as sentence-transformers'
``gather_across_devices`` and pytorch-metric-learning's ``DistributedLossWrapper``), so the
in-batch negatives of a rank span the whole global batch.

Why the gradients come out right: every rank computes the *same* full loss ``L`` on the gathered
``(N, d)`` vectors. The gather's backward sums the ranks' gradients of each share, so rank ``r``'s
share gets ``W * dL/dv_r``; DDP then averages the parameter gradients over the ``W`` ranks, which
leaves ``sum_r dL/dv_r dv_r/dtheta = dL/dtheta``: the gradient of one process on the global batch.
The head's gradient is ``dL/dtheta_head`` on every rank and is left as it is by the average.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.distributed.nn.functional import all_gather

from dupq.core.files import DupqError


@dataclass(frozen=True)
class World:
    """Where this process stands among the run's processes (one process: rank 0 of 1)."""

    rank: int = 0  # this process, 0..size-1 (torchrun's RANK); rank 0 alone writes files and logs
    size: int = 1  # processes in the run (WORLD_SIZE); each encodes 1/size of a batch's questions
    local_rank: int = 0  # this process on its machine (LOCAL_RANK): the GPU it trains on

    @property
    def master(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls) -> World:
        """Read torchrun's variables; absent, a single process."""
        try:
            world = cls(
                *(
                    int(os.environ.get(name, default))
                    for name, default in (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0))
                )
            )
        except ValueError:
            raise DupqError("RANK, WORLD_SIZE and LOCAL_RANK must be whole numbers (torchrun sets them).") from None
        if not 0 <= world.rank < world.size:
            raise DupqError(f"RANK {world.rank} is not in 0..WORLD_SIZE-1 ({world.size - 1}).")
        return world


def join(world: World, device: str) -> bool:
    """Join the run's process group (gloo; NCCL for CUDA tensors); returns whether this call started it."""
    if world.size == 1 or dist.is_initialized():
        return False
    if device == "cuda":
        torch.cuda.set_device(world.local_rank)  # "cuda" is this rank's GPU from now on
    dist.init_process_group(
        "cpu:gloo,cuda:nccl" if device == "cuda" else "gloo", rank=world.rank, world_size=world.size
    )
    return True


def share(n: int, world: World) -> slice:
    """The contiguous rows of an ``n``-row batch that this rank encodes (sizes differ by at most one)."""
    return slice(world.rank * n // world.size, (world.rank + 1) * n // world.size)


def gather(local: Tensor, n: int, world: World) -> Tensor:
    """Every rank's vectors of an ``n``-row batch, in batch order, ``(n, d)``; gradients flow back to their rank.

    ``local`` holds this rank's :func:`share` (or one stand-in row where the share is empty, so
    that every rank's encoder takes part in the step); shares are padded to one size for the
    collective and cut back after it.
    """
    width = -(-n // world.size)
    padded = F.pad(local[:width], (0, 0, 0, width - min(len(local), width)))  # (width, d)
    with (
        warnings.catch_warnings()
    ):  # deprecated in torch 2.13 for a private module; still the public gather with gradients
        warnings.filterwarnings("ignore", "torch.distributed.nn.functional.all_gather is deprecated", FutureWarning)
        parts = all_gather(padded)  # world x (width, d)
    sizes = [share(n, World(r, world.size)) for r in range(world.size)]
    return torch.cat([part[: s.stop - s.start] for part, s in zip(parts, sizes)])  # (n, d)


def agree(world: World, values: list[int], what: str) -> None:
    """Refuse to go on when the ranks hold different ``values`` (a start epoch, a vocabulary's fingerprint)."""
    if world.size == 1:
        return
    mine = torch.tensor(values, dtype=torch.int64)
    everyone = [torch.empty_like(mine) for _ in range(world.size)]
    dist.all_gather(everyone, mine)
    for rank, theirs in enumerate(everyone):
        if not torch.equal(theirs, everyone[0]):
            raise DupqError(
                f"rank {rank} {what} than rank 0; every process must read the same data, "
                "and with --resume the same --out folder (a folder shared by the machines)."
            )
