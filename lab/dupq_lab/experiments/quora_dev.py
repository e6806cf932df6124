"""A model's figures on Quora's dev pairs (``dupq evaluate --task quora-pairs --split dev``), to choose between models on.

The dev pairs are where ``dupq calibrate`` chose the model's threshold, so the accuracy here is
the best one on them (optimistic, alike for every model); ROC-AUC needs no threshold.

    python bench/quora_dev.py [--model DIR] [--data PATH]

Prints one JSON line: {"model", "fingerprint", "pairs", "accuracy", "f1", "roc_auc", "threshold", "threshold_on"}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dupq.core.files import DupqError
from dupq.evaluation.tasks import quora_pairs
from dupq.modeling.model import Model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: the bundled model)")
    parser.add_argument(
        "--data", type=Path, default=None, help="Quora pairs file (default: $DUPQ_DATA or ../shared/data/...)"
    )
    args = parser.parse_args()
    try:
        model = Model.load(args.model)
        result = quora_pairs(model, args.data, "dev")
    except DupqError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    figures = {k: result[k] for k in ("pairs", "accuracy", "f1", "roc_auc", "threshold", "threshold_on")}
    print(json.dumps({"model": str(args.model or "bundled"), "fingerprint": model.fingerprint(), **figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
