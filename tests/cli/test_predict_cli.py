"""`dupq train` (its calibration step), `evaluate`, `calibrate` and `predict` through typer's CliRunner.

Every user mistake must end in one `error: ...` sentence and exit status 2, never a traceback.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from dupq.core.files import read_json
from dupq.data.questions import MAX_QUESTION
from dupq.modeling.model import Model
from support.cli_model import cli_model
from support.errors import refused
from support.kit import cli, ok

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def trained(pairs_path, tmp_path_factory):
    return cli_model(pairs_path, tmp_path_factory)


@pytest.fixture(scope="module")
def model(trained):
    return Model.load(trained[0])


@pytest.fixture(scope="module")
def real_pairs(trained):
    """50 test-split pairs (rows 8,000+ of the slice), as (q1, q2) tuples."""
    from dupq.data.pairs import read_pairs

    pairs, _ = read_pairs(trained[1])
    index = np.flatnonzero(pairs.rows >= 8_000)[:50]
    return [(pairs.q1[i], pairs.q2[i]) for i in index]


# train -> calibrate on dev, evaluate on test


def test_train_stores_the_dev_threshold_and_the_test_metrics(trained):
    folder, _ = trained
    config = read_json(folder / "config.json", "config")
    metrics = read_json(folder / "metrics.json", "metrics")
    assert config["threshold_info"]["chosen_on"] == "dev pairs"
    assert config["threshold"] == metrics["calibration"]["threshold"]
    assert metrics["calibration"]["dev_rows"] == [9_000, 9_999]
    assert metrics["test"]["test_rows"][0] == 8_000 and metrics["test"]["threshold"] == config["threshold"]
    assert "history" in metrics["training"]


def test_evaluate_json_reports_on_the_test_pairs_at_the_calibrated_threshold(trained):
    folder, data = trained
    out = json.loads(ok("evaluate", folder, "--data", data, "--json").stdout)
    keys = "threshold accuracy precision recall f1 roc_auc average_precision confusion_matrix accuracy_at_0_7"
    assert set(keys.split()) | {"expected_calibration_error", "reliability"} <= out.keys(), sorted(out)
    assert sum(out["reliability"]["pairs"]) == out["pairs"] and 0 <= out["expected_calibration_error"] <= 1
    stored = read_json(folder / "metrics.json", "metrics")["test"]
    assert out["threshold"] == stored["threshold"] and out["accuracy"] == stored["accuracy"]
    assert out["pairs"] == 1000 and out["test_rows"] == [8_000, 8_999]
    fixed = json.loads(ok("evaluate", folder, "--data", data, "--json", "--threshold", "0.7").stdout)
    assert fixed["threshold"] == 0.7 and fixed["accuracy"] == out["accuracy_at_0_7"]


def test_evaluate_prints_a_table(trained):
    folder, data = trained
    table = ok("evaluate", folder, "--data", data).stdout
    assert "accuracy_at_0_7" in table and "confusion matrix" in table
    assert "expected_calibration_error" in table and "threshold on" in table


def test_calibrate_rewrites_the_threshold(trained, tmp_path):
    folder, data = trained
    copy = tmp_path / "m"
    shutil.copytree(folder, copy)
    config = read_json(copy / "config.json", "config")
    chosen = config["threshold"]
    config["threshold"] = 0.123
    (copy / "config.json").write_text(json.dumps(config))
    ok("calibrate", copy, "--data", data)
    assert Model.load(copy).threshold == chosen
    assert not list(copy.glob("*.tmp")) and not list(copy.glob(".*.tmp"))


# predict: one pair


def test_predict_one_pair_text_and_json(trained, model):
    folder, _ = trained
    q1, q2 = "When will I see you?", "When can I see you again?"
    sim, p = model.similarity(q1, q2), model.probability(q1, q2)  # `dupq train` calibrated it on dev
    sign, verdict = (">", "duplicate") if sim > model.threshold else ("<=", "different")
    said = f"similarity {sim:.4f} {sign} threshold {model.threshold:.4f}: {verdict} (probability {p:.4f})"
    assert ok("predict", q1, q2, "--model", folder).stdout.strip() == said
    out = json.loads(ok("predict", q1, q2, "--model", folder, "--json", "--threshold", "-1").stdout)
    judged = {"similarity": round(sim, 6), "duplicate": True, "threshold": -1.0, "probability": round(p, 6)}
    assert out == {"question1": q1, "question2": q2, **judged}
    out = json.loads(ok("predict", q1, q2, "--model", folder, "--json", "--threshold", "1").stdout)
    assert out["duplicate"] is False


def test_predict_judges_a_1000_character_question_whole_and_refuses_a_longer_one(trained, model):
    folder, _ = trained
    longest = ("How do I learn to cook rice well " * 40)[:MAX_QUESTION]
    result = ok("predict", longest, "How do I cook rice?", "--model", folder, "--json")
    whole = round(model.similarity(longest, "How do I cook rice?"), 6)  # the whole text, encoded
    assert json.loads(result.stdout)["similarity"] == whole
    ok("predict", "x" * MAX_QUESTION, "What is x?", "--model", folder)  # one long unknown word
    # One character more is refused, as the API refuses it (422): one rule for a question everywhere.
    refused(cli("predict", "What is x?", longest + "?", "--model", folder), "question 2 is 1,001 characters long")


def test_predict_needs_two_questions_or_pairs(trained):
    refused(cli("predict", "--model", trained[0]), "two questions or --pairs")
    refused(cli("predict", "Only one?", "--model", trained[0]), "second question")
    refused(cli("predict", "a b", "c d", "--pairs", "-", "--model", trained[0]), "not both")


# predict: streams


def test_predict_pairs_file_streams_one_line_per_pair(trained, model, real_pairs, tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{a}\t{b}\n" for a, b in real_pairs), encoding="utf-8")
    whole = ok("predict", "--pairs", path, "--model", trained[0], "--json")
    rows = [json.loads(line) for line in whole.stdout.splitlines()]
    assert [r["line"] for r in rows] == list(range(1, len(real_pairs) + 1))
    expected = model.similarity([a for a, _ in real_pairs], [b for _, b in real_pairs])
    np.testing.assert_allclose([r["similarity"] for r in rows], expected, atol=1e-5)
    assert [r["duplicate"] for r in rows] == [bool(s > model.threshold) for s in expected]
    chunked = cli("predict", "--pairs", path, "--model", trained[0], "--json", "--chunk", "7")
    assert chunked.stdout == whole.stdout
    text = ok("predict", "--pairs", "-", "--model", trained[0], input=path.read_bytes())
    first = text.stdout.splitlines()[0].split("\t")
    assert first[0] == "1" and float(first[1]) == pytest.approx(expected[0], abs=1e-4)
    assert len(text.stdout.splitlines()) == len(real_pairs)


def test_predict_pairs_reports_bad_lines_by_number_and_judges_the_rest(trained, real_pairs, tmp_path):
    (a, b), (c, d) = real_pairs[:2]
    path = tmp_path / "bad.tsv"
    path.write_bytes(
        f"{a}\t{b}\n".encode()
        + b"caf\xe9 au lait?\tWhat is coffee?\n"  # line 2: Latin-1, not UTF-8
        + b"only one field\n"  # line 3
        + b"one\ttwo\tthree\n"  # line 4
        + b"\tWhat is empty?\n"  # line 5
        + b"\n"  # line 6: blank, skipped silently
        + ("How " * 250 + "?\tHow are you?\n").encode()  # line 7: 1,001 characters, one too many
        + ("How " * 249 + "go?\tHow are you?\n").encode()  # line 8: 999 characters, judged
        + f"{c}\t{d}\r\n".encode()  # line 9: CRLF
    )
    result = cli("predict", "--pairs", path, "--model", trained[0], "--chunk", "2")
    assert [line.split("\t")[0] for line in result.stdout.splitlines()] == ["1", "8", "9"]
    err = result.stderr
    assert "line 2 is not UTF-8" in err
    assert "line 3 has 1 tab-separated field" in err and "line 4 has 3 tab-separated field" in err
    assert "question 1 on line 5 is empty" in err
    assert "question 1 on line 7 is 1,001 characters long" in err
    assert refused(result).startswith("error: 5 line(s) could not be judged (3 judged)")


def test_predict_pairs_missing_file(trained, tmp_path):
    refused(cli("predict", "--pairs", tmp_path / "nope.tsv", "--model", trained[0]), "nope.tsv")


# model folders that cannot be used


def test_evaluate_of_a_missing_model_folder(tmp_path):
    """`predict` of every broken model folder, both ways: tests/faults/test_cli_faults.py."""
    refused(cli("evaluate", tmp_path / "nowhere"), "does not exist")


def test_no_bundled_model(monkeypatch, tmp_path):
    import dupq.modeling.model

    monkeypatch.setattr(dupq.modeling.model, "BUNDLED", tmp_path / "not-installed")
    refused(cli("predict", "a b", "c d"), "no bundled model")


def test_missing_data_file(trained, tmp_path):
    refused(cli("evaluate", trained[0], "--data", tmp_path / "none.tsv"), "no data file")
