"""The training loop: a batch source + an objective + Adam, with checkpoints and exact resume.

A run is three parts that do not know each other (STYLE 16):

* the **batch source** (:mod:`dupq.batches`): which pairs, which labels, how batched. The seed
  recipe trains on the duplicates only (``recipe="duplicates"``); the labelled recipe on every
  labelled pair of the training pool (``recipe="labelled"``);
* the **objective** (:mod:`dupq.objectives`): a weighted list of losses (:mod:`dupq.losses`);
* this **loop**: build (or resume) -> per epoch: batches, loss, Adam step -> validation ->
  checkpoint -> at the end, the best epoch's weights as the model folder.

Everything random is derived from ``(seed, epoch)``, and the checkpoint is written after every
epoch, so a run killed at any moment and restarted with ``resume=True`` ends with the same weights
as one never interrupted. The checkpoint is one ``checkpoint.safetensors``: weights, the best
epoch's weights and Adam moments as tensors, the configs, epoch and history as JSON in its
metadata. No pickle anywhere. Weights that are not finite are never written: a diverged run stops
with the last good checkpoint in place.
"""

from __future__ import annotations

import copy
import json
import math
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from safetensors import SafetensorError
from safetensors.torch import load_file, save, safe_open
from torch import nn
import torch.nn.functional as F

from dupq.batches import SOURCES, Batch, PairBatches, duplicate_groups, length_batches
from dupq.data import Splits, labelled_split
from dupq.distributed import World, agree, gather, join, share
from dupq.metrics import best_threshold, threshold_free
from dupq.files import DupqError, atomic_write, remove_stale
from dupq.encoders import ENCODERS, POOLINGS, SENTENCE_TRANSFORMERS
from dupq.model import HEADS, Encoder, EncoderConfig, HeadConfig, Model, PairHead, stored_kind
from dupq.objectives import Objective
from dupq.options import check_options, option
from dupq.teacher import TeacherCache
from dupq.tokenizer import Vocabulary

CHECKPOINT = "checkpoint.safetensors"
RECIPE_LOSSES = {"duplicates": {"triplet": 1.0}, "labelled": {"bce": 1.0, "ranking": 1.0, "triplet": 1.0}}
REDUCTIONS = ("sum", "mean")
LR_SCHEDULES = ("constant", "cosine")
DEVICES = ("cpu", "cuda")
# Options that may differ when a run is resumed: they change how it runs, not what it learns.
RESUMABLE = {"epochs", "threads", "device", "chunks"}  # chunks: the same sums to float rounding (a checkpoint from chunks 4)

__all__ = ["TrainConfig", "ModelOptions", "train", "length_batches", "encode_in_chunks", "check_output_folder"]


