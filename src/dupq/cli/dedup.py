"""``dupq dedup``: group an archive's questions into duplicates, on this machine or a Ray cluster."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from dupq.cli.common import THREADS, Threads, _dropped, _threads, _threshold, command, model_option, threshold_option
from dupq.core.errors import DupqError
from dupq.core.files import check_target


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
        int,
        typer.Option(min=0, help="Search exactly up to this many questions; beyond, among k-means partitions."),
    ] = 10_000,
    ray: Annotated[
        Optional[str],
        typer.Option(help="Run the encoding and the search on a Ray cluster at this address (HOST:PORT or auto)."),
    ] = None,
    work: Annotated[
        Optional[Path],
        typer.Option(help="The run's work folder, kept until the output is written (default: OUT.work)."),
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars with the time left.")] = True,
    threads: Threads = THREADS,
) -> None:
    """Group the questions of a file (or a collection folder) into duplicates: every member of a group is a duplicate of
    its representative, so all but the representative could go.

    Memory grows linearly with the questions: files are streamed, neighbours are found by exact search up to
    10,000 questions and among k-means partitions beyond, and the groups are streamed out. A killed run resumes
    where it stopped when started again with the same arguments. Each output row carries the question's key, its
    group, whether it is the group's representative, and its score with the representative (score_is: which score)."""
    from dupq.dedup.grouping import DedupConfig
    from dupq.dedup.run import run

    _threads(threads)
    from dupq.collection.location import Location

    where = Location.parse(questions)
    collection = where if where.kind != "folder" or Path(questions).is_dir() else None
    questions = Path(questions) if collection is None else questions
    if collection is not None and (column or key_column):
        raise DupqError("--column and --key-column are for files; a collection's questions carry their keys.")
    from dupq.data.tables import format_of

    format_of(out)
    check_target(out, folder=False)  # before the work, not after it
    config = DedupConfig(threshold=_threshold(threshold), method=grouping, on=None if on == "model" else on)
    config.candidates.neighbours, config.candidates.exact_below = neighbours, exact_below
    records, identity, m, dropped = _source(questions, collection, model, column, key_column)
    engine = None
    if ray is not None:
        from dupq.dedup.ray_engine import RayEngine

        engine = RayEngine(ray)
    with _bars(progress) as report:
        summary = run(records, out, m, config, identity, work, engine, report)
    if dropped is not None:
        _dropped(questions, dropped)
    resumed = f" (resumed a killed run at its {summary.resumed_from} stage)" if summary.resumed_from else ""
    typer.echo(
        f"{summary.questions:,} questions: {summary.clusters:,} groups of duplicates ({summary.duplicates:,} questions "
        f"could go; {summary.same_text:,} of the very same text) at {summary.score_is} > {summary.threshold:.2f}; "
        f"wrote {out}{resumed}"
    )


def _source(questions, collection, model, column, key_column):
    """The records to group, what identifies them for resuming, the model, and the file's dropped lines."""
    from dupq.data.questions import Dropped, stream_questions
    from dupq.dedup.run import Record
    from dupq.modeling.model import Model

    if collection is not None:
        from dupq.collection.collection import Collection

        coll = Collection.open(collection, Model.load(model) if model else None)
        try:
            rows, vectors = coll.stored_rows(), coll.stored_vectors()
            m = coll.model
        finally:
            coll.close()
        records = [  # the stored vectors are in id order, as the rows are (a database's ids may have gaps)
            Record(text, str(i) if key is None else key, vector) for (i, key, text, _), vector in zip(rows, vectors)
        ]
        where = coll.location
        stat = where.path.stat() if where.path is not None else None
        return (
            records,
            {
                "collection": str(where.path.resolve()) if where.path is not None else str(where),
                "count": len(records),
                "mtime": stat and stat.st_mtime_ns,
            },
            m,
            None,
        )

    dropped = Dropped()
    stat = questions.stat() if questions.exists() else None
    identity = {"file": str(questions.resolve()), "size": stat and stat.st_size, "mtime": stat and stat.st_mtime_ns}
    identity.update(column=column, key_column=key_column)
    stream = stream_questions(questions, column, key_column, dropped)
    first = next(stream, None)  # a bad file or column is refused here, before the model loads
    m = Model.load(model)

    def records():
        if first is None:
            return
        for q in _chain(first, stream):
            yield Record(q.text, q.key if q.key is not None else str(q.line))

    return records(), identity, m, dropped


def _chain(first, rest):
    yield first
    yield from rest


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
