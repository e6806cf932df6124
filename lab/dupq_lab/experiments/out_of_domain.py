"""The help-desk yardstick (``dupq evaluate --task help-desks``), with all-MiniLM-L6-v2 beside it.

The task and its file are :mod:`dupq.evaluation.tasks`' (``help-desks``: 420 hand-written
(new question, old question) pairs of 21 help-desk domains, each new question of the split
searching every old question plus Quora's 19,862 dev questions as distractors). This prints the
task's measures of a dupq model (``--model``; default the bundled model) and of BM25, and with
``--minilm`` (the ``distil`` extra) all-MiniLM-L6-v2 zero-shot's on the same task.

    python bench/out_of_domain.py [--split dev|test] [--model DIR] [--minilm] [--data PATH]
    python bench/out_of_domain.py --write-questions runs/ood-questions.txt

``--write-questions FILE`` writes, instead, what a help desk adapts on (``dupq adapt FILE``): the
collection, every old question then the distractors, one a line, never a new question; it prints
{"wrote", "questions"}.

Prints one JSON line: {"split", "queries", "corpus", "relevant", "old_questions", "distractors",
"sha256", "dupq": {...}, "bm25": {...}, ["minilm": {...}], "model", "fingerprint"}.
A file or folder that cannot be read is one sentence on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dupq.core.files import DupqError, atomic_write
from dupq.evaluation.retrieval import RetrievalTask, retrieval_measures
from dupq.evaluation.tasks import SPLITS, help_desks, shipped_help_desk_task
from dupq.modeling.model import Model


def write_questions(task: RetrievalTask, path: Path) -> None:
    """``task``'s collection (never a query), one question a line, as ``dupq adapt`` reads a file; the folder is made."""
    lines = "".join(q.replace("\r", " ").replace("\n", " ") + "\n" for q in task.corpus)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lines.encode("utf-8"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=SPLITS, default="dev", help="dev (choose on it) or test (only report it)")
    parser.add_argument("--model", type=Path, default=None, help="a dupq model folder (default: the bundled model)")
    parser.add_argument("--minilm", action="store_true", help="also score all-MiniLM-L6-v2 (the distil extra)")
    parser.add_argument(
        "--data", type=Path, default=None, help="Quora pairs file (default: $DUPQ_DATA or ../shared/data/...)"
    )
    parser.add_argument("--write-questions", type=Path, default=None, help="write the collection, one a line, and stop")
    args = parser.parse_args()
    try:
        if args.write_questions:
            task, _ = shipped_help_desk_task(args.data, args.split)
            write_questions(task, args.write_questions)
            print(json.dumps({"wrote": str(args.write_questions), "questions": len(task.corpus)}))
            return 0
        model = Model.load(args.model)
        result = help_desks(model, args.data, args.split)
        result["dupq"] = result.pop("model")
        if args.minilm:
            from peers import sentence_encoder

            result["minilm"] = retrieval_measures(
                sentence_encoder()[0], shipped_help_desk_task(args.data, args.split)[0]
            )
    except DupqError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({**result, "model": str(args.model or "bundled"), "fingerprint": model.fingerprint()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
