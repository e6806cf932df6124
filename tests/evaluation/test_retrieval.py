"""dupq.evaluation.retrieval against an independent computation: the closure by breadth-first search,
each ranking by sorting every score in a loop, and MRR@10, nDCG@10, Recall@k and P@1 by their textbook
definitions, on small synthetic data made here. One real-data test checks the bundled model's figures."""

from __future__ import annotations

import json
import math

import bm25s
import numpy as np
import pytest

from dupq.core.errors import DupqError
from dupq.data.pairs import Pairs, Splits, read_pairs
from dupq.evaluation.retrieval import (
    RetrievalTask,
    bm25_ranking,
    candidate_recall,
    dense_ranking,
    evaluate_retrieval,
    held_out_task,
    ranking_measures,
    reranked_ranking,
    retrieval_measures,
)
from dupq.modeling.model import ENCODE_BATCH, Model
from support.cli_model import cli_model
from support.kit import make_pairs, ok


def random_rows(
    rng: np.random.Generator, texts: list[str], n: int, duplicate_share: float
) -> list[tuple[str, str, int]]:
    return [(str(rng.choice(texts)), str(rng.choice(texts)), int(rng.random() < duplicate_share)) for _ in range(n)]


def synthetic_split(seed: int, questions: int = 40):
    """A training pool, test and dev rows over ``questions`` made-up texts; some texts occur only in the pool."""
    rng = np.random.default_rng(seed)
    texts = [f"question number {i}?" for i in range(questions)]
    held = texts[: questions * 3 // 4]  # the pool also has texts no held-out row has: they can link two held-out ones
    pool = make_pairs(random_rows(rng, texts, questions, 0.3))
    test, dev = (make_pairs(random_rows(rng, held, questions // 2, 0.5), n * questions) for n in (1, 2))
    everything = make_pairs([(a, b, y) for p in (pool, test, dev) for a, b, y in zip(p.q1, p.q2, p.labels)])
    return Splits(train=pool, val=pool, test=test, dev=dev, pool=pool), everything


def adjacency(pairs: Pairs) -> dict[str, list[str]]:
    """Each text's duplicates by a direct label, both ways."""
    out: dict[str, list[str]] = {}
    for a, b, y in zip(pairs.q1, pairs.q2, pairs.labels):
        if y == 1:
            out.setdefault(a, []).append(b)
            out.setdefault(b, []).append(a)
    return out


def reachable(start: str, neighbours: dict[str, list[str]]) -> set[str]:
    """Every text joined to ``start`` by duplicate labels, transitively (breadth-first search), itself included."""
    seen, frontier = {start}, [start]
    while frontier:
        x = frontier.pop(0)
        for v in neighbours.get(x, []):
            if v not in seen:
                seen.add(v)
                frontier.append(v)
    return seen


def loop_ranking(scores: list[float], own: int, k: int) -> list[int]:
    """The ``k`` best indices by score, high to low (ties: lower index first), ``own`` left out."""
    order = sorted((j for j in range(len(scores)) if j != own), key=lambda j: (-scores[j], j))
    return order[:k]


def textbook(ranking: list[int], relevant: set[int]) -> dict[str, float]:
    """MRR@10, nDCG@10 (binary gains, log2 discount), Recall@1, Recall@10 and P@1 of one query."""
    top = ranking[:10]
    hits = [d in relevant for d in top]
    first = next((i for i, h in enumerate(hits) if h), None)
    dcg = sum(1 / math.log2(i + 2) for i, h in enumerate(hits) if h)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), 10)))
    return {
        "mrr@10": 0.0 if first is None else 1 / (first + 1),
        "ndcg@10": dcg / ideal,
        "recall@1": sum(hits[:1]) / len(relevant),
        "recall@10": sum(hits) / len(relevant),
        "p@1": float(hits[0]) if hits else 0.0,
    }


def mean_of(rows: list[dict[str, float]]) -> dict[str, float]:
    return {key: float(np.mean([r[key] for r in rows])) for key in rows[0]}


def held_duplicates(parts) -> list[tuple[str, str]]:
    """The duplicate pairs of two distinct texts in ``parts``, in file order."""
    return [(a, b) for p in parts for a, b, y in zip(p.q1, p.q2, p.labels) if y == 1 and a != b]


def loop_measures(similarity, corpus: list[str], duplicates: list[tuple[str, str]], labelled: Pairs) -> dict:
    """The measures by hand: each distinct first question of a duplicate pair ranks every other text of the corpus
    by ``similarity(query)`` (its score against each), its relevant ones the closure of its labels; and the seed's
    figure, question2's own reciprocal rank per pair."""
    position, neighbours = {t: i for i, t in enumerate(corpus)}, adjacency(labelled)
    rows = []
    for query in dict.fromkeys(a for a, _ in duplicates):
        own = position[query]
        relevant = {position[t] for t in reachable(query, neighbours) if t in position} - {own}
        rows.append(textbook(loop_ranking(similarity(query), own, 10), relevant))
    pair_rr = [textbook(loop_ranking(similarity(a), position[a], 10), {position[b]})["mrr@10"] for a, b in duplicates]
    return {**mean_of(rows), "mrr@10_question2": float(np.mean(pair_rr))}