@dataclass
class TrainConfig:
    """How the encoder is trained; the defaults are the seed recipe. Each option's help text is its ``dupq train --help``."""

    recipe: str = option("duplicates", "duplicates: the seed's duplicate pairs only; labelled: every labelled pair of the pool.",
                         choices=SOURCES)
    # loss -> weight; empty: the recipe's default. Not an option field: `--loss NAME[:WEIGHT]` is repeated (see dupq.cli.train)
    losses: dict[str, float] = field(default_factory=dict)
    epochs: int = option(5, "Passes over the training pairs.", min=1)
    batch_size: int = option(256, "Pairs per batch (in-batch negatives = batch size - 1).", min=2)
    lr: float = option(0.01, "Adam learning rate.", min=0.0)
    margin: float = option(0.25, "Triplet loss margin (the seed's alpha).")
    # Adam makes sum and mean nearly equivalent for the triplet loss alone; mean weighs it like the other losses
    reduction: str = option("sum", "Triplet loss over a batch: sum (seed) or mean.", choices=REDUCTIONS)
    symmetric: bool = option(False, "Triplet loss in both directions of the similarity matrix (q1 rows as anchors too).")
    scale: float = option(20.0, "Ranking loss: scale of the cosines in its softmax (an inverse temperature).")
    contrastive_margin: float = option(0.5, "(Online) contrastive loss: distance non-duplicates are pushed beyond.")
    mask_false_negatives: bool = option(False, "Leave the anchor's own question and its known duplicates out of its negatives.")
    hard_negatives: bool = option(False, "Per duplicate row, add a question labelled not its duplicate as a negative.")
    lr_schedule: str = option("constant", "constant, or cosine (decay to 0 over the run).", choices=LR_SCHEDULES)
    ema: float = option(0.0, "Keep (validate, save) a moving average of the weights with this decay per step, e.g. 0.999; 0: off.")
    seed: int = option(0, "Random seed (initialisation, shuffling, dropout).")
    # >1 groups similar lengths: faster, but -1.3 test accuracy (negatives as long as the anchor are easier)
    bucket: int = option(1, "Batches per length-sorted bucket (1: random batches, as the seed).", min=1)
    # length-sorted LSTM calls per batch: cuts padding, keeps the batch's questions random. 16 was the fastest
    # of 4/8/16/32 for the labelled recipe on this CPU in float32 (8 under --bf16, 16 within 2 %): RESULTS "What a step costs"
    chunks: int = 16
    bf16: bool = option(False, "Encode under bfloat16 autocast while training: ~2x faster on a CPU with bf16 units; weights and losses stay float32.")
    teacher: str = option("", "Teacher vectors made by `dupq distil teach`, for the distil losses.")
    distil_questions: int = option(0, "Per batch, this many random taught questions seen by the distil losses only.", min=0)
    threads: int = option(0, "CPU threads for torch (0 = default).", min=0)
    device: str = option("cpu", "cpu, or cuda to train on a GPU (bit-exact resume is guaranteed on CPU only).", choices=DEVICES)

    def __post_init__(self) -> None:
        check_options(self)
        if not self.losses:
            self.losses = dict(RECIPE_LOSSES[self.recipe])
        for name in ("lr", "margin", "scale", "contrastive_margin"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise DupqError(f"--{name.replace('_', '-')} must be a finite number, not {value}.")
        if not 0.0 <= self.ema < 1.0:
            raise DupqError(f"--ema must be in [0, 1), not {self.ema}.")
        if self.objective().needs_teacher != bool(self.teacher):
            raise DupqError("the distil losses need --teacher (a folder made by `dupq distil teach`)" if self.teacher == ""
                            else "--teacher is read by the distil losses only; add --loss distil:5 (or distil_matrix) or leave --teacher out.")

    def objective(self) -> Objective:
        return Objective(
            self.losses, self.margin, self.reduction, self.symmetric, self.scale, self.contrastive_margin, self.mask_false_negatives
        )


@dataclass
class ModelOptions:
    """What is built before training: the vocabulary, the encoder and the pair head. Each help text is its ``dupq train --help``."""

    dim: int = option(128, "Embedding and recurrent layer width (the seed's d_feature); cost grows with its square.", min=1)
    lowercase: bool = option(False, "Fold case before the vocabulary lookup.")
    oov_buckets: int = option(0, "Hash unknown words into this many extra ids (0: one shared id, as the seed).", min=0)
    min_count: int = option(1, "Keep words seen at least this often in the vocabulary.", min=1)
    bidirectional: bool = option(False, "Bidirectional recurrent layer: vectors twice as wide, ~2x slower.")
    dropout: float = option(0.0, "Dropout on word embeddings.", min=0.0, max=0.9)
    pooling: str = option("mean", "mean (the seed) or max over the recurrent layer's outputs.", choices=POOLINGS)
    head: str = option("none", "Pair head: none, cosine (a scaled cosine) or mlp (over [|u-v|, u*v, cos]); bce needs one (cosine by default).",
                       choices=("none", *HEADS))
    head_hidden: int = option(256, "Hidden width of the mlp head.", min=1)
    word_init: str = option("", "Start word embeddings from a teacher's vectors of each word: 'teacher' (the packaged MiniLM) "
                                "or a sentence-transformers folder; '': random (the seed).")
    encoder: str = option("lstm", "The question encoder: lstm (the seed) or gru (no cell state: 3/4 of the LSTM's recurrent work).",
                          choices=ENCODERS)

    def __post_init__(self) -> None:
        check_options(self)


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

    def forward(self, batch: Batch, objective: Objective, chunks: int, world: World, bf16: bool = False) -> torch.Tensor:
        """The loss of one batch (:func:`batch_loss`): the call DDP wraps to average gradients over processes."""
        return batch_loss(self, batch, objective, chunks, world, bf16)


def _lr_factor(config: TrainConfig, step: int, total: int) -> float:
    if config.lr_schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * step / max(1, total)))
    return 1.0


