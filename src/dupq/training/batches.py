"""Batch sources: which pairs a training step sees, with which labels, and which columns are negatives.

A training run is a batch source + an objective (:mod:`dupq.training.objectives`) + the loop; a source turns labelled
pairs into :class:`Batch` objects and knows nothing of losses. ``"duplicates"`` (the seed's) batches duplicate pairs
only, every other question of a batch a negative of a row; ``"labelled"`` batches every labelled pair, so a pair loss
also learns from the 60 % that are not duplicates while the ranking losses still use the duplicate rows. Either can add
**hard negatives**: for a duplicate row (a, b), a question labelled not a duplicate of a or b elsewhere in the pool, as
an extra column.

**False negatives.** Quora repeats questions (318 of 349 batches of a seed epoch hold one twice), so every question
carries a *group* (same text, or joined by known duplicates, transitively:
:func:`dupq.data.duplicates.duplicate_groups`); :func:`false_negatives` marks the cells whose column is in the anchor's
group and the losses leave them out. Given a :class:`~dupq.training.distil.teacher.TeacherCache`, a batch also carries
the teacher's vectors of its taught questions (``Batch.teacher``, ``Batch.taught``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from dupq.data.pairs import Pairs
from dupq.data.tokenizer import Encoded, Vocabulary

if TYPE_CHECKING:  # only named in a type hint: the teacher's cache is made in training.distil
    from dupq.training.distil.teacher import TeacherCache


def length_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Random batches of indices, every index once, each ordered by length inside (batches of 1 are
    dropped: no negatives). Batches of similar lengths would pad less, but their in-batch negatives
    are easier (-1.3 test accuracy, docs/experiments/1-4-duplicates-only.md)."""
    order = rng.permutation(len(lengths))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    batches = [b[np.argsort(lengths[b], kind="stable")] for b in batches if len(b) >= 2]
    return [batches[i] for i in rng.permutation(len(batches))]


def false_negatives(anchor_groups: Tensor, column_groups: Tensor) -> Tensor:
    """``(B, C)`` bool: column j is the anchor's own question or a known duplicate, but not its positive.

    Column i is row i's positive (the diagonal), so it is never marked.
    """
    same = anchor_groups[:, None] == column_groups[None, :]  # (B, C)
    return same & ~torch.eye(*same.shape, dtype=torch.bool, device=same.device)


@dataclass
class Batch:
    """The questions of one step, encoded together: q1 rows, q2 rows, M extra negatives, then U questions to distil only.

    ``N = 2B + M + U`` rows in all (``dupq adapt``'s batches are U rows alone).
    """

    ids: Tensor  # (N, L) token ids, right-padded
    lengths: Tensor  # (N,)
    labels: Tensor  # (B,) 1 = the pair is a duplicate
    groups: Tensor  # (N,) group of each question (same group: same question or a known duplicate)
    size: int  # B, the number of pairs
    teacher: Tensor | None = None  # (N, T) the teacher's vector of each row; zeros where not taught
    taught: Tensor | None = None  # (N,) bool: the row has a teacher vector
    distil_only: int = 0  # U: trailing rows that are no pair's question nor anyone's negative

    def to(self, device: str | torch.device) -> Batch:
        tensors = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(self, **{k: t.to(device) for k, t in tensors.items() if isinstance(t, Tensor)})


