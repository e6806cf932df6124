"""Adapting a trained student to a help desk's own questions, without labels: the teacher shows the way.

A model trained on Quora knows Quora's words as Quora's labels used them; a help desk's questions
("my tap drips", "end my gym subscription") use words in senses Quora rarely paired. The help desk
has its old questions but no labels. :func:`adapt` lets the teacher (a pretrained sentence
encoder, all-MiniLM-L6-v2 by default) encode those questions once, into a resumable cache
(:func:`dupq.training.distil.teacher.teach`), and fine-tunes the student on them with the
distillation losses of :mod:`dupq.training.objectives`:

* ``distil``: the cosine distance between each question's vector, through a linear projection to
  the teacher's width, and the teacher's vector. The projection starts as the least-squares map
  from the starting student's vectors to the teacher's, so the first steps move the encoder, not
  a random projection;
* ``distil_matrix``: the squared difference between the student's and the teacher's cosine
  matrices over a batch (what retrieval ranks by; no projection).

What keeps Quora's skills: the loss holds the encoder's weights near the starting model's
(``anchor * sum (w - w0)^2``, the L2-SP penalty of Li, Grandvalet & Davoine 2018, *Explicit
Inductive Bias for Transfer Learning with Convolutional Networks*), and, when the Quora pairs file
is given, each step adds ``quora_pairs`` duplicate pairs of the training pool under the seed's
triplet loss. The pair head, its calibration and threshold are the starting model's, unchanged:
the adaptation moves the vectors little (the penalty), and no labelled pair of the help desk
exists to fit them again on.

The student's vocabulary is the starting model's: a word it lacks is hashed into one of its
unknown-word buckets (:class:`dupq.data.tokenizer.Vocabulary`), whose vectors are trained here like
any word's; ``metrics.json`` counts how many of the questions' words that is.

The loop is :func:`dupq.training.train._train_epoch` (the progress bar, Adam, the learning-rate
schedule) over :class:`QuestionBatches`; the result is written through
:func:`~dupq.core.files.new_folder`, so a killed or failed run leaves no half folder.

>>> model = adapt(Model.load(), texts, "runs/adapted", encode, "all-MiniLM-L6-v2")   # doctest: +SKIP
"""

from __future__ import annotations

import copy
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dupq.core.files import DupqError, new_folder
from dupq.core.options import check_options, option
from dupq.data.pairs import Pairs
from dupq.data.tokenizer import Vocabulary, check_questions
from dupq.modeling.model import Model
from dupq.training.batches import Batch, PairBatches, length_batches
from dupq.training.config import TrainConfig
from dupq.training.distil.teacher import TeacherCache, teach
from dupq.training.distil.transfer import neighbours, question_words, rewordings, unknown_words
from dupq.training.step import Siamese, encode_in_chunks
from dupq.training.train import _train_epoch


@dataclass
class AdaptConfig:
    """How the student is fine-tuned on the user's questions; each help text is its ``dupq adapt --help``."""

    epochs: int = option(3, "Passes over your questions.", min=1)
    minutes: float = option(
        0.0, "Stop before an epoch that would end after this many minutes of fine-tuning (0: no limit).", min=0.0
    )
    batch_size: int = option(128, "Your questions per step.", min=2)
    lr: float = option(0.001, "Adam learning rate (decayed to 0 over the epochs, a cosine).", min=0.0)
    distil: float = option(
        1.0, "Weight of the cosine distance to the teacher's vectors (through a projection).", min=0.0
    )
    distil_matrix: float = option(0.0, "Weight of matching the teacher's in-batch cosine matrix.", min=0.0)
    anchor: float = option(0.0, "Weight of the penalty holding the weights near the starting model's (L2-SP).", min=0.0)
    variants: int = option(
        0, "Per question, rewordings the teacher encodes too (a word swapped for a near one, or left out).", min=0
    )
    neighbours: int = option(
        5, "A swapped word is one of the teacher's this many nearest words of your questions.", min=1
    )
    quora_pairs: int = option(
        0, "Per step, Quora training duplicates under the triplet loss (needs the pairs file; 0: none).", min=0
    )
    seed: int = option(0, "Random seed (batches, dropout).")
    bf16: bool = option(False, "Encode under bfloat16 autocast while training (faster on CPUs with bf16 units).")

    def __post_init__(self) -> None:
        check_options(self)
        if not all(math.isfinite(v) for v in (self.lr, self.distil, self.distil_matrix, self.anchor, self.minutes)):
            raise DupqError("the adaptation's learning rate, weights and minutes must be finite numbers.")
        if self.distil == 0 and self.distil_matrix == 0:
            raise DupqError("adaptation needs a distillation loss: give --distil or --distil-matrix a positive weight.")

    def losses(self) -> dict[str, float]:
        """The objective's losses (:mod:`dupq.training.objectives`)."""
        named = {"distil": self.distil, "distil_matrix": self.distil_matrix}
        if self.quora_pairs:
            named["triplet"] = 1.0
        return {k: v for k, v in named.items() if v > 0}


