"""Render quality_sweep.py's JSON lines as a Markdown table of docs/experiments/.

    python bench/results_table.py runs/sweep/results.jsonl [more.jsonl ...]

Rows are sorted by what chose among them (dev accuracy); test columns are for the record.
Lines written by the earlier sweeps print "-" where a column is missing: the first had no dev
retrieval; the next ones have ``dev_mrr`` / ``test_mrr`` (question2's rank alone) where later ones
have MRR@10 over every known duplicate (``dupq evaluate --retrieval``).
"""

from __future__ import annotations

import json
import sys

COLUMNS = [
    ("configuration", "name"),
    ("command", "command"),
    ("val acc.", "val_accuracy"),
    ("dev acc.", "dev_accuracy"),
    ("dev MRR", "dev_mrr"),
    ("dev MRR@10", "dev_mrr@10"),
    ("test acc.", "test_accuracy"),
    ("ROC-AUC", "roc_auc"),
    ("ECE", "test_ece"),
    ("test MRR", "test_mrr"),
    ("test MRR@10", "test_mrr@10"),
    ("clean acc.", "clean_accuracy"),
    ("clean AUC", "clean_roc_auc"),
    ("best epoch", "best_epoch"),
    ("train s", "train_seconds"),
]


def cell(row: dict, key: str) -> str:
    value = row.get(key)
    if value is None:
        return "-"
    return f"`{value}`" if key == "command" else str(value)


def main() -> None:
    rows = [json.loads(line) for path in sys.argv[1:] for line in open(path) if line.strip()]
    rows.sort(key=lambda r: r.get("dev_accuracy") or 0)
    print("| " + " | ".join(title for title, _ in COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for r in rows:
        print("| " + " | ".join(cell(r, key) for _, key in COLUMNS) + " |")


if __name__ == "__main__":
    main()
