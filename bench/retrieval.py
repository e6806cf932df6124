"""Retrieval quality: does searching with question1 find its duplicate question2? dupq vs BM25.

Two definitions of the collection and the queries, chosen with ``--split``:

* ``test`` (the default, and the one every published figure uses): the collection is every
  distinct question of the test *and* dev splits (~38,600); the queries are the duplicate pairs
  of both splits (~7,600). Kept exactly as first published so that figures stay comparable.
* ``dev``: the collection is the distinct questions of the dev pairs only (~19,900); the queries
  are the dev duplicate pairs only (~3,700). Nothing from the test rows is looked at, so a
  setting can be tuned on this figure.

In both, each duplicate pair is one query: question1 searches the collection and we record the
rank of question2. The query's own entry is left out of its ranking (it is in the collection,
and would trivially come first); pairs whose two texts are identical are skipped. Ranks are
computed over the whole collection, not a top-k cut-off, with ties placed at their expected
position (``1 + #better + #tied / 2``), so neither system gains from an arbitrary tie order.

Quora labels only the pairs it showed its raters, so many queries have *other* labelled duplicates
in the collection (pairs of any row of the data file, train rows included), and a search that
puts one of them first is marked wrong by the published MRR. Two more figures say how much of
the gap is this: ``mrr_filtered`` ranks question2 after the query's other known duplicates are
taken out of the collection (the "filtered" ranking of link prediction, Bordes et al. 2013), and
``mrr_any`` is the rank of the first known duplicate (any of them counts, as in BEIR's Quora
task). ``ceiling`` is the published MRR of an oracle that puts every known duplicate first, in
random order: the most a system can expect from the labels alone.

* dupq: cosine of the model's vectors, i.e. exactly what a flat (exact) collection returns;
* bm25: Okapi BM25 (k1 = 1.2, b = 0.75, Robertson & Zaragoza 2009) over lowercased word tokens,
  written on scikit-learn's sparse count matrix; each query term counted once.

Any encoder can be scored the same way with :func:`retrieval_metrics` (``bench/peers.py`` does)::

    result = retrieval_metrics(model.encode, split_pairs(pairs), "dev")  # {"recall@1", ..., "mrr", ...}

    python bench/retrieval.py [--model runs/model] [--split test|dev] [--data PATH]

Prints one JSON line: {"dupq": {"recall@1", "recall@5", "recall@10", "mrr", "mrr_filtered",
"mrr_any"}, "bm25": {...}, "ceiling", "known_duplicates", "queries", "collection", "split", "model", "fingerprint", "seconds"}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import CountVectorizer

from dupq.data.pairs import Pairs, Splits, default_data_path, read_pairs, split_pairs
from dupq.modeling.model import Model
from dupq.training.batches import duplicate_groups

SPLITS = ("test", "dev")  # the two definitions of the module docstring
BLOCK = 2048  # queries scored at once (memory: BLOCK x collection floats)


@dataclass
class RetrievalTask:
    """One definition's collection and queries (see the module docstring)."""

    texts: list[str]  # (N,) the collection: distinct questions, in order of first appearance
    queries: list[str]  # (Q,) question1 of each duplicate pair used
    own: np.ndarray  # (Q,) index in texts of the query itself, left out of its ranking
    target: np.ndarray  # (Q,) index in texts of its duplicate, question2
    known: sparse.csr_matrix | None = (
        None  # (Q, N) bool: texts labelled a duplicate of query i anywhere (target in, own out)
    )


