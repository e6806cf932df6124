"""Render the saved side-by-side service run (bench/service_side_by_side.py) as a Markdown table.

    python bench/service_table.py [docs/results/service_side_by_side.json]

The file holds the command and the JSON line it printed. One row per side (the earlier revision
and this code): the search-only phase's searches/s, p50 and p99, the mixed phase's searches/s and
p99 (searches and adds), the in-process single search (one query at a time, one thread), and what
``kill -9`` lost of the acknowledged adds. Nothing is measured here.
"""

from __future__ import annotations

import sys
from pathlib import Path

from saved import last_json

SAVED = "service_side_by_side.json"


def main() -> None:
    result = last_json(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else SAVED)
    print(
        "| code | searches/s | p50 / p99 | with adds: searches/s, p99 | in-process single search | kill -9: lost / acked |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for label, side in (
        (f"main at {result['baseline']['label']}, one process", result["baseline"]),
        ("this code, `dupq serve` default workers", result["current"]),
    ):
        print(
            f"| {label} | {side['search_per_s']:,.0f} | {side['search_p50_ms']:.1f} / {side['search_p99_ms']:.1f} ms "
            f"| {side['mixed_search_per_s']:,.0f}, {side['mixed_p99_ms']:.1f} ms "
            f"| {side['in_process_per_s']:,.0f}/s, p50 {side['in_process_p50_ms']:.2f} ms "
            f"| {side['kill9_lost']} / {side['kill9_acked']:,} |"
        )
    print(f"| ratio | {result['search_per_s_ratio']:.2f}x | | | {result['in_process_per_s_ratio']:.2f}x | |")


if __name__ == "__main__":
    main()
