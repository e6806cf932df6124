"""The seed spread of `dupq adapt`: the help-desk yardstick's two halves, with and without the branch, seed by seed.

`dupq adapt` as a user runs it (the default recipe, one seed at a time, ``--jobs`` of them side by side, one thread
each), on the help-desk yardstick's collection (``dupq-lab out-of-domain --write-questions``), then each adapted
model on the yardstick's dev and test halves: Recall@1 of the model with its static branch and of its LSTM alone
(``--no-branch``'s vectors). Nothing is chosen here: the spread says how far one run's figure can be from another's.

    dupq-lab adapt-seeds QUESTIONS [--seeds 0-12] [--jobs 2] [--work runs/adapt-seeds] [--cache DIR]

An adapted model already in ``--work`` (its folder ``seed-N``) is measured, not adapted again. Prints one JSON line
per seed ({"seed", "dev", "test", "dev_no_branch", "test_no_branch"}), then one with each figure's mean, standard
deviation, minimum and maximum over the seeds.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from dupq.core.errors import DupqError
from dupq.evaluation.retrieval import retrieval_measures
from dupq.evaluation.tasks import shipped_help_desk_task
from dupq.modeling.model import ENCODE_BATCH, Model
from dupq_lab.options import DATA, Data

WORK = Path("runs/adapt-seeds")  # in the repository, where dupq-lab figures runs


def seeds_of(text: str) -> list[int]:
    """``"0-3,7"`` as ``[0, 1, 2, 3, 7]``."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        out += range(int(first), int(last or first) + 1)
    return out


def adapt_all(questions: Path, seeds: list[int], work: Path, cache: Path, jobs: int, data: Path) -> None:
    """``dupq adapt`` for each seed whose folder ``work/seed-N`` is missing, ``jobs`` at a time."""
    waiting = [s for s in seeds if not (work / f"seed-{s}" / "config.json").is_file()]
    running: list[tuple[int, subprocess.Popen]] = []
    while waiting or running:
        while waiting and len(running) < jobs:
            seed = waiting.pop(0)
            command = [str(Path(sys.executable).with_name("dupq")), "adapt", str(questions), "--out", str(work / f"seed-{seed}"),
                       "--seed", str(seed), "--cache", str(cache), "--data", str(data), "--threads", "1",
                       "--no-progress", "--overwrite"]  # fmt: skip
            log = open(work / f"seed-{seed}.log", "w")  # noqa: SIM115 (closed when the process is reaped)
            running.append((seed, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)))
        seed, process = running.pop(0)
        if process.wait() != 0:
            raise DupqError(f"dupq adapt of seed {seed} failed: see {work / f'seed-{seed}.log'}.")


def recall_at_1(model: Model, task) -> float:
    return round(retrieval_measures(lambda texts: model.encode(texts, batch_size=ENCODE_BATCH), task)["recall@1"], 4)


def main(
    questions: Annotated[
        Path, typer.Argument(help="The help desk's questions (dupq-lab out-of-domain --write-questions).")
    ],
    seeds: Annotated[str, typer.Option(help="Seeds: a list and ranges, e.g. 0-12 or 0,3,5.")] = "0-12",
    jobs: Annotated[int, typer.Option(min=1, help="Adaptations side by side (one thread each).")] = 2,
    work: Annotated[Path, typer.Option(help="Folder of the adapted models (seed-N) and their logs.")] = WORK,
    cache: Annotated[Optional[Path], typer.Option(help="The teacher's vectors (default: WORK/teacher).")] = None,
    data: Data = DATA,
) -> None:
    try:
        chosen = seeds_of(seeds)
        work.mkdir(parents=True, exist_ok=True)
        cache = cache or work / "teacher"
        if not (cache / "teacher.json").is_file() and len(chosen) > 1:
            adapt_all(questions, chosen[:1], work, cache, 1, data)  # the teacher runs once; the others read its cache
        adapt_all(questions, chosen, work, cache, jobs, data)
        tasks = {split: shipped_help_desk_task(data, split)[0] for split in ("dev", "test")}
        rows = []
        for seed in chosen:
            model = Model.load(work / f"seed-{seed}")
            row: dict = {"seed": seed}
            for name, m in (
                ("", model),
                ("_no_branch", Model(model.encoder.without_branch(), model.judge, model.metrics)),
            ):
                row.update({f"{split}{name}": recall_at_1(m, task) for split, task in tasks.items()})
            print(json.dumps(row), flush=True)
            rows.append(row)
    except DupqError as e:
        print(f"error: {e}", file=sys.stderr)
        raise typer.Exit(2) from e
    keys = [k for k in rows[0] if k != "seed"]
    summary = {
        k: {
            "mean": round(statistics.mean(v), 4),
            "sd": round(statistics.stdev(v), 4) if len(v) > 1 else 0.0,
            "min": min(v),
            "max": max(v),
        }
        for k in keys
        for v in [[r[k] for r in rows]]
    }
    print(json.dumps({"seeds": len(rows), "recall@1": summary}))


if __name__ == "__main__":
    typer.run(main)
