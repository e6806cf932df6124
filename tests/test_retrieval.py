"""bench/retrieval.py's ranks against plain loops: the published rank, the filtered rank, the rank
of the first known duplicate, the oracle's MRR and the known-duplicate sets, on small made-up data."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

from dupq.data.pairs import Pairs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from retrieval import RetrievalTask, all_metrics, filtered_ranks, first_known_ranks, known_duplicates, oracle_mrr, ranks  # noqa: E402


def tied_scores(rng: np.random.Generator, q: int, n: int) -> np.ndarray:
    return rng.integers(0, 4, size=(q, n)).astype(np.float32)  # few values: many ties


def expected_rank_loop(row: np.ndarray, wanted: set[int], skip: set[int]) -> float:
    """Expected place of the first of ``wanted`` when ``row`` is sorted high to low, ties in every order."""
    cols = [j for j in range(len(row)) if j not in skip]
    best = max(row[j] for j in wanted)
    above = [j for j in cols if row[j] > best]
    tied = [j for j in cols if row[j] == best]
    places = [next(i for i, j in enumerate(order) if j in wanted) for order in itertools.permutations(tied)]
    return 1 + len(above) + float(np.mean(places))


def random_case(seed: int, q: int = 6, n: int = 7):
    rng = np.random.default_rng(seed)
    scores = tied_scores(rng, q, n)
    own = rng.integers(0, n, size=q)
    target = np.array([rng.choice([j for j in range(n) if j != o]) for o in own])
    known = rng.random((q, n)) < 0.3
    known[np.arange(q), target] = True
    known[np.arange(q), own] = False
    return scores, own, target, known


@pytest.mark.parametrize("seed", range(20))
def test_published_rank_is_the_expected_place_of_the_target_among_ties(seed):
    scores, own, target, _ = random_case(seed)
    expected = [expected_rank_loop(scores[i], {int(target[i])}, {int(own[i])}) for i in range(len(own))]
    np.testing.assert_allclose(ranks(scores, target, own), expected)


@pytest.mark.parametrize("seed", range(20))
def test_filtered_rank_leaves_out_the_other_known_duplicates(seed):
    scores, own, target, known = random_case(seed)
    expected = [
        expected_rank_loop(
            scores[i], {int(target[i])}, {int(own[i])} | (set(np.flatnonzero(known[i])) - {int(target[i])})
        )
        for i in range(len(own))
    ]
    np.testing.assert_allclose(filtered_ranks(scores, target, own, known), expected)


@pytest.mark.parametrize("seed", range(20))
def test_first_known_rank_is_the_expected_place_of_the_first_known_duplicate(seed):
    scores, own, _, known = random_case(seed)
    expected = [expected_rank_loop(scores[i], set(np.flatnonzero(known[i])), {int(own[i])}) for i in range(len(own))]
    np.testing.assert_allclose(first_known_ranks(scores, own, known), expected)


def test_oracle_mrr_is_the_mean_over_every_order_of_the_known_duplicates():
    from scipy import sparse

    known = sparse.csr_matrix(np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1]], dtype=bool))
    loop = []
    for row in known.toarray():
        k = int(row.sum())
        loop.append(np.mean([1 / (order.index(0) + 1) for order in map(list, itertools.permutations(range(k)))]))
    assert oracle_mrr(known) == pytest.approx(np.mean(loop))


def test_known_duplicates_are_the_labelled_pairs_in_both_directions_without_the_query_itself():
    texts = ["a?", "b?", "c?", "d?", "e?"]
    task = RetrievalTask(texts=texts, queries=["a?", "c?"], own=np.array([0, 2]), target=np.array([1, 3]))
    rows = [("a?", "b?", 1), ("e?", "a?", 1), ("a?", "c?", 0), ("d?", "c?", 1), ("c?", "c?", 1), ("x?", "a?", 1)]
    labelled = Pairs(
        ids=[str(i) for i in range(len(rows))],
        q1=[r[0] for r in rows],
        q2=[r[1] for r in rows],
        labels=np.array([r[2] for r in rows], dtype=np.int8),
        rows=np.arange(len(rows)),
    )
    known = known_duplicates(task, labelled).toarray()
    loop = np.zeros_like(known)
    for i, query in enumerate(task.queries):
        for a, b, y in rows:
            for x, other in ((a, b), (b, a)):
                if y == 1 and x == query and other != query and other in texts:
                    loop[i, texts.index(other)] = True
        loop[i, task.target[i]] = True
    np.testing.assert_array_equal(known, loop)
    assert known[0].tolist() == [
        False,
        True,
        False,
        False,
        True,
    ]  # b (the target) and e; not c (label 0), not x (absent)


def test_a_perfect_search_reaches_every_figure_and_the_filtered_and_any_figures_never_fall_below_the_published():
    rng = np.random.default_rng(0)
    n, q = 30, 12
    scores, own, target, known = random_case(1, q, n)
    from scipy import sparse

    task = RetrievalTask(
        texts=[str(i) for i in range(n)], queries=[""] * q, own=own, target=target, known=sparse.csr_matrix(known)
    )
    noisy = all_metrics(lambda s: scores[s] + rng.random((len(scores[s]), n)) * 0.01, task, block=5)
    assert noisy["mrr_filtered"] >= noisy["mrr"] and noisy["mrr_any"] >= noisy["mrr_filtered"]
    perfect = np.where(known, 2.0, 0.0)
    perfect[np.arange(q), target] = 3.0
    assert all_metrics(lambda s: perfect[s], task, block=5) == {
        "recall@1": 1.0,
        "recall@5": 1.0,
        "recall@10": 1.0,
        "mrr": 1.0,
        "mrr_filtered": 1.0,
        "mrr_any": 1.0,
    }


def test_hybrid_score_is_the_cosine_plus_the_weighted_bm25_scaled_by_each_querys_best():
    from retrieval import hybrid_scorer

    rng = np.random.default_rng(3)
    corpus = rng.standard_normal((6, 4)).astype(np.float32)
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    lexical = rng.random((6, 6)).astype(np.float32) * 7
    lexical[2] = 0  # a query sharing no word with any text: its BM25 adds nothing
    task = RetrievalTask(
        texts=[str(i) for i in range(6)], queries=[str(i) for i in range(6)], own=np.arange(6), target=np.zeros(6, int)
    )
    scores = hybrid_scorer(corpus, lambda qs: lexical[[int(q) for q in qs]], task, 0.4)(slice(1, 4))
    for row, i in enumerate(range(1, 4)):
        for j in range(6):
            best = max(lexical[i]) or 1.0
            assert scores[row, j] == pytest.approx(float(corpus[i] @ corpus[j]) + 0.4 * lexical[i, j] / best, abs=1e-5)


@pytest.mark.parametrize("seed", range(10))
def test_closure_adds_every_question_reachable_through_duplicate_labels_and_nothing_else(seed):
    rng = np.random.default_rng(seed)
    words = [f"q{i}?" for i in range(12)]
    rows = [(str(rng.choice(words)), str(rng.choice(words)), int(rng.random() < 0.6)) for _ in range(14)]
    labelled = Pairs(
        ids=[str(i) for i in range(len(rows))],
        q1=[r[0] for r in rows],
        q2=[r[1] for r in rows],
        labels=np.array([r[2] for r in rows], dtype=np.int8),
        rows=np.arange(len(rows)),
    )
    texts = words[:8]  # the collection; q8..q11 appear only in the file, and can link two of it
    own = np.array([0, 3, 5])
    target = np.array([1, 4, 6])
    task = RetrievalTask(texts=texts, queries=[texts[i] for i in own], own=own, target=target)

    def reachable(start: str) -> set[str]:  # breadth-first search over the duplicate rows
        seen, frontier = {start}, [start]
        while frontier:
            x = frontier.pop()
            for a, b, y in rows:
                for u, v in ((a, b), (b, a)):
                    if y == 1 and u == x and v not in seen:
                        seen.add(v)
                        frontier.append(v)
        return seen

    loop = np.zeros((len(own), len(texts)), dtype=bool)
    for i, o in enumerate(own):
        for t in reachable(texts[o]) & set(texts):
            loop[i, texts.index(t)] = True
        loop[i, target[i]] = True
        loop[i, o] = False
    closed = known_duplicates(task, labelled, closure=True).toarray()
    np.testing.assert_array_equal(closed, loop)
    direct = known_duplicates(task, labelled).toarray()
    assert not (direct & ~closed).any()  # the closure only adds
