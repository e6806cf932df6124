"""Retrieval on Quora's held-out rows (``dupq evaluate --task quora-retrieval``), with all-MiniLM-L6-v2 beside it.

The task and the measures are :mod:`dupq.evaluation.retrieval`'s: each distinct question1 of a
held-out duplicate pair searches every distinct held-out question (its own entry left out), and
every known duplicate counts as found (the labels' transitive closure over the whole file).
``--split test`` (the default, the reported figures): the test and dev rows of the model's split
(38,614 questions, 7,025 queries on the seed split); ``--split dev``: the dev rows alone, a figure
to choose on. ``--minilm`` also scores all-MiniLM-L6-v2 zero-shot (the ``distil`` extra; encoding
the 38,614 questions takes minutes on a 2-core CPU).

    python bench/retrieval.py [--model DIR] [--data PATH] [--split test|dev] [--minilm]

Prints one JSON line: {"dupq": {"mrr@10", "ndcg@10", "recall@1", "recall@10", "p@1",
"mrr@10_question2"}, "bm25": {...}, ["minilm": {...}], "queries", "corpus", "relevant",
"queries_with_more_than_one_relevant", "split", "model", "fingerprint"}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dupq.core.files import DupqError
from dupq.data.pairs import default_data_path, read_pairs, recorded_split, split_pairs
from dupq.evaluation.retrieval import PARTS, held_out_task, retrieval_measures
from dupq.evaluation.tasks import quora_retrieval
from dupq.modeling.model import Model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: the bundled model)")
    parser.add_argument(
        "--data", type=Path, default=None, help="Quora pairs file (default: $DUPQ_DATA or ../shared/data/...)"
    )
    parser.add_argument(
        "--split", choices=PARTS, default="test", help="test: test and dev rows (reported); dev: dev rows"
    )
    parser.add_argument("--minilm", action="store_true", help="also score all-MiniLM-L6-v2 zero-shot")
    args = parser.parse_args()
    try:
        model = Model.load(args.model)
        result = quora_retrieval(model, args.data, args.split)
        out = {"dupq": result.pop("model"), "bm25": result.pop("bm25")}
        if args.minilm:
            from peers import sentence_encoder

            pairs, _ = read_pairs(args.data or default_data_path())
            task = held_out_task(split_pairs(pairs, recorded_split(model.metrics)), pairs, PARTS[args.split])
            out["minilm"] = retrieval_measures(sentence_encoder()[0], task)
    except DupqError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    del result["parts"], result["k"]
    summary = {**result, "split": args.split, "model": str(args.model or "bundled")}
    print(json.dumps({**out, **summary, "fingerprint": model.fingerprint()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
