"""The encoder (masked mean, normalisation) and the model folder (save/load and its errors)."""

from __future__ import annotations

import json
import shutil
from functools import partial

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file

import dupq.modeling.lstm
from dupq.core.errors import DupqError
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.encoders import Encoder, EncoderConfig
from dupq.modeling.lstm import LSTMEncoder
from dupq.modeling.model import Model
from support.kit import one_sentence


@pytest.fixture(scope="module")
def vocab(small_splits):
    return Vocabulary.build(small_splits.train.q1 + small_splits.train.q2)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_vector_does_not_depend_on_batch_padding(vocab, small_splits, bidirectional):
    torch.manual_seed(0)
    model = Model(LSTMEncoder(vocab, Encoder(EncoderConfig(len(vocab), dim=16, bidirectional=bidirectional))))
    short = small_splits.test.q1[:20]
    alone = model.encode(short)
    # one long question widens the batch
    padded = model.encode(short + [" ".join(small_splits.test.q2[:40])], batch_size=64)[:20]
    np.testing.assert_allclose(alone, padded, atol=1e-6)
    assert np.allclose(np.linalg.norm(alone, axis=1), 1, atol=1e-6)


def test_encode_matches_a_manual_forward(vocab, small_splits):
    torch.manual_seed(0)
    enc = Encoder(EncoderConfig(len(vocab), dim=8))
    model = Model(LSTMEncoder(vocab, enc))
    questions = small_splits.test.q2[:10] + [""]
    got = model.encode(questions)
    for i, q in enumerate(questions):
        ids = vocab.encode([q])[0].tolist() or [0]
        with torch.no_grad():
            out, _ = enc.lstm(enc.embedding(torch.tensor([ids])))
            v = out[0].mean(0)
        np.testing.assert_allclose(got[i], (v / v.norm()).numpy(), atol=1e-6)


@pytest.mark.parametrize("kernels", [False, True], ids=["torch", "numpy"])
def test_a_few_questions_encode_as_the_bulk_path_does(tiny_model, small_splits, monkeypatch, kernels):
    """A search's few queries skip the length sort; through torch their vectors are the bulk path's
    bit for bit, through the NumPy kernels equal to float32 rounding."""
    if not kernels:
        monkeypatch.setattr(tiny_model.encoder, "kernels", None)
    same = np.testing.assert_array_equal if not kernels else partial(np.testing.assert_allclose, rtol=0, atol=1e-6)
    pool = small_splits.test.q1[:200]
    rng = np.random.default_rng(0)
    batches = [[pool[i] for i in rng.choice(len(pool), n, replace=False)] for n in (1, 2, 3, 7, 30, 64)]
    batches.append(["How?", "", "Why is the sky blue and not green at noon?"])  # an empty question, lengths apart
    fast = [tiny_model.encode(b) for b in batches]
    monkeypatch.setattr(dupq.modeling.lstm, "FEW", 0)  # every call takes the sorted, batched path
    for b, got in zip(batches, fast):
        same(got, tiny_model.encode(b))
    assert tiny_model.encode([]).shape == (0, tiny_model.out_dim)


def test_save_load_roundtrip(tiny_model, tmp_path, small_splits):
    questions = small_splits.dev.q1[:50]
    tiny_model.save(tmp_path / "m")
    again = Model.load(tmp_path / "m")
    np.testing.assert_array_equal(again.encode(questions), tiny_model.encode(questions))
    assert again.fingerprint() == tiny_model.fingerprint() and again.threshold == tiny_model.threshold
    assert again.metrics["training"]["history"]
    tiny_model.save(tmp_path / "half", half=True)
    half = Model.load(tmp_path / "half")
    size = {name: (tmp_path / name / "model.safetensors").stat().st_size for name in ("m", "half")}
    assert size["half"] < 0.6 * size["m"]
    # float16 storage rounds each weight; loaded, the model computes in float32 with the rounded weights, exactly
    rounded = Model.load(tmp_path / "m")
    with torch.no_grad():
        for weight in rounded.encoder.network.parameters():
            weight.copy_(weight.half().float())
    np.testing.assert_array_equal(half.encode(questions), rounded.encode(questions))
    assert not np.array_equal(half.encode(questions), tiny_model.encode(questions))  # the rounding is real


def test_saving_again_keeps_the_stored_precision(tiny_model_dir, tmp_path, small_splits):
    questions = small_splits.dev.q1[:20]
    for half in (True, False):
        folder = tmp_path / f"half-{half}"
        Model.load(tiny_model_dir).save(folder, half=half)
        model = Model.load(folder)
        before = (folder / "model.safetensors").read_bytes()
        model.judge.threshold = 0.123
        model.save(folder, half=None)
        again = Model.load(folder)
        assert again.threshold == 0.123
        assert json.loads((folder / "config.json").read_text())["weights_dtype"] == ("float16" if half else "float32")
        assert (folder / "model.safetensors").read_bytes() == before  # the weights are not rounded again
        np.testing.assert_array_equal(again.encode(questions), model.encode(questions))


