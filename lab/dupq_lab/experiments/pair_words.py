"""How the labels treat pairs that differ by a few words, one of them WORD; one JSON line.

    dupq-lab pair-words again [--max-diff 3] [--data PATH]

Over the training pool (rows 0-299,999), the pairs whose word sets differ in at most
``--max-diff`` words, one of which is WORD: how many are labelled duplicates, how many not, and
a few examples. It shows what the labelled recipe can learn about a word (e.g. "again").
"""

from __future__ import annotations

import json
import re
from typing import Annotated

import typer

from dupq.data.pairs import SplitConfig, read_pairs
from dupq_lab.options import DATA, Data


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def main(
    word: Annotated[str, typer.Argument(help="The word the two questions of a pair differ by.")],
    max_diff: Annotated[int, typer.Option(help="At most this many words differ.")] = 3,
    data: Data = DATA,
) -> None:
    pairs, _ = read_pairs(data)
    counts, examples = {0: 0, 1: 0}, []
    for a, b, y, row in zip(pairs.q1, pairs.q2, pairs.labels, pairs.rows):
        if row >= SplitConfig().train_pool:
            continue
        diff = words(a) ^ words(b)
        if word.lower() in diff and len(diff) <= max_diff:
            counts[int(y)] += 1
            if len(examples) < 6:
                examples.append({"duplicate": int(y), "question1": a, "question2": b})
    print(
        json.dumps(
            {
                "word": word,
                "max_diff": max_diff,
                "duplicates": counts[1],
                "non_duplicates": counts[0],
                "examples": examples,
            },
            ensure_ascii=False,
        )
    )


if __name__ == "__main__":
    typer.run(main)
