"""Train and judge several recipes; one JSON line per recipe (the tables of docs/RESULTS.md).

    python bench/quality_sweep.py --out runs/sweep --only labelled,labelled-cos [--jobs 2 --threads 1]
    python bench/quality_sweep.py --list

Each configuration is a list of `dupq train` options, run as that command (so the line's
``command`` reproduces it). Every choice is made on data that is not the test pairs:

* ``dev_accuracy``: accuracy on the dev pairs at the threshold chosen there (what `dupq train`
  stores in the model);
* ``dev_mrr@10``, ``dev_ndcg@10``: retrieval on the dev rows alone (`bench/retrieval.py --split dev`);
* ``val_accuracy``: the best epoch's accuracy on the pool pairs held out for validation.

``clean_accuracy`` and ``clean_roc_auc`` are the hand-written pairs of ``bench/clean_pairs.py``
(at the model's own threshold), never used to choose.

The test figures (accuracy at the dev threshold, ROC-AUC, expected calibration error, retrieval
MRR@10 and nDCG@10 on the test and dev rows, as `dupq evaluate --retrieval` reports them) are
printed too, for the record, never for choosing. Lines of earlier sweeps hold ``dev_mrr`` and
``test_mrr`` instead: question2's rank alone, every rank counted.
A configuration whose model folder is already complete is judged again without retraining.
"""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# The options every labelled recipe below shares: the bundled model's tokenizer and regularisation.
WORDS = ["--lowercase", "--oov-buckets", "4096", "--min-count", "2", "--dropout", "0.2"]
LABELLED = [
    *WORDS,
    "--recipe",
    "labelled",
    "--lr",
    "0.005",
    "--reduction",
    "mean",
    "--symmetric",
    "--mask-false-negatives",
    "--hard-negatives",
]

SHORT = ["--epochs", "2", "--lr-schedule", "cosine"]  # ablations: two epochs each, the same budget
# The labelled recipe's own losses spelled out, to add a distillation loss to them.
DISTIL = ["--teacher", "runs/teacher", "--loss", "bce", "--loss", "ranking", "--loss", "triplet"]

# name -> `dupq train` options
CONFIGS: dict[str, list[str]] = {
    "seed": [],
    "seed-best": [*WORDS, "--symmetric"],  # the previous bundled model
    # Six epochs: the pair head against a scaled cosine.
    "labelled-cos-6": [*LABELLED, "--head", "cosine", "--epochs", "6", "--lr-schedule", "cosine"],
    "labelled-mlp-6": [*LABELLED, "--head", "mlp", "--epochs", "6", "--lr-schedule", "cosine"],
    # Two epochs: one change at a time against mlp-2.
    "mlp-2": [*LABELLED, "--head", "mlp", *SHORT],
    "mlp-nomask-2": [
        *WORDS,
        "--recipe",
        "labelled",
        "--lr",
        "0.005",
        "--reduction",
        "mean",
        "--symmetric",
        "--head",
        "mlp",
        *SHORT,
    ],
    "mlp-bce-only-2": [*LABELLED, "--head", "mlp", "--loss", "bce", *SHORT],
    "online-contrastive-2": [
        *LABELLED,
        "--loss",
        "online_contrastive",
        "--loss",
        "ranking",
        "--loss",
        "triplet",
        *SHORT,
    ],
    "contrastive-2": [*LABELLED, "--loss", "contrastive", "--loss", "ranking", "--loss", "triplet", *SHORT],
    "mlp-maxpool-2": [*LABELLED, "--head", "mlp", "--pooling", "max", *SHORT],
    "mlp-bilstm-2": [*LABELLED, "--head", "mlp", "--bidirectional", *SHORT],
    "mlp-ema-2": [*LABELLED, "--head", "mlp", "--ema", "0.999", *SHORT],
    # Less pull from the pair loss on the encoder, no labelled hard negatives: a more lenient cosine?
    "mlp-softbce-2": [
        *WORDS,
        "--recipe",
        "labelled",
        "--lr",
        "0.005",
        "--reduction",
        "mean",
        "--symmetric",
        "--mask-false-negatives",
        "--head",
        "mlp",
        "--loss",
        "bce:0.3",
        "--loss",
        "ranking",
        "--loss",
        "triplet",
        *SHORT,
    ],
    # Distillation (`dupq distil teach --out runs/teacher` first): mlp-2 plus one teacher loss.
    "distil-2": [*LABELLED, "--head", "mlp", *SHORT, *DISTIL, "--loss", "distil:5"],
    "distil-matrix-2": [*LABELLED, "--head", "mlp", *SHORT, *DISTIL, "--loss", "distil_matrix:30"],
    # Six epochs, as labelled-mlp-6 (the bundled model before distillation), two teacher weights.
    "distil-6": [*LABELLED, "--head", "mlp", "--epochs", "6", "--lr-schedule", "cosine", *DISTIL, "--loss", "distil:5"],
    "distil15-6": [
        *LABELLED,
        "--head",
        "mlp",
        "--epochs",
        "6",
        "--lr-schedule",
        "cosine",
        *DISTIL,
        "--loss",
        "distil:15",
    ],
    # distil-6 with word embeddings that start from the teacher's vector of each word (PCA to 128).
    "distil-words-6": [
        *LABELLED,
        "--head",
        "mlp",
        "--epochs",
        "6",
        "--lr-schedule",
        "cosine",
        *DISTIL,
        "--loss",
        "distil:5",
        "--word-init",
        "teacher",
    ],
    # distil-words-6 encoding under bfloat16 autocast (~2x faster steps on this CPU): does quality hold?
    "distil-words-bf16-6": [
        *LABELLED,
        "--head",
        "mlp",
        "--epochs",
        "6",
        "--lr-schedule",
        "cosine",
        *DISTIL,
        "--loss",
        "distil:5",
        "--word-init",
        "teacher",
        "--bf16",
    ],
    "distil15-words-6": [
        *LABELLED,
        "--head",
        "mlp",
        "--epochs",
        "6",
        "--lr-schedule",
        "cosine",
        *DISTIL,
        "--loss",
        "distil:15",
        "--word-init",
        "teacher",
    ],
}


