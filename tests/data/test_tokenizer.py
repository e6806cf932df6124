"""The vocabulary against a naive re-implementation of Keras' TextVectorization, and the seed's ids on the real file."""

from __future__ import annotations

import re
import shutil
import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dupq.cli import app
from dupq.data.pairs import split_pairs
from dupq.data.tokenizer import PAD, UNK, Vocabulary, word_parts
from support.errors import refused
from support.kit import edit_json, one_sentence

# Keras' DEFAULT_STRIP_REGEX, written as Keras writes it.
KERAS_STRIP = r'[!"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~\']'


def naive_words(text: str, lowercase: bool = False) -> list[str]:
    text = re.sub(KERAS_STRIP, "", text)
    return (text.lower() if lowercase else text).split()


def naive_parts(word: str) -> list[str]:
    """Punctuation (Unicode category P) dropped, a space either side of each CJK ideograph, then split."""
    kept = "".join(c for c in word if not unicodedata.category(c).startswith("P"))
    spaced = "".join(f" {c} " if re.match(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]", c) else c
                     for c in kept)  # fmt: skip
    return spaced.split(" ")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", blacklist_categories=("Zs", "Cc")), max_size=40))
def test_word_parts_match_a_naive_cut(word):
    assert word_parts(word) == [part for part in naive_parts(word) if part]


def test_word_parts_of_punctuation_and_ideographs_beyond_ascii():
    assert word_parts("what？") == ["what"] and word_parts("كيف؟") == ["كيف"] and word_parts("don’t") == ["dont"]
    assert word_parts("横向rpg游戏") == ["横", "向", "rpg", "游", "戏"] and word_parts("เรียนภาษาไทย") == ["เรียนภาษาไทย"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=80), st.booleans())
def test_words_match_keras_standardisation(text, lowercase):
    vocab = Vocabulary([PAD, UNK], lowercase=lowercase, max_tokens=10_000)
    assert vocab.words(text) == naive_words(text, lowercase)