class QuestionBatches:
    """Batches of the taught questions, each once an epoch, as rows only the distillation losses see.

    With ``pairs`` (a :class:`PairBatches` over labelled duplicates), each batch starts with
    ``pairs_per_batch`` of them drawn at random (the triplet loss's rows, no teacher vectors).
    It is a batch source for :func:`dupq.training.train._train_epoch`: ``epoch``, ``batch``.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        cache: TeacherCache,
        batch_size: int,
        pairs: PairBatches | None = None,
        pairs_per_batch: int = 0,
    ):
        self.cache = cache
        self.encoded = vocab.encode(cache.texts)
        self.batch_size = batch_size
        self.pairs = pairs if pairs_per_batch else None
        self.pairs_per_batch = min(pairs_per_batch, len(pairs)) if pairs is not None else 0

    def __len__(self) -> int:
        return len(self.cache)

    def epoch(self, rng: np.random.Generator) -> list[np.ndarray]:
        return length_batches(self.encoded.lengths, self.batch_size, rng, 1)

    def batch(self, index: np.ndarray, rng: np.random.Generator) -> Batch:
        ids, lengths = self.encoded.padded(index)  # (U, L), (U,)
        teacher = self.cache.vectors[torch.from_numpy(np.asarray(index))].float()  # (U, T)
        taught = torch.ones(len(index), dtype=torch.bool)
        own = Batch(
            torch.from_numpy(ids),
            torch.from_numpy(lengths),
            torch.zeros(0),
            torch.full((len(index),), torch.iinfo(torch.int64).min),  # never ranked
            0,
            teacher,
            taught,
            len(index),
        )
        if self.pairs is None:
            return own
        part = self.pairs.batch(rng.choice(len(self.pairs), self.pairs_per_batch, replace=False), rng)
        width = max(part.ids.shape[1], own.ids.shape[1])
        pad = lambda t: nn.functional.pad(t, (0, width - t.shape[1]))  # noqa: E731 - (N, L) to (N, width)
        n = len(part.ids)
        return Batch(
            torch.cat([pad(part.ids), pad(own.ids)]),
            torch.cat([part.lengths, own.lengths]),
            part.labels,
            torch.cat([part.groups, own.groups]),
            part.size,
            torch.cat([teacher.new_zeros(n, teacher.shape[1]), teacher]),
            torch.cat([torch.zeros(n, dtype=torch.bool), taught]),
            len(index),
        )


class Anchored(nn.Module):
    """The model's batch loss plus ``weight * sum (w - w0)^2`` over the encoder's weights (L2-SP).

    Called as :class:`~dupq.training.step.Siamese` is (the ``loss_of`` of the training loop).
    """

    def __init__(self, model: Siamese, weight: float):
        super().__init__()
        self.model, self.weight = model, weight
        self.start = [p.detach().clone() for p in model.encoder.parameters()]

    def drift(self) -> torch.Tensor:
        """``sum (w - w0)^2`` over the encoder's weights: how far it moved from the start."""
        return sum((p - p0).pow(2).sum() for p, p0 in zip(self.model.encoder.parameters(), self.start))

    def forward(self, batch: Batch, objective, chunks: int, world, bf16: bool = False) -> torch.Tensor:
        loss = self.model(batch, objective, chunks, world, bf16)
        return loss + self.weight * self.drift() if self.weight else loss


