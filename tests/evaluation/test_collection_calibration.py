"""A collection's own search calibration: fitted on its decisions, kept across reopen, used by its searches."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from typer.testing import CliRunner

from dupq.cli import app
from dupq.collection.calibration import CALIBRATION
from dupq.collection.collection import Collection
from dupq.evaluation import collection_calibration
from dupq.evaluation.calibration import fit_search_calibration
from dupq.evaluation.collection_calibration import calibrate_collection
from dupq.modeling.verdict import for_search, pair_logits
from support.errors import refused
from support.kit import ok, one_sentence

PAIRS = 40


def _distinct_pairs(synthetic_pairs, n: int) -> list[tuple[str, str, int]]:
    """The first ``n`` synthetic pairs whose texts are all distinct, as ``(a, b, label)``."""
    seen, rows = set(), []
    for a, b, y in zip(synthetic_pairs.q1, synthetic_pairs.q2, synthetic_pairs.labels):
        if a != b and a not in seen and b not in seen:
            seen |= {a, b}
            rows.append((a, b, int(y)))
        if len(rows) == n:
            break
    return rows


def _desk(tmp_path, model, synthetic_pairs, decided: int = PAIRS, pairs: int = PAIRS, scoped: bool = False):
    """A collection of both sides of ``pairs`` synthetic pairs (distinct texts), the first ``decided`` judged as
    labelled; ``scoped``: the old side of each carries its category, "x" for the first ``PAIRS``, then "y"."""
    rows = _distinct_pairs(synthetic_pairs, pairs)
    texts = [t for a, b, _ in rows for t in (a, b)]
    keys = [f"{side}{i}" for i in range(len(rows)) for side in "ab"]
    category = [{} if side == "a" else {"category": "x" if i < PAIRS else "y"} for i in range(pairs) for side in "ab"]
    coll = Collection.build(tmp_path / "desk", texts, model, keys=keys, metadata=category if scoped else None)
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
    held_out = report["held_out"]
    assert set(held_out["before"]) == set(held_out["after"]) == {"accuracy", "roc_auc", "ece", "suggest", "duplicate"}
    assert coll.calibration_info()["source"] == "collection"


def test_too_few_decisions_are_refused(tmp_path, tiny_model, synthetic_pairs):
    coll, _ = _desk(tmp_path, tiny_model, synthetic_pairs, decided=20)
    with coll:
        one_sentence(lambda: calibrate_collection(coll), "needs at least 30")
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
    few, _ = _desk(tmp_path / "few", tiny_model, synthetic_pairs, decided=10)
    many, _ = _desk(tmp_path / "many", tiny_model, synthetic_pairs)
    few.close(), many.close()
    refused(CliRunner().invoke(app, ["index", "calibrate", str(tmp_path / "few" / "desk")]), "needs at least 30")
    report = json.loads(ok("index", "calibrate", tmp_path / "many" / "desk", "--json").output)
    assert report["decisions"] == PAIRS and report["held_out"]["decisions"] >= 10
    with Collection.open(tmp_path / "many" / "desk", tiny_model) as coll:
        assert coll.calibration_info()["fitted_on"]["decisions"] == PAIRS


SCOPED = 60  # pairs: the first 40 of scope "x" (a fit of its own), the other 20 of "y" (too few: the collection's)


def _scoped_desk(tmp_path, model, synthetic_pairs):
    return _desk(tmp_path, model, synthetic_pairs, decided=SCOPED, pairs=SCOPED, scoped=True)


def test_a_scope_with_decisions_enough_is_fitted_on_its_own_decisions_alone(tmp_path, tiny_model, synthetic_pairs):
    coll, decisions = _scoped_desk(tmp_path, tiny_model, synthetic_pairs)
    with coll:
        report = calibrate_collection(coll, scope="category", force=True)  # the fit, however it compares
        texts = {key: text for _, key, text, _ in coll.stored_rows()}
        scopes = coll.calibration_scopes
        info = coll.calibration_info()
    naive = _naive_features(tiny_model, texts, decisions)
    labels = np.array([y for *_, y in decisions])
    expected = {}
    for value in ("x", "y"):  # the reference: each scope's decisions fitted alone, where they are enough
        mask = np.array([(i < PAIRS) == (value == "x") for i in range(SCOPED)])
        if mask.sum() >= 30 and min(labels[mask].sum(), (1 - labels[mask]).sum()) >= 5:
            expected[value] = fit_search_calibration(
                *(naive[n][mask] for n in ("logits", "cosines", "margins")), labels[mask]
            )
    assert set(expected) == {"x"}, "the synthetic scopes need one fitted and one too small"
    assert scopes["field"] == "category" and set(scopes["fits"]) == set(expected)
    for name in ("a", "b", "cosine", "margin", "c", "suggest", "duplicate"):
        assert scopes["fits"]["x"][name] == pytest.approx(expected["x"][name], rel=1e-3, abs=1e-4), name
    assert report["scopes"]["too_few"] == {"y": SCOPED - PAIRS}
    assert report["scopes"]["fitted"]["x"]["decisions"] == PAIRS
    assert info["scopes"] == {"field": "category", "fitted": {"x": scopes["fits"]["x"]["fitted_on"]}}


def test_searches_judge_each_hit_by_its_own_scopes_calibration(tmp_path, tiny_model, synthetic_pairs):
    coll, decisions = _scoped_desk(tmp_path, tiny_model, synthetic_pairs)
    with coll:
        calibrate_collection(coll, scope="category", force=True)
    with Collection.open(tmp_path / "desk", tiny_model) as again:  # read back from calibration.json
        fits, own = again.calibration_scopes["fits"], again.calibration
        hits = again.search([decisions[0][2] + " please", decisions[PAIRS][2] + " please"], k=10)
    seen = set()
    for row in hits:
        scores = [h.score for h in row]
        # each hit's margin by hand: the top hit's over the best lower cosine, the others' from the top's
        margins = [
            s - max((o for o in scores if o < s), default=s) if s == scores[0] else s - scores[0] for s in scores
        ]
        for hit, margin in zip(row, margins):
            scope = hit.metadata.get("category")
            seen.add(scope)
            fit = fits.get(scope, own)
            expected = for_search(tiny_model, np.array([hit.score]), np.array([margin]), calibration=fit)
            assert hit.probability == pytest.approx(float(expected.probability[0]), abs=1e-6), (scope, hit.key)
            assert hit.tier == expected.tier[0]
    assert {"x", "y", None} <= seen, seen


def test_index_info_lists_the_scopes_fitted(tmp_path, tiny_model, synthetic_pairs):
    coll, _ = _scoped_desk(tmp_path, tiny_model, synthetic_pairs)
    coll.close()
    done = ok("index", "calibrate", tmp_path / "desk", "--scope", "category", "--force")
    assert "scopes of category fitted: x (40); judged by the collection's (too few): y (20)" in done.output
    scopes = json.loads(ok("index", "info", tmp_path / "desk").output)["calibration"]["scopes"]
    assert scopes["field"] == "category" and list(scopes["fitted"]) == ["x"]


def test_a_refit_worse_on_the_held_out_decisions_is_refused_unless_forced(
    tmp_path, tiny_model, synthetic_pairs, monkeypatch
):
    """The fault: a fit that ranks the decisions backwards (its weights negated). It judges the held-out
    decisions worse than the calibration in use on both counts, so it is refused and the file stays as it was."""
    coll, _ = _desk(tmp_path, tiny_model, synthetic_pairs)
    with coll:
        calibrate_collection(coll)
        kept = (tmp_path / "desk" / CALIBRATION).read_bytes()
        honest = collection_calibration._fit

        def backwards(features):
            fit = honest(features)
            return {**fit, **{w: -fit[w] for w in ("a", "b", "cosine", "margin", "c")}}

        monkeypatch.setattr(collection_calibration, "_fit", backwards)
        one_sentence(lambda: calibrate_collection(coll), "worse than the calibration in use")
        assert (tmp_path / "desk" / CALIBRATION).read_bytes() == kept
        report = calibrate_collection(coll, force=True)
        assert report["held_out"]["after"]["roc_auc"] < report["held_out"]["before"]["roc_auc"]
        assert (tmp_path / "desk" / CALIBRATION).read_bytes() != kept
