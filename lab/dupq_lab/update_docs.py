"""Regenerate the figures of the docs: run each marked console block's commands and write their output.

With no FILE, every page of the docs: README.md and docs/**/*.md (:func:`doc_files`).

A block is marked by the HTML comment line ``<!-- regenerate -->`` right before a fenced
``console`` block. Each ``$ command`` line in it is run (bash, in the repository root, with
``.venv/bin`` and then this interpreter's folder first on PATH) and the lines after it, up to the
next ``$`` line, are replaced by what it printed (stdout, then stderr). A block marked
``<!-- regenerate: data -->`` is the same, but its commands read the Quora pairs file
(``$DUPQ_DATA`` or ``../shared/data/quora_duplicate_questions.tsv.gz``); where that file is
missing, the block is kept as it is and this is said on stderr. A block marked
``<!-- regenerate: table NAME -->`` is instead the Markdown table NAME of :data:`dupq_lab.figures.TABLES`,
rendered from committed inputs in docs/results/.

A console block whose commands train or time things (minutes to hours, and never the same twice)
is marked ``<!-- regenerate: saved FILE -->``: FILE (in docs/results/) keeps what its commands
printed, ``[{"command": ..., "output": [line, ...]}, ...]``, and the block is written from FILE
like a table, exactly. ``--measure`` runs such a block's commands (the measurement named in the
block) and rewrites FILE first; a block whose commands run on a GPU (``--device cuda``), or whose
FILE ends in ``_device.json`` (measured on the lent GPU machine, its CPUs included), is kept as it is
on a machine without one. ``--only TEXT`` runs only the console blocks (live, or saved
under ``--measure``) whose commands contain TEXT; tables and saved blocks are always rendered.
``--check`` writes nothing and exits 1 when a block's output would change beyond float noise: the
text between numbers must be equal, integers (counts) too, and every other number within a
relative 1e-6 of the committed one (about six significant digits) or one unit of its last printed
digit (another CPU sums in another order; ECEs and mean probabilities then differ in the tenth
digit, and a figure rounded to 4 places may land on the next one).

So a figure in the docs is never typed: it is what the command beside it printed on this machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from dupq_lab.figures import render
from dupq_lab.options import REPO

MARK = re.compile(r"^<!-- regenerate(?::\s*(?:table\s+(?P<table>\S+)|saved\s+(?P<saved>\S+)|(?P<data>data)))?\s*-->$")


def doc_files() -> list[Path]:
    """Every page of the docs that may hold a figure: README.md and docs/**/*.md, in a fixed order."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def missing_data() -> Path | None:
    """Where the Quora pairs file should be (as ``dupq`` looks for it, from the repository root), if it is not there."""
    from dupq.data.pairs import default_data_path

    path = REPO / default_data_path()
    return None if path.is_file() else path


def run(command: str) -> list[str]:
    """What ``command`` prints, by line: the ``dupq`` and ``python`` of .venv, else those beside this interpreter."""
    path = os.pathsep.join([str(REPO / ".venv" / "bin"), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path, "COLUMNS": "200"}
    done = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True)
    return (done.stdout + done.stderr).rstrip("\n").splitlines()


def measured(commands: list[str], saved: str, measure: bool, only: str) -> list[str]:
    """The lines of a saved block: ``$ command`` and its output, from ``saved`` (run again first under ``measure``)."""
    path = REPO / saved
    on_device = any("--device cuda" in c for c in commands) or path.name.endswith("_device.json")
    if measure and on_device and shutil.which("nvidia-smi") is None:
        print(f"keeping {saved}: it was measured on a machine with a GPU and this machine has none", file=sys.stderr)
        measure = False
    if measure and (not only or any(only in c for c in commands)):
        runs = []
        for command in commands:
            print(f"measuring: {command}", file=sys.stderr)
            runs.append({"command": command, "output": run(command)})
        path.write_text(json.dumps(runs, indent=1) + "\n")
    if not path.is_file():
        raise SystemExit(f"{saved} does not exist; run `dupq-lab figures FILE --measure --only TEXT` to measure it")
    return [line for entry in json.loads(path.read_text()) for line in (f"$ {entry['command']}", *entry["output"])]


NUMBER = re.compile(r"-?\d+(?:\.(?P<decimals>\d+))?(?:[eE](?P<exponent>[-+]?\d+))?")


def last_digit(number: re.Match) -> float:
    """One unit of a printed number's last digit: 0.01 for ``0.73``, 1e-06 for ``1.2e-05``; 0 for an integer (exact)."""
    decimals, exponent = number.group("decimals"), number.group("exponent")
    if decimals is None and exponent is None:
        return 0.0
    return 10.0 ** (int(exponent or 0) - len(decimals or ""))


def same_within_noise(before: str, after: str) -> bool:
    """``after`` is ``before`` up to float noise in its numbers (see the module's ``--check``)."""
    if NUMBER.sub("\0", before) != NUMBER.sub("\0", after):  # the text between the numbers
        return False
    for old, new in zip(NUMBER.finditer(before), NUMBER.finditer(after)):
        a, b, unit = float(old.group()), float(new.group()), last_digit(old)
        if unit == 0.0 and last_digit(new) == 0.0:  # two integers: counts, exact
            if a != b:
                return False
        elif abs(a - b) > max(1e-6 * max(abs(a), abs(b)), 1.0001 * unit):
            return False
    return True


def regenerate(lines: list[str], only: str, measure: bool = False) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        mark = MARK.match(line.strip())
        i += 1
        if not mark:
            continue
        if mark.group("table"):  # replace the Markdown table lines that follow
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            out.extend(render(mark.group("table")))
            continue
        if i >= len(lines) or not lines[i].startswith("```"):
            raise SystemExit(f"a <!-- regenerate --> mark must precede a fenced block (line {i})")
        out.append(lines[i])
        i += 1
        block: list[str] = []
        while i < len(lines) and not lines[i].startswith("```"):
            block.append(lines[i])
            i += 1
        commands = [b for b in block if b.startswith("$ ")]
        if mark.group("saved"):
            out.extend(measured([c[2:] for c in commands], mark.group("saved"), measure, only))
            continue
        if only and not any(only in c for c in commands):
            out.extend(block)
            continue
        if mark.group("data") and (where := missing_data()):
            kept = f"kept as it is: `{commands[0][2:]}` reads the Quora pairs file, which is not at {where}"
            print(kept, file=sys.stderr)
            out.extend(block)
            continue
        for command in commands:
            out.append(command)
            print(f"running: {command[2:]}", file=sys.stderr)
            out.extend(run(command[2:]))
    return out


def main(
    files: Annotated[
        Optional[list[Path]], typer.Argument(help="Pages to update (default: README.md and docs/**/*.md).")
    ] = None,
    only: Annotated[str, typer.Option(help="Only the console blocks whose commands contain this text.")] = "",
    check: Annotated[bool, typer.Option(help="Exit 1 where a page would change; write nothing.")] = False,
    measure: Annotated[bool, typer.Option(help="Run the commands of saved blocks and rewrite their files.")] = False,
) -> None:
    if check and measure:
        raise typer.BadParameter("--measure rewrites the saved results; it cannot be a --check")
    changed = False
    for path in files or doc_files():
        before = path.read_text().splitlines()
        after = regenerate(before, only, measure)
        if after != before:
            changed = changed or not (
                check and len(after) == len(before) and all(map(same_within_noise, before, after))
            )
            if not check:
                path.write_text("\n".join(after) + "\n")
                print(f"updated {path}", file=sys.stderr)
    sys.exit(1 if check and changed else 0)
