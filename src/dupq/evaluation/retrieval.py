"""Retrieval quality: a question searches a collection; is a known duplicate at the top?

BEIR's and sentence-transformers' Quora task, on dupq's held-out rows (:func:`held_out_task`): the **collection** is
every distinct question of the test and dev rows (38,614 on the seed split; ``parts=("dev",)``: the dev rows alone, to
choose on); the **queries** every distinct question1 of a held-out duplicate pair whose texts differ (7,025), each
searching with its own entry left out; the **relevant** ones every known duplicate, by the transitive closure of the
whole file's labels (:func:`dupq.data.duplicates.duplicate_groups`; no held-out text is trained on).

A system ranks the collection for each query (:func:`dense_ranking`, exact; :func:`bm25_ranking` with ``bm25s``;
:func:`reranked_ranking`), and :func:`ranking_measures` scores its top ``k`` with trec_eval's measures through
``pytrec_eval``: MRR@10, nDCG@10, Recall@1/10 and P@1. Each list is scored by position, so trec_eval keeps the system's
order (its own tie rule would sort equal scores by document id). ``mrr@10_question2`` is the seeds' older figure: the
reciprocal rank of each held-out pair's own question2 only.

>>> result = evaluate_retrieval(Model.load(), read_pairs(default_data_path())[0])   # doctest: +SKIP
>>> result["model"]["mrr@10"], result["bm25"]["mrr@10"]                              # doctest: +SKIP
(0.92, 0.84)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dupq.core.errors import DupqError
from dupq.data.duplicates import duplicate_groups
from dupq.data.pairs import Pairs, Splits, recorded_split, split_pairs
from dupq.index.vectors import search
from dupq.modeling.model import ENCODE_BATCH, Model

K = 10  # the cut-off of MRR@10 and nDCG@10, and how many each query retrieves
QUERY_BLOCK = 1024  # queries searched at once (memory: QUERY_BLOCK x corpus scores and sort keys)
RERANK_BLOCK = 64  # queries reranked at once (memory: RERANK_BLOCK x candidates x the reranker's width)
HELD_OUT = ("test", "dev")  # the rows whose questions make the reported task
PARTS = {"test": HELD_OUT, "dev": ("dev",)}  # a task's split -> the held-out rows whose questions make it
# Our name -> trec_eval's, as pytrec_eval reports it (the measures it is asked for: TREC_MEASURES).
MEASURES = {
    "mrr@10": "recip_rank",
    "ndcg@10": "ndcg_cut_10",
    "recall@1": "recall_1",
    "recall@10": "recall_10",
    "p@1": "P_1",
}
TREC_MEASURES = {"recip_rank", "ndcg_cut.10", "recall.1,10", "P.1"}

Encode = Callable[[list[str]], np.ndarray]  # texts -> (N, d) float32 unit vectors


@dataclass
class RetrievalTask:
    """Queries, the collection they search and which of its questions each query should find."""

    corpus: list[str]  # (N,) the questions searched, distinct
    queries: list[str]  # (Q,) the questions that search
    relevant: list[np.ndarray]  # (Q,) each query's relevant corpus indices (int64, at least one)
    own: np.ndarray  # (Q,) int64: a query's own index in the corpus, left out of its ranking; -1 if absent
    pairs: np.ndarray | None = None  # (P, 2) int64 (query, corpus index of its question2): the seeds' figure

    def __post_init__(self) -> None:
        if not self.queries or not self.corpus:
            raise DupqError("a retrieval task needs at least one query and one question to search.")
        if len(self.relevant) != len(self.queries) or len(self.own) != len(self.queries):
            raise DupqError("a retrieval task needs one relevance list and one own index per query.")
        if any(len(r) == 0 for r in self.relevant):
            raise DupqError("every query of a retrieval task needs at least one relevant question.")


def held_out_task(splits: Splits, labelled: Pairs, parts: Sequence[str] = HELD_OUT) -> RetrievalTask:
    """The Quora retrieval task of the held-out rows ``parts`` of ``splits`` (see the module docstring).

    ``labelled``: every pair of the data file; its duplicate labels, closed transitively, are the relevance judgements.
    """
    unknown = set(parts) - set(HELD_OUT)
    if unknown or not parts:
        raise DupqError(f"the retrieval task is built from the test and/or dev rows, not {sorted(unknown)}.")
    rows = [getattr(splits, part) for part in parts]
    corpus = list(dict.fromkeys(q for p in rows for q in p.q1 + p.q2))
    position = {t: i for i, t in enumerate(corpus)}
    duplicates = [(a, b) for p in rows for a, b, y in zip(p.q1, p.q2, p.labels) if y == 1 and a != b]
    if not duplicates:
        raise DupqError(f"the {' and '.join(parts)} rows hold no duplicate pair to search for.")
    queries = list(dict.fromkeys(a for a, _ in duplicates))
    query_index = {q: i for i, q in enumerate(queries)}
    # The held-out duplicates join the file's labels, so that a query's own pair counts whatever ``labelled`` holds.
    q1, q2 = [*labelled.q1, *(a for a, _ in duplicates)], [*labelled.q2, *(b for _, b in duplicates)]
    group = duplicate_groups(corpus, q1, q2, np.concatenate([labelled.labels, np.ones(len(duplicates), np.int8)]))
    members: dict[int, list[int]] = defaultdict(list)
    for i, t in enumerate(corpus):
        members[group[t]].append(i)
    own = np.array([position[q] for q in queries], dtype=np.int64)
    relevant = [np.array([j for j in members[group[q]] if j != o], dtype=np.int64) for q, o in zip(queries, own)]
    pairs = np.array([(query_index[a], position[b]) for a, b in duplicates], dtype=np.int64)
    return RetrievalTask(corpus=corpus, queries=queries, relevant=relevant, own=own, pairs=pairs)


def _without_own(ids: np.ndarray, own: np.ndarray, k: int) -> np.ndarray:
    """``(Q, k)``: the first ``k`` of each row of ``ids (Q, k or k + 1)`` that is not the query's own index."""
    keep = ids != own[:, None]  # (Q, k + 1)
    keep &= np.cumsum(keep, axis=1) <= k
    return ids[keep].reshape(len(ids), k)


