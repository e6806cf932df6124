"""Out-of-domain retrieval before and after ``dupq adapt``: does a new help-desk question find its old one?

The yardstick is a file of (new question, old question) pairs from help desks and forums, with a
``split`` column (dev: choose on it; test: report only). For each ``new`` question of the split,
every ``old`` question of the file (both splits: a help desk has all its old questions) plus
20,000 distinct questions of Quora's dev pairs (distractors) are ranked by cosine; the measures
are Recall@1 and MRR@10 (trec_eval's ``recall_1`` and ``recip_rank`` over each query's top 10,
through pytrec_eval).

``--write-questions FILE`` writes what a help desk would adapt on: the old questions and the
distractors, one a line, never a ``new`` question.

    python bench/adapt_ood.py --write-questions runs/ood-questions.txt
    python bench/adapt_ood.py --model bundled --model runs/adapted --teacher [--split dev]

Prints one JSON line per system: {"system", "split", "recall@1", "mrr@10", "queries", "collection"}.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
import pytrec_eval

from dupq.data.pairs import SplitConfig, default_data_path, read_pairs, split_pairs

OOD = Path("/work/ood/out_of_domain.tsv")
DISTRACTORS = 20_000


def yardstick(path: Path, data: Path, distractors: int = DISTRACTORS) -> tuple[list[dict], list[str]]:
    """The file's rows, and the collection: every old question, then ``distractors`` Quora dev questions."""
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    olds = list(dict.fromkeys(r["old"] for r in rows))
    dev = split_pairs(read_pairs(data)[0], SplitConfig()).dev
    quora = [q for q in dict.fromkeys(dev.q1 + dev.q2) if q not in set(olds)][:distractors]
    return rows, olds + quora


def scores(encode, rows: list[dict], collection: list[str], split: str) -> dict:
    """Recall@1 and MRR@10 of ``encode`` (texts -> unit vectors) on the ``split`` half."""
    queries = [r for r in rows if r["split"] == split]
    docs = encode(collection)  # (N, d)
    found = encode([r["new"] for r in queries]) @ docs.T  # (Q, N)
    top = np.argsort(-found, axis=1)[:, :10]
    position = {t: i for i, t in enumerate(collection)}
    qrels = {str(q): {str(position[r["old"]]): 1} for q, r in enumerate(queries)}
    run = {str(q): {str(j): float(found[q, j]) for j in top[q]} for q in range(len(queries))}
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"recall_1", "recip_rank"}).evaluate(run)
    return {
        "recall@1": round(float(np.mean([m["recall_1"] for m in per_query.values()])), 4),
        "mrr@10": round(float(np.mean([m["recip_rank"] for m in per_query.values()])), 4),
        "queries": len(queries),
        "collection": len(collection),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=OOD)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--model", action="append", default=[], help="a model folder, or 'bundled' (repeatable)")
    parser.add_argument("--teacher", action="store_true", help="score all-MiniLM-L6-v2's own vectors too")
    parser.add_argument("--write-questions", type=Path, default=None)
    args = parser.parse_args()
    rows, collection = yardstick(args.file, args.data or default_data_path())
    if args.write_questions:
        args.write_questions.parent.mkdir(parents=True, exist_ok=True)
        args.write_questions.write_text("".join(q.replace("\n", " ") + "\n" for q in collection), encoding="utf-8")
        print(json.dumps({"wrote": str(args.write_questions), "questions": len(collection)}))
    systems = {}
    for folder in args.model:
        from dupq.modeling.model import Model

        systems[folder] = Model.load(None if folder == "bundled" else folder).encode
    if args.teacher:
        from dupq.training.distil.teacher import load_teacher

        systems["all-MiniLM-L6-v2"] = load_teacher()[0]
    for name, encode in systems.items():
        print(json.dumps({"system": name, "split": args.split, **scores(encode, rows, collection, args.split)}))


if __name__ == "__main__":
    main()