def encode_in_chunks(encoder: Encoder, ids: torch.Tensor, lengths: torch.Tensor, chunks: int) -> torch.Tensor:
    """``encoder(ids, lengths)`` computed as ``chunks`` calls on length-sorted slices of the batch.

    A random batch is padded to its longest question (the lengths are long-tailed: mean 11,
    max 237 tokens), so one call spends most of its steps on padding. Sorting the rows by length
    and running each slice at its own width gives the same vectors (to float rounding, ~1e-6) in
    less time (bench/train_step.py measures it), without making the batch's questions (the
    in-batch negatives) share a length.
    """
    if chunks <= 1:
        return encoder(ids, lengths)
    order = torch.argsort(lengths)
    # The batch's own words as a small table: each slice looks up rows of it, so the big embedding
    # table gets one gradient per batch rather than one dense (V, d) gradient per slice.
    words, local = torch.unique(ids, return_inverse=True)
    table = encoder.embedding.weight[words]  # (U, d)
    parts = [encoder.read(F.embedding(local[c, : int(lengths[c].max())], table), lengths[c])
             for c in torch.tensor_split(order, chunks) if len(c)]
    return torch.cat(parts)[torch.argsort(order)]  # (N, d), back in the batch's order


def batch_loss(model: Siamese, batch: Batch, objective: Objective, chunks: int, world: World = World(), bf16: bool = False) -> torch.Tensor:
    """Encode every question of ``batch`` in one (chunked) LSTM pass and apply ``objective``.

    Among several processes (``world``), this one encodes its share of the questions and the
    objective sees every rank's vectors (:func:`dupq.distributed.gather`): the same loss as one process.
    With ``bf16`` the encoder runs under bfloat16 autocast (the weights stay float32) and the
    objective gets float32 vectors, so the similarities and losses keep float32's precision.
    """
    rows = slice(None)
    if world.size > 1:
        rows = share(len(batch.ids), world)
        rows = rows if rows.stop > rows.start else slice(0, 1)  # an empty share encodes a stand-in row, dropped by gather
    with torch.autocast(batch.ids.device.type, dtype=torch.bfloat16, enabled=bf16):
        v = encode_in_chunks(model.encoder, batch.ids[rows], batch.lengths[rows], chunks)  # (n, d)
    v = v.float()
    if world.size > 1:
        v = gather(v, len(batch.ids), world)  # (N, d)
    return objective(v, batch, model.head, model.projection)


@dataclass
class Validation:
    """What one epoch scored on the held-out pairs; ``better`` compares two epochs."""

    loss: float
    accuracy: float | None = None  # at the best threshold on the validation pairs (labelled only)
    roc_auc: float | None = None

    def key(self) -> float:
        return self.accuracy if self.accuracy is not None else -self.loss

    def better(self, other: Validation | None) -> bool:
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
            v = encode_in_chunks(model.encoder, batch.ids, batch.lengths, config.chunks)
            loss = objective(v, batch, model.head, model.projection)
            total += loss.item() * (1 if "triplet" in config.losses and config.reduction == "sum" and len(config.losses) == 1 else len(index))
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


# Checkpoints: one safetensors file, tensors for state, JSON metadata for the rest.


