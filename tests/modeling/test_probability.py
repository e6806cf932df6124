"""A model with a pair head and a calibration: its probability everywhere a verdict is given.

Every entry point (the library, search, dedup, the HTTP API, the report) must give the same
probability as ``Model.probability`` on the same two texts, and call a pair a duplicate exactly
when that probability is above the model's threshold.
"""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

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


def test_search_hits_carry_the_pair_probability(head_model_dir, head_model, small_splits, tmp_path):
    from dupq.collection.collection import Collection

    texts = questions(small_splits, 150)
    build_collection(tmp_path / "coll", head_model_dir, texts)
    coll = Collection.open(tmp_path / "coll")
    try:
        query = "How can I lose weight quickly?"
        hits = coll.search([query], k=8)[0]
        expected = head_model.probability([query] * len(hits), [h.text for h in hits])
        assert [h.probability for h in hits] == pytest.approx(list(expected), abs=1e-5)
        assert [h.duplicate for h in hits] == [p > head_model.threshold for p in expected]
    finally:
        coll.close()


def test_dedup_joins_pairs_by_probability(head_model, small_splits):
    from dupq.dedup.grouping import DedupConfig, dedup

    texts = questions(small_splits, 400)
    threshold = 0.6
    config = DedupConfig(threshold=threshold)
    config.candidates.neighbours = 10
    clusters = dedup(texts, head_model, config)
    assert clusters.count > 0
    for members in clusters.groups():
        rep, others = int(members[0]), members[1:].tolist()
        if others:
            p = head_model.probability([texts[rep]] * len(others), [texts[i] for i in others])
            q = head_model.probability([texts[i] for i in others], [texts[rep]] * len(others))
            assert (np.maximum(p, q) > threshold - 1e-6).all()  # the edge was seen from either side


def test_api_and_predict_give_the_library_probability(head_model_dir, head_model, small_splits, tmp_path, monkeypatch):
    from dupq.service.app import create_app

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
    from dupq.evaluation.metrics import expected_calibration_error
    from dupq.evaluation.report import write_report

    metrics = write_report(head_model, small_splits.test, tmp_path / "report")
    assert (tmp_path / "report" / "reliability.png").stat().st_size > 1000
    p = head_model.probability(small_splits.test.q1, small_splits.test.q2)
    assert metrics["expected_calibration_error"] == pytest.approx(
        expected_calibration_error(p, small_splits.test.labels), abs=1e-6
    )
    assert "reliability.png" in (tmp_path / "report" / "index.html").read_text()
