"""A static branch beside the encoder: a table with one vector per word, summed into a second sentence vector.

The LSTM learns what words mean from Quora alone, so a help desk's words ("faucet") mean little to
it. A static vector built from a transformer's view of each word knows them: model2vec (Tulkens &
van Dongen 2024) distils a table of token vectors from a sentence encoder, and SIF (Arora, Liang &
Ma 2017) weights each word ``a / (a + p(word))``. The branch keeps one row per vocabulary id (the
weight baked in; zeros for padding and the unknown-word buckets), one lookup per word::

    s = normalise(sum_i words[id_i] + sum_j mean(pieces[piece] for piece in unknown word j))

A word the vocabulary lacks has its own row when the branch was taught it (``dupq adapt``), else
is cut into the teacher's WordPiece pieces (when the branch has them). The model's unit vector ``u``
and ``s`` are joined as ``[u, sqrt(w) s] / sqrt(1 + w)``, a unit vector whose dot products are
``(cos_u + w cos_s) / (1 + w)``, searched like any vector; the pair head still judges ``u``, which
:meth:`StaticBranch.model_half` recovers exactly. All NumPy: no torch to load and encode a few.

In a model folder: ``config.json``'s ``static`` entry (:class:`StaticConfig`) and
``static.safetensors`` (``words``; ``pieces`` with ``static-tokenizer.json``; ``added`` with
``static-words.json``, the words it was taught). ``dupq distil branch`` makes one.

>>> branch = StaticBranch(StaticConfig(dim=2), np.eye(4, 2, dtype=np.float32))
>>> branch.join(np.array([[1.0, 0.0]], np.float32), np.array([[0.0, 1.0]], np.float32)).round(3).tolist()
[[0.707, 0.0, 0.0, 0.707]]
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import StrictBool, StrictStr, TypeAdapter, ValidationError
from safetensors import SafetensorError
from safetensors.numpy import load_file, save

from dupq.core.errors import DupqError
from dupq.core.files import atomic_write, read_json
from dupq.core.formats import MAX_OUT_DIM, number
from dupq.core.formats import integer as bounded
from dupq.data.tokenizer import Encoded, word_parts

WEIGHTS = "static.safetensors"
TOKENIZER = "static-tokenizer.json"
ADDED = "static-words.json"  # the words the vocabulary lacks that the branch was taught, in the rows' order
MAX_ADDED = 10_000_000
NORM_EPS = 1e-12  # torch.nn.functional.normalize's floor on the norm
FEW_SUMS = 64  # questions summed row by row (reduceat); more are one sparse product
KEPT_WORDS = 100_000  # unknown words whose piece vector is remembered (a search's words recur)


MAX_WEIGHT = 1e6  # the largest w of a join a config.json may record: beyond it, the other half is noise
Weight = number(0.0, MAX_WEIGHT)  # w of join_vectors, as config.json records it (a static branch's, a joined model's)
_WEIGHT = TypeAdapter(Weight)


def check_weight(weight: Any, name: str) -> float:
    """``weight`` (the option ``name``) if a model folder may record it as the ``w`` of a join, else one sentence:
    the range that the folder's reader enforces, checked before anything is written."""
    try:
        return _WEIGHT.validate_python(weight)
    except ValidationError as e:
        raise DupqError(f"{name} must be {e.errors()[0]['msg']}, not {weight!r}.") from None


def join_vectors(u: np.ndarray, s: np.ndarray, weight: float) -> np.ndarray:
    """``[u, sqrt(w) s] / sqrt(1 + w)`` ``(N, d + e)`` of unit vectors ``u`` ``(N, d)`` and ``s`` ``(N, e)``:
    unit vectors whose dot products are ``(cos_u + w cos_s) / (1 + w)``."""
    return (np.concatenate([u, np.sqrt(weight) * s], axis=1) / np.sqrt(1.0 + weight)).astype(np.float32)


def summed_rows(table: np.ndarray, encoded: Encoded) -> np.ndarray:
    """``(N, dim)``: for each question, the sum of the rows of ``table`` its ids pick (zeros for an empty one).

    Many questions are one sparse product, ``counts (N, V) @ table``: ``np.add.reduceat`` over the
    gathered rows costs 25 times more there (1 s against 0.04 s for 50,000 questions), and SciPy's
    import is paid only then, never by a command that judges or searches a few.
    """
    n, dim = len(encoded), table.shape[1]
    if n > FEW_SUMS:
        from scipy.sparse import csr_matrix

        counts = csr_matrix((np.ones(len(encoded.flat), np.float32), encoded.flat, encoded.offsets), (n, len(table)))
        return np.asarray(counts @ table, dtype=np.float32)
    out = np.zeros((n, dim), np.float32)
    lengths = encoded.lengths
    filled = lengths > 0
    if filled.any():  # reduceat needs each segment non-empty: an empty one would give the next row
        rows = table[encoded.flat]  # (total_tokens, dim)
        out[filled] = np.add.reduceat(rows, encoded.offsets[:-1][filled], axis=0)
    return out


