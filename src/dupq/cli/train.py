"""``dupq train``, ``compact`` and ``info``: make a model, copy it compactly and look inside one."""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
import typer.core

from dupq.cli.common import (
    THREADS,
    ModelArgument,
    Overwrite,
    Threads,
    _data,
    command,
    config_options,
    model_argument,
    preset_values_for,
    renamed_command,
    typed_option,
)
from dupq.core.files import check_apart
from dupq.data.pairs import SplitConfig
from dupq.training.config import ModelOptions, TrainConfig
from dupq.training.presets import KEYS, PRESETS, configs, read_preset, to_toml


@command()
@config_options(train_fields=TrainConfig, model_fields=ModelOptions, split_fields=SplitConfig)
def train(
    ctx: typer.Context,
    preset: Annotated[
        Optional[str],
        typer.Option(
            help=f"A recipe: {', '.join(PRESETS)} (the bundled model's), or a .toml file of options; flags override it."
        ),
    ] = None,
    show: Annotated[
        bool, typer.Option(help="Print the options the preset and the flags set, as a preset file; train nothing.")
    ] = False,
    data: Annotated[
        Optional[Path],
        typer.Option(
            help="Quora pairs file (.tsv/.csv, .gz ok); default $DUPQ_DATA or ../shared/data/quora_duplicate_questions.tsv.gz"
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="Model folder to write (checkpoint included).")] = Path("runs/model"),
    # The one training option that is no config field's: repeated NAME[:WEIGHT] strings make TrainConfig.losses.
    loss: Annotated[
        Optional[list[str]],
        typer.Option(
            help="A loss and its weight, e.g. --loss bce --loss ranking:0.5 (an unknown name lists them); default: the recipe's."
        ),
    ] = None,
    *,
    train_fields: dict[str, Any],
    model_fields: dict[str, Any],
    split_fields: dict[str, Any],
    threads: Threads = THREADS,
    resume: Annotated[
        bool, typer.Option(help="Continue from the checkpoint in --out (with the same options).")
    ] = False,
    overwrite: Annotated[bool, typer.Option(help="Start again even if --out holds a checkpoint.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Train a Siamese LSTM on a Quora-style pairs file and save the model folder (dupq train alone: the seed recipe)."""
    from dupq.data.pairs import read_pairs, split_pairs
    from dupq.training.checkpoint import check_output_folder
    from dupq.training.distributed import World
    from dupq.training.train import train as run_training

    chosen = {**train_fields, **model_fields, **split_fields, "threads": threads}
    if loss:
        from dupq.training.objectives import parse_losses

        chosen["losses"] = parse_losses(loss)
    typed = {name for name in chosen if typed_option(ctx, "loss" if name == "losses" else name)}
    preset_values = preset_values_for(ctx, preset, read_preset(preset), typed) if preset else {}
    chosen.update(preset_values)
    config, options, split = configs(chosen)
    if show:
        shown = {name: chosen[name] for name in KEYS if name in preset_values or name in typed}
        defaults = {f: v for f, v in {**asdict(config), **asdict(options), **asdict(split)}.items() if f not in shown}
        typer.echo(
            f"# dupq train{' --preset ' + preset if preset else ''}: the options it sets; the others at their defaults"
        )
        typer.echo(to_toml(shown, defaults), nl=False)
        return
    check_output_folder(out, resume, overwrite)
    path = _data(data)
    check_apart(out, path)
    pairs, dropped = read_pairs(path)
    master = World.from_env().master  # under torchrun, rank 0 alone speaks and writes
    if master:
        typer.echo(f"read {len(pairs):,} pairs from {path}; {dropped}")
    splits = split_pairs(pairs, split)
    info = {"data": str(path), "command": " ".join(["dupq", *sys.argv[1:]])}
    run_training(
        splits,
        out,
        config,
        options,
        resume=resume,
        overwrite=overwrite,
        extra_info=info,
        log=typer.echo,
        progress=progress,
        split=split.__dict__,
    )
    if master:
        typer.echo(f"saved model to {out}")


@command()
def compact(
    model: Annotated[Path, model_argument("Model folder to copy (bundled: the bundled model).")],
    out: Annotated[
        Path, typer.Option(help="Model folder to write (config, vocabulary, weights, metrics; no checkpoint).")
    ],
    half: Annotated[bool, typer.Option(help="Store the weights as float16 (half the size).")] = False,
    branch: Annotated[
        bool,
        typer.Option(
            help="Keep the static branch; --no-branch leaves it out: vectors as wide as the encoder's (half a "
            "collection's or a dedup run's memory for the bundled model), the ranking the model had without it."
        ),
    ] = True,
    overwrite: Overwrite = False,
) -> None:
    """Write a compact copy of a model folder (no checkpoint; --half: float16), e.g. the model bundled with the package."""
    from dupq.modeling.folder_format import check_new_model_folder
    from dupq.modeling.model import Model, new_model_folder

    bundled = str(model) == "bundled"
    check_apart(out, None if bundled else model)
    check_new_model_folder(out, overwrite)
    copy = Model.load(None if bundled else model)
    if not branch:
        copy = Model(copy.encoder.without_branch(), copy.judge, copy.metrics)
    with new_model_folder(out) as tmp:  # written beside OUT, loaded back, renamed into place: --out is never broken
        copy.save(tmp, half=half)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    typer.echo(f"wrote {out} ({size / 2**20:.1f} MiB)")


renamed_command("dupq export", "dupq compact MODEL --out OUT")


@command()
def info(model: ModelArgument = None) -> None:
    """Show a model folder's architecture, threshold and training history."""
    import json

    from dupq.modeling.model import Model

    m = Model.load(model)
    fitted = m.judge.search_calibration or {}
    shown = {
        "folder": str(model) if model else "bundled",
        "encoder": m.encoder.config_json(),
        **m.encoder.info(),
        "threshold": m.threshold,
        "threshold_info": m.judge.threshold_info,
        "search_calibration": {k: fitted.get(k) for k in ("fitted_on", "fitted_by")},
        "fingerprint": m.fingerprint(),
        "metrics": m.metrics,
    }
    typer.echo(json.dumps(shown, indent=2))
