"""What a run builds before its first step: the vocabulary, the model, its word vectors, the batch sources."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from dupq.core.errors import DupqError
from dupq.data.duplicates import duplicate_groups
from dupq.data.pairs import SplitConfig, Splits, labelled_split
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.encoders import Encoder, EncoderConfig
from dupq.modeling.heads import HeadConfig, PairHead
from dupq.training.batches import PairBatches
from dupq.training.config import ModelOptions, TrainConfig
from dupq.training.distil.teacher import TeacherCache
from dupq.training.step import Siamese


def load_teacher_cache(config: TrainConfig, split: dict[str, Any] | None) -> TeacherCache | None:
    """The run's teacher vectors, refused when they were taught on another cut of the data."""
    if not config.teacher_vectors:
        return None
    cache = TeacherCache.load(config.teacher_vectors)
    taught_on, trained_on = cache.info.get("split") or {}, split or {}
    for key, flag_name in (("train_pool", "--train-pool"), ("test", "--test-size"), ("dev", "--dev-size")):
        if key in taught_on and key in trained_on and taught_on[key] != trained_on[key]:
            raise DupqError(
                f"the teacher vectors in {config.teacher_vectors} were taught with {flag_name} {taught_on[key]}, "
                f"this run uses {trained_on[key]}; teach again with the run's split (its test and dev questions must stay untaught)."
            )
    return cache


def _labelled_val(split: dict[str, Any] | None) -> int:
    """The pool rows the labelled pairs validate on: the run's split, else :class:`SplitConfig`'s default."""
    return (split or {}).get("labelled_val", SplitConfig().labelled_val)


def batch_sources(
    splits: Splits,
    config: TrainConfig,
    vocab: Vocabulary,
    split: dict[str, Any] | None,
    teacher: TeacherCache | None = None,
) -> tuple[PairBatches, PairBatches, str]:
    """The training and validation batch sources of the recipe, and a line saying what they hold."""
    if config.train_on == "labelled":
        train_pairs, val_pairs = labelled_split(splits.pool, _labelled_val(split))
    else:
        train_pairs, val_pairs = splits.train, splits.val
    groups = None
    if config.mask_false_negatives:
        texts = list(dict.fromkeys(train_pairs.q1 + train_pairs.q2 + val_pairs.q1 + val_pairs.q2))
        groups = duplicate_groups(texts, train_pairs.q1, train_pairs.q2, train_pairs.labels)
    hard = splits.pool.take(splits.pool.labels == 0) if config.hard_negatives else None
    if hard is not None and config.train_on == "labelled":
        hard = hard.take(np.isin(hard.rows, train_pairs.rows))  # never a validation pair's question
    train_source = PairBatches(vocab, train_pairs, config.batch_size, groups, hard, teacher)
    val_source = PairBatches(vocab, val_pairs, config.batch_size, groups, teacher=teacher)
    duplicates = int(train_pairs.labels.sum())
    line = f"train {len(train_pairs):,} pairs ({duplicates:,} duplicates) | validation {len(val_pairs):,} pairs"
    if train_source.partners is not None:
        line += f" | {train_source.partners.covered():,} training pairs have a labelled non-duplicate"
    if teacher is not None:
        line += f" | {len(teacher):,} teacher vectors ({teacher.info.get('teacher', '?')})"
    return train_source, val_source, line


def build_vocabulary(
    splits: Splits, config: TrainConfig, options: ModelOptions, split: dict[str, Any] | None
) -> Vocabulary:
    """The run's vocabulary: the words of its training questions (the pool's duplicates, or its labelled pairs)."""
    if config.train_on == "labelled":
        pairs, _ = labelled_split(splits.pool, _labelled_val(split))
    else:
        pairs = splits.pool.take(splits.pool.labels == 1)
    return Vocabulary.build(
        pairs.q1 + pairs.q2, lowercase=options.lowercase, oov_buckets=options.oov_buckets, min_count=options.min_count
    )


def build_model(
    vocab: Vocabulary, config: TrainConfig, options: ModelOptions, teacher_dim: int | None = None
) -> Siamese:
    torch.manual_seed(config.seed)
    encoder = Encoder(EncoderConfig(len(vocab), options.dim, dropout=options.dropout))
    head = None
    if options.head != "none" or config.objective().needs_head:
        kind = "cosine" if options.head == "none" else options.head
        head = PairHead(HeadConfig(kind, encoder.config.out_dim))
    projection = None
    if config.objective().projects:
        if teacher_dim is None:
            raise ValueError("the distil loss needs the teacher's width for its projection")
        projection = nn.Linear(encoder.config.out_dim, teacher_dim, bias=False)
    return Siamese(encoder, head, projection)


def init_word_embeddings(encoder: Encoder, vocab: Vocabulary, teacher: str, log: Callable[[str], None]) -> None:
    """Start the vocabulary's words from the teacher's vectors of each (``vocab.teachable()``:
    not padding, the unknown id or the buckets, which keep the random start).

    ``teacher`` is "teacher" (the packaged all-MiniLM-L6-v2) or a sentence-transformers folder;
    see :func:`dupq.training.distil.teacher.word_vectors`. The scale matches the random start it
    replaces: the root mean square of every row but padding's and the unknown id's.
    """
    from dupq.training.distil.teacher import load_teacher, word_vectors

    encode, name = load_teacher(None if teacher == "teacher" else teacher)
    ids, texts = vocab.teachable()
    weight = encoder.embedding.weight  # (V + buckets, d)
    random = torch.ones(len(weight), dtype=torch.bool)
    random[[0, vocab.unknown_id]] = False
    start = time.perf_counter()
    vectors = word_vectors(texts, encode, weight.shape[1], float(weight[random].detach().pow(2).mean().sqrt()))
    with torch.no_grad():
        weight[torch.from_numpy(ids)] = torch.from_numpy(vectors)
    log(
        f"word embeddings of {len(ids):,} {vocab.UNIT} start from {name}'s vectors ({time.perf_counter() - start:.0f} s)"
    )


def check_device(name: str) -> None:
    try:
        device = torch.device(name)
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError):
        raise DupqError(f"the device {name!r} cannot be used here; use cpu, or cuda with a GPU.") from None
    if device.type not in ("cpu", "cuda"):
        raise DupqError(f"unknown device {name!r}; use cpu or cuda.")
