"""How a training run is set up: :class:`TrainConfig` (the loop) and :class:`ModelOptions` (the model it builds).

Each option is declared once, with :func:`dupq.core.options.option`: its default, its help and its range; ``dupq
train``'s flags are built from these fields and a preset file (:mod:`dupq.training.presets`) sets any of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from dupq.core.errors import DupqError
from dupq.core.formats import MAX_DIM
from dupq.core.options import check_options, label, option
from dupq.modeling.architecture import HEADS

if TYPE_CHECKING:
    from dupq.training.objectives import Objective

CHECKPOINT = "checkpoint.safetensors"
SOURCES = ("duplicates", "labelled")  # where training pairs come from (dupq.training.batches)


# The losses of each batch source when a run names none (``--loss``).
DEFAULT_LOSSES = {"duplicates": {"triplet": 1.0}, "labelled": {"bce": 1.0, "ranking": 1.0, "triplet": 1.0}}


LR_SCHEDULES = ("constant", "cosine")


DEVICES = ("cpu", "cuda")


# Options that may differ when a run is resumed: they change how it runs, not what it learns (chunks: the
# same sums to float rounding, a checkpoint from chunks 4).
RESUMABLE = {"epochs", "threads", "device", "chunks"}


# Fields renamed since runs recorded them: old name -> new (a model's metrics.json, a checkpoint).
RENAMED = {"recipe": "train_on", "teacher": "teacher_vectors"}


def renamed(recorded: dict[str, Any]) -> dict[str, Any]:
    """A recorded config (metrics.json's ``training.train``, a checkpoint's) under today's field names."""
    return {RENAMED.get(name, name): value for name, value in recorded.items()}


@dataclass
class TrainConfig:
    """How the encoder is trained; the defaults are the seed recipe. Each option's help text is its ``dupq train --help``.

    Options with ``cli=False`` are settings that a recipe's preset fixes: a preset file sets them.
    The ablations that lost are gone; docs/experiments/ keeps their rows.
    """

    train_on: str = option(
        "duplicates",
        "duplicates: the pool's duplicate pairs only (the seed); labelled: every labelled pair of the pool.",
        choices=SOURCES,
        cli=False,
    )
    # loss -> weight, or a table of its weight and arguments (dupq.training.objectives); empty: the source's
    # DEFAULT_LOSSES. Not an option field: `--loss NAME[:WEIGHT]` is repeated
    losses: dict[str, Any] = field(default_factory=dict)
    epochs: int = option(5, "Passes over the training pairs.", min=1)
    batch_size: int = option(256, "Pairs per batch (in-batch negatives = batch size - 1).", min=2, max=65_536)
    lr: float = option(0.01, "Adam learning rate.", min=0.0)
    mask_false_negatives: bool = option(
        False, "Leave the anchor's own question and its known duplicates out of its negatives.", cli=False
    )
    hard_negatives: bool = option(
        False, "Per duplicate row, add a question labelled not its duplicate as a negative.", cli=False
    )
    lr_schedule: str = option(
        "constant", "constant, or cosine (decay to 0 over the run).", choices=LR_SCHEDULES, cli=False
    )
    seed: int = option(0, "Random seed (initialisation, shuffling, dropout).", min=0, max=2**32 - 1)
    # length-sorted LSTM calls per batch: cuts padding, keeps the batch's questions random. 8 is the fastest of
    # 4/8/16/32 for the seed recipe on a 2-core CPU (`dupq-lab train-step --recipe seed`: 8,930 pairs/s
    # against 8,091 at 16); for the labelled recipe 8 and 16 are within noise, and its preset keeps 16:
    # docs/experiments/5-labelled-pairs.md, "What a labelled training step costs"
    chunks: int = 8
    bf16: bool = option(
        False,
        "Encode under bfloat16 autocast while training: ~2x faster on a CPU with bf16 units; weights and losses stay float32.",
    )
    teacher_vectors: str = option("", "Teacher vectors made by `dupq distil teach`, for the distil losses.")
    # torch CPU threads; 0 leaves torch's setting alone. `dupq train --threads` (one default for every command) sets it
    threads: int = 0
    device: str = option(
        "cpu", "cpu, or cuda to train on a GPU (bit-exact resume is guaranteed on CPU only).", choices=DEVICES
    )

    def __post_init__(self) -> None:
        check_options(self)
        if not self.losses:
            self.losses = dict(DEFAULT_LOSSES[self.train_on])
        for f in fields(self):
            if f.name == "lr" and not math.isfinite(self.lr):
                raise DupqError(f"{label(f)} must be a finite number, not {self.lr}.")
        try:
            objective = self.objective()
        except ValueError as e:
            raise DupqError(f"losses: {e}.") from None
        if objective.needs_teacher != bool(self.teacher_vectors):
            raise DupqError(
                "the distil losses need --teacher-vectors (a folder made by `dupq distil teach`)"
                if self.teacher_vectors == ""
                else "--teacher-vectors is read by the distil losses only; add --loss distil:5 or leave --teacher-vectors out."
            )

    def objective(self) -> Objective:
        from dupq.training.objectives import Objective  # torch: imported when training, not by the CLI's options

        return Objective(self.losses, self.mask_false_negatives)


