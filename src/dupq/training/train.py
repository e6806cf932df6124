"""The training loop: a batch source + an objective + Adam, with checkpoints and exact resume.

A run is three parts that do not know each other:

* the **batch source** (:mod:`dupq.training.batches`): which pairs, which labels, how batched. The seed
  recipe trains on the duplicates only (``train_on="duplicates"``); the labelled recipe on every
  labelled pair of the training pool (``train_on="labelled"``);
* the **objective** (:mod:`dupq.training.objectives`): a weighted list of losses (:mod:`dupq.training.losses`);
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
from torch import nn

from dupq.core.files import DupqError, remove_stale
from dupq.data.pairs import Splits
from dupq.data.wordpiece import AnyVocabulary, load_vocabulary
from dupq.modeling.model import Model
from dupq.modeling.verdict import judging_before_calibration
from dupq.training.batches import PairBatches
from dupq.training.checkpoint import _check_resume, check_output_folder, load_checkpoint, save_checkpoint
from dupq.training.config import CHECKPOINT, ModelOptions, TrainConfig
from dupq.training.distributed import World, agree, join, start_fingerprints
from dupq.training.objectives import Objective
from dupq.training.setup import (
    _check_device,
    batch_sources,
    build_model,
    build_vocabulary,
    init_word_embeddings,
    load_teacher_cache,
)
from dupq.training.step import Siamese, Update, Validation, _lr_factor, distributed_loss, param_groups, validate

# Checkpoints: one safetensors file, tensors for state, JSON metadata for the rest.


@dataclass
class _RunState:
    """Where a run stands: built fresh, or read back from its checkpoint."""

    vocab: AnyVocabulary
    model: Siamese
    history: list[dict[str, Any]] = field(default_factory=list)
    start_epoch: int = 0
    optim_state: dict[str, Any] | None = None
    best_state: dict[str, torch.Tensor] = field(default_factory=dict)
    best_epoch: int = 0
    best_val: Validation | None = None
    ema_state: dict[str, torch.Tensor] = field(default_factory=dict)


def _begin(
    splits: Splits,
    out: Path,
    config: TrainConfig,
    options: ModelOptions,
    resume: bool,
    split: dict[str, Any] | None,
    teacher_dim: int | None,
    log: Callable[[str], None],
    world: World = World(),
) -> _RunState:
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
    vocab = load_vocabulary(out / "vocab.json")
    if vocab.kind != options.tokenizer:  # a checkpoint from before the option records none
        raise DupqError(
            f"--resume with tokenizer {options.tokenizer} but {out / 'vocab.json'} holds {vocab.kind}; "
            f"resume with the same options or start again with --overwrite."
        )
    model = build_model(vocab, config, options, teacher_dim)
    try:
        model.load_state_dict(model_state)
    except RuntimeError as e:
        raise DupqError(
            f"the checkpoint {ckpt_path} does not fit this run ({str(e).strip().splitlines()[0]}); start again with --overwrite."
        ) from None
    log(f"resuming {ckpt_path} after epoch {meta['epoch']}")
    return _RunState(
        vocab,
        model,
        meta["history"],
        meta["epoch"],
        optim_state,
        best_state,
        meta.get("best_epoch", meta["epoch"]),
        Validation(**meta["best_val"]) if meta.get("best_val") else None,
        meta["ema_state"],
    )


def _train_epoch(
    model: Siamese,
    ema: Siamese | None,
    update: Update,
    source: PairBatches,
    objective: Objective,
    config: TrainConfig,
    epoch: int,
    steps_per_epoch: int,
    progress: bool,
    loss_of: nn.Module | None = None,
    world: World = World(),
) -> tuple[float, int, float]:
    """One pass over the training pairs; returns ``(summed loss, pairs, seconds)``.

    ``loss_of`` computes a batch's loss: ``model`` itself, or its DDP wrapper among several processes
    (``world``), where every rank draws the same batches and its own dropout masks.
    """
    loss_of = loss_of or model
    rng = np.random.default_rng([config.seed, epoch])  # the same batches on every rank
    torch.manual_seed(
        config.seed * 100_003 + epoch + 1_000_003 * world.rank
    )  # dropout masks, independent of any resume
    batches = source.epoch(rng)
    model.train()
    loss_sum, pairs, started = 0.0, 0, time.perf_counter()
    with Progress(
        TextColumn(f"epoch {epoch + 1}/{config.epochs}"),
        BarColumn(),
        TextColumn(
            "{task.completed}/{task.total} batches | loss {task.fields[loss]:.4f} | {task.fields[speed]:,.0f} pairs/s"
        ),
        TimeRemainingColumn(),
        disable=not (progress and sys.stdout.isatty()),  # no bar (nor its blank line) in logs
        transient=True,
    ) as bar:
        task = bar.add_task("train", total=len(batches), loss=float("nan"), speed=0.0)
        for step, index in enumerate(batches):
            for group in update.optimizer.param_groups:
                group["lr"] = (
                    config.lr
                    * group.get("share", 1.0)
                    * _lr_factor(config, epoch * steps_per_epoch + step, steps_per_epoch * config.epochs)
                )
            batch = source.batch(index, rng).to(config.device)
            loss, per_pair = loss_of(batch, objective, config.chunks, world, config.bf16)
            update(loss)
            if ema is not None:
                with torch.no_grad():
                    for average, weight in zip(ema.parameters(), model.parameters()):
                        average.lerp_(weight, 1.0 - config.ema)
            loss_sum += per_pair.item() * len(index)
            pairs += len(index)
            bar.update(task, advance=1, loss=loss_sum / pairs, speed=pairs / (time.perf_counter() - started))
    return loss_sum, pairs, time.perf_counter() - started


def _record_epoch(
    state: _RunState,
    kept: Siamese,
    val: Validation,
    epoch: int,
    config: TrainConfig,
    loss_sum: float,
    pairs: int,
    seconds: float,
    log: Callable[[str], None],
) -> None:
    """Append the epoch to the history, keep its weights if it is the best so far, and log one line."""
    record = {
        "epoch": epoch + 1,
        "train_loss": loss_sum / pairs,
        "val_loss": val.loss,
        "pairs_per_s": pairs / seconds,
        "seconds": seconds,
    }
    shown = f"epoch {epoch + 1}/{config.epochs}  train loss {record['train_loss']:.4f}  val loss {val.loss:.4f}"
    if val.accuracy is not None:
        record.update(val_accuracy=val.accuracy, val_roc_auc=val.roc_auc)
        shown += f"  val accuracy {val.accuracy:.4f}  val ROC-AUC {val.roc_auc:.4f}"
    state.history.append(record)
    if val.better(state.best_val, config.keep):
        state.best_val, state.best_epoch = val, epoch + 1
        state.best_state = {k: v.detach().clone() for k, v in kept.state_dict().items()}
    log(
        f"{shown}  {record['pairs_per_s']:,.0f} pairs/s  {seconds:.1f}s"
        + ("  (best)" if state.best_epoch == epoch + 1 else "")
    )


def _finish(
    state: _RunState,
    out: Path,
    config: TrainConfig,
    options: ModelOptions,
    train_pairs: int,
    val_pairs: int,
    extra_info: dict[str, Any] | None,
    world: World = World(),
) -> Model:
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
        "world_size": world.size,  # processes that trained it (torchrun's WORLD_SIZE; 1: one process)
        **(extra_info or {}),
    }
    model.cpu()
    result = Model(
        state.vocab,
        model.encoder,
        metrics={"training": info},
        head=model.head,
        **judging_before_calibration(model.head.config if model.head is not None else None),
    )
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
    trains on its share of each batch (:mod:`dupq.training.distributed`); rank 0 alone writes and logs, and
    every rank returns the same model once the folder is written.
    """
    out = Path(out)
    config = config or TrainConfig()
    options = ModelOptions(**{**asdict(options or ModelOptions()), **option_overrides})
    world = World.from_env()
    check_output_folder(out, resume, overwrite)
    if len(splits.dev) and len(splits.test):  # the threshold is chosen on dev afterwards: refused now, not then
        from dupq.evaluation.evaluate import check_dev_labels

        check_dev_labels(splits.dev.labels)
    _check_device(config.device)
    joined = join(world, config.device)
    try:
        return _run(
            splits,
            out,
            config,
            options,
            resume,
            split,
            extra_info,
            log if world.master else _silent,
            progress and world.master,
            world,
        )
    finally:
        if joined:
            torch.distributed.destroy_process_group()


