"""The encoder (masked mean, normalisation) and the model folder (save/load and its errors)."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest
import torch

from dupq.core.errors import DupqError
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.encoders import Encoder, EncoderConfig
from dupq.modeling.lstm import LSTMEncoder
from dupq.modeling.model import Model


@pytest.fixture(scope="module")
def vocab(small_splits):
    return Vocabulary.build(small_splits.train.q1 + small_splits.train.q2)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_vector_does_not_depend_on_batch_padding(vocab, small_splits, bidirectional):
    torch.manual_seed(0)
    model = Model(LSTMEncoder(vocab, Encoder(EncoderConfig(len(vocab), dim=16, bidirectional=bidirectional))))
    short = small_splits.test.q1[:20]
    alone = model.encode(short)
    padded = model.encode(short + [" ".join(small_splits.test.q2[:40])], batch_size=64)[
        :20
    ]  # one long question widens the batch
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
    import dupq.modeling.lstm

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
    assert (tmp_path / "half" / "model.safetensors").stat().st_size < 0.6 * (
        tmp_path / "m" / "model.safetensors"
    ).stat().st_size
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


def test_load_errors_are_one_sentence(tiny_model_dir, tmp_path):
    def broken(name, mutate):
        folder = tmp_path / name
        folder.mkdir()
        for f in tiny_model_dir.iterdir():
            if f.suffix in (".json", ".safetensors") and f.name != "checkpoint.safetensors":
                (folder / f.name).write_bytes(f.read_bytes())
        mutate(folder)
        return folder

    cases = {
        "does not exist": tmp_path / "missing",
        "is empty": broken("empty", lambda f: [p.unlink() for p in f.iterdir()]),
        "model config .* is missing": broken("noconfig", lambda f: (f / "config.json").unlink()),
        "not valid JSON": broken("badjson", lambda f: (f / "config.json").write_text("{nope")),
        "safetensors is corrupt": broken("badweights", lambda f: (f / "model.safetensors").write_bytes(b"\x00" * 40)),
        "weights .* are missing": broken("noweights", lambda f: (f / "model.safetensors").unlink()),
        "vocabulary is missing": broken("novocab", lambda f: (f / "vocab.json").unlink()),
        "words but the config says": broken(
            "mismatch",
            lambda f: (f / "vocab.json").write_text(
                json.dumps({"lowercase": False, "max_tokens": 9, "tokens": ["[PAD]", "[UNK]"]})
            ),
        ),
    }
    for pattern, folder in cases.items():
        with pytest.raises(DupqError, match=pattern) as e:
            Model.load(folder)
        assert "\n" not in str(e.value)


def test_load_refuses_non_finite_weights_and_a_bad_head(tmp_path, tiny_model_dir, head_model_dir):
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    from dupq.core.errors import DupqError

    nan = shutil.copytree(tiny_model_dir, tmp_path / "nan")
    weights = load_file(str(nan / "model.safetensors"))
    name = sorted(weights)[0]
    weights[name][0] = float("nan")
    save_file(weights, str(nan / "model.safetensors"))
    with pytest.raises(DupqError, match=f"{name} holds numbers that are not finite"):
        Model.load(nan)
    head = shutil.copytree(head_model_dir, tmp_path / "head")
    config = json.loads((head / "config.json").read_text())
    for broken in ({**config["head"], "hidden": "256"}, {**config["head"], "kind": "attention"}):
        (head / "config.json").write_text(json.dumps({**config, "head": broken}))
        with pytest.raises(DupqError, match="config.json"):
            Model.load(head)
    (head / "config.json").write_text(
        json.dumps({**config, "calibration": {"method": "beta", "a": float("nan"), "b": 1, "c": 0}})
    )
    with pytest.raises(DupqError):
        Model.load(head)


def test_load_refuses_weights_that_do_not_fit_the_config(tmp_path, head_model_dir):
    """A weight missing, one too many, or one of another shape: one sentence naming it, before any torch module."""
    import shutil

    from safetensors.numpy import load_file, save_file

    weights = load_file(str(head_model_dir / "model.safetensors"))
    cases = {
        "it lacks head.mlp.0.bias": {k: v for k, v in weights.items() if k != "head.mlp.0.bias"},
        "it holds extra.weight, which the config has no place for": {
            **weights,
            "extra.weight": np.zeros(3, np.float32),
        },
        r"lstm.weight_hh_l0 has shape \[64, 15\], the config needs \[64, 16\]": {
            **weights,
            "lstm.weight_hh_l0": weights["lstm.weight_hh_l0"][:, :15].copy(),
        },
    }
    for i, (words, changed) in enumerate(cases.items()):
        folder = shutil.copytree(head_model_dir, tmp_path / str(i))
        save_file(changed, str(folder / "model.safetensors"))
        with pytest.raises(DupqError, match=f"model.safetensors does not match .*config.json: {words}") as e:
            Model.load(folder)
        assert "\n" not in str(e.value)


def test_encode_refuses_one_string_instead_of_a_list(tiny_model):
    with pytest.raises(DupqError, match=r"\[question\]"):
        tiny_model.encode("How are you")
    assert tiny_model.encode(["How are you"]).shape == (1, tiny_model.out_dim)