def _cut_off(task: RetrievalTask, k: int) -> int:
    """``k``, or fewer when the collection (less a query's own entry) is smaller."""
    if k < 1:
        raise DupqError(f"k must be at least 1, got {k}.")
    return min(k, len(task.corpus) - int((task.own >= 0).any()))


def dense_ranking(encode: Encode, task: RetrievalTask, k: int = K) -> np.ndarray:
    """``(Q, k)`` corpus indices, best first, by the inner product of ``encode``'s unit vectors.

    Exact search (:func:`dupq.index.vectors.search`: ties go to the lower index). A query that is
    in the collection uses the collection's vector of it: each text is encoded once.
    """
    k = _cut_off(task, k)
    corpus = np.asarray(encode(task.corpus), dtype=np.float32)  # (N, d)
    queries = np.empty((len(task.queries), corpus.shape[1]), dtype=np.float32)  # (Q, d)
    inside = task.own >= 0
    queries[inside] = corpus[task.own[inside]]
    if not inside.all():
        queries[~inside] = encode([q for q, o in zip(task.queries, task.own) if o < 0])
    ids = np.concatenate(  # (Q, k + 1): one more, for the query's own entry (search cuts it to the corpus)
        [search(queries[i : i + QUERY_BLOCK], corpus, k + 1)[1] for i in range(0, len(queries), QUERY_BLOCK)]
    )
    return _without_own(ids, task.own, k)


def reranked_ranking(candidates: np.ndarray, rerank: Encode, task: RetrievalTask, k: int = K) -> np.ndarray:
    """``(Q, k)`` corpus indices: each query's ``candidates (Q, C)`` (a fast model's ranking, best first, its own
    entry left out) ordered by the inner product of ``rerank``'s unit vectors, the ``k`` best of each.

    Retrieve and rerank, as a collection with a reranker searches (:mod:`dupq.collection.rerank`): a
    tie keeps the candidates' order, and only the candidates and the queries are encoded, each text
    once (a query in the collection uses the collection's vector of it).
    """
    k = min(k, candidates.shape[1])
    needed = np.unique(np.concatenate([candidates.ravel(), task.own[task.own >= 0]]))  # (U,)
    vectors = np.asarray(rerank([task.corpus[i] for i in needed]), dtype=np.float32)  # (U, d')
    row = np.full(len(task.corpus), -1, dtype=np.int64)
    row[needed] = np.arange(len(needed))
    queries = np.empty((len(task.queries), vectors.shape[1]), dtype=np.float32)  # (Q, d')
    inside = task.own >= 0
    queries[inside] = vectors[row[task.own[inside]]]
    if not inside.all():
        queries[~inside] = rerank([q for q, o in zip(task.queries, task.own) if o < 0])
    out = np.empty((len(candidates), k), dtype=np.int64)
    for lo in range(0, len(candidates), RERANK_BLOCK):
        block = candidates[lo : lo + RERANK_BLOCK]  # (B, C)
        scores = np.einsum("bcd,bd->bc", vectors[row[block]], queries[lo : lo + len(block)])  # (B, C)
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # (B, k)
        out[lo : lo + len(block)] = np.take_along_axis(block, order, axis=1)
    return out


