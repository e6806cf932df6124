"""A report with pictures: how a model was trained and how it judges the test pairs.

``write_report(model, test_pairs, out)`` writes ``out/index.html`` and its PNG files beside it (relative paths: the
folder can be moved): ``training.png`` (loss per epoch), ``histogram.png`` (scores of duplicates and non-duplicates, the
threshold drawn), ``roc.png`` and ``pr.png`` (the operating point marked), ``confusion.png`` (rows true, columns
predicted) and, for a model with a probability, ``reliability.png`` with its ECE. The page ends with the worst errors of
either kind, HTML-escaped. The score is the one the threshold applies to and the verdict
:func:`dupq.modeling.verdict.above`, as everywhere; figures are drawn with matplotlib's ``Figure`` (Agg, no pyplot
state).
"""

from __future__ import annotations

import html
import io
import os
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from dupq.core.errors import DupqError
from dupq.core.files import atomic_write
from dupq.data.pairs import Pairs
from dupq.evaluation.evaluate import SUMMARY, evaluate_scores, pair_verdicts
from dupq.evaluation.metrics import expected_calibration_error, precision_recall_curve, reliability, roc_curve
from dupq.modeling.judge import PROBABILITY, SEED_THRESHOLD, SIMILARITY
from dupq.modeling.model import Model
from dupq.modeling.verdict import SCORE_NAMES, above

DUP, NON = "#d62728", "#1f77b4"  # duplicate red, non-duplicate blue, in every picture


def _png(fig: Figure, path: Path) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    atomic_write(path, buffer.getvalue())
    return path.name


def _figure(width: float, height: float) -> tuple[Figure, Any]:
    """A figure of ``width`` x ``height`` inches and its one plot."""
    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def training_figure(history: list[dict[str, Any]]) -> Figure:
    """Train and validation loss per epoch."""
    fig, ax = _figure(6, 3.6)
    epochs = [h["epoch"] for h in history]
    ax.plot(epochs, [h["train_loss"] for h in history], "o-", label="train loss")
    ax.plot(epochs, [h["val_loss"] for h in history], "s-", label="validation loss")
    ax.set(xlabel="epoch", ylabel="triplet loss per pair", title="Training curves")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def histogram_figure(scores: np.ndarray, labels: np.ndarray, threshold: float, on: str = SIMILARITY) -> Figure:
    """Score histograms of duplicate and non-duplicate pairs, with the threshold(s)."""
    fig, ax = _figure(6, 3.6)
    low = 0.0 if on == PROBABILITY else min(-0.2, float(scores.min()))
    bins = np.linspace(low, 1.0, 61)  # (61,)
    ax.hist(scores[labels == 0], bins=bins, alpha=0.55, color=NON, label=f"non-duplicates ({np.sum(labels == 0):,})")
    ax.hist(scores[labels == 1], bins=bins, alpha=0.55, color=DUP, label=f"duplicates ({np.sum(labels == 1):,})")
    ax.axvline(threshold, color="black", lw=1.5, label=f"threshold {threshold:.3f}")
    if on == SIMILARITY and abs(threshold - SEED_THRESHOLD) > 1e-9:
        ax.axvline(SEED_THRESHOLD, color="gray", lw=1, ls="--", label="the seeds' 0.7")
    name = "probability of a duplicate" if on == PROBABILITY else "cosine similarity"
    ax.set(xlabel=name, ylabel="test pairs", title=f"{name.capitalize()} of test pairs")
    ax.legend(fontsize=8, loc="upper left")
    return fig


def reliability_figure(probabilities: np.ndarray, labels: np.ndarray) -> Figure:
    """Reliability diagram: mean predicted probability vs share of duplicates per tenth, and the diagonal."""
    r = reliability(probabilities, labels)
    ece = expected_calibration_error(probabilities, labels)
    fig, ax = _figure(4.2, 4.2)
    ax.plot([0, 1], [0, 1], color="gray", ls="--", lw=1, label="perfectly calibrated")
    used = [i for i, n in enumerate(r["pairs"]) if n]
    xs, ys = [r["mean_probability"][i] for i in used], [r["duplicate_share"][i] for i in used]
    ax.plot(xs, ys, "o-", color=DUP, label="test pairs")
    for i, x, y in zip(used, xs, ys):
        ax.annotate(f"{r['pairs'][i]:,}", (x, y), fontsize=6, xytext=(3, -8), textcoords="offset points")
    ax.set(xlim=(0, 1), ylim=(0, 1), title=f"Reliability (ECE {ece:.3f})")
    ax.set(xlabel="predicted probability (mean per tenth)", ylabel="share that are duplicates")
    ax.legend(fontsize=8, loc="upper left")
    return fig


