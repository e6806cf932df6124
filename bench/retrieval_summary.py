"""The README's retrieval table: search quality on Quora's held-out rows and on help-desk questions, from saved results.

    python bench/retrieval_summary.py

Reads what ``python bench/retrieval.py`` (Quora's held-out rows: every known duplicate relevant)
and ``python bench/out_of_domain.py --split test --minilm`` (the hand-written help-desk pairs of
``src/dupq/evaluation/yardsticks/help_desks.tsv`` against 20,000 Quora distractors; ``--model runs/adapted`` for the
bundled model after ``dupq adapt`` on the old questions and distractors) printed into docs/results/, and
prints one Markdown table. Nothing is measured here; a system a file did not measure is "-".
"""

from __future__ import annotations

from saved import RESULTS, last_json

SYSTEMS = [  # (key in the printed JSON, label)
    ("dupq", "dupq bundled"),
    ("adapted", "dupq bundled, adapted to the help desk's old questions (`dupq adapt`)"),
    ("minilm", "all-MiniLM-L6-v2 zero-shot"),
    ("bm25", "BM25 (bm25s)"),
]


def printed(name: str) -> dict:
    """The JSON line a saved command printed (the last one, if it printed several)."""
    return last_json(name) if (RESULTS / name).is_file() else {}


def fmt(measures: dict | None, key: str) -> str:
    return "-" if not measures or key not in measures else f"{measures[key]:.3f}"


def main() -> None:
    quora, helpdesk = printed("retrieval_heldout.json"), printed("out_of_domain_test.json")
    adapted = printed("out_of_domain_adapted_test.json")  # its "dupq" is the adapted model
    if adapted:
        helpdesk["adapted"] = adapted["dupq"]
    print("| system | Quora MRR@10 | Quora nDCG@10 | Quora Recall@10 | help desk Recall@1 | help desk MRR@10 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for key, label in SYSTEMS:
        q, h = quora.get(key), helpdesk.get(key)
        if q is None and h is None:
            continue
        cells = [fmt(q, "mrr@10"), fmt(q, "ndcg@10"), fmt(q, "recall@10"), fmt(h, "recall@1"), fmt(h, "mrr@10")]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
