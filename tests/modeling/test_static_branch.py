"""The static branch (dupq.modeling.static, dupq.training.distil.branch) against naive references, and in a model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file
from tokenizers import Tokenizer
from tokenizers.models import WordPiece
from tokenizers.pre_tokenizers import Whitespace
from typer.testing import CliRunner

from dupq.cli import app
from dupq.collection.collection import Collection
from dupq.core.errors import DupqError
from dupq.core.formats import check_format
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.encoders import Encoder, EncoderConfig
from dupq.modeling.folder_format import FORMAT, ModelConfig
from dupq.modeling.heads import HeadConfig, PairHead
from dupq.modeling.judge import Judge
from dupq.modeling.lstm import LSTMEncoder
from dupq.modeling.model import Model, new_model_folder
from dupq.modeling.static import FEW_SUMS, StaticBranch, StaticConfig, check_weight, summed_rows
from dupq.training.distil.branch import model2vec_branch, teacher_branch, with_branch, zipf_weights
from support.errors import refused
from support.kit import edit_json, ok, one_sentence
from support.torch_free import PAIR, imports_torch

QUESTIONS = ["How do I fix a leaking tap?", "How do I fix a dripping faucet?", "Why is the sky blue?", "How do I?"]
PIECES = ["[UNK]", "sub", "##scri", "##ption", "gym", "tap", "faucet", "fix"]


def tokenizer_json() -> str:
    tokenizer = Tokenizer(WordPiece({p: i for i, p in enumerate(PIECES)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    return tokenizer.to_str()


def fake_teacher(texts: list[str]) -> np.ndarray:
    """A deterministic unit vector per text (its own seeded draw), like a teacher's."""
    out = np.stack([np.random.default_rng(sum(map(ord, t)) + 7 * len(t)).normal(size=12) for t in texts])
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


VOCAB = Vocabulary.build(QUESTIONS, lowercase=True, oov_buckets=4)


def small_model(vocab: Vocabulary = VOCAB, seed: int = 0) -> Model:
    torch.manual_seed(seed)
    encoder = Encoder(EncoderConfig(vocab_size=len(vocab), dim=8))
    head = PairHead(HeadConfig("mlp", 8, 16))
    return Model(LSTMEncoder(vocab, encoder), Judge(head, threshold_on="probability", threshold=0.5))


def branched(pieces: bool, weight: float = 2.0) -> Model:
    return with_branch(small_model(), branch_of(VOCAB, pieces, weight))


def branch_of(vocab: Vocabulary, pieces: bool, weight: float = 2.0) -> StaticBranch:
    rng = np.random.default_rng(3)
    words = rng.normal(size=(len(vocab), 5)).astype(np.float32)
    words[len(vocab.tokens) :] = 0  # buckets stand for no word
    words[:2] = 0
    table = rng.normal(size=(len(PIECES), 5)).astype(np.float32) if pieces else None
    config = StaticConfig(dim=5, weight=weight, pieces=pieces)
    return StaticBranch(config, words, table, tokenizer_json() if pieces else "")


def test_zipf_weights_follow_the_rank():
    a, n = 1e-2, 7
    harmonic = sum(1 / r for r in range(1, n + 1))
    expected = [a / (a + 1 / (r * harmonic)) for r in range(1, n + 1)]
    np.testing.assert_allclose(zipf_weights(n, a), expected, rtol=1e-6)


@pytest.mark.parametrize("pieces", [False, True])
def test_static_vectors_are_the_sum_of_rows_and_of_unknown_words_pieces_normalised(pieces):
    vocab = VOCAB
    branch = branch_of(vocab, pieces)
    texts = ["How do I fix a leaking sink?", "gym subscription tap", "", "why IS the sky blue", "zzz"]
    got = branch.vectors(vocab, vocab.encode(texts), texts)
    words = branch.words
    for text, row in zip(texts, got):
        total = np.zeros(5)
        for word in vocab.words(text):
            if vocab.known(word):
                total += words[vocab.index[word]]
            elif pieces:  # the mean of its pieces' rows, by a greedy longest-match loop
                ids, rest, first = [], word, True
                while rest:
                    for end in range(len(rest), 0, -1):
                        piece = rest[:end] if first else "##" + rest[:end]
                        if piece in PIECES:
                            ids.append(PIECES.index(piece))
                            rest, first = rest[end:], False
                            break
                    else:
                        ids, rest = [0], ""  # no piece spells it: the whole word is [UNK]
                total += branch.pieces[ids].mean(0)
        norm = np.linalg.norm(total)
        np.testing.assert_allclose(row, total / norm if norm else total, atol=1e-5)


