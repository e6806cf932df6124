"""Fault cases of training: resuming with other options, a corrupt checkpoint, NaN weights, bad options, kill -9.

Each case trains tiny models (``--dim 8``) on a synthetic pairs file for a few seconds.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import faultkit
from faultkit import Result, dupq, refused, synthetic

TRAIN = [
    "--train-pool",
    "400",
    "--test-size",
    "100",
    "--dev-size",
    "100",
    "--dim",
    "8",
    "--threads",
    "1",
    "--no-progress",
]


def pairs_file(tmp: Path, rows: int = 600) -> Path:
    """A synthetic pairs file: every other row a reworded duplicate, the rest another topic."""
    path = tmp / "pairs.tsv"
    lines = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
    for i in range(rows):
        a = synthetic(1, i)[0]
        b = a.replace("How do I learn about", "What is the best way to learn") if i % 2 else synthetic(1, i + 3)[0]
        lines.append(f"{i}\t{2 * i}\t{2 * i + 1}\t{a}\t{b}\t{i % 2}")
    path.write_text("\n".join(lines) + "\n")
    return path


def resume_with_other_options(tmp: Path) -> Result:
    """--resume with another split, width, rate or case folding, or with --overwrite, is refused."""
    data, out = pairs_file(tmp), tmp / "run"
    first = dupq("train", "--data", str(data), "--out", str(out), "--epochs", "1", *TRAIN)
    if first.returncode != 0:
        return Result(False, detail=first.stderr.decode()[-300:])
    before = (out / "checkpoint.safetensors").read_bytes()
    variants = [
        [*TRAIN, *extra]
        for extra in (["--train-pool", "300"], ["--lr", "0.02"], ["--preset", "labelled"], ["--overwrite"])
    ]
    dim = TRAIN.index("--dim")
    variants.append([*TRAIN[: dim + 1], "16", *TRAIN[dim + 2 :]])  # --dim 16, not 8
    resume = ["train", "--data", str(data), "--out", str(out), "--epochs", "2", "--resume"]
    checks = [refused(dupq(*resume, *variant)) for variant in variants]
    unchanged = (out / "checkpoint.safetensors").read_bytes() == before
    return Result(all(ok for ok, _ in checks) and unchanged, tracebacks=sum(t for _, t in checks))


def corrupt_checkpoint_and_non_finite_options(tmp: Path) -> Result:
    """0xff bytes in the checkpoint are refused and nothing good is overwritten; inf/nan options refused."""
    data, out = pairs_file(tmp), tmp / "run"
    dupq("train", "--data", str(data), "--out", str(out), "--epochs", "1", *TRAIN)
    checkpoint, weights = out / "checkpoint.safetensors", out / "model.safetensors"
    corrupt = checkpoint.read_bytes()[:-1000] + b"\xff" * 1000
    checkpoint.write_bytes(corrupt)
    good = weights.read_bytes()
    checks = [refused(dupq("train", "--data", str(data), "--out", str(out), "--epochs", "2", "--resume", *TRAIN))]
    kept = checkpoint.read_bytes() == corrupt and weights.read_bytes() == good
    checks.append(refused(dupq("train", "--data", str(data), "--out", str(tmp / "x"), "--lr", "inf", *TRAIN)))
    for key, value in (("margin", "nan"), ("scale", "-inf")):  # options without a flag: from a preset file
        preset = tmp / f"{key}.toml"
        preset.write_text(f"{key} = {value}\n")
        checks.append(
            refused(dupq("train", "--data", str(data), "--out", str(tmp / "x"), "--preset", str(preset), *TRAIN))
        )
    return Result(all(ok for ok, _ in checks) and kept, tracebacks=sum(t for _, t in checks))


def model_with_nan_weights(tmp: Path) -> Result:
    """A model folder whose weights hold NaN is refused before it judges anything."""
    from safetensors.torch import load_file, save_file

    from dupq.modeling.model import BUNDLED

    model = shutil.copytree(BUNDLED, tmp / "model")
    weights = load_file(str(model / "model.safetensors"))
    name = sorted(weights)[0]
    weights[name].view(-1)[0] = float("nan")
    save_file(weights, str(model / "model.safetensors"))
    ok, tracebacks = refused(
        dupq("predict", "How do I learn Python?", "How can I learn Python?", "--model", str(model))
    )
    return Result(ok, tracebacks=tracebacks)


def bad_training_options(tmp: Path) -> Result:
    """An unusable device, pair head, loss, seed or preset is one sentence, not a traceback."""
    data = pairs_file(tmp)
    checks = [
        refused(dupq("train", "--data", str(data), "--out", str(tmp / "x"), *extra, *TRAIN))
        for extra in (
            ["--device", "meta"],
            ["--head", "attention"],
            ["--loss", "hinge"],
            ["--loss", "bce:x"],
            ["--seed", "-1"],
            ["--preset", "nope"],
        )
    ]
    return Result(all(ok for ok, _ in checks), tracebacks=sum(t for _, t in checks))


def kill_9_during_training(tmp: Path) -> Result:
    """Crash safety that held: kill -9 after the first checkpoint, --resume, the same weights as one run."""
    from safetensors.numpy import load_file

    data = pairs_file(tmp, 2000)
    train = [
        "--train-pool",
        "1600",
        "--test-size",
        "200",
        "--dev-size",
        "200",
        "--dim",
        "8",
        "--threads",
        "1",
        "--no-progress",
        "--epochs",
        "6",
        "--preset",
        "labelled",
        "--labelled-val",
        "200",
    ]
    whole = dupq("train", "--data", str(data), "--out", str(tmp / "whole"), *train)
    if whole.returncode != 0:
        return Result(False, detail=whole.stderr.decode()[-300:])
    out = tmp / "killed"
    proc = subprocess.Popen(
        [*faultkit.DUPQ, "train", "--data", str(data), "--out", str(out), *train],
        env=faultkit.ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while not (out / "checkpoint.safetensors").exists() and time.time() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed = dupq("train", "--data", str(data), "--out", str(out), "--resume", *train)
    a, b = load_file(str(tmp / "whole" / "model.safetensors")), load_file(str(out / "model.safetensors"))
    same = resumed.returncode == 0 and a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    return Result(same, tracebacks=int(b"Traceback" in resumed.stderr))


CASES = [
    resume_with_other_options,
    corrupt_checkpoint_and_non_finite_options,
    model_with_nan_weights,
    bad_training_options,
    kill_9_during_training,
]
