"""Faults of training: resuming with other options, a corrupt checkpoint, bad options, kill -9 (tiny models)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import faultkit
import pytest
from faultkit import TRAIN, clean, dupq, pairs_file

from support.errors import refused

pytestmark = pytest.mark.faults


def test_resume_with_other_options_or_a_corrupt_checkpoint(tmp_path: Path):
    """--resume with another split, width, rate or case folding, or with --overwrite, is refused; so are 0xff bytes
    in the checkpoint, and nothing good is overwritten; NaN options of a preset are refused."""
    data, out = pairs_file(tmp_path), tmp_path / "run"
    clean(dupq("train", "--data", str(data), "--out", str(out), "--epochs", "1", *TRAIN))
    checkpoint, weights = out / "checkpoint.safetensors", out / "model.safetensors"
    before = checkpoint.read_bytes()
    resume = ["train", "--data", str(data), "--out", str(out), "--epochs", "2", "--resume", *TRAIN]
    for opts in (["--train-pool", "300"], ["--lr", "0.02"], ["--preset", "labelled"], ["--overwrite"], ["--dim", "16"]):
        refused(dupq(*resume, *opts))
    assert checkpoint.read_bytes() == before
    corrupt = before[:-1000] + b"\xff" * 1000
    checkpoint.write_bytes(corrupt)
    good = weights.read_bytes()
    refused(dupq(*resume))
    assert checkpoint.read_bytes() == corrupt and weights.read_bytes() == good
    for key, value in (("margin", "nan"), ("scale", "-inf")):  # options without a flag: from a preset file
        preset = tmp_path / f"{key}.toml"
        preset.write_text(f"{key} = {value}\n")
        refused(dupq("train", "--data", str(data), "--out", str(tmp_path / "x"), "--preset", str(preset), *TRAIN))


# Options `dupq train` refuses in one sentence holding the words given (sizes: before any data is read).
BAD_OPTIONS = {
    "pool 500000": (["--train-pool", "500000"], "choose smaller sizes"),
    "device": (["--device", "meta"], "device"),
    "head": (["--head", "attention"], "--head"),
    "loss": (["--loss", "hinge"], "hinge"),
    "loss argument": (["--loss", "bce:x"], ""),
    "preset": (["--preset", "nope"], ""),
    "lr inf": (["--lr", "inf"], "--lr"),
    "seed -1": (["--seed", "-1"], "--seed"),
    "seed 1e24": (["--seed", "1" * 24], "--seed"),
    "dim 1e6": (["--dim", "1000000"], "--dim"),
    "threads 1e5": (["--threads", "100000"], "--threads"),
    "batch 1e9": (["--batch-size", str(10**9)], "--batch-size"),
    # Ablations that left the command line: a preset sets them (test_presets.py checks their ranges there).
    "head-hidden": (["--head-hidden", "1e9"], "--head-hidden"),
    "oov-buckets": (["--oov-buckets", "1e11"], "--oov-buckets"),
    "recipe": (["--recipe", "labelled"], "--recipe"),
}


@pytest.mark.parametrize("fault", BAD_OPTIONS)
def test_bad_training_options(tmp_path: Path, run, fault):
    """An unusable device, head, loss or preset, a size the machine cannot hold, a gone option: one sentence."""
    options, said = BAD_OPTIONS[fault]
    data = pairs_file(tmp_path)
    refused(run("train", "--data", str(data), "--out", str(tmp_path / "x"), "--epochs", "1", *TRAIN, *options), said)


def test_kill_9_during_training(tmp_path: Path):
    """Crash safety: kill -9 after the first checkpoint, --resume, the same weights as one run."""
    from safetensors.numpy import load_file

    data = pairs_file(tmp_path, 2000)
    train = ["--train-pool", "1600", "--test-size", "200", "--dev-size", "200", "--dim", "8", "--threads", "1"]
    train += ["--no-progress", "--epochs", "6", "--preset", "labelled", "--labelled-val", "200"]
    clean(dupq("train", "--data", str(data), "--out", str(tmp_path / "whole"), *train))
    out = tmp_path / "killed"
    command = [*faultkit.DUPQ, "train", "--data", str(data), "--out", str(out), *train]
    proc = subprocess.Popen(command, env=faultkit.ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not (out / "checkpoint.safetensors").exists() and time.time() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    clean(dupq("train", "--data", str(data), "--out", str(out), "--resume", *train))
    a, b = load_file(str(tmp_path / "whole" / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
