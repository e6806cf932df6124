"""The verdict a collection gives out of the box, on the help-desk yardstick: is its `duplicate` tier safe to act on?

The help-desk task of :mod:`dupq.evaluation.tasks` (``--split`` half: each new question searches
every old question of the file plus the Quora distractors) is built as a collection with the model
(``Collection.build``, default the bundled model), and each new question searches it
(``Collection.search``, ``k`` hits), so the verdict measured is the one a user's collection gives.
For the top hit: the share of queries it is right for (Recall@1), and for each tier (``duplicate``,
and ``suggest`` where hits carry tiers) its precision (right among the top hits in the tier) and
recall (the queries whose top hit is right and in the tier); ``old_flagged``: the share of queries
whose true old question is among its hits, in the tier. A dupq before tiers (main before them, to
measure today's verdict) has only ``duplicate``. ``--no-distractors``: the desk's old questions alone. ``identical``: the least probability a
new question gets against its own text (``Model.probability``), and the least a search gives a
stored question searched with its own text.

``--judged``: the questions judged duplicates of a new question (``yardsticks/help_desks_judged.tsv``,
:func:`dupq.evaluation.tasks.read_judged`) are right too, beside its own old question (``recall@1`` and
``tiers``), with the figures as written beside them (``as_written``), and ``judged_wrong`` counts the top
hits (of each tier) that the yardstick as written calls wrong and the judgments call duplicates.

``--rerank MODEL``: the collection is built with a reranker (``dupq index build --rerank``), so each
search's candidates are ordered and judged by it, its tiers too; its vectors encode through the lab's
cache by text (``--work``/vectors, :mod:`dupq_lab.vector_cache`), each text once across runs.

Prints one JSON line.
"""

from __future__ import annotations

import json
import platform
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Optional

import torch
import typer

from dupq.collection.collection import Collection
from dupq.evaluation.tasks import help_desk_task, read_help_desk_pairs, read_judged, shipped_help_desk_task
from dupq.modeling.model import Model
from dupq_lab.options import DATA, RUNS, Data, ModelFolder, Split, one_sentence
from dupq_lab.vector_cache import cached

TIERS = ("duplicate", "suggest")


def in_tier(hit, tier: str) -> bool:
    """Whether ``hit`` is in ``tier``: ``duplicate`` is its verdict; ``suggest`` holds the duplicates too."""
    return hit.duplicate if tier == "duplicate" else hit.tier in TIERS


def precision_recall(flagged: list[bool], right: list[bool]) -> dict[str, float | int | None]:
    """Of the queries' top hits, how many a tier flags, and its precision and recall (``right``: the hit is right)."""
    hits = sum(f and ok for f, ok in zip(flagged, right))
    return {
        "top_flagged": sum(flagged),
        "precision": round(hits / sum(flagged), 4) if any(flagged) else None,
        "recall": round(hits / len(right), 4),
    }


def tier_measures(hits: list, relevant: list[set[int]], tier: str) -> dict[str, float | int]:
    """Precision and recall of ``tier`` on each query's top hit (right: one of its ``relevant``), and the share
    of queries with a relevant question flagged among their hits."""
    top = [h[0] if h else None for h in hits]
    flagged = [t is not None and in_tier(t, tier) for t in top]
    return {
        **precision_recall(flagged, [t is not None and t.id in r for t, r in zip(top, relevant)]),
        "old_flagged": round(
            sum(any(h.id in r and in_tier(h, tier) for h in row) for row, r in zip(hits, relevant)) / len(hits), 4
        ),
    }


def judged_wrong(hits: list, relevant: list[set[int]], own: list[int], tier: str | None) -> dict[str, int]:
    """Of the top hits in ``tier`` (None: every top hit) that are not their query's own old question (wrong as
    written), how many are judged duplicates (right with ``--judged``)."""
    wrong = [
        (h[0], r)
        for h, r, o in zip(hits, relevant, own)
        if h and h[0].id != o and (tier is None or in_tier(h[0], tier))
    ]
    return {"wrong_as_written": len(wrong), "judged_duplicates": sum(t.id in r for t, r in wrong)}