class PairBatches:
    """Random batches over labelled pairs (the ``"duplicates"`` source passes duplicates only).

    ``hard_negatives`` appends, per duplicate row, one question labelled not a duplicate of it, where the pool has one
    (drawn from ``rng``); rows without one get none. ``teacher`` attaches each question's teacher vector.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        pairs: Pairs,
        batch_size: int,
        groups: dict[str, int] | None = None,
        hard_negatives: Pairs | None = None,
        teacher: TeacherCache | None = None,
    ):
        self.pairs = pairs
        self.q1: Encoded = vocab.encode(pairs.q1)
        self.q2: Encoded = vocab.encode(pairs.q2)
        self.lengths = np.maximum(self.q1.lengths, self.q2.lengths)
        self.labels = torch.as_tensor(pairs.labels, dtype=torch.float32)
        self.batch_size = batch_size
        self.groups = groups
        if groups is not None:
            self.g1 = np.array([groups.get(t, -1 - i) for i, t in enumerate(pairs.q1)], dtype=np.int64)
            self.g2 = np.array([groups.get(t, -1 - len(pairs) - i) for i, t in enumerate(pairs.q2)], dtype=np.int64)
        else:  # no grouping: each question is its own group (nothing is masked)
            self.g1 = -1 - np.arange(len(pairs), dtype=np.int64)
            self.g2 = -1 - len(pairs) - np.arange(len(pairs), dtype=np.int64)
        self.partners = None if hard_negatives is None else _Partners(vocab, hard_negatives, pairs, groups)
        self.teacher = teacher
        if teacher is not None:
            self.t1, self.t2 = teacher.rows(pairs.q1), teacher.rows(pairs.q2)
            if self.partners is not None:
                self.partners.teacher_rows = teacher.rows(self.partners.texts)

    def __len__(self) -> int:
        return len(self.pairs)

    def epoch(self, rng: np.random.Generator) -> list[np.ndarray]:
        """This epoch's batches: rows of ``pairs``, every row once."""
        return length_batches(self.lengths, self.batch_size, rng)

    def batch(self, index: np.ndarray, rng: np.random.Generator) -> Batch:
        """The encoded questions, labels and groups of the rows ``index``."""
        blocks = [self.q1.padded(index), self.q2.padded(index)]
        groups = [self.g1[index], self.g2[index]]
        rows = [self.t1[index], self.t2[index]] if self.teacher is not None else []  # teacher rows, -1: not taught
        if self.partners is not None:
            dup = index[self.pairs.labels[index] == 1]
            chosen = self.partners.pick(dup, rng)
            if len(chosen):
                blocks.append(self.partners.encoded.padded(chosen))
                groups.append(self.partners.groups[chosen])
                if self.teacher is not None:
                    rows.append(self.partners.teacher_rows[chosen])
        width = max(ids.shape[1] for ids, _ in blocks)
        ids = np.concatenate([np.pad(ids, ((0, 0), (0, width - ids.shape[1]))) for ids, _ in blocks])  # (N, L)
        lengths = np.concatenate([lengths for _, lengths in blocks])  # (N,)
        teacher = taught = None
        if self.teacher is not None:
            found = torch.from_numpy(np.concatenate(rows))  # (N,)
            taught = found >= 0
            teacher = self.teacher.vectors[found.clamp(min=0)].float() * taught[:, None]  # (N, T)
        labels, groups = self.labels[torch.from_numpy(np.asarray(index))], torch.from_numpy(np.concatenate(groups))
        return Batch(torch.from_numpy(ids), torch.from_numpy(lengths), labels, groups, len(index), teacher, taught)


class _Partners:
    """For each duplicate row of ``pairs``, the questions labelled *not* a duplicate of either of its questions."""

    def __init__(self, vocab: Vocabulary, non_duplicates: Pairs, pairs: Pairs, groups: dict[str, int] | None):
        self.texts = texts = list(dict.fromkeys(non_duplicates.q1 + non_duplicates.q2))
        self.teacher_rows = np.full(len(texts), -1, dtype=np.int64)  # set by PairBatches when it has a teacher
        position = {t: i for i, t in enumerate(texts)}
        options: dict[str, list[int]] = {}
        for a, b, y in zip(non_duplicates.q1, non_duplicates.q2, non_duplicates.labels):
            if y == 0:
                options.setdefault(a, []).append(position[b])
                options.setdefault(b, []).append(position[a])
        self.encoded = vocab.encode(texts)
        base = -10 * (len(pairs) + 1)  # below every ungrouped id a PairBatches hands out
        self.groups = np.array([(groups or {}).get(t, base - i) for i, t in enumerate(texts)], dtype=np.int64)
        self.options = [
            options.get(a, []) + options.get(b, []) if y == 1 else []
            for a, b, y in zip(pairs.q1, pairs.q2, pairs.labels)
        ]

    def covered(self) -> int:
        """How many duplicate rows have at least one labelled non-duplicate."""
        return sum(1 for o in self.options if o)

    def pick(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One partner (an index into ``encoded``) per row of ``rows`` that has any, drawn at random."""
        have = [i for i in rows if self.options[i]]
        draws = rng.random(len(have))
        return np.array([self.options[i][int(d * len(self.options[i]))] for i, d in zip(have, draws)], dtype=np.int64)
