"""The training loop: a batch source + an objective + Adam, with checkpoints and exact resume.

A run is three parts that do not know each other: the **batch source** (:mod:`dupq.training.batches`: the seed's
duplicates, or every labelled pair), the **objective** (:mod:`dupq.training.objectives`) and the **loop**
(:func:`dupq.training.loop.fit`: per epoch batches, loss, Adam, validation, checkpoint; at the end the best epoch's
weights, calibrated on the dev pairs, as the model folder). Everything random is derived from ``(seed, epoch)`` and the
checkpoint (:mod:`dupq.training.checkpoint`) is written after every epoch, so a run killed at any moment and resumed
ends with the same weights as one never interrupted; a diverged run stops with the last good checkpoint in place.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from dupq.core.errors import DupqError
from dupq.core.files import remove_stale
from dupq.data.pairs import Splits
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.judge import Judge
from dupq.modeling.lstm import LSTMEncoder
from dupq.modeling.model import Model
from dupq.modeling.verdict import judging_before_calibration
from dupq.training.checkpoint import check_output_folder, check_resume, load_checkpoint, save_checkpoint
from dupq.training.config import CHECKPOINT, ModelOptions, TrainConfig
from dupq.training.distributed import World, agree, join, start_fingerprints
from dupq.training.loop import SCHEDULES, Epoch, Loop, Update, fit
from dupq.training.setup import (
    batch_sources,
    build_model,
    build_vocabulary,
    check_device,
    init_word_embeddings,
    load_teacher_cache,
)
from dupq.training.step import Siamese, Validation, distributed_loss, validate


@dataclass
class Run:
    """One call of :func:`train`, its arguments checked: what the steps below read."""

    splits: Splits
    out: Path
    config: TrainConfig
    options: ModelOptions
    resume: bool = False  # go on from the checkpoint in ``out``
    split: dict[str, Any] | None = None  # how the data was cut: recorded, and a resume on another cut is refused
    extra_info: dict[str, Any] | None = None  # recorded in metrics.json's ``training``
    log: Callable[[str], None] = print
    progress: bool = True
    world: World = World()


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


def _begin(run: Run, teacher_dim: int | None) -> _RunState:
    """Resume the checkpoint in ``run.out`` (``run.resume``) or build the vocabulary and model afresh.

    Every rank builds the same vocabulary from the same data (the build is deterministic); rank 0 writes it.
    """
    config, options, out = run.config, run.options, run.out
    ckpt_path = out / CHECKPOINT
    if not (run.resume and ckpt_path.exists()):
        vocab = build_vocabulary(run.splits, config, options, run.split)
        if run.world.master:
            out.mkdir(parents=True, exist_ok=True)
            vocab.save(out / "vocab.json")
        model = build_model(vocab, config, options, teacher_dim)
        if options.word_init:  # every rank computes the same start (the teacher's vectors are deterministic here)
            init_word_embeddings(model.encoder, vocab, options.word_init, run.log)
        return _RunState(vocab, model)
    meta, model_state, best_state, optim_state = load_checkpoint(ckpt_path)
    check_resume(meta, config, options, run.split)
    vocab = Vocabulary.load(out / "vocab.json")
    model = build_model(vocab, config, options, teacher_dim)
    try:
        model.load_state_dict(model_state)
    except RuntimeError as e:
        raise DupqError(
            f"the checkpoint {ckpt_path} does not fit this run ({str(e).strip().splitlines()[0]}); start again with --overwrite."
        ) from None
    run.log(f"resuming {ckpt_path} after epoch {meta['epoch']}")
    state = _RunState(vocab, model, meta["history"], start_epoch=meta["epoch"], optim_state=optim_state)
    state.best_state, state.best_epoch = best_state, meta.get("best_epoch", meta["epoch"])
    state.best_val = Validation(**meta["best_val"]) if meta.get("best_val") else None
    return state


def _record_epoch(run: Run, state: _RunState, val: Validation, epoch: int, done: Epoch) -> None:
    """Append the epoch to the history, keep its weights if it is the best so far, and log one line."""
    record = {
        "epoch": epoch + 1,
        "train_loss": done.loss,
        "val_loss": val.loss,
        "pairs_per_s": done.rows / done.seconds,
        "seconds": done.seconds,
    }
    shown = f"epoch {epoch + 1}/{run.config.epochs}  train loss {done.loss:.4f}  val loss {val.loss:.4f}"
    if val.accuracy is not None:
        record.update(val_accuracy=val.accuracy, val_roc_auc=val.roc_auc)
        shown += f"  val accuracy {val.accuracy:.4f}  val ROC-AUC {val.roc_auc:.4f}"
    state.history.append(record)
    if val.better(state.best_val):
        state.best_val, state.best_epoch = val, epoch + 1
        state.best_state = {k: v.detach().clone() for k, v in state.model.state_dict().items()}
    run.log(
        f"{shown}  {record['pairs_per_s']:,.0f} pairs/s  {done.seconds:.1f}s"
        + ("  (best)" if state.best_epoch == epoch + 1 else "")
    )


def _finish(run: Run, state: _RunState, train_pairs: int, val_pairs: int) -> Model:
    """The best epoch's weights as a model folder in ``run.out`` (written by rank 0), its threshold chosen on
    the dev pairs and its figures on the test pairs when the split has both."""
    model = state.model
    if state.best_state:
        model.load_state_dict(state.best_state)
    info = {
        "train": asdict(run.config),
        "options": asdict(run.options),
        "encoder": asdict(model.encoder.config),
        "lowercase": state.vocab.lowercase,
        "vocab_size": len(state.vocab),
        "train_pairs": train_pairs,
        "val_pairs": val_pairs,
        "history": state.history,
        "best_epoch": state.best_epoch,
        "world_size": run.world.size,  # processes that trained it (torchrun's WORLD_SIZE; 1: one process)
        **({"split": run.split} if run.split is not None else {}),
        **(run.extra_info or {}),
    }
    model.cpu()
    result = Model(
        LSTMEncoder(state.vocab, model.encoder),
        Judge(model.head, **judging_before_calibration(model.head.config if model.head is not None else None)),
        metrics={"training": info},
    )
    if len(run.splits.dev) and len(run.splits.test):
        from dupq.evaluation.evaluate import calibrate_and_test, summary_line

        run.log(summary_line(calibrate_and_test(result, run.splits.dev, run.splits.test)))
    if run.world.master:
        result.save(run.out)
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

    ``option_overrides`` are :class:`ModelOptions` fields (``dim=32``) for short calls. ``split`` records how the data
    was cut, so that a resume on another cut is refused. Writes ``out/vocab.json`` and ``out/checkpoint.safetensors`` as
    it goes and the model folder (the best epoch's weights) at the end, calibrated on ``splits.dev`` and tested on
    ``splits.test`` when both hold pairs: the folder ``dupq train`` writes. Returns the trained :class:`Model`.

    Under ``torchrun`` (``WORLD_SIZE`` > 1) every process calls this with the same arguments and trains on its share of
    each batch (:mod:`dupq.training.distributed`); rank 0 alone writes and logs, and every rank returns the same model
    once the folder is written.
    """
    out = Path(out)
    config = config or TrainConfig()
    options = ModelOptions(**{**asdict(options or ModelOptions()), **option_overrides})
    world = World.from_env()
    check_output_folder(out, resume, overwrite)
    if len(splits.dev) and len(splits.test):  # the threshold is chosen on dev afterwards: refused now, not then
        from dupq.evaluation.evaluate import check_dev_labels

        check_dev_labels(splits.dev.labels)
    check_device(config.device)
    joined = join(world, config.device)
    run = Run(splits, out, config, options, resume=resume, split=split, extra_info=extra_info, world=world)
    run.log, run.progress = (log, progress) if world.master else (lambda _: None, False)  # rank 0 alone logs
    try:
        return _run(run)
    finally:
        if joined:
            torch.distributed.destroy_process_group()


