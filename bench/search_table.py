"""Render bench/search_speed.py's JSON line as the README's tables: speed per index, and memory at scale.

    python bench/search_table.py docs/results/search_speed.json speed|memory

The first table is what was measured on the 537k Quora questions; the second multiplies each
index's measured bytes per question (its FAISS index, the part that must sit in memory) by 10M
and 100M questions. The SQLite store (text, metadata, float32 vectors) stays on disk and is not
counted; an ivfpq collection reads ``rerank`` stored vectors per query from it.
"""

from __future__ import annotations

import json
import sys

NAMES = {"flat": "flat (exact)", "hnsw": "hnsw", "ivfpq": "ivfpq + exact re-ranking"}


def settings(kind: str, row: dict) -> str:
    s = row.get("settings")
    if kind == "ivfpq" and s:
        return f"{NAMES[kind]} (nlist {s['nlist']}, {s['pq_m']} bytes/code, nprobe {s['nprobe']}, re-rank {s['rerank']})"
    return NAMES.get(kind, kind)


def human(n_bytes: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n_bytes >= size:
            return f"{n_bytes / size:,.1f} {unit}"
    return f"{n_bytes:,.0f} B"


def main() -> None:
    result = json.loads(open(sys.argv[1]).read())
    kinds = [k for k in NAMES if k in result]
    if sys.argv[2] == "speed":
        speed(result, kinds)
    else:
        memory(result, kinds)


def speed(result: dict, kinds: list[str]) -> None:
    print("| index | build | bytes/question in memory | single query p50 / p99 (search alone p50) | batches of 256 | recall@10 vs exact |")
    print("|---|---|---|---|---|---|")
    for kind in kinds:
        r = result[kind]
        print(f"| {settings(kind, r)} | {r['build_s']} s | {r['bytes_per_question']:,} | {r['p50_ms']} / {r['p99_ms']} ms "
              f"({r['index_p50_ms']} ms) | {r['batch256_qps']:,} q/s | {r['recall@10']} |")


def memory(result: dict, kinds: list[str]) -> None:
    print(f"| index | measured on {result['questions']:,} questions | 10M questions | 100M questions |")
    print("|---|---|---|---|")
    for kind in kinds:
        b = result[kind]["bytes_per_question"]
        print(f"| {NAMES[kind]} | {human(b * result['questions'])} | {human(b * 1e7)} | {human(b * 1e8)} |")


if __name__ == "__main__":
    main()
