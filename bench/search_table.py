"""Render bench/search_speed.py's JSON line as the tables of docs/collections.md: speed per index, and memory at scale.

    python bench/search_table.py docs/results/search_speed.json speed|memory

The file is the line search_speed.py printed, with the command that printed it (``command``)
and the machine it ran on (``machine``) added. The first table is what was measured on every
distinct Quora question; the second multiplies each index's measured bytes per question (its
FAISS index file: FAISS holds in memory what it serialises) by 10M and 100M questions, and says
whether the index meets the target of a compressed index: at most 48 bytes per question at
recall@10 >= 0.95 (float32 vectors alone are 4 bytes a dimension, 512 for 128). Its last row is
the SQLite store (text, metadata, float32 vectors): the folder on disk less the index, which stays
on disk (the OS caches what is read); an ivfpq collection reads ``rerank`` stored vectors per
query from it.
"""

from __future__ import annotations

import json
import sys

NAMES = {"flat": "flat (exact)", "hnsw": "hnsw", "ivfpq": "ivfpq + exact re-ranking"}
TARGET_BYTES, TARGET_RECALL = 48, 0.95  # the target of a compressed index, per question


def settings(kind: str, row: dict) -> str:
    s = row.get("settings")
    if kind == "hnsw" and s:
        return f"{NAMES[kind]} (M {s['hnsw_m']}, efConstruction {s['ef_construction']}, efSearch {s['ef_search']})"
    if kind == "ivfpq" and s:
        return (
            f"{NAMES[kind]} (nlist {s['nlist']}, {s['pq_m']} bytes/code, nprobe {s['nprobe']}, re-rank {s['rerank']})"
        )
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
    print(
        "| index | build | on disk (store + index) | single query p50 / p99 (search alone p50) | batches of 256 | recall@10 vs exact |"
    )
    print("|---|---|---|---|---|---|")
    for kind in kinds:
        r = result[kind]
        print(
            f"| {settings(kind, r)} | {r['build_s']} s | {human(r['size_mb'] * 2**20)} | {r['p50_ms']} / {r['p99_ms']} ms "
            f"({r['index_p50_ms']} ms) | {r['batch256_qps']:,} q/s | {r['recall@10']} |"
        )


def memory(result: dict, kinds: list[str]) -> None:
    n = result["questions"]
    print(
        f"| index (in memory) | bytes/question | {n:,} questions | 10M questions | 100M questions "
        f"| <= {TARGET_BYTES} B/question at recall@10 >= {TARGET_RECALL} |"
    )
    print("|---|---|---|---|---|---|")
    for kind in kinds:
        r = result[kind]
        b = r["bytes_per_question"]
        meets = "yes" if b <= TARGET_BYTES and r["recall@10"] >= TARGET_RECALL else "no"
        print(f"| {NAMES[kind]} | {b:,} | {human(b * n)} | {human(b * 1e7)} | {human(b * 1e8)} | {meets} |")
    if kinds:  # every kind's folder holds the same store: the first one's, less its index
        r = result[kinds[0]]
        b = round(r["size_mb"] * 2**20 / n - r["bytes_per_question"])
        print(f"| SQLite store (on disk) | {b:,} | {human(b * n)} | {human(b * 1e7)} | {human(b * 1e8)} | |")


if __name__ == "__main__":
    main()
