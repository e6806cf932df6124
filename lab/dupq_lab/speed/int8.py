"""The named transformers in int8 against float32, side by side: speed and agreement; prints one JSON line.

    dupq-lab int8 [--models minilm,mpnet] [--distractors 2000] [--threads 2] [--data PATH]

For each named model (``dupq.modeling.pretrained.NAMES``) the float32 transformer and the same one after
``quantize`` (torch's dynamic int8 quantisation of its linear layers, as ``config.json``'s ``encoder.int8`` asks) encode
the same questions, as ``TransformerEncoder.encode`` does (batches of 128 sorted by length, unit vectors), after a
warm-up batch each: the help-desk yardstick's dev half (its 210 new questions, every old question of the file)
and the first ``--distractors`` distinct Quora dev questions in place of the yardstick's 19,862 (a smaller
collection: its Recall@1 is higher than the yardstick's, and the same collection for both precisions). Reports
questions per second of each and their ratio, the cosine between each Quora question's two vectors (min, mean,
the 1st percentile) and Recall@1 / MRR@10 of the help-desk dev half with each. Needs the ``quality`` extra.
"""

from __future__ import annotations

import json
import platform
import time
from typing import Annotated

import numpy as np
import torch
import typer

from dupq.data.pairs import read_pairs
from dupq.evaluation.retrieval import retrieval_measures
from dupq.evaluation.tasks import help_desk_task, quora_distractors, read_help_desk_pairs
from dupq.modeling.pretrained import load_sentence_transformer
from dupq.modeling.sentence_model import ENCODE_BATCH
from dupq_lab.options import DATA, Data, Threads

WARMUP = 128


def encoder(name: str, int8: bool):
    transformer, _ = load_sentence_transformer(name, int8=int8)

    def encode(texts: list[str]) -> np.ndarray:
        return transformer.encode(
            texts, batch_size=ENCODE_BATCH, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )  # (N, d)

    return encode


def measured(name: str, int8: bool, texts: list[str], task) -> tuple[np.ndarray, dict]:
    encode = encoder(name, int8)
    encode(texts[:WARMUP])
    started = time.perf_counter()
    vectors = encode(texts)  # (N, d)
    seconds = time.perf_counter() - started
    row = {t: i for i, t in enumerate(texts)}
    measures = retrieval_measures(lambda batch: vectors[[row[t] for t in batch]], task)
    figures = {"questions_per_s": round(len(texts) / seconds, 1), "seconds": round(seconds, 1)}
    return vectors, {**figures, "recall@1": measures["recall@1"], "mrr@10": measures["mrr@10"]}


def main(
    models: Annotated[str, typer.Option(help="Named models, comma-separated.")] = "minilm,mpnet",
    distractors: Annotated[int, typer.Option(min=1, help="Quora dev questions in the help-desk collection.")] = 2000,
    threads: Threads = 2,
    data: Data = DATA,
) -> None:
    torch.set_num_threads(threads)
    quora = quora_distractors(read_pairs(data)[0], distractors)
    task = help_desk_task(read_help_desk_pairs(), "dev", quora)
    texts = list(dict.fromkeys([*task.corpus, *task.queries]))
    on_quora = np.array([i for i, t in enumerate(texts) if t in set(quora)])
    result = {}
    for name in models.split(","):
        float32, f = measured(name, False, texts, task)
        int8, q = measured(name, True, texts, task)
        cosines = (float32[on_quora] * int8[on_quora]).sum(1)  # (Q,)
        result[name] = {
            "float32": f,
            "int8": q,
            "speedup": round(q["questions_per_s"] / f["questions_per_s"], 2),
            "cosine_int8_vs_float32": {
                "min": round(float(cosines.min()), 4),
                "p1": round(float(np.percentile(cosines, 1)), 4),
                "mean": round(float(cosines.mean()), 4),
            },
            "recall@1_lost": round(f["recall@1"] - q["recall@1"], 4),
        }
    made_of = {"questions": len(texts), "quora_questions": len(on_quora), "help_desk_queries": len(task.queries)}
    print(
        json.dumps(
            {"models": result, **made_of, "threads": threads, "torch": torch.__version__, "machine": platform.machine()}
        )
    )


if __name__ == "__main__":
    typer.run(main)
