"""The ``dupq`` command line: one typer app of thin commands over the library.

Every command turns a :class:`~dupq.files.DupqError` (a mistake the user can fix) into one
sentence on stderr and exit status 2; a traceback means a bug in dupq.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from dupq.files import DupqError

app = typer.Typer(
    help="Find duplicate questions with a Siamese LSTM: train, judge pairs, search old questions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def root() -> None:
    """Find duplicate questions with a Siamese LSTM: train, judge pairs, search old questions."""


def fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def command(*args, **kwargs):
    """``app.command`` whose function reports user mistakes as one sentence and exit 2."""

    def register(fn):
        @functools.wraps(fn)
        def run(*a, **kw):
            try:
                return fn(*a, **kw)
            except DupqError as e:
                fail(str(e))
            except OSError as e:  # disk full, permission denied, ...: the user's environment, not a bug
                fail(f"{e.strerror or e} ({e.filename})" if getattr(e, "filename", None) else str(e))
            except KeyboardInterrupt:
                typer.echo("interrupted", err=True)
                raise typer.Exit(130) from None

        return app.command(*args, **kwargs)(run)

    return register


@command()
def train(
    data: Annotated[Optional[Path], typer.Option(help="Quora pairs file (.tsv/.csv, .gz ok); default $DUPQ_DATA or ../shared/data/quora_duplicate_questions.tsv.gz")] = None,
    out: Annotated[Path, typer.Option(help="Model folder to write (checkpoint included).")] = Path("runs/model"),
    epochs: Annotated[int, typer.Option(min=1, help="Passes over the training duplicates.")] = 5,
    batch_size: Annotated[int, typer.Option(min=2, help="Pairs per batch (in-batch negatives = batch size - 1).")] = 256,
    lr: Annotated[float, typer.Option(min=0.0, help="Adam learning rate.")] = 0.01,
    dim: Annotated[int, typer.Option(min=1, help="Embedding and LSTM width.")] = 128,
    seed: Annotated[int, typer.Option(help="Random seed (initialisation, shuffling, dropout).")] = 0,
    margin: Annotated[float, typer.Option(help="Triplet loss margin.")] = 0.25,
    reduction: Annotated[str, typer.Option(help="Loss over a batch: sum (seed) or mean.")] = "sum",
    symmetric: Annotated[bool, typer.Option(help="Use both directions of the similarity matrix.")] = False,
    extra_negatives: Annotated[int, typer.Option(min=0, help="Non-duplicate training pairs per batch added as negative columns.")] = 0,
    lr_schedule: Annotated[str, typer.Option(help="constant or cosine.")] = "constant",
    lowercase: Annotated[bool, typer.Option(help="Fold case before the vocabulary lookup.")] = False,
    bidirectional: Annotated[bool, typer.Option(help="Bidirectional LSTM.")] = False,
    dropout: Annotated[float, typer.Option(min=0.0, max=0.9, help="Dropout on word embeddings.")] = 0.0,
    train_pool: Annotated[int, typer.Option(min=0, help="Rows at the top of the file that form the training pool.")] = 300_000,
    test_size: Annotated[int, typer.Option(min=0, help="Rows after the pool kept as test pairs.")] = 10_240,
    dev_size: Annotated[int, typer.Option(min=0, help="Rows after the test pairs kept as dev pairs.")] = 10_240,
    val_fraction: Annotated[float, typer.Option(help="Share of the pool's duplicates held out for validation.")] = 0.2,
    threads: Annotated[int, typer.Option(min=0, help="CPU threads for torch (0 = default).")] = 0,
    resume: Annotated[bool, typer.Option(help="Continue from the checkpoint in --out.")] = False,
    overwrite: Annotated[bool, typer.Option(help="Start again even if --out holds a checkpoint.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Train a Siamese LSTM on the duplicate pairs of a Quora-style file and save the model folder."""
    from dupq.data import SplitConfig, default_data_path, read_pairs, split_pairs, DATA_HELP
    from dupq.train import TrainConfig
    from dupq.train import train as run_training

    if reduction not in ("sum", "mean"):
        raise DupqError(f"--reduction must be sum or mean, not {reduction!r}.")
    if lr_schedule not in ("constant", "cosine"):
        raise DupqError(f"--lr-schedule must be constant or cosine, not {lr_schedule!r}.")
    path = data or default_data_path()
    if not path.exists():
        raise DupqError(f"no data file at {path}; {DATA_HELP}.")
    pairs, dropped = read_pairs(path)
    typer.echo(f"read {len(pairs):,} pairs from {path}; {dropped}")
    split = SplitConfig(train_pool, test_size, dev_size, val_fraction)
    splits = split_pairs(pairs, split)
    config = TrainConfig(
        epochs=epochs, batch_size=batch_size, lr=lr, margin=margin, reduction=reduction, symmetric=symmetric,
        extra_negatives=extra_negatives, lr_schedule=lr_schedule, seed=seed, threads=threads,
    )
    info = {"data": str(path), "split": split.__dict__, "command": " ".join(["dupq", *sys.argv[1:]])}
    run_training(
        splits, out, config, dim=dim, lowercase=lowercase, bidirectional=bidirectional, dropout=dropout,
        resume=resume, overwrite=overwrite, extra_info=info, log=typer.echo, progress=progress,
    )
    typer.echo(f"saved model to {out}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
