"""Two models on the help-desk yardstick's dev half, query by query: who finds the old question first where the other does not.

    dupq-lab out-of-domain-paired MODEL [MODEL ...]

Each MODEL (a model folder) is compared with the bundled model on the task of
``dupq evaluate --task help-desks --split dev`` (same collection, exact cosine search): the queries whose
old question it ranks first and the bundled model does not, the reverse, and the two-sided exact
sign test on them (McNemar's exact test). The test speaks to the choice of queries only, for two
fixed models: it says nothing of the training's own noise. Two runs of one recipe with another
seed differ by as much as the routes of stage 9 do (there, seed 1 of the bundled recipe against the
shipped model: p = 0.003), so a route is compared over several seeds. Prints one line per model.
"""

from __future__ import annotations

from math import comb
from pathlib import Path
from typing import Annotated

import typer

from dupq.evaluation.retrieval import dense_ranking
from dupq.evaluation.tasks import shipped_help_desk_task
from dupq.modeling.model import ENCODE_BATCH, Model


def first_hits(model: Model, task) -> list[bool]:
    """Per query: is its relevant question ranked first?"""
    ranked = dense_ranking(lambda texts: model.encode(texts, ENCODE_BATCH), task)
    return [int(r[0]) == int(rel[0]) for r, rel in zip(ranked, task.relevant)]


def sign_test(won: int, lost: int) -> float:
    """Two-sided exact binomial p-value of ``won`` against ``lost`` discordant queries."""
    n = won + lost
    return min(1.0, 2 * sum(comb(n, k) for k in range(min(won, lost) + 1)) / 2**n) if n else 1.0


def main(folders: Annotated[list[Path], typer.Argument(help="Model folders, each against the bundled model.")]) -> None:
    task, _ = shipped_help_desk_task(None, "dev")
    base = first_hits(Model.load(None), task)
    for folder in folders:
        hits = first_hits(Model.load(folder), task)
        won = sum(a and not b for a, b in zip(hits, base))
        lost = sum(b and not a for a, b in zip(hits, base))
        print(
            f"{folder}: recall@1 {sum(hits) / len(hits):.4f} against the bundled model's {sum(base) / len(base):.4f}; "
            f"first for {won} queries it misses, misses {lost} it finds (two-sided sign test p = {sign_test(won, lost):.4f})"
        )


if __name__ == "__main__":
    typer.run(main)
