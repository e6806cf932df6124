"""The yardsticks that decide the product: named tasks, each a function returning one plain dict.

``dupq evaluate MODEL --task NAME [--split dev|test]`` runs one (:func:`run_task`); the lab's scripts call the same
functions. Every task is ``task(model, data, split, threshold) -> dict``: ``data`` the Quora pairs file, ``split``
``"test"`` (reported) or ``"dev"`` (chosen on), ``threshold`` one in place of the model's (tasks that judge pairs only).
docs/judge.md (Evaluate, Yardsticks) says how each yardstick was written and judged.

* ``quora-pairs``: :func:`~dupq.evaluation.evaluate.evaluate` on the model's split's pairs.
* ``quora-retrieval``: :func:`~dupq.evaluation.retrieval.evaluate_retrieval`, each held-out
  question searching the test and dev questions (dev: the dev rows alone), beside BM25.
* ``help-desks``: ``yardsticks/help_desks.tsv`` (``domain, split, new, old``; 210 dev and 210
  test pairs, written for dupq): each new question searches every old question plus the first
  :data:`DISTRACTORS` distinct questions of Quora's dev rows; its own old question is relevant,
  and with ``judged`` the ones ``yardsticks/help_desks_judged.tsv`` judged duplicates too
  (:func:`read_judged`).
* ``clean-pairs``: ``yardsticks/clean_pairs.tsv`` (126 paraphrases, 126 near misses, no Quora
  question, no dev half), judged at the model's own threshold.

>>> round(run_task("help-desks", Model.load(), split="dev")["model"]["recall@1"], 3)   # doctest: +SKIP
0.362
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dupq.core.errors import DupqError
from dupq.data.pairs import Pairs, SplitConfig, default_data_path, held_out, read_pairs, split_pairs
from dupq.evaluation.evaluate import evaluate
from dupq.evaluation.metrics import threshold_free
from dupq.evaluation.retrieval import PARTS, RetrievalTask, evaluate_retrieval, retrieval_measures, task_summary
from dupq.modeling.model import ENCODE_BATCH, Model
from dupq.modeling.verdict import Verdicts

YARDSTICKS = Path(__file__).parent / "yardsticks"
HELP_DESKS = YARDSTICKS / "help_desks.tsv"
HELP_DESKS_JUDGED = YARDSTICKS / "help_desks_judged.tsv"
CLEAN_PAIRS = YARDSTICKS / "clean_pairs.tsv"
SPLITS = ("test", "dev")
COLUMNS = ("domain", "split", "new", "old")  # the help-desk file's
JUDGED_COLUMNS = ("split", "new", "candidate", "label")  # the judged file's (label 1: a duplicate, 0: not)
DISTRACTORS = 20_000  # Quora dev questions added to the help desks' collection at most (the seed split has 19,862)


@dataclass
class HelpDeskPairs:
    """The help-desk file's rows, column-wise, with its SHA-256."""

    domains: list[str]
    splits: list[str]  # "dev" or "test"
    new: list[str]  # the user's wording
    old: list[str]  # the question already answered
    sha256: str


def _tsv_rows(path: Path) -> tuple[list[list[str]], bytes]:
    """The rows of a tab-separated file and its bytes; unreadable is a :class:`DupqError` naming it."""
    try:
        raw = path.read_bytes()
        return list(csv.reader(io.StringIO(raw.decode("utf-8"), newline=""), delimiter="\t")), raw
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise DupqError(f"cannot read the pairs file {path}: {reason}.") from None


def read_help_desk_pairs(path: Path = HELP_DESKS) -> HelpDeskPairs:
    """Read and check the help-desk file; any problem is a :class:`DupqError` naming the file (and line)."""
    rows, raw = _tsv_rows(path)
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


