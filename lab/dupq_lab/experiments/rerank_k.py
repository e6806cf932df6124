"""How many candidates a reranker orders (K): Recall@1 and cost per K on the help-desk yardstick.

The task is :mod:`dupq.evaluation.tasks`' ``help-desks`` (each new question of the split searches
every old question plus Quora's 19,862 dev questions). A collection of the task's questions is
built with the fast model (``--model``; default the bundled model) and ``--rerank MODEL``, as
``dupq index build --rerank`` builds one, and each query is searched through
:meth:`~dupq.collection.collection.Collection.search` with ``candidates=K`` for each K of ``--ks``
(the product's own path: the reranker's vectors are encoded at a question's first use and
stored, and the stored ones are candidates too). Lazy (the default), each K searches a fresh
collection, its queries in order, as a desk's new questions arrive: each search stores its
candidates' vectors, which later searches may find. ``--rerank-now`` builds one collection with
every reranker vector stored, as ``dupq index build --rerank-now`` does. The collections are kept
in ``--work`` (named by the two models' fingerprints and the split); the reranker encodes through
a cache of its vectors by text (:mod:`dupq_lab.vector_cache`, in ``--work``/vectors), so a text is
encoded once over every K, both halves and both builds, and vectors encoded elsewhere by the same
model can be put there. Each K's measures go to stderr as it ends.

Per K: the ranking measures of the reranked top 10 (MRR@10, Recall@1, Recall@10, ...), the
share of queries whose old question is among the fast model's K (the ceiling), and its cost:
the reranker's encodes a query needs when none of its candidates is stored (K; a first search
costs about K times the reranker's ms per question, measured on the first 256 questions of the
collection) and the p50 of one search with the candidates' vectors stored (one query at a time,
the first 50, on ``--threads`` torch threads: 1 by default, as ``dupq search`` and ``dupq serve`` run; a
single short query gains nothing from a second thread and loses much where the other core is busy). A search asks for 11 hits (its own entry may be among them), so K below 11 is 11. ``chosen``
is the smallest K whose Recall@1 is within 0.005 of the best K's: the default
(:data:`~dupq.collection.rerank.RERANK_CANDIDATES`) is chosen on the dev half with it.

Prints one JSON line: {"split", "queries", "corpus", ..., "model", "rerank", "fast": {...},
"per_k": {K: {"mrr@10", "recall@1", ..., "candidate_recall", "first_search_encodes",
"stored_search_ms_p50"}}, "reranker_ms_per_question", "chosen"}.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
import typer

from dupq.collection.collection import Collection
from dupq.evaluation.retrieval import ranking_measures
from dupq.evaluation.tasks import shipped_help_desk_task
from dupq.modeling.model import Model
from dupq_lab.options import DATA, RUNS, Data, ModelFolder, Split, clocked, integers, one_sentence, timed
from dupq_lab.vector_cache import cached

TOP = 10  # the depth the ranking measures read
CLOSE = 0.005  # Recall@1 within this of the best K's counts as the best (the smallest such K is chosen)
TIMED = 50  # queries searched one at a time for the latency of a search with stored vectors
SAMPLE = 256  # collection questions the reranker encodes for its cost per question


def ranked(coll: Collection, queries: list[str], own: np.ndarray, **search) -> np.ndarray:
    """``(Q, TOP)`` ids (positions in the task's corpus: the collection was built in its order), a query's own
    entry left out, -1 where fewer were found."""
    out = np.full((len(queries), TOP), -1, dtype=np.int64)
    for lo in range(0, len(queries), 64):
        for q, hits in enumerate(coll.search(queries[lo : lo + 64], k=TOP + 1, **search), start=lo):
            ids = [h.id for h in hits if h.id != own[q]][:TOP]
            out[q, : len(ids)] = ids
    return out


@one_sentence
def main(
    rerank: Annotated[Path, typer.Option(metavar="MODEL", help="The reranker's model folder.")],
    model: ModelFolder = None,
    split: Split = "dev",
    ks: Annotated[str, typer.Option(help="The K values to measure, comma-separated.")] = "10,20,50,100",
    rerank_now: Annotated[
        bool, typer.Option(help="Build with every reranker vector stored (dupq index build --rerank-now).")
    ] = False,
    data: Data = DATA,
    work: Annotated[Path, typer.Option(help="Where the task's collections are kept between runs.")] = RUNS / "rerank-k",
    threads: Annotated[
        int, typer.Option(min=1, help="torch's threads for the timed searches (dupq search's default).")
    ] = 1,
) -> None:
    fast, reranker = Model.load(model), Model.load(rerank)
    task, made_of = shipped_help_desk_task(data, split)
    name = f"{fast.fingerprint()}-{reranker.fingerprint()}"
    out = {**made_of, "model": str(model or "bundled"), "rerank": str(rerank), "rerank_now": rerank_now}
    per_k, encoded = {}, 0
    with cached(reranker, work / "vectors" / reranker.fingerprint()):
        for k in integers(ks):
            # lazy: a fresh collection for each K, its queries searched in order (each stores its candidates'
            # vectors, candidates of the next); --rerank-now: one collection with every vector stored
            folder = work / (f"{name}-{split}-now" if rerank_now else f"{name}-{split}-lazy-{k}")
            if not rerank_now:
                shutil.rmtree(folder, ignore_errors=True)
            if (folder / "manifest.json").is_file():
                coll = Collection.open(folder, fast, reranker)
            else:
                coll = Collection.build(folder, task.corpus, fast, rerank=reranker, rerank_now=rerank_now)
            with coll:
                if "fast" not in out:
                    out["fast"] = ranking_measures(task, ranked(coll, task.queries, task.own, rerank=False))
                    _, deep = coll.nearest(fast.encode(task.queries), max(integers(ks)) + 1)  # (Q, K+1) the model's
                ids = ranked(coll, task.queries, task.own, candidates=k)
                encoded += coll.reranker_encoded
            within = [
                {i for i in row.tolist() if i >= 0 and i != o}.intersection(row[: k + 1].tolist())
                for row, o in zip(deep, task.own)
            ]
            ceiling = np.mean([bool(set(r.tolist()) & w) for r, w in zip(task.relevant, within)])
            per_k[str(k)] = {
                **ranking_measures(task, ids),
                "candidate_recall": float(ceiling),
                "first_search_encodes": k,
            }
            print(f"K = {k}: {json.dumps(per_k[str(k)])}", file=sys.stderr, flush=True)
    out["reranker_encoded"] = encoded  # by this run, through the lab's cache (0: every vector was cached already)
    torch.set_num_threads(threads)
    out["threads"] = threads
    for k in integers(ks):  # timed without the cache: each search encodes its query with the reranker
        folder = work / (f"{name}-{split}-now" if rerank_now else f"{name}-{split}-lazy-{k}")
        with Collection.open(folder, fast, reranker) as coll:
            _, seconds = timed(lambda q, k=k: coll.search([q], k=TOP, candidates=k), task.queries[:TIMED])
        per_k[str(k)]["stored_search_ms_p50"] = float(np.median(seconds) * 1000)
    out["per_k"] = per_k
    out["reranker_ms_per_question"] = clocked(reranker.encode, task.corpus[:SAMPLE])[1] * 1000 / SAMPLE
    best = max(v["recall@1"] for v in per_k.values())
    out["chosen"] = min(int(k) for k, v in per_k.items() if v["recall@1"] >= best - CLOSE)
    out["fingerprints"] = {"model": fast.fingerprint(), "rerank": reranker.fingerprint()}
    print(json.dumps(out))
