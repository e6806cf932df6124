"""Retrieval on the test definition, every model measured, from saved results; prints a Markdown table.

    python bench/retrieval_table.py

Reads what ``bench/retrieval.py`` and ``bench/peers.py`` printed (docs/results/retrieval.json,
mpnet_student_retrieval.json, peers_minilm.json, peers_mpnet.json) and prints, per model, the
published MRR (question2's rank), Recall@1, the MRR with the query's other known duplicates
filtered out, and the MRR of the first known duplicate, with the labels' oracle as the last row
(``bench/retrieval.py``'s module docstring defines each). Nothing is measured here.
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
RETRIEVAL = [  # (saved bench/retrieval.py output, key, label)
    ("retrieval.json", "dupq", "dupq bundled (distilled from all-MiniLM-L6-v2)"),
    ("mpnet_student_retrieval.json", "dupq", "dupq, the same recipe distilled from all-mpnet-base-v2"),
    ("retrieval.json", "bm25", "BM25"),
]
PEERS = [  # (saved bench/peers.py output, label)
    ("peers_minilm.json", "all-MiniLM-L6-v2 zero-shot"),
    ("peers_mpnet.json", "all-mpnet-base-v2 zero-shot"),
]


def last_line(file: str) -> dict:
    return json.loads(json.loads((RESULTS / file).read_text())[-1]["output"][-1])


def fmt(value: float) -> str:
    return f"{value:.4f}"


def main() -> None:
    rows = [(label, last_line(file)[key]) for file, key, label in RETRIEVAL]
    rows += [(label, last_line(file)["retrieval"]["test"]) for file, label in PEERS]
    print("| model | MRR (published) | Recall@1 | MRR, other known duplicates filtered | MRR, any known duplicate |")
    print("| --- | --- | --- | --- | --- |")
    for label, r in rows:
        print(f"| {label} | {fmt(r['mrr'])} | {fmt(r['recall@1'])} | {fmt(r['mrr_filtered'])} | {fmt(r['mrr_any'])} |")
    ceiling = last_line("retrieval.json")["ceiling"]
    print(f"| oracle: every known duplicate first, in random order | {fmt(ceiling)} | - | 1 | 1 |")


if __name__ == "__main__":
    main()
