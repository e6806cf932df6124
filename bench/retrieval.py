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

* dupq: cosine of the model's vectors, i.e. exactly what a flat (exact) collection returns;
* bm25: Okapi BM25 (k1 = 1.2, b = 0.75, Robertson & Zaragoza 2009) over lowercased word tokens,
  written on scikit-learn's sparse count matrix; each query term counted once.

Any encoder can be scored the same way with :func:`retrieval_metrics` (``bench/peers.py`` does)::

    result = retrieval_metrics(model.encode, split_pairs(pairs), "dev")  # {"recall@1", ..., "mrr", ...}

    python bench/retrieval.py [--model runs/model] [--split test|dev] [--data PATH]

Prints one JSON line: {"dupq": {"recall@1", "recall@5", "recall@10", "mrr"}, "bm25": {...},
"queries", "collection", "split", "model", "fingerprint", "seconds"}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer

from dupq.data import Splits, default_data_path, read_pairs, split_pairs
from dupq.model import Model

SPLITS = ("test", "dev")  # the two definitions of the module docstring
BLOCK = 2048  # queries scored at once (memory: BLOCK x collection floats)


@dataclass
class RetrievalTask:
    """One definition's collection and queries (see the module docstring)."""

    texts: list[str]  # (N,) the collection: distinct questions, in order of first appearance
    queries: list[str]  # (Q,) question1 of each duplicate pair used
    own: np.ndarray  # (Q,) index in texts of the query itself, left out of its ranking
    target: np.ndarray  # (Q,) index in texts of its duplicate, question2


def retrieval_task(splits: Splits, split: str = "test") -> RetrievalTask:
    """The collection and queries of ``split``: "test" (test + dev pairs) or "dev" (dev pairs only)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, not {split!r}.")
    parts = (splits.test, splits.dev) if split == "test" else (splits.dev,)
    texts = list(dict.fromkeys(q for p in parts for q in p.q1 + p.q2))
    position = {t: i for i, t in enumerate(texts)}
    used = [(a, b) for p in parts for a, b, y in zip(p.q1, p.q2, p.labels) if y == 1 and a != b]
    return RetrievalTask(
        texts=texts,
        queries=[a for a, _ in used],
        own=np.array([position[a] for a, _ in used], dtype=np.int64),
        target=np.array([position[b] for _, b in used], dtype=np.int64),
    )


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


def task_ranks(score: Callable[[slice], np.ndarray], task: RetrievalTask, block: int = BLOCK) -> np.ndarray:
    """``(Q,)`` ranks of every query's duplicate; ``score(s)`` gives the ``(len(s), N)`` scores of queries ``s``."""
    blocks = (slice(i, i + block) for i in range(0, len(task.own), block))
    return np.concatenate([ranks(score(s), task.target[s], task.own[s]) for s in blocks])


def metrics(r: np.ndarray) -> dict[str, float]:
    return {
        "recall@1": float(np.mean(r <= 1)),
        "recall@5": float(np.mean(r <= 5)),
        "recall@10": float(np.mean(r <= 10)),
        "mrr": float(np.mean(1 / r)),
    }


def retrieval_metrics(
    encode: Callable[[list[str]], np.ndarray], splits: Splits, split: str = "test", block: int = BLOCK
) -> dict:
    """Recall@1/5/10 and MRR of cosine search with ``encode`` (texts -> unit vectors ``(N, d)`` float32).

    Returns ``{"recall@1", "recall@5", "recall@10", "mrr", "queries", "collection", "split"}``.
    Every query is a member of the collection, so its vector is the collection's: each text is
    encoded once.
    """
    task = retrieval_task(splits, split)
    corpus = np.asarray(encode(task.texts), dtype=np.float32)  # (N, d)
    queries = corpus[task.own]  # (Q, d)
    r = task_ranks(lambda s: queries[s] @ corpus.T, task, block)  # (Q,)
    return {**metrics(r), "queries": len(task.own), "collection": len(task.texts), "split": split}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: the bundled model)")
    parser.add_argument("--data", type=Path, default=None, help="Quora pairs file (default: $DUPQ_DATA or ../shared/data/...)")
    parser.add_argument("--split", choices=SPLITS, default="test", help="test: test+dev collection and queries (published figures); dev: dev pairs only")
    parser.add_argument("--block", type=int, default=BLOCK, help="queries scored at once (memory: block x N floats)")
    args = parser.parse_args()

    model = Model.load(args.model)
    pairs, _ = read_pairs(args.data or default_data_path())
    splits = split_pairs(pairs)

    started = time.perf_counter()
    dense = retrieval_metrics(model.encode, splits, args.split, args.block)
    dupq_seconds = time.perf_counter() - started

    started = time.perf_counter()
    task = retrieval_task(splits, args.split)
    score = bm25_scorer(task.texts)
    lexical = task_ranks(lambda s: score(task.queries[s]), task, args.block)
    bm25_seconds = time.perf_counter() - started

    print(json.dumps({
        "dupq": {k: dense[k] for k in ("recall@1", "recall@5", "recall@10", "mrr")},
        "bm25": metrics(lexical),
        "queries": dense["queries"],
        "collection": dense["collection"],
        "split": args.split,
        "model": str(args.model or "bundled"),
        "fingerprint": model.fingerprint(),
        "seconds": {"dupq": round(dupq_seconds, 1), "bm25": round(bm25_seconds, 1)},
    }))


if __name__ == "__main__":
    sys.exit(main())
