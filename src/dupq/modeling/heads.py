"""Pair heads: how two question vectors become a duplicate logit when judging a pair.

Search keeps the cosine; judging a pair may use more. ``cosine``: ``scale * (cos - bias)``, two
numbers. ``mlp``: a small network over InferSent's pair features ``[|u - v|, u * v, cos]``
(Conneau et al. 2017), symmetric in ``u`` and ``v``, added to the cosine logit.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from dupq.modeling.architecture import HEADS, HeadConfig  # noqa: F401 - re-exported beside the module


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
