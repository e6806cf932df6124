"""`dupq adapt` and `dupq index reencode`: a model fitted to a user's own questions by a teacher, and a collection encoded again.

The teacher here is a fake, deterministic one (a fixed random vector per word, summed and
normalised), so no test needs sentence-transformers; the student is the tiny mlp-head model of
the conftest, and the user's questions are synthetic.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import string

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import dupq
from dupq.cli import app
from dupq.collection import reencode as reencode_module
from dupq.collection.collection import Collection
from dupq.collection.folder.backend import DATABASE
from dupq.core.errors import DupqError
from dupq.data.pairs import SplitConfig, read_pairs, split_pairs
from dupq.data.questions import MAX_QUESTION
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.encoders import Encoder, EncoderConfig
from dupq.modeling.heads import HeadConfig, PairHead
from dupq.modeling.judge import Judge
from dupq.modeling.lstm import LSTMEncoder
from dupq.modeling.model import BUNDLED, Model
from dupq.modeling.static import StaticBranch, StaticConfig
from dupq.training import adapt as adapt_module
from dupq.training.adapt import AdaptConfig, adapt_with, agreement_line
from dupq.training.adapt_questions import user_questions
from dupq.training.distil import teacher as teacher_module
from dupq.training.distil.branch import teacher_branch, with_branch
from support.errors import refused
from support.kit import ok
from support.synthetic import make_rows, write_pairs

WIDTH = 24  # the fake teacher's width: not the student's, so the distil loss needs its projection
runner = CliRunner()


def word_teacher(texts: list[str]) -> np.ndarray:
    """Unit vectors: the sum of a fixed random vector per lowercased word of the text."""
    out = np.zeros((len(texts), WIDTH), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().translate(str.maketrans("", "", string.punctuation)).split():
            seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
            out[i] += np.random.default_rng(seed).standard_normal(WIDTH)
        out[i] /= max(np.linalg.norm(out[i]), 1e-9)
    return out


def silent(_: str) -> None:
    pass


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """The user's questions: 290 distinct synthetic questions (batches of 32: 9 full ones and one of 2)."""
    rows = make_rows(600, seed=5)
    found = [q for r in rows for q in (r.question1, r.question2) if r.concepts[0] and r.concepts[1]]
    return list(dict.fromkeys(found))[:290]


@pytest.fixture(scope="module")
def head_model_dir(texts, tmp_path_factory):
    """An untrained LSTM model laid out like the bundled one: lowercase vocabulary with unknown-word buckets,
    an mlp pair head, a beta calibration and a probability threshold. Its vocabulary lacks a few words of ``texts``."""
    torch.manual_seed(0)
    vocab = Vocabulary.build(texts[:-20], lowercase=True, oov_buckets=8)
    calibration = {"method": "beta", "a": 0.4, "b": 1.1, "c": -1.5}
    judge = Judge(PairHead(HeadConfig("mlp", 16, 8)), calibration, threshold=0.45, threshold_on="probability")
    metrics = {"training": {"split": {"train_pool": 100, "test": 10, "dev": 10}}, "test": {"accuracy": 0.5}}
    model = Model(LSTMEncoder(vocab, Encoder(EncoderConfig(len(vocab), 16, dropout=0.1))), judge, metrics=metrics)
    out = tmp_path_factory.mktemp("base") / "model"
    model.save(out)
    return out


CONFIG = AdaptConfig(epochs=8, batch_size=32, lr=0.001, distil=1.0)


@pytest.fixture(scope="module")
def adapted_dir(head_model_dir, texts, tmp_path_factory):
    out = tmp_path_factory.mktemp("adapted") / "model"
    adapt_with(Model.load(head_model_dir), texts, out, word_teacher, "words", CONFIG, log=silent, progress=False)
    return out


