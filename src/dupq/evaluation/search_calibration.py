"""The search calibration a model folder carries for collections: fitted on the help-desk yardstick's dev half.

A hit is judged by more than its pair: how far it stands out from the other hits of its search says much about whether a
moderator can act on it (:func:`dupq.modeling.probability.search_calibrated`). It is fitted on the searches of the
``help-desks`` task's dev half (the test half is what ``dupq-lab desk-verdict`` reports): each new question's
**positive** is its own old question, wherever ranked; its **negatives** the wrong questions among the :data:`HITS`
first hits. With ``judged`` the questions :func:`~dupq.evaluation.tasks.read_judged` judged duplicates are positives
too. :func:`calibrate_search` fits it into ``model.judge.search_calibration`` with what it was fitted on (``dupq
calibrate MODEL --search``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dupq.core.errors import DupqError
from dupq.evaluation.calibration import fit_search_calibration
from dupq.evaluation.retrieval import RetrievalTask
from dupq.evaluation.tasks import shipped_help_desk_task
from dupq.index.vectors import search
from dupq.modeling.model import ENCODE_BATCH, Model
from dupq.modeling.verdict import pair_logits, search_margins

HITS = 10  # the hits of each search whose wrong questions are the negatives (10: chosen on dev, beside 3, 5 and 20)
FITTED_BY = "dupq calibrate MODEL --search"  # with " --judged" where the judged duplicates were positives


def search_pairs(model: Model, task: RetrievalTask, hits: int = HITS) -> dict[str, np.ndarray]:
    """The judged pairs of the task's searches: ``logits``, ``cosines``, ``margins`` and ``labels`` ``(N,)``.

    Each query's relevant questions (positives) and the wrong ones among its first ``hits`` (negatives)."""
    corpus = model.encode(task.corpus, batch_size=ENCODE_BATCH)  # (C, d)
    queries = model.encode(task.queries, batch_size=ENCODE_BATCH)  # (Q, d)
    _, ranked = search(queries, corpus, hits + 1)  # (Q, hits + 1), best first
    cos = np.einsum("qkd,qd->qk", corpus[ranked], queries)  # (Q, hits + 1)
    margins_of_hits = search_margins(cos, np.ones_like(ranked, dtype=bool))  # (Q, hits + 1)
    rows, cols, labels, margins = [], [], [], []
    for q, (found, relevant) in enumerate(zip(ranked, task.relevant)):
        shown = found[:hits].tolist()
        for j, i in enumerate(shown):
            rows.append(q), cols.append(i), labels.append(int(i in relevant)), margins.append(margins_of_hits[q, j])
        for i in (int(i) for i in relevant if int(i) not in shown):  # a duplicate the search ranks lower
            rows.append(q), cols.append(i), labels.append(1), margins.append(float(corpus[i] @ queries[q]) - cos[q, 0])
    u, v = queries[rows], corpus[cols]  # (N, d) each
    return {
        "logits": pair_logits(model, u, v),
        "cosines": np.einsum("nd,nd->n", u, v).astype(np.float64),
        "margins": np.array(margins),
        "labels": np.array(labels, dtype=np.int64),
    }


def calibrate_search(model: Model, data: Path | None = None, hits: int = HITS, judged: bool = False) -> dict[str, Any]:
    """Fit the model's search calibration and tiers on the help-desk yardstick's dev searches (``judged``: with the
    judged duplicates as positives); return it."""
    task, made_of = shipped_help_desk_task(data, "dev", judged)
    pairs = search_pairs(model, task, hits)
    if not 0 < pairs["labels"].sum() < len(pairs["labels"]):
        raise DupqError("the help-desk searches gave pairs of one label only; there is nothing to fit.")
    fit = fit_search_calibration(pairs["logits"], pairs["cosines"], pairs["margins"], pairs["labels"])
    fit["fitted_on"] = {
        "task": "help-desks",
        "split": "dev",
        "hits": hits,
        "pairs": len(pairs["labels"]),
        "duplicates": int(pairs["labels"].sum()),
        "tiers": fit.pop("tiers_on_fit"),
        "sha256": made_of["sha256"],
        **({"judged": True, "judged_sha256": made_of["judged_sha256"]} if judged else {}),
        "distractors": made_of["distractors"],
        "model_fingerprint": model.fingerprint(),
    }
    fit["fitted_by"] = FITTED_BY + (" --judged" if judged else "")
    model.judge.search_calibration = fit
    return fit