@one_sentence
def main(
    split: Split = "test",
    k: Annotated[int, typer.Option(min=1, help="Hits each new question gets.")] = 10,
    distractors: Annotated[
        bool, typer.Option(help="Search the Quora distractors too (the yardstick), or the desk's old questions alone.")
    ] = True,
    judged: Annotated[
        bool, typer.Option(help="Count the questions judged duplicates of a new question as right too.")
    ] = False,
    model: ModelFolder = None,
    rerank: Annotated[
        Optional[str], typer.Option(metavar="MODEL", help="A reranker (a folder or a name): its order and verdict.")
    ] = None,
    data: Data = DATA,
    work: Annotated[Path, typer.Option(help="Where the reranker's vectors are kept between runs.")] = RUNS / "rerank-k",
) -> None:
    torch.set_num_threads(1)
    if distractors:
        task, made_of = shipped_help_desk_task(data, split, judged)
    else:
        desks = read_help_desk_pairs()
        task, made_of = help_desk_task(desks, split, [], read_judged() if judged else None), {"sha256": desks.sha256}
    judge = Model.load(model)
    reranker = None if rerank is None else Model.load(rerank)
    old = [int(r[0]) for r in task.relevant]  # the query's own old question comes first
    relevant = [set(r.tolist()) for r in task.relevant]
    started = time.perf_counter()
    vectors = nullcontext() if reranker is None else cached(reranker, work / "vectors" / reranker.fingerprint())
    with (
        vectors,
        tempfile.TemporaryDirectory() as tmp,
        Collection.build(Path(tmp) / "desk", task.corpus, judge, rerank=reranker) as desk,
    ):
        built = time.perf_counter() - started
        hits = desk.search(task.queries, k=k)
        olds = sorted(set(old))
        own = desk.search([task.corpus[i] for i in olds], k=1)
        stored_identical = min(h[0].probability for h in own if h and h[0].probability is not None)
        tiered = hasattr(desk, "tiers")  # a dupq before tiers (to measure it) has one verdict, `duplicate`
        thresholds = (
            desk.tiers_of(reranker is not None) if tiered else {"duplicate": desk.threshold, "on": judge.threshold_on}
        )
    tiers = [t for t in TIERS if t == "duplicate" or tiered]
    out = {
        "split": split,
        "distractors": distractors,
        "queries": len(task.queries),
        "corpus": len(task.corpus),
        "k": k,
        "thresholds": thresholds,
        "recall@1": round(sum(bool(h) and h[0].id in r for h, r in zip(hits, relevant)) / len(hits), 4),
        "tiers": {t: tier_measures(hits, relevant, t) for t in tiers},
    }
    if judged:
        own = [{o} for o in old]
        recall = round(sum(bool(h) and h[0].id == o for h, o in zip(hits, old)) / len(hits), 4)
        out["as_written"] = {"recall@1": recall, "tiers": {t: tier_measures(hits, own, t) for t in tiers}}
        wrong = {t: judged_wrong(hits, relevant, old, t) for t in tiers}
        out["judged_wrong"] = {"top_hit": judged_wrong(hits, relevant, old, None), **wrong}
    itself = round(float(min(judge.probability(task.queries, task.queries))), 4)
    out["identical"] = {
        "least_probability_of_a_question_with_itself": itself,
        "least_probability_of_a_stored_question_searched_with_its_text": round(float(stored_identical), 4),
    }
    out["sha256"] = made_of["sha256"]
    if "judged_sha256" in made_of:
        out["judged_sha256"] = made_of["judged_sha256"]
    out["fingerprint"] = judge.fingerprint()
    if reranker is not None:
        out |= {"rerank": rerank, "rerank_fingerprint": reranker.fingerprint()}
    out |= {"build_s": round(built, 1), "machine": platform.machine()}
    print(json.dumps(out))


if __name__ == "__main__":  # docs/judge.md runs it so, under an older checkout's src
    typer.run(main)
