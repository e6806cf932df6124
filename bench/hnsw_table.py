"""Render the saved HNSW sweeps (bench/hnsw_sweep.py) as one Markdown table: cost against recall@10.

    python bench/hnsw_table.py [--ef 24,32,40] [--file docs/results/hnsw_sweep.json]

The file holds two runs of hnsw_sweep.py over the same graphs: ``--query-seed 1``, on whose queries
the setting was chosen (the cheapest p50 with recall@10 >= 0.99), and ``--query-seed 0``, another
1,000 queries, only reported. One row per efSearch, one column per graph (M, efConstruction): recall@10 on
both samples and the reporting run's p50 of the graph walk alone (one query, one thread); the chosen
setting in bold. Nothing is measured here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SAVED = Path(__file__).resolve().parents[1] / "docs" / "results" / "hnsw_sweep.json"
KEY = ("m", "ef_construction", "ef_search")


def rows_of(entry: dict) -> tuple[dict[tuple, dict], dict]:
    """The sweep rows of one saved run, by setting, and its last line (``chosen``)."""
    lines = [json.loads(line) for line in entry["output"]]
    return {tuple(r[k] for k in KEY): r for r in lines if "m" in r}, lines[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ef", help="only these efSearch values (comma-separated); default: every one swept")
    parser.add_argument("--file", type=Path, default=SAVED)
    args = parser.parse_args()
    saved = json.loads(args.file.read_text())
    (choose, summary), (report, _) = (rows_of(e) for e in saved)  # the seed-1 run first, then seed 0
    chosen = tuple(summary["chosen"][k] for k in KEY) if summary["chosen"] else None
    graphs = sorted({key[:2] for key in choose})
    print(
        "| efSearch | "
        + " | ".join(f"M {m}, efConstruction {efc}: recall@10 (choosing / other queries), p50" for m, efc in graphs)
        + " |"
    )
    print("| --- |" + " --- |" * len(graphs))
    shown = {int(x) for x in args.ef.split(",")} if args.ef else {key[2] for key in choose}
    for ef in sorted(shown & {key[2] for key in choose}):
        cells = []
        for m, efc in graphs:
            key = (m, efc, ef)
            if key not in choose:
                cells.append("-")
                continue
            cell = f"{choose[key]['recall@10']:.4f} / {report[key]['recall@10']:.4f}, {report[key]['p50_us']:.0f} µs"
            cells.append(f"**{cell}** (chosen)" if key == chosen else cell)
        print(f"| {ef} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
