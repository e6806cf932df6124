"""Objectives: a weighted sum of losses over one batch's embeddings; each loss one registered class.

An objective reads the batch's question vectors ``v`` (``(N, d)``: q1 rows, q2 rows, extra negatives, distil-only rows),
its labels and groups, the pair head and the distil projection, through :class:`Rows`; it never sees a model or a file.
Each loss is a class in :data:`LOSSES` holding its own arguments and their defaults; its arithmetic is a function of
embeddings in :mod:`dupq.training.losses`. With ``mask_false_negatives`` (mining, decided once for every loss),
candidates in the anchor's group (same text, known duplicate) are left out of the ranked losses.

>>> objective = Objective({"triplet": 1.0})          # the seed recipe
>>> objective = Objective({"bce": 1.0, "triplet": {"weight": 1.0, "reduction": "mean"}}, mask_false_negatives=True)

Adding a loss is one class under ``@register("name")``: ``--loss name``, a preset's ``[losses]`` table and
``TrainConfig(losses=...)`` then reach it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any, ClassVar

import torch
from torch import Tensor

from dupq.core.errors import DupqError
from dupq.modeling.heads import PairHead
from dupq.training.batches import Batch, false_negatives
from dupq.training.losses import distillation_loss, multiple_negatives_ranking_loss, pair_bce_loss, triplet_loss

Projection = Callable[[Tensor], Tensor] | None  # the student's vectors -> the teacher's width (the distil loss)


@dataclass
class Rows:
    """One batch's questions as the losses read them; each view is cut once, when a loss first asks for it."""

    v: Tensor  # (N, d) every question of the batch
    batch: Batch
    head: PairHead | None = None
    projection: Projection = None
    mask_false_negatives: bool = False

    @cached_property
    def pairs(self) -> tuple[Tensor, Tensor, Tensor]:
        """``(v1, v2, extra)``: ``(B, d)``, ``(B, d)``, ``(M, d)``; the trailing distil-only rows left out."""
        b, keep = self.batch.size, len(self.v) - self.batch.distil_only
        return self.v[:b], self.v[b : 2 * b], self.v[2 * b : keep]

    @cached_property
    def ranked(self) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """Anchors (q1 of duplicate rows), positives (their q2), other candidates, and the false-negative mask.

        The seed's orientation is kept: :func:`triplet_loss` takes ``(v1, v2)``, anchors on v2 and
        ranks the columns ``[v1; others]``; the ranking loss is called the same way. Candidates
        beyond the positives: the questions of non-duplicate rows and the extra negatives.
        """
        (v1, v2, extra), b = self.pairs, self.batch.size
        groups = self.batch.groups
        g1, g2, g_extra = groups[:b], groups[b : 2 * b], groups[2 * b : 2 * b + len(extra)]
        dup = self.batch.labels == 1  # (B,)
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

    @property
    def rankable(self) -> bool:
        """At least one duplicate row and one candidate beyond its positive."""
        anchors, positives, others, _ = self.ranked
        return len(anchors) >= 1 and len(positives) + len(others) >= 2

    @cached_property
    def taught(self) -> tuple[Tensor, Tensor]:
        """``(student, teacher)``: the vectors of the batch's taught questions, ``(n, d)`` and ``(n, T)``."""
        if self.batch.teacher is None or self.batch.taught is None:
            raise ValueError("the distillation losses need teacher vectors (train with a teacher cache)")
        return self.v[self.batch.taught], self.batch.teacher[self.batch.taught]


LOSSES: dict[str, type[Loss]] = {}  # name -> class, in the order an objective adds their terms


def register(name: str) -> Callable[[type[Loss]], type[Loss]]:
    """Class decorator: the loss under ``name`` for ``--loss`` and a preset's ``[losses]`` table."""

    def add(cls: type[Loss]) -> type[Loss]:
        LOSSES[name] = cls
        return cls

    return add


@dataclass
class Loss:
    """A loss's arguments are its fields (each with its default); calling it on :class:`Rows` gives its value
    on one batch, or ``None`` where the batch holds nothing it reads."""

    needs_head: ClassVar[bool] = False  # reads the pair head: the model gets one
    needs_teacher: ClassVar[bool] = False  # reads teacher vectors: the run needs --teacher-vectors
    projects: ClassVar[bool] = False  # reads the projection to the teacher's width: the model gets one

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float | int) and not isinstance(value, bool) and not math.isfinite(value):
                raise DupqError(f"the {f.name} of a loss must be a finite number, not {value}.")

    def per_pair(self, value: Tensor, pairs: int) -> Tensor:
        """``value`` as a mean over the batch's pairs (the figure the logs show)."""
        return value


@register("distil")
@dataclass
class Distil(Loss):
    """:func:`~dupq.training.losses.distillation_loss` of each taught question, through the projection."""

    needs_teacher: ClassVar[bool] = True
    projects: ClassVar[bool] = True

    def __call__(self, rows: Rows) -> Tensor | None:
        student, teacher = rows.taught
        if len(student) == 0:
            return None
        if rows.projection is None:
            raise ValueError("the distil loss needs a projection to the teacher's width")
        return distillation_loss(rows.projection(student), teacher)


@register("triplet")
@dataclass
class Triplet(Loss):
    """:func:`~dupq.training.losses.triplet_loss` with hard negative mining, the seed's."""

    margin: float = 0.25  # the seed's alpha: how far below a positive each negative must stay
    # over rows: "sum" (the seed) or "mean" (comparable with the other losses; Adam makes the two nearly equivalent alone)
    reduction: str = "sum"
    symmetric: bool = False  # also anchor on the q1 rows

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.reduction not in ("sum", "mean"):
            raise DupqError(f"the triplet loss's reduction is sum or mean, not {self.reduction!r}.")

    def __call__(self, rows: Rows) -> Tensor | None:
        if not rows.rankable:
            return None
        anchors, positives, others, excluded = rows.ranked
        extra = others if len(others) else None
        return triplet_loss(anchors, positives, self.margin, self.reduction, self.symmetric, extra, excluded)

    def per_pair(self, value: Tensor, pairs: int) -> Tensor:
        return value / pairs if self.reduction == "sum" else value


