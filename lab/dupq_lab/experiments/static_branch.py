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
import torch
import torch.nn.functional as F
import typer

from dupq.core.files import DupqError
from dupq.data.pairs import read_pairs, recorded_split, split_pairs
from dupq.data.tokenizer import Vocabulary
from dupq.evaluation.retrieval import PARTS, held_out_task, retrieval_measures
from dupq.evaluation.tasks import shipped_help_desk_task
from dupq.modeling.model import ENCODE_BATCH, Model
from dupq_lab.options import DATA, Data, ModelFolder, integers

FIRST_WORD = 2  # ids 0 and 1 are padding and the unknown word


def word_table(vocab: Vocabulary, encode, dim: int) -> np.ndarray:
    """``(V, dim)``: the teacher's vector of each vocabulary word, alone, on its top ``dim`` directions (uncentred)."""
    words = vocab.tokens[FIRST_WORD:]
    vectors = np.concatenate([encode(words[i : i + 4096]) for i in range(0, len(words), 4096)])  # (V - 2, T)
    _, _, vt = np.linalg.svd(vectors, full_matrices=False)
    table = np.zeros((len(vocab.tokens), dim), dtype=np.float32)
    table[FIRST_WORD:] = vectors @ vt[:dim].T
    return table


def zipf_weights(vocab: Vocabulary, a: float) -> np.ndarray:
    """``(V,)`` SIF weights ``a / (a + p)``, ``p`` the Zipf probability of the word's rank; 0 for padding and unknown."""
    ranks = np.arange(1, len(vocab.tokens) - FIRST_WORD + 1, dtype=np.float64)
    p = 1.0 / (ranks * np.sum(1.0 / ranks))
    weights = np.zeros(len(vocab.tokens), dtype=np.float32)
    weights[FIRST_WORD:] = a / (a + p)
    return weights


def static_vectors(vocab: Vocabulary, table: np.ndarray, weights: np.ndarray, texts: list[str]) -> np.ndarray:
    """``(N, dim)`` unit vectors: each text's weighted sum of its known words' rows (zeros for a text with none)."""
    encoded = vocab.encode(texts)
    ids = [np.asarray(row, dtype=np.int64) for row in (encoded[i] for i in range(len(texts)))]
    ids = [row[row < len(vocab.tokens)] for row in ids]  # unknown-word buckets have no teacher vector
    flat = torch.from_numpy(np.concatenate(ids)) if ids else torch.zeros(0, dtype=torch.int64)
    offsets = torch.from_numpy(np.concatenate([[0], np.cumsum([len(r) for r in ids])[:-1]]).astype(np.int64))
    summed = F.embedding_bag(
        flat, torch.from_numpy(table), offsets, mode="sum", per_sample_weights=torch.from_numpy(weights)[flat]
    )
    return F.normalize(summed, dim=-1).numpy()


def joined(model_vectors: np.ndarray, static: np.ndarray, weight: float) -> np.ndarray:
    """``[u, sqrt(w) s] / sqrt(1 + w)``: dot products ``(cos_u + w cos_s) / (1 + w)``."""
    return np.concatenate([model_vectors, np.sqrt(weight) * static], axis=1) / np.sqrt(1.0 + weight)


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
        if not isinstance(model.vocab, Vocabulary):
            raise DupqError("the static branch reads a word vocabulary; this model has WordPiece tokens.")
        pairs, _ = read_pairs(data)
        tasks = {
            "help_desk": shipped_help_desk_task(data, split)[0],
            "quora": held_out_task(split_pairs(pairs, recorded_split(model.metrics)), pairs, PARTS[split]),
        }
        from dupq.training.distil.teacher import load_teacher

        encode, _ = load_teacher()
        started = time.perf_counter()
        tables = {dim: word_table(model.vocab, encode, dim) for dim in dims}
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
        weights = zipf_weights(model.vocab, a)
        return lambda texts: memo(
            ("static", dim, a), texts, lambda: static_vectors(model.vocab, tables[dim], weights, texts)
        )

    systems = {"model": model_vectors}
    for dim in dims:
        for a in sif:
            static = systems[f"static dim {dim} a {a:g}"] = static_of(dim, a)
            for weight in weights:
                systems[f"model + static dim {dim} a {a:g} weight {weight:g}"] = (
                    lambda texts, static=static, weight=weight: joined(model_vectors(texts), static(texts), weight)
                )
    out = {name: {t: retrieval_measures(f, task) for t, task in tasks.items()} for name, f in systems.items()}
    print(
        json.dumps(
            {
                "split": split,
                "model": str(folder or "bundled"),
                "fingerprint": model.fingerprint(),
                "words": len(model.vocab.tokens) - FIRST_WORD,
                "teacher_seconds": teacher_seconds,
                "systems": out,
            }
        )
    )


if __name__ == "__main__":
    typer.run(main)
