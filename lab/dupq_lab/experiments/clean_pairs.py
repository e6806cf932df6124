"""The clean pairs (``dupq evaluate --task clean-pairs``) for several dupq models, and all-MiniLM-L6-v2 beside them.

The file and the figures are :mod:`dupq.evaluation.tasks`' (``clean-pairs``: 252 hand-written
paraphrases and near misses, each model judged at its own threshold, never one tuned on them).
Each dupq model is ``--model DIR`` (repeatable; without one, the bundled model, named
``bundled``). With ``--minilm``, all-MiniLM-L6-v2 zero-shot (``dupq-lab peers``'s packaged
model): the cosine above the accuracy-maximising threshold on the Quora **dev** pairs, chosen
exactly as ``dupq-lab peers`` chooses it (``--limit N``: on the first N dev pairs only, a quick run).

    dupq-lab clean-pairs [--model DIR]... [--minilm] [--data PATH] [--limit N]

Prints one JSON line: {"sha256", "rows", "kinds", "models": [{"model", "threshold",
"threshold_on", "accuracy", "paraphrase_recall", "near_miss_specificity", "roc_auc", "pairs", ...}], "limit"}.
A model folder that cannot be read is one sentence on stderr and exit status 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import torch
import typer

from dupq.core.errors import DupqError
from dupq.data.pairs import Pairs, default_data_path, read_pairs, split_pairs
from dupq.evaluation.calibration import threshold_record
from dupq.evaluation.tasks import CLEAN_PAIRS, clean_pairs, judged_clean_pairs
from dupq.modeling.model import Model
from dupq.modeling.verdict import on_cosines
from dupq_lab.options import DATA, Data
from dupq_lab.peers import THREADS, cosines, limited, sentence_encoder


def minilm_result(pairs: Pairs, data: Path | None, limit: int | None) -> dict[str, Any]:
    """all-MiniLM-L6-v2 zero-shot at the cosine threshold ``dupq-lab peers`` chooses on the Quora dev pairs."""
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
        "threshold_chosen_on": f"Quora dev pairs ({len(dev)}), as dupq-lab peers",
        "dev_accuracy": chosen["dev_accuracy"],
        **judged_clean_pairs(on_cosines(scores, chosen["threshold"]), pairs.labels),
    }


def main(
    model: Annotated[
        Optional[list[Path]], typer.Option(help="A dupq model folder (repeatable; default: the bundled model).")
    ] = None,
    minilm: Annotated[bool, typer.Option(help="Also score all-MiniLM-L6-v2 zero-shot.")] = False,
    data: Data = DATA,
    limit: Annotated[Optional[int], typer.Option(help="Choose MiniLM's threshold on the first N dev pairs.")] = None,
) -> None:

    torch.set_num_threads(THREADS)
    try:
        models = []
        for name, folder in [(folder, folder) for folder in model or []] or [("bundled", None)]:
            result = clean_pairs(Model.load(folder))
            models.append({"model": name, **{k: v for k, v in result.items() if k not in ("sha256", "kinds")}})
        if minilm:
            models.append(minilm_result(read_pairs(CLEAN_PAIRS)[0], data, limit))
    except DupqError as e:
        print(f"error: {e}", file=sys.stderr)
        raise typer.Exit(2) from e
    file = {"sha256": result["sha256"], "rows": result["pairs"], "kinds": result["kinds"]}
    print(json.dumps({**file, "models": models, "limit": limit}))


if __name__ == "__main__":
    typer.run(main)