def naive_cosine(model: Model, texts: list[str]) -> float:
    """Mean cosine between the teacher's vectors and the least-squares projection of the model's, one question at a time."""
    v = model.encode(texts).astype(np.float64)
    t = word_teacher(texts).astype(np.float64)
    projected = v @ np.linalg.lstsq(v, t, rcond=None)[0]
    cosines = [projected[i] @ t[i] / (np.linalg.norm(projected[i]) * np.linalg.norm(t[i])) for i in range(len(t))]
    return float(np.mean(cosines))


def test_the_adapted_students_vectors_are_closer_to_the_teachers(head_model_dir, adapted_dir, texts):
    before, after = naive_cosine(Model.load(head_model_dir), texts), naive_cosine(Model.load(adapted_dir), texts)
    assert after > before + 0.05
    record = Model.load(adapted_dir).metrics["adaptation"]
    # what metrics.json says of the start is the naive figure (the teacher's vectors are cached as float16)
    assert record["before"]["cosine_to_teacher"] == pytest.approx(before, abs=2e-3)
    assert record["after"]["cosine_to_teacher"] > record["before"]["cosine_to_teacher"] + 0.05


def test_the_adapted_folder_keeps_the_base_vocabulary_head_and_threshold(head_model_dir, adapted_dir, texts):
    base, adapted = Model.load(head_model_dir), Model.load(adapted_dir)
    vocab, base_vocab = adapted.encoder.vocab, base.encoder.vocab
    assert (vocab.tokens, vocab.oov_buckets) == (base_vocab.tokens, base_vocab.oov_buckets)
    for name, weight in base.judge.head.state_dict().items():
        torch.testing.assert_close(adapted.judge.head.state_dict()[name], weight)
    judged = [(m.judge.calibration, m.threshold, m.threshold_on) for m in (adapted, base)]
    assert judged[0] == judged[1]
    assert adapted.fingerprint() != base.fingerprint()
    record = adapted.metrics["adaptation"]
    assert record["base"] == {"fingerprint": base.fingerprint(), "folder": str(base.folder), "bundled": False}
    assert record["teacher"] == "words" and record["questions"] == len(texts)
    assert record["steps"] == CONFIG.epochs * math.ceil(len(texts) / CONFIG.batch_size)
    assert all(math.isfinite(epoch["train_loss"]) for epoch in record["history"])
    assert "test" not in adapted.metrics  # the base model's test figures are not the adapted model's
    assert adapted.metrics["training"] == base.metrics["training"]  # its split: dupq evaluate still knows its test rows


def test_unknown_words_are_counted_against_a_loop(head_model_dir, texts):
    base = Model.load(head_model_dir)
    extra = ["how do i zorblax a quuxifier?", "Why is the zorblax broken?"]
    counted = adapt_module.unknown_words(base.encoder.vocab, texts + extra)
    words = [w for t in texts + extra for w in base.encoder.vocab.words(t)]
    assert counted["unknown_distinct"] == len({w for w in words if w not in base.encoder.vocab.index}) >= 3
    assert counted["unknown_occurrences"] == sum(w not in base.encoder.vocab.index for w in words)


@pytest.mark.parametrize("fails_in", ["teacher", "training", "saving"])
def test_a_failed_run_leaves_no_half_folder_and_the_old_one_intact(
    head_model_dir, texts, tmp_path, monkeypatch, fails_in
):
    out = tmp_path / "adapted"
    out.mkdir()
    (out / "marker.txt").write_text("the previous model")
    encode = word_teacher
    if fails_in == "teacher":
        calls = []

        def encode(part):  # noqa: F811 - the teacher dies on its second call
            calls.append(1)
            if len(calls) > 1:
                raise KeyboardInterrupt
            return word_teacher(part)

    elif fails_in == "training":
        monkeypatch.setattr(adapt_module, "fit", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    else:
        real_save = Model.save

        def save(self, folder, half=False):  # writes part of the folder, then the disk is full
            real_save(self, folder, half)
            (folder / "config.json").unlink()
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(Model, "save", save)
    with pytest.raises((KeyboardInterrupt, OSError)):
        adapt_with(Model.load(head_model_dir), texts, out, encode, "words", CONFIG, log=silent, progress=False)
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("adapted.teacher")] == ["adapted"]
    assert [p.name for p in out.iterdir()] == ["marker.txt"]