def _finite(state: dict[str, torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in state.values() if t.is_floating_point())


def save_checkpoint(
    path: Path, model: Siamese, best: dict[str, torch.Tensor], optimizer: torch.optim.Optimizer, meta: dict[str, Any],
    ema: Siamese | None = None,
) -> None:
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
    tensors.update({f"best.{k}": v.detach().contiguous() for k, v in best.items()})
    if ema is not None:
        tensors.update({f"ema.{k}": v.detach().contiguous() for k, v in ema.state_dict().items()})
    state = optimizer.state_dict()
    for pid, slots in state["state"].items():
        for name, value in slots.items():
            tensors[f"optim.{pid}.{name}"] = torch.as_tensor(value).contiguous()
    if not _finite(tensors):
        raise DupqError(f"training diverged (weights that are not finite numbers) in epoch {meta['epoch']}; "
                        f"{path} still holds the last good epoch. Lower --lr and start again.")
    meta = {**meta, "param_groups": state["param_groups"]}
    atomic_write(path, save(tensors, metadata={"dupq": json.dumps(meta)}))


def load_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, Any]]:
    """Returns ``(meta, model_state, best_state, optimizer_state)`` from a checkpoint file.

    ``meta["ema_state"]`` holds the moving average's weights when the run keeps one.
    """
    try:
        with safe_open(path, "pt") as f:
            meta = json.loads((f.metadata() or {})["dupq"])
        tensors = load_file(path)
    except (SafetensorError, OSError, KeyError, json.JSONDecodeError) as e:
        raise DupqError(f"the checkpoint {path} is corrupt ({type(e).__name__}: {e}); delete it to start again.") from None
    if not isinstance(meta, dict) or not _finite(tensors):
        raise DupqError(f"the checkpoint {path} is corrupt (weights that are not finite numbers); delete it to start again.")
    model_state = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    best_state = {k.removeprefix("best."): v for k, v in tensors.items() if k.startswith("best.")}
    meta["ema_state"] = {k.removeprefix("ema."): v for k, v in tensors.items() if k.startswith("ema.")}
    slots: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, pid, name = key.split(".", 2)
            slots.setdefault(int(pid), {})[name] = value
    return meta, model_state, best_state, {"state": slots, "param_groups": meta.pop("param_groups")}


