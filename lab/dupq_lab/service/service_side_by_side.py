"""This code's service against an earlier revision's, on the same machine in the same run; prints one JSON line.

Rates drift by up to 2x between sessions on a shared VM, so a speed-up is only a figure when both sides
ran back to back. This runs ``dupq-lab service-load`` alternately on the baseline (``--baseline-code``,
the ``src`` folder of a checkout of the earlier revision, serving its own collection from one process,
as that code did) and on this checkout (``dupq serve``'s default workers), ``--rounds`` times each, and
reports each side's median searches/s, p99 and in-process single-search rate, and their ratios.

    git worktree add --detach ../dupq-baseline f058291
    (cd ../dupq-baseline && PYTHONPATH=src python -m dupq.cli index build DATA --out ../quora-hnsw-baseline --index hnsw)
    dupq index build DATA --out ../quora-hnsw --index hnsw
    dupq-lab service-side-by-side --baseline-code ../dupq-baseline/src --baseline-label f058291 \\
        --baseline-collection ../quora-hnsw-baseline --collection ../quora-hnsw --seconds 20
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Annotated

import typer

from dupq_lab.options import RUNS, Rounds, Seconds, child, last_json


def run(collection: Path, work: Path, seconds: float, code: Path | None) -> dict:
    command = [sys.executable, "-m", "dupq_lab", "service-load", "--collection", str(collection)]
    command += ["--seconds", str(seconds), "--work", str(work)]
    command += ["--code", str(code)] if code is not None else []
    return last_json(child(command, f"service_load.py ({'baseline' if code else 'current'})"))


def summary(runs: list[dict]) -> dict:
    """The medians of a side's runs (search-only rate and p99, mixed p99, in-process rate and p50), and its kill -9 losses."""

    def median(get) -> float:
        return round(statistics.median(get(r) for r in runs), 3)

    return {
        "search_per_s": median(lambda r: r["search_only"]["search"]["per_s"]),
        "search_p50_ms": median(lambda r: r["search_only"]["search"]["p50_ms"]),
        "search_p99_ms": median(lambda r: r["search_only"]["search"]["p99_ms"]),
        "mixed_search_per_s": median(lambda r: r["mixed"]["search"]["per_s"]),
        "mixed_p99_ms": median(
            lambda r: max(r["mixed"]["search"]["p99_ms"], r["mixed"].get("add", {}).get("p99_ms", 0))
        ),
        "in_process_per_s": median(lambda r: r["in_process"]["per_s"]),
        "in_process_p50_ms": median(lambda r: r["in_process"]["p50_ms"]),
        "kill9_acked": sum(r["kill9"]["acked_adds"] for r in runs),
        "kill9_lost": sum(r["kill9"]["lost"] for r in runs),
        "errors": sum(r["search_only"]["search"]["errors"] + r["mixed"]["search"]["errors"] for r in runs),
    }


def main(
    baseline_code: Annotated[Path, typer.Option(help="src folder of the earlier revision's checkout.")],
    baseline_collection: Annotated[Path, typer.Option(help="A collection built by the baseline code.")],
    collection: Annotated[Path, typer.Option(help="A collection built by this code.")],
    baseline_label: Annotated[
        str, typer.Option(help="What to call the baseline in the output (e.g. its commit).")
    ] = "baseline",
    rounds: Rounds = 2,
    seconds: Seconds = 20.0,
    work: Annotated[Path, typer.Option(help="Folder of each side's load-test copy and logs.")] = RUNS
    / "bench-side-by-side",
) -> None:

    sides: dict[str, list[dict]] = {"baseline": [], "current": []}
    for _ in range(rounds):  # alternate, so a change in the machine's load falls on both sides
        sides["baseline"].append(run(baseline_collection, work / "baseline", seconds, baseline_code))
        sides["current"].append(run(collection, work / "current", seconds, None))
    base, now = summary(sides["baseline"]), summary(sides["current"])
    result = {
        "command": f"dupq-lab service-side-by-side --seconds {seconds:g} --rounds {rounds}",
        "baseline": {"label": baseline_label, **base},
        "current": now,
        "search_per_s_ratio": round(now["search_per_s"] / base["search_per_s"], 2),
        "in_process_per_s_ratio": round(now["in_process_per_s"] / base["in_process_per_s"], 2),
        "runs": {
            side: [{k: r[k] for k in ("in_process", "search_only", "mixed", "kill9", "machine")} for r in runs]
            for side, runs in sides.items()
        },
    }
    print(json.dumps(result))
