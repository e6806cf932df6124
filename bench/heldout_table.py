"""Retrieval on Quora's held-out rows and on the help-desk yardstick, from saved results; prints Markdown tables.

    python bench/heldout_table.py

Reads what ``bench/retrieval.py --minilm`` printed (docs/results/retrieval_heldout.json: the bundled
model, BM25 and all-MiniLM-L6-v2 on the test and dev rows, every known duplicate relevant) and
what ``bench/out_of_domain.py --minilm`` printed (out_of_domain_dev.json, out_of_domain_test.json)
and prints one row per system: MRR@10, nDCG@10, Recall@1, Recall@10, P@1
(:mod:`dupq.evaluation.retrieval` defines each). Nothing is measured here.
"""

from __future__ import annotations

from saved import RESULTS, last_json

SYSTEMS = [  # (key in the printed JSON, label)
    ("dupq", "dupq bundled"),
    ("adapted", "dupq bundled, adapted (`dupq adapt`)"),
    ("minilm", "all-MiniLM-L6-v2 zero-shot"),
    ("bm25", "BM25 (bm25s)"),
]
MEASURES = [
    ("mrr@10", "MRR@10"),
    ("ndcg@10", "nDCG@10"),
    ("recall@1", "Recall@1"),
    ("recall@10", "Recall@10"),
    ("p@1", "P@1"),
]


def rows(task: str, result: dict) -> None:
    for key, label in SYSTEMS:
        if key in result:
            print(f"| {task} | {label} | " + " | ".join(f"{result[key][m]:.4f}" for m, _ in MEASURES) + " |")


def main() -> None:
    print("| task | system | " + " | ".join(label for _, label in MEASURES) + " |")
    print("| --- | --- |" + " --- |" * len(MEASURES))
    quora = last_json("retrieval_heldout.json")
    rows(f"Quora test+dev rows: {quora['queries']:,} queries, {quora['corpus']:,} questions", quora)
    for split in ("dev", "test"):
        ood = last_json(f"out_of_domain_{split}.json")
        task = f"help desks, {split} half: {ood['queries']} queries, {ood['old_questions'] + ood['distractors']:,} questions"
        adapted = RESULTS / f"out_of_domain_adapted_{split}.json"
        if adapted.is_file():  # the bundled model after `dupq adapt` on the old questions and distractors
            ood["adapted"] = last_json(adapted.name)["dupq"]
        rows(task, ood)


if __name__ == "__main__":
    main()
