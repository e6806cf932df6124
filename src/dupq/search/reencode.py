"""A collection's questions encoded again with another model, into a new collection.

A collection records the fingerprint of the model that encoded it and refuses any other (its
vectors would not be comparable with a query's). After ``dupq adapt`` the stored questions must
therefore be encoded again with the adapted model: :func:`reencode` reads every stored question
(its key and metadata too, in id order) from the old collection and builds a new one with the new
model and the old one's index settings. The old collection is left as it was, so a search keeps
working until the new one is in place; the build itself writes into a hidden sibling and renames
it (a killed re-encoding leaves no half collection).

>>> reencode("runs/faq", Model.load("runs/adapted"), "runs/faq-adapted").close()   # doctest: +SKIP
"""

from __future__ import annotations

from dupq.core.files import DupqError
from dupq.modeling.model import Model
from dupq.search.collection import Collection
from dupq.search.vectors import IndexConfig


def reencode(source, model: Model, out, index: str | None = None) -> Collection:
    """A new collection at ``out`` (folder or Milvus URI) with every question of ``source``, encoded by ``model``.

    ``index`` ("flat", "hnsw", "ivfpq") replaces the source's index kind; by default it is kept.
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
    return Collection.build(out, list(texts), model, keys=list(keys), metadata=list(metadata), index=config)
