"""A collection's questions encoded again with another model, into a new collection.

A collection records the fingerprint of the model that encoded it and refuses any other (its
vectors would not be comparable with a query's). After ``dupq adapt`` the stored questions must
therefore be encoded again with the adapted model: :func:`reencode` reads every stored question
(its key and metadata too, in id order) from the old collection and builds a new one with the new
model and the old one's index settings. The old collection is left as it was, so a search keeps
working until the new one is in place; the build itself writes into a hidden sibling and renames
it (a killed re-encoding leaves no half collection).

The old collection may be served while this runs: the questions added to it after the first read
are copied too, in rounds, until few are left; the last round holds the old folder's writer lock
(its writers wait those moments), so that every add committed before it ends is in the new
collection. A Milvus collection has no such lock: its last round is not held.

>>> reencode("runs/faq", Model.load("runs/adapted"), "runs/faq-adapted").close()   # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from dupq.core.files import DupqError, file_lock
from dupq.modeling.model import Model
from dupq.search.collection import Collection, is_milvus
from dupq.search.store import WRITER_LOCK
from dupq.search.vectors import IndexConfig

HELD_ROUND = 256  # questions added meanwhile that are copied with the writers held (more: another round first)


def reencode(
    source, model: Model, out, index: str | None = None, log: Callable[[str], None] | None = None
) -> Collection:
    """A new collection at ``out`` (folder or Milvus URI) with every question of ``source``, encoded by ``model``.

    ``index`` ("flat", "hnsw", "ivfpq") replaces the source's index kind; by default it is kept.
    ``log`` is told what was copied (read at the start, added meanwhile), before the writers are let go.
    """
    if str(source) == str(out):
        raise DupqError(f"the re-encoded collection needs a new location, not {out} itself.")
    with Collection.open(source) as old:
        rows = old.stored_rows()
        config = IndexConfig(**old.manifest["index"])
        if not rows:
            raise DupqError(f"{source} holds no questions to encode again.")
        if index is not None and index != config.kind:
            config = IndexConfig(kind=index)
        _, keys, texts, metadata = zip(*rows)
        new = Collection.build(
            out, list(texts), model, ids=list(keys), metadata=list(metadata), index=config, stored=True
        )  # a question stored before the 1,000-character rule is copied too: nothing is left behind
        try:
            seen, added = {i for i, *_ in rows}, 0
            while True:  # rounds of what was added meanwhile, until few are left
                later = _added_since(old, seen)
                if len(later) <= HELD_ROUND:
                    break
                added += _copy(new, later, seen)
            with _writers_held(source):
                added += _copy(new, _added_since(old, seen), seen)
                if log is not None:
                    log(f"copied {len(rows):,} questions read at the start and {added:,} added to {source} meanwhile")
        except BaseException:
            new.close()
            raise
    return new


def _added_since(old: Collection, seen: set[int]) -> list[tuple]:
    return [row for row in old.stored_rows() if row[0] not in seen]


def _copy(new: Collection, rows: list[tuple], seen: set[int]) -> int:
    """Add ``rows`` (id, key, text, metadata) of the old collection to ``new``; how many."""
    if rows:
        _, keys, texts, metadata = zip(*rows)
        new.add(list(texts), list(metadata), list(keys))
        seen.update(i for i, *_ in rows)
    return len(rows)


@contextlib.contextmanager
def _writers_held(source) -> Iterator[None]:
    """The old folder's writer lock (``dupq serve``'s workers and ``index add`` wait on it); Milvus has none."""
    if is_milvus(source):
        yield
        return
    with file_lock(Path(source) / WRITER_LOCK):
        yield
