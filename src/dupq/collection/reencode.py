"""A collection's questions encoded again with another model, into a new collection.

A collection refuses any model but the one that encoded it, so after ``dupq adapt`` :func:`reencode` reads every stored
question (key and metadata too, in id order) and builds a new collection with the new model and the old index settings
(a hidden sibling renamed into place). The old collection stays as it was, serving until the new one is in place; a
reranker and its stored vectors go with their texts (nothing is encoded by it again).

The old collection may be served while this runs: what changed in it after the first read (adds, and by key updates,
moderators' decisions and removals) is copied too, in rounds, until few changes are left; the last round holds the old
folder's writer lock (its writers wait those moments), so that every change committed before it ends is in the new
collection. A Milvus collection has no such lock: its last round is not held.

>>> reencode("runs/faq", Model.load("runs/adapted"), "runs/faq-adapted").close()   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable

from dupq.collection.collection import Collection
from dupq.collection.location import Location
from dupq.collection.rows import text_digest
from dupq.core.errors import DupqError
from dupq.index.vectors import IndexConfig
from dupq.modeling.model import Model

HELD_ROUND = 256  # questions changed meanwhile that are copied with the writers held (more: another round first)


def reencode(
    source, model: Model, out, index: str | None = None, log: Callable[[str], None] | None = None
) -> Collection:
    """A new collection at ``out`` (folder or Milvus URI) with every question of ``source``, encoded by ``model``.

    ``index`` ("flat", "hnsw", "ivfpq") replaces the source's index kind; by default it is kept.
    ``log`` is told what was copied (read at the start, added meanwhile), before the writers are let go.
    """
    source, out = Location.parse(source), Location.parse(out)
    if source.address == out.address:
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
            out,
            list(texts),
            model,
            keys=list(keys),
            metadata=list(metadata),
            index=config,
            stored=True,
            rerank=old.reranker,
        )  # a question stored before the 1,000-character rule is copied too: nothing is left behind
        try:
            if old.reranker is not None:
                text_of = {i: text for i, _, text, _ in rows}
                reranked = old.stored_reranker_vectors()
                new._reranking.adopt({text_digest(text_of[i]): v for i, v in reranked.items() if i in text_of})
            copied, added, changed = {i: (key, text, meta) for i, key, text, meta in rows}, 0, 0
            while True:  # rounds of what was changed meanwhile, until few are left
                later = _changes(old, copied)
                if sum(map(len, later)) <= HELD_ROUND:
                    break
                added, changed = (a + b for a, b in zip((added, changed), _copy(new, later, copied)))
            with old.writers_held():
                added, changed = (a + b for a, b in zip((added, changed), _copy(new, _changes(old, copied), copied)))
                if log is not None:
                    log(
                        f"copied {len(rows):,} questions read at the start and {added:,} added to {source} meanwhile"
                        + (f" ({changed:,} updated or removed meanwhile too)" if changed else "")
                    )
        except BaseException:
            new.close()
            raise
    return new


def _changes(old: Collection, copied: dict[int, tuple]) -> tuple[list[tuple], list[int]]:
    """What ``old`` holds that was not copied: rows ``(id, key, text, metadata)`` added or changed since
    (an update of a text is a new id, of metadata the same id), and the copied ids no longer stored."""
    now = {i: (key, text, meta) for i, key, text, meta in old.stored_rows()}
    return [(i, *row) for i, row in now.items() if copied.get(i) != row], [i for i in copied if i not in now]


def _copy(new: Collection, changes: tuple[list[tuple], list[int]], copied: dict[int, tuple]) -> tuple[int, int]:
    """Apply ``changes`` (:func:`_changes`) of the old collection to ``new``; how many questions were added, and how
    many updated or removed.

    Only a keyed question can be removed or updated, so a row gone or changed has a key: a stored key under a new id is
    an update of its text, the same id with other metadata an update of that, a key stored no more a removal."""
    later, gone = changes
    keys = {key for key, _, _ in copied.values() if key is not None}
    fresh = [row for row in later if row[0] not in copied and (row[1] is None or row[1] not in keys)]
    if fresh:
        _, fresh_keys, texts, metadata = zip(*fresh)
        new.add(list(texts), list(metadata), list(fresh_keys))
    updated = [row for row in later if row[0] in copied or (row[1] is not None and row[1] in keys)]
    stored_text = {key: text for key, text, _ in copied.values()}
    for _, key, text, meta in updated:  # a text stored before the 1,000-character rule is never sent again
        new.update(key, None if stored_text.get(key) == text else text, meta or {})
    copied.update({i: (key, text, meta) for i, key, text, meta in later})
    gone_keys = {copied.pop(i)[0] for i in gone}
    removed = sorted(gone_keys - {key for key, _, _ in copied.values()} - {None})
    if removed:
        new.remove(removed)
    return len(fresh), len(updated) + len(removed)