@torch.no_grad()
def fit_projection(encoder: nn.Module, vocab: Vocabulary, cache: TeacherCache) -> nn.Linear:
    """The least-squares linear map from the encoder's vectors of the taught questions to the teacher's."""
    encoder.eval()
    encoded = vocab.encode(cache.texts)
    student = torch.cat(
        [
            encoder(*map(torch.from_numpy, encoded.padded(np.arange(lo, min(lo + 1024, len(cache))))))
            for lo in range(0, len(cache), 1024)
        ]
    )  # (n, d)
    solution = torch.linalg.lstsq(student.double(), cache.vectors.double()).solution  # (d, T)
    projection = nn.Linear(student.shape[1], cache.dim, bias=False)
    projection.weight.copy_(solution.T.float())
    return projection


@torch.no_grad()
def teacher_agreement(
    model: Siamese, vocab: Vocabulary, cache: TeacherCache, batch_size: int = 512
) -> dict[str, float]:
    """On the taught questions, in fixed batches: the mean cosine of the projected vectors to the teacher's,
    and the mean squared difference of the in-batch cosine matrices (the two losses, without weights)."""
    model.eval()
    encoded = vocab.encode(cache.texts)
    cosines, matrix = [], []
    for lo in range(0, len(cache), batch_size):
        index = np.arange(lo, min(lo + batch_size, len(cache)))
        ids, lengths = encoded.padded(index)
        v = encode_in_chunks(model.encoder, torch.from_numpy(ids), torch.from_numpy(lengths), 1)  # (b, d)
        t = cache.vectors[lo : lo + len(index)].float()  # (b, T)
        t = t / t.norm(dim=1, keepdim=True)
        if model.projection is not None:
            cosines.append(nn.functional.cosine_similarity(model.projection(v), t).numpy())
        matrix.append(float((v @ v.T - t @ t.T).pow(2).mean()) * len(index))
    return {
        "cosine_to_teacher": float(np.concatenate(cosines).mean()) if cosines else float("nan"),
        "matrix_error": sum(matrix) / len(cache),
    }


