"""Training the Siamese encoder on duplicate pairs with in-batch negatives (seed 002, part 3).

Reads top to bottom: build (or resume) -> per epoch: length-bucketed shuffled batches, triplet
loss, Adam step -> validation loss -> checkpoint -> model folder. Everything random is derived
from ``(seed, epoch)``, and the checkpoint is written after every epoch, so a run killed at any
moment and restarted with ``resume=True`` ends with the same weights as one never interrupted.

The checkpoint is a single ``checkpoint.safetensors``: model weights and Adam moments as
tensors, the configs, epoch and history as JSON in its metadata. No pickle anywhere.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from safetensors import SafetensorError
from safetensors.torch import load_file, save, safe_open

from dupq.data import Pairs, Splits
from dupq.files import DupqError, atomic_write
from dupq.losses import triplet_loss
from dupq.model import Encoder, EncoderConfig, Model, pad_pair
from dupq.tokenizer import Encoded, Vocabulary

CHECKPOINT = "checkpoint.safetensors"


@dataclass
class TrainConfig:
    """How the encoder is trained; the defaults are the seed recipe."""

    epochs: int = 5  # passes over the training duplicates
    batch_size: int = 256  # pairs per batch; each row sees batch_size - 1 in-batch negatives
    lr: float = 0.01  # Adam learning rate
    margin: float = 0.25  # the triplet loss' alpha
    reduction: str = "sum"  # "sum" over the batch (seed) or "mean"; Adam makes them nearly equivalent
    symmetric: bool = False  # also use q1 rows as anchors (both directions of the similarity matrix)
    extra_negatives: int = 0  # non-duplicate pool pairs per batch whose questions join as negative columns
    partner_negatives: bool = False  # per row, one question labelled *not* a duplicate of it joins as a column
    lr_schedule: str = "constant"  # "constant" or "cosine" (decay to 0 over the run)
    seed: int = 0  # seeds initialisation, shuffling and dropout
    bucket: int = 1  # batches per length-sorted bucket; >1 groups similar lengths (faster, but -1.3 test accuracy)
    chunks: int = 4  # length-sorted LSTM calls per batch: cuts padding, keeps the batch's questions random
    threads: int = 0  # torch CPU threads; 0 = torch's default
    device: str = "cpu"  # "cuda" trains on a GPU (bit-exact resume is guaranteed on CPU only)


def length_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator, bucket: int) -> list[np.ndarray]:
    """Shuffled batches of indices whose members have similar lengths.

    Shuffle, cut into buckets of ``bucket * batch_size``, sort each bucket by length, cut it into
    batches, and shuffle the batch order. Batches smaller than 2 are dropped (no negatives).
    """
    order = rng.permutation(len(lengths))
    batches = []
    span = max(1, bucket) * batch_size
    for start in range(0, len(order), span):
        chunk = order[start : start + span]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    batches = [b for b in batches if len(b) >= 2]
    return [batches[i] for i in rng.permutation(len(batches))]


def _lr_factor(config: TrainConfig, step: int, total: int) -> float:
    if config.lr_schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * step / max(1, total)))
    return 1.0


class EncodedPairs:
    """The two encoded sides of a set of pairs."""

    def __init__(self, vocab: Vocabulary, q1: list[str], q2: list[str]):
        self.q1: Encoded = vocab.encode(q1)
        self.q2: Encoded = vocab.encode(q2)
        self.lengths = np.maximum(self.q1.lengths, self.q2.lengths)

    def __len__(self) -> int:
        return len(self.q1)


class _Partners:
    """Hard negatives from the labelled non-duplicate pairs of the pool, one per training row.

    Row i's partner is a question labelled *not* a duplicate of ``q1[i]`` or ``q2[i]`` (a near
    miss, the kind the test pairs are full of); a row whose questions have none gets a random
    non-duplicate question. They are appended as columns of the similarity matrix.
    """

    def __init__(self, vocab: Vocabulary, non_duplicates: Pairs, train_q1: list[str], train_q2: list[str]):
        texts = list(dict.fromkeys(non_duplicates.q1 + non_duplicates.q2))
        position = {t: i for i, t in enumerate(texts)}
        partners: dict[str, list[int]] = {}
        for a, b in zip(non_duplicates.q1, non_duplicates.q2):
            partners.setdefault(a, []).append(position[b])
            partners.setdefault(b, []).append(position[a])
        self.encoded = vocab.encode(texts)
        self.options = [partners.get(a, []) + partners.get(b, []) for a, b in zip(train_q1, train_q2)]

    def __len__(self) -> int:
        return sum(1 for o in self.options if o)

    def pick(self, index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        chosen = rng.integers(0, len(self.encoded), size=len(index))  # random fallbacks
        for row, i in enumerate(index):
            if self.options[i]:
                chosen[row] = self.options[i][rng.integers(len(self.options[i]))]
        return chosen


def encode_in_chunks(encoder: Encoder, ids: torch.Tensor, lengths: torch.Tensor, chunks: int) -> torch.Tensor:
    """``encoder(ids, lengths)`` computed as ``chunks`` calls on length-sorted slices of the batch.

    A random batch is padded to its longest question (the lengths are long-tailed: mean 11,
    max 237 tokens), so one call spends most of its steps on padding. Sorting the rows by length
    and running each slice at its own width gives the same vectors at ~5x the speed on CPU,
    without making the batch's questions (the in-batch negatives) share a length.
    """
    if chunks <= 1:
        return encoder(ids, lengths)
    order = torch.argsort(lengths)
    parts = [encoder(ids[c, : int(lengths[c].max())], lengths[c]) for c in torch.tensor_split(order, chunks) if len(c)]
    return torch.cat(parts)[torch.argsort(order)]  # (N, d), back in the batch's order


def _negative_columns(
    negatives: Encoded | None, partners: _Partners | None, index: np.ndarray, rng: np.random.Generator, config: TrainConfig
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The batch's extra negative questions as one padded ``(M, L)`` block and lengths, or None."""
    blocks = []
    if negatives is not None:
        blocks.append(negatives.padded(rng.choice(len(negatives), size=2 * config.extra_negatives, replace=False)))
    if partners is not None:
        blocks.insert(0, partners.encoded.padded(partners.pick(index, rng)))  # partners first, as columns B..2B-1
    if not blocks:
        return None
    width = max(ids.shape[1] for ids, _ in blocks)
    ids = np.concatenate([np.pad(ids, ((0, 0), (0, width - ids.shape[1]))) for ids, _ in blocks])  # (M, L)
    lengths = np.concatenate([lengths for _, lengths in blocks])  # (M,)
    return torch.from_numpy(ids).to(config.device), torch.from_numpy(lengths).to(config.device)