def test_joined_vectors_are_unit_their_dot_the_weighted_mean_and_the_model_half_exact():
    rng = np.random.default_rng(1)
    u, s = (rng.normal(size=(6, d)).astype(np.float32) for d in (4, 3))
    u, s = (x / np.linalg.norm(x, axis=1, keepdims=True) for x in (u, s))
    branch = StaticBranch(StaticConfig(dim=3, weight=2.5), np.zeros((2, 3), np.float32))
    j = branch.join(u, s)
    np.testing.assert_allclose(np.linalg.norm(j, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(j @ j.T, (u @ u.T + 2.5 * (s @ s.T)) / 3.5, atol=1e-6)
    np.testing.assert_allclose(branch.model_half(j, 4), u, atol=1e-6)


@pytest.mark.parametrize("dim, a", [(12, 1e-2), (3, 1e12)])  # a = 1e12: weights all but 1
def test_teacher_branch_rows_keep_the_best_rank_k_inner_products_of_the_vectors_weighted_by_rank(dim, a):
    """At the teacher's full width the projection keeps every inner product; below it, the best uncentred rank-k
    Gram matrix (Eckart-Young)."""
    vocab = Vocabulary.build(QUESTIONS, lowercase=True, oov_buckets=3)
    vectors = fake_teacher(vocab.tokens[2:]).astype(np.float64)
    table = teacher_branch(vocab, vectors, None, None, dim=dim, a=a, weight=1.0).words
    assert table.shape == (len(vocab), dim) and not table[:2].any() and not table[len(vocab.tokens) :].any()
    u, sigma, _ = np.linalg.svd(zipf_weights(len(vectors), a)[:, None] * vectors, full_matrices=False)
    rows = table[2 : len(vocab.tokens)]
    np.testing.assert_allclose(rows @ rows.T, (u[:, :dim] * sigma[:dim] ** 2) @ u[:, :dim].T, atol=1e-5)


def test_model2vec_branch_rows_are_the_mean_of_each_words_pieces(tmp_path):
    vocab = Vocabulary([*"[PAD] [UNK] fix subscription tap".split()], oov_buckets=2)
    embeddings = np.random.default_rng(0).normal(size=(len(PIECES), 4)).astype(np.float32)
    save_file({"embeddings": embeddings}, str(tmp_path / "model.safetensors"))
    (tmp_path / "tokenizer.json").write_text(tokenizer_json())
    table = model2vec_branch(vocab, tmp_path, 1.0).words
    np.testing.assert_allclose(table[2], embeddings[PIECES.index("fix")])
    np.testing.assert_allclose(table[3], embeddings[[1, 2, 3]].mean(0), atol=1e-6)
    assert not table[[0, 1, 5, 6]].any()


def test_a_model_with_a_branch_joins_its_vectors_judges_with_its_own_half_and_survives_save(tmp_path):
    vocab, plain, model = VOCAB, small_model(), branched(pieces=True)
    texts = [*QUESTIONS, "gym subscription", "tap"] * 12  # more than a few: the sorted torch path too
    for batch in (texts[:3], texts):  # NumPy kernels for a few, torch for many
        u = plain.encode(batch)
        joined = model.encode(batch)
        assert joined.shape == (len(batch), 8 + 5) == (len(batch), model.out_dim)
        s = model.encoder.branch.vectors(vocab, vocab.encode(batch), batch)
        np.testing.assert_allclose(joined, model.encoder.branch.join(u, s), atol=1e-6)
    a, b = QUESTIONS[:3], QUESTIONS[1:]
    np.testing.assert_allclose(model.probability(a, b), plain.probability(a, b), atol=1e-6)
    cos_u = np.einsum("nd,nd->n", plain.encode(a), plain.encode(b))
    cos_s = np.einsum("nd,nd->n", *(model.encoder.branch.vectors(vocab, vocab.encode(x), x) for x in (a, b)))
    # its cosine: the weighted mean of the model's and the branch's, by hand
    np.testing.assert_allclose(model.similarity(a, b), (cos_u + 2.0 * cos_s) / 3.0, atol=1e-6)
    assert not np.allclose(model.similarity(a, b), plain.similarity(a, b), atol=1e-3)  # the branch counts
    assert model.fingerprint() != plain.fingerprint()

    model.save(tmp_path / "m", half=True)
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["static"] == {"dim": 5, "weight": 2.0, "source": "", "pieces": True}
    loaded = Model.load(tmp_path / "m")
    np.testing.assert_allclose(loaded.encode(texts), model.encode(texts), atol=2e-3)  # float16 tables
    loaded.save(tmp_path / "again", half=True)
    assert Model.load(tmp_path / "again").fingerprint() == loaded.fingerprint()
    with_branch(loaded, None).save(tmp_path / "m")  # the same folder without its branch
    assert not (tmp_path / "m" / "static.safetensors").exists() and Model.load(tmp_path / "m").encoder.branch is None


def test_the_branch_command_writes_a_folder_every_command_takes(head_model_dir, tmp_path):
    """`dupq distil branch --source FOLDER`: predict judges as the model did; a collection searches the joined vectors."""
    source = tmp_path / "m2v"
    source.mkdir()
    save_file({"embeddings": np.random.default_rng(0).normal(size=(len(PIECES), 6)).astype(np.float32)}, str(source / "model.safetensors"))  # fmt: skip
    (source / "tokenizer.json").write_text(tokenizer_json())
    out = tmp_path / "branch"
    args = ["distil", "branch", str(head_model_dir), "--source", str(source), "--weight", "1.5"]
    ok(*args, "--out", out)
    base, joined = Model.load(head_model_dir), Model.load(out)
    assert joined.out_dim == base.out_dim + 6 and joined.encoder.branch.config.weight == 1.5
    a, b = ["How do I fix my gym subscription?", "Why is the sky blue?"], ["fix the tap", "Why is the sea blue?"]
    np.testing.assert_allclose(joined.probability(a, b), base.probability(a, b), atol=1e-3)  # float32 vs rounding

    questions = tmp_path / "q.txt"
    questions.write_text("\n".join([*a, *b, "How do I cancel a subscription?"]))
    built = tmp_path / "c"
    ok("index", "build", questions, "--model", out, "--out", built)
    with Collection.open(built) as collection:
        hits = collection.search(["How do I cancel a subscription?"], k=5)[0]
        assert hits[0].text == "How do I cancel a subscription?"
        brute = joined.encode([h.text for h in hits]) @ joined.encode(["How do I cancel a subscription?"])[0]
        np.testing.assert_allclose([h.score for h in hits], brute, atol=1e-5)
    again = ["distil", "branch", str(out), *args[3:], "--out", str(tmp_path / "again")]
    ok(*again)  # a branch replaces the one a model has
    assert Model.load(tmp_path / "again").out_dim == base.out_dim + 6


@pytest.mark.parametrize("copies", [1, 20])  # 7 questions are summed row by row, 140 by one sparse product
def test_summed_rows_match_a_loop_over_each_question_even_empty_ones(copies):
    vocab = VOCAB
    table = np.random.default_rng(2).normal(size=(len(vocab), 3)).astype(np.float32)
    texts = ["", "How do I fix a leaking tap?", "", "", "sky", "zzz qqq", ""] * copies
    assert (len(texts) > FEW_SUMS) == (copies > 1)
    encoded = vocab.encode(texts)
    assert (encoded.lengths == 0).sum() == 4 * copies  # empty questions between and at both ends
    expected = np.zeros((len(texts), 3))
    for i in range(len(texts)):
        for token in encoded[i]:
            expected[i] += table[token]
    np.testing.assert_allclose(summed_rows(table, encoded), expected, atol=1e-5)
    assert summed_rows(table, vocab.encode([])).shape == (0, 3)


def test_a_sentence_model_config_with_a_static_entry_is_refused():
    config = {"format": FORMAT, "encoder": {"type": "sentence-transformers", "dim": 4}, "static": {"dim": 3}}
    with pytest.raises(DupqError, match="static names a static branch"):
        check_format(ModelConfig, config, "m/config.json")


def test_predict_and_search_with_a_pieces_branch_import_no_torch(head_model_dir, tmp_path):
    """The bundled model's branch has no pieces; this one does (unknown words cut by the tokenizer): still no torch."""
    base = Model.load(head_model_dir)
    table = np.random.default_rng(0).normal(size=(len(base.encoder.vocab), 5)).astype(np.float32)
    pieces = np.random.default_rng(1).normal(size=(len(PIECES), 5)).astype(np.float32)
    branch = StaticBranch(StaticConfig(dim=5, pieces=True), table, pieces, tokenizer_json())
    with_branch(base, branch).save(tmp_path / "m")
    assert not imports_torch("predict", *PAIR, "--model", str(tmp_path / "m"))
    assert not imports_torch("predict", "my gym subscription?", "zzzq faucet?", "--model", str(tmp_path / "m"))
    questions = tmp_path / "q.txt"
    questions.write_text("How do I learn Python?\nHow can I cook rice?\nmy gym subscription\n")
    built = tmp_path / "c"
    ok("index", "build", questions, "--model", tmp_path / "m", "--out", built)
    assert not imports_torch("search", str(built), "end my subscription")


def test_export_no_branch_writes_the_model_as_it_was_before_its_branch(head_model_dir, tmp_path):
    """`dupq compact M --out OUT --no-branch`: the encoder's vectors alone (its fingerprint, its width); pairs judged alike."""
    base = Model.load(head_model_dir)
    table = np.random.default_rng(0).normal(size=(len(base.encoder.vocab), 6)).astype(np.float32)
    with_branch(base, StaticBranch(StaticConfig(dim=6, weight=2.0), table)).save(tmp_path / "m")
    joined = Model.load(tmp_path / "m")
    for flag, width in (("--branch", base.out_dim + 6), ("--no-branch", base.out_dim)):
        out = tmp_path / flag
        ok("compact", tmp_path / "m", "--out", out, flag)
        copy = Model.load(out)
        assert copy.out_dim == width and copy.encode(["How do I learn Python?"]).shape == (1, width)
        assert (copy.encoder.branch is None) == (flag == "--no-branch")
        assert copy.probability(["How?"], ["Why?"]) == pytest.approx(joined.probability(["How?"], ["Why?"]), abs=1e-6)
    assert Model.load(tmp_path / "--no-branch").fingerprint() == base.fingerprint() != joined.fingerprint()


def test_added_words_have_rows_of_their_own_survive_save_and_change_the_fingerprint(tmp_path):
    vocab, plain = VOCAB, branched(pieces=True)
    rows = np.random.default_rng(5).normal(size=(2, 5)).astype(np.float32)
    taught = with_branch(plain, plain.encoder.branch.with_added(["subscription", "zzz"], rows))
    texts = ["gym subscription tap", "zzz zzz", "qqq tap", "How do I fix a tap?"]
    got = taught.encoder.branch.vectors(vocab, vocab.encode(texts), texts)
    base = plain.encoder.branch.vectors(vocab, vocab.encode(texts), texts)
    np.testing.assert_allclose(got[3], base[3])  # no unknown word: as before
    expected = summed_rows(plain.encoder.branch.words, vocab.encode(texts[:3]))
    expected[0] += rows[0] + plain.encoder.branch.unknown_word("gym") * (not vocab.known("gym"))
    expected[1] += 2 * rows[1]
    expected[2] += plain.encoder.branch.unknown_word("qqq")  # not taught: its pieces, as before
    np.testing.assert_allclose(got[:3], expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-5)

    taught.save(tmp_path / "m")
    loaded = Model.load(tmp_path / "m")
    assert loaded.encoder.branch.added_words == ["subscription", "zzz"] and loaded.encoder.branch.config.added == 2
    np.testing.assert_allclose(loaded.encode(texts), taught.encode(texts), atol=1e-6)
    assert loaded.fingerprint() == taught.fingerprint() != plain.fingerprint()
    again = taught.encoder.branch.with_added(["zzz"], rows[:1])  # a word taught again takes its new row
    assert again.added_words == ["subscription", "zzz"] and np.allclose(again.added[1], rows[0])

    plain.save(tmp_path / "p")  # a branch taught no word writes no added entry: older folders read the same
    config = json.loads((tmp_path / "p" / "config.json").read_text())
    assert "added" not in config["static"] and not (tmp_path / "p" / "static-words.json").exists()


def _table(**arrays):
    added = {"added": np.ones((2, 5), np.float32)}  # the taught words' rows, kept
    return lambda folder: save_file({**added, **arrays}, str(folder / "static.safetensors"))


STATIC_MISMATCH = "static.safetensors does not match"
_TABLE = np.ones((len(VOCAB), 5), np.float32)
_NAN = _TABLE.copy()
_NAN[3, 1] = np.nan
DAMAGED_BRANCH = {  # the damage done to a folder whose branch taught "qqq" and "zzz": what loading it then says
    "config dim": (lambda f: edit_json(f / "config.json", lambda c: c["static"].update(dim=6)), STATIC_MISMATCH),
    "no table": (lambda f: (f / "static.safetensors").unlink(), "static.safetensors is missing"),
    "garbage": (
        lambda f: (f / "static.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json"),
        "static.safetensors is corrupt",
    ),
    "nan": (_table(words=_NAN), "static.safetensors.*not finite"),
    "no words": (_table(other=_TABLE), STATIC_MISMATCH),
    "integers": (_table(words=_TABLE.astype(np.int32)), "static.safetensors.*floating-point"),
    "no words file": (lambda f: (f / "static-words.json").unlink(), "static-words.json"),
    "fewer words": (lambda f: (f / "static-words.json").write_text('["qqq"]'), "static-words.json"),
    "words not a list": (lambda f: (f / "static-words.json").write_text('{"qqq": 0, "zzz": 1}'), "static-words.json"),
}


@pytest.mark.parametrize("damage", DAMAGED_BRANCH)
def test_a_damaged_branch_is_one_sentence_from_the_library_and_the_command(damage, tmp_path):

    plain = branched(pieces=False)
    taught = plain.encoder.branch.with_added(["qqq", "zzz"], np.ones((2, 5), np.float32))
    with_branch(plain, taught).save(tmp_path / "m")
    write, words = DAMAGED_BRANCH[damage]
    write(tmp_path / "m")
    one_sentence(lambda: Model.load(tmp_path / "m"), words)
    refused(CliRunner().invoke(app, ["predict", "How?", "Why?", "--model", str(tmp_path / "m")]), *words.split(".*"))


def test_a_model_folder_that_would_not_load_replaces_none(tmp_path):
    """A weight no config.json may record: refused before a branch is made, and a folder written with it anyway
    (the config built by hand) is loaded back and refused before it replaces the working one."""
    with pytest.raises(DupqError, match="--weight must be a number from 0 to"):
        check_weight(float("inf"), "--weight")
    good = branched(pieces=False)
    good.save(tmp_path / "m")
    before = {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()}
    branch = good.encoder.branch
    bad = with_branch(good, StaticBranch(StaticConfig(dim=branch.dim, weight=2e6), branch.words))
    with pytest.raises(DupqError, match=r"does not load, so .* is left as it was: .*static\.weight must be"):
        with new_model_folder(tmp_path / "m") as tmp:
            bad.save(tmp)
    assert {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["m"]
