"""Batching, determinism, learning, and exact resume after a kill -9."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from dupq.core.errors import DupqError
from dupq.data.pairs import SplitConfig
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.encoders import ENCODERS
from dupq.modeling.model import EncoderConfig
from dupq.training.batches import PairBatches, length_batches
from dupq.training.config import ModelOptions, TrainConfig
from dupq.training.distributed import World
from dupq.training.setup import build_model
from dupq.training.step import Validation, encode_in_chunks
from dupq.training.train import train
from support.synthetic import SMALL_SPLIT


def test_length_batches_are_random_batches_each_sorted_by_length_every_index_once():
    lengths = np.random.default_rng(0).integers(1, 40, size=1_001)
    batches = length_batches(lengths, 64, np.random.default_rng(1))
    seen = np.concatenate(batches)
    assert len(seen) == len(set(seen.tolist())) and len(seen) >= 1_001 - 1 and all(len(b) >= 2 for b in batches)
    rng = np.random.default_rng(1)  # by hand: shuffle, cut, sort each cut by length, shuffle the cuts
    order = rng.permutation(len(lengths))
    cuts = [sorted(order[i : i + 64], key=lambda k: lengths[k]) for i in range(0, len(order), 64)]
    cuts = [c for c in cuts if len(c) >= 2]
    expected = [cuts[i] for i in rng.permutation(len(cuts))]
    assert all(lengths[a].tolist() == lengths[b].tolist() for a, b in zip(batches, expected))
    assert [set(b.tolist()) for b in batches] == [set(int(k) for k in c) for c in expected]


def _same_weights(one, other) -> bool:
    """Whether two model folders hold bit-equal weights under the same names."""
    a, b = (load_file(str(folder / "model.safetensors")) for folder in (one, other))
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def _quiet(**kw):
    return dict(log=lambda _: None, progress=False, **kw)


@pytest.mark.slow
def test_training_learns_and_is_deterministic(small_splits, tmp_path):
    config = TrainConfig(epochs=2, seed=3)
    model = train(small_splits, tmp_path / "a", config, dim=32, **_quiet())
    history = model.metrics["training"]["history"]
    assert history[1]["train_loss"] < history[0]["train_loss"]
    assert history[1]["val_loss"] < history[0]["val_loss"]
    train(small_splits, tmp_path / "b", config, dim=32, **_quiet())
    assert _same_weights(tmp_path / "a", tmp_path / "b")
    # Duplicates of the held-out test pairs score higher than non-duplicates, after one short run.
    sims = model.similarity(small_splits.test.q1, small_splits.test.q2)
    y = small_splits.test.labels == 1
    # a margin, not a figure: two short epochs, any seed, must separate them
    assert sims[y].mean() > sims[~y].mean() + 0.05


@pytest.mark.slow
def test_resume_after_finished_epochs_equals_one_run(small_splits, tmp_path):
    # constant lr: a 1-epoch run is a prefix
    config = TrainConfig(epochs=2, seed=5, hard_negatives=True, mask_false_negatives=True)
    train(small_splits, tmp_path / "full", config, dim=16, **_quiet())
    train(small_splits, tmp_path / "part", TrainConfig(**{**config.__dict__, "epochs": 1}), dim=16, **_quiet())
    with pytest.raises(DupqError, match="--resume"):
        train(small_splits, tmp_path / "part", config, dim=16, **_quiet())
    train(small_splits, tmp_path / "part", config, dim=16, resume=True, **_quiet())
    assert _same_weights(tmp_path / "full", tmp_path / "part")


@pytest.mark.slow
def test_kill_9_mid_epoch_then_resume_gives_the_same_weights(pairs_path, tmp_path):
    split = SplitConfig(train_pool=30_000, test=1_000, dev=1_000)
    cosine = tmp_path / "cosine.toml"  # a learning rate that changes every step: the resume must know where it was
    cosine.write_text('lr_schedule = "cosine"\n')
    args = [sys.executable, *"-m dupq.cli train --data".split(), str(pairs_path), "--preset", str(cosine)]
    args += f"--epochs 3 --dim 16 --train-pool {split.train_pool} --test-size 1000 --dev-size 1000".split()
    args += "--no-progress --seed 9".split()
    subprocess.run([*args, "--out", str(tmp_path / "whole")], check=True, capture_output=True)

    out = tmp_path / "killed"
    proc = subprocess.Popen([*args, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    checkpoint = out / "checkpoint.safetensors"
    deadline = time.time() + 120
    while not checkpoint.exists() and time.time() < deadline:  # wait for epoch 1's checkpoint ...
        time.sleep(0.05)
    time.sleep(0.1)  # ... then kill during epoch 2 (an epoch of this tiny run takes a few tenths of a second)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL and not (out / "model.safetensors").exists()
    resumed = subprocess.run([*args, "--out", str(out), "--resume"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout
    assert _same_weights(tmp_path / "whole", out)


LOSSES = {"bce": 1.0, "ranking": 1.0, "triplet": {"reduction": "mean", "symmetric": True}}
LABELLED = dict(train_on="labelled", losses=LOSSES, mask_false_negatives=True, hard_negatives=True, lr=0.005)


@pytest.mark.parametrize(
    "kind, bidirectional, pooling", [("lstm", False, "mean"), ("lstm", True, "mean"), ("lstm", False, "max")]
)
def test_chunked_encoding_equals_one_padded_call_in_vectors_and_gradients(small_splits, kind, bidirectional, pooling):
    vocab = Vocabulary.build(small_splits.train.q1 + small_splits.train.q2)
    source = PairBatches(vocab, small_splits.train, batch_size=100)
    torch.manual_seed(0)
    encoder = ENCODERS[kind](EncoderConfig(len(vocab), dim=16, bidirectional=bidirectional, pooling=pooling))
    batch = source.batch(np.arange(100), np.random.default_rng(0))
    ids, lengths = batch.ids, batch.lengths
    whole = encoder(ids, lengths)
    weights = torch.randn_like(whole)  # a loss that weighs every coordinate differently
    (whole * weights).sum().backward()
    expected = {name: p.grad.clone() for name, p in encoder.named_parameters()}
    for chunks in (2, 3, 7, 150):  # 150: more slices than rows, the empty ones skipped
        encoder.zero_grad()
        chunked = encode_in_chunks(encoder, ids, lengths, chunks)
        torch.testing.assert_close(chunked, whole, atol=1e-6, rtol=0)
        (chunked * weights).sum().backward()  # the batch's own word table passes every word's gradient on
        for name, p in encoder.named_parameters():
            torch.testing.assert_close(p.grad, expected[name], atol=1e-5, rtol=1e-4, msg=f"{name}, {chunks} chunks")


def _bf16_lstm_runs() -> bool:
    """Whether this CPU's oneDNN runs an LSTM under bfloat16 autocast (some CPUs have no bf16 LSTM primitive)."""
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.LSTM(4, 4, batch_first=True)(torch.zeros(1, 2, 4))
    except RuntimeError:
        return False
    return True


