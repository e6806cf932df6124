"""Fine-tuning the teacher on the training pool's duplicates, before it teaches the student.

The student LSTM can only come as close to Quora's notion of "the same question" as its teacher
is: distilled from all-MiniLM-L6-v2 as it ships, it reaches the teacher's retrieval on dev and
stops there. So the teacher first learns from the same labelled pool the student learns from,
the way sentence-transformers trains its Quora duplicate-question models (the
``training_quora_duplicate_questions`` examples): the multiple negatives ranking loss
(:func:`dupq.training.losses.multiple_negatives_ranking_loss`) over batches of duplicate pairs, each
question's partner its positive and every other question of the batch a negative, in both
directions, plus, where the pool has one, a question labelled *not* a duplicate of the anchor as
a hard negative. In-batch columns that are the anchor's own text or a known duplicate of it are
masked out (:func:`dupq.training.batches.false_negatives`), as the student's training does.

Only the pool's training rows teach it: the labelled recipe's validation rows (the pool's last
``labelled_val`` rows), the test and the dev pairs are never seen, so every yardstick stays as
honest as it is for the student. The result is an ordinary sentence-transformers model folder,
written to a hidden sibling folder and renamed into place; ``dupq distil teach --teacher FOLDER``
then caches its vectors and ``dupq train --word-init FOLDER`` starts the student's words from it.

>>> folder = fine_tune(pairs, "runs/teacher-model", TuneConfig(epochs=1))   # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from dupq.core.errors import DupqError
from dupq.core.files import new_folder
from dupq.data.duplicates import duplicate_groups
from dupq.data.pairs import Pairs
from dupq.modeling.pretrained import load_sentence_transformer
from dupq.training.batches import false_negatives
from dupq.training.loop import Epoch, Loop, Update, fit, warmup_linear
from dupq.training.losses import multiple_negatives_ranking_loss


@dataclass
class TuneConfig:
    """How the teacher is fine-tuned; the defaults follow sentence-transformers' Quora examples."""

    epochs: int = 1  # passes over the duplicate pairs
    batch_size: int = 128  # duplicate pairs per batch: 2 x batch_size - 1 in-batch negatives per anchor
    lr: float = 2e-5  # AdamW learning rate, reached after warm-up, then decayed linearly to 0
    warmup: float = 0.1  # share of the steps spent warming the learning rate up from 0
    scale: float = 20.0  # the ranking loss' inverse temperature
    hard_negatives: bool = True  # add one labelled non-duplicate of each anchor, where the pool has one
    max_length: int = 64  # word pieces kept per question (Quora questions rarely need more)
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        if (
            self.epochs < 1
            or self.batch_size < 2
            or not (self.lr > 0 and math.isfinite(self.lr))
            or not 0 <= self.warmup < 1
        ):
            raise DupqError(
                "fine-tuning needs epochs >= 1, batch size >= 2, a positive finite learning rate and warm-up in [0, 1)."
            )


def tuning_pairs(pool: Pairs, rng: np.random.Generator) -> tuple[list[str], list[str], list[str | None]]:
    """``(anchors, positives, hard negatives)`` from labelled pairs: each duplicate pair once, with a
    question labelled not a duplicate of its first question (``None`` where there is none)."""
    partners: dict[str, list[str]] = {}
    for a, b, y in zip(pool.q1, pool.q2, pool.labels):
        if y == 0:
            partners.setdefault(a, []).append(b)
            partners.setdefault(b, []).append(a)
    anchors, positives, negatives = [], [], []
    for a, b, y in zip(pool.q1, pool.q2, pool.labels):
        if y == 1 and a != b:
            options = partners.get(a) or partners.get(b)
            anchors.append(a)
            positives.append(b)
            negatives.append(options[rng.integers(len(options))] if options else None)
    return anchors, positives, negatives


class _Rows:
    """Batches of duplicate-pair rows for the loop: each row once an epoch, in random order; no partial batch."""

    def __init__(self, n: int, batch_size: int):
        self.n, self.batch_size = n, batch_size

    def epoch(self, rng: np.random.Generator) -> list[np.ndarray]:
        order = rng.permutation(self.n)
        return [order[b * self.batch_size : (b + 1) * self.batch_size] for b in range(self.n // self.batch_size)]

    def batch(self, index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return index


def fine_tune(
    pool: Pairs,
    out: str | os.PathLike,
    config: TuneConfig,
    base: str | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Fine-tune the sentence-transformers model ``base`` (default: the packaged all-MiniLM-L6-v2) on
    ``pool``'s duplicates and save it as a model folder at ``out``; returns ``out``."""
    out = Path(out)
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    model, name = load_sentence_transformer(base, config.device)
    model.float()  # trained in float32 (a folder saved in float16 loads as such), under bf16 autocast on a GPU
    model.max_seq_length = config.max_length
    anchors, positives, negatives = tuning_pairs(pool, rng)
    if len(anchors) < config.batch_size:
        raise DupqError(f"the pool holds {len(anchors)} duplicate pairs, fewer than one batch of {config.batch_size}.")
    groups = duplicate_groups(list({*pool.q1, *pool.q2}), pool.q1, pool.q2, pool.labels)
    steps_per_epoch = len(anchors) // config.batch_size
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01)
    log(
        f"fine-tuning {name} on {len(anchors):,} duplicate pairs ({sum(n is not None for n in negatives):,} with a hard negative), "
        f"{config.epochs} epoch(s) of {steps_per_epoch:,} steps"
    )
    started = time.perf_counter()

    def loss_of(rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        hard = [negatives[i] for i in rows] if config.hard_negatives else []
        loss = _step_loss(model, [anchors[i] for i in rows], [positives[i] for i in rows], hard, groups, config)
        return loss, loss.detach()

    def after_epoch(epoch: int, done: Epoch) -> None:
        log(f"epoch {epoch + 1}/{config.epochs} loss {done.loss:.4f} ({time.perf_counter() - started:.0f}s)")

    loop = Loop(config.epochs, config.lr, config.seed, warmup_linear(config.warmup), progress=False)
    fit(loop, model, _Rows(len(anchors), config.batch_size), loss_of, Update(optimizer, clip=1.0), after_epoch)
    model.eval()
    with new_folder(out) as tmp:  # written whole, then renamed into place: a killed save leaves the old one
        model.save(str(tmp))
    log(f"saved the fine-tuned teacher to {out} ({time.perf_counter() - started:.0f}s)")
    return out


def _step_loss(
    model,
    anchors: list[str],
    positives: list[str],
    negatives: list[str | None],
    groups: dict[str, int],
    config: TuneConfig,
) -> torch.Tensor:
    """The ranking loss of one batch: anchors against [positives; the batch's hard negatives]."""
    hard = [n for n in negatives if n is not None]
    texts = anchors + positives + hard
    device = torch.device(config.device)
    tokenize = getattr(model, "preprocess", None) or model.tokenize  # renamed in sentence-transformers 6.2
    features = {k: v.to(device) if torch.is_tensor(v) else v for k, v in tokenize(texts).items()}
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        vectors = model(features)["sentence_embedding"].float()
    n = len(anchors)
    anchor_groups = torch.tensor([groups[t] for t in anchors], device=device)
    column_groups = torch.tensor([groups[t] for t in positives + hard], device=device)
    excluded = false_negatives(anchor_groups, column_groups)
    return multiple_negatives_ranking_loss(
        vectors[:n], vectors[n : 2 * n], vectors[2 * n :] if hard else None, scale=config.scale, excluded=excluded
    )
