"""pgvector beside the folder's FAISS HNSW on N distinct Quora questions: build time, latency, recall@10 plain and filtered.

The first ``--questions`` distinct questions of the Quora file are encoded once by the bundled
model and stored twice through the backends themselves, with the same HNSW settings (the
defaults of :class:`~dupq.index.vectors.IndexConfig`): a folder (SQLite + FAISS) and a table of a
private PostgreSQL 16 + pgvector started by pgserver in a temporary folder. Each question gets a
metadata field ``group`` drawn uniformly from 0..999 (seeded), so a filter keeps 50 %, 5 % or
0.1 % of them. For ``--queries`` stored questions as queries, one at a time on one thread:

* ``build_s``: storing the vectors and building the index (encoding excluded, the same for both);
* ``p50_ms`` / ``p99_ms``: ``Backend.search(vector, 10)`` (pgvector: one SQL query over a local socket);
* ``recall@10``: share of the top 10 whose exact score reaches the exact 10th (ties count), and
  the same under each filter against the exact filtered top 10.

Prints one JSON line.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
import typer

from dupq.collection.location import Location
from dupq.collection.manifest import new_manifest
from dupq.data.questions import read_questions
from dupq.index.vectors import IndexConfig
from dupq.modeling.model import Model
from dupq_lab.options import DATA, Data, Seed, clocked, latency_ms, report, timed
from dupq_lab.speed.filtered_search import recall_at_10

FILTERS = {"50%": 500, "5%": 50, "0.1%": 1}  # groups kept, of 1,000
CHUNK = 50_000


@contextlib.contextmanager
def private_postgres(folder: Path):
    """A pgserver PostgreSQL in ``folder`` for as long as the ``with`` lasts: the URI of its database ``postgres``."""
    import pgserver

    server = pgserver.get_server(folder / "pgdata", cleanup_mode="delete")
    try:
        yield f"postgresql://postgres@/postgres?host={server.get_postmaster_info().socket_dir}"
    finally:
        server.cleanup()


def progress(line: str) -> None:
    """One line on stderr (the JSON result alone goes to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def quora(data: Path, n: int, seed: int) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """The first ``n`` distinct questions, their keys, their vectors ``(n, d)`` (bundled model) and groups ``(n,)``."""
    qs = read_questions(data)
    texts, keys = qs.texts[:n], qs.keys[:n]
    model = Model.load()
    vectors = np.concatenate([model.encode(texts[lo : lo + CHUNK]) for lo in range(0, len(texts), CHUNK)])
    return texts, keys, vectors, np.random.default_rng(seed).integers(0, 1000, len(texts))


def chunks(texts, keys, groups, vectors):
    meta = [json.dumps({"group": int(g)}) for g in groups]
    for lo in range(0, len(texts), CHUNK):
        hi = lo + CHUNK
        yield lo, texts[lo:hi], keys[lo:hi], meta[lo:hi], vectors[lo:hi]


def build(where: str, config: IndexConfig, texts, keys, groups, vectors):
    """A backend at ``where`` holding the questions (built through the backend itself), and its build seconds."""
    location = Location.parse(where)
    manifest = new_manifest(Model.load(), config)
    return clocked(lambda: location.backend().build(location, manifest, chunks(texts, keys, groups, vectors)))


def measure(backend, queries: np.ndarray, vectors: np.ndarray, groups: np.ndarray) -> dict:
    """Latency and recall@10 of ``backend``, plain and under each filter (one query at a time)."""
    for q in queries[:20]:  # warm-up
        backend.search(q[None], 10)
    out = {}
    for name, kept_groups in {"none": None, **FILTERS}.items():
        where = None if kept_groups is None else {"group": list(range(kept_groups))}
        kept = np.ones(len(vectors), bool) if kept_groups is None else groups < kept_groups
        backend.search(queries[:1], 10, where)  # a filter's first use (FAISS reads its ids; Postgres counts them)
        found, seconds = timed(lambda q, w=where: backend.search(q[None], 10, w)[1][0], queries)
        found = np.array([np.pad(f, (0, 10 - len(f)), constant_values=-1) for f in found])
        share = round(recall_at_10(found, queries, vectors, np.flatnonzero(kept)), 4)
        out[name] = {"kept": int(kept.sum()), "recall@10": share, **latency_ms(seconds)}
        progress(f"  filter {name}: {json.dumps(out[name])}")
    return out


def main(
    data: Data = DATA,
    seed: Seed = 0,
    questions: Annotated[int, typer.Option(min=100, help="Distinct Quora questions stored (537,000: all).")] = 20_000,
    queries: Annotated[int, typer.Option(min=10, help="Stored questions used as queries.")] = 200,
) -> None:
    torch.set_num_threads(1)
    texts, keys, vectors, groups = quora(data, questions, seed)
    progress(f"encoded {len(texts)} questions")
    picked = np.random.default_rng(seed + 1).choice(len(texts), min(queries, len(texts)), replace=False)
    config = IndexConfig(kind="hnsw")
    work = Path(tempfile.mkdtemp(prefix="pgvector-speed-"))
    results = {}
    try:
        with private_postgres(work) as server:
            for name, where in (("faiss_hnsw", str(work / "folder")), ("pgvector_hnsw", f"{server}&table=quora")):
                backend, build_s = build(where, config, texts, keys, groups, vectors)
                progress(f"{name}: built in {build_s:.1f} s")
                try:
                    results[name] = {"build_s": round(build_s, 1), **measure(backend, vectors[picked], vectors, groups)}
                    progress(f"{name}: {json.dumps(results[name])}")
                finally:
                    backend.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(
        {
            "questions": len(texts),
            "queries": len(picked),
            "index": {k: v for k, v in vars(config).items() if k in ("kind", "hnsw_m", "ef_construction", "ef_search")},
            "results": results,
            "threads": 1,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        }
    )