def check_output_folder(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse to silently discard the checkpoint of an earlier run in ``out``."""
    if resume and overwrite:
        raise DupqError("--resume continues the checkpoint and --overwrite discards it: pass one of them.")
    if (Path(out) / CHECKPOINT).exists() and not (resume or overwrite):
        raise DupqError(f"{out} already holds a training checkpoint; pass --resume to continue it or --overwrite to start again.")
    if stored_kind(Path(out)) == SENTENCE_TRANSFORMERS:
        raise DupqError(f"{out} holds a sentence-transformers model (dupq distil export), which dupq train can neither resume "
                        f"nor replace; write the LSTM to another --out.")


def _check_resume(meta: dict[str, Any], config: TrainConfig, options: ModelOptions, split: dict[str, Any] | None) -> None:
    """Refuse to resume with options that differ from the checkpoint's, naming the first one."""
    asked = {**asdict(config), **{f"model.{k}": v for k, v in asdict(options).items()}}
    stored = {**meta.get("train", {}), **{f"model.{k}": v for k, v in meta.get("options", {}).items()}}
    if split is not None and meta.get("split") is not None:
        asked.update({f"split.{k}": v for k, v in split.items()})
        stored.update({f"split.{k}": v for k, v in meta["split"].items()})
    for name, value in asked.items():
        if name in RESUMABLE or name not in stored:
            continue
        if stored[name] != value:
            option = name.split(".")[-1].replace("_", "-")
            raise DupqError(
                f"--resume with --{option} {value} but the checkpoint was trained with {stored[name]}; "
                f"resume with the same options (only --epochs, --threads and --device may change) or start again with --overwrite."
            )


def load_teacher_cache(config: TrainConfig, split: dict[str, Any] | None) -> TeacherCache | None:
    """The run's teacher vectors, refused when they were taught on another cut of the data."""
    if not config.teacher:
        return None
    cache = TeacherCache.load(config.teacher)
    taught_on, trained_on = cache.info.get("split") or {}, split or {}
    for key, option in (("train_pool", "--train-pool"), ("test", "--test-size"), ("dev", "--dev-size")):
        if key in taught_on and key in trained_on and taught_on[key] != trained_on[key]:
            raise DupqError(f"the teacher vectors in {config.teacher} were taught with {option} {taught_on[key]}, "
                            f"this run uses {trained_on[key]}; teach again with the run's split (its test and dev questions must stay untaught).")
    return cache


def batch_sources(
    splits: Splits, config: TrainConfig, vocab: Vocabulary, split: dict[str, Any] | None, teacher: TeacherCache | None = None
) -> tuple[PairBatches, PairBatches, str]:
    """The training and validation batch sources of the recipe, and a line saying what they hold."""
    if config.recipe == "labelled":
        train_pairs, val_pairs = labelled_split(splits.pool, (split or {}).get("labelled_val", 10_240))
    else:
        train_pairs, val_pairs = splits.train, splits.val
    groups = None
    if config.mask_false_negatives:
        texts = list(dict.fromkeys(train_pairs.q1 + train_pairs.q2 + val_pairs.q1 + val_pairs.q2))
        groups = duplicate_groups(texts, train_pairs.q1, train_pairs.q2, train_pairs.labels)
    hard = splits.pool.take(splits.pool.labels == 0) if config.hard_negatives else None
    if hard is not None and config.recipe == "labelled":
        hard = hard.take(np.isin(hard.rows, train_pairs.rows))  # never a validation pair's question
    train_source = PairBatches(vocab, train_pairs, config.batch_size, config.bucket, groups, hard, teacher, config.distil_questions)
    val_source = PairBatches(vocab, val_pairs, config.batch_size, config.bucket, groups, teacher=teacher)
    duplicates = int(train_pairs.labels.sum())
    line = f"train {len(train_pairs):,} pairs ({duplicates:,} duplicates) | validation {len(val_pairs):,} pairs"
    if train_source.partners is not None:
        line += f" | {train_source.partners.covered():,} training pairs have a labelled non-duplicate"
    if teacher is not None:
        line += f" | {len(teacher):,} teacher vectors ({teacher.info.get('teacher', '?')})"
    return train_source, val_source, line


def build_vocabulary(splits: Splits, config: TrainConfig, options: ModelOptions, split: dict[str, Any] | None) -> Vocabulary:
    if config.recipe == "labelled":
        pairs, _ = labelled_split(splits.pool, (split or {}).get("labelled_val", 10_240))
    else:
        pairs = splits.pool.take(splits.pool.labels == 1)
    return Vocabulary.build(pairs.q1 + pairs.q2, lowercase=options.lowercase, oov_buckets=options.oov_buckets, min_count=options.min_count)


def build_model(vocab: Vocabulary, config: TrainConfig, options: ModelOptions, teacher_dim: int | None = None) -> Siamese:
    torch.manual_seed(config.seed)
    encoder = ENCODERS[options.encoder](EncoderConfig(len(vocab), options.dim, options.bidirectional, options.dropout, options.pooling))
    head = None
    if options.head != "none" or config.objective().needs_head:
        kind = "cosine" if options.head == "none" else options.head
        head = PairHead(HeadConfig(kind, encoder.config.out_dim, options.head_hidden))
    projection = None
    if "distil" in config.losses:
        if teacher_dim is None:
            raise ValueError("the distil loss needs the teacher's width for its projection")
        projection = nn.Linear(encoder.config.out_dim, teacher_dim, bias=False)
    return Siamese(encoder, head, projection)


def init_word_embeddings(encoder: Encoder, vocab: Vocabulary, teacher: str, log: Callable[[str], None]) -> None:
    """Start the vocabulary's words (not padding, unknown ids or buckets) from the teacher's word vectors.

    ``teacher`` is "teacher" (the packaged all-MiniLM-L6-v2) or a sentence-transformers folder;
    see :func:`dupq.teacher.word_vectors`. The scale matches the random start it replaces.
    """
    from dupq.teacher import load_teacher, word_vectors

    encode, name = load_teacher(None if teacher == "teacher" else teacher)
    first = 2  # ids 0 (padding) and 1 (unknown) are not words
    words = vocab.tokens[first:]
    weight = encoder.embedding.weight  # (V + buckets, d)
    start = time.perf_counter()
    vectors = word_vectors(words, encode, weight.shape[1], float(weight[first:].detach().pow(2).mean().sqrt()))
    with torch.no_grad():
        weight[first : first + len(words)] = torch.from_numpy(vectors)
    log(f"word embeddings of {len(words):,} words start from {name}'s vectors ({time.perf_counter() - start:.0f} s)")


@dataclass
class _RunState:
    """Where a run stands: built fresh, or read back from its checkpoint."""

    vocab: Vocabulary
    model: Siamese
    history: list[dict[str, Any]] = field(default_factory=list)
    start_epoch: int = 0
    optim_state: dict[str, Any] | None = None
    best_state: dict[str, torch.Tensor] = field(default_factory=dict)
    best_epoch: int = 0
    best_val: Validation | None = None
    ema_state: dict[str, torch.Tensor] = field(default_factory=dict)


def _check_device(name: str) -> None:
    try:
        device = torch.device(name)
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError):
        raise DupqError(f"the device {name!r} cannot be used here; use cpu, or cuda with a GPU.") from None
    if device.type not in ("cpu", "cuda"):
        raise DupqError(f"unknown device {name!r}; use cpu or cuda.")


