"""Turning questions into token ids, as the seed's Keras ``TextVectorization`` does.

The seed adapts ``TextVectorization(split="whitespace", standardize="strip_punctuation")`` on the training duplicates'
questions. The same here: delete every ASCII punctuation character (``"I'm"`` becomes ``"Im"``; case kept unless
``lowercase``), split on whitespace, keep at most ``max_tokens`` words, and look up: 0 padding, 1 out-of-vocabulary,
then the words by falling frequency (ties: the later word in code-point order first, as Keras). ``oov_buckets = K > 0``
hashes an unknown word (CRC-32) into one of K ids instead, so two questions differing only in unseen words no longer
encode alike. (Hugging Face ``tokenizers`` gives the same ids but took 5.2 s for 500,000 questions against 2.7 s here.)

Encoded questions are ragged: one flat id array plus offsets, padded per batch on demand. The vocabulary is saved as
``vocab.json`` (:class:`VocabFile`).
"""

from __future__ import annotations

import os
import string
import unicodedata
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, StrictBool, field_validator, model_validator

from dupq.core.errors import DupqError
from dupq.core.files import write_json
from dupq.core.formats import MAX_TOKENS, MAX_VOCAB, checked, corrupt, integer, read_format, sentence

PAD, UNK = "[PAD]", "[UNK]"
STRIP = str.maketrans("", "", string.punctuation)  # Keras' strip_punctuation set, exactly


# CJK ideographs: the teacher's WordPiece tokenizer (BERT's) reads each as a word of its own.
IDEOGRAPHS = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FA1F))
# Scripts written without spaces that neither split on whitespace nor the teacher's tokenizer cut into words.
UNSPACED = {
    "Thai": (0x0E00, 0x0E7F),
    "Lao": (0x0E80, 0x0EFF),
    "Myanmar": (0x1000, 0x109F),
    "Khmer": (0x1780, 0x17FF),
    "Japanese kana": (0x3040, 0x30FF),
}


def _within(char: str, ranges) -> bool:
    return any(lo <= ord(char) <= hi for lo, hi in ranges)


def word_parts(word: str) -> list[str]:
    """The words a static branch reads in ``word`` (one of :meth:`Vocabulary.words`): its punctuation beyond
    ASCII deleted, as the seed deletes ASCII's (``what？`` -> ``what``, ``كيف؟`` -> ``كيف``), and each CJK
    ideograph a word of its own, as the teacher's tokenizer cuts them (``学python`` -> ``学``, ``python``).

    The LSTM's ids keep the seed's rule (its vocabulary was counted with it); these parts are what
    ``dupq adapt`` teaches the branch and what the branch looks up for a word the vocabulary lacks.

    >>> word_parts("学python？")
    ['学', 'python']
    """
    parts, run = [], []
    for char in word:
        if unicodedata.category(char).startswith("P"):
            continue
        if _within(char, IDEOGRAPHS):
            parts += ["".join(run), char] if run else [char]
            run = []
        else:
            run.append(char)
    return [part for part in (*parts, "".join(run)) if part]


def unspaced_scripts(words: Iterable[str]) -> dict[str, int]:
    """How many of ``words`` hold a run of each script written without spaces (Thai, Khmer, ...): words no rule
    here cuts apart, so each whole run is one word."""
    found: Counter[str] = Counter()
    for word in words:
        for script, span in UNSPACED.items():
            if sum(_within(char, (span,)) for char in word) > 1:
                found[script] += 1
    return dict(found)


