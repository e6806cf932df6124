"""A transfer set for the distillation losses: sentences beyond Quora's questions for the teacher to label.

The student meets only the words of Quora's questions, in Quora's pairings; the teacher's view
of what other wordings mean ("dripping tap" for "leaking faucet") reaches it only through
questions the teacher encodes. Tang et al. 2019, *Distilling Task-Specific Knowledge from BERT
into Simple Neural Networks* (arXiv:1903.12136), widen the teacher's questions with a transfer
set; this builds one from two sources, for ``dupq distil teach --questions FILE`` and a preset's
``distil_questions``:

* **WordNet** (Princeton WordNet 3.0, Debian's ``wordnet-base``: ``data.noun``, ``data.verb``,
  ``data.adj``, ``data.adv``): each synset's gloss, its quoted example sentences, and a phrase
  of its synonyms (``"faucet, spigot"``);
* **reworded questions of the training pool**, Tang et al.'s augmentation: each word, with
  probability ``p_mask`` left out (the student has no mask token: ``"[MASK]"`` would become the
  word ``mask``), else with probability ``p_synonym`` replaced by a WordNet synonym of it that
  the pool's vocabulary holds (neither among its ``keep_common`` most frequent words); then,
  with probability ``p_ngram``, only a random n-gram of 1 to ``max_ngram`` words is kept.

A WordNet sentence is kept only where at least ``min_known`` of its words are in the pool's
vocabulary (case folded, seen twice: the ``labelled`` recipe's): the student's unknown words
share hashed rows and learn little from a gloss of rare words.

>>> synsets = read_wordnet("/usr/share/wordnet")                         # doctest: +SKIP
>>> texts = transfer_set(synsets, pool_questions, TransferConfig())       # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dupq.core.errors import DupqError
from dupq.data.tokenizer import Vocabulary

PARTS = ("noun", "verb", "adj", "adv")  # WordNet's data.<part> files
_MARKER = re.compile(r"\([a-z]+\)$")  # an adjective's position marker: afloat(p), elect(ip)


@dataclass
class Synset:
    """One WordNet synset: its lemmas, its definition and its example sentences."""

    words: list[str]  # lemmas, spaces for underscores: ["faucet", "spigot"]
    gloss: str  # "a regulator for controlling the flow of a liquid from a reservoir"
    examples: list[str]  # the gloss' quoted sentences, quotes removed


@dataclass
class TransferConfig:
    """How many sentences of each kind, and how the pool's questions are reworded (Tang et al.'s values)."""

    wordnet: int = 60_000  # WordNet sentences kept (drawn at random among those known enough); 0: none
    augmented: int = 60_000  # reworded pool questions; 0: none
    p_mask: float = 0.1  # chance a word is left out
    p_synonym: float = 0.3  # chance a word that has a WordNet synonym is replaced by one (Tang: 0.1, any same-POS word)
    p_ngram: float = 0.25  # chance only a random n-gram of the reworded question is kept
    max_ngram: int = 5  # n is drawn from 1..max_ngram
    keep_common: int = 300  # the pool's most frequent words are never replaced: WordNet reads "in" as inch, "a" as amp
    min_known: float = 0.8  # share of a WordNet sentence's words the pool's vocabulary must hold
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("p_mask", "p_synonym", "p_ngram", "min_known"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise DupqError(f"{name} must be in [0, 1], not {getattr(self, name)}.")
        if min(self.wordnet, self.augmented, self.keep_common) < 0 or self.max_ngram < 1:
            raise DupqError("wordnet, augmented and keep_common must be 0 or more, max_ngram 1 or more.")


def parse_synset(line: str) -> Synset | None:
    """A ``data.<part>`` line as a :class:`Synset`; ``None`` for the licence lines (they start with spaces).

    A line is ``offset lex_filenum ss_type w_cnt word lex_id [word lex_id ...] p_cnt [pointers] | gloss``
    with ``w_cnt`` in hexadecimal; the gloss is a definition, then ``; "example"`` for each example.
    """
    if line.startswith(" ") or " | " not in line:
        return None
    data, gloss = line.split(" | ", 1)
    fields = data.split()
    count = int(fields[3], 16)
    words = [_MARKER.sub("", w).replace("_", " ") for w in fields[4 : 4 + 2 * count : 2]]
    definition, examples = [], []
    for part in gloss.strip().split(";"):
        part = part.strip()
        if part.startswith('"') and part.count('"') >= 2:
            examples.append(part[1 : part.rindex('"')].strip())
        elif part:
            definition.append(part)
    return Synset(words, "; ".join(definition), [e for e in examples if e])


def read_wordnet(folder: str | os.PathLike) -> list[Synset]:
    """Every synset of WordNet's four ``data.<part>`` files in ``folder``, in file order."""
    folder = Path(folder)
    missing = [p for p in PARTS if not (folder / f"data.{p}").is_file()]
    if missing:
        raise DupqError(
            f"{folder} holds no WordNet data.{missing[0]} file (Debian: apt-get install wordnet-base, "
            "then /usr/share/wordnet)."
        )
    synsets = []
    for part in PARTS:
        with open(folder / f"data.{part}", encoding="utf-8", errors="replace") as f:
            synsets += [s for line in f if (s := parse_synset(line)) is not None]
    return synsets


