"""The HTML report: every picture written and referenced relatively, worst errors right and escaped."""

from __future__ import annotations

import re

import numpy as np
import pytest

from dupq.data.pairs import Pairs
from dupq.evaluation.evaluate import evaluate_scores, pair_scores
from dupq.evaluation.report import write_report
from support.cli_model import cli_model
from support.kit import ok

PNG = b"\x89PNG\r\n\x1a\n"
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def with_hostile_pair(pairs: Pairs) -> Pairs:
    """One pair labelled "different" whose two (identical) questions hold HTML, then the pairs.

    Identical questions score 1.0, the highest a false positive can; placed first, the pair leads
    any tie, so it is always in the worst-errors table whatever the model.
    """
    hostile = "<script>alert('x')</script> How do I cook rice & beans?"
    labels, rows = np.r_[0, pairs.labels].astype(np.int8), np.r_[pairs.rows.max() + 1, pairs.rows]
    return Pairs(["hostile", *pairs.ids], [hostile, *pairs.q1], [hostile, *pairs.q2], labels, rows)


def test_report_writes_a_self_contained_page(tiny_model, small_splits, tmp_path):
    pairs = with_hostile_pair(small_splits.test)
    result = write_report(tiny_model, pairs, tmp_path, threshold=0.7, title="tiny <model>")
    page = (tmp_path / "index.html").read_text(encoding="utf-8")

    images = re.findall(r'<img src="([^"]+)"', page)
    # the reliability plot: the model is calibrated on dev, as `dupq train` and train() leave it
    assert sorted(images) == ["confusion.png", "histogram.png", "pr.png", "reliability.png", "roc.png", "training.png"]
    for name in images:
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5_000, name
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; How do I cook rice &amp; beans?" in page
    assert "tiny &lt;model&gt;" in page
    assert "<th>cosine similarity</th>" in page and "(highest cosine similarity)" in page  # the score it shows, named

    scores = pair_scores(tiny_model, pairs)
    expected = evaluate_scores(scores, pairs.labels, 0.7)
    assert {k: result[k] for k in expected} == expected
    (tn, fp), (fn, tp) = expected["confusion_matrix"]
    assert f"{expected['accuracy']:.4f}" in page

    errors = result["worst_errors"]
    fps, fns = errors["false_positives"], errors["false_negatives"]
    assert len(fps) == min(10, fp) and len(fns) == min(10, fn)
    hostile = scores[0]  # identical questions: similarity 1, the most confident mistake possible
    assert fps[0]["id"] == "hostile" and abs(fps[0]["score"] - hostile) < 1e-6
    shown = [round(r["score"], 4) for r in fps]  # ordered as printed
    assert shown == sorted(shown, reverse=True)
    by_id = dict(zip(pairs.ids, zip(pairs.labels, scores)))
    assert all(by_id[r["id"]][0] == 0 and r["score"] > 0.7 for r in fps)
    assert all(by_id[r["id"]][0] == 1 and r["score"] <= 0.7 for r in fns)
    shown = [round(r["score"], 4) for r in fns]
    assert shown == sorted(shown)
    # No false positive outside the table scores higher (as printed) than the last one in it.
    is_fp = (pairs.labels == 0) & (scores > 0.7)
    assert round(float(np.sort(scores[is_fp])[::-1][len(fps) - 1]), 4) == round(fps[-1]["score"], 4)


def test_report_command(pairs_path, tmp_path_factory, tmp_path):
    folder, data = cli_model(pairs_path, tmp_path_factory)
    assert "wrote" in ok("report", folder, "--data", data, "--out", tmp_path / "r").stdout
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert "chosen on: dev pairs" in page and "file rows 8,000 to 8,999" in page
    for name in ("training.png", "histogram.png", "roc.png", "pr.png", "confusion.png"):
        assert (tmp_path / "r" / name).read_bytes().startswith(PNG)