def naive_counts(questions: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for q in questions:
        for w in naive_words(q):
            counts[w] = counts.get(w, 0) + 1
    return counts


def test_vocabulary_order_matches_a_naive_count(small_splits):
    """Keras' order: most frequent first, ties by the later word first (two stable sorts, written plainly)."""
    questions = small_splits.train.q1 + small_splits.train.q2
    counts = naive_counts(questions)
    words = sorted(counts, reverse=True)
    words.sort(key=counts.get, reverse=True)  # stable: equal counts keep the later word first
    assert Vocabulary.build(questions).tokens == [PAD, UNK, *words]
    assert len(set(counts.values())) < len(counts)  # there are ties to break
    assert Vocabulary.build(questions, min_count=50).tokens == [PAD, UNK, *(w for w in words if counts[w] >= 50)]


@pytest.mark.real_data
def test_vocabulary_of_the_seed_recipe(all_pairs):
    """The seed recipe's vocabulary on the real file: its size and the ids of one test question."""
    pool = split_pairs(all_pairs).pool
    dups = pool.take(pool.labels == 1)
    vocab = Vocabulary.build(dups.q1 + dups.q2)
    # Another copy of the data (13 more duplicate pairs) gives 36,224 words; this file gives 36,236.
    assert len(vocab) == 36_236
    # That copy encodes the first test question as [4 8 6 160 17 2079 17 11775]: the same ids but that
    # of the rarest word, "cse", whose rank among the rare words shifts with the 13 extra pairs.
    ids = vocab.encode(["How do I prepare for interviews for cse?"])[0].tolist()
    assert ids == [4, 8, 6, 160, 17, 2079, 17, 11_774]
    # Ordering: by count, descending.
    counts = naive_counts(dups.q1 + dups.q2)
    ranked = [counts[w] for w in vocab.tokens[2:]]
    assert ranked == sorted(ranked, reverse=True)


def test_encode_and_pad_match_a_loop(small_splits):
    questions = small_splits.test.q1[:300] + ["", "???", "a " * 400]
    vocab = Vocabulary.build(small_splits.train.q1, max_tokens=64)
    encoded = vocab.encode(questions)
    for i, q in enumerate(questions):
        expected = [vocab.index.get(w, 1) for w in naive_words(q)][:64]
        assert encoded[i].tolist() == expected
    index = np.array([5, len(questions) - 3, 0, len(questions) - 1])
    ids, lengths = encoded.padded(index)
    for row, i in enumerate(index):
        n = len(encoded[i])
        assert lengths[row] == max(n, 1)
        assert ids[row, :n].tolist() == encoded[i].tolist() and not ids[row, n:].any()


def test_save_load_roundtrip(tmp_path, small_splits):
    vocab = Vocabulary.build(small_splits.train.q2[:500], lowercase=True, max_tokens=32)
    vocab.save(tmp_path / "vocab.json")
    again = Vocabulary.load(tmp_path / "vocab.json")
    assert again.tokens == vocab.tokens and again.lowercase and again.max_tokens == 32
    q = small_splits.test.q1[:50]
    assert again.encode(q).flat.tolist() == vocab.encode(q).flat.tolist()


def test_oov_buckets_separate_unknown_words_stably(tmp_path, small_splits):
    vocab = Vocabulary.build(small_splits.train.q1[:2000], oov_buckets=4096)
    base = len(vocab.tokens)
    assert len(vocab) == base + 4096
    a, b = vocab.encode(["How do I pay with Worldpay?", "How do I pay with Mijireh?"])
    assert a[:-1].tolist() == b[:-1].tolist() and a[-1] != b[-1]
    assert base <= a[-1] < base + 4096 and base <= b[-1] < base + 4096
    vocab.save(tmp_path / "v.json")
    again = Vocabulary.load(tmp_path / "v.json")
    assert again.oov_buckets == 4096 and again.encode(["Worldpay"]).flat.tolist() == [a[-1]]
    # Without buckets every unknown word is id 1, as in the seed.
    plain = Vocabulary(vocab.tokens)
    assert plain.encode(["Worldpay Mijireh"]).flat.tolist() == [1, 1]


VOCAB_FAULTS = {  # each used to load (or fail with a traceback) and change every question's ids
    "a number among the tokens": (lambda v: v["tokens"].insert(3, 7), "tokens[3] must be a non-empty string, not 7"),
    "an empty token": (lambda v: v["tokens"].append(""), "must be a non-empty string, not ''"),
    "null as a token": (lambda v: v["tokens"].append(None), "must be a non-empty string, not None"),
    "a word twice": (lambda v: v["tokens"].append(v["tokens"][2]), "tokens lists the word"),
    "no [PAD] first": (lambda v: v["tokens"].reverse(), "tokens must start with '[PAD]' and '[UNK]'"),
    "tokens an object": (lambda v: v.update(tokens={"a": 1}), "tokens must be a list, not {'a': 1}"),
    "max_tokens -1": (lambda v: v.update(max_tokens=-1), "max_tokens must be an integer from 1 to 4096, not -1"),
    "max_tokens 0": (lambda v: v.update(max_tokens=0), "max_tokens must be an integer from 1 to 4096, not 0"),
    "max_tokens a string": (lambda v: v.update(max_tokens="256"), "max_tokens must be an integer"),
    "max_tokens 2.5": (lambda v: v.update(max_tokens=2.5), "max_tokens must be an integer"),
    "oov_buckets -3": (lambda v: v.update(oov_buckets=-3), "oov_buckets must be an integer from 0 to 4194304, not -3"),
    "oov_buckets 10**11": (lambda v: v.update(oov_buckets=10**11), "oov_buckets must be an integer from 0 to 4194304"),
    "ids beyond the maximum": (lambda v: v.update(oov_buckets=2**22), "tokens and oov_buckets must make at most"),
    "lowercase a string": (lambda v: v.update(lowercase="no"), "lowercase must be true or false, not 'no'"),
    "lowercase missing": (lambda v: v.pop("lowercase"), "lowercase is missing."),
}


@pytest.mark.parametrize("fault", VOCAB_FAULTS)
def test_a_bad_vocab_file_is_one_sentence(tmp_path, fault):
    path = tmp_path / "vocab.json"
    Vocabulary.build(["How do I cook rice?", "Why is the sky blue?"], oov_buckets=8).save(path)
    change, message = VOCAB_FAULTS[fault]
    edit_json(path, change)
    said = one_sentence(lambda: Vocabulary.load(path))
    assert said.startswith(f"{path} is corrupt: ") and message in said, said


def test_a_bad_vocab_file_stops_the_model_in_one_line(tiny_model_dir, tmp_path):
    folder = shutil.copytree(tiny_model_dir, tmp_path / "m")
    edit_json(folder / "vocab.json", lambda vocab: vocab.update(max_tokens=-1))
    result = CliRunner().invoke(app, ["predict", "How do I cook rice?", "How to cook rice?", "--model", str(folder)])
    refused(result, "vocab.json is corrupt: max_tokens must be an integer from 1 to 4096, not -1.")