def test_the_library_refuses_what_it_cannot_adapt(head_model_dir, texts, tmp_path):
    base = Model.load(head_model_dir)
    with pytest.raises(DupqError, match="at least 2 distinct questions"):
        adapt_with(base, [texts[0], texts[0]], tmp_path / "a", word_teacher, "words", log=silent, progress=False)
    with pytest.raises(DupqError, match="needs the distillation loss"):
        AdaptConfig(distil=0.0)
    with pytest.raises(DupqError, match="finite"):
        AdaptConfig(lr=float("nan"))


@pytest.fixture
def fake_teacher(monkeypatch, tmp_path):
    monkeypatch.setattr(teacher_module, "load_teacher", lambda name=None, device="cpu": (word_teacher, "words"))
    monkeypatch.setenv("DUPQ_DATA", str(tmp_path / "no-quora-here.tsv"))  # a small desk mixes in nothing here


def test_a_small_desk_gets_quora_training_questions_mixed_in_and_says_so(head_model_dir, texts, tmp_path, fake_teacher):
    quora = write_pairs(tmp_path / "quora.tsv", 400, seed=9)
    desk = tmp_path / "desk.txt"
    desk.write_text("\n".join(texts[:40]))
    out = tmp_path / "adapted"
    args = ["adapt", str(desk), "--out", str(out), "--model", str(head_model_dir), "--epochs", "1"]
    said = ok(*args, "--data", quora, "--mix", "100").output
    assert "only 40 questions, fewer than --mix 100: 60 questions of Quora's training pool mixed in" in said
    assert "cosine to the teacher on your 40 questions" in said and "on all 100 taught" in said
    assert Model.load(out).metrics["adaptation"]["mixed_in"] == 60
    taught = teacher_module.TeacherCache.load(tmp_path / "adapted.teacher").texts
    splits = split_pairs(read_pairs(quora)[0], SplitConfig(train_pool=100, test=10, dev=10))
    held_out = {q for part in (splits.test, splits.dev) for q in (*part.q1, *part.q2)}
    assert taught[:40] == texts[:40] and len(taught) == 100 and not held_out & set(taught[40:])
    pool = list(dict.fromkeys(q for a, b in zip(splits.pool.q1, splits.pool.q2) for q in (a, b)))
    assert taught[40:] == [q for q in pool if q not in set(texts[:40]) | held_out][:60]  # the pool's first, in order

    assert "no Quora file at" in ok(*args, "--overwrite").output  # no Quora file: it says so and goes on
    assert Model.load(out).metrics["adaptation"]["mixed_in"] == 0


def test_the_library_adapts_a_collection_to_its_model_and_mixes_quora_in_as_the_command_does(
    head_model_dir, texts, tmp_path
):
    """``dupq.adapt`` on an open collection: its model is the base, and a small desk gets Quora's questions."""
    base, said = Model.load(head_model_dir), []
    quora = write_pairs(tmp_path / "quora.tsv", 400, seed=9)
    config = AdaptConfig(epochs=1, batch_size=32, mix=100)
    with Collection.build(tmp_path / "c", texts[:40], base) as coll:
        adapted = dupq.adapt(
            coll, tmp_path / "a", teacher=word_teacher, config=config, data=quora, log=said.append, progress=False
        )
    record = adapted.metrics["adaptation"]
    assert record["base"]["fingerprint"] == base.fingerprint() and record["teacher"] == "word_teacher"
    assert (record["questions"], record["mixed_in"]) == (40, 60)
    assert said[0].startswith("adapting ") and " to 40 questions" in said[0]
    assert any("60 questions of Quora's training pool mixed in" in line for line in said)
    assert Model.load(tmp_path / "a").fingerprint() == adapted.fingerprint()


