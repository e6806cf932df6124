"""HNSW's cost against its recall on every distinct Quora question: which ``M``, ``efConstruction``, ``efSearch``.

For each graph (``--m`` x ``--ef-construction``) built over the bundled model's vectors of the
~537,000 questions, and each ``efSearch`` of ``--ef-search``, one JSON row:

* ``recall@10``: share of the top 10 whose true score reaches the exact 10th score of
  :func:`dupq.index.vectors.search` (ties broken either way count, as dupq-lab search-speed counts);
* ``p50_us`` / ``p99_us``: one query at a time, one thread, ``index.search`` alone (the graph walk:
  what efSearch and M change; encoding and building hits are measured by dupq-lab search-speed);
* ``build_s`` and ``bytes_per_question`` of the graph.

The queries are ``--queries`` stored questions drawn with ``--query-seed``: choose the settings
with ``--query-seed 1`` and report them with the default 0. The last line, ``chosen``, names the
setting whose recall@10 stays at least ``--recall`` two standard errors down (the error of the mean
of the queries' own recalls: a setting just at the bar on one sample of queries misses it on
another), and of those the one with the fewest bytes a question, then the fastest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import faiss
import numpy as np
import torch
import typer

from dupq.data.questions import read_questions
from dupq.index.vectors import search
from dupq.modeling.model import Model
from dupq_lab.options import DATA, Data, ModelFolder, clocked, integers, timed


def timed_single_queries(index: faiss.Index, queries: np.ndarray, k: int) -> np.ndarray:
    """Microseconds per query, one query at a time (after 50 warm-up queries)."""
    for q in queries[:50]:
        index.search(q[None], k)
    return np.asarray(timed(lambda q: index.search(q[None], k), queries)[1]) * 1e6


def recall_at_k(index, queries: np.ndarray, vectors: np.ndarray, exact: np.ndarray, k: int) -> tuple[float, float]:
    """Recall@k over the queries and its standard error (of the mean of the queries' own recalls)."""
    found = index.search(queries, k)[1]  # (Q, k)
    true = np.einsum("qd,qkd->qk", queries, vectors[found])  # (Q, k) the true scores of what was found
    per_query = np.mean(true >= exact[:, -1:] - 1e-6, axis=1)  # (Q,)
    return float(per_query.mean()), float(per_query.std(ddof=1) / np.sqrt(len(per_query)))


def graph(vectors: np.ndarray, m: int, ef_construction: int, graphs: Path | None, build_threads: int) -> tuple:
    """The HNSW graph of ``vectors`` for (M, efConstruction) and its build seconds: read from ``--graphs``
    when built there before (``None`` seconds), else built (and kept there)."""
    kept = graphs / f"hnsw_m{m}_efc{ef_construction}.faiss" if graphs else None
    if kept is not None and kept.exists():
        index = faiss.read_index(str(kept))
        if index.ntotal != len(vectors) or index.d != vectors.shape[1]:
            raise SystemExit(f"{kept} holds {index.ntotal} vectors of width {index.d}, not these {vectors.shape}")
        return index, None
    faiss.omp_set_num_threads(build_threads or faiss.omp_get_max_threads())
    index = faiss.IndexHNSWFlat(vectors.shape[1], m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_construction
    _, build_s = clocked(index.add, vectors)
    if kept is not None:
        graphs.mkdir(parents=True, exist_ok=True)
        faiss.write_index(index, str(kept) + ".tmp")
        Path(str(kept) + ".tmp").rename(kept)
    return index, build_s


def main(
    model: ModelFolder = None,
    data: Data = DATA,
    m: Annotated[str, typer.Option(help="HNSW M values, comma-separated.")] = "16,32,64",
    ef_construction: Annotated[str, typer.Option(help="efConstruction values, comma-separated.")] = "64,200",
    ef_search: Annotated[str, typer.Option(help="efSearch values, comma-separated.")] = "16,24,32,48,64,96,128,192,256",
    queries: Annotated[int, typer.Option(min=1, help="Queries sampled from the questions.")] = 1000,
    query_seed: Annotated[int, typer.Option(help="Seed of the query sample (1 chose the settings).")] = 0,
    recall: Annotated[float, typer.Option(help="The recall@10 a chosen setting must reach.")] = 0.99,
    build_threads: Annotated[int, typer.Option(min=0, help="FAISS threads while building (0: all).")] = 0,
    graphs: Annotated[Optional[Path], typer.Option(help="Folder of built graphs: reuse them, keep new ones.")] = None,
) -> None:

    torch.set_num_threads(1)
    ms, efcs, efss = integers(m), integers(ef_construction), integers(ef_search)
    model = Model.load(model)
    texts = read_questions(data).texts
    vectors = model.encode(texts)  # (N, d)
    rng = np.random.default_rng(query_seed)
    queries = vectors[rng.choice(len(vectors), size=queries, replace=False)]  # (Q, d)
    exact = search(queries, vectors, 10)[0]  # (Q, 10) exact scores
    rows = []
    for m in ms:
        for ef_construction in efcs:
            index, build_s = graph(vectors, m, ef_construction, graphs, build_threads)
            size = faiss.serialize_index(index).nbytes
            faiss.omp_set_num_threads(1)
            for ef_search in efss:
                index.hnsw.efSearch = ef_search
                us = timed_single_queries(index, queries, 10)
                found, se = recall_at_k(index, queries, vectors, exact, 10)
                row = {"m": m, "ef_construction": ef_construction, "ef_search": ef_search}
                row |= {"recall@10": round(found, 4), "recall@10_se": round(se, 4)}
                row |= {f"p{q}_us": round(float(np.percentile(us, q)), 1) for q in (50, 99)}
                row["build_s"] = None if build_s is None else round(build_s, 1)
                row["bytes_per_question"] = round(size / len(vectors), 1)
                rows.append(row)
                print(json.dumps(row), flush=True)
    # two standard errors down: a setting that only just reaches the bar on these queries may miss it on others
    good = [r for r in rows if r["recall@10"] - 2 * r["recall@10_se"] >= recall]
    # memory first (the links are kept for every question; at 10M questions M 32 holds ~1.3 GB more than M 16),
    # then the walk's time (tens of microseconds of a ~1 ms search, and they drift between runs)
    chosen = min(good, key=lambda r: (r["bytes_per_question"], r["p50_us"])) if good else None
    print(json.dumps({"questions": len(vectors), "query_seed": query_seed, "chosen": chosen}))
