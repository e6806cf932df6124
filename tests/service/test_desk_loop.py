"""A desk's loop through the API: tickets decided by a moderator, the collection refitted, its searches judged anew."""

from __future__ import annotations

from fastapi.testclient import TestClient

from dupq.collection.collection import Collection
from dupq.evaluation.collection_calibration import calibrate_collection
from dupq.service.app import create_app

AUTH = {"Authorization": "Bearer t"}


def test_decisions_sent_through_the_api_refit_the_verdict_its_searches_give(tmp_path, tiny_model, synthetic_pairs):
    rows = [(a, b, int(y)) for a, b, y in zip(synthetic_pairs.q1, synthetic_pairs.q2, synthetic_pairs.labels)]
    olds = list(dict.fromkeys(b for _, b, _ in rows[:300]))[:120]
    tickets = [(a, b, y) for a, b, y in rows[:300] if b in olds and a not in olds][:40]
    Collection.build(tmp_path / "desk", olds, tiny_model, keys=[f"old{i}" for i in range(len(olds))]).close()
    key = {t: f"old{i}" for i, t in enumerate(olds)}
    with TestClient(create_app(tmp_path / "desk", token="t")) as client:
        assert client.get("/health", headers=AUTH).json()["calibration"]["source"] != "collection"
        for n, (text, old, y) in enumerate(tickets):
            ticket = {"text": text, "key": f"t{n}", "pending": True}
            assert client.post("/questions", json=ticket, headers=AUTH).status_code == 201
            decision = {"duplicate_of": key[old]} if y else {"not_duplicate_of": key[old]}
            assert client.post(f"/questions/t{n}/decision", json=decision, headers=AUTH).status_code == 200
        query = {"question": tickets[0][0] + " today", "k": 3}
        before = client.post("/search", json=query, headers=AUTH).json()
        report = calibrate_collection(client.app.state.collection)
        after = client.post("/search", json=query, headers=AUTH).json()
        health = client.get("/health", headers=AUTH).json()
    assert report["decisions"] == len(tickets)
    for when in ("before", "after"):
        assert 0 <= report["held_out"][when]["accuracy"] <= 1
    fitted = client.app.state.collection.calibration
    assert after["tiers"]["duplicate"] == fitted["duplicate"] != before["tiers"]["duplicate"]
    assert health["calibration"]["source"] == "collection"
    assert health["calibration"]["fitted_on"]["decisions"] == len(tickets)
