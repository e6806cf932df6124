"""The questions adaptation reads, and the model it starts from: a file's or a collection's questions, Quora's mixed in.

:func:`user_questions` reads a user's questions (a file, or a collection with its model), :func:`mixed_in` adds
questions of Quora's training pool to a small desk's (so the student keeps what it knew), :func:`base_model`
chooses the model to adapt, and :func:`unknown_words` / :func:`word_counts` count the words a vocabulary lacks.
:mod:`dupq.training.adapt` fine-tunes on them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from dupq.core.errors import DupqError
from dupq.data.questions import Dropped, check_questions, read_questions
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.model import Model


def user_questions(source: str, column: str | None = None) -> tuple[list[str], Model | None, Dropped]:
    """``(texts, model, dropped)``: the questions to adapt on, from a questions file or a collection, and
    the lines of a file left out (with their reasons and line numbers).

    A collection (a folder from ``dupq index build``, or a Milvus location) gives its stored texts
    and the model it was built with (the natural base); a file is read as
    :func:`dupq.data.questions.read_questions` reads it (``column`` of a CSV/TSV file), with no model.
    """
    from dupq.collection.collection import Collection, Location

    location = Location.parse(source)
    if location.holds_collection():
        if column is not None:
            raise DupqError("--column names a column of a CSV/TSV file, not of a collection.")
        with Collection.open(location) as collection:
            return [text for _, _, text, _ in collection.stored_rows()], collection.model, Dropped()
    if Path(source).is_dir():
        raise DupqError(
            f"{source} is a folder but not a dupq collection (it has no manifest.json); give a questions file or a collection."
        )
    questions = read_questions(source, column)
    return questions.texts, None, questions.dropped


def quora_questions(pairs, split, count: int, exclude: list[str]) -> list[str]:
    """The first ``count`` distinct questions of the training pool of ``split`` (``pairs``: the Quora file
    read by :func:`dupq.data.pairs.read_pairs`), in file order, none of ``exclude``; never a question that a dev
    or test row asks too."""
    from dupq.data.pairs import split_pairs

    splits = split_pairs(pairs, split)
    pool = splits.pool
    held_out = {q for part in (splits.test, splits.dev) for q in (*part.q1, *part.q2)}  # also asked in a held-out row
    taken, seen = [], set(exclude) | held_out
    for question in (q for a, b in zip(pool.q1, pool.q2) for q in (a, b)):
        if len(taken) == count:
            break
        if question not in seen and question.strip():
            seen.add(question)
            taken.append(question)
    return taken


def distinct_questions(texts: list[str]) -> list[str]:
    """Each question once, in order; fewer than 2 (no batch to learn from) is a :class:`DupqError`."""
    texts = list(dict.fromkeys(check_questions(texts)))
    if len(texts) < 2:
        raise DupqError(f"adaptation needs at least 2 distinct questions, got {len(texts)}.")
    return texts


def word_counts(vocab: Vocabulary, texts: list[str]) -> dict[str, int]:
    """Each word of ``texts`` (as the vocabulary splits them), in the order first seen, and how often it occurs."""
    seen: dict[str, int] = {}
    for text in texts:
        for word in vocab.words(text):
            seen[word] = seen.get(word, 0) + 1
    return seen


def unknown_words(vocab: Vocabulary, texts: list[str]) -> dict[str, int]:
    """How many distinct words of ``texts`` (and word occurrences) the vocabulary lacks."""
    seen = word_counts(vocab, texts)
    missing = {w: n for w, n in seen.items() if not vocab.known(w)}
    return {
        "distinct_words": len(seen),
        "unknown_distinct": len(missing),
        "occurrences": sum(seen.values()),
        "unknown_occurrences": sum(missing.values()),
    }


def base_model(model: Model | str | os.PathLike | None, collection_model: Model | None = None) -> Model:
    """The model to adapt: ``model`` (a model or its folder) when given, else the collection's, else the bundled one."""
    if isinstance(model, Model):
        return model
    return Model.load(model) if model is not None or collection_model is None else collection_model


def mixed_in(
    texts: list[str], base: Model, mix: int, data: str | os.PathLike | None, log: Callable[[str], None] = print
) -> list[str]:
    """Quora training questions to teach beside a small help desk's ``texts``: up to ``mix`` questions in all (none
    when ``texts`` has that many, or when no Quora file is at ``data``, default :func:`~dupq.data.pairs.default_data_path`);
    says what was done through ``log``."""
    from dupq.data.pairs import default_data_path, read_pairs, recorded_split

    if len(texts) >= mix:
        return []
    path = Path(data) if data is not None else default_data_path()
    if not path.exists():
        log(
            f"only {len(texts):,} questions, fewer than --mix {mix:,}: no Quora file at {path} to mix in "
            "(--data PATH), so the student learns from yours alone and may forget what it knew"
        )
        return []
    mixed = quora_questions(read_pairs(path)[0], recorded_split(base.metrics), mix - len(texts), texts)
    log(
        f"only {len(texts):,} questions, fewer than --mix {mix:,}: {len(mixed):,} questions of Quora's training "
        "pool mixed in (taught and trained on with yours, so that the student keeps what it knew; --mix 0: none)"
    )
    return mixed
