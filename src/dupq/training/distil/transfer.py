"""The user's questions for :mod:`dupq.training.adapt`: read from a file or a collection, and reworded.

:func:`user_questions` reads them from a questions file or from a collection's store (whose model
is then the one to adapt); :func:`unknown_words` counts the words the student's vocabulary lacks.

The student learns a word's meaning only from how the teacher's vectors move with it. A help
desk's questions say "memory" in one place and "RAM" in another, rarely both in one question, so
their vectors alone teach little that the two are alike. Following Tang et al. 2019 (*Distilling
Task-Specific Knowledge from BERT into Simple Neural Networks*), each question is also rewritten
a few times: one word swapped for a word of the questions that the teacher places near it (the
teacher's own vectors of the words alone stand in for their WordNet synonyms), or one word left
out (their masking). The teacher encodes every rewording, so the target is right whatever the
swap did to the meaning; the student sees how the teacher's view moves when "memory" becomes
"ram", and learns it.

>>> words = question_words(vocab, texts)                                        # doctest: +SKIP
>>> near = neighbours(encode(words), k=5)                                       # doctest: +SKIP
>>> rewordings(vocab, texts, words, near, per_question=2, rng=np.random.default_rng(0))   # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dupq.core.files import DupqError
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.model import Model

SWAP_SHARE = 0.75  # of the rewordings: a word swapped for a neighbour; the rest leave a word out
BLOCK = 2048  # words compared at once when finding neighbours (memory: BLOCK x words floats)


def question_words(vocab: Vocabulary, texts: list[str]) -> list[str]:
    """The distinct words of ``texts`` as the vocabulary reads them (lowercased when it folds case), each once."""
    return list(dict.fromkeys(w for t in texts for w in vocab.words(t)))


def neighbours(vectors: np.ndarray, k: int) -> np.ndarray:
    """``(W, k)``: for each row of ``vectors`` (``(W, T)`` unit rows), the ``k`` other rows of highest cosine, best first."""
    vectors = np.asarray(vectors, dtype=np.float32)
    k = min(k, len(vectors) - 1)
    out = np.empty((len(vectors), max(k, 0)), dtype=np.int64)
    for lo in range(0, len(vectors), BLOCK):
        scores = vectors[lo : lo + BLOCK] @ vectors.T  # (b, W)
        scores[np.arange(len(scores)), np.arange(lo, lo + len(scores))] = -np.inf  # never a word's own neighbour
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k] if k else np.zeros((len(scores), 0), np.int64)
        order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
        out[lo : lo + len(scores)] = np.take_along_axis(top, order, axis=1)
    return out


def rewordings(
    vocab: Vocabulary,
    texts: list[str],
    words: list[str],
    near: np.ndarray,
    per_question: int,
    rng: np.random.Generator,
) -> list[str]:
    """Up to ``per_question`` rewordings of each text (its words as the vocabulary reads them, one changed).

    A rewording swaps one word for one of its neighbours in ``near`` (rows follow ``words``) or,
    for a share ``1 - SWAP_SHARE``, or where the word has none, leaves it out (never the only
    word). Rewordings equal to a text or to each other are given once; order follows ``texts``.
    """
    position = {w: i for i, w in enumerate(words)}
    made: dict[str, None] = {}
    for text in texts:
        tokens = vocab.words(text)
        for _ in range(per_question if tokens else 0):
            j = int(rng.integers(len(tokens)))
            options = near[position[tokens[j]]] if tokens[j] in position else ()
            if len(options) and (rng.random() < SWAP_SHARE or len(tokens) == 1):
                changed = [*tokens[:j], words[int(rng.choice(options))], *tokens[j + 1 :]]
            elif len(tokens) > 1:
                changed = tokens[:j] + tokens[j + 1 :]
            else:
                continue
            made[" ".join(changed)] = None
    asked = set(texts)
    return [t for t in made if t not in asked]


def user_questions(source: str, column: str | None = None) -> tuple[list[str], Model | None, int]:
    """``(texts, model, skipped)``: the questions to adapt on, from a questions file or a collection.

    A collection (a folder from ``dupq index build``, or a Milvus location) gives its stored texts
    and the model it was built with (the natural base); a file is read as
    :func:`dupq.data.questions.read_questions` reads it (``column`` of a CSV/TSV file), with no model.
    """
    from dupq.data.questions import read_questions
    from dupq.search.collection import MANIFEST, Collection, is_milvus

    if is_milvus(source) or (Path(source) / MANIFEST).is_file():
        if column is not None:
            raise DupqError("--column names a column of a CSV/TSV file, not of a collection.")
        location = source if is_milvus(source) else Path(source)
        with Collection.open(location) as collection:
            return [text for _, _, text, _ in collection.stored_rows()], collection.model, 0
    if Path(source).is_dir():
        raise DupqError(
            f"{source} is a folder but not a dupq collection (it has no {MANIFEST}); give a questions file or a collection."
        )
    questions = read_questions(source, column)
    return questions.texts, None, questions.skipped


def unknown_words(vocab: Vocabulary, texts: list[str]) -> dict[str, int]:
    """How many distinct words of ``texts`` (and word occurrences) the vocabulary lacks."""
    seen: dict[str, int] = {}
    for text in texts:
        for word in vocab.words(text):
            seen[word] = seen.get(word, 0) + 1
    missing = {w: n for w, n in seen.items() if w not in vocab.index}
    return {
        "distinct_words": len(seen),
        "unknown_distinct": len(missing),
        "occurrences": sum(seen.values()),
        "unknown_occurrences": sum(missing.values()),
    }