def _begin(splits: Splits, out: Path, config: TrainConfig, options: ModelOptions, resume: bool, split: dict[str, Any] | None,
           teacher_dim: int | None, log: Callable[[str], None], world: World = World()) -> _RunState:
    """Resume the checkpoint in ``out`` (``resume``) or build the vocabulary and model afresh.

    Every rank builds the same vocabulary from the same data (the build is deterministic); rank 0 writes it.
    """
    ckpt_path = out / CHECKPOINT
    if not (resume and ckpt_path.exists()):
        vocab = build_vocabulary(splits, config, options, split)
        if world.master:
            out.mkdir(parents=True, exist_ok=True)
            vocab.save(out / "vocab.json")
        model = build_model(vocab, config, options, teacher_dim)
        if options.word_init:  # every rank computes the same start (the teacher's vectors are deterministic here)
            init_word_embeddings(model.encoder, vocab, options.word_init, log)
        return _RunState(vocab, model)
    meta, model_state, best_state, optim_state = load_checkpoint(ckpt_path)
    _check_resume(meta, config, options, split)
    vocab = Vocabulary.load(out / "vocab.json")
    model = build_model(vocab, config, options, teacher_dim)
    try:
        model.load_state_dict(model_state)
    except RuntimeError as e:
        raise DupqError(f"the checkpoint {ckpt_path} does not fit this run ({str(e).strip().splitlines()[0]}); start again with --overwrite.") from None
    log(f"resuming {ckpt_path} after epoch {meta['epoch']}")
    return _RunState(
        vocab, model, meta["history"], meta["epoch"], optim_state, best_state, meta.get("best_epoch", meta["epoch"]),
        Validation(**meta["best_val"]) if meta.get("best_val") else None, meta["ema_state"],
    )


