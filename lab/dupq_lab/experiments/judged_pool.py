"""The pool to judge for the help-desk yardstick's judged relevance (TREC pooling), blind to the models.

The yardstick (:mod:`dupq.evaluation.tasks`, ``help-desks``) knows one relevant question per new
question: its own old one. A Quora distractor (or another desk's old question) that asks the same
thing counts as wrong. To judge such hits, the pool takes, for every new question of both halves,
the first ``--depth`` hits of each model (``--model``, default the bundled model, repeatable) that
are not its own old question, and writes them as ``split, new, candidate`` rows, each pair once,
shuffled with ``--seed`` and without scores or ranks, so that whoever labels them sees neither.
The labels go in ``yardsticks/help_desks_judged.tsv`` (:func:`dupq.evaluation.tasks.read_judged`).

Prints one JSON line: the pool's size, per half and per model.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Annotated, Optional

import typer

from dupq.evaluation.tasks import SPLITS, shipped_help_desk_task
from dupq.index.vectors import search
from dupq.modeling.model import ENCODE_BATCH, Model
from dupq_lab.options import DATA, Data, one_sentence


@one_sentence
def main(
    out: Annotated[Path, typer.Option(help="The pool file to write (split, new, candidate; no scores).")],
    model: Annotated[
        Optional[list[str]], typer.Option(help="A model folder or name to pool from (bundled: the bundled model).")
    ] = None,
    depth: Annotated[
        int, typer.Option(min=1, help="Hits of each search, other than the own old question, pooled.")
    ] = 1,
    seed: Annotated[int, typer.Option(help="Seed of the shuffle.")] = 0,
    data: Data = DATA,
) -> None:
    tasks = {split: shipped_help_desk_task(data, split)[0] for split in SPLITS}
    models = {m: Model.load(None if m == "bundled" else m) for m in model or ["bundled"]}
    pool: dict[tuple[str, str, str], None] = {}
    counts: dict = {}
    for name, m in models.items():
        corpus = m.encode(tasks["dev"].corpus, batch_size=ENCODE_BATCH)  # (C, d): both halves share the corpus
        for split, task in tasks.items():
            queries = m.encode(task.queries, batch_size=ENCODE_BATCH)  # (Q, d)
            _, ranked = search(queries, corpus, depth + 1)  # (Q, depth + 1), best first
            added = 0
            for q, (found, relevant) in enumerate(zip(ranked, task.relevant)):
                others = [int(i) for i in found if int(i) not in set(relevant.tolist())][:depth]
                for i in others:
                    row = (split, task.queries[q], task.corpus[i])
                    added += row not in pool
                    pool.setdefault(row)
            counts.setdefault(name, {})[split] = added
    rows = list(pool)
    random.Random(seed).shuffle(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(("split", "new", "candidate"))
        w.writerows(rows)
    print(json.dumps({"pairs": len(rows), "new_pairs_by_model": counts, "depth": depth, "seed": seed}))
