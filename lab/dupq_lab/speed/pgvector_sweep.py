"""pgvector's HNSW settings against recall@10: which ``m``, ``ef_construction`` and ``hnsw.ef_search`` a Postgres collection keeps.

The first ``--questions`` distinct Quora questions (bundled model, seeded ``group`` metadata as
in dupq-lab pgvector-speed) are stored in a table of a private pgserver PostgreSQL once per graph
(``--m`` x ``--ef-construction``); each ``--ef-search`` is then searched with ``--queries``
stored questions, one at a time. One JSON row per setting: ``recall@10`` against the exact top 10
(ties count), ``p50_ms`` and the graph's ``build_s``. The last line, ``chosen``, is the cheapest
setting (fewest links, then smallest ef_construction, then ef_search) whose recall@10 reaches
``--recall``."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
import typer

from dupq.index.vectors import IndexConfig
from dupq_lab.options import DATA, Data, Seed, integers, latency_ms, timed
from dupq_lab.speed.pgvector_speed import build, private_postgres, quora, recall_at_10


def main(
    data: Data = DATA,
    seed: Seed = 0,
    questions: Annotated[int, typer.Option(min=100, help="Distinct Quora questions stored.")] = 20_000,
    queries: Annotated[int, typer.Option(min=10, help="Stored questions used as queries.")] = 200,
    m: Annotated[str, typer.Option(help="HNSW links per vector to try.")] = "16,32",
    ef_construction: Annotated[str, typer.Option(help="Candidates while linking, to try.")] = "64,200",
    ef_search: Annotated[str, typer.Option(help="hnsw.ef_search values to try.")] = "10,20,40,80",
    recall: Annotated[float, typer.Option(help="The recall@10 a chosen setting reaches.")] = 0.99,
) -> None:
    torch.set_num_threads(1)
    texts, keys, vectors, groups = quora(data, questions, seed)
    picked = vectors[np.random.default_rng(seed + 1).choice(len(texts), min(queries, len(texts)), replace=False)]
    work = Path(tempfile.mkdtemp(prefix="pgvector-sweep-"))
    rows = []
    try:
        with private_postgres(work) as server:
            for links in integers(m):
                for efc in integers(ef_construction):
                    config = IndexConfig(kind="hnsw", hnsw_m=links, ef_construction=efc)
                    backend, build_s = build(f"{server}&table=m{links}_efc{efc}", config, texts, keys, groups, vectors)
                    try:
                        for efs in integers(ef_search):
                            backend.config = dataclasses.replace(config, ef_search=efs)
                            found, seconds = timed(lambda q, b=backend: b.search(q[None], 10)[1][0], picked)
                            share = recall_at_10(np.array(found), picked, vectors, np.arange(len(vectors)))
                            row = {"m": links, "ef_construction": efc, "ef_search": efs, "recall@10": round(share, 4)}
                            row |= {"p50_ms": latency_ms(seconds)["p50_ms"], "build_s": round(build_s, 1)}
                            rows.append(row)
                            print(json.dumps(row), flush=True)
                    finally:
                        backend.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    passing = [r for r in rows if r["recall@10"] >= recall]
    chosen = min(passing, key=lambda r: (r["m"], r["ef_construction"], r["ef_search"]), default=None)
    print(json.dumps({"chosen": chosen, "questions": len(texts), "queries": len(picked), "recall": recall}))