def _train_epoch(
    model: Siamese, ema: Siamese | None, optimizer: torch.optim.Optimizer, source: PairBatches, objective: Objective,
    config: TrainConfig, epoch: int, steps_per_epoch: int, progress: bool, loss_of: nn.Module | None = None, world: World = World(),
) -> tuple[float, int, float]:
    """One pass over the training pairs; returns ``(summed loss, pairs, seconds)``.

    ``loss_of`` computes a batch's loss: ``model`` itself, or its DDP wrapper among several processes
    (``world``), where every rank draws the same batches and its own dropout masks.
    """
    loss_of = loss_of or model
    rng = np.random.default_rng([config.seed, epoch])  # the same batches on every rank
    torch.manual_seed(config.seed * 100_003 + epoch + 1_000_003 * world.rank)  # dropout masks, independent of any resume
    batches = source.epoch(rng)
    model.train()
    loss_sum, pairs, started = 0.0, 0, time.perf_counter()
    per_pair = config.reduction == "sum" and config.losses == {"triplet": 1.0}  # the seed's summed loss, shown per pair
    with Progress(
        TextColumn(f"epoch {epoch + 1}/{config.epochs}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} batches | loss {task.fields[loss]:.4f} | {task.fields[speed]:,.0f} pairs/s"),
        TimeRemainingColumn(),
        disable=not (progress and sys.stdout.isatty()),  # no bar (nor its blank line) in logs
        transient=True,
    ) as bar:
        task = bar.add_task("train", total=len(batches), loss=float("nan"), speed=0.0)
        for step, index in enumerate(batches):
            for group in optimizer.param_groups:
                group["lr"] = config.lr * _lr_factor(config, epoch * steps_per_epoch + step, steps_per_epoch * config.epochs)
            batch = source.batch(index, rng).to(config.device)
            loss = loss_of(batch, objective, config.chunks, world, config.bf16)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if ema is not None:
                with torch.no_grad():
                    for average, weight in zip(ema.parameters(), model.parameters()):
                        average.lerp_(weight, 1.0 - config.ema)
            loss_sum += loss.item() * (1 if per_pair else len(index))
            pairs += len(index)
            bar.update(task, advance=1, loss=loss_sum / pairs, speed=pairs / (time.perf_counter() - started))
    return loss_sum, pairs, time.perf_counter() - started


def _record_epoch(state: _RunState, kept: Siamese, val: Validation, epoch: int, config: TrainConfig,
                  loss_sum: float, pairs: int, seconds: float, log: Callable[[str], None]) -> None:
    """Append the epoch to the history, keep its weights if it is the best so far, and log one line."""
    record = {"epoch": epoch + 1, "train_loss": loss_sum / pairs, "val_loss": val.loss, "pairs_per_s": pairs / seconds, "seconds": seconds}
    shown = f"epoch {epoch + 1}/{config.epochs}  train loss {record['train_loss']:.4f}  val loss {val.loss:.4f}"
    if val.accuracy is not None:
        record.update(val_accuracy=val.accuracy, val_roc_auc=val.roc_auc)
        shown += f"  val accuracy {val.accuracy:.4f}  val ROC-AUC {val.roc_auc:.4f}"
    state.history.append(record)
    if val.better(state.best_val):
        state.best_val, state.best_epoch = val, epoch + 1
        state.best_state = {k: v.detach().clone() for k, v in kept.state_dict().items()}
    log(f"{shown}  {record['pairs_per_s']:,.0f} pairs/s  {seconds:.1f}s" + ("  (best)" if state.best_epoch == epoch + 1 else ""))


def _finish(state: _RunState, out: Path, config: TrainConfig, options: ModelOptions, train_pairs: int, val_pairs: int,
            extra_info: dict[str, Any] | None, world: World = World()) -> Model:
    """The best epoch's weights as a model folder in ``out`` (written by rank 0)."""
    model = state.model
    if state.best_state:
        model.load_state_dict(state.best_state)
    info = {
        "train": asdict(config),
        "options": asdict(options),
        "encoder": asdict(model.encoder.config),
        "lowercase": state.vocab.lowercase,
        "vocab_size": len(state.vocab),
        "train_pairs": train_pairs,
        "val_pairs": val_pairs,
        "history": state.history,
        "best_epoch": state.best_epoch,
        **(extra_info or {}),
    }
    model.cpu()
    result = Model(state.vocab, model.encoder, metrics={"training": info}, head=model.head,
                   threshold_on="probability" if model.head is not None and model.head.config.kind == "mlp" else "similarity")
    if result.threshold_on == "probability":
        result.threshold, result.threshold_info = 0.5, {"chosen_on": "the default for a probability, until calibrated on dev"}
    if world.master:
        result.save(out)
    return result


