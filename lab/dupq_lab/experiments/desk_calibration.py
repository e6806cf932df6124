"""Calibrating on a help desk's own moderators' decisions, against Quora's calibration, on that desk.

The help desk is the ``help-desks`` yardstick of :mod:`dupq.evaluation.tasks` (420 hand-written pairs of a user's new wording
and the desk's old question, 21 domains; ``dev`` and ``test`` alternate within each domain). Its
collection holds every old question (metadata ``domain``, ``kind: old``) and every new one (``kind:
new``), each under a key. A moderator reviews each new question's top ``--review`` hits among the
old questions of its domain (a scoped search) and records a decision for each: the right old
question is ``duplicate_of``, the others ``not_duplicate_of`` (``Collection.decide``).

* the **dev** new questions' decisions are exported as labelled pairs (``Collection.decisions``,
  what ``dupq index decisions`` writes; read back by ``read_pairs``) and calibrate a copy of the
  bundled model (``dupq calibrate --pairs``'s :func:`dupq.evaluation.evaluate.calibrate`);
* the **test** new questions' decisions are the pairs both models are measured on: expected
  calibration error (10 bins), accuracy at each model's own threshold, and the share of the true
  duplicates flagged.

``--judged``: a hit judged a duplicate of the new question (:func:`dupq.evaluation.tasks.read_judged`)
is decided ``duplicate_of`` too.

Prints one JSON line.
"""

from __future__ import annotations

import csv
import json
import platform
import tempfile
from pathlib import Path
from typing import Annotated

import torch
import typer

from dupq.collection.collection import Collection
from dupq.data.pairs import read_pairs, write_pairs
from dupq.evaluation.evaluate import calibrate, evaluate
from dupq.evaluation.tasks import HELP_DESKS, read_judged
from dupq.modeling.model import Model


def main(
    review: Annotated[int, typer.Option(min=1, help="Hits a moderator judges for each new question.")] = 3,
    judged: Annotated[bool, typer.Option(help="Decide the hits judged duplicates as duplicates too.")] = False,
) -> None:
    torch.set_num_threads(1)
    with HELP_DESKS.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    for n, r in enumerate(rows):
        r["new_key"], r["old_key"] = f"new-{n}", f"old-{n}"
    also = read_judged() if judged else {}
    quora = Model.load()
    out = {"pairs": len(rows), "review": review, **({"judged": True} if judged else {})}
    with tempfile.TemporaryDirectory() as tmp:
        texts = [r["old"] for r in rows] + [r["new"] for r in rows]
        keys = [r["old_key"] for r in rows] + [r["new_key"] for r in rows]
        meta = [{"domain": r["domain"], "kind": kind} for kind in ("old", "new") for r in rows]
        labelled = {}
        for split in ("dev", "test"):
            with Collection.build(Path(tmp) / split, texts, quora, keys=keys, metadata=meta) as coll:
                chosen = [r for r in rows if r["split"] == split]
                for r in chosen:
                    scope = {"kind": "old", "domain": r["domain"]}
                    for h in coll.search([r["new"]], k=review, where=scope)[0]:
                        right = h.key == r["old_key"] or h.text in also.get((split, r["new"]), set())
                        decision = "duplicate_of" if right else "not_duplicate_of"
                        coll.decide(r["new_key"], **{decision: h.key})
                write_pairs(Path(tmp) / f"{split}.tsv", coll.decisions())
            labelled[split], _ = read_pairs(Path(tmp) / f"{split}.tsv")
        desk = Model.load()
        calibrate(desk, labelled["dev"])
        for name, model in (("quora_calibration", quora), ("desk_calibration", desk)):
            result = evaluate(model, labelled["test"])
            out[name] = {
                "expected_calibration_error": round(result["expected_calibration_error"], 4),
                "accuracy": round(result["accuracy"], 4),
                "duplicates_flagged": round(result["recall"], 4),  # recall at the model's threshold
                "threshold": round(model.threshold, 4),
                "threshold_on": model.threshold_on,
            }
        out["dev_pairs"], out["test_pairs"] = len(labelled["dev"]), len(labelled["test"])
        out["test_duplicates"] = int(labelled["test"].labels.sum())
    out["machine"] = platform.machine()
    print(json.dumps(out))