def _silent(_: str) -> None:
    """The log of a rank other than 0."""


def _run(
    splits: Splits,
    out: Path,
    config: TrainConfig,
    options: ModelOptions,
    resume: bool,
    split: dict[str, Any] | None,
    extra_info: dict[str, Any] | None,
    log: Callable[[str], None],
    progress: bool,
    world: World,
) -> Model:
    """:func:`train` once its arguments are checked and this process has joined its group."""
    if world.size > 1:  # before any other collective: ranks that differ would diverge, fail or wait forever
        agree(
            world,
            start_fingerprints([config, options], split, splits),
            "every process of a run must be given the same options and the same data.",
        )
    if world.master:
        remove_stale(out)  # temporary files of a writer killed mid-write (a checkpoint being saved)
    teacher = load_teacher_cache(config, split)
    state = _begin(
        splits, out, config, options, resume, split, teacher.dim if teacher is not None else None, log, world
    )
    agree(
        world,
        {
            "start epoch": state.start_epoch,
            "vocabulary": zlib.crc32("\n".join(state.vocab.tokens).encode()),
        },
        "every process must read the same data, and with --resume the same --out folder (a folder shared by the machines).",
    )
    if config.threads:
        torch.set_num_threads(config.threads)
    train_source, val_source, line = batch_sources(splits, config, state.vocab, split, teacher)
    log(f"vocabulary: {state.vocab.summary()} | {line}" + (f" | {world.size} processes" if world.size > 1 else ""))

    model, objective = state.model.to(config.device), config.objective()
    ema = None
    if config.ema:  # Polyak averaging: the average of the weights along the run generalises better than its end
        ema = copy.deepcopy(model)
        if state.ema_state:
            ema.load_state_dict(state.ema_state)
        ema.requires_grad_(False)
    optimizer = torch.optim.Adam(param_groups(model, config.word_lr), lr=config.lr, fused=True)
    if state.optim_state is not None:
        optimizer.load_state_dict(state.optim_state)
    update = Update(model, optimizer)  # before DDP wraps the model: DDP reads which gradients are sparse
    loss_of = distributed_loss(model, config, world)
    steps_per_epoch = len(train_source.epoch(np.random.default_rng(0)))
    for epoch in range(state.start_epoch, config.epochs):
        loss_sum, pairs, seconds = _train_epoch(
            model, ema, update, train_source, objective, config, epoch, steps_per_epoch, progress, loss_of, world
        )
        kept = ema if ema is not None else model  # the weights that are validated and saved
        _record_epoch(state, kept, validate(kept, val_source, config), epoch, config, loss_sum, pairs, seconds, log)
        meta = {
            "epoch": epoch + 1,
            "history": state.history,
            "train": asdict(config),
            "options": asdict(options),
            "split": split,
            "best_epoch": state.best_epoch,
            "best_val": asdict(state.best_val),
        }
        if world.master:
            save_checkpoint(out / CHECKPOINT, model, state.best_state, optimizer, meta, ema)
    result = _finish(state, out, config, options, len(train_source), len(val_source), extra_info, world)
    if world.size > 1:
        torch.distributed.barrier()  # the folder is written when train() returns, on every rank
    return result
