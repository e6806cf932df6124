"""Retrieval on Quora's held-out rows (``dupq evaluate --task quora-retrieval``), with all-MiniLM-L6-v2 beside it.

The task and the measures are :mod:`dupq.evaluation.retrieval`'s: each distinct question1 of a
held-out duplicate pair searches every distinct held-out question (its own entry left out), and
every known duplicate counts as found (the labels' transitive closure over the whole file).
``--split test`` (the default, the reported figures): the test and dev rows of the model's split
(38,614 questions, 7,025 queries on the seed split); ``--split dev``: the dev rows alone, a figure
to choose on. ``--minilm`` also scores all-MiniLM-L6-v2 zero-shot (the ``distil`` extra; encoding
the 38,614 questions takes minutes on a 2-core CPU).

Prints one JSON line: {"dupq": {"mrr@10", "ndcg@10", "recall@1", "recall@10", "p@1",
"mrr@10_question2"}, "bm25": {...}, ["minilm": {...}], "queries", "corpus", "relevant",
"queries_with_more_than_one_relevant", "split", "model", "fingerprint"}.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

import typer

from dupq.data.pairs import read_pairs, recorded_split, split_pairs
from dupq.evaluation.retrieval import PARTS, held_out_task, retrieval_measures
from dupq.evaluation.tasks import quora_retrieval
from dupq.modeling.model import Model
from dupq_lab.options import DATA, Data, ModelFolder, one_sentence


@one_sentence
def main(
    model: ModelFolder = None,
    data: Data = DATA,
    split: Annotated[
        Literal["test", "dev"], typer.Option(help="test: test and dev rows (reported); dev: dev rows.")
    ] = "test",
    minilm: Annotated[bool, typer.Option(help="Also score all-MiniLM-L6-v2 zero-shot.")] = False,
) -> None:
    folder, model = model, Model.load(model)
    result = quora_retrieval(model, data, split)
    out = {"dupq": result.pop("model"), "bm25": result.pop("bm25")}
    if minilm:
        from dupq_lab.peers import sentence_encoder

        pairs, _ = read_pairs(data)
        task = held_out_task(split_pairs(pairs, recorded_split(model.metrics)), pairs, PARTS[split])
        out["minilm"] = retrieval_measures(sentence_encoder()[0], task)
    del result["parts"], result["k"]
    summary = {**result, "split": split, "model": str(folder or "bundled")}
    print(json.dumps({**out, **summary, "fingerprint": model.fingerprint()}))
