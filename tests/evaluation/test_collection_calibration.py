"""A collection's own search calibration: fitted on its decisions, kept across reopen, used by its searches."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from tests.support.errors import refused

from dupq.collection.calibration import CALIBRATION
from dupq.collection.collection import Collection
from dupq.core.errors import DupqError
from dupq.evaluation.calibration import fit_search_calibration
from dupq.evaluation.collection_calibration import calibrate_collection
from dupq.modeling.verdict import for_search, pair_logits

PAIRS = 40


def _desk(tmp_path, model, synthetic_pairs, decided: int = PAIRS) -> tuple[Collection, list[tuple]]:
    """A collection of both sides of synthetic pairs (distinct texts), ``decided`` of them judged as labelled."""
    seen, rows = set(), []
    for a, b, y in zip(synthetic_pairs.q1, synthetic_pairs.q2, synthetic_pairs.labels):
        if a != b and a not in seen and b not in seen:
            seen |= {a, b}
            rows.append((a, b, int(y)))
        if len(rows) == PAIRS:
            break
    texts = [t for a, b, _ in rows for t in (a, b)]
    keys = [f"{side}{i}" for i in range(len(rows)) for side in "ab"]
    coll = Collection.build(tmp_path / "desk", texts, model, keys=keys)
    for i, (_, _, y) in enumerate(rows[:decided]):
        coll.decide(f"a{i}", **({"duplicate_of": f"b{i}"} if y else {"not_duplicate_of": f"b{i}"}))
    return coll, [(f"a{i}", f"b{i}", a, b, y) for i, (a, b, y) in enumerate(rows[:decided])]


def _naive_features(model, texts: dict[str, str], decisions: list[tuple], hits: int = 10) -> dict:
    """Each decision's logit, cosine and margin by brute force: every stored question but the judged one ranked."""
    keys = list(texts)
    vectors = dict(zip(keys, model.encode([texts[k] for k in keys])))
    logits, cosines, margins = [], [], []
    for key, other, *_ in decisions:
        ranked = sorted(((float(vectors[k] @ vectors[key]), k) for k in keys if k != key), reverse=True)
        cos = float(vectors[other] @ vectors[key])
        shown = [k for _, k in ranked[:hits]]
        margins.append(cos - ranked[1][0] if shown[0] == other else cos - ranked[0][0])
        cosines.append(cos)
        logits.append(pair_logits(model, vectors[key][None], vectors[other][None])[0])
    return {"logits": np.array(logits), "cosines": np.array(cosines), "margins": np.array(margins)}


def test_the_refit_is_the_fit_of_the_decisions_as_search_hits(tmp_path, tiny_model, synthetic_pairs):
    coll, decisions = _desk(tmp_path, tiny_model, synthetic_pairs)
    labels = np.array([y for *_, y in decisions])
    assert 5 <= labels.sum() <= len(labels) - 5, "the synthetic decisions need both verdicts"
    with coll:
        report = calibrate_collection(coll)
        texts = {key: text for _, key, text, _ in coll.stored_rows()}
    naive = _naive_features(tiny_model, texts, decisions)
    expected = fit_search_calibration(naive["logits"], naive["cosines"], naive["margins"], labels)
    for name in ("a", "b", "cosine", "margin", "c", "suggest", "duplicate"):
        assert coll.calibration[name] == pytest.approx(expected[name], rel=1e-3, abs=1e-4), name  # float32 vectors
    assert report["decisions"] == PAIRS and report["duplicates"] == labels.sum()
    assert (
        set(report["held_out"]["before"])
        == set(report["held_out"]["after"])
        == {
            "accuracy",
            "roc_auc",
            "ece",
            "suggest",
            "duplicate",
        }
    )
    assert coll.calibration_info()["source"] == "collection"


def test_too_few_decisions_are_refused(tmp_path, tiny_model, synthetic_pairs):
    coll, _ = _desk(tmp_path, tiny_model, synthetic_pairs, decided=20)
    with coll, pytest.raises(DupqError, match="needs at least 30") as e:
        calibrate_collection(coll)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "desk" / CALIBRATION).exists()


def test_the_calibration_survives_reopen_and_a_kill_before_the_rename(
    tmp_path, tiny_model, synthetic_pairs, monkeypatch
):
    coll, _ = _desk(tmp_path, tiny_model, synthetic_pairs)
    with coll:
        calibrate_collection(coll)
        fitted = coll.calibration
    with Collection.open(tmp_path / "desk", tiny_model) as again:
        assert again.calibration == fitted
        assert again.tiers == {"suggest": fitted["suggest"], "duplicate": fitted["duplicate"], "on": "probability"}

        def killed(*_):
            raise KeyboardInterrupt  # the process dies between the write and the rename

        monkeypatch.setattr(os, "replace", killed)
        with pytest.raises(KeyboardInterrupt):
            again.use_calibration({**fitted, "duplicate": 0.123})
        monkeypatch.undo()
    with Collection.open(tmp_path / "desk", tiny_model) as reopened:
        assert reopened.calibration == fitted
    assert [p.name for p in (tmp_path / "desk").iterdir() if p.name.endswith(".tmp")] == []


def test_searches_judge_hits_with_the_collections_calibration(tmp_path, tiny_model, synthetic_pairs):
    coll, decisions = _desk(tmp_path, tiny_model, synthetic_pairs)
    query = decisions[0][2] + " please"
    with coll:
        before = coll.search([query], k=3)[0][0]
        calibrate_collection(coll)
        after = coll.search([query], k=3)[0]
        fit = coll.calibration
    top = after[0]
    margin = top.score - after[1].score
    expected = for_search(tiny_model, np.array([top.score]), np.array([margin]), calibration=fit)
    assert top.probability == pytest.approx(float(expected.probability[0]), abs=1e-6)
    assert top.tier == expected.tier[0]
    own = for_search(tiny_model, np.array([before.score]), np.array([margin]))
    assert own.probability is None or top.probability != pytest.approx(float(own.probability[0]), abs=1e-6)


def test_the_command_refits_and_reports_and_refuses_in_one_sentence(tmp_path, tiny_model, synthetic_pairs):
    from typer.testing import CliRunner

    from dupq.cli import app

    few, _ = _desk(tmp_path / "few", tiny_model, synthetic_pairs, decided=10)
    many, _ = _desk(tmp_path / "many", tiny_model, synthetic_pairs)
    few.close(), many.close()
    runner = CliRunner()
    refused(runner.invoke(app, ["index", "calibrate", str(tmp_path / "few" / "desk")]), "needs at least 30")
    done = runner.invoke(app, ["index", "calibrate", str(tmp_path / "many" / "desk"), "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["decisions"] == PAIRS and report["held_out"]["decisions"] >= 10
    with Collection.open(tmp_path / "many" / "desk", tiny_model) as coll:
        assert coll.calibration_info()["fitted_on"]["decisions"] == PAIRS
