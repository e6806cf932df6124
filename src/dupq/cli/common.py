"""What every ``dupq`` command shares: the app, one-sentence errors, options declared once.

Every command turns a :class:`~dupq.core.errors.DupqError` (a mistake the user can fix) into one
sentence on stderr and exit status 2; a traceback means a bug in dupq. Options that several
commands take (the data file, the model folder, the threads and their one default) are declared
here, once.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import Field
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, get_type_hints

import typer
import typer.core

from dupq.core.errors import DupqError
from dupq.core.options import flag, flag_fields

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
    logger = logging.getLogger("dupq")
    if not any(isinstance(h, _Warnings) for h in logger.handlers):
        logger.addHandler(_Warnings(logging.WARNING))


class _Warnings(logging.Handler):
    """The library's warnings (an index cache not written, a damaged row left out) as ``warning: ...`` lines on stderr.

    Written to whatever ``sys.stderr`` is at the time (a test's runner swaps it per command).
    """

    def emit(self, record: logging.LogRecord) -> None:
        text = f"{record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip()
        typer.echo(text, err=True)


def fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def command(*args, group: typer.Typer | None = None, refused: dict[str, str] | None = None, **kwargs):
    """``app.command`` (or ``group.command``) whose function reports user mistakes as one sentence and exit 2.

    ``refused`` maps an option the command no longer takes to what replaced it
    (``{"--store": "--out LOCATION"}``): given, it is refused as an unknown option is, naming the new form.
    """

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

        if refused:
            kwargs["cls"] = type("Refusing", (_Refusing,), {"refused": refused})
        return (group or app).command(*args, **kwargs)(run)

    return register


class _Refusing(typer.core.TyperCommand):
    """A command that names the replacement of an option it took before (:func:`command`'s ``refused``)."""

    refused: dict[str, str] = {}

    def parse_args(self, ctx, args):
        for arg in args:
            if arg == "--":
                break
            name = arg.split("=", 1)[0]
            if name in self.refused:
                raise UsageError(f"{name} is now {self.refused[name]}", ctx)
        return super().parse_args(ctx, args)


def renamed_command(old: str, new: str, group: typer.Typer | None = None) -> None:
    """Keep a command's old name (``dupq export``), hidden, as a refusal that names the new one: exit 2."""

    def refuse() -> None:
        fail(f"`{old}` is now `{new}`.")

    refuse.__doc__ = f"Renamed: {new}."
    settings = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}
    (group or app).command(name=old.split()[-1], hidden=True, context_settings=settings)(refuse)


def config_options(**configs: type | tuple[type, tuple[str, ...]]) -> Callable:
    """Give a command one option per flagged :func:`dupq.core.options.option` field of each config dataclass.

    ``@config_options(train_fields=TrainConfig)`` replaces the command's parameter ``train_fields``
    by the fields' options (their default, help, choices and range), in the fields' order, and
    calls the command with ``train_fields`` the dict of their values: one declaration, in the
    dataclass, for the library and the command line. ``split=(SplitConfig, ("train_pool", "test"))``
    takes only the fields named. Fields declared with ``cli=False`` get no option. typer reads the
    command's parameters from its signature, so the generated one is set as ``__signature__``.
    """

    def decorate(fn: Callable) -> Callable:
        hints = get_type_hints(fn, include_extras=True)
        parameters, owner = [], {}  # owner: option parameter -> the config keyword it belongs to
        for p in inspect.signature(fn).parameters.values():
            if p.name not in configs:
                parameters.append(p.replace(annotation=hints[p.name]))
                continue
            config, names = configs[p.name] if isinstance(configs[p.name], tuple) else (configs[p.name], None)
            config_hints = get_type_hints(config)
            for f in flag_fields(config):
                if names is not None and f.name not in names:
                    continue
                parameters.append(
                    inspect.Parameter(
                        f.name, p.kind, default=f.default, annotation=_option_annotation(f, config_hints[f.name])
                    )
                )
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


def typed_option(ctx: typer.Context, name: str) -> bool:
    """Whether the user gave option ``name`` (on the line or through its environment variable), not its default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def preset_values_for(ctx: typer.Context, preset: str, values: dict[str, Any], typed: set[str]) -> dict[str, Any]:
    """A preset's ``values`` that no typed flag overrides; a value for a flag is checked as that flag checks it."""
    parameters = {p.name: p for p in ctx.command.params}
    kept = {}
    for name, value in values.items():
        if name in typed:
            continue
        if name in parameters:
            try:
                value = parameters[name].process_value(ctx, value)
            except UsageError as e:
                raise DupqError(f"the preset {preset} sets {name} = {value!r}: {e.format_message()}") from None
        kept[name] = value
    return kept


def _option_annotation(f: Field, kind: type) -> Any:
    """``Annotated[type, typer.Option(...)]`` for a config field: choices become a ``Literal``, min/max a range."""
    meta = f.metadata
    if meta["choices"] is not None:
        kind = Literal[meta["choices"]]
    names = [flag(f)] if meta["flag"] else []  # else typer's own: --teacher-vectors, and --bf16/--no-bf16 for a bool
    return Annotated[kind, typer.Option(*names, help=meta["help"], min=meta["min"], max=meta["max"])]


# The options several commands take, declared once. A command's own help may say what its default
# is (the bundled model, the collection's); the name, the metavar and the checks are these.
# `docs/cli.md` states the convention and tests/cli/test_cli_convention.py holds every command to it.

MODEL_HELP = "Model folder, or minilm or mpnet (default: the bundled model)."
COLLECTION_HELP = (
    "Collection: a folder (from `dupq index build`), milvus:PATH.db or milvus+http(s)://HOST:PORT?collection=NAME, "
    "or postgresql://USER@HOST:PORT/DB?table=NAME."
)
LOCATION_HELP = (
    "Where the new collection goes: a folder that does not exist yet, or milvus:PATH.db (milvus-lite) or "
    "milvus+http(s)://HOST:PORT?collection=NAME (token from $DUPQ_MILVUS_TOKEN)."
)
THRESHOLD_HELP = "Decision threshold on the model's score (similarity or probability; default: its calibrated one)."


def model_option(help: str = MODEL_HELP) -> Any:
    """``--model MODEL``: a model folder a command uses (the thing it acts on is its argument)."""
    return typer.Option("--model", metavar="MODEL", help=help)


def model_argument(help: str = MODEL_HELP) -> Any:
    """``MODEL``: the model folder a command acts on (evaluates, rewrites, copies)."""
    return typer.Argument(metavar="MODEL", help=help)


def threshold_option(help: str = THRESHOLD_HELP) -> Any:
    """``--threshold THRESHOLD``: a score in [-1, 1] above which a pair is a duplicate."""
    return typer.Option("--threshold", metavar="THRESHOLD", min=-1.0, max=1.0, help=help)


def out_location(help: str = LOCATION_HELP) -> Any:
    """``--out LOCATION``: where a new collection goes (:class:`~dupq.collection.collection.Location` parses it)."""
    return typer.Option("--out", metavar="LOCATION", help=help)


ModelOption = Annotated[Optional[Path], model_option()]
ModelArgument = Annotated[Optional[Path], model_argument()]
CollectionArgument = Annotated[str, typer.Argument(metavar="COLLECTION", help=COLLECTION_HELP)]
# The model of a command on a collection: the one the collection was built with unless another is given.
CollectionModel = Annotated[
    Optional[Path], model_option("Model folder (default: the one the collection was built with).")
]
Threshold = Annotated[Optional[float], threshold_option()]
# What a command that writes a model folder takes.
ModelOut = Annotated[Path, typer.Option(help="Model folder to write (written beside it, then renamed into place).")]
Overwrite = Annotated[bool, typer.Option(help="Replace the model folder --out if it exists.")]
DATA_OPTION = typer.Option(
    help="Quora pairs file; default $DUPQ_DATA or ../shared/data/quora_duplicate_questions.tsv.gz"
)
# One thread: one LSTM step is too small to share (with several threads every step waits on the
# others), and a training run then gives the same weights run after run. A transformer (the
# teacher of `dupq distil`, a model it exported) encodes faster with more: pass --threads N.
THREADS = 1
Threads = Annotated[
    int,
    typer.Option(
        min=0,
        max=os.cpu_count() or 1,
        help="torch CPU threads (0: torch's default, one per core); at most this machine's CPUs.",
    ),
]


def _threads(threads: int) -> None:
    """torch's CPU threads, set when torch is first needed: a pair judged on the NumPy kernels never imports it."""
    from dupq.core.threads import use_threads

    use_threads(threads)


def _threshold(value: Optional[float], option: str = "--threshold") -> Optional[float]:
    from dupq.modeling.folder_format import check_threshold

    return None if value is None else check_threshold(value, option)


def _dropped(source: Path, dropped) -> None:
    """Name on stderr the lines of a questions file that were left out, and why."""
    if dropped.count:
        typer.echo(f"skipped {dropped.count:,} line(s) of {source}: {dropped.why()}", err=True)


def _data(data: Optional[Path]) -> Path:
    from dupq.data.pairs import DATA_HELP, default_data_path

    path = data or default_data_path()
    if not path.exists():
        raise DupqError(f"no data file at {path}; {DATA_HELP}.")
    return path


QUESTIONS_HELP = "Questions: a text file (one a line), a CSV/TSV file (see --column) or the Quora pairs file (.gz ok)."