def test_the_adapted_branch_learns_the_new_words_as_the_teachers_vectors_through_its_projection(
    head_model_dir, texts, tmp_path
):
    base = Model.load(head_model_dir)
    vocab = base.encoder.vocab
    words = word_teacher(vocab.tokens[2:]).astype(np.float64)  # the teacher's vector of each word alone
    base = with_branch(base, teacher_branch(vocab, words, None, None, dim=10, a=1e9, weight=1.5))  # weights all but 1
    new = list(dict.fromkeys(w for t in texts[:290] for w in vocab.words(t) if not vocab.known(w)))
    assert new  # the fixture's vocabulary lacks a few words of the questions
    said: list[str] = []
    adapt_with(base, texts[:290], tmp_path / "a", word_teacher, "w", CONFIG, log=said.append, progress=False)
    branch = Model.load(tmp_path / "a").encoder.branch

    assert branch.added_words == new and branch.config.added == len(new)
    basis = np.linalg.svd(words, full_matrices=False)[2][:10].T  # the branch's own projection
    np.testing.assert_allclose(branch.added, word_teacher(new) @ basis, atol=1e-5)
    np.testing.assert_allclose(branch.words, base.encoder.branch.words)  # the table itself is kept
    record = Model.load(tmp_path / "a").metrics["adaptation"]["branch_words"]
    assert record["words"] == len(new) and record["map_cosine"] > 0.9999
    assert any(f"learned {len(new)} words" in line for line in said)
    text = next(t for t in texts[:290] if any(not vocab.known(w) for w in vocab.words(t)))
    s = branch.vectors(vocab, vocab.encode([text]), [text])[0]
    expected = sum(  # known words: their rows; the new ones: their taught rows
        branch.words[vocab.index[w]] if vocab.known(w) else branch.added[new.index(w)] for w in vocab.words(text)
    )
    np.testing.assert_allclose(s, expected / np.linalg.norm(expected), atol=1e-5)


def test_an_adapted_branch_that_is_not_the_teachers_is_kept_with_its_table_and_says_why(
    head_model_dir, texts, tmp_path
):
    base = Model.load(head_model_dir)
    table = np.random.default_rng(0).normal(size=(len(base.encoder.vocab), 3)).astype(np.float32)  # no teacher's map
    base = with_branch(base, StaticBranch(StaticConfig(dim=3, weight=1.5), table))
    said: list[str] = []
    adapted = adapt_with(base, texts, tmp_path / "a", word_teacher, "w", CONFIG, log=said.append, progress=False)
    loaded = Model.load(tmp_path / "a")
    assert loaded.encoder.branch is not None and loaded.out_dim == 16 + 3 and loaded.encoder.branch.added_words == []
    np.testing.assert_allclose(loaded.encoder.branch.words, table)
    assert loaded.fingerprint() == adapted.fingerprint() != base.fingerprint()
    assert any("keeps its table: its rows are not a linear map of this teacher's" in line for line in said)


def test_the_agreement_line_says_why_a_figure_fell():
    before = {"own_cosine": 0.98, "cosine_to_teacher": 0.98, "matrix_error": 0.1}
    fell = agreement_line(before, {**before, "own_cosine": 0.86}, 146, 146)
    assert "0.9800 before, 0.8600 after" in fell and "Lower after" in fell and "taught" not in fell
    rose = agreement_line(before, {**before, "own_cosine": 0.99, "cosine_to_teacher": 0.99}, 10, 30)
    assert "Lower" not in rose and "on all 30 taught: 0.9800 -> 0.9900" in rose


