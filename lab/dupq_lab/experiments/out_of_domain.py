"""The help-desk yardstick (``dupq evaluate --task help-desks``), with all-MiniLM-L6-v2 beside it.

The task and its file are :mod:`dupq.evaluation.tasks`' (``help-desks``: 420 hand-written
(new question, old question) pairs of 21 help-desk domains, each new question of the split
searching every old question plus Quora's 19,862 dev questions as distractors). This prints the
task's measures of a dupq model (``--model``; default the bundled model) and of BM25, and with
``--minilm`` (the ``distil`` extra) all-MiniLM-L6-v2 zero-shot's on the same task.

``--write-questions FILE`` writes, instead, what a help desk adapts on (``dupq adapt FILE``): the
collection, every old question then the distractors, one a line, never a new question; it prints
{"wrote", "questions"}.

Prints one JSON line: {"split", "queries", "corpus", "relevant", "old_questions", "distractors",
"sha256", "dupq": {...}, "bm25": {...}, ["minilm": {...}], "model", "fingerprint"}.
A file or folder that cannot be read is one sentence on stderr and exit status 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from dupq.core.files import atomic_write
from dupq.evaluation.retrieval import RetrievalTask, retrieval_measures
from dupq.evaluation.tasks import help_desks, shipped_help_desk_task
from dupq.modeling.model import Model
from dupq_lab.options import DATA, Data, ModelFolder, Split, one_sentence


def write_questions(task: RetrievalTask, path: Path) -> None:
    """``task``'s collection (never a query), one question a line, as ``dupq adapt`` reads a file; the folder is made."""
    lines = "".join(q.replace("\r", " ").replace("\n", " ") + "\n" for q in task.corpus)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lines.encode("utf-8"))


@one_sentence
def main(
    split: Split = "dev",
    model: ModelFolder = None,
    minilm: Annotated[bool, typer.Option(help="Also score all-MiniLM-L6-v2 (the distil extra).")] = False,
    data: Data = DATA,
    questions_file: Annotated[
        Optional[Path], typer.Option("--write-questions", help="Write the collection, one a line, and stop.")
    ] = None,
) -> None:
    if questions_file:
        task, _ = shipped_help_desk_task(data, split)
        write_questions(task, questions_file)
        print(json.dumps({"wrote": str(questions_file), "questions": len(task.corpus)}))
        return
    folder, model = model, Model.load(model)
    result = help_desks(model, data, split)
    result["dupq"] = result.pop("model")
    if minilm:
        from dupq_lab.peers import sentence_encoder

        result["minilm"] = retrieval_measures(sentence_encoder()[0], shipped_help_desk_task(data, split)[0])
    print(json.dumps({**result, "model": str(folder or "bundled"), "fingerprint": model.fingerprint()}))