def test_bf16_encoding_is_close_to_float32_and_leaves_the_loss_in_float32(small_splits):
    """bfloat16 keeps 8 bits of mantissa: vectors agree to ~1e-2, and the objective still sees float32."""
    if not _bf16_lstm_runs():
        pytest.skip("this CPU's oneDNN has no bfloat16 LSTM primitive (could not create a primitive descriptor)")

    vocab = Vocabulary.build(small_splits.train.q1 + small_splits.train.q2)
    config = TrainConfig(**LABELLED)
    torch.manual_seed(0)
    model = build_model(vocab, config, ModelOptions(dim=16, head="mlp"))
    source = PairBatches(vocab, small_splits.train, batch_size=64)
    batch = source.batch(np.arange(64), np.random.default_rng(0))
    seen = []
    spy, terms = config.objective(), config.objective().terms
    spy.terms = lambda v, *rest: seen.append(v) or terms(v, *rest)
    full, _ = model(batch, spy, config.chunks, World())
    half, _ = model(batch, spy, config.chunks, World(), bf16=True)
    assert seen[1].dtype == torch.float32 and half.dtype == torch.float32
    torch.testing.assert_close(seen[1], seen[0], atol=2e-2, rtol=0)
    assert abs(half.item() - full.item()) < 0.02 * abs(full.item())
    half.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.encoder.parameters())