def judge(name: str, folder: Path, data: str, threads: int) -> dict:
    """The dev and test figures of a trained model folder (the model is loaded from disk)."""
    import torch

    from clean_pairs import PAIRS, dupq_result, read_clean_pairs
    from dupq.data.pairs import read_pairs, split_pairs
    from dupq.evaluation.evaluate import evaluate
    from dupq.evaluation.retrieval import held_out_task, retrieval_measures
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
        "command": "dupq train " + " ".join(shlex.quote(a) for a in CONFIGS[name]),
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
        **{
            f"clean_{k}": v
            for k, v in dupq_result(name, str(folder), read_clean_pairs(PAIRS)).items()
            if k in ("accuracy", "roc_auc")
        },
        "train_seconds": round(sum(h["seconds"] for h in history), 1),
    }


def run_one(name: str, data: str, out: Path, threads: int, train_only: bool = False) -> dict:
    folder = out / name
    if not (folder / "model.safetensors").exists() or not (folder / "metrics.json").exists():
        dupq = Path(sys.executable).with_name("dupq")
        command = [
            str(dupq),
            "train",
            *CONFIGS[name],
            "--data",
            data,
            "--out",
            str(folder),
            "--threads",
            str(threads),
            "--no-progress",
        ]
        command += ["--resume"] if (folder / "checkpoint.safetensors").exists() else []
        started = time.perf_counter()
        with open(out / f"{name}.log", "a") as log:
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
        print(f"# {name}: trained in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return {"name": name, "trained": str(folder)} if train_only else judge(name, folder, data, threads)


def main() -> None:
    from dupq.data.pairs import default_data_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(default_data_path()))
    parser.add_argument("--out", type=Path, default=Path("runs/sweep"))
    parser.add_argument("--jobs", type=int, default=1, help="configurations trained side by side")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per configuration")
    parser.add_argument("--only", default="", help="comma-separated configuration names (default: all)")
    parser.add_argument("--list", action="store_true", help="print the configurations and stop")
    parser.add_argument("--train-only", action="store_true", help="train the configurations, judge nothing")
    args = parser.parse_args()
    if args.list:
        for name, options in CONFIGS.items():
            print(f"{name}: dupq train {' '.join(options)}")
        return
    names = [n for n in args.only.split(",") if n] or list(CONFIGS)
    unknown = set(names) - set(CONFIGS)
    if unknown:
        raise SystemExit(f"unknown configuration(s): {', '.join(sorted(unknown))}")
    args.out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, n, args.data, args.out, args.threads, args.train_only): n for n in names}
        for future in as_completed(futures):
            print(json.dumps(future.result()), flush=True)


if __name__ == "__main__":
    main()
