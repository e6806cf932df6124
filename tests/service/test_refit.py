"""The service refits its collection's calibration by itself after every N decisions (``--refit-every``), and a desk's
loop refits it by hand."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from fastapi.testclient import TestClient

from dupq.collection.calibration import CALIBRATION
from dupq.collection.collection import Collection
from dupq.evaluation.calibration import fit_search_calibration
from dupq.evaluation.collection_calibration import calibrate_collection
from dupq.service.app import create_app

AUTH = {"Authorization": "Bearer t"}
TICKETS = 40


@pytest.fixture
def desk(tmp_path, tiny_model, synthetic_pairs) -> tuple:
    """A collection of old questions; the tickets (text, old key, label) that a moderator will judge against them."""
    folder = tmp_path / "desk"
    rows = [(a, b, int(y)) for a, b, y in zip(synthetic_pairs.q1, synthetic_pairs.q2, synthetic_pairs.labels)]
    olds = list(dict.fromkeys(b for _, b, _ in rows[:300]))[:120]
    key = {t: f"old{i}" for i, t in enumerate(olds)}
    tickets = [(a, key[b], y) for a, b, y in rows[:300] if b in olds and a not in olds][:TICKETS]
    Collection.build(folder, olds, tiny_model, keys=list(key.values())).close()
    return folder, tickets


def _decide(client, tickets, start: int = 0) -> None:
    for n, (text, old, y) in enumerate(tickets, start):
        ticket = {"text": text, "key": f"t{n}", "pending": True}
        assert client.post("/questions", json=ticket, headers=AUTH).status_code == 201
        decision = {"duplicate_of": old} if y else {"not_duplicate_of": old}
        assert client.post(f"/questions/t{n}/decision", json=decision, headers=AUTH).status_code == 200


def _old_calibration(folder, model) -> bytes:
    """Keep a calibration fitted on made-up features as the collection's own; the file's bytes."""
    rng = np.random.default_rng(0)
    labels = np.array([0, 1] * 20)
    fit = fit_search_calibration(rng.normal(size=40) + labels, rng.uniform(0.3, 1, 40), rng.uniform(0, 0.2, 40), labels)
    fit["fitted_on"] = {"decisions": 40, "made_up": True, "tiers": fit.pop("tiers_on_fit")}
    with Collection.open(folder, model) as coll:
        coll.use_calibration(fit)
    return (folder / CALIBRATION).read_bytes()


def test_n_decisions_through_the_api_refit_the_calibration_every_worker_judges_with(desk, tiny_model):
    folder, tickets = desk
    other_worker = Collection.open(folder, tiny_model)  # another process's collection: it never reopens
    query = tickets[0][0] + " today"
    with TestClient(create_app(folder, token="t", refit_every=TICKETS)) as client:
        before = client.post("/search", json={"question": query, "k": 3}, headers=AUTH).json()
        _decide(client, tickets[:-1])
        client.app.state.refits.wait()
        assert not (folder / CALIBRATION).exists(), "a refit before N decisions"
        _decide(client, tickets[-1:], TICKETS - 1)  # the Nth: answered at once, the refit runs in the background
        client.app.state.refits.wait()
        assert client.app.state.refits.refits == 1
        after = client.post("/search", json={"question": query, "k": 3}, headers=AUTH).json()
        health = client.get("/health", headers=AUTH).json()
    kept = json.loads((folder / CALIBRATION).read_text())["search_calibration"]
    assert kept["fitted_on"]["decisions"] == TICKETS
    assert after["tiers"]["duplicate"] == kept["duplicate"] != before["tiers"]["duplicate"]
    assert health["calibration"]["source"] == "collection"
    assert health["calibration"]["fitted_on"]["decisions"] == TICKETS and health["calibration"]["scopes"] is None
    with other_worker:
        assert other_worker.calibration == kept
        hit = other_worker.search([query], k=3)[0][0]
        assert hit.probability == after["results"][0]["probability"]


# 20 decisions, a refit every 10: each refused under the floor of 30; 40 with --refit-every 0: none tried
@pytest.mark.parametrize("decisions, every, refits", [(20, 10, 2), (TICKETS, 0, 0)])
def test_a_refit_refused_or_never_tried_leaves_the_old_calibration(desk, tiny_model, caplog, decisions, every, refits):
    folder, tickets = desk[0], desk[1][:decisions]
    old = _old_calibration(folder, tiny_model)
    with caplog.at_level(logging.INFO, logger="dupq.service.refit"):
        with TestClient(create_app(folder, token="t", refit_every=every)) as client:
            _decide(client, tickets)
            client.app.state.refits.wait()
            assert client.app.state.refits.refits == refits
            health = client.get("/health", headers=AUTH).json()
    assert (folder / CALIBRATION).read_bytes() == old
    assert health["calibration"]["fitted_on"]["made_up"] is True
    refused = [r.getMessage() for r in caplog.records if "not refitted" in r.getMessage()]
    assert len(refused) == refits and all("needs at least 30" in m and "\n" not in m for m in refused), refused


KILLED_REFIT = """
import os, signal, sys
from dupq.collection.collection import Collection
from dupq.service.refit import Refitter

def killed(*_):
    os.kill(os.getpid(), signal.SIGKILL)  # dies with the new calibration written beside the old, not renamed

with Collection.open(sys.argv[1]) as coll:
    os.replace = killed
    Refitter(coll, 1).refit()
"""


def test_a_refit_killed_during_its_write_leaves_the_old_calibration_whole(desk, tiny_model):
    folder, tickets = desk
    old = _old_calibration(folder, tiny_model)
    with TestClient(create_app(folder, token="t", refit_every=0)) as client:
        _decide(client, tickets)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(KILLED_REFIT), str(folder)], env=env, timeout=300)
    assert child.returncode == -signal.SIGKILL
    assert (folder / CALIBRATION).read_bytes() == old
    with Collection.open(folder, tiny_model) as coll:
        assert coll.calibration["fitted_on"]["made_up"] is True


def test_decisions_sent_through_the_api_refit_the_verdict_its_searches_give(desk):
    """A desk's loop: tickets decided by a moderator through the API, the collection refitted by hand, its searches
    judged anew."""
    folder, tickets = desk
    with TestClient(create_app(folder, token="t")) as client:
        assert client.get("/health", headers=AUTH).json()["calibration"]["source"] != "collection"
        _decide(client, tickets)
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
