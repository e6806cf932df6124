"""``dupq evaluate``, ``calibrate``, ``predict`` and ``report``: judge pairs with a model."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
import typer.core

from dupq.cli.common import (
    DATA_OPTION,
    THREADS,
    ModelArgument,
    ModelOption,
    Threads,
    Threshold,
    _data,
    _dropped,
    _threads,
    _threshold,
    command,
    model_argument,
)
from dupq.core.errors import DupqError
from dupq.core.files import check_apart, check_new_folder, to_json


@command(refused={"--retrieval": "--task quora-retrieval"})
def evaluate(
    model: ModelArgument = None,
    data: Annotated[Optional[Path], DATA_OPTION] = None,
    threshold: Threshold = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
    task: Annotated[
        str,
        typer.Option(
            help="The yardstick: quora-pairs (the test pairs), quora-retrieval (each held-out question searches the "
            "test and dev questions; MRR@10, nDCG@10, Recall@1/10 and P@1, the model's and BM25's), help-desks (420 hand-written help-desk "
            "questions among 19,862 Quora ones) or clean-pairs (hand-written paraphrases and near misses)."
        ),
    ] = "quora-pairs",
    split: Annotated[
        str, typer.Option(help="test (the reported figures) or dev (the figures to choose a model on).")
    ] = "test",
    pairs: Annotated[
        Optional[Path],
        typer.Option(
            help="Score your own labelled pairs instead (question1, question2, is_duplicate: what `dupq index "
            "decisions` writes) at the model's threshold: accuracy, precision, recall, ROC-AUC, ECE."
        ),
    ] = None,
    questions: Annotated[
        Optional[Path],
        typer.Option(help="Your old questions (any file `dupq index build` takes), searched by --queries."),
    ] = None,
    queries: Annotated[
        Optional[Path],
        typer.Option(
            help="Your new questions, a CSV/TSV with the columns question and old (the text or key of its old "
            "question): Recall@1/10, MRR@10, nDCG@10 and P@1 of their searches of --questions, the model's and BM25's."
        ),
    ] = None,
    threads: Threads = THREADS,
) -> None:
    """Score the test pairs (of the split the model was trained with) and report accuracy, F1, ROC-AUC, ...

    --task runs another of the yardsticks (dupq.evaluation.tasks), --split dev its figures to choose on;
    --pairs scores your own labelled pairs, --questions with --queries your own searches."""
    from dupq.evaluation.tasks import run_task
    from dupq.modeling.model import Model

    _threads(threads)
    own = _own_files(pairs, questions, queries, task, split, data)
    m = Model.load(model)
    data = None if data is None else _data(data)  # the default file is looked for only by the tasks that read it
    result = (
        _own_yardstick(m, own, _threshold(threshold)) if own else run_task(task, m, data, split, _threshold(threshold))
    )
    split = "labelled" if pairs is not None else split
    if json_out:
        typer.echo(to_json(result))
        return
    from rich.console import Console

    name = str(model or "bundled model")
    Console().print(_ranking_table(result, name) if "bm25" in result else _figures_table(result, name, split))


def _own_files(pairs, questions, queries, task: str, split: str, data) -> dict:
    """The desk's own files given (none: a task runs), refusing what does not go with them."""
    own = {k: v for k, v in {"pairs": pairs, "questions": questions, "queries": queries}.items() if v is not None}
    if not own:
        return own
    if (questions is None) != (queries is None):
        raise DupqError("--questions and --queries go together: the old questions and the new ones that search them.")
    if pairs is not None and questions is not None:
        raise DupqError("give --pairs or --questions with --queries, not both.")
    if task != "quora-pairs" or split != "test" or data is not None:
        raise DupqError("your own files are a yardstick of their own: give them without --task, --split or --data.")
    return own


def _own_yardstick(model, own: dict, threshold) -> dict:
    """A desk's own pairs judged (:func:`~dupq.evaluation.evaluate.evaluate`), or its searches measured."""
    import hashlib

    from dupq.data.pairs import read_pairs
    from dupq.data.questions import read_questions

    if "pairs" in own:
        from dupq.evaluation.evaluate import evaluate as judge

        labelled, dropped = read_pairs(own["pairs"])
        _dropped(own["pairs"], dropped)
        digest = hashlib.sha256(own["pairs"].read_bytes()).hexdigest()
        return {**judge(model, labelled, threshold), "pairs_file": str(own["pairs"]), "sha256": digest}
    from dupq.evaluation.desk import desk_retrieval

    if threshold is not None:
        raise DupqError("a search of your questions ranks them and takes no threshold.")
    old, new = read_questions(own["questions"]), read_questions(own["queries"], column="question")
    _dropped(own["questions"], old.dropped)
    _dropped(own["queries"], new.dropped)
    return desk_retrieval(model, old, new)


