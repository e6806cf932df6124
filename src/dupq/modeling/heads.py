"""Pair heads: how two question vectors become a duplicate logit when judging a pair.

Search keeps the cosine; judging a pair may use more. ``cosine``: ``scale * (cos - bias)``, two
numbers. ``mlp``: a small network over InferSent's pair features ``[|u - v|, u * v, cos]``
(Conneau et al. 2017), symmetric in ``u`` and ``v``, added to the cosine logit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from dupq.core.formats import MAX_HIDDEN, MAX_OUT_DIM, integer

HEADS = ("cosine", "mlp")


@dataclass
class HeadConfig:
    """How a pair of question vectors becomes a duplicate logit (judging pairs; search keeps the cosine).

    The annotations are also ``config.json``'s format for its ``head`` entry (:mod:`dupq.modeling.formats`).
    """

    kind: Literal[HEADS] = (
        "cosine"  # "cosine": scale * (cos - bias), 2 numbers; "mlp": a network over [|u-v|, u*v, cos]
    )
    dim: integer(1, MAX_OUT_DIM) = 128  # width of the question vectors it reads
    hidden: integer(1, MAX_HIDDEN) = 256  # the mlp's hidden width: more can fit finer pair features, and overfit sooner

    def __post_init__(self) -> None:
        if self.kind not in HEADS:
            raise ValueError(f"head must be one of {', '.join(HEADS)}, not {self.kind!r}")


class PairHead(nn.Module):
    """``(u, v) -> logit`` for unit vectors ``(N, d)``; symmetric: ``head(u, v) == head(v, u)``."""

    def __init__(self, config: HeadConfig):
        super().__init__()
        self.config = config
        self.scale = nn.Parameter(torch.tensor(10.0))  # cosine head: init as a steep logistic...
        self.bias = nn.Parameter(torch.tensor(0.6))  # ...centred near the seed's threshold
        if config.kind == "mlp":
            self.mlp = nn.Sequential(
                nn.Linear(2 * config.dim + 1, config.hidden), nn.ReLU(), nn.Linear(config.hidden, 1)
            )

    def forward(self, u: Tensor, v: Tensor) -> Tensor:
        cos = (u * v).sum(-1)  # (N,)
        if self.config.kind == "cosine":
            return self.scale * (cos - self.bias)
        features = torch.cat([(u - v).abs(), u * v, cos[:, None]], dim=-1)  # (N, 2d + 1)
        return self.mlp(features).squeeze(-1) + self.scale * (cos - self.bias)  # (N,): the mlp refines the cosine logit
