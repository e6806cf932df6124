"""Removals from an HNSW collection after undoing its newest questions: their cost and the graph rebuilds they cause.

The first ``--questions`` distinct Quora questions are built into an HNSW collection; the newest
``--undo`` share of them is removed in one call (an import undone, a spam wave), which removes more
than a fifth and so rebuilds the graph once in the background. Then ``--removals`` single removals
of the oldest questions, one at a time, each waited on until any rebuild it started has finished
(a removal's whole cost, as a server that keeps taking writes pays it):

* ``undo_s``: the undo and its rebuild;
* ``removals_s``: the single removals and their rebuilds, all together; ``p50_ms`` / ``max_ms`` each;
* ``rebuilds``: graphs built again in all (counted from the collection's log, not from timing);
* ``recall@10``: after all of it, the hits of 200 stored questions as queries against the exact search
  over the stored vectors (:func:`~dupq_lab.speed.filtered_search.recall_at_10`); no removed id is found.

Prints one JSON line. The collection is built in a temporary folder, removed at the end.
"""

from __future__ import annotations

import json
import logging
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
import typer

from dupq.collection.collection import Collection
from dupq.data.questions import read_questions
from dupq.modeling.model import Model
from dupq_lab.options import DATA, Data, Seed, clocked, timed
from dupq_lab.speed.filtered_search import recall_at_10


class Rebuilds(logging.Handler):
    """Counts the collection's "built again" log lines: one a finished graph rebuild."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += "built again" in record.getMessage()


def settled(coll: Collection, seconds: float = 3600.0) -> None:
    """Wait until no graph rebuild of ``coll`` is under way in this process."""
    deadline = time.monotonic() + seconds
    while coll._backend._rebuilding and time.monotonic() < deadline:
        time.sleep(0.01)


def main(
    data: Data = DATA,
    seed: Seed = 0,
    questions: Annotated[int, typer.Option(min=10, help="Distinct questions in the collection.")] = 20_000,
    undo: Annotated[float, typer.Option(min=0.0, max=0.9, help="Share of the newest removed at once.")] = 0.25,
    removals: Annotated[int, typer.Option(min=1, help="Single removals timed after the undo.")] = 100,
) -> None:
    torch.set_num_threads(1)
    qs = read_questions(data)
    texts, keys = qs.texts[:questions], [f"q{i}" for i in range(min(questions, len(qs.texts)))]
    folder = Path(tempfile.mkdtemp()) / "c"
    rebuilds = Rebuilds()
    logger = logging.getLogger("dupq.collection.folder.backend")
    logger.addHandler(rebuilds)
    logger.setLevel(logging.INFO)
    try:
        coll, build_s = clocked(lambda: Collection.build(folder, texts, Model.load(), keys=keys, index="hnsw"))
        with coll:
            newest = keys[len(keys) - int(len(keys) * undo) :]
            _, undo_s = clocked(lambda: (coll.remove(newest), settled(coll)))
            (_, seconds), removals_s = clocked(timed, lambda key: (coll.remove([key]), settled(coll)), keys[:removals])
            live = np.array([i for i, *_ in coll.stored_rows()])  # (N',) the stored ids
            by_id = np.zeros((len(keys), coll.manifest["dim"]), np.float32)  # (N, d): zero where removed
            by_id[live] = coll.stored_vectors()
            queries = by_id[np.random.default_rng(seed).choice(live, 200, replace=False)]  # (200, d)
            found = coll.nearest(queries, 10)[1]  # (200, 10)
            assert np.isin(found[found >= 0], live).all(), "a removed question found"
            recall = recall_at_10(found, queries, by_id, live)
        out = {
            "questions": len(keys),
            "undone": len(newest),
            "removals": len(seconds),
            "undo_s": round(undo_s, 2),
            "removals_s": round(removals_s, 2),
            "p50_ms": round(float(np.percentile(seconds, 50)) * 1000, 2),
            "max_ms": round(max(seconds) * 1000, 1),
            "rebuilds": rebuilds.count,
            "recall@10": round(recall, 4),
            "build_s": round(build_s, 1),
            "threads": 1,
            "machine": platform.machine(),
        }
    finally:
        logger.removeHandler(rebuilds)
        shutil.rmtree(folder.parent, ignore_errors=True)
    print(json.dumps(out))
