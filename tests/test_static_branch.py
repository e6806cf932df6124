"""dupq-lab static-branch: the static sentence vectors joined to a model's, against naive references."""

from __future__ import annotations

import numpy as np
import pytest

from dupq.data.tokenizer import Vocabulary


@pytest.fixture(scope="module")
def branch():
    from dupq_lab.experiments import static_branch

    return static_branch


QUESTIONS = ["How do I fix a leaking tap?", "How do I fix a dripping faucet?", "Why is the sky blue?", "How do I?"]


def fake_teacher(texts: list[str]) -> np.ndarray:
    """A deterministic vector per word (its own seeded draw), unit length, like a teacher's."""
    out = np.stack([np.random.default_rng(sum(map(ord, t)) + 7 * len(t)).normal(size=12) for t in texts])
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def test_zipf_weights_follow_the_rank_and_skip_padding_and_unknown(branch):
    vocab = Vocabulary.build(QUESTIONS, lowercase=True)
    a = 1e-2
    weights = branch.zipf_weights(vocab, a)
    n = len(vocab.tokens) - 2
    harmonic = sum(1 / r for r in range(1, n + 1))
    expected = [0.0, 0.0] + [a / (a + 1 / (r * harmonic)) for r in range(1, n + 1)]
    np.testing.assert_allclose(weights, expected, rtol=1e-6)


def test_word_table_keeps_the_teachers_inner_products_at_full_width_and_their_best_uncentred_rank_k_below(branch):
    vocab = Vocabulary.build(QUESTIONS, lowercase=True)
    vectors = fake_teacher(vocab.tokens[2:]).astype(np.float64)
    table = branch.word_table(vocab, fake_teacher, dim=12)
    assert not table[:2].any()
    np.testing.assert_allclose(table[2:] @ table[2:].T, vectors @ vectors.T, atol=1e-5)
    u, sigma, _ = np.linalg.svd(vectors, full_matrices=False)  # Eckart-Young: the best rank-3 Gram matrix
    best = (u[:, :3] * sigma[:3] ** 2) @ u[:, :3].T
    table = branch.word_table(vocab, fake_teacher, dim=3)
    np.testing.assert_allclose(table[2:] @ table[2:].T, best, atol=1e-5)


def test_static_vectors_are_the_weighted_sum_of_known_words_normalised(branch):
    vocab = Vocabulary.build(QUESTIONS[:3], lowercase=True, oov_buckets=4)
    table = np.random.default_rng(0).normal(size=(len(vocab.tokens), 5)).astype(np.float32)
    weights = branch.zipf_weights(vocab, 1e-3)
    texts = ["How do I fix a leaking sink?", "Totally unknown words here", "", "why IS the sky blue"]
    got = branch.static_vectors(vocab, table, weights, texts)
    for text, row in zip(texts, got):
        total = np.zeros(5)
        for word in vocab.words(text):
            if vocab.known(word):
                i = vocab.index[word]
                total += weights[i] * table[i]
        norm = np.linalg.norm(total)
        np.testing.assert_allclose(row, total / norm if norm else total, atol=1e-6)


def test_joined_vectors_are_unit_and_their_dot_is_the_weighted_mean_of_cosines(branch):
    rng = np.random.default_rng(1)
    u, s = (rng.normal(size=(6, d)) for d in (4, 3))
    u, s = (x / np.linalg.norm(x, axis=1, keepdims=True) for x in (u, s))
    j = branch.joined(u, s, 2.5)
    np.testing.assert_allclose(np.linalg.norm(j, axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(j @ j.T, (u @ u.T + 2.5 * (s @ s.T)) / 3.5, atol=1e-12)
