"""Train and judge several configurations; one JSON line per configuration (docs/RESULTS.md).

    python bench/quality_sweep.py --out runs/sweep [--device cuda] [--jobs 4] [--only seed,lower,...]

Each configuration is a set of `dupq train` options; the run trains on the seed split, chooses the
accuracy-maximising threshold on the dev pairs, and reports on the test pairs (which choose
nothing). The line names the equivalent `dupq train` command.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

# name -> (train() keyword options, TrainConfig options)
CONFIGS: dict[str, tuple[dict, dict]] = {
    "seed": ({}, {}),
    "bucket50": ({}, {"bucket": 50, "chunks": 1}),
    "partners": ({}, {"partner_negatives": True}),
    "oov": ({"oov_buckets": 4096}, {}),
    "oov+min2": ({"oov_buckets": 4096, "min_count": 2}, {}),
    "lower+oov+min2": ({"lowercase": True, "oov_buckets": 4096, "min_count": 2}, {}),
    "lower+oov": ({"lowercase": True, "oov_buckets": 4096}, {}),
    "lower+oov+cos10": ({"lowercase": True, "oov_buckets": 4096}, {"epochs": 10, "lr_schedule": "cosine"}),
    "lower+partners+sym": ({"lowercase": True}, {"partner_negatives": True, "symmetric": True}),
    "lower+partners+sym+cos10": ({"lowercase": True}, {"partner_negatives": True, "symmetric": True, "epochs": 10, "lr_schedule": "cosine"}),
    "lower+oov+min2+sym": ({"lowercase": True, "oov_buckets": 4096, "min_count": 2}, {"symmetric": True}),
    "lower+oov+min2+bilstm": ({"lowercase": True, "oov_buckets": 4096, "min_count": 2, "bidirectional": True}, {}),
    "lower+oov+min2+b512": ({"lowercase": True, "oov_buckets": 4096, "min_count": 2}, {"batch_size": 512}),
    "lower+oov+min2+drop": ({"lowercase": True, "oov_buckets": 4096, "min_count": 2, "dropout": 0.2}, {}),
    "lower+oov+min2+cos10": ({"lowercase": True, "oov_buckets": 4096, "min_count": 2}, {"epochs": 10, "lr_schedule": "cosine"}),
    "lower+oov+min2+cos10+bilstm": ({"lowercase": True, "oov_buckets": 4096, "min_count": 2, "bidirectional": True}, {"epochs": 10, "lr_schedule": "cosine"}),
    "lower+oov+min2+cos10+b512": ({"lowercase": True, "oov_buckets": 4096, "min_count": 2}, {"epochs": 10, "lr_schedule": "cosine", "batch_size": 512}),
    "lower": ({"lowercase": True}, {}),
    "negatives": ({}, {"extra_negatives": 64}),
    "symmetric": ({}, {"symmetric": True}),
    "bilstm": ({"bidirectional": True}, {}),
    "cosine10": ({}, {"epochs": 10, "lr_schedule": "cosine"}),
    "batch512": ({}, {"batch_size": 512}),
    "dropout": ({"dropout": 0.2}, {}),
    "lower+neg+sym": ({"lowercase": True}, {"extra_negatives": 64, "symmetric": True}),
    "lower+neg+sym+cos10": ({"lowercase": True}, {"extra_negatives": 64, "symmetric": True, "epochs": 10, "lr_schedule": "cosine"}),
    "all+bilstm": ({"lowercase": True, "bidirectional": True}, {"extra_negatives": 64, "symmetric": True, "epochs": 10, "lr_schedule": "cosine"}),
    "all+dropout": ({"lowercase": True, "dropout": 0.2}, {"extra_negatives": 64, "symmetric": True, "epochs": 10, "lr_schedule": "cosine"}),
    "all+lr3e-3": ({"lowercase": True}, {"extra_negatives": 64, "symmetric": True, "epochs": 10, "lr_schedule": "cosine", "lr": 0.003}),
    "all+neg128": ({"lowercase": True}, {"extra_negatives": 128, "symmetric": True, "epochs": 10, "lr_schedule": "cosine"}),
    "all+dim256": ({"lowercase": True, "dim": 256}, {"extra_negatives": 64, "symmetric": True, "epochs": 10, "lr_schedule": "cosine"}),
    "all+ep20": ({"lowercase": True}, {"extra_negatives": 64, "symmetric": True, "epochs": 20, "lr_schedule": "cosine"}),
}


def command_line(model_opts: dict, train_opts: dict) -> str:
    parts = ["dupq train"]
    for key, value in {**model_opts, **train_opts}.items():
        flag = "--" + key.replace("_", "-")
        parts.append(flag if value is True else f"{flag} {value}")
    return " ".join(parts)


def run_one(name: str, data: str, out: str, device: str, threads: int) -> dict:
    import torch

    from dupq.data import read_pairs, split_pairs
    from dupq.evaluate import calibrate_and_test
    from dupq.train import TrainConfig, train

    torch.set_num_threads(threads)
    model_opts, train_opts = CONFIGS[name]
    splits = split_pairs(read_pairs(data)[0])
    started = time.perf_counter()
    model = train(
        splits, Path(out) / name, TrainConfig(**{**train_opts, "device": device, "threads": threads}),
        overwrite=True, log=lambda _: None, progress=False, **model_opts,
    )
    seconds = time.perf_counter() - started
    result = calibrate_and_test(model, splits.dev, splits.test)
    model.save(Path(out) / name)
    c, t = result["calibration"], result["test"]
    return {
        "name": name,
        "command": command_line(model_opts, train_opts),
        "dev_accuracy": round(c["dev_accuracy"], 4),
        "threshold": round(c["threshold"], 4),
        "test_accuracy": round(t["accuracy"], 4),
        "test_accuracy_at_0_7": round(t["accuracy_at_0_7"], 4),
        "test_f1": round(t["f1"], 4),
        "roc_auc": round(t["roc_auc"], 4),
        "average_precision": round(t["average_precision"], 4),
        "final_val_loss": round(model.metrics["training"]["history"][-1]["val_loss"], 4),
        "train_seconds": round(seconds, 1),
        "device": device,
    }


def main() -> None:
    from dupq.data import default_data_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(default_data_path()))
    parser.add_argument("--out", default="runs/sweep")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated configuration names")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(CONFIGS)
    unknown = set(names) - set(CONFIGS)
    if unknown:
        raise SystemExit(f"unknown configuration(s): {', '.join(sorted(unknown))}")
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, n, args.data, args.out, args.device, args.threads): n for n in names}
        for future in as_completed(futures):
            print(json.dumps(future.result()), flush=True)


if __name__ == "__main__":
    main()
