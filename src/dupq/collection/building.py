"""What a build stores: its checked inputs (:func:`build_inputs`) and its questions encoded a chunk at a time
(:func:`encoded_chunks`), which :meth:`~dupq.collection.collection.Collection.build` hands to the backend."""

from __future__ import annotations

from collections.abc import Iterator

from dupq.collection.rows import check_keys, check_metadata
from dupq.core.errors import DupqError
from dupq.data.questions import MAX_QUESTION, check_questions
from dupq.index.vectors import IndexConfig
from dupq.modeling.model import Model

BUILD_CHUNK = 50_000  # questions encoded and stored per step of a build


def build_inputs(
    texts, keys, metadata, index, stored: bool = False
) -> tuple[list[str], list[str | None], list[str | None], IndexConfig]:
    """The checked texts, keys, metadata (JSON text) and index config of a build (``stored``: see :meth:`Collection.build`)."""
    texts = check_questions(texts, longest=None if stored else MAX_QUESTION)
    meta = check_metadata(metadata, len(texts))
    config = index if isinstance(index, IndexConfig) else IndexConfig(kind=index)
    keys = check_keys(None if keys is None else [None if k is None else str(k) for k in keys], len(texts))
    given = [k for k in keys if k is not None]
    if len(set(given)) != len(given):
        raise DupqError("the keys given for the questions are not unique.")
    return texts, keys, meta, config


def encoded_chunks(texts: list[str], keys: list, meta: list, model: Model) -> Iterator[tuple]:
    """``(start, texts, keys, metadata, vectors (B, d))`` of ``BUILD_CHUNK`` questions at a time: what a build stores."""
    for lo in range(0, len(texts), BUILD_CHUNK):
        hi = min(lo + BUILD_CHUNK, len(texts))
        yield lo, texts[lo:hi], keys[lo:hi], meta[lo:hi], model.encode(texts[lo:hi])
