"""Train and judge several recipes; one JSON line per recipe (the tables of docs/experiments/).

    dupq-lab quality-sweep --out runs/sweep --only labelled,labelled-cos [--jobs 2 --threads 1]
    dupq-lab quality-sweep --list

Each configuration is a preset of the package (``seed``, ``labelled``, ``bundled``) and the options
it changes, written as a preset file beside the run (``runs/sweep/NAME.toml``, ``extends`` the
package's) and trained with ``dupq train --preset`` that file. Every choice is made on data that
is not the test pairs:

* ``dev_accuracy``: accuracy on the dev pairs at the threshold chosen there (what `dupq train`
  stores in the model);
* ``dev_mrr@10``, ``dev_ndcg@10``: retrieval on the dev rows alone (`dupq-lab retrieval --split dev`);
* ``val_accuracy``: the best epoch's accuracy on the pool pairs held out for validation.

``clean_accuracy`` and ``clean_roc_auc`` are the hand-written pairs of ``dupq evaluate --task clean-pairs``
(at the model's own threshold), never used to choose.

The test figures (accuracy at the dev threshold, ROC-AUC, expected calibration error, retrieval
MRR@10 and nDCG@10 on the test and dev rows, as `dupq evaluate --task quora-retrieval` reports them) are
printed too, for the record, never for choosing. Lines of earlier sweeps hold ``dev_mrr`` and
``test_mrr`` instead: question2's rank alone, every rank counted.
A configuration whose model folder is already complete is judged again without retraining.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Annotated

import typer

from dupq_lab.options import DATA, Data, Threads

# What the seed recipe's best run (the bundled model before stage 5) added to it: its tokenizer and regularisation.
WORDS = {"lowercase": True, "oov_buckets": 4096, "min_count": 2, "dropout": 0.2}
SHORT = {"epochs": 2}  # ablations: two epochs each, the same budget
# The labelled recipe's own losses spelled out, to add a distillation loss to them.
TRIPLET = {"weight": 1.0, "reduction": "mean", "symmetric": True}  # the labelled recipe's triplet loss
LABELLED_LOSSES = {"bce": 1.0, "ranking": 1.0, "triplet": TRIPLET}
TEACHER = {"teacher_vectors": "runs/teacher"}  # `dupq distil teach --out runs/teacher` first

# name -> (the package's preset it starts from, the options it changes): `dupq train --preset NAME.toml`
CONFIGS: dict[str, tuple[str, dict]] = {
    "seed": ("seed", {}),
    "seed-best": (
        "seed",
        {**WORDS, "losses": {"triplet": {"weight": 1.0, "symmetric": True}}},
    ),  # the previous bundled model
    # Six epochs: the pair head against a scaled cosine.
    "labelled-cos-6": ("labelled", {"head": "cosine"}),
    "labelled-mlp-6": ("labelled", {}),
    # Two epochs: one change at a time against mlp-2.
    "mlp-2": ("labelled", SHORT),
    "mlp-nomask-2": ("labelled", {**SHORT, "mask_false_negatives": False, "hard_negatives": False}),
    "mlp-bce-only-2": ("labelled", {**SHORT, "losses": {"bce": 1.0}}),
    # Less pull from the pair loss on the encoder, no labelled hard negatives: a more lenient cosine?
    "mlp-softbce-2": ("labelled", {**SHORT, "hard_negatives": False, "losses": {**LABELLED_LOSSES, "bce": 0.3}}),
    # Distillation: mlp-2 plus one teacher loss.
    "distil-2": ("labelled", {**SHORT, **TEACHER, "losses": {**LABELLED_LOSSES, "distil": 5.0}}),
    "distil-matrix-2": ("labelled", {**SHORT, **TEACHER, "losses": {**LABELLED_LOSSES, "distil_matrix": 30.0}}),
    # Six epochs, as labelled-mlp-6 (the bundled model before distillation), two teacher weights.
    "distil-6": ("labelled", {**TEACHER, "losses": {**LABELLED_LOSSES, "distil": 5.0}}),
    "distil15-6": ("labelled", {**TEACHER, "losses": {**LABELLED_LOSSES, "distil": 15.0}}),
    # distil-6 with word embeddings that start from the teacher's vector of each word: the bundled model's run.
    "distil-words-6": ("bundled", {}),
    # distil-words-6 encoding under bfloat16 autocast (~2x faster steps on this CPU): does quality hold?
    "distil-words-bf16-6": ("bundled", {"bf16": True}),
    "distil15-words-6": ("bundled", {"losses": {**LABELLED_LOSSES, "distil": 15.0}}),
}


def command(name: str) -> str:
    """How a configuration reads as a command: its preset, then its changes (flags where `dupq train` has them)."""
    from dupq.core.options import flag_fields
    from dupq.training.presets import CONFIGS as DATACLASSES
    from dupq.training.presets import to_toml

    preset, changes = CONFIGS[name]
    flagged = {f.name for config in DATACLASSES for f in flag_fields(config)}
    words = [f"dupq train --preset {preset}"]
    tables = any(isinstance(w, dict) for w in changes.get("losses", {}).values())  # a loss's arguments: no flag
    for key, value in changes.items():
        option = "--" + key.replace("_", "-")
        if key == "losses" and not tables:
            words += [f"--loss {loss}:{weight:g}" for loss, weight in value.items()]
        elif key in flagged:
            words.append(option if value is True else f"--no-{option[2:]}" if value is False else f"{option} {value}")
    others = {k: v for k, v in changes.items() if k not in flagged and (k != "losses" or tables)}
    if others:  # options without a flag: what the run's preset file adds
        words.append("+ " + "; ".join(line for line in to_toml(others).splitlines() if line))
    return " ".join(words)


def judge(name: str, folder: Path, data: str, threads: int) -> dict:
    """The dev and test figures of a trained model folder (the model is loaded from disk)."""
    import torch

    from dupq.data.pairs import read_pairs, split_pairs
    from dupq.evaluation.evaluate import evaluate
    from dupq.evaluation.retrieval import held_out_task, retrieval_measures
    from dupq.evaluation.tasks import clean_pairs
    from dupq.modeling.model import ENCODE_BATCH, Model

    torch.set_num_threads(threads)
    model = Model.load(folder)
    pairs = read_pairs(data)[0]
    splits = split_pairs(pairs)
    test = evaluate(model, splits.test)
    encode = functools.partial(model.encode, batch_size=ENCODE_BATCH)
    dev_retrieval = retrieval_measures(encode, held_out_task(splits, pairs, parts=("dev",)))
    test_retrieval = retrieval_measures(encode, held_out_task(splits, pairs))
    training = model.metrics.get("training", {})
    history = training.get("history", [])
    best = training.get("best_epoch") or len(history)
    calibration = model.metrics.get("calibration", {})
    return {
        "name": name,
        "command": command(name),
        "dev_accuracy": round(calibration.get("dev_accuracy", float("nan")), 4),
        "dev_mrr@10": round(dev_retrieval["mrr@10"], 4),
        "dev_ndcg@10": round(dev_retrieval["ndcg@10"], 4),
        "val_accuracy": round(history[best - 1]["val_accuracy"], 4)
        if history and "val_accuracy" in history[best - 1]
        else None,
        "best_epoch": best,
        "epochs": len(history),
        "threshold_on": model.threshold_on,
        "threshold": round(model.threshold, 4),
        "test_accuracy": round(test["accuracy"], 4),
        "test_f1": round(test["f1"], 4),
        "roc_auc": round(test["roc_auc"], 4),
        "test_ece": round(test["expected_calibration_error"], 4) if "expected_calibration_error" in test else None,
        "test_mrr@10": round(test_retrieval["mrr@10"], 4),
        "test_ndcg@10": round(test_retrieval["ndcg@10"], 4),
        **{f"clean_{k}": v for k, v in clean_pairs(model).items() if k in ("accuracy", "roc_auc")},
        "train_seconds": round(sum(h["seconds"] for h in history), 1),
    }


def run_one(name: str, data: Path, out: Path, threads: int, train_only: bool = False) -> dict:
    from dupq.training.presets import to_toml

    folder = out / name
    if not (folder / "model.safetensors").exists() or not (folder / "metrics.json").exists():
        preset, changes = CONFIGS[name]
        recipe = out / f"{name}.toml"
        recipe.write_text(to_toml({"extends": preset, **changes}), encoding="utf-8")
        dupq = Path(sys.executable).with_name("dupq")
        train = [
            str(dupq),
            "train",
            "--preset",
            str(recipe),
            "--data",
            data,
            "--out",
            str(folder),
            "--threads",
            str(threads),
            "--no-progress",
        ]
        train += ["--resume"] if (folder / "checkpoint.safetensors").exists() else []
        started = time.perf_counter()
        with open(out / f"{name}.log", "a") as log:
            subprocess.run(train, check=True, stdout=log, stderr=subprocess.STDOUT)
        print(f"# {name}: trained in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return {"name": name, "trained": str(folder)} if train_only else judge(name, folder, data, threads)


def main(
    data: Data = DATA,
    out: Annotated[Path, typer.Option(help="Folder of the trained configurations and their results.")] = Path(
        "runs/sweep"
    ),
    jobs: Annotated[int, typer.Option(min=1, help="Configurations trained side by side.")] = 1,
    threads: Threads = 2,
    only: Annotated[str, typer.Option(help="Comma-separated configuration names (default: all).")] = "",
    list_: Annotated[bool, typer.Option("--list", help="Print the configurations and stop.")] = False,
    train_only: Annotated[bool, typer.Option(help="Train the configurations, judge nothing.")] = False,
) -> None:
    if list_:
        for name in CONFIGS:
            print(f"{name}: {command(name)}")
        return
    names = [n for n in only.split(",") if n] or list(CONFIGS)
    unknown = set(names) - set(CONFIGS)
    if unknown:
        raise SystemExit(f"unknown configuration(s): {', '.join(sorted(unknown))}")
    out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_one, n, data, out, threads, train_only): n for n in names}
        for future in as_completed(futures):
            print(json.dumps(future.result()), flush=True)


if __name__ == "__main__":
    typer.run(main)