def vectors_for(texts: list[str], seed: int, dim: int = 6) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((len(texts), dim)).astype(np.float32)
    return dict(zip(texts, v / np.linalg.norm(v, axis=1, keepdims=True)))


@pytest.mark.parametrize("seed", range(8))
def test_the_held_out_task_is_the_distinct_questions_and_the_closure_of_every_label(seed):
    splits, labelled = synthetic_split(seed)
    task = held_out_task(splits, labelled)
    held = [*splits.test.q1, *splits.test.q2, *splits.dev.q1, *splits.dev.q2]
    assert sorted(task.corpus) == sorted(set(held)) and len(task.corpus) == len(set(task.corpus))
    assert sorted(task.queries) == sorted({a for a, _ in held_duplicates([splits.test, splits.dev])})
    for query, own, relevant in zip(task.queries, task.own, task.relevant):
        assert task.corpus[own] == query
        expected = (reachable(query, adjacency(labelled)) & set(task.corpus)) - {query}
        assert {task.corpus[j] for j in relevant} == expected
    dev_only = held_out_task(splits, labelled, parts=("dev",))
    assert set(dev_only.corpus) == {*splits.dev.q1, *splits.dev.q2}


@pytest.mark.parametrize("seed", range(8))
def test_dense_measures_agree_with_a_loop_over_every_score(seed):
    splits, labelled = synthetic_split(seed)
    task = held_out_task(splits, labelled)
    vector = vectors_for(task.corpus, seed)
    calls = []

    def encode(texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        return np.stack([vector[t] for t in texts])

    result = retrieval_measures(encode, task)
    assert calls == [len(task.corpus)]  # every query is in the collection: each text encoded once
    similarity = lambda query: [float(vector[query] @ vector[t]) for t in task.corpus]  # noqa: E731
    expected = loop_measures(similarity, task.corpus, held_duplicates([splits.test, splits.dev]), labelled)
    assert result.keys() == expected.keys()
    for key in expected:
        assert result[key] == pytest.approx(expected[key], abs=1e-9), key


@pytest.mark.parametrize("seed", range(4))
def test_queries_outside_the_collection_search_all_of_it_and_a_small_collection_cuts_k(seed):
    rng = np.random.default_rng(seed)
    corpus = [f"old {i}" for i in range(7)]  # fewer than 10: every ranking is the whole collection
    queries = [f"new {i}" for i in range(5)]
    relevant = [np.array([int(rng.integers(7))]) for _ in queries]
    task = RetrievalTask(corpus=corpus, queries=queries, relevant=relevant, own=np.full(5, -1))
    vector = vectors_for(corpus + queries, seed)
    result = retrieval_measures(lambda texts: np.stack([vector[t] for t in texts]), task)
    rows = []
    for q, rel in zip(queries, relevant):
        ranking = loop_ranking([float(vector[q] @ vector[t]) for t in corpus], -1, 10)
        assert len(ranking) == 7
        rows.append(textbook(ranking, set(rel.tolist())))
    assert result == pytest.approx(mean_of(rows))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("outside", [False, True])
def test_a_reranked_ranking_is_every_candidate_rescored_by_the_reranker_and_sorted(seed, outside):
    splits, labelled = synthetic_split(seed, questions=60)
    task = held_out_task(splits, labelled)
    if outside:  # queries that are not in the collection are encoded by the reranker themselves
        task = RetrievalTask(task.corpus, [f"new {q}" for q in task.queries], task.relevant, np.full(len(task.own), -1))
    fast, slow = vectors_for(task.corpus + task.queries, seed), vectors_for(task.corpus + task.queries, seed + 100)
    slow[task.corpus[1]] = slow[task.corpus[2]]  # a tie: the fast model's order decides it
    encoded = []

    def rerank(texts: list[str]) -> np.ndarray:
        encoded.extend(texts)
        return np.stack([slow[t] for t in texts]).reshape(len(texts), 6)

    candidates = dense_ranking(lambda texts: np.stack([fast[t] for t in texts]), task, 7)  # (Q, 7)
    ranked = reranked_ranking(candidates, rerank, task, k=5)
    assert ranked.shape == (len(task.queries), 5)
    for query, row, got in zip(task.queries, candidates.tolist(), ranked.tolist()):
        scores = [float(slow[query] @ slow[task.corpus[j]]) for j in row]
        expected = [row[i] for i in sorted(range(len(row)), key=lambda i: (-scores[i], i))][:5]
        assert got == expected
    assert len(encoded) == len(set(encoded))  # each text once
    wanted = {task.corpus[j] for j in candidates.ravel()} | set(task.queries)
    assert set(encoded) == wanted  # the candidates and the queries, nothing else
    found = [bool(set(rel.tolist()) & set(row)) for rel, row in zip(task.relevant, candidates.tolist())]
    assert candidate_recall(task, candidates) == pytest.approx(np.mean(found))


def test_bm25_returns_bm25s_best_scores_with_the_query_itself_left_out():
    splits, labelled = synthetic_split(3)
    words = ["cat", "dog", "river", "piano", "bread", "salt", "moon", "train"]
    rng = np.random.default_rng(0)
    corpus = [" ".join(rng.choice(words, size=4)) + f" item{i}" for i in range(30)]
    relevant = [np.array([(i + 1) % 30]) for i in range(11)]
    task = RetrievalTask(corpus, corpus[:10] + ["piano moon"], relevant, own=np.array([*range(10), -1]))
    ranked = bm25_ranking(task, k=5)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(corpus, show_progress=False), show_progress=False)
    for i, (query, own) in enumerate(zip(task.queries, task.own)):
        scores = retriever.get_scores(bm25s.tokenize([query], return_ids=False, show_progress=False)[0])
        others = sorted((float(scores[j]) for j in range(30) if j != own), reverse=True)
        assert own not in ranked[i]
        np.testing.assert_allclose([scores[j] for j in ranked[i]], others[:5], rtol=1e-6)


