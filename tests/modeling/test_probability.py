"""A model with a pair head and a calibration: its probability, the service's and the report's.

That every entry point (the library, search, dedup, the HTTP API, evaluate and the report) gives the
same probability and verdict for the same two texts is checked in test_verdict.py, on models of every kind.
"""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from dupq.evaluation.metrics import expected_calibration_error
from dupq.evaluation.report import write_report
from dupq.service.app import create_app
from support.servicekit import build_collection, questions

pytestmark = pytest.mark.slow


def test_probability_is_calibrated_on_dev_and_symmetric(head_model, small_splits):
    model = head_model
    assert model.threshold_on == "probability" and model.judge.threshold_info["chosen_on"] == "dev pairs"
    assert model.judge.calibration["method"] == "beta" and {"a", "b", "c"} <= set(model.judge.calibration)
    q1, q2 = small_splits.test.q1[:200], small_splits.test.q2[:200]
    p = model.probability(q1, q2)
    assert np.allclose(p, model.probability(q2, q1), atol=1e-6)  # the head reads |u - v| and u * v
    assert ((p > 0) & (p < 1)).all()
    assert [model.is_duplicate(a, b) for a, b in zip(q1[:20], q2[:20])] == list(p[:20] > model.threshold)


def test_api_and_predict_give_the_library_probability(head_model_dir, head_model, small_splits, tmp_path, monkeypatch):
    texts = questions(small_splits, 100)
    build_collection(tmp_path / "coll", head_model_dir, texts)
    monkeypatch.delenv("DUPQ_API_TOKEN", raising=False)
    with TestClient(create_app(tmp_path / "coll")) as client:
        got = client.post("/similarity", json={"q1": texts[0], "q2": texts[1]}).json()
        assert got["probability"] == pytest.approx(head_model.probability(texts[0], texts[1]), abs=1e-6)
        assert got["duplicate"] == (got["probability"] > head_model.threshold) and got["threshold_on"] == "probability"
        hits = client.post("/search", json={"question": texts[3], "k": 5}).json()["results"]
        assert all(0 <= h["probability"] <= 1 for h in hits)
        assert client.get("/health").json()["threshold_on"] == "probability"


def test_report_has_a_reliability_diagram(head_model, small_splits, tmp_path):
    metrics = write_report(head_model, small_splits.test, tmp_path / "report")
    assert (tmp_path / "report" / "reliability.png").stat().st_size > 1000
    p = head_model.probability(small_splits.test.q1, small_splits.test.q2)
    ece = expected_calibration_error(p, small_splits.test.labels)
    assert metrics["expected_calibration_error"] == pytest.approx(ece, abs=1e-6)
    assert "reliability.png" in (tmp_path / "report" / "index.html").read_text()
