"""The verdict's rules live once, in :mod:`dupq.modeling.verdict`: ``score > threshold``, the clip of
a cosine to [-1, 1] and the verdict's JSON object. Checked on numbers made here (fast, no model),
and by reading the source: no other module of ``src/dupq`` compares a score with a threshold or
clips a cosine itself."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np

from dupq.dedup.grouping import judge
from dupq.evaluation.metrics import binary_metrics
from dupq.modeling.judge import SIMILARITY, Judge
from dupq.modeling.predict import Verdict
from dupq.modeling.verdict import above, clip_cosines, from_cosines, on_cosines, verdict_json

SRC = Path(__file__).resolve().parents[2] / "src" / "dupq"


class CosineModel:
    """A model judged on the cosine at 0.7, with no probability: the rule reads only its judge."""

    def __init__(self):
        self.judge = Judge(threshold=0.7, threshold_on=SIMILARITY)


def test_above_is_strict_and_metrics_count_with_it():
    scores = np.array([0.9, 0.7, 0.7000001, 0.3, -1.0])
    assert above(scores, 0.7).tolist() == [True, False, True, False, False]
    labels = np.array([1, 1, 0, 0, 1])
    m = binary_metrics(scores, labels, 0.7)
    called, truth = above(scores, 0.7), labels == 1
    counted = [[int(np.sum(~called & (truth == t))), int(np.sum(called & (truth == t)))] for t in (False, True)]
    assert m["confusion_matrix"] == counted


def test_clip_cosines_keeps_the_dtype_and_the_range():
    rounded = np.array([1.0000001, -1.0000001, 0.5], dtype=np.float32)
    clipped = clip_cosines(rounded)
    assert clipped.dtype == np.float32 and clipped.tolist() == [1.0, -1.0, 0.5]
    assert float(clip_cosines(1.0000001)) == 1.0 and float(clip_cosines(0.25)) == 0.25


def test_on_cosines_is_the_rule_of_a_model_judged_on_the_cosine():
    rng = np.random.default_rng(0)
    cos = np.concatenate([rng.uniform(-1, 1, 200), [0.8, 1.0000001]]).astype(np.float32)
    t = float(np.float32(0.8))  # a cosine exactly at the threshold
    alone, model = on_cosines(cos, t), from_cosines(CosineModel(), cos, threshold=t)
    for field in ("similarity", "score", "duplicate"):
        np.testing.assert_array_equal(getattr(alone, field), getattr(model, field))
    assert alone.probability is None and alone.on == SIMILARITY and alone.threshold == t
    assert alone.similarity.max() == 1.0 and not alone.duplicate[-2]  # clipped; t is not above t


def test_dedup_by_the_cosine_alone_keeps_the_pairs_on_cosines_calls_duplicates():
    rng = np.random.default_rng(1)
    scores = rng.uniform(0.5, 1.0, (6, 3)).astype(np.float32)  # (Q, k) candidates' cosines
    scores[0, 0] = 1.0000001  # float32 rounding of a twin
    ids = np.array([[1, 2, -1], [0, 3, 4], [5, 1, 0], [2, 3, 1], [0, 5, 2], [4, 3, 1]])
    edges = judge(None, np.zeros((6, 2), np.float32), np.arange(6), scores, ids, 0.75, on=SIMILARITY)
    found = (ids >= 0) & (ids != np.arange(6)[:, None])
    verdicts = on_cosines(scores[found], 0.75)
    assert len(edges.a) == int(verdicts.duplicate.sum()) > 0
    np.testing.assert_array_equal(edges.score, verdicts.score[verdicts.duplicate].astype(np.float32))
    assert edges.score.max() == 1.0


def test_the_verdict_json_of_one_pair_and_of_a_stream_line_agree():
    obj = verdict_json(0.123456789, True, 0.45, 0.987654321)
    assert obj == {"similarity": 0.123457, "duplicate": True, "threshold": 0.45, "probability": 0.987654}
    assert list(obj) == ["similarity", "duplicate", "threshold", "probability"]  # the printed order
    assert "probability" not in verdict_json(0.5, False, 0.7, None)
    line = json.loads(Verdict(3, 0.123456789, True, 0.45, 0.987654321).json())
    assert line == {"line": 3, **obj} and list(line)[1:] == list(obj)


def _restatements(tree: ast.AST) -> list[str]:
    """``x > threshold`` comparisons and ``np.clip(x, -1.0, 1.0)`` calls in a module's code (not its text)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, ast.Gt | ast.GtE | ast.LtE) and ast.unparse(right) == "threshold":
                    found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("clip"):
            bounds = [ast.unparse(a) for a in node.args[1:]]
            if bounds in (["-1.0", "1.0"], ["-1", "1"]):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "min" and "max(-1" in ast.unparse(node):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_but_the_verdict_restates_its_rules():
    home = SRC / "modeling" / "verdict.py"
    found = _restatements(ast.parse(home.read_text(encoding="utf-8")))
    assert len(found) == 2, found  # once each, in above() and clip_cosines(), which the rest of it calls
    elsewhere = {
        str(path.relative_to(SRC)): found
        for path in sorted(SRC.rglob("*.py"))
        if path != home and (found := _restatements(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert elsewhere == {}
    assert _restatements(ast.parse("keep = cos > threshold\ny = np.clip(s, -1.0, 1.0)")) != []  # it can fail