def test_bad_input_is_one_sentence(head_model_dir, texts, tmp_path, fake_teacher):
    one, good = tmp_path / "one.txt", tmp_path / "good.txt"
    plain_folder, taken = tmp_path / "folder", tmp_path / "taken"
    one.write_text("How do I learn Python?\nHow do I learn Python?\n")
    good.write_text("\n".join(texts[:20]))
    plain_folder.mkdir()
    taken.mkdir()
    (taken / "x").write_text("x")
    model, out = ["--model", str(head_model_dir)], ["--out", str(tmp_path / "o")]
    cases = {
        "does not exist": [tmp_path / "none.txt", *out, *model],
        "not a dupq collection": [plain_folder, *out, *model],
        "at least 2 distinct questions": [one, *out, *model],
        "already exists": [good, "--out", taken, *model],
        "needs the distillation loss": [good, *out, "--distil", "0"],
        "must be finite": [good, *out, "--lr", "inf"],
        "need a .csv, .tsv, .jsonl or .parquet file": [good, "--column", "title", *out, *model],
    }
    for expected, args in cases.items():
        assert expected in refused(runner.invoke(app, ["adapt", *map(str, args)])), expected
    assert not (tmp_path / "o").exists()


def test_adapt_a_collection_then_encode_it_again(head_model_dir, texts, tmp_path, location, fake_teacher):
    base = Model.load(head_model_dir)
    keys = [f"k{i}" if i % 3 else None for i in range(len(texts))]  # some questions were added without a key
    metadata = [{"n": i} if i % 2 else None for i in range(len(texts))]
    Collection.build(location, texts, base, keys=keys, metadata=metadata).close()
    where = str(location)
    read, model, skipped = user_questions(where)
    assert sorted(read) == sorted(texts) and model.fingerprint() == base.fingerprint() and skipped.count == 0

    out = tmp_path / "adapted"
    said = ok("adapt", where, "--out", out, "--epochs", "1", "--batch-size", "32").output
    assert "saved model to" in said and "index reencode" in said
    adapted = Model.load(out)
    assert adapted.metrics["adaptation"]["base"]["fingerprint"] == base.fingerprint()  # the collection's model

    with pytest.raises(DupqError, match="fingerprint"):
        Collection.open(location, adapted)
    new = tmp_path / "new"
    if isinstance(location, str):  # Milvus: another collection of the same file; Postgres: another table
        new = f"{location}?collection=adapted" if location.startswith("milvus:") else f"{location}_adapted"
    ok("index", "reencode", where, "--model", out, "--out", new)
    with Collection.open(new) as coll:
        assert coll.model.fingerprint() == adapted.fingerprint()
        rows = coll.stored_rows()  # in id order: a folder's ids follow the build, Milvus's are hashed keys or random
        by_text = lambda row: row[1]  # noqa: E731
        copied = sorted([(key, text, meta) for _, key, text, meta in rows], key=by_text)
        assert copied == sorted(zip(keys, texts, metadata), key=by_text)
        stored = dict(zip([text for _, _, text, _ in rows], coll.stored_vectors()))
        np.testing.assert_allclose(np.stack([stored[t] for t in texts]), adapted.encode(texts), atol=1e-6)
        hit = coll.search([texts[5]], k=1)[0][0]
        assert hit.text == texts[5]
    in_place = ["index", "reencode", where, "--model", str(out), "--out", where]
    assert "new location" in refused(runner.invoke(app, in_place))