@dataclass
class Encoded:
    """Token ids of N questions: question i is ``flat[offsets[i]:offsets[i + 1]]``."""

    flat: np.ndarray  # (total_tokens,) int64
    offsets: np.ndarray  # (N + 1,) int64

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)  # (N,)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.flat[self.offsets[i] : self.offsets[i + 1]]

    def padded(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Questions ``index`` as a right-padded ``(B, L)`` id matrix and their ``(B,)`` lengths.

        An empty question gets length 1 (a single padding token), so that every question has
        an encoding and a mean over its tokens is defined.
        """
        starts = self.offsets[index]  # (B,)
        lengths = self.offsets[np.asarray(index) + 1] - starts  # (B,)
        width = max(int(lengths.max(initial=0)), 1)
        cols = np.arange(width)  # (L,)
        real = cols[None, :] < lengths[:, None]  # (B, L)
        take = np.minimum(starts[:, None] + cols[None, :], max(len(self.flat) - 1, 0))
        ids = np.where(real, self.flat[take] if len(self.flat) else 0, 0)  # (B, L)
        return ids, np.maximum(lengths, 1)


class Vocabulary:
    """Word-level tokenizer of the seed recipe: ``encode(questions) -> Encoded``.

    >>> vocab = Vocabulary.build(["How do I cook?", "How do I bake?"])
    >>> vocab.encode(["How do I fly?"])[0].tolist()
    [4, 2, 3, 1]
    """

    UNIT = "words"  # what its ids stand for, in messages
    unknown_id = 1  # an unknown word's id when there are no buckets

    def __init__(self, tokens: Sequence[str], lowercase: bool = False, max_tokens: int = 256, oov_buckets: int = 0):
        if len(tokens) < 2 or tokens[0] != PAD or tokens[1] != UNK:
            raise DupqError(f"a vocabulary must start with {PAD!r} and {UNK!r}.")
        if len(set(tokens)) != len(tokens):
            raise DupqError("a vocabulary must not list a word twice.")
        self.tokens = list(tokens)
        self.lowercase = lowercase  # fold case before the lookup (the seed keeps case)
        self.max_tokens = max_tokens  # longer questions are cut, so one huge text cannot exhaust memory
        self.oov_buckets = oov_buckets  # extra ids that unknown words hash into (0: all share id 1)
        self.index = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        """Rows the embedding table needs: the words and the unknown-word buckets."""
        return len(self.tokens) + self.oov_buckets

    def _unknown(self, word: str) -> int:
        if not self.oov_buckets:
            return self.unknown_id
        return len(self.tokens) + zlib.crc32(word.encode("utf-8", "surrogatepass")) % self.oov_buckets

    def words(self, question: str) -> list[str]:
        """The standardised words of one question, before the vocabulary lookup."""
        text = question.translate(STRIP)
        if self.lowercase:
            text = text.lower()
        return text.split()[: self.max_tokens]

    def known(self, word: str) -> bool:
        """Whether ``word`` (one of :meth:`words`) has an id of its own."""
        return word in self.index

    def summary(self) -> str:
        """What the ids are, for a log line: ``36,236 words + 4,096 unknown-word buckets``."""
        buckets = f" + {self.oov_buckets:,} unknown-word buckets" if self.oov_buckets else ""
        return f"{len(self.tokens):,} {self.UNIT}{buckets}"

    @property
    def unknown_words_are(self) -> str:
        """What becomes of a word the vocabulary lacks, for a message."""
        return "hashed into its unknown-word buckets" if self.oov_buckets else "all read as one unknown word"

    def teachable(self) -> tuple[np.ndarray, list[str]]:
        """``(ids, texts)``: the ids whose embedding a teacher can start, and the text it reads for each.

        Every word, as it is; not padding, the unknown id or the buckets, which stand for no text.
        """
        return np.arange(2, len(self.tokens)), self.tokens[2:]

    @classmethod
    def build(
        cls,
        questions: Iterable[str],
        lowercase: bool = False,
        max_tokens: int = 256,
        min_count: int = 1,
        oov_buckets: int = 0,
    ) -> Vocabulary:
        """Count the words of ``questions`` and keep those seen ``min_count`` times, most frequent first."""
        counter = cls([PAD, UNK], lowercase=lowercase, max_tokens=max_tokens)
        counts: Counter[str] = Counter()
        for q in questions:
            counts.update(counter.words(q))
        # Keras orders by count, then by word, both descending (a reversed lexsort).
        ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
        words = [w for w, n in ranked if n >= min_count and w not in (PAD, UNK)]
        return cls([PAD, UNK, *words], lowercase=lowercase, max_tokens=max_tokens, oov_buckets=oov_buckets)

    def encode(self, questions: Sequence[str]) -> Encoded:
        """Token ids of every question; unknown words map to 1 (or a bucket), an empty question to no ids."""
        get, words, unknown = self.index.get, self.words, self._unknown
        flat: list[int] = []
        lengths = np.zeros(len(questions) + 1, dtype=np.int64)
        for i, q in enumerate(questions):
            ids = [get(w) or unknown(w) for w in words(q)]
            flat.extend(ids)
            lengths[i + 1] = len(ids)
        return Encoded(np.asarray(flat, dtype=np.int64), np.cumsum(lengths))

    def save(self, path: str | os.PathLike) -> None:
        sizes = {"lowercase": self.lowercase, "max_tokens": self.max_tokens, "oov_buckets": self.oov_buckets}
        write_json(path, {**sizes, "tokens": self.tokens})

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocabulary:
        """The vocabulary saved in ``path`` (``vocab.json``), or one sentence naming what is wrong with it."""
        return cls.stored(read_format(VocabFile, path, "the vocabulary"))

    @classmethod
    def stored(cls, file: VocabFile) -> Vocabulary:
        """The vocabulary of a ``vocab.json`` that :class:`VocabFile` has checked."""
        return cls(file.tokens, file.lowercase, file.max_tokens, file.oov_buckets)


def _word(token: object) -> bool:
    return isinstance(token, str) and bool(token)


class VocabFile(BaseModel):
    """``vocab.json``: the words in id order and how questions are cut into them.

    Every field changes every question's ids, so none is taken on trust: the words are distinct
    non-empty strings after ``[PAD]`` and ``[UNK]``, and the sizes are positive and bounded.
    """

    lowercase: StrictBool  # fold case before the lookup
    max_tokens: integer(1, MAX_TOKENS)  # words kept per question
    oov_buckets: integer(0, MAX_VOCAB) = 0  # ids that unknown words hash into, after the words
    tokens: list[checked(str, _word, "a non-empty string")]  # the words in id order, [PAD] and [UNK] first

    @model_validator(mode="before")
    @classmethod
    def _words_only(cls, stored: Any) -> Any:
        """Refuse the vocabulary of a tokenizer this dupq no longer reads (the teacher's WordPiece tokens)."""
        if isinstance(stored, dict) and stored.get("tokenizer", "words") != "words":
            raise sentence(
                f"its tokenizer {stored['tokenizer']!r} is no longer supported (this dupq reads word vocabularies "
                "only); train the model again with words."
            )
        return stored

    @field_validator("tokens")
    @classmethod
    def _distinct(cls, tokens: list[str]) -> list[str]:
        if tokens[:2] != [PAD, UNK]:
            raise corrupt(f"tokens must start with {PAD!r} and {UNK!r}, not {tokens[:2]!r}")
        seen: set[str] = set()
        for token in tokens:
            if token in seen:
                raise corrupt(f"tokens lists the word {token!r} twice")
            seen.add(token)
        return tokens

    @model_validator(mode="after")
    def _ids_fit(self) -> VocabFile:
        if len(self.tokens) + self.oov_buckets > MAX_VOCAB:
            raise corrupt(
                f"tokens and oov_buckets must make at most {MAX_VOCAB:,} ids, "
                f"not {len(self.tokens):,} + {self.oov_buckets:,}"
            )
        return self
