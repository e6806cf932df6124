"""What the lab's commands share: the repository they measure and write into, and the options several take.

The options are typer's ``Annotated`` types, as dupq's own commands declare theirs: a command takes
``model: ModelFolder = None`` and gets ``--model`` with its help.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from dupq.core.errors import DupqError
from dupq.data.pairs import default_data_path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "results"  # the saved measurements the figures are rendered from
DATA = default_data_path()
RUNS = REPO / "runs"  # where the lab keeps what it builds and caches between runs
WORK = RUNS / "bench-service"

ModelFolder = Annotated[Optional[Path], typer.Option(help="Model folder (default: the bundled model).")]
Data = Annotated[Path, typer.Option(help="Quora pairs file (default: $DUPQ_DATA, else the shared one).")]
Split = Annotated[Literal["dev", "test"], typer.Option(help="dev (choose on it) or test (only report it).")]
Seed = Annotated[int, typer.Option(help="Random seed (which questions are sampled).")]
Threads = Annotated[int, typer.Option(min=1, help="CPU threads (torch's, FAISS's).")]
CollectionFolder = Annotated[
    Optional[Path],
    typer.Option(help="Collection to measure (default: one of every Quora question, built in --work once)."),
]
Work = Annotated[Path, typer.Option(help="Folder of the built collection (and of a load test's copy and logs).")]
Index = Annotated[str, typer.Option(help="Index kind of a collection built here: flat, hnsw or ivfpq.")]
Seconds = Annotated[float, typer.Option(min=0.0, help="Length of each timed window.")]
Rounds = Annotated[int, typer.Option(min=1, help="Timed windows (rounds) of each variant; the median is reported.")]


def one_sentence(main):
    """``main`` saying a :class:`DupqError` as dupq's commands do: ``error: SENTENCE`` on stderr, exit status 2."""

    @functools.wraps(main)
    def run(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except DupqError as e:
            print(f"error: {e}", file=sys.stderr)
            raise typer.Exit(2) from e

    return run


def child(command: list, what: str, error: type[Exception] = SystemExit, tail: int = 500, **kwargs):
    """``command`` run to its end, its output captured as text; where it fails, ``error`` says ``what`` failed and
    how its stderr ended (its last ``tail`` characters)."""
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise error(f"{what} failed: {done.stderr.strip()[-tail:]}")
    return done


def last_json(done: subprocess.CompletedProcess) -> dict:
    """The JSON line a child process printed last on stdout."""
    return json.loads(done.stdout.strip().splitlines()[-1])


def timed(fn, items) -> tuple[list, list[float]]:
    """``fn(item)`` for each of ``items``, one at a time: what each call returned, and the seconds each took."""
    out, seconds = [], []
    for item in items:
        started = time.perf_counter()
        out.append(fn(item))
        seconds.append(time.perf_counter() - started)
    return out, seconds


def clocked(call, *args, **kwargs):
    """``call(*args, **kwargs)``'s result, and the seconds it took."""
    started = time.perf_counter()
    return call(*args, **kwargs), time.perf_counter() - started


def latency_ms(seconds: list[float], digits: int = 3) -> dict[str, float]:
    """``{"p50_ms", "p99_ms"}``: the median and 99th percentile of ``seconds``, in milliseconds."""
    import numpy as np

    ms = np.asarray(seconds) * 1000
    return {f"p{q}_ms": round(float(np.percentile(ms, q)), digits) for q in (50, 99)}


def report(result: dict) -> None:
    """A measurement's result: one JSON line on stdout, the line docs/results keeps."""
    print(json.dumps(result), flush=True)


def integers(text: str) -> list[int]:
    """``"16,32,64"`` as ``[16, 32, 64]``: the lists of values a sweep takes."""
    return [int(x) for x in text.split(",") if x]