def adapt(
    base: Model,
    texts: list[str],
    out: str | os.PathLike,
    encode: Callable[[list[str]], np.ndarray],
    teacher_name: str,
    config: AdaptConfig | None = None,
    quora: Pairs | None = None,
    cache: str | os.PathLike | None = None,
    info: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> Model:
    """Fine-tune ``base`` on ``texts`` towards the teacher ``encode`` (texts -> unit vectors); write the model folder ``out``.

    ``cache`` is the folder of the teacher's vectors (default: ``OUT.teacher`` beside ``out``),
    kept so that running again with other settings does not encode the questions again.
    ``quora`` (labelled pairs of the training pool) is read when ``config.quora_pairs``.
    ``info`` is recorded in ``metrics.json`` with the adaptation. Returns the adapted model.
    """
    config = config or AdaptConfig()
    if base.encoder is None or base.vocab is None:
        raise DupqError(
            "adaptation fine-tunes a dupq LSTM or GRU model; a sentence-transformers model folder cannot be adapted."
        )
    texts = list(dict.fromkeys(check_questions(texts)))
    if len(texts) < 2:
        raise DupqError(f"adaptation needs at least 2 distinct questions, got {len(texts)}.")
    if config.quora_pairs and quora is None:
        raise DupqError("--quora-pairs needs the Quora pairs file (--data).")
    out = Path(out)
    cache = Path(cache) if cache is not None else out.with_name(out.name + ".teacher")
    started = time.perf_counter()
    asked = taught = _teach(texts, cache / "questions", encode, teacher_name, progress)
    if config.variants:  # each part a cache of its own: the questions' vectors are kept when --variants changes
        words = _teach(question_words(base.vocab, texts), cache / "words", encode, teacher_name, progress)
        near = neighbours(words.vectors.float().numpy(), config.neighbours)
        made = rewordings(base.vocab, texts, words.texts, near, config.variants, np.random.default_rng(config.seed))
        more = _teach(
            made,
            cache / f"variants-{config.variants}-{config.neighbours}-{config.seed}",
            encode,
            teacher_name,
            progress,
        )
        taught = TeacherCache(asked.texts + more.texts, torch.cat([asked.vectors, more.vectors]), asked.info)
    teacher_seconds = time.perf_counter() - started
    log(f"teacher {teacher_name}: {len(taught):,} questions and rewordings in {teacher_seconds:.0f}s (kept in {cache})")

    vocab = base.vocab
    model = Siamese(
        copy.deepcopy(base.encoder), None, fit_projection(base.encoder, vocab, taught) if config.distil else None
    )
    before = teacher_agreement(model, vocab, asked)
    pairs = None
    if config.quora_pairs:
        duplicates = quora.take(quora.labels == 1)
        pairs = PairBatches(vocab, duplicates, config.batch_size)
    source = QuestionBatches(vocab, taught, config.batch_size, pairs, config.quora_pairs)
    train_config = TrainConfig(
        losses=config.losses(),
        epochs=config.epochs,
        lr=config.lr,
        reduction="mean",
        symmetric=True,
        lr_schedule="cosine",
        seed=config.seed,
        teacher=str(cache),
        bf16=config.bf16,
        chunks=4,
    )
    objective, loss_of = train_config.objective(), Anchored(model, config.anchor)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, fused=True)
    steps_per_epoch = len(source.epoch(np.random.default_rng(0)))
    history, tuning = [], time.perf_counter()
    for epoch in range(config.epochs):
        spent = time.perf_counter() - tuning
        if config.minutes and history and spent + history[-1]["seconds"] > 60 * config.minutes:
            log(f"stopping after {epoch} epochs: another would pass --minutes {config.minutes:g}")
            break
        loss_sum, count, seconds = _train_epoch(
            model, None, optimizer, source, objective, train_config, epoch, steps_per_epoch, progress, loss_of
        )
        if not math.isfinite(loss_sum):
            raise DupqError(f"the adaptation diverged in epoch {epoch + 1} (loss {loss_sum}); try a lower --lr.")
        with torch.no_grad():
            drift = float(loss_of.drift())
        history.append({"epoch": epoch + 1, "train_loss": loss_sum / count, "drift": drift, "seconds": seconds})
        log(
            f"epoch {epoch + 1}/{config.epochs}  loss {loss_sum / count:.4f}  drift {history[-1]['drift']:.4f}  {seconds:.0f}s"
        )
    after = teacher_agreement(model, vocab, asked)
    log(f"cosine to the teacher {before['cosine_to_teacher']:.4f} -> {after['cosine_to_teacher']:.4f}")

    record = {
        "base": {"fingerprint": base.fingerprint(), "folder": str(base.folder) if base.folder else None},
        "teacher": teacher_name,
        "questions": len(texts),
        "rewordings": len(taught) - len(asked),
        "words": unknown_words(vocab, texts),
        "config": asdict(config),
        "steps": steps_per_epoch * len(history),
        "epochs_run": len(history),
        "history": history,
        "before": before,
        "after": after,
        "seconds": {"teacher": teacher_seconds, "fine_tuning": time.perf_counter() - tuning},
        **(info or {}),
    }
    adapted = _adapted_model(base, model.encoder.cpu(), record)
    with new_folder(out) as tmp:
        adapted.save(tmp)
    adapted.folder = out.resolve()
    return adapted


def _teach(texts: list[str], cache: Path, encode: Callable, name: str, progress: bool) -> TeacherCache:
    """The teacher's vectors of ``texts`` in ``cache`` (resumed, or made again when it holds others), with a bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("teacher"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("questions"),
        TimeRemainingColumn(),
        disable=not (progress and sys.stdout.isatty()),
        transient=True,
    ) as bar:
        task = bar.add_task("teach", total=len(texts))

        def encode_with_bar(part: list[str]) -> np.ndarray:
            blocks = []
            for lo in range(0, len(part), 256):
                blocks.append(np.asarray(encode(part[lo : lo + 256]), dtype=np.float32))
                bar.advance(task, len(blocks[-1]))
            return np.concatenate(blocks)

        return teach(texts, cache, encode_with_bar, name, overwrite=True)


def _adapted_model(base: Model, encoder: nn.Module, record: dict[str, Any]) -> Model:
    """The adapted encoder with the base model's vocabulary, pair head, calibration and threshold."""
    metrics = {k: v for k, v in base.metrics.items() if k != "test"}  # the base's test figures are not this model's
    metrics["adaptation"] = record
    return Model(
        base.vocab,
        encoder.eval(),
        threshold=base.threshold,
        threshold_info=base.threshold_info,
        metrics=metrics,
        head=base.head,
        calibration=base.calibration,
        threshold_on=base.threshold_on,
    )
