"""Training on several processes or machines: torchrun's environment, the process group, the shared batch.

DDP as nanoGPT does it: ``torchrun`` sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``; with ``WORLD_SIZE`` > 1 a run
joins a process group (gloo on CPU, NCCL on GPU). Every rank builds the same global batch, encodes a contiguous share of
it and gathers every rank's vectors *with their gradients* (``torch.distributed.nn.functional.all_gather``, as
sentence-transformers' ``gather_across_devices``), so the in-batch negatives span the whole global batch.

Why the gradients come out right: every rank computes the *same* full loss ``L`` on the gathered ``(N, d)`` vectors. The
gather's backward sums the ranks' gradients of each share, so rank ``r``'s share gets ``W * dL/dv_r``; DDP then averages
the parameter gradients over the ``W`` ranks, which leaves ``sum_r dL/dv_r dv_r/dtheta = dL/dtheta``: the gradient of
one process on the global batch. The head's gradient is ``dL/dtheta_head`` on every rank and is left as it is by the
average.
"""

from __future__ import annotations

import json
import os
import warnings
import zlib
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.distributed.nn.functional import all_gather

from dupq.core.errors import DupqError
from dupq.core.options import flag, is_option
from dupq.data.pairs import SplitConfig, Splits


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
            names = (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0))
            world = cls(*(int(os.environ.get(name, default)) for name, default in names))
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

    ``local`` holds this rank's :func:`share` (or one stand-in row where the share is empty, so that every rank's
    encoder takes part in the step); shares are padded to one size for the collective and cut back after it.
    """
    width = -(-n // world.size)
    padded = F.pad(local[:width], (0, 0, 0, width - min(len(local), width)))  # (width, d)
    # deprecated in torch 2.13 for a private module; still the public gather with gradients
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed.nn.functional.all_gather is deprecated", FutureWarning)
        parts = all_gather(padded)  # world x (width, d)
    sizes = [share(n, World(r, world.size)) for r in range(world.size)]
    return torch.cat([part[: s.stop - s.start] for part, s in zip(parts, sizes)])  # (n, d)


def agree(world: World, values: dict[str, int], why: str) -> None:
    """Refuse to go on when the ranks hold different ``values`` (each named: an option, the data, a start epoch).

    Every rank gathers every rank's values and raises the same :class:`DupqError`, naming the first
    value that differs, so no rank goes on to a collective the others never reach (a hang) or to
    one of another shape (a gloo error). Every rank must pass the same names in the same order.
    """
    if world.size == 1:
        return
    names = list(values)
    mine = torch.tensor([values[name] for name in names], dtype=torch.int64)
    everyone = [torch.empty_like(mine) for _ in range(world.size)]
    dist.all_gather(everyone, mine)
    for rank, theirs in enumerate(everyone):
        differ = torch.nonzero(theirs != everyone[0]).flatten().tolist()
        if differ:
            raise DupqError(f"rank {rank} has another {names[differ[0]]} than rank 0: {why}")


def start_fingerprints(configs: list[Any], split: dict[str, Any] | None, splits: Splits) -> dict[str, int]:
    """What every rank of a run must share, as numbers :func:`agree` compares: each option by its
    flag (``--seed``, ``--batch-size``, ...; not ``--threads``, a process's own), the split, the data.

    Ranks that differ in one would train diverging replicas (another seed or rate), fail in a
    collective (another batch size or width) or wait forever for the others (another epoch count).
    """
    values = {}
    for config in configs:
        for f in fields(config):
            if f.name != "threads":
                values[flag(f) if is_option(f) else f.name] = _crc(getattr(config, f.name))
    for f in fields(SplitConfig):
        values[flag(f)] = _crc(None if split is None else split.get(f.name))
    crc = 0
    for part in (splits.pool, splits.train, splits.val, splits.test, splits.dev):
        crc = zlib.crc32("\0".join([*part.ids, *part.q1, *part.q2]).encode("utf-8", "surrogatepass"), crc)
        crc = zlib.crc32(part.labels.tobytes() + part.rows.tobytes(), crc)
    values["--data file"] = crc
    return values


def _crc(value: Any) -> int:
    return zlib.crc32(json.dumps(value, sort_keys=True, default=str).encode())
