"""The README's headline table: dupq's models and MiniLM on the seed's test pairs, from saved results.

    python bench/summary_table.py

Reads what the sweeps and the peer benchmark printed (docs/results/*.jsonl, peers_*.json) and
prints a Markdown table: accuracy at the dev-chosen threshold, ROC-AUC and expected calibration
error, one row per model. Search quality is the next table's (bench/retrieval_summary.py): the
question2-only MRR these files also hold is the retired measure (docs/experiments/8-retrieval-ceiling.md).
Nothing is measured here.
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
# (sweep row, label): the bundled model first, then what it replaced.
ROWS = [
    ("distil-words-6", "dupq bundled (labelled recipe + distilled MiniLM)"),
    ("labelled-mlp-6", "dupq, labelled recipe without the teacher"),
    ("seed-best", "dupq, the duplicates-only model before them"),
]
# (saved bench/peers.py output, label): pretrained sentence encoders, untouched by us.
PEERS = [
    ("peers_minilm.json", "all-MiniLM-L6-v2 zero-shot (`bench/peers.py`)"),
    ("peers_mpnet.json", "all-mpnet-base-v2 zero-shot (`bench/peers.py --model-folder`)"),
]


def sweep_rows() -> dict[str, dict]:
    return {
        row["name"]: row
        for path in sorted(RESULTS.glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
        for row in [json.loads(line)]
    }


def fmt(value) -> str:
    return "-" if value is None else f"{value:.4f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def main() -> None:
    rows = sweep_rows()
    print("| model | accuracy | ROC-AUC | ECE |")
    print("| --- | --- | --- | --- |")
    for name, label in ROWS:
        r = rows[name]
        print(f"| {label} | {fmt(r['test_accuracy'])} | {fmt(r['roc_auc'])} | {fmt(r.get('test_ece'))} |")
    for file, label in PEERS:
        peer = json.loads(json.loads((RESULTS / file).read_text())[-1]["output"][-1])
        test = peer["test"]
        print(
            f"| {label} | {fmt(test['accuracy'])} | {fmt(test['roc_auc'])} "
            f"| {fmt(test['expected_calibration_error'])} (Platt) |"
        )


if __name__ == "__main__":
    main()
