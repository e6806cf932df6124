"""``dupq adapt``: fit the model to your own questions (``dupq index reencode`` then encodes a collection again)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer
import typer.core

from dupq.cli.common import (
    COLLECTION_HELP,
    DATA_OPTION,
    QUESTIONS_HELP,
    THREADS,
    ModelOut,
    Overwrite,
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
    out: ModelOut = Path("runs/adapted"),
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
    overwrite: Overwrite = False,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Fine-tune the model on your own questions, taught by a pretrained sentence encoder; writes a model folder every command takes."""
    from dupq.collection.location import Location
    from dupq.core.files import check_apart
    from dupq.modeling.folder_format import check_new_model_folder
    from dupq.training.adapt import adapt
    from dupq.training.adapt_questions import base_model, user_questions

    started = time.perf_counter()  # the closing line counts all of it: reading, the teacher, fine-tuning, saving
    config = AdaptConfig(**adapt_fields)
    check_new_model_folder(out, overwrite)
    check_apart(out, Location.parse(source).local_path, model)
    texts, collection_model, dropped = user_questions(source, column)
    _dropped(source, dropped)
    _threads(teacher_threads)
    adapted = adapt(
        texts,
        out,
        base_model(model, collection_model),
        teacher=teacher,
        config=config,
        data=data,
        cache=cache,
        teacher_device=teacher_device,
        info={"source": str(source), "command": " ".join(["dupq", *sys.argv[1:]])},
        log=typer.echo,
        progress=progress,
        threads=threads,
        source=source,
    )
    record = adapted.metrics["adaptation"]
    words = record["words"]
    typer.echo(
        f"{words['unknown_distinct']:,} of {words['distinct_words']:,} distinct words are outside the model's vocabulary "
        f"({adapted.encoder.lstm().vocab.unknown_words_are}, trained with the rest)"
    )
    typer.echo(
        f"saved model to {out} in {time.perf_counter() - started:.0f}s (teacher {record['seconds']['teacher']:.0f}s, "
        f"fine-tuning {record['seconds']['fine_tuning']:.0f}s); "
        f"encode a collection again with `dupq index reencode COLLECTION --model {out} --out NEW`"
    )
