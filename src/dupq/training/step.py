"""One step's loss, for training and validation alike: encode the batch, apply the objective, reduce."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dupq.core.errors import DupqError
from dupq.evaluation.metrics import best_threshold, threshold_free
from dupq.modeling.encoders import Encoder
from dupq.modeling.heads import PairHead
from dupq.training.batches import Batch, PairBatches
from dupq.training.config import TrainConfig
from dupq.training.distributed import World, gather, share
from dupq.training.objectives import Objective


def encode_in_chunks(encoder: Encoder, ids: torch.Tensor, lengths: torch.Tensor, chunks: int) -> torch.Tensor:
    """``encoder(ids, lengths)`` computed as ``chunks`` recurrent calls on length-sorted slices of the batch.

    A random batch is padded to its longest question (mean 11, max 237 tokens), so one call spends most of its steps on
    padding; slices run at their own width give the same vectors (to ~1e-6) in less time (dupq-lab train-step). Word ids
    are looked up and vectors normalised in one call each, so the embedding table gets one gradient per batch.
    """
    if chunks <= 1:
        return encoder(ids, lengths)
    order = torch.argsort(lengths)
    ids, lengths = ids[order], lengths[order]  # shortest first
    n = len(order)
    sizes = [size for k in range(chunks) if (size := n // chunks + (k < n % chunks))]  # torch.tensor_split's
    ends = np.cumsum(sizes)
    widths = lengths[torch.from_numpy(ends - 1)].tolist()  # each slice's longest question: its last
    starts = ends - sizes
    words = torch.cat([ids[a:b, :w].reshape(-1) for a, b, w in zip(starts, ends, widths)])  # every slice, flat
    x = encoder.dropout(encoder.embedding(words))  # (T, d)
    parts = [
        encoder.pooled(piece.view(b - a, w, -1), lengths[a:b])
        for piece, a, b, w in zip(x.split([size * w for size, w in zip(sizes, widths)]), starts, ends, widths)
    ]
    unsort = torch.empty_like(order)
    unsort[order] = torch.arange(n)
    return F.normalize(torch.cat(parts), dim=-1)[unsort]  # (N, d), back in the batch's order


def encode_batch(model: Siamese, batch: Batch, chunks: int, world: World = World(), bf16: bool = False) -> torch.Tensor:
    """Every question of ``batch`` encoded in one (chunked) LSTM pass: ``(N, d)`` float32.

    Among several processes (``world``), this one encodes its share of the questions and gets every rank's vectors back
    (:func:`dupq.training.distributed.gather`), so the objective sees the whole batch: the same loss as one process.
    With ``bf16`` the encoder runs under bfloat16 autocast (the weights stay float32) and the vectors come back as
    float32, so the similarities and losses keep float32's precision.
    """
    rows = slice(None)
    if world.size > 1:
        rows = share(len(batch.ids), world)
        rows = rows if rows.stop > rows.start else slice(0, 1)  # an empty share: a stand-in row, dropped by gather
    try:
        with torch.autocast(batch.ids.device.type, dtype=torch.bfloat16, enabled=bf16):
            v = encode_in_chunks(model.encoder, batch.ids[rows], batch.lengths[rows], chunks)  # (n, d)
    except RuntimeError as e:
        if bf16 and "primitive descriptor" in str(e):  # oneDNN on a CPU without a bfloat16 LSTM
            raise DupqError(
                "this CPU cannot run the LSTM in bfloat16 (no oneDNN primitive for it); train without --bf16."
            ) from None
        raise
    v = v.float()
    if world.size > 1:
        v = gather(v, len(batch.ids), world)  # (N, d)
    return v


def loss_of_vectors(
    model: Siamese, v: torch.Tensor, batch: Batch, objective: Objective
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch's ``(loss, loss per pair)`` from its questions' vectors ``v`` (``(N, d)``).

    The one place a batch's loss is computed: training optimises the first and logs the second, validation logs the
    second, so both report the same figure for the same batch (:meth:`~dupq.training.objectives.Objective.per_pair`).
    """
    terms = objective.terms(v, batch, model.head, model.projection)
    return objective.total(terms, v), objective.per_pair(terms, batch.size)


@dataclass
class Validation:
    """What one epoch scored on the held-out pairs; ``better`` compares two epochs."""

    loss: float
    accuracy: float | None = None  # at the best threshold on the validation pairs (labelled only)
    roc_auc: float | None = None

    def key(self) -> float:
        """What the kept epoch maximises: the validation accuracy, or without labelled pairs minus the loss."""
        return self.accuracy if self.accuracy is not None else -self.loss

    def better(self, other: Validation | None) -> bool:
        """Whether this epoch replaces ``other``, the kept one so far."""
        return other is None or self.key() > other.key()


def validate(model: Siamese, source: PairBatches, config: TrainConfig) -> Validation:
    """Mean loss per pair on fixed, seed-independent batches; with both labels, accuracy and ROC-AUC too."""
    model.eval()
    objective = config.objective()
    total, count, logits, labels = 0.0, 0, [], []
    rng = np.random.default_rng(12345)
    with torch.no_grad():
        for index in source.epoch(rng):
            batch = source.batch(index, rng).to(config.device)
            v = encode_batch(model, batch, config.chunks)
            _, per_pair = loss_of_vectors(model, v, batch, objective)
            total += per_pair.item() * len(index)
            count += len(index)
            u, w = v[: batch.size], v[batch.size : 2 * batch.size]
            logits.append((model.head(u, w) if model.head is not None else (u * w).sum(-1)).cpu().numpy())
            labels.append(batch.labels.cpu().numpy())
    result = Validation(total / max(count, 1))
    y = np.concatenate(labels) if labels else np.zeros(0)
    if len(y) and 0 < y.sum() < len(y):
        scores = np.concatenate(logits)
        result.accuracy = best_threshold(scores, y)["value"]
        result.roc_auc = threshold_free(scores, y)["roc_auc"]
    return result


def distributed_loss(model: Siamese, config: TrainConfig, world: World) -> nn.Module:
    """What computes a batch's loss: ``model``, or among several processes its DDP wrapper (averages the gradients).

    The pair head is unused when no loss reads it, the distil projection in a batch without
    taught questions: DDP must then look for parameters without gradients.
    """
    if world.size == 1:
        return model
    unused = (model.head is not None and not config.objective().needs_head) or model.projection is not None
    return nn.parallel.DistributedDataParallel(
        model, device_ids=[world.local_rank] if config.device == "cuda" else None, find_unused_parameters=unused
    )


class Siamese(nn.Module):
    """The trained parts, one state dict: ``encoder.*`` and, when there are, ``head.*`` and ``projection.*``.

    The projection maps the encoder's vectors to the teacher's width for the distil loss; it is
    part of the checkpoint (a resume goes on with it) but not of the model folder.
    """

    def __init__(self, encoder: Encoder, head: PairHead | None, projection: nn.Linear | None = None):
        super().__init__()
        self.encoder = encoder
        self.head = head
        self.projection = projection

    def forward(
        self, batch: Batch, objective: Objective, chunks: int, world: World, bf16: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, loss per pair)`` of one batch: :func:`encode_batch`, then :func:`loss_of_vectors`; the call
        DDP wraps to average gradients."""
        return loss_of_vectors(self, encode_batch(self, batch, chunks, world, bf16), batch, objective)
