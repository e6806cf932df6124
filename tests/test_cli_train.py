"""`dupq train` and `dupq info` from the command line: the happy path and every user mistake."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dupq.cli import app

runner = CliRunner()


def one_error_line(result) -> str:
    """Exit status 2 and exactly one line on stderr, a sentence, no traceback."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


def test_missing_data_file_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default ../shared/data path does not exist from here
    monkeypatch.delenv("DUPQ_DATA", raising=False)
    line = one_error_line(runner.invoke(app, ["train", "--out", str(tmp_path / "m")]))
    assert "DUPQ_DATA" in line and "--data" in line


def test_wrong_columns(tmp_path):
    bad = tmp_path / "pairs.csv"
    bad.write_text("id,first,second,label\n1,a,b,0\n")
    line = one_error_line(runner.invoke(app, ["train", "--data", str(bad), "--out", str(tmp_path / "m")]))
    assert "question1, question2, is_duplicate" in line


def test_bad_option_values(pairs_path, tmp_path):
    line = one_error_line(runner.invoke(app, ["train", "--data", str(pairs_path), "--reduction", "max"]))
    assert "--reduction" in line
    line = one_error_line(runner.invoke(app, ["train", "--data", str(pairs_path), "--train-pool", "500000"]))
    assert "choose smaller sizes" in line
    for option, value, named in (("--device", "meta", "device"), ("--recipe", "nope", "--recipe"), ("--loss", "hinge", "hinge"),
                                 ("--pooling", "min", "--pooling"), ("--head", "attention", "--head"), ("--lr", "inf", "--lr")):
        line = one_error_line(runner.invoke(app, ["train", "--data", str(pairs_path), "--out", str(tmp_path / "m"), option, value]))
        assert named in line


@pytest.mark.parametrize("setup", ["missing", "empty", "corrupt-weights", "corrupt-config"])
def test_bad_model_folders(tiny_model_dir, tmp_path, setup):
    folder = tmp_path / setup
    if setup != "missing":
        folder.mkdir()
    if setup.startswith("corrupt"):
        for name in ("config.json", "vocab.json", "model.safetensors", "metrics.json"):
            (folder / name).write_bytes((tiny_model_dir / name).read_bytes())
        target = "model.safetensors" if setup == "corrupt-weights" else "config.json"
        (folder / target).write_bytes(b"garbage")
    line = one_error_line(runner.invoke(app, ["info", str(folder)]))
    assert str(folder) in line


@pytest.mark.slow
def test_train_prints_epochs_and_writes_a_model_folder(pairs_path, tmp_path):
    out = tmp_path / "m"
    args = ["train", "--data", str(pairs_path), "--out", str(out), "--epochs", "2", "--dim", "16",
            "--train-pool", "12000", "--test-size", "1000", "--dev-size", "1000", "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "vocabulary:" in result.output and "epoch 2/2" in result.output
    assert {"config.json", "vocab.json", "model.safetensors", "metrics.json"} <= {p.name for p in out.iterdir()}
    info = json.loads(runner.invoke(app, ["info", str(out)]).output)
    assert len(info["metrics"]["training"]["history"]) == 2
    again = runner.invoke(app, args)  # a second run must not silently discard the checkpoint
    assert "--resume" in one_error_line(again)


def test_export_writes_a_compact_loadable_copy(tiny_model_dir, tiny_model, tmp_path):
    from dupq.model import Model

    out = tmp_path / "exported"
    result = runner.invoke(app, ["export", str(tiny_model_dir), str(out), "--half"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "metrics.json", "model.safetensors", "vocab.json"]
    copy = Model.load(out)
    assert copy.threshold == tiny_model.threshold and copy.metrics == tiny_model.metrics
    q = ["How do I learn Python?", "What is the capital of France?"]
    assert abs(copy.similarity(*q) - tiny_model.similarity(*q)) < 0.02
    assert "different output folder" in one_error_line(runner.invoke(app, ["export", str(out), str(out)]))
