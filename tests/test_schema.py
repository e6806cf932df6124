"""The files dupq reads back are checked by one schema layer (dupq.modeling.schema): a wrong type or range is one sentence."""

from __future__ import annotations

import json
import math
import shutil

import pytest
from typer.testing import CliRunner

from dupq.cli import app
from dupq.core.files import DupqError, to_json
from dupq.modeling.model import BUNDLED, Model
from dupq.modeling.schema import check_metrics, check_model_config, check_threshold
from dupq.search.manifest import check_manifest


@pytest.fixture
def model_dir(tmp_path):
    return shutil.copytree(BUNDLED, tmp_path / "model")


def edit(path, change) -> None:
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj))


CONFIG_FAULTS = {
    "dim a string": lambda c: c["encoder"].update(dim="128"),
    "dim a float": lambda c: c["encoder"].update(dim=128.0),
    "dim negative": lambda c: c["encoder"].update(dim=-5),
    "dropout a string": lambda c: c["encoder"].update(dropout="x"),
    "dropout 5": lambda c: c["encoder"].update(dropout=5),
    "encoder a list": lambda c: c.update(encoder=[1, 2]),
    "encoder null": lambda c: c.update(encoder=None),
    "vocab_size a string": lambda c: c["encoder"].update(vocab_size=str(c["encoder"]["vocab_size"])),
    "bidirectional 1": lambda c: c["encoder"].update(bidirectional=1),
    "threshold NaN": lambda c: c.update(threshold=math.nan),
    "threshold 5": lambda c: c.update(threshold=5),
    "threshold_info a string": lambda c: c.update(threshold_info="dev"),
}
METRICS_FAULTS = {
    "not an object": lambda m: m.clear() or m.update(x=None),  # replaced by a list below
    "training a string": lambda m: m.update(training="yes"),
    "split a list": lambda m: m.setdefault("training", {}).update(split=[1]),
    "history a dict": lambda m: m.setdefault("training", {}).update(history={"epoch": 1}),
    "loss a string": lambda m: m.setdefault("training", {}).update(
        history=[{"epoch": 1, "train_loss": "low", "val_loss": 1}]
    ),
}


def test_an_unknown_encoder_type_is_named_with_the_known_ones(model_dir):
    from dupq.modeling.encoders import ENCODERS

    for kind in ("transformer", ["lstm"], None):
        edit(model_dir / "config.json", lambda c, kind=kind: c["encoder"].update(type=kind))
        with pytest.raises(DupqError) as caught:
            Model.load(model_dir)
        assert f"unknown encoder type {kind!r} (encoder.type)" in str(caught.value), caught.value
        assert all(repr(name) in str(caught.value) for name in ENCODERS)
        result = CliRunner().invoke(app, ["info", str(model_dir)])
        assert result.exit_code == 2 and result.output.count("\n") == 1 and "Traceback" not in result.output
    for known in ENCODERS:  # every registered type passes, and so does a config without one (the LSTM)
        config = {"encoder": {"type": known, "vocab_size": 10}}
        assert check_model_config(config, "m/config.json") is config
    check_model_config({"encoder": {"vocab_size": 10}}, "m/config.json")


@pytest.mark.parametrize("fault", CONFIG_FAULTS)
def test_bad_model_configs_are_one_sentence(model_dir, fault):
    edit(model_dir / "config.json", CONFIG_FAULTS[fault])
    with pytest.raises(DupqError, match=r"config\.json is corrupt: (encoder|threshold)"):
        Model.load(model_dir)
    result = CliRunner().invoke(app, ["predict", "How?", "Why?", "--model", str(model_dir)])
    assert result.exit_code == 2 and result.output.startswith("error: ") and "Traceback" not in result.output


@pytest.mark.parametrize("fault", METRICS_FAULTS)
def test_bad_metrics_are_one_sentence(model_dir, fault):
    if fault == "not an object":
        (model_dir / "metrics.json").write_text("[1, 2]")
    else:
        edit(model_dir / "metrics.json", METRICS_FAULTS[fault])
    with pytest.raises(DupqError, match=r"metrics\.json is corrupt"):
        Model.load(model_dir)
    for command in (["evaluate", str(model_dir)], ["calibrate", str(model_dir)], ["report", str(model_dir)]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2 and "metrics.json is corrupt" in result.output, result.output


def test_good_files_pass_unchanged():
    config = json.loads((BUNDLED / "config.json").read_text())
    assert check_model_config(config, "c") is config
    metrics = json.loads((BUNDLED / "metrics.json").read_text())
    assert check_metrics(metrics, "m") is metrics
    manifest = {
        "format": "f",
        "model": {"fingerprint": "ab", "path": None, "bundled": True},
        "dim": 128,
        "index": {"kind": "hnsw", "hnsw_m": 16},
        "count": 3,
        "checksum": "crc32:00000000",
    }
    assert check_manifest(manifest, "m", "f") is manifest
    for bad in (
        {"model": "bundled"},
        {"dim": True},
        {"index": {"kind": "ivf"}},
        {"index": {"hnsw_m": 100000}},
        {"count": -1},
    ):
        with pytest.raises(DupqError, match="m is corrupt"):
            check_manifest({**manifest, **bad}, "m", "f")


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.5, 5, True, "0.5"])
def test_thresholds_are_finite_and_in_range(value, tmp_path):
    with pytest.raises(DupqError, match="from -1 to 1"):
        check_threshold(value, "--threshold")
    if isinstance(value, float) or isinstance(value, int) and not isinstance(value, bool):
        questions = tmp_path / "q.txt"
        questions.write_text("How do I learn Python?\nHow can I learn Python?\n")
        for command in (["dedup", str(questions), "--out", str(tmp_path / "d.json")], ["predict", "How?", "Why?"]):
            result = CliRunner().invoke(app, [*command, "--threshold", str(value)])
            assert result.exit_code == 2 and "Traceback" not in result.output, result.output
            assert (
                "--threshold must be a number from -1 to 1" in result.output
                or "Invalid value for '--threshold'" in result.output
            )


def test_json_output_never_holds_nan():
    text = to_json({"similarity": math.nan, "hits": [{"score": math.inf, "metadata": {"x": -math.inf}}], "n": 1})
    assert json.loads(text) == {"similarity": None, "hits": [{"score": None, "metadata": {"x": None}}], "n": 1}
    assert "NaN" not in text and "Infinity" not in text
