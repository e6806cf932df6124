"""Faults of training: resuming with other options, a corrupt checkpoint, NaN weights, bad options, kill -9.

Each test trains tiny models (``--dim 8``) on a synthetic pairs file for a few seconds.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import faultkit
import pytest
from faultkit import TRAIN, clean, dupq, pairs_file

from support.errors import refused

pytestmark = pytest.mark.faults


def test_resume_with_other_options(tmp_path: Path):
    """--resume with another split, width, rate or case folding, or with --overwrite, is refused."""
    data, out = pairs_file(tmp_path), tmp_path / "run"
    clean(dupq("train", "--data", str(data), "--out", str(out), "--epochs", "1", *TRAIN))
    before = (out / "checkpoint.safetensors").read_bytes()
    resume = ["train", "--data", str(data), "--out", str(out), "--epochs", "2", "--resume", *TRAIN]
    for other in (
        ["--train-pool", "300"],
        ["--lr", "0.02"],
        ["--preset", "labelled"],
        ["--overwrite"],
        ["--dim", "16"],
    ):
        refused(dupq(*resume, *other))
    assert (out / "checkpoint.safetensors").read_bytes() == before


def test_corrupt_checkpoint_and_non_finite_options(tmp_path: Path):
    """0xff bytes in the checkpoint are refused and nothing good is overwritten; inf/nan options refused."""
    data, out = pairs_file(tmp_path), tmp_path / "run"
    clean(dupq("train", "--data", str(data), "--out", str(out), "--epochs", "1", *TRAIN))
    checkpoint, weights = out / "checkpoint.safetensors", out / "model.safetensors"
    corrupt = checkpoint.read_bytes()[:-1000] + b"\xff" * 1000
    checkpoint.write_bytes(corrupt)
    good = weights.read_bytes()
    refused(dupq("train", "--data", str(data), "--out", str(out), "--epochs", "2", "--resume", *TRAIN))
    assert checkpoint.read_bytes() == corrupt and weights.read_bytes() == good
    refused(dupq("train", "--data", str(data), "--out", str(tmp_path / "x"), "--lr", "inf", *TRAIN))
    for key, value in (("margin", "nan"), ("scale", "-inf")):  # options without a flag: from a preset file
        preset = tmp_path / f"{key}.toml"
        preset.write_text(f"{key} = {value}\n")
        refused(dupq("train", "--data", str(data), "--out", str(tmp_path / "x"), "--preset", str(preset), *TRAIN))


def test_model_with_nan_weights(tmp_path: Path):
    """A model folder whose weights hold NaN is refused before it judges anything."""
    from safetensors.torch import load_file, save_file

    from dupq.modeling.model import BUNDLED

    model = shutil.copytree(BUNDLED, tmp_path / "model")
    weights = load_file(str(model / "model.safetensors"))
    weights[sorted(weights)[0]].view(-1)[0] = float("nan")
    save_file(weights, str(model / "model.safetensors"))
    refused(dupq("predict", "How do I learn Python?", "How can I learn Python?", "--model", str(model)))


@pytest.mark.parametrize(
    "extra",
    [["--device", "meta"], ["--head", "attention"], ["--loss", "hinge"], ["--loss", "bce:x"], ["--preset", "nope"]],
    ids=["device", "head", "loss", "loss argument", "preset"],
)
def test_bad_training_options(tmp_path: Path, extra):
    """An unusable device, pair head, loss or preset is one sentence, not a traceback."""
    refused(dupq("train", "--data", str(pairs_file(tmp_path)), "--out", str(tmp_path / "x"), *extra, *TRAIN))


def test_kill_9_during_training(tmp_path: Path):
    """Crash safety: kill -9 after the first checkpoint, --resume, the same weights as one run."""
    from safetensors.numpy import load_file

    data = pairs_file(tmp_path, 2000)
    train = ["--train-pool", "1600", "--test-size", "200", "--dev-size", "200", "--dim", "8", "--threads", "1"]
    train += ["--no-progress", "--epochs", "6", "--preset", "labelled", "--labelled-val", "200"]
    clean(dupq("train", "--data", str(data), "--out", str(tmp_path / "whole"), *train))
    out = tmp_path / "killed"
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
    clean(dupq("train", "--data", str(data), "--out", str(out), "--resume", *train))
    a, b = load_file(str(tmp_path / "whole" / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