def _run(run: Run) -> Model:
    """:func:`train` once its arguments are checked and this process has joined its group."""
    config, world = run.config, run.world
    if world.size > 1:  # before any other collective: ranks that differ would diverge, fail or wait forever
        agree(
            world,
            start_fingerprints([config, run.options], run.split, run.splits),
            "every process of a run must be given the same options and the same data.",
        )
    if world.master:
        remove_stale(run.out)  # temporary files of a writer killed mid-write (a checkpoint being saved)
    teacher = load_teacher_cache(config, run.split)
    state = _begin(run, teacher.dim if teacher is not None else None)
    agree(
        world,
        {"start epoch": state.start_epoch, "vocabulary": zlib.crc32("\n".join(state.vocab.tokens).encode())},
        "every process must read the same data, and with --resume the same --out folder (a folder shared by the machines).",
    )
    if config.threads:
        torch.set_num_threads(config.threads)
    train_source, val_source, line = batch_sources(run.splits, config, state.vocab, run.split, teacher)
    run.log(f"vocabulary: {state.vocab.summary()} | {line}" + (f" | {world.size} processes" if world.size > 1 else ""))

    model, objective = state.model.to(config.device), config.objective()
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, fused=True)
    if state.optim_state is not None:
        optimizer.load_state_dict(state.optim_state)
    # before DDP wraps the model: DDP reads which gradients are sparse
    update = Update(optimizer, model.encoder.embedding)
    loss_of = distributed_loss(model, config, world)

    def step(batch):
        return loss_of(batch.to(config.device), objective, config.chunks, world, config.bf16)

    def after_epoch(epoch: int, done: Epoch) -> None:
        _record_epoch(run, state, validate(model, val_source, config), epoch, done)
        meta = {
            "epoch": epoch + 1,
            "history": state.history,
            "train": asdict(config),
            "options": asdict(run.options),
            "split": run.split,
            "best_epoch": state.best_epoch,
            "best_val": asdict(state.best_val),
        }
        if world.master:
            save_checkpoint(run.out / CHECKPOINT, model, state.best_state, optimizer, meta)

    schedule = SCHEDULES[config.lr_schedule]
    loop = Loop(config.epochs, config.lr, config.seed, schedule, state.start_epoch, world.rank, run.progress)
    fit(loop, model, train_source, step, update, after_epoch)
    result = _finish(run, state, len(train_source), len(val_source))
    if world.size > 1:
        torch.distributed.barrier()  # the folder is written when train() returns, on every rank
    return result
