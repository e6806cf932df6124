"""The teacher's own subword vocabulary: BERT's WordPiece tokens, read through Hugging Face ``tokenizers``.

A word vocabulary (:class:`dupq.data.tokenizer.Vocabulary`) knows the words of the training
questions: a word Quora never used is one unknown id (or a hashed bucket) that no pair taught.
The teacher, all-MiniLM-L6-v2, reads text as BERT's 30,522 WordPiece tokens: lowercased, accents
stripped, split at blanks and punctuation, and each word cut greedily into the longest pieces the
vocabulary holds ("unaffable" -> "una", "##ffa", "##ble"; Wu et al. 2016, *Google's Neural
Machine Translation System*, and Devlin et al. 2019, BERT). :class:`WordPieceVocabulary` gives
the student the same tokens, so that a help desk's word Quora never used still reaches pieces
with a meaning, and each token's embedding can start from the teacher's vector of it
(``word_init``, :func:`dupq.training.setup.init_word_embeddings`).

Here dupq uses ``tokenizers``, which words do without (:mod:`dupq.data.tokenizer` says why):
WordPiece's longest match is a loop per character that its Rust code runs over a batch in
parallel, and the token vectors mean what the teacher meant only if the normaliser and the
pre-tokeniser are exactly BERT's, which reading the teacher's own ``tokenizer.json`` guarantees.

How a question becomes ids:

* no [CLS] or [SEP] (the student pools its tokens itself), no padding and no truncation by the
  library (the teacher's file asks for both, at 128); a question is cut at ``max_tokens`` tokens,
  as words are;
* text is text: a question that contains "[PAD]" gets the pieces of "[", "pad" and "]", not the
  padding id (``encode_special_tokens``);
* [PAD] is id 0, the encoder's padding row (``padding_idx``); a word whose characters no piece
  covers (an emoji, a word over 100 characters) is [UNK], id 100 in BERT's vocabulary.

A model folder holds the tokenizer as ``tokenizer.json`` beside ``vocab.json``, which then reads
``{"tokenizer": "wordpiece", "max_tokens": 256}`` (:class:`WordPieceFile`); a ``vocab.json`` that
names no tokenizer is a word vocabulary, as in every folder saved before. :func:`load_vocabulary`
reads either.

>>> vocab = WordPieceVocabulary.from_file(packaged_teacher() / TOKENIZER)    # doctest: +SKIP
>>> vocab.encode(["How do I fly?"])[0].tolist()                              # doctest: +SKIP
[2129, 2079, 1045, 4875, 1029]
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel

from dupq.core.errors import DupqError
from dupq.core.files import atomic_write, read_json, write_json
from dupq.core.formats import MAX_TOKENS, MAX_VOCAB, check_format, integer
from dupq.data.tokenizer import PAD, Encoded, VocabFile, Vocabulary

if TYPE_CHECKING:
    from tokenizers import Tokenizer

TOKENIZER = "tokenizer.json"  # the WordPiece tokenizer's file in a model folder, beside vocab.json
TOKENIZERS = ("words", "wordpiece")  # the vocabularies' kinds: what vocab.json's "tokenizer" names (none: words)
CHUNK = 8192  # questions per encode_batch call: its Encoding objects hold much more than the ids
_UNUSED = re.compile(r"\[unused\d+\]")  # BERT's placeholder tokens, which no text ever becomes


class WordPieceVocabulary:
    """A WordPiece tokenizer (the teacher's) as a vocabulary: ``encode(questions) -> Encoded``.

    The same interface as :class:`~dupq.data.tokenizer.Vocabulary`: ``len`` (embedding rows),
    ``tokens``, ``lowercase``, ``max_tokens``, ``encode``, ``save`` and ``load``, and what
    adaptation and ``word_init`` read (``words``, ``known``, ``teachable``, ``unknown_id``).
    ``where`` names the tokenizer's file in messages.
    """

    kind = "wordpiece"  # ModelOptions.tokenizer's name for it, and vocab.json's "tokenizer"
    UNIT = "WordPiece tokens"  # what its ids stand for, in messages

    def __init__(self, tokenizer: Tokenizer, max_tokens: int = 256, where: str = "the tokenizer"):
        from tokenizers.models import WordPiece

        if not isinstance(tokenizer.model, WordPiece):
            raise DupqError(f"{where} is a {type(tokenizer.model).__name__} tokenizer, not a WordPiece one.")
        tokenizer.no_padding()
        tokenizer.no_truncation()
        tokenizer.encode_special_tokens = True  # "[PAD]" typed in a question is text, not the padding id
        size = tokenizer.get_vocab_size(with_added_tokens=True)
        tokens = [tokenizer.id_to_token(i) for i in range(size)] if 2 <= size <= MAX_VOCAB else [None]
        if None in tokens:
            raise DupqError(
                f"{where} is corrupt: its {size:,} ids must run from 0 to at most {MAX_VOCAB:,} without a gap."
            )
        if tokens[0] != PAD:  # Encoded.padded pads with 0, and the encoder keeps row 0 at zero
            raise DupqError(f"{where} is corrupt: id 0 must be {PAD!r}, the padding, not {tokens[0]!r}.")
        unknown = tokenizer.model.unk_token
        if tokenizer.token_to_id(unknown) is None:
            raise DupqError(f"{where} is corrupt: its unknown token {unknown!r} has no id.")
        self._tokenizer = tokenizer
        self.tokens = tokens
        self.max_tokens = max_tokens  # longer questions are cut, so one huge text cannot exhaust memory
        self.unknown_id = tokenizer.token_to_id(unknown)  # what a word no piece covers becomes
        self.lowercase = self._normalize("A") == "a"  # BERT's uncased normaliser folds case itself
        self._prefix = tokenizer.model.continuing_subword_prefix  # "##": a piece inside a word
        specials = {i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}
        self._special = specials | {i for i, t in enumerate(tokens) if _UNUSED.fullmatch(t)}

    def __len__(self) -> int:
        """Rows the embedding table needs: one per token."""
        return len(self.tokens)

    @classmethod
    def from_file(cls, path: str | os.PathLike, max_tokens: int = 256) -> WordPieceVocabulary:
        """The vocabulary of a ``tokenizer.json`` (the teacher's), or one sentence naming what is wrong with it."""
        path = Path(path)
        if not path.is_file():
            raise DupqError(f"the tokenizer is missing: {path} does not exist.")
        return cls(_tokenizer(path), max_tokens, str(path))

    def encode(self, questions: Sequence[str]) -> Encoded:
        """Token ids of every question, at most ``max_tokens`` each; an empty question has no ids."""
        flat: list[np.ndarray] = []
        lengths = np.zeros(len(questions) + 1, dtype=np.int64)
        for lo in range(0, len(questions), CHUNK):
            ids = [e.ids for e in self._encode_batch(list(questions[lo : lo + CHUNK]))]
            n = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))  # (b,) tokens per question
            every = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(n.sum()))  # (sum n,)
            place = np.arange(len(every)) - np.repeat(np.cumsum(n) - n, n)  # each token's place in its question
            flat.append(every[place < self.max_tokens])
            lengths[lo + 1 : lo + 1 + len(ids)] = np.minimum(n, self.max_tokens)
        return Encoded(np.concatenate(flat) if flat else np.zeros(0, dtype=np.int64), np.cumsum(lengths))

    def _encode_batch(self, questions: list[str]) -> list:
        try:
            return self._tokenizer.encode_batch(questions, add_special_tokens=False)
        except TypeError:  # a lone surrogate (an undecodable byte) is no Rust string: read it as "?"
            valid = [q.encode("utf-8", "replace").decode("utf-8") if isinstance(q, str) else q for q in questions]
            return self._tokenizer.encode_batch(valid, add_special_tokens=False)

    def _normalize(self, text: str) -> str:
        normalizer = self._tokenizer.normalizer
        return normalizer.normalize_str(text) if normalizer is not None else text

    def words(self, question: str) -> list[str]:
        """The normalised words of one question (punctuation marks are words here), before WordPiece cuts them."""
        text = self._normalize(question.encode("utf-8", "replace").decode("utf-8"))
        split = self._tokenizer.pre_tokenizer
        return [word for word, _ in split.pre_tokenize_str(text)] if split is not None else text.split()

    def known(self, word: str) -> bool:
        """Whether ``word`` (one of :meth:`words`) becomes pieces of the vocabulary rather than [UNK]."""
        return all(piece.id != self.unknown_id for piece in self._tokenizer.model.tokenize(word))

    def summary(self) -> str:
        """What the ids are, for a log line: ``30,522 WordPiece tokens``."""
        return f"{len(self):,} {self.UNIT}"

    @property
    def unknown_words_are(self) -> str:
        """What becomes of a word the vocabulary lacks, for a message."""
        return "none of its pieces spell them: each is read as [UNK]"

    def teachable(self) -> tuple[np.ndarray, list[str]]:
        """``(ids, texts)``: the ids whose embedding a teacher can start, and the text it reads for each.

        Every token but the special ones ([PAD], [UNK], [CLS], [SEP], [MASK]) and BERT's [unusedN]
        placeholders, which no question becomes. A piece from inside a word ("##ing") is read
        without its "##" ("ing"): the teacher's tokenizer would cut "##" into two "#" tokens, and in
        a text of one to three tokens those two would weigh as much as the piece itself, pulling
        all 5,828 inner pieces towards the vector of "#".
        """
        ids = np.array([i for i in range(len(self.tokens)) if i not in self._special], dtype=np.int64)
        return ids, [self.tokens[i].removeprefix(self._prefix) or self.tokens[i] for i in ids]

    def save(self, path: str | os.PathLike) -> None:
        """Write ``vocab.json`` at ``path`` and the tokenizer beside it; the tokenizer first, so that a
        ``vocab.json`` naming WordPiece never stands without its tokenizer."""
        path = Path(path)
        atomic_write(path.with_name(TOKENIZER), self._tokenizer.to_str().encode("utf-8"))
        write_json(path, {"tokenizer": self.kind, "max_tokens": self.max_tokens})

    @classmethod
    def load(cls, path: str | os.PathLike) -> WordPieceVocabulary:
        """The vocabulary saved at ``path`` (``vocab.json``) with its tokenizer, or one sentence."""
        vocab = load_vocabulary(path)
        if not isinstance(vocab, cls):
            raise DupqError(f"{path} holds a word vocabulary, not a WordPiece one.")
        return vocab

    @classmethod
    def stored(cls, file: WordPieceFile, path: Path) -> WordPieceVocabulary:
        """The vocabulary of a ``vocab.json`` at ``path`` that :class:`WordPieceFile` has checked, with the
        ``tokenizer.json`` beside it."""
        tokenizer = path.with_name(TOKENIZER)
        if not tokenizer.is_file():
            raise DupqError(f"the tokenizer of {path.parent} is missing: {tokenizer} does not exist.")
        return cls(_tokenizer(tokenizer), file.max_tokens, str(tokenizer))


