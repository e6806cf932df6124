"""One verdict rule: every entry point gives the same probability and verdict for the same pair.

Over 500 synthetic pairs, for models of every kind (an mlp pair head, a cosine head, no head;
with and without a calibration; judged on the similarity and on the probability), the library
(``Model.probability``, ``is_duplicate``), ``dupq predict`` (one pair and ``--pairs``), ``POST
/similarity``, the hits of ``POST /search`` and ``dupq search``, ``dupq dedup``, ``dupq
evaluate`` and ``report`` (their library functions: the CLI needs the Quora split) are checked
against :func:`reference`, a plain loop over the numbers of the model's ``config.json``.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file, save_file

from dupq.collection.collection import Collection
from dupq.core.errors import DupqError
from dupq.data.pairs import read_pairs
from dupq.dedup.grouping import DedupConfig, dedup
from dupq.evaluation.evaluate import evaluate, pair_verdicts
from dupq.evaluation.report import write_report
from dupq.modeling.model import Model
from dupq.service.app import create_app
from support.kit import ok
from support.synthetic import make_rows, write_pairs

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
N = 500
P_TOL = 1e-5  # float32 encodings: the index's inner product and the einsum differ in the last bits
MARGIN = 1e-5  # a pair this close to the threshold may fall either way; it is not counted


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory) -> Path:
    """500 synthetic pairs (another seed than the models were trained on), in the Quora format."""
    return write_pairs(tmp_path_factory.mktemp("verdict") / "pairs.tsv", N, seed=22)


@pytest.fixture(scope="module")
def pairs(pairs_file) -> tuple[list[str], list[str], np.ndarray]:
    rows = make_rows(N, seed=22)
    assert len({(r.question1, r.question2) for r in rows}) > 400
    return [r.question1 for r in rows], [r.question2 for r in rows], np.array([r.is_duplicate for r in rows])


def reference(folder: Path, q1: list[str], q2: list[str]) -> tuple[list[float | None], list[float], list[bool]]:
    """Each pair's probability (None without one), judged score and verdict, computed pair by pair
    from ``config.json``'s numbers: the cosine of the two vectors, the head's logit, sigmoid and
    the beta map ``sigmoid(a ln s - b ln(1 - s) + c)``, held up to 1 for identical vectors, and ``score > threshold``."""
    config = json.loads((folder / "config.json").read_text())
    model = Model.load(folder)  # for its encoder and its mlp (the network, not the rule)
    u, v = model.encode(list(q1)), model.encode(list(q2))
    head, cal = config["head"], config["calibration"]
    weights = load_file(folder / "model.safetensors") if head else {}
    probabilities, scores, verdicts = [], [], []
    for a, b in zip(u, v):
        cos = min(1.0, max(-1.0, sum(float(x) * float(y) for x, y in zip(a, b))))
        if head is None:
            logit = cos
        elif head["kind"] == "cosine":
            logit = float(weights["head.scale"]) * (cos - float(weights["head.bias"]))
        else:
            with torch.no_grad():
                logit = float(model.judge.head(torch.from_numpy(a[None]), torch.from_numpy(b[None]))[0])
        if cal is not None:
            ln_s, ln_not_s = -math.log1p(math.exp(-logit)), -math.log1p(math.exp(logit))
            p = 1 / (1 + math.exp(-(cal["a"] * ln_s - cal["b"] * ln_not_s + cal["c"])))
        elif head is not None:
            p = 1 / (1 + math.exp(-logit))
        else:
            p = None
        if p is not None and cos >= 1 - 1e-5:  # identical texts are duplicates
            p = 1.0
        score = p if config["threshold_on"] == "probability" else cos
        probabilities.append(p)
        scores.append(score)
        verdicts.append(score > config["threshold"])
    return probabilities, scores, verdicts


def _variant(source: Path, folder: Path, head: dict | None = ..., **config) -> Path:
    """A copy of the model folder ``source`` with ``config.json`` keys replaced (``head``: new head weights too)."""
    shutil.copytree(source, folder)
    path = folder / "config.json"
    stored = json.loads(path.read_text())
    if head is not ...:
        stored["head"] = head
        weights = load_file(folder / "model.safetensors")
        weights.update({"head.scale": torch.tensor(8.0), "head.bias": torch.tensor(0.6)})
        save_file(weights, folder / "model.safetensors", metadata={"format": "dupq-model/1"})
    path.write_text(json.dumps({**stored, **config}))
    return folder


def _at_the_median(folder: Path, q1: list[str], q2: list[str]) -> Path:
    """The folder with its threshold near the median judged score, so both verdicts are common: in
    the widest gap between the scores next to the median, so no pair is a float's width from it."""
    path = folder / "config.json"
    _, scores, _ = reference(folder, q1, q2)
    distinct = np.unique(scores)
    middle = distinct[len(distinct) // 2 - 25 : len(distinct) // 2 + 25]  # (50,)
    gap = int(np.argmax(np.diff(middle)))
    threshold = float(middle[gap] + middle[gap + 1]) / 2
    path.write_text(json.dumps({**json.loads(path.read_text()), "threshold": threshold}))
    return folder


CALIBRATION = {"method": "beta", "a": 1.3, "b": 0.7, "c": -0.4}


@pytest.fixture(
    scope="module",
    params=["mlp-probability", "mlp-similarity", "plain-similarity", "plain-probability", "cosine-head-probability"],
)
def folder(request, pairs, tmp_path_factory) -> Path:
    """A model folder of one kind: the conftest models, or copies of them judged another way."""
    q1, q2, _ = pairs
    source = request.getfixturevalue("head_model_dir" if request.param.startswith("mlp") else "tiny_model_dir")
    out = tmp_path_factory.mktemp("variant") / request.param
    # as trained: the labelled recipe (calibrated on dev pairs); the seed recipe (no head or calibration, cosine 0.7)
    if request.param in ("mlp-probability", "plain-similarity"):
        return _variant(source, out)
    if request.param == "mlp-similarity":
        return _at_the_median(_variant(source, out, threshold_on="similarity"), q1, q2)
    if request.param == "plain-probability":
        return _at_the_median(_variant(source, out, calibration=CALIBRATION, threshold_on="probability"), q1, q2)
    head = {"kind": "cosine", "dim": 32, "hidden": 256}
    return _at_the_median(_variant(source, out, head, calibration=CALIBRATION, threshold_on="probability"), q1, q2)


@dataclass
class Expected:
    """The reference's judgement of the pairs."""

    probability: list[float | None]
    score: list[float]  # what the threshold is compared with
    duplicate: list[bool]
    clear: np.ndarray  # (N,) bool: the pair is farther than MARGIN from the threshold, its verdict not float noise


@pytest.fixture(scope="module")
def expected(folder, pairs) -> Expected:
    q1, q2, _ = pairs
    want = Expected(*reference(folder, q1, q2), clear=None)
    threshold = json.loads((folder / "config.json").read_text())["threshold"]
    want.clear = np.abs(np.array(want.score) - threshold) > MARGIN
    assert want.clear.sum() >= N - 3 and 0.2 < np.mean(want.duplicate) < 0.8, "both verdicts must be common"
    return want


def check(want: Expected, duplicate, probability=(), score=(), index=None) -> None:
    """The verdicts (and the probabilities, the scores, when given) of pairs ``index`` (default:
    all) are the reference's; a model without a probability must give None."""
    index = list(range(N)) if index is None else list(index)
    assert len(duplicate) == len(index)
    wrong = [i for i, got in zip(index, duplicate) if want.clear[i] and bool(got) != want.duplicate[i]]
    assert not wrong, f"{len(wrong)} of {len(index)} verdicts differ from the reference, e.g. pair {wrong[0]}"
    for got, name in ((probability, "probability"), (score, "score")):
        if isinstance(got, tuple) and not got:
            continue  # not given
        values = getattr(want, name)
        if values[0] is None:
            assert got is None or all(p is None for p in got)
        else:
            assert list(got) == pytest.approx([values[i] for i in index], abs=P_TOL)


def test_the_library_gives_the_reference_verdict(folder, pairs, expected):
    q1, q2, _ = pairs
    model = Model.load(folder)
    check(expected, [model.is_duplicate(a, b) for a, b in zip(q1, q2)], score=model.scores(q1, q2))
    judged = model.verdicts(q1, q2)
    check(expected, model.is_duplicate(q1, q2), judged.probability, judged.score)
    if expected.probability[0] is None:
        with pytest.raises(DupqError, match="no probability"):
            model.probability(q1[0], q2[0])
    else:
        check(expected, judged.duplicate, model.probability(q1, q2))
        check(expected, [judged.duplicate[0]], [model.probability(q1[0], q2[0])], index=[0])


def test_predict_one_pair_and_a_pairs_stream_give_the_reference_verdict(folder, pairs, expected, tmp_path):
    q1, q2, _ = pairs
    some = range(0, N, 10)  # a model load per command: 50 pairs keep it quick
    one = [json.loads(ok("predict", q1[i], q2[i], "--model", folder, "--json").stdout) for i in some]
    check(expected, [o["duplicate"] for o in one], [o.get("probability") for o in one], index=some)
    stream = tmp_path / "pairs.tsv"
    stream.write_text("".join(f"{a}\t{b}\n" for a, b in zip(q1, q2)), encoding="utf-8")
    printed = ok("predict", "--pairs", stream, "--model", folder, "--json").stdout
    lines = [json.loads(line) for line in printed.splitlines()]
    assert [o["line"] for o in lines] == list(range(1, N + 1))
    check(expected, [o["duplicate"] for o in lines], [o.get("probability") for o in lines])


def test_the_service_and_search_give_the_reference_verdict(folder, pairs, expected, tmp_path):
    q1, q2, _ = pairs
    stored = list(dict.fromkeys(q2))  # the collection: the pairs' second questions
    Collection.build(tmp_path / "coll", stored, Model.load(folder)).close()
    with TestClient(create_app(tmp_path / "coll")) as client:
        answers = [client.post("/similarity", json={"q1": a, "q2": b}).json() for a, b in zip(q1, q2)]
        check(expected, [a["duplicate"] for a in answers], [a["probability"] for a in answers])
        results = [client.post("/search", json={"question": a, "k": 100}).json()["results"] for a in q1]
    hits = [{h["text"]: h for h in r} for r in results]
    found = [i for i in range(N) if q2[i] in hits[i]]  # POST /search answers at most 100 hits
    assert len(found) > N / 2
    got = [hits[i][q2[i]] for i in found]
    check(expected, [h["duplicate"] for h in got], [h["probability"] for h in got], index=found)
    queries = tmp_path / "queries.txt"
    queries.write_text("\n".join(q1) + "\n", encoding="utf-8")
    out = ok("search", tmp_path / "coll", "--queries", queries, "-k", len(stored), "--json").stdout
    every = [{h["text"]: h for h in json.loads(line)["hits"]} for line in out.splitlines()]  # all stored questions
    got = [every[i][q2[i]] for i in range(N)]
    check(expected, [h["duplicate"] for h in got], [h["probability"] for h in got])


def test_dedup_joins_a_pair_exactly_when_the_verdict_is_duplicate(folder, pairs, expected, tmp_path):
    q1, q2, _ = pairs
    model = Model.load(folder)
    config = DedupConfig()
    config.candidates.neighbours = 1
    clusters = [dedup([a, b], model, config) for a, b in zip(q1, q2)]
    check(expected, [c.count == 1 for c in clusters])
    joined = [i for i in range(N) if clusters[i].count]
    check(expected, [True] * len(joined), score=[float(clusters[i].score[1]) for i in joined], index=joined)
    some = range(0, N, 25)  # the command, on a few two-question files
    found = []
    for i in some:
        (tmp_path / "q.txt").write_text(f"{q1[i]}\n{q2[i]}\n", encoding="utf-8")
        ok("dedup", tmp_path / "q.txt", "--model", folder, "--neighbours", "1", "--out", tmp_path / "d.csv")
        found.append(len((tmp_path / "d.csv").read_text().splitlines()) == 3)
    check(expected, found, index=some)


def test_evaluate_and_report_count_the_reference_verdicts(folder, pairs_file, pairs, expected, tmp_path):
    q1, q2, labels = pairs
    file_pairs, _ = read_pairs(pairs_file)
    assert file_pairs.q1 == q1 and file_pairs.q2 == q2
    model = Model.load(folder)
    judged = pair_verdicts(model, file_pairs)
    check(expected, judged.duplicate, judged.probability, judged.score)
    d = judged.duplicate
    confusion = [[int(np.sum(~d & (labels == k))), int(np.sum(d & (labels == k)))] for k in (0, 1)]
    for result in (evaluate(model, file_pairs), write_report(model, file_pairs, tmp_path / "report")):
        assert result["confusion_matrix"] == confusion and result["threshold"] == judged.threshold
