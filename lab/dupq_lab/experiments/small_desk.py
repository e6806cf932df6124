"""A small help desk adapting as a new user would: `dupq adapt` on its few hundred old questions, with Quora mixed in or not.

The desk is the help-desk yardstick's 420 old questions (:mod:`dupq.evaluation.tasks`), all it holds; its new
questions of ``--split`` search them, alone (a desk's own archive) and among Quora's 19,862 distractors (the
yardstick). For each ``--mix`` (``dupq adapt --mix N``: with fewer questions than N, Quora's training questions
are added up to N; 0 adds none), ``dupq adapt DESK --mix N`` runs as a user types it, and what it printed is kept
in ``WORK/mix-N.log``. The model before adapting (``--model``, default the bundled one) is measured beside them.

An adapted model already in ``WORK`` (``mix-N``) is measured, not adapted again. Prints one JSON line per model:
{"model", "mix", "desk": {measures}, "with_distractors": {measures}}, Recall@1 = the share of new questions whose
old question comes first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from dupq.core.errors import DupqError
from dupq.core.files import atomic_write
from dupq.evaluation.retrieval import retrieval_measures
from dupq.evaluation.tasks import help_desk_task, read_help_desk_pairs, shipped_help_desk_task
from dupq.modeling.model import ENCODE_BATCH, Model
from dupq_lab.options import DATA, Data, ModelFolder, Split, integers, one_sentence

WORK = Path("runs/small-desk")  # in the repository, where dupq-lab figures runs
SHOWN = ("recall@1", "mrr@10", "recall@10")


def adapted(desk: Path, mix: int, base: Path | None, work: Path, data: Path) -> Path:
    """The folder of ``dupq adapt DESK --mix MIX`` (run now unless it is there); its output is in ``mix-N.log``."""
    out = work / f"mix-{mix}"
    if not (out / "config.json").is_file():
        command = [str(Path(sys.executable).with_name("dupq")), "adapt", str(desk), "--out", str(out), "--mix", str(mix),
                   "--data", str(data), "--no-progress", "--overwrite", *(["--model", str(base)] if base else [])]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True)
        atomic_write(work / f"mix-{mix}.log", (done.stdout + done.stderr).encode("utf-8"))
        if done.returncode != 0:
            raise DupqError(f"dupq adapt --mix {mix} failed: see {work / f'mix-{mix}.log'}.")
    return out


def shown(model: Model, task) -> dict[str, float]:
    measures = retrieval_measures(lambda texts: model.encode(texts, batch_size=ENCODE_BATCH), task)
    return {k: round(measures[k], 4) for k in SHOWN}


@one_sentence
def main(
    split: Split = "dev",
    mix: Annotated[str, typer.Option(help="dupq adapt --mix values, comma-separated.")] = "0,20000",
    model: ModelFolder = None,
    work: Annotated[Path, typer.Option(help="Folder of the desk's questions and the adapted models.")] = WORK,
    data: Data = DATA,
) -> None:
    file = read_help_desk_pairs()
    work.mkdir(parents=True, exist_ok=True)
    desk = work / "desk.txt"
    atomic_write(desk, "".join(f"{q}\n" for q in dict.fromkeys(file.old)).encode("utf-8"))
    tasks = {"desk": help_desk_task(file, split, []), "with_distractors": shipped_help_desk_task(data, split)[0]}
    folders = {"before": model} | {n: adapted(desk, n, model, work, data) for n in integers(mix)}
    for name, folder in folders.items():
        loaded = Model.load(folder)
        measures = {t: shown(loaded, task) for t, task in tasks.items()}
        print(json.dumps({"model": str(folder or "bundled"), "mix": name, **measures}), flush=True)
