"""Throughput and memory of `dupq predict --pairs` over a million lines.

Builds a pairs file from the real Quora questions (cycled to the wanted length) in a temporary
folder outside the repository, runs `dupq predict --pairs FILE` as a child process on its first
100,000 lines and then on all of it, and prints one JSON line: pairs/s and the child's peak RSS
(``os.wait4`` rusage of that child alone) for both runs. Flat memory means the two peaks match:
the stream holds one chunk at a time whatever the file's length.

    dupq-lab predict-stream                     # the bundled model
    dupq-lab predict-stream --model runs/model
"""

from __future__ import annotations

import os
import platform
import shutil
import string
import subprocess
import sys
import tempfile
import time
from itertools import cycle, islice
from pathlib import Path
from typing import Annotated

import typer

from dupq.data.pairs import read_pairs
from dupq_lab.options import DATA, Data, ModelFolder, report


def usable(q1: list[str], q2: list[str]) -> list[tuple[str, str]]:
    """The pairs whose two questions both hold a word (a few real ones are only punctuation)."""
    strip = str.maketrans("", "", string.punctuation)
    return [(a, b) for a, b in zip(q1, q2) if a.translate(strip).split() and b.translate(strip).split()]


def write_lines(path: Path, pairs: list[tuple[str, str]], count: int) -> None:
    clean = str.maketrans({"\t": " ", "\n": " ", "\r": " "})
    with open(path, "w", encoding="utf-8") as f:
        for a, b in islice(cycle(pairs), count):
            f.write(f"{a.translate(clean)}\t{b.translate(clean)}\n")


def run(model: str, path: Path, chunk: int) -> dict:
    """One `dupq predict --pairs` child: seconds, output lines, peak RSS (MiB) of that child."""
    out_path = path.with_suffix(".out")
    command = [sys.executable, "-m", "dupq.cli", "predict", "--pairs", str(path), "--chunk", str(chunk)]
    command += ["--model", model] if model else []
    started = time.perf_counter()
    with open(out_path, "wb") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    err = child.stderr.read().decode(errors="replace")
    child.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"dupq predict failed: {err.strip()}")
    with open(out_path, "rb") as f:
        lines = sum(1 for _ in f)
    out_path.unlink()
    return {
        "lines": lines,
        "seconds": round(seconds, 2),
        "pairs_per_s": round(lines / seconds),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
    }


def main(
    model: ModelFolder = None,
    data: Data = DATA,
    lines: Annotated[int, typer.Option(min=1, help="Lines of the long run.")] = 1_000_000,
    small: Annotated[int, typer.Option(min=1, help="Lines of the first, shorter run.")] = 100_000,
    chunk: Annotated[int, typer.Option(min=1, help="dupq predict --chunk.")] = 4096,
) -> None:

    pairs, _ = read_pairs(data)
    folder = Path(tempfile.mkdtemp(prefix="dupq-stream-"))
    try:
        short, long = folder / "small.tsv", folder / "large.tsv"
        good = usable(pairs.q1, pairs.q2)
        write_lines(short, good, small)
        write_lines(long, good, lines)
        size_mib = long.stat().st_size / 2**20
        first = run(model, short, chunk)
        second = run(model, long, chunk)
    finally:
        shutil.rmtree(folder)
    report(
        {
            "benchmark": "predict_stream",
            "model": str(model or "bundled"),
            "chunk": chunk,
            "file_mib": round(size_mib, 1),
            **second,  # lines, seconds, pairs_per_s, peak_rss_mib of the long run
            f"peak_rss_mib_at_{small}": first["peak_rss_mib"],
            f"pairs_per_s_at_{small}": first["pairs_per_s"],
            "rss_growth_mib": round(second["peak_rss_mib"] - first["peak_rss_mib"], 1),
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
        }
    )