def batch_loss(encoder: Encoder, data: EncodedPairs, index: np.ndarray, config: TrainConfig, negatives=None):
    ids, lengths = pad_pair(data.q1, data.q2, index)  # (2B, L), (2B,)
    v = encode_in_chunks(encoder, ids.to(config.device), lengths.to(config.device), config.chunks)  # (2B, d)
    b = len(index)
    neg = None
    if negatives is not None:
        neg = encode_in_chunks(encoder, *negatives, config.chunks)  # (M, d)
    return triplet_loss(v[:b], v[b:], config.margin, config.reduction, config.symmetric, neg)


def _evaluate_loss(encoder: Encoder, data: EncodedPairs, config: TrainConfig) -> float:
    """Mean loss per pair on fixed, seed-independent validation batches."""
    encoder.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for index in length_batches(data.lengths, config.batch_size, np.random.default_rng(12345), config.bucket):
            loss = batch_loss(encoder, data, index, config)
            total += loss.item() * (1 if config.reduction == "sum" else len(index))
            count += len(index)
    return total / max(count, 1)


# Checkpoints: one safetensors file, tensors for state, JSON metadata for the rest.


def save_checkpoint(path: Path, encoder: Encoder, optimizer: torch.optim.Optimizer, meta: dict[str, Any]) -> None:
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in encoder.state_dict().items()}
    state = optimizer.state_dict()
    for pid, slots in state["state"].items():
        for name, value in slots.items():
            tensors[f"optim.{pid}.{name}"] = torch.as_tensor(value).contiguous()
    meta = {**meta, "param_groups": state["param_groups"]}
    atomic_write(path, save(tensors, metadata={"dupq": json.dumps(meta)}))


def load_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, Any]]:
    """Returns ``(meta, model_state, optimizer_state)`` from a checkpoint file."""
    try:
        with safe_open(path, "pt") as f:
            meta = json.loads((f.metadata() or {})["dupq"])
        tensors = load_file(path)
    except (SafetensorError, OSError, KeyError, json.JSONDecodeError) as e:
        raise DupqError(f"the checkpoint {path} is corrupt ({type(e).__name__}: {e}); delete it to start again.") from None
    model_state = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    slots: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, pid, name = key.split(".", 2)
            slots.setdefault(int(pid), {})[name] = value
    return meta, model_state, {"state": slots, "param_groups": meta.pop("param_groups")}