def roc_figure(scores: np.ndarray, labels: np.ndarray, threshold: float, auc: float) -> Figure:
    fpr, tpr, _ = roc_curve(scores, labels)
    predicted = above(scores, threshold)  # (N,) bool
    point = (np.mean(predicted[labels == 0]), np.mean(predicted[labels == 1]))
    fig, ax = _figure(4.2, 4.2)
    ax.plot(fpr, tpr, color=DUP, label=f"ROC, AUC {auc:.4f}")
    ax.plot([0, 1], [0, 1], color="gray", ls=":", lw=1, label="chance")
    ax.plot(*point, "ko", label=f"threshold {threshold:.3f}")
    ax.set(xlabel="false positive rate", ylabel="true positive rate", title="ROC curve", xlim=(0, 1), ylim=(0, 1.01))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return fig


def pr_figure(
    scores: np.ndarray, labels: np.ndarray, threshold: float, ap: float, precision: float, recall: float
) -> Figure:
    prec, rec, _ = precision_recall_curve(scores, labels)
    fig, ax = _figure(4.2, 4.2)
    ax.step(np.r_[0.0, rec], np.r_[prec[0], prec], where="pre", color=DUP, label=f"AP {ap:.4f}")
    ax.axhline(np.mean(labels), color="gray", ls=":", lw=1, label="share of duplicates")
    ax.plot(recall, precision, "ko", label=f"threshold {threshold:.3f}")
    ax.set(xlabel="recall", ylabel="precision", title="Precision-recall curve", xlim=(0, 1), ylim=(0, 1.01))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    return fig


def confusion_figure(matrix: list[list[int]]) -> Figure:
    cm = np.asarray(matrix)  # (2, 2): rows true 0/1, columns predicted 0/1
    fig, ax = _figure(3.8, 3.4)
    ax.imshow(cm, cmap="Blues")
    for (i, j), n in np.ndenumerate(cm):
        ax.text(j, i, f"{n:,}", ha="center", va="center", color="white" if n > cm.max() / 2 else "black", fontsize=13)
    names = ["different (0)", "duplicate (1)"]
    ax.set_xticks([0, 1], names)
    ax.set_yticks([0, 1], names, rotation=90, va="center")
    ax.set(xlabel="predicted", ylabel="true", title="Confusion matrix")
    return fig


def worst_errors(scores: np.ndarray, pairs: Pairs, threshold: float, k: int = 10) -> dict[str, list[dict[str, Any]]]:
    """The ``k`` most confident false positives (highest score) and false negatives (lowest); ``scores``
    are what the threshold applies to (the cosine or the probability)."""
    labels, called = pairs.labels, above(scores, threshold)  # (N,), (N,) bool
    fp = np.flatnonzero((labels == 0) & called)
    fn = np.flatnonzero((labels == 1) & ~called)
    shown = np.round(scores, 4)  # ties at the printed precision keep the pairs' order
    fp = fp[np.argsort(-shown[fp], kind="stable")[:k]]
    fn = fn[np.argsort(shown[fn], kind="stable")[:k]]

    def rows(index: np.ndarray) -> list[dict[str, Any]]:
        return [
            {"id": pairs.ids[i], "score": float(scores[i]), "question1": pairs.q1[i], "question2": pairs.q2[i]}
            for i in index
        ]

    return {"false_positives": rows(fp), "false_negatives": rows(fn)}


def _error_table(title: str, why: str, rows: list[dict[str, Any]], score: str) -> str:
    e = html.escape
    body = (
        "".join(
            f"<tr><td>{e(r['id'])}</td><td class=num>{r['score']:.4f}</td>"
            f"<td>{e(r['question1'][:500])}</td><td>{e(r['question2'][:500])}</td></tr>"
            for r in rows
        )
        or "<tr><td colspan=4>none</td></tr>"
    )
    return (
        f"<h3>{e(title)}</h3><p>{e(why)}</p><table class=errors>"
        f"<tr><th>id</th><th>{e(score)}</th><th>question 1</th><th>question 2</th></tr>{body}</table>"
    )


