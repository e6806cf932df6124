"""Stage 8's retrieval table (question2's rank, every model measured), from saved results; prints Markdown.

    python bench/retrieval_table.py

A record: the saved files hold what ``bench/retrieval.py`` printed at stage 8, before retrieval
moved into the library (``dupq.evaluation.retrieval``, whose measures ``bench/heldout_table.py``
tabulates).

Reads what ``bench/retrieval.py`` and ``bench/peers.py`` printed (docs/results/retrieval.json,
mpnet_student_retrieval.json, wide_student.json, bilstm_student.json, peers_minilm.json, peers_mpnet.json) and prints, per model, the
published MRR (question2's rank), Recall@1, the MRR with the query's other known duplicates
filtered out, and the MRR of the first known duplicate, with the labels' oracle (direct labels,
then with their transitive closure: retrieval_closure.json) as the last rows
(``bench/retrieval.py``'s module docstring defines each). Nothing is measured here.
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
RETRIEVAL = [  # (saved file, its command that ran bench/retrieval.py on the test definition, key, label)
    ("retrieval.json", "python bench/retrieval.py", "dupq", "dupq bundled (distilled from all-MiniLM-L6-v2)"),
    (
        "mpnet_student_retrieval.json",
        "python bench/retrieval.py --model runs/student-mpnet-half",
        "dupq",
        "dupq, the same recipe distilled from all-mpnet-base-v2",
    ),
    (
        "wide_student.json",
        "python bench/retrieval.py --model runs/wide256-half",
        "dupq",
        "dupq, the same recipe at width 256",
    ),
    (
        "bilstm_student.json",
        "python bench/retrieval.py --model runs/bilstm-half",
        "dupq",
        "dupq, the same recipe with a bidirectional LSTM",
    ),
    ("retrieval.json", "python bench/retrieval.py", "bm25", "BM25"),
]
PEERS = [  # (saved bench/peers.py output, label)
    ("peers_minilm.json", "all-MiniLM-L6-v2 zero-shot"),
    ("peers_mpnet.json", "all-mpnet-base-v2 zero-shot"),
]


def last_line(file: str, command: str | None = None) -> dict:
    """The last line ``command`` printed in a saved file (default: its last command), as JSON."""
    blocks = json.loads((RESULTS / file).read_text())
    block = next(b for b in blocks if b["command"] == command) if command else blocks[-1]
    return json.loads(block["output"][-1])


def fmt(value: float) -> str:
    return f"{value:.4f}"


def main() -> None:
    rows = [(label, last_line(file, command)[key]) for file, command, key, label in RETRIEVAL]
    rows += [(label, last_line(file)["retrieval"]["test"]) for file, label in PEERS]
    print("| model | MRR (published) | Recall@1 | MRR, other known duplicates filtered | MRR, any known duplicate |")
    print("| --- | --- | --- | --- | --- |")
    for label, r in rows:
        print(f"| {label} | {fmt(r['mrr'])} | {fmt(r['recall@1'])} | {fmt(r['mrr_filtered'])} | {fmt(r['mrr_any'])} |")
    ceiling = last_line("retrieval.json")["ceiling"]
    print(f"| oracle: every known duplicate first, in random order | {fmt(ceiling)} | - | 1 | 1 |")
    closed = last_line("retrieval_closure.json", "python bench/retrieval.py --closure")["ceiling"]
    print(f"| the same oracle, duplicates of duplicates known too (`--closure`) | {fmt(closed)} | - | 1 | 1 |")


if __name__ == "__main__":
    main()
