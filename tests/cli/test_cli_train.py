"""`dupq train`, `compact` and the options commands share, from the command line (bad values: tests/faults)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, fields

import pytest
import typer
from typer.testing import CliRunner

from dupq.cli import app
from dupq.cli.common import THREADS
from dupq.core.errors import DupqError
from dupq.core.options import flag, flag_fields, option_fields
from dupq.data.pairs import SplitConfig
from dupq.training.config import ModelOptions, TrainConfig
from support.errors import refused
from support.train_cli import captured_configs, other_value

runner = CliRunner()


def test_missing_data_file_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default ../shared/data path does not exist from here
    monkeypatch.delenv("DUPQ_DATA", raising=False)
    refused(runner.invoke(app, ["train", "--out", str(tmp_path / "m")]), "DUPQ_DATA", "--data")


def test_wrong_columns(tmp_path):
    bad = tmp_path / "pairs.csv"
    bad.write_text("id,first,second,label\n1,a,b,0\n")
    result = runner.invoke(app, ["train", "--data", str(bad), "--out", str(tmp_path / "m")])
    refused(result, "question1, question2, is_duplicate")


CONFIGS = (TrainConfig, ModelOptions, SplitConfig)


def _command(path: tuple[str, ...]):
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


def _train_parameters() -> dict:
    """The click parameters of `dupq train`, by option name."""
    return {opt: p for p in _command(("train",)).params for opt in p.opts}


def test_every_flagged_field_is_an_option_with_its_default_help_and_choices():
    params = _train_parameters()
    for config in CONFIGS:
        for f in flag_fields(config):
            param = params[flag(f)]
            assert param.help == f.metadata["help"] and param.default == f.default, f.name
    plain = [f.name for config in CONFIGS for f in fields(config) if f not in option_fields(config)]
    # --loss is written by hand (a repeated NAME[:WEIGHT]); --threads is every command's (cli/common.py); chunks: a preset's
    assert plain == ["losses", "chunks", "threads"]
    assert all(p.help for p in set(params.values())), "every option of dupq train has a help text"
    helped = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "300"}).output
    assert all(flag(f) in helped for config in CONFIGS for f in flag_fields(config))
    preset_only = [f for config in CONFIGS for f in option_fields(config) if not f.metadata["cli"]]
    assert len(preset_only) >= 9 and not any(flag(f) in params for f in preset_only)


def test_train_help_lists_at_most_25_options():
    helped = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "300"}).output
    listed = {word for line in helped.splitlines() for word in line.split() if word.startswith("--")}
    listed -= {f"--no-{name[2:]}" for name in listed}  # --progress/--no-progress is one option
    assert listed == set(_train_parameters()) | {"--help"} and len(listed) <= 25, sorted(listed)


def test_train_alone_is_the_dataclass_defaults(monkeypatch, pairs_path, tmp_path):
    seen = captured_configs(monkeypatch, pairs_path, tmp_path, [])
    expected = (TrainConfig(threads=THREADS), ModelOptions(), SplitConfig())  # the commands' one --threads default
    assert (seen["config"], seen["options"], seen["split"]) == expected


def test_every_option_reaches_its_field(monkeypatch, pairs_path, tmp_path):
    args, expected = ["--loss", "distil"], {config: {} for config in CONFIGS}  # --teacher-vectors needs a distil loss
    for config in CONFIGS:
        for f in flag_fields(config):
            value = other_value(f)
            expected[config][f.name] = value
            switch = flag(f) if value else f"--no-{f.name.replace('_', '-')}"
            args += [switch] if isinstance(value, bool) else [flag(f), str(value)]
    seen = captured_configs(monkeypatch, pairs_path, tmp_path, args)
    train = TrainConfig(**expected[TrainConfig], losses={"distil": 1.0}, threads=THREADS)
    assert asdict(seen["config"]) == asdict(train)
    assert asdict(seen["options"]) == asdict(ModelOptions(**expected[ModelOptions]))
    assert asdict(seen["split"]) == asdict(SplitConfig(**expected[SplitConfig]))
    assert all(asdict(c())[name] != value for c in CONFIGS for name, value in expected[c].items())


def test_values_outside_a_fields_choices_or_range_are_refused(pairs_path, tmp_path):
    refusals, train = 0, ["train", "--data", str(pairs_path), "--out", str(tmp_path / "m")]
    for config in CONFIGS:
        for f in flag_fields(config):
            meta, wrong = f.metadata, []
            if meta["choices"]:
                wrong.append("not-" + meta["choices"][0])
            if meta["min"] is not None:
                wrong.append(meta["min"] - 1)
            if meta["max"] is not None:
                wrong.append(meta["max"] + 1)
            for value in wrong:
                assert flag(f) in refused(runner.invoke(app, [*train, flag(f), str(value)])), (f.name, value)
                refusals += 1
    assert refusals >= 12  # the choice fields (device, head) and the ranges (sizes, seed, epochs)


@pytest.mark.parametrize(
    "config, field, value, named",
    [
        (TrainConfig, "lr_schedule", "linear", "lr_schedule"),  # no flag: named as a preset names it
        (TrainConfig, "epochs", 0, "--epochs"),
        (TrainConfig, "device", "meta", "--device"),
        (TrainConfig, "seed", 10**24, "--seed"),
        (ModelOptions, "dropout", 0.95, "dropout"),
        (ModelOptions, "head", "attention", "--head"),
        (ModelOptions, "dim", 10**6, "--dim"),
        (ModelOptions, "oov_buckets", 10**11, "oov_buckets"),
        (ModelOptions, "lowercase", "yes", "lowercase"),
    ],
)
def test_configs_refuse_what_the_command_line_refuses(config, field, value, named):
    with pytest.raises(DupqError, match=f"^{named} must be"):
        config(**{field: value})


@pytest.mark.slow
def test_dupq_train_and_train_from_python_write_the_same_calibrated_folder(pairs_path, tmp_path):
    from safetensors.numpy import load_file

    from dupq.data.pairs import read_pairs, split_pairs
    from dupq.training.presets import configs, read_preset
    from dupq.training.train import train

    preset = tmp_path / "tiny.toml"
    preset.write_text(
        'train_on = "labelled"\nhead = "mlp"\nepochs = 2\nbatch_size = 64\nlr = 0.005\nthreads = 1\nseed = 3\n'
        'train_pool = 3000\ntest = 500\ndev = 500\nlabelled_val = 500\n[losses]\nbce = 1.0\ntriplet = { reduction = "mean" }\n'
    )
    args = ["train", "--preset", str(preset), "--data", str(pairs_path), "--dim", "8", "--no-progress"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    assert all(line in result.output for line in ("vocabulary:", "epoch 2/2", "threshold", "saved model to"))
    config, options, split = configs({**read_preset(str(preset)), "dim": 8})
    info = {"data": str(pairs_path), "command": " ".join(["dupq", *sys.argv[1:]])}  # what the command records
    splits = split_pairs(read_pairs(pairs_path)[0], split)
    model = train(splits, tmp_path / "py", config, options, extra_info=info, split=split.__dict__, log=lambda _: None)
    assert model.metrics["test"]["pairs"] == 500 and model.threshold_on == "probability"  # calibrated, tested
    for name in ("config.json", "vocab.json"):
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "py" / name).read_bytes(), name
    a, b = (load_file(tmp_path / run / "model.safetensors") for run in ("cli", "py"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    metrics = [json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("cli", "py")]
    for epoch in (e for m in metrics for e in m["training"]["history"]):
        del epoch["seconds"], epoch["pairs_per_s"]  # timings differ from run to run
    assert metrics[0] == metrics[1]
    again = runner.invoke(app, [*args, "--out", str(tmp_path / "cli")])  # must not silently discard the checkpoint
    assert "--resume" in refused(again)


def test_compact_writes_a_compact_loadable_copy(tiny_model_dir, tiny_model, tmp_path):
    from dupq.modeling.model import Model

    out = tmp_path / "exported"
    result = runner.invoke(app, ["compact", str(tiny_model_dir), "--out", str(out), "--half"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "metrics.json", "model.safetensors", "vocab.json"]
    copy = Model.load(out)
    assert copy.threshold == tiny_model.threshold and copy.metrics == tiny_model.metrics
    q = ["How do I learn Python?", "What is the capital of France?"]
    assert abs(copy.similarity(*q) - tiny_model.similarity(*q)) < 0.02
    assert "which this command reads" in refused(runner.invoke(app, ["compact", str(out), "--out", str(out)]))


# fmt: off
ENCODING_COMMANDS = [("train",), ("evaluate",), ("calibrate",), ("predict",), ("report",), ("index", "build"),
                     ("index", "add"), ("search",), ("dedup",), ("serve",), ("distil", "teach"),
                     ("distil", "teacher-model")]
# fmt: on


@pytest.mark.parametrize("path", ENCODING_COMMANDS, ids=" ".join)
def test_every_command_that_encodes_takes_threads_with_the_one_default(path):
    threads = next(p for p in _command(path).params if p.name == "threads")
    assert threads.default == THREADS and threads.opts == ["--threads"]
    assert threads.help == next(p for p in _command(("evaluate",)).params if p.name == "threads").help
    refused(runner.invoke(app, [*path, "--threads", "100000"]), "--threads")


@pytest.mark.parametrize("path", [("train",), ("distil", "teach"), ("distil", "teacher-model")], ids=" ".join)
def test_split_options_of_every_command_are_split_configs_fields(path):
    params = {p.name: p for p in _command(path).params}
    split = [f for f in flag_fields(SplitConfig) if f.name in params]
    assert len(split) >= 2 and {"train_pool"} <= {f.name for f in split}
    for f in split:
        param = params[f.name]
        assert (param.opts, param.default, param.help) == ([flag(f)], f.default, f.metadata["help"])
