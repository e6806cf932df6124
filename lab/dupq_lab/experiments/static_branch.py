"""A static branch beside the LSTM: does the teacher's view of each word, added to a model's vectors, find help desks' questions?

The student learns word meaning only through Quora's labels and the teacher's vectors of Quora's
questions (docs/experiments/9-meaning-beyond-quora.md). A static sentence vector needs neither:
the teacher (all-MiniLM-L6-v2, the ``distil`` extra) encodes each word of the model's vocabulary
alone, as model2vec (Tulkens & van Dongen 2024) and ``word_init`` do, and a question's static
vector is the weighted sum of its words' vectors, each weighted ``a / (a + p(word))`` (SIF, Arora,
Liang & Ma 2017, *A Simple but Tough-to-Beat Baseline for Sentence Embeddings*), with ``p`` the
word's Zipf probability from its rank in the vocabulary (the vocabulary is sorted by count; no
count is stored), unknown words left out. The word vectors are projected on their top ``--dim``
right singular vectors, uncentred (centring drops the direction every word shares, which the
weighted sum needs). The model's unit vector ``u`` and the static unit vector ``s`` are joined as
``[u, sqrt(w) s] / sqrt(1 + w)``: a unit vector whose dot products are ``(cos_u + w cos_s) / (1 + w)``.

For the model alone, the static vectors alone and each joined (``--dim``, ``--weight``, ``--a``),
this prints the measures of the tasks ``help-desks`` and ``quora-retrieval`` of
:mod:`dupq.evaluation.tasks` (``--split`` dev or test). Choose on dev; run test only for the choice.

    dupq-lab static-branch [--model DIR] [--split dev|test] [--dim 128 256] [--weight 1 2 3] [--a 0.001 0.002]

Prints one JSON line: {"split", "model", "fingerprint", "words", "teacher_seconds", "systems":
{name: {"help_desk": {...}, "quora": {...}}}}.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated, Literal

import numpy as np
import typer

from dupq.core.errors import DupqError
from dupq.data.pairs import read_pairs, recorded_split, split_pairs
from dupq.evaluation.retrieval import PARTS, held_out_task, retrieval_measures
from dupq.evaluation.tasks import shipped_help_desk_task
from dupq.modeling.model import ENCODE_BATCH, Model
from dupq.modeling.static import join_vectors
from dupq.training.distil.branch import FIRST_WORD, teacher_branch, teacher_vectors
from dupq_lab.options import DATA, Data, ModelFolder, integers


def main(
    model: ModelFolder = None,
    split: Annotated[Literal["dev", "test"], typer.Option(help="dev (choose on it) or test (only report it).")] = "dev",
    dim: Annotated[str, typer.Option(help="Static branch widths, comma-separated.")] = "128,256",
    weight: Annotated[str, typer.Option(help="The static branch's weights, comma-separated.")] = "1,2,3",
    a: Annotated[str, typer.Option(help="SIF's a values, comma-separated.")] = "0.001,0.002",
    data: Data = DATA,
) -> None:
    try:
        folder, model = model, Model.load(model)
        dims, weights, sif = integers(dim), [float(w) for w in weight.split(",")], [float(x) for x in a.split(",")]
        vocab = model.encoder.lstm("the static branch reads a word vocabulary; this model has none.").vocab
        pairs, _ = read_pairs(data)
        tasks = {
            "help_desk": shipped_help_desk_task(data, split)[0],
            "quora": held_out_task(split_pairs(pairs, recorded_split(model.metrics)), pairs, PARTS[split]),
        }
        from dupq.training.distil.teacher import load_teacher

        encode, _ = load_teacher()
        started = time.perf_counter()
        words, _ = teacher_vectors(vocab, encode, None)  # (V - 2, T): each word alone
        branches = {(d, x): teacher_branch(vocab, words, None, None, d, x, 1.0) for d in dims for x in sif}
        teacher_seconds = round(time.perf_counter() - started, 1)
    except DupqError as e:
        print(f"error: {e}", file=sys.stderr)
        raise typer.Exit(2) from e

    cache: dict[tuple, np.ndarray] = {}  # each text list encoded once per system part

    def memo(key: tuple, texts: list[str], make) -> np.ndarray:
        key = (*key, len(texts), hash(tuple(texts)))
        if key not in cache:
            cache[key] = make()
        return cache[key]

    def model_vectors(texts: list[str]) -> np.ndarray:
        return memo(("model",), texts, lambda: model.encode(texts, ENCODE_BATCH))

    def static_of(dim: int, a: float):
        branch = branches[dim, a]  # its table holds the SIF weights; unknown-word buckets are zeros
        return lambda texts: memo(("static", dim, a), texts, lambda: branch.vectors(vocab, vocab.encode(texts), texts))

    systems = {"model": model_vectors}
    for dim in dims:
        for a in sif:
            static = systems[f"static dim {dim} a {a:g}"] = static_of(dim, a)
            for weight in weights:
                systems[f"model + static dim {dim} a {a:g} weight {weight:g}"] = (
                    lambda texts, static=static, weight=weight: join_vectors(
                        model_vectors(texts), static(texts), weight
                    )
                )
    out = {name: {t: retrieval_measures(f, task) for t, task in tasks.items()} for name, f in systems.items()}
    print(
        json.dumps(
            {
                "split": split,
                "model": str(folder or "bundled"),
                "fingerprint": model.fingerprint(),
                "words": len(vocab.tokens) - FIRST_WORD,
                "teacher_seconds": teacher_seconds,
                "systems": out,
            }
        )
    )


if __name__ == "__main__":
    typer.run(main)
