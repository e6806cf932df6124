"""The README's speed table, from saved side-by-side runs; nothing is measured here.

    python bench/speed_table.py

Reads docs/results/service_side_by_side.json (bench/service_side_by_side.py: the service and a
single in-process search, this code against an earlier main, alternating in one run) and
docs/results/train_speed.json (bench/train_speed.py --keras: the seed recipe against the seeds'
Keras model in one run, and encoding; the file holds several runs, each a fresh process, and the
table shows the run whose ratio is their median). Every comparison is between figures of one run:
absolute rates drift between sessions of a shared VM, and a process's training rate from one
process to the next.
"""

from __future__ import annotations

from saved import every_json, last_json


def main() -> None:
    service, runs = last_json("service_side_by_side.json"), every_json("train_speed.json")
    train = sorted(runs, key=lambda run: run["seed_vs_keras"])[len(runs) // 2]  # the median run (odd count)
    base, now = service["baseline"], service["current"]
    rows = [
        (
            "`dupq serve`, 16 clients searching 537,617 questions (HNSW): searches/s",
            f"{base['search_per_s']:,.0f}",
            f"{now['search_per_s']:,.0f}",
            f"{service['search_per_s_ratio']:.2f}x",
        ),
        (
            "the same: p99 searching / searching while adding",
            f"{base['search_p99_ms']:.0f} / {base['mixed_p99_ms']:.0f} ms",
            f"{now['search_p99_ms']:.0f} / {now['mixed_p99_ms']:.0f} ms",
            "",
        ),
        (
            "one search in process (encode, HNSW, hits), p50",
            f"{base['in_process_p50_ms']:.2f} ms",
            f"{now['in_process_p50_ms']:.2f} ms",
            f"{service['in_process_per_s_ratio']:.2f}x",
        ),
        (
            f"training, the seed recipe: pairs/s (before: the seeds' Keras model; the median of {len(runs)} runs)",
            f"{train['keras_seed_pairs_per_s']:,}",
            f"{train['train_pairs_per_s']['seed']:,}",
            f"{train['seed_vs_keras']:.2f}x",
        ),
        ("encoding questions/s (the bundled model's shape)", "", f"{train['encode_questions_per_s']:,}", ""),
    ]
    print(f"| on the 2-core CPU VM | before (main at {base['label']}) | now | ratio |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
