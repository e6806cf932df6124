"""The NumPy forward passes against the torch modules they mirror: same vectors, same logits, fresh weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dupq.modeling.encoders import Encoder, EncoderConfig
from dupq.modeling.heads import HeadConfig, PairHead
from dupq.modeling.kernels import FEW_QUESTIONS, HeadKernel, Kernels, LSTMKernel, Stored, arrays
from dupq.modeling.model import BUNDLED, Model
from dupq.modeling.verdict import pair_logits

VOCAB = 50


def _encoder(pooling: str = "mean", seed: int = 0, **config) -> Encoder:
    torch.manual_seed(seed)
    encoder = Encoder(EncoderConfig(vocab_size=VOCAB, dim=16, pooling=pooling, **config)).eval()
    with torch.no_grad():  # a fresh LSTM's biases are small; make every gate matter
        for p in encoder.lstm.parameters():
            p.normal_(0, 0.5)
    return encoder


def _batch(lengths: list[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded random ids ``(B, L)`` and their lengths, as the vocabulary pads them."""
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, dtype=np.int64)
    ids = rng.integers(1, VOCAB, (len(lengths), int(lengths.max())))
    ids[np.arange(ids.shape[1])[None, :] >= lengths[:, None]] = 0
    return ids, lengths


def _torch_vectors(encoder: Encoder, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return encoder(torch.from_numpy(ids), torch.from_numpy(lengths)).numpy()


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=FEW_QUESTIONS),
    pooling=st.sampled_from(["mean", "max"]),
    seed=st.integers(0, 1000),
)
def test_lstm_kernel_gives_the_encoders_vectors(lengths, pooling, seed):
    encoder = _encoder(pooling, seed % 7)
    ids, lengths = _batch(lengths, seed)
    got = LSTMKernel(arrays(encoder), encoder.config)(ids, lengths)
    assert got.dtype == np.float32 and got.shape == (len(lengths), 16)
    np.testing.assert_allclose(got, _torch_vectors(encoder, ids, lengths), atol=2e-6)


def test_lstm_kernel_ignores_the_padding_of_shorter_questions():
    """A question padded beside a longer one gets the vector it gets alone."""
    encoder = _encoder()
    ids, lengths = _batch([3, 9], seed=1)
    kernel = LSTMKernel(arrays(encoder), encoder.config)
    np.testing.assert_allclose(kernel(ids, lengths)[0], kernel(ids[:1, :3], lengths[:1])[0], atol=1e-6)


@pytest.mark.parametrize("kind", ["cosine", "mlp"])
def test_head_kernel_gives_the_heads_logits(kind):
    torch.manual_seed(3)
    head = PairHead(HeadConfig(kind=kind, dim=16, hidden=32)).eval()
    with torch.no_grad():
        head.scale.fill_(7.5)
        head.bias.fill_(0.3)
    rng = np.random.default_rng(0)
    u, v = (rng.standard_normal((25, 16)).astype(np.float32) for _ in range(2))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    with torch.inference_mode():
        expected = head(torch.from_numpy(u), torch.from_numpy(v)).double().numpy()
    kernel = HeadKernel(arrays(head), head.config)
    got = kernel(u, v)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(kernel(v, u), got, atol=1e-5)  # symmetric, as the head is


def test_kernels_follow_weights_changed_in_place():
    """An optimiser step or load_state_dict changes weights in place: the next call must see them."""
    encoder, kernels = _encoder(), Kernels()
    ids, lengths = _batch([5], seed=2)
    before = kernels.encoder(encoder, 1)(ids, lengths)
    with torch.no_grad():
        encoder.lstm.weight_hh_l0.mul_(-1.0)
        encoder.embedding.weight[ids[0, 0]] += 0.5
    after = kernels.encoder(encoder, 1)(ids, lengths)
    assert np.abs(after - before).max() > 1e-3
    np.testing.assert_allclose(after, _torch_vectors(encoder, ids, lengths), atol=2e-6)


def test_kernels_leave_to_torch_what_they_do_not_cover():
    kernels = Kernels()
    assert kernels.encoder(_encoder(), FEW_QUESTIONS) is not None
    assert kernels.encoder(_encoder(), FEW_QUESTIONS + 1) is None  # one batched torch call is faster
    assert kernels.encoder(_encoder(bidirectional=True), 1) is None
    assert kernels.encoder(_encoder().train(), 1) is None  # dropout is on
    assert kernels.encoder(_encoder().double(), 1) is None
    assert kernels.head(None) is None
    assert kernels.head(PairHead(HeadConfig(kind="mlp", dim=16)).eval()) is not None


@pytest.mark.parametrize("which", ["bundled", "mlp head, float32"])
def test_a_loaded_model_judges_on_its_stored_weights_as_torch_does(which, head_model_dir, tmp_path):
    """Model.load reads the weights as NumPy arrays and builds no torch module: random questions get the
    vectors, logits and fingerprint that the torch modules built from the same folder give, and both
    write the same bytes."""
    folder = BUNDLED if which == "bundled" else head_model_dir
    stored, modules = Model.load(folder), Model.load(folder)
    modules.encoder.kernels = modules.judge.kernels = None  # torch for every pass: modules built from the weights
    rng = np.random.default_rng(7)
    words = [t for t in stored.encoder.vocab.tokens if t.isalpha()]
    questions = [" ".join(rng.choice(words, rng.integers(1, 20))) for _ in range(FEW_QUESTIONS)]
    got, expected = stored.encode(questions), modules.encode(questions)
    np.testing.assert_allclose(got, expected, atol=2e-6)
    u, v = got[: FEW_QUESTIONS // 2], got[FEW_QUESTIONS // 2 :]
    np.testing.assert_allclose(pair_logits(stored, u, v), pair_logits(modules, u, v), atol=1e-5)
    cosines = rng.uniform(-1, 1, 50)
    logits = [model.judge.logits_from_cosines(cosines) for model in (stored, modules)]
    np.testing.assert_allclose(*logits, atol=1e-6)
    assert stored.fingerprint() == modules.fingerprint()
    assert isinstance(stored.encoder._network, Stored) and isinstance(stored.judge._head, Stored)  # no torch module
    assert not isinstance(modules.encoder._network, Stored) and not isinstance(modules.judge._head, Stored)
    for half in (False, True):
        stored.save(tmp_path / f"stored{half}", half=half)
        modules.save(tmp_path / f"modules{half}", half=half)
        written = [(tmp_path / f"{name}{half}" / "model.safetensors").read_bytes() for name in ("stored", "modules")]
        assert written[0] == written[1]
