"""Grouping a corpus into groups of duplicate questions: candidates found, judged and grouped, in memory, streamed on
this machine, or on a Ray cluster.

:func:`dedup` is the package's face (a list of questions or an open collection in, :class:`Clusters` out, in memory),
and the package itself calls it (``from dupq import dedup; dedup(questions)``); ``dupq dedup`` streams files of any
size through :mod:`dupq.dedup.run`. Names whose modules import FAISS are imported when first used.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dupq.core.lazy import lazy_names

if TYPE_CHECKING:
    from dupq.dedup.clusters import Clusters
    from dupq.modeling.model import Model

__all__ = ["Clusters", "DedupConfig", "dedup"]

__getattr__ = lazy_names(__name__, {"Clusters": "dupq.dedup.clusters", "DedupConfig": "dupq.dedup.grouping"})


def dedup(
    questions,
    model: Model | str | os.PathLike | None = None,
    *,
    threshold: float | None = None,
    on: str = "model",
    grouping: str = "star",
    neighbours: int = 20,
    rerank: Model | str | os.PathLike | bool | None = None,
) -> Clusters:
    """Group ``questions`` into duplicates: a list of texts, or an open collection (its stored texts and vectors).

    ``model``: a :class:`~dupq.modeling.model.Model` or a model folder (default: the collection's model, else the
    bundled one). A pair is a duplicate when the model's score is above ``threshold`` (default: the model's own);
    ``on="similarity"`` judges by the cosine alone and needs a threshold. ``grouping`` is ``star`` (every member a
    duplicate of its representative), ``components`` or ``leader`` (:mod:`dupq.dedup.clusters`); ``neighbours``:
    the candidates looked at per question. ``rerank``: a second model (or its folder, or ``minilm``) that judges
    the candidates the first one finds, by its own cosine and verdict (None: a collection's reranker where it
    has one; False: none). The result's ``groups()`` are indices into ``questions`` (into the
    collection's ``stored_rows()``), the representative first.

    >>> [g.tolist() for g in dedup(["How do I learn Python?", "How can I learn Python?", "Why is the sky blue?"]).groups()]
    [[0, 1]]
    """
    import numpy as np

    from dupq.core.errors import DupqError
    from dupq.dedup.candidates import CandidateConfig
    from dupq.dedup.grouping import DedupConfig, dedup_vectors, same_text
    from dupq.dedup.grouping import dedup as dedup_texts
    from dupq.modeling.model import Model

    on_score = None if on == "model" else on
    config = DedupConfig(threshold, grouping, on_score, CandidateConfig(neighbours=neighbours))
    chosen = model if model is None or isinstance(model, Model) else Model.load(model)
    if isinstance(rerank, (str, os.PathLike)):
        rerank = Model.load(rerank)
    if hasattr(questions, "stored_rows"):  # a collection (not imported here: collections and dedup are independent)
        from dupq.dedup.run import collection_reranker

        rows = questions.stored_rows()
        texts = [text for _, _, text, _ in rows]
        vectors = questions.stored_vectors()  # (N, d), in the rows' order
        reranker, stored = collection_reranker(questions, rerank)
        reranked = None
        if reranker is not None:  # (N, d') each question encoded by the reranker once
            whole = len(stored) == len(rows)
            reranked = np.stack([stored[i] for i, _, _, _ in rows]) if whole else reranker.encode(texts)
        return dedup_vectors(vectors, chosen or questions.model, config, same_text(texts), reranker, reranked)
    if isinstance(questions, str) or not isinstance(questions, Sequence):
        raise DupqError(f"dedup takes a list of questions or an open collection, not a {type(questions).__name__}.")
    return dedup_texts(list(questions), chosen or Model.load(), config, rerank if isinstance(rerank, Model) else None)


class _Face(types.ModuleType):
    """The package, callable: ``dupq.dedup(questions, ...)`` is :func:`dedup` (a function of that name on the
    top package would hide the package from ``import dupq.dedup.run as run``)."""

    def __call__(self, *args, **kwargs) -> Clusters:
        return dedup(*args, **kwargs)


sys.modules[__name__].__class__ = _Face
