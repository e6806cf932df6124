"""Filtered (scoped) search on every distinct Quora question: recall@10 against the exact filtered search, and its cost.

Each question gets a synthetic metadata field ``group``, an integer drawn uniformly from 0..999
(seeded); a filter on ``group`` keeps from all of the collection down to 0.1 % of it (:data:`FILTERS`).
For each filter and a seeded sample of stored questions as queries:

* ``recall@10``: share of the collection's top 10 whose exact score reaches the exact 10th score
  among the questions the filter keeps (:func:`dupq.index.vectors.search` over their stored
  vectors; ties broken either way count);
* ``p50_ms`` / ``p99_ms``: ``Collection.nearest(vector, 10, where=...)`` one query at a time, after
  the filter's matching ids were read once (``first_filter_ms``: that read, SQLite's
  ``json_extract`` over every row); ``unfiltered_p50_ms`` for the same queries without a filter, and
  ``vs_unfiltered``, the filter's p50 over it: a search's cost must not jump with the filter's width;
* ``after_one_removal_p50_ms``: the unfiltered search again once one question is removed (every
  search then keeps to the others), and ``vs_before`` (put back at the end).

``--questions`` keeps the first N distinct questions (e.g. 19,000 for HNSW, 42,000 for ivfpq: sizes
where the exact path and the index's own disagreed most). Prints one JSON line. The collection is built in a temporary folder (removed at the end) unless
``--keep DIR`` names one (built there once, reused after).
"""

from __future__ import annotations

import json
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import torch
import typer

from dupq.collection.collection import Collection
from dupq.data.questions import read_questions
from dupq.index.vectors import search
from dupq.modeling.model import Model
from dupq_lab.options import DATA, Data, Index, Seed, clocked, latency_ms, timed

FILTERS = {"100%": 1000, "67%": 667, "50%": 500, "33%": 333, "5%": 50, "1%": 10, "0.1%": 1}  # groups kept, of 1,000


def recall_at_10(found: np.ndarray, queries: np.ndarray, vectors: np.ndarray, kept: np.ndarray) -> float:
    """Mean share of each row of ``found`` (ids) whose exact score reaches the exact 10th among ``kept`` ids."""
    best, _ = search(queries, vectors[kept], 10)  # (Q, 10)
    shares = [
        np.sum(vectors[ids[ids >= 0]] @ queries[q] >= best[q, -1] - 1e-6) / best.shape[1] for q, ids in enumerate(found)
    ]
    return float(np.mean(shares))


def main(
    data: Data = DATA,
    seed: Seed = 0,
    index: Index = "hnsw",
    queries: Annotated[
        int, typer.Option(min=1, help="Queries timed and compared with the exact filtered search.")
    ] = 200,
    keep: Annotated[Optional[Path], typer.Option(help="Build the collection here once and reuse it.")] = None,
    questions: Annotated[
        Optional[int], typer.Option(min=1, help="Keep the first N distinct questions (default: all).")
    ] = None,
) -> None:
    torch.set_num_threads(1)
    folder = keep or Path(tempfile.mkdtemp()) / "quora"
    rng = np.random.default_rng(seed)
    build_s = None
    if not folder.exists():
        qs = read_questions(data)
        texts, keys = qs.texts[:questions], (qs.keys[:questions] if qs.keys else None)
        groups = rng.integers(0, 1000, len(texts))
        started = time.perf_counter()
        Collection.build(
            folder, texts, Model.load(), keys=keys, metadata=[{"group": int(g)} for g in groups], index=index
        ).close()
        build_s = round(time.perf_counter() - started, 1)
    try:
        with Collection.open(folder) as coll:
            vectors = coll.stored_vectors()  # (N, d), in id order: a built collection's ids are 0..N-1
            rows = coll.stored_rows()
            group = np.array([meta["group"] for _, _, _, meta in rows])
            picked = np.random.default_rng(seed + 1).choice(len(vectors), queries, replace=False)
            query_vectors = vectors[picked]  # (Q, d)
            coll.nearest(query_vectors[:5], 10)  # warm-up
            _, plain = timed(lambda q: coll.nearest(q[None], 10), query_vectors)
            results = {}
            for name, kept_groups in FILTERS.items():
                where = {"group": list(range(kept_groups))}
                _, first = clocked(coll.nearest, query_vectors[:1], 10, where=where)  # reads the matching ids once
                _, seconds = timed(lambda q, w=where: coll.nearest(q[None], 10, where=w), query_vectors)
                found = coll.nearest(query_vectors, 10, where=where)[1]
                kept = np.flatnonzero(group < kept_groups)
                assert np.isin(found[found >= 0], kept).all(), "a hit outside the filter"
                share = round(recall_at_10(found, query_vectors, vectors, kept), 4)
                results[name] = {"kept": len(kept), "recall@10": share, **latency_ms(seconds)}
                results[name]["first_filter_ms"] = round(first * 1000, 1)
            unfiltered = float(np.percentile(plain, 50))
            for row in results.values():
                row["vs_unfiltered"] = round(row["p50_ms"] / 1000 / unfiltered, 2)
            # one question removed (not a query): every search now keeps to the others
            gone = next(int(i) for i in range(len(rows) - 1, -1, -1) if i not in set(picked.tolist()))
            _, key, text, meta = rows[gone]
            coll.remove([key])
            coll.nearest(query_vectors[:5], 10)  # warm-up (reads the removal)
            _, after = timed(lambda q: coll.nearest(q[None], 10), query_vectors)
            coll.add([text], metadata=[meta], keys=[key])  # put back (a kept collection is reused)
            out = {
                "questions": len(vectors),
                "index": coll.manifest["index"]["kind"],
                "queries": queries,
                "filters": results,
                "unfiltered_p50_ms": round(unfiltered * 1000, 3),
                "after_one_removal_p50_ms": round(float(np.percentile(after, 50)) * 1000, 3),
                "vs_before": round(float(np.percentile(after, 50)) / unfiltered, 2),
                "build_s": build_s,
                "threads": 1,
                "machine": platform.machine(),
            }
    finally:
        if keep is None:
            shutil.rmtree(folder.parent, ignore_errors=True)
    print(json.dumps(out))