def synonyms(synsets: Sequence[Synset]) -> dict[str, list[str]]:
    """Each one-word lemma (case folded) -> the other one-word lemmas of the synsets it is in, sorted."""
    found: dict[str, set[str]] = {}
    for s in synsets:
        single = {w.lower() for w in s.words if " " not in w and "-" not in w}
        for w in single:
            found.setdefault(w, set()).update(single - {w})
    return {w: sorted(others) for w, others in found.items() if others}


def wordnet_sentences(synsets: Sequence[Synset]) -> list[str]:
    """Glosses, example sentences and synonym phrases (synsets of two lemmas or more), each once, in order."""
    texts: dict[str, None] = {}
    for s in synsets:
        for text in (s.gloss, *s.examples, ", ".join(s.words) if len(s.words) > 1 else ""):
            if text.strip():
                texts.setdefault(text, None)
    return list(texts)


def augment(question: str, synonyms: dict[str, list[str]], rng: np.random.Generator, config: TransferConfig) -> str:
    """One reworded ``question`` (Tang et al.'s masking, replacement and n-gram sampling); may be empty."""
    words = []
    for word in question.split():
        draw = rng.random()
        if draw < config.p_mask:
            continue
        choices = synonyms.get(word.lower())
        if choices and draw < config.p_mask + config.p_synonym:
            word = choices[rng.integers(len(choices))]
        words.append(word)
    if words and rng.random() < config.p_ngram:
        n = min(int(rng.integers(1, config.max_ngram + 1)), len(words))
        start = int(rng.integers(len(words) - n + 1))
        words = words[start : start + n]
    return " ".join(words)


def known_share(text: str, vocab: Vocabulary) -> float:
    """The share of ``text``'s words (as ``vocab`` standardises them) that ``vocab`` holds; 0 for no words."""
    words = vocab.words(text)
    return sum(vocab.known(w) for w in words) / len(words) if words else 0.0


def transfer_set(synsets: Sequence[Synset], pool: Sequence[str], config: TransferConfig) -> list[str]:
    """The transfer set: ``config.wordnet`` WordNet sentences, then ``config.augmented`` reworded ``pool`` questions.

    Distinct texts, none of them a pool question; fewer where the sources run short. ``pool``
    is the training pool's questions only, never a held-out one.
    """
    rng = np.random.default_rng(config.seed)
    vocab = Vocabulary.build(pool, lowercase=True, min_count=2)
    known = [t for t in wordnet_sentences(synsets) if known_share(t, vocab) >= config.min_known]
    picked = [known[i] for i in np.sort(rng.permutation(len(known))[: config.wordnet])]
    seen = set(pool) | set(picked)
    common = set(vocab.tokens[: 2 + config.keep_common])  # [PAD], [UNK], then the words by falling count
    table = {
        w: known
        for w, others in synonyms(synsets).items()
        if w not in common and (known := [o for o in others if vocab.known(o) and o not in common])
    }
    reworded: list[str] = []
    tries = 0
    while len(reworded) < config.augmented and pool and tries < 4 * config.augmented:
        tries += 1
        text = augment(pool[rng.integers(len(pool))], table, rng, config)
        if vocab.words(text) and text not in seen:
            seen.add(text)
            reworded.append(text)
    return picked + reworded
