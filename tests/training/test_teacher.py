"""Teacher vectors and distillation, on synthetic questions and a stand-in teacher made here.

The stand-in teacher is a fixed random projection of a bag of character trigrams: deterministic,
cheap, and unlike the LSTM, so that a student has something to learn from it. The test with the
real all-MiniLM-L6-v2 teacher needs the ``distil`` extra and skips without it.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from sklearn.decomposition import PCA

from dupq.core.errors import DupqError
from dupq.data.pairs import SplitConfig, split_pairs, write_pairs
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.model import Model
from dupq.training.batches import PairBatches
from dupq.training.config import CHECKPOINT, TrainConfig
from dupq.training.distil import teacher as teacher_module
from dupq.training.distil.teacher import TeacherCache, fingerprint, teach, training_texts, word_vectors
from dupq.training.losses import distillation_loss
from dupq.training.objectives import Objective
from dupq.training.train import train
from support.kit import make_pairs, needs_teacher

WIDTH = 12


def trigram_teacher(texts: list[str]) -> np.ndarray:
    """Unit vectors: the sum of a fixed random vector per character trigram of the text."""
    out = np.zeros((len(texts), WIDTH), dtype=np.float32)
    for i, text in enumerate(texts):
        padded = f"  {text.lower()} "
        for j in range(len(padded) - 2):
            seed = int.from_bytes(hashlib.blake2b(padded[j : j + 3].encode(), digest_size=4).digest(), "little")
            out[i] += np.random.default_rng(seed).standard_normal(WIDTH)
        out[i] /= np.linalg.norm(out[i])
    return out


def questions(n: int, seed: int = 0) -> list[str]:
    words = "cook bake learn python drive car fix phone grow tomato save money travel visa pay tax train dog".split()
    rng = np.random.default_rng(seed)
    return list(dict.fromkeys(f"how do i {' '.join(rng.choice(words, size=3))} {i}?" for i in range(n)))


@pytest.fixture
def small_shards(monkeypatch):
    monkeypatch.setattr(teacher_module, "SHARD_SIZE", 4)


def test_cache_holds_each_texts_vector_and_fingerprint(tmp_path, small_shards):
    texts = questions(10)
    cache = teach(texts + texts[:3], tmp_path / "t", trigram_teacher, "trigrams")  # repeats are taught once
    assert cache.texts == texts and cache.dim == WIDTH and cache.info["shards"] == 3
    # float16 storage: a relative rounding error of at most 2^-11 per coordinate of a unit vector
    assert np.abs(cache.vectors.float().numpy() - trigram_teacher(texts)).max() <= 2**-11
    assert cache.rows([texts[7], "never taught?", texts[0]]).tolist() == [7, -1, 0]
    shard = load_file(tmp_path / "t" / "shard-00001.safetensors")
    assert shard["fingerprints"].tolist() == [fingerprint(t) for t in texts[4:8]]
    assert TeacherCache.load(tmp_path / "t").texts == texts


def test_a_killed_run_resumes_with_the_shards_it_finished(tmp_path, small_shards):
    texts = questions(11)
    calls: list[int] = []

    def dies_on_the_third_shard(batch):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(len(batch))
        return trigram_teacher(batch)

    with pytest.raises(KeyboardInterrupt):
        teach(texts, tmp_path / "t", dies_on_the_third_shard, "trigrams")
    with pytest.raises(DupqError, match="incomplete"):
        TeacherCache.load(tmp_path / "t")
    encoded: list[str] = []
    cache = teach(texts, tmp_path / "t", lambda batch: (encoded.extend(batch), trigram_teacher(batch))[1], "trigrams")
    assert encoded == texts[8:]  # only the unfinished shard is encoded again
    assert np.abs(cache.vectors.float().numpy() - trigram_teacher(texts)).max() <= 2**-11


def test_a_damaged_shard_is_encoded_again(tmp_path, small_shards):
    texts = questions(8)
    teach(texts, tmp_path / "t", trigram_teacher, "trigrams")
    shard = tmp_path / "t" / "shard-00000.safetensors"
    shard.write_bytes(shard.read_bytes()[:50])
    with pytest.raises(DupqError, match="incomplete"):
        TeacherCache.load(tmp_path / "t")
    encoded: list[str] = []
    teach(texts, tmp_path / "t", lambda batch: (encoded.extend(batch), trigram_teacher(batch))[1], "trigrams")
    assert encoded == texts[:4]


def test_a_folder_of_other_texts_or_teacher_is_refused_unless_overwritten(tmp_path, small_shards):
    teach(questions(6), tmp_path / "t", trigram_teacher, "trigrams")
    with pytest.raises(DupqError, match="texts_fingerprint differs"):
        teach(questions(6, seed=1), tmp_path / "t", trigram_teacher, "trigrams")
    with pytest.raises(DupqError, match="teacher differs"):
        teach(questions(6), tmp_path / "t", trigram_teacher, "another")
    cache = teach(questions(3, seed=1), tmp_path / "t", trigram_teacher, "trigrams", overwrite=True)
    assert cache.texts == questions(3, seed=1)
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["shard-00000.safetensors", "teacher.json"]


@pytest.mark.parametrize("bad", [lambda b: np.zeros((len(b) - 1, 3)), lambda b: np.full((len(b), 3), np.nan)])
def test_a_teacher_that_returns_the_wrong_vectors_is_refused(tmp_path, bad):
    with pytest.raises(DupqError, match="one finite vector each"):
        teach(questions(5), tmp_path / "t", bad, "broken")


def test_training_texts_leave_out_held_out_questions():
    pool, held = ["a?", "b?", "a?", "c?"], ["b?", "z?"]
    assert training_texts(pool, held, extra=["d?", "c?", "z?"]) == ["a?", "c?", "d?"]


# Batches carry the teacher's vectors; the objective's distil losses read them.


def _cache(texts):
    return TeacherCache(texts, torch.from_numpy(trigram_teacher(texts)).half(), {"teacher": "trigrams"})


def test_batches_carry_the_teacher_vector_of_each_taught_question():
    texts = questions(12)
    pairs = make_pairs([(texts[i], texts[i + 1], i % 2) for i in range(0, 10, 2)])
    cache = _cache(texts[:6] + ["only taught?"])  # texts 6..9 are not taught
    source = PairBatches(Vocabulary.build(texts), pairs, batch_size=5, teacher=cache)
    batch = source.batch(np.arange(5), np.random.default_rng(0))
    assert batch.distil_only == 0
    assert len(batch.ids) == 2 * batch.size == len(batch.teacher) == len(batch.taught) == len(batch.groups)
    for row, text in enumerate(pairs.q1 + pairs.q2):
        k = cache.rows([text])[0]
        assert bool(batch.taught[row]) == (k >= 0)
        expected = cache.vectors[k].float() if k >= 0 else torch.zeros(WIDTH)
        assert torch.equal(batch.teacher[row], expected)


def test_distil_losses_read_only_taught_rows_and_distil_only_rows_rank_nothing():
    texts = questions(20)
    pairs = make_pairs([(texts[i], texts[i + 1], 1) for i in range(0, 16, 2)])
    cache = _cache(texts[:12] + texts[16:])
    vocab = Vocabulary.build(texts)
    plain = PairBatches(vocab, pairs, batch_size=8).batch(np.arange(8), np.random.default_rng(1))
    paired = PairBatches(vocab, pairs, batch_size=8, teacher=cache).batch(np.arange(8), np.random.default_rng(1))
    taught = replace(  # 4 rows to distil only, as dupq adapt's batches are
        paired,
        ids=torch.cat([paired.ids, torch.ones(4, paired.ids.shape[1], dtype=paired.ids.dtype)]),
        lengths=torch.cat([paired.lengths, torch.ones(4, dtype=paired.lengths.dtype)]),
        groups=torch.cat([paired.groups, torch.full((4,), torch.iinfo(torch.int64).min)]),
        teacher=torch.cat([paired.teacher, cache.vectors[:4].float()]),
        taught=torch.cat([paired.taught, torch.ones(4, dtype=torch.bool)]),
        distil_only=4,
    )
    g = torch.Generator().manual_seed(0)
    v = torch.nn.functional.normalize(torch.randn(len(taught.ids), 6, generator=g, dtype=torch.float64), dim=-1)
    projection = torch.nn.Linear(6, WIDTH, bias=False).double()
    ranking = Objective({"triplet": 1.0, "ranking": 1.0})
    # extra rows are not negatives
    assert ranking(v, taught).item() == pytest.approx(ranking(v[:16], plain).item(), abs=1e-12)
    mask = taught.taught
    student, teacher = v[mask], taught.teacher[mask]  # float32, as the objective reads them
    assert mask.sum() == 12 + 4  # q1/q2 of rows 0..5 are taught, rows 6, 7 not; plus the 4 distil-only rows
    distil = Objective({"distil": 2.0})
    expected = 2 * distillation_loss(projection(student), teacher)
    assert distil(v, taught, projection=projection).item() == pytest.approx(expected.item(), abs=1e-12)
    with pytest.raises(ValueError, match="teacher vectors"):
        distil(v[:16], plain, projection=projection)


# Training with a teacher: the loop, its checks, and the model folder it leaves.


def synthetic_splits(n: int = 600):
    """Pairs whose duplicates reuse a topic: 'how do i {verb} {noun}?' vs 'best way to {verb} {noun}?'."""
    verbs = "cook learn fix clean grow sell paint build".split()
    nouns = "rice python bike window tomato house fence boat".split()
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        v, o = rng.choice(verbs), rng.choice(nouns)
        q2 = (
            f"best way to {v} {o} {i % 37}?" if i % 2 else f"how do i {rng.choice(verbs)} {rng.choice(nouns)} {i % 41}?"
        )
        rows.append((f"how do i {v} {o} {i % 37}?", q2, i % 2))
    split = SplitConfig(train_pool=n - 200, test=100, dev=100, labelled_val=100)
    return split_pairs(make_pairs(rows), split), split.__dict__


def test_training_with_a_teacher_saves_the_projection_in_the_checkpoint_only(tmp_path):
    splits, split = synthetic_splits()
    held = splits.test.q1 + splits.test.q2 + splits.dev.q1 + splits.dev.q2
    texts = training_texts(splits.pool.q1 + splits.pool.q2, held)
    teach(texts, tmp_path / "teacher", trigram_teacher, "trigrams", split={"train_pool": 400, "test": 100, "dev": 100})
    losses = {"bce": 1.0, "triplet": {"reduction": "mean"}, "distil": 5.0}
    teacher = {"teacher_vectors": str(tmp_path / "teacher"), "losses": losses}
    config = TrainConfig(train_on="labelled", epochs=2, lr=0.01, batch_size=32, **teacher)
    quiet = {"log": lambda _: None, "progress": False, "split": split}
    model = train(splits, tmp_path / "m", config, dim=8, **quiet)
    weights = load_file(tmp_path / "m" / CHECKPOINT)
    assert weights["model.projection.weight"].shape == (WIDTH, 8)
    assert not any("projection" in k for k in load_file(tmp_path / "m" / "model.safetensors"))
    assert Model.load(tmp_path / "m").encode(["how do i cook rice 3?"]).shape == (1, 8)
    history = model.metrics["training"]["history"]
    assert history[1]["train_loss"] < history[0]["train_loss"]
    # an interrupted run resumes with its projection
    again = train(splits, tmp_path / "m", TrainConfig(**{**config.__dict__, "epochs": 3}), dim=8, resume=True, **quiet)
    assert len(again.metrics["training"]["history"]) == 3


def test_training_refuses_a_teacher_it_cannot_use(tmp_path):
    with pytest.raises(DupqError, match="need --teacher"):
        TrainConfig(train_on="labelled", losses={"bce": 1.0, "distil": 1.0})
    with pytest.raises(DupqError, match="read by the distil losses only"):
        TrainConfig(train_on="labelled", teacher_vectors="runs/teacher")
    splits, split = synthetic_splits()
    teach(splits.pool.q1, tmp_path / "teacher", trigram_teacher, "trigrams", split={**split, "train_pool": 300})
    losses = {"bce": 1.0, "distil": 1.0}
    for folder, says in (("teacher", "--train-pool 300, this run uses 400"), ("nothing", "holds no teacher vectors")):
        config = TrainConfig(train_on="labelled", epochs=1, teacher_vectors=str(tmp_path / folder), losses=losses)
        with pytest.raises(DupqError, match=says):
            train(splits, tmp_path / "m", config, dim=8, split=split, log=lambda _: None, progress=False)


# The real teacher, through the command line.


@needs_teacher
def test_distil_teach_command_encodes_the_pool_but_never_test_or_dev(tmp_path):
    splits, _ = synthetic_splits(300)  # rows 0-99: pool, 100-199: test, 200-299: dev
    parts = (splits.pool, splits.test, splits.dev)
    rows = sorted((int(r), a, b, int(y)) for p in parts for r, a, b, y in zip(p.rows, p.q1, p.q2, p.labels))
    qid: dict[str, int] = {}
    number = lambda text: qid.setdefault(text, len(qid) + 1)  # noqa: E731
    write_pairs(tmp_path / "pairs.tsv", [(number(a), number(b), a, b, y) for _, a, b, y in rows])  # ids: the rows
    mine = "where can i buy a second-hand bicycle?"
    (tmp_path / "mine.txt").write_text(f"{mine}\n{splits.test.q2[0]}\n")  # a test question of the user's: not taught
    out = tmp_path / "teacher"
    command = [sys.executable, *"-m dupq.cli distil teach --data".split(), str(tmp_path / "pairs.tsv")]
    command += ["--out", str(out), "--questions", str(tmp_path / "mine.txt")]
    command += "--train-pool 100 --test-size 100 --dev-size 100 --threads 1 --no-progress".split()
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    cache = TeacherCache.load(out)
    pool = {t for r, a, b, _ in rows if r < 100 for t in (a, b)}
    held = {t for r, a, b, _ in rows if r >= 100 for t in (a, b)}
    assert set(cache.texts) == (pool | {mine}) - held
    assert cache.dim == 384 and torch.allclose(cache.vectors.float().norm(dim=1), torch.ones(len(cache)), atol=1e-2)
    again = subprocess.run(command, capture_output=True, text=True)  # a second run finds the work done
    assert again.returncode == 0 and TeacherCache.load(out).texts == cache.texts


# Word embeddings that start from the teacher.


def test_word_vectors_are_the_teachers_principal_components_at_the_random_starts_scale():
    words = [f"w{i}{c}" for i in range(40) for c in "ab"]
    got = word_vectors(words, trigram_teacher, 5, rms=0.03)
    expected = PCA(5, svd_solver="full").fit_transform(trigram_teacher(words).astype(np.float64))
    expected *= 0.03 / np.sqrt(np.mean(expected**2))
    signs = np.sign((got * expected).sum(axis=0))  # a principal direction is defined up to its sign
    np.testing.assert_allclose(got, expected * signs, atol=1e-6)
    assert np.sqrt(np.mean(got.astype(np.float64) ** 2)) == pytest.approx(0.03, rel=1e-5)
    with pytest.raises(DupqError, match="cannot start embeddings 13 wide"):
        word_vectors(words, trigram_teacher, WIDTH + 1, rms=0.03)


def test_word_init_replaces_the_words_rows_only(tmp_path, monkeypatch):
    monkeypatch.setattr(teacher_module, "load_teacher", lambda name=None: (trigram_teacher, "trigrams"))
    splits, split = synthetic_splits()
    # lr 0: the start is what is saved
    config = TrainConfig(train_on="labelled", epochs=1, lr=0.0, losses={"bce": 1.0}, batch_size=32)
    kw = {"dim": 6, "oov_buckets": 3, "split": split, "log": lambda _: None, "progress": False}
    plain = train(splits, tmp_path / "plain", config, **kw).encoder.network.embedding.weight.detach()
    lines: list[str] = []
    start = train(
        splits, tmp_path / "w", config, **{**kw, "word_init": "teacher", "log": lines.append}
    ).encoder.network.embedding.weight.detach()
    vocab = Vocabulary.load(tmp_path / "w" / "vocab.json")
    words = vocab.tokens[2:]
    rms = float(plain[2:].pow(2).mean().sqrt())
    torch.testing.assert_close(
        start[2 : 2 + len(words)], torch.from_numpy(word_vectors(words, trigram_teacher, 6, rms))
    )
    torch.testing.assert_close(start[:2], plain[:2])  # padding and the unknown word: as the random start
    torch.testing.assert_close(start[2 + len(words) :], plain[2 + len(words) :])  # the unknown-word buckets too
    assert any(f"{len(words):,} words start from trigrams" in line for line in lines)
    assert Model.load(tmp_path / "w").metrics["training"]["options"]["word_init"] == "teacher"