@pytest.mark.slow
def test_labelled_recipe_learns_keeps_the_best_epoch_and_resumes_exactly(small_splits, tmp_path):
    config = TrainConfig(epochs=2, seed=2, **LABELLED)
    options = dict(dim=16, head="mlp", dropout=0.2, split=SMALL_SPLIT.__dict__, **_quiet())  # the bundled dropout
    model = train(small_splits, tmp_path / "full", config, **options)
    training = model.metrics["training"]
    assert training["train_pairs"] + training["val_pairs"] == len(small_splits.pool)  # every labelled pool pair
    history = training["history"]
    assert all(0.5 < h["val_accuracy"] <= 1 for h in history)
    best = max(range(2), key=lambda i: history[i]["val_accuracy"])
    assert training["best_epoch"] == best + 1
    # The pair head judges held-out pairs better than chance, and its probability is a probability.
    p = model.probability(small_splits.test.q1, small_splits.test.q2)
    y = small_splits.test.labels == 1
    assert ((p >= 0) & (p <= 1)).all() and p[y].mean() > p[~y].mean() + 0.1
    assert model.threshold_on == "probability"
    # Resume after one epoch ends where the uninterrupted run ended.
    train(small_splits, tmp_path / "part", TrainConfig(**{**config.__dict__, "epochs": 1}), **options)
    train(small_splits, tmp_path / "part", config, resume=True, **options)
    assert _same_weights(tmp_path / "full", tmp_path / "part")
    assert any(k.startswith("head.") for k in load_file(str(tmp_path / "full" / "model.safetensors")))


@pytest.mark.slow
def test_resume_refuses_options_that_differ_and_a_corrupt_checkpoint(small_splits, tmp_path):
    out = tmp_path / "run"
    train(small_splits, out, TrainConfig(epochs=1, seed=1), dim=16, split=SMALL_SPLIT.__dict__, **_quiet())
    more = TrainConfig(epochs=2, seed=1)
    split = SMALL_SPLIT.__dict__
    for kwargs, option in (
        (dict(dim=32), "--dim"),
        (dict(config=replace(more, lr=0.1)), "--lr"),
        (dict(lowercase=True), "with lowercase True"),
        (dict(split={**split, "train_pool": 15_000}), "--train-pool"),
    ):
        with pytest.raises(DupqError, match=option):
            train(small_splits, out, resume=True, **{"config": more, "dim": 16, "split": split, **kwargs, **_quiet()})
    with pytest.raises(DupqError, match="--resume .* --overwrite"):
        train(small_splits, out, more, dim=16, resume=True, overwrite=True, **_quiet())
    # 1,000 bytes of 0xff at the end of the checkpoint: refused, and nothing is overwritten.
    checkpoint = out / "checkpoint.safetensors"
    corrupt = checkpoint.read_bytes()[:-1000] + b"\xff" * 1000
    checkpoint.write_bytes(corrupt)
    weights = (out / "model.safetensors").read_bytes()
    with pytest.raises(DupqError, match="corrupt"):
        train(small_splits, out, more, dim=16, split=split, resume=True, **_quiet())
    assert checkpoint.read_bytes() == corrupt and (out / "model.safetensors").read_bytes() == weights


@pytest.mark.parametrize(
    "field, value, named",
    [
        ("lr", float("inf"), "^--lr must be a finite number"),
        ("losses", {"triplet": {"margin": float("nan")}}, "margin of a loss must be a finite number"),
        ("losses", {"ranking": {"scale": -math.inf}}, "scale of a loss must be a finite number"),
        ("losses", {"ranking": {"margin": 1.0}}, "the ranking loss takes a weight and scale, not"),
    ],
)
def test_non_finite_options_are_refused(field, value, named):
    with pytest.raises(DupqError, match=named):
        TrainConfig(**{field: value})


def test_the_kept_epoch_is_what_a_loop_over_the_epochs_picks():
    rng = np.random.default_rng(4)
    for labelled in (True, False):
        epochs = [
            Validation(float(rng.uniform(1, 2)), float(rng.choice([0.7, 0.8, 0.9])) if labelled else None)
            for _ in range(8)
        ]
        kept = None
        for i, val in enumerate(epochs):
            if val.better(None if kept is None else epochs[kept]):
                kept = i
        if labelled:  # the first epoch of the highest accuracy
            expected = max(range(len(epochs)), key=lambda i: (epochs[i].accuracy, -i))
        else:  # the lowest loss
            expected = min(range(len(epochs)), key=lambda i: epochs[i].loss)
        assert kept == expected
