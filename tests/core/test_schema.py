"""The files dupq reads back are read through one loader and their pydantic formats (dupq.core.formats,
dupq.modeling.folder_format, dupq.collection.manifest): a wrong type or range is one sentence naming the file and the field."""

from __future__ import annotations

import json
import math
import shutil
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from dupq.cli import app
from dupq.collection.manifest import check_manifest
from dupq.core.errors import DupqError
from dupq.core.files import to_json
from dupq.core.formats import MAX_EMBEDDING, MAX_VOCAB, check_format
from dupq.modeling.encoders import ENCODERS
from dupq.modeling.folder_format import FORMAT, Metrics, ModelConfig, check_threshold
from dupq.modeling.model import BUNDLED, Model
from dupq.modeling.probability import calibrated
from support.errors import refused
from support.kit import edit_json, one_sentence


@pytest.fixture
def model_dir(tmp_path):
    return shutil.copytree(BUNDLED, tmp_path / "model")


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
    for kind in ("transformer", ["lstm"], None):
        edit_json(model_dir / "config.json", lambda c, kind=kind: c["encoder"].update(type=kind))
        with pytest.raises(DupqError) as caught:
            Model.load(model_dir)
        assert f"unknown encoder type {kind!r} (encoder.type)" in str(caught.value), caught.value
        assert all(repr(name) in str(caught.value) for name in ENCODERS)
        refused(CliRunner().invoke(app, ["info", str(model_dir)]))
    for known in ENCODERS:  # every registered type passes, and so does a config without one (the LSTM)
        config = {"format": FORMAT, "encoder": {"type": known, "vocab_size": 10}}
        assert check_format(ModelConfig, config, "m/config.json").kind == known
    assert check_format(ModelConfig, {"format": FORMAT, "encoder": {"vocab_size": 10}}, "m/config.json").kind == "lstm"


@pytest.mark.parametrize("fault", CONFIG_FAULTS)
def test_bad_model_configs_are_one_sentence(model_dir, fault):
    edit_json(model_dir / "config.json", CONFIG_FAULTS[fault])
    with pytest.raises(DupqError, match=r"config\.json is corrupt: (encoder|threshold)"):
        Model.load(model_dir)
    refused(CliRunner().invoke(app, ["predict", "How?", "Why?", "--model", str(model_dir)]))


