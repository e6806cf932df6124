"""`dupq evaluate --pairs` and `--questions/--queries`: a desk's own pairs and searches, against naive references
(scikit-learn's metrics; a Python loop over the bins, and over each query's brute-force ranking)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, precision_score, recall_score, roc_auc_score
from typer.testing import CliRunner

from dupq.cli import app
from dupq.data.pairs import write_pairs
from support.kit import ok

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def naive_ece(p: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    total = 0.0
    for b in range(bins):
        inside = [(pi, yi) for pi, yi in zip(p, y) if min(int(pi * bins), bins - 1) == b]
        if inside:
            total += abs(sum(yi for _, yi in inside) - sum(pi for pi, _ in inside))
    return total / len(p)


def test_evaluate_pairs_matches_scikit_learn(tmp_path, tiny_model_dir, tiny_model, small_splits):
    test = small_splits.test
    n = 160
    rows = [(f"a{i}", f"b{i}", test.q1[i], test.q2[i], int(test.labels[i])) for i in range(n)]
    path = tmp_path / "labelled.tsv"
    write_pairs(path, rows)
    got = json.loads(ok("evaluate", tiny_model_dir, "--pairs", path, "--json").stdout)
    y = np.array([r[4] for r in rows])
    judged = tiny_model.verdicts([r[2] for r in rows], [r[3] for r in rows])
    assert 0 < y.sum() < n and got["pairs"] == n and got["threshold"] == pytest.approx(tiny_model.threshold)
    assert got["accuracy"] == pytest.approx(accuracy_score(y, judged.duplicate))
    assert got["precision"] == pytest.approx(precision_score(y, judged.duplicate, zero_division=0))
    assert got["recall"] == pytest.approx(recall_score(y, judged.duplicate))
    assert got["roc_auc"] == pytest.approx(roc_auc_score(y, judged.score))
    assert judged.probability is not None  # the tiny model is calibrated on its dev pairs
    assert got["expected_calibration_error"] == pytest.approx(naive_ece(judged.probability, y))
    assert f"{n} labelled pairs" in ok("evaluate", tiny_model_dir, "--pairs", path).output


def test_evaluate_questions_and_queries_matches_a_brute_force_loop(tmp_path, tiny_model_dir, tiny_model, small_splits):
    duplicates = [(a, b) for a, b, y in zip(small_splits.test.q1, small_splits.test.q2, small_splits.test.labels) if y]
    duplicates = list(dict((b, (a, b)) for a, b in duplicates if a != b).values())[:30]
    old = list(dict.fromkeys([b for _, b in duplicates] + list(small_splits.dev.q1[:60])))
    stored = "".join(f"k{i}\t{t}\n" for i, t in enumerate(old))
    (tmp_path / "old.tsv").write_text("key\tquestion\n" + stored, encoding="utf-8")
    answer = {t: f"k{i}" for i, t in enumerate(old)}
    lines = [f"{a}\t{answer[b] if n % 2 else b}\n" for n, (a, b) in enumerate(duplicates)]  # by key or by text
    (tmp_path / "new.tsv").write_text("question\told\n" + "".join(lines), encoding="utf-8")
    desk = ["evaluate", tiny_model_dir, "--questions", tmp_path / "old.tsv", "--queries"]
    got = json.loads(ok(*desk, tmp_path / "new.tsv", "--json").stdout)
    vectors = tiny_model.encode(old)
    ranks = []
    for a, b in duplicates:
        scores = vectors @ tiny_model.encode([a])[0]
        order = [j for j in np.argsort(-scores, kind="stable") if old[j] != a]
        ranks.append(order.index(old.index(b)) + 1)
    ranks = np.array(ranks)
    assert got["queries"] == len(duplicates) and got["corpus"] == len(old)
    assert got["model"]["recall@1"] == pytest.approx(np.mean(ranks == 1))
    assert got["model"]["recall@10"] == pytest.approx(np.mean(ranks <= 10))
    assert got["model"]["mrr@10"] == pytest.approx(np.mean(np.where(ranks <= 10, 1 / ranks, 0)))
    (tmp_path / "bad.tsv").write_text("question\told\nHow do I pay?\tnobody\n", encoding="utf-8")
    bad = run(*desk, tmp_path / "bad.tsv")
    assert bad.exit_code != 0 and bad.output.startswith("error: new question 1 names the old question 'nobody'")
    alone = run("evaluate", tiny_model_dir, "--queries", tmp_path / "new.tsv")
    assert alone.exit_code != 0 and alone.output.startswith("error: --questions and --queries go together")