def _figures_table(result: dict, name: str, split: str):
    """A judging task's figures, one a row: the summary's (:data:`~dupq.evaluation.evaluate.SUMMARY`) first."""
    from rich.table import Table

    from dupq.evaluation.evaluate import SUMMARY

    rows = result.get(f"{split}_rows")
    where = f" (rows {rows[0]:,}-{rows[1]:,})" if rows else ""
    table = Table(title=f"{name}: {result['pairs']:,} {split} pairs{where}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    figures = [k for k in SUMMARY if k in result] + [k for k in result if k not in SUMMARY]
    for key in (k for k in figures if isinstance(result[k], float) or result[k] is None):
        table.add_row(key, "n/a" if result[key] is None else f"{result[key]:.4f}")
    if "confusion_matrix" in result:
        (tn, fp), (fn, tp) = result["confusion_matrix"]
        table.add_row("confusion matrix", f"[[{tn} {fp}]\n [{fn} {tp}]]")
    table.add_row("threshold on", str(result.get("threshold_on", "similarity")))
    table.add_row("threshold chosen on", str(result["threshold_chosen_on"]))
    return table


def _ranking_table(result: dict, name: str):
    """A ranking task's measures, the model's and BM25's side by side."""
    from rich.table import Table

    table = Table(
        title=f"{name}: {result['queries']:,} questions search {result['corpus']:,} ({result['relevant']:,} relevant)"
    )
    table.add_column("measure")
    table.add_column("model", justify="right")
    table.add_column("BM25", justify="right")
    for key, value in result["model"].items():
        table.add_row(key, f"{value:.4f}", f"{result['bm25'][key]:.4f}")
    return table


@command()
def calibrate(
    model: Annotated[Path, model_argument("Model folder to re-calibrate (rewritten in place, atomically).")],
    data: Annotated[Optional[Path], DATA_OPTION] = None,
    pairs: Annotated[
        Optional[Path],
        typer.Option(
            help="Calibrate on these labelled pairs instead of the data's dev split (a help desk's own: `dupq index decisions`)."
        ),
    ] = None,
    search: Annotated[
        bool,
        typer.Option(
            "--search",
            help="Fit the calibration and tiers of search hits instead, on the help-desk yardstick's dev searches.",
        ),
    ] = False,
    judged: Annotated[
        bool,
        typer.Option(
            "--judged", help="With --search, count the questions judged duplicates of a new question as positives too."
        ),
    ] = False,
    threads: Threads = THREADS,
) -> None:
    """Choose the model's threshold on the dev pairs (max accuracy; the max-F1 one is kept too) and store it.

    On --pairs (a help desk's decisions) it prints the model's accuracy, ROC-AUC and ECE on them before and
    after (cross-validated), and refuses a calibration no better than chance or worse than the model's own.
    With --search it fits how collections judge search hits, and their suggest and duplicate tiers, on the
    help-desk yardstick's dev half (the Quora calibration of lone pairs is left as it is)."""
    from dupq.data.pairs import held_out, read_pairs
    from dupq.evaluation.evaluate import calibrate_and_test, calibrate_on_decisions, summary_line
    from dupq.modeling.model import Model

    if judged and not search:
        raise DupqError("--judged goes with --search.")
    _threads(threads)
    m = Model.load(model)
    if search:
        if pairs is not None:
            raise DupqError("give --pairs or --search, not both.")
        from dupq.evaluation.search_calibration import calibrate_search

        fit = calibrate_search(m, _data(data), judged=judged)
        tiers = fit["fitted_on"]["tiers"]
        typer.echo(
            f"search calibration fitted on {fit['fitted_on']['pairs']:,} pairs of the help-desk dev searches: "
            f"suggest above {fit['suggest']:.3f} (precision {tiers['suggest']['precision']:.3f}), "
            f"duplicate above {fit['duplicate']:.3f} (precision {tiers['duplicate']['precision']:.3f})"
        )
        what = "search calibration"
    elif pairs is not None:
        if data is not None:
            raise DupqError("give --pairs or --data, not both.")
        own, dropped = read_pairs(pairs)
        _dropped(pairs, dropped)
        record = calibrate_on_decisions(m, own, log=lambda line: typer.echo(line, err=line.startswith("warning")))
        typer.echo(
            f"calibrated on {len(own):,} pairs of {pairs}: threshold {record['threshold']:.3f} on {record['threshold_on']}"
        )
        what = "threshold"
    else:
        splits = held_out(m.metrics, _data(data))
        typer.echo(summary_line(calibrate_and_test(m, splits.dev, splits.test)))
        what = "threshold"
    m.save(model, half=None)  # the weights at the precision they are stored in
    typer.echo(f"saved the {what} in {model / 'config.json'}")


@command()
def predict(
    question1: Annotated[Optional[str], typer.Argument(help="First question.", show_default=False)] = None,
    question2: Annotated[Optional[str], typer.Argument(help="Second question.", show_default=False)] = None,
    pairs: Annotated[
        Optional[str],
        typer.Option(help="File of question1<TAB>question2 lines, or - for stdin; one output line per pair."),
    ] = None,
    threshold: Threshold = None,
    model: ModelOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="JSON output (one object per pair).")] = False,
    chunk: Annotated[int, typer.Option(min=1, help="Pairs encoded together when streaming.")] = 4096,
    threads: Threads = THREADS,
) -> None:
    """Say whether two questions are duplicates: their similarity, probability and the verdict."""
    from dupq.data.questions import check_question
    from dupq.data.text import open_lines
    from dupq.modeling.model import Model
    from dupq.modeling.predict import judge, judge_stream, verdict_text
    from dupq.modeling.verdict import verdict_json

    if (pairs is None) == (question1 is None):
        raise DupqError("give either two questions or --pairs FILE, not both and not neither.")
    if pairs is None and question2 is None:
        raise DupqError("give the second question too (or --pairs FILE).")
    _threads(threads)
    threshold = _threshold(threshold)
    m = Model.load(model)
    t = m.threshold if threshold is None else threshold
    if pairs is None:
        q1 = check_question(question1, "question 1")
        q2 = check_question(question2, "question 2")
        j = judge(m, [q1], [q2], t)[0]
        if json_out:
            verdict = verdict_json(j["similarity"], j["duplicate"], t, j["probability"])
            typer.echo(to_json({"question1": q1, "question2": q2, **verdict}))
        else:
            typer.echo(verdict_text(j, m.threshold_on))
        return
    stream = open_lines(pairs)
    bad = judged = 0
    with stream:
        for items in judge_stream(m, stream, t, chunk):
            lines = []
            for item in items:
                if isinstance(item, DupqError):
                    bad += 1
                    if bad <= 20:
                        typer.echo(f"skipped: {item}", err=True)
                else:
                    judged += 1
                    lines.append(item.json() if json_out else item.text())
            try:
                if lines:
                    typer.echo("\n".join(lines))
            except BrokenPipeError:  # `| head`: the reader has what it wanted; stop quietly, as SIGPIPE would
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                raise typer.Exit(141) from None
    if bad:
        raise DupqError(f"{bad:,} line(s) could not be judged ({judged:,} judged); the first are listed above.")


@command()
def report(
    model: ModelArgument = None,
    out: Annotated[Path, typer.Option(help="Folder for index.html and its PNG files.")] = Path("runs/report"),
    overwrite: Annotated[bool, typer.Option(help="Write into --out even if it holds files.")] = False,
    data: Annotated[Optional[Path], DATA_OPTION] = None,
    threshold: Threshold = None,
    threads: Threads = THREADS,
) -> None:
    """Write an HTML report with pictures: training curves, histograms, ROC/PR curves, confusion matrix, worst errors."""
    from dupq.data.pairs import held_out
    from dupq.evaluation.report import write_report
    from dupq.modeling.model import Model

    _threads(threads)
    check_new_folder(out, overwrite)
    check_apart(out, model, data)
    threshold = _threshold(threshold)
    m = Model.load(model)
    result = write_report(m, held_out(m.metrics, _data(data)).test, out, threshold, title=str(model or "bundled model"))
    typer.echo(
        f"test accuracy {result['accuracy']:.4f} at threshold {result['threshold']:.4f}; wrote {out / 'index.html'}"
    )


# Collections: store old questions, search them, deduplicate a corpus (dupq.collection.collection, dupq.dedup.grouping).