def read_judged(path: Path = HELP_DESKS_JUDGED) -> dict[tuple[str, str], set[str]]:
    """The judged duplicates: ``(split, new question) -> {candidate judged a duplicate}`` (pairs labelled 1).

    Lines starting with ``#`` (the judging rule) are skipped; any other problem is a :class:`DupqError`
    naming the file and line."""
    rows, _ = _tsv_rows(path)
    numbered = [(n, r) for n, r in enumerate(rows, start=1) if not (r and r[0].startswith("#"))]
    if not numbered or tuple(numbered[0][1]) != JUDGED_COLUMNS:
        raise DupqError(f"{path} needs the header {' / '.join(JUDGED_COLUMNS)} (tab-separated).")
    judged: dict[tuple[str, str], set[str]] = {}
    for line, row in numbered[1:]:
        well_formed = len(row) == len(JUDGED_COLUMNS) and row[0] in SPLITS and row[3] in ("0", "1")
        if not well_formed or not all(x.strip() for x in row):
            raise DupqError(f"{path}, line {line}: needs a split of dev or test, two questions and a label of 0 or 1.")
        if row[3] == "1":
            judged.setdefault((row[0], row[1]), set()).add(row[2])
    return judged


def quora_distractors(pairs: Pairs, n: int = DISTRACTORS, split: SplitConfig | None = None) -> list[str]:
    """The first ``n`` distinct questions of the dev rows (of the seed split), in file order (never a test row)."""
    dev = split_pairs(pairs, split).dev
    return list(dict.fromkeys(q for a, b in zip(dev.q1, dev.q2) for q in (a, b)))[:n]


def help_desk_task(
    file: HelpDeskPairs, split: str, distractors: list[str], judged: dict[tuple[str, str], set[str]] | None = None
) -> RetrievalTask:
    """New questions of ``split`` search every old question of the file plus ``distractors``; relevant: its old one,
    and with ``judged`` (:func:`read_judged`) the questions of the collection judged its duplicates too."""
    corpus = list(dict.fromkeys([*file.old, *distractors]))
    position = {t: i for i, t in enumerate(corpus)}
    chosen = [i for i, s in enumerate(file.splits) if s == split]

    def relevant(i: int) -> np.ndarray:
        also = (judged or {}).get((split, file.new[i]), set())
        found = dict.fromkeys([position[file.old[i]], *sorted(position[t] for t in also if t in position)])
        return np.array(list(found), dtype=np.int64)  # its own old question first

    return RetrievalTask(
        corpus=corpus,
        queries=[file.new[i] for i in chosen],
        relevant=[relevant(i) for i in chosen],
        own=np.array([position.get(file.new[i], -1) for i in chosen], dtype=np.int64),
    )


def shipped_help_desk_task(data: Path | None, split: str, judged: bool = False) -> tuple[RetrievalTask, dict[str, Any]]:
    """The help-desk task of ``split`` with the distractors of ``data`` (and ``judged``: the judged duplicates
    relevant too), and what it is made of."""
    file = read_help_desk_pairs()
    distractors = quora_distractors(read_pairs(data or default_data_path())[0])
    task = help_desk_task(file, split, distractors, read_judged() if judged else None)
    summary = task_summary(task)
    if not judged:
        del summary["queries_with_more_than_one_relevant"]  # one old question each
    made_of = {"old_questions": len(set(file.old)), "distractors": len(distractors), "sha256": file.sha256}
    if judged:
        made_of["judged_sha256"] = hashlib.sha256(HELP_DESKS_JUDGED.read_bytes()).hexdigest()
    return task, {"split": split, **summary, **made_of}


def judged_clean_pairs(verdicts: Verdicts, labels: np.ndarray) -> dict[str, Any]:
    """The clean-pairs figures of one system's verdicts on pairs of ``labels`` (1: a paraphrase, 0: a near miss)."""
    para, near = labels == 1, labels == 0
    auc = threshold_free(verdicts.score, labels)["roc_auc"]
    return {
        "threshold": float(verdicts.threshold),
        "accuracy": round(float(np.mean(verdicts.duplicate == para)), 4),
        "paraphrase_recall": round(float(np.mean(verdicts.duplicate[para])), 4) if para.any() else None,
        "near_miss_specificity": round(float(np.mean(~verdicts.duplicate[near])), 4) if near.any() else None,
        "roc_auc": None if auc is None else round(auc, 4),
        "mean_score": {
            k: round(float(np.mean(verdicts.score[of])), 4)
            for k, of in (("paraphrase", para), ("near_miss", near))
            if of.any()
        },
        "pairs": len(labels),
    }


