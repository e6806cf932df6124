"""How the labels treat pairs that differ by a few words, one of them WORD; one JSON line.

    dupq-lab pair-words again [--max-diff 3] [--data PATH]

Over the training pool (rows 0-299,999), the pairs whose word sets differ in at most
``--max-diff`` words, one of which is WORD: how many are labelled duplicates, how many not, and
a few examples. It shows what the labelled recipe can learn about a word (e.g. "again").
"""

from __future__ import annotations

import argparse
import json
import re

from dupq.data.pairs import SplitConfig, read_pairs
from dupq_lab.options import add_shared


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("word")
    parser.add_argument("--max-diff", type=int, default=3)
    add_shared(parser, "data")
    args = parser.parse_args()
    pairs, _ = read_pairs(args.data)
    counts, examples = {0: 0, 1: 0}, []
    for a, b, y, row in zip(pairs.q1, pairs.q2, pairs.labels, pairs.rows):
        if row >= SplitConfig().train_pool:
            continue
        diff = words(a) ^ words(b)
        if args.word.lower() in diff and len(diff) <= args.max_diff:
            counts[int(y)] += 1
            if len(examples) < 6:
                examples.append({"duplicate": int(y), "question1": a, "question2": b})
    print(
        json.dumps(
            {
                "word": args.word,
                "max_diff": args.max_diff,
                "duplicates": counts[1],
                "non_duplicates": counts[0],
                "examples": examples,
            },
            ensure_ascii=False,
        )
    )


if __name__ == "__main__":
    main()