def _metrics_table(m: dict[str, Any]) -> str:
    def fmt(v: Any) -> str:
        return "n/a" if v is None else f"{v:.4f}" if isinstance(v, float) else f"{v:,}"

    keys = [*SUMMARY, "pairs", "duplicates"]
    rows = "".join(f"<tr><th>{k}</th><td class=num>{fmt(m[k])}</td></tr>" for k in keys if k in m)
    return f"<table class=metrics>{rows}</table>"


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>dupq report: {title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
table.errors td {{ font-size: 0.9em; max-width: 420px; overflow-wrap: anywhere; }}
.row {{ display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
.note {{ color: #666; }}
</style></head><body>
<h1>dupq report</h1>
<p>Model <code>{title}</code> (fingerprint <code>{fingerprint}</code>). Threshold {threshold:.4f}, chosen on: {chosen_on}.
Test pairs: {pairs:,} ({duplicates:,} duplicates){rows}; a pair is called a duplicate when its {score} is above the threshold.</p>
<h2>Metrics on the test pairs</h2>
<div class=row>{metrics}<img src="{confusion}" alt="confusion matrix"></div>
<h2>Training</h2>
{training}
<h2>Scores of test pairs</h2>
<img src="{histogram}" alt="score histograms of duplicate and non-duplicate pairs">
<h2>ROC and precision-recall curves</h2>
<div class=row>{curves}</div>
{calibration}
<h2>Worst errors</h2>
{errors}
</body></html>
"""


def write_report(
    model: Model,
    pairs: Pairs,
    out: str | os.PathLike,
    threshold: float | None = None,
    title: str = "model",
    k: int = 10,
) -> dict[str, Any]:
    """Score ``pairs`` (the test pairs) and write ``out/index.html`` with its PNG files.

    Returns the metrics it shows. ``threshold`` defaults to the model's calibrated one.
    """
    if not len(pairs):
        raise DupqError("there are no test pairs to report on.")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    judged = pair_verdicts(model, pairs, threshold)
    threshold = judged.threshold
    scores = judged.score  # (N,) what the threshold applies to
    labels = pairs.labels.astype(np.int64)  # (N,)
    m = evaluate_scores(scores, labels, threshold)
    calibration_error, calibration = _calibration_section(judged.probability, labels, out)
    if calibration_error is not None:
        m["expected_calibration_error"] = calibration_error
    errors = worst_errors(scores, pairs, threshold, k)
    page = PAGE.format(
        title=html.escape(title),
        fingerprint=model.fingerprint(),
        threshold=threshold,
        chosen_on=html.escape(
            str(model.judge.threshold_info.get("chosen_on", "unknown")) if threshold == model.threshold else "given"
        ),
        pairs=m["pairs"],
        duplicates=m["duplicates"],
        rows=f", file rows {int(pairs.rows.min()):,} to {int(pairs.rows.max()):,}",
        metrics=_metrics_table(m),
        confusion=_png(confusion_figure(m["confusion_matrix"]), out / "confusion.png"),
        training=_training_section(model, out),
        histogram=_png(histogram_figure(scores, labels, threshold, judged.on), out / "histogram.png"),
        curves=_curves_section(scores, labels, threshold, m, out),
        calibration=calibration,
        score=html.escape(SCORE_NAMES[judged.on]),
        errors=_errors_section(errors, SCORE_NAMES[judged.on]),
    )
    atomic_write(out / "index.html", page.encode("utf-8"))
    return {**m, "worst_errors": errors}


def _calibration_section(probabilities: np.ndarray | None, labels: np.ndarray, out: Path) -> tuple[float | None, str]:
    """The expected calibration error and a reliability diagram, when the model gives probabilities; else ``(None, "")``."""
    if probabilities is None:
        return None, ""
    figure = _png(reliability_figure(probabilities, labels), out / "reliability.png")
    section = f'<h2>Calibration</h2><img src="{figure}" alt="reliability diagram">'
    return expected_calibration_error(probabilities, labels), section


def _training_section(model: Model, out: Path) -> str:
    """The loss curves of the training history the folder records, or a note that it records none."""
    history = model.metrics.get("training", {}).get("history") or []
    if not history:
        return "<p class=note>This model folder records no training history.</p>"
    return f'<img src="{_png(training_figure(history), out / "training.png")}" alt="training curves">'


def _curves_section(scores: np.ndarray, labels: np.ndarray, threshold: float, m: dict[str, Any], out: Path) -> str:
    """ROC and precision-recall curves, or a note when the pairs hold one label only."""
    if m["roc_auc"] is None:
        return "<p class=note>The test pairs hold only one label, so there are no ROC or precision-recall curves.</p>"
    roc = _png(roc_figure(scores, labels, threshold, m["roc_auc"]), out / "roc.png")
    pr = _png(pr_figure(scores, labels, threshold, m["average_precision"], m["precision"], m["recall"]), out / "pr.png")
    return f'<img src="{roc}" alt="ROC curve"><img src="{pr}" alt="precision-recall curve">'


def _errors_section(errors: dict[str, Any], score: str) -> str:
    """The two tables of worst errors; ``score`` names the score they show (:data:`SCORE_NAMES`)."""
    surest = f"Different questions the model was surest were duplicates (highest {score})."
    missed = f"Duplicates the model was surest were different (lowest {score})."
    fp = _error_table("False positives", surest, errors["false_positives"], score)
    return fp + _error_table("False negatives", missed, errors["false_negatives"], score)