def candidate_recall(task: RetrievalTask, candidates: np.ndarray) -> float:
    """The share of queries with a relevant question among their ``candidates (Q, C)``: a reranker's ceiling."""
    return float(np.mean([np.isin(rel, row).any() for rel, row in zip(task.relevant, candidates)]))


def bm25_ranking(task: RetrievalTask, k: int = K) -> np.ndarray:
    """``(Q, k)`` corpus indices, best first, by BM25 (the ``bm25s`` package, its defaults).

    bm25s's defaults: Lucene's BM25 (k1 = 1.5, b = 0.75), lowercased words of two or more letters, English stopwords
    left out. A query with no word of the collection gets bm25s's order of zero scores.
    """
    import bm25s

    k = _cut_off(task, k)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(task.corpus, show_progress=False), show_progress=False)
    words = bm25s.tokenize(task.queries, return_ids=False, show_progress=False)  # (Q,) lists of words
    ids, _ = retriever.retrieve(words, k=min(k + 1, len(task.corpus)), show_progress=False)  # (Q, k + 1) at most
    return _without_own(np.asarray(ids, dtype=np.int64), task.own, k)


def _trec(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    import pytrec_eval

    return pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES).evaluate(run)


def _run(ranked: np.ndarray) -> dict[str, dict[str, float]]:
    """trec_eval's run of ``ranked (Q, k)``: each list scored by its position, so its order is kept."""
    k = ranked.shape[1]
    return {str(q): {str(int(d)): float(k - r) for r, d in enumerate(row)} for q, row in enumerate(ranked)}


def ranking_measures(task: RetrievalTask, ranked: np.ndarray) -> dict[str, float]:
    """MRR@10, nDCG@10, Recall@1, Recall@10 and P@1 of ``ranked (Q, k)`` (best first), by trec_eval.

    Each is the mean over every query of the task; with a task's ``pairs``, ``mrr@10_question2`` too. ``k`` is the run's
    depth: MRR@10 is the reciprocal rank within it (0 when no relevant question is in it).
    """
    if ranked.shape[0] != len(task.queries):
        raise DupqError(f"the ranking has {ranked.shape[0]} rows for {len(task.queries)} queries.")
    run = _run(ranked)
    qrels = {str(q): {str(int(d)): 1 for d in rel} for q, rel in enumerate(task.relevant)}
    per_query = _trec(qrels, run)
    # trec_eval leaves a query with an empty run out of its results: it counts 0 here.
    out = {
        name: float(sum(per_query.get(q, {}).get(trec, 0.0) for q in qrels) / len(qrels))
        for name, trec in MEASURES.items()
    }
    if task.pairs is not None and len(task.pairs):
        pair_qrels = {str(p): {str(int(target)): 1} for p, (_, target) in enumerate(task.pairs)}
        pair_run = {str(p): run[str(int(query))] for p, (query, _) in enumerate(task.pairs)}
        per_pair = _trec(pair_qrels, pair_run)
        out["mrr@10_question2"] = float(sum(r["recip_rank"] for r in per_pair.values()) / len(pair_qrels))
    return out


def task_summary(task: RetrievalTask) -> dict[str, Any]:
    """How many queries, collection questions and relevance judgements the task has."""
    per_query = np.array([len(r) for r in task.relevant])
    return {
        "queries": len(task.queries),
        "corpus": len(task.corpus),
        "relevant": int(per_query.sum()),
        "queries_with_more_than_one_relevant": int((per_query > 1).sum()),
    }


def retrieval_measures(encode: Encode | None, task: RetrievalTask, k: int = K) -> dict[str, float]:
    """:func:`ranking_measures` of a dense encoder's ranking, or of BM25's when ``encode`` is None."""
    ranked = bm25_ranking(task, k) if encode is None else dense_ranking(encode, task, k)
    return ranking_measures(task, ranked)


def evaluate_retrieval(
    model: Model, pairs: Pairs, k: int = K, parts: Sequence[str] = HELD_OUT, bm25: bool = True
) -> dict[str, Any]:
    """The held-out retrieval task of ``model``'s split (from every pair of the file): its measures and BM25's.

    Returns ``{"model": {measure: value}, "bm25": {...}, "queries", "corpus", "relevant",
    "queries_with_more_than_one_relevant", "parts", "k"}`` (see the module docstring).
    """
    task = held_out_task(split_pairs(pairs, recorded_split(model.metrics)), pairs, parts)
    result: dict[str, Any] = {
        "model": retrieval_measures(lambda texts: model.encode(texts, batch_size=ENCODE_BATCH), task, k)
    }
    if bm25:
        result["bm25"] = retrieval_measures(None, task, k)
    return {**result, **task_summary(task), "parts": list(parts), "k": k}