@register("ranking")
@dataclass
class Ranking(Loss):
    """:func:`~dupq.training.losses.multiple_negatives_ranking_loss` over the triplet loss's rows."""

    scale: float = 20.0  # inverse temperature of the softmax over cosines (sentence-transformers' 20)

    def __call__(self, rows: Rows) -> Tensor | None:
        if not rows.rankable:
            return None
        anchors, positives, others, excluded = rows.ranked
        extra = others if len(others) else None
        return multiple_negatives_ranking_loss(positives, anchors, extra, self.scale, excluded)


@register("bce")
@dataclass
class Bce(Loss):
    """:func:`~dupq.training.losses.pair_bce_loss` of the pair head's logit on every labelled row."""

    needs_head: ClassVar[bool] = True

    def __call__(self, rows: Rows) -> Tensor | None:
        if rows.head is None:
            raise ValueError("the bce loss needs a pair head")
        v1, v2, _ = rows.pairs
        return pair_bce_loss(rows.head(v1, v2), rows.batch.labels)


def parse_losses(specs: list[str]) -> dict[str, float]:
    """``--loss`` values, ``["bce", "ranking:0.5"]`` -> ``{"bce": 1.0, "ranking": 0.5}``; a bad one is one sentence."""
    losses: dict[str, float] = {}
    try:
        for spec in specs:
            name, _, weight = spec.partition(":")
            try:
                losses[name.strip()] = float(weight) if weight else 1.0
            except ValueError:
                raise ValueError(f"the weight of {name} must be a number, not {weight!r}") from None
        Objective(losses)
    except ValueError as e:
        raise DupqError(f"--loss: {e}.") from None
    return losses


@dataclass
class Objective:
    """``sum_k weight_k * loss_k(batch)``: ``losses`` maps a name of :data:`LOSSES` to its weight, or to a
    table of ``weight`` and the loss's arguments (``{"weight": 1.0, "reduction": "mean"}``)."""

    losses: dict[str, Any] = field(default_factory=lambda: {"triplet": 1.0})
    mask_false_negatives: bool = False  # leave the anchor's own group out of the negatives

    def __post_init__(self) -> None:
        if not self.losses:
            raise ValueError("an objective needs at least one loss")
        self.parts: dict[str, tuple[float, Loss]] = {}  # in LOSSES' order: the order the terms are summed in
        for name in sorted(self.losses, key=lambda n: list(LOSSES).index(n) if n in LOSSES else -1):
            if name not in LOSSES:
                raise ValueError(f"unknown loss {name!r}; choose from {', '.join(LOSSES)}")
            spec = self.losses[name]
            arguments = dict(spec) if isinstance(spec, dict) else {"weight": spec}
            weight = arguments.pop("weight", 1.0)
            if not (isinstance(weight, float | int) and 0 <= weight < float("inf")):
                raise ValueError(f"the weight of {name} must be a finite number >= 0, not {weight!r}")
            try:
                self.parts[name] = (weight, LOSSES[name](**arguments))
            except TypeError:
                takes = ", ".join(f.name for f in fields(LOSSES[name])) or "no argument"
                raise ValueError(f"the {name} loss takes a weight and {takes}, not {sorted(arguments)}") from None
        losses = [loss for _, loss in self.parts.values()]
        self.needs_head = any(loss.needs_head for loss in losses)  # the model needs a pair head
        self.needs_teacher = any(loss.needs_teacher for loss in losses)  # the run needs teacher vectors
        self.projects = any(loss.projects for loss in losses)  # the model needs a projection to the teacher

    def __call__(self, v: Tensor, batch: Batch, head: PairHead | None = None, projection: Projection = None) -> Tensor:
        """The weighted loss of one batch whose questions encode to ``v`` (``(N, d)``, :class:`Batch`'s rows)."""
        return self.total(self.terms(v, batch, head, projection), v)

    @staticmethod
    def total(terms: dict[str, Tensor], v: Tensor) -> Tensor:
        """The loss to optimise: the sum of the weighted ``terms``, in their order (a scalar like ``v``'s)."""
        return sum(terms.values(), v.new_zeros(()))

    def per_pair(self, terms: dict[str, Tensor], pairs: int) -> Tensor:
        """The batch's loss per pair, the figure the logs show for training and validation alike.

        Every loss is a mean over the batch's rows already, except the triplet loss summed over them
        (``reduction="sum"``, the seed's), which counts here divided by the batch's ``pairs``; a loss's weight counts as
        it does in the loss optimised. An epoch's loss is the mean of this over its pairs.
        """
        zero = next(iter(terms.values())).new_zeros(()) if terms else torch.zeros(())
        return sum((self.parts[name][1].per_pair(t, pairs) for name, t in terms.items()), zero).detach()

    def terms(self, v: Tensor, batch: Batch, head: PairHead | None = None, projection: Projection = None) -> dict:
        """Each loss of the objective on one batch, weighted: loss name -> ``weight * loss`` (a scalar)."""
        rows = Rows(v, batch, head, projection, self.mask_false_negatives)
        terms = {}
        for name, (weight, loss) in self.parts.items():
            value = loss(rows)
            if value is not None:
                terms[name] = weight * value
        return terms
