"""The clean pairs (``dupq evaluate --task clean-pairs``) for several dupq models, and all-MiniLM-L6-v2 beside them.

The file and the figures are :mod:`dupq.evaluation.tasks`' (``clean-pairs``: 252 hand-written
paraphrases and near misses, each model judged at its own threshold, never one tuned on them).
Each dupq model is ``--model DIR`` (repeatable; without one, the bundled model, named
``bundled``). With ``--minilm``, all-MiniLM-L6-v2 zero-shot (``bench/peers.py``'s packaged
model): the cosine above the accuracy-maximising threshold on the Quora **dev** pairs, chosen
exactly as ``bench/peers.py`` chooses it (``--limit N``: on the first N dev pairs only, a quick run).

    python bench/clean_pairs.py [--model DIR]... [--minilm] [--data PATH] [--limit N]

Prints one JSON line: {"sha256", "rows", "kinds", "models": [{"model", "threshold",
"threshold_on", "accuracy", "paraphrase_recall", "near_miss_specificity", "roc_auc", "pairs", ...}], "limit"}.
A model folder that cannot be read is one sentence on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dupq.core.files import DupqError
from dupq.data.pairs import Pairs, default_data_path, read_pairs, split_pairs
from dupq.evaluation.calibration import threshold_record
from dupq.evaluation.tasks import CLEAN_PAIRS, clean_pairs, judged_clean_pairs
from dupq.modeling.model import Model
from dupq.modeling.verdict import on_cosines
from peers import THREADS, cosines, limited, sentence_encoder


def minilm_result(pairs: Pairs, data: Path | None, limit: int | None) -> dict[str, Any]:
    """all-MiniLM-L6-v2 zero-shot at the cosine threshold ``bench/peers.py`` chooses on the Quora dev pairs."""
    encode, _ = sentence_encoder()
    dev = limited(split_pairs(read_pairs(data or default_data_path())[0]), limit).dev

    def vectors(texts: list[str]) -> dict[str, np.ndarray]:
        texts = list(dict.fromkeys(texts))
        return dict(zip(texts, encode(texts)))  # text -> (d,) unit vector

    chosen = threshold_record(cosines(vectors(dev.q1 + dev.q2), dev.q1, dev.q2), dev.labels)
    scores = cosines(vectors(pairs.q1 + pairs.q2), pairs.q1, pairs.q2)  # (N,)
    return {
        "model": "all-MiniLM-L6-v2 zero-shot",
        "threshold_on": "cosine",
        "threshold_chosen_on": f"Quora dev pairs ({len(dev)}), as bench/peers.py",
        "dev_accuracy": chosen["dev_accuracy"],
        **judged_clean_pairs(on_cosines(scores, chosen["threshold"]), pairs.labels),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", action="append", default=[], help="a dupq model folder (repeatable; default: bundled)"
    )
    parser.add_argument("--minilm", action="store_true", help="also score all-MiniLM-L6-v2 zero-shot")
    parser.add_argument("--data", type=Path, default=None, help="Quora pairs file for MiniLM's dev threshold")
    parser.add_argument("--limit", type=int, default=None, help="choose MiniLM's threshold on the first N dev pairs")
    args = parser.parse_args()

    torch.set_num_threads(THREADS)
    try:
        models = []
        for name, folder in [(folder, folder) for folder in args.model] or [("bundled", None)]:
            result = clean_pairs(Model.load(folder))
            models.append({"model": name, **{k: v for k, v in result.items() if k not in ("sha256", "kinds")}})
        if args.minilm:
            models.append(minilm_result(read_pairs(CLEAN_PAIRS)[0], args.data, args.limit))
    except DupqError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    file = {"sha256": result["sha256"], "rows": result["pairs"], "kinds": result["kinds"]}
    print(json.dumps({**file, "models": models, "limit": args.limit}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
