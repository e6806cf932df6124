"""Render quality_sweep.py's JSON lines as the Markdown table of docs/RESULTS.md.

    python bench/results_table.py runs/sweep3.jsonl [more.jsonl ...]
"""

from __future__ import annotations

import json
import sys

COLUMNS = [
    ("configuration", "name"), ("command", "command"), ("dev acc.", "dev_accuracy"), ("threshold", "threshold"),
    ("test acc.", "test_accuracy"), ("test acc. @0.7", "test_accuracy_at_0_7"), ("ROC-AUC", "roc_auc"),
    ("AP", "average_precision"), ("train s", "train_seconds"),
]


def main() -> None:
    rows = [json.loads(line) for path in sys.argv[1:] for line in open(path) if line.strip()]
    rows.sort(key=lambda r: r["dev_accuracy"])
    print("| " + " | ".join(title for title, _ in COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for r in rows:
        cells = [f"`{r[key]}`" if key == "command" else str(r[key]) for _, key in COLUMNS]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
