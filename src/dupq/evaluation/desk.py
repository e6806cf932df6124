"""A help desk's own searches: its new questions search its old ones; is the right old one found first?

``dupq evaluate --questions OLD --queries NEW`` runs :func:`desk_retrieval`: each new question
searches the old ones, and the one relevant is the old question its ``old`` column names (by text
or key); the measures are trec_eval's (:func:`~dupq.evaluation.retrieval.ranking_measures`), the
model's and BM25's. (A desk's labelled pairs, ``--pairs``, are judged as any pairs are.)

>>> desk_retrieval(Model.load(), read_questions("old.tsv"), read_questions("new.tsv"))["model"]["recall@10"]  # doctest: +SKIP
1.0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dupq.core.errors import DupqError
from dupq.data.questions import Questions
from dupq.evaluation.retrieval import K, RetrievalTask, retrieval_measures, task_summary
from dupq.modeling.model import ENCODE_BATCH, Model

OLD = "old"  # the column of the queries file naming each new question's old one (its text or key)


def desk_task(old: Questions, new: list[str], answers: list[str]) -> RetrievalTask:
    """Each of ``new`` searches the ``old`` questions; relevant: the old question its answer names (its text,
    its key, or the value of its ``key`` column); a DupqError names the first answer that names none."""
    corpus = list(dict.fromkeys(old.texts))
    position = {t: i for i, t in enumerate(corpus)}
    named = dict(position)
    for n, text in enumerate(old.texts):
        for key in ((old.keys or [None] * len(old))[n], ((old.metadata or [None] * len(old))[n] or {}).get("key")):
            if key is not None:
                named.setdefault(str(key), position[text])
    missing = [(n, a) for n, a in enumerate(answers) if a not in named]
    if missing:
        n, answer = missing[0]
        raise DupqError(
            f"new question {n + 1} names the old question {answer!r}, which is neither the text nor the key of one "
            f"of the old questions ({len(missing)} such)."
        )
    return RetrievalTask(
        corpus=corpus,
        queries=list(new),
        relevant=[np.array([named[a]], dtype=np.int64) for a in answers],
        own=np.array([position.get(q, -1) for q in new], dtype=np.int64),
    )


def desk_retrieval(model: Model, old: Questions, new: Questions, k: int = K) -> dict[str, Any]:
    """The measures of ``new`` questions searching the ``old`` (see :func:`desk_task`), the model's and BM25's;
    ``new`` is read from a table whose :data:`OLD` column names each one's old question.

    Returns ``{"queries", "corpus", "relevant", "model": {measure: value}, "bm25": {...}}``; with one relevant
    question each, Recall@1 = P@1 = the share found first.
    """
    answers = [(m or {}).get(OLD) for m in (new.metadata or [None] * len(new))]
    if not new.texts or any(not isinstance(a, str) for a in answers):
        raise DupqError(f"the new questions need the columns question and {OLD} (the old question's text or key).")
    task = desk_task(old, new.texts, answers)
    summary = task_summary(task)
    del summary["queries_with_more_than_one_relevant"]  # one old question each
    measures = retrieval_measures(lambda texts: model.encode(texts, batch_size=ENCODE_BATCH), task, k)
    return {**summary, "model": measures, "bm25": retrieval_measures(None, task, k)}