def test_similarity_and_verdict(tiny_model):
    s = tiny_model.similarity("When will I see you?", "When will I see you?")
    assert s == pytest.approx(1.0, abs=1e-5)
    many = tiny_model.similarity(["a", "b"], ["a", "c"])
    assert many.shape == (2,) and many[0] == pytest.approx(1.0, abs=1e-5)
    assert tiny_model.is_duplicate("How do I cook rice?", "How do I cook rice?")
    assert not tiny_model.is_duplicate("How do I cook rice?", "How do I cook rice?", threshold=1.5)


def _config(change):
    """A fault written into a folder's config.json: ``change(config)`` is what the file then holds."""

    def write(folder):
        (folder / "config.json").write_text(json.dumps(change(json.loads((folder / "config.json").read_text()))))

    return write


def _weights(change):
    """A fault written into a folder's model.safetensors: ``change(weights)`` is what the file then holds."""

    def write(folder):
        save_file(change(load_file(str(folder / "model.safetensors"))), str(folder / "model.safetensors"))

    return write


def _encoder_type(kind):
    return _config(lambda c: {**c, "encoder": {**c["encoder"], "type": kind}})


def _nan_embedding(weights):
    weights["embedding.weight"][0, 0] = np.nan
    return weights


WORDPIECE = json.dumps({"tokenizer": "wordpiece", "max_tokens": 256})
SHORT_VOCAB = json.dumps({"lowercase": False, "max_tokens": 9, "tokens": ["[PAD]", "[UNK]"]})
DOES_NOT_FIT = "model.safetensors does not match .*config.json: "
LOAD_FAULTS = {  # what Model.load says of a damaged folder: (the folder damaged, the damage)
    "does not exist": ("tiny", shutil.rmtree),
    "is empty": ("tiny", lambda f: [p.unlink() for p in f.iterdir()]),
    "model config .* is missing": ("tiny", lambda f: (f / "config.json").unlink()),
    "not valid JSON": ("tiny", lambda f: (f / "config.json").write_text("{nope")),
    "safetensors is corrupt": ("tiny", lambda f: (f / "model.safetensors").write_bytes(b"\x00" * 40)),
    "weights .* are missing": ("tiny", lambda f: (f / "model.safetensors").unlink()),
    "vocabulary is missing": ("tiny", lambda f: (f / "vocab.json").unlink()),
    "words but the config says": ("tiny", lambda f: (f / "vocab.json").write_text(SHORT_VOCAB)),
    "embedding.weight holds numbers that are not finite": ("tiny", _weights(_nan_embedding)),
    "unknown encoder type 'transformer'": ("tiny", _encoder_type("transformer")),
    # a GRU encoder and the teacher's WordPiece tokens were experiments that lost; their folders name them
    "encoder type 'gru'.* no longer supported": ("tiny", _encoder_type("gru")),
    "tokenizer 'wordpiece'.* no longer supported": ("tiny", lambda f: (f / "vocab.json").write_text(WORDPIECE)),
    "config.json.*hidden": ("head", _config(lambda c: {**c, "head": {**c["head"], "hidden": "256"}})),
    "config.json.*kind": ("head", _config(lambda c: {**c, "head": {**c["head"], "kind": "attention"}})),
    "calibration": ("head", _config(lambda c: {**c, "calibration": {"method": "beta", "a": np.nan, "b": 1, "c": 0}})),
    DOES_NOT_FIT + "it lacks head.mlp.0.bias": (
        "head",
        _weights(lambda w: {k: w[k] for k in w if k != "head.mlp.0.bias"}),
    ),
    DOES_NOT_FIT + "it holds extra.weight, which the config has no place for": (
        "head",
        _weights(lambda w: {**w, "extra.weight": np.zeros(3, np.float32)}),
    ),
    DOES_NOT_FIT + r"lstm.weight_hh_l0 has shape \[64, 15\], the config needs \[64, 16\]": (
        "head",
        _weights(lambda w: {**w, "lstm.weight_hh_l0": w["lstm.weight_hh_l0"][:, :15].copy()}),
    ),
}


@pytest.mark.parametrize("pattern", LOAD_FAULTS)
def test_a_damaged_model_folder_is_refused_in_one_sentence(pattern, request, tmp_path):
    """Refused before any torch module is built, in one sentence naming what is wrong."""
    which, damage = LOAD_FAULTS[pattern]
    source = request.getfixturevalue(f"{which}_model_dir")
    folder = shutil.copytree(source, tmp_path / "m", ignore=shutil.ignore_patterns("checkpoint.safetensors"))
    damage(folder)
    one_sentence(lambda: Model.load(folder), pattern)


def test_encode_refuses_one_string_instead_of_a_list(tiny_model):
    with pytest.raises(DupqError, match=r"\[question\]"):
        tiny_model.encode("How are you")
    assert tiny_model.encode(["How are you"]).shape == (1, tiny_model.out_dim)