@dataclass
class ModelOptions:
    """What is built before training: the vocabulary, the encoder and the pair head. Each help text is its ``dupq train --help``."""

    dim: int = option(
        128,
        "Embedding and recurrent layer width (the seed's d_feature); cost grows with its square.",
        min=1,
        max=MAX_DIM,
    )
    lowercase: bool = option(False, "Fold case before the vocabulary lookup.", cli=False)
    oov_buckets: int = option(
        0,
        "Hash unknown words into this many extra ids (0: one shared id, as the seed).",
        min=0,
        max=2**20,  # rows of the embedding table beside the vocabulary's: 2**20 x 128 floats is 0.5 GB
        cli=False,
    )
    min_count: int = option(1, "Keep words seen at least this often in the vocabulary.", min=1, cli=False)
    dropout: float = option(0.0, "Dropout on word embeddings.", min=0.0, max=0.9, cli=False)
    head: str = option(
        "none",
        "Pair head: none, cosine (a scaled cosine) or mlp (over [|u-v|, u*v, cos]); bce needs one (cosine by default).",
        choices=("none", *HEADS),
    )
    word_init: str = option(
        "",
        "Start word embeddings from a teacher's vectors of each word: 'teacher' "
        "(the packaged MiniLM) or a sentence-transformers folder; '': random (the seed).",
    )

    def __post_init__(self) -> None:
        check_options(self)


@dataclass
class AdaptConfig:
    """How the student is fine-tuned on the user's questions; each help text is its ``dupq adapt --help``."""

    epochs: int = option(24, "Passes over your questions.", min=1)
    minutes: float = option(
        0.0, "Stop before an epoch that would end after this many minutes of fine-tuning (0: no limit).", min=0.0
    )
    batch_size: int = option(128, "Your questions per step.", min=2)
    lr: float = option(0.003, "Adam learning rate (decayed to 0 over the epochs, a cosine).", min=0.0)
    distil: float = option(
        1.0, "Weight of the cosine distance to the teacher's vectors (through a projection).", min=0.0
    )
    mix: int = option(
        20_000,
        "When you give fewer questions than this, questions of Quora's training pool (never a dev or test one) "
        "are added up to this many, so that a small help desk does not pull the student away from what it knows (0: never).",
        min=0,
    )
    seed: int = option(0, "Random seed (batches, dropout).")
    bf16: bool = option(False, "Encode under bfloat16 autocast while training (faster on CPUs with bf16 units).")

    def __post_init__(self) -> None:
        check_options(self)
        if not all(math.isfinite(v) for v in (self.lr, self.distil, self.minutes)):
            raise DupqError("the adaptation's learning rate, weight and minutes must be finite numbers.")
        if self.distil == 0:
            raise DupqError("adaptation needs the distillation loss: give --distil a positive weight.")

    def losses(self) -> dict[str, float]:
        """The objective's losses (:mod:`dupq.training.objectives`)."""
        return {"distil": self.distil}
