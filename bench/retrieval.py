"""Retrieval quality on Quora's held-out rows: dupq vs BM25 (and all-MiniLM-L6-v2), by the library's measures.

The task and the measures are :mod:`dupq.evaluation.retrieval`'s (``dupq evaluate --retrieval``
prints the same for one model): each distinct question1 of a held-out duplicate pair searches
every distinct held-out question (its own entry left out), and every known duplicate counts as
found (the labels' transitive closure over the whole file). MRR@10, nDCG@10, Recall@1, Recall@10
and P@1 come from trec_eval (``pytrec_eval``), the BM25 ranking from ``bm25s``.

``--split test`` (the default, the reported figures): the test and dev rows of the model's
split (38,614 questions, 7,025 queries on the seed split). ``--split dev``: the dev rows alone, a
figure to choose on. ``--minilm`` also scores all-MiniLM-L6-v2 zero-shot (the ``distil`` extra;
encoding the 38,614 questions takes minutes on a 2-core CPU).

    python bench/retrieval.py [--model DIR] [--data PATH] [--split test|dev] [--minilm]

Prints one JSON line: {"dupq": {"mrr@10", "ndcg@10", "recall@1", "recall@10", "p@1",
"mrr@10_question2"}, "bm25": {...}, ["minilm": {...}], "queries", "corpus", "relevant",
"queries_with_more_than_one_relevant", "split", "model", "fingerprint", "seconds"}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from dupq.core.files import DupqError
from dupq.data.pairs import default_data_path, read_pairs, recorded_split, split_pairs
from dupq.evaluation.retrieval import held_out_task, retrieval_measures, task_summary
from dupq.modeling.model import ENCODE_BATCH, Model

PARTS = {"test": ("test", "dev"), "dev": ("dev",)}  # --split -> the held-out rows whose questions make the task


def timed(seconds: dict[str, float], name: str, measure, *args) -> dict[str, float]:
    """``measure(*args)``, its wall time kept in ``seconds[name]``."""
    started = time.perf_counter()
    result = measure(*args)
    seconds[name] = round(time.perf_counter() - started, 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: the bundled model)")
    parser.add_argument(
        "--data", type=Path, default=None, help="Quora pairs file (default: $DUPQ_DATA or ../shared/data/...)"
    )
    parser.add_argument(
        "--split", choices=PARTS, default="test", help="test: test and dev rows (reported); dev: dev rows alone"
    )
    parser.add_argument("--minilm", action="store_true", help="also score all-MiniLM-L6-v2 zero-shot")
    args = parser.parse_args()
    try:
        model = Model.load(args.model)
        pairs, _ = read_pairs(args.data or default_data_path())
        task = held_out_task(split_pairs(pairs, recorded_split(model.metrics)), pairs, PARTS[args.split])
        seconds: dict[str, float] = {}
        out = {
            "dupq": timed(seconds, "dupq", retrieval_measures, lambda t: model.encode(t, ENCODE_BATCH), task),
            "bm25": timed(seconds, "bm25", retrieval_measures, None, task),
        }
        if args.minilm:
            from peers import sentence_encoder

            out["minilm"] = timed(seconds, "minilm", retrieval_measures, sentence_encoder()[0], task)
    except DupqError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary = {**task_summary(task), "split": args.split, "model": str(args.model or "bundled")}
    print(json.dumps({**out, **summary, "fingerprint": model.fingerprint(), "seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