def test_the_measures_are_the_mean_over_every_query_even_one_whose_relevant_question_is_never_retrieved():
    task = RetrievalTask([str(i) for i in range(12)], ["a", "b"], [np.array([2, 11]), np.array([5])], np.full(2, -1))
    ranked = np.array([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]])
    expected = mean_of([textbook(list(ranked[0]), {2, 11}), textbook(list(ranked[1]), {5})])
    assert ranking_measures(task, ranked) == pytest.approx(expected)
    assert ranking_measures(task, ranked)["mrr@10"] == pytest.approx(0.25)  # (1/2 + 0) / 2


def test_a_task_without_relevant_questions_or_queries_is_refused():
    with pytest.raises(DupqError, match="at least one relevant"):
        RetrievalTask(corpus=["a", "b"], queries=["c"], relevant=[np.array([], dtype=np.int64)], own=np.array([-1]))
    splits, labelled = synthetic_split(0)
    no_duplicates = make_pairs([(a, b, 0) for a, b in zip(splits.dev.q1, splits.dev.q2)])
    with pytest.raises(DupqError, match="no duplicate pair"):
        held_out_task(Splits(splits.train, splits.val, no_duplicates, no_duplicates, splits.pool), labelled, ("dev",))


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize(
    "words, first_row, parts",
    [
        (["--task", "quora-retrieval"], 8_000, ["test", "dev"]),
        (["--task", "quora-retrieval", "--split", "dev"], 9_000, ["dev"]),
    ],
)
def test_dupq_evaluate_retrieval_json_agrees_with_the_loop(pairs_path, tmp_path_factory, words, first_row, parts):
    # `dupq train` on rows 0-9,999: 8,000 pool, 1,000 test, 1,000 dev
    folder, data = cli_model(pairs_path, tmp_path_factory)
    printed = json.loads(ok("evaluate", folder, "--data", data, *words, "--json").stdout)
    every = read_pairs(data)[0]
    held = every.take(every.rows >= first_row)
    corpus = list(dict.fromkeys([*held.q1, *held.q2]))
    vectors = Model.load(folder).encode(corpus, batch_size=ENCODE_BATCH)  # (N, d), as the command encodes
    position = {t: i for i, t in enumerate(corpus)}
    duplicates = held_duplicates([held])
    expected = loop_measures(lambda query: (vectors @ vectors[position[query]]).tolist(), corpus, duplicates, every)
    queries = len(dict.fromkeys(a for a, _ in duplicates))
    assert (printed["queries"], printed["corpus"], printed["parts"]) == (queries, len(corpus), parts)
    assert printed["model"] == pytest.approx(expected, abs=1e-9)
    assert set(printed["bm25"]) == set(expected)


@pytest.mark.real_data
@pytest.mark.slow
def test_the_bundled_model_on_quoras_held_out_rows(all_pairs):
    result = evaluate_retrieval(Model.load(), all_pairs)
    assert (result["queries"], result["corpus"]) == (7_025, 38_614)
    assert 0.91 < result["model"]["mrr@10"] < 0.94 and 0.90 < result["model"]["ndcg@10"] < 0.94
    assert 0.83 < result["bm25"]["mrr@10"] < 0.87 and result["bm25"]["ndcg@10"] < result["model"]["ndcg@10"]
