"""The encoder interface (dupq.modeling.encoding): every implementation gives unit vectors of its out_dim, the joined
encoder is the weighted concatenation, and a model is its encoder and its judge."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dupq.core.errors import DupqError
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.architecture import SentenceConfig
from dupq.modeling.encoders import Encoder, EncoderConfig
from dupq.modeling.encoding import TextEncoder
from dupq.modeling.heads import HeadConfig, PairHead
from dupq.modeling.judge import Judge
from dupq.modeling.lstm import LSTMEncoder
from dupq.modeling.model import BUNDLED, Model
from dupq.modeling.sentence_model import JoinedEncoder, TransformerEncoder
from dupq.modeling.static import StaticBranch, StaticConfig
from dupq.modeling.verdict import needs_vectors, pair_logits
from support.kit import one_sentence

QUESTIONS = ["How do I learn Python?", "What is the capital of France?", "Why is the sky blue?", "tap faucet", "gym"]


class FakeTransformer:
    """A SentenceTransformer's ``encode``: a seeded unit vector per text, 6 wide."""

    def encode(self, texts, batch_size, normalize_embeddings, convert_to_numpy, show_progress_bar):
        assert normalize_embeddings and convert_to_numpy
        out = np.stack([np.random.default_rng(sum(map(ord, t)) + len(t)).normal(size=6) for t in texts])
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def lstm(seed: int = 0, branch: bool = False) -> LSTMEncoder:
    torch.manual_seed(seed)
    vocab = Vocabulary.build(QUESTIONS, lowercase=True, oov_buckets=2)
    table = np.random.default_rng(seed).normal(size=(len(vocab), 3)).astype(np.float32)
    static = StaticBranch(StaticConfig(dim=3, weight=2.0), table) if branch else None
    return LSTMEncoder(vocab, Encoder(EncoderConfig(len(vocab), dim=8)), static)


def transformer(join: float | None = None) -> TransformerEncoder:
    config = SentenceConfig(dim=6, name="fake", join=None if join is None else "student", join_weight=join or 0.0)
    return TransformerEncoder(FakeTransformer(), config, files=".")


def encoders() -> dict[str, TextEncoder]:
    return {
        "lstm": lstm(),
        "lstm with a static branch": lstm(branch=True),
        "transformer": transformer(),
        "joined": JoinedEncoder(transformer(join=0.5), Model(lstm(1))),
    }


@pytest.mark.parametrize("name", list(encoders()))
def test_every_encoder_gives_unit_vectors_of_its_out_dim(name):
    encoder = encoders()[name]
    for texts in (QUESTIONS, QUESTIONS[:1], QUESTIONS * 30):  # a few (NumPy kernels) and many (torch)
        vectors = encoder.encode(texts)
        assert vectors.dtype == np.float32 and vectors.shape == (len(texts), encoder.out_dim)
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert encoder.encode([]).shape == (0, encoder.out_dim)
    model = Model(encoder)
    assert model.out_dim == encoder.out_dim and model.encode(QUESTIONS).shape == (len(QUESTIONS), encoder.out_dim)


def test_the_joined_encoder_is_the_weighted_concatenation_computed_by_hand():
    w = 0.5
    student = Model(lstm(1))
    joined = JoinedEncoder(transformer(join=w), student)
    t, s = transformer().encode(QUESTIONS), student.encode(QUESTIONS)  # (N, 6), (N, 8)
    by_hand = np.array([[*(a / np.sqrt(1 + w)), *(np.sqrt(w) * b / np.sqrt(1 + w))] for a, b in zip(t, s)])
    np.testing.assert_allclose(joined.encode(QUESTIONS), by_hand, atol=1e-6)
    assert joined.out_dim == 6 + 8
    # its dot products: (cos_transformer + w cos_student) / (1 + w)
    u, v = joined.encode(QUESTIONS[:2]), joined.encode(QUESTIONS[2:4])
    cos_t, cos_s = np.einsum("nd,nd->n", t[:2], t[2:4]), np.einsum("nd,nd->n", s[:2], s[2:4])
    np.testing.assert_allclose(np.einsum("nd,nd->n", u, v), (cos_t + w * cos_s) / (1 + w), atol=1e-6)
    with pytest.raises(DupqError, match="join entry"):
        JoinedEncoder(transformer(), student)


def test_the_fingerprint_is_the_encoders_and_changes_with_the_join_weight():
    student = Model(lstm(1))
    a, b = JoinedEncoder(transformer(join=0.5), student), JoinedEncoder(transformer(join=0.25), student)
    assert Model(a).fingerprint() != Model(b).fingerprint()
    assert Model(a, Judge(threshold=0.1)).fingerprint() == Model(a).fingerprint()  # the judge does not encode
    assert Model(lstm()).fingerprint() == Model(lstm()).fingerprint() != Model(lstm(branch=True)).fingerprint()


def test_only_an_lstm_can_be_trained_and_the_head_reads_the_networks_half_of_a_branch():
    one_sentence(lambda: transformer().lstm("refused here."), "refused here")
    plain = lstm(branch=True)
    assert plain.lstm() is plain and plain.without_branch().branch is None and transformer().without_branch().copied
    torch.manual_seed(2)
    judge = Judge(PairHead(HeadConfig("cosine", 8)), threshold_on="probability", threshold=0.5)
    branched, alone = Model(plain, judge), Model(plain.without_branch(), judge)
    u, v = branched.encode(QUESTIONS[:2]), branched.encode(QUESTIONS[2:4])
    np.testing.assert_allclose(
        pair_logits(branched, u, v), pair_logits(alone, *(alone.encode(q) for q in (QUESTIONS[:2], QUESTIONS[2:4])))
    )
    assert needs_vectors(branched) and not needs_vectors(alone)  # a cosine head reads the search's cosine only alone


def test_saving_the_bundled_model_writes_its_files_again_byte_for_byte(tmp_path):
    Model.load().save(tmp_path / "m", half=None)  # float16, as it is stored
    for name in ("model.safetensors", "static.safetensors", "vocab.json", "metrics.json"):
        assert (tmp_path / "m" / name).read_bytes() == (BUNDLED / name).read_bytes(), name
    assert Model.load(tmp_path / "m").fingerprint() == Model.load().fingerprint()
