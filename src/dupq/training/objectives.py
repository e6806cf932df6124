"""Objectives: a weighted sum of losses over one batch's embeddings.

An objective reads the batch's question vectors ``v`` (``(2B + M, d)``: q1 rows, q2 rows, extra
negatives), its labels and groups, and the pair head; it never sees a model or a file. The losses
themselves are in :mod:`dupq.training.losses`; here they are only pointed at the right rows:

* ``triplet``: the seed's triplet loss with hard negative mining. Anchors are the q2 of the
  duplicate rows, positives their q1, negatives every other question of the batch;
* ``ranking``: the multiple-negatives ranking loss over the same rows and candidates;
* ``bce``: binary cross-entropy of the pair head's logit on every labelled row;
* ``contrastive`` / ``online_contrastive``: on the cosine of every labelled row;
* ``distil``: the cosine distance between each taught question's vector (through the learned
  ``projection`` to the teacher's width) and its teacher vector;
* ``distil_matrix``: the squared difference between the student's and the teacher's cosine
  matrices over the batch's taught questions (no projection).

With ``mask_false_negatives``, candidates in the anchor's group (same text, known duplicate) are
left out of ``triplet`` and ``ranking``.

>>> objective = Objective({"triplet": 1.0})          # the seed recipe
>>> objective = Objective({"bce": 1.0, "ranking": 1.0, "triplet": 1.0}, mask_false_negatives=True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from dupq.modeling.heads import PairHead
from dupq.training.batches import Batch, false_negatives
from dupq.training.losses import (
    contrastive_loss,
    distillation_loss,
    multiple_negatives_ranking_loss,
    online_contrastive_loss,
    pair_bce_loss,
    similarity_matching_loss,
    triplet_loss,
)

LOSSES = ("triplet", "ranking", "bce", "contrastive", "online_contrastive", "distil", "distil_matrix")
DISTIL = ("distil", "distil_matrix")  # the losses that need teacher vectors


def parse_losses(specs: list[str]) -> dict[str, float]:
    """``["bce", "ranking:0.5"]`` -> ``{"bce": 1.0, "ranking": 0.5}``; raises ValueError naming a bad entry."""
    losses: dict[str, float] = {}
    for spec in specs:
        name, _, weight = spec.partition(":")
        name = name.strip()
        if name not in LOSSES:
            raise ValueError(f"unknown loss {name!r}; choose from {', '.join(LOSSES)}")
        try:
            value = float(weight) if weight else 1.0
        except ValueError:
            raise ValueError(f"the weight of {name} must be a number, not {weight!r}") from None
        if not (value >= 0 and value < float("inf")):
            raise ValueError(f"the weight of {name} must be a finite number >= 0, not {weight!r}")
        losses[name] = value
    if not losses:
        raise ValueError("an objective needs at least one loss")
    return losses


@dataclass
class Objective:
    """``sum_k weight_k * loss_k(batch)``; the field comments say what each knob trades."""

    losses: dict[str, float] = field(default_factory=lambda: {"triplet": 1.0})  # loss name -> weight
    margin: float = 0.25  # triplet margin (the seed's alpha)
    reduction: str = "sum"  # triplet over rows: "sum" (the seed) or "mean" (comparable with the other losses)
    symmetric: bool = False  # triplet: also anchor on q1 rows
    scale: float = 20.0  # ranking: inverse temperature of the softmax over cosines (sentence-transformers' 20)
    contrastive_margin: float = 0.5  # (online) contrastive: cosine distance non-duplicates are pushed beyond
    mask_false_negatives: bool = False  # leave the anchor's own group out of the negatives

    def __post_init__(self) -> None:
        unknown = set(self.losses) - set(LOSSES)
        if unknown:
            raise ValueError(f"unknown loss {sorted(unknown)[0]!r}; choose from {', '.join(LOSSES)}")

    @property
    def needs_head(self) -> bool:
        return "bce" in self.losses

    @property
    def needs_teacher(self) -> bool:
        return bool(set(DISTIL) & set(self.losses))

    def __call__(
        self,
        v: Tensor,
        batch: Batch,
        head: PairHead | None = None,
        projection: Callable[[Tensor], Tensor] | None = None,
    ) -> Tensor:
        """The weighted loss of one batch whose questions encode to ``v`` (``(N, d)``, :class:`Batch`'s rows)."""
        return self.total(self.terms(v, batch, head, projection), v)

    @staticmethod
    def total(terms: dict[str, Tensor], v: Tensor) -> Tensor:
        """The loss to optimise: the sum of the weighted ``terms``, in their order (a scalar like ``v``'s)."""
        return sum(terms.values(), v.new_zeros(()))

    def per_pair(self, terms: dict[str, Tensor], pairs: int) -> Tensor:
        """The batch's loss per pair, the figure the logs show for training and validation alike.

        Every loss is a mean over the batch's rows already, except the triplet loss summed over them
        (``reduction="sum"``, the seed's), which counts here divided by the batch's ``pairs``; a
        loss's weight counts as it does in the loss optimised. An epoch's loss is the mean of this
        over its pairs.
        """
        summed = self.reduction == "sum"
        zero = next(iter(terms.values())).new_zeros(()) if terms else torch.zeros(())
        return sum((t / pairs if name == "triplet" and summed else t for name, t in terms.items()), zero).detach()

    def terms(
        self,
        v: Tensor,
        batch: Batch,
        head: PairHead | None = None,
        projection: Callable[[Tensor], Tensor] | None = None,
    ) -> dict[str, Tensor]:
        """Each loss of the objective on one batch, weighted: loss name -> ``weight * loss`` (a scalar)."""
        b = batch.size
        terms: dict[str, Tensor] = {}
        if self.needs_teacher:
            terms.update(self._distillation(v, batch, projection))
        if batch.distil_only:  # the trailing distil-only rows are no pair's question and nobody's negative
            keep = len(v) - batch.distil_only
            v, batch = v[:keep], replace(batch, groups=batch.groups[:keep], distil_only=0)
        v1, v2, extra = v[:b], v[b : 2 * b], v[2 * b :]  # (B, d), (B, d), (M, d)
        ranked = {"triplet", "ranking"} & set(self.losses)
        if ranked:
            anchors, positives, others, excluded = self._ranking_rows(v1, v2, extra, batch)
            if len(anchors) >= 1 and len(positives) + len(others) >= 2:
                if "triplet" in self.losses:
                    loss = triplet_loss(
                        anchors,
                        positives,
                        self.margin,
                        self.reduction,
                        self.symmetric,
                        others if len(others) else None,
                        excluded,
                    )
                    terms["triplet"] = self.losses["triplet"] * loss
                if "ranking" in self.losses:
                    loss = multiple_negatives_ranking_loss(
                        positives, anchors, others if len(others) else None, self.scale, excluded
                    )
                    terms["ranking"] = self.losses["ranking"] * loss
        cosines = None
        if {"contrastive", "online_contrastive"} & set(self.losses):
            cosines = (v1 * v2).sum(-1)  # (B,) the vectors are unit length
        if "contrastive" in self.losses:
            terms["contrastive"] = self.losses["contrastive"] * contrastive_loss(
                cosines, batch.labels, self.contrastive_margin
            )
        if "online_contrastive" in self.losses:
            terms["online_contrastive"] = self.losses["online_contrastive"] * online_contrastive_loss(
                cosines, batch.labels, self.contrastive_margin
            )
        if "bce" in self.losses:
            if head is None:
                raise ValueError("the bce loss needs a pair head")
            terms["bce"] = self.losses["bce"] * pair_bce_loss(head(v1, v2), batch.labels)
        return terms

    def _distillation(
        self, v: Tensor, batch: Batch, projection: Callable[[Tensor], Tensor] | None
    ) -> dict[str, Tensor]:
        if batch.teacher is None or batch.taught is None:
            raise ValueError("the distillation losses need teacher vectors (train with a teacher cache)")
        student, teacher = v[batch.taught], batch.teacher[batch.taught]  # (n, d), (n, T)
        terms: dict[str, Tensor] = {}
        if len(student) == 0:
            return terms
        if "distil" in self.losses:
            if projection is None:
                raise ValueError("the distil loss needs a projection to the teacher's width")
            terms["distil"] = self.losses["distil"] * distillation_loss(projection(student), teacher)
        if "distil_matrix" in self.losses and len(student) >= 2:
            terms["distil_matrix"] = self.losses["distil_matrix"] * similarity_matching_loss(student, teacher)
        return terms

    def _ranking_rows(self, v1: Tensor, v2: Tensor, extra: Tensor, batch: Batch):
        """Anchors (q1 of duplicate rows), positives (their q2), other candidates, and the false-negative mask.

        The seed's orientation is kept: :func:`triplet_loss` takes ``(v1, v2)``, anchors on v2 and
        ranks the columns ``[v1; others]``; the ranking loss is called the same way. Candidates
        beyond the positives: the questions of non-duplicate rows and the extra negatives.
        """
        b = batch.size
        g1, g2, g_extra = batch.groups[:b], batch.groups[b : 2 * b], batch.groups[2 * b :]
        dup = batch.labels == 1  # (B,)
        if bool(dup.all()):  # the seed's batches: plain slices, so its numbers stay exactly as they were
            anchors, positives, others = v1, v2, extra
            g_row1, g_row2, g_cols = g1, g2, torch.cat([g1, g_extra])
        else:
            other = ~dup
            anchors, positives = v1[dup], v2[dup]
            others = torch.cat([v1[other], v2[other], extra])
            g_row1, g_row2 = g1[dup], g2[dup]
            g_cols = torch.cat([g1[dup], g1[other], g2[other], g_extra])
        excluded = None
        if self.mask_false_negatives:
            # A column is excluded when it is in the group of either question of the row (one group when
            # the row is a known training duplicate).
            excluded = false_negatives(g_row1, g_cols) | false_negatives(g_row2, g_cols)  # (D, D + M)
        return anchors, positives, others, excluded