def test_a_questions_file_gives_its_texts_and_no_model(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text("title,answer\nHow do I cook rice?,boil it\n,empty\nWhy is the sky blue?,light\n")
    texts, model, skipped = user_questions(str(path), "title")
    assert texts == ["How do I cook rice?", "Why is the sky blue?"] and model is None and skipped.count == 1
    with pytest.raises(DupqError, match="no column"):
        user_questions(str(path), "question")
    assert json.loads(json.dumps(texts)) == texts


def test_minutes_stop_before_an_epoch_that_would_pass_them(head_model_dir, texts, tmp_path):
    config = AdaptConfig(epochs=3, batch_size=64, minutes=1e-9)
    lines: list[str] = []
    model = adapt_with(Model.load(head_model_dir), texts, tmp_path / "a", word_teacher, "w", config, log=lines.append)
    record = model.metrics["adaptation"]
    assert record["epochs_run"] == 1 and len(record["history"]) == 1  # the first epoch always runs
    assert any("stopping after 1 epochs" in line for line in lines)
    json.loads((tmp_path / "a" / "metrics.json").read_text(), parse_constant=pytest.fail)  # strict JSON: no NaN


def test_a_bundled_base_is_recorded_by_name_not_by_the_folder_the_package_is_installed_in(head_model_dir, tmp_path):
    assert Model.load().bundled and not Model.load(head_model_dir).bundled
    base = Model.load(head_model_dir)
    base.folder = BUNDLED.resolve()  # as if it shipped: the record must not hold this machine's path
    texts = [f"how do i fix question number {i}" for i in range(40)]
    adapted = adapt_with(base, texts, tmp_path / "adapted", word_teacher, "words", CONFIG, log=silent, progress=False)
    base_record = adapted.metrics["adaptation"]["base"]
    assert base_record["bundled"] and base_record["folder"] is None
    assert str(BUNDLED.parent) not in json.dumps(adapted.metrics)


def test_reencode_keeps_a_question_stored_before_the_length_rule(head_model_dir, tmp_path):
    """A collection built before questions had at most 1,000 characters (the Quora file holds two longer
    ones) is re-encoded whole: the stored question is copied, not refused; a new add still meets the rule."""
    model = Model.load(head_model_dir)
    old, texts = tmp_path / "old", ["How do I cook rice?", "What is the sea?", "Why is the sky blue?"]
    Collection.build(old, texts, model, keys=["a", "b", "c"]).close()
    long = "How do I cook rice " * 60 + "well?"  # 1,145 characters, as stored by dupq before the rule
    assert len(long) > MAX_QUESTION
    with sqlite3.connect(old / DATABASE) as db:
        db.execute("UPDATE questions SET text = ? WHERE key = 'a'", (long,))
    ok("index", "reencode", old, "--model", head_model_dir, "--out", tmp_path / "new")
    with Collection.open(tmp_path / "new") as new:
        assert sorted(text for _, _, text, _ in new.stored_rows()) == sorted([long, *texts[1:]])
        np.testing.assert_allclose(new.stored_vectors()[0], model.encode([long])[0], atol=1e-6)
        with pytest.raises(DupqError, match="at most 1,000"):
            new.add([long])


def test_reencode_copies_what_changed_meanwhile(head_model_dir, tmp_path, monkeypatch):
    """Adds, text and metadata updates and removals committed to the old collection while the new one is
    built all reach it: the new collection holds what the old one holds at the end, row for row."""
    model = Model.load(head_model_dir)
    old = tmp_path / "old"
    texts = ["How do I cook rice?", "What is the sea?", "Why is the sky blue?", "How tall is a giraffe?"]
    Collection.build(old, texts, model, keys=["a", "b", "c", "d"], metadata=[{"n": i} for i in range(4)]).close()
    build = Collection.build

    def build_then_write(*args, **kwargs):
        new = build(*args, **kwargs)
        with Collection.open(old) as writer:  # another writer, meanwhile
            writer.add(["Where do penguins live?", "Is tea healthy?"], [{"n": 4}, None], ["e", None])
            writer.update("a", text="How do I cook brown rice?")
            writer.update("b", metadata={"n": 10})
            writer.decide("c", duplicate_of="d")
            writer.remove(["d"])
        return new

    monkeypatch.setattr(reencode_module.Collection, "build", build_then_write)
    logged = []
    with reencode_module.reencode(old, model, tmp_path / "new", log=logged.append) as new:
        copied = sorted((key or "", text, meta) for _, key, text, meta in new.stored_rows())
    with Collection.open(old) as after:
        expected = sorted((key or "", text, meta) for _, key, text, meta in after.stored_rows())
    assert copied == expected
    assert "and 2 added" in logged[0] and "4 updated or removed" in logged[0]