def _no_threshold(name: str, threshold: float | None) -> None:
    if threshold is not None:
        raise DupqError(f"the {name} task ranks questions and takes no threshold.")


def quora_pairs(model: Model, data: Path | None = None, split: str = "test", threshold: float | None = None) -> dict:
    """:func:`~dupq.evaluation.evaluate.evaluate` on the ``split`` pairs of the model's split, with their rows."""
    pairs = getattr(held_out(model.metrics, data or default_data_path()), split)
    return {**evaluate(model, pairs, threshold), f"{split}_rows": [int(pairs.rows.min()), int(pairs.rows.max())]}


def quora_retrieval(
    model: Model, data: Path | None = None, split: str = "test", threshold: float | None = None
) -> dict:
    """:func:`~dupq.evaluation.retrieval.evaluate_retrieval` on the held-out rows of ``split`` (:data:`PARTS`)."""
    _no_threshold("quora-retrieval", threshold)
    return evaluate_retrieval(model, read_pairs(data or default_data_path())[0], parts=PARTS[split])


def help_desks(model: Model, data: Path | None = None, split: str = "test", threshold: float | None = None) -> dict:
    """The help-desk task's measures (:func:`~dupq.evaluation.retrieval.ranking_measures`), the model's and BM25's.

    Returns ``{"split", "queries", "corpus", "relevant", "old_questions", "distractors", "sha256", "model": {measure:
    value}, "bm25": {...}}``; with one relevant question, Recall@1 = P@1 = the share found first.
    """
    _no_threshold("help-desks", threshold)
    task, made_of = shipped_help_desk_task(data, split)
    measures = retrieval_measures(lambda texts: model.encode(texts, batch_size=ENCODE_BATCH), task)
    return {**made_of, "model": measures, "bm25": retrieval_measures(None, task)}


def clean_pairs(model: Model, data: Path | None = None, split: str = "test", threshold: float | None = None) -> dict:
    """The clean pairs judged by ``model`` at its threshold (or ``threshold``), on what its threshold applies to."""
    if split != "test":
        raise DupqError("the clean pairs have no dev half: nothing is chosen on them, so run them with --split test.")
    pairs, _ = read_pairs(CLEAN_PAIRS)  # the kind column repeats the label: paraphrase 1, near_miss 0
    verdicts = model.verdicts(pairs.q1, pairs.q2, threshold)
    chosen_on = "given" if threshold is not None else model.judge.threshold_info.get("chosen_on", "unknown")
    return {
        "sha256": hashlib.sha256(CLEAN_PAIRS.read_bytes()).hexdigest(),
        "kinds": {"paraphrase": int(pairs.labels.sum()), "near_miss": int(len(pairs) - pairs.labels.sum())},
        "threshold_on": model.threshold_on,
        "threshold_chosen_on": chosen_on,
        **judged_clean_pairs(verdicts, pairs.labels),
    }


TASKS: dict[str, Callable[..., dict]] = {  # name -> task(model, data, split, threshold)
    "quora-pairs": quora_pairs,
    "quora-retrieval": quora_retrieval,
    "help-desks": help_desks,
    "clean-pairs": clean_pairs,
}


def run_task(name: str, model: Model, data: Path | None = None, split: str = "test", threshold: float | None = None):
    """The task called ``name`` (:data:`TASKS`) of ``model``: its plain dict of figures."""
    if name not in TASKS:
        raise DupqError(f"there is no evaluation task {name!r}; the tasks are {', '.join(TASKS)}.")
    if split not in SPLITS:
        raise DupqError(f"the split is test or dev, not {split!r}.")
    return TASKS[name](model, data, split, threshold)
