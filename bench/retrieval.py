"""Retrieval quality: does searching with question1 find its duplicate question2? dupq vs BM25.

The collection is every distinct question of the test and dev splits (~40,000). Each duplicate
pair of those splits is one query: question1 searches the collection and we record the rank of
question2. The query's own entry is left out of its ranking (it is in the collection, and would
trivially come first); pairs whose two texts are identical are skipped. Ranks are computed over
the whole collection, not a top-k cut-off, with ties placed at their expected position
(``1 + #better + #tied / 2``), so neither system gains from an arbitrary tie order.

* dupq: cosine of the model's vectors, i.e. exactly what a flat (exact) collection returns;
* bm25: Okapi BM25 (k1 = 1.2, b = 0.75, Robertson & Zaragoza 2009) over lowercased word tokens,
  written on scikit-learn's sparse count matrix; each query term counted once.

    python bench/retrieval.py --model runs/model [--data PATH]

Prints one JSON line: {"dupq": {"recall@1", "recall@5", "recall@10", "mrr"}, "bm25": {...}, ...}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer

from dupq.data import default_data_path, read_pairs, split_pairs
from dupq.model import Model


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


def metrics(r: np.ndarray) -> dict[str, float]:
    return {
        "recall@1": float(np.mean(r <= 1)),
        "recall@5": float(np.mean(r <= 5)),
        "recall@10": float(np.mean(r <= 10)),
        "mrr": float(np.mean(1 / r)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: the bundled model)")
    parser.add_argument("--data", type=Path, default=None, help="Quora pairs file (default: $DUPQ_DATA or ../shared/data/...)")
    parser.add_argument("--block", type=int, default=2048, help="queries scored at once (memory: block x N floats)")
    args = parser.parse_args()

    model = Model.load(args.model)
    pairs, _ = read_pairs(args.data or default_data_path())
    splits = split_pairs(pairs)
    texts = list(dict.fromkeys(splits.test.q1 + splits.test.q2 + splits.dev.q1 + splits.dev.q2))
    position = {t: i for i, t in enumerate(texts)}
    labels = np.r_[splits.test.labels, splits.dev.labels]
    used = [(a, b) for a, b, y in zip(splits.test.q1 + splits.dev.q1, splits.test.q2 + splits.dev.q2, labels) if y == 1 and a != b]
    dup_q1 = [a for a, _ in used]
    own = np.array([position[a] for a, _ in used])  # (Q,) the query's own entry, left out
    target = np.array([position[b] for _, b in used])  # (Q,) its duplicate

    started = time.perf_counter()
    corpus = model.encode(texts)  # (N, d)
    queries = model.encode(dup_q1)  # (Q, d)
    dense = np.concatenate([ranks(queries[i : i + args.block] @ corpus.T, target[i : i + args.block], own[i : i + args.block]) for i in range(0, len(own), args.block)])
    dupq_seconds = time.perf_counter() - started

    started = time.perf_counter()
    score = bm25_scorer(texts)
    lexical = np.concatenate([ranks(score(dup_q1[i : i + args.block]), target[i : i + args.block], own[i : i + args.block]) for i in range(0, len(own), args.block)])
    bm25_seconds = time.perf_counter() - started

    print(json.dumps({
        "dupq": metrics(dense),
        "bm25": metrics(lexical),
        "queries": len(own),
        "collection": len(texts),
        "model": str(args.model or "bundled"),
        "fingerprint": model.fingerprint(),
        "seconds": {"dupq": round(dupq_seconds, 1), "bm25": round(bm25_seconds, 1)},
    }))


if __name__ == "__main__":
    sys.exit(main())