@dataclass
class StaticConfig:
    """The static branch in ``config.json``; the annotations are its format."""

    dim: bounded(1, MAX_OUT_DIM)  # width of the static vector: the model's vectors grow by this much
    weight: Weight = 1.0  # w: a search's score is (cos_model + w cos_static) / (1 + w)
    source: StrictStr = ""  # where the table came from, for people (the teacher, model2vec, ...)
    pieces: StrictBool = False  # unknown words are cut into WordPiece pieces (static-tokenizer.json)
    added: bounded(0, MAX_ADDED) = 0  # words the vocabulary lacks with a row of their own (static-words.json)


class StaticBranch:
    """The table (``words`` ``(V, dim)``, one row per id of the vocabulary), the unknown words' pieces, and the
    words it was taught that the vocabulary lacks (``added_words``, their rows ``added`` ``(A, dim)``)."""

    def __init__(
        self,
        config: StaticConfig,
        words: np.ndarray,
        pieces: np.ndarray | None = None,
        tokenizer_json: str = "",
        added_words: list[str] | None = None,
        added: np.ndarray | None = None,
    ):
        if config.pieces != (pieces is not None) or config.pieces != bool(tokenizer_json):
            raise DupqError("a static branch's pieces need both the pieces table and the tokenizer.")
        added_words = list(added_words or ())
        rowless = config.added != len(added_words) or (added is None and added_words)
        if rowless or len(set(added_words)) < len(added_words):
            raise DupqError("a static branch's added words need one row each, and each word once.")
        self.config = config
        self.words = np.ascontiguousarray(words, dtype=np.float32)  # (V, dim)
        self.pieces = None if pieces is None else np.ascontiguousarray(pieces, dtype=np.float32)  # (P, dim)
        self.tokenizer_json = tokenizer_json
        self.added_words = added_words
        self.added = np.ascontiguousarray(np.zeros((0, config.dim)) if added is None else added, dtype=np.float32)
        self._added_row = {word: i for i, word in enumerate(added_words)}  # word -> its row of ``added``
        self._tokenizer = None
        self._unknown: dict[str, np.ndarray] = {}  # word -> the mean of its pieces' rows

    @property
    def dim(self) -> int:
        return self.config.dim

    def vectors(self, vocab, encoded: Encoded, questions: list[str]) -> np.ndarray:
        """Unit static vectors ``(N, dim)`` of ``questions`` (``encoded``: their ids from ``vocab``)."""
        summed = summed_rows(self.words, encoded)  # (N, dim)
        if (self.pieces is not None or self.added_words) and len(encoded.flat):
            known = len(getattr(vocab, "tokens", ()))
            question_of = np.repeat(np.arange(len(encoded)), encoded.lengths)  # (total_tokens,)
            lacking = (encoded.flat >= known) | (encoded.flat == getattr(vocab, "unknown_id", -1))
            for i in np.unique(question_of[lacking]):  # only questions with a word the vocabulary lacks
                for word in vocab.words(questions[i]):
                    if not vocab.known(word):
                        summed[i] += self.unknown_word(word, vocab)
        norms = np.maximum(np.linalg.norm(summed, axis=1, keepdims=True), NORM_EPS)
        return summed / norms

    def unknown_word(self, word: str, vocab=None) -> np.ndarray:
        """``(dim,)`` the row the branch was taught for ``word``; else, where it has parts of its own
        (:func:`~dupq.data.tokenizer.word_parts`: punctuation beyond ASCII deleted, CJK ideographs apart), the sum
        of theirs: a part ``vocab`` knows has its row of the table; else the mean of the rows of its pieces (zeros
        when the branch has none)."""
        parts = word_parts(word)
        if word in self._added_row or parts == [word] or vocab is None:  # a word taught whole (before the parts)
            return self._unknown_part(word)
        vector = np.zeros(self.dim, np.float32)
        for part in parts:
            vector += self.words[vocab.index[part]] if vocab.known(part) else self._unknown_part(part)
        return vector

    def _unknown_part(self, word: str) -> np.ndarray:
        """``(dim,)`` the row the branch was taught for ``word``, else the mean of the rows of its pieces."""
        row = self._added_row.get(word)
        if row is not None:
            return self.added[row]
        if self.pieces is None:
            return np.zeros(self.dim, np.float32)
        vector = self._unknown.get(word)
        if vector is None:
            if self._tokenizer is None:
                from tokenizers import Tokenizer

                self._tokenizer = Tokenizer.from_str(self.tokenizer_json)
            ids = [i for i in self._tokenizer.encode(word, add_special_tokens=False).ids if i < len(self.pieces)]
            vector = self.pieces[ids].mean(0) if ids else np.zeros(self.dim, np.float32)
            if len(self._unknown) < KEPT_WORDS:
                self._unknown[word] = vector
        return vector

    def with_added(self, words: list[str], rows: np.ndarray) -> StaticBranch:
        """This branch taught ``words`` (ones the vocabulary lacks), ``rows`` ``(len(words), dim)`` their vectors;
        a word it knew already takes its new row."""
        taught = set(words)
        kept = [i for i, word in enumerate(self.added_words) if word not in taught]
        added_words = [self.added_words[i] for i in kept] + list(words)
        added = np.concatenate([self.added[kept], np.asarray(rows, np.float32).reshape(len(words), self.dim)])
        config = StaticConfig(**{**asdict(self.config), "added": len(added_words)})
        return StaticBranch(config, self.words, self.pieces, self.tokenizer_json, added_words, added)

    def join(self, u: np.ndarray, s: np.ndarray) -> np.ndarray:
        """The model's vectors ``u`` ``(N, d)`` joined with the static ones ``s`` (:func:`join_vectors`)."""
        return join_vectors(u, s, self.config.weight)

    def model_half(self, x: np.ndarray, d: int) -> np.ndarray:
        """The model's own unit vectors ``(N, d)`` from joined ones ``(N, d + dim)``."""
        return np.ascontiguousarray(np.asarray(x, np.float32)[:, :d] * np.float32(np.sqrt(1.0 + self.config.weight)))

    def config_json(self) -> dict:
        """``config.json``'s ``static`` entry (``added`` only when the branch was taught words: older folders lack it)."""
        return {k: v for k, v in asdict(self.config).items() if k != "added" or v}

    def digest(self, digest) -> None:
        """Add the branch to a model's fingerprint ``digest`` (hashlib)."""
        digest.update(json.dumps(self.config_json()).encode())
        digest.update(self.words.tobytes())
        if self.pieces is not None:
            digest.update(self.pieces.tobytes())
            digest.update(hashlib.sha256(self.tokenizer_json.encode()).digest())
        if self.added_words:
            digest.update(json.dumps(self.added_words).encode())
            digest.update(self.added.tobytes())

    def save(self, folder: Path, half: bool) -> None:
        """Write ``static.safetensors`` (and ``static-tokenizer.json``) into ``folder``; float16 with ``half``."""
        dtype = np.float16 if half else np.float32
        tables = {"words": self.words.astype(dtype)}
        if self.pieces is not None:
            tables["pieces"] = self.pieces.astype(dtype)
            atomic_write(folder / TOKENIZER, self.tokenizer_json.encode("utf-8"))
        elif (folder / TOKENIZER).exists():
            (folder / TOKENIZER).unlink()  # pieces this branch no longer has
        if self.added_words:
            tables["added"] = self.added.astype(dtype)
            atomic_write(folder / ADDED, json.dumps(self.added_words, ensure_ascii=False).encode("utf-8"))
        elif (folder / ADDED).exists():
            (folder / ADDED).unlink()  # words this branch no longer has
        atomic_write(folder / WEIGHTS, save(tables))

    @classmethod
    def load(cls, folder: Path, config: StaticConfig, rows: int) -> StaticBranch:
        """The branch that ``config`` (``config.json``'s ``static`` entry) describes; ``rows``: the vocabulary's ids."""
        path = folder / WEIGHTS
        needed = [path] + [folder / TOKENIZER] * config.pieces + [folder / ADDED] * bool(config.added)
        for file in needed:
            if not file.is_file():
                raise DupqError(f"{folder} is incomplete: its config names a static branch but {file} is missing.")
        try:
            tables = load_file(path)
            tokenizer_json = (folder / TOKENIZER).read_text(encoding="utf-8") if config.pieces else ""
        except (SafetensorError, OSError, ValueError, TypeError) as e:
            raise DupqError(f"{path} is corrupt ({e}).") from None
        # the one reader of a model's JSON files: its nesting rule, and a mistake named by this file
        added_words = read_json(folder / ADDED, f"the static branch's words of {folder}") if config.added else []
        words, pieces, added = tables.get("words"), tables.get("pieces"), tables.get("added")
        if words is None or words.shape != (rows, config.dim) or (config.pieces and pieces is None):
            raise DupqError(f"{path} does not match {folder / 'config.json'}: it needs words of {rows} x {config.dim}.")
        if pieces is not None and (pieces.ndim != 2 or pieces.shape[1] != config.dim):
            raise DupqError(f"{path} does not match {folder / 'config.json'}: pieces must be {config.dim} wide.")
        if config.added and (
            added is None
            or added.shape != (config.added, config.dim)
            or not isinstance(added_words, list)
            or len(added_words) != config.added
            or not all(isinstance(w, str) for w in added_words)
        ):
            raise DupqError(
                f"{folder} does not match its config: its static branch needs {config.added} added words in "
                f"{ADDED} and their {config.added} x {config.dim} rows."
            )
        if len(set(added_words)) < len(added_words):
            twice = next(w for w, n in Counter(added_words).items() if n > 1)
            raise DupqError(f"{folder / ADDED} is corrupt: it names the word {twice!r} twice; each word has one row.")
        if any(t.dtype.kind != "f" for t in tables.values()):
            raise DupqError(f"{path} is corrupt: its tables must be floating-point numbers.")
        if not all(np.isfinite(t).all() for t in tables.values()):
            raise DupqError(f"{path} is corrupt: it holds numbers that are not finite.")
        pieces = pieces if config.pieces else None  # a table the config does not use is left unread
        # float16 tables are widened to float32 by the branch itself
        return cls(config, words, pieces, tokenizer_json, added_words, added if config.added else None)