@pytest.mark.parametrize("fault", METRICS_FAULTS)
def test_bad_metrics_are_one_sentence(model_dir, fault, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `dupq report` writes to ./runs/report: the refusal must come first, whatever is there
    if fault == "not an object":
        (model_dir / "metrics.json").write_text("[1, 2]")
    else:
        edit_json(model_dir / "metrics.json", METRICS_FAULTS[fault])
    with pytest.raises(DupqError, match=r"metrics\.json is corrupt"):
        Model.load(model_dir)
    for command in (["evaluate", str(model_dir)], ["calibrate", str(model_dir)], ["report", str(model_dir)]):
        refused(CliRunner().invoke(app, command), "metrics.json is corrupt")


def test_good_files_pass_unchanged():
    config = json.loads((BUNDLED / "config.json").read_text())
    parsed = check_format(ModelConfig, config, "c")
    written = dict(config["encoder"])
    assert written.pop("type", "lstm") == "lstm"  # the module's name picks the class, and is no field of it
    assert {k: v for k, v in vars(parsed.encoder).items()} == written
    assert vars(parsed.static) == {"added": 0, **config["static"]}  # the bundled branch: taught no word, written so
    assert vars(parsed.head) == config["head"] and parsed.calibration.model_dump() == config["calibration"]
    judging = ("threshold", "threshold_info", "calibration", "threshold_on", "search_calibration")
    assert json.loads(json.dumps(parsed.judging())) == {k: config[k] for k in judging}  # as written back
    metrics = json.loads((BUNDLED / "metrics.json").read_text())
    check_format(Metrics, metrics, "m")
    manifest = {"format": "f", "model": {"fingerprint": "ab", "path": None, "bundled": True}, "dim": 128}
    manifest |= {"index": {"kind": "hnsw", "hnsw_m": 16}, "count": 3, "checksum": "crc32:00000000"}
    assert check_manifest(manifest, "m", "f") is manifest
    bad_entries = [{"model": "bundled"}, {"dim": True}, {"index": {"kind": "ivf"}}, {"index": {"hnsw_m": 100000}}]
    for bad in [*bad_entries, {"count": -1}]:
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
            said = ("--threshold must be a number from -1 to 1", "Invalid value for '--threshold'")
            assert any(words in result.output for words in said)


def test_json_output_never_holds_nan():
    text = to_json({"similarity": math.nan, "hits": [{"score": math.inf, "metadata": {"x": -math.inf}}], "n": 1})
    assert json.loads(text) == {"similarity": None, "hits": [{"score": None, "metadata": {"x": None}}], "n": 1}
    assert "NaN" not in text and "Infinity" not in text


def one_line_refusal(folder, message: str) -> None:
    """``Model.load(folder)`` and ``dupq predict --model folder`` both refuse it in one sentence holding ``message``."""
    assert message in one_sentence(lambda: Model.load(folder))
    refused(CliRunner().invoke(app, ["predict", "How?", "Why?", "--model", str(folder)]), message)


@pytest.mark.parametrize("head", [[], [1], "mlp", 0, True])
def test_a_head_that_is_no_object_is_refused(model_dir, head):
    # "head": [] used to load as no head at all: the bundled model then judged by the cosine, and verdicts flipped.
    edit_json(model_dir / "config.json", lambda c: c.update(head=head))
    one_line_refusal(model_dir, f"config.json is corrupt: head must be a JSON object, not {head!r}.")


def test_a_null_head_is_the_cosine(model_dir):
    edit_json(model_dir / "config.json", lambda c: c.update(head=None))
    assert Model.load(model_dir).judge.head is None


@pytest.mark.parametrize("value", [1e308, -1e7, 1.5e6, math.nan, math.inf, "0.3", True, None])
def test_calibration_numbers_are_bounded(model_dir, value):
    edit_json(model_dir / "config.json", lambda c: c["calibration"].update(a=value))
    one_line_refusal(
        model_dir, f"config.json is corrupt: calibration.a must be a number from -1e+06 to 1e+06, not {value!r}."
    )


def _reference_probability(calibration: dict, logit: float) -> float:
    """The beta map, one pair at a time, in Python floats and logs only (no exp of a large number)."""

    def log_sigmoid(z: float) -> float:
        return -math.log1p(math.exp(-z)) if z >= 0 else z - math.log1p(math.exp(z))

    x = calibration["a"] * log_sigmoid(logit) - calibration["b"] * log_sigmoid(-logit) + calibration["c"]
    return math.exp(log_sigmoid(x)) if x > -745 else 0.0


def test_the_probability_never_overflows():
    logits = np.array([-1e4, -60.0, -1.0, 0.0, 0.3, 1.0, 60.0, 1e4])
    for a, b, c in [(1e6, 1e6, 0.0), (-1e6, -1e6, 1e6), (1e6, -1e6, -1e6), (0.35, 1.05, -1.57)]:
        calibration = {"method": "beta", "a": a, "b": b, "c": c}
        with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
            warnings.simplefilter("error")
            got = calibrated(calibration, logits)
        want = [_reference_probability(calibration, z) for z in logits]
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-300)


@pytest.fixture
def tiny_copy(tiny_model_dir, tmp_path):
    return shutil.copytree(tiny_model_dir, tmp_path / "tiny")


SIZE_FAULTS = {  # the schema's old maxima (dim 65536) gave allocator tracebacks
    "dim 65536": (lambda c: c["encoder"].update(dim=65536), "encoder.dim must be an integer from 1 to 4096, not 65536"),
    "vocab_size 10**8": (
        lambda c: c["encoder"].update(vocab_size=10**8),
        "encoder.vocab_size must be an integer from 2 to 4194304, not 100000000",
    ),
    "head hidden 60000": (
        lambda c: c.update(head={"kind": "mlp", "dim": c["encoder"]["dim"], "hidden": 60000}),
        "head.hidden must be an integer from 1 to 16384, not 60000",
    ),
    "head dim not the encoder's": (
        lambda c: c.update(head={"kind": "mlp", "dim": 4096, "hidden": 8}),
        "head.dim must be the encoder's width",
    ),
}


@pytest.mark.parametrize("fault", SIZE_FAULTS)
def test_every_size_has_a_maximum_that_fits_the_machine(tiny_copy, fault):
    change, message = SIZE_FAULTS[fault]
    edit_json(tiny_copy / "config.json", change)
    one_line_refusal(tiny_copy, f"config.json is corrupt: {message}")


def test_the_embedding_table_must_fit_too():
    def config(vocab_size: int, dim: int) -> dict:
        return {"format": FORMAT, "encoder": {"vocab_size": vocab_size, "dim": dim}}

    assert MAX_VOCAB * 128 == MAX_EMBEDDING  # the largest vocabulary at the default width fits exactly
    check_format(ModelConfig, config(MAX_VOCAB, 128), "c")
    check_format(ModelConfig, config(MAX_EMBEDDING // 4096, 4096), "c")
    for rows, dim in [(MAX_VOCAB, 129), (MAX_EMBEDDING // 4096 + 1, 4096)]:
        with pytest.raises(
            DupqError, match=rf"c is corrupt: encoder.vocab_size x encoder.dim must be at most .* {rows:,} x {dim:,}\.$"
        ):
            check_format(ModelConfig, config(rows, dim), "c")
