"""The command line's one convention (docs/cli.md), checked on every command and group of the typer tree.

- The thing a command acts on is its argument; a model it only uses is ``--model MODEL``, declared once
  (:func:`dupq.cli.common.model_option`); a threshold is ``--threshold THRESHOLD``.
- A collection read is the ``COLLECTION`` argument; where a new one goes is ``--out LOCATION``.
- No two options of a command set the same thing; every parameter has help.
- Old names (``dupq export``, ``--store``, ``--retrieval``...) are refused in one sentence naming the new form.

:func:`violations` is run on a small app that breaks each rule too, so that the check itself can fail.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Optional

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from dupq.cli import app
from dupq.cli.common import CollectionArgument, ModelOption, Threshold, out_location
from support.errors import refused

# Options that look like a rule's subject but are not: the second model `teacher-model` joins to its TEACHER argument,
# and the second model of a collection or a dedup run, which orders or judges the candidates (`--model` finds them).
EXCEPTIONS = {("distil teacher-model", "--join"), ("index build", "--rerank"), ("dedup", "--rerank")}
# Names that are gone: no command may take them again as options.
RETIRED = {"--store", "--retrieval", "--collection"}
MODEL_HELP = re.compile(r"(an? |the )?(dupq )?(lstm )?model (folder|to)\b")  # help that says the option is a model
LOCATION_HELP = re.compile(r"milvus(:|\+http)")  # help that says the option takes a collection's location


def commands(group, path: str = ""):
    """(path, command) for every command and group under ``group``, hidden ones (the refusals) left out."""
    for name, command in group.commands.items():
        if command.hidden:
            continue
        full = f"{path} {name}".strip()
        yield full, command
        if hasattr(command, "commands"):
            yield from commands(command, full)


def violations(root) -> list[str]:
    """Every breach of the convention in the click tree ``root``, one line each."""
    found = []
    for path, command in commands(root):
        if not (command.help or "").strip():
            found.append(f"{path}: no help")
        names: list[str] = []
        for p in command.params:
            if p.name == "help":
                continue
            kind = p.param_type_name  # "option" or "argument"
            opts = [*p.opts, *getattr(p, "secondary_opts", [])]
            where = f"{path} {opts[0] if kind == 'option' else p.name}"
            help_text = (getattr(p, "help", None) or "").strip()
            if not help_text:
                found.append(f"{where}: no help")
            if kind == "option":
                names += opts
                if len([o for o in p.opts if o.startswith("--")]) > 1:
                    found.append(f"{where}: two long names for one option ({', '.join(p.opts)})")
                if set(opts) & RETIRED:
                    found.append(f"{where}: a retired option")
                if re.search(r"\bsame as --", help_text, re.IGNORECASE):
                    found.append(f"{where}: an alias of another option")
            if (path, opts[0]) in EXCEPTIONS:
                continue
            lowered = help_text.lower()
            # a model: the argument, or --model; declared with the shared MODEL metavar either way
            if p.name == "model" or "--model" in opts or p.metavar == "MODEL":
                if kind == "option" and (p.opts != ["--model"] or p.metavar != "MODEL"):
                    found.append(f"{where}: a model option that is not the shared --model MODEL")
                if kind == "argument" and p.metavar != "MODEL":
                    found.append(f"{where}: a model argument that is not the shared MODEL")
            elif kind == "option" and MODEL_HELP.match(lowered) and "to write" not in lowered:
                found.append(f"{where}: a model option under another name than --model")
            if p.name == "threshold" and (p.opts != ["--threshold"] or p.metavar != "THRESHOLD"):
                found.append(f"{where}: a threshold that is not the shared --threshold THRESHOLD")
            # a collection: the COLLECTION argument it acts on, or --out LOCATION where a new one goes
            if p.name == "collection" and (kind != "argument" or p.metavar != "COLLECTION"):
                found.append(f"{where}: a collection that is not the shared COLLECTION argument")
            if kind == "option" and LOCATION_HELP.search(lowered) and (p.opts != ["--out"] or p.metavar != "LOCATION"):
                found.append(f"{where}: a collection location that is not the shared --out LOCATION")
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            found.append(f"{path}: {', '.join(repeated)} given to two options")
    return found


def test_every_command_keeps_the_convention():
    assert violations(typer.main.get_command(app)) == []


def test_the_check_fails_on_each_kind_of_breach():
    bad = typer.Typer()

    @bad.command()
    def build(  # noqa: PLR0913 - one parameter per rule broken
        questions: Annotated[Path, typer.Argument(help="Questions.")],
        out: Annotated[str, out_location()],
        store: Annotated[Optional[str], typer.Option(help="Instead of --out, milvus:PATH.db.")] = None,
        model: Annotated[Optional[Path], typer.Option(help="Model folder (default: the bundled model).")] = None,
        base: Annotated[Optional[Path], typer.Option(help="Model folder to start from.")] = None,
        threshold: Annotated[Optional[float], typer.Option(help="Decision threshold.")] = None,
        retrieval: Annotated[bool, typer.Option(help="Ranking figures (the same as --task quora-retrieval).")] = False,
        quiet: Annotated[bool, typer.Option("--quiet", "--silent", help="Say less.")] = False,
        undocumented: int = 0,
    ) -> None:
        """Build."""

    @bad.command()
    def search(collection: Annotated[str, typer.Option(help="A collection.")], model: ModelOption = None) -> None:
        """Search."""

    found = "\n".join(violations(typer.main.get_command(bad)))
    for expected in (
        "build --store: a retired option",
        "build --store: a collection location that is not the shared --out LOCATION",
        "build --model: a model option that is not the shared --model MODEL",
        "build --base: a model option under another name than --model",
        "build --threshold: a threshold that is not the shared --threshold THRESHOLD",
        "build --retrieval: a retired option",
        "build --retrieval: an alias of another option",
        "build --quiet: two long names for one option",
        "build --undocumented: no help",
        "search --collection: a collection that is not the shared COLLECTION argument",
    ):
        assert expected in found, found
    assert "search --model" not in found and "build --out" not in found


def test_the_shared_declarations_pass_the_check():
    good = typer.Typer()

    @good.command()
    def search(collection: CollectionArgument, model: ModelOption = None, threshold: Threshold = None) -> None:
        """Search."""

    @good.command()
    def other() -> None:
        """Another command, so that typer keeps the group."""

    assert violations(typer.main.get_command(good)) == []


@pytest.mark.parametrize(
    "args, said",
    [
        (["export", "m", "out", "--half"], "error: `dupq export` is now `dupq compact MODEL --out OUT`."),
        (["export", "--help"], "error: `dupq export` is now `dupq compact MODEL --out OUT`."),
        (["distil", "export", "--out", "m"], "error: `dupq distil export` is now `dupq distil teacher-model"),
        (["index", "build", "q.txt", "--store", "milvus:x.db"], "error: --store is now --out LOCATION"),
        (["evaluate", "--retrieval"], "error: --retrieval is now --task quora-retrieval"),
        (["dedup", "--collection", "c", "--out", "g.csv"], "error: --collection is now the QUESTIONS argument"),
        (["distil", "branch", "--model", "m", "--out", "b"], "error: --model is now the MODEL argument"),
        (["distil", "teacher-model", "--teacher", "t"], "error: --teacher is now the TEACHER argument"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_old_names_are_refused_in_one_sentence_naming_the_new_form(args, said):
    result = CliRunner().invoke(app, args)
    assert refused(result).startswith(said), result.output


def test_the_refusals_are_hidden_from_help():
    shown = CliRunner().invoke(app, ["--help"]).output + CliRunner().invoke(app, ["distil", "--help"]).output
    assert "compact" in shown and "teacher-model" in shown
    assert not re.search(r"│ export ", shown)
    for path in (["index", "build"], ["evaluate"], ["dedup"]):
        assert not re.search(r"--store|--retrieval|--collection", CliRunner().invoke(app, [*path, "--help"]).output)