def retrieval_task(
    splits: Splits, split: str = "test", labelled: Pairs | None = None, closure: bool = False
) -> RetrievalTask:
    """The collection and queries of ``split``: "test" (test + dev pairs) or "dev" (dev pairs only).

    With ``labelled`` (every pair of the data file), ``known`` holds each query's labelled duplicates
    (and theirs, with ``closure``: :func:`known_duplicates`).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, not {split!r}.")
    parts = (splits.test, splits.dev) if split == "test" else (splits.dev,)
    texts = list(dict.fromkeys(q for p in parts for q in p.q1 + p.q2))
    position = {t: i for i, t in enumerate(texts)}
    used = [(a, b) for p in parts for a, b, y in zip(p.q1, p.q2, p.labels) if y == 1 and a != b]
    task = RetrievalTask(
        texts=texts,
        queries=[a for a, _ in used],
        own=np.array([position[a] for a, _ in used], dtype=np.int64),
        target=np.array([position[b] for _, b in used], dtype=np.int64),
    )
    if labelled is not None:
        task.known = known_duplicates(task, labelled, closure)
    return task


def known_duplicates(task: RetrievalTask, labelled: Pairs, closure: bool = False) -> sparse.csr_matrix:
    """``(Q, N)`` bool: for each query, the collection's texts labelled its duplicate in ``labelled``.

    Direct labels only by default: a pair counts where a row of the file says so. With ``closure``,
    duplicates of duplicates count too, through any question of the file (A ~ B and B ~ C make
    A ~ C), as sentence-transformers' Quora retrieval split does. A query's own text is never its
    duplicate; its target always is.
    """
    position = {t: i for i, t in enumerate(task.texts)}
    neighbours: dict[int, set[int]] = defaultdict(set)  # collection index -> its duplicates' (may hold itself)
    if closure:
        group = duplicate_groups(task.texts, labelled.q1, labelled.q2, labelled.labels)  # text -> its group's id
        members: dict[int, set[int]] = defaultdict(set)
        for i, t in enumerate(task.texts):
            members[group[t]].add(i)
        for i, t in enumerate(task.texts):
            neighbours[i] = members[group[t]]
    else:
        for a, b, y in zip(labelled.q1, labelled.q2, labelled.labels):
            i, j = position.get(a), position.get(b)
            if y == 1 and i is not None and j is not None and i != j:
                neighbours[i].add(j)
                neighbours[j].add(i)
    cells = [
        (q, j)
        for q, (own, target) in enumerate(zip(task.own, task.target))
        for j in (neighbours[own] | {target}) - {own}
    ]
    rows, cols = np.array(cells, dtype=np.int64).reshape(-1, 2).T
    return sparse.csr_matrix((np.ones(len(rows), dtype=bool), (rows, cols)), shape=(len(task.own), len(task.texts)))


def oracle_mrr(known: sparse.csr_matrix) -> float:
    """Published MRR of a search that ranks every known duplicate first, in random order.

    With k known duplicates the target's place is uniform on 1..k: expected reciprocal rank H_k / k.
    """
    k = np.diff(known.indptr)
    harmonic = np.cumsum(1 / np.arange(1, k.max() + 1))
    return float(np.mean(harmonic[k - 1] / k))


def bm25_scorer(docs: list[str], k1: float = 1.2, b: float = 0.75):
    """``score(queries) -> (Q, N)`` BM25 scores of every doc for each query."""
    vectorizer = CountVectorizer(lowercase=True, token_pattern=r"(?u)\b\w+\b", dtype=np.float32)
    tf = vectorizer.fit_transform(docs).tocsr()  # (N, V) term counts
    n = tf.shape[0]
    lengths = np.asarray(tf.sum(1)).ravel()  # (N,)
    df = np.bincount(tf.indices, minlength=tf.shape[1])  # (V,)
    idf = np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)  # (V,)
    rows = np.repeat(np.arange(n), np.diff(tf.indptr))
    norm = k1 * (1 - b + b * lengths[rows] / lengths.mean())
    weights = tf.copy()
    weights.data = idf[tf.indices] * tf.data * (k1 + 1) / (tf.data + norm)
    weights_t = weights.T.tocsr()  # (V, N)

    def score(queries: list[str]) -> np.ndarray:
        q = vectorizer.transform(queries)
        q.data[:] = 1.0  # each query term once
        return (q @ weights_t).toarray()  # (Q, N)

    return score


def ranks(scores: np.ndarray, target: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Expected rank of ``target[i]`` in row ``i`` of ``scores (Q, N)``, leaving out column ``own[i]``."""
    rows = np.arange(len(scores))
    t = scores[rows, target][:, None]  # (Q, 1)
    s_own = scores[rows, own]
    better = (scores > t).sum(1) - (s_own > t[:, 0])
    tied = (scores == t).sum(1) - 1 - (s_own == t[:, 0])
    return 1 + better + tied / 2


def filtered_ranks(scores: np.ndarray, target: np.ndarray, own: np.ndarray, known: np.ndarray) -> np.ndarray:
    """:func:`ranks` with the other known duplicates (``known (Q, N)`` bool, target in) taken out."""
    others = known.copy()
    others[np.arange(len(scores)), target] = False
    return ranks(np.where(others, -np.inf, scores), target, own)