def _tokenizer(path: Path) -> Tokenizer:
    """The ``tokenizers`` tokenizer saved at ``path``, or one sentence saying the file is not one."""
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(path.read_text(encoding="utf-8"))
    except Exception as e:  # noqa: BLE001 - the Rust parser's errors are plain Exceptions, not one class
        reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise DupqError(f"{path} is corrupt: it is no tokenizer file of Hugging Face tokenizers ({reason}).") from None


class WordPieceFile(BaseModel):
    """``vocab.json`` of a WordPiece vocabulary: which tokenizer, and how many tokens a question keeps."""

    tokenizer: Literal["wordpiece"]  # the tokens are in tokenizer.json beside this file
    max_tokens: integer(1, MAX_TOKENS)  # tokens kept per question


class _Kind(BaseModel):
    """The least of a ``vocab.json`` that says which vocabulary it is (none named: words)."""

    tokenizer: Literal[TOKENIZERS] = "words"


AnyVocabulary = Vocabulary | WordPieceVocabulary  # what a model folder's vocab.json holds


def load_vocabulary(path: str | os.PathLike) -> AnyVocabulary:
    """The vocabulary saved at ``path`` (a model folder's ``vocab.json``), of the kind the file names.

    The one reader of a model folder's vocabulary (:meth:`Model.load <dupq.modeling.model.Model.load>`,
    a resumed run): a file that names no tokenizer is a word vocabulary, read as it always was.
    """
    path = Path(path)
    stored = read_json(path, "the vocabulary")
    if check_format(_Kind, stored, path).tokenizer == "wordpiece":
        return WordPieceVocabulary.stored(check_format(WordPieceFile, stored, path), path)
    return Vocabulary.stored(check_format(VocabFile, stored, path))