def train(
    splits: Splits,
    out: str | Path,
    config: TrainConfig | None = None,
    options: ModelOptions | None = None,
    resume: bool = False,
    overwrite: bool = False,
    extra_info: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
    progress: bool = True,
    split: dict[str, Any] | None = None,
    **option_overrides: Any,
) -> Model:
    """Train on ``splits`` with ``config`` (the recipe) and ``options`` (what is built); save the model in ``out``.

    ``option_overrides`` are :class:`ModelOptions` fields (``dim=32``) for short calls. ``split``
    records how the data was cut, so that a resume on another cut is refused. Writes
    ``out/vocab.json`` and ``out/checkpoint.safetensors`` as it goes and the model folder (the best
    epoch's weights) at the end. Returns the trained :class:`Model`.

    Under ``torchrun`` (``WORLD_SIZE`` > 1) every process calls this with the same arguments and
    trains on its share of each batch (:mod:`dupq.distributed`); rank 0 alone writes and logs, and
    every rank returns the same model once the folder is written.
    """
    out = Path(out)
    config = config or TrainConfig()
    options = ModelOptions(**{**asdict(options or ModelOptions()), **option_overrides})
    world = World.from_env()
    check_output_folder(out, resume, overwrite)
    _check_device(config.device)
    joined = join(world, config.device)
    try:
        return _run(splits, out, config, options, resume, split, extra_info, log if world.master else _silent, progress and world.master, world)
    finally:
        if joined:
            torch.distributed.destroy_process_group()


def _silent(_: str) -> None:
    """The log of a rank other than 0."""


def _run(splits: Splits, out: Path, config: TrainConfig, options: ModelOptions, resume: bool, split: dict[str, Any] | None,
         extra_info: dict[str, Any] | None, log: Callable[[str], None], progress: bool, world: World) -> Model:
    """:func:`train` once its arguments are checked and this process has joined its group."""
    if world.master:
        remove_stale(out)  # temporary files of a writer killed mid-write (a checkpoint being saved)
    teacher = load_teacher_cache(config, split)
    state = _begin(splits, out, config, options, resume, split, teacher.dim if teacher is not None else None, log, world)
    agree(world, [state.start_epoch, len(state.vocab), zlib.crc32("\n".join(state.vocab.tokens).encode())],
          "starts from another epoch or vocabulary")
    if config.threads:
        torch.set_num_threads(config.threads)
    train_source, val_source, line = batch_sources(splits, config, state.vocab, split, teacher)
    buckets = f" + {state.vocab.oov_buckets:,} unknown-word buckets" if state.vocab.oov_buckets else ""
    log(f"vocabulary: {len(state.vocab.tokens):,} words{buckets} | {line}" + (f" | {world.size} processes" if world.size > 1 else ""))

    model, objective = state.model.to(config.device), config.objective()
    ema = None
    if config.ema:  # Polyak averaging: the average of the weights along the run generalises better than its end
        ema = copy.deepcopy(model)
        if state.ema_state:
            ema.load_state_dict(state.ema_state)
        ema.requires_grad_(False)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, fused=True)
    if state.optim_state is not None:
        optimizer.load_state_dict(state.optim_state)
    loss_of = distributed_loss(model, config, world)
    steps_per_epoch = len(train_source.epoch(np.random.default_rng(0)))
    for epoch in range(state.start_epoch, config.epochs):
        loss_sum, pairs, seconds = _train_epoch(model, ema, optimizer, train_source, objective, config, epoch, steps_per_epoch, progress, loss_of, world)
        kept = ema if ema is not None else model  # the weights that are validated and saved
        _record_epoch(state, kept, validate(kept, val_source, config), epoch, config, loss_sum, pairs, seconds, log)
        meta = {
            "epoch": epoch + 1, "history": state.history, "train": asdict(config), "options": asdict(options), "split": split,
            "best_epoch": state.best_epoch, "best_val": asdict(state.best_val),
        }
        if world.master:
            save_checkpoint(out / CHECKPOINT, model, state.best_state, optimizer, meta, ema)
    result = _finish(state, out, config, options, len(train_source), len(val_source), extra_info, world)
    if world.size > 1:
        torch.distributed.barrier()  # the folder is written when train() returns, on every rank
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
