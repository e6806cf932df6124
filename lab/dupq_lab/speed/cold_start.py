"""Cold wall time of `dupq predict` and `dupq search`: a fresh process per run, start-up included.

A help desk that calls the command line once per ticket pays for the interpreter, the imports and
loading the model every time, for milliseconds of arithmetic. This builds a small collection of
synthetic questions with `dupq index build` in a temporary folder (not timed), then starts each
command ``--runs`` times after one warm-up run (which fills the disk cache, as a machine that runs
the command every few minutes has it) and prints one JSON line: per command the median, min and
max wall seconds of the whole process, and whether the run imported torch (one more run, under
the same command line, that reports ``sys.modules`` at exit).

    dupq-lab cold-start                       # the bundled model
    dupq-lab cold-start --model runs/model --runs 9
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from dupq_lab.options import ModelFolder, child, clocked, report

PAIR = ["How do I learn Python?", "What is the best way to learn Python?"]
QUERY = "How can I learn to code in Python?"
# Run the `dupq` command in this process and say, on stderr at exit, whether torch was imported.
REPORT_TORCH = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('torch imported:', 'torch' in sys.modules, file=sys.stderr))\n"
    "from dupq.cli import main\n"
    "sys.argv[0] = 'dupq'\n"
    "main()\n"
)


def dupq_command() -> list[str]:
    """The `dupq` script beside this interpreter (what a user runs), else the module."""
    script = Path(sys.executable).parent / "dupq"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "dupq.cli"]


def synthetic_questions(count: int) -> list[str]:
    """``count`` distinct synthetic questions (the collection's size hardly matters to a cold start)."""
    verbs = ["learn", "use", "install", "debug", "teach", "master", "compare", "choose"]
    things = ["Python", "Rust", "SQL", "a bicycle", "a guitar", "French", "chess", "a camera", "Excel", "Linux"]
    ways = ["How do I", "What is the best way to", "How can I", "Where should I start to", "Is it hard to"]
    made = [f"{w} {v} {t}?" for w in ways for v in verbs for t in things]
    return made[:count]


def wall_seconds(command: list[str], runs: int) -> list[float]:
    """Wall seconds of ``runs`` fresh processes of ``command``, after one that is not counted."""
    times = []
    for i in range(runs + 1):
        _, seconds = clocked(child, command, " ".join(command))
        if i:
            times.append(seconds)
    return times


def imports_torch(args: list[str]) -> bool:
    """Whether `dupq ARGS` imports torch (run in a fresh interpreter that reports sys.modules at exit)."""
    done = child([sys.executable, "-c", REPORT_TORCH, *args], "dupq " + " ".join(args))
    last = done.stderr.strip().splitlines()[-1]
    return last == "torch imported: True"


def main(
    model: ModelFolder = None,
    runs: Annotated[int, typer.Option(min=1, help="Timed runs of each command.")] = 7,
    questions: Annotated[int, typer.Option(min=1, help="Questions in the collection searched.")] = 400,
) -> None:

    model_args = ["--model", str(model)] if model else []
    folder = Path(tempfile.mkdtemp(prefix="dupq-cold-"))
    try:
        source, collection = folder / "questions.txt", str(folder / "collection")
        source.write_text("\n".join(synthetic_questions(questions)) + "\n", encoding="utf-8")
        build = [*dupq_command(), "index", "build", str(source), "--out", collection, *model_args]
        child(build, "dupq index build")
        results = []
        for cli_args in (["predict", *PAIR, *model_args], ["search", collection, QUERY]):
            times = wall_seconds([*dupq_command(), *cli_args], runs)
            shown = " ".join(f'"{a}"' if " " in a else a for a in cli_args).replace(collection, "DIR")
            results.append(
                {
                    "command": f"dupq {shown}",
                    "median_s": round(statistics.median(times), 3),
                    "min_s": round(min(times), 3),
                    "max_s": round(max(times), 3),
                    "imports_torch": imports_torch(cli_args),
                }
            )
    finally:
        shutil.rmtree(folder)
    report(
        {
            "benchmark": "cold_start",
            "model": str(model or "bundled"),
            "runs": runs,
            "collection": questions,
            "commands": results,
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
        }
    )
