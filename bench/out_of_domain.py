"""An out-of-domain yardstick: find a help desk's old question from a user's new wording of it.

``bench/data/out_of_domain.tsv`` was written by hand for dupq: 420 (new question, old question)
pairs from 21 domains of help desks and forums (software, travel, banking, home repair, pets,
jobs, ...), every question invented for this project, none taken from Quora or any data set.
Its columns are ``domain, split, new, old``; within each domain the pairs alternate between
``dev`` (210: choose on these) and ``test`` (210: only reported).

Each new question of the chosen split searches one collection: **every** old question of the
file (both splits, 420) plus the first ``--distractors`` (20,000) distinct questions of Quora's
**dev** rows (the seed split's, in file order; never a test row), as distractors: the 10,240 dev
rows hold 19,862, so all of them by default. The one
relevant question is its own old question. The measures are the library's
(:func:`dupq.evaluation.retrieval.ranking_measures`: trec_eval's MRR@10, nDCG@10, Recall@1 and
Recall@10, P@1; with one relevant question Recall@1 = P@1 = the share found first), for:

* ``dupq``: a dupq model folder (``--model``; default the bundled model), exact cosine search;
* ``bm25``: BM25 from the ``bm25s`` package (its defaults);
* ``minilm`` (with ``--minilm``; the ``distil`` extra): all-MiniLM-L6-v2 zero-shot.

    python bench/out_of_domain.py [--split dev|test] [--model DIR] [--minilm] [--data PATH] [--distractors N]
    python bench/out_of_domain.py --write-questions runs/ood-questions.txt

``--write-questions FILE`` writes, instead, what a help desk adapts on (``dupq adapt FILE``): the
collection, every old question then the distractors, one a line, never a new question; it prints
{"wrote", "questions"}.

Prints one JSON line: {"split", "queries", "corpus", "old_questions", "distractors", "file",
"sha256", "dupq": {...}, "bm25": {...}, ["minilm": {...}], "model", "fingerprint"}.
A file or folder that cannot be read is one sentence on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dupq.core.files import DupqError, atomic_write
from dupq.data.pairs import Pairs, SplitConfig, default_data_path, read_pairs, split_pairs
from dupq.evaluation.retrieval import RetrievalTask, retrieval_measures, task_summary
from dupq.modeling.model import ENCODE_BATCH, Model

REPO = Path(__file__).resolve().parents[1]
PAIRS = REPO / "bench" / "data" / "out_of_domain.tsv"
COLUMNS = ("domain", "split", "new", "old")
SPLITS = ("dev", "test")
DISTRACTORS = 20_000


@dataclass
class HelpDeskPairs:
    """The file's rows, column-wise, with its SHA-256."""

    domains: list[str]
    splits: list[str]  # "dev" or "test"
    new: list[str]  # the user's wording
    old: list[str]  # the question already answered
    sha256: str


def read_help_desk_pairs(path: Path) -> HelpDeskPairs:
    """Read and check the file; any problem is a :class:`DupqError` naming the file (and line)."""
    try:
        raw = path.read_bytes()
        rows = list(csv.reader(io.StringIO(raw.decode("utf-8"), newline=""), delimiter="\t"))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise DupqError(f"cannot read the pairs file {path}: {reason}.") from None
    if not rows or tuple(rows[0]) != COLUMNS:
        raise DupqError(f"{path} needs the header {' / '.join(COLUMNS)} (tab-separated).")
    body = rows[1:]
    for line, row in enumerate(body, start=2):
        if len(row) != len(COLUMNS) or row[1] not in SPLITS or not all(x.strip() for x in row):
            raise DupqError(f"{path}, line {line}: needs a domain, a split of dev or test and two questions.")
    if not body:
        raise DupqError(f"{path} holds no pairs.")
    domains, splits, new, old = (list(column) for column in zip(*body))
    return HelpDeskPairs(domains, splits, new, old, hashlib.sha256(raw).hexdigest())


def quora_distractors(pairs: Pairs, n: int, split: SplitConfig | None = None) -> list[str]:
    """The first ``n`` distinct questions of the dev rows (of the seed split), in file order (never a test row)."""
    dev = split_pairs(pairs, split).dev
    return list(dict.fromkeys(q for a, b in zip(dev.q1, dev.q2) for q in (a, b)))[:n]


def help_desk_task(file: HelpDeskPairs, split: str, distractors: list[str]) -> RetrievalTask:
    """New questions of ``split`` search every old question of the file plus ``distractors``; relevant: its old one."""
    corpus = list(dict.fromkeys([*file.old, *distractors]))
    position = {t: i for i, t in enumerate(corpus)}
    chosen = [i for i, s in enumerate(file.splits) if s == split]
    return RetrievalTask(
        corpus=corpus,
        queries=[file.new[i] for i in chosen],
        relevant=[np.array([position[file.old[i]]], dtype=np.int64) for i in chosen],
        own=np.array([position.get(file.new[i], -1) for i in chosen], dtype=np.int64),
    )


def write_questions(task: RetrievalTask, path: Path) -> None:
    """``task``'s collection (never a query), one question a line, as ``dupq adapt`` reads a file; the folder is made."""
    lines = "".join(q.replace("\r", " ").replace("\n", " ") + "\n" for q in task.corpus)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lines.encode("utf-8"))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=SPLITS, default="dev", help="dev (choose on it) or test (only report it)")
    parser.add_argument("--pairs", type=Path, default=PAIRS, help="the pairs file (default: bench/data/...)")
    parser.add_argument("--model", type=Path, default=None, help="a dupq model folder (default: the bundled model)")
    parser.add_argument("--minilm", action="store_true", help="also score all-MiniLM-L6-v2 (the distil extra)")
    parser.add_argument(
        "--data", type=Path, default=None, help="Quora pairs file (default: $DUPQ_DATA or ../shared/data/...)"
    )
    parser.add_argument(
        "--distractors",
        type=int,
        default=DISTRACTORS,
        help="at most this many Quora dev questions added (default 20,000: all 19,862)",
    )
    parser.add_argument(
        "--write-questions", type=Path, default=None, help="write the collection, one question a line, and stop"
    )
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    try:
        file = read_help_desk_pairs(args.pairs)
        distractors = quora_distractors(read_pairs(args.data or default_data_path())[0], args.distractors)
        task = help_desk_task(file, args.split, distractors)
        if args.write_questions:
            write_questions(task, args.write_questions)
            print(json.dumps({"wrote": str(args.write_questions), "questions": len(task.corpus)}))
            return 0
        model = Model.load(args.model)
        out = {
            "dupq": retrieval_measures(lambda texts: model.encode(texts, ENCODE_BATCH), task),
            "bm25": retrieval_measures(None, task),
        }
        if args.minilm:
            from peers import sentence_encoder

            out["minilm"] = retrieval_measures(sentence_encoder()[0], task)
    except DupqError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    shown = args.pairs.resolve()
    summary = task_summary(task)
    del summary["queries_with_more_than_one_relevant"]  # one old question each
    print(
        json.dumps(
            {
                "split": args.split,
                **summary,
                "old_questions": len(set(file.old)),
                "distractors": len(distractors),
                "file": str(shown.relative_to(REPO) if shown.is_relative_to(REPO) else args.pairs),
                "sha256": file.sha256,
                **out,
                "model": str(args.model or "bundled"),
                "fingerprint": model.fingerprint(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
