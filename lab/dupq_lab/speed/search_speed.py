"""Speed of a collection of every distinct Quora question (~537,000): build, size, latency, throughput.

For each index kind (flat = exact, hnsw = approximate, ivfpq = compressed and re-ranked exactly):

* ``build_s``: ``Collection.build`` from the question texts (encode + SQLite + FAISS + write),
  after reading the file (``read_s``, reported once);
* ``size_mb``: the collection folder on disk; ``open_s``: ``Collection.open`` of it;
* ``bytes_per_question``: the FAISS index file over the question count. FAISS holds in memory
  what it serialises (vectors or codes, ids, graph links, centroids), so this is the index's
  memory per question; the SQLite store stays on disk (the OS caches what is read);
* single queries: ``coll.search([q], k=10)`` one at a time over ``--queries`` stored questions
  (a random, seeded sample), after a warm-up: p50 / p99 in ms, and the split between encoding
  (``encode_p50_ms``) and the FAISS search (``index_p50_ms``);
* batches: ``coll.search(batch, k=10)`` over batches of 256: queries per second;
* ``recall@10``: share of its top 10 whose true score reaches the exact 10th score of
  :func:`dupq.index.vectors.search` (ties broken either way count; 1.0 for flat up to rounding).

IVF-PQ's settings (``--nlist``, ``--pq-m``, ``--nprobe``, ``--rerank``) were chosen with
``--query-seed 1`` (another sample of queries) and are reported with the default seed 0.

Prints one JSON line. Collections are built in a temporary folder, removed at the end unless
``--keep DIR`` names where to build them.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated, Optional

import faiss
import numpy as np
import torch
import typer

from dupq.collection.collection import Collection
from dupq.collection.folder.backend import INDEX_FILE
from dupq.data.questions import read_questions
from dupq.index.vectors import IndexConfig, search
from dupq.modeling.model import Model
from dupq_lab.options import DATA, Data, ModelFolder, clocked, latency_ms

SETTINGS = {"hnsw": ("hnsw_m", "ef_construction", "ef_search"), "ivfpq": ("nlist", "pq_m", "nprobe", "rerank")}


def folder_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def measure(coll: Collection, queries: list[str], batches: int) -> dict:
    for q in queries[:20]:  # warm-up
        coll.search([q], k=10)
    total, encode, index = [], [], []
    for q in queries:
        total.append(clocked(coll.search, [q], k=10)[1])
        v, seconds = clocked(coll.model.encode, [q])
        encode.append(seconds)
        index.append(clocked(coll.nearest, v, 10)[1])
    rng = np.random.default_rng(1)
    batch_queries = [[queries[i] for i in rng.integers(0, len(queries), 256)] for _ in range(batches)]
    qps = 256 * batches / clocked(lambda: [coll.search(batch, k=10) for batch in batch_queries])[1]
    parts = {"encode_p50_ms": latency_ms(encode)["p50_ms"], "index_p50_ms": latency_ms(index)["p50_ms"]}
    return {**latency_ms(total), **parts, "batch256_qps": round(qps, 1)}


def main(
    model: ModelFolder = None,
    data: Data = DATA,
    index: Annotated[str, typer.Option(help="Comma-separated kinds to measure.")] = "flat,hnsw,ivfpq",
    query_seed: Annotated[int, typer.Option(help="Seed of the query sample (1 for choosing settings).")] = 0,
    nlist: Annotated[int, typer.Option(help="ivfpq nlist.")] = IndexConfig().nlist,
    pq_m: Annotated[int, typer.Option(help="ivfpq bytes a code.")] = IndexConfig().pq_m,
    nprobe: Annotated[int, typer.Option(help="ivfpq nprobe.")] = IndexConfig().nprobe,
    rerank: Annotated[int, typer.Option(help="ivfpq re-ranked candidates.")] = IndexConfig().rerank,
    queries: Annotated[int, typer.Option(min=1, help="Single queries timed (and used for recall).")] = 1000,
    batches: Annotated[int, typer.Option(min=1, help="Batches of 256 timed for throughput.")] = 20,
    keep: Annotated[Optional[Path], typer.Option(help="Build the collections in this folder and keep them.")] = None,
    threads: Annotated[int, typer.Option(min=0, help="torch and FAISS threads (0: their defaults, one per core).")] = 0,
) -> None:
    if threads:
        torch.set_num_threads(threads)
        faiss.omp_set_num_threads(threads)

    model_folder, model = model, Model.load(model)
    qs, read_s = clocked(read_questions, data)
    result: dict = {
        "questions": len(qs),
        "read_s": round(read_s, 1),
        "model": str(model_folder or "bundled"),
        "threads": {"torch": torch.get_num_threads(), "faiss": faiss.omp_get_max_threads()},
    }
    rng = np.random.default_rng(query_seed)
    queries = [qs.texts[i] for i in rng.choice(len(qs), size=min(queries, len(qs)), replace=False)]
    work = keep or Path(tempfile.mkdtemp(prefix="dupq-speed-"))
    exact = None
    try:
        for kind in index.split(","):
            folder = work / f"quora-{kind}"
            config = IndexConfig(kind, nlist=nlist, pq_m=pq_m, nprobe=nprobe, rerank=rerank)
            started = time.perf_counter()
            Collection.build(folder, qs.texts, model, keys=qs.keys, index=config).close()
            build_s = time.perf_counter() - started
            coll, open_s = clocked(Collection.open, folder, model)
            result[kind] = {
                "build_s": round(build_s, 1),
                "size_mb": round(folder_mb(folder), 1),
                "open_s": round(open_s, 1),
                "bytes_per_question": round((folder / INDEX_FILE).stat().st_size / len(qs), 1),
                **measure(coll, queries, batches),
            }
            if kind in SETTINGS:
                result[kind]["settings"] = {name: getattr(config, name) for name in SETTINGS[kind]}
            if exact is None:  # the reference: the pure exact search over the stored vectors
                vectors = coll.stored_vectors()  # (N, d)
                query_vectors = model.encode(queries)  # (Q, d)
                exact = search(query_vectors, vectors, 10)[0]  # (Q, 10) exact scores
            found = coll.nearest(query_vectors, 10)[1]  # (Q, 10)
            coll.close()
            # A hit counts when its true score reaches the exact 10th score: Quora holds many questions
            # with identical vectors, and which of a tie fills the last places is arbitrary.
            true = np.einsum("qd,qkd->qk", query_vectors, vectors[found])  # (Q, 10)
            result[kind]["recall@10"] = round(float(np.mean(true >= exact[:, -1:] - 1e-6)), 4)
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))
