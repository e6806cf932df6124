"""The transfer set (training.distil.transfer) on tiny WordNet-format files written here, and the word_lr option."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from dupq.cli import app
from dupq.core.errors import DupqError
from dupq.data.tokenizer import Vocabulary
from dupq.training.config import TrainConfig
from dupq.training.distil.transfer import (
    PARTS,
    Synset,
    TransferConfig,
    augment,
    known_share,
    read_wordnet,
    synonyms,
    transfer_set,
    wordnet_sentences,
)
from synthetic import write_pairs

runner = CliRunner()

# (part, lemmas as WordNet writes them, gloss, examples): markers, underscores, eleven lemmas (w_cnt 0b)
SYNSETS = [
    ("noun", ["faucet", "spigot"], "a regulator for controlling the flow of a liquid", ["turn off the faucet"]),
    ("noun", ["tap", "spigot"], "a faucet for drawing water from a pipe or cask", []),
    ("noun", ["laptop", "laptop_computer"], "a portable computer small enough to use in your lap", []),
    (
        "verb",
        ["leak", "escape", "leak_out"],
        "enter or leave through a hole; be leaked",
        ["the gas leaked", "it escaped"],
    ),
    ("adj", ["afloat(p)"], "borne on the water; floating", ['a ship afloat offshore" - a saying']),
    ("adv", [f"w{i}" for i in range(11)], "eleven words in one synset", []),
]


def wordnet_line(offset: int, part: str, lemmas: list[str], gloss: str, examples: list[str]) -> str:
    """One ``data.<part>`` line as WordNet 3.0 writes it: hexadecimal w_cnt, a lex_id per lemma, pointers, gloss."""
    words = " ".join(f"{w} {i % 16:x}" for i, w in enumerate(lemmas))
    pointers = "002 @ 00001740 n 0000 ~ 00002137 n 0000"
    quoted = "".join(f'; "{e}' if e.endswith("saying") else f'; "{e}"' for e in examples)
    return f"{offset:08d} 03 {part[0]} {len(lemmas):02x} {words} {pointers} | {gloss}{quoted}  \n"


@pytest.fixture
def wordnet_dir(tmp_path):
    folder = tmp_path / "wordnet"
    folder.mkdir()
    licence = "  1 This software and database is being provided to you, the LICENSEE, by  \n  2 Princeton University\n"
    for part in PARTS:
        lines = [wordnet_line(100 + k, p, *rest) for k, (p, *rest) in enumerate(SYNSETS) if p == part]
        (folder / f"data.{part}").write_text(licence + "".join(lines), encoding="utf-8")
    return folder


def expected_synsets() -> list[Synset]:
    """What the lines above hold, written by hand: the reference the parser must match."""
    return [
        Synset(["faucet", "spigot"], "a regulator for controlling the flow of a liquid", ["turn off the faucet"]),
        Synset(["tap", "spigot"], "a faucet for drawing water from a pipe or cask", []),
        Synset(["laptop", "laptop computer"], "a portable computer small enough to use in your lap", []),
        Synset(
            ["leak", "escape", "leak out"], "enter or leave through a hole; be leaked", ["the gas leaked", "it escaped"]
        ),
        Synset(["afloat"], "borne on the water; floating", ["a ship afloat offshore"]),
        Synset([f"w{i}" for i in range(11)], "eleven words in one synset", []),
    ]


def test_read_wordnet_matches_the_synsets_written(wordnet_dir):
    in_part_order = sorted(zip(SYNSETS, expected_synsets()), key=lambda pair: PARTS.index(pair[0][0]))
    assert read_wordnet(wordnet_dir) == [synset for _, synset in in_part_order]


def test_a_folder_without_wordnet_is_one_sentence(tmp_path):
    with pytest.raises(DupqError, match="no WordNet data.noun"):
        read_wordnet(tmp_path)


def test_synonyms_match_a_loop_over_every_synset():
    synsets = expected_synsets()
    table = synonyms(synsets)
    words = {w.lower() for s in synsets for w in s.words if " " not in w}
    for word in words:
        reference = set()
        for s in synsets:
            if word in s.words:
                reference |= {w for w in s.words if " " not in w and w != word}
        assert table.get(word, []) == sorted(reference), word
    assert table["spigot"] == ["faucet", "tap"]


def test_wordnet_sentences_are_glosses_examples_and_synonym_phrases_once_each():
    texts = wordnet_sentences(expected_synsets())
    assert len(texts) == len(set(texts))
    assert "faucet, spigot" in texts and "leak, escape, leak out" in texts and "afloat" not in texts
    for s in expected_synsets():
        assert s.gloss in texts and all(e in texts for e in s.examples)


TABLE = {"leaking": ["dripping"], "faucet": ["tap", "spigot"], "fix": ["repair", "mend"]}
QUESTION = "How do I fix a leaking faucet in the kitchen ?"


def test_augment_with_synonyms_only_swaps_each_word_for_one_of_its_synonyms():
    config = TransferConfig(p_mask=0.0, p_synonym=1.0, p_ngram=0.0)
    rng = np.random.default_rng(0)
    for _ in range(50):
        out = augment(QUESTION, TABLE, rng, config).split()
        assert len(out) == len(QUESTION.split())
        for before, after in zip(QUESTION.split(), out):
            assert after in TABLE[before] if before in TABLE else after == before


def test_augment_masks_words_at_its_rate_and_ngrams_are_runs_of_the_question():
    rng = np.random.default_rng(1)
    words = QUESTION.split()
    kept = [
        len(augment(QUESTION, TABLE, rng, TransferConfig(p_mask=0.3, p_synonym=0.0, p_ngram=0.0)).split())
        for _ in range(2000)
    ]
    assert abs(1 - np.mean(kept) / len(words) - 0.3) < 0.02
    assert augment(QUESTION, TABLE, rng, TransferConfig(p_mask=1.0)) == ""
    for _ in range(200):
        out = augment(QUESTION, TABLE, rng, TransferConfig(p_mask=0.0, p_synonym=0.0, p_ngram=1.0, max_ngram=3)).split()
        runs = [words[i : i + len(out)] for i in range(len(words) - len(out) + 1)]
        assert 1 <= len(out) <= 3 and out in runs


def test_transfer_set_keeps_known_wordnet_sentences_and_new_rewordings():
    pool = [
        "How do I fix a leaking faucet ?",
        "How do I fix a leaking tap ?",
        "Is my laptop computer broken ?",
        "Why is my laptop computer so slow ?",
        "Where does the gas escape ?",
        "Where does the gas leak out ?",
        "Can water leak from a faucet or a pipe ?",
        "Can water leak from a tap or a pipe ?",
    ]
    synsets = expected_synsets()
    config = TransferConfig(wordnet=3, augmented=20, min_known=0.5, seed=3)
    texts = transfer_set(synsets, pool, config)
    vocab = Vocabulary.build(pool, lowercase=True, min_count=2)
    known = [t for t in wordnet_sentences(synsets) if known_share(t, vocab) >= 0.5]
    assert len(known) > 3 and texts[:3] == [t for t in known if t in texts[:3]]
    reworded = texts[3:]
    assert 0 < len(reworded) <= 20 and len(set(texts)) == len(texts) and not set(texts) & set(pool)
    allowed = {w.lower() for q in pool for w in q.split()} | {w for ws in synonyms(synsets).values() for w in ws}
    assert all(w.lower() in allowed for t in reworded for w in t.split())


def test_known_share_counts_words_as_the_vocabulary_standardises_them():
    vocab = Vocabulary.build(["Fix the tap", "fix the TAP!"], lowercase=True, min_count=2)
    assert known_share("FIX my tap.", vocab) == pytest.approx(2 / 3)
    assert known_share("...", vocab) == 0.0


def test_dupq_distil_transfer_writes_one_sentence_a_line(tmp_path, wordnet_dir):
    data = write_pairs(tmp_path / "pairs.tsv", 3000)
    out = tmp_path / "transfer.txt"
    args = ["distil", "transfer", "--data", str(data), "--out", str(out), "--wordnet", str(wordnet_dir)]
    result = runner.invoke(app, [*args, "--train-pool", "2000", "--labelled-val", "500", "--augmented", "40"])
    assert result.exit_code == 0, result.output
    lines = out.read_text(encoding="utf-8").splitlines()
    assert f"{len(lines):,} transfer sentences" in result.output and 40 <= len(lines) <= 40 + len(SYNSETS) * 3
    missing = runner.invoke(app, [*args[:-1], str(tmp_path)])
    assert missing.exit_code == 2 and "no WordNet" in missing.output


def test_word_lr_zero_leaves_the_word_embeddings_where_they_started(small_splits, tmp_path):
    from dupq.modeling.model import Model
    from dupq.training.train import train

    def trained(word_lr: float, lr: float) -> dict:
        out = tmp_path / f"m-{word_lr}-{lr}"
        config = TrainConfig(epochs=1, seed=1, lr=lr, word_lr=word_lr)
        train(small_splits, out, config, dim=8, log=lambda _: None, progress=False)
        return {k: v.clone() for k, v in Model.load(out).encoder.network.state_dict().items()}

    frozen_a, frozen_b, moving = trained(0.0, 0.01), trained(0.0, 0.02), trained(1.0, 0.01)
    assert torch_equal(frozen_a["embedding.weight"], frozen_b["embedding.weight"])
    assert not torch_equal(frozen_a["embedding.weight"], moving["embedding.weight"])
    assert not all(torch_equal(frozen_a[k], frozen_b[k]) for k in frozen_a)  # the LSTM still learns


def torch_equal(a, b) -> bool:
    return bool((a == b).all())


def test_the_pools_most_frequent_words_are_never_replaced():
    questions = ("put it in the box", "in the car", "in a hat", "open the case", "one inch")
    pool = [q for q in questions for _ in range(2)]  # "the" and "in" are the most frequent words
    synsets = [Synset(["in", "inch"], "a unit of length", []), Synset(["box", "case"], "a container", [])]
    config = TransferConfig(wordnet=0, augmented=10, p_mask=0.0, p_synonym=1.0, p_ngram=0.0, keep_common=2)
    assert set(transfer_set(synsets, pool, config)) == {"put it in the case", "open the box"}
    every = TransferConfig(**{**config.__dict__, "keep_common": 0})
    assert set(transfer_set(synsets, pool, every)) == {
        "put it inch the case",
        "inch the car",
        "inch a hat",
        "open the box",
        "one in",
    }
