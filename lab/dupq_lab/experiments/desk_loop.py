"""A desk's loop: moderators' decisions recorded through the API refit the collection's verdict; held out before and after.

A collection of the help-desk yardstick's old questions (:mod:`dupq.evaluation.tasks`, both halves' old
questions, no distractors) is served (``create_app``, FastAPI's TestClient). Dev-half new questions arrive as
pending tickets (``POST /questions``), each searches the desk leaving itself out (``POST /search``), and a
moderator who knows the answer decides on the top hit (``POST /questions/{key}/decision``): a duplicate when it
is the right old question, else distinct (``--find-right``: and then a duplicate of the right one, a positive the
search ranked lower); until ``--decisions`` are recorded. The collection is refitted on them
(:func:`~dupq.evaluation.collection_calibration.calibrate_collection`, what ``dupq index calibrate`` runs), and
the test half's new questions search it through the API before and after: for the top hit, each tier's precision
(right among the top hits in the tier) and recall (right and in the tier, of all queries). A top hit is right when
it is the query's old question or a ticket decided a duplicate of it. ``refit`` is the fit's own report (held-out
decisions, seed 0).

Prints one JSON line.
"""

from __future__ import annotations

import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Annotated

import torch
import typer
from fastapi.testclient import TestClient

from dupq.collection.collection import Collection
from dupq.evaluation.collection_calibration import calibrate_collection
from dupq.evaluation.tasks import read_help_desk_pairs
from dupq.modeling.model import Model
from dupq.service.app import create_app
from dupq_lab.experiments.desk_verdict import TIERS, precision_recall
from dupq_lab.options import ModelFolder

TOKEN = "desk-loop"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def top_hits(client: TestClient, queries: list[str], k: int, exclude: list[str] | None = None) -> list[dict | None]:
    """The top hit of each query's ``POST /search`` (None: no hit)."""
    out = []
    for n, q in enumerate(queries):
        body = {"question": q, "k": k, "exclude": [exclude[n]] if exclude else []}
        response = client.post("/search", json=body, headers=AUTH)
        response.raise_for_status()
        results = response.json()["results"]
        out.append(results[0] if results else None)
    return out


def tier_measures(tops: list[dict | None], answers: list[str]) -> dict[str, dict]:
    """Each tier's precision and recall on the top hits, right when a hit is the answer or a duplicate of it."""
    right = [t is not None and answers[n] in (t["key"], t["duplicate_of"]) for n, t in enumerate(tops)]
    out = {"recall@1": round(sum(right) / len(tops), 4)}
    for tier in TIERS:  # TIERS runs from the narrowest: suggest holds the duplicates too
        flagged = [t is not None and t["tier"] in TIERS[: TIERS.index(tier) + 1] for t in tops]
        out[tier] = precision_recall(flagged, right)
    return out


def main(
    decisions: Annotated[int, typer.Option(min=30, help="Decisions the moderators record before the refit.")] = 100,
    k: Annotated[int, typer.Option(min=1, help="Hits each search gets.")] = 10,
    find_right: Annotated[
        bool, typer.Option(help="After a wrong top hit, also decide the ticket a duplicate of its right old question.")
    ] = False,
    model: ModelFolder = None,
) -> None:
    torch.set_num_threads(1)
    started = time.perf_counter()
    file = read_help_desk_pairs()
    olds = list(dict.fromkeys(file.old))
    old_key = {t: f"old{i}" for i, t in enumerate(olds)}
    dev = [(n, o) for n, o, s in zip(file.new, file.old, file.splits) if s == "dev"]
    test = [(n, o) for n, o, s in zip(file.new, file.old, file.splits) if s == "test"]
    judge = Model.load(model)
    recorded, tickets = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        Collection.build(Path(tmp) / "desk", olds, judge, keys=[old_key[t] for t in olds]).close()
        with TestClient(create_app(Path(tmp) / "desk", token=TOKEN)) as client:
            test_queries, test_answers = [n for n, _ in test], [old_key[o] for _, o in test]
            before = tier_measures(top_hits(client, test_queries, k), test_answers)
            for n, (text, old) in enumerate(dev):
                if len(recorded) >= decisions:
                    break
                key = f"ticket{n}"
                ticket = {"text": text, "key": key, "pending": True}
                client.post("/questions", json=ticket, headers=AUTH).raise_for_status()
                tickets += 1
                (top,) = top_hits(client, [text], k, [key])
                made = [{"duplicate_of": old_key[old]}]
                if top is not None and top["key"] != old_key[old]:
                    made = [{"not_duplicate_of": top["key"]}, *(made if find_right else [])]
                for decision in made[: decisions - len(recorded)]:
                    url = f"/questions/{key}/decision"
                    client.post(url, json=decision, headers=AUTH).raise_for_status()
                    recorded.append(int("duplicate_of" in decision))
            refit = calibrate_collection(client.app.state.collection)
            after = tier_measures(top_hits(client, test_queries, k), test_answers)
            health = client.get("/health", headers=AUTH).json()
    out = {
        "decisions": len(recorded),
        "duplicates": sum(recorded),
        "tickets": tickets,
        "old_questions": len(olds),
        "test_queries": len(test),
        "k": k,
        "find_right": find_right,
        "before": before,
        "after": after,
        "refit": refit["held_out"],
        "tiers": refit["calibration"],
        "health_calibration_source": health["calibration"]["source"],
        "sha256": file.sha256,
        "fingerprint": judge.fingerprint(),
        "seconds": round(time.perf_counter() - started, 1),
        "machine": platform.machine(),
    }
    print(json.dumps(out))
