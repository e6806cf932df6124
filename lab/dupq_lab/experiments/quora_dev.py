"""A model's figures on Quora's dev pairs (``dupq evaluate --task quora-pairs --split dev``), to choose between models on.

The dev pairs are where ``dupq calibrate`` chose the model's threshold, so the accuracy here is
the best one on them (optimistic, alike for every model); ROC-AUC needs no threshold.

    dupq-lab quora-dev [--model DIR] [--data PATH]

Prints one JSON line: {"model", "fingerprint", "pairs", "accuracy", "f1", "roc_auc", "threshold", "threshold_on"}.
"""

from __future__ import annotations

import json
import sys

import typer

from dupq.core.errors import DupqError
from dupq.evaluation.tasks import quora_pairs
from dupq.modeling.model import Model
from dupq_lab.options import DATA, Data, ModelFolder


def main(model: ModelFolder = None, data: Data = DATA) -> None:
    try:
        folder, model = model, Model.load(model)
        result = quora_pairs(model, data, "dev")
    except DupqError as e:
        print(f"error: {e}", file=sys.stderr)
        raise typer.Exit(2) from e
    figures = {k: result[k] for k in ("pairs", "accuracy", "f1", "roc_auc", "threshold", "threshold_on")}
    print(json.dumps({"model": str(folder or "bundled"), "fingerprint": model.fingerprint(), **figures}))


if __name__ == "__main__":
    typer.run(main)
