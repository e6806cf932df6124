"""Quora retrieval with a reranker: the fast model's top K of each query ordered by a transformer, per K.

The task is ``dupq evaluate --task quora-retrieval``'s (:func:`dupq.evaluation.retrieval.held_out_task`:
``--split test`` the test and dev rows of the model's split, the reported figure; ``--split dev`` the
dev rows alone, to choose K on). The fast model (``--model``; default the bundled model) ranks every
question exactly, and :func:`~dupq.evaluation.retrieval.reranked_ranking` orders each query's top K
by the reranker's cosine, as a collection built with ``--rerank`` orders its candidates (a tie keeps
the fast model's order): its first searches, before any reranker vector is stored. ``--rerank-now``
adds the reranker's own K best over every question to the candidates, as a collection built with
``--rerank-now`` (every reranker vector stored) searches. ``--alone`` also ranks every question by
the reranker alone. ``--weights`` also orders each K's candidates by a weighted sum of the two models'
cosines, for each weight (the joined encoder's rule, as ``dupq distil export --join`` makes one).
``--task help-desks`` measures the help-desk yardstick instead (each new question of the split
searching its old questions among Quora's dev questions), the same way.

The reranker's vectors are kept in ``--work`` by the digest of their text (:mod:`dupq_lab.vector_cache`),
written as they are encoded: each question is encoded once over every K, both splits (the dev
rows' questions are among the test split's) and a killed run; stderr tells how far an encoding
has got and its ETA.

Per K: the ranking measures of the reranked top 10 (MRR@10, nDCG@10, Recall@1, Recall@10, P@1)
and the share of queries with a known duplicate among the fast model's K (the ceiling). ``chosen``
is the smallest K whose MRR@10 is within 0.005 of the best K's (the rule of ``dupq-lab rerank-k``,
on this task's primary measure).

Prints one JSON line: {"queries", "corpus", "relevant", ..., "split", "model", "rerank", "fast":
{...}, ["alone": {...}], "per_k": {K: {"mrr@10", ..., "candidate_recall"}}, "chosen",
"reranker_encoded", "fingerprints"}.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import typer

from dupq.collection.rerank import joined
from dupq.data.pairs import read_pairs, recorded_split, split_pairs
from dupq.evaluation.retrieval import (
    PARTS,
    candidate_recall,
    dense_ranking,
    held_out_task,
    ranking_measures,
    reranked_ranking,
    task_summary,
)
from dupq.evaluation.tasks import shipped_help_desk_task
from dupq.modeling.model import ENCODE_BATCH, Model
from dupq_lab.options import DATA, RUNS, Data, ModelFolder, integers, one_sentence
from dupq_lab.vector_cache import DigestCache

TOP = 10  # the depth the ranking measures read
CLOSE = 0.005  # MRR@10 within this of the best K's counts as the best (the smallest such K is chosen)


@one_sentence
def main(
    rerank: Annotated[Path, typer.Option(metavar="MODEL", help="The reranker's model folder or name.")],
    model: ModelFolder = None,
    data: Data = DATA,
    split: Annotated[Literal["dev", "test"], typer.Option(help="dev (choose K on it) or test (report it).")] = "dev",
    ks: Annotated[str, typer.Option(help="The K values to measure, comma-separated.")] = "30,100",
    alone: Annotated[bool, typer.Option(help="Also rank every question by the reranker alone.")] = False,
    rerank_now: Annotated[
        bool,
        typer.Option(help="Every reranker vector stored: the reranker's own K best are candidates too (--rerank-now)."),
    ] = False,
    task_name: Annotated[
        Literal["quora", "help-desks"],
        typer.Option("--task", help="quora: Quora's held-out rows; help-desks: the help-desk yardstick."),
    ] = "quora",
    weights: Annotated[
        str,
        typer.Option(
            help="Also order by (1 - w) x the reranker's cosine + w x the model's, for each w (comma-separated)."
        ),
    ] = "",
    work: Annotated[Path, typer.Option(help="Where the reranker's vectors are kept between runs.")] = RUNS
    / "rerank-retrieval",
) -> None:
    fast, reranker = Model.load(model), Model.load(rerank)
    if task_name == "quora":
        pairs, _ = read_pairs(data)
        task = held_out_task(split_pairs(pairs, recorded_split(fast.metrics)), pairs, PARTS[split])
    else:
        task = shipped_help_desk_task(data, split)[0]
    cache = DigestCache(reranker, work / reranker.fingerprint())
    fast_cache = DigestCache(fast, work / fast.fingerprint(), lambda texts: fast.encode(texts, batch_size=ENCODE_BATCH))
    deep = dense_ranking(fast_cache, task, max(integers(ks)))
    out = {**task_summary(task), "task": task_name, "split": split}
    out |= {"model": str(model or "bundled"), "rerank": str(rerank)}
    out["fast"] = ranking_measures(task, deep[:, :TOP])
    out["rerank_now"] = rerank_now
    own = dense_ranking(cache, task, max(integers(ks))) if rerank_now else None  # (Q, K) the reranker's own order
    per_k = {}

    def weighted(w: float):  # the inner product of [sqrt(1 - w) reranker, sqrt(w) model] vectors: the weighted cosines
        return lambda texts: np.hstack([(1 - w) ** 0.5 * cache(texts), w**0.5 * fast_cache(texts)])

    for k in integers(ks):
        pool = deep[:, :k] if own is None else joined(deep[:, :k], own, set(range(len(task.corpus))), k)
        ranked = reranked_ranking(pool, cache, task, TOP)
        per_k[str(k)] = {**ranking_measures(task, ranked), "candidate_recall": candidate_recall(task, pool)}
        if weights:
            orders = {str(w): reranked_ranking(pool, weighted(w), task, TOP) for w in map(float, weights.split(","))}
            per_k[str(k)]["weighted"] = {w: ranking_measures(task, order) for w, order in orders.items()}
    if alone:  # after the candidates: the questions no K reaches are encoded last
        out["alone"] = ranking_measures(task, dense_ranking(cache, task, TOP))
    best = max(v["mrr@10"] for v in per_k.values())
    out["per_k"] = per_k
    out["chosen"] = min(int(k) for k, v in per_k.items() if v["mrr@10"] >= best - CLOSE)
    out["reranker_encoded"] = cache.encoded  # by this run (0: all were kept already)
    out["fingerprints"] = {"model": fast.fingerprint(), "rerank": reranker.fingerprint()}
    print(json.dumps(out))
