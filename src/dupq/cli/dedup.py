"""``dupq dedup``: group an archive's questions into duplicates, on this machine or a Ray cluster."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from dupq.cli.common import THREADS, Threads, _dropped, _threads, _threshold, command, model_option, threshold_option
from dupq.core.errors import DupqError
from dupq.core.files import check_apart, check_target


@command(name="dedup", refused={"--collection": "the QUESTIONS argument (a collection folder)"})
def dedup_command(
    questions: Annotated[
        str,
        typer.Argument(
            help="Questions: a text file (one a line), CSV/TSV with a header (see --column), JSON lines (.jsonl), "
            "Parquet, or the Quora pairs file; .gz ok. Or a collection (a folder, milvus:..., postgresql://...): its questions, "
            "stored vectors and keys."
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="Where to write the groups, one row per member: FILE.csv, FILE.jsonl, FILE.json or FILE.parquet."
        ),
    ] = ...,
    model: Annotated[
        Optional[Path], model_option("Model folder (default: the bundled model, or the collection's).")
    ] = None,
    threshold: Annotated[
        Optional[float],
        threshold_option(
            "A pair is a duplicate when its score is above this: the model's score (its calibrated probability "
            "for the bundled model), or the cosine with --on similarity; each row's score_is says which "
            "(default: the model's threshold; --on similarity needs one)."
        ),
    ] = None,
    on: Annotated[
        Literal["model", "similarity"],
        typer.Option(
            help="model: judge each pair as the model does (default); similarity: by the cosine alone (faster; "
            "needs --threshold)."
        ),
    ] = "model",
    neighbours: Annotated[
        int,
        typer.Option(
            min=1,
            help="Candidates looked at per question; a group can be larger, since a representative also takes "
            "the questions that found it.",
        ),
    ] = 20,
    grouping: Annotated[
        Literal["star", "components", "leader"],
        typer.Option(
            help="star: every member a duplicate of its representative (default); components: every chain of "
            "duplicates one group; leader: SemHash's rule, in input order."
        ),
    ] = "star",
    column: Annotated[
        Optional[str], typer.Option(help="The question column of a CSV/TSV/JSON lines/Parquet file.")
    ] = None,
    key_column: Annotated[
        Optional[str],
        typer.Option(help="The column holding each question's key (default: its line number; a Quora file's qids)."),
    ] = None,
    exact_below: Annotated[
        int, typer.Option(min=0, help="Search exactly up to this many questions; beyond, among k-means partitions.")
    ] = 10_000,
    ray: Annotated[
        Optional[str],
        typer.Option(help="Run the encoding and the search on a Ray cluster at this address (HOST:PORT or auto)."),
    ] = None,
    work: Annotated[
        Optional[Path],
        typer.Option(help="The run's work folder, kept until the output is written (default: OUT.work)."),
    ] = None,
    rerank: Annotated[
        Optional[Path],
        typer.Option(
            "--rerank",
            metavar="MODEL",
            help="A second model (a folder, or minilm / mpnet) that judges the candidate pairs the first one finds, "
            "by its own cosine, threshold and calibration (slower, better); a collection's reranker judges "
            "unless --no-rerank.",
        ),
    ] = None,
    no_rerank: Annotated[
        bool, typer.Option("--no-rerank", help="Judge by the model alone though the collection has a reranker.")
    ] = False,
    review: Annotated[
        Optional[Path],
        typer.Option(
            help="Also write a review page into this new folder (DIR/index.html, one file): the groups largest "
            "first, then the least certain, each with its members, scores and tiers."
        ),
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars with the time left.")] = True,
    threads: Threads = THREADS,
) -> None:
    """Group the questions of a file (or a collection folder) into duplicates: every member of a group is a duplicate of
    its representative, so all but the representative could go.

    Memory grows linearly with the questions: files are streamed, neighbours are found by exact search up to
    10,000 questions and among k-means partitions beyond, and the groups are streamed out. A killed run resumes
    where it stopped when started again with the same arguments. Each output row carries the question's key, its
    group, whether it is the group's representative, its score with the representative (score_is: which score)
    and its tier (suggest or duplicate), and its group's size and confidence (the least member score); the groups
    are written surest first."""
    from dupq.collection.collection import Collection, Location
    from dupq.data.questions import Dropped
    from dupq.data.tables import format_of
    from dupq.dedup.grouping import DedupConfig
    from dupq.dedup.review import check_review_folder
    from dupq.dedup.run import dedup_collection, dedup_file
    from dupq.modeling.model import Model

    _threads(threads)
    if rerank is not None and no_rerank:
        raise DupqError("--rerank and --no-rerank contradict each other; give one.")
    location = Location.parse(questions)
    is_collection = location.path is None or location.path.is_dir()
    if is_collection and (column or key_column):
        raise DupqError("--column and --key-column are for files; a collection's questions carry their keys.")
    format_of(out)
    check_target(out, folder=False)  # before the work, not after it
    check_apart(out, location.local_path, work)
    if review is not None:
        check_review_folder(review)
        check_apart(review, location.local_path, work)
    config = DedupConfig(threshold=_threshold(threshold), method=grouping, on=None if on == "model" else on)
    config.candidates.neighbours, config.candidates.exact_below = neighbours, exact_below
    engine = None
    if ray is not None:
        from dupq.dedup.ray_engine import RayEngine

        engine = RayEngine(ray)
    reranker = Model.load(rerank) if rerank is not None else (False if no_rerank else None)
    dropped = None if is_collection else Dropped()
    with _bars(progress) as report:
        if is_collection:
            with Collection.open(location, Model.load(model) if model else None) as coll:
                summary = dedup_collection(
                    coll, out, config, work_folder=work, engine=engine, progress=report, review=review, rerank=reranker
                )
        else:
            summary = dedup_file(
                location.path, out, model, config, column=column, key_column=key_column, work_folder=work,
                engine=engine, progress=report, dropped=dropped, review=review, rerank=reranker or None,
            )  # fmt: skip
    if dropped is not None:
        _dropped(questions, dropped)
    resumed = f" (resumed a killed run at its {summary.resumed_from} stage)" if summary.resumed_from else ""
    typer.echo(
        f"{summary.questions:,} questions: {summary.clusters:,} groups of duplicates ({summary.duplicates:,} questions "
        f"could go; {summary.same_text:,} of the very same text) at {summary.score_is} > {summary.threshold:.2f}; "
        f"wrote {out}{resumed}"
    )
    t = summary.tiers
    if summary.surest:
        typer.echo(f"Surest groups (tiers: duplicate above {t['duplicate']:.2f}, suggest above {t['suggest']:.2f}):")
    for g in summary.surest:
        typer.echo(f"  group {g['cluster']}: {g['size']} questions, confidence {g['confidence']:.2f}: {g['text']}")
    if review is not None:
        typer.echo(f"Review page: {review / 'index.html'}")


class _bars:
    """rich progress bars on stderr, one per stage, with the time left; off when asked or not a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self.tasks: dict[str, int] = {}

    def __enter__(self):
        if not self.enabled:
            return lambda stage, done, total: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("{task.description:<7}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self.bar.__enter__()
        return self.report

    def report(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(stage, total=total or None)
        self.bar.update(self.tasks[stage], completed=done, **({"total": total} if total else {}))

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.bar.__exit__(*exc)
