"""``dupq adapt``: fit the model to your own questions (``dupq index reencode`` then encodes a collection again)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer
import typer.core

from dupq.cli.common import (
    COLLECTION_HELP,
    DATA_OPTION,
    QUESTIONS_HELP,
    THREADS,
    Threads,
    _dropped,
    _threads,
    command,
    config_options,
    model_option,
)
from dupq.cli.distil import Teacher
from dupq.training.config import AdaptConfig


@command(name="adapt")
@config_options(adapt_fields=AdaptConfig)
def adapt_command(
    source: Annotated[
        str,
        typer.Argument(help=f"Your questions (no labels needed). {QUESTIONS_HELP} Or a collection: {COLLECTION_HELP}"),
    ],
    out: Annotated[
        Path, typer.Option(help="Model folder to write (written beside it, then renamed into place).")
    ] = Path("runs/adapted"),
    model: Annotated[
        Optional[Path], model_option("The model to adapt (default: the collection's model, else the bundled one).")
    ] = None,
    teacher: Teacher = None,
    column: Annotated[Optional[str], typer.Option(help="The question column of a CSV/TSV file.")] = None,
    data: Annotated[Optional[Path], DATA_OPTION] = None,
    *,
    adapt_fields: dict[str, Any],
    cache: Annotated[
        Optional[Path],
        typer.Option(
            help="Folder for the teacher's vectors, kept for another run (default: OUT.teacher beside --out)."
        ),
    ] = None,
    threads: Threads = THREADS,
    teacher_threads: Annotated[
        int, typer.Option(min=0, help="torch CPU threads for the teacher (0 = torch's default: every core).")
    ] = 0,
    teacher_device: Annotated[
        Literal["cpu", "cuda"], typer.Option(help="cpu, or cuda to run the teacher on a GPU.")
    ] = "cpu",
    overwrite: Annotated[bool, typer.Option(help="Replace the model folder --out if it exists.")] = False,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Fine-tune the model on your own questions, taught by a pretrained sentence encoder; writes a model folder every command takes."""
    from dupq.collection.location import Location
    from dupq.core.files import check_apart
    from dupq.modeling.folder_format import check_new_model_folder
    from dupq.modeling.model import Model
    from dupq.training.adapt import NOT_ADAPTABLE, adapt, distinct_questions, user_questions
    from dupq.training.distil.teacher import load_teacher

    config = AdaptConfig(**adapt_fields)
    check_new_model_folder(out, overwrite)
    check_apart(out, Location.parse(source).local_path, model)
    texts, collection_model, dropped = user_questions(source, column)
    _dropped(source, dropped)
    texts = distinct_questions(texts)
    base = Model.load(model) if model is not None or collection_model is None else collection_model
    branch = base.encoder.lstm(NOT_ADAPTABLE).branch
    _threads(teacher_threads)
    encode, name = load_teacher(teacher, device=teacher_device)
    typer.echo(
        f"adapting {'the bundled model' if base.bundled else base.folder} to {len(texts):,} questions of {source}"
        + (f", its static branch ({branch.config.source}) kept and taught your new words" if branch is not None else "")
    )
    mixed = _mixed_in(texts, base, config.mix, data)
    info = {"source": str(source), "command": " ".join(["dupq", *sys.argv[1:]])}
    adapted = adapt(
        base,
        texts,
        out,
        encode,
        name,
        config,
        cache,
        info=info,
        log=typer.echo,
        progress=progress,
        threads=threads,
        mixed=mixed,
    )
    record = adapted.metrics["adaptation"]
    words = record["words"]
    typer.echo(
        f"{words['unknown_distinct']:,} of {words['distinct_words']:,} distinct words are outside the model's vocabulary "
        f"({adapted.encoder.lstm().vocab.unknown_words_are}, trained with the rest)"
    )
    typer.echo(
        f"saved model to {out} (teacher {record['seconds']['teacher']:.0f}s, fine-tuning {record['seconds']['fine_tuning']:.0f}s); "
        f"encode a collection again with `dupq index reencode COLLECTION --model {out} --out NEW`"
    )


def _mixed_in(texts: list[str], base, mix: int, data: Optional[Path]) -> list[str]:
    """Quora training questions to add to a small help desk's (``--mix``), saying what was done."""
    from dupq.data.pairs import default_data_path, read_pairs, recorded_split
    from dupq.training.adapt import quora_questions

    if len(texts) >= mix:
        return []
    path = data or default_data_path()
    if not path.exists():
        typer.echo(
            f"only {len(texts):,} questions, fewer than --mix {mix:,}: no Quora file at {path} to mix in "
            "(--data PATH), so the student learns from yours alone and may forget what it knew"
        )
        return []
    mixed = quora_questions(read_pairs(path)[0], recorded_split(base.metrics), mix - len(texts), texts)
    typer.echo(
        f"only {len(texts):,} questions, fewer than --mix {mix:,}: {len(mixed):,} questions of Quora's training "
        "pool mixed in (taught and trained on with yours, so that the student keeps what it knew; --mix 0: none)"
    )
    return mixed