def check_output_folder(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse to silently discard the checkpoint of an earlier run in ``out``."""
    if (Path(out) / CHECKPOINT).exists() and not (resume or overwrite):
        raise DupqError(f"{out} already holds a training checkpoint; pass --resume to continue it or --overwrite to start again.")


def train(
    splits: Splits,
    out: str | Path,
    config: TrainConfig | None = None,
    dim: int = 128,
    lowercase: bool = False,
    oov_buckets: int = 0,
    min_count: int = 1,
    bidirectional: bool = False,
    dropout: float = 0.0,
    resume: bool = False,
    overwrite: bool = False,
    extra_info: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> Model:
    """Train an encoder on ``splits.train`` (validating on ``splits.val``) and save it in ``out``.

    Writes ``out/vocab.json`` and ``out/checkpoint.safetensors`` as it goes and the model folder
    files at the end. Returns the trained :class:`Model`.
    """
    out = Path(out)
    ckpt_path = out / CHECKPOINT
    check_output_folder(out, resume, overwrite)
    if resume and ckpt_path.exists():
        meta, model_state, optim_state = load_checkpoint(ckpt_path)
        config = TrainConfig(**{**asdict(TrainConfig()), **meta["train"], "epochs": (config or TrainConfig()).epochs, "device": (config or TrainConfig()).device})
        vocab = Vocabulary.load(out / "vocab.json")
        encoder = Encoder(EncoderConfig(**meta["encoder"]))
        encoder.load_state_dict(model_state)
        history, start_epoch = meta["history"], meta["epoch"]
        log(f"resuming {ckpt_path} after epoch {start_epoch}")
    else:
        config = config or TrainConfig()
        pool_dups = splits.pool.take(splits.pool.labels == 1)
        vocab = Vocabulary.build(pool_dups.q1 + pool_dups.q2, lowercase=lowercase, oov_buckets=oov_buckets, min_count=min_count)
        out.mkdir(parents=True, exist_ok=True)
        vocab.save(out / "vocab.json")
        torch.manual_seed(config.seed)
        encoder = Encoder(EncoderConfig(len(vocab), dim=dim, bidirectional=bidirectional, dropout=dropout))
        history, start_epoch, optim_state = [], 0, None
    if config.threads:
        torch.set_num_threads(config.threads)
    try:
        device = torch.device(config.device)
    except RuntimeError:
        raise DupqError(f"unknown device {config.device!r}; use cpu or cuda.") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DupqError("--device cuda was asked for but torch sees no CUDA GPU here.")
    buckets = f" + {vocab.oov_buckets:,} unknown-word buckets" if vocab.oov_buckets else ""
    log(f"vocabulary: {len(vocab.tokens):,} words{buckets} | train {len(splits.train):,} pairs | validation {len(splits.val):,} pairs")

    train_data = EncodedPairs(vocab, splits.train.q1, splits.train.q2)
    val_data = EncodedPairs(vocab, splits.val.q1, splits.val.q2)
    negatives = partners = None
    if config.extra_negatives or config.partner_negatives:
        pool_neg = splits.pool.take(splits.pool.labels == 0)
    if config.extra_negatives:
        negatives = vocab.encode(pool_neg.q1 + pool_neg.q2)
    if config.partner_negatives:
        partners = _Partners(vocab, pool_neg, splits.train.q1, splits.train.q2)
        log(f"partner negatives: {len(partners):,} of {len(splits.train):,} training pairs have a labelled non-duplicate")
    encoder.to(config.device)
    optimizer = torch.optim.Adam(encoder.parameters(), lr=config.lr, fused=True)
    if optim_state is not None:
        optimizer.load_state_dict(optim_state)
    steps_per_epoch = len(length_batches(train_data.lengths, config.batch_size, np.random.default_rng(0), config.bucket))
    total_steps = steps_per_epoch * config.epochs

    for epoch in range(start_epoch, config.epochs):
        rng = np.random.default_rng([config.seed, epoch])
        torch.manual_seed(config.seed * 100_003 + epoch)  # dropout masks, independent of any resume
        batches = length_batches(train_data.lengths, config.batch_size, rng, config.bucket)
        encoder.train()
        loss_sum, pairs, started = 0.0, 0, time.perf_counter()
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
                    group["lr"] = config.lr * _lr_factor(config, epoch * steps_per_epoch + step, total_steps)
                neg = _negative_columns(negatives, partners, index, rng, config)
                loss = batch_loss(encoder, train_data, index, config, neg)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                loss_sum += loss.item() * (1 if config.reduction == "sum" else len(index))
                pairs += len(index)
                speed = pairs / (time.perf_counter() - started)
                bar.update(task, advance=1, loss=loss_sum / pairs, speed=speed)
        seconds = time.perf_counter() - started
        val_loss = _evaluate_loss(encoder, val_data, config)
        record = {
            "epoch": epoch + 1,
            "train_loss": loss_sum / pairs,
            "val_loss": val_loss,
            "pairs_per_s": pairs / seconds,
            "seconds": seconds,
        }
        history.append(record)
        log(
            f"epoch {epoch + 1}/{config.epochs}  train loss {record['train_loss']:.4f}  "
            f"val loss {val_loss:.4f}  {record['pairs_per_s']:,.0f} pairs/s  {seconds:.1f}s"
        )
        meta = {"epoch": epoch + 1, "history": history, "train": asdict(config), "encoder": asdict(encoder.config)}
        save_checkpoint(ckpt_path, encoder, optimizer, meta)

    info = {
        "train": asdict(config),
        "encoder": asdict(encoder.config),
        "lowercase": vocab.lowercase,
        "vocab_size": len(vocab),
        "train_pairs": len(splits.train),
        "val_pairs": len(splits.val),
        "history": history,
        **(extra_info or {}),
    }
    model = Model(vocab, encoder.cpu(), metrics={"training": info})
    model.save(out)
    return model