def first_known_ranks(scores: np.ndarray, own: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Expected rank of the best-scored known duplicate, ties broken at random.

    With ``t`` the best known score, ``m`` known and ``n`` other texts tied at ``t``, the first of
    the ``m + n`` tied texts to be a known one sits at ``n / (m + 1)`` past the ones above ``t``.
    """
    rows = np.arange(len(scores))
    best = np.where(known, scores, -np.inf).max(1)[:, None]  # (Q, 1)
    other = ~known
    other[rows, own] = False
    above = ((scores > best) & other).sum(1)
    tied_other = ((scores == best) & other).sum(1)
    tied_known = ((scores == best) & known).sum(1)
    return 1 + above + tied_other / (tied_known + 1)


def hybrid_scorer(
    corpus: np.ndarray, bm25: Callable[[list[str]], np.ndarray], task: RetrievalTask, weight: float
) -> Callable[[slice], np.ndarray]:
    """Scores ``cosine + weight * BM25 / max BM25`` of queries ``s`` (each query's BM25 scaled to at most 1)."""

    def score(s: slice) -> np.ndarray:
        lexical = bm25(task.queries[s])
        return corpus[task.own[s]] @ corpus.T + weight * lexical / np.maximum(lexical.max(1, keepdims=True), 1e-9)

    return score


def task_ranks(
    score: Callable[[slice], np.ndarray], task: RetrievalTask, block: int = BLOCK, how: str = "published"
) -> np.ndarray:
    """``(Q,)`` ranks of every query's duplicate; ``score(s)`` gives the ``(len(s), N)`` scores of queries ``s``.

    ``how``: "published" (question2's rank), "filtered" or "any" (both need ``task.known``; see the module docstring).
    """

    def block_ranks(s: slice) -> np.ndarray:
        scores = score(s)
        if how == "published":
            return ranks(scores, task.target[s], task.own[s])
        known = task.known[s].toarray()
        if how == "filtered":
            return filtered_ranks(scores, task.target[s], task.own[s], known)
        return first_known_ranks(scores, task.own[s], known)

    return np.concatenate([block_ranks(slice(i, i + block)) for i in range(0, len(task.own), block)])


def all_metrics(score: Callable[[slice], np.ndarray], task: RetrievalTask, block: int = BLOCK) -> dict[str, float]:
    """:func:`metrics` of the published ranks, with ``mrr_filtered`` and ``mrr_any`` where ``task.known`` is set."""
    out = metrics(task_ranks(score, task, block))
    if task.known is not None:
        for how in ("filtered", "any"):
            out[f"mrr_{how}"] = float(np.mean(1 / task_ranks(score, task, block, how)))
    return out


def metrics(r: np.ndarray) -> dict[str, float]:
    return {
        "recall@1": float(np.mean(r <= 1)),
        "recall@5": float(np.mean(r <= 5)),
        "recall@10": float(np.mean(r <= 10)),
        "mrr": float(np.mean(1 / r)),
    }


def retrieval_metrics(
    encode: Callable[[list[str]], np.ndarray],
    splits: Splits,
    split: str = "test",
    block: int = BLOCK,
    labelled: Pairs | None = None,
    closure: bool = False,
) -> dict:
    """Recall@1/5/10 and MRR of cosine search with ``encode`` (texts -> unit vectors ``(N, d)`` float32).

    Returns ``{"recall@1", "recall@5", "recall@10", "mrr", "queries", "collection", "split"}``, and
    with ``labelled`` (every pair of the data file) ``mrr_filtered``, ``mrr_any``, ``ceiling`` and
    ``known_duplicates`` (how many queries have more than one, and the most any has) too.
    Every query is a member of the collection, so its vector is the collection's: each text is
    encoded once.
    """
    task = retrieval_task(splits, split, labelled, closure)
    corpus = np.asarray(encode(task.texts), dtype=np.float32)  # (N, d)
    queries = corpus[task.own]  # (Q, d)
    out = all_metrics(lambda s: queries[s] @ corpus.T, task, block)
    if task.known is not None:
        out["ceiling"] = oracle_mrr(task.known)
        per_query = np.diff(task.known.indptr)
        out["known_duplicates"] = {
            "queries_with_more_than_one": int((per_query > 1).sum()),
            "most": int(per_query.max()),
        }
    return {**out, "queries": len(task.own), "collection": len(task.texts), "split": split}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: the bundled model)")
    parser.add_argument(
        "--data", type=Path, default=None, help="Quora pairs file (default: $DUPQ_DATA or ../shared/data/...)"
    )
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default="test",
        help="test: test+dev collection and queries (published figures); dev: dev pairs only",
    )
    parser.add_argument("--block", type=int, default=BLOCK, help="queries scored at once (memory: block x N floats)")
    parser.add_argument(
        "--closure",
        action="store_true",
        help="known duplicates include duplicates of duplicates (mrr_filtered, mrr_any, ceiling); the published MRR is unchanged",
    )
    parser.add_argument(
        "--hybrid",
        type=float,
        nargs="*",
        default=[],
        metavar="W",
        help="also score cosine + W x BM25 / (the query's best BM25), for each W given",
    )
    args = parser.parse_args()

    model = Model.load(args.model)
    pairs, _ = read_pairs(args.data or default_data_path())
    splits = split_pairs(pairs)

    started = time.perf_counter()
    dense = retrieval_metrics(model.encode, splits, args.split, args.block, labelled=pairs, closure=args.closure)
    dupq_seconds = time.perf_counter() - started

    started = time.perf_counter()
    task = retrieval_task(splits, args.split, pairs, args.closure)
    score = bm25_scorer(task.texts)
    lexical = all_metrics(lambda s: score(task.queries[s]), task, args.block)
    bm25_seconds = time.perf_counter() - started
    hybrid = {
        str(w): all_metrics(hybrid_scorer(model.encode(task.texts), score, task, w), task, args.block)
        for w in args.hybrid
    }

    print(
        json.dumps(
            {
                "dupq": {k: dense[k] for k in ("recall@1", "recall@5", "recall@10", "mrr", "mrr_filtered", "mrr_any")},
                "bm25": lexical,
                **({"hybrid": hybrid} if hybrid else {}),
                "ceiling": dense["ceiling"],
                "known_duplicates": dense["known_duplicates"],
                "queries": dense["queries"],
                "collection": dense["collection"],
                "split": args.split,
                **({"closure": True} if args.closure else {}),
                "model": str(args.model or "bundled"),
                "fingerprint": model.fingerprint(),
                "seconds": {"dupq": round(dupq_seconds, 1), "bm25": round(bm25_seconds, 1)},
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
